/* transfer.c - chunked data per connection: puts being received and copies being read.
 *
 * A put (whole tensor or this rank's slice) arrives in chunks in order; the chunks go to a staging
 * buffer of the announced total, allocated after the total was checked against the tensor and the
 * memory limit. Only the complete data touches the stored tensor (a slice is copied in with the
 * strided-copy kernel; a whole tensor becomes a collective scatter), so an interrupted or wrong
 * put leaves the tensor as it was. A get answers its first chunk with the copy it made (a slice
 * in the asked layout, or the gathered tensor) and the next chunks from that copy, freed after
 * its last byte or when the connection goes. Chunks may instead name a region of the connection's
 * shared segment (shm.c): a whole put then scatters straight from it, a whole slice is copied
 * straight between it and the stored layout, and get answers are written into it.
 *
 * A whole put or get may instead name the client's own memory (ClientMemory, a client on this
 * node): no bytes travel through the socket or a segment. The daemon checks it can read both ends
 * of the range (else NO_DIRECT, and the client falls back on its segment); every rank then
 * copies its piece straight from or to there (scatter.c's direct path), or, where that does not
 * apply, the asking rank copies the whole tensor between there and a staging buffer. Such a
 * transfer runs only while the client's connection is open (ops.c): a client that gave up waiting
 * (its timeout closes the connection) may have reused that memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "handlers.h"
#include "oplog.h"
#include "put_verify.h"

void tsd_reply_put(tsd_engine *e, uint64_t conn_id, uint64_t id, uint64_t received, bool done) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__PutResult pr = TSHARD__PUT_RESULT__INIT;
  r.id = id;
  r.result_case = TSHARD__RESPONSE__RESULT_PUT;
  r.put = &pr;
  pr.received = received;
  pr.done = done;
  tsd_reply_response(e, conn_id, &r);
}

static const char *tag_of(const Tshard__Layout *l) { return l && l->tag ? l->tag : ""; }

/* The layout of a slice box in a tag, and the bytes it spans. */
static int box_layout(const ts_box *box, ts_dtype dt, const char *tag, ts_layout *l, size_t *bytes,
                      ts_error *err) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < box->ndim; d++)
    ext[d] = box->hi[d] - box->lo[d];
  int rc = tag[0] ? ts_layout_from_tag(l, dt, box->ndim, ext, tag, err)
                  : ts_layout_plain(l, dt, box->ndim, ext, err);
  return rc ? rc : ts_layout_span(l, bytes, err);
}

/* Starts or continues a staged put (session.c); false after answering an error. */
static bool stage_chunk(tsd_engine *e, tsd_session *c, uint64_t conn_id, uint64_t req_id,
                        const tsd_put_target *t, uint64_t offset, uint64_t total,
                        const uint8_t *data, size_t len) {
  ts_error err;
  int rc = tsd_session_put_stage(e, c, t, offset, total, data, len, &err);
  if (rc)
    tsd_reply_status(e, conn_id, req_id, rc, err.msg);
  return rc == TS_OK;
}

/* The connection's state and where a put chunk's bytes are: in the frame, or in the region of
 * the shared segment the chunk names (checked). NULL after answering an error. */
static tsd_session *chunk_source(tsd_engine *e, uint64_t conn_id, uint64_t req_id,
                                 const ProtobufCBinaryData *data, const Tshard__ShmData *shm,
                                 const uint8_t **src, size_t *len) {
  ts_error err;
  tsd_session *c = tsd_session_get(e, conn_id, true);
  if (!c) {
    tsd_reply_status(e, conn_id, req_id, TS_NO_MEMORY, "no memory for the connection state");
    return NULL;
  }
  *src = data->data;
  *len = data->len;
  if (shm) {
    uint8_t *p;
    uint64_t n;
    if (tsd_shm_region(c, shm, shm->bytes, &p, &n, &err)) {
      tsd_session_put_reset(e, c); /* the put in progress cannot go on */
      tsd_reply_status(e, conn_id, req_id, err.code, err.msg);
      return NULL;
    }
    *src = p;
    *len = (size_t)shm->bytes;
  }
  return c;
}

ts_comm_proc tsd_client_proc(const Tshard__ClientMemory *m) {
  ts_comm_proc p = {m->pid, m->uid, m->start_time};
  return p;
}

int tsd_client_probe(const Tshard__ClientMemory *m, ts_error *err) {
  uint8_t b;
  uint64_t ends[2] = {m->address, m->address + (m->bytes ? m->bytes - 1 : 0)};
  ts_comm_proc proc = tsd_client_proc(m);
  int pidfd = -1;
  int rc = ts_comm_proc_pin(&proc, &pidfd, err); /* the process that asked, or none */
  for (int i = 0; rc == TS_OK && i < (m->bytes > 1 ? 2 : 1); i++) {
    struct iovec l = {&b, 1}, r = {(void *)(uintptr_t)ends[i], 1};
    if (process_vm_readv((pid_t)m->pid, &l, 1, &r, 1, 0) == 1)
      continue;
    int e = errno;
    if (e == EFAULT)
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the client's memory [%#llx, +%llu bytes) is not mapped in its process "
                        "%lld (byte %#llx)",
                        (unsigned long long)m->address, (unsigned long long)m->bytes,
                        (long long)m->pid, (unsigned long long)ends[i]);
    else if (e == ESRCH)
      rc = ts_error_set(err, TS_NOT_FOUND, "the client's process %lld is gone", (long long)m->pid);
    else
      rc = ts_error_set(err, TS_NO_DIRECT,
                        "this daemon cannot read the memory of the client's process %lld (%s): "
                        "the data goes through the shared segment instead",
                        (long long)m->pid, strerror(e));
  }
  return ts_comm_proc_unpin(&proc, &pidfd, rc, err);
}

int tsd_client_copy(const Tshard__ClientMemory *m, bool write, uint8_t *buf, uint64_t n,
                    ts_error *err) {
  ts_comm_region loc, rem;
  memset(&loc, 0, sizeof loc);
  loc.ndim = 1;
  loc.esize = 1;
  loc.count[0] = (int64_t)n;
  loc.stride[0] = 1;
  rem = loc;
  loc.base = buf;
  rem.base = (void *)(uintptr_t)m->address;
  ts_comm_proc proc = tsd_client_proc(m);
  return ts_comm_process_copy(&proc, write, &loc, &rem, err);
}

/* A whole put from the client's memory (see the top): checked like any put, then submitted
 * without data when every rank can copy its piece from there, else read into staging here. */
static void direct_put(tsd_engine *e, tsd_work *w, ts_stored *t, uint64_t expected) {
  Tshard__Request *req = w->req;
  Tshard__PutRequest *p = req->put;
  ts_error err;
  tsd_session *c = tsd_session_get(e, w->conn_id, false);
  if (c)
    tsd_session_put_reset(e, c); /* a chunked put in progress is abandoned */
  int rc = tsd_put_check(t, false, "", p->dtype, p->n_shape, p->shape, false, p->total_bytes,
                         expected, &err);
  if (!rc)
    rc = tsd_client_probe(p->client_memory, &err);
  if (!rc && e->stopping)
    rc = ts_error_set(&err, TS_SHUTDOWN, "the daemon is shutting down");
  if (rc) {
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
    return;
  }
  uint8_t *staging = NULL;
  if (!ts_scatter_direct_applies(e->world, t)) {
    staging = tsd_buf_take(e, expected, "the put's staging", &err);
    if (!staging || tsd_client_copy(p->client_memory, false, staging, expected, &err)) {
      tsd_buf_give(e, staging, expected);
      tsd_reply_status(e, w->conn_id, req->id, err.code, err.msg);
      return;
    }
    tshard__client_memory__free_unpacked(p->client_memory, NULL);
    p->client_memory = NULL; /* an ordinary put from here on */
  }
  w->req = NULL;
  tsd_submit(e, w->conn_id, req, staging, expected);
}

/* This rank's slice from the client's memory (no conversion): read straight into a new slice
 * when the client sends the stored layout (swapped in once complete), else through staging and
 * the strided copy. A read that fails leaves the slice as it was. */
static void direct_put_slice(tsd_engine *e, tsd_work *w, ts_stored *t, const char *tag,
                             const ts_layout *l, size_t bytes) {
  const Tshard__Request *req = w->req;
  const Tshard__PutSliceRequest *p = req->put_slice;
  ts_error err;
  tsd_session *c = tsd_session_get(e, w->conn_id, false);
  if (c)
    tsd_session_put_reset(e, c); /* a chunked put in progress is abandoned */
  int rc = tsd_put_check(t, true, tag, p->dtype, p->n_shape, p->shape, false, p->total_bytes, bytes,
                         &err);
  if (!rc && bytes)
    rc = tsd_client_probe(p->client_memory, &err);
  if (!rc && bytes) {
    bool same = strcmp(tag, t->layout_tag) == 0 && bytes == t->local.bytes;
    uint8_t *buf = same ? ts_shard_alloc_as(bytes, 0, "the put's new slice", &err)
                        : tsd_buf_take(e, bytes, "the slice's staging", &err);
    rc = buf ? tsd_client_copy(p->client_memory, false, buf, bytes, &err) : err.code;
    if (!rc && same) {
      ts_shard_free(t->local.data);
      t->local.data = buf;
      buf = NULL;
    } else if (!rc) {
      ts_tensor from = {buf, bytes, *l};
      rc = ts_copy(&t->local, &from, NULL, &err);
    }
    if (same)
      ts_shard_free(buf);
    else
      tsd_buf_give(e, buf, bytes);
  }
  if (rc)
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
  else
    tsd_reply_put(e, w->conn_id, req->id, bytes, true);
  tsd_oplog_local(req, w->conn_id, bytes, rc); /* oplog.c */
}

/* A whole put or slice in one shared-memory chunk goes from the segment without staging. */
static bool shm_whole(const Tshard__ShmData *shm, uint64_t offset, uint64_t total,
                      uint64_t expected) {
  return shm && offset == 0 && total > 0 && total == expected && shm->bytes == total;
}

void tsd_handle_put_chunk(tsd_engine *e, tsd_work *w) {
  Tshard__Request *req = w->req;
  const Tshard__PutRequest *p = req->put;
  ts_stored *t = ts_store_find(e->store, p->name);
  uint64_t expected = 0;
  if (t) {
    expected = ts_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
      expected *= (uint64_t)t->shape[d];
  } else if (p->offset == 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "no tensor named '%s'; create it first", p->name);
    tsd_reply_status(e, w->conn_id, req->id, TS_NOT_FOUND, msg);
    return;
  }
  ts_error cerr; /* the declared dtype and shape, and the byte count (put_verify.c) */
  ts_dtype from = TS_F32;
  bool conv = false; /* the data comes in another dtype, converted once complete */
  if (t && tsd_put_source_dtype(t, p->dtype, p->convert, &from, &conv, &cerr)) {
    tsd_reply_status(e, w->conn_id, req->id, cerr.code, cerr.msg);
    return;
  }
  if (t && p->client_memory) {
    direct_put(e, w, t, expected);
    return;
  }
  const uint8_t *src;
  size_t len;
  tsd_session *c = chunk_source(e, w->conn_id, req->id, &p->data, p->shm, &src, &len);
  if (!c)
    return;
  if (t && p->offset == 0 &&
      tsd_put_check(t, false, "", p->dtype, p->n_shape, p->shape, conv, p->total_bytes, expected,
                    &cerr)) {
    tsd_session_put_reset(e, c);
    tsd_reply_status(e, w->conn_id, req->id, cerr.code, cerr.msg);
    return;
  }
  uint64_t tensor_bytes = expected;
  if (conv)
    expected = expected / ts_dtype_size(t->dtype) * ts_dtype_size(from);
  if (t && !conv && shm_whole(p->shm, p->offset, p->total_bytes, expected)) {
    /* Scattered straight from the segment, which the submission holds while it waits. */
    tsd_session_put_reset(e, c);
    if (e->stopping) {
      tsd_reply_status(e, w->conn_id, req->id, TS_SHUTDOWN, "the daemon is shutting down");
      return;
    }
    tsd_shm_hold(tsd_session_shm(c));
    w->req = NULL;
    tsd_submit(e, w->conn_id, req, (uint8_t *)src, expected);
    return;
  }
  tsd_put_target tgt = {p->name, false, "", NULL, t ? expected : p->total_bytes};
  if (!stage_chunk(e, c, w->conn_id, req->id, &tgt, p->offset, p->total_bytes, src, len))
    return;
  if (!tsd_session_put_done(c)) {
    tsd_reply_put(e, w->conn_id, req->id, tsd_session_put_received(c), false);
    return;
  }
  /* Complete: the scatter is a collective operation; the staging goes with it. */
  uint64_t bytes;
  uint8_t *staging = tsd_session_put_take(c, &bytes, NULL);
  if (conv && t && bytes == expected) { /* to the tensor's dtype, every value kept */
    uint8_t *converted = NULL;
    if (!tsd_put_values_fit(t, from, staging, bytes, &cerr))
      converted = tsd_buf_take(e, tensor_bytes, "the put's converted copy", &cerr);
    if (!converted) {
      tsd_buf_give(e, staging, bytes);
      tsd_reply_status(e, w->conn_id, req->id, cerr.code, cerr.msg);
      return;
    }
    ts_convert(converted, t->dtype, staging, from, (size_t)(bytes / ts_dtype_size(from)));
    tsd_buf_give(e, staging, bytes);
    staging = converted;
    bytes = tensor_bytes;
  }
  if (e->stopping) {
    tsd_buf_give(e, staging, bytes);
    tsd_reply_status(e, w->conn_id, req->id, TS_SHUTDOWN, "the daemon is shutting down");
    return;
  }
  req->put->data.len = 0; /* bulk data never travels on the control channel */
  w->req = NULL;
  tsd_submit(e, w->conn_id, req, staging, bytes);
}

void tsd_handle_put_slice(tsd_engine *e, tsd_work *w) {
  const Tshard__Request *req = w->req;
  const Tshard__PutSliceRequest *p = req->put_slice;
  const char *tag = tag_of(p->layout);
  ts_stored *t = ts_store_find(e->store, p->name);
  ts_error err;
  char msg[600];
  if (!t) {
    snprintf(msg, sizeof msg, "no tensor named '%s'; create it first", p->name);
    tsd_reply_status(e, w->conn_id, req->id, TS_NOT_FOUND, msg);
    return;
  }
  ts_layout l;
  size_t bytes = 0;
  ts_dtype src_dt; /* the data's dtype: the copy into the stored slice converts (put_verify.c) */
  bool conv;
  if (tsd_put_source_dtype(t, p->dtype, p->convert, &src_dt, &conv, &err) ||
      (t->has_slice && box_layout(&t->box, src_dt, tag, &l, &bytes, &err))) {
    tsd_reply_status(e, w->conn_id, req->id, err.code, err.msg);
    return;
  }
  if (p->client_memory) {
    direct_put_slice(e, w, t, tag, &l, bytes);
    return;
  }
  const uint8_t *src;
  size_t len;
  tsd_session *c = chunk_source(e, w->conn_id, req->id, &p->data, p->shm, &src, &len);
  if (!c)
    return;
  if (p->offset == 0 &&
      tsd_put_check(t, true, tag, p->dtype, p->n_shape, p->shape, conv, p->total_bytes,
                    conv ? bytes / ts_dtype_size(src_dt) * ts_dtype_size(t->dtype) : bytes, &err)) {
    tsd_session_put_reset(e, c);
    tsd_reply_status(e, w->conn_id, req->id, err.code, err.msg);
    return;
  }
  if (t->has_slice && shm_whole(p->shm, p->offset, p->total_bytes, bytes)) {
    /* Copied straight from the segment into the stored layout. */
    tsd_session_put_reset(e, c);
    ts_tensor from = {(void *)src, bytes, l};
    int crc = conv ? tsd_put_values_fit(t, src_dt, src, bytes, &err) : TS_OK;
    if (!crc)
      crc = ts_copy(&t->local, &from, NULL, &err);
    if (crc)
      tsd_reply_status(e, w->conn_id, req->id, err.code, err.msg);
    else
      tsd_reply_put(e, w->conn_id, req->id, bytes, true);
    tsd_oplog_local(req, w->conn_id, bytes, crc); /* oplog.c */
    return;
  }
  tsd_put_target tgt = {p->name, true, tag, &t->box, (uint64_t)bytes};
  if (!stage_chunk(e, c, w->conn_id, req->id, &tgt, p->offset, p->total_bytes, src, len))
    return;
  if (!tsd_session_put_done(c)) {
    tsd_reply_put(e, w->conn_id, req->id, tsd_session_put_received(c), false);
    return;
  }
  uint64_t staged;
  ts_box box;
  uint8_t *data = tsd_session_put_take(c, &staged, &box);
  int rc = TS_OK;
  if (!t->has_slice || !ts_box_equal(&t->box, &box)) {
    rc = ts_error_set(&err, TS_INVALID_ARGUMENT,
                      t->has_slice ? "'%s' was resharded during the put; put the new slice"
                                   : "this rank holds no slice of '%s'",
                      p->name);
  } else if (bytes) {
    ts_tensor from = {data, (size_t)staged, l};
    rc = conv ? tsd_put_values_fit(t, src_dt, data, staged, &err) : TS_OK;
    if (!rc)
      rc = ts_copy(&t->local, &from, NULL, &err);
  }
  tsd_buf_give(e, data, staged);
  if (rc)
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
  else
    tsd_reply_put(e, w->conn_id, req->id, bytes, true);
  tsd_oplog_local(req, w->conn_id, staged, rc); /* oplog.c */
}

/* Answers one chunk of the connection's copy, in the frame or (shm) in the region of the shared
 * segment the request named; frees the copy after its last byte. A copy made in the segment
 * (in_shm) is answered whole where it lies. */
void tsd_serve_chunk(tsd_engine *e, tsd_session *c, const tsd_copy *cp, uint64_t conn_id,
                     uint64_t req_id, uint64_t offset, uint64_t max_bytes,
                     const Tshard__ShmData *shm) {
  uint64_t total = cp->total, left = total - offset, n;
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__DataChunk dc = TSHARD__DATA_CHUNK__INIT;
  Tshard__ShmData sd = TSHARD__SHM_DATA__INIT;
  if (cp->direct) { /* already in the client's memory */
    n = left;
    dc.direct = true;
  } else if (cp->in_shm) {
    n = left;
    sd.offset = (uint64_t)(cp->buf + offset - tsd_shm_base(tsd_session_shm(c)));
    dc.shm = &sd;
  } else if (shm) {
    uint8_t *dst = NULL;
    uint64_t room = 0;
    ts_error err;
    if (tsd_shm_region(c, shm, left ? 1 : 0, &dst, &room, &err)) {
      tsd_session_copy_reset(e, c);
      tsd_reply_status(e, conn_id, req_id, err.code, err.msg);
      return;
    }
    n = left < room ? left : room;
    if (max_bytes && n > max_bytes)
      n = max_bytes;
    if (n)
      memcpy(dst, cp->buf + offset, n);
    sd.offset = shm->offset;
    dc.shm = &sd;
  } else {
    uint64_t cap = max_bytes ? max_bytes : (uint64_t)e->cfg->chunk;
    uint64_t limit = (uint64_t)e->cfg->max_frame - 1024;
    if (cap > limit)
      cap = limit;
    n = left < cap ? left : cap;
    dc.data.len = n;
    dc.data.data = cp->buf ? cp->buf + offset : NULL;
  }
  sd.bytes = n;
  r.id = req_id;
  r.result_case = TSHARD__RESPONSE__RESULT_DATA;
  r.data = &dc;
  dc.offset = offset;
  dc.total_bytes = total;
  tsd_reply_response(e, conn_id, &r);
  if (offset + n >= total)
    tsd_session_copy_reset(e, c);
}

void tsd_handle_get_chunk(tsd_engine *e, tsd_work *w) {
  const Tshard__GetRequest *g = w->req->get;
  tsd_session *c = tsd_session_get(e, w->conn_id, false);
  const tsd_copy *cp = tsd_session_copy(c, g->name, false);
  if (!cp || g->offset > cp->total) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "no gathered copy of '%s' on this connection covers offset %llu; a get starts at "
             "offset 0",
             g->name, (unsigned long long)g->offset);
    tsd_reply_status(e, w->conn_id, w->req->id, TS_INVALID_ARGUMENT, msg);
    return;
  }
  tsd_serve_chunk(e, c, cp, w->conn_id, w->req->id, g->offset, g->max_bytes, g->shm);
}

void tsd_answer_get(tsd_engine *e, const tsd_pending *w) { tsd_answer_gathered(e, w, NULL); }

void tsd_answer_gathered(tsd_engine *e, const tsd_pending *w, const char *copy) {
  if (!w->conn_id)
    return; /* the client is gone */
  tsd_session *c = tsd_session_get(e, w->conn_id, false);
  const tsd_copy *cp = tsd_session_copy(c, copy, false);
  if (!cp) {
    tsd_reply_status(e, w->conn_id, w->req_id, TS_INTERNAL, "the gathered copy is missing");
    return;
  }
  /* The first chunk, in the region the get named when it asked for one. */
  Tshard__ShmData sd = TSHARD__SHM_DATA__INIT;
  tsd_serve_chunk(e, c, cp, w->conn_id, w->req_id, 0, w->max_bytes, tsd_session_get_region(c, &sd));
}

void tsd_answer_put(tsd_engine *e, const tsd_pending *w) {
  tsd_reply_put(e, w->conn_id, w->req_id, w->staging_bytes, true);
}

/* This rank's slice into the client's memory: straight from the stored slice when the asked
 * layout is the stored one, else through a copy in that layout. One answer says it is there. */
static void direct_get_slice(tsd_engine *e, uint64_t conn_id, const Tshard__Request *req,
                             const ts_stored *t, const ts_layout *l, size_t bytes, int rc,
                             ts_error *err) {
  const Tshard__GetSliceRequest *g = req->get_slice;
  const Tshard__ClientMemory *m = g->client_memory;
  if (!rc && m->bytes < bytes)
    rc = ts_error_set(err, TS_LIMIT,
                      "this rank's slice of '%s' has %zu bytes in that layout; the buffer has "
                      "%llu",
                      g->name, bytes, (unsigned long long)m->bytes);
  if (!rc && bytes)
    rc = tsd_client_probe(m, err);
  if (!rc && bytes && strcmp(tag_of(g->layout), t->layout_tag) == 0 && bytes == t->local.bytes) {
    rc = tsd_client_copy(m, true, t->local.data, bytes, err);
  } else if (!rc && bytes) {
    uint8_t *buf = tsd_buf_take(e, bytes, "the slice copy", err);
    if (!buf) {
      rc = err->code;
    } else {
      if (ts_layout_is_blocked(l))
        memset(buf, 0, bytes);
      ts_tensor dst = {buf, bytes, *l};
      rc = ts_copy(&dst, &t->local, NULL, err);
      if (!rc)
        rc = tsd_client_copy(m, true, buf, bytes, err);
      tsd_buf_give(e, buf, bytes);
    }
  }
  tsd_oplog_local(req, conn_id, bytes, rc); /* oplog.c */
  if (rc) {
    tsd_reply_status(e, conn_id, req->id, rc, err->msg);
    return;
  }
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__DataChunk dc = TSHARD__DATA_CHUNK__INIT;
  r.id = req->id;
  r.result_case = TSHARD__RESPONSE__RESULT_DATA;
  r.data = &dc;
  dc.total_bytes = bytes;
  dc.direct = true;
  tsd_reply_response(e, conn_id, &r);
}

void tsd_handle_get_slice(tsd_engine *e, tsd_work *w) {
  const Tshard__Request *req = w->req;
  const Tshard__GetSliceRequest *g = req->get_slice;
  tsd_session *c = tsd_session_get(e, w->conn_id, true);
  ts_error err;
  if (!c) {
    tsd_reply_status(e, w->conn_id, req->id, TS_NO_MEMORY, "no memory for the connection state");
    return;
  }
  if (g->offset > 0) {
    const tsd_copy *cp = tsd_session_copy(c, g->name, true);
    if (!cp || g->offset > cp->total) {
      tsd_reply_status(e, w->conn_id, req->id, TS_INVALID_ARGUMENT,
                       "no slice copy on this connection covers that offset; a get starts at "
                       "offset 0");
      return;
    }
    tsd_serve_chunk(e, c, cp, w->conn_id, req->id, g->offset, g->max_bytes, g->shm);
    return;
  }
  tsd_session_copy_reset(e, c);
  ts_stored *t = ts_store_find(e->store, g->name);
  if (!t) {
    char msg[256];
    snprintf(msg, sizeof msg, "no tensor named '%s'", g->name);
    tsd_reply_status(e, w->conn_id, req->id, TS_NOT_FOUND, msg);
    return;
  }
  size_t bytes = 0;
  ts_layout l;
  int rc =
      t->has_slice ? box_layout(&t->box, t->dtype, tag_of(g->layout), &l, &bytes, &err) : TS_OK;
  if (g->client_memory) {
    direct_get_slice(e, w->conn_id, req, t, &l, bytes, rc, &err);
    return;
  }
  uint8_t *room = NULL, *buf = NULL;
  uint64_t room_bytes = 0;
  bool in_shm = false;
  if (!rc && g->shm)
    rc = tsd_shm_region(c, g->shm, 0, &room, &room_bytes, &err);
  if (!rc && bytes && room && room_bytes >= bytes) {
    /* Copied straight into the shared segment. */
    buf = room;
    in_shm = true;
  } else if (!rc && bytes) {
    buf = tsd_buf_take(e, bytes, "the slice copy", &err);
    if (!buf)
      rc = err.code;
  }
  if (!rc && bytes) {
    if (ts_layout_is_blocked(&l))
      memset(buf, 0, bytes);
    ts_tensor dst = {buf, bytes, l};
    rc = ts_copy(&dst, &t->local, NULL, &err);
  }
  tsd_oplog_local(req, w->conn_id, bytes, rc); /* oplog.c */
  if (rc) {
    if (!in_shm)
      tsd_buf_give(e, buf, bytes);
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
    return;
  }
  tsd_session_copy_set(e, c, g->name, true, buf, bytes, in_shm);
  tsd_serve_chunk(e, c, tsd_session_copy(c, g->name, true), w->conn_id, req->id, 0, g->max_bytes,
                  g->shm);
}
