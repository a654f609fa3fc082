/* handlers.c - the engine half of the table of the daemon's operations: the list TSD_OPERATIONS
 * (tsd_wire.h) expanded into its ops columns, indexed by op case, naming the functions that run an
 * operation (on this rank at once, or on every rank in rank 0's order), the names it may change
 * (and those whose data it writes, for its idempotency key) and the answer to its waiting clients;
 * and tsd_ops, the entry points the engine runs every operation through (local handlers timed there
 * for the metrics' histograms). Ping's ops columns are empty: the loop thread answers it
 * (front/server.c). */
#include <stdio.h>
#include <time.h>

#include "ts_wait.h"

#include "einsum.h"
#include "handlers.h"
#include "oplog.h"
#include "program.h"
#include "put_verify.h"
#include "trace.h"

/* The ops columns of the list (tsd_wire.h). */
#define ENGINE_ROW(kind, name, scope, scope_of, flags, validate, loop, local_, collective_,        \
                   changes_, touches_, answer_)                                                    \
  [TSHARD__REQUEST__OP_##kind] = {.run_local = local_,                                             \
                                  .run_collective = collective_,                                   \
                                  .changes = changes_,                                             \
                                  .touches = touches_,                                             \
                                  .answer = answer_},
static const tsd_op_handlers handlers[] = {TSD_OPERATIONS(ENGINE_ROW)};
#define NHANDLERS (sizeof handlers / sizeof handlers[0])

const tsd_op_handlers *tsd_op_handlers_find(int op_case) {
  if (op_case <= 0 || (size_t)op_case >= NHANDLERS)
    return NULL;
  const tsd_op_handlers *h = &handlers[op_case];
  return h->run_local || h->run_collective ? h : NULL;
}

static void run_local(tsd_engine *e, tsd_work *w) {
  tsd_ops_after(e); /* the last collective operation's catalog entries and line come first */
  const tsd_op_handlers *h = tsd_op_handlers_find((int)w->req->op_case);
  if (h && h->run_local) {
    int op_case = (int)w->req->op_case; /* the handler may take the request */
    char name[TS_NAME_MAX] = "";
    if (tsd_trace_on()) /* the handler may free the request: the name is kept for the ring */
      snprintf(name, sizeof name, "%s", tsd_oplog_tensor(w->req));
    uint64_t req_id = w->req->id;
    int64_t t0 = ts_wait_now_ns();
    h->run_local(e, w);
    tsd_trace_local(op_case, name, req_id, w->t_recv_ns, t0);
    int64_t ns = ts_wait_now_ns() - t0;
    if (!h->run_collective) /* those are timed where they run (oplog.c) */
      tsd_count_latency(op_case, ns > 0 ? (uint64_t)ns : 0); /* the metrics' histogram */
  } else
    tsd_reply_status(e, w->conn_id, w->req->id, TS_INTERNAL, "operation has no local handler");
}

/* The names an operation's idempotency key touches: its changes and the tensors it writes. */
static void key_names(const Tshard__Request *req, tsd_changes *ch) {
  const tsd_op_handlers *h = tsd_op_handlers_find((int)req->op_case);
  if (h && h->changes)
    h->changes(req, ch);
  if (h && h->touches)
    h->touches(req, ch);
}

static void stop(tsd_engine *e) {
  tsd_ops_after(e);
  tsd_trace_stop();
  tsd_bgsave_stop();
  tsd_programs_free();
  tsd_safetensors_free();
  tsd_einsum_free_all(e);
  tsd_session_free_all(e);
}

/* Before serving: the trace ring, then the snapshot directories (and a resume). */
static int start(tsd_engine *e, ts_error *err) {
  int rc = tsd_trace_start(e->cfg->trace_ring, err);
  return rc ? rc : tsd_snapdir_start(e, err);
}

/* Every turn of the engine's loop, after the operations that ran answered. */
static bool tick(tsd_engine *e) {
  bool did = tsd_ops_after(e);
  did = tsd_bgsave_tick(e) || did;
  return tsd_observe_tick(e) || did;
}

/* The earliest of the ticks' timed work (-1: none). */
static int64_t tick_due_ms(tsd_engine *e) {
  int64_t a = tsd_bgsave_due_ms(e), b = tsd_observe_due_ms(e);
  return a < 0 ? b : b < 0 || a < b ? a : b;
}

const tsd_engine_ops tsd_ops = {
    .run_local = run_local,
    .run_collective = tsd_run_collective,
    .answer = tsd_answer_collective,
    .key_names = key_names,
    .conn_closed = tsd_session_free,
    .staging_give = tsd_staging_give,
    .stop = stop,
    .tick = tick,
    .tick_due_ms = tick_due_ms,
    .start = start,
};
