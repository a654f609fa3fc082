/* test_optable.c - the daemon's table of operations: its wire half (daemon/wire/optable.c), the
 * loop thread's answers (daemon/front/server.c) and its engine half (daemon/ops/handlers.c), all
 * indexed by op case. Against the independent reference of the protocol itself (protobuf-c's
 * descriptor of Request): every member of Request's `op` oneof has exactly one wire row, named
 * like the field, with a validator and a scope, and the runners its scope needs (a loop answer
 * for LOOP and CATALOG, a local handler for CATALOG and LOCAL, a collective run for COLLECTIVE);
 * every row's flags against what its operation does (exactly shutdown stops, exactly get gathers
 * to the submitting rank, the client-memory rows are those whose message names ClientMemory);
 * a get is collective for its first chunk only; an operation the table does not know is refused
 * UNSUPPORTED with the list of known ones; header checks (key, token lengths) come before the
 * operation's own. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "tsd_front.h"
#include "tsd_ops.h"
#include "tsd_wire.h"

static const tsd_limits lim = {.world_size = 4, .max_frame = 1 << 20};

START_TEST(every_op_has_one_entry) {
  const ProtobufCMessageDescriptor *d = &tshard__request__descriptor;
  int ops = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
      continue;
    ops++;
    const tsd_op *op = tsd_op_find((int)f->id);
    ck_assert_msg(op != NULL, "Request.%s (field %u) has no entry in the table", f->name, f->id);
    ck_assert_str_eq(op->name, f->name);
    ck_assert_str_eq(tsd_op_name((int)f->id), f->name);
    ck_assert_ptr_nonnull(op->validate);
    ck_assert(op->scope == TSD_SCOPE_LOOP || op->scope == TSD_SCOPE_CATALOG ||
              op->scope == TSD_SCOPE_LOCAL || op->scope == TSD_SCOPE_COLLECTIVE);
  }
  ck_assert_int_ge(ops, 14);
  ck_assert_ptr_null(tsd_op_find(0));
  ck_assert_ptr_null(tsd_op_find(9999));
  ck_assert_str_eq(tsd_op_name(9999), "unknown");
}
END_TEST

/* The members of Request's `op` oneof, one per call: the next from field *i on, or NULL. */
static const ProtobufCFieldDescriptor *next_op(unsigned *i) {
  const ProtobufCMessageDescriptor *d = &tshard__request__descriptor;
  while (*i < d->n_fields) {
    const ProtobufCFieldDescriptor *f = &d->fields[(*i)++];
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
      return f;
  }
  return NULL;
}

/* The runners a row's scope needs, and none it cannot use. */
START_TEST(every_op_has_its_runners) {
  const ProtobufCFieldDescriptor *f;
  for (unsigned i = 0; (f = next_op(&i)) != NULL;) {
    const tsd_op *op = tsd_op_find((int)f->id);
    ck_assert_ptr_nonnull(op);
    const tsd_op_handlers *h = tsd_op_handlers_find((int)f->id);
    tsd_loop_fn loop = tsd_loop_answer((int)f->id);
    /* A get is collective for its first chunk; the local handlers of a put, a put_many and a
     * get_many check them and submit the collective operation themselves. */
    bool collective = op->scope == TSD_SCOPE_COLLECTIVE || op->scope_of != NULL ||
                      f->id == TSHARD__REQUEST__OP_PUT || f->id == TSHARD__REQUEST__OP_PUT_MANY ||
                      f->id == TSHARD__REQUEST__OP_GET_MANY;
    bool local = op->scope == TSD_SCOPE_LOCAL || op->scope == TSD_SCOPE_CATALOG;
    if (op->scope == TSD_SCOPE_LOOP) {
      ck_assert_msg(loop != NULL, "%s: loop-scoped without a loop answer", f->name);
      ck_assert_msg(h == NULL, "%s: loop-scoped with an engine row", f->name);
      continue;
    }
    ck_assert_msg(h != NULL, "%s: no engine row", f->name);
    ck_assert_msg((loop != NULL) == (op->scope == TSD_SCOPE_CATALOG),
                  "%s: a loop answer exactly when catalog-scoped", f->name);
    ck_assert_msg((h->run_local != NULL) == local, "%s: a local handler exactly when local",
                  f->name);
    ck_assert_msg((h->run_collective != NULL) == collective,
                  "%s: a collective run exactly when collective", f->name);
    if (!collective)
      ck_assert_msg(!h->changes && !h->touches && !h->answer,
                    "%s: changes, touches or answer but never collective", f->name);
  }
  ck_assert_ptr_null(tsd_op_handlers_find(0));
  ck_assert_ptr_null(tsd_op_handlers_find(9999));
  ck_assert_ptr_null(tsd_loop_answer(9999));
}
END_TEST

/* Whether the message of an op case's oneof member names the client's memory: a client_memory
 * field of its own, or one in the message of its repeated items (the batches). */
static bool names_client_memory(const ProtobufCFieldDescriptor *f) {
  const ProtobufCMessageDescriptor *m = f->descriptor;
  if (!m)
    return false;
  if (protobuf_c_message_descriptor_get_field_by_name(m, "client_memory"))
    return true;
  const ProtobufCFieldDescriptor *items =
      protobuf_c_message_descriptor_get_field_by_name(m, "items");
  return items && items->type == PROTOBUF_C_TYPE_MESSAGE && items->descriptor &&
         protobuf_c_message_descriptor_get_field_by_name(items->descriptor, "client_memory");
}

/* Every row's flags against what its operation does: exactly shutdown stops; exactly shutdown
 * and einsum_release run without an agreement (both collective); exactly get gathers to the
 * submitting rank (collective for its first chunk); the client-memory rows are exactly those
 * whose message (or its items) has a ClientMemory field, by the protocol's descriptor. */
START_TEST(every_op_has_its_flags) {
  const unsigned known = TSD_OP_STOPS | TSD_OP_NO_AGREEMENT | TSD_OP_GATHERS_TO_ORIGIN |
                         TSD_OP_CLIENT_MEMORY | TSD_OP_UNIX_ONLY | TSD_OP_QUIET;
  int memory_rows = 0;
  const ProtobufCFieldDescriptor *f;
  for (unsigned i = 0; (f = next_op(&i)) != NULL;) {
    const tsd_op *op = tsd_op_find((int)f->id);
    ck_assert_ptr_nonnull(op);
    unsigned fl = tsd_op_flags((int)f->id);
    ck_assert_uint_eq(fl, op->flags);
    ck_assert_msg((fl & ~known) == 0, "%s: unknown flags %#x", f->name, fl & ~known);
    const tsd_op_handlers *h = tsd_op_handlers_find((int)f->id);
    bool stops = f->id == TSHARD__REQUEST__OP_SHUTDOWN;
    ck_assert_msg(!!(fl & TSD_OP_STOPS) == stops, "%s: stops exactly when shutdown", f->name);
    bool no_agreement = stops || f->id == TSHARD__REQUEST__OP_EINSUM_RELEASE;
    ck_assert_msg(!!(fl & TSD_OP_NO_AGREEMENT) == no_agreement,
                  "%s: no agreement exactly for shutdown and einsum_release", f->name);
    if (fl & (TSD_OP_STOPS | TSD_OP_NO_AGREEMENT))
      ck_assert_msg(op->scope == TSD_SCOPE_COLLECTIVE && h && h->run_collective,
                    "%s: stops or agrees on nothing but is not collective", f->name);
    bool gathers = f->id == TSHARD__REQUEST__OP_GET;
    ck_assert_msg(!!(fl & TSD_OP_GATHERS_TO_ORIGIN) == gathers, "%s: gathers exactly when get",
                  f->name);
    if (gathers)
      ck_assert_msg(op->scope_of && h && h->run_collective, "%s: gathers but never collective",
                    f->name);
    bool memory = names_client_memory(f);
    memory_rows += memory;
    ck_assert_msg(!!(fl & TSD_OP_CLIENT_MEMORY) == memory,
                  "%s: the client-memory flag exactly when its message names ClientMemory",
                  f->name);
  }
  ck_assert_int_eq(memory_rows, 6); /* put, get, put_slice, get_slice, put_many, get_many */
  ck_assert_uint_eq(tsd_op_flags(0), 0);
  ck_assert_uint_eq(tsd_op_flags(9999), 0);
}
END_TEST

/* tsd_request_client_memory reads each client-memory row's field, and of every item of a
 * batch; other rows have no items. */
START_TEST(client_memory_fields) {
  Tshard__ClientMemory m0 = TSHARD__CLIENT_MEMORY__INIT, m1 = TSHARD__CLIENT_MEMORY__INIT;
  Tshard__Request r = TSHARD__REQUEST__INIT;
  size_t n = 9;
  Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
  Tshard__GetRequest g = TSHARD__GET_REQUEST__INIT;
  Tshard__PutSliceRequest ps = TSHARD__PUT_SLICE_REQUEST__INIT;
  Tshard__GetSliceRequest gs = TSHARD__GET_SLICE_REQUEST__INIT;
  p.client_memory = g.client_memory = ps.client_memory = gs.client_memory = &m0;
  r.op_case = TSHARD__REQUEST__OP_PUT, r.put = &p;
  ck_assert_ptr_eq(tsd_request_client_memory(&r, 0, &n), &m0);
  ck_assert_uint_eq(n, 1);
  r.op_case = TSHARD__REQUEST__OP_GET, r.get = &g;
  ck_assert_ptr_eq(tsd_request_client_memory(&r, 0, &n), &m0);
  r.op_case = TSHARD__REQUEST__OP_PUT_SLICE, r.put_slice = &ps;
  ck_assert_ptr_eq(tsd_request_client_memory(&r, 0, &n), &m0);
  r.op_case = TSHARD__REQUEST__OP_GET_SLICE, r.get_slice = &gs;
  ck_assert_ptr_eq(tsd_request_client_memory(&r, 0, &n), &m0);
  ck_assert_ptr_null(tsd_request_client_memory(&r, 1, &n));
  Tshard__PutManyRequest pm = TSHARD__PUT_MANY_REQUEST__INIT;
  Tshard__PutManyItem pi[2];
  Tshard__PutManyItem *pip[2] = {&pi[0], &pi[1]};
  tshard__put_many_item__init(&pi[0]);
  tshard__put_many_item__init(&pi[1]);
  pi[1].client_memory = &m1;
  pm.items = pip, pm.n_items = 2;
  r.op_case = TSHARD__REQUEST__OP_PUT_MANY, r.put_many = &pm;
  ck_assert_ptr_null(tsd_request_client_memory(&r, 0, &n));
  ck_assert_uint_eq(n, 2);
  ck_assert_ptr_eq(tsd_request_client_memory(&r, 1, &n), &m1);
  Tshard__GetManyRequest gm = TSHARD__GET_MANY_REQUEST__INIT;
  Tshard__GetManyItem gi;
  Tshard__GetManyItem *gip = &gi;
  tshard__get_many_item__init(&gi);
  gi.client_memory = &m0;
  gm.items = &gip, gm.n_items = 1;
  r.op_case = TSHARD__REQUEST__OP_GET_MANY, r.get_many = &gm;
  ck_assert_ptr_eq(tsd_request_client_memory(&r, 0, &n), &m0);
  ck_assert_uint_eq(n, 1);
  Tshard__DropRequest dr = TSHARD__DROP_REQUEST__INIT;
  r.op_case = TSHARD__REQUEST__OP_DROP, r.drop = &dr;
  ck_assert_ptr_null(tsd_request_client_memory(&r, 0, &n));
  ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(scopes) {
  Tshard__Request r = TSHARD__REQUEST__INIT;
  Tshard__GetRequest g = TSHARD__GET_REQUEST__INIT;
  r.op_case = TSHARD__REQUEST__OP_GET;
  r.get = &g;
  const tsd_op *op = tsd_op_find(TSHARD__REQUEST__OP_GET);
  ck_assert_int_eq(tsd_op_scope(op, &r), TSD_SCOPE_COLLECTIVE); /* offset 0: the gather */
  g.offset = 4096;
  ck_assert_int_eq(tsd_op_scope(op, &r), TSD_SCOPE_LOCAL); /* the next chunks read the copy */
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_PING)->scope, TSD_SCOPE_LOOP);
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_LIST)->scope, TSD_SCOPE_CATALOG);
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_DESCRIBE)->scope, TSD_SCOPE_CATALOG);
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_CREATE)->scope, TSD_SCOPE_COLLECTIVE);
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_SHUTDOWN)->scope, TSD_SCOPE_COLLECTIVE);
  ck_assert(tsd_op_flags(TSHARD__REQUEST__OP_SHM_ATTACH) & TSD_OP_UNIX_ONLY);
  ck_assert(!(tsd_op_flags(TSHARD__REQUEST__OP_GET) & TSD_OP_UNIX_ONLY));
}
END_TEST

START_TEST(unknown_and_header) {
  Tshard__Request r = TSHARD__REQUEST__INIT;
  ts_error err;
  const tsd_op *op = (const tsd_op *)&err; /* overwritten */
  r.op_case = (Tshard__Request__OpCase)77;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_UNSUPPORTED);
  ck_assert_ptr_null(op);
  ck_assert_msg(strstr(err.msg, "field 77") && strstr(err.msg, "known: ping, create") &&
                    strstr(err.msg, "shm_attach"),
                "message: %s", err.msg);
  /* A drop with a bad name: the operation's validator. */
  Tshard__DropRequest d = TSHARD__DROP_REQUEST__INIT;
  d.name = (char *)"";
  r.op_case = TSHARD__REQUEST__OP_DROP;
  r.drop = &d;
  ck_assert_int_ne(tsd_request_validate(&r, &lim, &op, &err), TS_OK);
  d.name = (char *)"fine";
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_OK);
  ck_assert_ptr_eq(op, tsd_op_find(TSHARD__REQUEST__OP_DROP));
  /* The header first: a key over 128 characters. */
  char key[200];
  memset(key, 'k', sizeof key - 1);
  key[sizeof key - 1] = '\0';
  r.idempotency_key = key;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "idempotency key of 199 characters"), "message: %s", err.msg);
}
END_TEST

/* Batches: collective; refused when empty or naming a tensor twice (the name in the message). */
START_TEST(batches) {
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_RESHARD_MANY)->scope, TSD_SCOPE_COLLECTIVE);
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_DROP_MANY)->scope, TSD_SCOPE_COLLECTIVE);
  Tshard__Request r = TSHARD__REQUEST__INIT;
  Tshard__DropManyRequest d = TSHARD__DROP_MANY_REQUEST__INIT;
  r.op_case = TSHARD__REQUEST__OP_DROP_MANY;
  r.drop_many = &d;
  ts_error err;
  const tsd_op *op;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "empty drop_many batch"), "message: %s", err.msg);
  char *names[] = {"a", "b", "c", "b"};
  d.names = names;
  d.n_names = 3;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_OK);
  d.n_names = 4;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "names tensor 'b' twice"), "message: %s", err.msg);
  Tshard__ReshardManyRequest q = TSHARD__RESHARD_MANY_REQUEST__INIT;
  r.op_case = TSHARD__REQUEST__OP_RESHARD_MANY;
  r.reshard_many = &q;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "empty reshard_many batch"), "message: %s", err.msg);
}
END_TEST

/* put_many and get_many: local (their handlers submit them), no participants; refused when
 * empty, naming a tensor twice, with client memory on some items only or beside data, with a
 * dtype or dims a tensor cannot have; a get_many with a key; its later chunks need no items. */
START_TEST(put_get_many) {
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_PUT_MANY)->scope, TSD_SCOPE_LOCAL);
  ck_assert_int_eq(tsd_op_find(TSHARD__REQUEST__OP_GET_MANY)->scope, TSD_SCOPE_LOCAL);
  Tshard__Request r = TSHARD__REQUEST__INIT;
  Tshard__PutManyRequest p = TSHARD__PUT_MANY_REQUEST__INIT;
  Tshard__PutManyItem it[3];
  Tshard__PutManyItem *itp[3] = {&it[0], &it[1], &it[2]};
  Tshard__ClientMemory mem[3];
  const char *names[3] = {"a", "b", "a"};
  for (int i = 0; i < 3; i++) {
    tshard__put_many_item__init(&it[i]);
    tshard__client_memory__init(&mem[i]);
    it[i].name = (char *)names[i];
    it[i].dtype = (char *)"f32";
    mem[i].address = 4096 * (uint64_t)(i + 1);
    mem[i].bytes = 16;
  }
  r.op_case = TSHARD__REQUEST__OP_PUT_MANY;
  r.put_many = &p;
  ts_error err;
  const tsd_op *op;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "empty put_many batch"), "message: %s", err.msg);
  p.items = itp;
  p.n_items = 3;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "names tensor 'a' twice"), "message: %s", err.msg);
  p.n_items = 2;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_OK); /* staged, no data yet */
  it[0].client_memory = &mem[0];
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "1 of the 2 items name the client's memory"), "message: %s",
                err.msg);
  it[1].client_memory = &mem[1];
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_OK);
  p.convert = true;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "without data, shared-memory region or convert"), "message: %s",
                err.msg);
  p.convert = false;
  it[1].dtype = (char *)"f31";
  ck_assert_int_ne(tsd_request_validate(&r, &lim, &op, &err), TS_OK);
  ck_assert_msg(strstr(err.msg, "tensor 'b' of the batch"), "message: %s", err.msg);
  it[1].dtype = (char *)"f32";
  it[1].n_shape = TS_MAX_DIMS + 1;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_BAD_SHAPE);
  it[1].n_shape = 0;
  int32_t ranks[2] = {0, 1};
  r.participants = ranks;
  r.n_participants = 2;
  r.idempotency_key = (char *)"k";
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "put_many does not take participants"), "message: %s", err.msg);
  r.n_participants = 0;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_OK); /* a key: retries */
  Tshard__GetManyRequest g = TSHARD__GET_MANY_REQUEST__INIT;
  Tshard__GetManyItem gi[2];
  Tshard__GetManyItem *gip[2] = {&gi[0], &gi[1]};
  for (int i = 0; i < 2; i++) {
    tshard__get_many_item__init(&gi[i]);
    gi[i].name = (char *)names[i];
    gi[i].bytes = 16;
  }
  r.op_case = TSHARD__REQUEST__OP_GET_MANY;
  r.get_many = &g;
  g.items = gip;
  g.n_items = 2;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "get_many takes no idempotency key"), "message: %s", err.msg);
  r.idempotency_key = (char *)"";
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_OK);
  gi[0].client_memory = &mem[0];
  gi[1].client_memory = &mem[1];
  mem[1].bytes = 8;
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "tensor 'b' of the batch: the client's memory holds 8 bytes"),
                "message: %s", err.msg);
  g.n_items = 0;
  g.offset = 4096; /* a later chunk of the connection's copy */
  ck_assert_int_eq(tsd_request_validate(&r, &lim, &op, &err), TS_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("optable");
  TCase *tc = tcase_create("optable");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, every_op_has_one_entry);
  tcase_add_test(tc, every_op_has_its_runners);
  tcase_add_test(tc, every_op_has_its_flags);
  tcase_add_test(tc, client_memory_fields);
  tcase_add_test(tc, scopes);
  tcase_add_test(tc, unknown_and_header);
  tcase_add_test(tc, batches);
  tcase_add_test(tc, put_get_many);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
