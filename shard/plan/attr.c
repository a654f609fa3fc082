/* attr.c - distributed attributes: construction, copy, comparison, validation, the resolution
 * of negative dims on a tensor, and the split points of a dim (balanced, chunk or explicit).
 *
 * An attribute is a mesh (shape over a list of world ranks), one placement per mesh dim and
 * optional explicit split sizes per tensor dim. Structure that does not depend on a tensor (mesh
 * sizes, rank list, placement kinds, split rules) is checked when the attribute is built; what
 * does (dims named by placements, split sizes, ranks inside the world) is checked by
 * ts_attr_validate. ts_attr_split_offsets is the one function that cuts a dim into parts. A
 * block-cyclic shard (S(d,cyclic=NB,src=S)) has a block size of at least 1, a source coordinate
 * inside its mesh dim, the balanced rule, no other mesh dim sharding the same tensor dim and no
 * explicit splits. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard_internal.h"

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Mesh sizes and the rank list: sizes >= 1, product == nranks, ranks >= 0 and distinct. */
static int check_mesh(int mesh_ndim, const int64_t *mesh_shape, int nranks, const int *ranks,
                      ts_error *err) {
  if (mesh_ndim < 1 || mesh_ndim > TS_MAX_MESH_DIMS)
    return ts_error_set(err, TS_BAD_ATTRIBUTE, "mesh has %d dims; a mesh has 1 to %d dims",
                        mesh_ndim, TS_MAX_MESH_DIMS);
  int64_t n = 1;
  for (int m = 0; m < mesh_ndim; m++) {
    if (mesh_shape[m] < 1)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "mesh dim %d has size %lld; mesh sizes must be at least 1", m,
                          (long long)mesh_shape[m]);
    n *= mesh_shape[m];
    if (n > INT_MAX)
      return ts_error_set(err, TS_BAD_ATTRIBUTE, "mesh has more than %d ranks", INT_MAX);
  }
  if (nranks != n)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "mesh of %lld ranks is given %d ranks; the rank list must have one rank "
                        "per mesh position",
                        (long long)n, nranks);
  if (!ranks)
    return TS_OK;
  int *sorted = malloc((size_t)nranks * sizeof *sorted);
  if (!sorted)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to check %d ranks", nranks);
  memcpy(sorted, ranks, (size_t)nranks * sizeof *sorted);
  qsort(sorted, (size_t)nranks, sizeof *sorted, cmp_int);
  int rc = TS_OK;
  if (sorted[0] < 0)
    rc = ts_error_set(err, TS_BAD_ATTRIBUTE, "rank %d in the mesh; ranks are >= 0", sorted[0]);
  for (int i = 1; rc == TS_OK && i < nranks; i++)
    if (sorted[i] == sorted[i - 1])
      rc = ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "rank %d appears twice in the mesh; each rank may appear once", sorted[i]);
  free(sorted);
  return rc;
}

const char *ts_split_rule_name(ts_split_rule r) {
  static const char *const names[TS_SPLIT_COUNT] = {
      [TS_SPLIT_BALANCED] = "balanced",
      [TS_SPLIT_CHUNK] = "chunk",
  };
  return (int)r >= 0 && r < TS_SPLIT_COUNT ? names[r] : NULL;
}

/* A block-cyclic shard: block size >= 1, src a coordinate of its mesh dim (size msize), no split
 * rule (its blocks set its parts). */
static int check_cyclic(const ts_placement *p, int m, int64_t msize, ts_error *err) {
  if (p->kind != TS_PLACE_SHARD && (p->cyclic != 0 || p->src != 0))
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: cyclic=/src= apply to a shard only, as in "
                        "S(0,cyclic=64)",
                        m);
  if (p->cyclic < 0 || p->cyclic > TS_CYCLIC_BLOCK_MAX)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: cyclic block size %lld; valid: 1 to %lld", m,
                        (long long)p->cyclic, (long long)TS_CYCLIC_BLOCK_MAX);
  if (p->cyclic == 0 && p->src != 0)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: src=%lld without a cyclic block size; write "
                        "S(%d,cyclic=NB,src=%lld)",
                        m, (long long)p->src, p->dim, (long long)p->src);
  if (p->src < 0 || p->src >= msize)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: src=%lld but the mesh dim has size %lld (valid: src=0 to "
                        "%lld)",
                        m, (long long)p->src, (long long)msize, (long long)msize - 1);
  if (p->cyclic > 0 && p->split != TS_SPLIT_BALANCED)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d deals dim %d block-cyclically and names the %s rule; a "
                        "cyclic dim has no split rule (its blocks set its parts)",
                        m, p->dim,
                        ts_split_rule_name(p->split) ? ts_split_rule_name(p->split) : "?");
  return TS_OK;
}

static int check_placement(const ts_placement *p, int m, int64_t msize, ts_error *err) {
  int rc = check_cyclic(p, m, msize, err);
  if (rc)
    return rc;
  switch (p->kind) {
  case TS_PLACE_SHARD:
    if (p->dim < -TS_MAX_DIMS || p->dim >= TS_MAX_DIMS)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placement %d is S(%d); a tensor dim is %d to %d (negative counts "
                          "from the end)",
                          m, p->dim, -TS_MAX_DIMS, TS_MAX_DIMS - 1);
    if (!ts_split_rule_name(p->split))
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placement %d has split rule %d; valid rules are balanced, chunk", m,
                          (int)p->split);
    return TS_OK;
  case TS_PLACE_REPLICATE: return TS_OK;
  case TS_PLACE_PARTIAL:
    if ((int)p->op < 0 || p->op >= TS_REDUCE_COUNT)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placement %d has reduce op %d; valid ops are sum, avg, prod, max, min",
                          m, (int)p->op);
    return TS_OK;
  }
  return ts_error_set(err, TS_BAD_ATTRIBUTE,
                      "placement %d has kind %d; valid kinds are Shard, Replicate, Partial", m,
                      (int)p->kind);
}

/* Partial dims reduce in mesh-dim order, each by its op, and the sums of P(avg) dims are
 * divided once at the end: that commutes with every later sum, max and min, not with a later
 * product, so a P(prod) dim may not follow a P(avg) one. */
static int check_partial_ops(int mesh_ndim, const ts_placement *place, ts_error *err) {
  int avg = -1;
  for (int m = 0; m < mesh_ndim; m++) {
    if (place[m].kind != TS_PLACE_PARTIAL)
      continue;
    if (place[m].op == TS_REDUCE_AVG && avg < 0)
      avg = m;
    else if (place[m].op == TS_REDUCE_PROD && avg >= 0)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placements %d and %d are P(avg) and then P(prod): a product after an "
                          "average is not supported; put the P(prod) mesh dim before the P(avg) "
                          "one",
                          avg, m);
  }
  return TS_OK;
}

/* The placements sharding one dim give it the same split rule (checked on the dims as written;
 * ts_attr_validate checks them again once negative dims are resolved). */
static int check_rules(int mesh_ndim, const ts_placement *place, ts_error *err) {
  for (int m = 0; m < mesh_ndim; m++)
    for (int n = 0; place[m].kind == TS_PLACE_SHARD && n < m; n++)
      if (place[n].kind == TS_PLACE_SHARD && place[n].dim == place[m].dim &&
          place[n].split != place[m].split)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "placements %d and %d shard dim %d with different split rules (%s "
                            "and %s); give every placement of a dim the same rule",
                            n, m, place[m].dim, ts_split_rule_name(place[n].split),
                            ts_split_rule_name(place[m].split));
  return TS_OK;
}

/* The rule of dim d: that of the placements sharding it (balanced when none does). */
static ts_split_rule rule_of(const ts_attr *a, int d) {
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d)
      return a->place[m].split;
  return TS_SPLIT_BALANCED;
}

const int64_t *ts_attr_splits(const ts_attr *a, int dim, int *n) {
  bool in = a && dim >= -TS_MAX_DIMS && dim < TS_MAX_DIMS;
  const int64_t *s = !in ? NULL : dim >= 0 ? a->splits[dim] : a->neg_splits[-dim - 1];
  if (n)
    *n = !s ? 0 : dim >= 0 ? a->nsplits[dim] : a->neg_nsplits[-dim - 1];
  return s;
}

int ts__attr_check_splits_rule(const ts_attr *a, ts_error *err) {
  for (int d = -TS_MAX_DIMS; d < TS_MAX_DIMS; d++)
    if (ts_attr_splits(a, d, NULL) && rule_of(a, d) == TS_SPLIT_CHUNK)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "dim %d is given both explicit split sizes and the chunk rule; give "
                          "one or the other (explicit sizes set every part: write S(%d))",
                          d, d);
  return TS_OK;
}

/* A block-cyclic tensor dim is dealt along one mesh dim only (as ScaLAPACK deals rows over
 * the process rows): no other placement may shard it. */
static int check_cyclic_dims(int mesh_ndim, const ts_placement *place, ts_error *err) {
  for (int m = 0; m < mesh_ndim; m++) {
    if (place[m].kind != TS_PLACE_SHARD || place[m].cyclic == 0)
      continue;
    for (int k = 0; k < mesh_ndim; k++)
      if (k != m && place[k].kind == TS_PLACE_SHARD && place[k].dim == place[m].dim)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "placements %d and %d both shard dim %d, which placement %d deals "
                            "block-cyclically; a cyclic dim is sharded by one mesh dim only",
                            m < k ? m : k, m < k ? k : m, place[m].dim, m);
  }
  return TS_OK;
}

bool ts_attr_is_cyclic(const ts_attr *a) {
  for (int m = 0; a && m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].cyclic > 0)
      return true;
  return false;
}

int ts_attr_create(ts_attr **out, int mesh_ndim, const int64_t *mesh_shape, const int *ranks,
                   const ts_placement *place, ts_error *err) {
  if (!out || !mesh_shape || !place)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_create: NULL argument");
  *out = NULL;
  if (mesh_ndim < 1 || mesh_ndim > TS_MAX_MESH_DIMS)
    return check_mesh(mesh_ndim, mesh_shape, 0, NULL, err);
  int64_t n = 1;
  for (int m = 0; m < mesh_ndim; m++) {
    if (mesh_shape[m] < 1)
      return check_mesh(mesh_ndim, mesh_shape, 0, NULL, err);
    n *= mesh_shape[m];
    if (n > INT_MAX)
      return ts_error_set(err, TS_BAD_ATTRIBUTE, "mesh has more than %d ranks", INT_MAX);
  }
  int rc = check_mesh(mesh_ndim, mesh_shape, (int)n, ranks, err);
  if (rc)
    return rc;
  for (int m = 0; m < mesh_ndim; m++)
    if ((rc = check_placement(&place[m], m, mesh_shape[m], err)))
      return rc;
  if ((rc = check_partial_ops(mesh_ndim, place, err)) ||
      (rc = check_rules(mesh_ndim, place, err)) || (rc = check_cyclic_dims(mesh_ndim, place, err)))
    return rc;
  ts_attr *a = calloc(1, sizeof *a);
  if (!a)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for an attribute");
  a->ranks = malloc((size_t)n * sizeof *a->ranks);
  if (!a->ranks) {
    free(a);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %lld ranks", (long long)n);
  }
  a->mesh_ndim = mesh_ndim;
  a->nranks = (int)n;
  for (int m = 0; m < mesh_ndim; m++) {
    a->mesh_shape[m] = mesh_shape[m];
    a->place[m] = place[m];
  }
  for (int i = 0; i < (int)n; i++)
    a->ranks[i] = ranks ? ranks[i] : i;
  *out = a;
  return TS_OK;
}

int ts_attr_set_splits(ts_attr *a, int dim, int n, const int64_t *sizes, ts_error *err) {
  if (!a)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_set_splits: NULL attribute");
  if (dim < -TS_MAX_DIMS || dim >= TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "splits for dim %d; a tensor dim is %d to %d (negative counts from the "
                        "end)",
                        dim, -TS_MAX_DIMS, TS_MAX_DIMS - 1);
  if (n < 0 || (n > 0 && !sizes))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "splits for dim %d: %d sizes", dim, n);
  for (int i = 0; i < n; i++)
    if (sizes[i] < 0)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "split size %lld for part %d of dim %d; sizes must be >= 0",
                          (long long)sizes[i], i, dim);
  int64_t *copy = NULL;
  if (n > 0) {
    copy = malloc((size_t)n * sizeof *copy);
    if (!copy)
      return ts_error_set(err, TS_NO_MEMORY, "no memory for %d split sizes", n);
    memcpy(copy, sizes, (size_t)n * sizeof *copy);
  }
  int64_t **slot = dim >= 0 ? &a->splits[dim] : &a->neg_splits[-dim - 1];
  free(*slot);
  *slot = copy;
  *(dim >= 0 ? &a->nsplits[dim] : &a->neg_nsplits[-dim - 1]) = n;
  return TS_OK;
}

void ts_attr_destroy(ts_attr **p) {
  if (!p || !*p)
    return;
  ts_attr *a = *p;
  for (int d = 0; d < TS_MAX_DIMS; d++) {
    free(a->splits[d]);
    free(a->neg_splits[d]);
  }
  free(a->ranks);
  free(a);
  *p = NULL;
}

int ts_attr_clone(const ts_attr *a, ts_attr **out, ts_error *err) {
  if (!a || !out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_clone: NULL argument");
  int rc = ts_attr_create(out, a->mesh_ndim, a->mesh_shape, a->ranks, a->place, err);
  if (rc == TS_OK)
    memcpy((*out)->axis, a->axis, sizeof a->axis);
  for (int d = 0; rc == TS_OK && d < TS_MAX_DIMS; d++) {
    if (a->splits[d])
      rc = ts_attr_set_splits(*out, d, a->nsplits[d], a->splits[d], err);
    if (rc == TS_OK && a->neg_splits[d])
      rc = ts_attr_set_splits(*out, -(d + 1), a->neg_nsplits[d], a->neg_splits[d], err);
  }
  if (rc)
    ts_attr_destroy(out);
  return rc;
}

static bool sizes_equal(const int64_t *x, int nx, const int64_t *y, int ny) {
  if ((x == NULL) != (y == NULL) || nx != ny)
    return false;
  return !x || memcmp(x, y, (size_t)nx * sizeof *x) == 0;
}

bool ts_attr_equal(const ts_attr *a, const ts_attr *b) {
  if (!a || !b)
    return a == b;
  if (a->mesh_ndim != b->mesh_ndim || a->nranks != b->nranks)
    return false;
  for (int m = 0; m < a->mesh_ndim; m++) {
    const ts_placement *x = &a->place[m], *y = &b->place[m];
    if (a->mesh_shape[m] != b->mesh_shape[m] || x->kind != y->kind)
      return false;
    if (x->kind == TS_PLACE_SHARD &&
        (x->dim != y->dim || x->split != y->split || x->cyclic != y->cyclic || x->src != y->src))
      return false;
    if (x->kind == TS_PLACE_PARTIAL && x->op != y->op)
      return false;
    if (strcmp(a->axis[m], b->axis[m]) != 0)
      return false;
  }
  if (memcmp(a->ranks, b->ranks, (size_t)a->nranks * sizeof *a->ranks) != 0)
    return false;
  for (int d = 0; d < TS_MAX_DIMS; d++)
    if (!sizes_equal(a->splits[d], a->nsplits[d], b->splits[d], b->nsplits[d]) ||
        !sizes_equal(a->neg_splits[d], a->neg_nsplits[d], b->neg_splits[d], b->neg_nsplits[d]))
      return false;
  return true;
}

int64_t ts__attr_parts(const ts_attr *a, int dim) {
  int64_t k = 1;
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == dim)
      k *= a->mesh_shape[m];
  return k;
}

int ts_attr_check_dtype(const ts_attr *a, ts_dtype dt, ts_error *err) {
  for (int i = 0; a && i < a->mesh_ndim; i++)
    if (a->place[i].kind == TS_PLACE_PARTIAL) {
      int rc = ts_reduce_check(dt, a->place[i].op, err);
      if (rc)
        return rc;
    }
  return TS_OK;
}

int ts_attr_validate(const ts_attr *a, int ndim, const int64_t *shape, int world_size,
                     ts_error *err) {
  if (!a || (ndim > 0 && !shape))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_validate: NULL argument");
  if (ndim < 0 || ndim > TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE, "tensor has %d dims; 0 to %d are supported", ndim,
                        TS_MAX_DIMS);
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return ts_error_set(err, TS_BAD_SHAPE, "tensor dim %d has size %lld; sizes are >= 0", d,
                          (long long)shape[d]);
  int rc = check_mesh(a->mesh_ndim, a->mesh_shape, a->nranks, a->ranks, err);
  if (rc)
    return rc;
  if (!ts_attr_is_normal(a)) {
    ts_attr *n = NULL;
    if ((rc = ts_attr_clone(a, &n, err)) == TS_OK &&
        (rc = ts_attr_normalize(n, ndim, err)) == TS_OK)
      rc = ts_attr_validate(n, ndim, shape, world_size, err);
    ts_attr_destroy(&n);
    return rc;
  }
  if (world_size > 0)
    for (int i = 0; i < a->nranks; i++)
      if (a->ranks[i] >= world_size)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "rank %d is outside the world; valid ranks are 0 to %d", a->ranks[i],
                            world_size - 1);
  for (int m = 0; m < a->mesh_ndim; m++) {
    if ((rc = check_placement(&a->place[m], m, a->mesh_shape[m], err)))
      return rc;
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim >= ndim)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placement %d is S(%d) but the tensor has %d dims (valid: S(%d) to "
                          "S(%d))",
                          m, a->place[m].dim, ndim, -ndim, ndim - 1);
  }
  if ((rc = check_partial_ops(a->mesh_ndim, a->place, err)) ||
      (rc = check_rules(a->mesh_ndim, a->place, err)) ||
      (rc = ts__attr_check_splits_rule(a, err)) ||
      (rc = check_cyclic_dims(a->mesh_ndim, a->place, err)))
    return rc;
  for (int d = 0; d < TS_MAX_DIMS; d++) {
    if (!a->splits[d])
      continue;
    for (int m = 0; m < a->mesh_ndim; m++)
      if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d && a->place[m].cyclic)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "splits given for dim %d, which placement %d deals block-cyclically "
                            "(its parts are set by the block size)",
                            d, m);
    if (d >= ndim)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "splits given for dim %d but the tensor has %d dims", d, ndim);
    int64_t parts = ts__attr_parts(a, d);
    bool sharded = false;
    for (int m = 0; m < a->mesh_ndim; m++)
      sharded |= a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d;
    if (!sharded)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "splits given for dim %d, which no placement shards", d);
    if (a->nsplits[d] != parts)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "dim %d has %d split sizes but is split into %lld parts", d,
                          a->nsplits[d], (long long)parts);
    int64_t sum = 0;
    bool huge = false; /* the sum overflows: say "more than" the last sum that fit */
    for (int i = 0; i < a->nsplits[d] && !huge; i++) {
      if (a->splits[d][i] < 0)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "split size %lld for part %d of dim %d; sizes must be >= 0",
                            (long long)a->splits[d][i], i, d);
      int64_t next;
      if (__builtin_add_overflow(sum, a->splits[d][i], &next))
        huge = true;
      else
        sum = next;
    }
    if (huge || sum != shape[d])
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "split sizes of dim %d sum to %s%lld but the dim has size %lld", d,
                          huge ? "more than " : "", (long long)sum, (long long)shape[d]);
  }
  return TS_OK;
}

bool ts_attr_is_normal(const ts_attr *a) {
  for (int m = 0; a && m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim < 0)
      return false;
  for (int i = 0; a && i < TS_MAX_DIMS; i++)
    if (a->neg_splits[i])
      return false;
  return true;
}

/* "S(-2) to S(1)" for 2 dims: the dims a placement may name on a tensor of ndim dims. */
static int range_error(ts_error *err, const char *what, int dim, int ndim) {
  if (ndim == 0)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "%s names dim %d but the tensor has no dims "
                        "(a 0-dim tensor cannot be split)",
                        what, dim);
  return ts_error_set(err, TS_BAD_ATTRIBUTE,
                      "%s names dim %d but the tensor has %d dims "
                      "(valid: %d to %d)",
                      what, dim, ndim, -ndim, ndim - 1);
}

int ts_attr_normalize(ts_attr *a, int ndim, ts_error *err) {
  if (!a)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_normalize: NULL attribute");
  if (ndim < 0 || ndim > TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE, "tensor has %d dims; 0 to %d are supported", ndim,
                        TS_MAX_DIMS);
  /* Everything is checked before anything changes. */
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim < -ndim) {
      char what[48];
      snprintf(what, sizeof what, "placement %d, S(%d),", m, a->place[m].dim);
      return range_error(err, what, a->place[m].dim, ndim);
    }
  for (int i = 0; i < TS_MAX_DIMS; i++) {
    if (!a->neg_splits[i])
      continue;
    int d = ndim - (i + 1);
    if (d < 0)
      return range_error(err, "splits", -(i + 1), ndim);
    if (a->splits[d])
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "splits are given for dim %d and for dim %d, both dim %d of a tensor of "
                          "%d dims; give each dim's splits once",
                          -(i + 1), d, d, ndim);
  }
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim < 0)
      a->place[m].dim += ndim;
  for (int i = 0; i < TS_MAX_DIMS; i++) {
    if (!a->neg_splits[i])
      continue;
    int d = ndim - (i + 1);
    a->splits[d] = a->neg_splits[i];
    a->nsplits[d] = a->neg_nsplits[i];
    a->neg_splits[i] = NULL;
    a->neg_nsplits[i] = 0;
  }
  return TS_OK;
}

/* torch.chunk's sizes nested over the mesh dims sharding dim, in mesh-dim order: each part of
 * the previous level is cut in ceil(s/k) pieces, the last ones smaller or empty. The sizes are
 * built in place (a level's j-th size becomes the k sizes from j*k on, written from the end). */
static void chunk_sizes(const ts_attr *a, int dim, int64_t len, int64_t *size) {
  int64_t n = 1;
  size[0] = len;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (a->place[m].kind != TS_PLACE_SHARD || a->place[m].dim != dim)
      continue;
    int64_t k = a->mesh_shape[m];
    for (int64_t j = n - 1; j >= 0; j--) {
      int64_t s = size[j], c = (s + k - 1) / k;
      for (int64_t i = k - 1; i >= 0; i--) {
        int64_t left = s - i * c;
        size[j * k + i] = left <= 0 ? 0 : left < c ? left : c;
      }
    }
    n *= k;
  }
}

void ts_attr_split_offsets(const ts_attr *a, int dim, int64_t len, int64_t *offsets) {
  int64_t k = ts__attr_parts(a, dim);
  offsets[0] = 0;
  if (a->splits[dim]) {
    for (int64_t p = 0; p < k; p++)
      offsets[p + 1] = offsets[p] + a->splits[dim][p];
    return;
  }
  if (rule_of(a, dim) == TS_SPLIT_BALANCED) {
    for (int64_t p = 0; p < k; p++)
      offsets[p + 1] = offsets[p] + len / k + (p < len % k ? 1 : 0);
    return;
  }
  chunk_sizes(a, dim, len, offsets + 1);
  for (int64_t p = 0; p < k; p++)
    offsets[p + 1] += offsets[p];
}
