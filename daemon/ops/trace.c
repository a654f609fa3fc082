/* trace.c - the trace ring: for each of the last --trace-ring operations this rank ran, when it
 * reached each point of its way (received, submitted, ordered, started, planned, agreed, moved,
 * committed, ended, answered; trace.h), with its kind, tensor, strategy, bytes and status.
 *
 * Collective operations are recorded by ops.c around their run (begin, end), the executor's
 * phases by the reshard handler (exec), the answer by the answer hook; local operations by the
 * engine half of the table (handlers.c) in one call. The ring is a fixed array written in turn:
 * recording is a few clock reads and one copy, and the oldest record gives way. A TraceRequest
 * reads it on the engine thread, between operations, and answers the points in rank 0's clock
 * (this rank's clock plus the offset measured at start-up, ts_world_clock_offset), so that the
 * ranks' records of one operation (the same seq) line up. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oplog.h"
#include "trace.h"
#include "ts_wait.h"

#define TRACE_NAME 65 /* a tensor's name, cut to 64 bytes */

typedef struct trace_rec {
  uint64_t seq, req_id;
  int op_case, status;
  bool origin, noted;
  ts_strategy strategy;
  uint64_t sent, received;
  char name[TRACE_NAME];
  int64_t t[TSD_PT_COUNT]; /* this rank's clock, ns; 0: not reached */
} trace_rec;

static const char *const point_names[TSD_PT_COUNT] = {
    [TSD_PT_RECEIVED] = "received", [TSD_PT_SUBMITTED] = "submitted", [TSD_PT_ORDERED] = "ordered",
    [TSD_PT_STARTED] = "started",   [TSD_PT_PLANNED] = "planned",     [TSD_PT_AGREED] = "agreed",
    [TSD_PT_MOVED] = "moved",       [TSD_PT_COMMITTED] = "committed", [TSD_PT_ENDED] = "ended",
    [TSD_PT_ANSWERED] = "answered",
};

static struct {
  trace_rec *ring;
  uint64_t cap, count; /* the ring holds records count - min(count, cap) .. count - 1 */
  trace_rec cur;       /* the collective operation running now */
  bool running;
} tr;

int tsd_trace_start(int64_t n, ts_error *err) {
  tsd_trace_stop();
  if (n <= 0)
    return TS_OK;
  tr.ring = calloc((size_t)n, sizeof *tr.ring);
  if (!tr.ring)
    return ts_error_set(err, TS_NO_MEMORY,
                        "no memory for a trace ring of %lld operations "
                        "(--trace-ring)",
                        (long long)n);
  tr.cap = (uint64_t)n;
  return TS_OK;
}

bool tsd_trace_on(void) { return tr.ring != NULL; }

void tsd_trace_stop(void) {
  free(tr.ring);
  memset(&tr, 0, sizeof tr);
}

static void set_name(trace_rec *r, const char *name) {
  snprintf(r->name, sizeof r->name, "%s", name ? name : "");
}

void tsd_trace_begin(const tsd_ordered *op, const tsd_pending *origin) {
  if (!tr.ring)
    return;
  trace_rec *r = &tr.cur;
  memset(r, 0, sizeof *r);
  r->seq = op->seq;
  r->op_case = op->op_case;
  set_name(r, op->req ? tsd_oplog_tensor(op->req) : "");
  if (origin) {
    r->origin = true;
    r->req_id = origin->req_id;
    r->t[TSD_PT_RECEIVED] = origin->t_recv_ns;
    r->t[TSD_PT_SUBMITTED] = origin->t_submit_ns;
  }
  r->t[TSD_PT_ORDERED] = op->t_order_ns;
  r->t[TSD_PT_STARTED] = ts_wait_now_ns();
  tr.running = true;
}

void tsd_trace_exec(const ts_exec_report *rep) {
  if (!tr.running)
    return;
  trace_rec *r = &tr.cur;
  r->noted = true;
  r->strategy = rep->strategy;
  r->sent += (uint64_t)rep->bytes_sent;
  r->received += (uint64_t)rep->bytes_received;
  if (!r->t[TSD_PT_PLANNED]) /* several reshards in one operation: the first one's beginning */
    r->t[TSD_PT_PLANNED] = rep->t_begin_ns, r->t[TSD_PT_AGREED] = rep->t_agreed_ns;
  if (rep->t_done_ns)
    r->t[TSD_PT_MOVED] = rep->t_moved_ns, r->t[TSD_PT_COMMITTED] = rep->t_done_ns;
}

static trace_rec *push(const trace_rec *r) {
  trace_rec *slot = &tr.ring[tr.count % tr.cap];
  *slot = *r;
  tr.count++;
  return slot;
}

void tsd_trace_end(int status) {
  if (!tr.running)
    return;
  tr.cur.status = status;
  tr.cur.t[TSD_PT_ENDED] = ts_wait_now_ns();
  push(&tr.cur);
  tr.running = false;
}

void tsd_trace_answered(uint64_t req_id) {
  if (!tr.ring || !tr.count)
    return;
  trace_rec *last = &tr.ring[(tr.count - 1) % tr.cap];
  if (last->origin && last->req_id == req_id && !last->t[TSD_PT_ANSWERED])
    last->t[TSD_PT_ANSWERED] = ts_wait_now_ns();
}

void tsd_trace_local(int op_case, const char *name, uint64_t req_id, int64_t t_recv,
                     int64_t t_start) {
  if (!tr.ring || op_case == TSHARD__REQUEST__OP_TRACE)
    return;
  trace_rec r = {.req_id = req_id, .op_case = op_case, .origin = true};
  set_name(&r, name);
  r.t[TSD_PT_RECEIVED] = t_recv;
  r.t[TSD_PT_STARTED] = t_start;
  r.t[TSD_PT_ENDED] = r.t[TSD_PT_ANSWERED] = ts_wait_now_ns();
  push(&r);
}

/* The ring's records asked: the last `last` (0: all) of those that ended within the last
 * `within` ns (0: any), oldest first. *first: the index (of count) of the first one. */
static uint64_t select_records(uint32_t last, int64_t within, uint64_t *first) {
  uint64_t held = tr.count < tr.cap ? tr.count : tr.cap, lo = tr.count - held;
  uint64_t from = lo;
  int64_t since = within > 0 ? ts_wait_now_ns() - within : INT64_MIN;
  while (from < tr.count && tr.ring[from % tr.cap].t[TSD_PT_ENDED] < since)
    from++;
  uint64_t n = tr.count - from;
  if (last && n > last)
    from += n - last, n = last;
  *first = from;
  return n;
}

static void fill_op(const tsd_engine *e, const trace_rec *r, Tshard__TraceOp *o, int64_t *pts) {
  tshard__trace_op__init(o);
  o->seq = r->seq;
  o->kind = (char *)tsd_op_name(r->op_case);
  o->name = (char *)r->name;
  o->strategy = (char *)(r->noted ? ts_strategy_name(r->strategy) : "");
  o->status = r->status;
  o->bytes_sent = r->sent;
  o->bytes_received = r->received;
  o->origin = r->origin;
  o->request_id = r->req_id;
  o->tensors = 1;
  for (int p = 0; p < TSD_PT_COUNT; p++)
    pts[p] = r->t[p] ? r->t[p] + e->clock_offset_ns : 0;
  o->n_points = TSD_PT_COUNT;
  o->points = pts;
}

void tsd_op_trace(tsd_engine *e, tsd_work *w) {
  const Tshard__TraceRequest *q = w->req->trace;
  Tshard__Response resp = TSHARD__RESPONSE__INIT;
  Tshard__TraceResult res = TSHARD__TRACE_RESULT__INIT;
  uint64_t first = 0, n = tr.ring ? select_records(q->last, q->within_ns, &first) : 0;
  Tshard__TraceOp *ops = calloc(n ? n : 1, sizeof *ops);
  Tshard__TraceOp **opp = calloc(n ? n : 1, sizeof *opp);
  int64_t *pts = calloc(n ? n * TSD_PT_COUNT : 1, sizeof *pts);
  if (!ops || !opp || !pts) {
    free(ops), free(opp), free(pts);
    tsd_reply_status(e, w->conn_id, w->req->id, TS_NO_MEMORY,
                     "no memory to answer the trace: ask for fewer operations (--last)");
    return;
  }
  for (uint64_t i = 0; i < n; i++) {
    fill_op(e, &tr.ring[(first + i) % tr.cap], &ops[i], pts + i * TSD_PT_COUNT);
    opp[i] = &ops[i];
  }
  res.rank = e->rank;
  res.clock_offset_ns = e->clock_offset_ns;
  res.clock_rtt_ns = e->clock_rtt_ns;
  res.n_point_names = TSD_PT_COUNT;
  res.point_names = (char **)point_names;
  res.n_ops = (size_t)n;
  res.ops = opp;
  uint64_t held = tr.count < tr.cap ? tr.count : tr.cap;
  res.dropped = tr.count - held;
  res.ring = (uint32_t)tr.cap;
  const char *host = ts_world_host_name(e->world, e->rank);
  res.host = (char *)(host ? host : "");
  resp.id = w->req->id;
  resp.result_case = TSHARD__RESPONSE__RESULT_TRACE;
  resp.trace = &res;
  tsd_reply_response(e, w->conn_id, &resp);
  free(ops), free(opp), free(pts);
}
