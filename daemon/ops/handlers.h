/* handlers.h - the handlers of the tensor operations and checkpoints that the engine half of the
 * table (handlers.c) names: ops.c (create, put, get, reshard, drop, list and describe, plan,
 * stats, shutdown, and the run of every collective operation), transfer.c (chunked puts and gets,
 * the client's own memory), ckpt.c (load) and bgsave.c (save, background saves, snapshots).
 * Internal to daemon/ops/; the families of their own (einsum.h, program.h) and the put verification
 * (put_verify.h) and the operation log (oplog.h) have theirs. */
#ifndef TSD_OPS_HANDLERS_H
#define TSD_OPS_HANDLERS_H

#include <time.h>

#include "session.h"
#include "tsd_ops.h"
#include "ts_ckpt.h"

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
/* A put changes no metadata but writes its tensor. */
void tsd_touches_put(const Tshard__Request *r, tsd_changes *ch);
/* Publishes every stored tensor's metadata in the catalog (list, describe). */
void tsd_catalog_publish_all(tsd_engine *e);
/* Finishes what the last collective operation left for after its answer: publishes the catalog
 * entries of the names it changed (busy until then) and writes its log line. Called before the
 * next operation of any kind, on every turn of the engine's loop, and at stop: whether it had
 * anything to do. */
bool tsd_ops_after(tsd_engine *e);
/* resume.c: --resume DIR, before serving (from the engine's start hook, snapdir.c). */
int tsd_resume(tsd_engine *e, ts_error *err);

/* snapdir.c: the snapshot and resume directories, trusted only when they are the daemon's own,
 * and the one order of their snapshots (by recorded sequence). */
typedef struct tsd_snap {
  char name[256];
  int64_t sequence;      /* recorded in its index; 0: none (or unreadable) */
  struct timespec mtime; /* its index.json's: ties only */
} tsd_snap;
/* Named like a snapshot: YYYYmmddTHHMMSS.mmmZ. */
bool tsd_snapshot_named(const char *name);
/* dir (what: the flag, for messages) is a real directory owned by the effective uid, not
 * writable by group or others, below directories owned by root or that uid and not writable by
 * others unless sticky; TS_AUTH naming the directory, its owner and mode otherwise. A missing
 * dir is TS_OK when missing_ok. */
int tsd_snapdir_check(const char *what, const char *dir, bool missing_ok, ts_error *err);
/* The trusted checkpoint subdirectories of dir (only those named like snapshots when
 * snapshots_only), oldest first by sequence (*out malloc'd, *n of them); untrusted ones are
 * skipped and logged once. Fails when dir itself is not trusted. */
int tsd_snapdir_list(const char *what, const char *dir, bool snapshots_only, tsd_snap **out, int *n,
                     ts_error *err);
/* Every entry of the checkpoint directory dir is a trusted regular file (TS_AUTH naming the first
 * that is not). */
int tsd_snapdir_check_files(const char *dir, ts_error *err);
/* The engine's start hook: both directories checked on every rank (agreed), rank 0's highest
 * snapshot sequence found, then the resume. */
int tsd_snapdir_start(tsd_engine *e, ts_error *err);
/* Counts an executor run in the per-strategy statistics. */
void tsd_record_exec(tsd_engine *e, const ts_exec_report *rep);

/* batch.c: reshard_many and drop_many, each one collective operation, atomic over its tensors. */
int tsd_run_reshard_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_drop_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_changes_reshard_many(const Tshard__Request *r, tsd_changes *ch);
void tsd_changes_drop_many(const Tshard__Request *r, tsd_changes *ch);
/* create_many (batch.c), and the item check create shares: whether a create's tensor may be
 * made (*skip: an exist_ok item stored already as asked; *replace: it differs and the batch
 * replaces it), else the error naming every difference. */
int tsd_run_create_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_changes_create_many(const Tshard__Request *r, tsd_changes *ch);
int tsd_create_check(tsd_engine *e, const Tshard__CreateRequest *c, bool replace, ts_dtype *dt,
                     ts_attr **attr, bool *skip, bool *swap, ts_error *err);
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

/* ckpt.c and bgsave.c: save (synchronous or in the background), load, the internal save_finish,
 * their answers (CkptResult), and the background saves' timer, stats and stop. */
int tsd_run_save(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
/* The tensors a save or an export writes (select.c): those starting with prefix, or names (exact,
 * or globs) expanded, *out malloc'd (free it; its strings the request's or the store's); all:
 * *out NULL and *nout 0, every tensor. */
int tsd_select_tensors(ts_store *s, const char *what, char **names, size_t n_names,
                       const char *prefix, bool all, const char ***out, int *nout, ts_error *err);
int tsd_run_load(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
int tsd_run_save_finish(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
void tsd_changes_load(const Tshard__Request *r, tsd_changes *ch);
/* A request's attribute rules (proto/ts_rules.h) parsed: the patterns (the request's strings)
 * and the attributes (NULL where a rule gives none); tsd_rules_free accepts NULL and a zeroed
 * one. */
typedef struct tsd_rules {
  int n;
  const char **patterns;
  ts_attr **attrs;
} tsd_rules;
int tsd_rules_make(Tshard__AttrRule *const *rules, size_t n, tsd_rules *out, ts_error *err);
void tsd_rules_free(tsd_rules *r);
void tsd_answer_ckpt(tsd_engine *e, const tsd_pending *w);
/* The load just run (op) answers its report. */
void tsd_ckpt_answer_load(const tsd_ordered *op, const char *dir, const ts_ckpt_report *rep,
                          double seconds);
/* TSHARD_CKPT_FAIL_RANK / _AFTER / _KILL (ckpt.c): arms the write-failure hook on that rank. */
void tsd_ckpt_arm_fail_hook(int rank);
/* Rank 0: orders the completion of a background save whose writer is done, and the periodic
 * snapshots; true when it ordered something. */
bool tsd_bgsave_tick(tsd_engine *e);
/* ms until the tick has a save_finish to order again or a periodic snapshot to order, or -1:
 * none. */
int64_t tsd_bgsave_due_ms(tsd_engine *e);
/* observe.c: the internal observe operation (the live page's ranks, gathered on rank 0) and
 * rank 0's tick that orders it about once a second while the page is watched. */
int tsd_run_observe(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
bool tsd_observe_tick(tsd_engine *e);
int64_t tsd_observe_due_ms(tsd_engine *e); /* -1: nothing to order */
/* Completes a background save still writing (collective: a shutdown runs it first), waiting for
 * this rank's writer at most --shutdown-save-wait, else abandoning it on every rank. */
int tsd_bgsave_finish_all(tsd_engine *e);
/* The highest snapshot sequence found (at start, or in the resumed checkpoint): the next
 * snapshot records one more. */
void tsd_bgsave_note_sequence(int64_t sequence);
/* The engine stops: waits for the writer and frees the job. */
void tsd_bgsave_stop(void);
/* The saves for stats (at most cap; strings point into this file's records). */
int tsd_bgsave_stats(Tshard__SaveProgress *items, Tshard__SaveProgress **ptrs, int cap);

/* transfer.c: the local handlers of put, put_slice, get (chunks after the first) and get_slice,
 * and the answers of a put and a get (its first chunk, from the gathered copy) after they ran. */
void tsd_handle_put_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_put_slice(tsd_engine *e, tsd_work *w);
void tsd_handle_get_chunk(tsd_engine *e, tsd_work *w);
void tsd_handle_get_slice(tsd_engine *e, tsd_work *w);
void tsd_answer_put(tsd_engine *e, const tsd_pending *w);
void tsd_answer_get(tsd_engine *e, const tsd_pending *w);
/* A gather's first chunk from the connection's gathered copy named copy (NULL: the get's). */
void tsd_answer_gathered(tsd_engine *e, const tsd_pending *w, const char *copy);
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

/* safetensors.c: Hugging Face safetensors import and export */
int tsd_run_import_safetensors(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                               ts_error *err);
int tsd_run_export_safetensors(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                               ts_error *err);
void tsd_changes_import_safetensors(const Tshard__Request *r, tsd_changes *ch);
void tsd_answer_safetensors(tsd_engine *e, const tsd_pending *w);
/* The last answer's names or files are freed when the engine stops (the tensors' kept
 * __metadata__ goes with their store entries). */
void tsd_safetensors_free(void);

#endif
