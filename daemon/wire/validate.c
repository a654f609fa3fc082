/* validate.c - the checks a request passes before any handler sees it: the validators that the
 * table of operations (optable.c) names, one per operation, and the request header's checks.
 *
 * Validators check the request alone: names,
 * dtypes, shapes, attributes against the shape and the world size, layout tags, strategies, byte
 * counts and chunk bounds. What depends on stored tensors (unknown or duplicate names, sizes that
 * must match a tensor) is checked by the handlers. Nothing here allocates beyond the parsed
 * attribute, which is freed before returning. */
#include <stdlib.h>
#include <string.h>

#include "tsd_wire.h"
#include "ts_rules.h"

#define MAX_KEY 128
#define MAX_TENSOR_BYTES (1LL << 50)

_Static_assert(TS_RULES_NAME_MAX == TS_NAME_MAX - 1, "names must fit the store's name buffer");
_Static_assert(TS_RULES_DIMS_MAX == TS_MAX_DIMS, "the rules' dims are the kernels' dims");
_Static_assert(TS_RULES_TENSOR_BYTES_MAX == MAX_TENSOR_BYTES, "one bound on a tensor's bytes");

bool tsd_name_reserved(const char *name) { return ts_name_reserved(name, strlen(name)); }

/* The rules of names are in proto/ts_rules.h (the C client checks the same ones); a NUL inside
 * a string is caught before, on the wire bytes (tsd_request_check_strings). */
static int check_name(const char *what, const char *name, ts_error *err) {
  return ts_name_check(what, name, name ? strlen(name) : 0, err);
}

/* A framework's dim names (NCHW, NHWC, NCDHW, ...) in format-tag letters: N a, C b, then D, H, W
 * in that order; false when the tag is not such a name. */
static bool framework_tag(const char *tag, char *out, size_t cap) {
  const char *order = "NCDHW";
  size_t n = strlen(tag);
  if (n < 2 || n >= cap)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!strchr(order, tag[i]) || strchr(tag + i + 1, tag[i]))
      return false;
  for (size_t i = 0; i < n; i++) {
    int rank = 0; /* position of tag[i] among the tag's letters in NCDHW order */
    for (const char *o = order; *o != tag[i]; o++)
      rank += strchr(tag, *o) != NULL;
    out[i] = (char)('a' + rank);
  }
  out[n] = '\0';
  return true;
}

static int check_tag(const char *tag, ts_error *err) {
  size_t n = tag ? strlen(tag) : 0;
  if (n >= 32)
    return ts_error_set(err, TS_BAD_LAYOUT, "layout tag of %zu characters; at most 31", n);
  char hint[32];
  if (n && framework_tag(tag, hint, sizeof hint))
    return ts_error_set(err, TS_BAD_LAYOUT,
                        "layout tag '%s': tags name dims by letters in "
                        "storage order, a for dim 0, b for dim 1, ...; for %s use '%s' (upper "
                        "case marks a blocked dim, e.g. aBcd16b)",
                        tag, tag, hint);
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

/* dt: the tensor's dtype, whose reductions a partial placement needs; TS_DTYPE_COUNT if not
 * known here. */
static int check_attr(const Tshard__DistAttr *m, int ndim, const int64_t *shape, ts_dtype dt,
                      const tsd_limits *lim, ts_error *err) {
  ts_attr *a = NULL;
  int rc = tsd_attr_from_msg(m, &a, err);
  if (rc == TS_OK && ndim > 0)
    rc = ts_attr_validate(a, ndim, shape, lim->world_size, err);
  if (rc == TS_OK && ts_dtype_valid((int)dt))
    rc = ts_attr_check_dtype(a, dt, err);
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

int tsd_validate_none(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)r, (void)lim, (void)err;
  return TS_OK;
}

static int check_create(const Tshard__CreateRequest *c, const tsd_limits *lim, ts_error *err) {
  ts_dtype dt;
  int rc = ts_dtype_parse(c->dtype, &dt, err);
  if (rc)
    return rc;
  if (c->n_shape < 1 || c->n_shape > TS_MAX_DIMS) /* scalars come from einsum and files */
    return ts_error_set(err, TS_BAD_SHAPE,
                        "shape of %zu dims; create makes tensors of 1 to %d "
                        "dims",
                        c->n_shape, TS_MAX_DIMS);
  if ((rc = ts_tensor_check(c->name, (int)c->n_shape, c->shape, ts_dtype_size(dt), err)))
    return rc;
  if ((rc = check_attr(c->attr, (int)c->n_shape, c->shape, dt, lim, err)))
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
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "chunk with %zu data bytes and a shared-memory "
                        "region; send one of them",
                        data->len);
  if (shm && shm->bytes > SIZE_MAX)
    return ts_error_set(err, TS_LIMIT, "shared-memory region of %llu bytes",
                        (unsigned long long)shm->bytes);
  return check_chunk(offset, total, shm ? (size_t)shm->bytes : data->len, err);
}

/* A whole put or get in the client's memory (field 40): one request for the whole tensor. */
static int check_client_memory(const Tshard__ClientMemory *m, bool put, uint64_t offset,
                               uint64_t total, bool has_data, bool convert, ts_error *err) {
  if (offset != 0 || has_data || convert)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "a %s naming the client's memory is one request at offset 0 without "
                        "data, shared-memory region or convert (got offset %llu%s%s)",
                        put ? "put" : "get", (unsigned long long)offset, has_data ? ", data" : "",
                        convert ? ", convert" : "");
  if (m->address == 0 || m->address + m->bytes < m->address)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the client's memory at address %#llx with %llu bytes is not a valid "
                        "range",
                        (unsigned long long)m->address, (unsigned long long)m->bytes);
  if (put && m->bytes != total)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the client's memory holds %llu bytes but total_bytes says %llu",
                        (unsigned long long)m->bytes, (unsigned long long)total);
  return TS_OK;
}

int tsd_validate_put(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__PutRequest *p = r->put;
  int rc = check_name("tensor name", p->name, err);
  if (!rc && p->client_memory)
    return check_client_memory(p->client_memory, true, p->offset, p->total_bytes,
                               p->data.len || p->shm, p->convert, err);
  return rc ? rc : check_data(p->offset, p->total_bytes, &p->data, p->shm, err);
}

int tsd_validate_put_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__PutSliceRequest *p = r->put_slice;
  int rc = check_name("tensor name", p->name, err);
  if (!rc)
    rc = check_tag(layout_tag(p->layout), err);
  if (!rc && p->client_memory)
    return check_client_memory(p->client_memory, true, p->offset, p->total_bytes,
                               p->data.len || p->shm, p->convert, err);
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
int tsd_validate_get(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  int rc = check_name("tensor name", r->get->name, err);
  if (!rc && r->get->client_memory)
    return check_client_memory(r->get->client_memory, false, r->get->offset, 0, r->get->shm != NULL,
                               false, err);
  return rc || r->get->shm ? rc : check_max_bytes(r->get->max_bytes, lim, err);
}

int tsd_validate_get_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  int rc = check_name("tensor name", r->get_slice->name, err);
  if (!rc)
    rc = check_tag(layout_tag(r->get_slice->layout), err);
  if (!rc && r->get_slice->client_memory)
    return check_client_memory(r->get_slice->client_memory, false, r->get_slice->offset, 0,
                               r->get_slice->shm != NULL, false, err);
  return rc || r->get_slice->shm ? rc : check_max_bytes(r->get_slice->max_bytes, lim, err);
}

int tsd_validate_reshard(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__ReshardRequest *q = r->reshard;
  int rc = check_name("tensor name", q->name, err);
  if (!rc && q->keep_source_as[0])
    rc = check_name("keep_source_as", q->keep_source_as, err);
  if (!rc && q->keep_source_as[0] && strcmp(q->keep_source_as, q->name) == 0)
    rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                      "keep_source_as names the source '%s' itself; "
                      "give a new name or none",
                      q->name);
  if (!rc)
    rc = check_tag(layout_tag(q->layout), err);
  if (!rc)
    rc = check_strategy(q->strategy, err);
  return rc ? rc : check_attr(q->attr, 0, NULL, TS_DTYPE_COUNT, lim, err);
}

/* A batch's names: at least one, each well-formed and given once. Sorting a copy keeps this
 * O(n log n) for the largest batches. */
static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}
static int check_batch_names(const char *what, size_t n, const char **names, ts_error *err) {
  if (n == 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "an empty %s; name at least one tensor", what);
  for (size_t i = 0; i < n; i++) {
    int rc = check_name("tensor name", names[i], err);
    if (rc)
      return rc;
  }
  const char **sorted = malloc(n * sizeof *sorted);
  if (!sorted)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to check a %s of %zu names", what, n);
  memcpy(sorted, names, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_name);
  int rc = TS_OK;
  for (size_t i = 1; i < n && !rc; i++)
    if (strcmp(sorted[i - 1], sorted[i]) == 0)
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the %s names tensor '%s' twice; name each tensor once", what, sorted[i]);
  free(sorted);
  return rc;
}

int tsd_validate_reshard_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__ReshardManyRequest *q = r->reshard_many;
  int rc = check_strategy(q->strategy, err);
  const char **names = rc ? NULL : malloc((q->n_items ? q->n_items : 1) * sizeof *names);
  if (!rc && !names)
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory to check a batch of %zu", q->n_items);
  for (size_t i = 0; !rc && i < q->n_items; i++)
    names[i] = q->items[i]->name;
  if (!rc)
    rc = check_batch_names("reshard_many batch", q->n_items, names, err);
  free(names);
  for (size_t i = 0; !rc && i < q->n_items; i++) {
    const Tshard__ReshardItem *it = q->items[i];
    ts_error lerr;
    int irc = check_tag(layout_tag(it->layout), &lerr);
    if (!irc)
      irc = check_strategy(it->strategy, &lerr);
    if (!irc)
      irc = check_attr(it->attr, 0, NULL, TS_DTYPE_COUNT, lim, &lerr);
    if (irc)
      rc = ts_error_set(err, irc, "tensor '%s' of the batch: %s", it->name, lerr.msg);
  }
  return rc;
}

int tsd_validate_create(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  return check_create(r->create, lim, err);
}

int tsd_validate_create_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__CreateManyRequest *q = r->create_many;
  const char **names = malloc((q->n_items ? q->n_items : 1) * sizeof *names);
  if (!names)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to check a batch of %zu", q->n_items);
  for (size_t i = 0; i < q->n_items; i++)
    names[i] = q->items[i]->name;
  int rc = check_batch_names("create_many batch", q->n_items, names, err);
  free(names);
  for (size_t i = 0; !rc && i < q->n_items; i++) {
    ts_error lerr;
    if ((rc = check_create(q->items[i], lim, &lerr)))
      ts_error_set(err, rc, "tensor '%s' of the batch: %s", q->items[i]->name, lerr.msg);
  }
  return rc;
}

int tsd_validate_drop_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  return check_batch_names("drop_many batch", r->drop_many->n_names,
                           (const char **)r->drop_many->names, err);
}

static int v_name_only(const char *name, ts_error *err) {
  return check_name("tensor name", name, err);
}
int tsd_validate_drop(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  return v_name_only(r->drop->name, err);
}
int tsd_validate_describe(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  return v_name_only(r->describe->name, err);
}
int tsd_validate_trace(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__TraceRequest *t = r->trace;
  if (t->within_ns < 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "trace: within_ns %lld: expected 0 (any) or "
                        "a positive window in ns",
                        (long long)t->within_ns);
  if (t->last > (1u << 20))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "trace: last %u: expected 0 (all) to 1048576 "
                        "operations",
                        t->last);
  return TS_OK;
}

int tsd_validate_observe(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)r, (void)lim;
  return ts_error_set(err, TS_INVALID_ARGUMENT,
                      "observe is ordered by the daemons themselves "
                      "while the live page is watched; clients read each rank's numbers "
                      "through stats, or the job's through GET /api/ranks on rank 0's "
                      "--metrics port");
}

int tsd_validate_plan(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  int rc = check_name("tensor name", r->plan->name, err);
  if (!rc)
    rc = check_strategy(r->plan->strategy, err);
  return rc ? rc : check_attr(r->plan->attr, 0, NULL, TS_DTYPE_COUNT, lim, err);
}

int tsd_validate_header(const Tshard__Request *req, ts_error *err) {
  if (strlen(req->idempotency_key) > MAX_KEY)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "idempotency key of %zu characters; at most %d",
                        strlen(req->idempotency_key), MAX_KEY);
  int rc = ts_text_check("idempotency key", req->idempotency_key, strlen(req->idempotency_key),
                         "keys", err);
  if (rc)
    return rc;
  if (strlen(req->token) > TS_RULES_TOKEN_MAX)
    return ts_error_set(err, TS_AUTH, "token of %zu characters; at most %d", strlen(req->token),
                        TS_RULES_TOKEN_MAX);
  return TS_OK;
}

/* SPMD collectives (Request fields 4-5, sequencer.c): participants only on operations every
 * rank runs, with a key, each a rank of the world once; a timeout only with participants. */
int tsd_validate_participants(const Tshard__Request *req, const tsd_op *op, const tsd_limits *lim,
                              ts_error *err) {
  if (req->n_participants == 0) {
    if (req->collective_timeout_ms)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "collective_timeout_ms applies only to a request naming participants");
    return TS_OK;
  }
  if (tsd_op_scope(op, req) != TSD_SCOPE_COLLECTIVE || req->op_case == TSHARD__REQUEST__OP_GET)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%s does not take participants: they apply to operations every rank "
                        "runs (create, reshard, drop, shutdown, ...); puts and gets are one "
                        "client's",
                        op->name);
  if (!req->idempotency_key[0])
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "a request naming participants needs an idempotency key (the key matches "
                        "the participants' submissions)");
  if (req->n_participants > (size_t)lim->world_size)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "%zu participants; the job has %d ranks",
                        req->n_participants, lim->world_size);
  int64_t most = lim->collective_timeout_max > 0 ? lim->collective_timeout_max : 86400000;
  if ((int64_t)req->collective_timeout_ms > most)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "collective_timeout_ms %u; at most %lld (the daemons' "
                        "--collective-timeout-max; 0: their --collective-timeout)",
                        req->collective_timeout_ms, (long long)most);
  uint8_t *seen = calloc((size_t)lim->world_size / 8 + 1, 1);
  if (!seen)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to check the participants");
  int rc = TS_OK;
  for (size_t i = 0; i < req->n_participants && rc == TS_OK; i++) {
    int r = req->participants[i];
    if (r < 0 || r >= lim->world_size)
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "participant %d is not a rank of the job (ranks 0 to %d)", r,
                        lim->world_size - 1);
    else if (seen[r / 8] & (1u << (r % 8)))
      rc = ts_error_set(err, TS_INVALID_ARGUMENT, "participant %d is named twice", r);
    else
      seen[r / 8] |= (uint8_t)(1u << (r % 8));
  }
  free(seen);
  return rc;
}

/* put_many and get_many: a batch of names (not empty, each once); every item or none names the
 * client's memory, and then the request is one, at offset 0, without data, region or convert. */
static int check_many_memory(size_t n, size_t with_memory, bool put, uint64_t offset, bool has_data,
                             bool convert, ts_error *err) {
  if (with_memory == 0)
    return TS_OK;
  if (with_memory != n)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%zu of the %zu items name the client's memory; all of them or none must",
                        with_memory, n);
  return offset || has_data || convert
             ? ts_error_set(err, TS_INVALID_ARGUMENT,
                            "a %s naming the client's memory is one request at offset 0 without "
                            "data, shared-memory region or convert",
                            put ? "put_many" : "get_many")
             : TS_OK;
}

static int check_memory_range(const Tshard__ClientMemory *m, const char *name, ts_error *err) {
  if (m->address == 0 || m->address + m->bytes < m->address)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "tensor '%s' of the batch: the client's memory at address %#llx with "
                        "%llu bytes is not a valid range",
                        name, (unsigned long long)m->address, (unsigned long long)m->bytes);
  return TS_OK;
}

int tsd_validate_put_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__PutManyRequest *q = r->put_many;
  const char **names = malloc((q->n_items ? q->n_items : 1) * sizeof *names);
  if (!names)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to check a batch of %zu", q->n_items);
  size_t with_memory = 0;
  for (size_t i = 0; i < q->n_items; i++) {
    names[i] = q->items[i]->name;
    with_memory += q->items[i]->client_memory != NULL;
  }
  int rc = check_batch_names("put_many batch", q->n_items, names, err);
  free(names);
  for (size_t i = 0; !rc && i < q->n_items; i++) {
    const Tshard__PutManyItem *it = q->items[i];
    ts_dtype dt;
    ts_error lerr;
    if (it->dtype[0] && ts_dtype_parse(it->dtype, &dt, &lerr))
      rc = ts_error_set(err, lerr.code, "tensor '%s' of the batch: %s", it->name, lerr.msg);
    else if (it->n_shape > TS_MAX_DIMS)
      rc = ts_error_set(err, TS_BAD_SHAPE,
                        "tensor '%s' of the batch: data of %zu dims; "
                        "tensors have 1 to %d dims",
                        it->name, it->n_shape, TS_MAX_DIMS);
    else if (it->client_memory)
      rc = check_memory_range(it->client_memory, it->name, err);
    if (!rc && (rc = tsd_attr_msg_check(it->attr, lim, &lerr)))
      ts_error_set(err, rc, "tensor '%s' of the batch: %s", it->name, lerr.msg);
  }
  if (!rc)
    rc = check_many_memory(q->n_items, with_memory, true, q->offset, q->data.len || q->shm,
                           q->convert, err);
  if (!rc && with_memory == 0)
    rc = check_data(q->offset, q->total_bytes, &q->data, q->shm, err);
  return rc;
}

int tsd_validate_get_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__GetManyRequest *q = r->get_many;
  if (r->idempotency_key[0])
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "get_many takes no idempotency key: its data goes to the asking client "
                        "only; send it without one");
  if (q->offset > 0 && q->n_items == 0) /* a later chunk of the connection's copy */
    return q->shm ? TS_OK : check_max_bytes(q->max_bytes, lim, err);
  const char **names = malloc((q->n_items ? q->n_items : 1) * sizeof *names);
  if (!names)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to check a batch of %zu", q->n_items);
  size_t with_memory = 0;
  for (size_t i = 0; i < q->n_items; i++) {
    names[i] = q->items[i]->name;
    with_memory += q->items[i]->client_memory != NULL;
  }
  int rc = check_batch_names("get_many batch", q->n_items, names, err);
  free(names);
  for (size_t i = 0; !rc && i < q->n_items; i++) {
    const Tshard__GetManyItem *it = q->items[i];
    if (it->client_memory && (rc = check_memory_range(it->client_memory, it->name, err)) == 0 &&
        it->client_memory->bytes != it->bytes)
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "tensor '%s' of the batch: the client's "
                        "memory holds %llu bytes but the item says %llu",
                        it->name, (unsigned long long)it->client_memory->bytes,
                        (unsigned long long)it->bytes);
  }
  if (!rc)
    rc = check_many_memory(q->n_items, with_memory, false, q->offset, q->shm != NULL, false, err);
  return rc || q->shm ? rc : check_max_bytes(q->max_bytes, lim, err);
}
