/* server.c - the libuv loop thread: sockets, framing, decoding, validation, ping, and delivery of
 * the engine's answers.
 *
 * Per connection: read the 4-byte length, check it against the maximum frame, then read exactly
 * that many bytes into a buffer allocated for it; decode the Request and validate it with its
 * row in the table of operations (wire/optable.c); answer refusals here, and the operations whose
 * scope is the loop (ping) or the catalog (list and describe, catalog.c), hand everything else
 * to the engine, and stop reading from a connection
 * while --max-inflight of its requests are with the engine (64 by default: a client keeps
 * several operations in flight; the bound caps what a client can make the daemon hold, one
 * decoded request each). The engine runs a connection's requests in submission order (its
 * local ones wait behind its collectives, engine/order.c); refusals and pings from this thread
 * may overtake them, so clients match answers by request id. A frame with a bad length cannot be
 * skipped safely: the daemon answers it and closes the connection. A closed connection is reported
 * to the engine, which frees what it held. TCP connections must present the token before anything
 * else. Frames held at once: every connection holds at most one frame being received; frames up to
 * TSD_SMALL_FRAME are each connection's own share (pings, lists, creates always get through),
 * larger ones draw on a budget of TSD_FRAME_BUDGET maximum frames shared by all connections and
 * are refused before a TCP connection presented its token. A frame must arrive whole within
 * --frame-timeout of its first byte, and a TCP client must present its token within
 * --auth-timeout after connecting; a sweep timer closes the connections that do not (status
 * TIMEOUT), and those whose client hung up while they were not read (the engine then frees what
 * they held). At most --max-unauthenticated TCP connections wait for their token at once: past it a
 * new TCP connection is closed as soon as it is accepted, so a flood of them cannot take the
 * descriptors the job's Unix-socket clients need (those never count). Warnings about such
 * connections are rate-limited (conn_warn).
 * Unix connections belong to the process that opened them (its pid from SO_PEERCRED, a pidfd
 * from SO_PEERPIDFD, its start time). They are read with recvmsg under SO_PASSCRED, so every
 * chunk comes with the kernel's credentials of the process that wrote it (the kernel never
 * joins bytes of two writers in one read): a frame written by another process (a child after
 * fork(), a process the descriptor was passed to), by several, or after the owner exited is
 * refused (AUTH) whatever it asks, and a request naming the client's memory carries the
 * owner's pid and start time and the sender's uid, which every rank checks again before it
 * copies (comm/proc.c). libuv reads with read(), which drops credentials, so a Unix connection's
 * reads go through a uv_poll_t on a dup() of its descriptor; the uv_pipe_t serves the writes.
 * Small answers to Unix connections the engine may write itself (engine/outlet.c): the loop
 * registers each such connection's outlet when it accepts it and shuts it when the connection
 * starts closing, holds it while it hands a frame to libuv, and takes the engine's notices of
 * what it wrote (for the requests in flight) when it next wakes: a read of the connection, or
 * its async when it stopped reading the connection (the engine wakes it then).
 * TERM and INT reach the loop through signals.c's pipe and start a shutdown on every rank.
 * Shutdown: the engine finishes, then tsd_server_stop flushes the answers, removes the sockets
 * and closes every handle (a timer forces the close of clients that do not read). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "tsd_front.h"
#include "ts_comm.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

/* Frames being received at once, in maximum frames: many clients that announce large frames and
 * send them slowly cannot make the daemon hold more than this. */
#define TSD_FRAME_BUDGET 8
/* Frames up to this size are received outside the budget (one per connection). It also bounds a
 * TCP connection's frames until it presented its token (a ping with a token is ~300 bytes). */
#define TSD_SMALL_FRAME 4096
/* Warnings about connections: at most one line in this many ms (conn_warn). */
#define TSD_WARN_EVERY_MS 1000
/* Requests of one connection with the engine whose frames were larger than TSD_SMALL_FRAME (data
 * chunks), at most: a client with many operations in flight holds at most this many frames of
 * data in the daemon, whatever --max-inflight says. */
#define TSD_BIG_INFLIGHT 2
/* Chunks read from one Unix connection per wake-up, at most (the others get their turn). */
#define TSD_READS_PER_WAKE 64

/* The process that wrote a chunk of a Unix connection (SCM_CREDENTIALS; pid 0: none came). */
typedef struct sender {
  int64_t pid;
  uint32_t uid;
} sender;

typedef struct conn {
  union {
    uv_pipe_t pipe;
    uv_tcp_t tcp;
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  uv_poll_t rpoll; /* Unix sockets: reads (recvmsg) on rfd, a dup() of the pipe's descriptor */
  int rfd;         /* -1: none (TCP) */
  int handles;     /* handles still to close: freed when none is left */
  struct conn *next;
  struct tsd_server *srv;
  uint64_t id;
  bool is_tcp, authed, closing, close_after_write, reading;
  bool unauth_counted; /* TCP: counted in the server's unauthenticated connections */
  bool last_frame_big; /* the frame being processed was over TSD_SMALL_FRAME */
  int inflight;        /* requests with the engine */
  int answering;       /* the op_case of the request being processed (0: none or undecoded; -1: an
                        * answer the engine counted) */
  /* ... of them, the ids of those that came in frames over TSD_SMALL_FRAME (0: free slot) */
  int big_inflight;
  uint64_t big_ids[TSD_BIG_INFLIGHT];
  /* Unix sockets: the process that opened the connection (SO_PEERCRED; 0 when unknown), its
   * effective uid, a pidfd of it (-1: none) and its start time (0: unknown). */
  int64_t owner_pid;
  uint32_t owner_uid;
  int owner_pidfd;
  uint64_t owner_start;
  sender frame_from; /* who wrote the frame being received (Unix sockets) */
  bool frame_mixed;  /* ... its bytes came from several processes */
  uint8_t header[TSD_FRAME_HEADER];
  size_t have_header;
  uint64_t opened_ms, frame_start_ms; /* loop time of the accept, of a frame's first byte */
  uint8_t *frame;
  uint32_t frame_len;
  size_t have;
  int writes_pending;
  tsd_outlet *out; /* Unix connections: where the engine may write its answers itself */
} conn;

typedef struct write_req {
  uv_write_t req;
  conn *c;
  uint8_t *frame;
} write_req;

struct tsd_server {
  uv_loop_t loop;
  uv_pipe_t unix_srv;
  uv_tcp_t tcp_srv;
  bool has_tcp, stopping, stop_requested, signalled;
  bool direct_off; /* TSHARD_DIRECT=0 at start: transfers naming a client's memory are refused */
  uv_async_t async;
  uv_poll_t sigpoll; /* the read end of signals.c's pipe */
  int sigfd;
  uv_timer_t stop_timer;
  uv_timer_t sweep_timer; /* closes connections past --frame-timeout or --auth-timeout; runs
                           * while there are connections */
  uint64_t sweep_tick;
  pthread_t thread;
  tsd_shared *sh;
  const tsd_config *cfg;
  int rank, size;
  char path[600];
  conn *conns;
  uint64_t next_id;
  tsd_limits lim;
  tsd_loop_info info;
  int64_t frame_bytes;    /* buffers of frames being received, all connections */
  int64_t frame_budget;   /* their bound: TSD_FRAME_BUDGET maximum frames */
  int64_t unauthed;       /* TCP connections that have not presented their token yet */
  uint64_t warn_ms;       /* loop time of the last connection warning (conn_warn) */
  uint64_t warn_left_out; /* warnings not written since */
  bool warned;
};

static void conn_close(conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void on_poll(uv_poll_t *p, int status, int events);
static void deliver_replies(tsd_server *s);

/* Reading from a connection starts and stops here (backpressure, refusals, shutdown): through
 * libuv's reads for TCP, through the poll handle of its descriptor's dup for Unix sockets. */
static void conn_read_start(conn *c) {
  if (c->reading || c->closing)
    return;
  c->reading = true;
  if (c->rfd >= 0)
    uv_poll_start(&c->rpoll, UV_READABLE, on_poll);
  else
    uv_read_start(&c->h.stream, on_alloc, on_read);
}

static void conn_read_stop(conn *c) {
  if (!c->reading)
    return;
  c->reading = false;
  if (c->rfd >= 0)
    uv_poll_stop(&c->rpoll);
  else
    uv_read_stop(&c->h.stream);
}

static void close_if_open(uv_handle_t *h);

/* Warnings about connections refused or closed for what their client did: at most one line
 * every TSD_WARN_EVERY_MS, which says how many were left out before it (the sweep timer writes
 * the count when no other line comes), so that a flood of connections cannot flood the log. */
__attribute__((format(printf, 2, 3))) static void conn_warn(tsd_server *s, const char *fmt, ...) {
  if (TSD_LOG_WARN > tsd_log_threshold)
    return;
  uint64_t now = uv_now(&s->loop);
  if (s->warned && now - s->warn_ms < TSD_WARN_EVERY_MS) {
    s->warn_left_out++;
    return;
  }
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (s->warn_left_out)
    TSD_LOG(TSD_LOG_WARN,
            "%s (and %llu more warnings about connections left out since the "
            "last one)",
            line, (unsigned long long)s->warn_left_out);
  else
    TSD_LOG(TSD_LOG_WARN, "%s", line);
  s->warned = true;
  s->warn_ms = now;
  s->warn_left_out = 0;
}

/* The count of warnings left out, once no other warning came for TSD_WARN_EVERY_MS. */
static void conn_warn_flush(tsd_server *s) {
  if (s->warn_left_out && uv_now(&s->loop) - s->warn_ms >= TSD_WARN_EVERY_MS) {
    TSD_LOG(TSD_LOG_WARN, "%llu more warnings about connections left out",
            (unsigned long long)s->warn_left_out);
    s->warn_left_out = 0;
    s->warn_ms = uv_now(&s->loop);
  }
}

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->handles > 0)
    return;
  tsd_server *s = c->srv;
  if (c->frame && c->frame_len > TSD_SMALL_FRAME)
    s->frame_bytes -= c->frame_len;
  if (c->unauth_counted)
    s->unauthed--;
  tsd_gauge_add(TSD_G_INFLIGHT, -(int64_t)c->inflight); /* their answers will find no one */
  if (c->rfd >= 0)
    close(c->rfd);
  if (c->owner_pidfd >= 0)
    close(c->owner_pidfd);
  free(c->frame);
  free(c);
  if (s && s->stopping && !s->conns)
    close_if_open((uv_handle_t *)&s->stop_timer);
}

static void conn_close(conn *c) {
  if (c->closing && uv_is_closing(&c->h.handle))
    return;
  tsd_server *s = c->srv;
  for (conn **pp = &s->conns; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      atomic_fetch_sub_explicit(&s->sh->connections, 1, memory_order_relaxed);
      tsd_gauge_add(TSD_G_CONNECTIONS, -1);
      break;
    }
  c->closing = true;
  tsd_outlet_shut(s->sh, &c->out); /* before its descriptor goes */
  tsd_work *w = calloc(1, sizeof *w);
  if (w) {
    w->conn_id = c->id;
    w->conn_closed = true;
    tsd_push_work(s->sh, w);
  }
  uv_close(&c->h.handle, on_conn_closed);
  if (c->rfd >= 0)
    uv_close((uv_handle_t *)&c->rpoll, on_conn_closed);
}

static void on_written(uv_write_t *req, int status) {
  write_req *wr = (write_req *)req;
  conn *c = wr->c;
  free(wr->frame);
  free(wr);
  c->writes_pending--;
  tsd_outlet_write_done(c->out);
  if (status < 0 || (c->close_after_write && c->writes_pending == 0))
    conn_close(c);
}

/* Takes the frame. counted: an engine answer its outlet counted as queued (outlet.c); the
 * outlet is held while libuv takes the frame, so the engine never writes in the middle. */
static void conn_write_as(conn *c, uint8_t *frame, size_t len, bool counted) {
  write_req *wr = malloc(sizeof *wr);
  if (!wr || c->closing) {
    if (counted)
      tsd_outlet_uncount(c->out);
    free(wr);
    free(frame);
    return;
  }
  wr->c = c;
  wr->frame = frame;
  uv_buf_t b = uv_buf_init((char *)frame, (unsigned)len);
  c->writes_pending++;
  tsd_outlet_write_begin(c->out, counted);
  int rc = uv_write(&wr->req, &c->h.stream, &b, 1, on_written);
  tsd_outlet_write_handed(c->out);
  if (rc < 0) {
    c->writes_pending--;
    tsd_outlet_write_done(c->out);
    free(frame);
    free(wr);
    conn_close(c);
  }
}

static void conn_write(conn *c, uint8_t *frame, size_t len) { conn_write_as(c, frame, len, false); }

static void conn_reply_error(conn *c, uint64_t id, int status, const char *msg, bool close) {
  uint8_t *frame;
  size_t len;
  if (c->answering >= 0)
    tsd_count_answer(c->answering, status);
  if (close)
    conn_read_stop(c); /* nothing more is read from a connection being closed */
  if (tsd_error_frame(id, status, msg, &frame, &len) == TS_OK) {
    c->close_after_write = close;
    if (close)
      tsd_outlet_shut(c->srv->sh, &c->out); /* nothing more after this answer */
    conn_write(c, frame, len);
  } else if (close) {
    conn_close(c);
  }
}

/* The process that opened a Unix connection, as the kernel saw it connect (SO_PEERCRED), a
 * pidfd of it (SO_PEERPIDFD names that very process; pidfd_open where the kernel lacks it) and
 * its start time, read while the pidfd shows it alive. Unknown: pid 0, pidfd -1, start 0. */
static void conn_owner(conn *c, int fd) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  c->owner_pidfd = -1;
  c->owner_uid = UINT32_MAX;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.pid <= 0)
    return;
  c->owner_pid = cr.pid;
  c->owner_uid = cr.uid;
  int pidfd = -1;
  len = sizeof pidfd;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0 || pidfd < 0)
    pidfd = ts_comm_proc_open(c->owner_pid);
  if (pidfd >= 0)
    fcntl(pidfd, F_SETFD, FD_CLOEXEC);
  c->owner_pidfd = pidfd;
  if (pidfd >= 0 && ts_comm_proc_start(c->owner_pid, pidfd, &c->owner_start) != 0)
    c->owner_start = 0;
}

/* A frame of a Unix connection must come whole from the process that opened it, while that
 * process lives (a pid equal to the owner's after the owner exited is another process). False
 * after answering a refusal (the connection stays open: its owner may still use it). */
static bool sender_ok(conn *c, uint64_t req_id) {
  char msg[400];
  const sender *f = &c->frame_from;
  if (c->frame_mixed)
    snprintf(msg, sizeof msg,
             "this request's bytes were written by several processes (%lld "
             "among them) on one connection at once; the connection belongs to process %lld "
             "(which opened it): after fork() a process must open its own connection",
             (long long)f->pid, (long long)c->owner_pid);
  else if (f->pid != c->owner_pid)
    snprintf(msg, sizeof msg,
             "this connection belongs to process %lld (which opened it); "
             "process %lld sent this request: after fork() a process must open its own "
             "connection",
             (long long)c->owner_pid, (long long)f->pid);
  else if (c->owner_pidfd >= 0 && !ts_comm_proc_alive(c->owner_pidfd))
    snprintf(msg, sizeof msg,
             "this connection belongs to process %lld, which opened it and "
             "has exited; the process now holding pid %lld sent this request: a process must "
             "open its own connection",
             (long long)c->owner_pid, (long long)f->pid);
  else
    return true;
  conn_warn(c->srv, "connection %llu: a request from process %lld refused: %s",
            (unsigned long long)c->id, (long long)f->pid, msg);
  conn_reply_error(c, req_id, TS_AUTH, msg, false);
  return false;
}

/* A request of a row whose data may go through the client's memory (TSD_OP_CLIENT_MEMORY)
 * that names it: only over a Unix socket, and the process is the one that sent it (sender_ok:
 * the connection's owner), named by pid, start time and the uid of its credentials, whatever the
 * client wrote. False after answering a refusal. */
static bool client_memory_ok(conn *c, Tshard__Request *req) {
  if (!(tsd_op_flags((int)req->op_case) & TSD_OP_CLIENT_MEMORY))
    return true;
  size_t n = 1; /* the number of items, known after the first */
  Tshard__ClientMemory *m = NULL;
  for (size_t i = 0; i < n && !m; i++) /* the validator made sure every item names it, or none */
    m = tsd_request_client_memory(req, i, &n);
  if (!m)
    return true;
  if (c->is_tcp || c->owner_pid <= 0 || c->owner_start == 0 || c->srv->direct_off) {
    conn_reply_error(c, req->id, TS_NO_DIRECT,
                     c->is_tcp ? "the client's memory can be reached only over a Unix socket on "
                                 "the daemon's node; over TCP the data travels in the frames"
                     : c->srv->direct_off
                         ? "this daemon does not reach into clients' memory (TSHARD_DIRECT=0 "
                           "where it started); the data goes through the shared segment"
                         : "the client's process cannot be identified (no peer credentials, "
                           "pidfd or /proc entry); the data goes through the shared segment",
                     false);
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    Tshard__ClientMemory *x = tsd_request_client_memory(req, i, &n);
    if (!x)
      continue;
    x->pid = c->owner_pid;
    x->uid = c->frame_from.uid;
    x->start_time = c->owner_start;
  }
  return true;
}

static bool token_ok(const char *given, const char *want) {
  size_t n = strlen(want), m = strlen(given);
  unsigned diff = (unsigned)(n ^ m);
  for (size_t i = 0; i < n; i++)
    diff |= (unsigned)(want[i] ^ (i < m ? given[i] : 0));
  return diff == 0;
}

static int answer_ping(const tsd_loop_info *info, const Tshard__Request *req, uint8_t **frame,
                       size_t *len) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__PingResult p = TSHARD__PING_RESULT__INIT;
  r.id = req->id;
  r.result_case = TSHARD__RESPONSE__RESULT_PING;
  r.ping = &p;
  p.rank = info->rank;
  p.world_size = info->world_size;
  p.job = (char *)info->job;
  p.max_frame = (uint64_t)info->max_frame;
  return tsd_response_frame(&r, frame, len, NULL) == TS_OK ? 1 : -1;
}

/* List and describe: from the catalog unless busy (then the engine answers after the
 * operation). */
static int answer_catalog(const tsd_loop_info *info, const Tshard__Request *req, uint8_t **frame,
                          size_t *len) {
  return tsd_catalog_answer(info->catalog, req, true, frame, len);
}

/* The front half of the table of operations (see tsd_front.h): the loop column of the list. */
#define LOOP_ROW(kind, name, scope, scope_of, flags, validate, loop, ...)                          \
  [TSHARD__REQUEST__OP_##kind] = loop,
static const tsd_loop_fn loop_answers[] = {TSD_OPERATIONS(LOOP_ROW)};

tsd_loop_fn tsd_loop_answer(int op_case) {
  if (op_case <= 0 || (size_t)op_case >= sizeof loop_answers / sizeof loop_answers[0])
    return NULL;
  return loop_answers[op_case];
}

/* Whether a connection is not read until the engine answers one of its requests: --max-inflight
 * of them are with it, or TSD_BIG_INFLIGHT data frames. */
static bool conn_paused(const conn *c) {
  return c->inflight >= c->srv->cfg->max_inflight || c->big_inflight >= TSD_BIG_INFLIGHT;
}

/* A request in a large frame goes to the engine (a slot is free: the connection is read). */
static void big_take(conn *c, uint64_t req_id) {
  for (int i = 0; i < TSD_BIG_INFLIGHT; i++)
    if (!c->big_ids[i]) {
      c->big_ids[i] = req_id ? req_id : UINT64_MAX;
      c->big_inflight++;
      return;
    }
}

/* The engine answered request req_id: its large-frame slot, if it had one, is free. */
static void big_give(conn *c, uint64_t req_id) {
  uint64_t id = req_id ? req_id : UINT64_MAX;
  for (int i = 0; i < TSD_BIG_INFLIGHT; i++)
    if (c->big_ids[i] == id) {
      c->big_ids[i] = 0;
      c->big_inflight--;
      return;
    }
}

static void process_request(conn *c) {
  tsd_server *s = c->srv;
  Tshard__Request *req = NULL;
  ts_error err;
  uint8_t *frame = c->frame;
  uint32_t len = c->frame_len;
  if (len > TSD_SMALL_FRAME)
    s->frame_bytes -= len;
  c->last_frame_big = len > TSD_SMALL_FRAME;
  c->frame = NULL;
  c->have = 0;
  c->have_header = 0;
  int rc = tsd_request_decode(frame, len, &req, &err);
  c->answering = req ? (int)req->op_case : 0;
  if (rc == TS_OK)
    rc = tsd_request_check_strings(frame, len, &err);
  free(frame);
  if (!rc && !c->is_tcp && !sender_ok(c, req->id)) {
    tsd_request_free(&req);
    return;
  }
  if (rc) {
    conn_reply_error(c, req ? req->id : 0, rc, err.msg, c->is_tcp && !c->authed);
    tsd_request_free(&req);
    return;
  }
  if (c->is_tcp && !c->authed) {
    if (!token_ok(req->token, s->cfg->token)) {
      conn_warn(s, "TCP connection %llu presented a wrong token; closing it",
                (unsigned long long)c->id);
      conn_reply_error(c, req->id, TS_AUTH,
                       "wrong or missing token; TCP clients must send the "
                       "token of the daemon's --token-file",
                       true);
      tsd_request_free(&req);
      return;
    }
    c->authed = true;
    if (c->unauth_counted)
      s->unauthed--;
    c->unauth_counted = false;
  }
  const tsd_op *op;
  if ((rc = tsd_request_validate(req, &s->lim, &op, &err))) {
    TSD_LOG(TSD_LOG_DEBUG, "refused %s from connection %llu: %s", tsd_op_name(req->op_case),
            (unsigned long long)c->id, err.msg);
    conn_reply_error(c, req->id, rc, err.msg, false);
    tsd_request_free(&req);
    return;
  }
  if (op->flags & TSD_OP_UNIX_ONLY && c->is_tcp) {
    conn_reply_error(c, req->id, TS_UNSUPPORTED,
                     "shared memory needs a Unix socket connection "
                     "on the daemon's node; over TCP the data travels in the frames",
                     false);
    tsd_request_free(&req);
    return;
  }
  if (!client_memory_ok(c, req)) {
    tsd_request_free(&req);
    return;
  }
  tsd_scope scope = tsd_op_scope(op, req);
  /* Ping here; list and describe from the engine's catalog unless it is changing those names
   * or this connection has requests with the engine (its answers keep their order). */
  if (scope == TSD_SCOPE_LOOP || (scope == TSD_SCOPE_CATALOG && c->inflight == 0)) {
    uint8_t *frame;
    size_t flen;
    uint64_t t0 = uv_hrtime();
    tsd_loop_fn answer = tsd_loop_answer((int)req->op_case);
    int got = answer ? answer(&s->info, req, &frame, &flen) : -1;
    if (got == 1) {
      tsd_count_latency((int)req->op_case, uv_hrtime() - t0);
      tsd_count_answer((int)req->op_case, TS_OK);
      conn_write(c, frame, flen);
    } else if (scope == TSD_SCOPE_LOOP)
      conn_reply_error(c, req->id, TS_NO_MEMORY, "no memory for the answer", false);
    if (got == 1 || scope == TSD_SCOPE_LOOP) {
      tsd_request_free(&req);
      return;
    } /* else the engine answers it (busy names, no memory) */
  }
  tsd_work *w = calloc(1, sizeof *w);
  if (!w) {
    conn_reply_error(c, req->id, TS_NO_MEMORY, "no memory to queue the request", false);
    tsd_request_free(&req);
    return;
  }
  w->conn_id = c->id;
  w->req = req;
  w->scope = scope;
  ++c->inflight;
  tsd_gauge_add(TSD_G_INFLIGHT, 1);
  if (c->last_frame_big)
    big_take(c, req->id);
  if (conn_paused(c)) {
    conn_read_stop(c);
    tsd_outlet_set_paused(s->sh, c->out, true); /* the engine wakes the loop for its notices */
  }
  tsd_push_work(s->sh, w);
}

/* A whole frame: its request answered here or handed to the engine. */
static void process_frame(conn *c) {
  process_request(c);
  c->answering = 0; /* later refusals of the connection (timeouts) are of no request */
}

/* Where the next bytes of a connection go: the rest of the frame header, else of the frame. */
static void conn_buf(conn *c, uv_buf_t *buf) {
  if (c->frame)
    *buf = uv_buf_init((char *)c->frame + c->have, (unsigned)(c->frame_len - c->have));
  else
    *buf = uv_buf_init((char *)c->header + c->have_header,
                       (unsigned)(TSD_FRAME_HEADER - c->have_header));
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn_buf(h->data, buf);
}

/* A frame header is complete: the frame's buffer, after the checks of its length. */
static void frame_begin(conn *c) {
  uint32_t len = tsd_frame_length(c->header);
  ts_error err;
  int rc = tsd_frame_check(len, c->srv->cfg->max_frame, &err);
  if (rc) {
    conn_warn(c->srv, "connection %llu: %s; closing it", (unsigned long long)c->id, err.msg);
    conn_reply_error(c, 0, rc, err.msg, true);
    return;
  }
  if (len > TSD_SMALL_FRAME && c->is_tcp && !c->authed) {
    conn_warn(c->srv, "connection %llu: frame of %u bytes before the token; closing it",
              (unsigned long long)c->id, len);
    conn_reply_error(c, 0, TS_AUTH,
                     "a TCP connection first presents the token in a frame of "
                     "at most 4096 bytes (a ping); larger frames only after that",
                     true);
    return;
  }
  bool small = len <= TSD_SMALL_FRAME;
  if (!small && c->srv->frame_bytes + (int64_t)len > c->srv->frame_budget) {
    conn_warn(c->srv,
              "connection %llu: frame of %u bytes refused, %lld bytes of frames "
              "already being received",
              (unsigned long long)c->id, len, (long long)c->srv->frame_bytes);
    conn_reply_error(c, 0, TS_LIMIT,
                     "the daemon is receiving too many large frames at once; "
                     "retry later or send smaller chunks",
                     true);
    return;
  }
  c->frame = malloc(len);
  if (!c->frame) {
    conn_reply_error(c, 0, TS_NO_MEMORY, "no memory for the frame", true);
    return;
  }
  c->frame_len = len;
  c->have = 0;
  if (!small)
    c->srv->frame_bytes += len;
}

/* n bytes arrived where conn_buf said, written by `from` (Unix sockets; NULL for TCP). */
static void conn_take(conn *c, size_t n, const sender *from) {
  if (!c->frame && c->have_header == 0) { /* a frame's first bytes */
    c->frame_start_ms = uv_now(&c->srv->loop);
    c->frame_mixed = false;
    if (from)
      c->frame_from = *from;
  } else if (from && (from->pid != c->frame_from.pid || from->uid != c->frame_from.uid)) {
    c->frame_mixed = true;
  }
  if (!c->frame) {
    c->have_header += n;
    if (c->have_header == TSD_FRAME_HEADER)
      frame_begin(c);
    return;
  }
  c->have += n;
  if (c->have == c->frame_len)
    process_frame(c);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  conn *c = st->data;
  if (nread < 0) {
    if (nread != UV_EOF)
      TSD_LOG(TSD_LOG_DEBUG, "connection %llu: %s", (unsigned long long)c->id,
              uv_strerror((int)nread));
    conn_close(c); /* mid-frame or not: everything it held is freed */
    return;
  }
  if (nread > 0 && !c->closing)
    conn_take(c, (size_t)nread, NULL);
}

/* One recvmsg from a Unix connection into buf, with the credentials of the process that wrote
 * those bytes (pid 0 when none came); descriptors a client sent are closed. */
static ssize_t recv_creds(int fd, uv_buf_t buf, sender *from) {
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
  } ctl;
  struct iovec iov = {buf.base, buf.len};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.bytes;
  mh.msg_controllen = sizeof ctl.bytes;
  from->pid = 0;
  from->uid = UINT32_MAX;
  ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n <= 0)
    return n;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET)
      continue;
    if (cm->cmsg_type == SCM_CREDENTIALS && cm->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
      struct ucred u;
      memcpy(&u, CMSG_DATA(cm), sizeof u);
      from->pid = u.pid;
      from->uid = u.uid;
    } else if (cm->cmsg_type == SCM_RIGHTS) {
      size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int x;
        memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof x);
        close(x);
      }
    }
  }
  return n;
}

/* A Unix connection is readable: its chunks, each with its writer, until none is left (or a
 * bound, so that one busy client does not starve the others). */
static void on_poll(uv_poll_t *p, int status, int events) {
  (void)events;
  conn *c = p->data;
  /* The engine's answers it wrote itself: their accounting first (a client's next request is
   * what usually brings the loop here after one). */
  deliver_replies(c->srv);
  if (c->closing)
    return;
  if (status < 0) {
    TSD_LOG(TSD_LOG_DEBUG, "connection %llu: %s", (unsigned long long)c->id, uv_strerror(status));
    conn_close(c);
    return;
  }
  for (int i = 0; i < TSD_READS_PER_WAKE && c->reading && !c->closing; i++) {
    uv_buf_t buf;
    sender from;
    conn_buf(c, &buf);
    ssize_t n = recv_creds(c->rfd, buf, &from);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      if (n < 0)
        TSD_LOG(TSD_LOG_DEBUG, "connection %llu: %s", (unsigned long long)c->id, strerror(errno));
      conn_close(c); /* mid-frame or not: everything it held is freed */
      return;
    }
    conn_take(c, (size_t)n, &from);
  }
}

/* A TCP connection past --max-unauthenticated: answered LIMIT when the answer fits the socket
 * at once (nothing is read from it) and closed. */
/* Answers a connection just accepted with status and msg, without reading it (best effort: the
 * answer is sent only when it fits the socket at once), and closes it. */
static void refuse_at_accept(conn *c, int status, const char *msg) {
  uint8_t *frame;
  size_t len;
  uv_os_fd_t fd;
  if (uv_fileno(&c->h.handle, &fd) == 0 && tsd_error_frame(0, status, msg, &frame, &len) == TS_OK) {
    ssize_t sent = send(fd, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)sent;
    free(frame);
  }
  uv_close(&c->h.handle, on_conn_closed);
  if (c->handles > 1) /* a Unix connection's poll handle (unix_conn_setup) */
    uv_close((uv_handle_t *)&c->rpoll, on_conn_closed);
}

static void refuse_unauthenticated(conn *c) {
  tsd_server *s = c->srv;
  conn_warn(s,
            "TCP connection %llu refused: %lld connections are waiting to present their "
            "token (--max-unauthenticated)",
            (unsigned long long)c->id, (long long)s->unauthed);
  char msg[200];
  snprintf(msg, sizeof msg,
           "the daemon has %lld TCP connections that have not presented their "
           "token yet, its --max-unauthenticated; retry later",
           (long long)s->unauthed);
  refuse_at_accept(c, TS_LIMIT, msg);
}

/* The socket's directory (0700, ours) already keeps other users out; this holds even when a
 * process of another user could reach the socket (one that kept CAP_DAC_OVERRIDE, a descriptor
 * passed on before a bind mount changed): a Unix client runs as the daemon's user or as root. */
static bool unix_user_ok(conn *c) {
  uint32_t me = (uint32_t)geteuid();
  if (c->owner_uid == me || c->owner_uid == 0)
    return true;
  conn_warn(c->srv, "connection %llu refused: uid %u is neither the daemon's user (%u) nor root",
            (unsigned long long)c->id, (unsigned)c->owner_uid, (unsigned)me);
  char msg[200];
  snprintf(msg, sizeof msg,
           "this daemon serves its own user (uid %u) and root on its Unix "
           "socket; this process runs as uid %u",
           (unsigned)me, (unsigned)c->owner_uid);
  refuse_at_accept(c, TS_AUTH, msg);
  return false;
}

/* A Unix connection: credentials with every chunk (SO_PASSCRED; the listening socket has it too,
 * so bytes written before the accept carry them as well), its owner, and the poll handle its
 * reads go through. False when it cannot be served (then closed). */
static bool unix_conn_setup(conn *c) {
  uv_os_fd_t fd;
  int one = 1;
  if (uv_fileno(&c->h.handle, &fd) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0)
    return false;
  conn_owner(c, fd);
  c->rfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (c->rfd < 0)
    return false;
  if (uv_poll_init(&c->srv->loop, &c->rpoll, c->rfd) != 0) {
    close(c->rfd);
    c->rfd = -1;
    return false;
  }
  c->rpoll.data = c;
  c->handles++;
  c->out = tsd_outlet_open(c->srv->sh, c->id, fd);
  return true;
}

static void on_sweep(uv_timer_t *t);

static void on_connection(uv_stream_t *server, int status) {
  tsd_server *s = server->data;
  if (status < 0) {
    conn_warn(s, "cannot accept a connection: %s", uv_strerror(status));
    return;
  }
  if (s->stopping)
    return;
  conn *c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->srv = s;
  c->id = ++s->next_id;
  c->rfd = -1;
  c->owner_pidfd = -1;
  c->handles = 1;
  c->is_tcp = server == (uv_stream_t *)&s->tcp_srv;
  if (c->is_tcp)
    uv_tcp_init(&s->loop, &c->h.tcp);
  else
    uv_pipe_init(&s->loop, &c->h.pipe, 0);
  c->h.handle.data = c;
  if (uv_accept(server, &c->h.stream) < 0) {
    uv_close(&c->h.handle, on_conn_closed);
    return;
  }
  if (c->is_tcp && s->unauthed >= s->cfg->max_unauth) {
    refuse_unauthenticated(c);
    return;
  }
  if (c->is_tcp) {
    uv_tcp_nodelay(&c->h.tcp, 1);
    c->unauth_counted = true;
    s->unauthed++;
  } else if (!unix_conn_setup(c)) {
    TSD_LOG(TSD_LOG_WARN, "connection %llu: cannot read credentials on it: %s; closing it",
            (unsigned long long)c->id, strerror(errno));
    uv_close(&c->h.handle, on_conn_closed);
    return;
  } else if (!unix_user_ok(c)) {
    return;
  }
  c->opened_ms = uv_now(&s->loop);
  int sndbuf = 4 << 20; /* answers of many MiB: fewer wake-ups of the reading client */
  uv_send_buffer_size(&c->h.handle, &sndbuf);
  c->next = s->conns;
  s->conns = c;
  atomic_fetch_add_explicit(&s->sh->connections, 1, memory_order_relaxed);
  tsd_gauge_add(TSD_G_CONNECTIONS, 1);
  if (!uv_is_active((uv_handle_t *)&s->sweep_timer) && !s->stopping)
    uv_timer_start(&s->sweep_timer, on_sweep, s->sweep_tick, s->sweep_tick);
  conn_read_start(c);
}

static conn *find_conn(tsd_server *s, uint64_t id) {
  for (conn *c = s->conns; c; c = c->next)
    if (c->id == id)
      return c;
  return NULL;
}

/* An answer with a descriptor (shm_attach): sent by hand when libuv has nothing queued on the
 * connection (a client sends shm_attach alone), else refused. Takes the frame and the fd. */
static void conn_write_fd(conn *c, tsd_reply *r) {
  uv_os_fd_t sock;
  size_t sent = 0;
  tsd_outlet_write_begin(c->out, r->counted); /* the engine keeps off while this goes */
  tsd_outlet_write_handed(c->out);
  int e = uv_stream_get_write_queue_size(&c->h.stream) != 0 ? EBUSY
          : uv_fileno(&c->h.handle, &sock) != 0             ? EBADF
                                                : tsd_send_fd(sock, r->frame, r->len, r->fd, &sent);
  close(r->fd);
  if (e == 0 && sent < r->len) {
    memmove(r->frame, r->frame + sent, r->len - sent);
    conn_write(c, r->frame, r->len - sent);
  } else {
    free(r->frame);
  }
  tsd_outlet_write_done(c->out);
  if (e != 0) {
    TSD_LOG(TSD_LOG_WARN, "connection %llu: cannot pass its segment: %s", (unsigned long long)c->id,
            strerror(e));
    c->answering = -1; /* the engine counted this answer (as what it built) */
    conn_reply_error(c, r->req_id, TS_PROTOCOL,
                     "the shared-memory segment could not be passed "
                     "(send shm_attach alone, with no other request or answer outstanding, and "
                     "read its answer)",
                     false);
    c->answering = 0;
  }
}

/* An answer the engine could not build or queue: its error, built here; when even that fails
 * the connection is closed, with the reason in the log (the client sees it closed). */
static void answer_lost(conn *c, const tsd_reply *r) {
  uint8_t *frame;
  size_t len;
  const char *why = r->lost_reason ? r->lost_reason : "the daemon could not build this answer";
  if (tsd_error_frame(r->req_id, r->lost_status ? r->lost_status : TS_INTERNAL, why, &frame,
                      &len) == TS_OK) {
    conn_write_as(c, frame, len, r->counted);
    return;
  }
  TSD_LOG(TSD_LOG_ERROR,
          "connection %llu closed: the answer to its request %llu was lost (%s) "
          "and no memory was left to say so",
          (unsigned long long)c->id, (unsigned long long)r->req_id, why);
  conn_close(c);
}

static void deliver_replies(tsd_server *s) {
  tsd_reply *list = (tsd_reply *)tsd_queue_take_all(&s->sh->replies);
  while (list) {
    tsd_reply *r = list;
    list = (tsd_reply *)r->node.next;
    conn *c = find_conn(s, r->conn_id);
    if (c && !c->closing) {
      if (r->delivered)
        ; /* the engine wrote it (outlet.c): the accounting below is what is left */
      else if (r->fd >= 0)
        conn_write_fd(c, r);
      else if (r->frame)
        conn_write_as(c, r->frame, r->len, r->counted);
      else
        answer_lost(c, r);
      bool was_paused = conn_paused(c);
      c->inflight--;
      if (!r->delivered) /* the engine counted what it wrote itself */
        tsd_gauge_add(TSD_G_INFLIGHT, -1);
      big_give(c, r->req_id);
      if (was_paused && !conn_paused(c) && !s->stopping && !c->closing) {
        tsd_outlet_set_paused(s->sh, c->out, false);
        conn_read_start(c);
      }
    } else {
      if (r->delivered) /* the close took it off the gauge too: once only */
        tsd_gauge_add(TSD_G_INFLIGHT, 1);
      if (r->fd >= 0)
        close(r->fd);
      free(r->frame);
    }
    tsd_reply_release(s->sh, r);
  }
}

static void close_if_open(uv_handle_t *h) {
  if (h->type != UV_UNKNOWN_HANDLE && !uv_is_closing(h))
    uv_close(h, NULL);
}

static void on_stop_timer(uv_timer_t *t) {
  tsd_server *s = t->data;
  while (s->conns)
    conn_close(s->conns);
  close_if_open((uv_handle_t *)&s->stop_timer);
}

/* Whether the client of a connection no longer read (conn_paused: its requests are with the
 * engine) hung up. Reading resumes only after an answer, so without this look a client gone
 * while its requests wait (collectives waiting for participants) would hold them until they end;
 * POLLRDHUP reports the hang-up even behind unread frames. */
static bool paused_and_hung_up(conn *c) {
  uv_os_fd_t fd;
  if (!conn_paused(c) || uv_fileno(&c->h.handle, &fd) != 0)
    return false;
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Closes the connections whose client hung up while they were not read, the TCP ones that did
 * not present their token within --auth-timeout of connecting, and those that began a frame
 * longer than --frame-timeout ago. */
static void on_sweep(uv_timer_t *t) {
  tsd_server *s = t->data;
  uint64_t now = uv_now(&s->loop), frame_limit = (uint64_t)s->cfg->frame_timeout;
  uint64_t auth_limit = (uint64_t)s->cfg->auth_timeout;
  if (!s->conns) { /* nothing to watch: an idle daemon's loop sleeps until a connection */
    uv_timer_stop(t);
    return;
  }
  for (conn *c = s->conns, *next; c; c = next) {
    next = c->next;
    if (c->closing || c->close_after_write)
      continue;
    if (paused_and_hung_up(c)) {
      TSD_LOG(TSD_LOG_DEBUG, "connection %llu: the client hung up with %d requests in progress",
              (unsigned long long)c->id, c->inflight);
      conn_close(c);
      continue;
    }
    bool half = c->have_header > 0 || c->frame;
    if (c->is_tcp && !c->authed && now - c->opened_ms >= auth_limit) {
      conn_warn(s, "connection %llu: no token within %lld ms; closing it",
                (unsigned long long)c->id, (long long)auth_limit);
      conn_reply_error(c, 0, TS_TIMEOUT,
                       "no token within the daemon's --auth-timeout after "
                       "connecting",
                       true);
    } else if (half && now - c->frame_start_ms >= frame_limit) {
      conn_warn(s, "connection %llu: frame not complete within %lld ms; closing it",
                (unsigned long long)c->id, (long long)frame_limit);
      conn_reply_error(c, 0, TS_TIMEOUT,
                       "the frame did not arrive whole within the daemon's "
                       "--frame-timeout",
                       true);
    }
  }
  conn_warn_flush(s);
}

static void begin_stop(tsd_server *s) {
  s->stopping = true;
  close_if_open((uv_handle_t *)&s->sweep_timer);
  close_if_open((uv_handle_t *)&s->unix_srv);
  unlink(s->path);
  if (s->has_tcp)
    close_if_open((uv_handle_t *)&s->tcp_srv);
  close_if_open((uv_handle_t *)&s->sigpoll); /* later signals stay caught, and unread */
  close_if_open((uv_handle_t *)&s->async);
  conn *c = s->conns;
  while (c) {
    conn *next = c->next;
    conn_read_stop(c);
    tsd_outlet_shut(s->sh, &c->out);
    if (c->writes_pending == 0)
      conn_close(c);
    else
      c->close_after_write = true; /* closed once its answers are written */
    c = next;
  }
  if (s->conns) { /* forces the close of clients that do not read their answers */
    uv_timer_init(&s->loop, &s->stop_timer);
    s->stop_timer.data = s;
    uv_timer_start(&s->stop_timer, on_stop_timer, 3000, 0);
  }
}

static void on_async(uv_async_t *a) {
  tsd_server *s = a->data;
  deliver_replies(s);
  pthread_mutex_lock(&s->sh->mu);
  bool stop = s->stop_requested;
  pthread_mutex_unlock(&s->sh->mu);
  if (stop && !s->stopping)
    begin_stop(s);
}

static void on_signal(uv_poll_t *h, int status, int events) {
  (void)status, (void)events;
  tsd_server *s = h->data;
  int signum, last = 0;
  while ((signum = tsd_signals_take(s->sigfd)) != 0) {
    TSD_LOG(TSD_LOG_INFO, "signal %d: shutting down", signum);
    last = signum;
  }
  if (last == 0 || s->signalled)
    return;
  s->signalled = true;
  s->sh->stop_signalled = true; /* _Atomic */
  tsd_work *w = calloc(1, sizeof *w);
  if (w) {
    w->signal_shutdown = true;
    tsd_push_work(s->sh, w);
  }
}

static void *loop_main(void *arg) {
  tsd_server *s = arg;
  uv_run(&s->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* The reply queue's wake callback. */
static void loop_wake(void *ctx) {
  tsd_server *s = ctx;
  uv_async_send(&s->async);
}

/* A live daemon already answers on path: refuse to steal it; a stale file is removed. */
static int claim_path(const char *path, ts_error *err) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return TS_OK;
  if (!S_ISSOCK(st.st_mode))
    return ts_error_set(err, TS_IO, "%s exists and is not a socket", path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int live = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  if (fd >= 0)
    close(fd);
  if (live)
    return ts_error_set(err, TS_EXISTS, "a daemon already serves %s; use another --job", path);
  unlink(path);
  return TS_OK;
}

int tsd_server_start(tsd_server_opts *o, tsd_server **out, ts_error *err) {
  *out = NULL;
  tsd_server *s = calloc(1, sizeof *s);
  if (!s)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the server");
  s->sh = o->shared;
  s->cfg = o->cfg;
  s->rank = o->rank;
  s->size = o->world_size;
  s->lim.world_size = o->world_size;
  s->lim.max_frame = o->cfg->max_frame;
  s->lim.collective_timeout_max = o->cfg->collective_timeout_max;
  s->info.rank = o->rank;
  s->info.world_size = o->world_size;
  s->info.job = o->cfg->job;
  s->info.max_frame = o->cfg->max_frame;
  s->info.catalog = o->shared->catalog;
  s->frame_budget = TSD_FRAME_BUDGET * o->cfg->max_frame;
  int n = snprintf(s->path, sizeof s->path, "%s/tshard-%s-%d.sock", o->cfg->socket_dir, o->cfg->job,
                   o->rank);
  struct sockaddr_un probe;
  int rc = TS_OK;
  if (n < 0 || (size_t)n >= sizeof probe.sun_path) {
    free(s);
    return ts_error_set(err, TS_LIMIT, "socket path of %d characters; at most %zu", n,
                        sizeof probe.sun_path - 1);
  }
  snprintf(o->socket_path, sizeof o->socket_path, "%s", s->path);
  if ((rc = tsd_signals_open(&s->sigfd, err)) ||
      (rc = tsd_prepare_socket_dir(o->cfg->socket_dir, err)) || (rc = claim_path(s->path, err))) {
    free(s);
    return rc;
  }
  uv_loop_init(&s->loop);
  const char *direct = getenv("TSHARD_DIRECT");
  s->direct_off = direct && strcmp(direct, "0") == 0;
  uv_pipe_init(&s->loop, &s->unix_srv, 0);
  s->unix_srv.data = s;
  int uvrc;
  mode_t old = umask(0177);
  uvrc = uv_pipe_bind(&s->unix_srv, s->path);
  umask(old);
  if (uvrc == 0)
    chmod(s->path, 0600);
  uv_os_fd_t lfd;
  int one = 1; /* accepted connections inherit it: their first bytes carry credentials too */
  if (uvrc == 0 && (uv_fileno((uv_handle_t *)&s->unix_srv, &lfd) != 0 ||
                    setsockopt(lfd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0))
    uvrc = UV_EINVAL;
  if (uvrc == 0)
    uvrc = uv_listen((uv_stream_t *)&s->unix_srv, 128, on_connection);
  if (uvrc < 0) {
    rc = ts_error_set(err, TS_IO, "cannot listen on %s: %s", s->path, uv_strerror(uvrc));
    goto fail;
  }
  if (o->cfg->listen[0]) {
    struct sockaddr_in sa;
    uv_tcp_init(&s->loop, &s->tcp_srv);
    s->tcp_srv.data = s;
    s->has_tcp = true;
    uvrc = uv_ip4_addr(o->cfg->tcp_host, o->cfg->tcp_port + o->rank, &sa);
    if (uvrc == 0)
      uvrc = uv_tcp_bind(&s->tcp_srv, (const struct sockaddr *)&sa, 0);
    if (uvrc == 0)
      uvrc = uv_listen((uv_stream_t *)&s->tcp_srv, 128, on_connection);
    if (uvrc < 0) {
      rc = ts_error_set(err, TS_IO, "cannot listen on tcp://%s:%d: %s", o->cfg->tcp_host,
                        o->cfg->tcp_port + o->rank, uv_strerror(uvrc));
      goto fail;
    }
  }
  uv_timer_init(&s->loop, &s->sweep_timer);
  s->sweep_timer.data = s;
  int64_t shortest =
      o->cfg->frame_timeout < o->cfg->auth_timeout ? o->cfg->frame_timeout : o->cfg->auth_timeout;
  uint64_t tick = (uint64_t)shortest / 4;
  s->sweep_tick = tick < 5 ? 5 : tick > 1000 ? 1000 : tick; /* started by the first connection */
  uv_async_init(&s->loop, &s->async, on_async);
  s->async.data = s;
  uv_poll_init(&s->loop, &s->sigpoll, s->sigfd);
  s->sigpoll.data = s;
  uv_poll_start(&s->sigpoll, UV_READABLE, on_signal);
  tsd_queue_set_wake(&s->sh->replies, loop_wake, s);
  if (pthread_create(&s->thread, NULL, loop_main, s) != 0) {
    tsd_queue_set_wake(&s->sh->replies, NULL, NULL);
    rc = ts_error_set(err, TS_INTERNAL, "cannot start the loop thread");
    begin_stop(s);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    free(s);
    return rc;
  }
  *out = s;
  return TS_OK;
fail:
  close_if_open((uv_handle_t *)&s->unix_srv);
  if (s->has_tcp)
    close_if_open((uv_handle_t *)&s->tcp_srv);
  unlink(s->path);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  uv_loop_close(&s->loop);
  free(s);
  return rc;
}

void tsd_server_stop(tsd_server **ps) {
  if (!ps || !*ps)
    return;
  tsd_server *s = *ps;
  pthread_mutex_lock(&s->sh->mu);
  s->stop_requested = true;
  pthread_mutex_unlock(&s->sh->mu);
  uv_async_send(&s->async);
  pthread_join(s->thread, NULL);
  tsd_queue_set_wake(&s->sh->replies, NULL, NULL);
  if (uv_loop_close(&s->loop) != 0)
    TSD_LOG(TSD_LOG_WARN, "the loop closed with handles still open");
  free(s);
  *ps = NULL;
}
