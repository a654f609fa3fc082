/* session.c - what one connection holds between its requests (engine thread only): the put
 * being staged, the copy being read (a gathered tensor or a slice copy), its shared-memory
 * segment and the region a whole get asked its answer in. The engine carries their list as an
 * opaque head (tsd_engine.sessions) and frees a connection's through the operations' entry points
 * (handlers.c). The struct is private to this file; transfer.c, batch_io.c, ops.c and shm.c go
 * through these functions, so the rules of a staged put (it
 * starts at offset 0 with the total the tensor needs, checked against the memory limit, and
 * continues in order with the same name, kind, layout and total) live in one place. The pool
 * buffers that hold staged puts and copies are taken and given back here too. */
#include <stdlib.h>
#include <string.h>

#include "session.h"

struct tsd_session {
  struct tsd_session *next;
  uint64_t conn_id;
  /* a put (whole or slice) being received */
  char put_name[TS_NAME_MAX];
  bool put_active, put_slice;
  char put_tag[32];
  ts_box put_box; /* slice puts: the box the staging was sized for */
  uint8_t *put_buf;
  uint64_t put_total, put_received;
  /* a gathered tensor or a slice copy being read */
  char get_name[TS_NAME_MAX];
  bool get_active, get_slice;
  tsd_copy copy;
  /* same-node shared memory (shm.c): the segment and the region a whole get asked */
  tsd_shm_seg *shm;
  bool get_shm_asked;
  uint64_t get_shm_offset, get_shm_bytes;
};

void *tsd_buf_take(tsd_engine *e, size_t bytes, const char *what, ts_error *err) {
  (void)e;
  return ts_shard_alloc_as(bytes, TS_POOL_STAGING, what, err);
}

void tsd_buf_give(tsd_engine *e, void *p, size_t bytes) {
  (void)e, (void)bytes;
  ts_shard_free(p); /* back to the pool, which keeps it for the next transfer of its class */
}

tsd_session *tsd_session_get(tsd_engine *e, uint64_t conn_id, bool create) {
  for (tsd_session *s = e->sessions; s; s = s->next)
    if (s->conn_id == conn_id)
      return s;
  if (!create)
    return NULL;
  tsd_session *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->conn_id = conn_id;
  s->next = e->sessions;
  e->sessions = s;
  return s;
}

void tsd_session_put_reset(tsd_engine *e, tsd_session *s) {
  if (!s)
    return;
  tsd_buf_give(e, s->put_buf, s->put_total);
  s->put_buf = NULL;
  s->put_active = false;
  s->put_total = s->put_received = 0;
}

void tsd_session_copy_reset(tsd_engine *e, tsd_session *s) {
  if (!s)
    return;
  if (s->copy.buf && !s->copy.in_shm)
    tsd_buf_give(e, s->copy.buf, s->copy.total);
  memset(&s->copy, 0, sizeof s->copy);
  s->get_active = false;
}

void tsd_session_free(tsd_engine *e, uint64_t conn_id) {
  for (tsd_session **pp = &e->sessions; *pp; pp = &(*pp)->next)
    if ((*pp)->conn_id == conn_id) {
      tsd_session *s = *pp;
      *pp = s->next;
      tsd_session_put_reset(e, s);
      tsd_session_copy_reset(e, s);
      tsd_shm_release(e, s->shm);
      free(s);
      return;
    }
}

int tsd_session_put_stage(tsd_engine *e, tsd_session *s, const tsd_put_target *t, uint64_t offset,
                          uint64_t total, const uint8_t *data, size_t len, ts_error *err) {
  if (offset == 0) {
    tsd_session_put_reset(e, s);
    if (total != t->expected)
      return ts_error_set(
          err, TS_BAD_SHAPE, "put of %llu bytes into '%s', which needs exactly %llu bytes%s",
          (unsigned long long)total, t->name, (unsigned long long)t->expected,
          t->slice ? " for this rank's slice in that layout" : " (the whole tensor, row-major)");
    s->put_buf = tsd_buf_take(e, total, "the put's staging buffer", err);
    if (!s->put_buf)
      return err->code;
    s->put_total = total;
    s->put_received = 0;
    s->put_active = true;
    s->put_slice = t->slice;
    snprintf(s->put_name, sizeof s->put_name, "%s", t->name);
    snprintf(s->put_tag, sizeof s->put_tag, "%s", t->tag);
    if (t->box)
      s->put_box = *t->box;
  } else if (!s->put_active || s->put_slice != t->slice || strcmp(s->put_name, t->name) != 0 ||
             s->put_total != total || s->put_received != offset ||
             strcmp(s->put_tag, t->tag) != 0) {
    ts_error_set(err, TS_INVALID_ARGUMENT,
                 "chunk at offset %llu of '%s' does not continue a put on this connection%s; "
                 "start at offset 0 and send chunks in order",
                 (unsigned long long)offset, t->name,
                 s->put_active ? " (the put in progress was abandoned)" : "");
    tsd_session_put_reset(e, s);
    return TS_INVALID_ARGUMENT;
  }
  if (len)
    memcpy(s->put_buf + offset, data, len);
  s->put_received += len;
  return TS_OK;
}

uint64_t tsd_session_put_received(const tsd_session *s) { return s->put_received; }

bool tsd_session_put_done(const tsd_session *s) {
  return s->put_active && s->put_received == s->put_total;
}

uint8_t *tsd_session_put_take(tsd_session *s, uint64_t *bytes, ts_box *box) {
  uint8_t *p = s->put_buf;
  *bytes = s->put_total;
  if (box)
    *box = s->put_box;
  s->put_buf = NULL;
  s->put_active = false;
  s->put_total = s->put_received = 0;
  return p;
}

void tsd_session_copy_set(tsd_engine *e, tsd_session *s, const char *name, bool slice, uint8_t *buf,
                          uint64_t total, bool in_shm) {
  tsd_session_copy_reset(e, s);
  s->copy.buf = buf;
  s->copy.total = total;
  s->copy.in_shm = in_shm;
  s->get_active = true;
  s->get_slice = slice;
  snprintf(s->get_name, sizeof s->get_name, "%s", name);
}

void tsd_session_copy_direct(tsd_engine *e, tsd_session *s, const char *name, uint64_t total) {
  tsd_session_copy_set(e, s, name, false, NULL, total, false);
  s->copy.direct = true;
}

const tsd_copy *tsd_session_copy(const tsd_session *s, const char *name, bool slice) {
  if (!s || !s->get_active || s->get_slice != slice || (name && strcmp(s->get_name, name) != 0))
    return NULL;
  return &s->copy;
}

tsd_shm_seg *tsd_session_shm(const tsd_session *s) { return s ? s->shm : NULL; }

void tsd_session_set_shm(tsd_engine *e, tsd_session *s, tsd_shm_seg *seg) {
  tsd_shm_release(e, s->shm);
  s->shm = seg;
}

void tsd_session_set_get_region(tsd_session *s, const Tshard__ShmData *d) {
  s->get_shm_asked = d != NULL;
  s->get_shm_offset = d ? d->offset : 0;
  s->get_shm_bytes = d ? d->bytes : 0;
}

const Tshard__ShmData *tsd_session_get_region(const tsd_session *s, Tshard__ShmData *sd) {
  if (!s->get_shm_asked)
    return NULL;
  sd->offset = s->get_shm_offset;
  sd->bytes = s->get_shm_bytes;
  return sd;
}

void tsd_session_free_all(tsd_engine *e) {
  while (e->sessions)
    tsd_session_free(e, e->sessions->conn_id);
}
