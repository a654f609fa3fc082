/* exec.c - the executor: runs a reshard plan over MPI (through libtscomm).
 *
 * The intersection strategies (p2p, all-to-all) hand MPI the pieces of plain slices as strided
 * regions (derived datatypes) that it reads and writes in place, with no staging; pieces of
 * blocked slices, and contributions of a partial source, are packed with the strided-copy kernel
 * straight from the stored layout and unpacked straight into the target layout. No plain copy of
 * a whole slice is ever made. The chunked strategies (p2p, all-to-all, allreduce, reduce-scatter)
 * move data in rounds whose staging is bounded by the plan's staging size; allgather and root
 * gather the whole tensor by nature (directly into the target buffer when its layout is the
 * row-major concatenation of the gathered slices). Contributions of a partial source are reduced
 * mesh dim by mesh dim in mesh-dim order, each by its own op (DTensor's order); the sums of
 * P(avg) dims are divided once, in the target, by the number of contributions summed.
 *
 * Atomicity: a reshard is prepare -> agree -> transfer -> commit. Everything that can fail locally
 * (checks, the target buffer, staging, a failure the caller met while preparing) happens before
 * one first agreement; a failure anywhere makes every rank return the same error before any data
 * moves. Only then are the communicators of the transfer made (collective over their own ranks,
 * which all passed). Errors while moving data (a copy, a reduction, an unpack) are agreed on once
 * more at the end (the commit agreement); the new slice is handed out only when every rank
 * succeeded, and the source slice is never written, so on failure every rank keeps its old
 * tensor. The first agreement also tells whether any rank's part can still fail: a transfer in
 * place on both sides with no reduction, or a gather, cannot (only MPI itself could, and then
 * Open MPI ends the job), so it commits without the second agreement: one agreement per reshard
 * on one host. Across hosts the second agreement runs anyway, so that a reshard returns (and is
 * answered) only when every rank has its part: a send completes before another host took it in.
 * The agreements
 * span the union of the source and target ranks, or with ts_exec_opts.agree_world the whole
 * world: then ranks outside both meshes (and ranks that could not even plan) take part in the two
 * agreements and move nothing, and every rank that records the tensor reaches the same outcome. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "ts_wait.h"

/* ---------------------------------------------------------------------------------------------
 * Allocation with a failure hook */

static long fail_countdown;

void ts_shard_debug_fail_alloc(long countdown) { fail_countdown = countdown > 0 ? countdown : 0; }

void *ts_shard_alloc_as(size_t bytes, unsigned flags, const char *what, ts_error *err) {
  if (fail_countdown > 0 && --fail_countdown == 0) {
    ts_error_set(err, TS_NO_MEMORY, "no memory for %s of %zu bytes (a test's injected failure)",
                 what ? what : "a buffer", bytes);
    return NULL;
  }
  return ts_pool_alloc(bytes ? bytes : 1, flags, what, err);
}

void *ts_shard_alloc(size_t bytes) { return ts_shard_alloc_as(bytes, 0, NULL, NULL); }

void ts_shard_free(void *p) { ts_pool_free(p); }

void ts_shard_free_tensor(ts_tensor *t) {
  if (!t)
    return;
  ts_shard_free(t->data);
  t->data = NULL;
  t->bytes = 0;
}

/* ---------------------------------------------------------------------------------------------
 * Context */

/* The mesh lines of the partial strategies. */
typedef struct lines {
  int n;
  ts_comm *c[TS_MAX_MESH_DIMS];
  ts_reduce_op op[TS_MAX_MESH_DIMS]; /* the source's partial op along each line's mesh dim */
} lines;

typedef struct exec {
  ts_world *w;
  const ts_plan *p;
  ts_comm *acomm; /* the agreements: the union, or the world */
  ts_comm *ucomm; /* the union of source and target ranks, sorted; made after the agreement
                     when the agreements span the world */
  ts_comm *gcomm; /* allgather and root: the union, or one mesh line */
  lines ln;       /* allreduce and reduce_scatter: the lines that change */
  bool in_union;
  int me;
  size_t es;
  bool in_src, in_tgt, receiver;
  int64_t si, ti;
  ts_box sbox, tbox;
  const ts_tensor *src;
  ts_tensor tgt;
  ts_copy_opts copts;
  int64_t max_alloc, cur_extra, peak_extra;
  int64_t sent, received;
  ts_error lerr; /* first local error */
  int lst;
  bool agreed;          /* the first agreement passed: every rank goes on to the final one */
  bool late;            /* this rank's part may still fail after the first agreement */
  bool commit;          /* some rank's may: the commit agreement runs */
  ts_comm_relay *relay; /* this rank's offer of small pieces to the first agreement, or NULL */
  bool no_relay, relayed;
  int64_t avg_count; /* > 1: the target of a P(avg) source is divided by it (finish_avg) */
  bool identity;     /* the target slice holds the identity of its op (not a received value) */
  int64_t t_begin, t_agreed, t_moved; /* phases reached (ts_exec_report) */
} exec;

static int make_comms(exec *ex, ts_error *err);

/* The values the first agreement takes the maximum of, in its one allreduce: every rank passes
 * this many, whatever its strategy or state (round counts, whether a strategy runs in place),
 * the last one whether its part may still fail once the agreement passed. */
#define AGREE_VALUES 4
#define AGREE_LATE (AGREE_VALUES - 1)

/* The first agreement: local failures so far, before any data moves. When it passes, the ranks
 * of the transfer make its communicators. values: AGREE_VALUES - 1 values, or NULL. It also
 * decides whether the commit agreement runs: not when no rank's part can fail any more (only a
 * failure of MPI itself could, and Open MPI ends the whole job with one rank). */
static int agree_first(exec *ex, int64_t *values, ts_error *err) {
  int64_t v[AGREE_VALUES] = {0};
  if (values)
    memcpy(v, values, AGREE_LATE * sizeof *v);
  v[AGREE_LATE] = ex->late || ex->avg_count > 1; /* the division may fail (its staging) */
  int rc = ts_comm_agree_relay(ex->acomm, ex->lst, &ex->lerr, v, AGREE_VALUES, ex->relay, err);
  if (values)
    memcpy(values, v, AGREE_LATE * sizeof *v);
  ex->agreed = rc == TS_OK;
  ex->t_agreed = ts_wait_now_ns();
  ex->commit = v[AGREE_LATE] != 0;
  if (rc == TS_OK && ex->in_union)
    rc = make_comms(ex, err); /* an MPI failure: the commit agreement still runs */
  return rc;
}

static int local_fail(exec *ex, int rc) {
  if (ex->lst == TS_OK)
    ex->lst = rc;
  return rc;
}

/* Staging within the memory limit; `must`: a refusal is this rank's failure, otherwise NULL only
 * says that this rank has none. */
static void *stage_get(exec *ex, int64_t bytes, bool must) {
  if (ex->max_alloc > 0 && ex->cur_extra + bytes > ex->max_alloc) {
    if (must)
      local_fail(ex, ts_error_set(&ex->lerr, TS_LIMIT,
                                  "staging of %lld bytes exceeds the memory limit of %lld bytes",
                                  (long long)bytes, (long long)ex->max_alloc));
    return NULL;
  }
  ts_error aerr; /* this rank's error only when the staging is a must */
  void *b = ts_shard_alloc_as((size_t)bytes, TS_POOL_STAGING, "the executor's staging", &aerr);
  if (!b) {
    if (must)
      local_fail(ex, ts_error_set(&ex->lerr, aerr.code, "%s", aerr.msg));
    return NULL;
  }
  ex->cur_extra += bytes;
  if (ex->cur_extra > ex->peak_extra)
    ex->peak_extra = ex->cur_extra;
  return b;
}

static void *stage_alloc(exec *ex, int64_t bytes) { return stage_get(ex, bytes, true); }

static void stage_free(exec *ex, void *b, int64_t bytes) {
  if (b) {
    ts_shard_free(b);
    ex->cur_extra -= bytes;
  }
}

/* A plain row-major tensor over buf covering `box` (only its extents matter). */
static void plain_view(const exec *ex, void *buf, const ts_box *box, ts_tensor *t) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < box->ndim; d++)
    ext[d] = box->hi[d] - box->lo[d];
  ts_layout_plain(&t->layout, ex->p->dtype, box->ndim, ext, NULL);
  t->data = buf;
  t->bytes = (size_t)ts_box_numel(box) * ex->es;
}

static int copy_region(exec *ex, const ts_tensor *dst, const ts_box *dst_box, const ts_tensor *src,
                       const ts_box *src_box, const ts_box *region) {
  int64_t ds[TS_MAX_DIMS], ss[TS_MAX_DIMS], ext[TS_MAX_DIMS];
  for (int d = 0; d < region->ndim; d++) {
    ds[d] = region->lo[d] - dst_box->lo[d];
    ss[d] = region->lo[d] - src_box->lo[d];
    ext[d] = region->hi[d] - region->lo[d];
  }
  ts_error e;
  ts_copy_opts o = ex->copts;
  o.write_around = dst == &ex->tgt; /* the target, not a buffer that is sent right after */
  int rc = ts_copy_box(dst, ds, src, ss, ext, &o, &e);
  if (rc && ex->lst == TS_OK) {
    ex->lerr = e;
    ex->lst = rc;
  }
  return rc;
}

/* Source slice -> plain buffer holding `region`. */
static int pack(exec *ex, const ts_box *region, void *buf) {
  ts_tensor v;
  plain_view(ex, buf, region, &v);
  return copy_region(ex, &v, region, ex->src, &ex->sbox, region);
}

/* Plain buffer holding `region` -> target slice. */
static int unpack(exec *ex, const ts_box *region, void *buf) {
  ts_tensor v;
  plain_view(ex, buf, region, &v);
  return copy_region(ex, &ex->tgt, &ex->tbox, &v, region, region);
}

/* The op whose identity a target position holds where it holds no value: that of its lowest
 * partial mesh dim (not P(avg)) along which its coordinate is not 0, or, at coordinate 0 of all
 * of them, of the lowest one the source is not partial along (the dims a local reshard makes
 * partial). Reduced in mesh-dim order, each group along the lowest dim then gives its element
 * at coordinate 0, whatever ops follow. */
static ts_reduce_op identity_op(const exec *ex) {
  const ts_attr *a = ex->p->src->attr, *b = ex->p->tgt->attr;
  int fresh = -1;
  for (int m = 0; m < b->mesh_ndim; m++) {
    if (b->place[m].kind != TS_PLACE_PARTIAL || b->place[m].op == TS_REDUCE_AVG)
      continue;
    if ((ex->ti / ex->p->tgt->mesh_stride[m]) % b->mesh_shape[m] != 0)
      return b->place[m].op;
    if (fresh < 0 && (m >= a->mesh_ndim || a->place[m].kind != TS_PLACE_PARTIAL))
      fresh = m;
  }
  return fresh >= 0 ? b->place[fresh].op : TS_REDUCE_SUM;
}

/* Writes the identity of op over a region of the target slice, through a zero-stride view of
 * one element. */
static int fill_op_identity(exec *ex, const ts_box *region, ts_reduce_op op) {
  if (ts_box_numel(region) == 0)
    return TS_OK;
  unsigned char one[16];
  ts_reduce_fill_identity(one, 1, ex->p->dtype, op, NULL);
  ts_tensor v;
  memset(&v, 0, sizeof v);
  v.layout.dtype = ex->p->dtype;
  v.layout.ndim = region->ndim;
  for (int d = 0; d < region->ndim; d++) {
    v.layout.shape[d] = region->hi[d] - region->lo[d];
    v.layout.strides[d] = 0;
  }
  v.data = one;
  v.bytes = ex->es;
  return copy_region(ex, &ex->tgt, &ex->tbox, &v, region, region);
}

/* Writes the identity of the target position's op (identity_op) over a region of the target
 * slice. */
static int fill_identity(exec *ex, const ts_box *region) {
  return fill_op_identity(ex, region, identity_op(ex));
}

/* A plain layout whose strides are those of a dense row-major array (dims of size 1 may have
 * any stride): its box regions can be addressed by row-major offsets. */
static bool dense_row_major(const ts_tensor *t) {
  const ts_layout *l = &t->layout;
  if (l->n_inner != 0)
    return false;
  for (int d = 0; d < l->ndim; d++)
    if (l->shape[d] == 0)
      return true; /* no elements: any strides describe it */
  int64_t s = 1;
  for (int d = l->ndim - 1; d >= 0; d--) {
    if (l->shape[d] > 1 && l->strides[d] != s)
      return false;
    s *= l->shape[d];
  }
  return true;
}

/* P(avg): the sum of avg_count contributions, now in the target slice, divided once by their
 * count; in place when the slice is dense, otherwise chunk by chunk through staging. Failures
 * are local (ex->lst). */
static void finish_avg(exec *ex) {
  ts_reduce_op op = TS_REDUCE_AVG;
  int64_t n = ts_box_numel(&ex->tbox);
  ts_error e;
  int rc = TS_OK;
  if (dense_row_major(&ex->tgt)) {
    rc = ts_reduce_finish((char *)ex->tgt.data + ex->tgt.layout.offset, (size_t)n, ex->p->dtype, op,
                          ex->avg_count, &e);
  } else if (n > 0) {
    int64_t q = ex->p->staging, nchunks = ts_box_chunk_count(&ex->tbox, ex->es, q);
    ts_box ch;
    ts_box_chunk(&ex->tbox, ex->es, q, 0, &ch);
    int64_t bytes = ts_box_numel(&ch) * (int64_t)ex->es;
    void *buf = stage_alloc(ex, bytes);
    for (int64_t i = 0; buf && i < nchunks && rc == TS_OK && ex->lst == TS_OK; i++) {
      ts_box_chunk(&ex->tbox, ex->es, q, i, &ch);
      ts_tensor v;
      plain_view(ex, buf, &ch, &v);
      if (copy_region(ex, &v, &ch, &ex->tgt, &ex->tbox, &ch) == TS_OK &&
          (rc = ts_reduce_finish(buf, (size_t)ts_box_numel(&ch), ex->p->dtype, op, ex->avg_count,
                                 &e)) == TS_OK)
        copy_region(ex, &ex->tgt, &ex->tbox, &v, &ch, &ch);
    }
    stage_free(ex, buf, bytes);
  }
  if (rc && ex->lst == TS_OK) {
    ex->lst = rc;
    ex->lerr = e;
  }
}

/* Element offset of `at` in a dense row-major array over `box`. */
static int64_t row_major_offset(const ts_box *box, const int64_t *at) {
  int64_t off = 0;
  for (int d = 0; d < box->ndim; d++)
    off = off * (box->hi[d] - box->lo[d]) + (at[d] - box->lo[d]);
  return off;
}

/* When `region` of a dense row-major tensor over `tbox` is one contiguous run of bytes, its byte
 * offset from the buffer start: the pieces that need no packing (sent or received in place). */
static bool contiguous_run(const exec *ex, const ts_tensor *t, const ts_box *tbox,
                           const ts_box *region, int64_t *off) {
  if (!t || !t->data || !dense_row_major(t))
    return false;
  int n = region->ndim, k = 0;
  while (k < n && region->hi[k] - region->lo[k] == 1)
    k++;
  for (int d = k + 1; d < n; d++)
    if (region->lo[d] != tbox->lo[d] || region->hi[d] != tbox->hi[d])
      return false;
  *off = t->layout.offset + row_major_offset(tbox, region->lo) * (int64_t)ex->es;
  return true;
}

/* The strided region of `box` inside the plain tensor t over tbox. */
static void slice_region(const exec *ex, const ts_tensor *t, const ts_box *tbox, const ts_box *box,
                         ts_comm_region *r) {
  int64_t at[TS_MAX_DIMS];
  r->ndim = box->ndim;
  r->esize = ex->es;
  for (int d = 0; d < box->ndim; d++) {
    at[d] = box->lo[d] - tbox->lo[d];
    r->count[d] = box->hi[d] - box->lo[d];
    r->stride[d] = t->layout.strides[d] * ex->es;
  }
  r->base = (char *)t->data + ts_layout_address(&t->layout, at);
}

/* A plain (unblocked) slice that MPI can read or write in place, any box of it. */
static bool in_place_slice(const exec *ex, const ts_tensor *t, const ts_box *tbox) {
  if (!t || !t->data || t->layout.n_inner != 0)
    return false;
  ts_comm_region r;
  slice_region(ex, t, tbox, tbox, &r);
  return ts_comm_region_supported(&r);
}

/* The region of a packed buffer of n elements. */
static void buffer_region(const exec *ex, void *buf, int64_t n, ts_comm_region *r) {
  r->base = buf;
  r->ndim = 1;
  r->esize = ex->es;
  r->count[0] = n;
  r->stride[0] = ex->es;
}

/* ---------------------------------------------------------------------------------------------
 * local */

/* The op whose identity this rank holds where contributor j of its group holds the value: that
 * of the lowest partial target mesh dim along which this rank is not where the value is
 * designated to be: j's coordinate along the dims that become partial, 0 along the partial dims
 * kept (P(avg) counted as a sum). Reduced in mesh-dim order, the groups along each dim below it
 * then leave that identity, and the group along it the value. */
static ts_reduce_op local_hole_op(const exec *ex, int64_t j) {
  const ts_attr *a = ex->p->src->attr, *b = ex->p->tgt->attr;
  for (int m = 0; m < b->mesh_ndim; m++) {
    if (b->place[m].kind != TS_PLACE_PARTIAL)
      continue;
    int64_t st = ex->p->tgt->mesh_stride[m], n = b->mesh_shape[m];
    bool kept = a->place[m].kind == TS_PLACE_PARTIAL;
    if (!kept && b->place[m].op == TS_REDUCE_AVG)
      continue; /* every rank along it holds the value itself */
    int64_t want = kept ? 0 : (j / st) % n;
    if ((ex->ti / st) % n != want)
      return b->place[m].op == TS_REDUCE_AVG ? TS_REDUCE_SUM : b->place[m].op;
  }
  return TS_REDUCE_SUM; /* not reached: j differs from this rank along some such dim */
}

/* The contributors of this rank's group (ranks differing only along the mesh dims that become
 * partial) tile its target box (local_applies): this rank copies its own piece and holds, over
 * each other contributor's piece, the identity local_hole_op names. */
static void run_local(exec *ex) {
  if (!ex->in_tgt)
    return;
  const ts_plan *p = ex->p;
  int64_t g = ts__plan_local_group(p, ex->ti);
  for (int64_t j = 0; j < p->src->attr->nranks; j++) {
    ts_box sb, x;
    if (ts__plan_local_group(p, j) != g || !ts__plan_local_contributor(p, j))
      continue;
    ts_geom_index_box(p->src, j, &sb);
    if (!ts_box_intersect(&sb, &ex->tbox, &x))
      continue;
    if (ex->in_src && j == ex->si)
      copy_region(ex, &ex->tgt, &ex->tbox, ex->src, &ex->sbox, &x);
    else
      fill_op_identity(ex, &x, local_hole_op(ex, j));
  }
}

/* ---------------------------------------------------------------------------------------------
 * allreduce: P -> R along one or more mesh dims, chunk by chunk */

static int changed_lines(exec *ex, bool partial_to_shard, lines *out, ts_error *err) {
  const ts_attr *a = ex->p->src->attr, *b = ex->p->tgt->attr;
  out->n = 0;
  for (int m = 0; m < a->mesh_ndim; m++) {
    bool change = a->place[m].kind == TS_PLACE_PARTIAL &&
                  (partial_to_shard ? b->place[m].kind == TS_PLACE_SHARD
                                    : b->place[m].kind == TS_PLACE_REPLICATE);
    if (!change)
      continue;
    int rc =
        ts_comm_mesh_line(ex->w, a->mesh_ndim, a->mesh_shape, a->ranks, m, &out->c[out->n], err);
    if (rc)
      return rc;
    out->op[out->n++] = a->place[m].op; /* in mesh-dim order: the order of the reductions */
  }
  return TS_OK;
}

static int run_allreduce(exec *ex, ts_error *err) {
  const lines *ln = &ex->ln;
  int64_t q = ex->p->staging;
  int64_t nchunks = ts_box_chunk_count(&ex->tbox, ex->es, q);
  bool direct = dense_row_major(ex->src) && dense_row_major(&ex->tgt);
  int64_t buf_bytes = 0;
  void *buf = NULL;
  if (!direct && nchunks > 0) {
    ts_box c0;
    ts_box_chunk(&ex->tbox, ex->es, q, 0, &c0);
    buf_bytes = ts_box_numel(&c0) * (int64_t)ex->es;
    buf = stage_alloc(ex, buf_bytes);
  }
  int rc = agree_first(ex, NULL, err);
  if (rc) {
    stage_free(ex, buf, buf_bytes);
    return rc;
  }
  for (int64_t i = 0; i < nchunks && rc == TS_OK; i++) {
    ts_box ch;
    ts_box_chunk(&ex->tbox, ex->es, q, i, &ch);
    int64_t n = ts_box_numel(&ch);
    void *out;
    const void *in;
    if (direct) {
      int64_t off = row_major_offset(&ex->tbox, ch.lo) * (int64_t)ex->es;
      in = (const char *)ex->src->data + ex->src->layout.offset + off;
      out = (char *)ex->tgt.data + ex->tgt.layout.offset + off;
    } else {
      pack(ex, &ch, buf);
      in = NULL;
      out = buf;
    }
    for (int k = 0; k < ln->n && rc == TS_OK; k++) {
      rc = ts_comm_allreduce(ln->c[k], k == 0 ? in : NULL, out, n, ex->p->dtype, ln->op[k], err);
      int64_t pm = ts_comm_size(ln->c[k]);
      ex->sent += 2 * (pm - 1) * n * (int64_t)ex->es / pm;
      ex->received += 2 * (pm - 1) * n * (int64_t)ex->es / pm;
    }
    if (!direct && rc == TS_OK)
      unpack(ex, &ch, buf);
  }
  stage_free(ex, buf, buf_bytes);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * reduce_scatter: P -> S(d) along one mesh dim */

static int run_reduce_scatter(exec *ex, ts_error *err) {
  const ts_plan *p = ex->p;
  /* The line's size and this rank's place in it, from the mesh: its communicator is made only
   * after the agreement. */
  int m = p->rs_dim, pm = (int)p->src->attr->mesh_shape[m];
  int64_t stride = p->src->mesh_stride[m];
  int me = ex->si >= 0 ? (int)((ex->si / stride) % pm) : 0;
  int64_t q = p->staging / 2 / pm;
  if (q < (int64_t)ex->es)
    q = (int64_t)ex->es;
  ts_box *boxes = malloc((size_t)pm * sizeof *boxes);
  int64_t *nch = malloc((size_t)pm * sizeof *nch);
  int *counts = malloc((size_t)pm * sizeof *counts);
  if (!boxes || !nch || !counts)
    local_fail(ex, ts_error_set(&ex->lerr, TS_NO_MEMORY, "no memory for reduce_scatter"));
  int64_t rounds = 0, send_bytes = 0, recv_bytes = 0;
  void *sbuf = NULL, *rbuf = NULL;
  /* In place: the blocks of the line follow each other in the source and the target is dense:
   * one reduce-scatter straight from the source into the target, if every rank can. */
  int64_t not_direct = ex->lst != TS_OK || !dense_row_major(&ex->tgt), first_off = -1, next = -1;
  for (int j = 0; ex->lst == TS_OK && j < pm; j++)
    ts_geom_index_box(p->tgt, ex->ti + (int64_t)(j - me) * stride, &boxes[j]);
  for (int j = 0; !not_direct && j < pm; j++) {
    int64_t off = 0, n = ts_box_numel(&boxes[j]);
    if (n == 0)
      continue;
    if (n > INT_MAX || !contiguous_run(ex, ex->src, &ex->sbox, &boxes[j], &off) ||
        (next >= 0 && off != next))
      not_direct = 1;
    if (first_off < 0)
      first_off = off;
    next = off + n * (int64_t)ex->es;
  }
  /* Staging for the staged rounds. A rank that could go in place takes it only if it can (then
   * "has none" rides on the agreement): whether every rank goes in place is known only after the
   * agreement, which also decides it, so no rank allocates after it. */
  bool lacks = false;
  int64_t peak0 = ex->peak_extra;
  if (ex->lst == TS_OK) {
    for (int j = 0; j < pm; j++) {
      int64_t b = ts_box_numel(&boxes[j]) * (int64_t)ex->es;
      send_bytes += b < q ? b : q;
    }
    int64_t mine = ts_box_numel(&ex->tbox) * (int64_t)ex->es;
    recv_bytes = mine < q ? mine : q;
    sbuf = stage_get(ex, send_bytes, not_direct);
    if (sbuf)
      rbuf = stage_get(ex, recv_bytes, not_direct);
    lacks = !sbuf || !rbuf;
  }
  int64_t agreed[AGREE_VALUES] = {not_direct, lacks, 0};
  int rc = agree_first(ex, agreed, err);
  bool direct = agreed[0] == 0;
  if (rc == TS_OK && !direct && agreed[1]) /* the same decision on every rank */
    rc = ts_error_set(err, TS_LIMIT,
                      "reduce_scatter: a rank cannot stage its rounds (%lld bytes here) within "
                      "its memory limit, and not every rank can reduce in place",
                      (long long)(send_bytes + recv_bytes));
  if (direct || rc) {
    stage_free(ex, rbuf, recv_bytes);
    stage_free(ex, sbuf, send_bytes);
    sbuf = rbuf = NULL;
    send_bytes = recv_bytes = 0;
    ex->peak_extra = peak0; /* taken in case, never touched */
  }
  if (direct)
    q = INT64_MAX / 2; /* one round with whole blocks */
  for (int j = 0; rc == TS_OK && j < pm; j++) {
    nch[j] = ts_box_chunk_count(&boxes[j], ex->es, q);
    if (nch[j] > rounds)
      rounds = nch[j];
  }
  ts_comm *line = rc == TS_OK ? ex->ln.c[0] : NULL;
  ts_reduce_op op = p->src->attr->place[m].op;
  for (int64_t r = 0; rc == TS_OK && r < rounds; r++) {
    char *at = sbuf;
    ts_box mine_chunk;
    bool have_mine = false;
    for (int j = 0; j < pm; j++) {
      counts[j] = 0;
      if (r >= nch[j])
        continue;
      ts_box ch;
      ts_box_chunk(&boxes[j], ex->es, q, r, &ch);
      counts[j] = (int)ts_box_numel(&ch);
      if (!direct)
        pack(ex, &ch, at);
      at += (int64_t)counts[j] * (int64_t)ex->es;
      if (j == me) {
        mine_chunk = ch;
        have_mine = true;
      } else {
        ex->sent += (int64_t)counts[j] * (int64_t)ex->es;
      }
    }
    if (direct) {
      const char *from = (const char *)ex->src->data + (first_off > 0 ? first_off : 0);
      rc = ts_comm_reduce_scatter(line, from, (char *)ex->tgt.data + ex->tgt.layout.offset, counts,
                                  p->dtype, op, err);
    } else {
      rc = ts_comm_reduce_scatter(line, sbuf, rbuf, counts, p->dtype, op, err);
    }
    if (rc == TS_OK && have_mine) {
      ex->received += (int64_t)(pm - 1) * counts[me] * (int64_t)ex->es;
      if (!direct)
        unpack(ex, &mine_chunk, rbuf);
    }
  }
  stage_free(ex, sbuf, send_bytes);
  stage_free(ex, rbuf, recv_bytes);
  free(boxes);
  free(nch);
  free(counts);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * allgather and root: every rank of the group gets every replica-0 source slice */

static int run_gather(exec *ex, bool use_root, ts_error *err) {
  const ts_plan *p = ex->p;
  /* The group (one mesh line, or the union) and this rank's place in it, from the plan: its
   * communicator is made only after the agreement. */
  bool line = !use_root && p->gather_dim >= 0;
  int P = line ? (int)p->src->attr->mesh_shape[p->gather_dim] : p->nunion;
  int me = line ? (ex->si >= 0 ? (int)((ex->si / p->src->mesh_stride[p->gather_dim]) % P) : 0)
                : ts__plan_union_pos(p, ex->me);
  int64_t *counts = calloc(2 * (size_t)P, sizeof(int64_t));
  ts_box *boxes = malloc((size_t)P * sizeof *boxes);
  if (!counts || !boxes) {
    free(counts);
    free(boxes);
    local_fail(ex, ts_error_set(&ex->lerr, TS_NO_MEMORY, "no memory for gather counts"));
    return agree_first(ex, NULL, err);
  }
  /* Contributors: along one mesh dim, every rank of the line; over the whole group, one replica
   * (index 0) of every source slice. */
  int64_t *displs = counts + P, total = 0;
  for (int i = 0; i < P; i++) {
    int64_t si, rep = 0;
    if (line)
      si = ex->si + (int64_t)(i - me) * p->src->mesh_stride[p->gather_dim];
    else
      si = ts_geom_mesh_index(p->src, p->union_ranks[i]);
    int64_t parts[TS_MAX_DIMS];
    ts__geom_decompose(p->src, si, parts, &rep, NULL);
    ts_geom_index_box(p->src, si, &boxes[i]);
    counts[i] = line || rep == 0 ? ts_box_numel(&boxes[i]) * (int64_t)ex->es : 0;
    displs[i] = total;
    total += counts[i];
  }
  /* Direct: the gathered slices, in rank order, are the dense target itself. */
  bool direct = ex->receiver && ts_box_numel(&ex->tbox) * (int64_t)ex->es == total;
  int64_t next = ex->tgt.layout.offset;
  for (int i = 0; direct && i < P; i++) {
    int64_t off;
    if (counts[i] == 0)
      continue;
    direct = ts_box_contains(&ex->tbox, &boxes[i]) &&
             contiguous_run(ex, &ex->tgt, &ex->tbox, &boxes[i], &off) && off == next;
    next += counts[i];
  }
  char *g = NULL;
  int64_t g_bytes = 0;
  if (direct) {
    g = (char *)ex->tgt.data + ex->tgt.layout.offset;
  } else {
    g_bytes = total;
    g = stage_alloc(ex, g_bytes);
  }
  int *peers = NULL;
  void **bufs = NULL;
  int64_t *bytes = NULL;
  if (use_root) {
    peers = malloc((size_t)P * sizeof *peers);
    bufs = malloc((size_t)P * sizeof *bufs);
    bytes = malloc((size_t)P * sizeof *bytes);
    if (!peers || !bufs || !bytes)
      local_fail(ex, ts_error_set(&ex->lerr, TS_NO_MEMORY, "no memory for the root gather"));
  }
  /* After the agreement: copies between checked boxes and MPI's gather, nothing that can fail. */
  ex->late = false;
  int rc = agree_first(ex, NULL, err);
  ts_comm *comm = ex->gcomm;
  if (rc == TS_OK && counts[me] > 0)
    pack(ex, &boxes[me], g + displs[me]);
  if (rc == TS_OK && !use_root) {
    rc = ts_comm_allgatherv(comm, g, counts, displs, err);
    ex->sent += counts[me] * (P - 1);
    ex->received += total - counts[me];
  } else if (rc == TS_OK) {
    int n = 0;
    if (me == 0) {
      for (int i = 1; i < P; i++)
        if (counts[i] > 0) {
          peers[n] = i;
          bufs[n] = g + displs[i];
          bytes[n++] = counts[i];
          ex->received += counts[i];
        }
      rc = ts_comm_exchange(comm, 0, NULL, NULL, NULL, n, peers, bufs, bytes, 1, err);
    } else if (counts[me] > 0) {
      peers[0] = 0;
      bufs[0] = g + displs[me];
      bytes[0] = counts[me];
      ex->sent += counts[me];
      rc = ts_comm_exchange(comm, 1, peers, bufs, bytes, 0, NULL, NULL, NULL, 1, err);
    }
    if (rc == TS_OK) {
      rc = ts_comm_bcast(comm, g, total, 0, err);
      if (me == 0)
        ex->sent += total * (P - 1);
      else
        ex->received += total;
    }
  }
  if (rc == TS_OK && ex->in_tgt) {
    if (!ex->receiver) {
      fill_identity(ex, &ex->tbox);
      ex->identity = true;
    } else if (!direct) {
      for (int i = 0; i < P; i++) {
        ts_box x;
        if (counts[i] == 0 || !ts_box_intersect(&boxes[i], &ex->tbox, &x))
          continue;
        ts_tensor v;
        plain_view(ex, g + displs[i], &boxes[i], &v);
        copy_region(ex, &ex->tgt, &ex->tbox, &v, &boxes[i], &x);
      }
    }
  }
  if (!direct)
    stage_free(ex, g, g_bytes);
  free(peers);
  free(bufs);
  free(bytes);
  free(counts);
  free(boxes);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * p2p and alltoall: the intersection transfers of ts_plan_rank, in rounds of one chunk per pair */

/* A staging slot holds a pair's largest chunk. Chunks and the pair chunk size are whole elements,
 * so slots stay aligned for the dtype (the reductions read them as typed arrays). */
static int64_t slot_size(int64_t bytes, int64_t q) { return bytes < q ? bytes : q; }

/* The state of one intersection run: this rank's transfers, their staging slots and chunk
 * counts, and the regions of the round being exchanged. */
typedef struct xfer {
  ts_rank_plan rp;
  bool alltoall, partial_src;
  int64_t q; /* the pair chunk size */
  /* Slots: one per remote send, one per receive (remote, or local contribution of a partial
   * source), each the size of the pair's largest chunk. */
  int64_t *soff, *roff, *snch, *rnch;
  int64_t sbytes, rbytes, my_rounds;
  char *sbuf, *rbuf;
  bool send_direct, recv_direct;
  int *peer_pos;
  /* This round's regions: per comm rank (alltoall), or per message with its peer (p2p). */
  ts_comm_region *sreg, *rreg;
  int *xs_peer, *xr_peer;
} xfer;

/* The transfer tables: slots, chunk counts and peers of every send and receive, whether each
 * side moves in place, and the staging buffers. Failures are local (ex->lst). */
static void xfer_tables(exec *ex, xfer *x) {
  const ts_plan *p = ex->p;
  const ts_rank_plan *rp = &x->rp;
  int P = p->nunion;
  int64_t q = x->q;
  if (ex->lst == TS_OK) {
    size_t ns = (size_t)rp->nsend + 1, nr = (size_t)rp->nrecv + 1;
    size_t nsr = x->alltoall ? (size_t)P : ns, nrr = x->alltoall ? (size_t)P : nr;
    x->sreg = malloc((nsr + nrr) * sizeof *x->sreg);
    x->rreg = x->sreg ? x->sreg + nsr : NULL;
    x->xs_peer = malloc((ns + nr) * sizeof(int));
    x->xr_peer = x->xs_peer ? x->xs_peer + ns : NULL;
    x->soff = malloc(ns * sizeof *x->soff);
    x->snch = malloc(ns * sizeof *x->snch);
    x->roff = malloc(nr * sizeof *x->roff);
    x->rnch = malloc(nr * sizeof *x->rnch);
    x->peer_pos = malloc((ns + nr) * sizeof *x->peer_pos);
    if (!x->soff || !x->snch || !x->roff || !x->rnch || !x->peer_pos || !x->sreg || !x->xs_peer)
      local_fail(ex, ts_error_set(&ex->lerr, TS_NO_MEMORY, "no memory for transfer tables"));
  }
  if (ex->lst != TS_OK)
    return;
  for (int k = 0; k < rp->nsend; k++) {
    const ts_transfer *t = &rp->send[k];
    x->snch[k] = ts_box_chunk_count(&t->box, ex->es, q);
    x->soff[k] = x->sbytes;
    x->peer_pos[k] = ts__plan_union_pos(p, t->peer);
    if (t->peer != ex->me) {
      x->sbytes += slot_size(t->bytes, q);
      if (x->snch[k] > x->my_rounds)
        x->my_rounds = x->snch[k];
    }
  }
  for (int k = 0; k < rp->nrecv; k++) {
    const ts_transfer *t = &rp->recv[k];
    x->rnch[k] = ts_box_chunk_count(&t->box, ex->es, q);
    x->roff[k] = x->rbytes;
    x->peer_pos[rp->nsend + k] = ts__plan_union_pos(p, t->peer);
    if (t->peer != ex->me || x->partial_src)
      x->rbytes += slot_size(t->bytes, q);
    if (x->rnch[k] > x->my_rounds)
      x->my_rounds = x->rnch[k];
  }
  /* Pieces of plain slices move in place: MPI reads and writes them through derived
   * datatypes, with no staging. Blocked slices are packed and unpacked around the transfer.
   * Each side decides for itself: a packed buffer meets a strided region element for
   * element. Contributions of a partial source are reduced in staging. */
  x->send_direct = rp->nsend == 0 || in_place_slice(ex, ex->src, &ex->sbox);
  x->recv_direct = !x->partial_src && (rp->nrecv == 0 || in_place_slice(ex, &ex->tgt, &ex->tbox));
  if (x->send_direct)
    x->sbytes = 0;
  if (x->recv_direct)
    x->rbytes = 0;
  x->sbuf = stage_alloc(ex, x->sbytes);
  if (x->sbuf)
    x->rbuf = stage_alloc(ex, x->rbytes);
}

/* The first agreement, which also agrees on the number of rounds (*rounds). When every rank
 * moves every piece in place, no staging bounds the chunks: pieces go whole (up to 1 GiB per
 * chunk), in as few rounds as possible. */
static int xfer_agree_rounds(exec *ex, xfer *x, int64_t *rounds, ts_error *err) {
  const ts_rank_plan *rp = &x->rp;
  const int64_t q_whole = (int64_t)1 << 30;
  int64_t agreed[AGREE_VALUES] = {x->my_rounds, 0, !(x->send_direct && x->recv_direct)};
  for (int k = 0; ex->lst == TS_OK && k < rp->nsend; k++)
    if (rp->send[k].peer != ex->me) {
      int64_t c = ts_box_chunk_count(&rp->send[k].box, ex->es, q_whole);
      agreed[1] = c > agreed[1] ? c : agreed[1];
    }
  for (int k = 0; ex->lst == TS_OK && k < rp->nrecv; k++)
    if (rp->recv[k].peer != ex->me) {
      int64_t c = ts_box_chunk_count(&rp->recv[k].box, ex->es, q_whole);
      agreed[1] = c > agreed[1] ? c : agreed[1];
    }
  int rc = agree_first(ex, agreed, err);
  *rounds = agreed[0];
  if (rc == TS_OK && agreed[2] == 0) {
    x->q = q_whole;
    *rounds = agreed[1];
    for (int k = 0; k < rp->nsend; k++)
      x->snch[k] = ts_box_chunk_count(&rp->send[k].box, ex->es, x->q);
    for (int k = 0; k < rp->nrecv; k++)
      x->rnch[k] = ts_box_chunk_count(&rp->recv[k].box, ex->es, x->q);
  }
  return rc;
}

/* Round r's exchange: each send's chunk r packed (or pointed at in place), each receive's
 * region set up (a partial source's own contribution packed into its slot), then one
 * all-to-all or one exchange of messages. */
static int xfer_exchange_round(exec *ex, xfer *x, int64_t r, ts_error *err) {
  const ts_rank_plan *rp = &x->rp;
  bool alltoall = x->alltoall;
  int nxs = 0, nxr = 0;
  if (alltoall)
    memset(x->sreg, 0, 2 * (size_t)ex->p->nunion * sizeof *x->sreg);
  for (int k = 0; k < rp->nsend; k++) {
    const ts_transfer *t = &rp->send[k];
    if (t->peer == ex->me || r >= x->snch[k])
      continue;
    ts_box ch;
    ts_box_chunk(&t->box, ex->es, x->q, r, &ch);
    int64_t n = ts_box_numel(&ch);
    ts_comm_region *reg = alltoall ? &x->sreg[x->peer_pos[k]] : &x->sreg[nxs];
    if (x->send_direct) {
      slice_region(ex, ex->src, &ex->sbox, &ch, reg);
    } else {
      pack(ex, &ch, x->sbuf + x->soff[k]);
      buffer_region(ex, x->sbuf + x->soff[k], n, reg);
    }
    ex->sent += n * (int64_t)ex->es;
    if (!alltoall)
      x->xs_peer[nxs++] = x->peer_pos[k];
  }
  for (int k = 0; k < rp->nrecv; k++) {
    const ts_transfer *t = &rp->recv[k];
    if (r >= x->rnch[k] || (t->peer == ex->me && !x->partial_src))
      continue;
    ts_box ch;
    ts_box_chunk(&t->box, ex->es, x->q, r, &ch);
    int64_t n = ts_box_numel(&ch);
    if (t->peer == ex->me) {
      pack(ex, &ch, x->rbuf + x->roff[k]);
      continue;
    }
    ex->received += n * (int64_t)ex->es;
    int pos = x->peer_pos[rp->nsend + k];
    ts_comm_region *reg = alltoall ? &x->rreg[pos] : &x->rreg[nxr];
    if (x->recv_direct)
      slice_region(ex, &ex->tgt, &ex->tbox, &ch, reg);
    else
      buffer_region(ex, x->rbuf + x->roff[k], n, reg);
    if (!alltoall)
      x->xr_peer[nxr++] = pos;
  }
  if (alltoall)
    return ts_comm_alltoallw(ex->ucomm, x->sreg, x->rreg, err);
  return ts_comm_exchange_regions(ex->ucomm, nxs, x->xs_peer, x->sreg, nxr, x->xr_peer, x->rreg,
                                  (int)(r % 32000), err);
}

/* Round r's unpack: pieces of a non-partial source straight into the target; contributions of a
 * partial source reduced into the group's first slot, in contributor order, then unpacked. */
/* The contributions of one piece of a partial source, in the slots of receives k.. (one per
 * partial index, row-major over the partial mesh dims), reduced into slot k mesh dim by mesh dim
 * in mesh-dim order, each by its own op (avg as a sum: finish_avg divides). Along partial dim m
 * (weight w) the groups still to reduce start at the indices below w: their coordinates along
 * m and the dims before it are 0. */
static void reduce_contributions(exec *ex, const xfer *x, int k, size_t n) {
  const ts_attr *a = ex->p->src->attr;
  const ts_geom *g = ex->p->src;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (a->place[m].kind != TS_PLACE_PARTIAL)
      continue;
    int64_t w = g->par_weight[m], len = a->mesh_shape[m];
    for (int64_t i = 0; i < w; i++)
      for (int64_t t = 1; t < len; t++) {
        ts_error e;
        int rc = ts_reduce(x->rbuf + x->roff[k + i], x->rbuf + x->roff[k + i + t * w], n,
                           ex->p->dtype, a->place[m].op, &e);
        if (rc && ex->lst == TS_OK) {
          ex->lst = rc;
          ex->lerr = e;
        }
      }
  }
}

static void xfer_unpack_round(exec *ex, xfer *x, int64_t r) {
  const ts_rank_plan *rp = &x->rp;
  for (int k = 0; k < rp->nrecv;) {
    int end = k + 1;
    while (end < rp->nrecv && rp->recv[end].group == rp->recv[k].group)
      end++;
    if (r < x->rnch[k]) {
      ts_box ch;
      ts_box_chunk(&rp->recv[k].box, ex->es, x->q, r, &ch);
      if (!x->partial_src) {
        if (rp->recv[k].peer != ex->me && !x->recv_direct)
          unpack(ex, &ch, x->rbuf + x->roff[k]);
      } else {
        reduce_contributions(ex, x, k, (size_t)ts_box_numel(&ch));
        unpack(ex, &ch, x->rbuf + x->roff[k]);
      }
    }
    k = end;
  }
}

static void xfer_free(exec *ex, xfer *x) {
  free(x->xs_peer);
  free(x->sreg);
  stage_free(ex, x->sbuf, x->sbytes);
  stage_free(ex, x->rbuf, x->rbytes);
  free(x->soff);
  free(x->roff);
  free(x->snch);
  free(x->rnch);
  free(x->peer_pos);
  ts_rank_plan_clear(&x->rp);
}

/* ---------------------------------------------------------------------------------------------
 * Relayed pieces: when every piece this rank sends fits in its agreement message, it offers them
 * there (ts_comm_agree_relay); when every rank did, comm rank 0 forwarded them in the verdicts and
 * no exchange follows. A piece travels as its box (lo and hi, int64 each) and its elements packed
 * row-major, padded to 8 bytes. */

typedef struct relay_offer {
  ts_comm_relay r;
  ts_comm_relay_part *parts;
  char *data;
  bool *got; /* per receive: matched to a relayed piece (made before the agreement) */
} relay_offer;

/* A piece's box (lo, then hi) before its elements. */
static int64_t relay_box_bytes(const exec *ex) {
  return 2 * ex->p->ndim * (int64_t)sizeof(int64_t);
}

static int64_t relay_piece_bytes(const exec *ex, const ts_transfer *t) {
  return relay_box_bytes(ex) + ((t->bytes + 7) & ~(int64_t)7);
}

/* The agreement's comm rank of world rank `peer` (ts_comm_world_rank goes back). */
static int agree_rank(const exec *ex, int peer) {
  return ex->acomm == ts_world_comm(ex->w) ? peer : ts__plan_union_pos(ex->p, peer);
}

/* Packs this rank's pieces for other ranks into o when they fit an agreement message;
 * o->r.offer tells whether it did. Like the agreement's own messages, the copy (at most
 * TS_COMM_RELAY_MESSAGE_MAX bytes) is not staging. */
static void relay_pack(exec *ex, const xfer *x, relay_offer *o) {
  const ts_rank_plan *rp = &x->rp;
  size_t half = (size_t)relay_box_bytes(ex) / 2;
  if (ex->lst != TS_OK || x->partial_src || ex->no_relay)
    return;
  int64_t total = 0;
  for (int k = 0; k < rp->nsend; k++)
    if (rp->send[k].peer != ex->me)
      total += relay_piece_bytes(ex, &rp->send[k]);
  if (total + rp->nsend * (int64_t)sizeof(ts_comm_relay_part) > TS_COMM_RELAY_MESSAGE_MAX)
    return;
  o->parts = malloc((rp->nsend > 0 ? (size_t)rp->nsend : 1) * sizeof *o->parts);
  o->got = calloc(rp->nrecv > 0 ? (size_t)rp->nrecv : 1, sizeof *o->got);
  o->data = malloc(total > 0 ? (size_t)total : 1);
  if (!o->parts || !o->got || !o->data) {
    free(o->data);
    free(o->parts);
    free(o->got);
    *o = (relay_offer){0};
    return;
  }
  int np = 0;
  int64_t at = 0;
  for (int k = 0; k < rp->nsend; k++) {
    const ts_transfer *t = &rp->send[k];
    if (t->peer == ex->me)
      continue;
    int dest = agree_rank(ex, t->peer);
    if (np == 0 || o->parts[np - 1].rank != dest)
      o->parts[np++] = (ts_comm_relay_part){.rank = dest};
    memcpy(o->data + at, t->box.lo, half);
    memcpy(o->data + at + half, t->box.hi, half);
    pack(ex, &t->box, o->data + at + 2 * half);
    int64_t n = relay_piece_bytes(ex, t);
    o->parts[np - 1].bytes += n;
    at += n;
  }
  o->r = (ts_comm_relay){.offer = true, .nout = np, .out = o->parts, .out_data = o->data};
}

/* This rank's receive from world rank src over box b that no relayed piece matched yet, or -1. */
static int relay_match(const ts_rank_plan *rp, const bool *got, int src, const ts_box *b) {
  size_t bytes = (size_t)b->ndim * sizeof(int64_t);
  for (int k = 0; k < rp->nrecv; k++)
    if (!got[k] && rp->recv[k].peer == src && !memcmp(rp->recv[k].box.lo, b->lo, bytes) &&
        !memcmp(rp->recv[k].box.hi, b->hi, bytes))
      return k;
  return -1;
}

/* The pieces the verdict relayed to this rank, each unpacked into the target once it is matched
 * to one of this rank's receives from its source; every receive from another rank must be. */
static void relay_unpack(exec *ex, const xfer *x, relay_offer *o) {
  const ts_rank_plan *rp = &x->rp;
  const ts_comm_relay *r = &o->r;
  int matched = 0, expected = 0;
  size_t half = (size_t)relay_box_bytes(ex) / 2;
  const char *d = r->in_data;
  for (int i = 0; i < r->nin && ex->lst == TS_OK; i++) {
    int src = ts_comm_world_rank(ex->acomm, r->in[i].rank);
    for (int64_t off = 0; off < r->in[i].bytes && ex->lst == TS_OK;) {
      ts_box b = {.ndim = ex->p->ndim};
      int k = -1;
      if (r->in[i].bytes - off >= 2 * (int64_t)half) {
        memcpy(b.lo, d + off, half);
        memcpy(b.hi, d + off + half, half);
        k = relay_match(rp, o->got, src, &b);
      }
      int64_t n = k >= 0 ? relay_piece_bytes(ex, &rp->recv[k]) : 0;
      if (k < 0 || n > r->in[i].bytes - off) {
        local_fail(ex,
                   ts_error_set(&ex->lerr, TS_INTERNAL,
                                "a relayed piece from rank %d matches none of its transfers", src));
        break;
      }
      o->got[k] = true;
      matched++;
      unpack(ex, &b, (void *)(d + off + 2 * half));
      ex->received += rp->recv[k].bytes;
      off += n;
    }
    d += r->in[i].bytes;
  }
  for (int k = 0; k < rp->nrecv; k++)
    expected += rp->recv[k].peer != ex->me;
  if (ex->lst == TS_OK && matched != expected)
    local_fail(ex, ts_error_set(&ex->lerr, TS_INTERNAL, "%d of %d pieces were relayed", matched,
                                expected));
}

static void relay_free(relay_offer *o) {
  ts_comm_relay_clear(&o->r);
  free(o->data);
  free(o->parts);
  free(o->got);
}

static int run_intersection(exec *ex, bool alltoall, ts_error *err) {
  const ts_plan *p = ex->p;
  xfer x;
  memset(&x, 0, sizeof x);
  x.alltoall = alltoall;
  x.q = p->pair_chunk;
  x.partial_src = p->src->npartial > 1;
  int rc = ts_plan_rank(p, ex->me, &x.rp, &ex->lerr);
  if (rc)
    local_fail(ex, rc);
  xfer_tables(ex, &x);
  /* In place on both sides, no reduction: after the agreement this rank only copies its own
   * pieces and hands MPI regions it has checked; nothing of it can fail any more. */
  ex->late = x.partial_src || !(x.send_direct && x.recv_direct);
  int64_t rounds = 0;
  relay_offer offer = {0};
  relay_pack(ex, &x, &offer);
  ex->relay = &offer.r;
  rc = xfer_agree_rounds(ex, &x, &rounds, err);
  ex->relay = NULL;
  if (rc == TS_OK && offer.r.relayed) {
    rounds = 0;
    ex->relayed = true;
    for (int k = 0; k < x.rp.nsend; k++)
      ex->sent += x.rp.send[k].peer != ex->me ? x.rp.send[k].bytes : 0;
  }
  if (rc == TS_OK) {
    if (ex->in_tgt && !ex->receiver) {
      fill_identity(ex, &ex->tbox);
      ex->identity = true;
    }
    /* A local piece of a non-partial source is copied directly, with no staging. */
    for (int k = 0; !x.partial_src && k < x.rp.nrecv; k++)
      if (x.rp.recv[k].peer == ex->me)
        copy_region(ex, &ex->tgt, &ex->tbox, ex->src, &ex->sbox, &x.rp.recv[k].box);
    if (offer.r.relayed)
      relay_unpack(ex, &x, &offer);
  }
  relay_free(&offer);
  for (int64_t r = 0; rc == TS_OK && r < rounds; r++) {
    rc = xfer_exchange_round(ex, &x, r, err);
    if (rc)
      break;
    xfer_unpack_round(ex, &x, r);
  }
  xfer_free(ex, &x);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Entry point */

/* ---------------------------------------------------------------------------------------------
 * chain: a stage of a hierarchical plan that broadcasts the root row's slices down each column
 * of its [hosts, ranks per host] target mesh (ts_comm_bcast_chain), after the root row's ranks
 * copied their source slice (the same box) into their target. */

static int run_chain(exec *ex, ts_error *err) {
  const ts_plan *p = ex->p;
  const ts_attr *g = p->tgt->attr;
  if (ex->lst == TS_OK && ex->in_tgt && !dense_row_major(&ex->tgt))
    local_fail(ex, ts_error_set(&ex->lerr, TS_INTERNAL, "chain: the target slice is not dense"));
  int rc = agree_first(ex, NULL, err);
  if (rc || !ex->in_tgt)
    return rc;
  /* A copy that fails still lets the chain run (its ranks wait for the pieces): the commit
   * agreement reports it. */
  if (ex->ti / g->mesh_shape[1] == p->chain_root)
    copy_region(ex, &ex->tgt, &ex->tbox, ex->src, &ex->sbox, &ex->tbox);
  ts_comm *col = NULL;
  rc = ts_comm_mesh_line(ex->w, 2, g->mesh_shape, g->ranks, 0, &col, err);
  int64_t bytes = ts_box_numel(&ex->tbox) * (int64_t)ex->es;
  if (rc == TS_OK)
    rc = ts_comm_bcast_chain(col, (char *)ex->tgt.data + ex->tgt.layout.offset, bytes,
                             p->chain_root, TS_CHAIN_PIECE, err);
  int pos = col ? (ts_comm_rank(col) - p->chain_root + ts_comm_size(col)) % ts_comm_size(col) : 0;
  if (rc == TS_OK && pos > 0)
    ex->received += bytes;
  if (rc == TS_OK && col && pos + 1 < ts_comm_size(col))
    ex->sent += bytes;
  return rc;
}

static int check_source(exec *ex, const ts_tensor *src) {
  const ts_plan *p = ex->p;
  if (!src || !src->data)
    return ts_error_set(&ex->lerr, TS_INVALID_ARGUMENT,
                        "rank %d holds a source slice but was given no source tensor", ex->me);
  const ts_layout *l = &src->layout;
  if (l->dtype != p->dtype)
    return ts_error_set(&ex->lerr, TS_BAD_DTYPE, "source slice is %s but the tensor is %s",
                        ts_dtype_name(l->dtype), ts_dtype_name(p->dtype));
  bool match = l->ndim == p->ndim;
  for (int d = 0; match && d < p->ndim; d++)
    match = l->shape[d] == ex->sbox.hi[d] - ex->sbox.lo[d];
  if (!match)
    return ts_error_set(&ex->lerr, TS_BAD_SHAPE,
                        "rank %d's source slice does not have the shape of its box", ex->me);
  return ts_layout_check(l, src->bytes, false, &ex->lerr);
}

static int make_target(exec *ex, const char *tag) {
  const ts_plan *p = ex->p;
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < p->ndim; d++)
    ext[d] = ex->tbox.hi[d] - ex->tbox.lo[d];
  ts_layout *l = &ex->tgt.layout;
  int rc = tag && tag[0] ? ts_layout_from_tag(l, p->dtype, p->ndim, ext, tag, &ex->lerr)
                         : ts_layout_plain(l, p->dtype, p->ndim, ext, &ex->lerr);
  if (rc)
    return rc;
  size_t bytes;
  if ((rc = ts_layout_span(l, &bytes, &ex->lerr)))
    return rc;
  if (ex->max_alloc > 0 && (int64_t)bytes > ex->max_alloc)
    return ts_error_set(&ex->lerr, TS_LIMIT,
                        "the target slice needs %zu bytes; the memory limit is %lld bytes", bytes,
                        (long long)ex->max_alloc);
  ex->tgt.data = ts_shard_alloc_as(bytes, 0, "the target slice", &ex->lerr);
  if (!ex->tgt.data)
    return ex->lerr.code;
  ex->tgt.bytes = bytes;
  if (l->n_inner > 0)
    memset(ex->tgt.data, 0, bytes); /* padded tails of blocked dims read as zero */
  return TS_OK;
}

/* The communicators of the transfer, made by the ranks of the union once the first agreement
 * passed: every rank of a group makes the same ones in the same order. */
static int make_comms(exec *ex, ts_error *err) {
  const ts_plan *p = ex->p;
  int rc = ex->ucomm ? TS_OK : ts_comm_group(ex->w, p->union_ranks, p->nunion, &ex->ucomm, err);
  if (rc == TS_OK &&
      (p->chosen == TS_STRATEGY_ALLREDUCE || p->chosen == TS_STRATEGY_REDUCE_SCATTER))
    rc = changed_lines(ex, p->chosen == TS_STRATEGY_REDUCE_SCATTER, &ex->ln, err);
  ex->gcomm = ex->ucomm;
  if (rc == TS_OK && p->chosen == TS_STRATEGY_ALLGATHER && p->gather_dim >= 0) {
    const ts_attr *a = p->src->attr;
    rc = ts_comm_mesh_line(ex->w, a->mesh_ndim, a->mesh_shape, a->ranks, p->gather_dim, &ex->gcomm,
                           err);
  }
  return rc;
}

/* This rank's boxes, its source slice checked and its target slice made (failures local). */
static void exec_slices(exec *ex, const ts_tensor *src, const char *tgt_tag) {
  const ts_plan *p = ex->p;
  ex->es = p->esize;
  ex->si = ts_geom_mesh_index(p->src, ex->me);
  ex->ti = ts_geom_mesh_index(p->tgt, ex->me);
  ex->in_src = ex->si >= 0;
  ex->in_tgt = ex->ti >= 0;
  ex->sbox.ndim = ex->tbox.ndim = p->ndim;
  if (ex->in_src) {
    ts_geom_index_box(p->src, ex->si, &ex->sbox);
    local_fail(ex, check_source(ex, src));
    ex->src = src;
  }
  if (ex->in_tgt) {
    ts_geom_index_box(p->tgt, ex->ti, &ex->tbox);
    ex->receiver = ts__plan_receiver(p, ex->ti);
    if (ex->lst == TS_OK)
      local_fail(ex, make_target(ex, tgt_tag));
  }
}

/* One plan; avg_count: the P(avg) contributions its result is divided by (1: none). */
static int exec_one(ts_world *w, const ts_plan *p, const ts_tensor *src, const char *tgt_tag,
                    int64_t avg_count, const ts_exec_opts *opts, ts_tensor *out,
                    ts_exec_report *report, ts_error *err) {
  ts_error scratch;
  if (!err)
    err = &scratch;
  bool world = opts && opts->agree_world;
  if (!w || (!p && !world) || !out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_reshard_exec: NULL argument");
  memset(out, 0, sizeof *out);
  if (report)
    memset(report, 0, sizeof *report);
  exec ex;
  memset(&ex, 0, sizeof ex);
  ex.w = w;
  ex.p = p;
  ex.me = ts_world_rank(w);
  ex.late = ex.commit = true; /* the first agreement may clear commit */
  ex.max_alloc = opts ? opts->max_alloc_bytes : 0;
  ex.copts.threads = opts ? opts->copy_threads : 0;
  ex.no_relay = opts && opts->no_relay;
  ex.si = ex.ti = -1;
  ex.avg_count = avg_count;
  ex.t_begin = ts_wait_now_ns();
  if (opts && opts->prior_status != TS_OK) {
    ex.lst = opts->prior_status;
    if (opts->prior_err)
      ex.lerr = *opts->prior_err;
    else
      ts_error_set(&ex.lerr, ex.lst, "%s", ts_strerror(ex.lst));
  } else if (!p) {
    local_fail(&ex, ts_error_set(&ex.lerr, TS_INVALID_ARGUMENT, "ts_reshard_exec: no plan"));
  }
  ex.in_union = p && ts__plan_union_pos(p, ex.me) >= 0;
  if (!ex.in_union && !world)
    return TS_OK; /* the agreements span the union only */
  for (int i = 0; ex.in_union && i < p->nunion; i++)
    if (p->union_ranks[i] >= ts_world_size(w) && ex.lst == TS_OK) {
      local_fail(&ex, ts_error_set(&ex.lerr, TS_BAD_ATTRIBUTE,
                                   "the plan names rank %d but the world has %d ranks",
                                   p->union_ranks[i], ts_world_size(w)));
      if (!world) /* the same on every rank of the plan, and no union to agree over */
        return ts_error_set(err, ex.lst, "%s", ex.lerr.msg);
    }
  int rc = TS_OK;
  if (world) {
    ex.acomm = ts_world_comm(w);
  } else {
    /* The agreements run over the union: its communicator comes first, made by every rank of it
     * whatever its local state. */
    if ((rc = ts_comm_group(w, p->union_ranks, p->nunion, &ex.ucomm, err)))
      return rc;
    ex.acomm = ex.ucomm;
  }

  if (ex.in_union && ex.lst == TS_OK)
    exec_slices(&ex, src, tgt_tag);

  /* Each strategy prepares (staging), agrees on local failures, and only then moves data. A
   * rank outside the union, or one that failed before, only agrees. */
  ts_strategy run = ex.in_union && ex.lst == TS_OK ? p->chosen : TS_STRATEGY_AUTO;
  if (!world && p->chosen == TS_STRATEGY_LOCAL)
    run = TS_STRATEGY_LOCAL; /* over the union a local reshard agrees once, at the end */
  switch (run) {
  case TS_STRATEGY_AUTO:
    ex.late = ex.lst != TS_OK || ex.in_union; /* a rank outside both meshes only agrees */
    rc = agree_first(&ex, NULL, err);
    break;
  case TS_STRATEGY_LOCAL:
    /* Nothing crosses ranks: over the union one agreement, at the end, covers allocation and
     * copy; over the world the first one is kept, as every rank does not know the strategy. */
    if (world)
      rc = agree_first(&ex, NULL, err);
    else
      ex.agreed = true;
    if (rc == TS_OK && ex.lst == TS_OK)
      run_local(&ex);
    break;
  case TS_STRATEGY_ALLREDUCE: rc = run_allreduce(&ex, err); break;
  case TS_STRATEGY_REDUCE_SCATTER: rc = run_reduce_scatter(&ex, err); break;
  case TS_STRATEGY_ALLGATHER:
  case TS_STRATEGY_ROOT: rc = run_gather(&ex, p->chosen == TS_STRATEGY_ROOT, err); break;
  case TS_STRATEGY_ALLTOALL:
  case TS_STRATEGY_P2P:
    rc = p->chain ? run_chain(&ex, err)
                  : run_intersection(&ex, p->chosen == TS_STRATEGY_ALLTOALL, err);
    break;
  default:
    local_fail(&ex, ts_error_set(&ex.lerr, TS_INTERNAL, "plan has no strategy"));
    rc = agree_first(&ex, NULL, err);
  }
  /* The commit agreement: errors while moving data (a copy, a reduction, MPI on this rank) are
   * agreed once more, so that every rank that passed the first agreement returns the same
   * result. Across hosts it also runs when no part can fail: a rank's sends complete before the
   * other hosts received them, and the answer must mean every rank is done (on one host the
   * copies land in place; pieces relayed in the first agreement are in with its verdicts). */
  if (rc == TS_OK && ex.agreed && ex.lst == TS_OK && ex.in_tgt && !ex.identity && ex.avg_count > 1)
    finish_avg(&ex);
  ex.t_moved = ts_wait_now_ns();
  if (ex.agreed && !ex.commit && p->hosts && !ex.relayed)
    ex.commit = true; /* the same on every rank: the plan and the relay are */
  if (ex.agreed && ex.commit) {
    int local = rc ? rc : ex.lst;
    ts_error mine = rc ? *err : ex.lerr;
    rc = ts_comm_agree(ex.acomm, local, &mine, err);
  } else if (ex.agreed && rc == TS_OK && ex.lst != TS_OK) {
    rc = ts_error_set(err, ex.lst, "%s", ex.lerr.msg);
  }
  if (rc == TS_OK) {
    *out = ex.tgt;
    if (report && p) {
      report->strategy = p->chosen;
      report->bytes_sent = ex.sent;
      report->bytes_received = ex.received;
      report->peak_extra_bytes = ex.peak_extra;
      report->relayed = ex.relayed;
      report->t_begin_ns = ex.t_begin;
      report->t_agreed_ns = ex.t_agreed ? ex.t_agreed : ex.t_moved; /* local: agrees at the end */
      report->t_moved_ns = ex.t_moved;
      report->t_done_ns = ts_wait_now_ns();
    }
    return TS_OK;
  }
  ts_shard_free(ex.tgt.data);
  return rc;
}

/* A hierarchical plan: its stages one after the other, each atomic over the same ranks (or the
 * world), each one's result the next one's source; the reshard's source is never written, so a
 * stage that fails on any rank leaves every rank's tensor as it was. The report sums the stages'
 * bytes. */
static int exec_stages(ts_world *w, const ts_plan *p, const ts_tensor *src, const char *tgt_tag,
                       const ts_exec_opts *opts, ts_tensor *out, ts_exec_report *report,
                       ts_error *err) {
  ts_tensor cur = {0}, next;
  const ts_tensor *from = src;
  int rc = TS_OK;
  if (report)
    memset(report, 0, sizeof *report);
  for (int i = 0; rc == TS_OK && i < p->nstages; i++) {
    ts_exec_report r;
    bool last = i == p->nstages - 1;
    rc = exec_one(w, p->stages[i], from, last ? tgt_tag : NULL, last ? ts__plan_avg_count(p) : 1,
                  opts, &next, &r, err);
    ts_shard_free_tensor(&cur);
    if (rc == TS_OK) {
      cur = next;
      ts_box held;
      from = ts_geom_rank_box(p->stages[i]->tgt, ts_world_rank(w), &held) ? &cur : NULL;
      if (report) {
        report->bytes_sent += r.bytes_sent, report->bytes_received += r.bytes_received;
        report->relayed |= r.relayed;
        if (i == 0)
          report->t_begin_ns = r.t_begin_ns, report->t_agreed_ns = r.t_agreed_ns;
        report->t_moved_ns = r.t_moved_ns, report->t_done_ns = r.t_done_ns;
        if (r.peak_extra_bytes > report->peak_extra_bytes)
          report->peak_extra_bytes = r.peak_extra_bytes;
      }
    }
  }
  if (rc == TS_OK) {
    *out = cur;
    if (report)
      report->strategy = TS_STRATEGY_HIER;
  } else {
    memset(out, 0, sizeof *out);
  }
  return rc;
}

int ts_reshard_exec(ts_world *w, const ts_plan *p, const ts_tensor *src, const char *tgt_tag,
                    const ts_exec_opts *opts, ts_tensor *out, ts_exec_report *report,
                    ts_error *err) {
  if (p && p->cyclic)
    return ts__exec_cyclic(w, p, src, tgt_tag, opts, out, report, err);
  if (p && p->chosen == TS_STRATEGY_HIER)
    return exec_stages(w, p, src, tgt_tag, opts, out, report, err);
  return exec_one(w, p, src, tgt_tag, p ? ts__plan_avg_count(p) : 1, opts, out, report, err);
}

/* ---------------------------------------------------------------------------------------------
 * Coalesced: many reshards in one exchange */

#define TS_EXEC_MANY_TAG 31000 /* between the agreements' tags and cma.c's */

bool ts_exec_coalescable(const ts_plan *p, const char *src_tag, const char *tgt_tag) {
  if (!p || (src_tag && src_tag[0]) || (tgt_tag && tgt_tag[0]) || p->chosen == TS_STRATEGY_HIER ||
      p->cyclic)
    return false;
  if (p->src->npartial > 1 || p->tgt->npartial > 1)
    return false;
  int64_t bytes = (int64_t)p->esize;
  for (int d = 0; d < p->ndim; d++)
    bytes *= p->shape[d];
  return bytes <= ((int64_t)1 << 30); /* every piece within one region (ts_comm_region) */
}

/* Item i's part on this rank: slices, target, transfers; in place on both sides (plain slices of
 * a coalescable plan are). Failures local, in ex->lst. */
static void many_prepare(exec *ex, ts_exec_item *it, ts_rank_plan *rp) {
  ex->in_union = ts__plan_union_pos(ex->p, ex->me) >= 0;
  if (!ex->in_union || ex->lst != TS_OK)
    return;
  exec_slices(ex, it->src, NULL);
  if (ex->p->chosen == TS_STRATEGY_ALLREDUCE) { /* reduced in place, slice for slice */
    if (ex->lst == TS_OK && (!ex->in_src || !ex->in_tgt || !ts_box_equal(&ex->sbox, &ex->tbox) ||
                             !dense_row_major(ex->src) || !dense_row_major(&ex->tgt)))
      local_fail(ex, ts_error_set(&ex->lerr, TS_INTERNAL,
                                  "a partial slice of a batch cannot be reduced in place"));
    return;
  }
  if (ex->lst == TS_OK && ts_plan_rank(ex->p, ex->me, rp, &ex->lerr) != TS_OK)
    local_fail(ex, ex->lerr.code);
  if (ex->lst == TS_OK && ((rp->nsend > 0 && !in_place_slice(ex, ex->src, &ex->sbox)) ||
                           (rp->nrecv > 0 && !in_place_slice(ex, &ex->tgt, &ex->tbox))))
    local_fail(ex, ts_error_set(&ex->lerr, TS_INTERNAL,
                                "a slice of a coalesced reshard cannot move in place"));
}

/* The regions of every item's pieces between this rank and the others (comm = world ranks), in
 * item order, and the local pieces copied. */
static int many_regions(exec *ex, ts_rank_plan *rp, int n, ts_comm_region *sreg, int *speer,
                        ts_comm_region *rreg, int *rpeer, int *ns, int *nr) {
  for (int i = 0; i < n; i++) {
    exec *x = &ex[i];
    if (!x->in_union)
      continue;
    for (int k = 0; k < rp[i].nsend; k++) {
      const ts_transfer *t = &rp[i].send[k];
      if (t->peer == x->me)
        continue;
      slice_region(x, x->src, &x->sbox, &t->box, &sreg[*ns]);
      speer[(*ns)++] = t->peer;
      x->sent += t->bytes;
    }
    for (int k = 0; k < rp[i].nrecv; k++) {
      const ts_transfer *t = &rp[i].recv[k];
      if (t->peer == x->me) {
        if (copy_region(x, &x->tgt, &x->tbox, x->src, &x->sbox, &t->box))
          return x->lst;
        continue;
      }
      slice_region(x, &x->tgt, &x->tbox, &t->box, &rreg[*nr]);
      rpeer[(*nr)++] = t->peer;
      x->received += t->bytes;
    }
  }
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Grouped reductions: the P -> R items of a batch in few allreduces */

static int attr_rank(const ts_attr *a, int i) { return a->ranks ? a->ranks[i] : i; }

bool ts_exec_reducible(const ts_plan *p, const char *src_tag, const char *tgt_tag) {
  if (!p || (src_tag && src_tag[0]) || (tgt_tag && tgt_tag[0]) ||
      p->chosen != TS_STRATEGY_ALLREDUCE)
    return false;
  const ts_attr *a = p->src->attr, *b = p->tgt->attr;
  bool same = a->mesh_ndim == b->mesh_ndim && a->nranks == b->nranks;
  for (int m = 0; same && m < a->mesh_ndim; m++) {
    const ts_placement *x = &a->place[m], *y = &b->place[m];
    bool p2r = x->kind == TS_PLACE_PARTIAL && y->kind == TS_PLACE_REPLICATE;
    same = a->mesh_shape[m] == b->mesh_shape[m] &&
           (p2r || (x->kind == y->kind && x->kind != TS_PLACE_PARTIAL &&
                    (x->kind != TS_PLACE_SHARD || (x->dim == y->dim && x->split == y->split))));
  }
  for (int r = 0; same && r < a->nranks; r++)
    same = attr_rank(a, r) == attr_rank(b, r);
  for (int d = 0; same && d < p->ndim; d++) {
    same = a->nsplits[d] == b->nsplits[d];
    for (int k = 0; same && k < a->nsplits[d]; k++)
      same = a->splits[d][k] == b->splits[d][k];
  }
  return same;
}

static bool reduced(const exec *x) { return x->in_union && x->p->chosen == TS_STRATEGY_ALLREDUCE; }

/* Items reduced together: the same mesh lines, dtype and operation. */
static bool same_reduction(const exec *a, const exec *b) {
  if (a->ln.n != b->ln.n || a->p->dtype != b->p->dtype)
    return false;
  for (int k = 0; k < a->ln.n; k++)
    if (a->ln.c[k] != b->ln.c[k] || a->ln.op[k] != b->ln.op[k])
      return false;
  return true;
}

/* Copies m elements between the buffer and the group's slices, from the cursor (item g[*k],
 * element *at) on: into the buffer (pack) or back into the targets; moves the cursor. */
static void group_copy(exec *ex, const int *g, int *k, int64_t *at, char *buf, int64_t m,
                       bool pack) {
  while (m > 0) {
    exec *x = &ex[g[*k]];
    int64_t n = ts_box_numel(&x->tbox) - *at;
    if (n > m)
      n = m;
    size_t off = (size_t)*at * x->es, len = (size_t)n * x->es;
    if (pack)
      memcpy(buf, (const char *)x->src->data + x->src->layout.offset + off, len);
    else
      memcpy((char *)x->tgt.data + x->tgt.layout.offset + off, buf, len);
    buf += len;
    m -= n;
    *at += n;
    if (*at == ts_box_numel(&x->tbox)) {
      (*k)++;
      *at = 0;
    }
  }
}

/* One group: its slices packed into the buffer in rounds of at most the staging bound (the same
 * rounds on every rank of its lines, which hold the same items of the same sizes), each round
 * reduced in place along every line, then copied into the targets. */
static int reduce_group(exec *ex, const int *g, int ng, char *buf, ts_error *err) {
  exec *x0 = &ex[g[0]];
  int64_t total = 0;
  for (int i = 0; i < ng; i++)
    total += ts_box_numel(&ex[g[i]].tbox);
  int64_t cap = x0->p->staging / (int64_t)x0->es;
  cap = cap < 1 ? 1 : cap > total ? total : cap;
  int k = 0, rc = TS_OK;
  int64_t at = 0;
  for (int64_t done = 0; done < total && rc == TS_OK;) {
    int64_t m = total - done < cap ? total - done : cap;
    int k0 = k;
    int64_t at0 = at;
    group_copy(ex, g, &k, &at, buf, m, true);
    for (int l = 0; l < x0->ln.n && rc == TS_OK; l++)
      rc = ts_comm_allreduce(x0->ln.c[l], NULL, buf, m, x0->p->dtype, x0->ln.op[l], err);
    if (rc == TS_OK)
      group_copy(ex, g, &k0, &at0, buf, m, false);
    done += m;
  }
  for (int i = 0; rc == TS_OK && i < ng; i++) {
    exec *x = &ex[g[i]];
    int64_t bytes = ts_box_numel(&x->tbox) * (int64_t)x->es;
    /* P(avg): the sums divided once (the targets are dense: group_copy filled them) */
    int64_t count = ts__plan_avg_count(x->p);
    if (count > 1)
      rc = ts_reduce_finish((char *)x->tgt.data + x->tgt.layout.offset,
                            (size_t)ts_box_numel(&x->tbox), x->p->dtype, TS_REDUCE_AVG, count, err);
    for (int l = 0; l < x->ln.n; l++) {
      int64_t pm = ts_comm_size(x->ln.c[l]);
      x->sent += 2 * (pm - 1) * bytes / pm;
      x->received += 2 * (pm - 1) * bytes / pm;
    }
  }
  return rc;
}

/* The batch's reduced items, once its agreement passed: their lines made (then agreed: a rank
 * that could not make one must not leave the others in a reduction), then grouped. */
static int run_reduced(ts_world *w, exec *ex, int n, char *buf, ts_error *err) {
  int *g = malloc((size_t)(n ? n : 1) * sizeof *g);
  bool *taken = calloc((size_t)(n ? n : 1), sizeof *taken);
  ts_error lerr;
  int lst = g && taken ? TS_OK : ts_error_set(&lerr, TS_NO_MEMORY, "no memory for %d items", n);
  for (int i = 0; lst == TS_OK && i < n; i++)
    if (reduced(&ex[i]) && make_comms(&ex[i], &lerr) != TS_OK)
      lst = lerr.code;
  int rc = ts_comm_agree(ts_world_comm(w), lst, &lerr, err);
  for (int i = 0; rc == TS_OK && i < n; i++) {
    if (taken[i] || !reduced(&ex[i]))
      continue;
    int ng = 0;
    for (int j = i; j < n; j++)
      if (!taken[j] && reduced(&ex[j]) && same_reduction(&ex[i], &ex[j])) {
        g[ng++] = j;
        taken[j] = true;
      }
    rc = reduce_group(ex, g, ng, buf, err);
  }
  free(g);
  free(taken);
  return rc;
}

/* The buffer of the reductions: the staging bound, or less when this rank's reduced slices are
 * smaller (each group's rounds fit either way). */
static int64_t reduced_bytes(const exec *ex, int n) {
  int64_t total = 0, cap = 0;
  for (int i = 0; i < n; i++)
    if (reduced(&ex[i])) {
      total += ts_box_numel(&ex[i].tbox) * (int64_t)ex[i].es;
      cap = ex[i].p->staging;
    }
  return total < cap ? total : cap;
}

int ts_reshard_exec_many(ts_world *w, int n, ts_exec_item *items, int prior_status,
                         const ts_error *prior_err, ts_error *err) {
  exec *ex = calloc((size_t)(n ? n : 1), sizeof *ex);
  ts_rank_plan *rp = calloc((size_t)(n ? n : 1), sizeof *rp);
  ts_error lerr;
  int lst = prior_status;
  if (lst != TS_OK)
    lerr = prior_err ? *prior_err : (ts_error){.code = lst};
  if (!ex || !rp)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory to run a batch of %d reshards", n);
  int64_t held = 0, nsend = 0, nrecv = 0;
  for (int i = 0; lst == TS_OK && i < n; i++) {
    exec *x = &ex[i];
    x->w = w;
    x->p = items[i].plan;
    x->me = ts_world_rank(w);
    int64_t left = items[i].max_alloc - held;
    x->max_alloc = items[i].max_alloc > 0 ? (left > 0 ? left : 1) : 0;
    x->si = x->ti = -1;
    x->lst = items[i].prior_status;
    if (x->lst != TS_OK)
      x->lerr = items[i].prior_err ? *items[i].prior_err : (ts_error){.code = x->lst};
    many_prepare(x, &items[i], &rp[i]);
    held += (int64_t)x->tgt.bytes;
    nsend += rp[i].nsend;
    nrecv += rp[i].nrecv;
    if (x->lst != TS_OK)
      lst = ts_error_set(&lerr, x->lst, "tensor '%s' of the batch: %s", items[i].name, x->lerr.msg);
  }
  ts_comm_region *reg = lst == TS_OK ? malloc((size_t)(nsend + nrecv + 1) * sizeof *reg) : NULL;
  int *peer = lst == TS_OK ? malloc((size_t)(nsend + nrecv + 1) * sizeof *peer) : NULL;
  if (lst == TS_OK && (!reg || !peer))
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the %lld pieces of a batch",
                       (long long)(nsend + nrecv));
  bool reduce = false; /* the same on every rank: every rank plans every item */
  for (int i = 0; i < n; i++)
    reduce = reduce || items[i].plan->chosen == TS_STRATEGY_ALLREDUCE;
  int64_t rbytes = lst == TS_OK ? reduced_bytes(ex, n) : 0;
  char *rbuf = rbytes > 0 ? ts_shard_alloc_as((size_t)rbytes, TS_POOL_STAGING,
                                              "the batch's reduction buffer", &lerr)
                          : NULL;
  if (rbytes > 0 && !rbuf)
    lst = lerr.code;
  /* The one agreement: every item prepared on every rank. Once it passed, nothing can fail but
   * MPI itself: the pieces move in place, and the commit needs no second agreement. */
  int rc = ts_comm_agree(ts_world_comm(w), lst, &lerr, err);
  int ns = 0, nr = 0;
  if (rc == TS_OK)
    rc = many_regions(ex, rp, n, reg, peer, reg + nsend, peer + nsend, &ns, &nr);
  if (rc == TS_OK)
    rc = ts_comm_exchange_many(ts_world_comm(w), ns, peer, reg, nr, peer + nsend, reg + nsend,
                               TS_EXEC_MANY_TAG, err);
  if (rc == TS_OK && reduce)
    rc = run_reduced(w, ex, n, rbuf, err);
  ts_shard_free(rbuf);
  for (int i = 0; ex && rp && i < n; i++) {
    if (rc == TS_OK) {
      items[i].out = ex[i].tgt;
      /* Pieces between pairs of ranks, as the intersection strategies move them: the plan's
       * own when it is one of them (local, p2p, all-to-all), else point-to-point. */
      ts_strategy ran = ex[i].p->chosen;
      if (ran != TS_STRATEGY_LOCAL && ran != TS_STRATEGY_ALLTOALL && ran != TS_STRATEGY_ALLREDUCE)
        ran = TS_STRATEGY_P2P;
      items[i].report = (ts_exec_report){
          .strategy = ran, .bytes_sent = ex[i].sent, .bytes_received = ex[i].received};
    } else {
      ts_shard_free(ex[i].tgt.data);
    }
    ts_rank_plan_clear(&rp[i]);
  }
  free(reg);
  free(peer);
  free(ex);
  free(rp);
  return rc;
}
