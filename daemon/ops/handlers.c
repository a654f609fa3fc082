/* handlers.c - the engine half of the table of the daemon's operations: one row per Request op
 * case, indexed by it like the wire half (wire/optable.c), naming the functions that run an
 * operation (on this rank at once, or on every rank in rank 0's order), the names it may change
 * (and those whose data it writes, for its idempotency key) and the answer to its waiting clients;
 * and tsd_ops, the entry points the engine runs every operation through (local handlers timed there
 * for the metrics' histograms). Ping has no row: the loop thread answers it (front/server.c). */
#include <stdio.h>
#include <time.h>

#include "ts_wait.h"

#include "einsum.h"
#include "handlers.h"
#include "oplog.h"
#include "program.h"
#include "put_verify.h"
#include "trace.h"

#define OP(kind) TSHARD__REQUEST__OP_##kind
static const tsd_op_handlers handlers[] = {
    [OP(CREATE)] = {.run_collective = tsd_run_create, .changes = tsd_changes_create},
    [OP(PUT)] = {.run_local = tsd_handle_put_chunk,
                 .run_collective = tsd_run_put,
                 .touches = tsd_touches_put,
                 .answer = tsd_answer_put},
    [OP(PUT_SLICE)] = {.run_local = tsd_handle_put_slice},
    [OP(GET)] = {.run_local = tsd_handle_get_chunk,
                 .run_collective = tsd_run_get,
                 .answer = tsd_answer_get},
    [OP(GET_SLICE)] = {.run_local = tsd_handle_get_slice},
    [OP(RESHARD)] = {.run_collective = tsd_run_reshard,
                     .changes = tsd_changes_reshard,
                     .answer = tsd_answer_reshard},
    [OP(DROP)] = {.run_collective = tsd_run_drop, .changes = tsd_changes_drop},
    [OP(LIST)] = {.run_local = tsd_op_catalog},
    [OP(DESCRIBE)] = {.run_local = tsd_op_catalog},
    [OP(PLAN)] = {.run_local = tsd_op_plan},
    [OP(STATS)] = {.run_local = tsd_op_stats},
    [OP(TRACE)] = {.run_local = tsd_op_trace},
    [OP(SHUTDOWN)] = {.run_collective = tsd_run_shutdown},
    [OP(EINSUM)] = {.run_collective = tsd_run_einsum,
                    .changes = tsd_changes_einsum,
                    .answer = tsd_answer_einsum},
    [OP(EINSUM_BACKWARD)] = {.run_collective = tsd_run_einsum_backward,
                             .changes = tsd_changes_einsum_backward},
    [OP(EINSUM_RELEASE)] = {.run_collective = tsd_run_einsum_release},
    [OP(EINSUM_PLAN)] = {.run_local = tsd_op_einsum_plan},
    [OP(SAVE)] = {.run_collective = tsd_run_save, .answer = tsd_answer_ckpt},
    [OP(LOAD)] = {.run_collective = tsd_run_load,
                  .changes = tsd_changes_load,
                  .answer = tsd_answer_ckpt},
    [OP(SAVE_FINISH)] = {.run_collective = tsd_run_save_finish},
    [OP(OBSERVE)] = {.run_collective = tsd_run_observe},
    [OP(SHM_ATTACH)] = {.run_local = tsd_shm_attach},
    [OP(PROGRAM_COMPILE)] = {.run_collective = tsd_run_program_compile,
                             .answer = tsd_answer_program_compile},
    [OP(PROGRAM_RUN)] = {.run_collective = tsd_run_program_run, .changes = tsd_changes_program_run},
    [OP(PROGRAM_DROP)] = {.run_collective = tsd_run_program_drop},
    [OP(PROGRAM_SHOW)] = {.run_local = tsd_op_program_show},
    [OP(RESHARD_MANY)] = {.run_collective = tsd_run_reshard_many,
                          .changes = tsd_changes_reshard_many,
                          .answer = tsd_answer_reshard_many},
    [OP(DROP_MANY)] = {.run_collective = tsd_run_drop_many, .changes = tsd_changes_drop_many},
    [OP(CREATE_MANY)] = {.run_collective = tsd_run_create_many, .changes = tsd_changes_create_many},
    [OP(PUT_MANY)] = {.run_local = tsd_handle_put_many,
                      .run_collective = tsd_run_put_many,
                      .answer = tsd_answer_put},
    [OP(GET_MANY)] = {.run_local = tsd_handle_get_many,
                      .run_collective = tsd_run_get_many,
                      .answer = tsd_answer_get_many},
    [OP(IMPORT_SAFETENSORS)] = {.run_collective = tsd_run_import_safetensors,
                                .changes = tsd_changes_import_safetensors,
                                .answer = tsd_answer_safetensors},
    [OP(EXPORT_SAFETENSORS)] = {.run_collective = tsd_run_export_safetensors,
                                .answer = tsd_answer_safetensors},
};
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
