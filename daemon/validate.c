/* validate.c - the table of operations {request kind, name, scope, validator} and the checks a
 * request passes before any handler sees it.
 *
 * Scope says who serves it: the loop thread (ping), the engine of this rank at once (local), or
 * every rank in the order rank 0 gives (collective). Validators check the request alone: names,
 * dtypes, shapes, attributes against the shape and the world size, layout tags, strategies, byte
 * counts and chunk bounds. What depends on stored tensors (unknown or duplicate names, sizes that
 * must match a tensor) is checked by the handlers. Nothing here allocates beyond the parsed
 * attribute, which is freed before returning. */
#include <string.h>

#include "daemon.h"
#include "ts_rules.h"

#define MAX_KEY 128
#define MAX_TENSOR_BYTES (1LL << 50)

_Static_assert(TS_RULES_NAME_MAX == TS_NAME_MAX - 1, "names must fit the store's name buffer");

bool tsd_name_reserved(const char *name) { return ts_name_reserved(name, strlen(name)); }

/* The rules of names are in proto/ts_rules.h (the C client checks the same ones); a NUL inside
 * a string is caught before, on the wire bytes (tsd_request_check_strings). */
static int check_name(const char *what, const char *name, ts_error *err) {
  return ts_name_check(what, name, name ? strlen(name) : 0, err);
}

static int check_tag(const char *tag, ts_error *err) {
  size_t n = tag ? strlen(tag) : 0;
  if (n >= 32)
    return ts_error_set(err, TS_BAD_LAYOUT, "layout tag of %zu characters; at most 31", n);
  for (size_t i = 0; i < n; i++) {
    char c = tag[i];
    if (!((c >= 'a' && c <= 'h') || (c >= 'A' && c <= 'H') || (c >= '0' && c <= '9')))
      return ts_error_set(err, TS_BAD_LAYOUT,
                          "layout tag '%s': character %zu is not a dim letter a-h, A-H or a "
                          "digit",
                          tag, i + 1);
  }
  return TS_OK;
}

static const char *layout_tag(const Tshard__Layout *l) { return l && l->tag ? l->tag : ""; }

static int check_strategy(const char *s, ts_error *err) {
  ts_strategy st;
  if (!s || !s[0])
    return TS_OK;
  /* The parser's message says what is valid; only the status becomes BAD_STRATEGY. */
  int rc = ts_strategy_parse(s, &st, err);
  if (rc && err)
    err->code = TS_BAD_STRATEGY;
  return rc ? TS_BAD_STRATEGY : TS_OK;
}

static int check_attr(const Tshard__DistAttr *m, int ndim, const int64_t *shape,
                      const tsd_limits *lim, ts_error *err) {
  ts_attr *a = NULL;
  int rc = tsd_attr_from_msg(m, &a, err);
  if (rc == TS_OK && ndim > 0)
    rc = ts_attr_validate(a, ndim, shape, lim->world_size, err);
  else if (rc == TS_OK)
    for (int i = 0; i < a->nranks; i++)
      if (a->ranks[i] >= lim->world_size) {
        rc = ts_error_set(err, TS_BAD_ATTRIBUTE, "rank %d is not in the world of %d ranks",
                          a->ranks[i], lim->world_size);
        break;
      }
  ts_attr_destroy(&a);
  return rc;
}

static int check_chunk(uint64_t offset, uint64_t total, size_t len, ts_error *err) {
  if (total > (uint64_t)MAX_TENSOR_BYTES)
    return ts_error_set(err, TS_LIMIT, "total of %llu bytes; at most %lld",
                        (unsigned long long)total, MAX_TENSOR_BYTES);
  if (offset > total || len > total - offset)
    return ts_error_set(err, TS_OUT_OF_BOUNDS,
                        "chunk of %zu bytes at offset %llu does not fit the total of %llu bytes",
                        len, (unsigned long long)offset, (unsigned long long)total);
  if (len == 0 && total != 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "empty chunk at offset %llu of %llu bytes",
                        (unsigned long long)offset, (unsigned long long)total);
  return TS_OK;
}

static int v_none(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)r, (void)lim, (void)err;
  return TS_OK;
}

static int v_create(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__CreateRequest *c = r->create;
  int rc = check_name("tensor name", c->name, err);
  if (rc)
    return rc;
  ts_dtype dt;
  if ((rc = ts_dtype_parse(c->dtype, &dt, err)))
    return rc;
  if (c->n_shape < 1 || c->n_shape > TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE, "shape of %zu dims; tensors have 1 to %d dims",
                        c->n_shape, TS_MAX_DIMS);
  int64_t bytes = (int64_t)ts_dtype_size(dt);
  for (size_t d = 0; d < c->n_shape; d++) {
    if (c->shape[d] < 1 || c->shape[d] > MAX_TENSOR_BYTES)
      return ts_error_set(err, TS_BAD_SHAPE, "dim %zu has size %lld; sizes are 1 to %lld", d,
                          (long long)c->shape[d], MAX_TENSOR_BYTES);
    if (bytes > MAX_TENSOR_BYTES / c->shape[d])
      return ts_error_set(err, TS_LIMIT, "tensor of more than %lld bytes", MAX_TENSOR_BYTES);
    bytes *= c->shape[d];
  }
  if ((rc = check_attr(c->attr, (int)c->n_shape, c->shape, lim, err)))
    return rc;
  const char *tag = layout_tag(c->layout);
  if ((rc = check_tag(tag, err)))
    return rc;
  if (tag[0]) {
    ts_layout l;
    if ((rc = ts_layout_from_tag(&l, dt, (int)c->n_shape, c->shape, tag, err)))
      return rc;
  }
  return TS_OK;
}

/* A chunk's bytes come in the frame, or (shm set) in a region of the shared segment, which the
 * engine checks against the segment; not both. */
static int check_data(uint64_t offset, uint64_t total, const ProtobufCBinaryData *data,
                      const Tshard__ShmData *shm, ts_error *err) {
  if (shm && data->len)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "chunk with %zu data bytes and a shared-memory "
                        "region; send one of them", data->len);
  if (shm && shm->bytes > SIZE_MAX)
    return ts_error_set(err, TS_LIMIT, "shared-memory region of %llu bytes",
                        (unsigned long long)shm->bytes);
  return check_chunk(offset, total, shm ? (size_t)shm->bytes : data->len, err);
}

static int v_put(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__PutRequest *p = r->put;
  int rc = check_name("tensor name", p->name, err);
  return rc ? rc : check_data(p->offset, p->total_bytes, &p->data, p->shm, err);
}

static int v_put_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__PutSliceRequest *p = r->put_slice;
  int rc = check_name("tensor name", p->name, err);
  if (!rc)
    rc = check_tag(layout_tag(p->layout), err);
  return rc ? rc : check_data(p->offset, p->total_bytes, &p->data, p->shm, err);
}

static int check_max_bytes(uint64_t max_bytes, const tsd_limits *lim, ts_error *err) {
  uint64_t cap = (uint64_t)lim->max_frame - 1024;
  if (max_bytes > cap)
    return ts_error_set(err, TS_LIMIT, "chunk of %llu bytes asked for; at most %llu fit a frame",
                        (unsigned long long)max_bytes, (unsigned long long)cap);
  return TS_OK;
}

/* Answers in the shared segment are not bounded by the frame. */
static int v_get(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  int rc = check_name("tensor name", r->get->name, err);
  return rc || r->get->shm ? rc : check_max_bytes(r->get->max_bytes, lim, err);
}

static int v_get_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  int rc = check_name("tensor name", r->get_slice->name, err);
  if (!rc)
    rc = check_tag(layout_tag(r->get_slice->layout), err);
  return rc || r->get_slice->shm ? rc : check_max_bytes(r->get_slice->max_bytes, lim, err);
}

static int v_reshard(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__ReshardRequest *q = r->reshard;
  int rc = check_name("tensor name", q->name, err);
  if (!rc && q->keep_source_as[0])
    rc = check_name("keep_source_as", q->keep_source_as, err);
  if (!rc && q->keep_source_as[0] && strcmp(q->keep_source_as, q->name) == 0)
    rc = ts_error_set(err, TS_INVALID_ARGUMENT, "keep_source_as names the source '%s' itself; "
                      "give a new name or none", q->name);
  if (!rc)
    rc = check_tag(layout_tag(q->layout), err);
  if (!rc)
    rc = check_strategy(q->strategy, err);
  return rc ? rc : check_attr(q->attr, 0, NULL, lim, err);
}

static int v_name_only(const char *name, ts_error *err) {
  return check_name("tensor name", name, err);
}
static int v_drop(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  return v_name_only(r->drop->name, err);
}
static int v_describe(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  return v_name_only(r->describe->name, err);
}
static int v_plan(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  int rc = check_name("tensor name", r->plan->name, err);
  if (!rc)
    rc = check_strategy(r->plan->strategy, err);
  return rc ? rc : check_attr(r->plan->attr, 0, NULL, lim, err);
}

typedef struct op_entry {
  Tshard__Request__OpCase kind;
  const char *name;
  tsd_scope scope;
  tsd_validator validate;
} op_entry;

static const op_entry ops[] = {
    {TSHARD__REQUEST__OP_PING, "ping", TSD_SCOPE_LOOP, v_none},
    {TSHARD__REQUEST__OP_CREATE, "create", TSD_SCOPE_COLLECTIVE, v_create},
    {TSHARD__REQUEST__OP_PUT, "put", TSD_SCOPE_LOCAL, v_put}, /* the final chunk: collective */
    {TSHARD__REQUEST__OP_PUT_SLICE, "put_slice", TSD_SCOPE_LOCAL, v_put_slice},
    {TSHARD__REQUEST__OP_GET, "get", TSD_SCOPE_LOCAL, v_get}, /* offset 0: collective */
    {TSHARD__REQUEST__OP_GET_SLICE, "get_slice", TSD_SCOPE_LOCAL, v_get_slice},
    {TSHARD__REQUEST__OP_RESHARD, "reshard", TSD_SCOPE_COLLECTIVE, v_reshard},
    {TSHARD__REQUEST__OP_DROP, "drop", TSD_SCOPE_COLLECTIVE, v_drop},
    {TSHARD__REQUEST__OP_LIST, "list", TSD_SCOPE_LOCAL, v_none},
    {TSHARD__REQUEST__OP_DESCRIBE, "describe", TSD_SCOPE_LOCAL, v_describe},
    {TSHARD__REQUEST__OP_PLAN, "plan", TSD_SCOPE_LOCAL, v_plan},
    {TSHARD__REQUEST__OP_STATS, "stats", TSD_SCOPE_LOCAL, v_none},
    {TSHARD__REQUEST__OP_SHUTDOWN, "shutdown", TSD_SCOPE_COLLECTIVE, v_none},
    {TSHARD__REQUEST__OP_SHM_ATTACH, "shm_attach", TSD_SCOPE_LOCAL, v_none}, /* shm.c */
};

const char *tsd_op_name(int op_case) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if ((int)ops[i].kind == op_case)
      return ops[i].name;
  return "unknown";
}

bool tsd_put_is_final(const Tshard__PutRequest *p) {
  return p->offset + (p->shm ? p->shm->bytes : p->data.len) == p->total_bytes;
}

int tsd_request_validate(const Tshard__Request *req, const tsd_limits *lim, tsd_scope *scope,
                         ts_error *err) {
  if (strlen(req->idempotency_key) > MAX_KEY)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "idempotency key of %zu characters; at most %d",
                        strlen(req->idempotency_key), MAX_KEY);
  if (strlen(req->token) > TS_RULES_TOKEN_MAX)
    return ts_error_set(err, TS_AUTH, "token of %zu characters; at most %d", strlen(req->token),
                        TS_RULES_TOKEN_MAX);
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if ((int)ops[i].kind != (int)req->op_case)
      continue;
    *scope = ops[i].scope;
    if (req->op_case == TSHARD__REQUEST__OP_PUT && tsd_put_is_final(req->put))
      *scope = TSD_SCOPE_COLLECTIVE;
    if (req->op_case == TSHARD__REQUEST__OP_GET && req->get->offset == 0)
      *scope = TSD_SCOPE_COLLECTIVE;
    return ops[i].validate(req, lim, err);
  }
  return ts_error_set(err, TS_UNSUPPORTED,
                      "unknown operation (field %d of Request.op); known: ping, create, put, "
                      "put_slice, get, get_slice, reshard, drop, list, describe, plan, stats, "
                      "shutdown, shm_attach",
                      (int)req->op_case);
}
