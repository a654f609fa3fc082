/* collectives.c - the collectives and point-to-point calls the reshard strategies need, over
 * 64-bit byte counts, plus the agreement that makes a reshard atomic.
 *
 * Data moves as MPI_BYTE. Reductions need arithmetic: sums of f32, f64, i32 and i64 run with MPI's
 * own ops (fast, vectorized); max and min of every dtype, and every op on f16/bf16, i8 and u8, run
 * through the project's reduce kernel as user-defined MPI ops over one contiguous datatype per
 * dtype, so NaN handling, half-precision rounding and integer wrapping are the same in every
 * strategy. 8-bit sums must not use MPI_SUM: Open MPI 4.1's vectorized (AVX) sum saturates
 * int8/uint8 (200 + 100 gives 255, where p2p and a C cast give 44; open-mpi/ompi#8045). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "ts_wait.h"

#define PIECE_BYTES ((int64_t)1 << 30) /* largest single MPI transfer we issue */

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

int ts__comm_types_init(ts_error *err) {
  if (types_ready)
    return TS_OK;
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++) {
    TS_MPI_CHECK(MPI_Type_contiguous((int)ts_dtype_size((ts_dtype)dt), MPI_BYTE,
                                     &dtype_types[dt]),
                 err);
    TS_MPI_CHECK(MPI_Type_commit(&dtype_types[dt]), err);
  }
  TS_MPI_CHECK(MPI_Op_create(user_sum, 1, &user_ops[TS_REDUCE_SUM]), err);
  TS_MPI_CHECK(MPI_Op_create(user_max, 1, &user_ops[TS_REDUCE_MAX]), err);
  TS_MPI_CHECK(MPI_Op_create(user_min, 1, &user_ops[TS_REDUCE_MIN]), err);
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
  if (!types_ready)
    return ts_error_set(err, TS_INTERNAL, "MPI reduction types used before ts_world_init");
  if (op == TS_REDUCE_SUM) {
    MPI_Datatype native = MPI_DATATYPE_NULL;
    switch (dt) {
    case TS_F32: native = MPI_FLOAT; break;
    case TS_F64: native = MPI_DOUBLE; break;
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
 * Agreement
 *
 * Point to point through comm rank 0, so that a rank that does not answer can be named: every
 * other rank sends its contribution (status, values, message) to rank 0, which takes the lowest
 * failing rank's status and message and the maximum of the values, and sends the verdict back.
 * Rank 0 waits at most the world's agreement timeout for the contributions: past it the verdict
 * is TIMEOUT naming the ranks that did not answer. The others wait twice that for the verdict
 * (rank 0 may have started late by up to the timeout), then name rank 0. So a rank that stops
 * answering fails the operation on every rank that still answers, with one message. Each
 * agreement has its number on its communicator (every member counts alike) and travels on a tag
 * of its own, number modulo AGREE_TAGS, the number checked in the message too: the late
 * contribution of an agreement that timed out is never taken for a later one's. */

#define AGREE_TAG_BASE 28672 /* below cma.c's and regions.c's tags, above scatter's */
#define AGREE_TAGS 2048

typedef struct agree_head {
  uint64_t number;
  int32_t status;
  int32_t rank; /* the verdict's failing comm rank; -1 when its message says all */
  int32_t nvalues;
  int32_t pad;
} agree_head;

#define AGREE_MSG_BYTES ((int)sizeof(((ts_error *)0)->msg))

static size_t agree_bytes(int n) {
  return sizeof(agree_head) + (size_t)n * sizeof(int64_t) + AGREE_MSG_BYTES;
}
static int64_t *agree_values(void *buf) { return (int64_t *)((char *)buf + sizeof(agree_head)); }
static char *agree_msg(void *buf, int n) {
  return (char *)buf + sizeof(agree_head) + (size_t)n * sizeof(int64_t);
}

void ts__orphan_keep(ts_world *w, MPI_Request req, void *buf) {
  if (w->norphans == w->caporphans) {
    int cap = w->caporphans ? 2 * w->caporphans : 8;
    ts__orphan *o = realloc(w->orphans, (size_t)cap * sizeof *o);
    if (!o) {
      MPI_Cancel(&req);
      MPI_Request_free(&req); /* the buffer leaks: MPI may still read it */
      return;
    }
    w->orphans = o;
    w->caporphans = cap;
  }
  w->orphans[w->norphans++] = (ts__orphan){req, buf};
}

void ts__orphans_retire(ts_world *w, bool all) {
  for (int i = 0; i < w->norphans;) {
    int done = 0;
    if (MPI_Test(&w->orphans[i].req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      done = 1;
    if (!done && all) {
      MPI_Cancel(&w->orphans[i].req);
      MPI_Request_free(&w->orphans[i].req);
      done = 1;
    }
    if (done) {
      free(w->orphans[i].buf);
      w->orphans[i] = w->orphans[--w->norphans];
    } else {
      i++;
    }
  }
  if (all) {
    free(w->orphans);
    w->orphans = NULL;
    w->norphans = w->caporphans = 0;
  }
}

/* "60 s", or "1500 ms" */
static void format_ms(char *buf, size_t cap, int64_t ms) {
  if (ms % 1000 == 0)
    snprintf(buf, cap, "%lld s", (long long)(ms / 1000));
  else
    snprintf(buf, cap, "%lld ms", (long long)ms);
}

static const char *agree_label(const ts_comm *c) {
  return c->world && c->world->agree_label[0] ? c->world->agree_label : "an operation";
}

static int agree_timeout_ms(const ts_comm *c) {
  return c->world && c->world->agree_timeout_ms > 0 ? c->world->agree_timeout_ms
                                                      : TS_AGREE_TIMEOUT_DEFAULT_MS;
}

/* Receives a message of this agreement from `src` (MPI_ANY_SOURCE) if one has arrived: 1 and
 * its source, 0 if none, or an MPI error. Messages of other agreements are dropped. */
static int agree_take(ts_comm *c, int src, int tag, uint64_t number, void *buf, int bytes,
                      int *from, ts_error *err) {
  for (;;) {
    int flag = 0, count = 0;
    MPI_Status st;
    TS_MPI_CHECK(MPI_Iprobe(src, tag, c->comm, &flag, &st), err);
    if (!flag) /* the first probe's progress may have just taken the message in */
      TS_MPI_CHECK(MPI_Iprobe(src, tag, c->comm, &flag, &st), err);
    if (!flag)
      return 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (count != bytes) { /* another agreement's, of another size: drop it */
      char drop[64];
      void *b = count > (int)sizeof drop ? malloc((size_t)count) : drop;
      TS_MPI_CHECK(MPI_Recv(b ? b : drop, b ? count : 0, MPI_BYTE, st.MPI_SOURCE, tag, c->comm,
                            MPI_STATUS_IGNORE),
                   err);
      if (b != drop)
        free(b);
      continue;
    }
    TS_MPI_CHECK(MPI_Recv(buf, bytes, MPI_BYTE, st.MPI_SOURCE, tag, c->comm, MPI_STATUS_IGNORE),
                 err);
    if (((agree_head *)buf)->number != number)
      continue; /* the late message of an agreement that timed out */
    *from = st.MPI_SOURCE;
    return 1;
  }
}

/* Comm rank 0: collects every contribution into v (its own already there) and decides. */
static int agree_collect(ts_comm *c, uint64_t number, int tag, void *v, int n, ts_error *err) {
  size_t bytes = agree_bytes(n);
  void *in = malloc(bytes);
  bool *arrived = calloc((size_t)c->size, sizeof *arrived);
  if (!in || !arrived) {
    free(in), free(arrived);
    return ts_error_set(err, TS_NO_MEMORY, "no memory to agree over %d ranks", c->size);
  }
  agree_head *h = v;
  int left = c->size - 1, rc = TS_OK, timeout = agree_timeout_ms(c);
  arrived[0] = true;
  ts_waiter w;
  ts_waiter_init(&w, ts__comm_bells(c) ? &ts_wait_bell : &ts_wait_mpi,
                 ts_wait_deadline_ms(timeout));
  while (left > 0) {
    uint32_t seen = ts_world_bell_seq(c->world);
    int from = -1, got = agree_take(c, MPI_ANY_SOURCE, tag, number, in, (int)bytes, &from, err);
    if (got < 0 || got > 1) {
      rc = got;
      break;
    }
    if (got == 1 && from > 0 && from < c->size && !arrived[from]) {
      agree_head *ih = in;
      arrived[from] = true;
      left--;
      if (ih->status != TS_OK && (h->status == TS_OK || from < h->rank)) {
        h->status = ih->status;
        h->rank = from;
        memcpy(agree_msg(v, n), agree_msg(in, n), AGREE_MSG_BYTES);
      }
      for (int i = 0; i < n; i++)
        agree_values(v)[i] = agree_values(in)[i] > agree_values(v)[i] ? agree_values(in)[i]
                                                                       : agree_values(v)[i];
      ts_waiter_progress(&w);
      continue;
    }
    if (ts__comm_pause(c, &w, seen) == TS_TIMEOUT)
      break;
  }
  if (rc == TS_OK && left > 0) {
    char *m = agree_msg(v, n), t[32];
    format_ms(t, sizeof t, timeout);
    int k = snprintf(m, AGREE_MSG_BYTES, "rank%s", left > 1 ? "s" : "");
    for (int r = 1, listed = 0; r < c->size && k < AGREE_MSG_BYTES; r++)
      if (!arrived[r])
        k += snprintf(m + k, (size_t)(AGREE_MSG_BYTES - k), "%s %d", listed++ ? "," : "",
                      c->ranks[r]);
    if (k < AGREE_MSG_BYTES)
      snprintf(m + k, (size_t)(AGREE_MSG_BYTES - k),
               " did not answer the agreement of %s within %s", agree_label(c), t);
    h->status = TS_TIMEOUT;
    h->rank = -1;
  }
  free(in);
  free(arrived);
  return rc;
}

/* Comm rank 0: sends the verdict to every other rank, waiting for the sends at most the
 * agreement timeout (a rank that stopped answering keeps its copy as an orphan). */
static int agree_announce(ts_comm *c, int tag, const void *v, int n, ts_error *err) {
  size_t bytes = agree_bytes(n);
  int peers = c->size - 1, rc = TS_OK, posted = 0;
  MPI_Request *req = malloc((size_t)peers * sizeof *req);
  void **copy = calloc((size_t)peers, sizeof *copy);
  if (!req || !copy) {
    free(req), free(copy);
    return ts_error_set(err, TS_NO_MEMORY, "no memory to announce an agreement");
  }
  for (; posted < peers; posted++) {
    if (!(copy[posted] = malloc(bytes))) {
      rc = ts_error_set(err, TS_NO_MEMORY, "no memory to announce an agreement");
      break;
    }
    memcpy(copy[posted], v, bytes);
    int mrc = MPI_Isend(copy[posted], (int)bytes, MPI_BYTE, posted + 1, tag, c->comm,
                        &req[posted]);
    if (mrc != MPI_SUCCESS) {
      free(copy[posted]);
      rc = ts__mpi_error(mrc, "MPI_Isend", __FILE__, __LINE__, err);
      break;
    }
    ts__comm_ring(c, posted + 1);
  }
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_mpi, ts_wait_deadline_ms(agree_timeout_ms(c)));
  int done = 0;
  while (posted > 0) {
    int mrc = MPI_Testall(posted, req, &done, MPI_STATUSES_IGNORE);
    if (mrc != MPI_SUCCESS && rc == TS_OK)
      rc = ts__mpi_error(mrc, "MPI_Testall", __FILE__, __LINE__, err);
    if (done || mrc != MPI_SUCCESS || ts_waiter_pause(&w) == TS_TIMEOUT)
      break;
  }
  for (int i = 0; i < posted; i++) {
    if (done || req[i] == MPI_REQUEST_NULL)
      free(copy[i]);
    else if (c->world)
      ts__orphan_keep(c->world, req[i], copy[i]);
  }
  free(req);
  free(copy);
  return rc;
}

/* Another rank: sends its contribution to comm rank 0 and waits for the verdict into v. */
static int agree_ask(ts_comm *c, uint64_t number, int tag, void *v, int n, ts_error *err) {
  size_t bytes = agree_bytes(n);
  void *out = malloc(bytes);
  if (!out)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to agree over %d ranks", c->size);
  memcpy(out, v, bytes);
  MPI_Request sreq;
  int mrc = MPI_Isend(out, (int)bytes, MPI_BYTE, 0, tag, c->comm, &sreq);
  if (mrc != MPI_SUCCESS) {
    free(out);
    return ts__mpi_error(mrc, "MPI_Isend", __FILE__, __LINE__, err);
  }
  ts__comm_ring(c, 0);
  int64_t wait_ms = 2 * (int64_t)agree_timeout_ms(c);
  ts_waiter w;
  ts_waiter_init(&w, ts__comm_bells(c) ? &ts_wait_bell : &ts_wait_mpi,
                 ts_wait_deadline_ms(wait_ms));
  int rc = TS_OK, sent = 0;
  for (;;) {
    uint32_t seen = ts_world_bell_seq(c->world);
    if (!sent && (mrc = MPI_Test(&sreq, &sent, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
      rc = ts__mpi_error(mrc, "MPI_Test", __FILE__, __LINE__, err);
      break;
    }
    int from;
    int got = agree_take(c, 0, tag, number, v, (int)bytes, &from, err);
    if (got != 0) {
      rc = got == 1 ? TS_OK : got;
      break;
    }
    if (ts__comm_pause(c, &w, seen) == TS_TIMEOUT) {
      agree_head *h = v;
      char t[32];
      format_ms(t, sizeof t, wait_ms);
      h->status = TS_TIMEOUT;
      h->rank = -1;
      snprintf(agree_msg(v, n), AGREE_MSG_BYTES,
               "rank %d did not answer the agreement of %s within %s", c->ranks[0],
               agree_label(c), t);
      break;
    }
  }
  if (sent || sreq == MPI_REQUEST_NULL)
    free(out);
  else if (c->world)
    ts__orphan_keep(c->world, sreq, out);
  return rc;
}

int ts_comm_agree_max(ts_comm *c, int status, const ts_error *local, int64_t *values, int n,
                      ts_error *err) {
  if (n < 0 || (n > 0 && !values))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "agreement on %d values", n);
  uint64_t number = ++c->agreements;
  if (c->size == 1)
    return status == TS_OK ? TS_OK
                           : ts_error_set(err, status, "rank %d: %.480s", c->ranks[0],
                                          local && local->msg[0] ? local->msg
                                                                 : ts_strerror(status));
  int tag = AGREE_TAG_BASE + (int)(number % AGREE_TAGS);
  void *v = calloc(1, agree_bytes(n));
  if (!v)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to agree on %d values", n);
  agree_head *h = v;
  h->number = number;
  h->status = status;
  h->rank = status != TS_OK ? c->rank : 0;
  h->nvalues = n;
  for (int i = 0; i < n; i++)
    agree_values(v)[i] = values[i];
  if (status != TS_OK)
    snprintf(agree_msg(v, n), AGREE_MSG_BYTES, "%s",
             local && local->msg[0] ? local->msg : ts_strerror(status));
  if (c->world) {
    ts__orphans_retire(c->world, false);
    if (c->world->agree_delay_ms > 0) { /* fault injection: this rank answers late */
      ts_wait_nap_ns((int64_t)c->world->agree_delay_ms * 1000000);
      c->world->agree_delay_ms = 0;
    }
  }
  int rc = c->rank == 0 ? agree_collect(c, number, tag, v, n, err) : agree_ask(c, number, tag, v, n, err);
  if (rc == TS_OK && c->rank == 0)
    rc = agree_announce(c, tag, v, n, err);
  if (rc != TS_OK) {
    free(v);
    return rc;
  }
  for (int i = 0; i < n; i++)
    values[i] = agree_values(v)[i];
  int code = h->status;
  if (code == TS_OK)
    rc = TS_OK;
  else if (h->rank < 0 || h->rank >= c->size)
    rc = ts_error_set(err, code, "%s", agree_msg(v, n));
  else
    rc = ts_error_set(err, code, "rank %d: %.480s", c->ranks[h->rank], agree_msg(v, n));
  free(v);
  return rc;
}

int ts_comm_agree(ts_comm *c, int status, const ts_error *local, ts_error *err) {
  return ts_comm_agree_max(c, status, local, NULL, 0, err);
}

void ts_world_set_agree_timeout(ts_world *w, int timeout_ms) {
  if (w)
    w->agree_timeout_ms = timeout_ms > 0 ? timeout_ms : TS_AGREE_TIMEOUT_DEFAULT_MS;
}

void ts_world_set_agree_label(ts_world *w, const char *label) {
  if (w)
    snprintf(w->agree_label, sizeof w->agree_label, "%s", label ? label : "");
}

void ts_world_delay_next_agreement(ts_world *w, int ms) {
  if (w)
    w->agree_delay_ms = ms > 0 ? ms : 0;
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

int ts_comm_bcast(ts_comm *c, void *buf, int64_t bytes, int root, ts_error *err) {
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

int ts_comm_allgatherv(ts_comm *c, void *buf, const int64_t *counts, const int64_t *displs,
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
    int rc = ts_comm_bcast(c, (char *)buf + displs[i], counts[i], i, err);
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
  for (int64_t done = 0; done < n; done += step) {
    int64_t k = n - done < step ? n - done : step;
    const void *s = sbuf ? (const char *)sbuf + done * es : MPI_IN_PLACE;
    TS_MPI_CHECK(MPI_Allreduce(s, (char *)rbuf + done * es, (int)k, type, mop, c->comm), err);
  }
  return TS_OK;
}

int ts_comm_reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int *counts,
                           ts_dtype dt, ts_reduce_op op, ts_error *err) {
  MPI_Datatype type;
  MPI_Op mop;
  int rc = ts__comm_reduce_types(dt, op, &type, &mop, err);
  if (rc)
    return rc;
  /* One node with single-copy reads: each rank reads its block from the others (cma.c), all
   * ranks at once, instead of MPI's copies through shared-memory fragments. */
  if (c->pids && sbuf && c->size > 1)
    return ts__cma_reduce_scatter(c, sbuf, rbuf, counts, dt, op, err);
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

int ts_comm_exchange(ts_comm *c, int nsend, const int *send_peers, void *const *send_bufs,
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
