/* conn.c - libtshard's connections and the request/answer exchange.
 *
 * Blocking sockets driven by poll() against one deadline per call, so a call never waits longer
 * than the client's timeout. Frames are a 4-byte little-endian length and a protobuf message;
 * answers longer than TSC_MAX_FRAME or with another request id are refused and break the
 * connection (it cannot be resynchronized). A connection belongs to the process that opened it:
 * after fork() the child's first call opens the child's own (tsc_own). */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "ts_rules.h"
#include "ts_wait.h"

const char *tshard_strerror(int status) { return ts_strerror(status); }
const char *tshard_status_name(int status) { return ts_status_name(status); }

const char *tshard_last_message(const tshard_client *c) { return c ? c->message : ""; }

int tsc_fail(tshard_client *c, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->message, sizeof c->message, fmt, ap);
  va_end(ap);
  return status;
}

void tshard_socket_path(char *buf, size_t cap, const char *job, int rank) {
  const char *env = getenv("TSHARD_SOCKET_DIR");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (env && env[0])
    snprintf(buf, cap, "%s/tshard-%s-%d.sock", env, job, rank);
  else if (xdg && xdg[0])
    snprintf(buf, cap, "%s/tshard/tshard-%s-%d.sock", xdg, job, rank);
  else
    snprintf(buf, cap, "/tmp/tshard-%u/tshard-%s-%d.sock", (unsigned)getuid(), job, rank);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static tshard_client *client_new(int fd, int timeout_ms) {
  tshard_client *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->fd = fd;
  c->pid = getpid();
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : TSHARD_DEFAULT_TIMEOUT_MS;
  c->chunk = 16u << 20;
  return c;
}

/* A connected Unix socket to path, or -1 with errno set. */
static int open_unix(const char *path) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* A connected Unix socket to path (trust.c): the directory must be this user's own and the
 * daemon behind it run as this user or root. TS_OK with *fd; TS_IO with errno set when nothing
 * listens there; TS_AUTH with the reason in why. */
static int open_trusted_unix(const char *path, int *fd, char *why, size_t cap) {
  *fd = -1;
  int rc = tsc_trust_dir(path, why, cap);
  if (rc)
    return rc;
  int s = open_unix(path);
  if (s < 0)
    return TS_IO;
  rc = tsc_trust_peer(s, path, why, cap);
  if (rc) {
    close(s);
    return rc;
  }
  *fd = s;
  return TS_OK;
}

/* A connected TCP socket (no delay) to host:port, or -1. */
static int open_tcp(const char *host, int port) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, service, &hints, &res) != 0)
    return -1;
  int fd = -1;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  int one = 1;
  if (fd >= 0)
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int tsc_own(tshard_client *c) {
  pid_t me = getpid();
  if (c->pid == me)
    return TS_OK;
  pid_t parent = c->pid;
  c->pid = me;
  tsc_shm_unmap(c); /* this process's mapping only: the parent keeps its segment */
  close(c->fd);     /* this process's descriptor only: no shutdown() */
  char why[sizeof c->message] = "";
  int trc = TS_OK;
  if (c->path[0])
    trc = open_trusted_unix(c->path, &c->fd, why, sizeof why);
  else
    c->fd = open_tcp(c->host, c->port);
  int e = errno;
  c->broken = c->fd < 0;
  if (trc == TS_AUTH)
    return tsc_fail(c, TS_AUTH,
                    "this client's connection belongs to process %d, which opened "
                    "it; after fork() process %d did not open its own: %s",
                    (int)parent, (int)me, why);
  if (c->fd < 0)
    return tsc_fail(c, TS_IO,
                    "this client's connection belongs to process %d, which opened it; "
                    "after fork() process %d could not open its own (%s); connect in the child",
                    (int)parent, (int)me, strerror(e));
  if (c->path[0]) { /* shared memory and the direct path as a new connection has them */
    size_t max = c->shm_max;
    tsc_shm_init(c);
    c->shm_max = max;
  }
  int rc = tshard_ping(c, NULL, NULL);
  if (rc) {
    char why[sizeof c->message];
    snprintf(why, sizeof why, "%s", c->message);
    c->broken = true;
    return tsc_fail(c, rc == TS_TIMEOUT ? TS_TIMEOUT : TS_IO,
                    "this client's connection "
                    "belongs to process %d, which opened it; after fork() process %d opened its "
                    "own but the daemon did not answer its ping: %s",
                    (int)parent, (int)me, why);
  }
  return TS_OK;
}

int tshard_connect_path(const char *path, int timeout_ms, tshard_client **out) {
  if (!out || !path)
    return TS_INVALID_ARGUMENT;
  *out = NULL;
  tsc_connect_note(path, NULL, TS_OK);
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof sa.sun_path)
    return TS_LIMIT;
  char why[512];
  int fd;
  int trc = open_trusted_unix(path, &fd, why, sizeof why);
  if (trc == TS_AUTH) {
    tsc_connect_distrust(why); /* tshard_connect_message() */
    return TS_AUTH;
  }
  if (fd < 0) {
    int e = errno;
    if (tsc_connect_lost(path)) /* the launcher recorded why: a rank was lost */
      return TS_RANK_LOST;
    tsc_connect_refused(path, e); /* tshard_connect_message() */
    return TS_IO;
  }
  tshard_client *c = client_new(fd, timeout_ms);
  if (!c) {
    close(fd);
    return TS_NO_MEMORY;
  }
  snprintf(c->path, sizeof c->path, "%s", path);
  tsc_shm_init(c);                     /* same node: shared memory unless TSHARD_SHM=0 */
  int rc = tshard_ping(c, NULL, NULL); /* a daemon that serves, and its frame size */
  if (rc) {
    tsc_connect_note(path, c, rc); /* tshard_connect_message() */
    tshard_close(&c);
    return rc;
  }
  *out = c;
  return TS_OK;
}

int tshard_connect_rank(const char *job, int rank, int timeout_ms, tshard_client **out) {
  char path[512];
  job = job ? job : "default";
  tshard_socket_path(path, sizeof path, job, rank);
  if (tsc_job_check(job)) {
    tsc_connect_failed(path, job, rank, TS_INVALID_ARGUMENT);
    return TS_INVALID_ARGUMENT;
  }
  int rc = tshard_connect_path(path, timeout_ms, out);
  if (rc)
    tsc_connect_failed(path, job, rank, rc);
  return rc;
}

int tshard_connect_tcp(const char *host, int port, const char *token, int timeout_ms,
                       tshard_client **out) {
  if (!out || !host || !token || strlen(token) > TS_RULES_TOKEN_MAX)
    return TS_INVALID_ARGUMENT;
  *out = NULL;
  if (strlen(host) >= sizeof(((tshard_client *)0)->host))
    return TS_INVALID_ARGUMENT;
  int fd = open_tcp(host, port);
  if (fd < 0)
    return TS_IO;
  tshard_client *c = client_new(fd, timeout_ms);
  if (!c) {
    close(fd);
    return TS_NO_MEMORY;
  }
  snprintf(c->host, sizeof c->host, "%s", host);
  c->port = port;
  snprintf(c->token, sizeof c->token, "%s", token);
  int rc = tshard_ping(c, NULL, NULL);
  if (rc) {
    tshard_close(&c);
    return rc;
  }
  *out = c;
  return TS_OK;
}

void tshard_close(tshard_client **pc) {
  if (!pc || !*pc)
    return;
  tsc_shm_unmap(*pc);
  tsc_group_free(*pc);
  tsc_tickets_free(*pc);
  free((*pc)->reshard_ranks);
  close((*pc)->fd);
  free((*pc)->arena.buf);
  free((*pc)->rbuf);
  free(*pc);
  *pc = NULL;
}

void tshard_set_timeout(tshard_client *c, int timeout_ms) {
  if (c)
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : TSHARD_DEFAULT_TIMEOUT_MS;
}

void tshard_set_chunk(tshard_client *c, size_t bytes) {
  if (c && bytes >= 64)
    c->chunk = bytes;
}

/* Moves len bytes in one direction before the deadline, under the wait policy's socket
 * schedule (ts_wait.h): a receive keeps trying for a short while before it sleeps in poll(), so
 * an answer that comes that fast is taken without the wake-up of a sleeping thread (tens of
 * microseconds on an idle virtual machine); a send sleeps in poll() at once. */
int tsc_transfer(tshard_client *c, void *buf, size_t len, bool sending, int64_t deadline) {
  uint8_t *p = buf;
  ts_waiter w;
  ts_wait_policy policy = ts_wait_socket;
  if (sending)
    policy.spin_ns = 0;
  ts_waiter_init(&w, &policy, deadline * 1000000);
  while (len > 0) {
    /* Try first (data is often already there), wait with poll only when it is not. */
    int flags = MSG_DONTWAIT | (sending ? MSG_NOSIGNAL : 0);
    ssize_t n = sending ? send(c->fd, p, len, flags) : recv(c->fd, p, len, flags);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return tsc_lost_check(c, tsc_fail(c, TS_IO, "the daemon closed the connection%s%s",
                                        n < 0 ? ": " : "", n < 0 ? strerror(errno) : ""));
    int64_t nap = ts_waiter_next(&w);
    if (nap == 0)
      continue;
    if (nap < 0)
      return tsc_fail(c, TS_TIMEOUT,
                      "no answer within %d ms (a longer timeout: --timeout SEC, "
                      "or the client's timeout); the operation may still complete on the "
                      "daemons; the connection is closed",
                      c->timeout_ms);
    struct pollfd pfd = {c->fd, sending ? POLLOUT : POLLIN, 0};
    int pr = poll(&pfd, 1, (int)((nap + 999999) / 1000000));
    if (pr < 0 && errno != EINTR)
      return tsc_fail(c, TS_IO, "poll: %s", strerror(errno));
  }
  return TS_OK;
}

static void *arena_alloc(void *data, size_t size) {
  tsc_arena *a = data;
  size_t need = (size + 15) & ~(size_t)15;
  if (a->buf && need <= a->cap - a->used) {
    void *p = a->buf + a->used;
    a->used += need;
    return p;
  }
  return malloc(size ? size : 1);
}

static void arena_free(void *data, void *p) {
  tsc_arena *a = data;
  if (!(a->buf && (uint8_t *)p >= a->buf && (uint8_t *)p < a->buf + a->cap))
    free(p);
}

void tsc_free(tshard_client *c, Tshard__Response *r) {
  ProtobufCAllocator al = {arena_alloc, arena_free, &c->arena};
  if (r)
    tshard__response__free_unpacked(r, &al);
}

static bool grow(uint8_t **buf, size_t *cap, size_t need) {
  if (*cap >= need)
    return true;
  size_t n = need < 4096 ? 4096 : need + need / 4;
  uint8_t *b = malloc(n);
  if (!b)
    return false;
  free(*buf);
  *buf = b;
  *cap = n;
  return true;
}

static size_t varint_put(uint8_t *p, uint64_t v) {
  size_t n = 0;
  do {
    p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

/* Sends the iovecs before the deadline (partial writes resumed). */
static int send_iov(tshard_client *c, struct iovec *iov, int n, int64_t deadline) {
  ts_waiter w;
  ts_wait_policy policy = ts_wait_socket;
  policy.spin_ns = 0; /* poll() says at once when the socket takes more */
  ts_waiter_init(&w, &policy, deadline * 1000000);
  while (n > 0) {
    int64_t nap = ts_waiter_next(&w);
    if (nap < 0)
      return tsc_fail(c, TS_TIMEOUT,
                      "could not send within %d ms (a longer timeout: --timeout "
                      "SEC, or the client's timeout); the connection is closed",
                      c->timeout_ms);
    struct pollfd pfd = {c->fd, POLLOUT, 0};
    int pr = poll(&pfd, 1, (int)((nap + 999999) / 1000000));
    if (pr <= 0) {
      if (pr < 0 && errno != EINTR)
        return tsc_fail(c, TS_IO, "poll: %s", strerror(errno));
      continue;
    }
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)n;
    ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (k < 0)
      return tsc_lost_check(
          c, tsc_fail(c, TS_IO, "the daemon closed the connection: %s", strerror(errno)));
    while (n > 0 && (size_t)k >= iov->iov_len) {
      k -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + k;
      iov->iov_len -= (size_t)k;
    }
  }
  return TS_OK;
}

/* Sends a request as one frame. The bulk data of a put is not copied: the request is packed
 * without it, and the data field (field 4 of PutRequest and PutSliceRequest) is appended to the
 * nested message by hand - protobuf accepts fields in any order. */
static int send_request(tshard_client *c, Tshard__Request *req, int64_t deadline) {
  ProtobufCBinaryData *bulk = NULL;
  ProtobufCMessage *inner = NULL;
  unsigned field = 0;
  if (req->op_case == TSHARD__REQUEST__OP_PUT) {
    bulk = &req->put->data, inner = &req->put->base, field = TSHARD__REQUEST__OP_PUT;
  } else if (req->op_case == TSHARD__REQUEST__OP_PUT_SLICE) {
    bulk = &req->put_slice->data, inner = &req->put_slice->base,
    field = TSHARD__REQUEST__OP_PUT_SLICE;
  }
  if (!bulk || bulk->len < 4096) {
    size_t n = tshard__request__get_packed_size(req);
    if (n > UINT32_MAX || !grow(&c->rbuf, &c->rcap, n + 4))
      return tsc_fail(c, TS_NO_MEMORY, "request of %zu bytes", n);
    uint8_t *f = c->rbuf;
    f[0] = (uint8_t)n, f[1] = (uint8_t)(n >> 8), f[2] = (uint8_t)(n >> 16),
    f[3] = (uint8_t)(n >> 24);
    tshard__request__pack(req, f + 4);
    struct iovec iov = {f, n + 4};
    return send_iov(c, &iov, 1, deadline);
  }
  ProtobufCBinaryData data = *bulk;
  bulk->len = 0;
  bulk->data = NULL;
  size_t inner_n = protobuf_c_message_get_packed_size(inner);
  uint8_t dhead[16];
  size_t dh = 0;
  dhead[dh++] = (4 << 3) | 2;
  dh += varint_put(dhead + dh, data.len);
  uint64_t inner_total = inner_n + dh + data.len;
  Tshard__Request__OpCase op = req->op_case;
  req->op_case = TSHARD__REQUEST__OP__NOT_SET;
  size_t outer_n = tshard__request__get_packed_size(req);
  size_t head_n = 4 + outer_n + 2 + 10 + inner_n;
  int rc = TS_OK;
  if (!grow(&c->rbuf, &c->rcap, head_n))
    rc = tsc_fail(c, TS_NO_MEMORY, "no memory for a request header");
  if (rc == TS_OK) {
    uint8_t *f = c->rbuf;
    size_t pos = 4;
    tshard__request__pack(req, f + pos);
    pos += outer_n;
    pos += varint_put(f + pos, (uint64_t)field << 3 | 2);
    pos += varint_put(f + pos, inner_total);
    protobuf_c_message_pack(inner, f + pos);
    pos += inner_n;
    uint64_t total = pos - 4 + dh + data.len;
    if (total > UINT32_MAX) {
      rc = tsc_fail(c, TS_LIMIT, "chunk of %zu bytes does not fit a frame", data.len);
    } else {
      f[0] = (uint8_t)total, f[1] = (uint8_t)(total >> 8), f[2] = (uint8_t)(total >> 16),
      f[3] = (uint8_t)(total >> 24);
      struct iovec iov[3] = {{f, pos}, {dhead, dh}, {data.data, data.len}};
      rc = send_iov(c, iov, 3, deadline);
    }
  }
  req->op_case = op;
  *bulk = data;
  return rc;
}

/* Reads a varint at *pos (bounded by n); false when it does not fit. */
static bool varint_get(const uint8_t *p, size_t n, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < n; shift += 7) {
    uint8_t b = p[(*pos)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

/* Recognizes the start of a successful data answer: Response{id, status 0, no message,
 * data = DataChunk{offset, total_bytes, data}} with the data bytes last in the frame (the order
 * in which the daemon packs them). Sets where the data starts and its length; false for anything
 * else, which then goes through the full decoder. */
static bool data_prefix(const uint8_t *p, size_t n, uint64_t *id, uint64_t *offset, uint64_t *total,
                        uint64_t *dlen, size_t *start) {
  size_t pos = 0;
  uint64_t key, v;
  *id = *offset = *total = 0;
  while (pos < n) {
    if (!varint_get(p, n, &pos, &key))
      return false;
    if (key == (1 << 3 | 0) && varint_get(p, n, &pos, &v)) {
      *id = v;
    } else if (key == (2 << 3 | 0) && varint_get(p, n, &pos, &v)) {
      if (v != 0)
        return false;
    } else if (key == (12 << 3 | 2) && varint_get(p, n, &pos, &v)) {
      while (pos < n) {
        if (!varint_get(p, n, &pos, &key))
          return false;
        if (key == (1 << 3 | 0) && varint_get(p, n, &pos, &v))
          *offset = v;
        else if (key == (2 << 3 | 0) && varint_get(p, n, &pos, &v))
          *total = v;
        else if (key == (3 << 3 | 2) && varint_get(p, n, &pos, dlen)) {
          *start = pos;
          return true;
        } else
          return false;
      }
      return false;
    } else {
      return false;
    }
  }
  return false;
}

int64_t tsc_deadline(const tshard_client *c) { return now_ms() + c->timeout_ms; }

int tsc_send(tshard_client *c, Tshard__Request *req, int64_t deadline) {
  c->message[0] = '\0';
  int orc = tsc_own(c);
  if (orc)
    return orc;
  if (c->broken)
    return c->lost_status
               ? tsc_lost_check(c, TS_IO)
               : tsc_fail(c, TS_IO, "the connection broke in an earlier call; reconnect");
  req->id = ++c->next_id;
  if (c->token[0])
    req->token = c->token;
  int rc = send_request(c, req, deadline);
  if (rc)
    c->broken = true;
  return rc;
}

int tsc_call_sink(tshard_client *c, Tshard__Request *req, Tshard__Response **resp, tsc_sink *sink) {
  *resp = NULL;
  int64_t deadline = tsc_deadline(c);
  uint64_t *ticket = c->submit_to;
  c->submit_to = NULL;
  int rc = tsc_send(c, req, deadline);
  if (ticket) /* tshard_submit_*: the answer is read by tshard_wait */
    return rc ? rc : tsc_ticket_add(c, req->id, ticket);
  return rc ? rc : tsc_recv(c, req->id, resp, sink, deadline);
}

int tsc_recv(tshard_client *c, uint64_t want_id, Tshard__Response **resp, tsc_sink *sink,
             int64_t deadline) {
again:
  *resp = NULL;
  if (sink)
    sink->taken = false;
  if (c->broken)
    return c->lost_status
               ? tsc_lost_check(c, TS_IO)
               : tsc_fail(c, TS_IO, "the connection broke in an earlier call; reconnect");
  uint8_t h[4];
  int rc = tsc_transfer(c, h, 4, false, deadline);
  if (rc) {
    c->broken = true;
    return rc;
  }
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  if (len > TSC_MAX_FRAME) {
    c->broken = true;
    return tsc_fail(c, TS_PROTOCOL, "answer of %u bytes; at most %u", len, TSC_MAX_FRAME);
  }
  if (!grow(&c->rbuf, &c->rcap, sink ? 4096 : (size_t)len + 4)) {
    c->broken = true;
    return tsc_fail(c, TS_NO_MEMORY, "no memory for an answer of %u bytes", len);
  }
  size_t have = 0;
  if (sink) {
    /* Data answers: the bytes go from the socket straight to the caller's buffer. */
    have = len < 64 ? len : 64;
    if ((rc = tsc_transfer(c, c->rbuf, have, false, deadline))) {
      c->broken = true;
      return rc;
    }
    uint64_t id, off, total, dlen;
    size_t start;
    if (data_prefix(c->rbuf, have, &id, &off, &total, &dlen, &start) && id == want_id &&
        start + dlen == len && off == sink->offset && total <= sink->cap &&
        (!sink->exact || total == sink->cap) && dlen <= total - off) {
      size_t in_hand = have - start;
      memcpy(sink->dst + off, c->rbuf + start, in_hand);
      if ((rc = tsc_transfer(c, sink->dst + off + in_hand, dlen - in_hand, false, deadline))) {
        c->broken = true;
        return rc;
      }
      sink->taken = true;
      sink->total = total;
      sink->len = dlen;
      return TS_OK;
    }
    uint8_t prefix[64]; /* not a data answer: decode it whole (grow does not keep contents) */
    memcpy(prefix, c->rbuf, have);
    if (!grow(&c->rbuf, &c->rcap, (size_t)len + 4)) {
      c->broken = true;
      return tsc_fail(c, TS_NO_MEMORY, "no memory for an answer of %u bytes", len);
    }
    memcpy(c->rbuf, prefix, have);
  }
  if (!grow(&c->arena.buf, &c->arena.cap, (size_t)len + 65536)) {
    c->broken = true;
    return tsc_fail(c, TS_NO_MEMORY, "no memory for an answer of %u bytes", len);
  }
  rc = tsc_transfer(c, c->rbuf + have, len - have, false, deadline);
  c->arena.used = 0;
  ProtobufCAllocator al = {arena_alloc, arena_free, &c->arena};
  Tshard__Response *r = rc ? NULL : tshard__response__unpack(&al, len, c->rbuf);
  if (rc) {
    c->broken = true;
    return rc;
  }
  if (!r) {
    c->broken = true;
    return tsc_fail(c, TS_PROTOCOL, "the answer is not a tshard.Response");
  }
  if (want_id && r->id != want_id && r->id != 0 && tsc_ticket_keep(c, r)) {
    tsc_free(c, r); /* a submitted request's answer: kept for its tshard_wait */
    goto again;
  }
  if (want_id && r->id != want_id && r->id != 0) {
    tsc_free(c, r);
    c->broken = true;
    return tsc_fail(c, TS_PROTOCOL, "answer to request %llu while waiting for %llu",
                    (unsigned long long)r->id, (unsigned long long)want_id);
  }
  if (r->status != TS_OK)
    snprintf(c->message, sizeof c->message, "%s",
             r->message && r->message[0] ? r->message : ts_strerror(r->status));
  if (r->status == TS_SHUTDOWN && tsc_lost_check(c, TS_SHUTDOWN) == TS_RANK_LOST)
    r->status = TS_RANK_LOST; /* Open MPI stops the job because a rank was lost: name it */
  *resp = r;
  return r->status;
}

int tsc_call(tshard_client *c, Tshard__Request *req, Tshard__Response **resp) {
  return tsc_call_sink(c, req, resp, NULL);
}
