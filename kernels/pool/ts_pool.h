/* ts_pool.h - the public header of libtspool: the buffer pool, the one memory account of the
 * process. The kernels' workspaces, the shard library's slices and staging, and the daemon's
 * buffers all come from it, and its limit is the daemon's memory limit. It depends on nothing but
 * the error list (include/tshard_errors.h). */
#ifndef TS_POOL_H
#define TS_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tshard_errors.h"

/* The buffer pool (pool.c): every large buffer of the process, in one account
 *
 * ts_pool_alloc returns at least `bytes` bytes (contents unspecified), or NULL with err set:
 * TS_LIMIT when the memory limit has no room for it (cached buffers are released first to make
 * room), TS_NO_MEMORY when the system has none. `what` names the buffer in the message (NULL: "a
 * buffer"). Buffers below TS_POOL_MAP_MIN come from the heap, 64-byte aligned; larger ones are
 * mappings of a size class, pre-faulted, 2 MiB-aligned from TS_BUFFER_HUGE_BYTES on, marked for
 * transparent huge pages with TS_POOL_HUGE (or when the pool is configured so), and kept in the
 * pool's cache when freed, for the next request of their class. Free with ts_pool_free (which
 * accepts NULL; a pointer not from the pool, or freed twice, aborts). Thread-safe.
 *
 * The account (ts_pool_get_stats): in_use, every buffer handed out at the size it really takes;
 * staging, the part tagged TS_POOL_STAGING (transfers and executor staging, not stored data);
 * cached; peak, the highest in_use + cached; hits and misses of the cache for mapped buffers;
 * released, bytes given back to the OS. With a limit (ts_pool_configure), in_use + cached never
 * exceeds it. */

#define TS_BUFFER_HUGE_BYTES ((size_t)2 << 20)
#define TS_POOL_MAP_MIN ((size_t)256 << 10)
#define TS_POOL_DEFAULT_CACHE ((int64_t)1 << 30)
#define TS_POOL_DEFAULT_IDLE_MS 2000

#define TS_POOL_STAGING 1u /* counted as staging */
#define TS_POOL_HUGE 2u    /* ask for transparent huge pages */

typedef struct ts_pool_config {
  int64_t limit;     /* bytes in use + cached at most; 0: no limit */
  int64_t cache_cap; /* bytes of freed buffers kept for reuse at most; 0: none kept */
  int64_t idle_ms;   /* ts_pool_trim releases cached buffers idle for this long */
  bool huge;         /* every mapped buffer asks for huge pages, not only TS_POOL_HUGE ones */
} ts_pool_config;

typedef struct ts_pool_stats {
  uint64_t in_use, staging, cached, peak, limit, cache_cap;
  uint64_t hits, misses, released, buffers_cached;
} ts_pool_stats;

void *ts_pool_alloc(size_t bytes, unsigned flags, const char *what, ts_error *err);
void ts_pool_free(void *p);
/* Retags a buffer as staging or not (a gathered copy that becomes a get answer). */
void ts_pool_set_staging(void *p, bool staging);
/* Whether `bytes` more would fit the limit now (TS_LIMIT with a message naming `what` if not).
 * Cached buffers do not count here: the allocation releases them as it needs the room. */
int ts_pool_check(size_t bytes, const char *what, ts_error *err);
/* Memory the daemon holds outside the pool (shared-memory segments) counted in the same account,
 * as staging: ts_pool_charge refuses (TS_LIMIT) what the limit cannot hold, after giving up cached
 * buffers; ts_pool_uncharge gives back exactly what a charge took. */
int ts_pool_charge(size_t bytes, const char *what, ts_error *err);
void ts_pool_uncharge(size_t bytes);
/* The same for what the daemon keeps for as long as a tensor lives (its store entry), counted in
 * use but not as staging. */
int ts_pool_charge_held(size_t bytes, const char *what, ts_error *err);
void ts_pool_uncharge_held(size_t bytes);
/* Releases cached buffers idle for the configured period (all of them with all = true) to the
 * OS, and trims the C heap after heap frees; returns how many buffers were released. Meant for
 * idle moments: it unmaps outside the pool's lock, but takes the time the kernel needs. */
int ts_pool_trim(bool all);
/* ms until ts_pool_trim(false) has something to release, or -1: nothing cached or freed. */
int64_t ts_pool_trim_due_ms(void);
/* Sets the limit, cache cap, idle period and huge pages (releasing cached buffers over the new
 * cap). Buffers already handed out stay counted. */
void ts_pool_configure(const ts_pool_config *c);
void ts_pool_get_config(ts_pool_config *c);
void ts_pool_get_stats(ts_pool_stats *s);
void ts_pool_reset_peak(void);
/* Bytes a buffer is counted for (at least what was asked); 0 for NULL. */
size_t ts_pool_capacity(const void *p);

/* Shared buffers: from this call on, the mapped buffers other than TS_POOL_HUGE ones are carved
 * from one memory file of `size` bytes of address space (a memfd mapped whole with
 * MAP_NORESERVE: pages exist only where buffers are), which the other processes of the node may
 * map (open /proc/PID/fd/FD and mmap it) to copy out of this process's buffers with plain loads
 * (comm/cma.c). A buffer's bytes are at its address minus `base` in the file. The first page of
 * the file is the caller's (a word the readers check their mapping with). When the arena has no
 * room the buffer is a private mapping as before. Idempotent: a later call returns the same
 * arena whatever its size. Errors: TS_NO_MEMORY naming the system call that failed,
 * TS_INVALID_ARGUMENT for a size under 4 MiB or over 2^46. The arena asks for huge pages
 * (MADV_HUGEPAGE), which shared memory gets where the system allows it: the pool-wide `huge`
 * setting then applies through it. */
typedef struct ts_pool_shared {
  int fd;        /* the memory file, in this process */
  uint64_t base; /* where this process maps it */
  uint64_t size;
} ts_pool_shared;
int ts_pool_share(uint64_t size, ts_pool_shared *out, ts_error *err);

/* The kernels' tensor buffers (einsum workspaces and caches): ts_pool_alloc with TS_POOL_HUGE
 * (transposes and permutations of large tensors then spend far less time on TLB misses), no
 * name and no error. Free them with ts_buffer_free (ts_pool_free), never with free(). */
void *ts_buffer_alloc(size_t bytes);
void ts_buffer_free(void *p);

#endif
