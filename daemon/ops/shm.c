/* shm.c - same-node shared-memory segments of the connections (engine thread only).
 *
 * A client on a Unix socket asks for a segment (shm_attach). The daemon creates it - a memfd,
 * sealed against shrinking and growing (the client gets the fd and could otherwise truncate it
 * under the daemon's mapping), allocated up front with fallocate (a failure is an answer, never a
 * SIGBUS later), mapped here - charges its bytes to the pool's account (ts_pool_charge, as
 * staging, against the memory limit) and answers with the fd, which the loop thread passes with
 * SCM_RIGHTS. From then on put, put_slice, get and get_slice chunks may name a region of the
 * segment instead of carrying their bytes in the frame; every region is checked to lie inside the
 * segment before it is touched.
 *
 * Segments are counted references: the connection holds one, and a whole put that scatters
 * straight from the segment holds another while it waits for its turn, so a client that dies
 * mid-transfer (the connection's state is freed) never pulls the mapping from under an operation.
 * The last reference unmaps the segment and returns its bytes to the account. A client that
 * writes into its segment while its own put runs gets undefined values in that put (as if it
 * had sent them); nothing of the daemon's own state lives in a segment. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "session.h"

struct tsd_shm_seg {
  struct tsd_shm_seg *next; /* tsd_engine.shm_segs: every live segment */
  uint8_t *base;
  uint64_t bytes;
  int refs;
};

uint8_t *tsd_shm_base(const tsd_shm_seg *s) { return s ? s->base : NULL; }
uint64_t tsd_shm_bytes(const tsd_shm_seg *s) { return s ? s->bytes : 0; }

tsd_shm_seg *tsd_shm_hold(tsd_shm_seg *s) {
  if (s)
    s->refs++;
  return s;
}

void tsd_shm_release(tsd_engine *e, tsd_shm_seg *s) {
  if (!s || --s->refs > 0)
    return;
  for (tsd_shm_seg **pp = &e->shm_segs; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  munmap(s->base, s->bytes);
  ts_pool_uncharge(s->bytes);
  free(s);
}

/* The live segment that p points into, or NULL. */
static tsd_shm_seg *seg_of(tsd_engine *e, const uint8_t *p) {
  for (tsd_shm_seg *s = e->shm_segs; s; s = s->next)
    if (p && p >= s->base && p < s->base + s->bytes)
      return s;
  return NULL;
}

void tsd_staging_give(tsd_engine *e, uint8_t *p, uint64_t bytes) {
  tsd_shm_seg *s = seg_of(e, p);
  if (s) {
    tsd_shm_release(e, s); /* the put's reference; the bytes are the segment's account */
    return;
  }
  tsd_buf_give(e, p, bytes);
}

int tsd_shm_region(const tsd_session *c, const Tshard__ShmData *d, uint64_t min_bytes, uint8_t **p,
                   uint64_t *bytes, ts_error *err) {
  tsd_shm_seg *s = tsd_session_shm(c);
  if (!s)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the request names a shared-memory region but this connection has no "
                        "segment; send shm_attach first (Unix sockets only)");
  uint64_t n = d->bytes ? d->bytes : (d->offset < s->bytes ? s->bytes - d->offset : 0);
  if (d->offset > s->bytes || n > s->bytes - d->offset || n < min_bytes)
    return ts_error_set(err, TS_OUT_OF_BOUNDS,
                        "shared-memory region of %llu bytes at offset %llu (at least %llu "
                        "needed) does not fit the segment of %llu bytes",
                        (unsigned long long)n, (unsigned long long)d->offset,
                        (unsigned long long)min_bytes, (unsigned long long)s->bytes);
  *p = s->base + d->offset;
  *bytes = n;
  return TS_OK;
}

/* A sealed, allocated memfd of `bytes` mapped here; the fd in *fd. */
static int seg_create(uint64_t bytes, tsd_shm_seg **out, int *fd_out, ts_error *err) {
  int fd = memfd_create("tshard-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return ts_error_set(err, TS_IO, "memfd_create: %s", strerror(errno));
  int rc = TS_OK;
  void *base = MAP_FAILED;
  if (ftruncate(fd, (off_t)bytes) != 0)
    rc = ts_error_set(err, TS_NO_MEMORY, "cannot size a segment of %llu bytes: %s",
                      (unsigned long long)bytes, strerror(errno));
  else if ((errno = posix_fallocate(fd, 0, (off_t)bytes)) != 0)
    rc = ts_error_set(err, TS_NO_MEMORY, "cannot allocate a segment of %llu bytes: %s",
                      (unsigned long long)bytes, strerror(errno));
  else if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    rc = ts_error_set(err, TS_IO, "cannot seal the segment: %s", strerror(errno));
  else if ((base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)) ==
           MAP_FAILED)
    rc = ts_error_set(err, TS_NO_MEMORY, "cannot map a segment of %llu bytes: %s",
                      (unsigned long long)bytes, strerror(errno));
  tsd_shm_seg *s = rc ? NULL : calloc(1, sizeof *s);
  if (!rc && !s)
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the segment");
  if (rc) {
    if (base != MAP_FAILED)
      munmap(base, bytes);
    close(fd);
    return rc;
  }
  s->base = base;
  s->bytes = bytes;
  s->refs = 1;
  *out = s;
  *fd_out = fd;
  return TS_OK;
}

/* An answer carrying a file descriptor (passed by the loop thread, which closes it). */
static void reply_with_fd(tsd_engine *e, uint64_t conn_id, Tshard__Response *resp, int fd) {
  uint8_t *frame;
  size_t len;
  ts_error err;
  if (tsd_response_frame(resp, &frame, &len, &err) != TS_OK) {
    close(fd);
    tsd_reply_status(e, conn_id, resp->id, err.code, err.msg);
    return;
  }
  e->ops_answered++;
  tsd_count_answer(e->answering, resp->status);
  tsd_push_reply_fd(e->sh, conn_id, frame, len, fd, resp->id);
}

void tsd_shm_attach(tsd_engine *e, tsd_work *w) {
  const Tshard__Request *req = w->req;
  uint64_t want = req->shm_attach->bytes;
  uint64_t bytes = want < TSD_SHM_MAX_BYTES ? want : TSD_SHM_MAX_BYTES;
  bytes = (bytes + 4095) & ~(uint64_t)4095;
  ts_error err;
  tsd_session *c = tsd_session_get(e, w->conn_id, true);
  if (!c) {
    tsd_reply_status(e, w->conn_id, req->id, TS_NO_MEMORY, "no memory for the connection state");
    return;
  }
  /* The previous segment goes first (a transfer in progress through it is abandoned). */
  tsd_session_put_reset(e, c);
  tsd_session_copy_reset(e, c);
  tsd_session_set_shm(e, c, NULL);
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__ShmResult sr = TSHARD__SHM_RESULT__INIT;
  r.id = req->id;
  r.result_case = TSHARD__RESPONSE__RESULT_SHM;
  r.shm = &sr;
  if (want == 0) { /* a release */
    tsd_reply_response(e, w->conn_id, &r);
    return;
  }
  tsd_shm_seg *s = NULL;
  int fd = -1;
  int rc = ts_pool_charge(bytes, "the shared-memory segment", &err);
  if (!rc && (rc = seg_create(bytes, &s, &fd, &err)) != TS_OK)
    ts_pool_uncharge(bytes);
  if (rc) {
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
    return;
  }
  s->next = e->shm_segs;
  e->shm_segs = s;
  tsd_session_set_shm(e, c, s);
  sr.bytes = bytes;
  reply_with_fd(e, w->conn_id, &r, fd);
  TSD_LOG(TSD_LOG_DEBUG, "connection %llu: shared-memory segment of %llu bytes",
          (unsigned long long)w->conn_id, (unsigned long long)bytes);
}

uint8_t *tsd_shm_gather_target(tsd_session *c, const Tshard__GetRequest *g, uint64_t bytes) {
  if (!c)
    return NULL;
  tsd_session_set_get_region(c, g->shm);
  uint8_t *p = NULL;
  uint64_t room;
  if (!g->shm || bytes == 0 || tsd_shm_region(c, g->shm, bytes, &p, &room, NULL))
    return NULL;
  return p;
}
