/* sequencer.c - the order of collective operations, and idempotency keys.
 *
 * Any daemon accepts a collective operation from its clients. It keeps the client in its pending
 * list under a ticket and forwards the operation (the packed Request, never bulk data) to rank 0
 * (SUBMIT). Rank 0 numbers each operation and sends it to every other rank (ORDER); MPI keeps
 * messages between two ranks in order, so every rank receives, and runs, the operations in rank
 * 0's order. After running one, a rank answers its own waiting clients: the submitting client,
 * or with a key every client of this rank that submitted that key.
 *
 * Keys (rank 0's table, keys.c): every keyed submission goes to rank 0, which alone decides. A
 * key first seen is recorded with the hash of its request and ordered; the same key and hash
 * again (a retry, or another SPMD client) is not ordered again: while the operation waits, its
 * submitter is answered by its own rank's run (every rank answers its clients waiting on the key
 * when the operation runs there) or, if that rank ran it already, by rank 0 after rank 0 ran it;
 * afterwards rank 0 answers it with the recorded status and message (the answer travels as
 * REFUSE, which answers a ticket with any status). The same key with another hash is refused
 * (KEY_CONFLICT) with what the key was used for. A record ends --key-ttl after its answer, when
 * a later operation makes one of its names appear or disappear (create, drop, reshard to a new
 * name: a retry then runs again, so a script run twice, or create after a drop, does what it
 * says), or when --key-max records are held (the oldest answered one gives way).
 *
 * Collectives: a request naming participants (ranks) is ordered only once a submission of its
 * key and hash came from every participant's daemon; rank 0 collects them. If the deadline
 * (collective_timeout_ms, else --collective-timeout) passes first, or a participant submits
 * another request under the key, every submission is answered with one error (INCOMPLETE naming
 * the ranks that never came, or KEY_CONFLICT), which stays recorded so that late participants
 * get the same. Puts are per rank and never wait: only the collective does. A connection has at
 * most --collective-pending-max collectives waiting (LIMIT past it), and rank 0 waits at most
 * --collective-timeout-max for one. When every client of a rank waiting for a collective has
 * disconnected before it was ordered, that rank withdraws its submission (WITHDRAW: ticket and
 * key); rank 0 takes the rank's arrival back and answers the ticket (nobody listens; the
 * answer frees what the rank held), and a record left without submissions is forgotten at once:
 * the collective never runs, and a later submission of its key starts it afresh. A withdrawal
 * that reaches rank 0 after the collective was ordered or failed changes nothing (the run or the
 * error answers the ticket). Shutdown: after
 * rank 0 orders a shutdown it orders nothing more; once a rank has run
 * it, it says BYE to rank 0, which waits for every BYE so that no message is left in flight when
 * the communicator is freed.
 *
 * Every accepted submission is answered: the submitting daemon decodes its own forwarded bytes
 * before sending them (protobuf-c keeps unknown fields and writes them back, so a request that
 * decoded once may not decode again), and when rank 0 still cannot order one (it does not decode
 * there, no memory) it sends REFUSE back to the submitting rank, which answers its clients with
 * the reason and frees what they held (a put's staging). An ORDER that a rank cannot decode (no
 * memory, corrupted bytes) is run there all the same, without its request: the run hook fails it
 * in the operation's first agreement, so every rank answers its clients with that rank's reason
 * (the header carries the op case; the clients are found by the request's hash).
 *
 * Nothing here knows MPI or the engine (sequencer.h): messages go out through the send hook and
 * come in through tsd_seq_message, ordered operations are run through the run hook and clients
 * answered through the answer hook, so tests drive several ranks in one process. A request is
 * identified by the xxHash (XXH3, 64 bits) of its forwarded bytes. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "sequencer.h"
#include "ts_wait.h"

#define TAG_SUBMIT TSD_SEQ_SUBMIT
#define TAG_ORDER TSD_SEQ_ORDER
#define TAG_BYE TSD_SEQ_BYE
#define TAG_REFUSE TSD_SEQ_REFUSE
#define TAG_WITHDRAW TSD_SEQ_WITHDRAW

struct tsd_seq {
  tsd_seq_hooks h;
  tsd_seq_config cfg;
  int rank, size;
  tsd_pending *pending;
  tsd_ordered *exec_head, *exec_tail;
  uint64_t next_ticket;
  bool stopped; /* a shutdown ran here */
  uint64_t ops_run;
  /* rank 0: the order and the keys */
  uint64_t next_seq;
  bool shutdown_ordered;
  tsd_keys *keys;
  int byes;
  /* rank 0's answers received, given after the ordered operations received before them ran
   * here (an answer of a key must not overtake the operation on this rank) */
  struct tsd_deferred *deferred, *deferred_tail;
};

typedef struct tsd_deferred {
  struct tsd_deferred *next;
  uint64_t ticket;
  int status;
  char msg[];
} tsd_deferred;

/* The time of a submission or an order here, for the trace: CLOCK_MONOTONIC ns when tracing is
 * on, else 0 (not read). */
static int64_t trace_now(const tsd_seq *e) { return e->cfg.stamp_times ? ts_wait_now_ns() : 0; }

#define SUBMIT_HEADER 16  /* ticket, hash */
#define ORDER_HEADER 40   /* seq, origin, ticket, hash, op case */
#define REFUSE_HEADER 16  /* ticket, status; then the message */
#define WITHDRAW_HEADER 8 /* ticket; then the key */

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
  tsd_request_free(&p->req);
  free(p);
}

/* A submitted request as the other ranks decode its forwarded bytes: without the client's id
 * and token. */
static Tshard__Request *as_forwarded(Tshard__Request *req) {
  req->id = 0;
  if (req->token != protobuf_c_empty_string)
    free(req->token);
  req->token = (char *)protobuf_c_empty_string;
  return req;
}

/* The decoded request this rank kept for its own submission `ticket`, taken (NULL: none). */
static Tshard__Request *take_kept(tsd_seq *e, uint64_t ticket) {
  for (tsd_pending *p = e->pending; p; p = p->next)
    if (p->ticket == ticket && p->req) {
      Tshard__Request *req = p->req;
      p->req = NULL;
      return as_forwarded(req);
    }
  return NULL;
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

/* What a request is, for messages: "create 'k1'". */
static void describe(const tsd_seq *e, const Tshard__Request *req, char *buf, size_t cap) {
  tsd_changes ch;
  memset(&ch, 0, sizeof ch);
  if (e->h.names)
    e->h.names(e->h.ctx, req, &ch);
  const char *name = ch.n > 0 && ch.name[0] ? ch.name[0] : NULL;
  if (name)
    snprintf(buf, cap, "%s '%.127s'", tsd_op_name((int)req->op_case), name);
  else
    snprintf(buf, cap, "%s", tsd_op_name((int)req->op_case));
}

/* The refusal of a key reused for another request (the record's `what` against this one). */
static void key_conflict_msg(char *msg, size_t cap, const tsd_key_rec *r, const char *what,
                             int64_t now) {
  bool same = strcmp(r->what, what) == 0;
  snprintf(msg, cap,
           "idempotency key '%s' was used for %s %lld ms ago; this request is %s%s; a key "
           "deduplicates retries of the identical request only: use a new key",
           r->key, r->what, (long long)(now - r->start_ms), same ? "another " : "", what);
  if (same)
    snprintf(msg + strlen(msg), cap - strlen(msg), " (this one has other arguments)");
}

/* Answers and forgets this rank's clients waiting for a submission: the one with the ticket, and
 * those that joined it (same key; a joined one with another request gets KEY_CONFLICT when the
 * answer is a success). status may be TS_OK: rank 0's recorded answer of a key. */
static void answer_refused(tsd_seq *e, uint64_t ticket, int status, const char *msg) {
  tsd_pending *sub = NULL;
  for (tsd_pending *q = e->pending; q; q = q->next)
    if (q->ticket == ticket)
      sub = q;
  if (!sub)
    return; /* answered already (by its run here, or shut down) */
  char key[TSD_KEY_MAX];
  uint64_t hash = sub->hash;
  snprintf(key, sizeof key, "%s", sub->key);
  tsd_pending **pp = &e->pending;
  while (*pp) {
    tsd_pending *q = *pp;
    if (q->group == ticket) {
      if (q->hash != hash && status == TS_OK) {
        char m[512];
        snprintf(m, sizeof m,
                 "idempotency key '%s' was used for a different request on this rank; a key "
                 "deduplicates retries of the identical request only: use a new key",
                 key);
        e->h.answer(e->h.ctx, q->op_case, q, TS_KEY_CONFLICT, m);
      } else
        e->h.answer(e->h.ctx, q->op_case, q, status, msg);
      *pp = q->next;
      pending_free(e, q);
    } else {
      pp = &q->next;
    }
  }
}

/* Rank 0: answers a submission of a rank (REFUSE carries any status). */
static void answer_ticket(tsd_seq *e, int origin, uint64_t ticket, int status, const char *msg) {
  if (origin == e->rank) {
    answer_refused(e, ticket, status, msg);
    return;
  }
  size_t n = strlen(msg);
  uint8_t *m = malloc(REFUSE_HEADER + n);
  ts_error err;
  if (!m) {
    TSD_LOG(TSD_LOG_ERROR, "no memory to answer an operation of rank %d", origin);
    return;
  }
  put_u64(m, ticket);
  put_u64(m + 8, (uint64_t)(int64_t)status);
  memcpy(m + REFUSE_HEADER, msg, n);
  if (e->h.send(e->h.ctx, origin, TAG_REFUSE, m, REFUSE_HEADER + n, &err))
    TSD_LOG(TSD_LOG_ERROR, "cannot answer an operation of rank %d: %s", origin, err.msg);
  free(m);
}

/* Rank 0: a submission it cannot order goes back to its rank with the reason. */
static void refuse(tsd_seq *e, int origin, uint64_t ticket, int status, const char *msg) {
  TSD_LOG(TSD_LOG_WARN, "refusing an operation of rank %d: %s", origin, msg);
  answer_ticket(e, origin, ticket, status, msg);
}

/* Rank 0: orders a decoded request (takes it). */
static void order_now(tsd_seq *e, int origin, uint64_t ticket, uint64_t hash, Tshard__Request *req,
                      const uint8_t *body, size_t len) {
  ts_error err;
  tsd_ordered *op = calloc(1, sizeof *op);
  uint8_t *msg = malloc(ORDER_HEADER + len);
  if (!op || !msg) {
    free(op), free(msg);
    tsd_request_free(&req);
    refuse(e, origin, ticket, TS_NO_MEMORY, "rank 0 has no memory to order the operation");
    return;
  }
  op->seq = ++e->next_seq;
  op->t_order_ns = trace_now(e);
  op->origin = origin;
  op->ticket = ticket;
  op->hash = hash;
  op->req = req;
  op->op_case = (int)req->op_case;
  put_u64(msg, op->seq);
  put_u64(msg + 8, (uint64_t)origin);
  put_u64(msg + 16, ticket);
  put_u64(msg + 24, hash);
  put_u64(msg + 32, (uint64_t)req->op_case);
  memcpy(msg + ORDER_HEADER, body, len);
  for (int r = 1; r < e->size; r++)
    if (e->h.send(e->h.ctx, r, TAG_ORDER, msg, ORDER_HEADER + len, &err))
      TSD_LOG(TSD_LOG_ERROR, "cannot send operation %llu to rank %d: %s",
              (unsigned long long)op->seq, r, err.msg);
  free(msg);
  if (tsd_op_flags((int)req->op_case) & TSD_OP_STOPS)
    e->shutdown_ordered = true;
  enqueue(e, op);
}

/* Rank 0: a collective fails before it ran: every submission so far gets the error, which the
 * record keeps for the late ones. */
static void fail_collective(tsd_seq *e, tsd_key_rec *r, int status, const char *msg, int64_t now) {
  TSD_LOG(TSD_LOG_WARN, "%s", msg);
  tsd_key_sub *subs = r->subs;
  int n = r->nsubs;
  r->subs = NULL;
  r->nsubs = r->capsubs = 0;
  tsd_keys_answer(e->keys, r, TSD_KEY_FAILED, status, msg, now);
  for (int i = 0; i < n; i++)
    answer_ticket(e, subs[i].rank, subs[i].ticket, status, msg);
  free(subs);
}

static void record_names(tsd_seq *e, tsd_key_rec *r, const Tshard__Request *req) {
  tsd_changes ch;
  memset(&ch, 0, sizeof ch);
  if (e->h.names)
    e->h.names(e->h.ctx, req, &ch);
  r->all_names = ch.all;
  for (int i = 0; i < ch.n && r->nnames < TSD_KEY_NAMES; i++)
    if (ch.name[i] && ch.name[i][0])
      r->names[r->nnames++] = XXH3_64bits(ch.name[i], strlen(ch.name[i]));
}

/* Rank 0: a keyed submission (see the top of the file). Takes req. */
static void order_keyed(tsd_seq *e, int origin, uint64_t ticket, uint64_t hash,
                        Tshard__Request *req, const uint8_t *body, size_t len) {
  int64_t now = e->h.now_ms(e->h.ctx);
  const char *key = req->idempotency_key;
  char what[TSD_KEY_WHAT], msg[1024];
  describe(e, req, what, sizeof what);
  tsd_keys_sweep(e->keys, now);
  tsd_key_rec *r = tsd_keys_find(e->keys, key, now);
  if (!r) {
    r = tsd_keys_add(e->keys, key, hash, now);
    if (!r) {
      snprintf(msg, sizeof msg,
               "rank 0 holds %lld idempotency keys whose operations have not finished "
               "(--key-max %lld); wait for them, or start the daemons with a larger --key-max",
               (long long)tsd_keys_count(e->keys), (long long)e->cfg.key_max);
      tsd_request_free(&req);
      refuse(e, origin, ticket, TS_LIMIT, msg);
      return;
    }
    snprintf(r->what, sizeof r->what, "%s", what);
    record_names(e, r, req);
    if (req->n_participants == 0) {
      tsd_keys_set_state(e->keys, r, TSD_KEY_ORDERED);
      order_now(e, origin, ticket, hash, req, body, len);
      return;
    }
    int64_t timeout = req->collective_timeout_ms ? (int64_t)req->collective_timeout_ms
                                                 : e->cfg.collective_timeout_ms;
    /* The submitting rank's validator refused longer ones; a rank started with other flags
     * still cannot make rank 0 wait longer. */
    if (e->cfg.collective_timeout_max_ms > 0 && timeout > e->cfg.collective_timeout_max_ms)
      timeout = e->cfg.collective_timeout_max_ms;
    if (tsd_keys_set_participants(r, req->participants, (int)req->n_participants, (int)timeout,
                                  now)) {
      tsd_keys_remove(e->keys, r);
      tsd_request_free(&req);
      refuse(e, origin, ticket, TS_NO_MEMORY, "rank 0 has no memory to collect the collective");
      return;
    }
  }
  switch (r->state) {
  case TSD_KEY_COLLECTING:
    if (r->hash != hash) {
      snprintf(msg, sizeof msg,
               "collective under idempotency key '%s': rank %d submitted %s and rank %d %s%s; "
               "every participant must submit the identical request (operation, arguments, "
               "participants, timeout)",
               key, r->nsubs ? r->subs[0].rank : -1, r->what, origin,
               strcmp(r->what, what) ? "" : "another ", what);
      if (tsd_keys_add_sub(r, origin, ticket))
        answer_ticket(e, origin, ticket, TS_KEY_CONFLICT, msg);
      fail_collective(e, r, TS_KEY_CONFLICT, msg, now);
      break;
    }
    if (tsd_keys_add_sub(r, origin, ticket)) {
      refuse(e, origin, ticket, TS_NO_MEMORY, "rank 0 has no memory to collect the collective");
      break;
    }
    if (tsd_keys_arrive(r, origin)) {
      TSD_LOG(TSD_LOG_DEBUG, "collective %s (key '%s'): every participant submitted it", r->what,
              key);
      tsd_keys_set_state(e->keys, r, TSD_KEY_ORDERED);
      order_now(e, origin, ticket, hash, req, body, len);
      return;
    }
    break;
  case TSD_KEY_ORDERED:
    if (r->hash != hash) {
      key_conflict_msg(msg, sizeof msg, r, what, now);
      answer_ticket(e, origin, ticket, TS_KEY_CONFLICT, msg);
    } else if (tsd_keys_add_sub(r, origin, ticket)) {
      refuse(e, origin, ticket, TS_NO_MEMORY, "rank 0 has no memory to remember a retry");
    }
    break;
  case TSD_KEY_DONE:
    if (r->hash != hash) {
      key_conflict_msg(msg, sizeof msg, r, what, now);
      answer_ticket(e, origin, ticket, TS_KEY_CONFLICT, msg);
    } else {
      answer_ticket(e, origin, ticket, r->status, r->msg ? r->msg : "");
    }
    break;
  case TSD_KEY_FAILED: answer_ticket(e, origin, ticket, r->status, r->msg ? r->msg : ""); break;
  }
  tsd_request_free(&req);
}

/* Rank 0: every client of `origin` that submitted the collective under `key` with `ticket` is
 * gone. While the collective still collects, the submission is taken back and answered (which
 * frees what its rank holds for it); a record left without submissions is forgotten. Otherwise
 * the run or the recorded error answers the ticket. */
static void withdraw(tsd_seq *e, int origin, uint64_t ticket, const char *key) {
  int64_t now = e->h.now_ms(e->h.ctx);
  tsd_key_rec *r = tsd_keys_find(e->keys, key, now);
  if (!r || r->state != TSD_KEY_COLLECTING || !tsd_keys_withdraw(r, origin, ticket))
    return;
  char msg[512];
  snprintf(msg, sizeof msg,
           "collective %s (idempotency key '%s') withdrawn: every client of rank %d that "
           "submitted it disconnected before every participant did",
           r->what, r->key, origin);
  if (r->nsubs == 0) {
    TSD_LOG(TSD_LOG_DEBUG,
            "collective %s (key '%s') forgotten: every client that submitted "
            "it disconnected",
            r->what, r->key);
    tsd_keys_remove(e->keys, r);
  }
  answer_ticket(e, origin, ticket, TS_INCOMPLETE, msg);
}

/* Rank 0: orders the forwarded bytes of a submission; req: their decoding when rank 0 has it
 * already (its own submission; taken), else NULL. */
static void order(tsd_seq *e, int origin, uint64_t ticket, uint64_t hash, const uint8_t *body,
                  size_t len, Tshard__Request *req) {
  if (e->shutdown_ordered) {
    tsd_request_free(&req);
    return; /* its clients are answered TS_SHUTDOWN by their own daemon */
  }
  ts_error err;
  if (!req && tsd_request_decode(body, len, &req, &err)) {
    char msg[400];
    snprintf(msg, sizeof msg, "rank 0 cannot decode the operation forwarded by rank %d: %.300s",
             origin, err.msg);
    refuse(e, origin, ticket, err.code, msg);
    return;
  }
  if (req->idempotency_key[0])
    order_keyed(e, origin, ticket, hash, req, body, len);
  else
    order_now(e, origin, ticket, hash, req, body, len);
}

/* The participants of a request, checked on the submitting rank: a key, this rank among them
 * (the validator checked the ranks themselves). 0 or an error status with msg. */
static int check_participants(const tsd_seq *e, const Tshard__Request *req, bool staged, char *msg,
                              size_t cap) {
  if (req->n_participants == 0)
    return TS_OK;
  if (!req->idempotency_key[0]) {
    snprintf(msg, cap,
             "a request naming participants needs an idempotency key (the key matches "
             "the participants' submissions)");
    return TS_INVALID_ARGUMENT;
  }
  if (staged || tsd_op_flags((int)req->op_case) & TSD_OP_GATHERS_TO_ORIGIN) {
    snprintf(msg, cap,
             "a %s comes from one client; participants apply to operations every "
             "rank runs (create, reshard, drop, ...)",
             tsd_op_name((int)req->op_case));
    return TS_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < req->n_participants; i++)
    if (req->participants[i] == e->rank)
      return TS_OK;
  snprintf(msg, cap,
           "this client's daemon is rank %d, which is not among the %zu participants of the "
           "request; a participant submits through its own rank's daemon",
           e->rank, req->n_participants);
  return TS_INVALID_ARGUMENT;
}

/* A connection's collectives waiting for their participants, within --collective-pending-max.
 * 0 or TS_LIMIT with msg. */
static int check_pending(const tsd_seq *e, uint64_t conn_id, const Tshard__Request *req, char *msg,
                         size_t cap) {
  if (req->n_participants == 0 || conn_id == 0 || e->cfg.collective_pending_max <= 0)
    return TS_OK;
  int64_t n = 0;
  for (const tsd_pending *q = e->pending; q; q = q->next)
    n += q->conn_id == conn_id && q->collective;
  if (n < e->cfg.collective_pending_max)
    return TS_OK;
  snprintf(msg, cap,
           "this connection has %lld collective%s waiting for their participants, the most a "
           "connection may have (--collective-pending-max %lld); wait for their answers before "
           "submitting more, or start the daemons with a larger --collective-pending-max",
           (long long)n, n == 1 ? "" : "s", (long long)e->cfg.collective_pending_max);
  return TS_LIMIT;
}

void tsd_seq_submit(tsd_seq *e, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                    uint64_t staging_bytes, int64_t t_recv_ns) {
  char pmsg[400];
  int prc = check_participants(e, req, staging != NULL, pmsg, sizeof pmsg);
  if (!prc)
    prc = check_pending(e, conn_id, req, pmsg, sizeof pmsg);
  if (prc) {
    if (staging)
      e->h.release(e->h.ctx, staging, staging_bytes);
    reply_status(e, conn_id, req->id, (int)req->op_case, prc, pmsg);
    tsd_request_free(&req);
    return;
  }
  if (tsd_op_flags((int)req->op_case) & TSD_OP_GATHERS_TO_ORIGIN && req->idempotency_key[0]) {
    /* a gather goes to the asking rank: a key would make no sense across ranks */
    if (req->idempotency_key != protobuf_c_empty_string)
      free(req->idempotency_key);
    req->idempotency_key = (char *)protobuf_c_empty_string;
  }
  tsd_pending *p = calloc(1, sizeof *p);
  size_t len = 0;
  uint64_t hash = 0;
  /* Every rank decodes these bytes. Known fields always re-encode to bytes that decode; unknown
   * ones are dropped (protobuf-c would write back an unknown field with an invalid number, such
   * as 0, that no rank could decode). */
  ts_error derr;
  int drc = TS_OK;
  if (!tsd_request_strip_unknown(req))
    drc = ts_error_set(&derr, TS_PROTOCOL,
                       "the request holds a field numbered 0, which no "
                       "protobuf message has: drop unknown fields");
  uint8_t *body = p && !drc ? pack_forwarded(req, &len, &hash) : NULL;
  if (!drc && (!p || !body))
    drc = ts_error_set(&derr, TS_NO_MEMORY, "no memory to submit the operation");
  if (drc) {
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
  p->t_recv_ns = t_recv_ns;
  p->t_submit_ns = trace_now(e);
  p->op_case = (int)req->op_case;
  p->hash = hash;
  p->staging = staging;
  p->staging_bytes = staging_bytes;
  p->collective = req->n_participants > 0;
  /* The chunk size a get asked for, kept for its answer: a field of the get message itself,
   * which only its own op case has. */
  if (req->op_case == TSHARD__REQUEST__OP_GET)
    p->max_bytes = req->get->max_bytes;
  snprintf(p->key, sizeof p->key, "%s", req->idempotency_key);
  if (p->key[0]) {
    for (tsd_pending *q = e->pending; q; q = q->next)
      if (strcmp(q->key, p->key) == 0 && !q->withdrawn) { /* submitted here: wait with it */
        p->group = q->group;
        p->next = e->pending;
        e->pending = p;
        free(body);
        tsd_request_free(&req);
        return;
      }
  }
  p->ticket = p->group = ++e->next_ticket;
  p->next = e->pending;
  e->pending = p;
  if (e->rank == 0) {
    order(e, 0, p->ticket, hash, body, len, as_forwarded(req)); /* takes it */
    req = NULL;
  } else {
    p->req = req; /* run when the ORDER comes back, instead of decoding it again */
    req = NULL;
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

/* An ORDER from rank 0. One this rank cannot decode (no memory, corrupted bytes) is queued all
 * the same, without its request: every rank must run every operation, and this one fails it in
 * the operation's first agreement (the run hook), so that every rank answers the same error. */
static void take_order(tsd_seq *e, const uint8_t *buf, size_t len) {
  tsd_ordered *op = calloc(1, sizeof *op);
  if (!op) { /* nothing to queue: the next agreement waits for this rank until its deadline */
    TSD_LOG(TSD_LOG_ERROR, "no memory to take operation %llu from rank 0",
            (unsigned long long)get_u64(buf));
    return;
  }
  op->seq = get_u64(buf);
  op->t_order_ns = trace_now(e);
  op->origin = (int)get_u64(buf + 8);
  op->ticket = get_u64(buf + 16);
  op->hash = get_u64(buf + 24);
  op->op_case = (int)get_u64(buf + 32);
  int rc;
  if (e->cfg.fault_orders_undecodable > 0) {
    e->cfg.fault_orders_undecodable--;
    rc = ts_error_set(&op->decode_error, TS_PROTOCOL, "injected fault (TSHARD_FAULT)");
  } else if (op->origin == e->rank && (op->req = take_kept(e, op->ticket)) != NULL) {
    rc = TS_OK; /* this rank's own submission: decoded once, when it came */
  } else {
    rc = tsd_request_decode(buf + ORDER_HEADER, len - ORDER_HEADER, &op->req, &op->decode_error);
  }
  if (rc) {
    char why[300];
    snprintf(why, sizeof why, "%.299s", op->decode_error.msg);
    ts_error_set(&op->decode_error, rc,
                 "rank %d could not decode operation %llu (%s) from rank 0: %s; the operation "
                 "failed on every rank and changed nothing",
                 e->rank, (unsigned long long)op->seq, tsd_op_name(op->op_case), why);
    TSD_LOG(TSD_LOG_ERROR, "%s", op->decode_error.msg);
    op->req = NULL;
  }
  enqueue(e, op);
}

void tsd_seq_message(tsd_seq *e, int src, int tag, const uint8_t *buf, size_t len) {
  if (tag == TAG_SUBMIT && e->rank == 0 && len >= SUBMIT_HEADER) {
    order(e, src, get_u64(buf), get_u64(buf + 8), buf + SUBMIT_HEADER, len - SUBMIT_HEADER, NULL);
  } else if (tag == TAG_ORDER && src == 0 && len >= ORDER_HEADER) {
    take_order(e, buf, len);
  } else if (tag == TAG_REFUSE && src == 0 && len >= REFUSE_HEADER) {
    char msg[1024];
    size_t n = len - REFUSE_HEADER < sizeof msg - 1 ? len - REFUSE_HEADER : sizeof msg - 1;
    memcpy(msg, buf + REFUSE_HEADER, n);
    msg[n] = '\0';
    int status = (int)(int64_t)get_u64(buf + 8);
    status = status >= TS_OK ? status : TS_INTERNAL;
    tsd_deferred *d = e->exec_head ? malloc(sizeof *d + n + 1) : NULL;
    if (!d) { /* nothing ordered waits here (or no memory): answer now */
      answer_refused(e, get_u64(buf), status, msg);
      return;
    }
    d->next = NULL;
    d->ticket = get_u64(buf);
    d->status = status;
    memcpy(d->msg, msg, n + 1);
    if (e->deferred_tail)
      e->deferred_tail->next = d;
    else
      e->deferred = d;
    e->deferred_tail = d;
  } else if (tag == TAG_WITHDRAW && e->rank == 0 && len > WITHDRAW_HEADER &&
             len - WITHDRAW_HEADER < TSD_KEY_MAX) {
    char key[TSD_KEY_MAX];
    memcpy(key, buf + WITHDRAW_HEADER, len - WITHDRAW_HEADER);
    key[len - WITHDRAW_HEADER] = '\0';
    withdraw(e, src, get_u64(buf), key);
  } else if (tag == TAG_BYE && e->rank == 0) {
    e->byes++;
  } else {
    TSD_LOG(TSD_LOG_WARN, "ignoring a control message with tag %d from rank %d", tag, src);
  }
}

/* Rank 0: collectives whose deadline passed fail for every participant. */
static void fail_overdue(tsd_seq *e) {
  int64_t now = e->h.now_ms(e->h.ctx);
  tsd_key_rec *r;
  while ((r = tsd_keys_overdue(e->keys, now)) != NULL) {
    char missing[256], arrived[256], msg[1024];
    tsd_keys_missing(r, missing, sizeof missing);
    tsd_keys_arrived(r, arrived, sizeof arrived);
    snprintf(msg, sizeof msg,
             "collective %s (idempotency key '%s') timed out after %d ms: rank(s) %s never "
             "submitted it (submitted: %s); every participant gets this error",
             r->what, r->key, r->timeout_ms, missing, arrived);
    fail_collective(e, r, TS_INCOMPLETE, msg, now);
  }
}

/* Rank 0, after running op: the key's answer is recorded and sent to the submissions that came
 * after their own rank ran it; records of names that appeared or disappeared end. */
static void after_run_rank0(tsd_seq *e, const tsd_ordered *op, int status, const char *msg) {
  int64_t now = e->h.now_ms(e->h.ctx);
  const char *key = op->req->idempotency_key;
  tsd_key_rec *r = key[0] ? tsd_keys_find(e->keys, key, now) : NULL;
  if (r && (r->state != TSD_KEY_ORDERED || r->hash != op->hash))
    r = NULL;
  if (r) {
    tsd_key_sub *subs = r->subs;
    int n = r->nsubs;
    r->subs = NULL;
    r->nsubs = r->capsubs = 0;
    tsd_keys_answer(e->keys, r, TSD_KEY_DONE, status, msg, now);
    for (int i = 0; i < n; i++)
      answer_ticket(e, subs[i].rank, subs[i].ticket, status, msg);
    free(subs);
  }
  tsd_changes ch;
  memset(&ch, 0, sizeof ch);
  if (e->h.names)
    e->h.names(e->h.ctx, op->req, &ch);
  if (ch.names || ch.all) {
    uint64_t names[TSD_CHANGES_MAX];
    int n = 0;
    for (int i = 0; i < ch.n && i < TSD_CHANGES_MAX; i++)
      if (ch.name[i] && ch.name[i][0])
        names[n++] = XXH3_64bits(ch.name[i], strlen(ch.name[i]));
    tsd_keys_end_names(e->keys, names, n, ch.all, r);
  }
}

int64_t tsd_seq_due_ms(tsd_seq *e) {
  if (!e->keys || e->shutdown_ordered)
    return -1;
  int64_t next = tsd_keys_next_deadline(e->keys);
  if (next < 0)
    return -1;
  int64_t left = next - e->h.now_ms(e->h.ctx);
  return left > 0 ? left : 0;
}

int tsd_seq_run(tsd_seq *e) {
  int ran = 0;
  if (e->keys && !e->shutdown_ordered)
    fail_overdue(e);
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
            tsd_op_name(op->op_case), op->origin);
    int status = e->h.run(e->h.ctx, op, origin, &err);
    if (tsd_op_flags(op->op_case) & TSD_OP_STOPS)
      e->stopped = true;
    /* Undecoded here: its key is unknown, its clients are those of its request (hash). */
    const char *key = op->req ? op->req->idempotency_key : "";
    TSD_LOG(TSD_LOG_DEBUG, "operation %llu (%s from rank %d) -> %s", (unsigned long long)op->seq,
            tsd_op_name(op->op_case), op->origin, ts_status_name(status));
    /* Answer the waiting clients of this rank and forget them. */
    tsd_pending **pp = &e->pending;
    while (*pp) {
      tsd_pending *q = *pp;
      bool mine = key[0]    ? strcmp(q->key, key) == 0
                  : op->req ? q == origin
                            : q == origin || (q->key[0] && q->hash == op->hash);
      if (!mine) {
        pp = &q->next;
        continue;
      }
      if (q->hash != op->hash) {
        char m[512], what[TSD_KEY_WHAT];
        describe(e, op->req, what, sizeof what);
        snprintf(m, sizeof m,
                 "idempotency key '%s' was used for %s; this request is a different one; a key "
                 "deduplicates retries of the identical request only: use a new key",
                 key, what);
        e->h.answer(e->h.ctx, op->op_case, q, TS_KEY_CONFLICT, m);
      } else
        e->h.answer(e->h.ctx, op->op_case, q, status, err.msg);
      *pp = q->next;
      pending_free(e, q);
    }
    if (e->keys && op->req)
      after_run_rank0(e, op, status, err.msg);
    tsd_request_free(&op->req);
    free(op);
    ran++;
  }
  if (!e->stopped)
    while (e->deferred) {
      tsd_deferred *d = e->deferred;
      e->deferred = d->next;
      if (!e->deferred)
        e->deferred_tail = NULL;
      answer_refused(e, d->ticket, d->status, d->msg);
      free(d);
    }
  return ran;
}

static void free_deferred(tsd_seq *e) {
  while (e->deferred) {
    tsd_deferred *d = e->deferred;
    e->deferred = d->next;
    free(d);
  }
  e->deferred_tail = NULL;
}

void tsd_seq_finish(tsd_seq *e) {
  free_deferred(e); /* their clients are answered below */
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

/* Whether every client waiting in a group is gone. */
static bool group_gone(const tsd_seq *e, uint64_t group) {
  for (const tsd_pending *q = e->pending; q; q = q->next)
    if (q->group == group && q->conn_id != 0)
      return false;
  return true;
}

/* Takes a collective whose every client here is gone back from rank 0's collection (see the top
 * of the file); its clients stay pending until rank 0's answer, the run or the error. */
static void withdraw_group(tsd_seq *e, uint64_t group) {
  const tsd_pending *lead = NULL;
  for (tsd_pending *q = e->pending; q; q = q->next)
    if (q->group == group) {
      q->withdrawn = true; /* a later submission of the key is forwarded afresh */
      if (q->ticket == group)
        lead = q;
    }
  if (!lead)
    return;
  char key[TSD_KEY_MAX];
  snprintf(key, sizeof key, "%s", lead->key); /* rank 0's answer below frees the clients */
  if (e->rank == 0) {
    withdraw(e, 0, group, key);
    return;
  }
  size_t n = strlen(key);
  uint8_t m[WITHDRAW_HEADER + TSD_KEY_MAX];
  ts_error err;
  put_u64(m, group);
  memcpy(m + WITHDRAW_HEADER, key, n);
  if (e->h.send(e->h.ctx, 0, TAG_WITHDRAW, m, WITHDRAW_HEADER + n, &err))
    TSD_LOG(TSD_LOG_ERROR, "cannot withdraw a collective from rank 0: %s", err.msg);
}

void tsd_seq_forget_conn(tsd_seq *e, uint64_t conn_id) {
  if (conn_id == 0)
    return;
  /* The groups of its waiting collectives (each at most once). */
  uint64_t *groups = NULL;
  size_t n = 0, cap = 0;
  for (tsd_pending *p = e->pending; p; p = p->next) {
    if (p->conn_id != conn_id)
      continue;
    p->conn_id = 0;
    if (!p->collective || p->withdrawn || !p->key[0])
      continue;
    bool seen = false;
    for (size_t i = 0; i < n && !seen; i++)
      seen = groups[i] == p->group;
    if (seen)
      continue;
    if (n == cap) {
      size_t c2 = cap ? 2 * cap : 8;
      uint64_t *g = realloc(groups, c2 * sizeof *g);
      if (!g) {
        TSD_LOG(TSD_LOG_ERROR, "no memory to withdraw the collectives of a closed connection; "
                               "they end at their timeout");
        continue;
      }
      groups = g;
      cap = c2;
    }
    groups[n++] = p->group;
  }
  for (size_t i = 0; i < n; i++)
    if (group_gone(e, groups[i]))
      withdraw_group(e, groups[i]);
  free(groups);
}

int tsd_seq_create(int rank, int size, const tsd_seq_hooks *hooks, const tsd_seq_config *cfg,
                   tsd_seq **out, ts_error *err) {
  *out = NULL;
  tsd_seq *e = calloc(1, sizeof *e);
  if (!e)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the sequencer");
  e->h = *hooks;
  e->cfg = *cfg;
  e->rank = rank;
  e->size = size;
  if (rank == 0 && tsd_keys_create(cfg->key_ttl_ms, cfg->key_max, &e->keys)) {
    tsd_seq_destroy(&e);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the sequencer's key table");
  }
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
  tsd_keys_destroy(&e->keys);
  free_deferred(e);
  free(e);
  *ps = NULL;
}
