/* relabel.c - which rank of a target mesh takes which target block (ts_plan_relabel).
 *
 * A target attribute fixes, through its rank list, the block every rank ends with. Any
 * permutation of that list among the same ranks describes the same layout up to a relabeling,
 * and some permutations move far fewer bytes: two layouts that differ only by one move none.
 * The weight of giving mesh position j to rank q is the number of elements of position j's
 * block that q already holds under the source (none when the source has a partial placement:
 * its values are not final anywhere). The chosen permutation maximises the sum of the weights:
 * exactly (the Hungarian method, O(n^3)) up to TS_RELABEL_EXACT_MAX ranks, greedily beyond
 * (blocks in decreasing size, each to the free rank that holds most of it; O(n^2) time, O(n)
 * memory). Ties keep the target's own order, so a relabeling that gains nothing changes nothing.
 * Pure and deterministic: every rank computes the same permutation from the same request. */
#include <stdlib.h>
#include <string.h>

#include "ts_plan.h"

typedef struct relabel_in {
  int n;            /* positions of the target mesh (= its ranks) */
  const int *ranks; /* the target's ranks, row-major over its mesh */
  ts_box *dst_box;  /* per position: its block */
  ts_box *src_box;  /* per target rank (by its position in ranks): what it holds now */
  bool *holds;      /* per target rank: whether it holds anything of the source */
} relabel_in;

/* The elements rank i (by position in ranks) already holds of position j's block, times n + 1,
 * plus one when i is j's own rank: the n tie-breaks of an assignment together never outweigh
 * one element. */
static int64_t weight(const relabel_in *in, int i, int j) {
  int64_t w = 0;
  ts_box x;
  if (in->holds[i] && ts_box_intersect(&in->src_box[i], &in->dst_box[j], &x))
    w = ts_box_numel(&x) * ((int64_t)in->n + 1);
  return w + (i == j);
}

/* The Hungarian method for a maximum-weight assignment of ranks (rows) to positions (columns):
 * potentials over a cost matrix of -weight, rows added one at a time along shortest augmenting
 * paths. owner[j] gets the rank (by position in ranks) of position j. */
static int assign_exact(const relabel_in *in, int *owner, ts_error *err) {
  int n = in->n;
  int64_t *cost = malloc((size_t)n * (size_t)n * sizeof *cost);
  int64_t *u = calloc((size_t)n + 1, sizeof *u), *v = calloc((size_t)n + 1, sizeof *v);
  int64_t *minv = malloc(((size_t)n + 1) * sizeof *minv);
  int *p = calloc((size_t)n + 1, sizeof *p), *way = calloc((size_t)n + 1, sizeof *way);
  bool *used = malloc(((size_t)n + 1) * sizeof *used);
  int rc = TS_OK;
  if (!cost || !u || !v || !minv || !p || !way || !used) {
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory to relabel %d ranks", n);
    goto out;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      cost[(size_t)i * (size_t)n + (size_t)j] = -weight(in, i, j);
  for (int i = 1; i <= n; i++) { /* p[j]: the row (1-based) on column j; p[0]: the row added */
    p[0] = i;
    int j0 = 0;
    for (int j = 0; j <= n; j++) {
      minv[j] = INT64_MAX;
      used[j] = false;
    }
    do {
      used[j0] = true;
      int i0 = p[j0], j1 = 0;
      int64_t delta = INT64_MAX;
      for (int j = 1; j <= n; j++) {
        if (used[j])
          continue;
        int64_t cur = cost[(size_t)(i0 - 1) * (size_t)n + (size_t)(j - 1)] - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (int j = 0; j <= n; j++) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      int j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0);
  }
  for (int j = 1; j <= n; j++)
    owner[j - 1] = p[j] - 1;
out:
  free(cost);
  free(u);
  free(v);
  free(minv);
  free(p);
  free(way);
  free(used);
  return rc;
}

typedef struct by_size {
  int64_t numel;
  int pos;
} by_size;

static int larger_first(const void *a, const void *b) {
  const by_size *x = a, *y = b;
  if (x->numel != y->numel)
    return x->numel > y->numel ? -1 : 1;
  return x->pos - y->pos;
}

/* Blocks in decreasing size (then in mesh order), each to the free rank of largest weight. */
static int assign_greedy(const relabel_in *in, int *owner, ts_error *err) {
  int n = in->n;
  by_size *order = malloc((size_t)n * sizeof *order);
  bool *taken = calloc((size_t)n, sizeof *taken);
  if (!order || !taken) {
    free(order);
    free(taken);
    return ts_error_set(err, TS_NO_MEMORY, "no memory to relabel %d ranks", n);
  }
  for (int j = 0; j < n; j++)
    order[j] = (by_size){ts_box_numel(&in->dst_box[j]), j};
  qsort(order, (size_t)n, sizeof *order, larger_first);
  for (int k = 0; k < n; k++) {
    int j = order[k].pos, best = -1;
    int64_t best_w = -1;
    for (int i = 0; i < n; i++) {
      if (taken[i])
        continue;
      int64_t w = weight(in, i, j);
      if (w > best_w) {
        best_w = w;
        best = i;
      }
    }
    owner[j] = best;
    taken[best] = true;
  }
  free(order);
  free(taken);
  return TS_OK;
}

/* The blocks of the target's positions and what each target rank holds of the source. */
static int relabel_inputs(const ts_attr *src, const ts_attr *dst, int ndim, const int64_t *shape,
                          relabel_in *in, ts_error *err) {
  ts_geom *gs = NULL, *gd = NULL;
  int rc = ts_geom_create(src, ndim, shape, &gs, err);
  if (!rc)
    rc = ts_geom_create(dst, ndim, shape, &gd, err);
  int n = dst->nranks;
  in->n = n;
  in->ranks = dst->ranks;
  in->dst_box = malloc((size_t)n * sizeof *in->dst_box);
  in->src_box = malloc((size_t)n * sizeof *in->src_box);
  in->holds = calloc((size_t)n, sizeof *in->holds);
  if (!rc && (!in->dst_box || !in->src_box || !in->holds))
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory to relabel %d ranks", n);
  bool partial = false;
  for (int k = 0; k < src->mesh_ndim; k++)
    partial = partial || src->place[k].kind == TS_PLACE_PARTIAL;
  for (int j = 0; !rc && j < n; j++) {
    ts_geom_index_box(gd, j, &in->dst_box[j]);
    in->holds[j] = !partial && ts_geom_rank_box(gs, dst->ranks[j], &in->src_box[j]);
  }
  ts_geom_destroy(&gs);
  ts_geom_destroy(&gd);
  return rc;
}

int ts_plan_relabel(const ts_attr *src, const ts_attr *dst, int ndim, const int64_t *shape,
                    int *ranks, int64_t *kept, ts_error *err) {
  int64_t numel = 1; /* the weights sum to at most numel * (n + 1) + n: kept far from overflow */
  for (int d = 0; d < ndim; d++)
    numel = shape[d] > 0 && numel > INT64_MAX / 4 / shape[d] ? INT64_MAX / 4 : numel * shape[d];
  if (numel > INT64_MAX / 4 / ((int64_t)dst->nranks + 1))
    return ts_error_set(err, TS_LIMIT,
                        "a tensor of %lld or more elements over %d ranks is too "
                        "large to relabel",
                        (long long)numel, dst->nranks);
  relabel_in in;
  memset(&in, 0, sizeof in);
  int *owner = malloc((size_t)dst->nranks * sizeof *owner);
  int rc = owner ? relabel_inputs(src, dst, ndim, shape, &in, err)
                 : ts_error_set(err, TS_NO_MEMORY, "no memory to relabel %d ranks", dst->nranks);
  if (!rc)
    rc = in.n <= TS_RELABEL_EXACT_MAX ? assign_exact(&in, owner, err)
                                      : assign_greedy(&in, owner, err);
  if (!rc) {
    int64_t sum = 0;
    for (int j = 0; j < in.n; j++) {
      ranks[j] = dst->ranks[owner[j]];
      sum += weight(&in, owner[j], j) / ((int64_t)in.n + 1);
    }
    if (kept)
      *kept = sum;
  }
  free(owner);
  free(in.dst_box);
  free(in.src_box);
  free(in.holds);
  return rc;
}

int ts_attr_relabel(const ts_attr *src, ts_attr *dst, int ndim, const int64_t *shape, int64_t *kept,
                    ts_error *err) {
  int *ranks = malloc((size_t)dst->nranks * sizeof *ranks);
  if (!ranks)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to relabel %d ranks", dst->nranks);
  int rc = ts_plan_relabel(src, dst, ndim, shape, ranks, kept, err);
  if (!rc)
    memcpy(dst->ranks, ranks, (size_t)dst->nranks * sizeof *ranks);
  free(ranks);
  return rc;
}
