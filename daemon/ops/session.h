/* session.h - what the operations keep for each connection (daemon/ops/, engine thread only):
 * session.c holds a connection's state between its requests (a staged put, the copy a get reads,
 * its shared segment and the region a whole get asked) and the pool buffers they use; shm.c the
 * same-node shared-memory segments and the shm_attach handler. The engine carries them as an
 * opaque pointer (tsd_engine.sessions) and reaches them only through the operations' entry
 * points (tsd_ops: conn_closed, staging_give, stop). Internal to daemon/ops/. */
#ifndef TSD_OPS_SESSION_H
#define TSD_OPS_SESSION_H

#include "tsd_engine.h"

typedef struct tsd_session tsd_session; /* session.c: what one connection holds */
typedef struct tsd_shm_seg tsd_shm_seg; /* shm.c */

/* session.c: whole-tensor buffers (put staging, gathered copies): staging buffers of the pool,
 * which keeps freed ones for the next transfer of their size class, so repeated transfers do not
 * fault in fresh pages. tsd_buf_give accepts NULL. */
/* tsd_buf_take checks the memory limit as it allocates: NULL with err (TS_LIMIT or
 * TS_NO_MEMORY, naming `what`) when the buffer cannot be had. */
void *tsd_buf_take(tsd_engine *e, size_t bytes, const char *what, ts_error *err);
void tsd_buf_give(tsd_engine *e, void *p, size_t bytes);
/* session.c: a connection's state, created on first use and freed with the connection. */
tsd_session *tsd_session_get(tsd_engine *e, uint64_t conn_id, bool create);
void tsd_session_free(tsd_engine *e, uint64_t conn_id);
/* Every session, then the state itself (at stop). */
void tsd_session_free_all(tsd_engine *e);
/* A staged put: what it must match, then its chunks in order. A chunk at offset 0 starts it
 * (the previous one dropped): the total must be `expected` and fit the memory limit. Any error
 * drops the put and returns the status with err set. */
typedef struct tsd_put_target {
  const char *name;
  bool slice;
  const char *tag;   /* slices: the layout the data comes in ("" whole puts) */
  const ts_box *box; /* slices: the box the staging is sized for */
  uint64_t expected;
} tsd_put_target;
int tsd_session_put_stage(tsd_engine *e, tsd_session *s, const tsd_put_target *t, uint64_t offset,
                          uint64_t total, const uint8_t *data, size_t len, ts_error *err);
uint64_t tsd_session_put_received(const tsd_session *s);
bool tsd_session_put_done(const tsd_session *s);
/* Takes the staging of a complete put (and the box it was sized for): the caller owns it. */
uint8_t *tsd_session_put_take(tsd_session *s, uint64_t *bytes, ts_box *box);
void tsd_session_put_reset(tsd_engine *e, tsd_session *s);
/* The copy a get reads (a gathered tensor or a slice copy), in a pool buffer or in the
 * connection's segment (in_shm); freed after its last byte or with the connection. */
typedef struct tsd_copy {
  uint8_t *buf;
  uint64_t total;
  bool in_shm;
  bool direct; /* already written into the client's memory: answered with no bytes */
} tsd_copy;
/* Takes buf (unless in_shm). */
void tsd_session_copy_set(tsd_engine *e, tsd_session *s, const char *name, bool slice, uint8_t *buf,
                          uint64_t total, bool in_shm);
/* The copy of `name` (NULL: any name) of that kind, or NULL. s may be NULL. */
const tsd_copy *tsd_session_copy(const tsd_session *s, const char *name, bool slice);
/* The whole tensor `name` (total bytes) was written into the client's memory: frees any copy;
 * the get's answer then says so. */
void tsd_session_copy_direct(tsd_engine *e, tsd_session *s, const char *name, uint64_t total);
void tsd_session_copy_reset(tsd_engine *e, tsd_session *s);
/* The connection's shared segment (shm.c); setting one releases the previous. */
tsd_shm_seg *tsd_session_shm(const tsd_session *s);
void tsd_session_set_shm(tsd_engine *e, tsd_session *s, tsd_shm_seg *seg);
/* The region a whole get asked its answer in (NULL: none), kept for its answer. */
void tsd_session_set_get_region(tsd_session *s, const Tshard__ShmData *d);
const Tshard__ShmData *tsd_session_get_region(const tsd_session *s, Tshard__ShmData *sd);

/* shm.c: same-node shared-memory segments. */
/* The largest segment a connection gets; larger transfers go through it in chunks. */
#define TSD_SHM_MAX_BYTES (1ULL << 30)

uint8_t *tsd_shm_base(const tsd_shm_seg *s);
uint64_t tsd_shm_bytes(const tsd_shm_seg *s);
tsd_shm_seg *tsd_shm_hold(tsd_shm_seg *s);
/* Drops a reference; the last unmaps the segment and returns its bytes. Accepts NULL. */
void tsd_shm_release(tsd_engine *e, tsd_shm_seg *s);
/* The region d names in the connection's segment: *p and its size (d->bytes, or 0: to the
 * segment's end), checked to lie inside the segment and to hold at least min_bytes. */
int tsd_shm_region(const tsd_session *c, const Tshard__ShmData *d, uint64_t min_bytes, uint8_t **p,
                   uint64_t *bytes, ts_error *err);
/* Frees the data of a submitted put: a segment reference when p lies in a segment, else a staging
 * buffer (returned to the account). Accepts NULL. */
void tsd_staging_give(tsd_engine *e, uint8_t *p, uint64_t bytes);
/* A whole get (offset 0) on the origin rank: remembers the region the request named (for its
 * answer), and returns where in the segment the gathered tensor of `bytes` may be written, or
 * NULL (no region, or too small: the gather goes to a copy and is answered through the region in
 * chunks). c may be NULL (the client is gone). */
uint8_t *tsd_shm_gather_target(tsd_session *c, const Tshard__GetRequest *g, uint64_t bytes);
/* The local handler of shm_attach. */
void tsd_shm_attach(tsd_engine *e, tsd_work *w);

#endif
