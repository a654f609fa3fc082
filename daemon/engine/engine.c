/* engine.c - the engine thread: the only thread of tshardd that calls MPI.
 *
 * Its loop takes the work the loop thread queued (requests and notices), receives control
 * messages from the other daemons, runs the collective operations in rank 0's order, and when
 * there is nothing to do waits under the wait policy (ts_wait.h). With every rank of the job on
 * this node, each rank has a doorbell (comm/doorbell.c) that local work and the other daemons'
 * control messages ring: the engine spins 200 us after its last work (150 where cores are
 * short), then blocks until rung, naps growing from 1 ms to 1 s (ts_wait_engine_bell). Across
 * nodes messages come unannounced: it waits on a condition variable, 10 us naps for 2 ms after
 * the last work, then doubling up to 8 ms (ts_wait_engine); new local work wakes it at once and
 * control messages are seen within the nap. Either way an idle daemon costs a few cheap wake-ups
 * per second instead of a core spinning in MPI. Every request is answered: an answer that cannot be
 * built or queued (no memory) still reaches the loop thread on a spare node, which answers the
 * error or closes the connection saying why, and releases the request's in-flight slot. */
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "tsd_engine.h"
#include "ts_wait.h"

void tsd_shared_init(tsd_shared *sh) {
  memset(sh, 0, sizeof *sh);
  pthread_mutex_init(&sh->mu, NULL);
  tsd_queue_init(&sh->work);
  tsd_queue_init(&sh->replies);
  pthread_mutex_init(&sh->spare_mu, NULL);
  for (int i = 0; i < TSD_SPARE_REPLIES; i++)
    sh->spare[i].spare = true;
  pthread_mutex_init(&sh->outlets_mu, NULL);
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
  if (!r->spare)
    free(r);
}

void tsd_shared_destroy(tsd_shared *sh) {
  tsd_queue_destroy(&sh->work, work_free);
  tsd_queue_destroy(&sh->replies, reply_free);
  pthread_mutex_destroy(&sh->mu);
  pthread_mutex_destroy(&sh->spare_mu);
  tsd_outlets_free(sh);
  pthread_mutex_destroy(&sh->outlets_mu);
}

void tsd_reply_release(tsd_shared *sh, tsd_reply *r) {
  if (!r->spare) {
    free(r);
    return;
  }
  pthread_mutex_lock(&sh->spare_mu);
  sh->spare_used[r - sh->spare] = false;
  pthread_mutex_unlock(&sh->spare_mu);
}

static tsd_reply *spare_take(tsd_shared *sh) {
  tsd_reply *r = NULL;
  pthread_mutex_lock(&sh->spare_mu);
  for (int i = 0; i < TSD_SPARE_REPLIES && !r; i++)
    if (!sh->spare_used[i]) {
      sh->spare_used[i] = true;
      r = &sh->spare[i];
    }
  pthread_mutex_unlock(&sh->spare_mu);
  return r;
}

/* A reply node: allocated, else a spare one. The spares come back as soon as the loop thread
 * has delivered them, so when all are out this waits (under the wait policy) for one; only a
 * loop thread that stopped delivering leaves it without one, after a second. */
static tsd_reply *reply_node(tsd_shared *sh, bool no_alloc) {
  tsd_reply *r = no_alloc ? NULL : malloc(sizeof *r);
  if (r) {
    memset(r, 0, sizeof *r);
    return r;
  }
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_mpi, ts_wait_deadline_ms(1000));
  do {
    if ((r = spare_take(sh)) != NULL) {
      r->frame = NULL;
      r->lost_reason = NULL;
      r->delivered = r->counted = false;
      r->lost_status = TS_OK;
      return r;
    }
  } while (ts_waiter_pause(&w) == TS_OK);
  return NULL;
}

void tsd_push_work(tsd_shared *sh, tsd_work *w) {
  w->t_recv_ns = sh->stamp_times ? ts_wait_now_ns() : 0; /* for the trace only */
  tsd_queue_push(&sh->work, &w->node);
}

void tsd_push_reply(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len, uint64_t req_id) {
  tsd_push_reply_fd(sh, conn_id, frame, len, -1, req_id);
}

void tsd_push_reply_fd(tsd_shared *sh, uint64_t conn_id, uint8_t *frame, size_t len, int fd,
                       uint64_t req_id) {
  tsd_reply *r = reply_node(sh, false);
  if (!r) {
    free(frame);
    if (fd >= 0)
      close(fd);
    TSD_LOG(TSD_LOG_ERROR,
            "no memory to queue an answer to connection %llu, and no spare node "
            "came back within a second: the loop thread no longer delivers answers",
            (unsigned long long)conn_id);
    return;
  }
  r->conn_id = conn_id;
  r->frame = frame;
  r->len = len;
  r->fd = fd;
  r->req_id = req_id;
  if (tsd_outlet_answer(sh, r)) {      /* written to the client already (outlet.c) */
    tsd_gauge_add(TSD_G_INFLIGHT, -1); /* answered now; the loop's notice comes later */
    return;
  }
  tsd_queue_push(&sh->replies, &r->node); /* wakes the loop thread */
}

/* An answer that could not be built: the loop thread answers the error itself. */
static void push_lost(tsd_shared *sh, uint64_t conn_id, uint64_t req_id, int status,
                      const char *reason, bool no_alloc) {
  tsd_reply *r = reply_node(sh, no_alloc);
  if (!r) {
    TSD_LOG(TSD_LOG_ERROR, "cannot answer request %llu of connection %llu: %s",
            (unsigned long long)req_id, (unsigned long long)conn_id, reason);
    return;
  }
  r->conn_id = conn_id;
  r->fd = -1;
  r->req_id = req_id;
  r->lost_status = status;
  r->lost_reason = reason;
  tsd_outlet_answer(sh, r); /* no frame: only counted, the loop answers it in order */
  tsd_queue_push(&sh->replies, &r->node);
}

void tsd_reply_response(tsd_engine *e, uint64_t conn_id, Tshard__Response *resp) {
  uint8_t *frame;
  size_t len;
  ts_error err;
  e->ops_answered++;
  tsd_count_answer(e->answering, resp->status);
  /* The injected fault: as if neither the answer nor a node for it could be allocated. */
  bool fault = tsd_fault_fire(TSD_FAULT_REPLY_QUEUE);
  if (fault || (tsd_response_frame(resp, &frame, &len, &err) != TS_OK &&
                tsd_error_frame(resp->id, err.code, err.msg, &frame, &len) != TS_OK)) {
    TSD_LOG(TSD_LOG_ERROR, "cannot build an answer to request %llu: %s",
            (unsigned long long)resp->id, fault ? "injected fault (TSHARD_FAULT)" : err.msg);
    push_lost(e->sh, conn_id, resp->id, TS_NO_MEMORY,
              "the daemon had no memory to build or queue this answer; the operation's outcome "
              "is unknown to this client: look at the tensors it touches before retrying",
              fault);
    return;
  }
  tsd_push_reply(e->sh, conn_id, frame, len, resp->id);
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

/* An operation this rank could not decode: every collective operation's first collective step
 * is an agreement over the world, except those of rows without one (TSD_OP_NO_AGREEMENT): a
 * stopping one (shutdown: it needs no arguments, so it runs) and the others (einsum_release),
 * which fail here only; this rank brings its failure to that agreement, so every rank fails the
 * operation with this rank's reason. */
static int run_undecodable(tsd_engine *e, const tsd_ordered *op, ts_error *err) {
  unsigned flags = tsd_op_flags(op->op_case);
  if (flags & TSD_OP_STOPS) {
    TSD_LOG(TSD_LOG_INFO, "shutdown requested (operation %llu)", (unsigned long long)op->seq);
    e->stopping = true;
    return TS_OK;
  }
  if (flags & TSD_OP_NO_AGREEMENT)
    return ts_error_set(err, op->decode_error.code, "%s", op->decode_error.msg);
  return ts_comm_agree(ts_world_comm(e->world), op->decode_error.code, &op->decode_error, err);
}

static int seq_run(void *ctx, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  tsd_engine *e = ctx;
  char label[96];
  snprintf(label, sizeof label, "operation %llu (%s)", (unsigned long long)op->seq,
           tsd_op_name(op->op_case));
  ts_world_set_agree_label(e->world, label);
  e->answering = op->op_case;
  if (!(tsd_op_flags(op->op_case) & TSD_OP_STOPS) && tsd_fault_fire(TSD_FAULT_AGREEMENT_SILENT))
    /* the injected fault: this rank answers the operation's agreement only after the others
     * gave up on it (twice the timeout: rank 0 gives up after one, the others after two) */
    ts_world_delay_next_agreement(e->world, (int)(3 * e->cfg->agreement_timeout));
  int rc = op->req ? e->ops->run_collective(e, op, origin, err) : run_undecodable(e, op, err);
  ts_world_set_agree_label(e->world, NULL);
  return rc;
}

static void seq_answer(void *ctx, int op_case, const tsd_pending *w, int status, const char *msg) {
  tsd_engine *e = ctx;
  e->answering = op_case;
  e->ops->answer(e, op_case, w, status, msg);
  tsd_order_answered(e, w->conn_id); /* its held requests run from the loop (order.c) */
}

static void seq_release(void *ctx, uint8_t *staging, uint64_t bytes) {
  tsd_engine *e = ctx;
  e->ops->staging_give(e, staging, bytes);
}

static int64_t seq_now_ms(void *ctx) {
  (void)ctx;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The names an operation touches, for its idempotency key (the operations layer's key_names). */
static void seq_names(void *ctx, const Tshard__Request *req, tsd_changes *ch) {
  tsd_engine *e = ctx;
  e->ops->key_names(req, ch);
}

void tsd_submit(tsd_engine *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                uint64_t staging_bytes) {
  ts_error err;
  if (tsd_order_submitted(e, conn_id, &err))
    TSD_LOG(TSD_LOG_WARN, "connection %llu: %s", (unsigned long long)conn_id, err.msg);
  tsd_seq_submit(e->seq, conn_id, req, staging, staging_bytes, e->work_recv_ns);
}

/* After the shutdown ran: the sequencer answers who still waits and says goodbye; rank 0 takes
 * every rank's goodbye (late submissions were answered by their own daemons), so that no message
 * is in flight when the communicator is freed. */
static void finish_sequencer(tsd_engine *e) {
  tsd_seq_finish(e->seq);
  ts_error err;
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_mpi, ts_wait_deadline_ms(60000));
  while (!tsd_seq_all_gone(e->seq)) {
    int src, tag;
    void *buf;
    size_t len;
    int got = ts_control_poll(e->ctl, &src, &tag, &buf, &len, &err);
    if (got < 0) {
      TSD_LOG(TSD_LOG_ERROR, "%s", err.msg);
      break;
    }
    if (got == 1) {
      tsd_seq_message(e->seq, src, tag, buf, len);
      free(buf);
      ts_waiter_progress(&w);
    } else if (ts_waiter_pause(&w) == TS_TIMEOUT) {
      break;
    }
  }
  if (!tsd_seq_all_gone(e->seq))
    TSD_LOG(TSD_LOG_WARN, "not every rank said goodbye");
  if (ts_control_flush(e->ctl, 30000, &err))
    TSD_LOG(TSD_LOG_WARN, "%s", err.msg);
}

/* A request of a connection, in its turn (order.c held it while the connection's earlier
 * collectives waited): collective ones go to the sequencer, the others run here. */
static void run_work(tsd_engine *e, tsd_work *w) {
  e->answering = (int)w->req->op_case;
  e->work_recv_ns = w->t_recv_ns;
  if (w->scope == TSD_SCOPE_COLLECTIVE) {
    if (e->stopping)
      tsd_reply_status(e, w->conn_id, w->req->id, TS_SHUTDOWN, "the daemon is shutting down");
    else {
      tsd_submit(e, w->conn_id, w->req, NULL, 0);
      w->req = NULL;
    }
  } else {
    e->ops->run_local(e, w); /* a put submits itself once its data is complete */
  }
  e->work_recv_ns = 0;
  tsd_request_free(&w->req);
  free(w);
}

static void handle_work(tsd_engine *e, tsd_work *w) {
  if (w->conn_closed) {
    tsd_order_drop(e, w->conn_id, false);    /* its held requests: nobody waits for them */
    tsd_seq_forget_conn(e->seq, w->conn_id); /* its submissions run, answering nobody */
    e->ops->conn_closed(e, w->conn_id);      /* what the operations keep for it */
  } else if (!w->signal_shutdown && tsd_order_hold(e, w)) {
    return; /* after the connection's pending collectives */
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
  } else {
    run_work(e, w);
    return;
  }
  tsd_request_free(&w->req);
  free(w);
}

/* The work queue's wake callback: the engine's doorbell, else its condition variable. */
static void engine_wake(void *ctx) {
  tsd_engine *e = ctx;
  if (e->bells) {
    ts_world_bell_ring(e->world, e->rank);
    return;
  }
  pthread_mutex_lock(&e->wake_mu);
  pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->wake_mu);
}

/* A push after the check below takes wake_mu to signal, so it cannot fall between the check and
 * the wait. (Without doorbells.) */
static void wait_for_work(tsd_engine *e, int64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ns / 1000000000);
  ts.tv_nsec += (long)(ns % 1000000000);
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
  }
  pthread_mutex_lock(&e->wake_mu);
  if (tsd_queue_empty(&e->sh->work))
    pthread_cond_timedwait(&e->wake, &e->wake_mu, &ts);
  pthread_mutex_unlock(&e->wake_mu);
}

/* ns until the engine has something on the clock: held log lines, cached buffers to release, a
 * collective's deadline, the operations' own (a periodic snapshot); -1 when nothing is. */
static int64_t next_due_ns(tsd_engine *e) {
  int64_t due = tsd_log_due_ns();
  int64_t ms[3] = {ts_pool_trim_due_ms(), tsd_seq_due_ms(e->seq),
                   e->ops->tick_due_ms ? e->ops->tick_due_ms(e) : -1};
  for (int i = 0; i < 3; i++)
    if (ms[i] >= 0 && (due < 0 || ms[i] * 1000000 < due))
      due = ms[i] * 1000000;
  return due;
}

/* Between work: spins while the schedule spins and the rank has a core of its own (where cores
 * are short, yielding between turns, for the schedule's shorter yield_ns), then blocks until
 * rung (doorbells: local work, or a message of another rank), until the nap ends, or until
 * something on the clock is due. While control sends wait for MPI (a message too large to go
 * out at once needs this rank's progress), the naps stay short. */
static void engine_pause(tsd_engine *e, ts_waiter *idle, uint32_t seen, int sends_pending) {
  int64_t ns = ts_waiter_block_ns(idle, e->bells); /* no deadline: never -1 */
  if (ns <= 0)
    return;
  const int64_t pending_nap = 20000;
  if (sends_pending > 0 && ns > pending_nap)
    ns = pending_nap;
  int64_t due = next_due_ns(e);
  if (due >= 0 && due < ns)
    ns = due > 1000 ? due : 1000;
  if (e->bells)
    ts_world_bell_wait(e->world, seen, ns);
  else
    wait_for_work(e, ns);
}

/* The engine's numbers for the metrics endpoint (counters.c): stores of relaxed atomics after
 * each turn with work, read by the HTTP thread whenever it scrapes. The bytes by dtype are the
 * store's running totals: no tensor is visited. */
static void publish_numbers(tsd_engine *e) {
  _Static_assert(TS_DTYPE_COUNT <= TSD_DTYPES_MAX, "the counters hold every dtype");
  int64_t by_dtype[TS_DTYPE_COUNT];
  ts_store_dtype_bytes(e->store, by_dtype);
  for (int d = 0; d < TS_DTYPE_COUNT; d++)
    tsd_gauge_set_dtype_bytes(d, by_dtype[d] > 0 ? (uint64_t)by_dtype[d] : 0);
  ts_pool_stats ps;
  ts_pool_get_stats(&ps);
  tsd_gauge_set(TSD_G_TENSORS, (uint64_t)ts_store_count(e->store));
  tsd_gauge_set(TSD_G_STORED_BYTES, (uint64_t)ts_store_used_bytes(e->store));
  tsd_gauge_set(TSD_G_MEM_IN_USE, ps.in_use);
  tsd_gauge_set(TSD_G_MEM_STAGING, ps.staging);
  tsd_gauge_set(TSD_G_MEM_CACHED, ps.cached);
  tsd_gauge_set(TSD_G_MEM_PEAK, ps.peak);
  tsd_gauge_set(TSD_G_MEM_LIMIT, (uint64_t)e->cfg->memory_limit);
  tsd_gauge_set(TSD_G_COLLECTIVE_OPS, tsd_seq_ops_run(e->seq));
}

/* Bytes of the start-up measurements of the link rates. */
#define RATE_CROSS_BYTES ((int64_t)4 << 20)
#define RATE_HOST_BYTES ((size_t)16 << 20)

/* The seconds of the fastest of three copies of RATE_HOST_BYTES (the first warms the pages). */
static double copy_seconds(ts_error *err) {
  char *a = malloc(RATE_HOST_BYTES), *b = malloc(RATE_HOST_BYTES);
  double best = -1;
  if (!a || !b) {
    ts_error_set(err, TS_NO_MEMORY, "no memory for the copy that measures a host's rate");
  } else {
    memset(a, 1, RATE_HOST_BYTES);
    memset(b, 2, RATE_HOST_BYTES);
    for (int k = 0; k < 3; k++) {
      int64_t t0 = ts_wait_now_ns();
      memcpy(b, a, RATE_HOST_BYTES);
      double s = (double)(ts_wait_now_ns() - t0) * 1e-9;
      best = best < 0 || s < best ? s : best;
    }
  }
  free(a);
  free(b);
  return best;
}

/* The link rates plans weigh on a job that spans hosts: those --link-rates gives, the others
 * measured (between rank 0 and the first rank of the second host; a copy on rank 0), every rank
 * taking rank 0's figures so that all plan alike. */
static int link_rates(tsd_engine *e, ts_topology *topo, ts_error *err) {
  int rc = e->cfg->link_rates[0] ? ts_topology_parse_rates(topo, e->cfg->link_rates, err) : 0;
  ts_comm *w = ts_world_comm(e->world);
  if (!rc && !ts_topology_rate_given(topo, TS_LINK_CROSS)) {
    int peer = 1;
    while (ts_topology_host(topo, peer) == ts_topology_host(topo, 0))
      peer++;
    double r;
    rc = ts_comm_link_rate(w, 0, peer, RATE_CROSS_BYTES, &r, err);
    if (!rc)
      rc = ts_topology_set_rate(topo, TS_LINK_CROSS, r, err);
  }
  if (!rc && !ts_topology_rate_given(topo, TS_LINK_HOST)) {
    double r = 0;
    if (e->rank == 0) {
      double s = copy_seconds(err);
      r = s > 0 ? (double)RATE_HOST_BYTES / s : TS_LINK_HOST_DEFAULT_BPS;
    }
    rc = ts_comm_bcast(w, &r, sizeof r, 0, err);
    if (!rc)
      rc = ts_topology_set_rate(topo, TS_LINK_HOST, r, err);
  }
  return rc;
}

/* Where the ranks live, from the world's nodes, and the rates of their links: every plan of the
 * store is planned on it. */
static int place_ranks(tsd_engine *e, ts_error *err) {
  ts_topology *topo = NULL;
  int rc = ts_topology_create(e->size, ts_world_node_of(e->world), &topo, err);
  if (!rc && ts_topology_nhosts(topo) > 1)
    rc = link_rates(e, topo, err);
  if (rc) {
    ts_topology_destroy(&topo);
    return rc;
  }
  ts_plan_cache_set_topology(ts_store_plans(e->store), topo);
  if (e->rank == 0 && ts_topology_nhosts(topo) > 1) {
    char text[200];
    size_t n = ts_topology_format(topo, text, sizeof text);
    TSD_LOG(TSD_LOG_INFO,
            "ranks on %d hosts: %s%s; plans weigh each host's link: inside a "
            "host %.4g MB/s (%s), between hosts %.4g MB/s (%s)",
            ts_topology_nhosts(topo), text, n >= sizeof text ? "..." : "",
            ts_topology_rate(topo, TS_LINK_HOST) / 1e6,
            strstr(e->cfg->link_rates, "host=") ? "given" : "measured",
            ts_topology_rate(topo, TS_LINK_CROSS) / 1e6,
            strstr(e->cfg->link_rates, "cross=") ? "given" : "measured");
  }
  ts_topology_destroy(&topo);
  return TS_OK;
}

int tsd_engine_run(tsd_engine_opts *opts, ts_error *err) {
  tsd_engine *e = calloc(1, sizeof *e);
  if (!e)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the engine");
  e->cfg = opts->cfg;
  e->world = opts->world;
  e->sh = opts->shared;
  e->ops = opts->ops;
  e->sh->stamp_times = e->cfg->trace_ring > 0; /* before serving: the loop thread reads it */
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
                         .collective_pending_max = e->cfg->collective_pending_max,
                         .stamp_times = e->sh->stamp_times,
                         .fault_orders_undecodable = tsd_fault_take_all(TSD_FAULT_ORDER_DECODE)};
  int rc = tsd_seq_create(e->rank, e->size, &hooks, &scfg, &e->seq, err);
  if (rc)
    goto out;
  ts_pool_config pc = {e->cfg->memory_limit, e->cfg->pool_cache, e->cfg->pool_idle_ms,
                       e->cfg->pool_huge != 0};
  ts_pool_configure(&pc);
  if ((rc = ts_store_create(&e->store, e->rank, e->cfg->memory_limit, err)) ||
      (rc = place_ranks(e, err)) ||
      (rc = ts_world_clock_offset(e->world, &e->clock_offset_ns, &e->clock_rtt_ns, err)))
    goto out;
  if ((rc = ts_control_create(e->world, &e->ctl, err)))
    goto out;
  /* What the operations do before any client is served (a resume), then the serving starts:
   * both collective, the same outcome on every rank. */
  if (e->ops->start && (rc = e->ops->start(e, err)))
    goto out;
  publish_numbers(e); /* what a resume restored, before the first scrape */
  if (opts->serve && (rc = opts->serve(opts->serve_ctx, err)))
    goto out;
  /* Short timed waits must be short: the default timer slack (50 us) would round them up. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  /* With every rank's doorbell on this node, ORDERs and local work ring the engine: it blocks
   * until rung. Otherwise messages of other nodes come unannounced: the naps of old. */
  e->bells = ts_world_bells_local(e->world);
  ts_waiter idle; /* the engine's idle wait lasts as long as the daemon: no deadline */
  ts_waiter_init(&idle, e->bells ? &ts_wait_engine_bell : &ts_wait_engine, TS_WAIT_FOREVER);
  while (!e->stopping) {
    uint32_t seen = ts_world_bell_seq(e->world); /* before looking: a later ring ends the wait */
    bool busy = false;
    tsd_work *list = (tsd_work *)tsd_queue_take_all(&e->sh->work);
    while (list) {
      tsd_work *w = list;
      list = (tsd_work *)list->node.next;
      handle_work(e, w);
      busy = true;
    }
    /* What rank 0 just ordered runs before any probe: a probe (or a test of a send) that finds
     * nothing yields the core where ranks outnumber cores (Open MPI's progress when idle). One
     * control message per turn, for the same reason: the operation an ORDER releases runs
     * before the next probe. The sends are retired last. */
    if (tsd_seq_run(e->seq) > 0)
      busy = true;
    int src, tag;
    void *buf;
    size_t len;
    ts_error perr;
    int got = ts_control_poll(e->ctl, &src, &tag, &buf, &len, &perr);
    if (got < 0) {
      TSD_LOG(TSD_LOG_ERROR, "%s", perr.msg);
    } else if (got == 1) {
      tsd_seq_message(e->seq, src, tag, buf, len);
      free(buf);
      busy = true;
      if (tsd_seq_run(e->seq) > 0)
        busy = true;
    }
    if (tsd_order_release(e, run_work) > 0)
      busy = true;
    if (e->ops->tick && e->ops->tick(e))
      busy = true;
    ts_error cerr;
    int sends_pending = ts_control_progress(e->ctl, &cerr);
    if (sends_pending < 0)
      TSD_LOG(TSD_LOG_ERROR, "a control message to another rank failed: %s", cerr.msg);
    if (busy) {
      publish_numbers(e);
      ts_waiter_progress(&idle);
      tsd_log_due_ns(); /* held log lines wait no longer while work keeps coming */
    } else {
      if (ts_pool_trim(false) > 0) /* cached buffers idle long enough go back to the OS */
        publish_numbers(e);
      engine_pause(e, &idle, seen, sends_pending);
    }
  }
  finish_sequencer(e);
  tsd_order_drop_all(e); /* requests held behind collectives: answered SHUTDOWN */
  /* Work that arrived after the shutdown ran: answer it. */
  tsd_work *list = (tsd_work *)tsd_queue_take_all(&e->sh->work);
  while (list) {
    tsd_work *w = list;
    list = (tsd_work *)list->node.next;
    if (!w->conn_closed && !w->signal_shutdown && w->req) {
      e->answering = (int)w->req->op_case;
      tsd_reply_status(e, w->conn_id, w->req->id, TS_SHUTDOWN, "the daemon is shutting down");
    }
    tsd_request_free(&w->req);
    free(w);
  }
  TSD_LOG(TSD_LOG_INFO, "engine stopped after %llu collective operations",
          (unsigned long long)tsd_seq_ops_run(e->seq));
out:
  e->ops->stop(e);
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
