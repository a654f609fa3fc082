/* api.c - libtshard's operations: each builds one Request (or a series of chunk requests),
 * calls the daemon and turns the answer into C values. Chunking of puts and gets lives here. */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "ts_rules.h"

char *tsc_str(const char *s) { return (char *)(s ? s : ""); }

int tsc_name_ok(tshard_client *c, const char *what, const char *name) {
  ts_error err;
  if (ts_name_check(what, name, name ? strlen(name) : 0, &err))
    return tsc_fail(c, err.code, "%s", err.msg);
  return TS_OK;
}

int tsc_call_plain(tshard_client *c, Tshard__Request *req) {
  Tshard__Response *r = NULL;
  int rc = tsc_call(c, req, &r);
  if (r)
    tsc_free(c, r);
  return rc;
}

int tsc_call_collective(tshard_client *c, Tshard__Request *req) {
  if (tsc_apply_group(c, req))
    return TS_INVALID_ARGUMENT;
  return tsc_call_plain(c, req);
}

/* One call whose answer must carry the result `want` (`what` names the operation and the result
 * in the error). *r gets the answer, to be freed with tsc_free; it may be set on failure too. */
int tsc_call_expect(tshard_client *c, Tshard__Request *req, Tshard__Response__ResultCase want,
                    const char *what, Tshard__Response **r) {
  *r = NULL;
  int rc = tsc_call(c, req, r);
  if (rc == TS_OK && (*r)->result_case != want)
    rc = tsc_fail(c, TS_PROTOCOL, "%s", what);
  return rc;
}

static void attr_text(Tshard__DistAttr *a, const char *text) {
  tshard__dist_attr__init(a);
  a->text = tsc_str(text);
}

int tshard_ping(tshard_client *c, int *rank, int *world_size) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PingRequest p = TSHARD__PING_REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_PING;
  req.ping = &p;
  Tshard__Response *r;
  int rc = tsc_call_expect(c, &req, TSHARD__RESPONSE__RESULT_PING,
                           "ping answered without a ping result", &r);
  if (rc == TS_OK) {
    if (rank)
      *rank = r->ping->rank;
    if (world_size)
      *world_size = r->ping->world_size;
    /* Chunks must fit the daemon's frames, with room for the message around the data. */
    if (r->ping->max_frame > 8192 && c->chunk > r->ping->max_frame - 4096)
      c->chunk = r->ping->max_frame - 4096;
  }
  if (r)
    tsc_free(c, r);
  return rc;
}

int tshard_create(tshard_client *c, const char *name, const char *dtype, int ndim,
                  const int64_t *shape, const char *attr, const char *layout, const char *key) {
  if (!c || ndim < 0 || (ndim > 0 && !shape))
    return TS_INVALID_ARGUMENT;
  if (tsc_name_ok(c, "tensor name", name))
    return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__CreateRequest q = TSHARD__CREATE_REQUEST__INIT;
  Tshard__DistAttr a;
  Tshard__Layout l = TSHARD__LAYOUT__INIT;
  attr_text(&a, attr);
  l.tag = tsc_str(layout);
  q.name = tsc_str(name);
  q.dtype = tsc_str(dtype);
  q.n_shape = (size_t)ndim;
  q.shape = (int64_t *)shape;
  q.attr = &a;
  q.layout = &l;
  req.op_case = TSHARD__REQUEST__OP_CREATE;
  req.create = &q;
  req.idempotency_key = tsc_str(key);
  if (tsc_apply_group(c, &req))
    return TS_INVALID_ARGUMENT;
  return tsc_call_plain(c, &req);
}

/* Sends data in chunks; the answer to the last one is the answer of the whole put. Two chunks
 * are in flight at once (the daemon reads the next while it stores the previous); after a
 * refusal nothing more is sent, the answers still due are read, and the first refusal (in chunk
 * order) is returned. Through shared memory (shm.c) the bytes are copied into the segment and
 * the request names where: all of them when they fit, else chunks of half the segment in
 * alternate halves (a half is written again only after the answer to its previous chunk, which
 * the window of two guarantees). */
#define PUT_WINDOW 2

/* Puts and gets (whole or slices) on a Unix socket name this process's memory (ClientMemory):
 * the daemons copy straight from or into the caller's buffer, nothing goes through the socket
 * or the segment. A daemon that cannot reach it answers NO_DIRECT once: the connection then uses
 * its segment. TSHARD_DIRECT=0, TSHARD_SHM=0 or tshard_set_shm(c, 0) keep the other paths. */
static bool direct_ready(const tshard_client *c, size_t bytes) {
  return c->shm_possible && c->shm_on && c->direct_on && bytes > 0;
}

/* The answer to a direct put or get; *fallback when the daemon cannot reach this memory (or,
 * for a get, when the buffer is too small: the other path then tells the size). A get's answer
 * says how many bytes it wrote (*got: at most bytes; exactly bytes when exact). */
static int direct_call(tshard_client *c, Tshard__Request *req, size_t bytes, bool get, bool exact,
                       uint64_t *got, bool *fallback) {
  Tshard__Response *r = NULL;
  *fallback = false;
  int rc = tsc_call(c, req, &r);
  uint64_t n = bytes;
  if (rc == TS_NO_DIRECT) {
    c->direct_on = false;
    *fallback = true;
  } else if (rc == TS_LIMIT && get && !exact) {
    *fallback = true;
  } else if (rc == TS_OK && get) {
    n = r->result_case == TSHARD__RESPONSE__RESULT_DATA ? r->data->total_bytes : 0;
    if (r->result_case != TSHARD__RESPONSE__RESULT_DATA || !r->data->direct ||
        r->data->offset != 0 || n > bytes || (exact && n != bytes)) {
      c->broken = true;
      rc = tsc_fail(c, TS_PROTOCOL,
                    "the daemon answered a get into this process's memory "
                    "without saying it wrote the whole of it there");
    }
  }
  if (r)
    tsc_free(c, r);
  if (got)
    *got = n;
  if (rc == TS_OK && c->progress)
    c->progress(c->progress_arg, n, n);
  return rc;
}

/* A put (slice: this rank's slice in `layout`) from this process's memory. */
static int put_direct(tshard_client *c, const char *name, const char *layout, bool slice,
                      const void *data, size_t bytes, const char *key, bool *fallback) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
  Tshard__PutSliceRequest ps = TSHARD__PUT_SLICE_REQUEST__INIT;
  Tshard__Layout l = TSHARD__LAYOUT__INIT;
  Tshard__ClientMemory m = TSHARD__CLIENT_MEMORY__INIT;
  m.address = (uint64_t)(uintptr_t)data;
  m.bytes = bytes;
  req.idempotency_key = tsc_str(key);
  if (slice) {
    l.tag = tsc_str(layout);
    ps.name = tsc_str(name);
    ps.total_bytes = bytes;
    ps.layout = &l;
    ps.client_memory = &m;
    ps.dtype = (char *)tsc_str(c->put_dtype); /* the declaration (typed_put.c) */
    ps.n_shape = c->put_dtype ? (size_t)c->put_ndim : 0;
    ps.shape = (int64_t *)c->put_shape;
    req.op_case = TSHARD__REQUEST__OP_PUT_SLICE;
    req.put_slice = &ps;
  } else {
    p.name = tsc_str(name);
    p.total_bytes = bytes;
    p.client_memory = &m;
    p.dtype = (char *)tsc_str(c->put_dtype);
    p.n_shape = c->put_dtype ? (size_t)c->put_ndim : 0;
    p.shape = (int64_t *)c->put_shape;
    req.op_case = TSHARD__REQUEST__OP_PUT;
    req.put = &p;
  }
  return direct_call(c, &req, bytes, false, false, NULL, fallback);
}

/* A get (slice: this rank's slice in `layout`, at most cap bytes) into this process's memory. */
static int get_direct(tshard_client *c, const char *name, const char *layout, bool slice, void *buf,
                      size_t cap, bool exact, uint64_t *got, bool *fallback) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__GetRequest g = TSHARD__GET_REQUEST__INIT;
  Tshard__GetSliceRequest gs = TSHARD__GET_SLICE_REQUEST__INIT;
  Tshard__Layout l = TSHARD__LAYOUT__INIT;
  Tshard__ClientMemory m = TSHARD__CLIENT_MEMORY__INIT;
  m.address = (uint64_t)(uintptr_t)buf;
  m.bytes = cap;
  if (slice) {
    l.tag = tsc_str(layout);
    gs.name = tsc_str(name);
    gs.layout = &l;
    gs.client_memory = &m;
    req.op_case = TSHARD__REQUEST__OP_GET_SLICE;
    req.get_slice = &gs;
  } else {
    g.name = tsc_str(name);
    g.client_memory = &m;
    req.op_case = TSHARD__REQUEST__OP_GET;
    req.get = &g;
  }
  return direct_call(c, &req, cap, true, exact, got, fallback);
}

static int put_chunks(tshard_client *c, const char *name, const char *layout, bool slice,
                      const void *data, size_t bytes, const char *key) {
  if (!c || (!data && bytes))
    return TS_INVALID_ARGUMENT;
  if (tsc_name_ok(c, "tensor name", name))
    return TS_INVALID_ARGUMENT;
  if (!(c->put_dtype && c->put_convert) && direct_ready(c, bytes)) {
    bool fallback;
    int drc = put_direct(c, name, layout, slice, data, bytes, key, &fallback);
    if (!fallback)
      return drc;
  }
  bool shm = tsc_shm_ready(c, bytes);
  size_t chunk = !shm ? c->chunk : bytes <= c->shm_bytes ? bytes : (c->shm_bytes / 2) & ~(size_t)63;
  size_t nchunks = bytes ? (bytes + chunk - 1) / chunk : 1;
  size_t sent = 0, acked = 0;
  uint64_t ids[PUT_WINDOW];
  size_t idx[PUT_WINDOW];
  int nout = 0, first = TS_OK;
  size_t first_chunk = (size_t)-1;
  char first_msg[sizeof c->message] = "";
  while (nout > 0 || (sent < nchunks && first == TS_OK)) {
    while (sent < nchunks && nout < PUT_WINDOW && first == TS_OK) {
      size_t off = sent * chunk;
      size_t n = bytes - off < chunk ? bytes - off : chunk;
      Tshard__ShmData sd = TSHARD__SHM_DATA__INIT;
      Tshard__Request req = TSHARD__REQUEST__INIT;
      Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
      Tshard__PutSliceRequest ps = TSHARD__PUT_SLICE_REQUEST__INIT;
      Tshard__Layout l = TSHARD__LAYOUT__INIT;
      ProtobufCBinaryData d = {n, (uint8_t *)data + off};
      if (shm) {
        sd.offset = (sent % 2) * chunk;
        sd.bytes = n;
        memcpy(c->shm_base + sd.offset, (const uint8_t *)data + off, n);
        d.len = 0;
        d.data = NULL;
        ps.shm = p.shm = &sd;
      }
      req.idempotency_key = tsc_str(key);
      if (slice) {
        l.tag = tsc_str(layout);
        ps.name = tsc_str(name);
        ps.offset = off;
        ps.total_bytes = bytes;
        ps.data = d;
        ps.layout = &l;
        ps.dtype = (char *)tsc_str(c->put_dtype); /* the declaration (typed_put.c) */
        ps.n_shape = c->put_dtype ? (size_t)c->put_ndim : 0;
        ps.shape = (int64_t *)c->put_shape;
        ps.convert = c->put_dtype && c->put_convert;
        req.op_case = TSHARD__REQUEST__OP_PUT_SLICE;
        req.put_slice = &ps;
      } else {
        p.name = tsc_str(name);
        p.offset = off;
        p.total_bytes = bytes;
        p.data = d;
        p.dtype = (char *)tsc_str(c->put_dtype); /* the declaration (typed_put.c) */
        p.n_shape = c->put_dtype ? (size_t)c->put_ndim : 0;
        p.shape = (int64_t *)c->put_shape;
        p.convert = c->put_dtype && c->put_convert;
        req.op_case = TSHARD__REQUEST__OP_PUT;
        req.put = &p;
      }
      int rc = tsc_send(c, &req, tsc_deadline(c));
      if (rc)
        return rc;
      ids[nout] = req.id;
      idx[nout++] = sent++;
    }
    Tshard__Response *r = NULL;
    int rc = tsc_recv(c, 0, &r, NULL, tsc_deadline(c));
    if (!r)
      return rc; /* the transport failed: the connection is broken */
    int k = 0;   /* an answer without id (a frame refused whole) goes to the oldest chunk */
    while (k < nout && r->id != 0 && ids[k] != r->id)
      k++;
    if (k == nout) {
      tsc_free(c, r);
      c->broken = true;
      return tsc_fail(c, TS_PROTOCOL, "answer to a request that was not sent");
    }
    if (rc != TS_OK && idx[k] < first_chunk) {
      first = rc;
      first_chunk = idx[k];
      snprintf(first_msg, sizeof first_msg, "%s", c->message);
    }
    if (rc == TS_OK && c->progress) {
      acked += idx[k] + 1 < nchunks ? chunk : bytes - idx[k] * chunk;
      c->progress(c->progress_arg, acked, bytes);
    }
    tsc_free(c, r);
    ids[k] = ids[nout - 1];
    idx[k] = idx[nout - 1];
    nout--;
  }
  if (first != TS_OK)
    snprintf(c->message, sizeof c->message, "%s", first_msg);
  return first;
}

void tshard_set_progress(tshard_client *c, tshard_progress_fn fn, void *arg) {
  if (c) {
    c->progress = fn;
    c->progress_arg = arg;
  }
}

int tshard_put(tshard_client *c, const char *name, const void *data, size_t bytes,
               const char *key) {
  return put_chunks(c, name, NULL, false, data, bytes, key);
}

int tshard_put_slice(tshard_client *c, const char *name, const char *layout, const void *data,
                     size_t bytes) {
  return put_chunks(c, name, layout, true, data, bytes, NULL);
}

/* One chunk request of a get. */
typedef struct get_req {
  Tshard__Request req;
  Tshard__GetRequest g;
  Tshard__GetSliceRequest gs;
  Tshard__Layout l;
  Tshard__ShmData sd;
} get_req;

/* A chunk request; with shm_bytes > 0 its answer goes to the segment's region [shm_at,
 * shm_at + shm_bytes) (chunk 0: the daemon's choice up to the region). */
static void get_request(get_req *q, const char *name, const char *layout, bool slice, uint64_t off,
                        size_t chunk, size_t shm_at, size_t shm_bytes) {
  tshard__request__init(&q->req);
  tshard__get_request__init(&q->g);
  tshard__get_slice_request__init(&q->gs);
  tshard__layout__init(&q->l);
  tshard__shm_data__init(&q->sd);
  q->sd.offset = shm_at;
  q->sd.bytes = shm_bytes;
  q->g.shm = q->gs.shm = shm_bytes ? &q->sd : NULL;
  if (slice) {
    q->l.tag = tsc_str(layout);
    q->gs.name = tsc_str(name);
    q->gs.layout = &q->l;
    q->gs.offset = off;
    q->gs.max_bytes = chunk;
    q->req.op_case = TSHARD__REQUEST__OP_GET_SLICE;
    q->req.get_slice = &q->gs;
  } else {
    q->g.name = tsc_str(name);
    q->g.offset = off;
    q->g.max_bytes = chunk;
    q->req.op_case = TSHARD__REQUEST__OP_GET;
    q->req.get = &q->g;
  }
}

/* Receives the answer to request `id` for the chunk at `off` into buf; *len gets its size. */
static int get_answer(tshard_client *c, uint64_t id, uint64_t off, void *buf, size_t cap,
                      bool exact, const char *name, uint64_t *total, uint64_t *len) {
  Tshard__Response *r = NULL;
  tsc_sink sink = {(uint8_t *)buf, cap, off, exact, false, 0, 0};
  int rc = tsc_recv(c, id, &r, buf ? &sink : NULL, tsc_deadline(c));
  if (rc == TS_OK && sink.taken) {
    *total = sink.total;
    *len = sink.len;
    return TS_OK;
  }
  const Tshard__ShmData *sh =
      rc == TS_OK && r->result_case == TSHARD__RESPONSE__RESULT_DATA ? r->data->shm : NULL;
  uint64_t n = sh ? sh->bytes : rc == TS_OK && r->data ? r->data->data.len : 0;
  if (rc == TS_OK && (r->result_case != TSHARD__RESPONSE__RESULT_DATA || r->data->offset != off ||
                      r->data->offset > r->data->total_bytes || n > r->data->total_bytes - off ||
                      (sh && (!c->shm_base || r->data->data.len || sh->offset > c->shm_bytes ||
                              sh->bytes > c->shm_bytes - sh->offset))))
    rc = tsc_fail(c, TS_PROTOCOL, "the daemon answered a chunk that does not fit");
  if (rc == TS_OK) {
    *total = r->data->total_bytes;
    *len = n;
    if (exact ? *total != cap : *total > cap)
      rc = tsc_fail(c, exact ? TS_BAD_SHAPE : TS_LIMIT, "'%s' has %llu bytes; the buffer has %zu",
                    name ? name : "", (unsigned long long)*total, cap);
    else if (n)
      memcpy((uint8_t *)buf + off, sh ? c->shm_base + sh->offset : r->data->data.data, n);
  }
  if (r)
    tsc_free(c, r);
  return rc;
}

/* Reads chunks until total. The first answer says the total (a buffer too small for it ends the
 * get there: the daemon drops its copy at the next get or the close); then two requests are kept
 * in flight, so the daemon prepares the next chunk while this one arrives. Answers to one
 * connection's engine requests come in order. Through shared memory the first request offers the
 * whole segment (a tensor that fits is gathered or copied straight into it) and the next ones
 * alternate between its halves (a half is asked again only after its chunk was copied out). */
#define GET_WINDOW 2
static int get_chunks(tshard_client *c, const char *name, const char *layout, bool slice, void *buf,
                      size_t cap, size_t *total_out, bool exact) {
  if (!c || (!buf && cap))
    return TS_INVALID_ARGUMENT;
  if (tsc_name_ok(c, "tensor name", name))
    return TS_INVALID_ARGUMENT;
  if (buf && direct_ready(c, cap)) {
    bool fallback;
    uint64_t got = 0;
    int drc = get_direct(c, name, layout, slice, buf, cap, exact, &got, &fallback);
    if (!fallback) {
      if (total_out && drc == TS_OK)
        *total_out = got;
      return drc;
    }
  }
  get_req q;
  bool shm = buf && cap && tsc_shm_ready(c, cap);
  size_t chunk = shm ? (c->shm_bytes / 2) & ~(size_t)63 : c->chunk;
  get_request(&q, name, layout, slice, 0, shm ? 0 : c->chunk, 0, shm ? c->shm_bytes : 0);
  uint64_t total = 0, len = 0;
  int rc = tsc_send(c, &q.req, tsc_deadline(c));
  if (rc == TS_OK)
    rc = get_answer(c, q.req.id, 0, buf, cap, exact, name, &total, &len);
  if (total_out && (rc == TS_OK || rc == TS_LIMIT || rc == TS_BAD_SHAPE))
    *total_out = total;
  if (rc)
    return rc;
  if (c->progress)
    c->progress(c->progress_arg, len, total);
  uint64_t next = len, received = len, offs[GET_WINDOW], ids[GET_WINDOW];
  int nout = 0, first = TS_OK;
  size_t half = 0;
  char first_msg[sizeof c->message] = "";
  while (nout > 0 || (received < total && first == TS_OK)) {
    while (nout < GET_WINDOW && next < total && first == TS_OK) {
      get_request(&q, name, layout, slice, next, shm ? 0 : chunk, (half++ % 2) * chunk,
                  shm ? chunk : 0);
      if ((rc = tsc_send(c, &q.req, tsc_deadline(c))))
        return rc;
      offs[nout] = next;
      ids[nout++] = q.req.id;
      next += total - next < chunk ? total - next : chunk;
    }
    uint64_t t = 0, n = 0;
    rc = get_answer(c, ids[0], offs[0], buf, cap, exact, name, &t, &n);
    if (c->broken)
      return rc;
    if (rc == TS_OK && (t != total || (n == 0 && offs[0] < total))) {
      c->broken = true; /* the daemon changed the size under us: do not go on */
      return tsc_fail(c, TS_PROTOCOL, "the daemon answered a chunk that does not fit");
    }
    if (rc == TS_OK && n != (total - offs[0] < chunk ? total - offs[0] : chunk)) {
      c->broken = true; /* the next requests assumed full chunks */
      return tsc_fail(c, TS_PROTOCOL, "the daemon answered a chunk of another size");
    }
    if (rc != TS_OK && first == TS_OK) {
      first = rc;
      snprintf(first_msg, sizeof first_msg, "%s", c->message);
    }
    received += n;
    if (rc == TS_OK && c->progress)
      c->progress(c->progress_arg, received, total);
    ids[0] = ids[1];
    offs[0] = offs[1];
    nout--;
  }
  if (first != TS_OK)
    snprintf(c->message, sizeof c->message, "%s", first_msg);
  return first;
}

int tshard_get(tshard_client *c, const char *name, void *buf, size_t bytes) {
  return get_chunks(c, name, NULL, false, buf, bytes, NULL, true);
}

int tshard_get_slice(tshard_client *c, const char *name, const char *layout, void *buf, size_t cap,
                     size_t *bytes) {
  size_t total = 0;
  int rc = get_chunks(c, name, layout, true, buf, cap, &total, false);
  if (bytes)
    *bytes = total;
  return rc;
}

int tshard_reshard(tshard_client *c, const char *name, const char *attr,
                   const tshard_reshard_opts *opts) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  tshard_reshard_opts none = {0};
  const tshard_reshard_opts *o = opts ? opts : &none;
  if (tsc_name_ok(c, "tensor name", name) || (o->keep_source_as && o->keep_source_as[0] &&
                                              tsc_name_ok(c, "keep_source_as", o->keep_source_as)))
    return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ReshardRequest q = TSHARD__RESHARD_REQUEST__INIT;
  Tshard__DistAttr a;
  Tshard__Layout l = TSHARD__LAYOUT__INIT;
  attr_text(&a, attr);
  l.tag = tsc_str(o->layout);
  q.name = tsc_str(name);
  q.attr = &a;
  q.strategy = tsc_str(o->strategy);
  q.keep_source_as = tsc_str(o->keep_source_as);
  q.layout = &l;
  q.dtype = tsc_str(o->dtype);
  q.relabel = o->relabel;
  req.op_case = TSHARD__REQUEST__OP_RESHARD;
  req.reshard = &q;
  req.idempotency_key = tsc_str(o->key);
  if (tsc_apply_group(c, &req))
    return TS_INVALID_ARGUMENT;
  Tshard__Response *r = NULL; /* the answer names the strategy run and its time */
  int rc = tsc_call(c, &req, &r);
  c->reshard_strategy[0] = '\0';
  c->reshard_us = 0;
  c->reshard_nranks = 0;
  if (rc == TS_OK && r && r->strategy) {
    snprintf(c->reshard_strategy, sizeof c->reshard_strategy, "%s", r->strategy);
    c->reshard_us = r->elapsed_us;
    int *v = r->n_ranks ? realloc(c->reshard_ranks, r->n_ranks * sizeof *v) : NULL;
    if (v) {
      memcpy(v, r->ranks, r->n_ranks * sizeof *v);
      c->reshard_ranks = v;
      c->reshard_nranks = (int)r->n_ranks;
    }
  }
  if (r)
    tsc_free(c, r);
  return rc;
}

int tshard_reshard_report(const tshard_client *c, char *strategy, size_t cap,
                          uint64_t *elapsed_us) {
  if (!c || !c->reshard_strategy[0])
    return TS_NOT_FOUND;
  if (strategy && cap)
    snprintf(strategy, cap, "%s", c->reshard_strategy);
  if (elapsed_us)
    *elapsed_us = c->reshard_us;
  return TS_OK;
}

int tshard_reshard_ranks(const tshard_client *c, int *ranks, int cap) {
  if (!c)
    return 0;
  for (int i = 0; ranks && i < cap && i < c->reshard_nranks; i++)
    ranks[i] = c->reshard_ranks[i];
  return c->reshard_nranks;
}

int tshard_drop(tshard_client *c, const char *name, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__DropRequest q = TSHARD__DROP_REQUEST__INIT;
  if (tsc_name_ok(c, "tensor name", name))
    return TS_INVALID_ARGUMENT;
  q.name = tsc_str(name);
  req.op_case = TSHARD__REQUEST__OP_DROP;
  req.drop = &q;
  req.idempotency_key = tsc_str(key);
  if (tsc_apply_group(c, &req))
    return TS_INVALID_ARGUMENT;
  return tsc_call_plain(c, &req);
}

int tshard_shutdown(tshard_client *c, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ShutdownRequest q = TSHARD__SHUTDOWN_REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_SHUTDOWN;
  req.shutdown = &q;
  req.idempotency_key = tsc_str(key);
  return tsc_call_plain(c, &req);
}

int tshard_list(tshard_client *c, char ***names, int *count) {
  if (!c || !names || !count)
    return TS_INVALID_ARGUMENT;
  *names = NULL;
  *count = 0;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ListRequest q = TSHARD__LIST_REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_LIST;
  req.list = &q;
  Tshard__Response *r;
  int rc =
      tsc_call_expect(c, &req, TSHARD__RESPONSE__RESULT_LIST, "list answered without a list", &r);
  if (rc == TS_OK) {
    char **out = calloc(r->list->n_names + 1, sizeof *out);
    if (!out)
      rc = tsc_fail(c, TS_NO_MEMORY, "no memory for the names");
    for (size_t i = 0; out && i < r->list->n_names; i++) {
      out[i] = strdup(r->list->names[i]);
      if (!out[i]) {
        tshard_free_names(out, (int)i);
        out = NULL;
        rc = tsc_fail(c, TS_NO_MEMORY, "no memory for the names");
      }
    }
    if (out) {
      *names = out;
      *count = (int)r->list->n_names;
    }
  }
  if (r)
    tsc_free(c, r);
  return rc;
}

void tshard_free_names(char **names, int count) {
  if (!names)
    return;
  for (int i = 0; i < count; i++)
    free(names[i]);
  free(names);
}

void tshard_info_clear(tshard_info *info) {
  if (!info)
    return;
  free(info->attr);
  free(info->ranks);
  memset(info, 0, sizeof *info);
}

int tshard_describe(tshard_client *c, const char *name, tshard_info *info) {
  if (!c || !info)
    return TS_INVALID_ARGUMENT;
  memset(info, 0, sizeof *info);
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__DescribeRequest q = TSHARD__DESCRIBE_REQUEST__INIT;
  if (tsc_name_ok(c, "tensor name", name))
    return TS_INVALID_ARGUMENT;
  q.name = tsc_str(name);
  req.op_case = TSHARD__REQUEST__OP_DESCRIBE;
  req.describe = &q;
  Tshard__Response *r;
  const char *invalid = "describe answered without a valid description";
  int rc = tsc_call_expect(c, &req, TSHARD__RESPONSE__RESULT_DESCRIBE, invalid, &r);
  if (rc == TS_OK && (r->describe->n_shape > TSHARD_MAX_DIMS || !r->describe->attr))
    rc = tsc_fail(c, TS_PROTOCOL, "%s", invalid);
  if (rc == TS_OK) {
    const Tshard__DescribeResult *d = r->describe;
    snprintf(info->name, sizeof info->name, "%s", d->name);
    snprintf(info->dtype, sizeof info->dtype, "%s", d->dtype);
    snprintf(info->layout, sizeof info->layout, "%s", d->layout ? d->layout->tag : "");
    info->ndim = (int)d->n_shape;
    memcpy(info->shape, d->shape, d->n_shape * sizeof *d->shape);
    info->attr = strdup(d->attr->text);
    info->ranks = calloc(d->n_ranks + 1, sizeof *info->ranks);
    if (!info->attr || !info->ranks) {
      tshard_info_clear(info);
      rc = tsc_fail(c, TS_NO_MEMORY, "no memory for the description");
    } else {
      for (size_t i = 0; i < d->n_ranks; i++) {
        const Tshard__RankBytes *x = d->ranks[i];
        tshard_rank_info *y = &info->ranks[i];
        y->rank = x->rank;
        y->bytes = x->bytes;
        for (size_t k = 0; k < x->n_lo && k < TSHARD_MAX_DIMS && k < x->n_hi; k++) {
          y->lo[k] = x->lo[k];
          y->hi[k] = x->hi[k];
        }
      }
      info->nranks = (int)d->n_ranks;
    }
  }
  if (r)
    tsc_free(c, r);
  return rc;
}

int tshard_plan(tshard_client *c, const char *name, const char *attr, const char *strategy,
                char **explain, char *chosen, size_t chosen_cap) {
  if (!c || !explain)
    return TS_INVALID_ARGUMENT;
  *explain = NULL;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PlanRequest q = TSHARD__PLAN_REQUEST__INIT;
  if (tsc_name_ok(c, "tensor name", name))
    return TS_INVALID_ARGUMENT;
  Tshard__DistAttr a;
  attr_text(&a, attr);
  q.name = tsc_str(name);
  q.attr = &a;
  q.strategy = tsc_str(strategy);
  req.op_case = TSHARD__REQUEST__OP_PLAN;
  req.plan = &q;
  Tshard__Response *r;
  int rc =
      tsc_call_expect(c, &req, TSHARD__RESPONSE__RESULT_PLAN, "plan answered without a plan", &r);
  if (rc == TS_OK) {
    if (!(*explain = strdup(r->plan->explain)))
      rc = tsc_fail(c, TS_NO_MEMORY, "no memory for the explain text");
    if (chosen && chosen_cap)
      snprintf(chosen, chosen_cap, "%s", r->plan->strategy);
  }
  if (r)
    tsc_free(c, r);
  return rc;
}

int tshard_stats_get(tshard_client *c, tshard_stats *s) {
  if (!c || !s)
    return TS_INVALID_ARGUMENT;
  memset(s, 0, sizeof *s);
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__StatsRequest q = TSHARD__STATS_REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_STATS;
  req.stats = &q;
  Tshard__Response *r;
  int rc = tsc_call_expect(c, &req, TSHARD__RESPONSE__RESULT_STATS,
                           "stats answered without statistics", &r);
  if (rc == TS_OK) {
    const Tshard__StatsResult *x = r->stats;
    s->operations = x->operations;
    s->collective_ops = x->collective_ops;
    s->tensors = x->tensors;
    s->memory_in_use = x->memory_in_use;
    s->memory_limit = x->memory_limit;
    s->connections = x->connections;
    s->stored_bytes = x->stored_bytes;
    s->pool_staging = x->pool_staging;
    s->pool_cached = x->pool_cached;
    s->pool_peak = x->pool_peak;
    s->pool_cache_cap = x->pool_cache_cap;
    s->pool_hits = x->pool_hits;
    s->pool_misses = x->pool_misses;
    s->pool_released = x->pool_released;
    snprintf(s->topology, sizeof s->topology, "%s", x->topology ? x->topology : "");
    s->hosts = (int)x->hosts;
    s->host = (int)x->host;
    snprintf(s->host_name, sizeof s->host_name, "%s", x->host_name ? x->host_name : "");
    s->numa = s->host_name[0] ? (int)x->numa : -1; /* no name: a daemon that does not say */
    for (size_t i = 0; i < x->n_strategies && i < 16; i++) {
      snprintf(s->strategies[i].name, sizeof s->strategies[i].name, "%s",
               x->strategies[i]->strategy);
      s->strategies[i].reshards = x->strategies[i]->reshards;
      s->strategies[i].bytes_sent = x->strategies[i]->bytes_sent;
      s->strategies[i].bytes_received = x->strategies[i]->bytes_received;
      s->strategies[i].relayed = x->strategies[i]->relayed;
      s->nstrategies = (int)i + 1;
    }
    for (size_t i = 0; i < x->n_ops && i < 64; i++) {
      const Tshard__OpKindStats *k = x->ops[i];
      snprintf(s->ops[i].kind, sizeof s->ops[i].kind, "%s", k->kind);
      s->ops[i].count = k->count;
      s->ops[i].p50_us = k->p50_us;
      s->ops[i].p99_us = k->p99_us;
      s->ops[i].batch_p50 = k->batch_p50;
      s->ops[i].batch_max = k->batch_max;
      s->nops = (int)i + 1;
    }
    for (size_t i = 0; i < x->n_saves && i < 8; i++) {
      const Tshard__SaveProgress *v = x->saves[i];
      tshard_save_stats *o = &s->saves[i];
      o->save_id = v->save_id;
      snprintf(o->dir, sizeof o->dir, "%s", v->dir);
      snprintf(o->state, sizeof o->state, "%s", v->state);
      o->bytes_written = v->bytes_written;
      o->bytes_total = v->bytes_total;
      o->checkpoint_bytes = v->checkpoint_bytes;
      o->seconds = v->seconds;
      o->status = v->status;
      snprintf(o->message, sizeof o->message, "%s", v->message);
      s->nsaves = (int)i + 1;
    }
  }
  if (r)
    tsc_free(c, r);
  return rc;
}
