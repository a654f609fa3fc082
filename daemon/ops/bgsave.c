/* bgsave.c - background saves and snapshots: the save operation itself (synchronous or in the
 * background), the internal save_finish operation, the snapshot timer and the saves shown by
 * stats. The checkpoint work is shard/ckpt/ (ts_ckpt_save, and ckpt_async.c's three steps).
 *
 * A background save (SaveRequest.background, or a snapshot) runs in rank 0's order like any
 * save: every rank takes its copy of the pieces it writes (ts_ckpt_save_begin, collective), the
 * clients are answered (CkptResult, writing), and a writer thread per daemon writes the files
 * (no MPI) while the engine goes on with other operations. When rank 0's writer is done, rank
 * 0 orders save_finish (an internal operation, refused from clients); every rank runs it in
 * order and says whether its own writer is done. When every writer is, ts_ckpt_save_end agrees
 * and moves the checkpoint into place (or removes the temporary directory); else nothing
 * changes, the engines go on, and rank 0 orders save_finish again later (FINISH_RETRY_*: a
 * slow writer on one rank never holds the other ranks' operations). One background save writes at a
 * time: a save (of any kind, to any directory) or a shutdown ordered while one writes first
 * completes it (waiting for its files), then runs. The outcome of each, with its progress while
 * writing, is kept for stats (the last TSD_SAVES_KEPT) and logged.
 *
 * Stopping (a shutdown request, or SIGTERM/SIGINT, which every rank of an mpirun job receives,
 * at slightly different times): the shutdown runs in rank 0's order on every rank and first
 * completes the save writing, each rank waiting for its writer at most --shutdown-save-wait
 * from the moment it runs the shutdown (or, when it waits for its writer in an earlier save or
 * save_finish, from the moment it noticed the signal). A writer not done by then is cancelled
 * (it stops before its next piece; TSD_CANCEL_GRACE_MS more for it to return) and that rank
 * brings TS_SHUTDOWN to the save's agreement, so every rank reaches the same outcome: complete
 * and moved into place, or abandoned with the temporary directory removed by the leader and
 * the previous checkpoint as it was. Either is logged on every rank, and the leader logs that
 * the temporary directory was removed (or names it when it could not be). A writer that does not
 * return even then (a write stuck in the kernel) is left running and its job never freed.
 *
 * Snapshots (--snapshot-dir, --snapshot-every, --snapshot-keep): rank 0 orders a background save
 * of every tensor into <snapshot dir>/<UTC timestamp>/ every period (skipped while a save still
 * writes), or a client asks one (SaveRequest.snapshot); after each complete snapshot rank 0
 * removes the oldest complete ones beyond --snapshot-keep. Each snapshot records its sequence
 * number in its index (one more than the highest rank 0 knows: found in --snapshot-dir and the
 * resumed checkpoint at start, then each snapshot's), and that number alone orders the pruning
 * and the resume (snapdir.c, which also decides which entries are trusted). All of this state
 * is the engine thread's, except the writer's progress (atomic, in the job) and the writer's
 * control (writer_ctl, under bg.mu). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "handlers.h"
#include "ts_ckpt.h"

#define TSD_SAVES_KEPT 8
/* How long a cancelled writer has to return (it stops before its next piece, at most one
 * chunk of --ckpt-chunk away) before the save is ended without it. */
#define TSD_CANCEL_GRACE_MS 5000
/* How soon rank 0 asks again when a save_finish found a writer still busy: the first retry,
 * doubling up to the last. */
#define FINISH_RETRY_FIRST_MS 10
#define FINISH_RETRY_MAX_MS 1000
enum { SAVE_WRITING, SAVE_DONE, SAVE_FAILED };
/* The save-hold and save-stuck faults (TSHARD_FAULT): the writer waits after its first piece
 * until the daemon stops (then completes in time), or until it is cancelled. */
enum { HOLD_NONE, HOLD_UNTIL_STOP, HOLD_UNTIL_CANCEL };

/* One writer thread and what the engine and it tell each other (under bg.mu, but written: also
 * read by the tick without the lock). Freed with its job, never while the thread runs. */
typedef struct writer_ctl {
  ts_ckpt_job *job;
  atomic_bool written; /* ts_ckpt_job_write returned */
  int hold;            /* HOLD_*: the fault, taken by the first piece */
  bool released, cancelled;
  ts_world *world; /* the writer rings this rank's engine when it is done (doorbells) */
  int rank;
} writer_ctl;
static const char *const state_names[] = {"writing", "done", "failed"};

typedef struct save_record {
  uint64_t id;
  char dir[4096];
  int state, status;
  char message[sizeof(((ts_error *)0)->msg)];
  int64_t start_ms, end_ms;
  ts_ckpt_progress progress; /* at the end (while writing: the job's) */
} save_record;

static struct {
  save_record rec[TSD_SAVES_KEPT]; /* oldest first */
  int n;
  ts_ckpt_job *job; /* the save writing, with its thread */
  writer_ctl *wr;
  pthread_t thread;
  bool threaded; /* false: the job was written on the engine (no thread could be made) */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC; a writer done, released or cancelled */
  bool finish_ordered, snapshot;
  int64_t finish_retry_ms;   /* rank 0: when to order save_finish again (0: once written) */
  int64_t finish_backoff_ms; /* the wait before that retry */
  uint64_t job_id;
  int64_t next_snapshot_ms;
  int64_t sequence; /* the highest snapshot sequence known (rank 0's counts) */
  /* the last save's or load's answer, for its clients (by the operation's hash) */
  bool last_valid;
  uint64_t last_hash;
  Tshard__CkptResult last;
  char last_dir[4096];
} bg;

static pthread_once_t sync_once = PTHREAD_ONCE_INIT;
static void sync_init(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&bg.cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&bg.mu, NULL);
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static save_record *record_new(uint64_t id, const char *dir) {
  if (bg.n == TSD_SAVES_KEPT) {
    memmove(&bg.rec[0], &bg.rec[1], sizeof bg.rec[0] * (TSD_SAVES_KEPT - 1));
    bg.n--;
  }
  save_record *r = &bg.rec[bg.n++];
  memset(r, 0, sizeof *r);
  r->id = id;
  snprintf(r->dir, sizeof r->dir, "%s", dir);
  r->start_ms = now_ms();
  return r;
}

static save_record *record_find(uint64_t id) {
  for (int i = 0; i < bg.n; i++)
    if (bg.rec[i].id == id)
      return &bg.rec[i];
  return NULL;
}

/* The answer of the operation just run (seconds on this rank). */
static void set_answer(const tsd_ordered *op, const char *dir, int tensors, int64_t bytes,
                       int files, double seconds, bool writing) {
  tshard__ckpt_result__init(&bg.last);
  snprintf(bg.last_dir, sizeof bg.last_dir, "%s", dir);
  bg.last.dir = bg.last_dir;
  bg.last.tensors = (uint32_t)tensors;
  bg.last.bytes = (uint64_t)bytes;
  bg.last.files = (uint32_t)files;
  bg.last.seconds = seconds;
  bg.last.writing = writing;
  bg.last.save_id = writing ? op->seq : 0;
  bg.last_hash = op->hash;
  bg.last_valid = true;
}

void tsd_answer_ckpt(tsd_engine *e, const tsd_pending *w) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  r.id = w->req_id;
  r.message = "";
  if (bg.last_valid && bg.last_hash == w->hash) { /* else: a retry answered by its key */
    r.result_case = TSHARD__RESPONSE__RESULT_CKPT;
    r.ckpt = &bg.last;
  }
  tsd_reply_response(e, w->conn_id, &r);
}

/* Removes the complete snapshots of the snapshot directory beyond the newest `keep` (rank 0,
 * after a snapshot): trusted directories named like snapshots only, the oldest by their
 * recorded sequence first (snapdir.c); untrusted ones are skipped, logged, never removed. */
static void prune_snapshots(const tsd_config *cfg) {
  tsd_snap *v = NULL;
  int n = 0;
  ts_error err;
  if (tsd_snapdir_list("--snapshot-dir", cfg->snapshot_dir, true, &v, &n, &err) != TS_OK) {
    TSD_LOG(TSD_LOG_WARN, "snapshots not pruned: %s", err.msg);
    return;
  }
  for (int i = 0; i + cfg->snapshot_keep < (int64_t)n; i++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", cfg->snapshot_dir, v[i].name);
    if (ts_ckpt_remove(path, &err) == TS_OK)
      TSD_LOG(TSD_LOG_INFO, "snapshot '%s' (sequence %lld) removed (--snapshot-keep %lld)", path,
              (long long)v[i].sequence, (long long)cfg->snapshot_keep);
    else
      TSD_LOG(TSD_LOG_WARN, "snapshot '%s' not removed: %s", path, err.msg);
  }
  free(v);
}

void tsd_bgsave_note_sequence(int64_t sequence) {
  if (sequence > bg.sequence)
    bg.sequence = sequence;
}

/* The writer thread's end: the engine waiting for it, and its doorbell, are told. */
static void writer_done(writer_ctl *w) {
  pthread_mutex_lock(&bg.mu);
  atomic_store(&w->written, true);
  pthread_cond_broadcast(&bg.cv);
  pthread_mutex_unlock(&bg.mu);
  ts_world_bell_ring(w->world, w->rank); /* the engine's tick sees it now, not at its next nap */
}

/* The save-hold and save-stuck faults, after the writer's first piece. */
static void hold_writer(void *arg) {
  writer_ctl *w = arg;
  pthread_mutex_lock(&bg.mu);
  int hold = w->hold;
  w->hold = HOLD_NONE;
  while (hold != HOLD_NONE && !w->cancelled && !(hold == HOLD_UNTIL_STOP && w->released))
    pthread_cond_wait(&bg.cv, &bg.mu);
  pthread_mutex_unlock(&bg.mu);
}

/* Waits up to ms (< 0: without end) for the writer, under bg.mu; whether it returned. */
static bool wait_locked(writer_ctl *w, int64_t ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += (time_t)(ms / 1000);
  t.tv_nsec += (long)(ms % 1000) * 1000000;
  if (t.tv_nsec >= 1000000000)
    t.tv_sec++, t.tv_nsec -= 1000000000;
  while (!atomic_load(&w->written))
    if (ms < 0 ? pthread_cond_wait(&bg.cv, &bg.mu) != 0
               : pthread_cond_timedwait(&bg.cv, &bg.mu, &t) == ETIMEDOUT)
      break;
  return atomic_load(&w->written);
}

/* Waits for this rank's writer: without end, unless the daemon is stopping (the shutdown runs)
 * or a signal arrived meanwhile; then at most --shutdown-save-wait from that moment, a held
 * writer released. A writer not done by then is cancelled and given TSD_CANCEL_GRACE_MS to
 * return. Whether it returned. */
static bool wait_writer(tsd_engine *e, bool stopping) {
  writer_ctl *w = bg.wr;
  int64_t deadline = -1;
  pthread_mutex_lock(&bg.mu);
  for (;;) {
    if (deadline < 0 && (stopping || atomic_load(&e->sh->stop_signalled))) {
      deadline = now_ms() + e->cfg->shutdown_save_wait;
      w->released = true;
      pthread_cond_broadcast(&bg.cv);
    }
    int64_t left = deadline < 0 ? 100 : deadline - now_ms(); /* 100 ms: to notice a signal */
    if (left <= 0 || wait_locked(w, deadline < 0 || left > 100 ? 100 : left))
      break;
  }
  bool done = atomic_load(&w->written);
  if (!done) {
    w->cancelled = true;
    ts_ckpt_job_cancel(w->job);
    pthread_cond_broadcast(&bg.cv);
  }
  pthread_mutex_unlock(&bg.mu);
  if (done)
    return true;
  ts_ckpt_progress p;
  ts_ckpt_job_progress(w->job, &p);
  TSD_LOG(TSD_LOG_WARN,
          "stopping: background save %llu still writing after --shutdown-save-wait "
          "%.3f s (%lld of %lld bytes written here): abandoning it",
          (unsigned long long)bg.job_id, (double)e->cfg->shutdown_save_wait / 1000.0,
          (long long)p.written, (long long)p.total);
  pthread_mutex_lock(&bg.mu);
  done = wait_locked(w, TSD_CANCEL_GRACE_MS);
  pthread_mutex_unlock(&bg.mu);
  if (!done)
    TSD_LOG(TSD_LOG_ERROR,
            "background save %llu: its writer did not return within %d s of being "
            "cancelled (a write that does not end); the save is abandoned without it",
            (unsigned long long)bg.job_id, TSD_CANCEL_GRACE_MS / 1000);
  return done;
}

/* The temporary directory of a save that did not complete, on the rank that made it: removed
 * (said), or left (named, with what to do). */
static void log_tmp_left(uint64_t id, const char *tmp) {
  struct stat st;
  if (!tmp[0])
    return;
  if (lstat(tmp, &st) != 0 && errno == ENOENT)
    TSD_LOG(TSD_LOG_INFO, "background save %llu: its temporary directory '%s' was removed",
            (unsigned long long)id, tmp);
  else
    TSD_LOG(TSD_LOG_ERROR,
            "background save %llu: its temporary directory '%s' could not be "
            "removed; nothing in it is a checkpoint: delete it",
            (unsigned long long)id, tmp);
}

/* The save writing's progress for the metrics endpoint (counters.c), every turn of the engine. */
static void publish_progress(void) {
  if (!bg.job)
    return;
  ts_ckpt_progress pr;
  ts_ckpt_job_progress(bg.job, &pr);
  tsd_gauge_set(TSD_G_SAVE_WRITING, 1);
  tsd_gauge_set(TSD_G_SAVE_WRITTEN, (uint64_t)pr.written);
  tsd_gauge_set(TSD_G_SAVE_TOTAL, (uint64_t)pr.total);
}

/* A background save ended (ok: complete, with bytes_written here): the metrics' counts. */
static void publish_outcome(bool ok, int64_t bytes_written) {
  tsd_gauge_set(TSD_G_SAVE_WRITING, 0);
  tsd_gauge_add(ok ? TSD_G_SAVES_DONE : TSD_G_SAVES_FAILED, 1);
  if (!ok)
    return;
  tsd_gauge_add(TSD_G_SAVED_BYTES, bytes_written);
  tsd_gauge_set(TSD_G_SAVE_WRITTEN, (uint64_t)bytes_written);
  if (bg.snapshot) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    tsd_gauge_set(TSD_G_SNAPSHOT_MS, (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
  }
}

/* The outcome of a background save: recorded for stats and the metrics, and logged. */
static void record_outcome(save_record *r, int rc, const ts_error *err, const ts_ckpt_report *rep,
                           const char *tmp) {
  const char *dir = r ? r->dir : "?";
  if (r) {
    ts_ckpt_job_progress(bg.job, &r->progress);
    r->end_ms = now_ms();
    r->state = rc ? SAVE_FAILED : SAVE_DONE;
    r->status = rc;
    snprintf(r->message, sizeof r->message, "%s", rc ? err->msg : "");
  }
  publish_outcome(rc == TS_OK, rc == TS_OK ? rep->bytes_written : 0);
  if (rc == TS_SHUTDOWN)
    TSD_LOG(TSD_LOG_WARN,
            "background save %llu to '%s' abandoned: the daemons stopped before it "
            "was written (%s); nothing was moved into place, the previous checkpoint there is as "
            "it was",
            (unsigned long long)bg.job_id, dir, err->msg);
  else if (rc)
    TSD_LOG(TSD_LOG_ERROR,
            "background save %llu to '%s' failed: %s; the previous checkpoint "
            "there is as it was",
            (unsigned long long)bg.job_id, dir, err->msg);
  else
    TSD_LOG(TSD_LOG_INFO,
            "background save %llu to '%s' complete: %d tensors, %lld bytes in "
            "%d files (%lld written here), %.3f s",
            (unsigned long long)bg.job_id, dir, rep->tensors, (long long)rep->bytes_total,
            rep->files, (long long)rep->bytes_written,
            r ? (double)(r->end_ms - r->start_ms) / 1000.0 : 0.0);
  if (rc)
    log_tmp_left(bg.job_id, tmp);
}

/* Completes the background save writing, if any: waits for this rank's writer (bounded when
 * stopping, wait_writer), then agrees and moves the checkpoint into place (collective; every
 * rank has the same job, as they run the same operations), or removes it. Its outcome is
 * recorded and logged. */
static int finish_job(tsd_engine *e, bool stopping, ts_error *err) {
  if (!bg.job)
    return TS_OK;
  bool done = !bg.threaded || wait_writer(e, stopping);
  if (bg.threaded && done)
    pthread_join(bg.thread, NULL);
  else if (bg.threaded)
    pthread_detach(bg.thread); /* it keeps its job: neither is freed */
  save_record *r = record_find(bg.job_id);
  char tmp[4400];
  snprintf(tmp, sizeof tmp, "%s", ts_ckpt_job_tmp(bg.job) ? ts_ckpt_job_tmp(bg.job) : "");
  ts_ckpt_report rep;
  int rc = ts_ckpt_save_end(bg.job, e->world, &rep, err);
  record_outcome(r, rc, err, &rep, tmp);
  if (rc == TS_OK && bg.snapshot && e->rank == 0)
    prune_snapshots(e->cfg);
  if (done) {
    ts_ckpt_job_destroy(&bg.job);
    free(bg.wr);
  }
  bg.job = NULL;
  bg.wr = NULL;
  return rc;
}

int tsd_bgsave_finish_all(tsd_engine *e) {
  ts_error err;
  return finish_job(e, true, &err);
}

/* The writer thread, under SCHED_IDLE: it runs on the CPU time the operations (and anything
 * else on the node) leave, so that what the engine runs meanwhile keeps the cores it needs; on
 * an idle node it writes at full speed, on a saturated one the save takes longer instead. */
static void *writer_main(void *arg) {
  writer_ctl *w = arg;
  struct sched_param sp = {0};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
  ts_ckpt_job_write(w->job);
  writer_done(w);
  return NULL;
}

/* The snapshot's directory, <snapshot dir>/<rank 0's UTC time>, and its sequence, one more
 * than the highest rank 0 knows (collective). Rank 0 makes the snapshot directory if missing
 * and checks it is still trusted (snapdir.c): refused on every rank otherwise. */
static int snapshot_path(tsd_engine *e, char *dir, size_t cap, int64_t *seq, ts_error *err) {
  int64_t v[2] = {0, 0}; /* ms, sequence */
  int lst = TS_OK;
  ts_error lerr;
  ts_error_clear(&lerr);
  if (e->rank == 0) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    v[0] = (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    v[1] = bg.sequence + 1;
    if (mkdir(e->cfg->snapshot_dir, 0700) != 0 && errno != EEXIST)
      TSD_LOG(TSD_LOG_WARN, "cannot create --snapshot-dir '%s': %s", e->cfg->snapshot_dir,
              strerror(errno));
    lst = tsd_snapdir_check("--snapshot-dir", e->cfg->snapshot_dir, false, &lerr);
    if (!lst && v[1] > TS_CKPT_SEQUENCE_MAX)
      lst = ts_error_set(&lerr, TS_LIMIT,
                         "snapshot: the sequence would pass %lld; start a new "
                         "--snapshot-dir",
                         (long long)TS_CKPT_SEQUENCE_MAX);
  }
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc == TS_OK)
    rc = ts_comm_allreduce_i64(ts_world_comm(e->world), v, 2, TS_COMM_MAX, err);
  if (rc)
    return rc;
  int64_t ms = v[0];
  *seq = bg.sequence = v[1];
  time_t sec = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&sec, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
  snprintf(dir, cap, "%s/%s.%03dZ", e->cfg->snapshot_dir, stamp, (int)(ms % 1000));
  return TS_OK;
}

/* Starts a background save: the copy (collective), then this rank's writer thread. */
static int start_background(tsd_engine *e, const tsd_ordered *op, const char *dir,
                            const char *const *names, int n, const ts_ckpt_save_opts *o,
                            bool snapshot, ts_error *err) {
  int64_t t0 = now_ms();
  ts_ckpt_job *job = NULL;
  pthread_once(&sync_once, sync_init);
  writer_ctl *w = calloc(1, sizeof *w);
  if (!w)
    return ts_error_set(err, TS_NO_MEMORY, "background save: no memory");
  int rc = ts_ckpt_save_begin(e->store, e->world, dir, names, n, o, &job, err);
  if (rc) {
    free(w);
    return rc;
  }
  w->job = job;
  w->world = e->world;
  w->rank = e->rank;
  w->hold = tsd_fault_fire(TSD_FAULT_SAVE_HOLD)    ? HOLD_UNTIL_STOP
            : tsd_fault_fire(TSD_FAULT_SAVE_STUCK) ? HOLD_UNTIL_CANCEL
                                                   : HOLD_NONE;
  if (w->hold != HOLD_NONE) {
    ts_ckpt_job_on_piece(job, hold_writer, w);
    TSD_LOG(TSD_LOG_WARN,
            "background save %llu: its writer waits after its first piece until "
            "the daemon %s (TSHARD_FAULT)",
            (unsigned long long)op->seq,
            w->hold == HOLD_UNTIL_STOP ? "stops" : "abandons the save");
  }
  bg.finish_ordered = false;
  bg.finish_retry_ms = 0;
  bg.finish_backoff_ms = FINISH_RETRY_FIRST_MS;
  bg.snapshot = snapshot;
  bg.job_id = op->seq;
  bg.job = job;
  bg.wr = w;
  bg.threaded = pthread_create(&bg.thread, NULL, writer_main, w) == 0;
  if (!bg.threaded) {
    TSD_LOG(TSD_LOG_WARN, "no writer thread for background save %llu: writing it on the engine",
            (unsigned long long)op->seq);
    w->hold = HOLD_NONE; /* nobody could release it */
    writer_main(w);
  }
  ts_ckpt_progress p;
  ts_ckpt_job_progress(job, &p);
  save_record *r = record_new(op->seq, dir);
  r->state = SAVE_WRITING;
  r->start_ms = t0;
  set_answer(op, dir, p.tensors, p.all_bytes, p.files, (double)(now_ms() - t0) / 1000.0, true);
  TSD_LOG(TSD_LOG_INFO,
          "background save %llu to '%s': %d tensors copied (%lld bytes here) in "
          "%.3f s; writing",
          (unsigned long long)op->seq, dir, p.tensors, (long long)p.total,
          (double)(now_ms() - t0) / 1000.0);
  return TS_OK;
}

/* A synchronous save of names (n 0: every tensor), answered with its report. */
static int save_now(tsd_engine *e, const tsd_ordered *op, const char *dir, const char *const *names,
                    int n, const ts_ckpt_save_opts *o, ts_error *err) {
  int64_t t0 = now_ms();
  ts_ckpt_report rep;
  int rc = ts_ckpt_save(e->store, e->world, dir, names, n, o, &rep, err);
  if (rc == TS_OK) {
    double s = (double)(now_ms() - t0) / 1000.0;
    set_answer(op, dir, rep.tensors, rep.bytes_total, rep.files, s, false);
    TSD_LOG(TSD_LOG_INFO, "saved %d tensors to '%s' (%lld bytes written here), %.3f s", rep.tensors,
            dir, (long long)rep.bytes_written, s);
  }
  return rc;
}

/* A save: what it writes selected (select.c; a snapshot: every tensor), then synchronous or
 * in the background. A target holding a checkpoint is replaced only when overwrite is asked
 * (snapshots write new directories). */
int tsd_run_save(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__SaveRequest *q = op->req->save;
  ts_ckpt_save_opts o = {q->keep_partial,
                         q->per_node,
                         e->cfg->staging,
                         e->cfg->ckpt_chunk > 0 ? e->cfg->ckpt_chunk : -1,
                         0,
                         !q->overwrite && !q->snapshot};
  const char **names = NULL;
  int n = 0;
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = q->snapshot ? TS_OK
                        : tsd_select_tensors(e->store, "save", q->names, q->n_names, q->prefix,
                                             q->all, &names, &n, &lerr);
  /* Every collective operation starts with an agreement over the world (a rank that could not
   * decode the operation fails it there); the save's own first collective step is another. */
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc) {
    free(names);
    return rc;
  }
  ts_error ferr; /* a save writing completes first; its outcome is its own (stats, log) */
  finish_job(e, false, &ferr);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", q->dir);
  if (q->snapshot && !e->cfg->snapshot_dir[0]) /* the same flags on every rank */
    rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                      "no snapshot directory: start the daemons "
                      "with --snapshot-dir DIR to take snapshots");
  else if (q->snapshot)
    rc = snapshot_path(e, dir, sizeof dir, &o.sequence, err);
  if (!rc)
    tsd_ckpt_arm_fail_hook(e->rank);
  if (!rc && (q->background || q->snapshot))
    rc = start_background(e, op, dir, names, n, &o, q->snapshot, err);
  else if (!rc)
    rc = save_now(e, op, dir, names, n, &o, err);
  free(names);
  return rc;
}

void tsd_ckpt_answer_load(const tsd_ordered *op, const char *dir, const ts_ckpt_report *rep,
                          double seconds) {
  set_answer(op, dir, rep->tensors, rep->bytes_total, rep->files, seconds, false);
}

int tsd_run_save_finish(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  int rc = ts_comm_agree(ts_world_comm(e->world), TS_OK, NULL, err);
  if (rc || !bg.job || bg.job_id != op->req->save_finish->save_id)
    return rc; /* a later save completed it already */
  int64_t written = !bg.threaded || atomic_load(&bg.wr->written);
  rc = ts_comm_allreduce_i64(ts_world_comm(e->world), &written, 1, TS_COMM_MIN, err);
  if (rc)
    return rc;
  if (written)
    return finish_job(e, false, err);
  if (e->rank == 0) { /* a writer elsewhere still writes: asked again later */
    if (bg.finish_backoff_ms == FINISH_RETRY_FIRST_MS)
      TSD_LOG(TSD_LOG_DEBUG,
              "background save %llu: a writer of another rank still writes; its "
              "completion is asked again until every writer is done",
              (unsigned long long)bg.job_id);
    bg.finish_ordered = false;
    bg.finish_retry_ms = now_ms() + bg.finish_backoff_ms;
    if (bg.finish_backoff_ms < FINISH_RETRY_MAX_MS)
      bg.finish_backoff_ms *= 2;
  }
  return TS_OK;
}

/* An operation built here and ordered by rank 0 (no client: conn 0 answers nobody). */
static void order_internal(tsd_engine *e, Tshard__Request *req) { tsd_submit(e, 0, req, NULL, 0); }

static void order_finish(tsd_engine *e) {
  Tshard__Request *req = malloc(sizeof *req);
  Tshard__SaveFinishRequest *f = malloc(sizeof *f);
  if (!req || !f) {
    free(req), free(f);
    TSD_LOG(TSD_LOG_ERROR,
            "no memory to complete background save %llu; the next save completes "
            "it",
            (unsigned long long)bg.job_id);
    return;
  }
  tshard__request__init(req);
  tshard__save_finish_request__init(f);
  f->save_id = bg.job_id;
  req->op_case = TSHARD__REQUEST__OP_SAVE_FINISH;
  req->save_finish = f;
  order_internal(e, req); /* freed by protobuf-c's free_unpacked, default allocator */
}

static void order_snapshot(tsd_engine *e) {
  Tshard__Request *req = malloc(sizeof *req);
  Tshard__SaveRequest *q = malloc(sizeof *q);
  char *dir = strdup("snapshot");
  if (!req || !q || !dir) {
    free(req), free(q), free(dir);
    TSD_LOG(TSD_LOG_ERROR, "no memory to take a periodic snapshot");
    return;
  }
  tshard__request__init(req);
  tshard__save_request__init(q);
  q->dir = dir;
  q->snapshot = true;
  q->background = true;
  req->op_case = TSHARD__REQUEST__OP_SAVE;
  req->save = q;
  order_internal(e, req);
}

bool tsd_bgsave_tick(tsd_engine *e) {
  publish_progress();
  if (e->rank != 0 || e->stopping)
    return false;
  bool did = false;
  if (bg.job && !bg.finish_ordered && atomic_load(&bg.wr->written) &&
      now_ms() >= bg.finish_retry_ms) {
    bg.finish_ordered = true;
    order_finish(e);
    did = true;
  }
  /* no new periodic snapshot once a signal asked the daemon to stop: the shutdown follows */
  if (e->cfg->snapshot_every > 0 && e->cfg->snapshot_dir[0] &&
      !atomic_load(&e->sh->stop_signalled)) {
    int64_t now = now_ms();
    if (bg.next_snapshot_ms == 0)
      bg.next_snapshot_ms = now + e->cfg->snapshot_every;
    if (now >= bg.next_snapshot_ms) {
      bg.next_snapshot_ms = now + e->cfg->snapshot_every;
      if (!bg.job) { /* a snapshot still writing: this period is skipped */
        order_snapshot(e);
        did = true;
      } else {
        TSD_LOG(TSD_LOG_DEBUG, "periodic snapshot skipped: background save %llu still writes",
                (unsigned long long)bg.job_id);
      }
    }
  }
  return did;
}

/* Milliseconds until the tick has work (0: now, -1: none timed): a save_finish to order again,
 * or the next periodic snapshot. */
int64_t tsd_bgsave_due_ms(tsd_engine *e) {
  if (e->rank != 0 || e->stopping)
    return -1;
  int64_t now = now_ms(), due = -1;
  if (bg.job && !bg.finish_ordered && bg.finish_retry_ms > 0)
    due = bg.finish_retry_ms > now ? bg.finish_retry_ms - now : 0;
  if (e->cfg->snapshot_every <= 0 || !e->cfg->snapshot_dir[0] ||
      atomic_load(&e->sh->stop_signalled))
    return due;
  int64_t left = bg.next_snapshot_ms == 0 ? 0 /* the tick sets the first period */
                                          : bg.next_snapshot_ms - now;
  if (left < 0)
    left = 0;
  return due < 0 || left < due ? left : due;
}

/* The engine stops with a save still writing (no shutdown completed it: the engine failed): the
 * writer is cancelled and, once it returned, the job destroyed, which removes the temporary
 * directory; said either way. */
void tsd_bgsave_stop(void) {
  if (!bg.job)
    return;
  bool done = !bg.threaded;
  if (bg.threaded) {
    pthread_mutex_lock(&bg.mu);
    bg.wr->cancelled = true;
    ts_ckpt_job_cancel(bg.job);
    pthread_cond_broadcast(&bg.cv);
    done = wait_locked(bg.wr, TSD_CANCEL_GRACE_MS);
    pthread_mutex_unlock(&bg.mu);
  }
  char tmp[4400];
  snprintf(tmp, sizeof tmp, "%s", ts_ckpt_job_tmp(bg.job) ? ts_ckpt_job_tmp(bg.job) : "");
  TSD_LOG(TSD_LOG_WARN,
          "background save %llu abandoned: the daemon stopped before it was "
          "completed; nothing was moved into place",
          (unsigned long long)bg.job_id);
  publish_outcome(false, 0);
  if (!done) {
    pthread_detach(bg.thread); /* it keeps its job */
    if (tmp[0])
      TSD_LOG(TSD_LOG_ERROR,
              "background save %llu: its writer does not return; its temporary "
              "directory '%s' is left: delete it",
              (unsigned long long)bg.job_id, tmp);
  } else {
    if (bg.threaded)
      pthread_join(bg.thread, NULL);
    ts_ckpt_job_destroy(&bg.job); /* removes the temporary directory */
    free(bg.wr);
    log_tmp_left(bg.job_id, tmp);
  }
  bg.job = NULL;
  bg.wr = NULL;
}

int tsd_bgsave_stats(Tshard__SaveProgress *items, Tshard__SaveProgress **ptrs, int cap) {
  int n = 0;
  for (int i = 0; i < bg.n && n < cap; i++) {
    save_record *r = &bg.rec[i];
    Tshard__SaveProgress *p = &items[n];
    tshard__save_progress__init(p);
    ts_ckpt_progress pr = r->progress;
    bool writing = r->state == SAVE_WRITING && bg.job && bg.job_id == r->id;
    if (writing)
      ts_ckpt_job_progress(bg.job, &pr);
    p->save_id = r->id;
    p->dir = r->dir;
    p->state = (char *)state_names[r->state];
    p->bytes_written = (uint64_t)pr.written;
    p->bytes_total = (uint64_t)pr.total;
    p->checkpoint_bytes = (uint64_t)pr.all_bytes;
    p->seconds = (double)((writing ? now_ms() : r->end_ms) - r->start_ms) / 1000.0;
    p->status = r->status;
    p->message = r->message;
    ptrs[n++] = p;
  }
  return n;
}
