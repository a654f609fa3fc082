/* test_sequencer.c - the daemon's sequencer (daemon/engine/sequencer.c) without MPI: one to three
 * simulated ranks in one process, joined by an in-memory transport that delivers messages in
 * the order they were sent (as MPI does between two ranks). Checked: every rank runs the same
 * operations in the same order, each once; keyed submissions from several clients on several
 * ranks run once and all get the same answer (also after the run); a key reused for another
 * request is refused with a message that says so; a submission rank 0 cannot decode comes back
 * (REFUSE) and is answered, its staging released; shutdown stops the order, answers late
 * submissions and collects every goodbye. The reference is the test's own record of what each
 * client submitted.
 *
 * Keys and collectives (rank 0's key table, keys.c), with the test's own clock: a retry after
 * the run gets the recorded answer without running again; the same key with another request is
 * KEY_CONFLICT naming what the key was used for; a key ends after --key-ttl, when a later
 * operation drops or creates one of its names, or when --key-max records are held; a retry that
 * reaches rank 0 after its own rank ran the operation but before rank 0 did is answered once
 * rank 0 ran it, and rank 0's answer never overtakes the operation on a rank that has not run it
 * yet. A request naming participants runs once all of them submitted it, never
 * before; if one never does, every participant (a late one too) gets one INCOMPLETE error
 * naming it; a participant with another request under the key fails it for all with
 * KEY_CONFLICT; misuse (no key, a rank not among the participants) is refused.
 *
 * Abandoned collectives: a rank whose every client of a waiting collective disconnected takes its
 * submission back (rank 0 then waits for that rank again), a record without submissions is
 * forgotten (the key starts afresh), a flood of abandoned collectives with a one-day timeout does
 * not fill the key table, and a client leaving after the order changes nothing. A connection has
 * at most --collective-pending-max collectives waiting; rank 0 waits at most
 * --collective-timeout-max. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "sequencer.h"

#define MAX_RANKS 3
#define MAX_LOG 64

typedef struct msg {
  struct msg *next;
  int src, dst, tag;
  uint8_t *buf;
  size_t len;
} msg;

typedef struct ran {
  uint64_t seq;
  int op_case, origin;
  char name[64];
} ran;

typedef struct answer {
  uint64_t conn_id, req_id;
  int status;
  char msg[512];
} answer;

typedef struct rank_ctx {
  struct world *w;
  int rank;
  tsd_seq *seq;
  ran runs[MAX_LOG];
  int nruns;
  answer answers[MAX_LOG];
  int nanswers;
  int releases;
} rank_ctx;

typedef struct world {
  int size;
  rank_ctx r[MAX_RANKS];
  msg *head, *tail;
  bool corrupt_next_submit;
  int64_t now; /* the test's clock, ms */
} world;

#define TTL_MS 60000
#define KEY_MAX 16
#define COLL_MS 5000

static int t_send(void *ctx, int dst, int tag, const uint8_t *buf, size_t len, ts_error *err) {
  (void)err;
  rank_ctx *rc = ctx;
  world *w = rc->w;
  ck_assert_int_ge(dst, 0);
  ck_assert_int_lt(dst, w->size);
  ck_assert_int_ne(dst, rc->rank);
  msg *m = calloc(1, sizeof *m);
  ck_assert_ptr_nonnull(m);
  m->src = rc->rank, m->dst = dst, m->tag = tag, m->len = len;
  m->buf = malloc(len ? len : 1);
  ck_assert_ptr_nonnull(m->buf);
  if (len)
    memcpy(m->buf, buf, len);
  if (tag == TSD_SEQ_SUBMIT && w->corrupt_next_submit && len > 16) {
    memset(m->buf + 16, 0xff, len - 16); /* the forwarded request: no longer a protobuf */
    w->corrupt_next_submit = false;
  }
  if (w->tail)
    w->tail->next = m;
  else
    w->head = m;
  w->tail = m;
  return TS_OK;
}

static const char *req_name(const Tshard__Request *r) {
  switch (r->op_case) {
  case TSHARD__REQUEST__OP_CREATE: return r->create->name;
  case TSHARD__REQUEST__OP_PUT: return r->put->name;
  case TSHARD__REQUEST__OP_DROP: return r->drop->name;
  default: return "";
  }
}

static int64_t t_now(void *ctx) { return ((rank_ctx *)ctx)->w->now; }

/* As the daemon's change sets: create and drop make their name appear or disappear, a put
 * touches its tensor. */
static void t_names(void *ctx, const Tshard__Request *r, tsd_changes *ch) {
  (void)ctx;
  const char *name = req_name(r);
  if (name[0])
    ch->name[ch->n++] = name;
  ch->names = r->op_case != TSHARD__REQUEST__OP_PUT && name[0];
}

/* Creates of names beginning "fail" fail with a message naming them, as a handler would. */
static int t_run(void *ctx, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  rank_ctx *rc = ctx;
  ck_assert_int_lt(rc->nruns, MAX_LOG);
  ran *x = &rc->runs[rc->nruns++];
  x->seq = op->seq;
  x->op_case = op->op_case;
  x->origin = op->origin;
  if (op->origin == rc->rank)
    ck_assert_ptr_nonnull(origin); /* the submission is this rank's */
  else
    ck_assert_ptr_null(origin);
  if (!op->req) { /* not decoded here: the engine fails it in the agreement; so does this */
    snprintf(x->name, sizeof x->name, "(undecoded)");
    return ts_error_set(err, op->decode_error.code, "%s", op->decode_error.msg);
  }
  ck_assert_int_eq(op->op_case, (int)op->req->op_case);
  snprintf(x->name, sizeof x->name, "%s", req_name(op->req));
  if (strncmp(x->name, "fail", 4) == 0)
    return ts_error_set(err, TS_EXISTS, "a tensor named '%s' exists", x->name);
  return TS_OK;
}

static void t_answer(void *ctx, int op_case, const tsd_pending *p, int status, const char *m) {
  (void)op_case;
  rank_ctx *rc = ctx;
  ck_assert_int_lt(rc->nanswers, MAX_LOG);
  answer *a = &rc->answers[rc->nanswers++];
  a->conn_id = p->conn_id;
  a->req_id = p->req_id;
  a->status = status;
  snprintf(a->msg, sizeof a->msg, "%s", m ? m : "");
}

static void t_release(void *ctx, uint8_t *staging, uint64_t bytes) {
  rank_ctx *rc = ctx;
  ck_assert_uint_eq(staging[0], 0xab); /* the test's own buffer */
  ck_assert_uint_gt(bytes, 0);
  free(staging);
  rc->releases++;
}

static void world_init_cfg(world *w, int size, const tsd_seq_config *cfg) {
  memset(w, 0, sizeof *w);
  w->size = size;
  for (int i = 0; i < size; i++) {
    rank_ctx *rc = &w->r[i];
    rc->w = w;
    rc->rank = i;
    tsd_seq_hooks h = {rc, t_send, t_run, t_answer, t_release, t_now, t_names};
    ts_error err;
    ck_assert_int_eq(tsd_seq_create(i, size, &h, cfg, &rc->seq, &err), TS_OK);
  }
}

static void world_init(world *w, int size) {
  tsd_seq_config cfg = {.key_ttl_ms = TTL_MS, .key_max = KEY_MAX, .collective_timeout_ms = COLL_MS};
  world_init_cfg(w, size, &cfg);
}

static void world_free(world *w) {
  for (int i = 0; i < w->size; i++)
    tsd_seq_destroy(&w->r[i].seq);
  while (w->head) {
    msg *m = w->head;
    w->head = m->next;
    free(m->buf);
    free(m);
  }
}

/* Delivers every message (and those they cause) and runs what was ordered, until quiet. */
static void settle(world *w) {
  for (int rounds = 0; rounds < 1000; rounds++) {
    bool busy = false;
    while (w->head) {
      msg *m = w->head;
      w->head = m->next;
      if (!w->head)
        w->tail = NULL;
      tsd_seq_message(w->r[m->dst].seq, m->src, m->tag, m->buf, m->len);
      free(m->buf);
      free(m);
      busy = true;
    }
    for (int i = 0; i < w->size; i++)
      if (tsd_seq_run(w->r[i].seq) > 0)
        busy = true;
    if (!busy && !w->head) /* a run may send (rank 0's answers of keys) without running */
      return;
  }
  ck_abort_msg("the simulated ranks did not settle");
}

/* A request as the daemon has it: unpacked by protobuf-c (the sequencer frees it); with
 * participants (n > 0) and a collective timeout. */
static Tshard__Request *make_req_p(int op_case, uint64_t id, const char *name, const char *key,
                                   const int32_t *parts, size_t nparts, uint32_t timeout_ms) {
  Tshard__Request r = TSHARD__REQUEST__INIT;
  Tshard__CreateRequest c = TSHARD__CREATE_REQUEST__INIT;
  Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
  Tshard__DropRequest d = TSHARD__DROP_REQUEST__INIT;
  Tshard__ShutdownRequest s = TSHARD__SHUTDOWN_REQUEST__INIT;
  int64_t shape[2] = {4, 6};
  r.id = id;
  r.idempotency_key = (char *)(key ? key : "");
  r.op_case = op_case;
  r.n_participants = nparts;
  r.participants = (int32_t *)parts;
  r.collective_timeout_ms = timeout_ms;
  if (op_case == TSHARD__REQUEST__OP_DROP) {
    r.drop = &d;
    d.name = (char *)name;
  } else if (op_case == TSHARD__REQUEST__OP_CREATE) {
    r.create = &c;
    c.name = (char *)name;
    c.dtype = (char *)"float32";
    c.n_shape = 2;
    c.shape = shape;
  } else if (op_case == TSHARD__REQUEST__OP_PUT) {
    r.put = &p;
    p.name = (char *)name;
    p.total_bytes = 96;
  } else {
    r.shutdown = &s;
  }
  size_t len = tshard__request__get_packed_size(&r);
  uint8_t *buf = malloc(len);
  ck_assert_ptr_nonnull(buf);
  tshard__request__pack(&r, buf);
  Tshard__Request *out = tshard__request__unpack(NULL, len, buf);
  free(buf);
  ck_assert_ptr_nonnull(out);
  return out;
}

static Tshard__Request *make_req(int op_case, uint64_t id, const char *name, const char *key) {
  return make_req_p(op_case, id, name, key, NULL, 0, 0);
}

static void submit(world *w, int rank, uint64_t conn, uint64_t id, const char *name,
                   const char *key) {
  tsd_seq_submit(w->r[rank].seq, conn, make_req(TSHARD__REQUEST__OP_CREATE, id, name, key), NULL, 0,
                 0);
}

static const answer *answer_of(const rank_ctx *rc, uint64_t conn, uint64_t id) {
  const answer *found = NULL;
  for (int i = 0; i < rc->nanswers; i++)
    if (rc->answers[i].conn_id == conn && rc->answers[i].req_id == id) {
      ck_assert_msg(!found, "request %llu of connection %llu answered twice",
                    (unsigned long long)id, (unsigned long long)conn);
      found = &rc->answers[i];
    }
  ck_assert_msg(found != NULL, "request %llu of connection %llu not answered",
                (unsigned long long)id, (unsigned long long)conn);
  return found;
}

/* Every rank ran the same operations in the same order, numbered 1, 2, ... */
static void check_same_order(const world *w, int expect) {
  for (int i = 0; i < w->size; i++) {
    const rank_ctx *rc = &w->r[i];
    ck_assert_int_eq(rc->nruns, expect);
    for (int k = 0; k < rc->nruns; k++) {
      ck_assert_uint_eq(rc->runs[k].seq, (uint64_t)k + 1);
      ck_assert_str_eq(rc->runs[k].name, w->r[0].runs[k].name);
      ck_assert_int_eq(rc->runs[k].op_case, w->r[0].runs[k].op_case);
      ck_assert_int_eq(rc->runs[k].origin, w->r[0].runs[k].origin);
    }
  }
}

static void order_test(int size) {
  world w;
  world_init(&w, size);
  char name[32];
  /* Submissions from every rank, some delivered between others. */
  for (int round = 0; round < 4; round++) {
    for (int r = 0; r < size; r++) {
      snprintf(name, sizeof name, "t%d_%d", r, round);
      submit(&w, r, 10 + (uint64_t)r, (uint64_t)round + 1, name, NULL);
    }
    if (round % 2)
      settle(&w);
  }
  settle(&w);
  check_same_order(&w, 4 * size);
  /* Each operation ran once, and each client has its one answer. */
  for (int r = 0; r < size; r++)
    for (int round = 0; round < 4; round++) {
      snprintf(name, sizeof name, "t%d_%d", r, round);
      int seen = 0;
      for (int k = 0; k < w.r[0].nruns; k++)
        seen += strcmp(w.r[0].runs[k].name, name) == 0;
      ck_assert_int_eq(seen, 1);
      ck_assert_int_eq(answer_of(&w.r[r], 10 + (uint64_t)r, (uint64_t)round + 1)->status, TS_OK);
    }
  for (int r = 0; r < size; r++)
    ck_assert_int_eq(w.r[r].nanswers, 4);
  world_free(&w);
}

START_TEST(order_one_rank) { order_test(1); }
END_TEST

START_TEST(order_three_ranks) { order_test(3); }
END_TEST

START_TEST(keyed_runs_once) {
  world w;
  world_init(&w, 3);
  /* Four clients on three ranks submit the same keyed request before it runs. */
  submit(&w, 1, 1, 100, "fail_k", "K1");
  submit(&w, 1, 2, 200, "fail_k", "K1");
  submit(&w, 2, 3, 300, "fail_k", "K1");
  submit(&w, 0, 4, 400, "fail_k", "K1");
  settle(&w);
  check_same_order(&w, 1);
  const char *want = "a tensor named 'fail_k' exists";
  const struct {
    int rank;
    uint64_t conn, id;
  } clients[] = {{1, 1, 100}, {1, 2, 200}, {2, 3, 300}, {0, 4, 400}};
  for (size_t i = 0; i < 4; i++) {
    const answer *a = answer_of(&w.r[clients[i].rank], clients[i].conn, clients[i].id);
    ck_assert_int_eq(a->status, TS_EXISTS);
    ck_assert_str_eq(a->msg, want);
  }
  /* After the run: answered at once from the remembered answer, not run again. */
  submit(&w, 2, 5, 500, "fail_k", "K1");
  settle(&w);
  const answer *late = answer_of(&w.r[2], 5, 500);
  ck_assert_int_eq(late->status, TS_EXISTS);
  ck_assert_str_eq(late->msg, want);
  settle(&w);
  check_same_order(&w, 1);
  /* A keyed success too. */
  submit(&w, 1, 6, 600, "ok_k", "K2");
  submit(&w, 2, 7, 700, "ok_k", "K2");
  settle(&w);
  check_same_order(&w, 2);
  ck_assert_int_eq(answer_of(&w.r[1], 6, 600)->status, TS_OK);
  ck_assert_int_eq(answer_of(&w.r[2], 7, 700)->status, TS_OK);
  world_free(&w);
}
END_TEST

static void assert_key_refused(const answer *a, const char *key) {
  ck_assert_int_eq(a->status, TS_KEY_CONFLICT);
  ck_assert_msg(strstr(a->msg, "use a new key") && strstr(a->msg, key), "message: %s", a->msg);
}

START_TEST(key_reused_for_another_request) {
  world w;
  world_init(&w, 3);
  /* After the run. */
  submit(&w, 1, 1, 1, "a", "K3");
  settle(&w);
  submit(&w, 1, 1, 2, "b", "K3");
  settle(&w);
  assert_key_refused(answer_of(&w.r[1], 1, 2), "K3");
  ck_assert_msg(
      strstr(answer_of(&w.r[1], 1, 2)->msg, "idempotency key 'K3' was used for create 'a'") &&
          strstr(answer_of(&w.r[1], 1, 2)->msg, "this request is create 'b'"),
      "message: %s", answer_of(&w.r[1], 1, 2)->msg);
  /* While the first waits on the same rank. */
  submit(&w, 1, 2, 3, "c", "K4");
  submit(&w, 1, 3, 4, "d", "K4");
  /* And on another rank: rank 1's submission reaches rank 0 first. */
  submit(&w, 2, 4, 5, "e", "K4");
  settle(&w);
  check_same_order(&w, 2);
  ck_assert_str_eq(w.r[0].runs[1].name, "c");
  ck_assert_int_eq(answer_of(&w.r[1], 2, 3)->status, TS_OK);
  assert_key_refused(answer_of(&w.r[1], 3, 4), "K4");
  assert_key_refused(answer_of(&w.r[2], 4, 5), "K4");
  world_free(&w);
}
END_TEST

START_TEST(undecodable_is_refused_and_answered) {
  world w;
  world_init(&w, 3);
  uint8_t *staging = malloc(96);
  ck_assert_ptr_nonnull(staging);
  memset(staging, 0xab, 96);
  w.corrupt_next_submit = true;
  tsd_seq_submit(w.r[1].seq, 1, make_req(TSHARD__REQUEST__OP_PUT, 9, "p", NULL), staging, 96, 0);
  settle(&w);
  check_same_order(&w, 0);
  const answer *a = answer_of(&w.r[1], 1, 9);
  ck_assert_int_ne(a->status, TS_OK);
  ck_assert_msg(strstr(a->msg, "rank 0 cannot decode the operation forwarded by rank 1"),
                "message: %s", a->msg);
  ck_assert_int_eq(w.r[1].releases, 1); /* the put's staging freed once */
  /* The next put goes through and releases its staging after running. */
  staging = malloc(96);
  ck_assert_ptr_nonnull(staging);
  memset(staging, 0xab, 96);
  tsd_seq_submit(w.r[1].seq, 1, make_req(TSHARD__REQUEST__OP_PUT, 10, "p", NULL), staging, 96, 0);
  settle(&w);
  check_same_order(&w, 1);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 10)->status, TS_OK);
  ck_assert_int_eq(w.r[1].releases, 2);
  world_free(&w);
}
END_TEST

/* How many times rank 0 ran an operation on `name`. */
static int runs_of(const world *w, const char *name) {
  int n = 0;
  for (int k = 0; k < w->r[0].nruns; k++)
    n += strcmp(w->r[0].runs[k].name, name) == 0;
  return n;
}

/* An ORDER rank 1 cannot decode: it still runs there, in its place in the order, without its
 * request (op case from the header), and the clients of rank 1 waiting for it, found by the
 * request's hash, get rank 1's reason; the next operation decodes and runs as usual. */
START_TEST(undecodable_order_runs_as_failure) {
  world w;
  world_init(&w, 3);
  tsd_seq_destroy(&w.r[1].seq);
  tsd_seq_config cfg = {.key_ttl_ms = TTL_MS,
                        .key_max = KEY_MAX,
                        .collective_timeout_ms = COLL_MS,
                        .fault_orders_undecodable = 1};
  tsd_seq_hooks h = {&w.r[1], t_send, t_run, t_answer, t_release, t_now, t_names};
  ts_error err;
  ck_assert_int_eq(tsd_seq_create(1, 3, &h, &cfg, &w.r[1].seq, &err), TS_OK);
  submit(&w, 0, 1, 100, "u1", "KU");
  submit(&w, 1, 2, 200, "u1", "KU"); /* SPMD: waits on rank 1 for the same operation */
  submit(&w, 1, 3, 300, "u2", NULL); /* another request of rank 1: not its client */
  settle(&w);
  for (int r = 0; r < 3; r++)
    ck_assert_int_eq(w.r[r].nruns, 2);
  ck_assert_uint_eq(w.r[1].runs[0].seq, 1);
  ck_assert_int_eq(w.r[1].runs[0].op_case, TSHARD__REQUEST__OP_CREATE);
  ck_assert_str_eq(w.r[1].runs[0].name, "(undecoded)");
  ck_assert_str_eq(w.r[2].runs[0].name, "u1");
  const answer *a = answer_of(&w.r[1], 2, 200);
  ck_assert_int_eq(a->status, TS_PROTOCOL);
  ck_assert_str_eq(a->msg, "rank 1 could not decode operation 1 (create) from rank 0: injected "
                           "fault (TSHARD_FAULT); the operation failed on every rank and "
                           "changed nothing");
  /* The next operation ran on every rank, decoded, and answered its client. */
  ck_assert_str_eq(w.r[1].runs[1].name, "u2");
  ck_assert_str_eq(w.r[0].runs[1].name, "u2");
  ck_assert_int_eq(answer_of(&w.r[1], 3, 300)->status, TS_OK);
  ck_assert_int_eq(w.r[1].nanswers, 2);
  world_free(&w);
}
END_TEST

START_TEST(key_expires_after_ttl) {
  world w;
  world_init(&w, 2);
  submit(&w, 1, 1, 1, "t", "KT");
  settle(&w);
  w.now += TTL_MS - 1; /* still remembered: answered, not run */
  submit(&w, 1, 1, 2, "t", "KT");
  settle(&w);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 2)->status, TS_OK);
  check_same_order(&w, 1);
  w.now += 2; /* expired: the same request runs again, another one is no conflict */
  submit(&w, 1, 1, 3, "t", "KT");
  settle(&w);
  check_same_order(&w, 2);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 3)->status, TS_OK);
  w.now += TTL_MS;
  submit(&w, 0, 2, 4, "u", "KT");
  settle(&w);
  check_same_order(&w, 3);
  ck_assert_int_eq(answer_of(&w.r[0], 2, 4)->status, TS_OK);
  world_free(&w);
}
END_TEST

START_TEST(key_ends_when_its_names_change) {
  world w;
  world_init(&w, 3);
  /* create k1 --key once; drop k1; create k1 --key once: the second create runs. */
  submit(&w, 2, 1, 1, "k1", "once");
  settle(&w);
  tsd_seq_submit(w.r[1].seq, 2, make_req(TSHARD__REQUEST__OP_DROP, 2, "k1", NULL), NULL, 0, 0);
  settle(&w);
  submit(&w, 2, 1, 3, "k1", "once");
  settle(&w);
  check_same_order(&w, 3);
  ck_assert_int_eq(runs_of(&w, "k1"), 3);
  ck_assert_int_eq(answer_of(&w.r[2], 1, 3)->status, TS_OK);
  /* A put of k1 changes no name: the create's key still answers without running. */
  uint8_t *staging = malloc(96);
  ck_assert_ptr_nonnull(staging);
  memset(staging, 0xab, 96);
  tsd_seq_submit(w.r[1].seq, 2, make_req(TSHARD__REQUEST__OP_PUT, 4, "k1", NULL), staging, 96, 0);
  settle(&w);
  submit(&w, 0, 3, 5, "k1", "once");
  settle(&w);
  check_same_order(&w, 4);
  ck_assert_int_eq(answer_of(&w.r[0], 3, 5)->status, TS_OK);
  /* Another name's drop does not end it either. */
  tsd_seq_submit(w.r[1].seq, 2, make_req(TSHARD__REQUEST__OP_DROP, 6, "other", NULL), NULL, 0, 0);
  settle(&w);
  submit(&w, 1, 4, 7, "k1", "once");
  settle(&w);
  check_same_order(&w, 5);
  ck_assert_int_eq(runs_of(&w, "k1"), 4);
  /* The SPMD script run twice: create, drop (keyed), create, drop with the same keys. */
  for (int run = 0; run < 2; run++) {
    for (int r = 0; r < 3; r++)
      submit(&w, r, 10 + (uint64_t)r, 100 + (uint64_t)run, "weight", "create-weight");
    settle(&w);
    for (int r = 0; r < 3; r++)
      tsd_seq_submit(
          w.r[r].seq, 10 + (uint64_t)r,
          make_req(TSHARD__REQUEST__OP_DROP, 200 + (uint64_t)run, "weight", "drop-weight"), NULL, 0,
          0);
    settle(&w);
    for (int r = 0; r < 3; r++) {
      ck_assert_int_eq(answer_of(&w.r[r], 10 + (uint64_t)r, 100 + (uint64_t)run)->status, TS_OK);
      ck_assert_int_eq(answer_of(&w.r[r], 10 + (uint64_t)r, 200 + (uint64_t)run)->status, TS_OK);
    }
  }
  ck_assert_int_eq(runs_of(&w, "weight"), 4); /* two creates and two drops, each once */
  world_free(&w);
}
END_TEST

START_TEST(key_table_is_bounded) {
  world w;
  world_init(&w, 2);
  char key[32], name[32];
  for (int i = 0; i < 3 * KEY_MAX; i++) {
    snprintf(key, sizeof key, "B%d", i);
    snprintf(name, sizeof name, "b%d", i);
    submit(&w, 1, 1, (uint64_t)i + 1, name, key);
    settle(&w);
    ck_assert_int_eq(answer_of(&w.r[1], 1, (uint64_t)i + 1)->status, TS_OK);
  }
  check_same_order(&w, 3 * KEY_MAX);
  /* The newest key is remembered; the oldest gave way, so its retry runs again. */
  submit(&w, 1, 2, 1, "b47", "B47");
  settle(&w);
  check_same_order(&w, 3 * KEY_MAX);
  submit(&w, 1, 2, 2, "b0", "B0");
  settle(&w);
  check_same_order(&w, 3 * KEY_MAX + 1);
  world_free(&w);
}
END_TEST

/* Delivers the messages in flight (and those they cause) without running anything. */
static void deliver(world *w) {
  while (w->head) {
    msg *m = w->head;
    w->head = m->next;
    if (!w->head)
      w->tail = NULL;
    tsd_seq_message(w->r[m->dst].seq, m->src, m->tag, m->buf, m->len);
    free(m->buf);
    free(m);
  }
}

START_TEST(retry_after_own_rank_ran_before_rank_0) {
  world w;
  world_init(&w, 3);
  submit(&w, 1, 1, 1, "r", "KR");
  deliver(&w); /* rank 0 ordered it; nobody ran it */
  ck_assert_int_eq(tsd_seq_run(w.r[1].seq), 1);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 1)->status, TS_OK);
  submit(&w, 1, 2, 2, "r", "KR"); /* the retry reaches rank 0 before rank 0 ran it */
  deliver(&w);
  ck_assert_int_eq(w.r[1].nanswers, 1);
  settle(&w);
  check_same_order(&w, 1);
  ck_assert_int_eq(answer_of(&w.r[1], 2, 2)->status, TS_OK);
  world_free(&w);
}
END_TEST

/* Rank 0's answer of a key never overtakes the operation on the rank it answers: the rank has
 * the operation queued, not run, when rank 0's answer comes; the client is answered after the
 * run. */
START_TEST(answer_of_key_waits_for_the_local_run) {
  world w;
  world_init(&w, 3);
  submit(&w, 2, 1, 1, "o", "KO");
  deliver(&w); /* ordered everywhere, run nowhere */
  submit(&w, 1, 1, 2, "o", "KO");
  deliver(&w); /* rank 0 keeps rank 1's submission for after its own run */
  ck_assert_int_eq(tsd_seq_run(w.r[0].seq), 1);
  deliver(&w); /* rank 0's answer reaches rank 1, which has not run it */
  ck_assert_int_eq(w.r[1].nanswers, 0);
  ck_assert_int_eq(w.r[1].nruns, 0);
  ck_assert_int_eq(tsd_seq_run(w.r[1].seq), 1);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 2)->status, TS_OK);
  settle(&w);
  check_same_order(&w, 1);
  ck_assert_int_eq(w.r[1].nanswers, 1);
  ck_assert_int_eq(answer_of(&w.r[2], 1, 1)->status, TS_OK);
  world_free(&w);
}
END_TEST

static void submit_coll(world *w, int rank, uint64_t conn, uint64_t id, const char *name,
                        const char *key, const int32_t *parts, size_t n, uint32_t timeout) {
  tsd_seq_submit(w->r[rank].seq, conn,
                 make_req_p(TSHARD__REQUEST__OP_CREATE, id, name, key, parts, n, timeout), NULL, 0,
                 0);
}

START_TEST(collective_waits_for_every_participant) {
  world w;
  world_init(&w, 3);
  const int32_t all[3] = {0, 1, 2};
  /* Skewed: ranks 2 and 1 submit, time passes (short of the timeout), nothing runs. */
  submit_coll(&w, 2, 1, 1, "c", "KC", all, 3, 0);
  settle(&w);
  w.now += COLL_MS - 1;
  submit_coll(&w, 1, 1, 1, "c", "KC", all, 3, 0);
  submit_coll(&w, 1, 2, 1, "c", "KC", all, 3, 0); /* two clients of rank 1 */
  settle(&w);
  check_same_order(&w, 0);
  for (int r = 0; r < 3; r++)
    ck_assert_int_eq(w.r[r].nanswers, 0);
  submit_coll(&w, 0, 1, 1, "c", "KC", all, 3, 0);
  settle(&w);
  check_same_order(&w, 1);
  ck_assert_int_eq(answer_of(&w.r[0], 1, 1)->status, TS_OK);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 1)->status, TS_OK);
  ck_assert_int_eq(answer_of(&w.r[1], 2, 1)->status, TS_OK);
  ck_assert_int_eq(answer_of(&w.r[2], 1, 1)->status, TS_OK);
  /* A subset of the ranks: ranks 0 and 2 only, with their own timeout. */
  const int32_t two[2] = {2, 0};
  submit_coll(&w, 2, 1, 2, "d", "KD", two, 2, 100);
  settle(&w);
  check_same_order(&w, 1);
  submit_coll(&w, 0, 1, 2, "d", "KD", two, 2, 100);
  settle(&w);
  check_same_order(&w, 2);
  ck_assert_int_eq(answer_of(&w.r[2], 1, 2)->status, TS_OK);
  world_free(&w);
}
END_TEST

START_TEST(collective_timeout_names_missing_ranks) {
  world w;
  world_init(&w, 3);
  const int32_t all[3] = {0, 1, 2};
  submit_coll(&w, 0, 1, 1, "m", "KM", all, 3, 200);
  submit_coll(&w, 2, 1, 1, "m", "KM", all, 3, 200);
  settle(&w);
  w.now += 199;
  settle(&w);
  ck_assert_int_eq(w.r[0].nanswers + w.r[2].nanswers, 0);
  w.now += 1;
  settle(&w);
  check_same_order(&w, 0);
  const answer *a0 = answer_of(&w.r[0], 1, 1), *a2 = answer_of(&w.r[2], 1, 1);
  ck_assert_int_eq(a0->status, TS_INCOMPLETE);
  ck_assert_str_eq(a0->msg, a2->msg);
  ck_assert_int_eq(a2->status, TS_INCOMPLETE);
  ck_assert_msg(strstr(a0->msg, "rank(s) 1 never submitted it") &&
                    strstr(a0->msg, "submitted: 0, 2") && strstr(a0->msg, "create 'm'") &&
                    strstr(a0->msg, "200 ms"),
                "message: %s", a0->msg);
  /* The late participant gets the same error; the operation never runs. */
  submit_coll(&w, 1, 1, 1, "m", "KM", all, 3, 200);
  settle(&w);
  check_same_order(&w, 0);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 1)->status, TS_INCOMPLETE);
  ck_assert_str_eq(answer_of(&w.r[1], 1, 1)->msg, a0->msg);
  world_free(&w);
}
END_TEST

START_TEST(collective_mismatch_fails_for_all) {
  world w;
  world_init(&w, 3);
  const int32_t all[3] = {0, 1, 2};
  submit_coll(&w, 0, 1, 1, "x", "KX", all, 3, 0);
  settle(&w);
  submit_coll(&w, 1, 1, 1, "y", "KX", all, 3, 0);
  settle(&w);
  submit_coll(&w, 2, 1, 1, "x", "KX", all, 3, 0);
  settle(&w);
  check_same_order(&w, 0);
  const answer *a0 = answer_of(&w.r[0], 1, 1);
  ck_assert_int_eq(a0->status, TS_KEY_CONFLICT);
  ck_assert_msg(strstr(a0->msg, "rank 0 submitted create 'x' and rank 1 create 'y'"), "message: %s",
                a0->msg);
  for (int r = 1; r < 3; r++) {
    ck_assert_int_eq(answer_of(&w.r[r], 1, 1)->status, TS_KEY_CONFLICT);
    ck_assert_str_eq(answer_of(&w.r[r], 1, 1)->msg, a0->msg);
  }
  /* The same participants with another timeout are another request too. */
  submit_coll(&w, 0, 1, 2, "z", "KZ", all, 3, 100);
  submit_coll(&w, 1, 1, 2, "z", "KZ", all, 3, 200);
  settle(&w);
  ck_assert_int_eq(answer_of(&w.r[0], 1, 2)->status, TS_KEY_CONFLICT);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 2)->status, TS_KEY_CONFLICT);
  world_free(&w);
}
END_TEST

START_TEST(collective_misuse_is_refused) {
  world w;
  world_init(&w, 3);
  const int32_t two[2] = {0, 1};
  submit_coll(&w, 2, 1, 1, "n", "KN", two, 2, 0); /* rank 2 is no participant */
  submit_coll(&w, 1, 1, 2, "n", NULL, two, 2, 0); /* no key */
  settle(&w);
  check_same_order(&w, 0);
  const answer *a = answer_of(&w.r[2], 1, 1);
  ck_assert_int_eq(a->status, TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(a->msg, "rank 2, which is not among the 2 participants"), "message: %s",
                a->msg);
  a = answer_of(&w.r[1], 1, 2);
  ck_assert_int_eq(a->status, TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(a->msg, "needs an idempotency key"), "message: %s", a->msg);
  world_free(&w);
}
END_TEST

/* The answers a rank gave to clients already gone (conn_id 0), with a status. */
static int gone_answers(const rank_ctx *rc, int status, const char *text) {
  int n = 0;
  for (int i = 0; i < rc->nanswers; i++)
    n += rc->answers[i].conn_id == 0 && rc->answers[i].status == status &&
         strstr(rc->answers[i].msg, text) != NULL;
  return n;
}

/* Rank 1's two clients of a collective disconnect: only when the second is gone does rank 1
 * withdraw its submission; rank 0 then waits for rank 1 again, and a new client of rank 1
 * completes it. */
START_TEST(collective_withdrawn_when_every_client_is_gone) {
  world w;
  world_init(&w, 3);
  const int32_t all[3] = {0, 1, 2};
  submit_coll(&w, 1, 1, 1, "w", "KW", all, 3, 0);
  submit_coll(&w, 1, 2, 1, "w", "KW", all, 3, 0); /* waits with the first */
  submit_coll(&w, 2, 1, 1, "w", "KW", all, 3, 0);
  settle(&w);
  tsd_seq_forget_conn(w.r[1].seq, 1);
  settle(&w);
  ck_assert_int_eq(w.r[1].nanswers, 0); /* its other client still waits */
  tsd_seq_forget_conn(w.r[1].seq, 2);
  settle(&w);
  ck_assert_int_eq(w.r[1].nanswers, 2);
  ck_assert_int_eq(gone_answers(&w.r[1], TS_INCOMPLETE,
                                "every client of rank 1 that submitted "
                                "it disconnected"),
                   2);
  submit_coll(&w, 0, 1, 1, "w", "KW", all, 3, 0); /* rank 1 no longer counts as arrived */
  settle(&w);
  check_same_order(&w, 0);
  submit_coll(&w, 1, 3, 1, "w", "KW", all, 3, 0); /* rank 1's client again */
  settle(&w);
  check_same_order(&w, 1);
  ck_assert_int_eq(answer_of(&w.r[0], 1, 1)->status, TS_OK);
  ck_assert_int_eq(answer_of(&w.r[1], 3, 1)->status, TS_OK);
  ck_assert_int_eq(answer_of(&w.r[2], 1, 1)->status, TS_OK);
  world_free(&w);
}
END_TEST

/* Every client of a collective gone (on rank 1 and on rank 0): the record is forgotten, so the
 * key starts afresh, even for another request. */
START_TEST(collective_forgotten_when_no_client_is_left) {
  world w;
  world_init(&w, 3);
  const int32_t all[3] = {0, 1, 2};
  submit_coll(&w, 1, 1, 1, "f", "KF", all, 3, 0);
  submit_coll(&w, 0, 1, 1, "f", "KF", all, 3, 0);
  settle(&w);
  tsd_seq_forget_conn(w.r[1].seq, 1);
  tsd_seq_forget_conn(w.r[0].seq, 1);
  settle(&w);
  ck_assert_int_eq(gone_answers(&w.r[0], TS_INCOMPLETE, "withdrawn"), 1);
  ck_assert_int_eq(gone_answers(&w.r[1], TS_INCOMPLETE, "withdrawn"), 1);
  for (int r = 0; r < 3; r++)
    submit_coll(&w, r, 2, 2, "g", "KF", all, 3, 0);
  settle(&w);
  check_same_order(&w, 1);
  ck_assert_str_eq(w.r[0].runs[0].name, "g");
  for (int r = 0; r < 3; r++)
    ck_assert_int_eq(answer_of(&w.r[r], 2, 2)->status, TS_OK);
  world_free(&w);
}
END_TEST

/* Three times --key-max collectives with a one-day timeout, each from a connection closed at
 * once, on both ranks: the table does not fill; a keyed operation and a collective run at once
 * afterwards. */
START_TEST(abandoned_collectives_do_not_fill_the_key_table) {
  world w;
  world_init(&w, 2);
  const int32_t both[2] = {0, 1};
  char key[32], name[32];
  for (int i = 0; i < 3 * KEY_MAX; i++) {
    snprintf(key, sizeof key, "F%d", i);
    snprintf(name, sizeof name, "f%d", i);
    submit_coll(&w, i % 2, 100 + (uint64_t)i, 1, name, key, both, 2, 86400000);
    tsd_seq_forget_conn(w.r[i % 2].seq, 100 + (uint64_t)i);
  }
  settle(&w);
  check_same_order(&w, 0);
  for (int r = 0; r < 2; r++)
    ck_assert_int_eq(gone_answers(&w.r[r], TS_INCOMPLETE, "withdrawn"), 3 * KEY_MAX / 2);
  submit(&w, 1, 1, 1, "after", "KA");
  settle(&w);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 1)->status, TS_OK);
  submit_coll(&w, 0, 1, 2, "coll", "KB", both, 2, 0);
  submit_coll(&w, 1, 1, 2, "coll", "KB", both, 2, 0);
  settle(&w);
  check_same_order(&w, 2);
  ck_assert_int_eq(answer_of(&w.r[0], 1, 2)->status, TS_OK);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 2)->status, TS_OK);
  world_free(&w);
}
END_TEST

/* A client that leaves after rank 0 ordered the collective changes nothing: it runs once on
 * every rank (the rank of the gone client still has its submission for the run). */
START_TEST(withdrawal_after_the_order_changes_nothing) {
  world w;
  world_init(&w, 2);
  const int32_t both[2] = {0, 1};
  submit_coll(&w, 0, 1, 1, "o", "KO", both, 2, 0);
  submit_coll(&w, 1, 1, 1, "o", "KO", both, 2, 0);
  deliver(&w); /* ordered everywhere, run nowhere */
  tsd_seq_forget_conn(w.r[1].seq, 1);
  settle(&w);
  check_same_order(&w, 1);
  ck_assert_int_eq(answer_of(&w.r[0], 1, 1)->status, TS_OK);
  ck_assert_int_eq(w.r[1].nanswers, 1);
  ck_assert_int_eq(gone_answers(&w.r[1], TS_OK, ""), 1);
  world_free(&w);
}
END_TEST

/* --collective-pending-max per connection: the next collective of that connection is LIMIT
 * saying so; other connections, and operations without participants, are not limited; once one
 * ran, the connection may submit another. */
START_TEST(pending_collectives_per_connection_are_bounded) {
  world w;
  tsd_seq_config cfg = {.key_ttl_ms = TTL_MS,
                        .key_max = KEY_MAX,
                        .collective_timeout_ms = COLL_MS,
                        .collective_pending_max = 3};
  world_init_cfg(&w, 2, &cfg);
  const int32_t both[2] = {0, 1};
  char key[32], name[32];
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof key, "P%d", i);
    snprintf(name, sizeof name, "p%d", i);
    submit_coll(&w, 1, 1, (uint64_t)i + 1, name, key, both, 2, 0);
  }
  settle(&w);
  ck_assert_int_eq(w.r[1].nanswers, 1);
  const answer *a = answer_of(&w.r[1], 1, 4);
  ck_assert_int_eq(a->status, TS_LIMIT);
  ck_assert_msg(strstr(a->msg, "this connection has 3 collectives waiting for their "
                               "participants") &&
                    strstr(a->msg, "--collective-pending-max 3"),
                "message: %s", a->msg);
  submit_coll(&w, 1, 2, 1, "q", "Q", both, 2, 0); /* another connection */
  submit(&w, 1, 1, 5, "plain", "KPL");            /* no participants */
  settle(&w);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 5)->status, TS_OK);
  ck_assert_int_eq(w.r[1].nanswers, 2); /* "q" waits */
  submit_coll(&w, 0, 1, 1, "p0", "P0", both, 2, 0);
  settle(&w);
  ck_assert_int_eq(answer_of(&w.r[1], 1, 1)->status, TS_OK);
  submit_coll(&w, 1, 1, 6, "p4", "P4", both, 2, 0); /* two wait now: room for one more */
  settle(&w);
  ck_assert_int_eq(w.r[1].nanswers, 3);
  world_free(&w);
}
END_TEST

/* Rank 0 waits at most --collective-timeout-max, whatever a request says. */
START_TEST(collective_timeout_is_bounded_at_rank_0) {
  world w;
  tsd_seq_config cfg = {.key_ttl_ms = TTL_MS,
                        .key_max = KEY_MAX,
                        .collective_timeout_ms = COLL_MS,
                        .collective_timeout_max_ms = 1000};
  world_init_cfg(&w, 2, &cfg);
  const int32_t both[2] = {0, 1};
  submit_coll(&w, 0, 1, 1, "t", "KT", both, 2, 5000);
  settle(&w);
  w.now += 999;
  settle(&w);
  ck_assert_int_eq(w.r[0].nanswers, 0);
  w.now += 1;
  settle(&w);
  const answer *a = answer_of(&w.r[0], 1, 1);
  ck_assert_int_eq(a->status, TS_INCOMPLETE);
  ck_assert_msg(strstr(a->msg, "timed out after 1000 ms"), "message: %s", a->msg);
  world_free(&w);
}
END_TEST

static void shutdown_test(int size) {
  world w;
  world_init(&w, size);
  int last = size - 1;
  submit(&w, last, 1, 1, "x", NULL);
  tsd_seq_submit(w.r[last].seq, 1, make_req(TSHARD__REQUEST__OP_SHUTDOWN, 2, "", "__sd"), NULL, 0,
                 0);
  settle(&w);
  check_same_order(&w, 2);
  for (int r = 0; r < size; r++) {
    ck_assert(tsd_seq_stopped(w.r[r].seq));
    ck_assert_int_eq(w.r[r].runs[1].op_case, TSHARD__REQUEST__OP_SHUTDOWN);
  }
  ck_assert_int_eq(answer_of(&w.r[last], 1, 2)->status, TS_OK);
  /* Submitted after the shutdown was ordered: never run, answered SHUTDOWN by its daemon. */
  submit(&w, last, 2, 3, "late", NULL);
  settle(&w);
  check_same_order(&w, 2);
  for (int r = 0; r < size; r++)
    tsd_seq_finish(w.r[r].seq);
  const answer *late = answer_of(&w.r[last], 2, 3);
  ck_assert_int_eq(late->status, TS_SHUTDOWN);
  ck_assert_int_eq(tsd_seq_all_gone(w.r[0].seq), size == 1);
  settle(&w); /* the goodbyes */
  ck_assert(tsd_seq_all_gone(w.r[0].seq));
  world_free(&w);
}

START_TEST(shutdown_one_rank) { shutdown_test(1); }
END_TEST

START_TEST(shutdown_three_ranks) { shutdown_test(3); }
END_TEST

int main(void) {
  tsd_log_threshold = TSD_LOG_ERROR; /* the refusals log warnings; they are expected here */
  Suite *s = suite_create("sequencer");
  TCase *tc = tcase_create("sequencer");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, order_one_rank);
  tcase_add_test(tc, order_three_ranks);
  tcase_add_test(tc, keyed_runs_once);
  tcase_add_test(tc, key_reused_for_another_request);
  tcase_add_test(tc, undecodable_is_refused_and_answered);
  tcase_add_test(tc, undecodable_order_runs_as_failure);
  tcase_add_test(tc, key_expires_after_ttl);
  tcase_add_test(tc, key_ends_when_its_names_change);
  tcase_add_test(tc, key_table_is_bounded);
  tcase_add_test(tc, retry_after_own_rank_ran_before_rank_0);
  tcase_add_test(tc, answer_of_key_waits_for_the_local_run);
  tcase_add_test(tc, collective_waits_for_every_participant);
  tcase_add_test(tc, collective_timeout_names_missing_ranks);
  tcase_add_test(tc, collective_mismatch_fails_for_all);
  tcase_add_test(tc, collective_misuse_is_refused);
  tcase_add_test(tc, collective_withdrawn_when_every_client_is_gone);
  tcase_add_test(tc, collective_forgotten_when_no_client_is_left);
  tcase_add_test(tc, abandoned_collectives_do_not_fill_the_key_table);
  tcase_add_test(tc, withdrawal_after_the_order_changes_nothing);
  tcase_add_test(tc, pending_collectives_per_connection_are_bounded);
  tcase_add_test(tc, collective_timeout_is_bounded_at_rank_0);
  tcase_add_test(tc, shutdown_one_rank);
  tcase_add_test(tc, shutdown_three_ranks);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
