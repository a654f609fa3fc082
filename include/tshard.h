/* tshard.h - libtshard, the C client of the tshardd daemons.
 *
 * A client connects to one daemon: by job and rank (the socket in the default per-user
 * directory, or $TSHARD_SOCKET_DIR), by socket path, or by TCP with the daemon's token. Every
 * call is synchronous, bounded by the client's timeout (default 60 s; after a timeout the
 * connection is unusable and calls return TS_IO), and returns a status of tshard_errors.h;
 * tshard_last_message() holds the daemon's message for the last failed call. Data larger than a
 * frame is sent and received in chunks inside the calls.
 *
 * Text forms: dtypes "f32 f64 f16 bf16 i8 i32 i64 u8"; attributes as in shard/ATTRIBUTES.md
 * ("mesh=[2]@0-1 placements=[S(0)]"); layouts as format tags ("" or "ab" row-major, "aBcd16b",
 * ...). Multi-rank operations (create, put, get, reshard, drop, shutdown) are ordered by rank 0
 * of the daemons; give the same idempotency key from every SPMD client to run one of them once
 * (every client gets the answer). Clients that put their slices and then reshard must make sure
 * every slice is put before the reshard is submitted (e.g. a barrier of their own).
 *
 * A client handle is used by one thread at a time; open one per thread. */
#ifndef TSHARD_H
#define TSHARD_H

#include <stddef.h>
#include <stdint.h>

#include "tshard_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tshard_client tshard_client;

#define TSHARD_DEFAULT_TIMEOUT_MS 60000
#define TSHARD_MAX_DIMS 8

/* The status's default message and name (tshard_errors.h). */
const char *tshard_strerror(int status);
const char *tshard_status_name(int status);

/* The socket of a rank: <dir>/tshard-<job>-<rank>.sock with dir $TSHARD_SOCKET_DIR, else
 * $XDG_RUNTIME_DIR/tshard, else /tmp/tshard-<uid> (the daemon's default). */
void tshard_socket_path(char *buf, size_t cap, const char *job, int rank);

/* Each connect pings the daemon (so it returns only once the daemon serves) and sizes the data
 * chunks by the daemon's maximum frame. */
int tshard_connect_rank(const char *job, int rank, int timeout_ms, tshard_client **out);
int tshard_connect_path(const char *path, int timeout_ms, tshard_client **out);
/* Presents the token with a ping before returning. */
int tshard_connect_tcp(const char *host, int port, const char *token, int timeout_ms,
                       tshard_client **out);
/* Accepts NULL; sets *c = NULL. */
void tshard_close(tshard_client **c);
void tshard_set_timeout(tshard_client *c, int timeout_ms);
/* Bytes per data chunk of puts and gets over the socket stream (at least 64; default 16 MiB or
 * what the daemon's frame allows). Shared memory goes by its segment instead. */
void tshard_set_chunk(tshard_client *c, size_t bytes);
/* Progress of puts and gets: fn(arg, bytes done, total bytes) after every chunk (NULL: none). */
typedef void (*tshard_progress_fn)(void *arg, uint64_t done, uint64_t total);
void tshard_set_progress(tshard_client *c, tshard_progress_fn fn, void *arg);

/* Same-node shared memory: on a Unix socket, put, put_slice, get and get_slice move their bytes
 * through a segment the daemon shares with this client (attached on the first transfer, grown
 * on demand up to a bound, 1 GiB by default; it counts against the daemon's memory limit while
 * it lives), not through the socket; TCP connections, and daemons that refuse a segment, use the
 * stream. On by default; TSHARD_SHM=0 in the environment or tshard_set_shm(c, 0) turns it off
 * (and releases the segment on both sides). Enabling it on TCP returns TS_UNSUPPORTED. */
int tshard_set_shm(tshard_client *c, int enable);
/* The largest segment this client asks for (at least 64 KiB); larger transfers go through it in
 * chunks. */
void tshard_set_shm_segment(tshard_client *c, size_t max_bytes);

/* The message of the last failed call ("" after a success). */
const char *tshard_last_message(const tshard_client *c);

int tshard_ping(tshard_client *c, int *rank, int *world_size);

/* Creates a tensor (zero-filled) on every rank of the job. layout: tag of the stored slices. */
int tshard_create(tshard_client *c, const char *name, const char *dtype, int ndim,
                  const int64_t *shape, const char *attr, const char *layout, const char *key);

/* The whole tensor, row-major, from this client; the daemons scatter it. */
int tshard_put(tshard_client *c, const char *name, const void *data, size_t bytes,
               const char *key);
/* This rank's slice, in `layout` over the slice box (NULL or "": row-major). */
int tshard_put_slice(tshard_client *c, const char *name, const char *layout, const void *data,
                     size_t bytes);
/* The whole tensor, row-major, gathered to this client's rank; bytes must be its exact size. */
int tshard_get(tshard_client *c, const char *name, void *buf, size_t bytes);
/* This rank's slice in `layout`; *bytes gets its size (0 when this rank holds none). When cap
 * is too small (cap 0 asks for the size only), TS_LIMIT is returned with *bytes set and nothing
 * copied; the daemon keeps its copy until the next get or the close of the connection. */
int tshard_get_slice(tshard_client *c, const char *name, const char *layout, void *buf,
                     size_t cap, size_t *bytes);

typedef struct tshard_reshard_opts {
  const char *strategy;       /* NULL/"auto", local, allreduce, reduce_scatter, allgather,
                                 alltoall, p2p, root */
  const char *keep_source_as; /* NULL: in place; else the result gets this name */
  const char *layout;         /* layout tag of the new slices (NULL: row-major) */
  const char *key;            /* idempotency key (NULL: none) */
} tshard_reshard_opts;

int tshard_reshard(tshard_client *c, const char *name, const char *attr,
                   const tshard_reshard_opts *opts);
int tshard_drop(tshard_client *c, const char *name, const char *key);

/* *names: malloc'd array of malloc'd strings; free with tshard_free_names. */
int tshard_list(tshard_client *c, char ***names, int *count);
void tshard_free_names(char **names, int count);

typedef struct tshard_rank_info {
  int rank;
  uint64_t bytes;
  int64_t lo[TSHARD_MAX_DIMS], hi[TSHARD_MAX_DIMS];
} tshard_rank_info;

typedef struct tshard_info {
  char name[128];
  char dtype[8];
  int ndim;
  int64_t shape[TSHARD_MAX_DIMS];
  char *attr;        /* canonical text form, malloc'd */
  char layout[32];
  int nranks;        /* ranks holding a slice */
  tshard_rank_info *ranks;
} tshard_info;

int tshard_describe(tshard_client *c, const char *name, tshard_info *info);
void tshard_info_clear(tshard_info *info);

/* The EXPLAIN of a reshard, nothing moved. *explain is malloc'd; strategy (may be NULL) gets the
 * chosen strategy's name. */
int tshard_plan(tshard_client *c, const char *name, const char *attr, const char *strategy,
                char **explain, char *chosen, size_t chosen_cap);

typedef struct tshard_strategy_stats {
  char name[32];
  uint64_t reshards, bytes_sent, bytes_received;
} tshard_strategy_stats;

typedef struct tshard_stats {
  uint64_t operations, collective_ops, tensors, memory_in_use, memory_limit, connections;
  /* the daemon's buffer pool: stored slices' bytes, staging (of memory_in_use), cached buffers,
   * peak of in use + cached, cache cap, cache hits and misses, bytes released to the OS */
  uint64_t stored_bytes, pool_staging, pool_cached, pool_peak, pool_cache_cap, pool_hits,
      pool_misses, pool_released;
  int nstrategies;
  tshard_strategy_stats strategies[16];
} tshard_stats;

int tshard_stats_get(tshard_client *c, tshard_stats *s);

/* Stops every daemon of the job (they finish what they run, answer, remove their sockets). */
int tshard_shutdown(tshard_client *c, const char *key);

/* ---------------------------------------------------------------------------------------------
 * Compiled programs (program/PROGRAM.md): a JSON program compiled on every rank and run SPMD on
 * the local slices (client/program.c). */

/* An input (a stored tensor, or value for a scalar input when tensor is NULL) or an output (a new
 * tensor) of a run, by the program's name for it. */
typedef struct tshard_program_arg {
  const char *name;
  const char *tensor;
  double value;
} tshard_program_arg;

/* Compiles on every rank (all buckets now, or each on first use when lazy); the program's id
 * (16 hex digits) goes into id (at least 17 bytes). */
int tshard_program_compile(tshard_client *c, const char *text, int lazy, char *id, size_t id_cap,
                           const char *key);
/* Runs a compiled program; in-place assigns update the input tensors. */
int tshard_program_run(tshard_client *c, const char *id, const tshard_program_arg *inputs,
                       int n_in, const tshard_program_arg *outputs, int n_out, const char *key);
/* Forgets the program on every rank. */
int tshard_program_drop(tshard_client *c, const char *id, const char *key);
/* The connected rank's report on the program (*text malloc'd: free()). */
int tshard_program_show(tshard_client *c, const char *id, char **text);

#ifdef __cplusplus
}
#endif

#endif
