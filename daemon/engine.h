/* engine.h - the engine's state, shared by engine.c (the thread's loop), sequencer.c (ordering
 * of collective operations by rank 0, idempotency keys, waiting clients: through hooks, it does
 * not see this struct), session.c (each connection's state), transfer.c (chunked puts and gets
 * per connection), shm.c (shared segments) and ops.c (the handlers). Only the engine thread
 * touches it. */
#ifndef TSD_ENGINE_H
#define TSD_ENGINE_H

#include "daemon.h"
#include "ts_comm.h"
#include "ts_control.h"
#include "sequencer.h"

typedef struct tsd_session tsd_session; /* session.c: what one connection holds */
typedef struct tsd_shm_seg tsd_shm_seg;  /* shm.c */

typedef struct tsd_engine {
  const tsd_config *cfg;
  ts_world *world;
  ts_control *ctl;
  ts_store *store;
  tsd_shared *sh;
  pthread_mutex_t wake_mu; /* the engine waits on wake when idle; the work queue signals it */
  pthread_cond_t wake;
  int rank, size;
  tsd_session *sessions; /* session.c */
  tsd_seq *seq; /* the order of collective operations (sequencer.c) */
  bool stopping;
  struct tsd_shm_seg *shm_segs; /* live shared-memory segments (shm.c) */
  struct tsd_einsum_state *einsum; /* distributed einsum: the forwards' records (einsum.c) */
  /* stats */
  uint64_t ops_answered;
  uint64_t strat_runs[TS_STRATEGY_COUNT], strat_sent[TS_STRATEGY_COUNT],
      strat_recv[TS_STRATEGY_COUNT];
} tsd_engine;

/* engine.c */
void tsd_reply_response(tsd_engine *e, uint64_t conn_id, Tshard__Response *resp);
void tsd_reply_status(tsd_engine *e, uint64_t conn_id, uint64_t req_id, int status,
                      const char *msg);
/* Whether `extra` more bytes fit the memory limit: the buffer pool's one account (stored slices,
 * put staging, get copies, executor staging; cached buffers give way when the allocation comes). */
int tsd_memory_check(tsd_engine *e, uint64_t extra, const char *what, ts_error *err);

/* transfer.c */
/* Whole-tensor buffers (put staging, gathered copies): staging buffers of the pool, which keeps
 * freed ones for the next transfer of their size class, so repeated transfers do not fault in
 * fresh pages. tsd_buf_give accepts NULL. */
/* tsd_buf_take checks the memory limit as it allocates: NULL with err (TS_LIMIT or
 * TS_NO_MEMORY, naming `what`) when the buffer cannot be had. */
void *tsd_buf_take(tsd_engine *e, size_t bytes, const char *what, ts_error *err);
void tsd_buf_give(tsd_engine *e, void *p, size_t bytes);
/* The table's local handlers of put, put_slice, get (chunks after the first) and get_slice, and
 * the answers of a put and a get (its first chunk, from the gathered copy) after they ran. */
void tsd_handle_put_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_put_slice(tsd_engine *e, tsd_work *w);
void tsd_handle_get_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_get_slice(tsd_engine *e, tsd_work *w);
void tsd_answer_put(tsd_engine *e, const tsd_pending *w);
void tsd_answer_get(tsd_engine *e, const tsd_pending *w);

/* session.c: a connection's state, created on first use and freed with the connection. */
tsd_session *tsd_session_get(tsd_engine *e, uint64_t conn_id, bool create);
void tsd_session_free(tsd_engine *e, uint64_t conn_id);
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
int tsd_session_put_stage(tsd_engine *e, tsd_session *s, const tsd_put_target *t,
                          uint64_t offset, uint64_t total, const uint8_t *data, size_t len,
                          ts_error *err);
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
void tsd_session_copy_set(tsd_engine *e, tsd_session *s, const char *name, bool slice,
                          uint8_t *buf, uint64_t total, bool in_shm);
/* The copy of `name` (NULL: any name) of that kind, or NULL. s may be NULL. */
const tsd_copy *tsd_session_copy(const tsd_session *s, const char *name, bool slice);
/* The whole tensor `name` (total bytes) was written into the client's memory: frees any copy;
 * the get's answer then says so. */
void tsd_session_copy_direct(tsd_engine *e, tsd_session *s, const char *name, uint64_t total);
/* transfer.c: whether the client's memory can be read at both ends of its range (TS_NO_DIRECT
 * when the system refuses, TS_INVALID_ARGUMENT when not mapped there, TS_NOT_FOUND when the
 * process is gone), and one copy between it (its byte `at`) and n bytes here. */
int tsd_client_probe(const Tshard__ClientMemory *m, ts_error *err);
int tsd_client_copy(const Tshard__ClientMemory *m, bool write, uint8_t *buf, uint64_t n,
                    ts_error *err);
/* The process a ClientMemory names (pid, uid and start time, set by the loop thread); every copy
 * checks it still is the process that sent the request (ts_comm_proc_pin). */
ts_comm_proc tsd_client_proc(const Tshard__ClientMemory *m);
void tsd_session_copy_reset(tsd_engine *e, tsd_session *s);
/* The connection's shared segment (shm.c); setting one releases the previous. */
tsd_shm_seg *tsd_session_shm(const tsd_session *s);
void tsd_session_set_shm(tsd_engine *e, tsd_session *s, tsd_shm_seg *seg);
/* The region a whole get asked its answer in (NULL: none), kept for its answer. */
void tsd_session_set_get_region(tsd_session *s, const Tshard__ShmData *d);
const Tshard__ShmData *tsd_session_get_region(const tsd_session *s, Tshard__ShmData *sd);

/* engine.c: hands a validated collective request to the sequencer (see tsd_seq_submit). */
void tsd_submit(tsd_engine *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                uint64_t staging_bytes);

/* ops.c: the handlers the table of operations (optable.c) names */
void tsd_op_catalog(tsd_engine *e, tsd_work *w);
void tsd_op_plan(tsd_engine *e, tsd_work *w);
void tsd_op_stats(tsd_engine *e, tsd_work *w);
int tsd_run_create(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_put(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_get(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_reshard(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_drop(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_shutdown(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_changes_create(const Tshard__Request *r, tsd_changes *ch);
void tsd_changes_drop(const Tshard__Request *r, tsd_changes *ch);
void tsd_changes_reshard(const Tshard__Request *r, tsd_changes *ch);
/* ckpt.c: checkpoint save and load */
int tsd_run_save(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_load(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_changes_load(const Tshard__Request *r, tsd_changes *ch);
/* Runs a collective operation on this rank with its table entry; origin_entry is this rank's
 * submission when it is the origin. The status and message are the answer; a get fills the
 * connection's copy. */
int tsd_run_collective(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin_entry,
                       ts_error *err);
/* The answer to one waiting client after a collective operation ran: the entry's answer when it
 * succeeded, else the status and message. */
void tsd_answer_collective(tsd_engine *e, int op_case, const tsd_pending *w, int status,
                           const char *msg);

#endif
