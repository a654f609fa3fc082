/* handlers.h - the handlers of the tensor operations and checkpoints that the engine half of the
 * table (handlers.c) names: ops.c (create, put, get, reshard, drop, list and describe, plan,
 * stats, shutdown, and the run of every collective operation), transfer.c (chunked puts and gets,
 * the client's own memory) and ckpt.c (save, load). Internal to daemon/ops/; the families of
 * their own (einsum.h, program.h) and the put verification (put_verify.h) and the operation log (oplog.h) have theirs. */
#ifndef TSD_OPS_HANDLERS_H
#define TSD_OPS_HANDLERS_H

#include "tsd_ops.h"

/* ops.c */
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
/* Counts an executor run in the per-strategy statistics. */
void tsd_record_exec(tsd_engine *e, const ts_exec_report *rep);

/* batch.c: reshard_many and drop_many, each one collective operation, atomic over its tensors. */
int tsd_run_reshard_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                         ts_error *err);
int tsd_run_drop_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_changes_reshard_many(const Tshard__Request *r, tsd_changes *ch);
void tsd_changes_drop_many(const Tshard__Request *r, tsd_changes *ch);
void tsd_answer_reshard_many(tsd_engine *e, const tsd_pending *w);
/* The checks of a batch against the store, the same on every rank: --batch-max-tensors, every
 * name exists (NOT_FOUND naming it), then --batch-max-bytes over the tensors' whole bytes. */
int tsd_batch_check(tsd_engine *e, size_t n, char *const *names, ts_error *err);
/* A stored tensor's whole bytes (dtype size x elements). */
uint64_t tsd_tensor_bytes(const ts_stored *t);
/* batch_io.c: put_many and get_many, one collective operation each over many whole tensors. */
void tsd_handle_put_many(tsd_engine *e, tsd_work *w);
void tsd_handle_get_many(tsd_engine *e, tsd_work *w);
int tsd_run_put_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_get_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_answer_get_many(tsd_engine *e, const tsd_pending *w);
/* Runs a collective operation on this rank with its row of the table; origin_entry is this
 * rank's submission when it is the origin. The status and message are the answer; a get fills
 * the connection's copy. */
int tsd_run_collective(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin_entry,
                       ts_error *err);
/* The answer to one waiting client after a collective operation ran: the row's answer when it
 * succeeded, else the status and message. */
void tsd_answer_collective(tsd_engine *e, int op_case, const tsd_pending *w, int status,
                           const char *msg);

/* transfer.c: the local handlers of put, put_slice, get (chunks after the first) and get_slice,
 * and the answers of a put and a get (its first chunk, from the gathered copy) after they ran. */
void tsd_handle_put_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_put_slice(tsd_engine *e, tsd_work *w);
void tsd_handle_get_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_get_slice(tsd_engine *e, tsd_work *w);
void tsd_answer_put(tsd_engine *e, const tsd_pending *w);
void tsd_answer_get(tsd_engine *e, const tsd_pending *w);
/* Answers one chunk of the connection's copy cp at offset, in the frame or in the region of the
 * shared segment shm names; frees the copy after its last byte. */
void tsd_serve_chunk(tsd_engine *e, tsd_session *c, const tsd_copy *cp, uint64_t conn_id,
                     uint64_t req_id, uint64_t offset, uint64_t max_bytes,
                     const Tshard__ShmData *shm);
/* A PutResult answer: the bytes received so far, and whether the data is stored. */
void tsd_reply_put(tsd_engine *e, uint64_t conn_id, uint64_t id, uint64_t received, bool done);
/* Whether the client's memory can be read at both ends of its range (TS_NO_DIRECT when the
 * system refuses, TS_INVALID_ARGUMENT when not mapped there, TS_NOT_FOUND when the process is
 * gone), and one copy between it (its byte `at`) and n bytes here. */
int tsd_client_probe(const Tshard__ClientMemory *m, ts_error *err);
int tsd_client_copy(const Tshard__ClientMemory *m, bool write, uint8_t *buf, uint64_t n,
                    ts_error *err);
/* The process a ClientMemory names (pid, uid and start time, set by the loop thread); every copy
 * checks it still is the process that sent the request (ts_comm_proc_pin). */
ts_comm_proc tsd_client_proc(const Tshard__ClientMemory *m);

/* ckpt.c: checkpoint save and load */
int tsd_run_save(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_load(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_changes_load(const Tshard__Request *r, tsd_changes *ch);

#endif
