/* shm.c - libtshard's same-node shared memory: the segment of a connection on a Unix socket.
 *
 * Before a put or get, the client makes sure it has a segment large enough for the transfer (up
 * to its bound, TSC_SHM_DEFAULT_MAX unless tshard_set_shm_segment says otherwise): it sends
 * shm_attach with nothing outstanding, receives the answer with recvmsg (the daemon's memfd
 * rides on its first byte as SCM_RIGHTS), maps the descriptor and closes it. Data then goes
 * through the mapping (api.c): a transfer that fits is one request, a larger one alternates
 * between the two halves of the segment with two requests in flight. TSHARD_SHM=0 in the
 * environment or tshard_set_shm(c, 0) keeps the stream path; so does a daemon that refuses the
 * segment (its message is dropped: the stream still works). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"

#define TSC_SHM_DEFAULT_MAX ((size_t)1 << 30)
#define TSC_SHM_MIN ((size_t)64 << 10)

void tsc_shm_init(tshard_client *c) {
  const char *env = getenv("TSHARD_SHM");
  c->shm_possible = true;
  c->shm_on = !(env && strcmp(env, "0") == 0);
  c->shm_max = TSC_SHM_DEFAULT_MAX;
  env = getenv("TSHARD_DIRECT");
  c->direct_on = !(env && strcmp(env, "0") == 0);
}

void tsc_shm_unmap(tshard_client *c) {
  if (c->shm_base)
    munmap(c->shm_base, c->shm_bytes);
  c->shm_base = NULL;
  c->shm_bytes = 0;
}

int tshard_set_shm(tshard_client *c, int enable) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (enable && !c->shm_possible)
    return tsc_fail(c, TS_UNSUPPORTED, "shared memory needs a Unix socket connection");
  int rc = TS_OK;
  if (!enable && c->shm_base && !c->broken) { /* the daemon's side is released too */
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__ShmAttachRequest a = TSHARD__SHM_ATTACH_REQUEST__INIT;
    req.op_case = TSHARD__REQUEST__OP_SHM_ATTACH;
    req.shm_attach = &a;
    Tshard__Response *r = NULL;
    rc = tsc_call(c, &req, &r);
    if (r)
      tsc_free(c, r);
  }
  c->shm_on = enable != 0;
  if (!c->shm_on)
    tsc_shm_unmap(c);
  return rc;
}

void tshard_set_shm_segment(tshard_client *c, size_t max_bytes) {
  if (c)
    c->shm_max = max_bytes < TSC_SHM_MIN ? TSC_SHM_MIN : max_bytes;
}

/* Receives the 4-byte frame header with recvmsg, keeping a descriptor that comes with it. */
static int recv_header_fd(tshard_client *c, uint8_t h[4], int *fd, int64_t deadline) {
  *fd = -1;
  size_t got = 0;
  while (got == 0) {
    int64_t left;
    struct pollfd pfd = {c->fd, POLLIN, 0};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    left = deadline - ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    if (left <= 0)
      return tsc_fail(c, TS_TIMEOUT, "no answer to shm_attach within %d ms", c->timeout_ms);
    if (poll(&pfd, 1, left > 1000000 ? 1000000 : (int)left) < 0 && errno != EINTR)
      return tsc_fail(c, TS_IO, "poll: %s", strerror(errno));
    union {
      struct cmsghdr align;
      char bytes[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {h, 4};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.bytes;
    mh.msg_controllen = sizeof ctl.bytes;
    ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      continue;
    if (n <= 0)
      return tsc_fail(c, TS_IO, "the daemon closed the connection");
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
          int x;
          memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof x);
          if (*fd < 0)
            *fd = x;
          else
            close(x); /* one descriptor is expected */
        }
      }
    got = (size_t)n;
  }
  return got < 4 ? tsc_transfer(c, h + got, 4 - got, false, deadline) : TS_OK;
}

/* shm_attach: a segment of `bytes` (the daemon may grant less). Status of the exchange; a
 * refusal leaves no segment. */
static int attach(tshard_client *c, size_t bytes) {
  tsc_shm_unmap(c);
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ShmAttachRequest a = TSHARD__SHM_ATTACH_REQUEST__INIT;
  a.bytes = bytes;
  req.op_case = TSHARD__REQUEST__OP_SHM_ATTACH;
  req.shm_attach = &a;
  int64_t deadline = tsc_deadline(c);
  int rc = tsc_send(c, &req, deadline);
  if (rc)
    return rc;
  uint8_t h[4];
  int fd = -1;
  if ((rc = recv_header_fd(c, h, &fd, deadline))) {
    c->broken = true;
    if (fd >= 0)
      close(fd);
    return rc;
  }
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  uint8_t *body = len <= 65536 ? malloc(len ? len : 1) : NULL;
  rc = body ? tsc_transfer(c, body, len, false, deadline)
            : tsc_fail(c, TS_PROTOCOL, "answer to shm_attach of %u bytes", len);
  Tshard__Response *r = rc ? NULL : tshard__response__unpack(NULL, len, body);
  free(body);
  if (!rc && !r)
    rc = tsc_fail(c, TS_PROTOCOL, "the answer to shm_attach is not a tshard.Response");
  if (rc) {
    c->broken = true;
  } else if (r->id != req.id) {
    c->broken = true;
    rc = tsc_fail(c, TS_PROTOCOL, "answer to request %llu while waiting for %llu",
                  (unsigned long long)r->id, (unsigned long long)req.id);
  } else if (r->status != TS_OK) {
    rc = tsc_fail(c, r->status, "%s", r->message);
  } else if (r->result_case != TSHARD__RESPONSE__RESULT_SHM || fd < 0 || r->shm->bytes == 0) {
    rc = tsc_fail(c, TS_PROTOCOL, "shm_attach answered without a segment");
  } else {
    struct stat st;
    size_t n = (size_t)r->shm->bytes;
    void *p = fstat(fd, &st) == 0 && (uint64_t)st.st_size >= n
                  ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
                  : MAP_FAILED;
    if (p == MAP_FAILED) {
      rc = tsc_fail(c, TS_IO, "cannot map the segment of %zu bytes", n);
    } else {
      c->shm_base = p;
      c->shm_bytes = n;
      if (n < bytes)
        c->shm_max = n; /* the daemon's bound */
    }
  }
  if (r)
    tshard__response__free_unpacked(r, NULL);
  if (fd >= 0)
    close(fd);
  return rc;
}

bool tsc_shm_ready(tshard_client *c, size_t need) {
  if (tsc_own(c) != TS_OK) /* a forked child: its own connection and segment first */
    return false;
  if (!c->shm_on || need == 0 || c->broken)
    return false;
  size_t want = need < c->shm_max ? need : c->shm_max;
  if (want < TSC_SHM_MIN)
    want = TSC_SHM_MIN;
  if (c->shm_base && c->shm_bytes >= want)
    return true;
  if (c->shm_base && c->shm_bytes >= c->shm_max)
    return true; /* as large as it gets: larger transfers go in chunks */
  if (attach(c, want) != TS_OK) {
    c->shm_on = false; /* the stream path serves this connection from now on */
    c->message[0] = '\0';
    return false;
  }
  return true;
}
