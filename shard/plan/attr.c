/* attr.c - distributed attributes: construction, copy, comparison and validation.
 *
 * An attribute is a mesh (shape over a list of world ranks), one placement per mesh dim and
 * optional explicit split sizes per tensor dim. Structure that does not depend on a tensor (mesh
 * sizes, rank list, placement kinds) is checked when the attribute is built; what does (dims named
 * by placements, split sizes, ranks inside the world) is checked by ts_attr_validate. A
 * block-cyclic shard (S(d,cyclic=NB,src=S)) has a block size of at least 1, a source coordinate
 * inside its mesh dim, no other mesh dim sharding the same tensor dim and no explicit splits. */
#include <limits.h>
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
                        "rank %d appears twice in the mesh; each rank may appear once",
                        sorted[i]);
  free(sorted);
  return rc;
}

/* A block-cyclic shard: block size >= 1, src a coordinate of its mesh dim (size msize). */
static int check_cyclic(const ts_placement *p, int m, int64_t msize, ts_error *err) {
  if (p->kind != TS_PLACE_SHARD && (p->cyclic != 0 || p->src != 0))
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: cyclic=/src= apply to a shard only, as in "
                        "S(0,cyclic=64)", m);
  if (p->cyclic < 0 || p->cyclic > TS_CYCLIC_BLOCK_MAX)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: cyclic block size %lld; valid: 1 to %lld", m,
                        (long long)p->cyclic, (long long)TS_CYCLIC_BLOCK_MAX);
  if (p->cyclic == 0 && p->src != 0)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: src=%lld without a cyclic block size; write "
                        "S(%d,cyclic=NB,src=%lld)", m, (long long)p->src, p->dim,
                        (long long)p->src);
  if (p->src < 0 || p->src >= msize)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "placement %d: src=%lld but the mesh dim has size %lld (valid: src=0 to "
                        "%lld)", m, (long long)p->src, (long long)msize, (long long)msize - 1);
  return TS_OK;
}

static int check_placement(const ts_placement *p, int m, int64_t msize, ts_error *err) {
  int rc = check_cyclic(p, m, msize, err);
  if (rc)
    return rc;
  switch (p->kind) {
  case TS_PLACE_SHARD:
    if (p->dim < 0 || p->dim >= TS_MAX_DIMS)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placement %d is S(%d); a tensor dim is 0 to %d", m, p->dim,
                          TS_MAX_DIMS - 1);
    return TS_OK;
  case TS_PLACE_REPLICATE:
    return TS_OK;
  case TS_PLACE_PARTIAL:
    if ((int)p->op < 0 || p->op >= TS_REDUCE_COUNT)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placement %d has reduce op %d; valid ops are sum, avg, prod, max, min", m,
                          (int)p->op);
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
                          "one", avg, m);
  }
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
      (rc = check_cyclic_dims(mesh_ndim, place, err)))
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
  if (dim < 0 || dim >= TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_ATTRIBUTE, "splits for dim %d; a tensor dim is 0 to %d", dim,
                        TS_MAX_DIMS - 1);
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
  free(a->splits[dim]);
  a->splits[dim] = copy;
  a->nsplits[dim] = n;
  return TS_OK;
}

void ts_attr_destroy(ts_attr **p) {
  if (!p || !*p)
    return;
  ts_attr *a = *p;
  for (int d = 0; d < TS_MAX_DIMS; d++)
    free(a->splits[d]);
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
  for (int d = 0; rc == TS_OK && d < TS_MAX_DIMS; d++)
    if (a->splits[d])
      rc = ts_attr_set_splits(*out, d, a->nsplits[d], a->splits[d], err);
  if (rc)
    ts_attr_destroy(out);
  return rc;
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
        (x->dim != y->dim || x->cyclic != y->cyclic || x->src != y->src))
      return false;
    if (x->kind == TS_PLACE_PARTIAL && x->op != y->op)
      return false;
    if (strcmp(a->axis[m], b->axis[m]) != 0)
      return false;
  }
  if (memcmp(a->ranks, b->ranks, (size_t)a->nranks * sizeof *a->ranks) != 0)
    return false;
  for (int d = 0; d < TS_MAX_DIMS; d++) {
    if ((a->splits[d] == NULL) != (b->splits[d] == NULL) || a->nsplits[d] != b->nsplits[d])
      return false;
    if (a->splits[d] &&
        memcmp(a->splits[d], b->splits[d], (size_t)a->nsplits[d] * sizeof(int64_t)) != 0)
      return false;
  }
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
                          "placement %d is S(%d) but the tensor has %d dims (valid: S(0) to "
                          "S(%d))",
                          m, a->place[m].dim, ndim, ndim - 1);
  }
  if ((rc = check_partial_ops(a->mesh_ndim, a->place, err)) ||
      (rc = check_cyclic_dims(a->mesh_ndim, a->place, err)))
    return rc;
  for (int d = 0; d < TS_MAX_DIMS; d++) {
    if (!a->splits[d])
      continue;
    for (int m = 0; m < a->mesh_ndim; m++)
      if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d && a->place[m].cyclic)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "splits given for dim %d, which placement %d deals block-cyclically "
                            "(its parts are set by the block size)", d, m);
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
                          huge ? "more than " : "", (long long)sum,
                          (long long)shape[d]);
  }
  return TS_OK;
}
