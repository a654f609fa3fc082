/* sequencer.c - the order of collective operations, and idempotency keys.
 *
 * Any daemon accepts a collective operation from its clients. It keeps the client in its pending
 * list under a ticket and forwards the operation (the packed Request, never bulk data) to rank 0
 * (SUBMIT). Rank 0 numbers each operation and sends it to every other rank (ORDER); MPI keeps
 * messages between two ranks in order, so every rank receives, and runs, the operations in rank
 * 0's order. After running one, a rank answers its own waiting clients: the submitting client,
 * or with a key every client of this rank that submitted that key.
 *
 * Keys: rank 0 orders a key once (a ring of the last TSD_KEY_RING keys); every rank remembers the
 * answers of the last TSD_KEY_RING keyed operations it ran, so a client that submits a key after
 * the operation ran gets the same answer at once, and one that submits it before joins the
 * waiting clients. A key reused for a different operation (another hash of the request) is
 * refused. Shutdown: after rank 0 orders a shutdown it orders nothing more; once a rank has run
 * it, it says BYE to rank 0, which waits for every BYE so that no message is left in flight when
 * the communicator is freed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"

enum { TAG_SUBMIT = 1, TAG_ORDER = 2, TAG_BYE = 3 };
#define SUBMIT_HEADER 16 /* ticket, hash */
#define ORDER_HEADER 32  /* seq, origin, ticket, hash */

static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

/* Packs the request as forwarded: no id, no token (they are this client's). */
static uint8_t *pack_forwarded(Tshard__Request *req, size_t *len, uint64_t *hash) {
  uint64_t id = req->id;
  char *token = req->token;
  req->id = 0;
  req->token = (char *)protobuf_c_empty_string;
  *len = tshard__request__get_packed_size(req);
  uint8_t *buf = malloc(*len ? *len : 1);
  if (buf) {
    tshard__request__pack(req, buf);
    *hash = fnv1a(buf, *len);
  }
  req->id = id;
  req->token = token;
  return buf;
}

static void pending_free(tsd_engine *e, tsd_pending *p) {
  if (p->staging) {
    tsd_buf_give(e, p->staging, p->staging_bytes);
  }
  free(p);
}

static const tsd_key_result *done_key(const tsd_engine *e, const char *key) {
  for (int i = 0; i < TSD_KEY_RING; i++)
    if (e->done_keys[i].key[0] && strcmp(e->done_keys[i].key, key) == 0)
      return &e->done_keys[i];
  return NULL;
}

static void key_mismatch(char *msg, size_t cap, const char *key) {
  snprintf(msg, cap,
           "idempotency key '%s' was already used for a different operation; use a new key",
           key);
}

static void order(tsd_engine *e, int origin, uint64_t ticket, uint64_t hash, const uint8_t *body,
                  size_t len) {
  if (e->shutdown_ordered)
    return; /* its clients are answered TS_SHUTDOWN by their own daemon */
  Tshard__Request *req = NULL;
  ts_error err;
  if (tsd_request_decode(body, len, &req, &err)) {
    TSD_LOG(TSD_LOG_ERROR, "rank %d forwarded an undecodable operation: %s", origin, err.msg);
    return;
  }
  const char *key = req->idempotency_key;
  if (key[0]) {
    for (int i = 0; i < TSD_KEY_RING; i++)
      if (strcmp(e->ordered_keys[i], key) == 0) {
        tsd_request_free(&req); /* already ordered: its run answers every waiter of the key */
        return;
      }
    snprintf(e->ordered_keys[e->ordered_keys_next], TSD_KEY_MAX, "%s", key);
    e->ordered_keys_next = (e->ordered_keys_next + 1) % TSD_KEY_RING;
  }
  tsd_ordered *op = calloc(1, sizeof *op);
  uint8_t *msg = malloc(ORDER_HEADER + len);
  if (!op || !msg) {
    free(op), free(msg);
    tsd_request_free(&req);
    TSD_LOG(TSD_LOG_ERROR, "no memory to order an operation of rank %d", origin);
    return;
  }
  op->seq = ++e->next_seq;
  op->origin = origin;
  op->ticket = ticket;
  op->hash = hash;
  op->req = req;
  put_u64(msg, op->seq);
  put_u64(msg + 8, (uint64_t)origin);
  put_u64(msg + 16, ticket);
  put_u64(msg + 24, hash);
  memcpy(msg + ORDER_HEADER, body, len);
  for (int r = 1; r < e->size; r++)
    if (ts_control_send(e->ctl, r, TAG_ORDER, msg, ORDER_HEADER + len, &err))
      TSD_LOG(TSD_LOG_ERROR, "cannot send operation %llu to rank %d: %s",
              (unsigned long long)op->seq, r, err.msg);
  free(msg);
  if (req->op_case == TSHARD__REQUEST__OP_SHUTDOWN)
    e->shutdown_ordered = true;
  if (e->exec_tail)
    e->exec_tail->next = op;
  else
    e->exec_head = op;
  e->exec_tail = op;
}

void tsd_submit(tsd_engine *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                uint64_t staging_bytes) {
  if (req->op_case == TSHARD__REQUEST__OP_GET && req->idempotency_key[0]) {
    /* a gather goes to the asking rank: a key would make no sense across ranks */
    if (req->idempotency_key != protobuf_c_empty_string)
      free(req->idempotency_key);
    req->idempotency_key = (char *)protobuf_c_empty_string;
  }
  tsd_pending *p = calloc(1, sizeof *p);
  size_t len = 0;
  uint64_t hash = 0;
  uint8_t *body = p ? pack_forwarded(req, &len, &hash) : NULL;
  if (!p || !body) {
    free(p);
    free(body);
    tsd_buf_give(e, staging, staging_bytes);
    tsd_reply_status(e, conn_id, req->id, TS_NO_MEMORY, "no memory to submit the operation");
    tsd_request_free(&req);
    return;
  }
  p->conn_id = conn_id;
  p->req_id = req->id;
  p->op_case = (int)req->op_case;
  p->hash = hash;
  p->staging = staging;
  p->staging_bytes = staging_bytes;
  if (req->op_case == TSHARD__REQUEST__OP_GET)
    p->max_bytes = req->get->max_bytes;
  snprintf(p->key, sizeof p->key, "%s", req->idempotency_key);
  if (p->key[0]) {
    const tsd_key_result *done = done_key(e, p->key);
    if (done) {
      char msg[512];
      if (done->hash != hash)
        key_mismatch(msg, sizeof msg, p->key);
      tsd_answer_collective(e, p->op_case, p, done->hash == hash ? done->status
                                                                 : TS_INVALID_ARGUMENT,
                            done->hash == hash ? done->msg : msg);
      pending_free(e, p);
      free(body);
      tsd_request_free(&req);
      return;
    }
    for (tsd_pending *q = e->pending; q; q = q->next)
      if (strcmp(q->key, p->key) == 0) { /* already submitted from this rank: wait with it */
        p->next = e->pending;
        e->pending = p;
        free(body);
        tsd_request_free(&req);
        return;
      }
  }
  p->ticket = ++e->next_ticket;
  p->next = e->pending;
  e->pending = p;
  if (e->rank == 0) {
    order(e, 0, p->ticket, hash, body, len);
  } else {
    uint8_t *msg = malloc(SUBMIT_HEADER + len);
    ts_error err;
    int rc = msg ? TS_OK : ts_error_set(&err, TS_NO_MEMORY, "no memory to forward");
    if (msg) {
      put_u64(msg, p->ticket);
      put_u64(msg + 8, hash);
      memcpy(msg + SUBMIT_HEADER, body, len);
      rc = ts_control_send(e->ctl, 0, TAG_SUBMIT, msg, SUBMIT_HEADER + len, &err);
      free(msg);
    }
    if (rc) {
      e->pending = p->next;
      tsd_reply_status(e, conn_id, req->id, rc, err.msg);
      pending_free(e, p);
    }
  }
  free(body);
  tsd_request_free(&req);
}

void tsd_control_message(tsd_engine *e, int src, int tag, const uint8_t *buf, size_t len) {
  if (tag == TAG_SUBMIT && e->rank == 0 && len >= SUBMIT_HEADER) {
    order(e, src, get_u64(buf), get_u64(buf + 8), buf + SUBMIT_HEADER, len - SUBMIT_HEADER);
  } else if (tag == TAG_ORDER && src == 0 && len >= ORDER_HEADER) {
    Tshard__Request *req = NULL;
    ts_error err;
    tsd_ordered *op = calloc(1, sizeof *op);
    if (!op || tsd_request_decode(buf + ORDER_HEADER, len - ORDER_HEADER, &req, &err)) {
      /* Every rank must run every operation; this one cannot be. */
      TSD_LOG(TSD_LOG_ERROR, "cannot take operation %llu from rank 0; the job is inconsistent",
              (unsigned long long)get_u64(buf));
      free(op);
      return;
    }
    op->seq = get_u64(buf);
    op->origin = (int)get_u64(buf + 8);
    op->ticket = get_u64(buf + 16);
    op->hash = get_u64(buf + 24);
    op->req = req;
    if (e->exec_tail)
      e->exec_tail->next = op;
    else
      e->exec_head = op;
    e->exec_tail = op;
  } else if (tag != TAG_BYE) {
    TSD_LOG(TSD_LOG_WARN, "ignoring a control message with tag %d from rank %d", tag, src);
  }
}

int tsd_run_ordered(tsd_engine *e) {
  int ran = 0;
  while (e->exec_head && !e->stopping) {
    tsd_ordered *op = e->exec_head;
    e->exec_head = op->next;
    if (!e->exec_head)
      e->exec_tail = NULL;
    tsd_pending *origin = NULL;
    if (op->origin == e->rank)
      for (tsd_pending *q = e->pending; q; q = q->next)
        if (q->ticket == op->ticket)
          origin = q;
    ts_error err;
    ts_error_clear(&err);
    e->collective_ops++;
    TSD_LOG(TSD_LOG_DEBUG, "operation %llu (%s from rank %d) starts", (unsigned long long)op->seq,
            tsd_op_name(op->req->op_case), op->origin);
    int status = tsd_run_collective(e, op, origin, &err);
    const char *key = op->req->idempotency_key;
    TSD_LOG(TSD_LOG_DEBUG, "operation %llu (%s from rank %d) -> %s", (unsigned long long)op->seq,
            tsd_op_name(op->req->op_case), op->origin, ts_status_name(status));
    /* Answer the waiting clients of this rank and forget them. */
    tsd_pending **pp = &e->pending;
    while (*pp) {
      tsd_pending *q = *pp;
      bool mine = key[0] ? strcmp(q->key, key) == 0 : q == origin;
      if (!mine) {
        pp = &q->next;
        continue;
      }
      char msg[512];
      if (q->hash != op->hash)
        key_mismatch(msg, sizeof msg, key);
      tsd_answer_collective(e, (int)op->req->op_case, q,
                            q->hash == op->hash ? status : TS_INVALID_ARGUMENT,
                            q->hash == op->hash ? err.msg : msg);
      *pp = q->next;
      pending_free(e, q);
    }
    if (key[0]) {
      tsd_key_result *k = &e->done_keys[e->done_keys_next];
      e->done_keys_next = (e->done_keys_next + 1) % TSD_KEY_RING;
      snprintf(k->key, sizeof k->key, "%s", key);
      k->hash = op->hash;
      k->status = status;
      snprintf(k->msg, sizeof k->msg, "%s", err.msg);
    }
    tsd_request_free(&op->req);
    free(op);
    ran++;
  }
  return ran;
}

static void nap_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void tsd_sequencer_finish(tsd_engine *e) {
  while (e->pending) {
    tsd_pending *q = e->pending;
    e->pending = q->next;
    tsd_reply_status(e, q->conn_id, q->req_id, TS_SHUTDOWN,
                     "the daemon shut down before this operation ran");
    pending_free(e, q);
  }
  ts_error err;
  if (e->rank != 0) {
    if (ts_control_send(e->ctl, 0, TAG_BYE, NULL, 0, &err))
      TSD_LOG(TSD_LOG_ERROR, "cannot say goodbye to rank 0: %s", err.msg);
  } else {
    int byes = 0;
    for (int waited = 0; byes < e->size - 1 && waited < 60000;) {
      int src, tag;
      void *buf;
      size_t len;
      int got = ts_control_poll(e->ctl, &src, &tag, &buf, &len, &err);
      if (got < 0)
        break;
      if (got == 1) {
        byes += tag == TAG_BYE;
        free(buf); /* late submissions: their daemons answered them already */
      } else {
        nap_ms(1);
        waited++;
      }
    }
    if (byes < e->size - 1)
      TSD_LOG(TSD_LOG_WARN, "only %d of %d ranks said goodbye", byes, e->size - 1);
  }
  if (ts_control_flush(e->ctl, 30000, &err))
    TSD_LOG(TSD_LOG_WARN, "%s", err.msg);
}

void tsd_sequencer_free(tsd_engine *e) {
  while (e->pending) {
    tsd_pending *q = e->pending;
    e->pending = q->next;
    pending_free(e, q);
  }
  while (e->exec_head) {
    tsd_ordered *op = e->exec_head;
    e->exec_head = op->next;
    tsd_request_free(&op->req);
    free(op);
  }
  e->exec_tail = NULL;
}
