/* engine.h - the engine's state, shared by engine.c (the thread's loop), sequencer.c (ordering
 * of collective operations by rank 0, idempotency keys, waiting clients: through hooks, it does
 * not see this struct), transfer.c (chunked
 * puts and gets per connection) and ops.c (the handlers). Only the engine thread touches it. */
#ifndef TSD_ENGINE_H
#define TSD_ENGINE_H

#include "daemon.h"
#include "ts_comm.h"
#include "ts_control.h"
#include "sequencer.h"

/* What one connection holds between its requests. */
typedef struct tsd_conn_state {
  struct tsd_conn_state *next;
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
  uint8_t *get_buf;
  uint64_t get_total;
  /* same-node shared memory (shm.c): the segment, whether get_buf lies in it, and the region a
   * whole get asked its answer in */
  struct tsd_shm_seg *shm;
  bool get_in_shm, get_shm_asked;
  uint64_t get_shm_offset, get_shm_bytes;
} tsd_conn_state;

typedef struct tsd_engine {
  const tsd_config *cfg;
  ts_world *world;
  ts_control *ctl;
  ts_store *store;
  tsd_shared *sh;
  int rank, size;
  tsd_conn_state *conns;
  tsd_seq *seq; /* the order of collective operations (sequencer.c) */
  bool stopping;
  struct tsd_shm_seg *shm_segs; /* live shared-memory segments (shm.c) */
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
void *tsd_buf_take(tsd_engine *e, size_t bytes);
void tsd_buf_give(tsd_engine *e, void *p, size_t bytes);
tsd_conn_state *tsd_conn_get(tsd_engine *e, uint64_t conn_id, bool create);
void tsd_conn_free(tsd_engine *e, uint64_t conn_id);
void tsd_conn_put_reset(tsd_engine *e, tsd_conn_state *c);
void tsd_conn_get_reset(tsd_engine *e, tsd_conn_state *c);
/* The table's local handlers of put, put_slice, get (chunks after the first) and get_slice, and
 * the answers of a put and a get (its first chunk, from the gathered copy) after they ran. */
void tsd_handle_put_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_put_slice(tsd_engine *e, tsd_work *w);
void tsd_handle_get_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_get_slice(tsd_engine *e, tsd_work *w);
void tsd_answer_put(tsd_engine *e, const tsd_pending *w);
void tsd_answer_get(tsd_engine *e, const tsd_pending *w);

/* engine.c: hands a validated collective request to the sequencer (see tsd_seq_submit). */
void tsd_submit(tsd_engine *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                uint64_t staging_bytes);

/* scatter.c: whole-tensor put (root -> slices, written in place) or get (slices -> root) for
 * attributes without partial placements. Collective over the world. */
bool tsd_attr_has_partial(const ts_attr *a);
int tsd_scatter_gather(tsd_engine *e, ts_stored *t, int root, void *whole, bool put,
                       ts_error *err);

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
void tsd_changes_create(const Tshard__Request *r, const char **name, const char **other,
                        bool *names);
void tsd_changes_drop(const Tshard__Request *r, const char **name, const char **other,
                      bool *names);
void tsd_changes_reshard(const Tshard__Request *r, const char **name, const char **other,
                         bool *names);
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
