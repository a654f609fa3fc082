/* tsd_engine.h - the engine of tshardd (libtsdengine, daemon/engine/): the thread that alone
 * calls MPI. engine.c runs its loop and the hand-over with the loop thread (queue.c: work in,
 * replies out); sequencer.c orders collective operations and keeps the idempotency keys
 * (keys.c), through hooks, apart from MPI (sequencer.h). The operations themselves are not
 * here, nor what they keep for each connection (a staged put, a copy being read, a shared
 * segment: ops/session.c, ops/shm.c, carried as an opaque pointer): the operations layer
 * (daemon/ops/) gives the engine its entry points (tsd_engine_ops) when it starts, and uses
 * what this header declares. It includes the wire layer and tsd_base.h; the engine thread alone
 * touches tsd_engine. */
#ifndef TSD_ENGINE_H
#define TSD_ENGINE_H

#include <pthread.h>

#include "sequencer.h"
#include "tsd_base.h"
#include "tsd_wire.h"
#include "ts_comm.h"
#include "ts_control.h"
#include "ts_shard.h"

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
/* The same without waking the consumer (it takes the node at its next wake-up). */
void tsd_queue_push_quiet(tsd_queue *q, tsd_qnode *n);
/* Calls the consumer's wake callback. */
void tsd_queue_wake(tsd_queue *q);
/* Takes every node, in order (linked by next). */
tsd_qnode *tsd_queue_take_all(tsd_queue *q);
bool tsd_queue_empty(tsd_queue *q);

typedef struct tsd_work {
  tsd_qnode node; /* first: queued in tsd_shared.work */
  uint64_t conn_id;
  bool conn_closed;     /* notice: the connection is gone, free what it held */
  bool signal_shutdown; /* notice: SIGTERM/SIGINT */
  Tshard__Request *req; /* owned */
  tsd_scope scope;
  int64_t t_recv_ns; /* when it was handed to the engine (ts_wait_now_ns; the trace; 0
                      * when tracing is off) */
} tsd_work;

#define TSD_SPARE_REPLIES 16
/* Buckets of the outlet table, and the largest answer the engine writes itself (outlet.c). */
#define TSD_OUTLET_BUCKETS 64
#define TSD_OUTLET_MAX 16384

typedef struct tsd_reply {
  tsd_qnode node; /* first: queued in tsd_shared.replies */
  uint64_t conn_id;
  uint8_t *frame; /* owned, header included */
  size_t len;
  int fd;          /* -1, or a descriptor to pass with the frame (SCM_RIGHTS), owned */
  uint64_t req_id; /* the request answered */
  /* No frame: the answer could not be built (no memory); the loop thread answers lost_status
   * with lost_reason (a static string) itself, or closes the connection saying why. */
  int lost_status;
  const char *lost_reason;
  bool spare;     /* one of tsd_shared's spare nodes: given back, not freed */
  bool delivered; /* the engine wrote the answer itself (outlet.c): accounting only */
  bool counted;   /* counted in its connection's outlet as queued (outlet.c) */
} tsd_reply;

/* The hand-over between the two threads. The engine only carries the catalog
 * (catalog/catalog.c), for the operations, which publish it, and the loop thread, which answers
 * list and describe from it. */
struct tsd_catalog;
typedef struct tsd_shared {
  pthread_mutex_t mu;          /* the loop's stop request */
  tsd_queue work;              /* loop -> engine; the engine sets its wake (a condition variable) */
  tsd_queue replies;           /* engine -> loop; the loop sets its wake (uv_async) */
  struct tsd_catalog *catalog; /* its own mutex; set by main.c */
  /* The open connections: kept by the loop thread as they open and close, read by stats
   * (relaxed). */
  _Atomic uint64_t connections;
  /* Reply nodes kept for when allocating one fails, so that every request is answered and its
   * in-flight slot released even out of memory (tsd_push_reply takes one, the loop gives it
   * back once delivered). */
  pthread_mutex_t spare_mu;
  tsd_reply spare[TSD_SPARE_REPLIES];
  bool spare_used[TSD_SPARE_REPLIES];
  /* The connections the engine may answer itself (outlet.c), by connection id. */
  pthread_mutex_t outlets_mu;
  struct tsd_outlet *outlets[TSD_OUTLET_BUCKETS];
  /* SIGTERM or SIGINT arrived (set by the loop thread): an engine waiting for a background
   * save's writer bounds its wait from then on (ops/bgsave.c). */
  _Atomic bool stop_signalled;
  /* The trace ring is on (--trace-ring > 0): work is stamped with the time it was handed over.
   * Set by the engine before serving starts, read-only after. */
  bool stamp_times;
} tsd_shared;

/* Outlets (outlet.c): the engine writes an answer of at most TSD_OUTLET_MAX bytes to its
 * client's Unix socket itself when neither the loop thread nor an earlier queued answer is in the
 * way, and queues a notice that the loop takes at its next wake-up for the accounting.
 *
 * The loop thread's side: tsd_outlet_open registers a connection's socket (NULL: no memory, the
 * answers then all go through the loop); tsd_outlet_shut stops direct answers and unregisters it
 * (accepts NULL, sets *o to NULL) when the connection starts closing. Around each frame it hands
 * to libuv: tsd_outlet_write_begin (counted: an engine answer the outlet counted as queued) before,
 * tsd_outlet_write_handed right after, tsd_outlet_write_done when libuv is done with it;
 * tsd_outlet_uncount for a counted answer dropped unwritten; tsd_outlet_set_paused when it stops
 * or resumes reading the connection. All accept NULL.
 * The engine's side: tsd_outlet_answer (from tsd_push_reply) writes r's frame and queues r as a
 * delivered notice (true), or marks r counted when the connection has an outlet (false: the
 * caller queues r as before). */
typedef struct tsd_outlet tsd_outlet;
tsd_outlet *tsd_outlet_open(tsd_shared *sh, uint64_t conn_id, int fd);
void tsd_outlet_shut(tsd_shared *sh, tsd_outlet **o);
void tsd_outlet_write_begin(tsd_outlet *o, bool counted);
void tsd_outlet_write_handed(tsd_outlet *o);
void tsd_outlet_write_done(tsd_outlet *o);
void tsd_outlet_uncount(tsd_outlet *o);
void tsd_outlet_set_paused(tsd_shared *sh, tsd_outlet *o, bool paused);
bool tsd_outlet_answer(tsd_shared *sh, tsd_reply *r);
/* Frees the outlets still registered (at the end, after the loop thread stopped). */
void tsd_outlets_free(tsd_shared *sh);

void tsd_shared_init(tsd_shared *sh);
void tsd_shared_destroy(tsd_shared *sh);
void tsd_push_work(tsd_shared *sh, tsd_work *w);
/* Gives a delivered reply node back (a spare one to the pool, others freed). */
void tsd_reply_release(tsd_shared *sh, tsd_reply *r);
/* Queues a reply frame (the answer to request req_id) and wakes the loop thread (takes ownership
 * of frame). Never drops it: when no node can be allocated a spare one carries it. */
void tsd_push_reply(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len, uint64_t req_id);
/* The same with a descriptor passed on the frame's first byte (takes fd too). */
void tsd_push_reply_fd(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len, int fd,
                       uint64_t req_id);

typedef struct tsd_engine {
  const tsd_config *cfg;
  ts_world *world;
  ts_control *ctl;
  ts_store *store;
  tsd_shared *sh;
  pthread_mutex_t wake_mu; /* the engine waits on wake when idle; the work queue signals it */
  pthread_cond_t wake;
  bool bells; /* every rank has a doorbell on this node: waits block until rung (ts_comm.h) */
  int rank, size;
  tsd_seq *seq;            /* the order of collective operations (sequencer.c) */
  struct tsd_order *order; /* connections' requests held behind their collectives (order.c) */
  bool stopping;
  int64_t work_recv_ns; /* the work item handled now: when it was handed over (0: none) */
  int64_t clock_offset_ns, clock_rtt_ns; /* this rank's clock against rank 0's (ts_comm.h) */
  /* the operations' state of the connections, opaque here: every connection's session
   * (ops/session.c) and every live shared segment (ops/shm.c) */
  struct tsd_session *sessions;
  struct tsd_shm_seg *shm_segs;
  const struct tsd_engine_ops *ops; /* the operations layer's entry points (below) */
  struct tsd_einsum_state *einsum;  /* the operations' einsum records (ops/einsum.c), opaque here */
  /* stats */
  uint64_t ops_answered;
  int answering; /* the op_case whose answers go out now (counted by kind and status) */
  uint64_t strat_runs[TS_STRATEGY_COUNT], strat_sent[TS_STRATEGY_COUNT],
      strat_recv[TS_STRATEGY_COUNT], strat_relayed[TS_STRATEGY_COUNT];
} tsd_engine;

/* ---------------------------------------------------------------------------------------------
 * The operations the engine runs, given by the operations layer (daemon/ops/: its engine half of
 * the table of operations, indexed by op case like the wire half) when the engine starts. The
 * handlers' types: */
/* Engine, this rank at once: answers the request itself (may take w->req). */
typedef void (*tsd_local_fn)(tsd_engine *e, tsd_work *w);
/* Engine, every rank in rank 0's order: returns the status agreed by every rank. */
typedef int (*tsd_collective_fn)(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                                 ts_error *err);
/* The names a collective operation may change (see tsd_changes). */
typedef void (*tsd_changes_fn)(const Tshard__Request *req, tsd_changes *ch);
/* The answer to one waiting client after a collective operation succeeded (NULL: status only). */
typedef void (*tsd_answer_fn)(tsd_engine *e, const tsd_pending *w);

/* The entry points, all called on the engine thread. */
typedef struct tsd_engine_ops {
  /* A LOCAL or CATALOG request (and a get's later chunks): answers it. */
  tsd_local_fn run_local;
  /* A collective operation in rank 0's order (the sequencer's run hook); origin is this rank's
   * submission when it is the origin. The status and message are the answer. */
  tsd_collective_fn run_collective;
  /* The answer to one waiting client after a collective operation ran (the sequencer's answer
   * hook): the operation's answer when it succeeded, else the status and message. */
  void (*answer)(tsd_engine *e, int op_case, const tsd_pending *w, int status, const char *msg);
  /* The names an operation touches, for its idempotency key: those it may change, and those
   * whose data it writes without changing their metadata (a put's tensor); nothing added when
   * none. */
  tsd_changes_fn key_names;
  /* A connection closed: frees what the operations keep for it (its session: a staged put, a
   * copy being read, its shared segment). */
  void (*conn_closed)(tsd_engine *e, uint64_t conn_id);
  /* Frees the data of a submitted put that will not run (the sequencer's release hook): a
   * reference to a shared segment, or a staging buffer. */
  void (*staging_give)(tsd_engine *e, uint8_t *p, uint64_t bytes);
  /* The engine stops: frees what the operations keep (einsum records, compiled programs, the
   * connections' sessions). */
  void (*stop)(tsd_engine *e);
  /* Every turn of the engine's loop (NULL: none): work of the operations' own (rank 0 orders
   * the completion of background saves and the periodic snapshots); true when it did some. */
  bool (*tick)(tsd_engine *e);
  /* ms until the tick has work on the clock (NULL or -1: none): the idle engine wakes by then.
   * Work that comes from elsewhere (a writer thread's end) rings the engine instead. */
  int64_t (*tick_due_ms)(tsd_engine *e);
  /* Before the loop and before any client is served (NULL: none): collective, the same status
   * and message on every rank; a failure stops the engine (the resume of --resume). */
  int (*start)(tsd_engine *e, ts_error *err);
} tsd_engine_ops;

/* engine.c */
void tsd_reply_response(tsd_engine *e, uint64_t conn_id, Tshard__Response *resp);
void tsd_reply_status(tsd_engine *e, uint64_t conn_id, uint64_t req_id, int status,
                      const char *msg);
/* Whether `extra` more bytes fit the memory limit: the buffer pool's one account (stored slices,
 * put staging, get copies, executor staging; cached buffers give way when the allocation comes). */
int tsd_memory_check(tsd_engine *e, uint64_t extra, const char *what, ts_error *err);
/* engine.c: hands a validated collective request to the sequencer (see tsd_seq_submit). */
void tsd_submit(tsd_engine *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                uint64_t staging_bytes);

/* order.c: a connection's requests run in the order it sent them. tsd_order_hold keeps w (true)
 * when the connection has requests held, or collectives pending and w is not one;
 * tsd_order_submitted and tsd_order_answered count its collectives; tsd_order_release runs the held
 * requests of the connections with none pending (returns how many); tsd_order_drop frees a
 * connection's held requests (answering SHUTDOWN when asked), tsd_order_drop_all every
 * connection's, answered. */
typedef struct tsd_order tsd_order;
bool tsd_order_hold(tsd_engine *e, tsd_work *w);
int tsd_order_submitted(tsd_engine *e, uint64_t conn_id, ts_error *err);
void tsd_order_answered(tsd_engine *e, uint64_t conn_id);
int tsd_order_release(tsd_engine *e, void (*run)(tsd_engine *, tsd_work *));
void tsd_order_drop(tsd_engine *e, uint64_t conn_id, bool answer_shutdown);
void tsd_order_drop_all(tsd_engine *e);

/* engine.c */
typedef struct tsd_engine_opts {
  const tsd_config *cfg;
  ts_world *world;
  tsd_shared *shared;
  const tsd_engine_ops *ops; /* the operations layer's entry points */
  /* Starts serving clients, once the operations' start ran (collective: every rank serves or
   * none; NULL: nothing to start). */
  int (*serve)(void *ctx, ts_error *err);
  void *serve_ctx;
} tsd_engine_opts;
/* Runs until a shutdown operation has run on every rank. */
int tsd_engine_run(tsd_engine_opts *opts, ts_error *err);

#endif
