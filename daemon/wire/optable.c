/* optable.c - the wire half of the table of the daemon's operations, in the manner of Redis's
 * command table: one row per Request op case, indexed by it, with its name, its scope (who runs
 * it), whether it needs a Unix socket, and its validator. The loop thread (front/server.c) reads
 * the scope and the validator of every request; the engine half (daemon/ops/handlers.c: the
 * functions that run and answer each operation) and the loop thread's own answers
 * (front/server.c) are indexed by the same op case. Adding an operation is a row here, a row
 * there, and its functions.
 *
 * Scopes: LOOP (answered by the loop thread: ping), CATALOG (answered by the loop thread from
 * the catalog, or by the engine's local handler when the names are busy or the connection has
 * requests there: list, describe), LOCAL (this rank's engine at once) and COLLECTIVE (ordered by
 * rank 0, run on every rank). A get is collective for its first chunk (offset 0: the gather) and
 * local for the next ones (they read the copy); a put is local, and its handler stages the
 * chunks and submits the complete put as a collective operation itself (the data must be whole
 * before the other ranks are asked). put_many and get_many are local the same way: their
 * handlers check the batch and submit the collective themselves (daemon/ops/batch_io.c).
 *
 * Flags (TSD_OP_*, tsd_wire.h) say what the layers that treat some kinds apart need to know of
 * a row: that it stops the daemon, holds no agreement, gathers to the submitting rank, or may
 * move its data through the client's memory. They test the flags, never the op case. */
#include <stdio.h>
#include <string.h>

#include "tsd_wire.h"

static tsd_scope get_scope(const Tshard__Request *req) {
  return req->get->offset == 0 ? TSD_SCOPE_COLLECTIVE : TSD_SCOPE_LOCAL;
}

#define OP(kind) TSHARD__REQUEST__OP_##kind
static const tsd_op ops[] = {
    [OP(PING)] = {.name = "ping", .scope = TSD_SCOPE_LOOP, .validate = tsd_validate_none},
    [OP(CREATE)] = {.name = "create",
                    .scope = TSD_SCOPE_COLLECTIVE,
                    .validate = tsd_validate_create},
    [OP(PUT)] = {.name = "put",
                 .scope = TSD_SCOPE_LOCAL,
                 .flags = TSD_OP_CLIENT_MEMORY,
                 .validate = tsd_validate_put},
    [OP(PUT_SLICE)] = {.name = "put_slice",
                       .scope = TSD_SCOPE_LOCAL,
                       .flags = TSD_OP_CLIENT_MEMORY,
                       .validate = tsd_validate_put_slice},
    [OP(GET)] = {.name = "get",
                 .scope = TSD_SCOPE_LOCAL,
                 .scope_of = get_scope,
                 .flags = TSD_OP_GATHERS_TO_ORIGIN | TSD_OP_CLIENT_MEMORY,
                 .validate = tsd_validate_get},
    [OP(GET_SLICE)] = {.name = "get_slice",
                       .scope = TSD_SCOPE_LOCAL,
                       .flags = TSD_OP_CLIENT_MEMORY,
                       .validate = tsd_validate_get_slice},
    [OP(RESHARD)] = {.name = "reshard",
                     .scope = TSD_SCOPE_COLLECTIVE,
                     .validate = tsd_validate_reshard},
    [OP(DROP)] = {.name = "drop", .scope = TSD_SCOPE_COLLECTIVE, .validate = tsd_validate_drop},
    [OP(LIST)] = {.name = "list", .scope = TSD_SCOPE_CATALOG, .validate = tsd_validate_none},
    [OP(DESCRIBE)] = {.name = "describe",
                      .scope = TSD_SCOPE_CATALOG,
                      .validate = tsd_validate_describe},
    [OP(PLAN)] = {.name = "plan", .scope = TSD_SCOPE_LOCAL, .validate = tsd_validate_plan},
    [OP(STATS)] = {.name = "stats", .scope = TSD_SCOPE_LOCAL, .validate = tsd_validate_none},
    [OP(TRACE)] = {.name = "trace", .scope = TSD_SCOPE_LOCAL, .validate = tsd_validate_trace},
    [OP(SHUTDOWN)] = {.name = "shutdown",
                      .scope = TSD_SCOPE_COLLECTIVE,
                      .flags = TSD_OP_STOPS | TSD_OP_NO_AGREEMENT,
                      .validate = tsd_validate_none},
    [OP(EINSUM)] = {.name = "einsum",
                    .scope = TSD_SCOPE_COLLECTIVE,
                    .validate = tsd_validate_einsum},
    [OP(EINSUM_BACKWARD)] = {.name = "einsum_backward",
                             .scope = TSD_SCOPE_COLLECTIVE,
                             .validate = tsd_validate_einsum_backward},
    [OP(EINSUM_RELEASE)] = {.name = "einsum_release",
                            .scope = TSD_SCOPE_COLLECTIVE,
                            .flags = TSD_OP_NO_AGREEMENT,
                            .validate = tsd_validate_einsum_release},
    [OP(EINSUM_PLAN)] = {.name = "einsum_plan",
                         .scope = TSD_SCOPE_LOCAL,
                         .validate = tsd_validate_einsum_plan},
    [OP(SAVE)] = {.name = "save", .scope = TSD_SCOPE_COLLECTIVE, .validate = tsd_validate_save},
    [OP(LOAD)] = {.name = "load", .scope = TSD_SCOPE_COLLECTIVE, .validate = tsd_validate_load},
    [OP(SHM_ATTACH)] = {.name = "shm_attach",
                        .scope = TSD_SCOPE_LOCAL,
                        .unix_only = true,
                        .validate = tsd_validate_none},
    [OP(PROGRAM_COMPILE)] = {.name = "program_compile",
                             .scope = TSD_SCOPE_COLLECTIVE,
                             .validate = tsd_validate_program_compile},
    [OP(PROGRAM_RUN)] = {.name = "program_run",
                         .scope = TSD_SCOPE_COLLECTIVE,
                         .validate = tsd_validate_program_run},
    [OP(PROGRAM_DROP)] = {.name = "program_drop",
                          .scope = TSD_SCOPE_COLLECTIVE,
                          .validate = tsd_validate_program_drop},
    [OP(PROGRAM_SHOW)] = {.name = "program_show",
                          .scope = TSD_SCOPE_LOCAL,
                          .validate = tsd_validate_program_show},
    [OP(RESHARD_MANY)] = {.name = "reshard_many",
                          .scope = TSD_SCOPE_COLLECTIVE,
                          .validate = tsd_validate_reshard_many},
    [OP(DROP_MANY)] = {.name = "drop_many",
                       .scope = TSD_SCOPE_COLLECTIVE,
                       .validate = tsd_validate_drop_many},
    [OP(CREATE_MANY)] = {.name = "create_many",
                         .scope = TSD_SCOPE_COLLECTIVE,
                         .validate = tsd_validate_create_many},
    [OP(PUT_MANY)] = {.name = "put_many",
                      .scope = TSD_SCOPE_LOCAL,
                      .flags = TSD_OP_CLIENT_MEMORY,
                      .validate = tsd_validate_put_many},
    [OP(GET_MANY)] = {.name = "get_many",
                      .scope = TSD_SCOPE_LOCAL,
                      .flags = TSD_OP_CLIENT_MEMORY,
                      .validate = tsd_validate_get_many},
    [OP(IMPORT_SAFETENSORS)] = {.name = "import_safetensors",
                                .scope = TSD_SCOPE_COLLECTIVE,
                                .validate = tsd_validate_import_safetensors},
    [OP(EXPORT_SAFETENSORS)] = {.name = "export_safetensors",
                                .scope = TSD_SCOPE_COLLECTIVE,
                                .validate = tsd_validate_export_safetensors},
    [OP(SAVE_FINISH)] = {.name = "save_finish",
                         .scope = TSD_SCOPE_COLLECTIVE,
                         .validate = tsd_validate_save_finish},
    [OP(OBSERVE)] = {.name = "observe",
                     .scope = TSD_SCOPE_COLLECTIVE,
                     .quiet = true,
                     .validate = tsd_validate_observe},
};
#define NOPS (sizeof ops / sizeof ops[0])

const tsd_op *tsd_op_find(int op_case) {
  if (op_case <= 0 || (size_t)op_case >= NOPS || !ops[op_case].name)
    return NULL;
  return &ops[op_case];
}

const char *tsd_op_name(int op_case) {
  const tsd_op *op = tsd_op_find(op_case);
  return op ? op->name : "unknown";
}

unsigned tsd_op_flags(int op_case) {
  const tsd_op *op = tsd_op_find(op_case);
  return op ? op->flags : 0;
}

/* The one place that reads the ClientMemory fields by op case: they are fields of each kind's
 * own message. */
Tshard__ClientMemory *tsd_request_client_memory(Tshard__Request *req, size_t i, size_t *n) {
  *n = 1;
  switch (req->op_case) {
  case OP(PUT): return i == 0 ? req->put->client_memory : NULL;
  case OP(GET): return i == 0 ? req->get->client_memory : NULL;
  case OP(PUT_SLICE): return i == 0 ? req->put_slice->client_memory : NULL;
  case OP(GET_SLICE): return i == 0 ? req->get_slice->client_memory : NULL;
  case OP(PUT_MANY):
    *n = req->put_many->n_items;
    return i < *n ? req->put_many->items[i]->client_memory : NULL;
  case OP(GET_MANY):
    *n = req->get_many->n_items;
    return i < *n ? req->get_many->items[i]->client_memory : NULL;
  default: *n = 0; return NULL;
  }
}

tsd_scope tsd_op_scope(const tsd_op *op, const Tshard__Request *req) {
  return op->scope_of ? op->scope_of(req) : op->scope;
}

void tsd_changes_add(tsd_changes *ch, const char *name) {
  if (!name || !name[0])
    return;
  if (ch->n == TSD_CHANGES_MAX)
    ch->all = true;
  else
    ch->name[ch->n++] = name;
}

int tsd_request_validate(const Tshard__Request *req, const tsd_limits *lim, const tsd_op **out,
                         ts_error *err) {
  *out = NULL;
  int rc = tsd_validate_header(req, err);
  if (rc)
    return rc;
  const tsd_op *op = tsd_op_find((int)req->op_case);
  if (!op) {
    char known[400] = "";
    size_t n = 0;
    for (size_t i = 0; i < NOPS && n < sizeof known; i++)
      if (ops[i].name)
        n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", ops[i].name);
    return ts_error_set(err, TS_UNSUPPORTED,
                        "unknown operation (field %d of Request.op); known: %s", (int)req->op_case,
                        known);
  }
  *out = op;
  rc = op->validate(req, lim, err);
  return rc ? rc : tsd_validate_participants(req, op, lim, err);
}
