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

/* The sends not yet complete, in parallel arrays: reqs[] is what MPI_Testsome takes (one
 * progress call for all of them; Open MPI yields the core after a progress call that found
 * nothing, where ranks outnumber cores). */
struct ts_control {
  ts_world *world; /* its doorbells: every send rings its destination */
  MPI_Comm comm;
  int rank, size;
  MPI_Request *reqs;
  void **bufs;
  int *dests;
  int *done; /* MPI_Testsome's indices */
  MPI_Status *statuses;
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
    MPI_Cancel(&c->reqs[i]);
    MPI_Request_free(&c->reqs[i]);
    free(c->bufs[i]);
  }
  free(c->reqs), free(c->bufs), free(c->dests), free(c->done), free(c->statuses);
  MPI_Comm_free(&c->comm);
  free(c);
  *pc = NULL;
}

int ts_control_rank(const ts_control *c) { return c ? c->rank : -1; }
int ts_control_size(const ts_control *c) { return c ? c->size : 0; }

/* *arr resized to cap elements of size bytes; false (and *arr as it was) without memory. */
static bool resize(void *arr, int cap, size_t size) {
  void **p = arr, *q = realloc(*p, (size_t)cap * size);
  if (q)
    *p = q;
  return q != NULL;
}

/* Twice the room for pending sends (16 at first); nonzero when there is no memory (the arrays
 * that grew keep their contents and are freed with the channel). */
static int grow(ts_control *c) {
  int cap = c->cap ? 2 * c->cap : 16;
  if (!resize(&c->reqs, cap, sizeof *c->reqs) || !resize(&c->bufs, cap, sizeof *c->bufs) ||
      !resize(&c->dests, cap, sizeof *c->dests) || !resize(&c->done, cap, sizeof *c->done) ||
      !resize(&c->statuses, cap, sizeof *c->statuses))
    return -1;
  c->cap = cap;
  return 0;
}

int ts_control_send(ts_control *c, int dest, int tag, const void *buf, size_t len, ts_error *err) {
  if (!c || dest < 0 || dest >= c->size || tag < 0 || tag > 30000 || (len && !buf))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "control send: bad destination %d or tag %d",
                        dest, tag);
  if (len > INT_MAX)
    return ts_error_set(err, TS_LIMIT, "control message of %zu bytes; at most %d", len, INT_MAX);
  if (c->nsends == c->cap && grow(c))
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a control send");
  void *copy = malloc(len ? len : 1);
  if (!copy)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a control message of %zu bytes", len);
  if (len)
    memcpy(copy, buf, len);
  int rc = MPI_Isend(copy, (int)len, MPI_BYTE, dest, tag, c->comm, &c->reqs[c->nsends]);
  if (rc != MPI_SUCCESS) {
    free(copy);
    return ts__mpi_error(rc, "MPI_Isend", __FILE__, __LINE__, err);
  }
  c->bufs[c->nsends] = copy;
  c->dests[c->nsends] = dest;
  c->nsends++;
  ts_world_bell_ring(c->world, dest); /* the duplicate's ranks are the world's */
  return TS_OK;
}

int ts_control_progress(ts_control *c, ts_error *err) {
  if (!c)
    return 0;
  if (c->nsends == 0)
    return 0;
  int ndone = 0, failed = TS_OK;
  int rc = MPI_Testsome(c->nsends, c->reqs, &ndone, c->done, c->statuses);
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
    return -ts__mpi_error(rc, "MPI_Testsome of the control sends", __FILE__, __LINE__, err);
  if (ndone == MPI_UNDEFINED)
    ndone = 0;
  for (int k = 0; k < ndone; k++) {
    int i = c->done[k];
    /* A send MPI failed is over too: retire it, and report the first such failure. */
    if (rc == MPI_ERR_IN_STATUS && c->statuses[k].MPI_ERROR != MPI_SUCCESS && failed == TS_OK)
      failed = ts__mpi_error(c->statuses[k].MPI_ERROR, "a control send", __FILE__, __LINE__, err);
    /* A message MPI could not hand over at once went out now: ring again. */
    ts_world_bell_ring(c->world, c->dests[i]);
    free(c->bufs[i]);
    c->bufs[i] = NULL;
  }
  int kept = 0; /* the completed ones' requests are MPI_REQUEST_NULL now */
  for (int i = 0; i < c->nsends; i++)
    if (c->bufs[i]) {
      c->reqs[kept] = c->reqs[i];
      c->bufs[kept] = c->bufs[i];
      c->dests[kept] = c->dests[i];
      kept++;
    }
  c->nsends = kept;
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
    return -ts_error_set(err, TS_NO_MEMORY, "no memory for a control message of %d bytes", count);
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
      return rc != TS_OK
                 ? rc
                 : ts_error_set(err, TS_TIMEOUT, "%d control messages still unsent after %d ms",
                                c->nsends, timeout_ms);
  }
  return rc;
}
