/* oplog.c - one log line per operation at info level (operation, tensor, bytes, strategy, time,
 * client; held and written in batches, see log.c), and the reshard's answer naming the strategy
 * that ran and its time.
 *
 * Collective operations are timed by ops.c around their run (begin, end); the reshard handler
 * notes the strategy its executor ran. The line of a collective operation is written after its
 * answer (tsd_oplog_flush), before anything else is logged here. Only the engine thread calls
 * these, one operation at a time, so the state of the running operation is one static record.
 * The answer of a reshard carries the strategy (and, relabeled, the target's ranks as chosen) of
 * the last reshard run here when it is the same operation (by its hash; a retry answered later by
 * its idempotency key gets the status alone).
 *
 * Each operation kind keeps its latency and batch size over its last TSD_OPLOG_WINDOW runs in a
 * ring; stats sorts a copy of a ring for its percentiles (nearest rank), so recording is O(1).
 * Each run also goes into its kind's latency histogram of the metrics endpoint (counters.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oplog.h"

typedef struct op_record {
  struct timespec start;
  bool noted, sized; /* a strategy and bytes noted; bytes noted alone */
  ts_strategy strategy;
  uint64_t bytes;
  uint64_t batch; /* tensors the operation carries: 0 (not noted) counts as 1 */
} op_record;

static op_record cur;

/* A relabeled reshard's target ranks: those noted by the operation running now, and those of the
 * last reshard (its answer carries them); swapped at the end of a reshard. */
typedef struct rank_list {
  int *v;
  int n, cap;
} rank_list;
static rank_list ranks_now, ranks_last;
static struct {
  bool valid;
  uint64_t hash, us;
  ts_strategy strategy;
} last_reshard;

/* The line of the last collective operation, written by tsd_oplog_flush after its answer went
 * out (formatting it cost a 4 KiB reshard a few microseconds before its answer). */
static struct {
  bool pending;
  int level; /* info; debug for the quiet internal operations */
  const char *op, *strategy, *status;
  char tensor[TS_NAME_MAX];
  char client[48];
  uint64_t bytes, us;
} line;

#define KINDS 128 /* above every op_case of Request's oneof (the highest numbers are 100-109) */

typedef struct kind_window {
  uint64_t count; /* runs since the start; the ring holds the last min(count, window) */
  uint32_t us[TSD_OPLOG_WINDOW];
  uint32_t batch[TSD_OPLOG_WINDOW];
} kind_window;

static kind_window kinds[KINDS];

static void record_kind(int op_case, uint64_t us, uint64_t batch) {
  if (op_case <= 0 || op_case >= KINDS)
    return;
  kind_window *k = &kinds[op_case];
  size_t i = (size_t)(k->count % TSD_OPLOG_WINDOW);
  k->us[i] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
  k->batch[i] = batch > UINT32_MAX ? UINT32_MAX : (uint32_t)batch;
  k->count++;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The nearest-rank percentile q (0..100) of v[0..n), sorted in place (n > 0). */
static uint64_t percentile(uint32_t *v, size_t n, int q) {
  qsort(v, n, sizeof *v, cmp_u32);
  size_t r = (n * (size_t)q + 99) / 100;
  return v[r > 0 ? r - 1 : 0];
}

int tsd_oplog_kinds(tsd_oplog_kind *out, int max) {
  static uint32_t tmp[TSD_OPLOG_WINDOW];
  int n = 0;
  for (int c = 1; c < KINDS && n < max; c++) {
    const kind_window *k = &kinds[c];
    if (!k->count)
      continue;
    size_t len = k->count < TSD_OPLOG_WINDOW ? (size_t)k->count : TSD_OPLOG_WINDOW;
    tsd_oplog_kind *o = &out[n++];
    o->op_case = c;
    o->count = k->count;
    memcpy(tmp, k->us, len * sizeof *tmp);
    o->p50_us = percentile(tmp, len, 50);
    o->p99_us = percentile(tmp, len, 99);
    memcpy(tmp, k->batch, len * sizeof *tmp);
    o->batch_p50 = percentile(tmp, len, 50);
    o->batch_max = tmp[len - 1];
  }
  return n;
}

static uint64_t since_us(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int64_t us = (int64_t)(t1.tv_sec - t0->tv_sec) * 1000000 + (t1.tv_nsec - t0->tv_nsec) / 1000;
  return us > 0 ? (uint64_t)us : 0;
}

const char *tsd_oplog_tensor(const Tshard__Request *r) {
  const char *n = NULL;
  switch (r->op_case) {
  case TSHARD__REQUEST__OP_CREATE: n = r->create->name; break;
  case TSHARD__REQUEST__OP_PUT: n = r->put->name; break;
  case TSHARD__REQUEST__OP_PUT_SLICE: n = r->put_slice->name; break;
  case TSHARD__REQUEST__OP_GET: n = r->get->name; break;
  case TSHARD__REQUEST__OP_GET_SLICE: n = r->get_slice->name; break;
  case TSHARD__REQUEST__OP_RESHARD: n = r->reshard->name; break;
  case TSHARD__REQUEST__OP_DROP: n = r->drop->name; break;
  default: break;
  }
  return n && n[0] ? n : "-";
}

void tsd_oplog_begin(void) {
  memset(&cur, 0, sizeof cur);
  ranks_now.n = 0;
  clock_gettime(CLOCK_MONOTONIC, &cur.start);
}

void tsd_oplog_batch(uint64_t tensors) { cur.batch = tensors; }

void tsd_oplog_bytes(uint64_t bytes) {
  cur.sized = true;
  cur.bytes = bytes;
}

void tsd_oplog_note(ts_strategy strategy, uint64_t bytes) {
  cur.noted = true;
  cur.strategy = strategy;
  cur.bytes = bytes;
}

void tsd_oplog_ranks(const int *ranks, int n) {
  if (n > ranks_now.cap) {
    int *v = realloc(ranks_now.v, (size_t)n * sizeof *v);
    if (!v)
      return; /* the answer goes without them; describe gives them */
    ranks_now.v = v;
    ranks_now.cap = n;
  }
  memcpy(ranks_now.v, ranks, (size_t)n * sizeof *ranks);
  ranks_now.n = n;
}

void tsd_oplog_end(tsd_engine *e, const tsd_ordered *op, const tsd_pending *origin, int status) {
  uint64_t us = since_us(&cur.start);
  record_kind(op->req->op_case, us, cur.batch ? cur.batch : 1);
  tsd_count_latency(op->req->op_case, us * 1000); /* the metrics' histogram of its kind */
  const char *strategy = cur.noted ? ts_strategy_name(cur.strategy) : "-";
  if (op->req->op_case == TSHARD__REQUEST__OP_RESHARD) {
    last_reshard.valid = status == TS_OK && cur.noted;
    last_reshard.hash = op->hash;
    last_reshard.us = us;
    last_reshard.strategy = cur.strategy;
    rank_list t = ranks_last;
    ranks_last = ranks_now;
    ranks_now = t;
    ranks_now.n = 0;
  }
  bool given = cur.noted || cur.sized;
  uint64_t bytes = given ? cur.bytes : 0; /* a reshard: bytes sent and received here */
  const ts_stored *t = given ? NULL : ts_store_find(e->store, tsd_oplog_tensor(op->req));
  if (t) { /* else the tensor's size */
    bytes = ts_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
      bytes *= (uint64_t)t->shape[d];
  }
  tsd_oplog_flush(); /* a line not written yet comes first */
  line.op = tsd_op_name(op->req->op_case);
  const tsd_op *row = tsd_op_find((int)op->req->op_case);
  line.level = row && row->flags & TSD_OP_QUIET ? TSD_LOG_DEBUG : TSD_LOG_INFO;
  line.strategy = strategy;
  line.status = ts_status_name(status);
  snprintf(line.tensor, sizeof line.tensor, "%s", tsd_oplog_tensor(op->req));
  if (origin)
    snprintf(line.client, sizeof line.client, "conn %llu", (unsigned long long)origin->conn_id);
  else
    snprintf(line.client, sizeof line.client, "rank %d's client", op->origin);
  line.bytes = bytes;
  line.us = us;
  line.pending = true;
}

bool tsd_oplog_flush(void) {
  if (!line.pending)
    return false;
  line.pending = false;
  TSD_LOG_HELD(line.level, "op %s tensor %s bytes %llu strategy %s ms %.3f client %s: %s", line.op,
               line.tensor, (unsigned long long)line.bytes, line.strategy, (double)line.us / 1000.0,
               line.client, line.status);
  return true;
}

void tsd_oplog_local(const Tshard__Request *req, uint64_t conn_id, uint64_t bytes, int status) {
  tsd_oplog_flush(); /* in the order the operations ran */
  TSD_LOG_HELD(TSD_LOG_INFO, "op %s tensor %s bytes %llu strategy - ms - client conn %llu: %s",
               tsd_op_name(req->op_case), tsd_oplog_tensor(req), (unsigned long long)bytes,
               (unsigned long long)conn_id, ts_status_name(status));
}

void tsd_answer_reshard(tsd_engine *e, const tsd_pending *w) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  r.id = w->req_id;
  r.message = "";
  if (last_reshard.valid && last_reshard.hash == w->hash) {
    r.strategy = (char *)ts_strategy_name(last_reshard.strategy);
    r.elapsed_us = last_reshard.us;
    r.n_ranks = (size_t)ranks_last.n;
    r.ranks = ranks_last.v;
  }
  tsd_reply_response(e, w->conn_id, &r);
}
