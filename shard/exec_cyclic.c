/* exec_cyclic.c - the executor of plans with a block-cyclic side (p2p and all-to-all, the only
 * strategies such a plan has: plan_cyclic.c).
 *
 * A rank's data on either side is its local array: per tensor dim the elements it owns in global
 * order (ScaLAPACK's local order for a block-cyclic dim, the box's own range for a split dim),
 * row-major over those extents, plain (no blocked layout). What a source rank and a target rank
 * share is the product of the dims' shared runs (ts_overlay); ts_cyclic_pair_move copies it
 * between two local arrays, or packs and unpacks it in an order both ends compute alike.
 *
 * Between two ranks, what they share is usually a few regular patterns: per dim, runs of one
 * length at constant steps in both local arrays (blocks of NB dealt round-robin). Each pattern
 * of every dim's runs is one strided region on each side (a dim's runs become two region dims:
 * the run and the element within it), and the pair's regions move with ts_comm_exchange_many:
 * single copies from the source's array into the target's where the ranks share a node, no
 * pack, no unpack, no staging. A pair whose runs make too many regions, or regions too small
 * (irregular edges, tiny blocks), is packed instead; both ends decide alike from the same runs.
 *
 * Who sends: every target rank takes each source part tuple it shares something with from one
 * replica of it, its own rank's when that rank holds the tuple, else replica (target index mod
 * replicas), so the replicas share the work; both ends compute the same choice. Partial
 * placements are refused (reshard them to R or S first); the packed pieces of one rank move in
 * one exchange (its staging is what it sends and receives).
 *
 * Atomicity as in exec.c: everything that can fail (the target array, the packed pieces, the
 * exchange's lists) happens before one agreement over the union (or the world with
 * agree_world), the exchange after it, and a commit agreement at the end; on failure every rank
 * returns the same error and keeps its tensor. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "ts_wait.h"

#define CYCLIC_TAG 31100 /* beside the coalesced exchange's tag */

typedef struct piece {
  int peer;      /* world rank */
  int64_t index; /* the peer's target index (sends) or source index (receives) */
  int64_t bytes;
  void *buf;           /* packed; NULL for this rank's own piece and for regions */
  ts_comm_region *reg; /* the piece as strided regions of this rank's local array, or NULL */
  int nreg;
} piece;

/* A pair moves as regions when it makes at most this many, of this many bytes on average. */
#define REGIONS_MAX 256
#define REGION_MIN_BYTES ((int64_t)16 << 10)

/* Runs of one dim at constant steps: n runs of len, at s0 + i * ss in the source's local array
 * and t0 + i * ts in the target's. */
typedef struct pattern {
  int64_t n, len, s0, ss, t0, ts;
} pattern;

typedef struct cyc {
  const ts_plan *p;
  int me;
  int64_t si, ti; /* this rank's source and target mesh indexes (-1: none) */
  int64_t sp[TS_MAX_DIMS], tp[TS_MAX_DIMS], rep;
  piece *send, *recv;
  int nsend, nrecv;
  int64_t sent, received;
  int64_t staged; /* bytes of the packed pieces' buffers */
  /* the exchange's lists, made before the agreement, sends first then receives, each with its
   * comm rank: the packed pieces (ns sends, nr receives) and every region of the others (nsreg,
   * nrreg) */
  int *peers;
  void **bufs;
  int64_t *bytes;
  int ns, nr;
  ts_comm_region *regs;
  int *reg_peers;
  int nsreg, nrreg;
  ts_tensor tgt;
  int lst;
  ts_error lerr;
} cyc;

static void fail(cyc *c, int code, const char *what) {
  if (c->lst == TS_OK)
    c->lst = ts_error_set(&c->lerr, code, "%s", what);
}

static int64_t shared(const ts_plan *p, const int64_t *sp, const int64_t *tp) {
  int64_t n = 1;
  for (int d = 0; d < p->ndim && n > 0; d++)
    n *= ts_overlay_pair_len(p->overlay[d], sp[d], tp[d]);
  return n;
}

/* The replica of source part tuple sp that target index ti takes it from. */
static int64_t chosen_replica(const ts_plan *p, int64_t ti, const int64_t *sp) {
  int64_t s = ts_geom_mesh_index(p->src, p->tgt->attr->ranks[ti]);
  if (s >= 0) {
    int64_t own[TS_MAX_DIMS], rep, par;
    ts__geom_decompose(p->src, s, own, &rep, &par);
    if (memcmp(own, sp, sizeof(int64_t) * (size_t)p->ndim) == 0)
      return rep;
  }
  return ti % p->src->nrep;
}

/* What a plan with a block-cyclic side cannot move, or NULL. */
static const char *unsupported(const ts_plan *p, const ts_tensor *src, const char *tgt_tag) {
  if (p->src->npartial > 1 || p->tgt->npartial > 1)
    return "a block-cyclic reshard with a partial placement (reshard the partial dims to R or "
           "S first)";
  if (tgt_tag && tgt_tag[0])
    return "a block-cyclic reshard into a blocked layout (its local arrays are row-major)";
  if (src && src->layout.n_inner != 0)
    return "a block-cyclic reshard of a blocked slice (its local arrays are row-major)";
  return NULL;
}

/* The slice of this rank's target holding: its local extents, row-major. */
static int make_target(cyc *c) {
  const ts_plan *p = c->p;
  int64_t shape[TS_MAX_DIMS], n = 1;
  for (int d = 0; d < p->ndim; d++)
    n *= shape[d] = ts_overlay_tgt_extent(p->overlay[d], c->tp[d]);
  ts_error e;
  if (ts_layout_plain(&c->tgt.layout, p->dtype, p->ndim, shape, &e))
    return ts_error_set(&c->lerr, e.code, "%s", e.msg);
  c->tgt.bytes = (size_t)n * p->esize;
  if (n == 0)
    return TS_OK;
  c->tgt.data = ts_shard_alloc_as(c->tgt.bytes, 0, "the new block-cyclic slice", &e);
  return c->tgt.data ? TS_OK : ts_error_set(&c->lerr, e.code, "%s", e.msg);
}

/* This rank's sends: to every receiving target rank that takes a tuple from this replica. */
static int list_sends(cyc *c) {
  const ts_plan *p = c->p;
  int64_t n = p->tgt->attr->nranks;
  c->send = calloc((size_t)n, sizeof *c->send);
  if (!c->send)
    return ts_error_set(&c->lerr, TS_NO_MEMORY, "no memory for the block-cyclic sends");
  for (int64_t ti = 0; ti < n; ti++) {
    int64_t tp[TS_MAX_DIMS], rep, par;
    ts__geom_decompose(p->tgt, ti, tp, &rep, &par);
    int64_t k = shared(p, c->sp, tp);
    if (k == 0 || chosen_replica(p, ti, c->sp) != c->rep)
      continue;
    c->send[c->nsend++] =
        (piece){.peer = p->tgt->attr->ranks[ti], .index = ti, .bytes = k * (int64_t)p->esize};
  }
  return TS_OK;
}

/* This rank's receives: from the chosen replica of every source tuple it shares something with. */
static int list_recvs(cyc *c) {
  const ts_plan *p = c->p;
  int64_t n = p->src->attr->nranks;
  c->recv = calloc((size_t)n, sizeof *c->recv);
  if (!c->recv)
    return ts_error_set(&c->lerr, TS_NO_MEMORY, "no memory for the block-cyclic receives");
  for (int64_t si = 0; si < n; si++) {
    int64_t sp[TS_MAX_DIMS], rep, par;
    ts__geom_decompose(p->src, si, sp, &rep, &par);
    int64_t k = shared(p, sp, c->tp);
    if (k == 0 || rep != chosen_replica(p, c->ti, sp))
      continue;
    c->recv[c->nrecv++] =
        (piece){.peer = p->src->attr->ranks[si], .index = si, .bytes = k * (int64_t)p->esize};
  }
  return TS_OK;
}

static int64_t *parts_of(const ts_geom *g, int64_t index, int64_t *parts) {
  int64_t rep, par;
  ts__geom_decompose(g, index, parts, &rep, &par);
  return parts;
}

/* The comm rank of a world rank in the agreements' communicator. */
static int comm_rank(const ts_plan *p, bool world, int rank) {
  return world ? rank : ts__plan_union_pos(p, rank);
}

/* The runs of one dim grouped into patterns (out: room for nruns); returns how many. */
static int64_t dim_patterns(const ts_run *r, int64_t nruns, pattern *out) {
  int64_t np = 0;
  for (int64_t k = 0; k < nruns;) {
    pattern g = {1, r[k].len, r[k].src_local, 0, r[k].tgt_local, 0};
    if (k + 1 < nruns && r[k + 1].len == g.len) {
      g.ss = r[k + 1].src_local - g.s0, g.ts = r[k + 1].tgt_local - g.t0, g.n = 2;
      while (k + g.n < nruns && r[k + g.n].len == g.len &&
             r[k + g.n].src_local == g.s0 + g.n * g.ss && r[k + g.n].tgt_local == g.t0 + g.n * g.ts)
        g.n++;
    }
    out[np++] = g;
    k += g.n;
  }
  return np;
}

/* Appends a dim of count elements at strides (bytes) ss, ts to both regions, merged into the
 * previous dim where that is contiguous on both sides; false when there is no room. */
static bool region_dim(ts_comm_region *a, ts_comm_region *b, int64_t count, int64_t ss,
                       int64_t ts) {
  if (count == 1)
    return true;
  int k = a->ndim;
  if (k > 0 && a->stride[k - 1] == count * ss && b->stride[k - 1] == count * ts) {
    a->count[k - 1] *= count, a->stride[k - 1] = ss;
    b->count[k - 1] *= count, b->stride[k - 1] = ts;
    return true;
  }
  if (k == TS_MAX_DIMS)
    return false;
  a->count[k] = b->count[k] = count;
  a->stride[k] = ss, b->stride[k] = ts;
  a->ndim = b->ndim = k + 1;
  return true;
}

/* The region pair of one pattern per dim (pick[d] of pat[d]): its bytes, or -1 when it has too
 * many dims or too many bytes for one region. */
static int64_t pattern_region(int ndim, pattern *const *pat, const int64_t *pick,
                              const int64_t *sst, const int64_t *tst, int64_t esize,
                              ts_comm_region *a, ts_comm_region *b) {
  int64_t so = 0, to = 0, bytes = esize;
  *a = *b = (ts_comm_region){.esize = esize};
  for (int d = 0; d < ndim; d++) {
    const pattern *g = &pat[d][pick[d]];
    so += g->s0 * sst[d], to += g->t0 * tst[d];
    bytes *= g->n * g->len;
    if (!region_dim(a, b, g->n, g->ss * sst[d], g->ts * tst[d]) ||
        !region_dim(a, b, g->len, sst[d], tst[d]))
      return -1;
  }
  /* The innermost dim is contiguous on both sides: one element of its bytes. */
  int k = a->ndim - 1;
  if (k >= 0 && a->stride[k] == esize && b->stride[k] == esize) {
    a->esize = b->esize = esize * a->count[k];
    a->ndim = b->ndim = k;
  }
  a->base = (void *)(uintptr_t)so, b->base = (void *)(uintptr_t)to; /* offsets until placed */
  return bytes <= INT_MAX ? bytes : -1;
}

/* The shared elements of source parts sp and target parts tp as regions of the source's (mine:
 * false) or the target's (true) local array at base: *out (malloc'd) and *n; 0, 1 when the
 * pair is better packed, -1 out of memory. Both ends compute the same regions in one order. */
static int pair_regions(const ts_plan *p, const int64_t *sp, const int64_t *tp, bool target,
                        char *base, ts_comm_region **out, int *n) {
  int nd = p->ndim;
  int64_t sst[TS_MAX_DIMS], tst[TS_MAX_DIMS], np[TS_MAX_DIMS], total = 1, ss = p->esize,
                                                               ts = p->esize;
  pattern *pat[TS_MAX_DIMS] = {0};
  ts_comm_region *reg = NULL;
  int rc = 1, count = 0;
  for (int d = nd - 1; d >= 0; d--) {
    sst[d] = ss, tst[d] = ts;
    ss *= ts_overlay_src_extent(p->overlay[d], sp[d]);
    ts *= ts_overlay_tgt_extent(p->overlay[d], tp[d]);
  }
  for (int d = 0; d < nd; d++) {
    int64_t nr = ts_overlay_pair_count(p->overlay[d], sp[d], tp[d]);
    ts_run *runs = malloc((size_t)(nr > 0 ? nr : 1) * sizeof *runs);
    pat[d] = malloc((size_t)(nr > 0 ? nr : 1) * sizeof *pat[d]);
    if (!runs || !pat[d]) {
      free(runs);
      rc = -1;
      goto out;
    }
    ts_overlay_pair_runs(p->overlay[d], sp[d], tp[d], 0, runs, nr);
    np[d] = dim_patterns(runs, nr, pat[d]);
    free(runs);
    total *= np[d];
    if (total > REGIONS_MAX)
      goto out;
  }
  if (nd == 0 || total == 0 || !(reg = malloc((size_t)total * sizeof *reg))) {
    rc = nd == 0 || total == 0 ? 1 : -1;
    goto out;
  }
  int64_t pick[TS_MAX_DIMS] = {0}, bytes = 0;
  for (; count < total; count++) {
    ts_comm_region a, b;
    int64_t rb = pattern_region(nd, pat, pick, sst, tst, p->esize, &a, &b);
    if (rb < 0)
      goto out;
    reg[count] = target ? b : a;
    reg[count].base = base + (uintptr_t)reg[count].base;
    bytes += rb;
    for (int d = nd - 1; d >= 0 && ++pick[d] == np[d]; d--)
      pick[d] = 0;
  }
  if (bytes / total >= REGION_MIN_BYTES) {
    *out = reg, *n = count;
    reg = NULL;
    rc = 0;
  }
out:
  free(reg);
  for (int d = 0; d < nd; d++)
    free(pat[d]);
  return rc;
}

/* Packs the sends to other ranks and makes the receive buffers (before the agreement). */
static int prepare(cyc *c, const ts_tensor *src) {
  const ts_plan *p = c->p;
  for (int i = 0; i < c->nsend; i++) {
    piece *x = &c->send[i];
    if (x->peer == c->me)
      continue;
    ts_error e;
    int64_t tp[TS_MAX_DIMS];
    int r =
        pair_regions(p, c->sp, parts_of(p->tgt, x->index, tp), false, src->data, &x->reg, &x->nreg);
    if (r < 0)
      return ts_error_set(&c->lerr, TS_NO_MEMORY, "no memory for a block-cyclic piece's regions");
    if (r == 0)
      continue;
    if (!(x->buf =
              ts_shard_alloc_as((size_t)x->bytes, TS_POOL_STAGING, "a block-cyclic piece", &e)))
      return ts_error_set(&c->lerr, e.code, "%s", e.msg);
    c->staged += x->bytes;
    if (ts_cyclic_pair_move(p->ndim, p->overlay, c->sp, parts_of(p->tgt, x->index, tp), p->esize,
                            src->data, x->buf, TS_CYCLIC_PACK) < 0)
      return ts_error_set(&c->lerr, TS_NO_MEMORY, "no memory to pack a block-cyclic piece");
  }
  for (int i = 0; i < c->nrecv; i++) {
    piece *x = &c->recv[i];
    ts_error e;
    if (x->peer == c->me)
      continue;
    int64_t sp[TS_MAX_DIMS];
    int r = pair_regions(p, parts_of(p->src, x->index, sp), c->tp, true, c->tgt.data, &x->reg,
                         &x->nreg);
    if (r < 0)
      return ts_error_set(&c->lerr, TS_NO_MEMORY, "no memory for a block-cyclic piece's regions");
    if (r == 1 && !(x->buf = ts_shard_alloc_as((size_t)x->bytes, TS_POOL_STAGING,
                                               "a block-cyclic piece", &e)))
      return ts_error_set(&c->lerr, e.code, "%s", e.msg);
    c->staged += x->buf ? x->bytes : 0;
  }
  return TS_OK;
}

/* The exchange's lists (a pair's regions in their one order), and the bytes each way. */
static int list_exchange(cyc *c, bool world) {
  for (int i = 0; i < c->nsend; i++)
    c->nsreg += c->send[i].nreg;
  for (int i = 0; i < c->nrecv; i++)
    c->nrreg += c->recv[i].nreg;
  size_t n = (size_t)(c->nsend + c->nrecv) + 1, nreg = (size_t)(c->nsreg + c->nrreg) + 1;
  c->peers = malloc(sizeof *c->peers * n);
  c->bufs = malloc(sizeof *c->bufs * n);
  c->bytes = malloc(sizeof *c->bytes * n);
  c->reg_peers = malloc(sizeof *c->reg_peers * nreg);
  c->regs = malloc(sizeof *c->regs * nreg);
  if (!c->peers || !c->bufs || !c->bytes || !c->reg_peers || !c->regs)
    return ts_error_set(&c->lerr, TS_NO_MEMORY, "no memory for the block-cyclic exchange");
  int k = 0;
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < (side ? c->nrecv : c->nsend); i++) {
      const piece *x = side ? &c->recv[i] : &c->send[i];
      int peer = comm_rank(c->p, world, x->peer);
      for (int j = 0; j < x->nreg; j++, k++)
        c->reg_peers[k] = peer, c->regs[k] = x->reg[j];
      if (x->buf) {
        int at = side ? c->ns + c->nr++ : c->ns++;
        c->peers[at] = peer, c->bufs[at] = x->buf, c->bytes[at] = x->bytes;
      }
      *(side ? &c->received : &c->sent) += x->buf || x->nreg ? x->bytes : 0;
    }
  return TS_OK;
}

static int exchange(cyc *c, ts_comm *comm, const ts_tensor *src, ts_error *err) {
  const ts_plan *p = c->p;
  int rc = ts_comm_exchange(comm, c->ns, c->peers, c->bufs, c->bytes, c->nr, c->peers + c->ns,
                            c->bufs + c->ns, c->bytes + c->ns, CYCLIC_TAG, err);
  if (rc == TS_OK)
    rc = ts_comm_exchange_many(comm, c->nsreg, c->reg_peers, c->regs, c->nrreg,
                               c->reg_peers + c->nsreg, c->regs + c->nsreg, CYCLIC_TAG + 1, err);
  if (rc)
    return rc;
  for (int i = 0; i < c->nrecv; i++) {
    piece *x = &c->recv[i];
    if (x->reg)
      continue;
    int64_t sp[TS_MAX_DIMS];
    parts_of(p->src, x->index, sp);
    const void *from = x->buf ? x->buf : src->data;
    if (ts_cyclic_pair_move(p->ndim, p->overlay, sp, c->tp, p->esize, from, c->tgt.data,
                            x->buf ? TS_CYCLIC_UNPACK : TS_CYCLIC_COPY) < 0)
      fail(c, TS_NO_MEMORY, "no memory to unpack a block-cyclic piece");
  }
  return TS_OK;
}

static void cyc_free(cyc *c, bool keep_target) {
  for (int i = 0; c->send && i < c->nsend; i++) {
    ts_shard_free(c->send[i].buf);
    free(c->send[i].reg);
  }
  for (int i = 0; c->recv && i < c->nrecv; i++) {
    ts_shard_free(c->recv[i].buf);
    free(c->recv[i].reg);
  }
  free(c->send);
  free(c->recv);
  free(c->peers);
  free(c->bufs);
  free(c->bytes);
  free(c->regs);
  free(c->reg_peers);
  if (!keep_target)
    ts_shard_free(c->tgt.data);
}

/* This rank's part before the agreement: its positions, the target array, the pieces (world:
 * the agreements and the exchange run over the world's communicator). */
static void prepare_rank(cyc *c, const ts_tensor *src, const char *tgt_tag, bool world) {
  const ts_plan *p = c->p;
  const char *why = unsupported(p, src, tgt_tag);
  if (why) {
    fail(c, TS_UNSUPPORTED, why);
    return;
  }
  if (c->si >= 0) {
    int64_t par;
    ts__geom_decompose(p->src, c->si, c->sp, &c->rep, &par);
    int64_t held = ts__plan_cyclic_held(p->src, c->sp);
    if (!src || src->bytes != (size_t)held * p->esize)
      fail(c, TS_INVALID_ARGUMENT, "the source slice is not this rank's block-cyclic local array");
  }
  if (c->lst == TS_OK && c->ti >= 0) {
    int64_t rep, par;
    ts__geom_decompose(p->tgt, c->ti, c->tp, &rep, &par);
    c->lst = make_target(c);
  }
  if (c->lst == TS_OK && c->si >= 0)
    c->lst = list_sends(c);
  if (c->lst == TS_OK && c->ti >= 0)
    c->lst = list_recvs(c);
  if (c->lst == TS_OK)
    c->lst = prepare(c, src);
  if (c->lst == TS_OK)
    c->lst = list_exchange(c, world);
}

int ts__exec_cyclic(ts_world *w, const ts_plan *p, const ts_tensor *src, const char *tgt_tag,
                    const ts_exec_opts *opts, ts_tensor *out, ts_exec_report *report,
                    ts_error *err) {
  memset(out, 0, sizeof *out);
  if (report)
    memset(report, 0, sizeof *report);
  bool world = opts && opts->agree_world;
  cyc c = {.p = p, .me = ts_world_rank(w), .si = -1, .ti = -1};
  int64_t t_begin = ts_wait_now_ns();
  if (opts && opts->prior_status != TS_OK) {
    c.lst = opts->prior_status;
    if (opts->prior_err)
      c.lerr = *opts->prior_err;
    else
      ts_error_set(&c.lerr, c.lst, "%s", ts_strerror(c.lst));
  }
  bool in_union = ts__plan_union_pos(p, c.me) >= 0;
  if (!in_union && !world)
    return TS_OK;
  ts_comm *comm = NULL;
  int rc = world ? TS_OK : ts_comm_group(w, p->union_ranks, p->nunion, &comm, err);
  if (rc)
    return rc;
  if (world)
    comm = ts_world_comm(w);
  c.si = ts_geom_mesh_index(p->src, c.me);
  c.ti = ts_geom_mesh_index(p->tgt, c.me);
  if (c.lst == TS_OK && in_union)
    prepare_rank(&c, c.si >= 0 ? src : NULL, tgt_tag, world);
  rc = ts_comm_agree(comm, c.lst, &c.lerr, err);
  bool agreed = rc == TS_OK; /* the same on every rank: then every rank runs the commit too */
  int64_t t_agreed = ts_wait_now_ns();
  if (agreed && in_union)
    rc = exchange(&c, comm, src, err);
  int64_t t_moved = ts_wait_now_ns();
  if (agreed) {
    int local = rc ? rc : c.lst;
    ts_error mine = rc ? *err : c.lerr;
    rc = ts_comm_agree(comm, local, &mine, err);
  }
  cyc_free(&c, rc == TS_OK);
  if (rc)
    return rc;
  *out = c.tgt;
  if (report) {
    report->strategy = p->chosen;
    report->bytes_sent = c.sent;
    report->bytes_received = c.received;
    report->peak_extra_bytes = c.staged;
    report->t_begin_ns = t_begin, report->t_agreed_ns = t_agreed;
    report->t_moved_ns = t_moved, report->t_done_ns = ts_wait_now_ns();
  }
  return TS_OK;
}
