/* tshard.h - libtshard, the C client of the tshardd daemons.
 *
 * A client connects to one daemon: by job and rank (the socket in the default per-user
 * directory, or $TSHARD_SOCKET_DIR), by socket path, or by TCP with the daemon's token. Every
 * call is synchronous, bounded by the client's timeout (default 60 s; after a timeout the
 * connection is unusable and calls return TS_IO), and returns a status of tshard_errors.h;
 * tshard_last_message() holds the daemon's message for the last failed call. Data larger than a
 * frame is sent and received in chunks inside the calls.
 *
 * Text forms: dtypes "f32 f64 f16 bf16 i8 i32 i64 u8 bool i16 u16 u32 u64 f8_e4m3 f8_e5m2 c64
 * c128";
 * attributes as in shard/plan/ATTRIBUTES.md ("mesh=[2]@0-1 placements=[S(0)]"); layouts as format
 * tags ("" or "ab" row-major, "aBcd16b",
 * ...). Multi-rank operations (create, put, get, reshard, drop, shutdown) are ordered by rank 0
 * of the daemons; give the same idempotency key from every SPMD client to run one of them once
 * (every client gets the answer). Clients that put their slices and then reshard either make
 * sure every slice is put before the reshard is submitted (a barrier of their own) or declare
 * their group (tshard_set_group): the reshard then waits for every rank's submission. A key
 * deduplicates retries of the identical request only (another request under it:
 * TS_KEY_CONFLICT); the daemons forget it after their --key-ttl, or when a later operation
 * creates or drops one of its tensors (the retry then runs again).
 *
 * A client handle is used by one thread at a time; open one per thread. */
#ifndef TSHARD_H
#define TSHARD_H

#include <stdbool.h>
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
 * chunks by the daemon's maximum frame. Finding no daemon where the launcher recorded that the
 * job lost a rank, it returns TS_RANK_LOST (tshard_connect_message names the rank). */
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
int tshard_put(tshard_client *c, const char *name, const void *data, size_t bytes, const char *key);
/* This rank's slice, in `layout` over the slice box (NULL or "": row-major). */
int tshard_put_slice(tshard_client *c, const char *name, const char *layout, const void *data,
                     size_t bytes);
/* The whole tensor, row-major, gathered to this client's rank; bytes must be its exact size. */
int tshard_get(tshard_client *c, const char *name, void *buf, size_t bytes);
/* This rank's slice in `layout`; *bytes gets its size (0 when this rank holds none). When cap
 * is too small (cap 0 asks for the size only), TS_LIMIT is returned with *bytes set and nothing
 * copied; the daemon keeps its copy until the next get or the close of the connection. */
int tshard_get_slice(tshard_client *c, const char *name, const char *layout, void *buf, size_t cap,
                     size_t *bytes);

typedef struct tshard_reshard_opts {
  const char *strategy;       /* NULL/"auto", local, allreduce, reduce_scatter, allgather,
                                 alltoall, p2p, root */
  const char *keep_source_as; /* NULL: in place; else the result gets this name */
  const char *layout;         /* layout tag of the new slices (NULL: row-major) */
  const char *key;            /* idempotency key (NULL: none) */
  /* NULL/"": the tensor keeps its dtype; else a dtype name ("bf16"): the values are cast to it as
   * they move (round to nearest even, as ts_convert and numpy's astype), and the tensor (with
   * keep_source_as: the new one) has that dtype. Narrowing casts of a source without partial
   * placements convert before the wire (the narrow bytes travel); others after it (partial
   * sources reduce in the source dtype first). Checked as a put with TSHARD_PUT_CONVERT: a value
   * that would not survive (out of an integer's range, NaN or an infinity into an integer, a
   * finite value overflowing to infinity) refuses the reshard (TS_BAD_DTYPE naming it) and
   * nothing changes; so does a partial target of a dtype without reductions (f8), and
   * (TS_UNSUPPORTED) a partial source to a partial target. In tshard_reshard_many it applies to
   * every item. */
  const char *dtype;
  /* The target's ranks may be permuted among themselves so that the fewest bytes move (the
   * layout is the same up to which rank holds which block; layouts that differ only by such a
   * permutation move nothing); tshard_reshard_ranks gives the order chosen, and the tensor's
   * attribute has it. Not in tshard_reshard_many. */
  bool relabel;
} tshard_reshard_opts;

int tshard_reshard(tshard_client *c, const char *name, const char *attr,
                   const tshard_reshard_opts *opts);
int tshard_drop(tshard_client *c, const char *name, const char *key);

/* Operations in flight on one connection. A submit call checks and sends the request like the
 * call of the same name and returns at once with *ticket set (the request's id, never 0); the
 * daemon runs a connection's operations in the order they were sent, and the client may send
 * more, or make synchronous calls, meanwhile. tshard_wait waits at most timeout_ms (< 0: no
 * bound) for the ticket's answer and returns the operation's status (its message in
 * tshard_last_message); *result (may be NULL) gets the status and, for a reshard, the strategy
 * run and its time on the daemon. TS_TIMEOUT: not answered yet, the operation goes on (wait
 * again); TS_INVALID_ARGUMENT: not a ticket in flight (each is waited on once); TS_IO: the
 * connection broke (the operation's outcome is then unknown to this client). Closing the
 * connection drops the answers still due; the operations finish on the daemons. */
typedef struct tshard_result {
  int status;
  char strategy[32]; /* reshard: the strategy run ("" otherwise) */
  uint64_t elapsed_us;
} tshard_result;
int tshard_submit_create(tshard_client *c, const char *name, const char *dtype, int ndim,
                         const int64_t *shape, const char *attr, const char *layout,
                         const char *key, uint64_t *ticket);
int tshard_submit_reshard(tshard_client *c, const char *name, const char *attr,
                          const tshard_reshard_opts *opts, uint64_t *ticket);
int tshard_submit_drop(tshard_client *c, const char *name, const char *key, uint64_t *ticket);
int tshard_wait(tshard_client *c, uint64_t ticket, int timeout_ms, tshard_result *result);

/* Batches (client/batch.c): one collective operation over n >= 1 tensors, atomic (every tensor
 * changes or none, on every rank); a batch naming a tensor twice, an unknown tensor, or more than
 * the daemons' --batch-max-tensors / --batch-max-bytes is refused whole, naming it. reshard_many:
 * names[i] goes to the attribute text attrs[i]; opts (may be NULL) gives the strategy, the layout
 * of every new slice, the dtype every tensor is cast to (NULL: each keeps its own) and the key
 * (keep_source_as must be NULL: a batch reshards in place). */
int tshard_reshard_many(tshard_client *c, int n, const char *const *names, const char *const *attrs,
                        const tshard_reshard_opts *opts);
int tshard_drop_many(tshard_client *c, int n, const char *const *names, const char *key);
/* tshard_reshard_many with each tensor's result: results (NULL: not wanted; else an array of n
 * the caller provides, nothing is allocated) gets, in the order of names, the tensor's name, the
 * strategy the daemons ran for it and the bytes the answering rank sent and received for it.
 * Filled on success; a retry answered by its idempotency key leaves strategy "" and the bytes 0
 * (the daemons keep the answer's status, not its results). */
typedef struct tshard_reshard_item_result {
  char name[128];
  char strategy[32];
  uint64_t bytes_sent, bytes_received; /* the answering rank's */
} tshard_reshard_item_result;
int tshard_reshard_many_results(tshard_client *c, int n, const char *const *names,
                                const char *const *attrs, const tshard_reshard_opts *opts,
                                tshard_reshard_item_result *results);

/* Whole puts and gets of many tensors in one request (client/batch_io.c), each ONE collective
 * operation: put_many stores every tensor or none (the same on every rank), checked whole before
 * anything moves: every name once and existing, each item's bytes (and declared dtype and shape)
 * as tshard_put (tshard_put_typed) checks them, the daemons' --batch-max-tensors and
 * --batch-max-bytes (TS_LIMIT naming the flag); the message names the tensor at fault. The data
 * takes the single put's and get's paths: on a Unix socket the daemons copy straight from and
 * into the caller's buffers; otherwise the bytes travel through the shared segment or in frames.
 * A put item is tshard_put_typed's arguments: dtype NULL declares nothing (bytes must be the
 * tensor's, row-major), else dtype and shape are checked; flags TSHARD_PUT_CONVERT converts
 * every item's data to its tensor's dtype. A get item's bytes must be the tensor's exact size
 * (TS_BAD_SHAPE otherwise, naming it); buffers receive the row-major tensors. */
typedef struct tshard_put_item {
  const char *name;
  const void *data;
  size_t bytes;
  const char *dtype; /* NULL: undeclared */
  int ndim;          /* with dtype: the data's shape */
  const int64_t *shape;
} tshard_put_item;
int tshard_put_many(tshard_client *c, int n, const tshard_put_item *items, const char *key,
                    unsigned flags);
typedef struct tshard_get_item {
  const char *name;
  void *buf;
  size_t bytes;
} tshard_get_item;
int tshard_get_many(tshard_client *c, int n, const tshard_get_item *items);

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
  char *attr; /* canonical text form, malloc'd */
  char layout[32];
  int nranks; /* ranks holding a slice */
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
  uint64_t relayed; /* of the reshards, those whose pieces rode on their agreement via rank 0 */
} tshard_strategy_stats;

/* One operation kind's latency on the daemon over its last 1024 runs, in microseconds, and the
 * tensors per run (1 for single operations). */
typedef struct tshard_op_stats {
  char kind[32];
  uint64_t count, p50_us, p99_us, batch_p50, batch_max;
} tshard_op_stats;

/* A background save on the daemon: writing, done or failed (status and message say why). */
typedef struct tshard_save_stats {
  uint64_t save_id;
  char dir[4000];
  char state[16];
  uint64_t bytes_written, bytes_total; /* this daemon's */
  uint64_t checkpoint_bytes;           /* every daemon's */
  double seconds;                      /* since it began, until it ended */
  int status;
  char message[512];
} tshard_save_stats;

typedef struct tshard_stats {
  uint64_t operations, collective_ops, tensors, memory_in_use, memory_limit, connections;
  /* the daemon's buffer pool: stored slices' bytes, staging (of memory_in_use), cached buffers,
   * peak of in use + cached, cache cap, cache hits and misses, bytes released to the OS */
  uint64_t stored_bytes, pool_staging, pool_cached, pool_peak, pool_cache_cap, pool_hits,
      pool_misses, pool_released;
  int nstrategies;
  tshard_strategy_stats strategies[16];
  int nops; /* the kinds the daemon ran at least once */
  tshard_op_stats ops[64];
  int nsaves; /* background saves: the one writing, then the last finished ones */
  tshard_save_stats saves[8];
  /* where the job's ranks live ("hosts=2x4", "map=0,1,0,1"; a long map cut with "..."), the
   * number of hosts, and the host of the connected rank */
  char topology[256];
  int hosts, host;
  /* the connected rank's host name (printable ASCII, at most 255 bytes) and NUMA node (of the
   * CPU it ran on at start; -1 when the system does not say); every rank's: tshard_describe_job */
  char host_name[256];
  int numa;
} tshard_stats;

int tshard_stats_get(tshard_client *c, tshard_stats *s);

/* The job's layout as the connected daemon knows it (the same on every rank): its ranks, their
 * hosts (numbered in the order of their first rank, each host's name once) and every rank's
 * NUMA node. Arrays malloc'd; tshard_job_clear frees them (accepts NULL and a cleared job). */
typedef struct tshard_job {
  int rank; /* the rank that answered */
  int nranks, nhosts;
  char topology[256]; /* the spec, as tshard plan --topology takes it ("hosts=2x4") */
  char **host_names;  /* nhosts: each host's name (the name its first rank gives) */
  int *rank_hosts;    /* nranks: each rank's host */
  int *rank_numa;     /* nranks: each rank's NUMA node, -1 unknown */
  /* the link rates plans weigh, bytes per second: inside a host, between hosts */
  double link_rate_host, link_rate_cross;
} tshard_job;

int tshard_describe_job(tshard_client *c, tshard_job *job);
void tshard_job_clear(tshard_job *job);

/* Stops every daemon of the job (they finish what they run, answer, remove their sockets). */
int tshard_shutdown(tshard_client *c, const char *key);

/* ---- SPMD collectives (client/spmd.c) ----------------------------------------------------
 * A client of an SPMD program declares its group once: from then on its create, reshard,
 * drop, einsum (and its backward and release), save and load carry the group's ranks as
 * participants, and the daemons run each once every rank of the group submitted it (so puts
 * of every rank are in before a reshard, with no barrier of the program's own). These calls then
 * need an idempotency key, the same in every process for the same call (e.g. "step-17-reshard");
 * TS_INVALID_ARGUMENT without one. If a rank never submits within timeout_ms (0: the client's
 * timeout less 5 s, at most 600 s, the daemons' default
 * --collective-timeout-max; a longer one than the daemons allow is TS_INVALID_ARGUMENT), every
 * participant gets TS_INCOMPLETE
 * naming the missing ranks; a rank that submits another request under the key makes it
 * TS_KEY_CONFLICT for all. n 0 clears the group. The ranks are the daemons' (each process talks
 * to its own rank's daemon, which must be in the group). */
int tshard_set_group(tshard_client *c, const int *ranks, int n, int timeout_ms);

/* ---- Installation: the library's version ----
 * "MAJOR.MINOR.PATCH", CMake's project version; Python's tshard.__version__ is the same. */
const char *tshard_version(void);

/* ---- Typed puts (client/typed_put.c), reshard reports (client/api.c), connect messages
 * (client/connect_message.c) ----
 * A put that declares its data's dtype and row-major shape: the daemon refuses data that differs
 * from the tensor (put) or this rank's slice box (put_slice), naming both, instead of storing
 * reinterpreted bits. The CLI and the Python client always declare. */
#define TSHARD_PUT_CONVERT                                                                         \
  1u /* flags: data of another dtype is converted to the tensor's as                               \
        numpy's astype does, and refused (TS_BAD_DTYPE, naming both                                \
        dtypes) when a value would not survive: out of range, NaN or an                            \
        infinity into an integer, overflow to infinity (README "Checked                            \
        puts"); the shape must match */
int tshard_put_typed(tshard_client *c, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, const void *data, size_t bytes, const char *key,
                     unsigned flags);
int tshard_put_slice_typed(tshard_client *c, const char *name, const char *layout,
                           const char *dtype, int ndim, const int64_t *shape, const void *data,
                           size_t bytes, unsigned flags);
/* The strategy the last successful tshard_reshard ran and its time on the daemon (TS_NOT_FOUND
 * when the answer named none: an older daemon, or a retry answered by its idempotency key). */
int tshard_reshard_report(const tshard_client *c, char *strategy, size_t cap, uint64_t *elapsed_us);
/* After a successful tshard_reshard with relabel (or tshard_wait of a submitted one): the target
 * mesh's ranks in the order chosen (row-major over the mesh), at most cap written to ranks;
 * returns how many there are (0 when the last reshard answered was not relabeled). */
int tshard_reshard_ranks(const tshard_client *c, int *ranks, int cap);
/* ---- Traces (client/trace.c): the operations one daemon recorded, each with the times it reached
 * each point of its way, in rank 0's clock (ns; 0: not reached on that rank): received, submitted,
 * ordered, started, planned, agreed, moved, committed, ended, answered (tshard_trace_point_name).
 * The ops are the last `last` recorded (0: every one the daemon's ring holds) that ended within the
 * last within_ns (0: any), oldest first; seq is rank 0's number of a collective operation (the
 * same on every rank; 0: a local one). */
enum tshard_trace_point {
  TSHARD_PT_RECEIVED,
  TSHARD_PT_SUBMITTED,
  TSHARD_PT_ORDERED,
  TSHARD_PT_STARTED,
  TSHARD_PT_PLANNED,
  TSHARD_PT_AGREED,
  TSHARD_PT_MOVED,
  TSHARD_PT_COMMITTED,
  TSHARD_PT_ENDED,
  TSHARD_PT_ANSWERED,
  TSHARD_TRACE_POINTS
};
typedef struct tshard_trace_op {
  uint64_t seq, request_id;
  char kind[32], name[72], strategy[24];
  int status;
  int origin; /* this daemon's client submitted it */
  uint64_t bytes_sent, bytes_received;
  int64_t points[TSHARD_TRACE_POINTS];
} tshard_trace_op;
typedef struct tshard_trace {
  int rank;
  int64_t clock_offset_ns, clock_rtt_ns; /* the daemon's clock against rank 0's, and its error */
  uint64_t dropped;                      /* operations recorded before the ring's oldest */
  uint32_t ring;                         /* the daemon's --trace-ring (0: tracing off) */
  char host[256];
  int nops;
  tshard_trace_op *ops;
} tshard_trace;
int tshard_trace_get(tshard_client *c, uint32_t last, int64_t within_ns, tshard_trace *out);
/* Frees what tshard_trace_get filled (accepts NULL and a cleared one). */
void tshard_trace_clear(tshard_trace *t);
/* The name of point i (0 <= i < TSHARD_TRACE_POINTS), NULL otherwise. */
const char *tshard_trace_point_name(int i);

/* Why the last tshard_connect_rank of this thread failed: "no daemon serves job X on rank R at
 * PATH; start one with tshard-launch ..." or a bad job name ("" before any failure). */
const char *tshard_connect_message(void);

/* ---------------------------------------------------------------------------------------------
 * Distributed einsum: out = einsum(equation, operands) on the daemons, where the
 * shards live. The planner compares candidate plans (the operands as they are, one operand
 * following another's shards, an operand gathered, the requested output's shards, ...) by the
 * reshard planner's exact bytes on the wire, then the busiest rank's work and peak memory; a
 * sharded contracted label gives a Partial(sum) result, reduced only when `attr` asks. Atomic:
 * on failure nothing changed on any rank. Equations are numpy's with explicit labels (no "..."),
 * 1 to 3 operands of one dtype. */
typedef struct tshard_einsum_opts {
  const char *attr; /* the output's attribute (NULL: the natural one) */
  const char *plan; /* NULL/"auto", or a candidate: as_is, match:I, free:I, gather:I, output,
                       replicate */
  int keep;         /* keep the local operands and transposes for einsum_backward */
  int explain;      /* return the EXPLAIN text */
  const char *key;  /* idempotency key (NULL: none) */
} tshard_einsum_opts;

typedef struct tshard_einsum_result {
  uint64_t forward_id; /* for tshard_einsum_backward and tshard_einsum_release */
  char plan[32];       /* the candidate that ran (or would run) */
  int64_t planned_wire_bytes;
  int64_t kept_bytes; /* this rank's kept state */
  char *explain;      /* malloc'd, or NULL; tshard_einsum_result_clear frees it */
} tshard_einsum_result;

/* result may be NULL. */
int tshard_einsum(tshard_client *c, const char *equation, int n, const char *const *operands,
                  const char *out, const tshard_einsum_opts *opts, tshard_einsum_result *result);
/* The EXPLAIN only, from the daemon's tensors; nothing runs (attr, plan may be NULL). */
int tshard_einsum_plan(tshard_client *c, const char *equation, int n, const char *const *operands,
                       const char *attr, const char *plan, tshard_einsum_result *result);
/* Gradients of forward `forward_id` from the output gradient `grad_out`: grads[i] names the
 * gradient of operand i (NULL or "": not wanted); n is the forward's operand count. */
int tshard_einsum_backward(tshard_client *c, uint64_t forward_id, const char *grad_out, int n,
                           const char *const *grads, const char *key);
/* Frees the forward's kept state on every rank. */
int tshard_einsum_release(tshard_client *c, uint64_t forward_id, const char *key);
void tshard_einsum_result_clear(tshard_einsum_result *r); /* accepts NULL */
/* ---------------------------------------------------------------------------------------------
 * Checkpoints (the format is in shard/CHECKPOINT.md). dir is a directory path every
 * daemon can reach (a relative path is made absolute against this process's working directory);
 * with per_node, a path on each node. A save writes the names given (exact names, or fnmatch
 * globs such as "layers.*.weight" standing for the tensors they match), or opts->prefix's
 * tensors, or every tensor with opts->all; asked none of them it is refused (TS_INVALID_ARGUMENT).
 * A load of names NULL or n 0 loads every tensor of the checkpoint. Both are collective; the save
 * is atomic (the previous checkpoint in dir stays until every rank agreed) and refuses a dir that
 * already holds a checkpoint (TS_EXISTS) unless opts->overwrite; it first removes what saves into
 * dir cut short left (tshard checkpoint clean); a failed load creates no tensor. */
/* What a save or a load did (the daemon's CkptResult). */
typedef struct tshard_ckpt_info {
  char dir[4000];
  int tensors, files; /* save: the data files and the index; load: the files holding them */
  uint64_t bytes;     /* the tensors' bytes saved or loaded */
  double seconds;     /* on the answering daemon; a background save: until the copy was taken */
  int writing;        /* a background save: its files are being written (tshard_wait_saves) */
  uint64_t save_id;   /* a background save: its number in tshard_stats.saves */
} tshard_ckpt_info;

typedef struct tshard_save_opts {
  int keep_partial; /* partial tensors: save their partial pieces instead of the reduced value */
  int per_node;
  const char *key; /* idempotency key (NULL: none) */
  /* 1: asynchronous save: returns once every daemon copied the tensors (under its memory
   * limit: TS_LIMIT when the copy does not fit; then save without it), and the daemons write the
   * files in the background while other operations run; tshard_wait_saves waits for them. */
  int background;
  tshard_ckpt_info *info; /* filled with what the save did (NULL: not wanted) */
  int all;                /* 1: every tensor of the job (give no names nor prefix) */
  int overwrite;          /* 1: replace the checkpoint already in dir (atomically) */
  const char *prefix;     /* the tensors whose name starts with it (NULL or "": none) */
} tshard_save_opts;
int tshard_save(tshard_client *c, const char *dir, const char *const *names, int n,
                const tshard_save_opts *opts);

typedef struct tshard_load_opts {
  const char *attr; /* the default: the attribute of every tensor no rule names (NULL: each
                     * tensor's saved attribute) */
  int per_node;
  const char *key;
  tshard_ckpt_info *info; /* filled with what the load did (NULL: not wanted) */
  /* Attribute rules, "PATTERN=ATTR" each (proto/ts_rules.h): a tensor takes the attribute of
   * the rule naming it, else of the first whose glob ('*', '?', '[a-z]', '[!a]') matches its
   * name, else the default, e.g. {"wte=mesh=[3] placements=[S(0)]", "h.*.b=mesh=[3]
   * placements=[R]"}. A rule naming a tensor the checkpoint lacks is refused. */
  int nrules;
  const char *const *rules;
  /* 1: into the stored tensors of the names (every tensor of the checkpoint when none), each
   * keeping its attribute and layout (no rules, attr NULL), as a roll back to the checkpoint's
   * step: each must have its saved dtype and shape, else nothing changes on any rank and the
   * error names every mismatch; all or none, with room for a second copy while it loads. */
  int in_place;
} tshard_load_opts;
int tshard_load(tshard_client *c, const char *dir, const char *const *names, int n,
                const tshard_load_opts *opts);
/* A snapshot now (daemons started with --snapshot-dir): a background save of every tensor into
 * <snapshot dir>/<UTC timestamp>/ (info->dir names it; NULL: not wanted). */
int tshard_snapshot(tshard_client *c, tshard_ckpt_info *info);
/* Waits until the background saves writing now (save_id 0) or save save_id are complete,
 * polling the daemon's stats: TS_OK, the failed save's status (its message in
 * tshard_last_message), or TS_TIMEOUT after timeout_ms (< 0: no limit). */
int tshard_wait_saves(tshard_client *c, uint64_t save_id, int timeout_ms);
/* A save or load in flight (see "Operations in flight" above): sent as tshard_save/tshard_load
 * send it (opts->info is not filled), its ticket answered by tshard_wait_ckpt, which is
 * tshard_wait also giving the report (*info, may be NULL; zeroed when the answer has none). */
int tshard_submit_save(tshard_client *c, const char *dir, const char *const *names, int n,
                       const tshard_save_opts *opts, uint64_t *ticket);
int tshard_submit_load(tshard_client *c, const char *dir, const char *const *names, int n,
                       const tshard_load_opts *opts, uint64_t *ticket);
int tshard_wait_ckpt(tshard_client *c, uint64_t ticket, int timeout_ms, tshard_result *result,
                     tshard_ckpt_info *info);

/* Hugging Face safetensors (shard/ckpt/SAFETENSORS.md). An import reads a `model.safetensors`
 * file or a sharded `model.safetensors.index.json` (path made absolute here) into new tensors:
 * the file's names are renamed (rename_from[i] -> rename_to[i]) or have strip_prefix removed;
 * attrs[i] is the attribute of the tshard name or glob attr_names[i] (the rules of tshard_load:
 * an exact name first, else the first glob matching); default_attr that of every other tensor.
 * The tensors imported: names when given, else all with a default, else those the attr_names
 * name or match.
 * Each rank reads only its slice's bytes; atomic (nothing created on failure). *created (may be
 * NULL) gets the names created, one per line (malloc'd; free it). */
typedef struct tshard_st_import_opts {
  int nattrs;
  const char *const *attr_names, *const *attrs;
  const char *default_attr;
  int nnames;
  const char *const *names;
  const char *strip_prefix;
  int nrename;
  const char *const *rename_from, *const *rename_to;
  const char *key; /* idempotency key (NULL: none) */
} tshard_st_import_opts;
int tshard_import_safetensors(tshard_client *c, const char *path, const tshard_st_import_opts *o,
                              char **created);
/* An export writes the named tensors (exact or globs; or o->prefix's, or every one with o->all;
 * none of them asked: refused) into the .safetensors file path, or HF shards
 * beside it and `<path>.index.json` when their bytes exceed max_shard_bytes (0: one file);
 * __metadata__ from the nmeta pairs (0: {"format": "pt"}). Each rank writes its own slices' bytes;
 * the files appear atomically (temporary names, then renamed). *files (may be NULL): the paths
 * written, one per line (malloc'd). */
typedef struct tshard_st_export_opts {
  uint64_t max_shard_bytes;
  int nmeta;
  const char *const *meta_keys, *const *meta_values;
  const char *key;
  int all;            /* 1: every tensor of the job */
  const char *prefix; /* the tensors whose name starts with it */
} tshard_st_export_opts;
int tshard_export_safetensors(tshard_client *c, const char *path, const char *const *names, int n,
                              const tshard_st_export_opts *o, char **files);

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
/* The same from the program's message form: `graph` holds `len` bytes of a serialized
 * ProgramGraph message (proto/tshard.proto; program/PROGRAM.md "The message form"). */
int tshard_program_compile_graph(tshard_client *c, const void *graph, size_t len, int lazy,
                                 char *id, size_t id_cap, const char *key);
/* The general form: the program as its text or as graph_len bytes of a serialized ProgramGraph
 * (exactly one of text and graph), with overrides of dim groups' bucketing rules: NULL, or
 * "NAME=RULE" words separated by spaces or ';', RULE pow2, step:S or an ascending list
 * V1,V2,... (e.g. "n=pow2 k=16,32,64"). */
int tshard_program_compile_ex(tshard_client *c, const char *text, const void *graph,
                              size_t graph_len, const char *buckets, int lazy, char *id,
                              size_t id_cap, const char *key);
/* Runs a compiled program; in-place assigns update the input tensors. */
int tshard_program_run(tshard_client *c, const char *id, const tshard_program_arg *inputs, int n_in,
                       const tshard_program_arg *outputs, int n_out, const char *key);
/* Forgets the program on every rank. */
int tshard_program_drop(tshard_client *c, const char *id, const char *key);
/* The connected rank's report on the program (*text malloc'd: free()). */
int tshard_program_show(tshard_client *c, const char *id, char **text);
/* Its short report (interface, kernels, dim groups, buckets built, cache): what a compile says. */
int tshard_program_summary(tshard_client *c, const char *id, char **text);
/* tshard_program_run with flags: TSHARD_PROGRAM_OVERWRITE lets an output replace an existing
 * tensor (never an input of the run); without it an existing name is refused (EXISTS). An output
 * not among `outputs` becomes a tensor named after the program's output. */
#define TSHARD_PROGRAM_OVERWRITE 1
int tshard_program_run_ex(tshard_client *c, const char *id, const tshard_program_arg *inputs,
                          int n_in, const tshard_program_arg *outputs, int n_out, int flags,
                          const char *key);

#ifdef __cplusplus
}
#endif

#endif
