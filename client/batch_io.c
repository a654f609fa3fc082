/* batch_io.c - the C client's tshard_put_many and tshard_get_many: many whole tensors in or out
 * through one request that the daemons run as one collective operation (daemon/README.md,
 * "Batches"). On a Unix socket the request names the caller's own buffers and every daemon
 * copies its pieces straight from or into them (as tshard_put and tshard_get do); when a daemon
 * cannot reach this process's memory (NO_DIRECT), over TCP, or for a put that converts, the
 * tensors' bytes travel one after another in item order, through the shared segment or in
 * frames, one chunk at a time. */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

/* Whether the buffers can be named to the daemons (a Unix socket, shared memory and the direct
 * path on, every buffer non-empty). */
static bool direct_ok(const tshard_client *c, int n, const void *const *bufs, const size_t *bytes) {
  if (!(c->shm_possible && c->shm_on && c->direct_on))
    return false;
  for (int i = 0; i < n; i++)
    if (!bufs[i] || !bytes[i])
      return false;
  return true;
}

/* Copies bytes [off, off + len) of the items' concatenation between it and flat (to_flat: out
 * of the items into flat; else into the items). */
static void concat_copy(int n, void *const *bufs, const size_t *bytes, uint64_t off, uint8_t *flat,
                        uint64_t len, bool to_flat) {
  uint64_t at = 0;
  for (int i = 0; i < n && len; i++) {
    if (off >= at + bytes[i]) {
      at += bytes[i];
      continue;
    }
    uint64_t in = off - at, k = bytes[i] - in < len ? bytes[i] - in : len;
    if (to_flat)
      memcpy(flat, (const uint8_t *)bufs[i] + in, k);
    else
      memcpy((uint8_t *)bufs[i] + in, flat, k);
    flat += k, off += k, len -= k;
    at += bytes[i];
  }
}

/* The arrays of a batch request: n items of item_size bytes, the pointers to them that the
 * request holds, and each item's client memory when mem is set. */
typedef struct batch_arrays {
  void *items;
  void *itemp;
  Tshard__ClientMemory *mem;
} batch_arrays;

static void batch_arrays_free(batch_arrays *a) { free(a->items), free(a->itemp), free(a->mem); }

static int batch_arrays_make(tshard_client *c, int n, size_t item_size, bool mem, batch_arrays *a) {
  memset(a, 0, sizeof *a);
  a->items = calloc((size_t)n, item_size);
  a->itemp = calloc((size_t)n, sizeof(void *));
  a->mem = mem ? calloc((size_t)n, sizeof *a->mem) : NULL;
  if (!a->items || !a->itemp || (mem && !a->mem)) {
    batch_arrays_free(a);
    return tsc_fail(c, TS_NO_MEMORY, "no memory for a batch of %d tensors", n);
  }
  return TS_OK;
}

/* Item i's client memory: the bytes at data. */
static Tshard__ClientMemory *batch_memory(batch_arrays *a, int i, const void *data,
                                          uint64_t bytes) {
  tshard__client_memory__init(&a->mem[i]);
  a->mem[i].address = (uint64_t)(uintptr_t)data;
  a->mem[i].bytes = bytes;
  return &a->mem[i];
}

/* The put_many request's items (names, declarations; client memory when mem is set). */
typedef struct put_many_msg {
  batch_arrays a;
  Tshard__PutManyRequest q;
} put_many_msg;

static void put_many_msg_free(put_many_msg *m) { batch_arrays_free(&m->a); }

static int put_many_msg_make(tshard_client *c, int n, const tshard_put_item *it, bool mem,
                             put_many_msg *m) {
  int rc = batch_arrays_make(c, n, sizeof(Tshard__PutManyItem), mem, &m->a);
  if (rc)
    return rc;
  Tshard__PutManyItem *items = m->a.items, **itemp = m->a.itemp;
  tshard__put_many_request__init(&m->q);
  for (int i = 0; i < n; i++) {
    Tshard__PutManyItem *x = &items[i];
    tshard__put_many_item__init(x);
    x->name = tsc_str(it[i].name);
    x->dtype = tsc_str(it[i].dtype);
    x->n_shape = it[i].dtype ? (size_t)it[i].ndim : 0;
    x->shape = (int64_t *)it[i].shape;
    if (mem)
      x->client_memory = batch_memory(&m->a, i, it[i].data, it[i].bytes);
    itemp[i] = x;
  }
  m->q.n_items = (size_t)n;
  m->q.items = itemp;
  return TS_OK;
}

static int check_put_items(tshard_client *c, int n, const tshard_put_item *it) {
  if (n < 1 || !it)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "tshard_put_many: %d tensors; give at least one", n);
  for (int i = 0; i < n; i++) {
    if (tsc_name_ok(c, "tensor name", it[i].name))
      return TS_INVALID_ARGUMENT;
    if ((!it[i].data && it[i].bytes) ||
        (it[i].dtype &&
         (it[i].ndim < 0 || it[i].ndim > TSHARD_MAX_DIMS || (it[i].ndim && !it[i].shape))))
      return tsc_fail(c, TS_INVALID_ARGUMENT,
                      "tshard_put_many: item %d ('%s') has no data for "
                      "its %zu bytes, or a declared shape of %d dims (0 to %d)",
                      i, it[i].name, it[i].bytes, it[i].ndim, TSHARD_MAX_DIMS);
  }
  return TS_OK;
}

/* The put_many's bytes in chunks, one at a time, through the segment or in frames; each chunk
 * carries the items, the answer to the last one is the put's. */
static int put_many_chunks(tshard_client *c, int n, const tshard_put_item *it, put_many_msg *m,
                           const char *key, bool convert) {
  void **bufs = calloc((size_t)n, sizeof *bufs);
  size_t *bytes = calloc((size_t)n, sizeof *bytes);
  uint64_t total = 0;
  for (int i = 0; bufs && bytes && i < n; i++) {
    bufs[i] = (void *)it[i].data;
    bytes[i] = it[i].bytes;
    total += it[i].bytes;
  }
  bool shm = bufs && bytes && tsc_shm_ready(c, total);
  size_t meta = tshard__put_many_request__get_packed_size(&m->q) + 1024;
  /* In frames the items travel beside each chunk's data: the data gives them room. */
  size_t chunk = shm ? (total <= c->shm_bytes ? total : (c->shm_bytes / 2) & ~(size_t)63)
                 : c->chunk > 2 * meta ? c->chunk - meta
                                       : c->chunk;
  uint8_t *tmp = !shm ? malloc(chunk < total ? chunk : total ? total : 1) : NULL;
  int rc = !bufs || !bytes || (!shm && !tmp)
               ? tsc_fail(c, TS_NO_MEMORY, "no memory for a put_many chunk")
               : TS_OK;
  m->q.total_bytes = total;
  m->q.convert = convert;
  for (uint64_t off = 0; rc == TS_OK && (off < total || (off == 0 && total == 0));) {
    uint64_t len = total - off < chunk ? total - off : chunk;
    Tshard__ShmData sd = TSHARD__SHM_DATA__INIT;
    uint8_t *dst = shm ? c->shm_base : tmp;
    concat_copy(n, bufs, bytes, off, dst, len, true);
    m->q.offset = off;
    m->q.data.len = shm ? 0 : len;
    m->q.data.data = shm ? NULL : tmp;
    sd.bytes = len;
    m->q.shm = shm ? &sd : NULL;
    Tshard__Request req = TSHARD__REQUEST__INIT;
    req.op_case = TSHARD__REQUEST__OP_PUT_MANY;
    req.put_many = &m->q;
    req.idempotency_key = tsc_str(key);
    rc = tsc_call_plain(c, &req);
    off += len;
    if (rc == TS_OK && c->progress)
      c->progress(c->progress_arg, off, total);
    if (total == 0)
      break;
  }
  free(tmp), free(bufs), free(bytes);
  return rc;
}

int tshard_put_many(tshard_client *c, int n, const tshard_put_item *items, const char *key,
                    unsigned flags) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  int rc = check_put_items(c, n, items);
  if (rc)
    return rc;
  bool convert = (flags & TSHARD_PUT_CONVERT) != 0;
  const void **bufs = calloc((size_t)n, sizeof *bufs);
  size_t *bytes = calloc((size_t)n, sizeof *bytes);
  if (!bufs || !bytes) {
    free(bufs), free(bytes);
    return tsc_fail(c, TS_NO_MEMORY, "no memory for a batch of %d tensors", n);
  }
  for (int i = 0; i < n; i++)
    bufs[i] = items[i].data, bytes[i] = items[i].bytes;
  bool direct = !convert && direct_ok(c, n, (const void *const *)bufs, bytes);
  free(bufs), free(bytes);
  put_many_msg m;
  if (direct) {
    if ((rc = put_many_msg_make(c, n, items, true, &m)))
      return rc;
    Tshard__Request req = TSHARD__REQUEST__INIT;
    req.op_case = TSHARD__REQUEST__OP_PUT_MANY;
    req.put_many = &m.q;
    req.idempotency_key = tsc_str(key);
    for (int i = 0; i < n; i++)
      m.q.total_bytes += items[i].bytes;
    rc = tsc_call_plain(c, &req);
    put_many_msg_free(&m);
    if (rc != TS_NO_DIRECT)
      return rc;
    c->direct_on = false; /* the segment or the frames from now on */
  }
  if ((rc = put_many_msg_make(c, n, items, false, &m)))
    return rc;
  rc = put_many_chunks(c, n, items, &m, key, convert);
  put_many_msg_free(&m);
  return rc;
}

/* The get_many request's items (client memory when mem is set). */
typedef struct get_many_msg {
  batch_arrays a;
  Tshard__GetManyRequest q;
} get_many_msg;

static void get_many_msg_free(get_many_msg *m) { batch_arrays_free(&m->a); }

static int get_many_msg_make(tshard_client *c, int n, const tshard_get_item *it, bool mem,
                             get_many_msg *m) {
  int rc = batch_arrays_make(c, n, sizeof(Tshard__GetManyItem), mem, &m->a);
  if (rc)
    return rc;
  Tshard__GetManyItem *items = m->a.items, **itemp = m->a.itemp;
  tshard__get_many_request__init(&m->q);
  for (int i = 0; i < n; i++) {
    Tshard__GetManyItem *x = &items[i];
    tshard__get_many_item__init(x);
    x->name = tsc_str(it[i].name);
    x->bytes = it[i].bytes;
    if (mem)
      x->client_memory = batch_memory(&m->a, i, it[i].buf, it[i].bytes);
    itemp[i] = x;
  }
  m->q.n_items = (size_t)n;
  m->q.items = itemp;
  return TS_OK;
}

/* One answer of a get_many's chunk at `off` of `total` (0: the first, which tells it): its bytes
 * copied into the items; *len gets their count. */
static int get_many_answer(tshard_client *c, const Tshard__Response *r, uint64_t off,
                           uint64_t *total, int n, void *const *bufs, const size_t *bytes,
                           uint64_t *len) {
  const Tshard__DataChunk *d = r->result_case == TSHARD__RESPONSE__RESULT_DATA ? r->data : NULL;
  const Tshard__ShmData *sh = d ? d->shm : NULL;
  uint64_t k = sh ? sh->bytes : d ? d->data.len : 0;
  if (!d || d->offset != off || d->total_bytes != *total || k > d->total_bytes - off ||
      (d->total_bytes > off && k == 0) ||
      (sh &&
       (!c->shm_base || sh->offset > c->shm_bytes || sh->bytes > c->shm_bytes - sh->offset))) {
    c->broken = true;
    return tsc_fail(c, TS_PROTOCOL, "the daemon answered a get_many chunk that does not fit");
  }
  concat_copy(n, bufs, bytes, off, sh ? c->shm_base + sh->offset : d->data.data, k, false);
  *len = k;
  return TS_OK;
}

/* The get_many's bytes in chunks, one at a time: the first request gathers every tensor at the
 * daemon, the next ones read its copy. */
static int get_many_chunks(tshard_client *c, int n, const tshard_get_item *it, get_many_msg *m) {
  void **bufs = calloc((size_t)n, sizeof *bufs);
  size_t *bytes = calloc((size_t)n, sizeof *bytes);
  if (!bufs || !bytes) {
    free(bufs), free(bytes);
    return tsc_fail(c, TS_NO_MEMORY, "no memory for a batch of %d tensors", n);
  }
  uint64_t total = 0, off = 0;
  for (int i = 0; i < n; i++) {
    bufs[i] = it[i].buf;
    bytes[i] = it[i].bytes;
    total += it[i].bytes;
  }
  bool shm = tsc_shm_ready(c, total);
  int rc = TS_OK;
  do {
    Tshard__ShmData sd = TSHARD__SHM_DATA__INIT;
    Tshard__GetManyRequest later = TSHARD__GET_MANY_REQUEST__INIT;
    Tshard__GetManyRequest *q = off == 0 ? &m->q : &later;
    sd.bytes = shm ? c->shm_bytes : 0;
    q->shm = shm ? &sd : NULL;
    q->max_bytes = shm ? 0 : c->chunk;
    q->offset = off;
    Tshard__Request req = TSHARD__REQUEST__INIT;
    req.op_case = TSHARD__REQUEST__OP_GET_MANY;
    req.get_many = q;
    Tshard__Response *r = NULL;
    rc = tsc_call(c, &req, &r);
    uint64_t len = 0;
    if (rc == TS_OK)
      rc = get_many_answer(c, r, off, &total, n, bufs, bytes, &len);
    if (r)
      tsc_free(c, r);
    off += len;
    if (rc == TS_OK && c->progress)
      c->progress(c->progress_arg, off, total);
  } while (rc == TS_OK && off < total);
  free(bufs), free(bytes);
  return rc;
}

int tshard_get_many(tshard_client *c, int n, const tshard_get_item *items) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (n < 1 || !items)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "tshard_get_many: %d tensors; give at least one", n);
  void **bufs = calloc((size_t)n, sizeof *bufs);
  size_t *bytes = calloc((size_t)n, sizeof *bytes);
  int rc = bufs && bytes ? TS_OK : tsc_fail(c, TS_NO_MEMORY, "no memory for a batch");
  for (int i = 0; !rc && i < n; i++) {
    if (tsc_name_ok(c, "tensor name", items[i].name))
      rc = TS_INVALID_ARGUMENT;
    else if (!items[i].buf && items[i].bytes)
      rc = tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_get_many: item %d ('%s') has no buffer for "
                    "its %zu bytes",
                    i, items[i].name, items[i].bytes);
    bufs[i] = items[i].buf;
    bytes[i] = items[i].bytes;
  }
  bool direct = !rc && direct_ok(c, n, (const void *const *)bufs, bytes);
  free(bufs), free(bytes);
  if (rc)
    return rc;
  get_many_msg m;
  if (direct) {
    if ((rc = get_many_msg_make(c, n, items, true, &m)))
      return rc;
    Tshard__Request req = TSHARD__REQUEST__INIT;
    req.op_case = TSHARD__REQUEST__OP_GET_MANY;
    req.get_many = &m.q;
    Tshard__Response *r = NULL;
    rc = tsc_call(c, &req, &r);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
      total += items[i].bytes;
    if (rc == TS_OK && (r->result_case != TSHARD__RESPONSE__RESULT_DATA || !r->data->direct ||
                        r->data->total_bytes != total)) {
      c->broken = true;
      rc = tsc_fail(c, TS_PROTOCOL,
                    "the daemon answered a get_many into this process's memory "
                    "without saying it wrote all of it there");
    }
    if (r)
      tsc_free(c, r);
    get_many_msg_free(&m);
    if (rc == TS_OK && c->progress)
      c->progress(c->progress_arg, total, total);
    if (rc != TS_NO_DIRECT)
      return rc;
    c->direct_on = false;
  }
  if ((rc = get_many_msg_make(c, n, items, false, &m)))
    return rc;
  rc = get_many_chunks(c, n, items, &m);
  get_many_msg_free(&m);
  return rc;
}
