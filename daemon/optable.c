/* optable.c - the one table of the daemon's operations, in the manner of Redis's command table:
 * one entry per Request op case with its name, its scope (who runs it), its validator, and the
 * functions that run and answer it. The loop thread (server.c) reads the scope, the validator and
 * the loop answer; the engine (engine.c) the local handler; the sequencer's runs (ops.c) the
 * collective handler, the names it changes and the answer to its waiting clients. Adding an
 * operation is one entry here and its functions.
 *
 * Scopes: LOOP (answered by the loop thread: ping), CATALOG (answered by the loop thread from
 * the catalog, or by the engine's local handler when the names are busy or the connection has
 * requests there: list, describe), LOCAL (this rank's engine at once) and COLLECTIVE (ordered by
 * rank 0, run on every rank). A get is collective for its first chunk (offset 0: the gather) and
 * local for the next ones (they read the copy); a put is local, and its handler stages the
 * chunks and submits the complete put as a collective operation itself (the data must be whole
 * before the other ranks are asked).
 *
 * The fuzz target builds the wire layer alone (framing, validation) and compiles this file with
 * TSD_WIRE_ONLY, which leaves out the engine's and the loop's functions (ENGINE() gives NULL). */
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "einsum.h"
#include "program.h"
#ifdef TSD_WIRE_ONLY
#define ENGINE(f) NULL
#else
#include "engine.h"
#include "oplog.h"
#include "shm.h"
#define ENGINE(f) f
#endif

static tsd_scope get_scope(const Tshard__Request *req) {
  return req->get->offset == 0 ? TSD_SCOPE_COLLECTIVE : TSD_SCOPE_LOCAL;
}

#define OP(kind) TSHARD__REQUEST__OP_##kind
static const tsd_op ops[] = {
    /* kind, name, scope, scope_of, unix_only, validate, run_loop, run_local, run_collective,
     * changes, answer */
    {OP(PING), "ping", TSD_SCOPE_LOOP, NULL, false, tsd_validate_none, ENGINE(tsd_loop_ping),
     NULL, NULL, NULL, NULL},
    {OP(CREATE), "create", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_create, NULL, NULL,
     ENGINE(tsd_run_create), ENGINE(tsd_changes_create), NULL},
    {OP(PUT), "put", TSD_SCOPE_LOCAL, NULL, false, tsd_validate_put, NULL,
     ENGINE(tsd_handle_put_chunk), ENGINE(tsd_run_put), NULL, ENGINE(tsd_answer_put)},
    {OP(PUT_SLICE), "put_slice", TSD_SCOPE_LOCAL, NULL, false, tsd_validate_put_slice, NULL,
     ENGINE(tsd_handle_put_slice), NULL, NULL, NULL},
    {OP(GET), "get", TSD_SCOPE_LOCAL, get_scope, false, tsd_validate_get, NULL,
     ENGINE(tsd_handle_get_chunk), ENGINE(tsd_run_get), NULL, ENGINE(tsd_answer_get)},
    {OP(GET_SLICE), "get_slice", TSD_SCOPE_LOCAL, NULL, false, tsd_validate_get_slice, NULL,
     ENGINE(tsd_handle_get_slice), NULL, NULL, NULL},
    {OP(RESHARD), "reshard", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_reshard, NULL, NULL,
     ENGINE(tsd_run_reshard), ENGINE(tsd_changes_reshard), ENGINE(tsd_answer_reshard)},
    {OP(DROP), "drop", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_drop, NULL, NULL,
     ENGINE(tsd_run_drop), ENGINE(tsd_changes_drop), NULL},
    {OP(LIST), "list", TSD_SCOPE_CATALOG, NULL, false, tsd_validate_none,
     ENGINE(tsd_catalog_loop_answer), ENGINE(tsd_op_catalog), NULL, NULL, NULL},
    {OP(DESCRIBE), "describe", TSD_SCOPE_CATALOG, NULL, false, tsd_validate_describe,
     ENGINE(tsd_catalog_loop_answer), ENGINE(tsd_op_catalog), NULL, NULL, NULL},
    {OP(PLAN), "plan", TSD_SCOPE_LOCAL, NULL, false, tsd_validate_plan, NULL,
     ENGINE(tsd_op_plan), NULL, NULL, NULL},
    {OP(STATS), "stats", TSD_SCOPE_LOCAL, NULL, false, tsd_validate_none, NULL,
     ENGINE(tsd_op_stats), NULL, NULL, NULL},
    {OP(SHUTDOWN), "shutdown", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_none, NULL, NULL,
     ENGINE(tsd_run_shutdown), NULL, NULL},
    {OP(EINSUM), "einsum", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_einsum, NULL, NULL,
     ENGINE(tsd_run_einsum), ENGINE(tsd_changes_einsum), ENGINE(tsd_answer_einsum)},
    {OP(EINSUM_BACKWARD), "einsum_backward", TSD_SCOPE_COLLECTIVE, NULL, false,
     tsd_validate_einsum_backward, NULL, NULL, ENGINE(tsd_run_einsum_backward),
     ENGINE(tsd_changes_einsum_backward), NULL},
    {OP(EINSUM_RELEASE), "einsum_release", TSD_SCOPE_COLLECTIVE, NULL, false,
     tsd_validate_einsum_release, NULL, NULL, ENGINE(tsd_run_einsum_release), NULL, NULL},
    {OP(EINSUM_PLAN), "einsum_plan", TSD_SCOPE_LOCAL, NULL, false, tsd_validate_einsum_plan, NULL,
     ENGINE(tsd_op_einsum_plan), NULL, NULL, NULL},
    {OP(SAVE), "save", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_save, NULL, NULL,
     ENGINE(tsd_run_save), NULL, NULL},
    {OP(LOAD), "load", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_load, NULL, NULL,
     ENGINE(tsd_run_load), ENGINE(tsd_changes_load), NULL},
    {OP(SHM_ATTACH), "shm_attach", TSD_SCOPE_LOCAL, NULL, true, tsd_validate_none, NULL,
     ENGINE(tsd_shm_attach), NULL, NULL, NULL},
    {OP(PROGRAM_COMPILE), "program_compile", TSD_SCOPE_COLLECTIVE, NULL, false,
     tsd_validate_program_compile, NULL, NULL, ENGINE(tsd_run_program_compile), NULL,
     ENGINE(tsd_answer_program_compile)},
    {OP(PROGRAM_RUN), "program_run", TSD_SCOPE_COLLECTIVE, NULL, false, tsd_validate_program_run,
     NULL, NULL, ENGINE(tsd_run_program_run), ENGINE(tsd_changes_program_run), NULL},
    {OP(PROGRAM_DROP), "program_drop", TSD_SCOPE_COLLECTIVE, NULL, false,
     tsd_validate_program_drop, NULL, NULL, ENGINE(tsd_run_program_drop), NULL, NULL},
    {OP(PROGRAM_SHOW), "program_show", TSD_SCOPE_LOCAL, NULL, false, tsd_validate_program_show,
     NULL, ENGINE(tsd_op_program_show), NULL, NULL, NULL},
};
#define NOPS (sizeof ops / sizeof ops[0])

const tsd_op *tsd_op_find(int op_case) {
  for (size_t i = 0; i < NOPS; i++)
    if ((int)ops[i].kind == op_case)
      return &ops[i];
  return NULL;
}

const char *tsd_op_name(int op_case) {
  const tsd_op *op = tsd_op_find(op_case);
  return op ? op->name : "unknown";
}

tsd_scope tsd_op_scope(const tsd_op *op, const Tshard__Request *req) {
  return op->scope_of ? op->scope_of(req) : op->scope;
}

int tsd_request_validate(const Tshard__Request *req, const tsd_limits *lim, const tsd_op **out,
                         ts_error *err) {
  *out = NULL;
  int rc = tsd_validate_header(req, err);
  if (rc)
    return rc;
  const tsd_op *op = tsd_op_find((int)req->op_case);
  if (!op) {
    char known[256] = "";
    size_t n = 0;
    for (size_t i = 0; i < NOPS && n < sizeof known; i++)
      n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", ops[i].name);
    return ts_error_set(err, TS_UNSUPPORTED,
                        "unknown operation (field %d of Request.op); known: %s",
                        (int)req->op_case, known);
  }
  *out = op;
  rc = op->validate(req, lim, err);
  return rc ? rc : tsd_validate_participants(req, op, lim, err);
}
