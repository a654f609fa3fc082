/* plan_hosts.c - what a plan sends over each host's link, for a topology of several hosts: the
 * bytes that enter and leave every host under each strategy (the busiest host link is what the
 * cost model compares first), and the bound, the fewest bytes that must enter or leave one host
 * whatever the strategy.
 *
 * p2p and alltoall are counted from their transfers (each piece from the source replica the plan
 * chose). The strategies that run as MPI collectives are counted by a model of how Open MPI moves
 * their bytes, since the plan does not choose their pairs:
 *   allgather       every rank receives every source slice it lacks from the slice's owner (per
 *                   line along the gathered mesh dim);
 *   root            every slice to the root, then the whole tensor once into every other host;
 *   allreduce,      per line along a reduced mesh dim, a ring that visits the line's members
 *   reduce_scatter  host by host (comm/ring.c runs every reduction of 1 MiB or more on a
 *                   communicator that spans hosts so): each host's link carries, each way, the
 *                   blocks its last member passes on (all but one of the line's blocks, twice
 *                   for an all-reduce). Smaller reductions take MPI's own algorithms, whose few
 *                   bytes are counted as the ring's. */
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

/* Pieces beyond which p2p's host bytes are an even-spread estimate instead of a count. */
#define EXACT_PIECES_MAX ((int64_t)1 << 20)
/* Cells beyond which the bound is not computed. */
#define BOUND_CELLS_MAX ((int64_t)1 << 22)

typedef struct host_acc {
  int n;
  int64_t *in, *out;
} host_acc;

static int host_of(const ts_plan *p, const ts_geom *g, int64_t mesh_index) {
  return ts_topology_host(p->topo, g->attr->ranks[mesh_index]);
}

static int64_t box_bytes(const ts_plan *p, const ts_geom *g, int64_t mesh_index) {
  ts_box b;
  ts_geom_index_box(g, mesh_index, &b);
  return ts_box_numel(&b) * (int64_t)p->esize;
}

static void move(host_acc *a, int from, int to, int64_t bytes) {
  if (from != to && bytes > 0)
    a->out[from] += bytes, a->in[to] += bytes;
}

static int p2p_exact(ts_plan *p, host_acc *a, ts_error *err) {
  for (int i = 0; i < p->nunion; i++) {
    ts_rank_plan rp;
    int rank = p->union_ranks[i], rc = ts_plan_rank(p, rank, &rp, err);
    if (rc)
      return rc;
    for (int k = 0; k < rp.nrecv; k++)
      if (rp.recv[k].peer != rank)
        move(a, ts_topology_host(p->topo, rp.recv[k].peer), ts_topology_host(p->topo, rank),
             rp.recv[k].bytes);
    ts_rank_plan_clear(&rp);
  }
  return TS_OK;
}

/* Each receiver's bytes, spread over the source ranks' hosts in proportion to their ranks. */
static int p2p_estimate(ts_plan *p, host_acc *a, ts_error *err) {
  const ts_geom *sg = p->src, *tg = p->tgt;
  int64_t *src_on = calloc((size_t)a->n, sizeof(int64_t));
  int64_t *recv_on = calloc((size_t)a->n, sizeof(int64_t)); /* bytes received by host */
  if (!src_on || !recv_on) {
    free(src_on), free(recv_on);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for host costs");
  }
  for (int64_t si = 0; si < sg->attr->nranks; si++)
    src_on[host_of(p, sg, si)]++;
  int64_t nsrc = sg->attr->nranks, es = (int64_t)p->esize, all = 0;
  for (int64_t ti = 0; ti < tg->attr->nranks; ti++) {
    if (!ts__plan_receiver(p, ti))
      continue;
    ts_box box, own, local;
    ts_geom_index_box(tg, ti, &box);
    int rank = tg->attr->ranks[ti], h = ts_topology_host(p->topo, rank);
    int64_t bytes = ts_box_numel(&box) * sg->npartial * es;
    if (ts_geom_rank_box(sg, rank, &own) && ts_box_intersect(&own, &box, &local))
      bytes -= ts_box_numel(&local) * es;
    a->in[h] += bytes / nsrc * (nsrc - src_on[h]);
    recv_on[h] += bytes, all += bytes;
  }
  for (int g = 0; g < a->n; g++)
    a->out[g] += (all - recv_on[g]) / nsrc * src_on[g];
  free(src_on), free(recv_on);
  return TS_OK;
}

/* Members (mesh indices) of a line along mesh dim m through base, with their hosts and bytes. */
typedef struct member {
  int host;
  int64_t bytes;
} member;

static int cmp_member(const void *x, const void *y) {
  const member *a = x, *b = y;
  return (a->host > b->host) - (a->host < b->host);
}

/* An all-to-all gather among ms[0..k): each member receives every other member's block. */
static void gather_group(host_acc *a, member *ms, int64_t k) {
  int64_t total = 0;
  for (int64_t i = 0; i < k; i++)
    total += ms[i].bytes;
  qsort(ms, (size_t)k, sizeof *ms, cmp_member);
  for (int64_t i = 0; i < k;) {
    int64_t j = i, on = 0;
    while (j < k && ms[j].host == ms[i].host)
      on += ms[j++].bytes;
    int h = ms[i].host;
    a->in[h] += (j - i) * (total - on);
    a->out[h] += on * (k - (j - i));
    i = j;
  }
}

static int allgather_hosts(ts_plan *p, host_acc *a, ts_error *err) {
  const ts_geom *sg = p->src;
  int64_t n = sg->attr->nranks;
  member *ms = malloc((size_t)n * sizeof *ms);
  if (!ms)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for host costs");
  if (p->gather_dim < 0) { /* the whole group: the replica-0 slices to every rank */
    for (int64_t si = 0; si < n; si++) {
      int64_t parts[TS_MAX_DIMS], rep;
      ts__geom_decompose(sg, si, parts, &rep, NULL);
      ms[si].host = host_of(p, sg, si);
      ms[si].bytes = rep == 0 ? box_bytes(p, sg, si) : 0;
    }
    gather_group(a, ms, n);
  } else {
    int m = p->gather_dim;
    int64_t stride = sg->mesh_stride[m], pm = sg->attr->mesh_shape[m];
    for (int64_t base = 0; base < n; base++) {
      if ((base / stride) % pm != 0)
        continue;
      for (int64_t k = 0; k < pm; k++) {
        ms[k].host = host_of(p, sg, base + k * stride);
        ms[k].bytes = box_bytes(p, sg, base + k * stride);
      }
      gather_group(a, ms, pm);
    }
  }
  free(ms);
  return TS_OK;
}

static void root_hosts(ts_plan *p, host_acc *a) {
  const ts_geom *sg = p->src;
  int hr = ts_topology_host(p->topo, p->union_ranks[0]);
  int64_t total = (int64_t)p->esize;
  for (int d = 0; d < p->ndim; d++)
    total *= p->shape[d];
  for (int64_t si = 0; si < sg->attr->nranks; si++) {
    int64_t parts[TS_MAX_DIMS], rep;
    ts__geom_decompose(sg, si, parts, &rep, NULL);
    if (rep == 0)
      move(a, host_of(p, sg, si), hr, box_bytes(p, sg, si));
  }
  bool *fed = calloc((size_t)a->n, sizeof *fed);
  for (int i = 0; fed && i < p->nunion; i++) {
    int h = ts_topology_host(p->topo, p->union_ranks[i]);
    if (h != hr && !fed[h])
      fed[h] = true, move(a, hr, h, total);
  }
  free(fed);
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* The block member k of a line reduces: its target box (reduce-scatter), or its share of the
 * slice split evenly by elements (all-reduce, as comm/ring.c splits it). */
static int64_t ring_block(const ts_plan *p, int64_t i, int64_t k, int64_t pm, int64_t total,
                          bool allreduce) {
  if (!allreduce)
    return box_bytes(p, p->tgt, i);
  int64_t n = total / (int64_t)p->esize;
  return (n / pm + (k < n % pm)) * (int64_t)p->esize;
}

/* Lines along mesh dim m, reduced around a ring that visits the line's members host by host
 * (hosts in the order of their lowest rank, members by mesh index, as comm/ring.c orders them):
 * each member passes on every block but its own (the reduce-scatter) and, in an all-reduce, then
 * every block but the next member's (the all-gather). Only the edges between hosts cross a link.
 * key: scratch for the line's members. */
static void line_rings(ts_plan *p, host_acc *a, int m, bool allreduce, const int *host_low,
                       int64_t *key) {
  const ts_geom *sg = p->src;
  int64_t n = sg->attr->nranks, stride = sg->mesh_stride[m], pm = sg->attr->mesh_shape[m];
  for (int64_t base = 0; base < n; base++) {
    if ((base / stride) % pm != 0)
      continue;
    bool span = false;
    int64_t total = allreduce ? box_bytes(p, sg, base) : 0;
    for (int64_t k = 0; k < pm; k++) {
      int h = host_of(p, sg, base + k * stride);
      span |= h != host_of(p, sg, base);
      key[k] = (int64_t)host_low[h] * pm + k;
      total += allreduce ? 0 : box_bytes(p, p->tgt, base + k * stride);
    }
    if (!span)
      continue;
    qsort(key, (size_t)pm, sizeof *key, cmp_i64);
    for (int64_t q = 0; q < pm; q++) {
      int64_t k = key[q] % pm, kn = key[(q + 1) % pm] % pm;
      int64_t i = base + k * stride, in = base + kn * stride;
      int64_t bytes = total - ring_block(p, i, k, pm, total, allreduce);
      if (allreduce)
        bytes += total - ring_block(p, in, kn, pm, total, allreduce);
      move(a, host_of(p, sg, i), host_of(p, sg, in), bytes);
    }
  }
}

static int reductions(ts_plan *p, ts_strategy s, host_acc *a, ts_error *err) {
  int nr = ts_topology_nranks(p->topo);
  int *host_low = malloc((size_t)a->n * sizeof *host_low);
  int64_t *key = malloc((size_t)p->src->attr->nranks * sizeof *key);
  if (!host_low || !key) {
    free(host_low), free(key);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for host costs");
  }
  for (int h = 0; h < a->n; h++)
    host_low[h] = nr;
  for (int r = nr - 1; r >= 0; r--)
    host_low[ts_topology_host(p->topo, r)] = r;
  if (s == TS_STRATEGY_REDUCE_SCATTER)
    line_rings(p, a, p->rs_dim, false, host_low, key);
  for (int m = 0; s == TS_STRATEGY_ALLREDUCE && m < p->src->attr->mesh_ndim; m++)
    if (p->src->attr->place[m].kind == TS_PLACE_PARTIAL &&
        p->tgt->attr->place[m].kind == TS_PLACE_REPLICATE)
      line_rings(p, a, m, true, host_low, key);
  free(host_low);
  free(key);
  return TS_OK;
}

int ts__plan_host_costs(ts_plan *p, ts_strategy s, ts_plan_costs *c, ts_error *err) {
  host_acc a = {ts_topology_nhosts(p->topo), NULL, NULL};
  a.in = calloc((size_t)a.n, sizeof(int64_t));
  a.out = calloc((size_t)a.n, sizeof(int64_t));
  int rc = a.in && a.out ? TS_OK : ts_error_set(err, TS_NO_MEMORY, "no memory for host costs");
  if (!rc && (s == TS_STRATEGY_P2P || s == TS_STRATEGY_ALLTOALL))
    rc = p->costs[TS_STRATEGY_P2P].messages <= EXACT_PIECES_MAX ? p2p_exact(p, &a, err)
                                                                : p2p_estimate(p, &a, err);
  else if (!rc && s == TS_STRATEGY_ALLGATHER)
    rc = allgather_hosts(p, &a, err);
  else if (!rc && s == TS_STRATEGY_ROOT)
    root_hosts(p, &a);
  else if (!rc && (s == TS_STRATEGY_REDUCE_SCATTER || s == TS_STRATEGY_ALLREDUCE))
    rc = reductions(p, s, &a, err);
  c->host_link_bytes = c->cross_host_bytes = 0;
  for (int h = 0; !rc && h < a.n; h++) {
    int64_t busiest = a.in[h] > a.out[h] ? a.in[h] : a.out[h];
    if (busiest > c->host_link_bytes)
      c->host_link_bytes = busiest;
    c->cross_host_bytes += a.in[h];
  }
  free(a.in), free(a.out);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The bound, over the cells that the source and target split points cut the tensor into */

/* Sorted, distinct split points of dim d of both attributes (a merge of two sorted lists);
 * count returned. */
static int64_t cell_points(const ts_plan *p, int d, int64_t *pts) {
  const int64_t *x = ts_geom_offsets(p->src, d), *y = ts_geom_offsets(p->tgt, d);
  int64_t nx = ts_geom_parts(p->src, d) + 1, ny = ts_geom_parts(p->tgt, d) + 1;
  int64_t i = 0, j = 0, n = 0;
  while (i < nx || j < ny) {
    int64_t v = j >= ny || (i < nx && x[i] <= y[j]) ? x[i++] : y[j++];
    if (n == 0 || pts[n - 1] != v)
      pts[n++] = v;
  }
  return n;
}

typedef struct bound_work {
  size_t nh;
  int64_t *in, *out; /* per host; in counts what a host needs, less what it holds (full) */
  int64_t *full;     /* per host: bytes of cells it needs and can make itself */
  int64_t *held;     /* per host: contributions (partial indices) of the source part held there */
  int64_t *stamp;    /* per host: the last partial index counted in held */
  bool *needs;       /* per host: a target rank there needs the target part */
  int *need_list, nneed; /* the hosts with needs set */
  int *hold_list, nhold; /* the hosts with held > 0 */
  int *owe_list, nowe;   /* the hosts that alone hold a contribution another host needs */
  int64_t tp_bytes;      /* bytes of the cells of the current target part */
  /* The part tuples the lists are for: the cells of one part share them. */
  int64_t tp[TS_MAX_DIMS], sp[TS_MAX_DIMS];
  bool have_tp, have_sp;
} bound_work;

/* The part of dim d (of g's parts) that holds coordinate x: the last split point at or below it. */
static int64_t part_of(const ts_geom *g, int d, int64_t x) {
  const int64_t *off = ts_geom_offsets(g, d);
  int64_t a = 0, b = ts_geom_parts(g, d) - 1;
  while (a < b) {
    int64_t mid = a + (b - a + 1) / 2;
    if (off[mid] <= x)
      a = mid;
    else
      b = mid - 1;
  }
  return a;
}

static bool same_parts(const int64_t *a, const int64_t *b, int n) {
  return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* The bytes of the finished target part go to every host that needs it. */
static void flush_target(bound_work *w) {
  for (int i = 0; i < w->nneed; i++)
    w->in[w->need_list[i]] += w->tp_bytes;
  w->tp_bytes = 0;
}

/* The hosts that need target part tp (its receivers: partial index 0, or along P(avg) mesh dims
 * every coordinate). */
static void bound_needs(const ts_plan *p, const int64_t *tp, bound_work *w) {
  const ts_geom *tg = p->tgt;
  flush_target(w);
  for (int i = 0; i < w->nneed; i++)
    w->needs[w->need_list[i]] = false;
  w->nneed = 0;
  for (int64_t k = 0; k < tg->nrep * tg->npartial; k++) {
    int64_t ti = ts__geom_compose(tg, tp, k % tg->nrep, k / tg->nrep);
    if (k >= tg->nrep && !ts__plan_receiver(p, ti))
      continue;
    int h = host_of(p, tg, ti);
    if (!w->needs[h])
      w->needs[h] = true, w->need_list[w->nneed++] = h;
  }
}

/* The contributions of source part sp each host holds, and the hosts that alone hold one that
 * another host needs. */
static void bound_holders(const ts_plan *p, const int64_t *sp, bound_work *w) {
  const ts_geom *sg = p->src;
  for (int i = 0; i < w->nhold; i++)
    w->held[w->hold_list[i]] = 0, w->stamp[w->hold_list[i]] = -1;
  w->nhold = w->nowe = 0;
  for (int64_t k = 0; k < sg->npartial; k++) {
    int only = -1;
    for (int64_t r = 0; r < sg->nrep; r++) {
      int h = host_of(p, sg, ts__geom_compose(sg, sp, r, k));
      only = only == -1 || only == h ? h : -2;
      if (w->held[h] == 0)
        w->hold_list[w->nhold++] = h;
      if (w->stamp[h] != k)
        w->stamp[h] = k, w->held[h]++;
    }
    bool listed = false;
    for (int i = 0; only >= 0 && i < w->nowe && !listed; i++)
      listed = w->owe_list[i] == only;
    if (only >= 0 && !listed && w->nneed > (w->needs[only] ? 1 : 0))
      w->owe_list[w->nowe++] = only;
  }
}

/* One cell (inside one source part and one target part): a host that needs it and lacks some
 * contribution receives its value once; a host that alone holds a contribution some other host
 * needs sends once (contributions of one host are reduced there first). */
static void bound_cell(const ts_plan *p, const ts_box *cell, bound_work *w) {
  int64_t bytes = ts_box_numel(cell) * (int64_t)p->esize, sp[TS_MAX_DIMS], tp[TS_MAX_DIMS];
  if (bytes == 0)
    return;
  for (int d = 0; d < p->ndim; d++)
    sp[d] = part_of(p->src, d, cell->lo[d]), tp[d] = part_of(p->tgt, d, cell->lo[d]);
  bool new_tp = !w->have_tp || !same_parts(tp, w->tp, p->ndim);
  if (new_tp) {
    bound_needs(p, tp, w);
    memcpy(w->tp, tp, sizeof tp);
    w->have_tp = true;
  }
  if (new_tp || !w->have_sp || !same_parts(sp, w->sp, p->ndim)) {
    bound_holders(p, sp, w);
    memcpy(w->sp, sp, sizeof sp);
    w->have_sp = true;
  }
  w->tp_bytes += bytes;
  for (int i = 0; i < w->nhold; i++) {
    int h = w->hold_list[i];
    if (w->needs[h] && w->held[h] == p->src->npartial)
      w->full[h] += bytes;
  }
  for (int i = 0; i < w->nowe; i++)
    w->out[w->owe_list[i]] += bytes;
}

int64_t ts__plan_host_bound(const ts_plan *p) {
  size_t nh = (size_t)ts_topology_nhosts(p->topo);
  int64_t ncells = 1, *pts[TS_MAX_DIMS] = {0}, npts[TS_MAX_DIMS], bound = -1;
  bound_work w = {.nh = nh};
  w.in = calloc(nh, sizeof(int64_t)), w.out = calloc(nh, sizeof(int64_t));
  w.full = calloc(nh, sizeof(int64_t)), w.held = calloc(nh, sizeof(int64_t));
  w.stamp = malloc(nh * sizeof(int64_t)), w.needs = calloc(nh, sizeof(bool));
  w.need_list = malloc(nh * sizeof(int)), w.hold_list = malloc(nh * sizeof(int));
  w.owe_list = malloc(nh * sizeof(int));
  bool ok = w.in && w.out && w.full && w.held && w.stamp && w.needs && w.need_list && w.hold_list &&
            w.owe_list;
  for (size_t h = 0; ok && h < nh; h++)
    w.stamp[h] = -1;
  for (int d = 0; ok && d < p->ndim; d++) {
    int64_t cap = ts_geom_parts(p->src, d) + ts_geom_parts(p->tgt, d) + 2;
    ok = (pts[d] = malloc((size_t)cap * sizeof(int64_t))) != NULL;
    if (ok) {
      npts[d] = cell_points(p, d, pts[d]);
      ncells *= npts[d] - 1 > 0 ? npts[d] - 1 : 0;
      ok = ncells <= BOUND_CELLS_MAX;
    }
  }
  int64_t at[TS_MAX_DIMS] = {0};
  for (int64_t c = 0; ok && c < ncells; c++) {
    ts_box cell = {.ndim = p->ndim};
    for (int d = 0; d < p->ndim; d++)
      cell.lo[d] = pts[d][at[d]], cell.hi[d] = pts[d][at[d] + 1];
    bound_cell(p, &cell, &w);
    for (int d = p->ndim - 1; d >= 0 && ++at[d] == npts[d] - 1; d--)
      at[d] = 0;
  }
  if (ok)
    flush_target(&w);
  for (size_t h = 0; ok && h < nh; h++) {
    int64_t in = w.in[h] - w.full[h], b = in > w.out[h] ? in : w.out[h];
    bound = b > bound ? b : bound;
  }
  for (int d = 0; d < p->ndim; d++)
    free(pts[d]);
  free(w.in), free(w.out), free(w.full), free(w.held), free(w.stamp), free(w.needs);
  free(w.need_list), free(w.hold_list), free(w.owe_list);
  return ok ? (bound < 0 ? 0 : bound) : -1;
}
