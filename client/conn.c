/* conn.c - libtshard's connections and the request/answer exchange.
 *
 * Blocking sockets driven by poll() against one deadline per call, so a call never waits longer
 * than the client's timeout. Frames are a 4-byte little-endian length and a protobuf message;
 * answers longer than TSC_MAX_FRAME or with another request id are refused and break the
 * connection (it cannot be resynchronized). */
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
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"

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
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : TSHARD_DEFAULT_TIMEOUT_MS;
  c->chunk = 32u << 20;
  return c;
}

int tshard_connect_path(const char *path, int timeout_ms, tshard_client **out) {
  if (!out || !path)
    return TS_INVALID_ARGUMENT;
  *out = NULL;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa.sun_path)
    return TS_LIMIT;
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return TS_IO;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return TS_IO;
  }
  if (!(*out = client_new(fd, timeout_ms))) {
    close(fd);
    return TS_NO_MEMORY;
  }
  return TS_OK;
}

int tshard_connect_rank(const char *job, int rank, int timeout_ms, tshard_client **out) {
  char path[512];
  tshard_socket_path(path, sizeof path, job ? job : "default", rank);
  return tshard_connect_path(path, timeout_ms, out);
}

int tshard_connect_tcp(const char *host, int port, const char *token, int timeout_ms,
                       tshard_client **out) {
  if (!out || !host || !token || strlen(token) > 256)
    return TS_INVALID_ARGUMENT;
  *out = NULL;
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, service, &hints, &res) != 0)
    return TS_IO;
  int fd = -1;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    return TS_IO;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  tshard_client *c = client_new(fd, timeout_ms);
  if (!c) {
    close(fd);
    return TS_NO_MEMORY;
  }
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
  close((*pc)->fd);
  free(*pc);
  *pc = NULL;
}

void tshard_set_timeout(tshard_client *c, int timeout_ms) {
  if (c)
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : TSHARD_DEFAULT_TIMEOUT_MS;
}

void tshard_set_chunk(tshard_client *c, size_t bytes) {
  if (c && bytes >= 1024)
    c->chunk = bytes;
}

/* Moves len bytes in one direction before the deadline. */
static int transfer(tshard_client *c, void *buf, size_t len, bool sending, int64_t deadline) {
  uint8_t *p = buf;
  while (len > 0) {
    int64_t left = deadline - now_ms();
    if (left <= 0)
      return tsc_fail(c, TS_TIMEOUT, "no answer within %d ms; the connection is closed",
                      c->timeout_ms);
    struct pollfd pfd = {c->fd, sending ? POLLOUT : POLLIN, 0};
    int pr = poll(&pfd, 1, left > 1000000 ? 1000000 : (int)left);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return tsc_fail(c, TS_IO, "poll: %s", strerror(errno));
    if (pr == 0)
      continue;
    ssize_t n = sending ? send(c->fd, p, len, MSG_NOSIGNAL) : recv(c->fd, p, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return tsc_fail(c, TS_IO, "the daemon closed the connection%s%s", n < 0 ? ": " : "",
                      n < 0 ? strerror(errno) : "");
    p += n;
    len -= (size_t)n;
  }
  return TS_OK;
}

int tsc_call(tshard_client *c, Tshard__Request *req, Tshard__Response **resp) {
  *resp = NULL;
  c->message[0] = '\0';
  if (c->broken)
    return tsc_fail(c, TS_IO, "the connection broke in an earlier call; reconnect");
  req->id = ++c->next_id;
  if (c->token[0])
    req->token = c->token;
  size_t n = tshard__request__get_packed_size(req);
  if (n > UINT32_MAX)
    return tsc_fail(c, TS_LIMIT, "request of %zu bytes", n);
  uint8_t *frame = malloc(n + 4);
  if (!frame)
    return tsc_fail(c, TS_NO_MEMORY, "no memory for a request of %zu bytes", n);
  frame[0] = (uint8_t)n, frame[1] = (uint8_t)(n >> 8), frame[2] = (uint8_t)(n >> 16),
  frame[3] = (uint8_t)(n >> 24);
  tshard__request__pack(req, frame + 4);
  int64_t deadline = now_ms() + c->timeout_ms;
  int rc = transfer(c, frame, n + 4, true, deadline);
  free(frame);
  uint8_t h[4];
  if (!rc)
    rc = transfer(c, h, 4, false, deadline);
  if (rc) {
    c->broken = true;
    return rc;
  }
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                 (uint32_t)h[3] << 24;
  if (len > TSC_MAX_FRAME) {
    c->broken = true;
    return tsc_fail(c, TS_PROTOCOL, "answer of %u bytes; at most %u", len, TSC_MAX_FRAME);
  }
  uint8_t *body = malloc(len ? len : 1);
  if (!body) {
    c->broken = true;
    return tsc_fail(c, TS_NO_MEMORY, "no memory for an answer of %u bytes", len);
  }
  rc = transfer(c, body, len, false, deadline);
  Tshard__Response *r = rc ? NULL : tshard__response__unpack(NULL, len, body);
  free(body);
  if (rc) {
    c->broken = true;
    return rc;
  }
  if (!r) {
    c->broken = true;
    return tsc_fail(c, TS_PROTOCOL, "the answer is not a tshard.Response");
  }
  if (r->id != req->id && r->id != 0) {
    tshard__response__free_unpacked(r, NULL);
    c->broken = true;
    return tsc_fail(c, TS_PROTOCOL, "answer to request %llu while waiting for %llu",
                    (unsigned long long)r->id, (unsigned long long)req->id);
  }
  if (r->status != TS_OK)
    snprintf(c->message, sizeof c->message, "%s",
             r->message && r->message[0] ? r->message : ts_strerror(r->status));
  *resp = r;
  return r->status;
}
