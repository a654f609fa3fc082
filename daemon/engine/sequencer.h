/* sequencer.h - the order of collective operations and idempotency keys (sequencer.c), apart
 * from any transport: messages to other ranks go through a send hook, ordered operations are
 * reported through a run hook, answers through an answer hook. The engine plugs in the MPI
 * control channel and its handlers; tests/unit/test_sequencer.c plugs in an in-memory transport
 * with several simulated ranks in one process. One thread per sequencer. */
#ifndef TSD_SEQUENCER_H
#define TSD_SEQUENCER_H

#include "keys.h"
#include "tsd_base.h"
#include "tsd_wire.h"

/* The tags of the sequencer's messages. */
enum {
  TSD_SEQ_SUBMIT = 1,
  TSD_SEQ_ORDER = 2,
  TSD_SEQ_BYE = 3,
  TSD_SEQ_REFUSE = 4,
  TSD_SEQ_WITHDRAW = 5 /* every client of a submitted collective is gone */
};

/* A client on this rank waiting for a collective operation. */
typedef struct tsd_pending {
  struct tsd_pending *next;
  uint64_t ticket; /* this rank's number for the submission (0: joined another) */
  uint64_t group;  /* the ticket of the submission it waits with (its own when forwarded) */
  bool collective; /* names participants: waits for them */
  bool withdrawn;  /* every client of its group was gone: taken back from rank 0 */
  char key[TSD_KEY_MAX];
  uint64_t hash;            /* of the operation, to catch a key reused for another one */
  uint64_t conn_id, req_id; /* conn_id 0: the client is gone */
  int op_case;
  uint8_t *staging; /* put: the whole tensor, owned by the operation */
  uint64_t staging_bytes;
  uint64_t max_bytes;   /* get: the chunk size the client asked for */
  Tshard__Request *req; /* this rank's decoding of its forwarded submission, until ordered */
  int64_t t_recv_ns, t_submit_ns; /* handed to the engine, submitted here (ns; the trace; 0
                                   * when tracing is off) */
} tsd_pending;

/* An operation in rank 0's order, waiting to run here. req is NULL when this rank could not
 * decode it: then op_case (from the ORDER's header) and decode_error say what it was and why;
 * the run hook must still take part in the operation's first agreement with that failure, so
 * that every rank fails it alike. */
typedef struct tsd_ordered {
  struct tsd_ordered *next;
  uint64_t seq, ticket, hash;
  int origin;
  int op_case;
  Tshard__Request *req;
  ts_error decode_error;
  int64_t t_order_ns; /* when rank 0's order of it was here (ns; the trace; 0 when off) */
} tsd_ordered;

typedef struct tsd_seq_hooks {
  void *ctx;
  /* Sends a message to another rank (in order per pair of ranks). */
  int (*send)(void *ctx, int dst, int tag, const uint8_t *buf, size_t len, ts_error *err);
  /* Runs an ordered operation here (origin: this rank's submission when it is the origin);
   * returns its status, the message in err. */
  int (*run)(void *ctx, const tsd_ordered *op, tsd_pending *origin, ts_error *err);
  /* Answers one waiting client (status and message; the operation's answer when TS_OK). */
  void (*answer)(void *ctx, int op_case, const tsd_pending *w, int status, const char *msg);
  /* Frees a submission's staging (put data). */
  void (*release)(void *ctx, uint8_t *staging, uint64_t bytes);
  /* A monotonic clock in milliseconds (rank 0: key expiry, collective deadlines). */
  int64_t (*now_ms)(void *ctx);
  /* The names an operation touches, and whether it makes names appear or disappear (NULL:
   * none). */
  void (*names)(void *ctx, const Tshard__Request *req, tsd_changes *ch);
} tsd_seq_hooks;

/* The bounds on idempotency keys and collectives (daemon flags --key-ttl, --key-max,
 * --collective-timeout, --collective-timeout-max, --collective-pending-max), and whether the
 * trace's timestamps are taken (--trace-ring > 0). */
typedef struct tsd_seq_config {
  int64_t key_ttl_ms;
  int64_t key_max;
  int64_t collective_timeout_ms;     /* for requests naming participants without a timeout */
  int64_t collective_timeout_max_ms; /* rank 0 never waits longer (0: no bound here) */
  int64_t collective_pending_max;    /* per connection: collectives waiting (0: no bound) */
  int fault_orders_undecodable;      /* fault injection: the next N ORDERs here fail to decode */
  bool stamp_times; /* the trace is on: submissions and orders note when they were here */
} tsd_seq_config;

typedef struct tsd_seq tsd_seq;

int tsd_seq_create(int rank, int size, const tsd_seq_hooks *hooks, const tsd_seq_config *cfg,
                   tsd_seq **out, ts_error *err);
/* Frees what is left (staging released, nobody answered). Accepts NULL. */
void tsd_seq_destroy(tsd_seq **s);
/* A validated collective request from a client of this rank (takes the request; a put's
 * staging moves into the submission), handed to the engine at t_recv_ns (CLOCK_MONOTONIC ns;
 * 0: unknown; the trace). Every submission is answered exactly once. */
void tsd_seq_submit(tsd_seq *s, uint64_t conn_id, Tshard__Request *req, uint8_t *staging,
                    uint64_t staging_bytes, int64_t t_recv_ns);
/* A message from another rank. */
void tsd_seq_message(tsd_seq *s, int src, int tag, const uint8_t *buf, size_t len);
/* Runs the ordered operations that have arrived, until none is left or a shutdown ran; returns
 * how many ran. Rank 0 first fails the collectives whose deadline passed. */
int tsd_seq_run(tsd_seq *s);
/* ms until tsd_seq_run has a deadline to act on (a collective timing out), or -1: none. */
int64_t tsd_seq_due_ms(tsd_seq *s);
/* Whether a shutdown operation ran here. */
bool tsd_seq_stopped(const tsd_seq *s);
/* The client of connection conn_id is gone: its submissions run, answering nobody; a
 * collective still waiting for participants whose every client on this rank is gone is
 * withdrawn from rank 0's collection (forgotten when no submission of it is left). */
void tsd_seq_forget_conn(tsd_seq *s, uint64_t conn_id);
/* After the shutdown: answers whoever still waits (TS_SHUTDOWN) and says BYE to rank 0. */
void tsd_seq_finish(tsd_seq *s);
/* Rank 0: whether every other rank said BYE (then no message is left in flight). */
bool tsd_seq_all_gone(const tsd_seq *s);
/* Operations run here so far. */
uint64_t tsd_seq_ops_run(const tsd_seq *s);

#endif
