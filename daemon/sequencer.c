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
 * the communicator is freed.
 *
 * Every accepted submission is answered: the submitting daemon decodes its own forwarded bytes
 * before sending them (protobuf-c keeps unknown fields and writes them back, so a request that
 * decoded once may not decode again), and when rank 0 still cannot order one (it does not decode
 * there, no memory) it sends REFUSE back to the submitting rank, which answers its clients with
 * the reason and frees what they held (a put's staging).
 *
 * Nothing here knows MPI or the engine (sequencer.h): messages go out through the send hook and
 * come in through tsd_seq_message, ordered operations are run through the run hook and clients
 * answered through the answer hook, so tests drive several ranks in one process. A request is
 * identified by the xxHash (XXH3, 64 bits) of its forwarded bytes. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "sequencer.h"

#define TAG_SUBMIT TSD_SEQ_SUBMIT
#define TAG_ORDER TSD_SEQ_ORDER
#define TAG_BYE TSD_SEQ_BYE
#define TAG_REFUSE TSD_SEQ_REFUSE

typedef struct tsd_key_result {
  char key[TSD_KEY_MAX];
  uint64_t hash;
  int status;
  char msg[512];
} tsd_key_result;

struct tsd_seq {
  tsd_seq_hooks h;
  int rank, size;
  tsd_pending *pending;
  tsd_ordered *exec_head, *exec_tail;
  uint64_t next_ticket;
  bool stopped; /* a shutdown ran here */
  uint64_t ops_run;
  /* rank 0: the order */
  uint64_t next_seq;
  bool shutdown_ordered;
  char (*ordered_keys)[TSD_KEY_MAX]; /* ring of the keys already ordered */
  int ordered_keys_next;
  int byes;
  /* every rank: answers of keyed operations already run */
  tsd_key_result *done_keys;
  int done_keys_next;
};
#define SUBMIT_HEADER 16 /* ticket, hash */
#define ORDER_HEADER 32  /* seq, origin, ticket, hash */
#define REFUSE_HEADER 16 /* ticket, status; then the message */

static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
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
    *hash = XXH3_64bits(buf, *len);
  }
  req->id = id;
  req->token = token;
  return buf;
}

static void pending_free(tsd_seq *e, tsd_pending *p) {
  if (p->staging)
    e->h.release(e->h.ctx, p->staging, p->staging_bytes);
  free(p);
}

static void reply_status(tsd_seq *e, uint64_t conn_id, uint64_t req_id, int op_case, int status,
                         const char *msg) {
  tsd_pending w;
  memset(&w, 0, sizeof w);
  w.conn_id = conn_id;
  w.req_id = req_id;
  w.op_case = op_case;
  e->h.answer(e->h.ctx, op_case, &w, status, msg);
}

static void enqueue(tsd_seq *e, tsd_ordered *op) {
  if (e->exec_tail)
    e->exec_tail->next = op;
  else
    e->exec_head = op;
  e->exec_tail = op;
}

static const tsd_key_result *done_key(const tsd_seq *e, const char *key) {
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

/* Answers and forgets this rank's clients waiting for a submission that will never run: the one
 * with the ticket, and those that joined it with the same key. */
static void answer_refused(tsd_seq *e, uint64_t ticket, int status, const char *msg) {
  tsd_pending *sub = NULL;
  for (tsd_pending *q = e->pending; q; q = q->next)
    if (q->ticket == ticket)
      sub = q;
  if (!sub)
    return; /* answered already (shut down) */
  char key[TSD_KEY_MAX];
  snprintf(key, sizeof key, "%s", sub->key);
  tsd_pending **pp = &e->pending;
  while (*pp) {
    tsd_pending *q = *pp;
    if (q == sub || (key[0] && strcmp(q->key, key) == 0)) {
      e->h.answer(e->h.ctx, q->op_case, q, status, msg);
      *pp = q->next;
      pending_free(e, q);
    } else {
      pp = &q->next;
    }
  }
}

/* Rank 0: a submission it cannot order goes back to its rank with the reason. */
static void refuse(tsd_seq *e, int origin, uint64_t ticket, int status, const char *msg) {
  TSD_LOG(TSD_LOG_WARN, "refusing an operation of rank %d: %s", origin, msg);
  if (origin == e->rank) {
    answer_refused(e, ticket, status, msg);
    return;
  }
  size_t n = strlen(msg);
  uint8_t *m = malloc(REFUSE_HEADER + n);
  ts_error err;
  if (!m) {
    TSD_LOG(TSD_LOG_ERROR, "no memory to refuse an operation of rank %d", origin);
    return;
  }
  put_u64(m, ticket);
  put_u64(m + 8, (uint64_t)(int64_t)status);
  memcpy(m + REFUSE_HEADER, msg, n);
  if (e->h.send(e->h.ctx, origin, TAG_REFUSE, m, REFUSE_HEADER + n, &err))
    TSD_LOG(TSD_LOG_ERROR, "cannot refuse an operation of rank %d: %s", origin, err.msg);
  free(m);
}

static void order(tsd_seq *e, int origin, uint64_t ticket, uint64_t hash, const uint8_t *body,
                  size_t len) {
  if (e->shutdown_ordered)
    return; /* its clients are answered TS_SHUTDOWN by their own daemon */
  Tshard__Request *req = NULL;
  ts_error err;
  if (tsd_request_decode(body, len, &req, &err)) {
    char msg[400];
    snprintf(msg, sizeof msg, "rank 0 cannot decode the operation forwarded by rank %d: %.300s",
             origin, err.msg);
    refuse(e, origin, ticket, err.code, msg);
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
    refuse(e, origin, ticket, TS_NO_MEMORY, "rank 0 has no memory to order the operation");
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
    if (e->h.send(e->h.ctx, r, TAG_ORDER, msg, ORDER_HEADER + len, &err))
      TSD_LOG(TSD_LOG_ERROR, "cannot send operation %llu to rank %d: %s",
              (unsigned long long)op->seq, r, err.msg);
  free(msg);
  if (req->op_case == TSHARD__REQUEST__OP_SHUTDOWN)
    e->shutdown_ordered = true;
  enqueue(e, op);
}

void tsd_seq_submit(tsd_seq *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
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
  /* Every rank decodes these bytes: check here that they decode. */
  Tshard__Request *again = NULL;
  ts_error derr;
  int drc = !p || !body ? ts_error_set(&derr, TS_NO_MEMORY, "no memory to submit the operation")
                        : tsd_request_decode(body, len, &again, &derr);
  tsd_request_free(&again);
  if (drc) {
    if (drc != TS_NO_MEMORY)
      snprintf(derr.msg, sizeof derr.msg,
               "the request does not decode once re-encoded for the other ranks (an unknown field "
               "with an invalid number, such as 0, is the usual cause): drop unknown fields");
    free(p);
    free(body);
    if (staging)
      e->h.release(e->h.ctx, staging, staging_bytes);
    reply_status(e, conn_id, req->id, (int)req->op_case, drc, derr.msg);
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
      e->h.answer(e->h.ctx, p->op_case, p, done->hash == hash ? done->status
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
      rc = e->h.send(e->h.ctx, 0, TAG_SUBMIT, msg, SUBMIT_HEADER + len, &err);
      free(msg);
    }
    if (rc) {
      e->pending = p->next;
      e->h.answer(e->h.ctx, p->op_case, p, rc, err.msg);
      pending_free(e, p);
    }
  }
  free(body);
  tsd_request_free(&req);
}

void tsd_seq_message(tsd_seq *e, int src, int tag, const uint8_t *buf, size_t len) {
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
    enqueue(e, op);
  } else if (tag == TAG_REFUSE && src == 0 && len >= REFUSE_HEADER) {
    char msg[512];
    size_t n = len - REFUSE_HEADER < sizeof msg - 1 ? len - REFUSE_HEADER : sizeof msg - 1;
    memcpy(msg, buf + REFUSE_HEADER, n);
    msg[n] = '\0';
    int status = (int)(int64_t)get_u64(buf + 8);
    answer_refused(e, get_u64(buf), status > TS_OK ? status : TS_INTERNAL, msg);
  } else if (tag == TAG_BYE && e->rank == 0) {
    e->byes++;
  } else {
    TSD_LOG(TSD_LOG_WARN, "ignoring a control message with tag %d from rank %d", tag, src);
  }
}

int tsd_seq_run(tsd_seq *e) {
  int ran = 0;
  while (e->exec_head && !e->stopped) {
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
    e->ops_run++;
    TSD_LOG(TSD_LOG_DEBUG, "operation %llu (%s from rank %d) starts", (unsigned long long)op->seq,
            tsd_op_name(op->req->op_case), op->origin);
    int status = e->h.run(e->h.ctx, op, origin, &err);
    if (op->req->op_case == TSHARD__REQUEST__OP_SHUTDOWN)
      e->stopped = true;
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
      e->h.answer(e->h.ctx, (int)op->req->op_case, q,
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

void tsd_seq_finish(tsd_seq *e) {
  while (e->pending) {
    tsd_pending *q = e->pending;
    e->pending = q->next;
    e->h.answer(e->h.ctx, q->op_case, q, TS_SHUTDOWN,
                "the daemon shut down before this operation ran");
    pending_free(e, q);
  }
  ts_error err;
  if (e->rank != 0 && e->h.send(e->h.ctx, 0, TAG_BYE, NULL, 0, &err))
    TSD_LOG(TSD_LOG_ERROR, "cannot say goodbye to rank 0: %s", err.msg);
}

bool tsd_seq_all_gone(const tsd_seq *e) { return e->rank != 0 || e->byes >= e->size - 1; }
bool tsd_seq_stopped(const tsd_seq *e) { return e->stopped; }
uint64_t tsd_seq_ops_run(const tsd_seq *e) { return e->ops_run; }

void tsd_seq_forget_conn(tsd_seq *e, uint64_t conn_id) {
  for (tsd_pending *p = e->pending; p; p = p->next)
    if (p->conn_id == conn_id)
      p->conn_id = 0;
}

int tsd_seq_create(int rank, int size, const tsd_seq_hooks *hooks, tsd_seq **out, ts_error *err) {
  *out = NULL;
  tsd_seq *e = calloc(1, sizeof *e);
  if (e) {
    e->ordered_keys = calloc(TSD_KEY_RING, sizeof *e->ordered_keys);
    e->done_keys = calloc(TSD_KEY_RING, sizeof *e->done_keys);
  }
  if (!e || !e->ordered_keys || !e->done_keys) {
    tsd_seq_destroy(&e);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the sequencer's key tables");
  }
  e->h = *hooks;
  e->rank = rank;
  e->size = size;
  *out = e;
  return TS_OK;
}

void tsd_seq_destroy(tsd_seq **ps) {
  if (!ps || !*ps)
    return;
  tsd_seq *e = *ps;
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
  free(e->ordered_keys);
  free(e->done_keys);
  free(e);
  *ps = NULL;
}
