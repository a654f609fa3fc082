/* plan_cyclic.c - planning reshards from or to block-cyclic attributes.
 *
 * A block-cyclic rank holds, per tensor dim, a list of runs, so its slice is not a box: the
 * collective strategies (which move boxes) do not apply, and the intersection strategies (p2p,
 * all-to-all) are costed from per-dim overlays (cyclic.c): what a source part and a target part
 * share along a dim is a run list, and what two ranks share is the product of their dims' run
 * lists, so the planner never lists pairs of ranks, boxes or elements. The rules of the
 * intersection path are plan.c's: a receiving target rank takes every element of its holding from
 * one replica of every partial contribution, its own when it holds one. */
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

void ts__geom_deal(const ts_geom *g, int d, ts_dim_deal *out) {
  const ts_attr *a = g->attr;
  *out = (ts_dim_deal){g->shape[d], g->nparts[d], 0, 0, g->offsets[d]};
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d && a->place[m].cyclic > 0) {
      out->nb = a->place[m].cyclic;
      out->src = a->place[m].src;
      out->off = NULL;
    }
}

int64_t ts__plan_cyclic_held(const ts_geom *g, const int64_t *parts) {
  int64_t n = 1;
  for (int d = 0; d < g->ndim; d++) {
    ts_dim_deal dd;
    ts__geom_deal(g, d, &dd);
    n *= ts_deal_owned_before(&dd, parts[d], dd.len);
  }
  return n;
}

/* Elements source mesh index si and target mesh index ti share. */
static int64_t shared(const ts_plan *p, int64_t si, int64_t ti) {
  int64_t sp[TS_MAX_DIMS], tp[TS_MAX_DIMS], n = 1;
  ts__geom_decompose(p->src, si, sp, NULL, NULL);
  ts__geom_decompose(p->tgt, ti, tp, NULL, NULL);
  for (int d = 0; d < p->ndim && n > 0; d++)
    n *= ts_overlay_pair_len(p->overlay[d], sp[d], tp[d]);
  return n;
}

/* Receive side of every receiving target rank: bytes (what it does not hold itself) and pieces. */
static void receive_costs(const ts_plan *p, int64_t *recv_of, int64_t *wire, int64_t *msgs) {
  const ts_geom *sg = p->src, *tg = p->tgt;
  int64_t es = (int64_t)p->esize;
  for (int64_t ti = 0; ti < tg->attr->nranks; ti++) {
    if (!ts__plan_receiver(p, ti))
      continue;
    int rank = tg->attr->ranks[ti];
    int64_t tp[TS_MAX_DIMS], pieces = sg->npartial;
    ts__geom_decompose(tg, ti, tp, NULL, NULL);
    int64_t n = ts__plan_cyclic_held(tg, tp);
    if (n == 0)
      continue;
    for (int d = 0; d < p->ndim; d++)
      pieces *= ts_overlay_sources_of(p->overlay[d], tp[d]);
    int64_t bytes = n * sg->npartial * es;
    int64_t si = ts_geom_mesh_index(sg, rank), local = si >= 0 ? shared(p, si, ti) : 0;
    if (local > 0) {
      bytes -= local * es;
      pieces -= 1;
    }
    *wire += bytes;
    *msgs += pieces + bytes / p->pair_chunk;
    recv_of[ts__plan_union_pos(p, rank)] += bytes;
  }
}

/* Send side: the demand on each (parts, partial) group, all of it on its one source without
 * replicas, an even share on each replica otherwise (p->send_estimated). */
static int send_costs(ts_plan *p, int64_t *send_of, ts_error *err) {
  const ts_geom *sg = p->src, *tg = p->tgt;
  int64_t es = (int64_t)p->esize;
  int64_t *local_at = calloc((size_t)sg->attr->nranks, sizeof(int64_t));
  if (!local_at)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for per-rank costs");
  for (int64_t si = 0; si < sg->attr->nranks; si++) {
    int64_t parts[TS_MAX_DIMS], rep, par;
    ts__geom_decompose(sg, si, parts, &rep, &par);
    int64_t ti = ts_geom_mesh_index(tg, sg->attr->ranks[si]);
    if (ti >= 0 && ts__plan_receiver(p, ti))
      local_at[ts__geom_compose(sg, parts, 0, par)] += shared(p, si, ti) * es;
  }
  for (int64_t si = 0; si < sg->attr->nranks; si++) {
    int64_t parts[TS_MAX_DIMS], rep, par;
    ts__geom_decompose(sg, si, parts, &rep, &par);
    int64_t g0 = ts__geom_compose(sg, parts, 0, par);
    int64_t demand =
        ts__plan_cyclic_held(sg, parts) * ts__plan_part_receivers(p) * es - local_at[g0];
    int64_t share = (demand + sg->nrep - 1) / sg->nrep;
    send_of[ts__plan_union_pos(p, sg->attr->ranks[si])] += sg->nrep == 1 ? demand : share;
  }
  free(local_at);
  p->send_estimated = sg->nrep > 1;
  return TS_OK;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int intersection_costs(ts_plan *p, ts_plan_costs *c, ts_error *err) {
  int64_t wire = 0, msgs = 0, maxb = 0, peak = 0, half = p->staging / 2;
  int64_t *recv_of = calloc((size_t)p->nunion, sizeof(int64_t));
  int64_t *send_of = calloc((size_t)p->nunion, sizeof(int64_t));
  int rc =
      recv_of && send_of ? TS_OK : ts_error_set(err, TS_NO_MEMORY, "no memory for per-rank costs");
  if (rc == TS_OK) {
    receive_costs(p, recv_of, &wire, &msgs);
    rc = send_costs(p, send_of, err);
  }
  for (int i = 0; rc == TS_OK && i < p->nunion; i++) {
    maxb = max64(maxb, max64(send_of[i], recv_of[i]));
    int64_t mem = min64(send_of[i], half) + min64(recv_of[i], half);
    if (p->src->npartial > 1 && recv_of[i] > 0)
      mem += p->pair_chunk;
    peak = max64(peak, mem);
  }
  free(recv_of);
  free(send_of);
  memset(c, 0, sizeof *c);
  c->wire_bytes = wire;
  c->max_rank_bytes = maxb;
  c->messages = msgs;
  c->peak_extra_bytes = peak;
  c->rounds = maxb > 0 ? (maxb + half - 1) / half : 0;
  return rc;
}

int ts__plan_cyclic(ts_plan *p, const char *keeps, ts_error *err) {
  for (int d = 0; d < p->ndim; d++) {
    ts_dim_deal a, b;
    ts__geom_deal(p->src, d, &a);
    ts__geom_deal(p->tgt, d, &b);
    int rc = ts_overlay_create(&a, &b, &p->overlay[d], err);
    if (rc)
      return rc;
  }
  static const char *const boxes = "a block-cyclic slice is not a box: block-cyclic "
                                   "placements move by intersection (p2p, alltoall)";
  for (int s = 1; s < TS_STRATEGY_COUNT; s++) {
    p->applies[s] = false;
    p->why_not[s] = boxes;
  }
  int rc = intersection_costs(p, &p->costs[TS_STRATEGY_P2P], err);
  if (rc)
    return rc;
  p->min_wire = p->costs[TS_STRATEGY_P2P].wire_bytes;
  p->costs[TS_STRATEGY_ALLTOALL] = p->costs[TS_STRATEGY_P2P];
  p->applies[TS_STRATEGY_P2P] = !keeps;
  p->why_not[TS_STRATEGY_P2P] = keeps ? keeps : "";
  p->applies[TS_STRATEGY_ALLTOALL] = p->same_group && !keeps;
  p->why_not[TS_STRATEGY_ALLTOALL] = keeps ? keeps
                                     : p->same_group
                                         ? ""
                                         : "the source and target groups differ (use p2p)";
  p->host_bound = -1;
  for (int s = 1; s < TS_STRATEGY_COUNT; s++)
    p->costs[s].time_ns = p->applies[s] ? ts__plan_time_ns(p, &p->costs[s]) : 0;
  return TS_OK;
}
