/* daemon.h - internal declarations shared by the files of tshardd.
 *
 * Threads: the main thread initializes MPI and then runs the engine (engine.c), the only code
 * that calls MPI (through libtscomm, libtsshard and comm/control.c). A second thread runs the
 * libuv loop (server.c): sockets, framing, protobuf decoding, validation and ping. They meet in
 * two queues (queue.c) whose producer calls the consumer's wake callback: work (loop -> engine,
 * which waits on its condition variable with a timeout so that it can also poll MPI for control
 * messages) and replies (engine -> loop, woken with uv_async_send). Names: tsd_* internal to
 * the daemon, static everything else. */
#ifndef TSD_DAEMON_H
#define TSD_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tshard.pb-c.h"
#include "tshard_errors.h"
#include "ts_shard.h"

/* ---------------------------------------------------------------------------------------------
 * log.c: a level check before the arguments are evaluated. */
typedef enum { TSD_LOG_ERROR, TSD_LOG_WARN, TSD_LOG_INFO, TSD_LOG_DEBUG } tsd_log_level;
extern int tsd_log_threshold;
void tsd_log_set_rank(int rank);
int tsd_log_parse_level(const char *text);
const char *tsd_log_level_name(int level);
void tsd_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TSD_LOG(level, ...)                                                                        \
  do {                                                                                             \
    if ((level) <= tsd_log_threshold)                                                              \
      tsd_log_write((level), __VA_ARGS__);                                                         \
  } while (0)

/* ---------------------------------------------------------------------------------------------
 * config.c: one table serves the flags, --help and the startup log. */
typedef struct tsd_config {
  char socket_dir[512];
  char job[64];
  char listen[256];     /* "" or tcp://HOST:PORT */
  char token_file[512];
  int64_t max_frame;
  int64_t memory_limit; /* 0: unbounded; TSD_MEMORY_AUTO until main.c resolves it */
  int64_t staging;      /* executor staging bytes per reshard */
  int64_t chunk;        /* default chunk of get answers */
  int64_t ckpt_chunk;   /* checkpoint saves: chunk size of pieces (0: whole pieces) */
  int64_t copy_threads; /* strided-copy threads (0: all cores) */
  int64_t frame_timeout; /* ms: to finish a frame once begun */
  int64_t auth_timeout;  /* ms: for a TCP client to present its token after connecting */
  int64_t max_unauth;    /* TCP connections without their token yet, at most */
  int64_t pool_cache;   /* bytes of freed buffers the pool keeps for reuse */
  int64_t pool_idle_ms; /* cached buffers idle this long go back to the OS */
  int64_t pool_huge;    /* 1: stored slices and staging ask for transparent huge pages */
  /* idempotency keys and SPMD collectives (sequencer.c, keys.c) */
  int64_t key_ttl;      /* ms an answered key is remembered */
  int64_t key_max;      /* records rank 0 keeps at most */
  int64_t collective_timeout; /* ms a collective waits for its participants by default */
  int64_t collective_timeout_max; /* ms a request may ask at most */
  int64_t collective_pending_max; /* collectives one connection may have waiting */
  int64_t agreement_timeout; /* ms the ranks wait for one another in an agreement */
  int log_level;
  /* derived */
  char token[256];
  char tcp_host[128];
  int tcp_port;
} tsd_config;

#define TSD_MEMORY_AUTO (-1) /* --memory-limit auto: chosen at start (tsd_memory_auto) */
/* Returns 0 to run, 1 when --help was printed (exit 0), -1 on a bad flag (message printed). */
int tsd_config_parse(tsd_config *cfg, int argc, char **argv);
void tsd_config_log(const tsd_config *cfg);
/* --memory-limit auto: the limit for one of node_daemons daemons of the job on this node (0:
 * none, when the available memory is unknown); why gets how it was chosen, for the log. */
int64_t tsd_memory_auto(int node_daemons, char *why, size_t cap);
/* The default per-user socket directory (TSHARD_SOCKET_DIR, else $XDG_RUNTIME_DIR/tshard, else
 * /tmp/tshard-<uid>). */
void tsd_default_socket_dir(char *buf, size_t cap);
/* Creates dir with mode 0700 if missing and checks that it is ours, a directory, and 0700. */
int tsd_prepare_socket_dir(const char *dir, ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * framing.c: frames are a 4-byte little-endian length and that many bytes of protobuf. */
#define TSD_FRAME_HEADER 4
uint32_t tsd_frame_length(const uint8_t header[TSD_FRAME_HEADER]);
/* Checks a frame length against the maximum (0 is refused too: an empty Request is no
 * operation). */
int tsd_frame_check(uint32_t len, int64_t max_frame, ts_error *err);
/* Decodes a Request; on failure *out is NULL and err says why. */
int tsd_request_decode(const uint8_t *buf, size_t len, Tshard__Request **out, ts_error *err);
/* After a successful decode of the same bytes from a client: protobuf-c ends a string at its
 * first NUL and does not check UTF-8, so the wire bytes of every string field are checked
 * (TS_INVALID_ARGUMENT naming the field). */
int tsd_request_check_strings(const uint8_t *buf, size_t len, ts_error *err);
void tsd_request_free(Tshard__Request **req);
/* Packs a Response as a whole frame (header included) into a malloc'd buffer. */
int tsd_response_frame(const Tshard__Response *resp, uint8_t **frame, size_t *len, ts_error *err);
/* A frame answering only a status and a message. */
int tsd_error_frame(uint64_t id, int status, const char *message, uint8_t **frame, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * wireattr.c: DistAttr message <-> ts_attr. */
int tsd_attr_from_msg(const Tshard__DistAttr *m, ts_attr **out, ts_error *err);
/* Fills m (whose arrays are malloc'd; free with tsd_attr_msg_clear). */
int tsd_attr_to_msg(const ts_attr *a, Tshard__DistAttr *m, ts_error *err);
void tsd_attr_msg_clear(Tshard__DistAttr *m);

/* ---------------------------------------------------------------------------------------------
 * optable.c: the one table of operations, one entry per Request op case (see its top), and
 * validate.c: the validators it names. */
typedef enum {
  TSD_SCOPE_LOOP,       /* answered by the loop thread (ping) */
  TSD_SCOPE_CATALOG,    /* by the loop thread from the catalog, else by the engine at once */
  TSD_SCOPE_LOCAL,      /* this rank only, by the engine, at once */
  TSD_SCOPE_COLLECTIVE  /* sequenced by rank 0 and run by every rank */
} tsd_scope;

typedef struct tsd_limits {
  int world_size;
  int64_t max_frame;
  int64_t collective_timeout_max; /* ms; 0: one day */
} tsd_limits;

struct tsd_engine;
struct tsd_work;
struct tsd_ordered;
struct tsd_pending;
struct tsd_catalog;

/* What the loop thread's answers need (ping, catalog). */
typedef struct tsd_loop_info {
  int rank, world_size;
  const char *job;
  int64_t max_frame;
  struct tsd_catalog *catalog;
} tsd_loop_info;

/* Checks the request alone (no stored tensor); TS_OK or the status with err set. */
typedef int (*tsd_validator)(const Tshard__Request *req, const tsd_limits *lim, ts_error *err);
/* Loop thread: 1 answered into a new frame, 0 left to the engine, -1 no memory. */
typedef int (*tsd_loop_fn)(const tsd_loop_info *info, const Tshard__Request *req,
                           uint8_t **frame, size_t *len);
/* Engine, this rank at once: answers the request itself (may take w->req). */
typedef void (*tsd_local_fn)(struct tsd_engine *e, struct tsd_work *w);
/* Engine, every rank in rank 0's order: returns the status agreed by every rank. */
typedef int (*tsd_collective_fn)(struct tsd_engine *e, const struct tsd_ordered *op,
                                 struct tsd_pending *origin, ts_error *err);
/* The tensors a collective operation may change: busy in the catalog while it runs, published
 * again after it. `names`: it may add or remove names (list waits too); `all`: it may change any
 * tensor (every describe waits, and the whole catalog is published again after it). */
#define TSD_CHANGES_MAX 16
typedef struct tsd_changes {
  const char *name[TSD_CHANGES_MAX]; /* the first n; empty strings are skipped */
  int n;
  bool names;
  bool all;
} tsd_changes;
/* Adds a name to a change set; more than TSD_CHANGES_MAX names turn it into `all`. */
void tsd_changes_add(tsd_changes *ch, const char *name);
typedef void (*tsd_changes_fn)(const Tshard__Request *req, tsd_changes *ch);
/* The answer to one waiting client after a collective operation succeeded (NULL: status only). */
typedef void (*tsd_answer_fn)(struct tsd_engine *e, const struct tsd_pending *w);

typedef struct tsd_op {
  Tshard__Request__OpCase kind;
  const char *name;
  tsd_scope scope;
  tsd_scope (*scope_of)(const Tshard__Request *req); /* NULL: always `scope` */
  bool unix_only;                                    /* refused (UNSUPPORTED) over TCP */
  tsd_validator validate;
  tsd_loop_fn run_loop;             /* LOOP and CATALOG */
  tsd_local_fn run_local;           /* CATALOG and LOCAL (and get's later chunks) */
  tsd_collective_fn run_collective; /* COLLECTIVE */
  tsd_changes_fn changes;           /* NULL: no metadata changes */
  tsd_answer_fn answer;
} tsd_op;

/* The entry of an op case, or NULL. */
const tsd_op *tsd_op_find(int op_case);
/* The scope of a request of that entry. */
tsd_scope tsd_op_scope(const tsd_op *op, const Tshard__Request *req);
/* Validates a decoded request: its operation is known, and its fields are well-formed for it
 * (names, dtypes, shapes, attributes against the shape and world, layouts, strategies, byte
 * counts). Returns the entry through *op. Nothing here depends on the stored tensors. */
int tsd_request_validate(const Tshard__Request *req, const tsd_limits *lim, const tsd_op **op,
                         ts_error *err);
const char *tsd_op_name(int op_case);
bool tsd_name_reserved(const char *name);
/* validate.c: the checks of the request header and the validators of the table. */
int tsd_validate_header(const Tshard__Request *req, ts_error *err);
/* The participants of an SPMD collective (Request fields 4-5), against the operation. */
int tsd_validate_participants(const Tshard__Request *req, const tsd_op *op, const tsd_limits *lim,
                              ts_error *err);
int tsd_validate_none(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_create(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_put(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_put_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_get(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_get_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_reshard(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_drop(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_describe(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_plan(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* ckpt.c: checkpoints (issue 16) */
int tsd_validate_save(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_load(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * queue.c: the hand-over between the loop thread and the engine. Nodes are the first member of
 * what is queued; the producer calls the consumer's wake callback after each push. */
typedef struct tsd_qnode {
  struct tsd_qnode *next;
} tsd_qnode;

typedef struct tsd_queue {
  pthread_mutex_t mu;
  tsd_qnode *head, *tail;
  void (*wake)(void *ctx); /* NULL: nobody to wake (yet) */
  void *wake_ctx;
} tsd_queue;

void tsd_queue_init(tsd_queue *q);
/* Frees the nodes left with free_node, then the mutex. */
void tsd_queue_destroy(tsd_queue *q, void (*free_node)(tsd_qnode *n));
void tsd_queue_set_wake(tsd_queue *q, void (*wake)(void *ctx), void *ctx);
void tsd_queue_push(tsd_queue *q, tsd_qnode *n);
/* Takes every node, in order (linked by next). */
tsd_qnode *tsd_queue_take_all(tsd_queue *q);
bool tsd_queue_empty(tsd_queue *q);

typedef struct tsd_work {
  tsd_qnode node;        /* first: queued in tsd_shared.work */
  uint64_t conn_id;
  bool conn_closed;      /* notice: the connection is gone, free what it held */
  bool signal_shutdown;  /* notice: SIGTERM/SIGINT */
  Tshard__Request *req;  /* owned */
  const tsd_op *op;      /* its entry in the table */
  tsd_scope scope;
} tsd_work;

#define TSD_SPARE_REPLIES 16

typedef struct tsd_reply {
  tsd_qnode node;  /* first: queued in tsd_shared.replies */
  uint64_t conn_id;
  uint8_t *frame; /* owned, header included */
  size_t len;
  int fd;          /* -1, or a descriptor to pass with the frame (SCM_RIGHTS), owned */
  uint64_t req_id; /* with fd, or without a frame: the request answered */
  /* No frame: the answer could not be built (no memory); the loop thread answers lost_status
   * with lost_reason (a static string) itself, or closes the connection saying why. */
  int lost_status;
  const char *lost_reason;
  bool spare; /* one of tsd_shared's spare nodes: given back, not freed */
} tsd_reply;

typedef struct tsd_server tsd_server;

/* catalog.c: the tensors' metadata for list and describe, published by the engine (see the top
 * of catalog.c). */
typedef struct tsd_catalog_entry {
  char name[TS_NAME_MAX];
  Tshard__DescribeResult *describe; /* unpacked by protobuf-c */
} tsd_catalog_entry;
typedef struct tsd_catalog {
  pthread_mutex_t mu;
  tsd_catalog_entry *v;
  int n, cap;
  char busy[TSD_CHANGES_MAX][TS_NAME_MAX];
  int nbusy;
  bool names_busy, all_busy;
} tsd_catalog;
void tsd_catalog_init(tsd_catalog *c);
void tsd_catalog_destroy(tsd_catalog *c);
/* Engine: the tensors of a change set are busy until tsd_catalog_end. */
void tsd_catalog_begin(tsd_catalog *c, const tsd_changes *ch);
void tsd_catalog_end(tsd_catalog *c);
/* Engine: sets a tensor's packed DescribeResult (packed NULL: removes the tensor). */
int tsd_catalog_set(tsd_catalog *c, const char *name, const uint8_t *packed, size_t len);
/* Engine: copies the names the catalog holds into a new array (*n of them; NULL when none). */
char (*tsd_catalog_names(tsd_catalog *c, int *n))[TS_NAME_MAX];
/* Answers a list or describe request into a new frame: 1 answered, 0 busy (only with
 * wait_if_busy: the engine answers it after the operation), -1 no memory. */
int tsd_catalog_answer(tsd_catalog *c, const Tshard__Request *req, bool wait_if_busy,
                       uint8_t **frame, size_t *len);
/* The table's loop answer of list and describe: from the catalog unless busy. */
int tsd_catalog_loop_answer(const tsd_loop_info *info, const Tshard__Request *req,
                            uint8_t **frame, size_t *len);

typedef struct tsd_shared {
  pthread_mutex_t mu;  /* the loop's stop request */
  tsd_queue work;      /* loop -> engine; the engine sets its wake (a condition variable) */
  tsd_queue replies;   /* engine -> loop; the loop sets its wake (uv_async) */
  tsd_server *server;  /* for the connection count in stats */
  tsd_catalog catalog; /* its own mutex */
  /* Reply nodes kept for when allocating one fails, so that every request is answered and its
   * in-flight slot released even out of memory (tsd_push_reply takes one, the loop gives it
   * back once delivered). */
  pthread_mutex_t spare_mu;
  tsd_reply spare[TSD_SPARE_REPLIES];
  bool spare_used[TSD_SPARE_REPLIES];
} tsd_shared;

void tsd_shared_init(tsd_shared *sh);
void tsd_shared_destroy(tsd_shared *sh);
void tsd_push_work(tsd_shared *sh, tsd_work *w);
/* Gives a delivered reply node back (a spare one to the pool, others freed). */
void tsd_reply_release(tsd_shared *sh, tsd_reply *r);
/* Queues a reply frame and wakes the loop thread (takes ownership of frame). Never drops it: when
 * no node can be allocated a spare one carries it. */
void tsd_push_reply(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len);
/* The same with a descriptor passed on the frame's first byte (takes fd too). */
void tsd_push_reply_fd(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len, int fd,
                       uint64_t req_id);

/* fdpass.c: sends the start of buf with fd attached (SCM_RIGHTS), without blocking; *sent gets
 * the bytes sent (the rest goes by the ordinary stream). Returns 0, or an errno value. */
int tsd_send_fd(int sock, const uint8_t *buf, size_t len, int fd, size_t *sent);

/* server.c */
typedef struct tsd_server_opts {
  const tsd_config *cfg;
  int rank, world_size;
  tsd_shared *shared;
  char socket_path[600];
} tsd_server_opts;
/* Binds the sockets (errors before the thread starts) and starts the loop thread. */
int tsd_server_start(tsd_server_opts *opts, tsd_server **out, ts_error *err);
/* Asks the loop thread to flush replies, close every handle, remove the sockets and return;
 * joins it and frees the server. Accepts NULL. */
void tsd_server_stop(tsd_server **s);
uint64_t tsd_server_connections(tsd_server *s);
/* The table's loop answer of ping. */
int tsd_loop_ping(const tsd_loop_info *info, const Tshard__Request *req, uint8_t **frame,
                  size_t *len);

/* engine.c */
typedef struct tsd_engine_opts {
  const tsd_config *cfg;
  ts_world *world;
  tsd_shared *shared;
} tsd_engine_opts;
/* Runs until a shutdown operation has run on every rank. */
int tsd_engine_run(tsd_engine_opts *opts, ts_error *err);

#endif
