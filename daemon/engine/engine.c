/* engine.c - the engine thread: the only thread of tshardd that calls MPI.
 *
 * Its loop takes the work the loop thread queued (requests and notices), receives control
 * messages from the other daemons, runs the collective operations in rank 0's order, and when
 * there is nothing to do waits on a condition variable with a short timeout: 20 us for 2 ms after
 * the last work (the rest of a session follows quickly), then doubling up to 8 ms while the daemon
 * stays idle. New local work wakes it at once, control messages are seen within the timeout, and
 * an idle daemon costs about a hundred cheap wake-ups per second instead of a core spinning in
 * MPI. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "tsd_engine.h"

#define IDLE_MIN_US 20
#define IDLE_MAX_US 8000
/* After work, the engine keeps its shortest wait this long: the next operation of a session
 * (another rank's part of a collective one, the next request of a client) usually follows. */
#define HOT_US 2000

void tsd_shared_init(tsd_shared *sh) {
  memset(sh, 0, sizeof *sh);
  pthread_mutex_init(&sh->mu, NULL);
  tsd_queue_init(&sh->work);
  tsd_queue_init(&sh->replies);
}

static void work_free(tsd_qnode *n) {
  tsd_work *w = (tsd_work *)n;
  tsd_request_free(&w->req);
  free(w);
}

static void reply_free(tsd_qnode *n) {
  tsd_reply *r = (tsd_reply *)n;
  if (r->fd >= 0)
    close(r->fd);
  free(r->frame);
  free(r);
}

void tsd_shared_destroy(tsd_shared *sh) {
  tsd_queue_destroy(&sh->work, work_free);
  tsd_queue_destroy(&sh->replies, reply_free);
  pthread_mutex_destroy(&sh->mu);
}

void tsd_push_work(tsd_shared *sh, tsd_work *w) { tsd_queue_push(&sh->work, &w->node); }

void tsd_push_reply(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len) {
  tsd_push_reply_fd(sh, conn_id, frame, len, -1, 0);
}

void tsd_push_reply_fd(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len, int fd,
                       uint64_t req_id) {
  tsd_reply *r = malloc(sizeof *r);
  if (!r) {
    free(frame);
    if (fd >= 0)
      close(fd);
    TSD_LOG(TSD_LOG_ERROR, "no memory to queue an answer to connection %llu",
            (unsigned long long)conn_id);
    return;
  }
  r->conn_id = conn_id;
  r->frame = frame;
  r->len = len;
  r->fd = fd;
  r->req_id = req_id;
  tsd_queue_push(&sh->replies, &r->node); /* wakes the loop thread */
}

void tsd_reply_response(tsd_engine *e, uint64_t conn_id, Tshard__Response *resp) {
  uint8_t *frame;
  size_t len;
  ts_error err;
  e->ops_answered++;
  if (tsd_response_frame(resp, &frame, &len, &err) != TS_OK &&
      tsd_error_frame(resp->id, err.code, err.msg, &frame, &len) != TS_OK) {
    TSD_LOG(TSD_LOG_ERROR, "cannot build an answer: %s", err.msg);
    return;
  }
  tsd_push_reply(e->sh, conn_id, frame, len);
}

void tsd_reply_status(tsd_engine *e, uint64_t conn_id, uint64_t req_id, int status,
                      const char *msg) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  r.id = req_id;
  r.status = status;
  r.message = (char *)(msg ? msg : "");
  tsd_reply_response(e, conn_id, &r);
}

int tsd_memory_check(tsd_engine *e, uint64_t extra, const char *what, ts_error *err) {
  (void)e;
  if (extra > SIZE_MAX / 2)
    return ts_error_set(err, TS_LIMIT, "%s needs %llu bytes, more than any memory", what,
                        (unsigned long long)extra);
  return ts_pool_check((size_t)extra, what, err);
}

/* The sequencer's hooks: the MPI control channel, the operations layer's runs and answers, and
 * the staging of puts (a reference to a shared segment, or a pool buffer). */
static int seq_send(void *ctx, int dst, int tag, const uint8_t *buf, size_t len, ts_error *err) {
  tsd_engine *e = ctx;
  return ts_control_send(e->ctl, dst, tag, buf, len, err);
}

static int seq_run(void *ctx, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  tsd_engine *e = ctx;
  return e->ops->run_collective(e, op, origin, err);
}

static void seq_answer(void *ctx, int op_case, const tsd_pending *w, int status,
                       const char *msg) {
  tsd_engine *e = ctx;
  e->ops->answer(e, op_case, w, status, msg);
}

static void seq_release(void *ctx, uint8_t *staging, uint64_t bytes) {
  tsd_staging_give(ctx, staging, bytes);
}

static int64_t seq_now_ms(void *ctx) {
  (void)ctx;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The names an operation touches, for its idempotency key: its change set (a put changes no
 * metadata but touches its tensor). */
static void seq_names(void *ctx, const Tshard__Request *req, tsd_changes *ch) {
  tsd_engine *e = ctx;
  e->ops->changes(req, ch);
  if (req->op_case == TSHARD__REQUEST__OP_PUT)
    tsd_changes_add(ch, req->put->name);
}

void tsd_submit(tsd_engine *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                uint64_t staging_bytes) {
  tsd_seq_submit(e->seq, conn_id, req, staging, staging_bytes);
}

static void nap_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* After the shutdown ran: the sequencer answers who still waits and says goodbye; rank 0 takes
 * every rank's goodbye (late submissions were answered by their own daemons), so that no message
 * is in flight when the communicator is freed. */
static void finish_sequencer(tsd_engine *e) {
  tsd_seq_finish(e->seq);
  ts_error err;
  for (int waited = 0; !tsd_seq_all_gone(e->seq) && waited < 60000;) {
    int src, tag;
    void *buf;
    size_t len;
    int got = ts_control_poll(e->ctl, &src, &tag, &buf, &len, &err);
    if (got < 0)
      break;
    if (got == 1) {
      tsd_seq_message(e->seq, src, tag, buf, len);
      free(buf);
    } else {
      nap_ms(1);
      waited++;
    }
  }
  if (!tsd_seq_all_gone(e->seq))
    TSD_LOG(TSD_LOG_WARN, "not every rank said goodbye");
  if (ts_control_flush(e->ctl, 30000, &err))
    TSD_LOG(TSD_LOG_WARN, "%s", err.msg);
}

static void handle_work(tsd_engine *e, tsd_work *w) {
  if (w->conn_closed) {
    tsd_seq_forget_conn(e->seq, w->conn_id); /* its submissions run, answering nobody */
    tsd_session_free(e, w->conn_id);
  } else if (w->signal_shutdown) {
    Tshard__Request *req = malloc(sizeof *req);
    Tshard__ShutdownRequest *sd = malloc(sizeof *sd);
    char *key = strdup("__tshard.signal");
    if (req && sd && key) {
      tshard__request__init(req);
      tshard__shutdown_request__init(sd);
      req->op_case = TSHARD__REQUEST__OP_SHUTDOWN;
      req->shutdown = sd;
      req->idempotency_key = key;
      /* Built by hand, freed by protobuf-c's free_unpacked with the default allocator. */
      tsd_submit(e, 0, req, NULL, 0);
    } else {
      free(req), free(sd), free(key);
      TSD_LOG(TSD_LOG_ERROR, "no memory to start the shutdown");
    }
  } else if (w->scope == TSD_SCOPE_COLLECTIVE) {
    if (e->stopping)
      tsd_reply_status(e, w->conn_id, w->req->id, TS_SHUTDOWN, "the daemon is shutting down");
    else {
      tsd_submit(e, w->conn_id, w->req, NULL, 0);
      w->req = NULL;
    }
  } else {
    e->ops->run_local(e, w); /* a put submits itself once its data is complete */
  }
  tsd_request_free(&w->req);
  free(w);
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The work queue's wake callback. */
static void engine_wake(void *ctx) {
  tsd_engine *e = ctx;
  pthread_mutex_lock(&e->wake_mu);
  pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->wake_mu);
}

/* A push after the check below takes wake_mu to signal, so it cannot fall between the check and
 * the wait. */
static void wait_for_work(tsd_engine *e, long us) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += us * 1000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
  }
  pthread_mutex_lock(&e->wake_mu);
  if (tsd_queue_empty(&e->sh->work))
    pthread_cond_timedwait(&e->wake, &e->wake_mu, &ts);
  pthread_mutex_unlock(&e->wake_mu);
}

int tsd_engine_run(tsd_engine_opts *opts, ts_error *err) {
  tsd_engine *e = calloc(1, sizeof *e);
  if (!e)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the engine");
  e->cfg = opts->cfg;
  e->world = opts->world;
  e->sh = opts->shared;
  e->ops = opts->ops;
  e->rank = ts_world_rank(e->world);
  e->size = ts_world_size(e->world);
  pthread_mutex_init(&e->wake_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e->wake, &ca);
  pthread_condattr_destroy(&ca);
  tsd_queue_set_wake(&e->sh->work, engine_wake, e);
  tsd_seq_hooks hooks = {e, seq_send, seq_run, seq_answer, seq_release, seq_now_ms, seq_names};
  tsd_seq_config scfg = {.key_ttl_ms = e->cfg->key_ttl,
                         .key_max = e->cfg->key_max,
                         .collective_timeout_ms = e->cfg->collective_timeout,
                         .collective_timeout_max_ms = e->cfg->collective_timeout_max,
                         .collective_pending_max = e->cfg->collective_pending_max};
  int rc = tsd_seq_create(e->rank, e->size, &hooks, &scfg, &e->seq, err);
  if (rc)
    goto out;
  ts_pool_config pc = {e->cfg->memory_limit, e->cfg->pool_cache, e->cfg->pool_idle_ms,
                       e->cfg->pool_huge != 0};
  ts_pool_configure(&pc);
  if ((rc = ts_store_create(&e->store, e->rank, e->cfg->memory_limit, err)))
    goto out;
  if ((rc = ts_control_create(e->world, &e->ctl, err)))
    goto out;
  /* Short timed waits must be short: the default timer slack (50 us) would round them up. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  long idle_us = 0;
  int64_t last_busy = now_us();
  while (!e->stopping) {
    bool busy = false;
    tsd_work *list = (tsd_work *)tsd_queue_take_all(&e->sh->work);
    while (list) {
      tsd_work *w = list;
      list = (tsd_work *)list->node.next;
      handle_work(e, w);
      busy = true;
    }
    for (;;) {
      int src, tag;
      void *buf;
      size_t len;
      ts_error perr;
      int got = ts_control_poll(e->ctl, &src, &tag, &buf, &len, &perr);
      if (got < 0) {
        TSD_LOG(TSD_LOG_ERROR, "%s", perr.msg);
        break;
      }
      if (got == 0)
        break;
      tsd_seq_message(e->seq, src, tag, buf, len);
      free(buf);
      busy = true;
    }
    ts_control_progress(e->ctl);
    if (tsd_seq_run(e->seq) > 0)
      busy = true;
    if (busy) {
      idle_us = 0;
      last_busy = now_us();
    } else {
      if (now_us() - last_busy < HOT_US)
        idle_us = IDLE_MIN_US;
      else if (idle_us == 0)
        idle_us = IDLE_MIN_US;
      else
        idle_us = idle_us * 2 > IDLE_MAX_US ? IDLE_MAX_US : idle_us * 2;
      ts_pool_trim(false); /* cached buffers idle long enough go back to the OS */
      wait_for_work(e, idle_us);
    }
  }
  finish_sequencer(e);
  /* Work that arrived after the shutdown ran: answer it. */
  tsd_work *list = (tsd_work *)tsd_queue_take_all(&e->sh->work);
  while (list) {
    tsd_work *w = list;
    list = (tsd_work *)list->node.next;
    if (!w->conn_closed && !w->signal_shutdown && w->req)
      tsd_reply_status(e, w->conn_id, w->req->id, TS_SHUTDOWN, "the daemon is shutting down");
    tsd_request_free(&w->req);
    free(w);
  }
  TSD_LOG(TSD_LOG_INFO, "engine stopped after %llu collective operations",
          (unsigned long long)tsd_seq_ops_run(e->seq));
out:
  e->ops->stop(e);
  tsd_session_free_all(e);
  tsd_seq_destroy(&e->seq);
  ts_control_destroy(&e->ctl);
  ts_store_destroy(&e->store);
  ts_pool_trim(true);
  tsd_queue_set_wake(&e->sh->work, NULL, NULL);
  pthread_cond_destroy(&e->wake);
  pthread_mutex_destroy(&e->wake_mu);
  free(e);
  return rc;
}
