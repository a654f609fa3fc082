/* shm.h - same-node shared-memory segments (shm.c): what transfer.c, ops.c and sequencer.c use.
 * Engine thread only. */
#ifndef TSD_SHM_H
#define TSD_SHM_H

#include "engine.h"

/* The largest segment a connection gets; larger transfers go through it in chunks. */
#define TSD_SHM_MAX_BYTES (1ULL << 30)

uint8_t *tsd_shm_base(const tsd_shm_seg *s);
uint64_t tsd_shm_bytes(const tsd_shm_seg *s);
tsd_shm_seg *tsd_shm_hold(tsd_shm_seg *s);
/* Drops a reference; the last unmaps the segment and returns its bytes. Accepts NULL. */
void tsd_shm_release(tsd_engine *e, tsd_shm_seg *s);
/* The region d names in the connection's segment: *p and its size (d->bytes, or 0: to the
 * segment's end), checked to lie inside the segment and to hold at least min_bytes. */
int tsd_shm_region(const tsd_session *c, const Tshard__ShmData *d, uint64_t min_bytes,
                   uint8_t **p, uint64_t *bytes, ts_error *err);
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
