/* control.c - the daemon's control channel over MPI point-to-point (see ts_control.h).
 *
 * One duplicate of the world communicator carries every control message. Sends are MPI_Isend of
 * a private copy; the copies and requests live in a small array until MPI_Test says they are done.
 * Receives are MPI_Iprobe + MPI_Get_count + MPI_Recv of exactly the probed size, so a message of
 * any length is received without a fixed-size buffer. Every send rings its destination's doorbell
 * (ts_comm.h), again when it completes, so a rank waiting for control messages on this node blocks
 * until one comes. Waits follow the wait policy (ts_wait.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h" /* ts__mpi_error: MPI codes mapped as in libtscomm */
#include "ts_control.h"
#include "ts_wait.h"

typedef struct pending_send {
  MPI_Request req;
  void *buf;
  int dest;
} pending_send;

struct ts_control {
  ts_world *world; /* its doorbells: every send rings its destination */
  MPI_Comm comm;
  int rank, size;
  pending_send *sends;
  int nsends, cap;
};

int ts_control_create(ts_world *w, ts_control **out, ts_error *err) {
  if (!w || !out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_control_create: NULL argument");
  *out = NULL;
  ts_control *c = calloc(1, sizeof *c);
  if (!c)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the control channel");
  int rc = MPI_Comm_dup(ts_comm_handle(ts_world_comm(w)), &c->comm);
  if (rc != MPI_SUCCESS) {
    free(c);
    return ts__mpi_error(rc, "MPI_Comm_dup", __FILE__, __LINE__, err);
  }
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  c->world = w;
  MPI_Comm_rank(c->comm, &c->rank);
  MPI_Comm_size(c->comm, &c->size);
  *out = c;
  return TS_OK;
}

void ts_control_destroy(ts_control **pc) {
  if (!pc || !*pc)
    return;
  ts_control *c = *pc;
  ts_control_flush(c, 10000, NULL);
  for (int i = 0; i < c->nsends; i++) { /* only after a timeout: give up on them */
    MPI_Cancel(&c->sends[i].req);
    MPI_Request_free(&c->sends[i].req);
    free(c->sends[i].buf);
  }
  free(c->sends);
  MPI_Comm_free(&c->comm);
  free(c);
  *pc = NULL;
}

int ts_control_rank(const ts_control *c) { return c ? c->rank : -1; }
int ts_control_size(const ts_control *c) { return c ? c->size : 0; }

int ts_control_send(ts_control *c, int dest, int tag, const void *buf, size_t len, ts_error *err) {
  if (!c || dest < 0 || dest >= c->size || tag < 0 || tag > 30000 || (len && !buf))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "control send: bad destination %d or tag %d",
                        dest, tag);
  if (len > INT_MAX)
    return ts_error_set(err, TS_LIMIT, "control message of %zu bytes; at most %d", len, INT_MAX);
  if (c->nsends == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    pending_send *s = realloc(c->sends, (size_t)cap * sizeof *s);
    if (!s)
      return ts_error_set(err, TS_NO_MEMORY, "no memory for a control send");
    c->sends = s;
    c->cap = cap;
  }
  void *copy = malloc(len ? len : 1);
  if (!copy)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a control message of %zu bytes", len);
  if (len)
    memcpy(copy, buf, len);
  pending_send *p = &c->sends[c->nsends];
  int rc = MPI_Isend(copy, (int)len, MPI_BYTE, dest, tag, c->comm, &p->req);
  if (rc != MPI_SUCCESS) {
    free(copy);
    return ts__mpi_error(rc, "MPI_Isend", __FILE__, __LINE__, err);
  }
  p->buf = copy;
  p->dest = dest;
  c->nsends++;
  ts_world_bell_ring(c->world, dest); /* the duplicate's ranks are the world's */
  return TS_OK;
}

int ts_control_progress(ts_control *c, ts_error *err) {
  if (!c)
    return 0;
  int i = 0, failed = TS_OK;
  while (i < c->nsends) {
    int done = 0;
    int rc = MPI_Test(&c->sends[i].req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      /* The send is over (MPI failed it): retire it, and report the first such failure. */
      if (failed == TS_OK)
        failed = ts__mpi_error(rc, "MPI_Test of a control send", __FILE__, __LINE__, err);
      done = 1;
    }
    if (done) {
      /* A message MPI could not hand over at once went out now: ring again. */
      ts_world_bell_ring(c->world, c->sends[i].dest);
      free(c->sends[i].buf);
      c->sends[i] = c->sends[--c->nsends];
    } else {
      i++;
    }
  }
  return failed != TS_OK ? -failed : c->nsends;
}

int ts_control_poll(ts_control *c, int *src, int *tag, void **buf, size_t *len, ts_error *err) {
  if (!c || !src || !tag || !buf || !len)
    return -ts_error_set(err, TS_INVALID_ARGUMENT, "control poll: NULL argument");
  *buf = NULL;
  *len = 0;
  int flag = 0;
  MPI_Status st;
  int rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->comm, &flag, &st);
  /* Open MPI's probe looks, then makes progress: a message that progress took in is seen by
   * the next probe, so a probe that found nothing looks once more before the caller blocks. */
  if (rc == MPI_SUCCESS && !flag)
    rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->comm, &flag, &st);
  if (rc != MPI_SUCCESS)
    return -ts__mpi_error(rc, "MPI_Iprobe", __FILE__, __LINE__, err);
  if (!flag)
    return 0;
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  void *b = malloc(count > 0 ? (size_t)count : 1);
  if (!b)
    return -ts_error_set(err, TS_NO_MEMORY, "no memory for a control message of %d bytes",
                         count);
  rc = MPI_Recv(b, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, c->comm, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    free(b);
    return -ts__mpi_error(rc, "MPI_Recv", __FILE__, __LINE__, err);
  }
  *src = st.MPI_SOURCE;
  *tag = st.MPI_TAG;
  *buf = b;
  *len = (size_t)count;
  return 1;
}

int ts_control_flush(ts_control *c, int timeout_ms, ts_error *err) {
  if (!c)
    return TS_OK;
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_mpi, ts_wait_deadline_ms(timeout_ms));
  int pending, rc = TS_OK;
  ts_error perr;
  while ((pending = ts_control_progress(c, &perr)) != 0) {
    if (pending < 0) { /* report the first failure, and still wait for the other sends */
      if (rc == TS_OK)
        rc = ts_error_set(err, -pending, "%s", perr.msg);
      continue;
    }
    if (ts_waiter_pause(&w) == TS_TIMEOUT)
      return rc != TS_OK ? rc
                         : ts_error_set(err, TS_TIMEOUT,
                                        "%d control messages still unsent after %d ms",
                                        c->nsends, timeout_ms);
  }
  return rc;
}
