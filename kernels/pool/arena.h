/* arena.h - the pool's shared arena (arena.c), inside libtspool: extents of one memory file that
 * the other processes of the node can map. ts_pool_share (ts_pool.h) creates it. */
#ifndef TS_POOL_ARENA_H
#define TS_POOL_ARENA_H

#include "ts_pool.h"

/* Whether ts_pool_share created the arena (the pool's mapped buffers then come from it). */
bool ts__arena_active(void);
/* An extent of len bytes whose address plus lead is a multiple of align (a power of two, at
 * least a page); NULL when the arena has no such free range (the caller maps privately). */
void *ts__arena_take(size_t len, size_t lead, size_t align);
/* Gives an extent of ts__arena_take back: its pages are removed first. */
void ts__arena_give(void *p, size_t len);
/* Bytes of the arena free for extents (tests). */
uint64_t ts__arena_free_bytes(void);

#endif
