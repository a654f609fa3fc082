/* oplog.c - one log line per operation at info level (operation, tensor, bytes, strategy, time,
 * client), and the reshard's answer naming the strategy that ran and its time.
 *
 * Collective operations are timed by ops.c around their run (begin, end); the reshard handler
 * notes the strategy its executor ran. Only the engine thread calls these, one operation at a
 * time, so the state of the running operation is one static record. The answer of a reshard
 * carries the strategy of the last reshard run here when it is the same operation (by its hash;
 * a retry answered later by its idempotency key gets the status alone). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "oplog.h"

typedef struct op_record {
  struct timespec start;
  bool noted;
  ts_strategy strategy;
  uint64_t bytes;
} op_record;

static op_record cur;
static struct {
  bool valid;
  uint64_t hash, us;
  ts_strategy strategy;
} last_reshard;

static uint64_t since_us(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int64_t us = (int64_t)(t1.tv_sec - t0->tv_sec) * 1000000 + (t1.tv_nsec - t0->tv_nsec) / 1000;
  return us > 0 ? (uint64_t)us : 0;
}

/* The tensor an operation names ("-" when none or unknown to this file). */
static const char *tensor_of(const Tshard__Request *r) {
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
  clock_gettime(CLOCK_MONOTONIC, &cur.start);
}

void tsd_oplog_note(ts_strategy strategy, uint64_t bytes) {
  cur.noted = true;
  cur.strategy = strategy;
  cur.bytes = bytes;
}

void tsd_oplog_end(tsd_engine *e, const tsd_ordered *op, const tsd_pending *origin, int status) {
  uint64_t us = since_us(&cur.start);
  const char *strategy = cur.noted ? ts_strategy_name(cur.strategy) : "-";
  if (op->req->op_case == TSHARD__REQUEST__OP_RESHARD) {
    last_reshard.valid = status == TS_OK && cur.noted;
    last_reshard.hash = op->hash;
    last_reshard.us = us;
    last_reshard.strategy = cur.strategy;
  }
  uint64_t bytes = cur.noted ? cur.bytes : 0; /* a reshard: bytes sent and received here */
  const ts_stored *t = cur.noted ? NULL : ts_store_find(e->store, tensor_of(op->req));
  if (t) { /* else the tensor's size */
    bytes = ts_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
      bytes *= (uint64_t)t->shape[d];
  }
  char client[48];
  if (origin)
    snprintf(client, sizeof client, "conn %llu", (unsigned long long)origin->conn_id);
  else
    snprintf(client, sizeof client, "rank %d's client", op->origin);
  TSD_LOG(TSD_LOG_INFO, "op %s tensor %s bytes %llu strategy %s ms %.3f client %s: %s",
          tsd_op_name(op->req->op_case), tensor_of(op->req), (unsigned long long)bytes, strategy,
          (double)us / 1000.0, client, ts_status_name(status));
}

void tsd_oplog_local(const Tshard__Request *req, uint64_t conn_id, uint64_t bytes, int status) {
  TSD_LOG(TSD_LOG_INFO, "op %s tensor %s bytes %llu strategy - ms - client conn %llu: %s",
          tsd_op_name(req->op_case), tensor_of(req), (unsigned long long)bytes,
          (unsigned long long)conn_id, ts_status_name(status));
}

void tsd_answer_reshard(tsd_engine *e, const tsd_pending *w) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  r.id = w->req_id;
  r.message = "";
  if (last_reshard.valid && last_reshard.hash == w->hash) {
    r.strategy = (char *)ts_strategy_name(last_reshard.strategy);
    r.elapsed_us = last_reshard.us;
  }
  tsd_reply_response(e, w->conn_id, &r);
}
