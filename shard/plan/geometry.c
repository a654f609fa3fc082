/* geometry.c - slice geometry: an attribute resolved on a tensor shape.
 *
 * A geom holds the split points of every sharded dim (ts_attr_split_offsets: balanced, chunk or
 * explicit), its attribute with negative dims resolved, the weights that turn
 * a mesh position into a part per tensor dim, a replica index and a partial index, and a lookup
 * from world rank to mesh position. Boxes (a range per dim) are computed from split points; the
 * parts meeting a range are found by binary search over the sorted split points, so the planner
 * never compares every rank with every other. Also here: box intersection and the chunking of a
 * box into slabs bounded in bytes, which both ends of a transfer compute identically. The geom of
 * a block-cyclic attribute (ts__geom_create_any, for the planner) keeps the mesh bookkeeping;
 * the split points of its cyclic dims are a balanced split standing in for the real holdings,
 * which shard/plan/cyclic.c computes. */
#include <stdlib.h>
#include <string.h>

#include "shard_internal.h"

int64_t ts_box_numel(const ts_box *b) {
  int64_t n = 1;
  for (int d = 0; d < b->ndim; d++)
    n *= b->hi[d] > b->lo[d] ? b->hi[d] - b->lo[d] : 0;
  return n;
}

bool ts_box_intersect(const ts_box *a, const ts_box *b, ts_box *out) {
  ts_box r;
  r.ndim = a->ndim;
  bool nonempty = true;
  for (int d = 0; d < a->ndim; d++) {
    r.lo[d] = a->lo[d] > b->lo[d] ? a->lo[d] : b->lo[d];
    r.hi[d] = a->hi[d] < b->hi[d] ? a->hi[d] : b->hi[d];
    if (r.hi[d] <= r.lo[d]) {
      r.hi[d] = r.lo[d];
      nonempty = false;
    }
  }
  if (out)
    *out = r;
  return nonempty;
}

bool ts_box_contains(const ts_box *outer, const ts_box *inner) {
  if (ts_box_numel(inner) == 0)
    return true;
  for (int d = 0; d < inner->ndim; d++)
    if (inner->lo[d] < outer->lo[d] || inner->hi[d] > outer->hi[d])
      return false;
  return true;
}

bool ts_box_equal(const ts_box *a, const ts_box *b) {
  if (a->ndim != b->ndim)
    return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d])
      return false;
  return true;
}

void ts_geom_destroy(ts_geom **p) {
  if (!p || !*p)
    return;
  ts_geom *g = *p;
  for (int d = 0; d < TS_MAX_DIMS; d++) {
    free(g->offsets[d]);
    free(g->zeros[d]);
  }
  free(g->index_of_rank);
  ts_attr_destroy(&g->attr_own);
  free(g);
  *p = NULL;
}

const ts_attr *ts_geom_attr(const ts_geom *g) { return g->attr; }

int ts_attr_refuse_cyclic(const ts_attr *a, ts_error *err) {
  if (!a || !ts_attr_is_cyclic(a))
    return TS_OK;
  char text[256];
  size_t n = ts_attr_format(a, text, sizeof text);
  return ts_error_set(err, TS_UNSUPPORTED,
                      "%s%s: a block-cyclic attribute is planned (tshard plan) and moved by the "
                      "C library's executor, but its slices are not boxes, and storing or "
                      "saving block-cyclic tensors is not supported yet",
                      text, n >= sizeof text ? "..." : "");
}

int ts_geom_create(const ts_attr *a, int ndim, const int64_t *shape, ts_geom **out, ts_error *err) {
  if (!out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_geom_create: NULL output");
  *out = NULL;
  int rc = ts_attr_refuse_cyclic(a, err);
  return rc ? rc : ts__geom_create_any(a, ndim, shape, out, err);
}

int ts__geom_create_any(const ts_attr *a, int ndim, const int64_t *shape, ts_geom **out,
                        ts_error *err) {
  if (!out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_geom_create: NULL output");
  *out = NULL;
  int rc = ts_attr_validate(a, ndim, shape, 0, err);
  if (rc)
    return rc;
  ts_geom *g = calloc(1, sizeof *g);
  if (!g)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a geometry");
  if ((rc = ts_attr_clone(a, &g->attr_own, err)) ||
      (rc = ts_attr_normalize(g->attr_own, ndim, err))) {
    ts_attr_destroy(&g->attr_own);
    free(g);
    return rc;
  }
  g->attr = g->attr_own;
  a = g->attr;
  g->ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    g->shape[d] = shape[d];
    int64_t k = ts__attr_parts(a, d);
    g->nparts[d] = k;
    g->offsets[d] = malloc((size_t)(k + 1) * sizeof(int64_t));
    g->zeros[d] = malloc((size_t)(k + 1) * sizeof(int64_t));
    if (!g->offsets[d] || !g->zeros[d]) {
      ts_geom_destroy(&g);
      return ts_error_set(err, TS_NO_MEMORY, "no memory for %lld split points", (long long)k);
    }
    ts_attr_split_offsets(a, d, shape[d], g->offsets[d]);
    g->zeros[d][0] = 0;
    for (int64_t p = 0; p < k; p++)
      g->zeros[d][p + 1] = g->zeros[d][p] + (g->offsets[d][p + 1] == g->offsets[d][p]);
  }
  int64_t stride = 1, rep = 1, par = 1;
  int64_t part_w[TS_MAX_DIMS];
  for (int d = 0; d < TS_MAX_DIMS; d++)
    part_w[d] = 1;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    g->mesh_stride[m] = stride;
    stride *= a->mesh_shape[m];
    switch (a->place[m].kind) {
    case TS_PLACE_SHARD:
      g->part_weight[m] = part_w[a->place[m].dim];
      part_w[a->place[m].dim] *= a->mesh_shape[m];
      break;
    case TS_PLACE_REPLICATE:
      g->rep_weight[m] = rep;
      rep *= a->mesh_shape[m];
      break;
    case TS_PLACE_PARTIAL:
      g->par_weight[m] = par;
      par *= a->mesh_shape[m];
      break;
    }
  }
  g->nrep = rep;
  g->npartial = par;
  g->max_rank = 0;
  for (int i = 0; i < a->nranks; i++)
    if (a->ranks[i] > g->max_rank)
      g->max_rank = a->ranks[i];
  g->index_of_rank = malloc(((size_t)g->max_rank + 1) * sizeof(int64_t));
  if (!g->index_of_rank) {
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a rank table");
  }
  for (int r = 0; r <= g->max_rank; r++)
    g->index_of_rank[r] = -1;
  for (int i = 0; i < a->nranks; i++)
    g->index_of_rank[a->ranks[i]] = i;
  *out = g;
  return TS_OK;
}

int64_t ts_geom_mesh_index(const ts_geom *g, int world_rank) {
  if (world_rank < 0 || world_rank > g->max_rank)
    return -1;
  return g->index_of_rank[world_rank];
}

int64_t ts_geom_parts(const ts_geom *g, int d) { return g->nparts[d]; }
const int64_t *ts_geom_offsets(const ts_geom *g, int d) { return g->offsets[d]; }

void ts__geom_decompose(const ts_geom *g, int64_t mesh_index, int64_t *parts, int64_t *rep,
                        int64_t *par) {
  const ts_attr *a = g->attr;
  for (int d = 0; d < g->ndim; d++)
    parts[d] = 0;
  int64_t r = 0, p = 0;
  for (int m = 0; m < a->mesh_ndim; m++) {
    int64_t c = (mesh_index / g->mesh_stride[m]) % a->mesh_shape[m];
    switch (a->place[m].kind) {
    case TS_PLACE_SHARD: parts[a->place[m].dim] += c * g->part_weight[m]; break;
    case TS_PLACE_REPLICATE: r += c * g->rep_weight[m]; break;
    case TS_PLACE_PARTIAL: p += c * g->par_weight[m]; break;
    }
  }
  if (rep)
    *rep = r;
  if (par)
    *par = p;
}

int64_t ts__geom_compose(const ts_geom *g, const int64_t *parts, int64_t rep, int64_t par) {
  const ts_attr *a = g->attr;
  int64_t index = 0;
  for (int m = 0; m < a->mesh_ndim; m++) {
    int64_t v = 0, w = 1;
    switch (a->place[m].kind) {
    case TS_PLACE_SHARD:
      v = parts[a->place[m].dim];
      w = g->part_weight[m];
      break;
    case TS_PLACE_REPLICATE:
      v = rep;
      w = g->rep_weight[m];
      break;
    case TS_PLACE_PARTIAL:
      v = par;
      w = g->par_weight[m];
      break;
    }
    index += ((v / w) % a->mesh_shape[m]) * g->mesh_stride[m];
  }
  return index;
}

void ts__geom_parts_box(const ts_geom *g, const int64_t *parts, ts_box *out) {
  out->ndim = g->ndim;
  for (int d = 0; d < g->ndim; d++) {
    out->lo[d] = g->offsets[d][parts[d]];
    out->hi[d] = g->offsets[d][parts[d] + 1];
  }
}

void ts_geom_index_box(const ts_geom *g, int64_t mesh_index, ts_box *out) {
  int64_t parts[TS_MAX_DIMS];
  ts__geom_decompose(g, mesh_index, parts, NULL, NULL);
  ts__geom_parts_box(g, parts, out);
}

bool ts_geom_rank_box(const ts_geom *g, int world_rank, ts_box *out) {
  int64_t i = ts_geom_mesh_index(g, world_rank);
  if (i < 0)
    return false;
  ts_geom_index_box(g, i, out);
  return true;
}

void ts__geom_part_range(const ts_geom *g, int d, int64_t lo, int64_t hi, int64_t *first,
                         int64_t *last) {
  const int64_t *off = g->offsets[d];
  int64_t k = g->nparts[d];
  if (lo >= hi) {
    *first = *last = 0;
    return;
  }
  /* first: the smallest p with off[p + 1] > lo */
  int64_t a = 0, b = k;
  while (a < b) {
    int64_t mid = a + (b - a) / 2;
    if (off[mid + 1] > lo)
      b = mid;
    else
      a = mid + 1;
  }
  *first = a;
  /* last: the smallest p with off[p] >= hi */
  a = *first;
  b = k;
  while (a < b) {
    int64_t mid = a + (b - a) / 2;
    if (off[mid] >= hi)
      b = mid;
    else
      a = mid + 1;
  }
  *last = a;
}

int64_t ts__geom_nonempty_parts(const ts_geom *g, int d, int64_t first, int64_t last) {
  if (last <= first)
    return 0;
  return (last - first) - (g->zeros[d][last] - g->zeros[d][first]);
}

bool ts__geom_uniform(const ts_geom *g) {
  for (int d = 0; d < g->ndim; d++)
    for (int64_t p = 1; p < g->nparts[d]; p++)
      if (g->offsets[d][p + 1] - g->offsets[d][p] != g->offsets[d][1] - g->offsets[d][0])
        return false;
  return true;
}

int ts_attr_rank_box(const ts_attr *a, int ndim, const int64_t *shape, int world_rank, ts_box *out,
                     bool *in_mesh, ts_error *err) {
  ts_geom *g = NULL;
  int rc = ts_geom_create(a, ndim, shape, &g, err);
  if (rc)
    return rc;
  bool in = ts_geom_rank_box(g, world_rank, out);
  if (in_mesh)
    *in_mesh = in;
  ts_geom_destroy(&g);
  return TS_OK;
}

/* Chunking: the outermost dim k whose one-index slab (the dims after k) fits in max_bytes is
 * cut into runs of m indices; the dims before k are walked one index at a time. */
static void chunk_shape(const ts_box *b, size_t esize, int64_t max_bytes, int *k_out,
                        int64_t *m_out, int64_t *per_outer) {
  int n = b->ndim;
  int64_t inner = (int64_t)esize;
  int k = n - 1;
  /* Walk outward while the slab of dims > k fits. */
  while (k > 0 && inner * (b->hi[k] - b->lo[k]) <= max_bytes) {
    inner *= b->hi[k] - b->lo[k];
    k--;
  }
  int64_t ek = b->hi[k] - b->lo[k];
  int64_t m = max_bytes / inner;
  if (m < 1)
    m = 1;
  if (m > ek)
    m = ek;
  *k_out = k;
  *m_out = m;
  *per_outer = m > 0 ? (ek + m - 1) / m : 0;
}

int64_t ts_box_chunk_count(const ts_box *b, size_t esize, int64_t max_bytes) {
  int64_t n = ts_box_numel(b);
  if (n == 0)
    return 0;
  if (b->ndim == 0 || n * (int64_t)esize <= max_bytes)
    return 1;
  int k;
  int64_t m, per;
  chunk_shape(b, esize, max_bytes, &k, &m, &per);
  int64_t outer = 1;
  for (int d = 0; d < k; d++)
    outer *= b->hi[d] - b->lo[d];
  return outer * per;
}

void ts_box_chunk(const ts_box *b, size_t esize, int64_t max_bytes, int64_t index, ts_box *out) {
  *out = *b;
  int64_t n = ts_box_numel(b);
  if (b->ndim == 0 || n * (int64_t)esize <= max_bytes)
    return;
  int k;
  int64_t m, per;
  chunk_shape(b, esize, max_bytes, &k, &m, &per);
  int64_t outer = index / per, within = index % per;
  for (int d = k - 1; d >= 0; d--) {
    int64_t e = b->hi[d] - b->lo[d];
    out->lo[d] = b->lo[d] + outer % e;
    out->hi[d] = out->lo[d] + 1;
    outer /= e;
  }
  out->lo[k] = b->lo[k] + within * m;
  out->hi[k] = out->lo[k] + m < b->hi[k] ? out->lo[k] + m : b->hi[k];
}
