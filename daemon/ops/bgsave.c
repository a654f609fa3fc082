/* bgsave.c - background saves and snapshots: the save operation itself (synchronous or in the
 * background), the internal save_finish operation, the snapshot timer and the saves shown by
 * stats. The checkpoint work is shard/ckpt/ (ts_ckpt_save, and ckpt_async.c's three steps).
 *
 * A background save (SaveRequest.background, or a snapshot) runs in rank 0's order like any
 * save: every rank takes its copy of the pieces it writes (ts_ckpt_save_begin, collective), the
 * clients are answered (CkptResult, writing), and a writer thread per daemon writes the files
 * (no MPI) while the engine goes on with other operations. When rank 0's writer is done, rank
 * 0 orders save_finish (an internal operation, refused from clients); every rank runs it in
 * order, waits for its own writer, and ts_ckpt_save_end agrees and moves the checkpoint into
 * place (or removes the temporary directory). One background save writes at a time: a save
 * (of any kind, to any directory) or a shutdown ordered while one writes first completes it
 * (waiting for its files), then runs. The outcome of each, with its progress while writing, is
 * kept for stats (the last TSD_SAVES_KEPT) and logged.
 *
 * Snapshots (--snapshot-dir, --snapshot-every, --snapshot-keep): rank 0 orders a background save
 * of every tensor into <snapshot dir>/<UTC timestamp>/ every period (skipped while a save still
 * writes), or a client asks one (SaveRequest.snapshot); after each complete snapshot rank 0
 * removes the oldest complete ones beyond --snapshot-keep. All of this state is the engine
 * thread's, except the writer's progress (atomic, in the job) and its done flag. */
#include <dirent.h>
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
enum { SAVE_WRITING, SAVE_DONE, SAVE_FAILED };
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
  pthread_t thread;
  bool threaded;    /* false: the job was written on the engine (no thread could be made) */
  atomic_bool written;
  ts_world *world; /* the writer rings this rank's engine when it is done (doorbells) */
  int rank;
  bool finish_ordered, snapshot;
  uint64_t job_id;
  int64_t next_snapshot_ms;
  /* the last save's or load's answer, for its clients (by the operation's hash) */
  bool last_valid;
  uint64_t last_hash;
  Tshard__CkptResult last;
  char last_dir[4096];
} bg;

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

/* Removes the complete snapshots of the snapshot directory older than the newest `keep` (rank
 * 0, after a snapshot): directories named by snapshot_name's pattern only. */
static int name_cmp(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}
static bool snapshot_named(const char *s) {
  /* YYYYmmddTHHMMSS.mmmZ */
  if (strlen(s) != 20 || s[8] != 'T' || s[15] != '.' || s[19] != 'Z')
    return false;
  for (int i = 0; i < 19; i++)
    if (i != 8 && i != 15 && (s[i] < '0' || s[i] > '9'))
      return false;
  return true;
}
static void prune_snapshots(const tsd_config *cfg) {
  DIR *d = opendir(cfg->snapshot_dir);
  if (!d)
    return;
  char(*names)[24] = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!snapshot_named(de->d_name))
      continue;
    if (n == cap) {
      void *p = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
      if (!p)
        break;
      names = p;
    }
    snprintf(names[n++], sizeof names[0], "%s", de->d_name);
  }
  closedir(d);
  if (names)
    qsort(names, n, sizeof *names, name_cmp);
  for (size_t i = 0; i + (size_t)cfg->snapshot_keep < n; i++) {
    char path[4096];
    ts_error err;
    snprintf(path, sizeof path, "%s/%s", cfg->snapshot_dir, names[i]);
    if (ts_ckpt_remove(path, &err) == TS_OK)
      TSD_LOG(TSD_LOG_INFO, "snapshot '%s' removed (--snapshot-keep %lld)", path,
              (long long)cfg->snapshot_keep);
    else
      TSD_LOG(TSD_LOG_WARN, "snapshot '%s' not removed: %s", path, err.msg);
  }
  free(names);
}

/* Completes the background save writing, if any: waits for this rank's writer, then agrees and
 * moves the checkpoint into place (collective; every rank has the same job, as they run the same
 * operations). Its outcome is recorded and logged. */
static int finish_job(tsd_engine *e, ts_error *err) {
  if (!bg.job)
    return TS_OK;
  if (bg.threaded)
    pthread_join(bg.thread, NULL);
  save_record *r = record_find(bg.job_id);
  ts_ckpt_report rep;
  int rc = ts_ckpt_save_end(bg.job, e->world, &rep, err);
  if (r) {
    ts_ckpt_job_progress(bg.job, &r->progress);
    r->end_ms = now_ms();
    r->state = rc ? SAVE_FAILED : SAVE_DONE;
    r->status = rc;
    snprintf(r->message, sizeof r->message, "%s", rc ? err->msg : "");
    if (rc)
      TSD_LOG(TSD_LOG_ERROR, "background save %llu to '%s' failed: %s; the previous checkpoint "
              "there is as it was", (unsigned long long)r->id, r->dir, err->msg);
    else
      TSD_LOG(TSD_LOG_INFO, "background save %llu to '%s' complete: %d tensors, %lld bytes in "
              "%d files (%lld written here), %.3f s", (unsigned long long)r->id, r->dir,
              rep.tensors, (long long)rep.bytes_total, rep.files, (long long)rep.bytes_written,
              (double)(r->end_ms - r->start_ms) / 1000.0);
  }
  if (rc == TS_OK && bg.snapshot && e->rank == 0)
    prune_snapshots(e->cfg);
  ts_ckpt_job_destroy(&bg.job);
  return rc;
}

int tsd_bgsave_finish_all(tsd_engine *e) {
  ts_error err;
  return finish_job(e, &err);
}

/* The writer thread, under SCHED_IDLE: it runs on the CPU time the operations (and anything
 * else on the node) leave, so that what the engine runs meanwhile keeps the cores it needs; on
 * an idle node it writes at full speed, on a saturated one the save takes longer instead. */
static void *writer_main(void *arg) {
  struct sched_param sp = {0};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
  ts_ckpt_job_write(arg);
  atomic_store(&bg.written, true);
  ts_world_bell_ring(bg.world, bg.rank); /* the engine's tick sees it now, not at its next nap */
  return NULL;
}

/* The snapshot's directory, <snapshot dir>/<rank 0's UTC time> (collective), the snapshot
 * directory made by rank 0 if missing. */
static int snapshot_path(tsd_engine *e, char *dir, size_t cap, ts_error *err) {
  int64_t ms = 0;
  if (e->rank == 0) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    ms = (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    if (mkdir(e->cfg->snapshot_dir, 0700) != 0 && errno != EEXIST)
      TSD_LOG(TSD_LOG_WARN, "cannot create --snapshot-dir '%s': %s", e->cfg->snapshot_dir,
              strerror(errno));
  }
  int rc = ts_comm_allreduce_i64(ts_world_comm(e->world), &ms, 1, TS_COMM_MAX, err);
  if (rc)
    return rc;
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
                            const ts_ckpt_save_opts *o, bool snapshot, ts_error *err) {
  const Tshard__SaveRequest *q = op->req->save;
  int64_t t0 = now_ms();
  ts_ckpt_job *job = NULL;
  int rc = ts_ckpt_save_begin(e->store, e->world, dir, (const char *const *)q->names,
                              (int)q->n_names, o, &job, err);
  if (rc)
    return rc;
  atomic_store(&bg.written, false);
  bg.finish_ordered = false;
  bg.snapshot = snapshot;
  bg.job_id = op->seq;
  bg.job = job;
  bg.world = e->world;
  bg.rank = e->rank;
  bg.threaded = pthread_create(&bg.thread, NULL, writer_main, job) == 0;
  if (!bg.threaded) {
    TSD_LOG(TSD_LOG_WARN, "no writer thread for background save %llu: writing it on the engine",
            (unsigned long long)op->seq);
    writer_main(job);
  }
  ts_ckpt_progress p;
  ts_ckpt_job_progress(job, &p);
  save_record *r = record_new(op->seq, dir);
  r->state = SAVE_WRITING;
  r->start_ms = t0;
  set_answer(op, dir, p.tensors, p.all_bytes, p.files, (double)(now_ms() - t0) / 1000.0, true);
  TSD_LOG(TSD_LOG_INFO, "background save %llu to '%s': %d tensors copied (%lld bytes here) in "
          "%.3f s; writing", (unsigned long long)op->seq, dir, p.tensors, (long long)p.total,
          (double)(now_ms() - t0) / 1000.0);
  return TS_OK;
}

int tsd_run_save(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__SaveRequest *q = op->req->save;
  ts_ckpt_save_opts o = {q->keep_partial, q->per_node, e->cfg->staging,
                         e->cfg->ckpt_chunk > 0 ? e->cfg->ckpt_chunk : -1};
  /* Every collective operation starts with an agreement over the world (a rank that could not
   * decode the operation fails it there); the save's own first collective step is another. */
  int rc = ts_comm_agree(ts_world_comm(e->world), TS_OK, NULL, err);
  if (rc)
    return rc;
  ts_error ferr; /* a save writing completes first; its outcome is its own (stats, log) */
  finish_job(e, &ferr);
  if (q->snapshot && !e->cfg->snapshot_dir[0]) /* the same flags on every rank */
    return ts_error_set(err, TS_INVALID_ARGUMENT, "no snapshot directory: start the daemons "
                        "with --snapshot-dir DIR to take snapshots");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", q->dir);
  if (q->snapshot && (rc = snapshot_path(e, dir, sizeof dir, err)))
    return rc;
  tsd_ckpt_arm_fail_hook(e->rank);
  if (q->background || q->snapshot)
    return start_background(e, op, dir, &o, q->snapshot, err);
  int64_t t0 = now_ms();
  ts_ckpt_report rep;
  rc = ts_ckpt_save(e->store, e->world, dir, (const char *const *)q->names, (int)q->n_names, &o,
                    &rep, err);
  if (rc == TS_OK) {
    double s = (double)(now_ms() - t0) / 1000.0;
    set_answer(op, dir, rep.tensors, rep.bytes_total, rep.files, s, false);
    TSD_LOG(TSD_LOG_INFO, "saved %d tensors to '%s' (%lld bytes written here), %.3f s",
            rep.tensors, dir, (long long)rep.bytes_written, s);
  }
  return rc;
}

void tsd_ckpt_answer_load(const tsd_ordered *op, const char *dir, const ts_ckpt_report *rep,
                          double seconds) {
  set_answer(op, dir, rep->tensors, rep->bytes_total, rep->files, seconds, false);
}

int tsd_run_save_finish(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                        ts_error *err) {
  (void)origin;
  int rc = ts_comm_agree(ts_world_comm(e->world), TS_OK, NULL, err);
  if (rc == TS_OK && bg.job && bg.job_id == op->req->save_finish->save_id)
    rc = finish_job(e, err); /* else a later save completed it already */
  return rc;
}

/* An operation built here and ordered by rank 0 (no client: conn 0 answers nobody). */
static void order_internal(tsd_engine *e, Tshard__Request *req) {
  tsd_submit(e, 0, req, NULL, 0);
}

static void order_finish(tsd_engine *e) {
  Tshard__Request *req = malloc(sizeof *req);
  Tshard__SaveFinishRequest *f = malloc(sizeof *f);
  if (!req || !f) {
    free(req), free(f);
    TSD_LOG(TSD_LOG_ERROR, "no memory to complete background save %llu; the next save completes "
            "it", (unsigned long long)bg.job_id);
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
  if (e->rank != 0 || e->stopping)
    return false;
  bool did = false;
  if (bg.job && !bg.finish_ordered && atomic_load(&bg.written)) {
    bg.finish_ordered = true;
    order_finish(e);
    did = true;
  }
  if (e->cfg->snapshot_every > 0 && e->cfg->snapshot_dir[0]) {
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

int64_t tsd_bgsave_due_ms(tsd_engine *e) {
  if (e->rank != 0 || e->stopping || e->cfg->snapshot_every <= 0 || !e->cfg->snapshot_dir[0])
    return -1;
  if (bg.next_snapshot_ms == 0)
    return 0; /* the tick sets the first period */
  int64_t left = bg.next_snapshot_ms - now_ms();
  return left > 0 ? left : 0;
}

void tsd_bgsave_stop(void) {
  if (bg.job && bg.threaded)
    pthread_join(bg.thread, NULL);
  ts_ckpt_job_destroy(&bg.job);
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
