/* plan.c - the reshard planner: which strategies apply, what each costs, which one runs, and what
 * every rank sends and receives.
 *
 * Pure C, no MPI. A plan is data that the executor, the EXPLAIN and the cost model all read:
 * the resolved source and target geometries, the chosen strategy and the costs of every
 * strategy. The intersection strategies (p2p, all-to-all) list per rank the pieces it sends and
 * receives (ts_plan_rank), computed on demand so that a plan for 4096 ranks stays linear in the
 * ranks; the costs come from per-dim part ranges over sorted split points, not from listing every
 * pair.
 *
 * The rules of the intersection path: a target rank whose coordinate along a partial mesh dim
 * is not 0 holds the identity (only coordinate 0 receives data: the reduction over the partial
 * dims then gives the true value); along a P(avg) dim every rank receives the value. A receiving
 * target rank needs, for every source part meeting its box, one replica of every partial
 * contribution; it takes its own slice when it holds one of them and otherwise the replica (target
 * mesh index mod replicas), which spreads the load over replicas. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

static const char *const strategy_names[] = {
#define TS_X_STRAT(name, text) text,
    TS_STRATEGY_LIST(TS_X_STRAT)
#undef TS_X_STRAT
};

const char *ts_strategy_name(ts_strategy s) {
  if ((int)s < 0 || s >= TS_STRATEGY_COUNT)
    return "invalid";
  return strategy_names[s];
}

int ts_strategy_parse(const char *text, ts_strategy *out, ts_error *err) {
  char valid[160] = "";
  size_t at = 0;
  for (int s = 0; text && s < TS_STRATEGY_COUNT; s++) {
    if (strcmp(text, strategy_names[s]) == 0) {
      *out = (ts_strategy)s;
      return TS_OK;
    }
    if (at < sizeof valid)
      at +=
          (size_t)snprintf(valid + at, sizeof valid - at, "%s%s", s ? ", " : "", strategy_names[s]);
  }
  return ts_error_set(err, TS_BAD_STRATEGY, "unknown strategy '%s'; valid: %s",
                      text ? text : "(null)", valid);
}

void ts_plan_destroy(ts_plan **p) {
  if (!p || !*p)
    return;
  ts_plan *pl = *p;
  *p = NULL;
  if (atomic_fetch_sub(&pl->refs, 1) > 1)
    return;
  ts_geom_destroy(&pl->src);
  ts_geom_destroy(&pl->tgt);
  ts_topology_destroy(&pl->topo);
  for (int d = 0; d < TS_MAX_DIMS; d++)
    ts_overlay_destroy(&pl->overlay[d]);
  for (int i = 0; i < pl->nstages; i++)
    ts_plan_destroy(&pl->stages[i]);
  free(pl->union_ranks);
  free(pl);
}

ts_plan *ts_plan_ref(ts_plan *p) {
  if (p)
    atomic_fetch_add(&p->refs, 1);
  return p;
}

ts_strategy ts_plan_strategy(const ts_plan *p) { return p->chosen; }
const ts_plan_costs *ts_plan_get_costs(const ts_plan *p) { return &p->costs[p->chosen]; }
int64_t ts_plan_min_wire_bytes(const ts_plan *p) { return p->min_wire; }
int64_t ts_plan_host_bound(const ts_plan *p) { return p->host_bound; }
int ts_plan_stage_count(const ts_plan *p) { return p->chosen == TS_STRATEGY_HIER ? p->nstages : 0; }
const ts_plan *ts_plan_stage(const ts_plan *p, int i) {
  return i >= 0 && i < ts_plan_stage_count(p) ? p->stages[i] : NULL;
}
int64_t ts_plan_staging_bytes(const ts_plan *p) { return p->staging; }
int64_t ts_plan_pair_chunk_bytes(const ts_plan *p) { return p->pair_chunk; }
const ts_geom *ts_plan_src_geom(const ts_plan *p) { return p->src; }
const ts_geom *ts_plan_tgt_geom(const ts_plan *p) { return p->tgt; }
const ts_attr *ts_plan_src_attr(const ts_plan *p) { return p->src->attr; }
const ts_attr *ts_plan_tgt_attr(const ts_plan *p) { return p->tgt->attr; }
ts_dtype ts_plan_dtype(const ts_plan *p) { return p->dtype; }
int ts_plan_ndim(const ts_plan *p) { return p->ndim; }
const int64_t *ts_plan_shape(const ts_plan *p) { return p->shape; }

const int *ts_plan_union_ranks(const ts_plan *p, int *count) {
  *count = p->nunion;
  return p->union_ranks;
}

bool ts_plan_applies(const ts_plan *p, ts_strategy s, ts_plan_costs *costs, const char **why_not) {
  if ((int)s <= 0 || s >= TS_STRATEGY_COUNT) {
    if (why_not)
      *why_not = "not a concrete strategy";
    return false;
  }
  if (costs)
    *costs = p->costs[s];
  if (why_not)
    *why_not = p->applies[s] ? "" : p->why_not[s];
  return p->applies[s];
}

/* ---------------------------------------------------------------------------------------------
 * The intersection path: replica choice and per-rank lists */

/* Along a target P(avg) mesh dim every rank holds the value itself (the mean of equal values is
 * the value; DTensor's Replicate -> Partial("avg") keeps the local tensor), so all of them
 * receive; along the other partial dims only coordinate 0 does. */
static bool fresh_identity(const ts_placement *x) {
  return x->kind == TS_PLACE_PARTIAL && x->op != TS_REDUCE_AVG;
}

bool ts__plan_receiver(const ts_plan *p, int64_t tgt_index) {
  const ts_attr *b = p->tgt->attr;
  for (int m = 0; m < b->mesh_ndim; m++)
    if (fresh_identity(&b->place[m]) && (tgt_index / p->tgt->mesh_stride[m]) % b->mesh_shape[m])
      return false;
  return true;
}

int64_t ts__plan_part_receivers(const ts_plan *p) {
  const ts_attr *b = p->tgt->attr;
  int64_t n = p->tgt->nrep;
  for (int m = 0; m < b->mesh_ndim; m++)
    if (b->place[m].kind == TS_PLACE_PARTIAL && b->place[m].op == TS_REDUCE_AVG)
      n *= b->mesh_shape[m];
  return n;
}

int64_t ts__plan_avg_count(const ts_plan *p) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  int64_t count = 1;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (a->place[m].kind != TS_PLACE_PARTIAL || a->place[m].op != TS_REDUCE_AVG)
      continue;
    bool reduced;
    switch (p->chosen) {
    case TS_STRATEGY_LOCAL: /* partial source dims stay as they are */ reduced = false; break;
    case TS_STRATEGY_ALLREDUCE: /* the dims that go P -> R */
      reduced = b->place[m].kind == TS_PLACE_REPLICATE;
      break;
    case TS_STRATEGY_REDUCE_SCATTER: reduced = m == p->rs_dim; break;
    default: /* the intersection path and the stages reduce every contribution */
      reduced = true;
      break;
    }
    if (reduced)
      count *= a->mesh_shape[m];
  }
  return count;
}

/* The source mesh index that target rank t (target index ti) takes the part tuple `parts` with
 * partial index `par` from. */
static int64_t choose_source(const ts_plan *p, int t_rank, int64_t ti, const int64_t *parts,
                             int64_t par) {
  const ts_geom *s = p->src;
  int64_t si = ts_geom_mesh_index(s, t_rank);
  if (si >= 0) {
    int64_t my_parts[TS_MAX_DIMS], my_par;
    ts__geom_decompose(s, si, my_parts, NULL, &my_par);
    bool same = my_par == par;
    for (int d = 0; same && d < p->ndim; d++)
      same = my_parts[d] == parts[d];
    if (same)
      return si;
  }
  if (s->nrep == 1)
    return ts__geom_compose(s, parts, 0, par);
  /* k: the position of t among the target positions whose slices meet this part (row-major over
   * the target parts meeting it, then the target replica index). Consecutive targets go to
   * consecutive replicas; the rotation by k / nrep keeps targets that share a residue (those
   * missing a local replica often do) from all landing on the same replica. */
  const ts_geom *tg = p->tgt;
  int64_t tparts[TS_MAX_DIMS], trep, k = 0;
  ts__geom_decompose(tg, ti, tparts, &trep, NULL);
  ts_box pbox;
  ts__geom_parts_box(s, parts, &pbox);
  for (int d = 0; d < p->ndim; d++) {
    int64_t first, last;
    ts__geom_part_range(tg, d, pbox.lo[d], pbox.hi[d], &first, &last);
    k = k * (last > first ? last - first : 1) + (tparts[d] >= first ? tparts[d] - first : 0);
  }
  k = k * tg->nrep + trep;
  return ts__geom_compose(s, parts, (k + k / s->nrep + par) % s->nrep, par);
}

/* Iterates the part tuples of `g` meeting `box`: ranges per dim, odometer in `cur`. Returns false
 * when the box meets no part. */
static bool part_ranges(const ts_geom *g, const ts_box *box, int64_t *first, int64_t *last) {
  for (int d = 0; d < g->ndim; d++) {
    ts__geom_part_range(g, d, box->lo[d], box->hi[d], &first[d], &last[d]);
    if (first[d] >= last[d])
      return false;
  }
  return true;
}

static bool odometer_next(int ndim, const int64_t *first, const int64_t *last, int64_t *cur) {
  for (int d = ndim - 1; d >= 0; d--) {
    if (++cur[d] < last[d])
      return true;
    cur[d] = first[d];
  }
  return false;
}

typedef struct transfer_list {
  ts_transfer *v;
  int n, cap;
} transfer_list;

static int push_transfer(transfer_list *l, const ts_transfer *t, ts_error *err) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    ts_transfer *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v)
      return ts_error_set(err, TS_NO_MEMORY, "no memory for %d transfers", cap);
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *t;
  return TS_OK;
}

static int cmp_transfer_peer(const void *a, const void *b) {
  const ts_transfer *x = a, *y = b;
  return (x->peer > y->peer) - (x->peer < y->peer);
}

void ts_rank_plan_clear(ts_rank_plan *rp) {
  if (!rp)
    return;
  free(rp->send);
  free(rp->recv);
  memset(rp, 0, sizeof *rp);
}

int ts_plan_rank(const ts_plan *p, int rank, ts_rank_plan *out, ts_error *err) {
  memset(out, 0, sizeof *out);
  out->rank = rank;
  if (p->cyclic)
    return ts_error_set(err, TS_UNSUPPORTED,
                        "a block-cyclic plan moves run lists, not boxes: "
                        "it has no per-rank box transfers");
  const ts_geom *sg = p->src, *tg = p->tgt;
  int64_t si = ts_geom_mesh_index(sg, rank), ti = ts_geom_mesh_index(tg, rank);
  out->in_src = si >= 0;
  out->in_tgt = ti >= 0;
  out->src_box.ndim = out->tgt_box.ndim = p->ndim;
  if (out->in_src)
    ts_geom_index_box(sg, si, &out->src_box);
  if (out->in_tgt) {
    ts_geom_index_box(tg, ti, &out->tgt_box);
    out->receiver = ts__plan_receiver(p, ti);
  }
  transfer_list recv = {0}, send = {0};
  int64_t first[TS_MAX_DIMS], last[TS_MAX_DIMS], cur[TS_MAX_DIMS];
  int rc = TS_OK;
  size_t es = p->esize;

  if (out->receiver && ts_box_numel(&out->tgt_box) > 0 &&
      part_ranges(sg, &out->tgt_box, first, last)) {
    memcpy(cur, first, sizeof cur);
    int group = 0;
    do {
      ts_box part_box, piece;
      ts__geom_parts_box(sg, cur, &part_box);
      if (!ts_box_intersect(&part_box, &out->tgt_box, &piece))
        continue;
      for (int64_t par = 0; par < sg->npartial && rc == TS_OK; par++) {
        int64_t src_index = choose_source(p, rank, ti, cur, par);
        ts_transfer t = {sg->attr->ranks[src_index], group, piece,
                         ts_box_numel(&piece) * (int64_t)es};
        rc = push_transfer(&recv, &t, err);
        if (t.peer != rank)
          out->recv_bytes += t.bytes;
      }
      group++;
    } while (rc == TS_OK && odometer_next(p->ndim, first, last, cur));
  }

  if (rc == TS_OK && out->in_src && ts_box_numel(&out->src_box) > 0 &&
      part_ranges(tg, &out->src_box, first, last)) {
    int64_t my_parts[TS_MAX_DIMS], my_rep, my_par;
    ts__geom_decompose(sg, si, my_parts, &my_rep, &my_par);
    memcpy(cur, first, sizeof cur);
    do {
      ts_box part_box, piece;
      ts__geom_parts_box(tg, cur, &part_box);
      if (!ts_box_intersect(&part_box, &out->src_box, &piece))
        continue;
      /* the receivers of the part: every target replica, at partial index 0 or, along P(avg)
       * mesh dims, at every coordinate */
      for (int64_t k = 0; k < tg->nrep * tg->npartial && rc == TS_OK; k++) {
        int64_t t_index = ts__geom_compose(tg, cur, k % tg->nrep, k / tg->nrep);
        int t_rank = tg->attr->ranks[t_index];
        if ((k >= tg->nrep && !ts__plan_receiver(p, t_index)) ||
            choose_source(p, t_rank, t_index, my_parts, my_par) != si)
          continue;
        ts_transfer t = {t_rank, 0, piece, ts_box_numel(&piece) * (int64_t)es};
        rc = push_transfer(&send, &t, err);
        if (t.peer != rank)
          out->send_bytes += t.bytes;
      }
    } while (rc == TS_OK && odometer_next(p->ndim, first, last, cur));
  }
  if (rc) {
    free(recv.v);
    free(send.v);
    memset(out, 0, sizeof *out);
    return rc;
  }
  if (send.n > 1)
    qsort(send.v, (size_t)send.n, sizeof *send.v, cmp_transfer_peer);
  out->send = send.v;
  out->nsend = send.n;
  out->recv = recv.v;
  out->nrecv = recv.n;
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Costs */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Same mesh shape and the same ranks in the same order. */
static bool same_mesh(const ts_attr *a, const ts_attr *b) {
  if (a->mesh_ndim != b->mesh_ndim || a->nranks != b->nranks)
    return false;
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->mesh_shape[m] != b->mesh_shape[m])
      return false;
  return memcmp(a->ranks, b->ranks, (size_t)a->nranks * sizeof(int)) == 0;
}

static bool same_place(const ts_placement *x, const ts_placement *y) {
  if (x->kind != y->kind)
    return false;
  if (x->kind == TS_PLACE_SHARD)
    return x->dim == y->dim && x->split == y->split;
  if (x->kind == TS_PLACE_PARTIAL)
    return x->op == y->op;
  return true;
}

/* The intersection path (p2p and all-to-all share it): receive side exactly from part ranges,
 * send side exactly when the source has no replicas, by listing when small, else estimated. */
static int intersection_costs(ts_plan *p, ts_plan_costs *c, ts_error *err) {
  const ts_geom *sg = p->src, *tg = p->tgt;
  int64_t es = (int64_t)p->esize, q = p->pair_chunk;
  int64_t wire = 0, maxb = 0, msgs = 0, peak = 0;
  int64_t *recv_of = calloc((size_t)p->nunion, sizeof(int64_t));
  int64_t *send_of = calloc((size_t)p->nunion, sizeof(int64_t));
  if (!recv_of || !send_of) {
    free(recv_of);
    free(send_of);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for per-rank costs");
  }
  /* Receive side. */
  for (int64_t ti = 0; ti < tg->attr->nranks; ti++) {
    if (!ts__plan_receiver(p, ti))
      continue;
    int rank = tg->attr->ranks[ti];
    ts_box box;
    ts_geom_index_box(tg, ti, &box);
    int64_t n = ts_box_numel(&box);
    if (n == 0)
      continue;
    int64_t first[TS_MAX_DIMS], last[TS_MAX_DIMS], pieces = 1;
    part_ranges(sg, &box, first, last);
    for (int d = 0; d < p->ndim; d++)
      pieces *= ts__geom_nonempty_parts(sg, d, first[d], last[d]);
    pieces *= sg->npartial;
    int64_t bytes = n * sg->npartial * es;
    ts_box own, local;
    if (ts_geom_rank_box(sg, rank, &own) && ts_box_intersect(&own, &box, &local)) {
      bytes -= ts_box_numel(&local) * es;
      pieces -= 1;
    }
    wire += bytes;
    msgs += pieces + bytes / q;
    recv_of[ts__plan_union_pos(p, rank)] += bytes;
  }
  /* Send side. */
  bool listed = sg->nrep > 1 && (int64_t)sg->attr->nranks * tg->attr->nranks <= (1 << 22);
  if (sg->nrep == 1 || !listed) {
    /* Demand on each (parts, partial) group: |box| for every receiving target replica; what a
     * replica that is also a receiving target takes locally is not sent. */
    /* local_at[replica 0 mesh index]: bytes the replicas of a group take for themselves. */
    int64_t *local_at = calloc((size_t)sg->attr->nranks, sizeof(int64_t));
    if (!local_at) {
      free(recv_of);
      free(send_of);
      return ts_error_set(err, TS_NO_MEMORY, "no memory for per-rank costs");
    }
    for (int64_t si = 0; si < sg->attr->nranks; si++) {
      int64_t parts[TS_MAX_DIMS], rep, par;
      ts__geom_decompose(sg, si, parts, &rep, &par);
      int64_t g0 = ts__geom_compose(sg, parts, 0, par);
      ts_box own, tbox, local;
      ts_geom_index_box(sg, si, &own);
      int64_t ti = ts_geom_mesh_index(tg, sg->attr->ranks[si]);
      if (ti >= 0 && ts__plan_receiver(p, ti)) {
        ts_geom_index_box(tg, ti, &tbox);
        if (ts_box_intersect(&own, &tbox, &local))
          local_at[g0] += ts_box_numel(&local) * es;
      }
    }
    for (int64_t si = 0; si < sg->attr->nranks; si++) {
      int64_t parts[TS_MAX_DIMS], rep, par;
      ts__geom_decompose(sg, si, parts, &rep, &par);
      int64_t g0 = ts__geom_compose(sg, parts, 0, par);
      ts_box own;
      ts_geom_index_box(sg, si, &own);
      int64_t demand = ts_box_numel(&own) * ts__plan_part_receivers(p) * es - local_at[g0];
      int64_t share = (demand + sg->nrep - 1) / sg->nrep;
      send_of[ts__plan_union_pos(p, sg->attr->ranks[si])] += sg->nrep == 1 ? demand : share;
    }
    free(local_at);
    p->send_estimated = sg->nrep > 1;
  } else {
    for (int64_t si = 0; si < sg->attr->nranks; si++) {
      ts_rank_plan rp;
      int rc = ts_plan_rank(p, sg->attr->ranks[si], &rp, err);
      if (rc) {
        free(recv_of);
        free(send_of);
        return rc;
      }
      send_of[ts__plan_union_pos(p, rp.rank)] += rp.send_bytes;
      ts_rank_plan_clear(&rp);
    }
  }
  int64_t half = p->staging / 2;
  for (int i = 0; i < p->nunion; i++) {
    maxb = max64(maxb, max64(send_of[i], recv_of[i]));
    int64_t mem = min64(send_of[i], half) + min64(recv_of[i], half);
    if (sg->npartial > 1 && recv_of[i] > 0)
      mem += q;
    peak = max64(peak, mem);
  }
  free(recv_of);
  free(send_of);
  c->wire_bytes = wire;
  c->max_rank_bytes = maxb;
  c->messages = msgs;
  c->peak_extra_bytes = peak;
  c->rounds = maxb > 0 ? (maxb + half - 1) / half : 0;
  return TS_OK;
}

/* The intersection path reduces every partial contribution, in mesh-dim order, then makes the
 * target partial afresh. With one op (or one partial dim) that is the value a reshard keeping
 * some partial dims leaves too; with several ops it is not (a sum of maxima is not a maximum of
 * sums), so when the target keeps a partial dim of such a source only the strategies that
 * reduce just the changed dims apply (local, allreduce, reduce_scatter): why not, or NULL. */
static const char *keeps_some_ops(const ts_plan *p) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  int first = -1;
  bool several = false, kept = false;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (a->place[m].kind != TS_PLACE_PARTIAL)
      continue;
    several = several || (first >= 0 && a->place[m].op != a->place[first].op);
    first = first < 0 ? m : first;
    kept = kept || (same_mesh(a, b) && same_place(&a->place[m], &b->place[m]));
  }
  return several && kept ? "the source is partial with several ops and the target keeps some of "
                           "its partial dims: only local, allreduce and reduce_scatter reduce "
                           "just the dims that change (reshard the others to R first)"
                         : NULL;
}

/* local: every rank builds its target slice from its own source slice (see plan_internal.h). */
static bool local_applies(ts_plan *p, const char **why, ts_error *err, int *rc) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  *rc = TS_OK;
  if (!same_mesh(a, b)) {
    *why = "the source and target meshes differ (local needs the same mesh and ranks)";
    return false;
  }
  /* Partial values cannot be combined without communication: a partial source dim must stay
   * the same partial dim. Shard and Replicate dims may change freely; what matters is that the
   * ranks hold what they need, checked below. */
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (a->place[m].kind == TS_PLACE_PARTIAL && !same_place(&a->place[m], &b->place[m])) {
      *why = "a partial source mesh dim must be reduced, which needs other ranks";
      return false;
    }
  }
  /* The designated contributors of each group (ranks that differ only in the mesh dims that
   * become partial) must tile the group's target box exactly. */
  int64_t n = a->nranks;
  int64_t *sum = calloc((size_t)n, sizeof(int64_t));
  if (!sum) {
    *rc = ts_error_set(err, TS_NO_MEMORY, "no memory to check the local strategy");
    *why = "out of memory";
    return false;
  }
  for (int64_t i = 0; i < n; i++) {
    if (!ts__plan_local_contributor(p, i))
      continue;
    ts_box sb, tb, x;
    ts_geom_index_box(p->src, i, &sb);
    ts_geom_index_box(p->tgt, i, &tb);
    if (ts_box_intersect(&sb, &tb, &x))
      sum[ts__plan_local_group(p, i)] += ts_box_numel(&x);
  }
  bool ok = true;
  for (int64_t i = 0; ok && i < n; i++) {
    ts_box tb;
    ts_geom_index_box(p->tgt, i, &tb);
    ok = sum[ts__plan_local_group(p, i)] == ts_box_numel(&tb);
  }
  free(sum);
  if (!ok)
    *why = "some rank's target slice needs data from other ranks";
  return ok;
}

bool ts__plan_local_contributor(const ts_plan *p, int64_t i) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  for (int m = 0; m < a->mesh_ndim; m++) {
    bool becomes_partial = fresh_identity(&b->place[m]) && a->place[m].kind == TS_PLACE_REPLICATE;
    if (becomes_partial && (i / p->src->mesh_stride[m]) % a->mesh_shape[m] != 0)
      return false;
  }
  return true;
}

int64_t ts__plan_local_group(const ts_plan *p, int64_t i) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  int64_t g = i;
  for (int m = 0; m < a->mesh_ndim; m++)
    if (fresh_identity(&b->place[m]) && a->place[m].kind != TS_PLACE_PARTIAL)
      g -= ((i / p->src->mesh_stride[m]) % a->mesh_shape[m]) * p->src->mesh_stride[m];
  return g;
}

/* allreduce: the same mesh, every changed mesh dim goes P(op) -> R, boxes unchanged. */
static bool allreduce_applies(ts_plan *p, ts_plan_costs *c, const char **why) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  if (!same_mesh(a, b)) {
    *why = "the source and target meshes differ (allreduce needs the same mesh and ranks)";
    return false;
  }
  int changed = 0;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (same_place(&a->place[m], &b->place[m]))
      continue;
    if (a->place[m].kind != TS_PLACE_PARTIAL || b->place[m].kind != TS_PLACE_REPLICATE) {
      *why = "allreduce needs every changed mesh dim to go from Partial to Replicate";
      return false;
    }
    changed++;
  }
  if (changed == 0) {
    *why = "no mesh dim goes from Partial to Replicate";
    return false;
  }
  int64_t es = (int64_t)p->esize, wire = 0, maxb = 0, peak = 0, msgs = 0;
  for (int64_t i = 0; i < a->nranks; i++) {
    ts_box sb, tb;
    ts_geom_index_box(p->src, i, &sb);
    ts_geom_index_box(p->tgt, i, &tb);
    if (!ts_box_equal(&sb, &tb)) {
      *why = "the slices change shape, not only their partial state";
      return false;
    }
    int64_t n = ts_box_numel(&tb) * es, mine = 0;
    for (int m = 0; m < a->mesh_ndim; m++) {
      if (same_place(&a->place[m], &b->place[m]))
        continue;
      int64_t pm = a->mesh_shape[m];
      mine += 2 * (pm - 1) * n / pm;
      msgs += n > 0 ? 2 * (pm - 1) : 0;
    }
    wire += mine;
    maxb = max64(maxb, mine);
    peak = max64(peak, min64(n, p->staging));
  }
  c->wire_bytes = wire;
  c->max_rank_bytes = maxb;
  c->messages = msgs;
  c->peak_extra_bytes = peak;
  c->rounds = maxb > 0 ? (peak > 0 ? 1 : 0) : 0;
  return true;
}

/* Along mesh dim m (lines of the ranks that differ only in their coordinate m): true when every
 * rank's `part` box lies inside its `whole` box and the parts of each line add up to the whole.
 * The shape of a reduce-scatter (whole: the source slice, part: the target slice) and of its
 * mirror, an all-gather along a line (whole: the target slice, part: the source slice). Sets
 * *nomem when the check could not run. */
static bool lines_tile(const ts_plan *p, int m, bool whole_is_source, bool *nomem) {
  const ts_geom *whole = whole_is_source ? p->src : p->tgt;
  const ts_geom *part = whole_is_source ? p->tgt : p->src;
  int64_t n = p->src->attr->nranks, stride = p->src->mesh_stride[m];
  int64_t pm = p->src->attr->mesh_shape[m];
  int64_t *sum = calloc((size_t)n, sizeof(int64_t)); /* by the line's first rank */
  *nomem = sum == NULL;
  if (!sum)
    return false;
  bool ok = true;
  for (int64_t i = 0; ok && i < n; i++) {
    ts_box wb, pb;
    ts_geom_index_box(whole, i, &wb);
    ts_geom_index_box(part, i, &pb);
    ok = ts_box_contains(&wb, &pb);
    sum[i - ((i / stride) % pm) * stride] += ts_box_numel(&pb);
  }
  for (int64_t i = 0; ok && i < n; i++) {
    ts_box wb;
    ts_geom_index_box(whole, i, &wb);
    ok = sum[i - ((i / stride) % pm) * stride] == ts_box_numel(&wb);
  }
  free(sum);
  return ok;
}

/* reduce_scatter: the same mesh, one mesh dim m goes P(op) -> S(d), the rest identical, and the
 * target slices of each group along m tile the group's (common) source slice. */
static bool reduce_scatter_applies(ts_plan *p, ts_plan_costs *c, const char **why, ts_error *err,
                                   int *rc) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  *rc = TS_OK;
  if (!same_mesh(a, b)) {
    *why = "the source and target meshes differ (reduce_scatter needs the same mesh and ranks)";
    return false;
  }
  int mdim = -1;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (same_place(&a->place[m], &b->place[m]))
      continue;
    if (mdim >= 0 || a->place[m].kind != TS_PLACE_PARTIAL || b->place[m].kind != TS_PLACE_SHARD) {
      *why = "reduce_scatter needs exactly one mesh dim to change, from Partial to Shard";
      return false;
    }
    mdim = m;
  }
  if (mdim < 0) {
    *why = "no mesh dim goes from Partial to Shard";
    return false;
  }
  p->rs_dim = mdim;
  bool nomem;
  if (!lines_tile(p, mdim, true, &nomem)) {
    if (nomem)
      *rc = ts_error_set(err, TS_NO_MEMORY, "no memory to check reduce_scatter");
    *why = nomem ? "out of memory"
                 : "the target slices along the partial mesh dim do not tile the source slice";
    return false;
  }
  int64_t n = a->nranks, pm = a->mesh_shape[mdim];
  int64_t es = (int64_t)p->esize, wire = 0, maxb = 0, peak = 0, msgs = 0;
  for (int64_t i = 0; i < n; i++) {
    ts_box sb, tb;
    ts_geom_index_box(p->src, i, &sb);
    ts_geom_index_box(p->tgt, i, &tb);
    int64_t recv = (pm - 1) * ts_box_numel(&tb) * es;
    int64_t send = (ts_box_numel(&sb) - ts_box_numel(&tb)) * es;
    wire += recv;
    maxb = max64(maxb, max64(recv, send));
    msgs += ts_box_numel(&sb) > 0 ? pm - 1 : 0;
    peak = max64(peak, min64(ts_box_numel(&sb) * es, p->staging / 2) +
                           min64(ts_box_numel(&tb) * es, p->pair_chunk));
  }
  c->wire_bytes = wire;
  c->max_rank_bytes = maxb;
  c->messages = msgs;
  c->peak_extra_bytes = peak;
  c->rounds = maxb > 0 ? (maxb + p->staging / 2 - 1) / (p->staging / 2) : 0;
  return true;
}

/* allgather and root: every rank of one group ends up with every (replica 0) source slice. */
static bool gather_applies(ts_plan *p, ts_strategy s, ts_plan_costs *c, const char **why) {
  const ts_geom *sg = p->src;
  if (!p->same_group) {
    *why = "the source and target groups differ (it needs one group of ranks)";
    return false;
  }
  if (sg->npartial > 1) {
    *why = "the source is partial (use allreduce, reduce_scatter, alltoall or p2p)";
    return false;
  }
  if (s == TS_STRATEGY_ALLGATHER && !ts__geom_uniform(sg)) {
    *why = "the source split is not uniform (use root, alltoall or p2p)";
    return false;
  }
  int64_t es = (int64_t)p->esize, total = es;
  for (int k = 0; k < p->ndim; k++)
    total *= p->shape[k];
  int64_t P = p->nunion, wire = 0, maxb = 0, msgs = 0;
  int64_t contributors = 0;
  for (int64_t si = 0; si < sg->attr->nranks; si++) {
    int64_t parts[TS_MAX_DIMS], rep;
    ts__geom_decompose(sg, si, parts, &rep, NULL);
    ts_box b;
    ts_geom_index_box(sg, si, &b);
    if (rep == 0 && ts_box_numel(&b) > 0)
      contributors++;
  }
  if (s == TS_STRATEGY_ALLGATHER) {
    for (int i = 0; i < p->nunion; i++) {
      int64_t si = ts_geom_mesh_index(sg, p->union_ranks[i]), own = 0, rep = 0;
      int64_t parts[TS_MAX_DIMS];
      ts_box b;
      ts__geom_decompose(sg, si, parts, &rep, NULL);
      ts_geom_index_box(sg, si, &b);
      if (rep == 0)
        own = ts_box_numel(&b) * es;
      wire += total - own;
      maxb = max64(maxb, total - own);
    }
    msgs = contributors * (P - 1);
  } else {
    int root = p->union_ranks[0];
    int64_t si = ts_geom_mesh_index(sg, root), rep = 0, own = 0;
    int64_t parts[TS_MAX_DIMS];
    ts_box b;
    ts__geom_decompose(sg, si, parts, &rep, NULL);
    ts_geom_index_box(sg, si, &b);
    if (rep == 0)
      own = ts_box_numel(&b) * es;
    wire = (total - own) + (P - 1) * total;
    maxb = P > 1 ? max64(total - own, total) : 0;
    msgs = (contributors - (own > 0)) + (P - 1);
  }
  c->wire_bytes = wire;
  c->max_rank_bytes = maxb;
  c->messages = msgs;
  c->peak_extra_bytes = total;
  c->rounds = 1;
  return true;
}

/* allgather along one mesh dim of an N-D mesh: the same mesh, one mesh dim m goes S(d) -> R, the
 * rest identical, and on every line along m the members' source slices tile the (common) target
 * slice. Each rank then receives exactly what it lacks, from the ranks of its line only. */
static bool line_gather_applies(ts_plan *p, ts_plan_costs *c) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  if (!same_mesh(a, b) || a->mesh_ndim < 2)
    return false;
  int mdim = -1;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (same_place(&a->place[m], &b->place[m]))
      continue;
    if (mdim >= 0 || a->place[m].kind != TS_PLACE_SHARD || b->place[m].kind != TS_PLACE_REPLICATE)
      return false;
    mdim = m;
  }
  bool nomem;
  if (mdim < 0 || p->src->npartial > 1 || !lines_tile(p, mdim, false, &nomem))
    return false; /* out of memory too: the general strategies still apply */
  int64_t n = a->nranks, pm = a->mesh_shape[mdim];
  int64_t es = (int64_t)p->esize, wire = 0, maxb = 0, msgs = 0, peak = 0;
  for (int64_t i = 0; i < n; i++) {
    ts_box sb, tb;
    ts_geom_index_box(p->src, i, &sb);
    ts_geom_index_box(p->tgt, i, &tb);
    int64_t recv = (ts_box_numel(&tb) - ts_box_numel(&sb)) * es;
    int64_t send = ts_box_numel(&sb) * es * (pm - 1);
    wire += recv;
    maxb = max64(maxb, max64(recv, send));
    msgs += pm - 1;
    peak = max64(peak, ts_box_numel(&tb) * es);
  }
  p->gather_dim = mdim;
  c->wire_bytes = wire;
  c->max_rank_bytes = maxb;
  c->messages = msgs;
  c->peak_extra_bytes = peak;
  c->rounds = 1;
  return true;
}

/* Lexicographic order of the cost model: wire bytes, then the busiest rank, then messages, then
 * peak memory; ties go to the earlier strategy of the list. */
static bool cheaper(const ts_plan_costs *x, const ts_plan_costs *y) {
  if (x->wire_bytes != y->wire_bytes)
    return x->wire_bytes < y->wire_bytes;
  if (x->max_rank_bytes != y->max_rank_bytes)
    return x->max_rank_bytes < y->max_rank_bytes;
  if (x->messages != y->messages)
    return x->messages < y->messages;
  return x->peak_extra_bytes < y->peak_extra_bytes;
}

int64_t ts__plan_time_ns(const ts_plan *p, const ts_plan_costs *c) {
  double t = (double)c->max_rank_bytes / ts_topology_rate(p->topo, TS_LINK_HOST);
  if (p->hosts)
    t += (double)c->host_link_bytes / ts_topology_rate(p->topo, TS_LINK_CROSS);
  return (int64_t)(t * 1e9);
}

/* With several hosts: the faster by the estimated time; within 1% of each other, the one whose
 * busiest host link carries less, then the cheaper; hierarchical (x_hier), whose stages cost more
 * than one flat step, wins such a near tie only by less on the busiest link. */
static bool faster(const ts_plan_costs *x, const ts_plan_costs *y, bool x_hier) {
  double tx = (double)x->time_ns, ty = (double)y->time_ns;
  if (tx < 0.99 * ty || tx > 1.01 * ty)
    return tx < ty;
  if (x->host_link_bytes != y->host_link_bytes)
    return x->host_link_bytes < y->host_link_bytes;
  return !x_hier && cheaper(x, y);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int ts__plan_union_pos(const ts_plan *p, int rank) {
  int a = 0, b = p->nunion;
  while (a < b) {
    int mid = a + (b - a) / 2;
    if (p->union_ranks[mid] < rank)
      a = mid + 1;
    else
      b = mid;
  }
  return a < p->nunion && p->union_ranks[a] == rank ? a : -1;
}

static int build_union(ts_plan *p, ts_error *err) {
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  int n = a->nranks + b->nranks;
  int *all = malloc((size_t)n * sizeof *all);
  if (!all)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %d ranks", n);
  memcpy(all, a->ranks, (size_t)a->nranks * sizeof *all);
  memcpy(all + a->nranks, b->ranks, (size_t)b->nranks * sizeof *all);
  qsort(all, (size_t)n, sizeof *all, cmp_int);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (k == 0 || all[i] != all[k - 1])
      all[k++] = all[i];
  p->union_ranks = all;
  p->nunion = k;
  p->same_group = k == a->nranks && k == b->nranks;
  return TS_OK;
}

/* With ranks on several hosts: every applicable strategy's bytes over the host links, and the
 * bound. */
static int host_costs(ts_plan *p, bool hier, ts_error *err) {
  p->host_bound = -1;
  p->why_not[TS_STRATEGY_HIER] = "every rank is on one host (hierarchical needs several)";
  if (!p->topo)
    return TS_OK;
  int last = p->union_ranks[p->nunion - 1];
  if (last >= ts_topology_nranks(p->topo))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the topology places %d ranks; the meshes use "
                        "rank %d",
                        ts_topology_nranks(p->topo), last);
  int first = ts_topology_host(p->topo, p->union_ranks[0]);
  for (int i = 1; i < p->nunion && !p->hosts; i++)
    p->hosts = ts_topology_host(p->topo, p->union_ranks[i]) != first;
  if (!p->hosts)
    return TS_OK;
  for (int s = 1; s < TS_STRATEGY_COUNT; s++) {
    int rc = p->applies[s] && s != TS_STRATEGY_HIER
                 ? ts__plan_host_costs(p, (ts_strategy)s, &p->costs[s], err)
                 : TS_OK;
    if (rc)
      return rc;
  }
  if (hier) {
    int rc;
    const char *why;
    p->applies[TS_STRATEGY_HIER] =
        ts__plan_hier_applies(p, &p->costs[TS_STRATEGY_HIER], &why, err, &rc);
    p->why_not[TS_STRATEGY_HIER] = why;
    if (rc)
      return rc;
  } else {
    p->why_not[TS_STRATEGY_HIER] = "not planned for a stage or another forced strategy";
  }
  p->host_bound = ts__plan_host_bound(p);
  return TS_OK;
}

/* The strategy: the forced one when it applies, else the cheapest: with several hosts the fastest
 * by the estimated time (faster()), on one host by cheaper(). */
static int choose(ts_plan *p, ts_strategy forced, ts_error *err) {
  const ts_plan_costs *c = p->costs;
  if (forced != TS_STRATEGY_AUTO) {
    if (!p->applies[forced])
      return ts_error_set(err, TS_BAD_STRATEGY, "strategy %s does not apply: %s",
                          ts_strategy_name(forced), p->why_not[forced]);
    p->chosen = forced;
    p->forced = true;
    return TS_OK;
  }
  int best = -1;
  for (int s = 1; s < TS_STRATEGY_COUNT; s++) {
    if (!p->applies[s])
      continue;
    if (best < 0 ||
        (p->hosts ? faster(&c[s], &c[best], s == TS_STRATEGY_HIER) : cheaper(&c[s], &c[best])))
      best = s;
  }
  if (best < 0) /* p2p applies but to partial sources of several ops (keeps_some_ops) */
    return ts_error_set(err, TS_BAD_STRATEGY,
                        "no strategy applies: %s; allreduce: %s; "
                        "reduce_scatter: %s",
                        p->why_not[TS_STRATEGY_P2P], p->why_not[TS_STRATEGY_ALLREDUCE],
                        p->why_not[TS_STRATEGY_REDUCE_SCATTER]);
  p->chosen = (ts_strategy)best;
  p->forced = false;
  return TS_OK;
}

/* Every strategy of a plan of box slices: applies or why not, and its costs (hierarchical with
 * the host costs). */
static int evaluate(ts_plan *p, ts_strategy strategy, ts_error *err) {
  int rc = TS_OK;
  const char *why;
  for (int s = 1; s < TS_STRATEGY_COUNT; s++)
    p->why_not[s] = "";
  ts_plan_costs *c = p->costs;
  bool ok = local_applies(p, &why, err, &rc);
  if (rc)
    return rc;
  p->applies[TS_STRATEGY_LOCAL] = ok;
  p->why_not[TS_STRATEGY_LOCAL] = ok ? "" : why;
  memset(&c[TS_STRATEGY_LOCAL], 0, sizeof c[0]);

  ok = allreduce_applies(p, &c[TS_STRATEGY_ALLREDUCE], &why);
  p->applies[TS_STRATEGY_ALLREDUCE] = ok;
  p->why_not[TS_STRATEGY_ALLREDUCE] = ok ? "" : why;

  ok = reduce_scatter_applies(p, &c[TS_STRATEGY_REDUCE_SCATTER], &why, err, &rc);
  if (rc)
    return rc;
  p->applies[TS_STRATEGY_REDUCE_SCATTER] = ok;
  p->why_not[TS_STRATEGY_REDUCE_SCATTER] = ok ? "" : why;

  /* allgather: along one mesh dim when that applies (never more bytes), else the whole group. */
  p->gather_dim = -1;
  ok = line_gather_applies(p, &c[TS_STRATEGY_ALLGATHER]) ||
       gather_applies(p, TS_STRATEGY_ALLGATHER, &c[TS_STRATEGY_ALLGATHER], &why);
  p->applies[TS_STRATEGY_ALLGATHER] = ok;
  p->why_not[TS_STRATEGY_ALLGATHER] = ok ? "" : why;
  ok = gather_applies(p, TS_STRATEGY_ROOT, &c[TS_STRATEGY_ROOT], &why);
  p->applies[TS_STRATEGY_ROOT] = ok;
  p->why_not[TS_STRATEGY_ROOT] = ok ? "" : why;

  if ((rc = intersection_costs(p, &c[TS_STRATEGY_P2P], err)))
    return rc;
  const char *keeps = keeps_some_ops(p);
  p->applies[TS_STRATEGY_P2P] = !keeps;
  p->why_not[TS_STRATEGY_P2P] = keeps ? keeps : "";
  p->min_wire = c[TS_STRATEGY_P2P].wire_bytes;
  c[TS_STRATEGY_ALLTOALL] = c[TS_STRATEGY_P2P];
  p->applies[TS_STRATEGY_ALLTOALL] = p->same_group && !keeps;
  p->why_not[TS_STRATEGY_ALLTOALL] = keeps ? keeps
                                     : p->same_group
                                         ? ""
                                         : "the source and target groups differ (use p2p)";

  bool hier = strategy == TS_STRATEGY_AUTO || strategy == TS_STRATEGY_HIER;
  if ((rc = host_costs(p, hier, err)))
    return rc;
  for (int s = 1; s < TS_STRATEGY_COUNT; s++)
    if (s != TS_STRATEGY_HIER) /* hierarchical: its stages' sum (plan_hier.c) */
      c[s].time_ns = p->applies[s] ? ts__plan_time_ns(p, &c[s]) : 0;
  return TS_OK;
}

int ts_plan_create(int ndim, const int64_t *shape, ts_dtype dt, const ts_attr *src,
                   const ts_attr *tgt, const ts_plan_opts *opts, ts_plan **out, ts_error *err) {
  return ts_plan_create_on(ndim, shape, dt, src, tgt, opts, NULL, out, err);
}

int ts_plan_create_on(int ndim, const int64_t *shape, ts_dtype dt, const ts_attr *src,
                      const ts_attr *tgt, const ts_plan_opts *opts, ts_topology *topo,
                      ts_plan **out, ts_error *err) {
  if (!out || !src || !tgt || (ndim > 0 && !shape))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_plan_create: NULL argument");
  *out = NULL;
  if (!ts_dtype_valid((int)dt))
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  ts_plan_opts o = {TS_STRATEGY_AUTO, 0, 0};
  if (opts)
    o = *opts;
  if ((int)o.strategy < 0 || o.strategy >= TS_STRATEGY_COUNT)
    return ts_error_set(err, TS_BAD_STRATEGY, "strategy %d is not valid", (int)o.strategy);
  if (o.staging_bytes == 0)
    o.staging_bytes = (int64_t)64 << 20;
  if (o.staging_bytes < 0 || o.staging_bytes > TS_PLAN_STAGING_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "staging size %lld bytes; valid: 1 byte to 1 GiB (0: 64 MiB)",
                        (long long)o.staging_bytes);
  char what[600];
  int rc = ts_attr_validate(src, ndim, shape, o.world_size, err);
  if (rc) {
    snprintf(what, sizeof what, "source attribute: %s", err ? err->msg : "");
    return ts_error_set(err, rc, "%s", what);
  }
  if ((rc = ts_attr_validate(tgt, ndim, shape, o.world_size, err))) {
    snprintf(what, sizeof what, "target attribute: %s", err ? err->msg : "");
    return ts_error_set(err, rc, "%s", what);
  }
  if ((rc = ts_attr_check_dtype(src, dt, err)) || (rc = ts_attr_check_dtype(tgt, dt, err)))
    return rc;
  int64_t total = (int64_t)ts_dtype_size(dt);
  for (int d = 0; d < ndim; d++) {
    if (shape[d] > 0 && total > INT64_MAX / 4 / shape[d])
      return ts_error_set(err, TS_OVERFLOW, "tensor of this shape overflows 64-bit byte counts");
    total *= shape[d];
  }
  ts_plan *p = calloc(1, sizeof *p);
  if (!p)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a plan");
  atomic_init(&p->refs, 1);
  p->ndim = ndim;
  for (int d = 0; d < ndim; d++)
    p->shape[d] = shape[d];
  p->dtype = dt;
  p->esize = ts_dtype_size(dt);
  p->staging = o.staging_bytes;
  p->topo = ts_topology_ref(topo);
  p->cyclic = ts_attr_is_cyclic(src) || ts_attr_is_cyclic(tgt);
  if ((rc = ts__geom_create_any(src, ndim, shape, &p->src, err)) ||
      (rc = ts__geom_create_any(tgt, ndim, shape, &p->tgt, err)) || (rc = build_union(p, err))) {
    ts_plan_destroy(&p);
    return rc;
  }
  /* Whole elements per chunk: slots and reductions stay aligned. */
  p->pair_chunk = p->staging / 2 / p->nunion / (int64_t)p->esize * (int64_t)p->esize;
  if (p->pair_chunk < (int64_t)p->esize)
    p->pair_chunk = (int64_t)p->esize;

  rc = p->cyclic ? ts__plan_cyclic(p, keeps_some_ops(p), err) : evaluate(p, o.strategy, err);
  if (rc) {
    ts_plan_destroy(&p);
    return rc;
  }
  if ((rc = choose(p, o.strategy, err))) {
    ts_plan_destroy(&p);
    return rc;
  }
  *out = p;
  return TS_OK;
}
