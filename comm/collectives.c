/* collectives.c - the collectives and point-to-point calls the reshard strategies need, over
 * 64-bit byte counts (the agreement that makes a reshard atomic is agree.c's).
 *
 * Data moves as MPI_BYTE. Reductions need arithmetic: sums of f32, f64, i32, i64, c64
 * (MPI_C_FLOAT_COMPLEX) and c128 (MPI_C_DOUBLE_COMPLEX) run with MPI's own ops (fast,
 * vectorized), and so do the sums of avg (divided once by the caller, after the whole reduction);
 * prod, max and min of every dtype (complex prod by numpy's formula; complex max and min are
 * refused), and every op on the other dtypes (f16,
 * bf16, the 8- and 16-bit integers, u32, u64, bool), run through the project's reduce kernel as
 * user-defined MPI ops over one contiguous datatype per dtype, so NaN handling, half-precision
 * rounding, integer wrapping and bool's or/and are the same in every strategy; the 8-bit floats,
 * which have no reductions, are refused before any MPI call. 8-bit sums must not use MPI_SUM: Open
 * MPI 4.1's vectorized (AVX) sum saturates int8/uint8 (200 + 100 gives 255, where p2p and a C cast
 * give 44; open-mpi/ompi#8045). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "ts_wait.h"

#define PIECE_BYTES ((int64_t)1 << 30) /* largest single MPI transfer we issue */
/* Reductions of at least this much on a communicator that spans hosts go around a ring (ring.c);
 * smaller ones take MPI's latency-bound algorithms. */
#define RING_MIN_BYTES ((int64_t)1 << 20)

/* ---------------------------------------------------------------------------------------------
 * Reduction types and ops */

static MPI_Datatype dtype_types[TS_DTYPE_COUNT];
static MPI_Op user_ops[TS_REDUCE_COUNT];
static bool types_ready;

static void user_reduce(void *in, void *inout, int *len, MPI_Datatype *type, ts_reduce_op op) {
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++)
    if (*type == dtype_types[dt]) {
      ts_reduce(inout, in, (size_t)*len, (ts_dtype)dt, op, NULL);
      return;
    }
}
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  user_reduce(in, inout, len, type, TS_REDUCE_SUM);
}
static void user_max(void *in, void *inout, int *len, MPI_Datatype *type) {
  user_reduce(in, inout, len, type, TS_REDUCE_MAX);
}
static void user_min(void *in, void *inout, int *len, MPI_Datatype *type) {
  user_reduce(in, inout, len, type, TS_REDUCE_MIN);
}
static void user_prod(void *in, void *inout, int *len, MPI_Datatype *type) {
  user_reduce(in, inout, len, type, TS_REDUCE_PROD);
}

int ts__comm_types_init(ts_error *err) {
  if (types_ready)
    return TS_OK;
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++) {
    TS_MPI_CHECK(MPI_Type_contiguous((int)ts_dtype_size((ts_dtype)dt), MPI_BYTE, &dtype_types[dt]),
                 err);
    TS_MPI_CHECK(MPI_Type_commit(&dtype_types[dt]), err);
  }
  TS_MPI_CHECK(MPI_Op_create(user_sum, 1, &user_ops[TS_REDUCE_SUM]), err);
  TS_MPI_CHECK(MPI_Op_create(user_max, 1, &user_ops[TS_REDUCE_MAX]), err);
  TS_MPI_CHECK(MPI_Op_create(user_min, 1, &user_ops[TS_REDUCE_MIN]), err);
  /* avg combines like sum (the caller divides once, at the end: ts_reduce_finish) */
  TS_MPI_CHECK(MPI_Op_create(user_sum, 1, &user_ops[TS_REDUCE_AVG]), err);
  TS_MPI_CHECK(MPI_Op_create(user_prod, 1, &user_ops[TS_REDUCE_PROD]), err);
  types_ready = true;
  return TS_OK;
}

int ts__comm_types_free(ts_error *err) {
  if (!types_ready)
    return TS_OK;
  types_ready = false;
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++)
    TS_MPI_CHECK(MPI_Type_free(&dtype_types[dt]), err);
  for (int op = 0; op < TS_REDUCE_COUNT; op++)
    TS_MPI_CHECK(MPI_Op_free(&user_ops[op]), err);
  return TS_OK;
}

int ts__comm_reduce_types(ts_dtype dt, ts_reduce_op op, MPI_Datatype *type, MPI_Op *mop,
                          ts_error *err) {
  if (!ts_dtype_valid((int)dt) || (int)op < 0 || op >= TS_REDUCE_COUNT)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "reduction of dtype %d with op %d", (int)dt,
                        (int)op);
  int rc = ts_reduce_check(dt, op, err); /* the 8-bit floats have no reductions */
  if (rc)
    return rc;
  if (!types_ready)
    return ts_error_set(err, TS_INTERNAL, "MPI reduction types used before ts_world_init");
  if (op == TS_REDUCE_SUM || op == TS_REDUCE_AVG) {
    MPI_Datatype native = MPI_DATATYPE_NULL;
    switch (dt) {
    case TS_F32: native = MPI_FLOAT; break;
    case TS_F64: native = MPI_DOUBLE; break;
    case TS_C64: native = MPI_C_FLOAT_COMPLEX; break;
    case TS_C128: native = MPI_C_DOUBLE_COMPLEX; break;
    case TS_I32: native = MPI_INT32_T; break;
    case TS_I64: native = MPI_INT64_T; break;
    default: break;
    }
    if (native != MPI_DATATYPE_NULL) {
      *type = native;
      *mop = MPI_SUM;
      return TS_OK;
    }
  }
  *type = dtype_types[dt];
  *mop = user_ops[op];
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Collectives */

int ts_comm_barrier(ts_comm *c, ts_error *err) {
  TS_MPI_CHECK(MPI_Barrier(c->comm), err);
  return TS_OK;
}

int ts_comm_allreduce_i64(ts_comm *c, int64_t *values, int n, ts_comm_op op, ts_error *err) {
  MPI_Op mop = op == TS_COMM_MAX ? MPI_MAX : op == TS_COMM_MIN ? MPI_MIN : MPI_SUM;
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, mop, c->comm), err);
  return TS_OK;
}

static int bcast(ts_comm *c, void *buf, int64_t bytes, int root, ts_error *err) {
  if (bytes < 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "broadcast of %lld bytes", (long long)bytes);
  char *p = buf;
  int64_t done = 0;
  do {
    int64_t n = bytes - done < PIECE_BYTES ? bytes - done : PIECE_BYTES;
    TS_MPI_CHECK(MPI_Bcast(p + done, (int)n, MPI_BYTE, root, c->comm), err);
    done += n;
  } while (done < bytes);
  return TS_OK;
}

/* The chain's pieces travel under this tag (below cma.c's and regions.c's). */
#define CHAIN_TAG 31740

/* Pieces in flight per rank and direction: enough to fill a link, bounded in buffered bytes. */
#define CHAIN_WINDOW 64

static int bcast_chain(ts_comm *c, void *buf, int64_t bytes, int root, int64_t piece,
                       ts_error *err) {
  if (bytes < 0 || root < 0 || root >= c->size)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "chain broadcast of %lld bytes from rank %d of %d", (long long)bytes, root,
                        c->size);
  if (piece <= 0 || piece > PIECE_BYTES)
    piece = PIECE_BYTES;
  int pos = (c->rank - root + c->size) % c->size;
  bool recv = pos > 0, send = pos + 1 < c->size;
  int prev = (c->rank - 1 + c->size) % c->size, next = (c->rank + 1) % c->size;
  int64_t n = bytes > 0 ? (bytes + piece - 1) / piece : 0;
  MPI_Request rreq[CHAIN_WINDOW], sreq[CHAIN_WINDOW];
  for (int i = 0; i < CHAIN_WINDOW; i++)
    rreq[i] = sreq[i] = MPI_REQUEST_NULL;
  char *at = buf;
  int rc = TS_OK;
  /* Receives posted CHAIN_WINDOW pieces ahead; each piece forwarded as soon as it is in, so the
   * next rank's piece k travels while piece k + 1 arrives. */
  for (int64_t k = 0, posted = 0; k < n && (recv || send); k++) {
    for (; recv && posted < n && posted < k + CHAIN_WINDOW; posted++) {
      int64_t off = posted * piece, m = bytes - off < piece ? bytes - off : piece;
      TS_MPI_TRY(MPI_Irecv(at + off, (int)m, MPI_BYTE, prev, CHAIN_TAG, c->comm,
                           &rreq[posted % CHAIN_WINDOW]),
                 err, rc, drain);
    }
    int64_t off = k * piece, m = bytes - off < piece ? bytes - off : piece;
    if (recv)
      TS_MPI_TRY(MPI_Wait(&rreq[k % CHAIN_WINDOW], MPI_STATUS_IGNORE), err, rc, drain);
    if (send) {
      TS_MPI_TRY(MPI_Wait(&sreq[k % CHAIN_WINDOW], MPI_STATUS_IGNORE), err, rc, drain);
      TS_MPI_TRY(
          MPI_Isend(at + off, (int)m, MPI_BYTE, next, CHAIN_TAG, c->comm, &sreq[k % CHAIN_WINDOW]),
          err, rc, drain);
    }
  }
drain:
  /* Whatever was posted completes before buf can go away (after a failure too). */
  {
    int w = MPI_Waitall(CHAIN_WINDOW, sreq, MPI_STATUSES_IGNORE);
    if (w == MPI_SUCCESS)
      w = MPI_Waitall(CHAIN_WINDOW, rreq, MPI_STATUSES_IGNORE);
    if (w != MPI_SUCCESS && rc == TS_OK)
      rc = ts__mpi_error(w, "MPI_Waitall", __FILE__, __LINE__, err);
  }
  return rc;
}

/* The link rate's messages travel under this tag. */
#define RATE_TAG 31742

/* One timed send of n bytes from a to b, answered by one byte: seconds (on a). */
static int timed_send(ts_comm *c, int a, int b, char *buf, int n, double *secs, ts_error *err) {
  char ack = 0;
  int64_t t0 = ts_wait_now_ns();
  if (c->rank == a) {
    TS_MPI_CHECK(MPI_Send(buf, n, MPI_BYTE, b, RATE_TAG, c->comm), err);
    TS_MPI_CHECK(MPI_Recv(&ack, 1, MPI_BYTE, b, RATE_TAG, c->comm, MPI_STATUS_IGNORE), err);
  } else if (c->rank == b) {
    TS_MPI_CHECK(MPI_Recv(buf, n, MPI_BYTE, a, RATE_TAG, c->comm, MPI_STATUS_IGNORE), err);
    TS_MPI_CHECK(MPI_Send(&ack, 1, MPI_BYTE, a, RATE_TAG, c->comm), err);
  }
  *secs = (double)(ts_wait_now_ns() - t0) * 1e-9;
  return TS_OK;
}

int ts_comm_link_rate(ts_comm *c, int a, int b, int64_t bytes, double *bytes_per_s, ts_error *err) {
  if (a < 0 || b < 0 || a >= c->size || b >= c->size || a == b || bytes < 1 || bytes > INT_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "link rate between members %d and %d of %d "
                        "over %lld bytes",
                        a, b, c->size, (long long)bytes);
  char *buf = NULL;
  if ((c->rank == a || c->rank == b) && !(buf = calloc(1, (size_t)bytes)))
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a %lld-byte link test", (long long)bytes);
  double rtt = 0, best = 0, t;
  int rc = timed_send(c, a, b, buf, 1, &rtt, err);
  for (int k = 0; k < 2 && !rc; k++)
    if (!(rc = timed_send(c, a, b, buf, (int)bytes, &t, err)) && (k == 0 || t < best))
      best = t;
  free(buf);
  double rate = best - rtt > 0 ? (double)bytes / (best - rtt) : (double)bytes / 1e-9;
  if (!rc)
    rc = ts_comm_bcast(c, &rate, sizeof rate, a, err);
  if (!rc)
    *bytes_per_s = rate;
  return rc;
}

static int allgatherv(ts_comm *c, void *buf, const int64_t *counts, const int64_t *displs,
                      ts_error *err) {
  bool small = true;
  for (int i = 0; i < c->size; i++) {
    if (counts[i] < 0 || displs[i] < 0)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "negative count or displacement");
    small &= counts[i] + displs[i] <= INT_MAX;
  }
  if (small) {
    int *ic = malloc(2 * (size_t)c->size * sizeof(int));
    if (!ic)
      return ts_error_set(err, TS_NO_MEMORY, "no memory for allgatherv counts");
    int *id = ic + c->size;
    for (int i = 0; i < c->size; i++) {
      ic[i] = (int)counts[i];
      id[i] = (int)displs[i];
    }
    int mrc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, ic, id, MPI_BYTE, c->comm);
    free(ic);
    if (mrc != MPI_SUCCESS)
      return ts__mpi_error(mrc, "MPI_Allgatherv", __FILE__, __LINE__, err);
    return TS_OK;
  }
  /* Above INT_MAX bytes: every rank broadcasts its block in pieces. */
  for (int i = 0; i < c->size; i++) {
    int rc = bcast(c, (char *)buf + displs[i], counts[i], i, err);
    if (rc)
      return rc;
  }
  return TS_OK;
}

int ts_comm_allreduce(ts_comm *c, const void *sbuf, void *rbuf, int64_t n, ts_dtype dt,
                      ts_reduce_op op, ts_error *err) {
  MPI_Datatype type;
  MPI_Op mop;
  int rc = ts__comm_reduce_types(dt, op, &type, &mop, err);
  if (rc)
    return rc;
  int64_t es = (int64_t)ts_dtype_size(dt), step = PIECE_BYTES / es;
  if (c->hosts && n * es >= RING_MIN_BYTES)
    return ts__ring_allreduce(c, sbuf, rbuf, n, dt, op, err);
  for (int64_t done = 0; done < n; done += step) {
    int64_t k = n - done < step ? n - done : step;
    const void *s = sbuf ? (const char *)sbuf + done * es : MPI_IN_PLACE;
    TS_MPI_CHECK(MPI_Allreduce(s, (char *)rbuf + done * es, (int)k, type, mop, c->comm), err);
  }
  return TS_OK;
}

static int reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int *counts, ts_dtype dt,
                          ts_reduce_op op, ts_error *err) {
  MPI_Datatype type;
  MPI_Op mop;
  int rc = ts__comm_reduce_types(dt, op, &type, &mop, err);
  if (rc)
    return rc;
  /* One node with single-copy reads: each rank reads its block from the others (cma.c), all
   * ranks at once, instead of MPI's copies through shared-memory fragments. */
  if (c->pids && sbuf && c->size > 1)
    return ts__cma_reduce_scatter(c, sbuf, rbuf, counts, dt, op, err);
  /* Across hosts, large data goes around a ring ordered host by host (ring.c). */
  int64_t total = 0;
  for (int i = 0; i < c->size; i++)
    total += counts[i];
  if (c->hosts && sbuf && total * (int64_t)ts_dtype_size(dt) >= RING_MIN_BYTES) {
    int64_t *n64 = malloc((size_t)c->size * sizeof *n64);
    if (!n64)
      return ts_error_set(err, TS_NO_MEMORY, "no memory for %d counts", c->size);
    for (int i = 0; i < c->size; i++)
      n64[i] = counts[i];
    rc = ts__ring_reduce_scatter(c, sbuf, rbuf, n64, dt, op, err);
    free(n64);
    return rc;
  }
  /* Equal blocks take MPI's block variant, whose algorithms are the better tuned ones. */
  bool equal = true;
  for (int i = 1; i < c->size; i++)
    equal &= counts[i] == counts[0];
  if (equal)
    TS_MPI_CHECK(MPI_Reduce_scatter_block(sbuf, rbuf, counts[0], type, mop, c->comm), err);
  else
    TS_MPI_CHECK(MPI_Reduce_scatter(sbuf, rbuf, counts, type, mop, c->comm), err);
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Point-to-point */

static int64_t pieces_of(int64_t bytes) {
  return bytes > 0 ? (bytes + PIECE_BYTES - 1) / PIECE_BYTES : 0;
}

/* A message this small goes out within MPI_Isend (Open MPI's eager sends on one node, whose
 * limit of 4 KiB counts the match header too), so its sender's ring announces it whole: a wait
 * for such messages can block on the bell. A larger one needs its sender's progress after the
 * receiver matched it, which only MPI's own wait gives (measured: 4 KiB pieces of a 64 KiB
 * reshard on 4 ranks took 550 us per reshard with bell waits, 390 us with MPI's). */
#define SMALL_MESSAGE 2048

/* MPI_Waitall of the posted transfers. When they are all small and every peer rings, the wait
 * tests and blocks on this rank's bell between tests instead of spinning in MPI (a large
 * transfer needs both sides' progress, which only MPI's own wait gives). */
static int wait_transfers(ts_comm *c, int k, MPI_Request *req, const ts__transfer *t) {
  bool small = true;
  for (int i = 0; small && i < k; i++) {
    int size = 0;
    small = MPI_Type_size(t[i].type, &size) == MPI_SUCCESS &&
            (int64_t)size * t[i].count <= SMALL_MESSAGE;
  }
  return small ? ts__comm_wait_rung(c, k, req) : MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
}

int ts__comm_wait_rung(ts_comm *c, int k, MPI_Request *req) {
  if (!ts__comm_bells(c))
    return MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_bell, TS_WAIT_FOREVER);
  for (;;) {
    uint32_t seen = ts_world_bell_seq(c->world);
    int done = 0;
    for (int pass = 0; pass < 2 && !done; pass++) { /* a test's progress, then its finding */
      int mrc = MPI_Testall(k, req, &done, MPI_STATUSES_IGNORE);
      if (mrc != MPI_SUCCESS)
        return mrc;
    }
    if (done)
      return MPI_SUCCESS;
    ts__comm_pause(c, &w, seen);
  }
}

int ts__comm_transfers(ts_comm *c, int n, const ts__transfer *t, int tag, ts_error *err) {
  if (n == 0)
    return TS_OK;
  MPI_Request *req = malloc((size_t)n * sizeof *req);
  if (!req)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %d requests", n);
  int k = 0, rc = TS_OK;
  for (; k < n; k++) {
    const ts__transfer *x = &t[k];
    if (x->send)
      TS_MPI_TRY(MPI_Isend(x->buf, x->count, x->type, x->peer, tag, c->comm, &req[k]), err, rc,
                 cancel);
    else
      TS_MPI_TRY(MPI_Irecv(x->buf, x->count, x->type, x->peer, tag, c->comm, &req[k]), err, rc,
                 cancel);
  }
  for (int i = 0; i < k; i++)
    if (t[i].send)
      ts__comm_ring(c, t[i].peer);
  TS_MPI_TRY(wait_transfers(c, k, req, t), err, rc, done);
  goto done;
cancel:
  /* Requests already posted must complete before their buffers go away. */
  MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
done:
  free(req);
  return rc;
}

static int exchange(ts_comm *c, int nsend, const int *send_peers, void *const *send_bufs,
                    const int64_t *send_bytes, int nrecv, const int *recv_peers,
                    void *const *recv_bufs, const int64_t *recv_bytes, int tag, ts_error *err) {
  int64_t n = 0;
  for (int i = 0; i < nsend; i++)
    n += pieces_of(send_bytes[i]);
  for (int i = 0; i < nrecv; i++)
    n += pieces_of(recv_bytes[i]);
  if (n == 0)
    return TS_OK;
  if (n > INT_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "%lld transfers at once; at most %d",
                        (long long)n, INT_MAX);
  ts__transfer *t = malloc((size_t)n * sizeof *t);
  if (!t)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %lld transfers", (long long)n);
  int k = 0;
  for (int side = 0; side < 2; side++) { /* the receives first */
    bool send = side == 1;
    int m = send ? nsend : nrecv;
    for (int i = 0; i < m; i++) {
      int64_t bytes = send ? send_bytes[i] : recv_bytes[i];
      char *buf = send ? send_bufs[i] : recv_bufs[i];
      for (int64_t off = 0; off < bytes; off += PIECE_BYTES) {
        int64_t piece = bytes - off < PIECE_BYTES ? bytes - off : PIECE_BYTES;
        t[k++] = (ts__transfer){buf + off, (int)piece, MPI_BYTE,
                                send ? send_peers[i] : recv_peers[i], send};
      }
    }
  }
  int rc = ts__comm_transfers(c, k, t, tag, err);
  free(t);
  return rc;
}

int ts_comm_exchange(ts_comm *c, int nsend, const int *send_peers, void *const *send_bufs,
                     const int64_t *send_bytes, int nrecv, const int *recv_peers,
                     void *const *recv_bufs, const int64_t *recv_bytes, int tag, ts_error *err) {
  int rc = exchange(c, nsend, send_peers, send_bufs, send_bytes, nrecv, recv_peers, recv_bufs,
                    recv_bytes, tag, err);
  for (int i = 0; rc == TS_OK && i < nsend; i++)
    ts__traffic_count(c, send_peers[i], true, send_bytes[i]);
  for (int i = 0; rc == TS_OK && i < nrecv; i++)
    ts__traffic_count(c, recv_peers[i], false, recv_bytes[i]);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The collectives whose pieces have a sender and a receiver, counted once they succeeded
 * (traffic.c): a broadcast as the root's bytes to every other rank, an allgather as each rank's
 * block to every other, a reduce-scatter as each rank's block j to rank j. */

static void count_from_root(ts_comm *c, int root, int64_t bytes) {
  for (int i = 0; i < c->size; i++)
    if (c->rank == root)
      ts__traffic_count(c, i, true, bytes);
  if (c->rank != root)
    ts__traffic_count(c, root, false, bytes);
}

int ts_comm_bcast(ts_comm *c, void *buf, int64_t bytes, int root, ts_error *err) {
  int rc = bcast(c, buf, bytes, root, err);
  if (rc == TS_OK)
    count_from_root(c, root, bytes);
  return rc;
}

int ts_comm_bcast_chain(ts_comm *c, void *buf, int64_t bytes, int root, int64_t piece,
                        ts_error *err) {
  int rc = bcast_chain(c, buf, bytes, root, piece, err);
  if (rc == TS_OK)
    count_from_root(c, root, bytes);
  return rc;
}

int ts_comm_allgatherv(ts_comm *c, void *buf, const int64_t *counts, const int64_t *displs,
                       ts_error *err) {
  int rc = allgatherv(c, buf, counts, displs, err);
  for (int i = 0; rc == TS_OK && i < c->size; i++) {
    ts__traffic_count(c, i, true, counts[c->rank]);
    ts__traffic_count(c, i, false, counts[i]);
  }
  return rc;
}

int ts_comm_reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int *counts, ts_dtype dt,
                           ts_reduce_op op, ts_error *err) {
  int rc = reduce_scatter(c, sbuf, rbuf, counts, dt, op, err);
  int64_t es = (int64_t)ts_dtype_size(dt);
  for (int i = 0; rc == TS_OK && i < c->size; i++) {
    ts__traffic_count(c, i, true, (int64_t)counts[i] * es);
    ts__traffic_count(c, i, false, (int64_t)counts[c->rank] * es);
  }
  return rc;
}
