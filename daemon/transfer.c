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
 * straight between it and the stored layout, and get answers are written into it. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "shm.h"

void *tsd_buf_take(tsd_engine *e, size_t bytes) {
  (void)e;
  return ts_shard_alloc_as(bytes, TS_POOL_STAGING, "a transfer buffer", NULL);
}

void tsd_buf_give(tsd_engine *e, void *p, size_t bytes) {
  (void)e, (void)bytes;
  ts_shard_free(p); /* back to the pool, which keeps it for the next transfer of its class */
}

tsd_conn_state *tsd_conn_get(tsd_engine *e, uint64_t conn_id, bool create) {
  for (tsd_conn_state *c = e->conns; c; c = c->next)
    if (c->conn_id == conn_id)
      return c;
  if (!create)
    return NULL;
  tsd_conn_state *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->conn_id = conn_id;
  c->next = e->conns;
  e->conns = c;
  return c;
}

void tsd_conn_put_reset(tsd_engine *e, tsd_conn_state *c) {
  if (c->put_buf) {
    tsd_buf_give(e, c->put_buf, c->put_total);
  }
  c->put_buf = NULL;
  c->put_active = false;
  c->put_total = c->put_received = 0;
}

void tsd_conn_get_reset(tsd_engine *e, tsd_conn_state *c) {
  if (c->get_buf && !c->get_in_shm) {
    tsd_buf_give(e, c->get_buf, c->get_total);
  }
  c->get_buf = NULL;
  c->get_active = false;
  c->get_in_shm = false;
  c->get_total = 0;
}

void tsd_conn_free(tsd_engine *e, uint64_t conn_id) {
  /* Its operations still waiting to run will run (their data is complete), answering nobody. */
  tsd_seq_forget_conn(e->seq, conn_id);
  for (tsd_conn_state **pp = &e->conns; *pp; pp = &(*pp)->next)
    if ((*pp)->conn_id == conn_id) {
      tsd_conn_state *c = *pp;
      *pp = c->next;
      tsd_conn_put_reset(e, c);
      tsd_conn_get_reset(e, c);
      tsd_shm_release(e, c->shm);
      free(c);
      return;
    }
}

static void reply_put(tsd_engine *e, uint64_t conn_id, uint64_t id, uint64_t received, bool done) {
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
static int box_layout(const ts_box *box, ts_dtype dt, const char *tag, ts_layout *l,
                      size_t *bytes, ts_error *err) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < box->ndim; d++)
    ext[d] = box->hi[d] - box->lo[d];
  int rc = tag[0] ? ts_layout_from_tag(l, dt, box->ndim, ext, tag, err)
                  : ts_layout_plain(l, dt, box->ndim, ext, err);
  return rc ? rc : ts_layout_span(l, bytes, err);
}

/* Starts or continues a staged put; returns the state when the chunk was taken, NULL after
 * answering an error. expected: the total the tensor requires. */
static tsd_conn_state *stage_chunk(tsd_engine *e, uint64_t conn_id, uint64_t req_id,
                                   const char *name, bool slice, const char *tag,
                                   const ts_box *box, uint64_t expected, uint64_t offset,
                                   uint64_t total, const uint8_t *data, size_t len) {
  ts_error err;
  tsd_conn_state *c = tsd_conn_get(e, conn_id, false);
  if (offset == 0) {
    tsd_conn_put_reset(e, c);
    if (total != expected) {
      tsd_reply_status(e, conn_id, req_id, TS_BAD_SHAPE,
                       (ts_error_set(&err, TS_BAD_SHAPE,
                                     "put of %llu bytes into '%s', which needs exactly %llu "
                                     "bytes%s",
                                     (unsigned long long)total, name,
                                     (unsigned long long)expected,
                                     slice ? " for this rank's slice in that layout"
                                           : " (the whole tensor, row-major)"),
                        err.msg));
      return NULL;
    }
    if (tsd_memory_check(e, total, "the put's staging buffer", &err)) {
      tsd_reply_status(e, conn_id, req_id, err.code, err.msg);
      return NULL;
    }
    c->put_buf = tsd_buf_take(e, total);
    if (!c->put_buf) {
      tsd_reply_status(e, conn_id, req_id, TS_NO_MEMORY, "no memory for the put's staging");
      return NULL;
    }
    c->put_total = total;
    c->put_received = 0;
    c->put_active = true;
    c->put_slice = slice;
    snprintf(c->put_name, sizeof c->put_name, "%s", name);
    snprintf(c->put_tag, sizeof c->put_tag, "%s", tag);
    if (box)
      c->put_box = *box;
  } else if (!c->put_active || c->put_slice != slice || strcmp(c->put_name, name) != 0 ||
             c->put_total != total || c->put_received != offset ||
             strcmp(c->put_tag, tag) != 0) {
    ts_error_set(&err, TS_INVALID_ARGUMENT,
                 "chunk at offset %llu of '%s' does not continue a put on this connection%s; "
                 "start at offset 0 and send chunks in order",
                 (unsigned long long)offset, name,
                 c->put_active ? " (the put in progress was abandoned)" : "");
    tsd_conn_put_reset(e, c);
    tsd_reply_status(e, conn_id, req_id, err.code, err.msg);
    return NULL;
  }
  if (len)
    memcpy(c->put_buf + offset, data, len);
  c->put_received += len;
  return c;
}

/* The connection's state and where a put chunk's bytes are: in the frame, or in the region of
 * the shared segment the chunk names (checked). NULL after answering an error. */
static tsd_conn_state *chunk_source(tsd_engine *e, uint64_t conn_id, uint64_t req_id,
                                    const ProtobufCBinaryData *data, const Tshard__ShmData *shm,
                                    const uint8_t **src, size_t *len) {
  ts_error err;
  tsd_conn_state *c = tsd_conn_get(e, conn_id, true);
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
      tsd_conn_put_reset(e, c); /* the put in progress cannot go on */
      tsd_reply_status(e, conn_id, req_id, err.code, err.msg);
      return NULL;
    }
    *src = p;
    *len = (size_t)shm->bytes;
  }
  return c;
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
  const uint8_t *src;
  size_t len;
  tsd_conn_state *c = chunk_source(e, w->conn_id, req->id, &p->data, p->shm, &src, &len);
  if (!c)
    return;
  if (t && shm_whole(p->shm, p->offset, p->total_bytes, expected)) {
    /* Scattered straight from the segment, which the submission holds while it waits. */
    tsd_conn_put_reset(e, c);
    if (e->stopping) {
      tsd_reply_status(e, w->conn_id, req->id, TS_SHUTDOWN, "the daemon is shutting down");
      return;
    }
    tsd_shm_hold(c->shm);
    w->req = NULL;
    tsd_submit(e, w->conn_id, req, (uint8_t *)src, expected);
    return;
  }
  c = stage_chunk(e, w->conn_id, req->id, p->name, false, "", NULL,
                  t ? expected : p->total_bytes, p->offset, p->total_bytes, src, len);
  if (!c)
    return;
  if (c->put_received < c->put_total) {
    reply_put(e, w->conn_id, req->id, c->put_received, false);
    return;
  }
  /* Complete: the scatter is a collective operation; the staging goes with it. */
  uint8_t *staging = c->put_buf;
  uint64_t bytes = c->put_total;
  c->put_buf = NULL;
  c->put_active = false;
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
  if (t->has_slice && box_layout(&t->box, t->dtype, tag, &l, &bytes, &err)) {
    tsd_reply_status(e, w->conn_id, req->id, err.code, err.msg);
    return;
  }
  const uint8_t *src;
  size_t len;
  tsd_conn_state *c = chunk_source(e, w->conn_id, req->id, &p->data, p->shm, &src, &len);
  if (!c)
    return;
  if (t->has_slice && shm_whole(p->shm, p->offset, p->total_bytes, bytes)) {
    /* Copied straight from the segment into the stored layout. */
    tsd_conn_put_reset(e, c);
    ts_tensor from = {(void *)src, bytes, l};
    if (ts_copy(&t->local, &from, NULL, &err))
      tsd_reply_status(e, w->conn_id, req->id, err.code, err.msg);
    else
      reply_put(e, w->conn_id, req->id, bytes, true);
    return;
  }
  c = stage_chunk(e, w->conn_id, req->id, p->name, true, tag, &t->box, (uint64_t)bytes,
                  p->offset, p->total_bytes, src, len);
  if (!c)
    return;
  if (c->put_received < c->put_total) {
    reply_put(e, w->conn_id, req->id, c->put_received, false);
    return;
  }
  int rc = TS_OK;
  if (!t->has_slice || !ts_box_equal(&t->box, &c->put_box)) {
    rc = ts_error_set(&err, TS_INVALID_ARGUMENT,
                      t->has_slice ? "'%s' was resharded during the put; put the new slice"
                                   : "this rank holds no slice of '%s'",
                      p->name);
  } else if (bytes) {
    ts_tensor src = {c->put_buf, (size_t)c->put_total, l};
    rc = ts_copy(&t->local, &src, NULL, &err);
  }
  tsd_conn_put_reset(e, c);
  if (rc)
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
  else
    reply_put(e, w->conn_id, req->id, bytes, true);
}

/* Answers one chunk of the connection's copy, in the frame or (shm) in the region of the shared
 * segment the request named; frees the copy after its last byte. A copy made in the segment
 * (get_in_shm) is answered whole where it lies. */
static void serve_chunk(tsd_engine *e, tsd_conn_state *c, uint64_t conn_id, uint64_t req_id,
                        uint64_t offset, uint64_t max_bytes, const Tshard__ShmData *shm) {
  uint64_t left = c->get_total - offset, n;
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__DataChunk dc = TSHARD__DATA_CHUNK__INIT;
  Tshard__ShmData sd = TSHARD__SHM_DATA__INIT;
  if (c->get_in_shm) {
    n = left;
    sd.offset = (uint64_t)(c->get_buf + offset - tsd_shm_base(c->shm));
    dc.shm = &sd;
  } else if (shm) {
    uint8_t *dst = NULL;
    uint64_t room = 0;
    ts_error err;
    if (tsd_shm_region(c, shm, left ? 1 : 0, &dst, &room, &err)) {
      tsd_conn_get_reset(e, c);
      tsd_reply_status(e, conn_id, req_id, err.code, err.msg);
      return;
    }
    n = left < room ? left : room;
    if (max_bytes && n > max_bytes)
      n = max_bytes;
    if (n)
      memcpy(dst, c->get_buf + offset, n);
    sd.offset = shm->offset;
    dc.shm = &sd;
  } else {
    uint64_t cap = max_bytes ? max_bytes : (uint64_t)e->cfg->chunk;
    uint64_t limit = (uint64_t)e->cfg->max_frame - 1024;
    if (cap > limit)
      cap = limit;
    n = left < cap ? left : cap;
    dc.data.len = n;
    dc.data.data = c->get_buf ? c->get_buf + offset : NULL;
  }
  sd.bytes = n;
  r.id = req_id;
  r.result_case = TSHARD__RESPONSE__RESULT_DATA;
  r.data = &dc;
  dc.offset = offset;
  dc.total_bytes = c->get_total;
  tsd_reply_response(e, conn_id, &r);
  if (offset + n >= c->get_total)
    tsd_conn_get_reset(e, c);
}

void tsd_handle_get_chunk(tsd_engine *e, tsd_work *w) {
  const Tshard__GetRequest *g = w->req->get;
  tsd_conn_state *c = tsd_conn_get(e, w->conn_id, false);
  if (!c || !c->get_active || c->get_slice || strcmp(c->get_name, g->name) != 0 ||
      g->offset > c->get_total) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "no gathered copy of '%s' on this connection covers offset %llu; a get starts at "
             "offset 0",
             g->name, (unsigned long long)g->offset);
    tsd_reply_status(e, w->conn_id, w->req->id, TS_INVALID_ARGUMENT, msg);
    return;
  }
  serve_chunk(e, c, w->conn_id, w->req->id, g->offset, g->max_bytes, g->shm);
}

void tsd_answer_get(tsd_engine *e, const tsd_pending *w) {
  if (!w->conn_id)
    return; /* the client is gone */
  tsd_conn_state *c = tsd_conn_get(e, w->conn_id, false);
  if (!c || !c->get_active || c->get_slice) {
    tsd_reply_status(e, w->conn_id, w->req_id, TS_INTERNAL, "the gathered copy is missing");
    return;
  }
  /* The first chunk, in the region the get named when it asked for one. */
  Tshard__ShmData sd = TSHARD__SHM_DATA__INIT;
  serve_chunk(e, c, w->conn_id, w->req_id, 0, w->max_bytes, tsd_shm_get_region(c, &sd));
}

void tsd_answer_put(tsd_engine *e, const tsd_pending *w) {
  reply_put(e, w->conn_id, w->req_id, w->staging_bytes, true);
}

void tsd_handle_get_slice(tsd_engine *e, tsd_work *w) {
  const Tshard__Request *req = w->req;
  const Tshard__GetSliceRequest *g = req->get_slice;
  tsd_conn_state *c = tsd_conn_get(e, w->conn_id, true);
  ts_error err;
  if (!c) {
    tsd_reply_status(e, w->conn_id, req->id, TS_NO_MEMORY, "no memory for the connection state");
    return;
  }
  if (g->offset > 0) {
    if (!c->get_active || !c->get_slice || strcmp(c->get_name, g->name) != 0 ||
        g->offset > c->get_total) {
      tsd_reply_status(e, w->conn_id, req->id, TS_INVALID_ARGUMENT,
                       "no slice copy on this connection covers that offset; a get starts at "
                       "offset 0");
      return;
    }
    serve_chunk(e, c, w->conn_id, req->id, g->offset, g->max_bytes, g->shm);
    return;
  }
  tsd_conn_get_reset(e, c);
  ts_stored *t = ts_store_find(e->store, g->name);
  if (!t) {
    char msg[256];
    snprintf(msg, sizeof msg, "no tensor named '%s'", g->name);
    tsd_reply_status(e, w->conn_id, req->id, TS_NOT_FOUND, msg);
    return;
  }
  size_t bytes = 0;
  ts_layout l;
  int rc = t->has_slice ? box_layout(&t->box, t->dtype, tag_of(g->layout), &l, &bytes, &err)
                        : TS_OK;
  uint8_t *room = NULL;
  uint64_t room_bytes = 0;
  if (!rc && g->shm)
    rc = tsd_shm_region(c, g->shm, 0, &room, &room_bytes, &err);
  if (!rc && bytes && room && room_bytes >= bytes) {
    /* Copied straight into the shared segment. */
    c->get_buf = room;
    c->get_in_shm = true;
  } else if (!rc && bytes) {
    rc = tsd_memory_check(e, bytes, "the slice copy", &err);
  }
  if (!rc && bytes && !c->get_in_shm) {
    c->get_buf = tsd_buf_take(e, bytes);
    if (!c->get_buf)
      rc = ts_error_set(&err, TS_NO_MEMORY, "no memory for a slice copy of %zu bytes", bytes);
  }
  if (!rc && bytes) {
    c->get_total = bytes;
    if (ts_layout_is_blocked(&l))
      memset(c->get_buf, 0, bytes);
    ts_tensor dst = {c->get_buf, bytes, l};
    rc = ts_copy(&dst, &t->local, NULL, &err);
  }
  if (rc) {
    tsd_conn_get_reset(e, c);
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
    return;
  }
  c->get_active = true;
  c->get_slice = true;
  snprintf(c->get_name, sizeof c->get_name, "%s", g->name);
  serve_chunk(e, c, w->conn_id, req->id, 0, g->max_bytes, g->shm);
}
