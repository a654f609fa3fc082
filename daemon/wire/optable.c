/* optable.c - the wire half of the table of the daemon's operations: the rows of the list
 * TSD_OPERATIONS (tsd_wire.h, one row per Request op case, in the manner of Redis's command
 * table) expanded into their wire columns, indexed by op case: name, scope (who runs it), flags
 * and validator. The loop thread (front/server.c) reads the scope and the validator of every
 * request; the ops layer (daemon/ops/handlers.c) expands the same list into the functions that
 * run and answer each operation, and the loop thread into its own answers.
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

static tsd_scope tsd_get_scope(const Tshard__Request *req) {
  return req->get->offset == 0 ? TSD_SCOPE_COLLECTIVE : TSD_SCOPE_LOCAL;
}

/* The wire columns of the list (tsd_wire.h); the columns of the layers above are dropped. */
#define WIRE_ROW(kind, name_, scope_, scope_of_, flags_, validate_, ...)                           \
  [TSHARD__REQUEST__OP_##kind] = {.name = #name_,                                                  \
                                  .scope = TSD_SCOPE_##scope_,                                     \
                                  .scope_of = scope_of_,                                           \
                                  .flags = flags_,                                                 \
                                  .validate = validate_},
static const tsd_op ops[] = {TSD_OPERATIONS(WIRE_ROW)};
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
  case TSHARD__REQUEST__OP_PUT: return i == 0 ? req->put->client_memory : NULL;
  case TSHARD__REQUEST__OP_GET: return i == 0 ? req->get->client_memory : NULL;
  case TSHARD__REQUEST__OP_PUT_SLICE: return i == 0 ? req->put_slice->client_memory : NULL;
  case TSHARD__REQUEST__OP_GET_SLICE: return i == 0 ? req->get_slice->client_memory : NULL;
  case TSHARD__REQUEST__OP_PUT_MANY:
    *n = req->put_many->n_items;
    return i < *n ? req->put_many->items[i]->client_memory : NULL;
  case TSHARD__REQUEST__OP_GET_MANY:
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
