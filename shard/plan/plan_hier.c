/* plan_hier.c - the hierarchical strategy: a reshard across hosts as a few stages, each one of
 * the flat strategies over a host-major mesh of the same ranks ([hosts, ranks per host], every
 * host's ranks in one row), so that what crosses a host's link crosses it once and the rest moves
 * inside the hosts:
 *   to a replicated target (gather, one-to-many):  p2p into [R, S(d)] (every block enters each
 *       target host once, spread over its ranks), then an allgather along the host's row;
 *   from one host to a replicated target over three hosts or more:  the source's blocks into
 *       [S(d)] on one row (the source's host, or the first target host), a chain broadcast down
 *       every column (host to host, pipelined: each host link carries each byte once instead of
 *       the source host sending it to every other host), then the allgather along the rows;
 *   partial to replicated:  the partial values seen as [P, P]; reduce_scatter along the row
 *       (inside each host) to [P, S(d)], allreduce along the column (across hosts, a 1/L share
 *       per rank) to [R, S(d)], allgather along the row to [R, R];
 *   partial to anything else:  [P, P], reduce_scatter along the row to [P, S(d)], then p2p to the
 *       target (each host's reduced part crosses once to the rank that needs it).
 * A stage's source is the previous stage's result; [P, P] and [R, R] hold on every rank what the
 * reshard's own source and target hold, so those relabelings move nothing. It needs several hosts
 * and the same number of the group's ranks on each host (at least 2). The executor runs the
 * stages one after the other, each atomic, and keeps the source until the last succeeded. */
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

/* Everything partial with one op, or nothing partial; whether every mesh dim replicates. */
static bool all_partial(const ts_attr *a, ts_reduce_op *op) {
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind != TS_PLACE_PARTIAL || a->place[m].op != a->place[0].op)
      return false;
  *op = a->place[0].op;
  return true;
}

static bool any_partial(const ts_attr *a) {
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_PARTIAL)
      return true;
  return false;
}

static bool all_replicated(const ts_attr *a) {
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind != TS_PLACE_REPLICATE)
      return false;
  return true;
}

static int cmp_pair(const void *x, const void *y) { /* (host, rank) */
  const int *a = x, *b = y;
  return a[0] != b[0] ? (a[0] > b[0]) - (a[0] < b[0]) : (a[1] > b[1]) - (a[1] < b[1]);
}

/* The host-major order of a's ranks into rows (hosts) of equal length: 0, or -1 when the hosts
 * hold different numbers of them (or only one each). */
static int host_rows(const ts_plan *p, const ts_attr *a, int *order, int *hosts, int *per) {
  int n = a->nranks;
  int *pairs = malloc(2 * (size_t)n * sizeof *pairs);
  if (!pairs)
    return -1;
  for (int i = 0; i < n; i++)
    pairs[2 * i] = ts_topology_host(p->topo, a->ranks[i]), pairs[2 * i + 1] = a->ranks[i];
  qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_pair);
  int h = 1, run = 1, len = -1;
  bool even = true;
  for (int i = 1; i <= n; i++) {
    if (i < n && pairs[2 * i] == pairs[2 * (i - 1)]) {
      run++;
      continue;
    }
    even &= len < 0 || run == len;
    len = run, run = 1;
    h += i < n;
  }
  for (int i = 0; i < n; i++)
    order[i] = pairs[2 * i + 1];
  free(pairs);
  *hosts = h, *per = len;
  return even && len >= 2 ? 0 : -1;
}

/* The host of every rank of a, or -1 when they live on several. */
static int single_host(const ts_plan *p, const ts_attr *a) {
  int h = ts_topology_host(p->topo, a->ranks[0]);
  for (int i = 1; i < a->nranks; i++)
    if (ts_topology_host(p->topo, a->ranks[i]) != h)
      return -1;
  return h;
}

/* The tensor dim the intermediate stages split: the longest. */
static int longest_dim(const ts_plan *p) {
  int d = 0;
  for (int k = 1; k < p->ndim; k++)
    if (p->shape[k] > p->shape[d])
      d = k;
  return d;
}

/* An attribute over the host-major mesh: placements per mesh dim (row = dim 0, host's ranks =
 * dim 1). */
static ts_attr *grid(const int *order, int hosts, int per, ts_placement a, ts_placement b) {
  int64_t shape[2] = {hosts, per};
  ts_placement pl[2] = {a, b};
  ts_attr *out = NULL;
  return ts_attr_create(&out, 2, shape, order, pl, NULL) == TS_OK ? out : NULL;
}

/* One stage: a plan of the forced strategy from a to b, on the topology (host costs counted). */
static int stage(ts_plan *p, const ts_attr *a, const ts_attr *b, ts_strategy s, ts_error *err) {
  ts_plan_opts o = {s, p->staging, 0};
  ts_plan *sp = NULL;
  int rc = a && b ? ts_plan_create_on(p->ndim, p->shape, p->dtype, a, b, &o, p->topo, &sp, err)
                  : ts_error_set(err, TS_NO_MEMORY, "no memory for a stage's attribute");
  if (rc == TS_OK)
    p->stages[p->nstages++] = sp;
  return rc;
}

/* The chain stage from the row's [S(d)] down the columns to g = [R, S(d)], with the chain's
 * costs: a middle host takes every byte in and sends it on (the busiest link carries the tensor
 * once each way), a middle rank receives and forwards its slice. */
static int chain_stage(ts_plan *p, const ts_attr *row, const ts_attr *g, int root, int hosts,
                       ts_error *err) {
  int rc = stage(p, row, g, TS_STRATEGY_P2P, err);
  if (rc)
    return rc;
  ts_plan *sp = p->stages[p->nstages - 1];
  sp->chain = true;
  sp->chain_root = root;
  int64_t total = (int64_t)p->esize, slice = 0;
  for (int d = 0; d < p->ndim; d++)
    total *= p->shape[d];
  for (int64_t i = 0; i < sp->tgt->attr->nranks; i++) {
    ts_box b;
    ts_geom_index_box(sp->tgt, i, &b);
    int64_t bytes = ts_box_numel(&b) * (int64_t)p->esize;
    slice = bytes > slice ? bytes : slice;
  }
  ts_plan_costs *c = &sp->costs[TS_STRATEGY_P2P];
  int64_t per = sp->tgt->attr->mesh_shape[1],
          pieces = (slice + TS_CHAIN_PIECE - 1) / TS_CHAIN_PIECE;
  c->wire_bytes = c->cross_host_bytes = (hosts - 1) * total;
  c->host_link_bytes = total;
  c->max_rank_bytes = slice;
  c->messages = (hosts - 1) * per * pieces;
  c->rounds = pieces;
  c->peak_extra_bytes = 0;
  c->time_ns = ts__plan_time_ns(sp, c);
  return TS_OK;
}

/* From one host to a replicated target over `hosts` rows: into [S] on row r (the source's own
 * host's row, else row 0), the chain down the columns, the allgather along the rows. */
static int chain_plan(ts_plan *p, const int *order, int hosts, int per, int r, ts_placement S,
                      ts_error *err) {
  ts_placement R = {.kind = TS_PLACE_REPLICATE};
  int64_t shape[1] = {per};
  ts_attr *row = NULL;
  if (ts_attr_create(&row, 1, shape, order + (size_t)r * per, &S, NULL) != TS_OK)
    row = NULL;
  ts_attr *x = grid(order, hosts, per, R, S), *y = grid(order, hosts, per, R, R);
  int rc = row && x && y ? stage(p, p->src->attr, row, TS_STRATEGY_P2P, err)
                         : ts_error_set(err, TS_NO_MEMORY, "no memory for a stage's attribute");
  if (!rc)
    rc = chain_stage(p, row, x, r, hosts, err);
  if (!rc)
    rc = stage(p, x, y, TS_STRATEGY_ALLGATHER, err);
  ts_attr_destroy(&row);
  ts_attr_destroy(&x);
  ts_attr_destroy(&y);
  return rc;
}

/* The row of the grid whose ranks live on host h, or -1. */
static int row_of(const ts_plan *p, const int *order, int hosts, int per, int h) {
  for (int r = 0; r < hosts; r++)
    if (ts_topology_host(p->topo, order[(size_t)r * per]) == h)
      return r;
  return -1;
}

/* The stages of one of the shapes above, or why none applies. */
static int build(ts_plan *p, const int *order, int hosts, int per, const char **why,
                 ts_error *err) {
  const ts_attr *src = p->src->attr, *tgt = p->tgt->attr;
  ts_placement R = {.kind = TS_PLACE_REPLICATE},
               S = {.kind = TS_PLACE_SHARD, .dim = longest_dim(p)};
  ts_reduce_op op;
  ts_attr *x = NULL, *y = NULL, *z = NULL;
  int rc = TS_OK;
  int h0 = single_host(p, src);
  if (all_replicated(tgt) && !any_partial(src) && hosts >= 3 && h0 >= 0) {
    int r = row_of(p, order, hosts, per, h0);
    rc = chain_plan(p, order, hosts, per, r >= 0 ? r : 0, S, err);
  } else if (all_replicated(tgt) && !any_partial(src)) {
    x = grid(order, hosts, per, R, S);
    y = grid(order, hosts, per, R, R);
    if (!(rc = stage(p, src, x, TS_STRATEGY_P2P, err)))
      rc = stage(p, x, y, TS_STRATEGY_ALLGATHER, err);
  } else if (all_partial(src, &op) && p->same_group && any_partial(tgt)) {
    *why = "a partial target (hierarchical takes partial sources to unreduced targets)";
  } else if (all_partial(src, &op) && p->same_group) {
    /* avg: the stages sum; the last one divides once by every contribution (shard/exec.c) */
    ts_placement P = {.kind = TS_PLACE_PARTIAL, .op = op == TS_REDUCE_AVG ? TS_REDUCE_SUM : op};
    x = grid(order, hosts, per, P, P);
    y = grid(order, hosts, per, P, S);
    if (!(rc = stage(p, x, y, TS_STRATEGY_REDUCE_SCATTER, err)) && all_replicated(tgt)) {
      z = grid(order, hosts, per, R, S);
      ts_attr *w = grid(order, hosts, per, R, R);
      if (!(rc = stage(p, y, z, TS_STRATEGY_ALLREDUCE, err)))
        rc = stage(p, z, w, TS_STRATEGY_ALLGATHER, err);
      ts_attr_destroy(&w);
    } else if (!rc) {
      rc = stage(p, y, tgt, TS_STRATEGY_P2P, err);
    }
  } else {
    *why = any_partial(src) ? "the source is partial over only some mesh dims, or with several "
                              "ops, or the groups differ"
                            : "the target is not replicated and the source not partial";
  }
  ts_attr_destroy(&x);
  ts_attr_destroy(&y);
  ts_attr_destroy(&z);
  return rc;
}

bool ts__plan_hier_applies(ts_plan *p, ts_plan_costs *c, const char **why, ts_error *err, int *rc) {
  *rc = TS_OK;
  *why = "";
  if (!p->hosts) {
    *why = "every rank is on one host (hierarchical needs several)";
    return false;
  }
  const ts_attr *by = p->tgt->attr; /* the group the rows are made of */
  if (any_partial(p->src->attr) && !any_partial(by))
    by = p->src->attr;
  int *order = malloc((size_t)by->nranks * sizeof *order), hosts, per;
  if (!order) {
    *rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the hierarchical strategy");
    return false;
  }
  if (host_rows(p, by, order, &hosts, &per) != 0) {
    *why = "the group's hosts hold different numbers of its ranks, or one each";
    free(order);
    return false;
  }
  ts_error serr;
  *rc = build(p, order, hosts, per, why, &serr);
  free(order);
  if (*rc != TS_OK || p->nstages == 0) {
    for (int i = 0; i < p->nstages; i++)
      ts_plan_destroy(&p->stages[i]);
    p->nstages = 0;
    if (*rc == TS_NO_MEMORY)
      ts_error_set(err, *rc, "%s", serr.msg);
    else if (*rc != TS_OK) /* a stage that does not apply: not this strategy */
      *why = "a stage does not apply", *rc = TS_OK;
    return false;
  }
  memset(c, 0, sizeof *c);
  for (int i = 0; i < p->nstages; i++) {
    const ts_plan_costs *s = &p->stages[i]->costs[p->stages[i]->chosen];
    c->wire_bytes += s->wire_bytes;
    c->max_rank_bytes += s->max_rank_bytes;
    c->messages += s->messages;
    c->peak_extra_bytes =
        s->peak_extra_bytes > c->peak_extra_bytes ? s->peak_extra_bytes : c->peak_extra_bytes;
    c->rounds += s->rounds;
    c->host_link_bytes += s->host_link_bytes;
    c->cross_host_bytes += s->cross_host_bytes;
    c->time_ns += s->time_ns;
  }
  /* The stages' results stand beside the source until the last one: the target's size more. */
  int64_t total = (int64_t)p->esize;
  for (int d = 0; d < p->ndim; d++)
    total *= p->shape[d];
  c->peak_extra_bytes += total;
  return true;
}
