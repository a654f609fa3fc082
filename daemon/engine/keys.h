/* keys.h - rank 0's table of idempotency keys (keys.c), used by the sequencer (sequencer.c).
 *
 * A record per key: the hash of the request it was first submitted with, a short description of
 * it ("create 'k1'") for messages, the names it touched (XXH3 hashes), its state, and:
 * collecting (a collective operation waiting for its participants): who arrived and the
 * deadline; ordered (sent to every rank, not yet run on rank 0): the late submissions to answer
 * after the run; done / failed: the answer (status and message) and the expiry. Records end when
 * they expire (--key-ttl after they were answered), when a later operation makes one of their
 * names appear or disappear (done records), when every submission of a collecting record was
 * withdrawn (their clients disconnected), or, when the table is full, the oldest answered
 * record gives way (--key-max). Pure data: no MPI, no engine; unit-tested through the sequencer
 * (tests/unit/test_sequencer.c). */
#ifndef TSD_KEYS_H
#define TSD_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#define TSD_KEY_MAX 129  /* a key's bytes and its NUL */
#define TSD_KEY_NAMES 16 /* names hashed per record (more: `all`) */
#define TSD_KEY_WHAT 160 /* "reshard 'w'" */

typedef enum {
  TSD_KEY_COLLECTING = 0, /* waiting for participants */
  TSD_KEY_ORDERED = 1,    /* ordered, rank 0 has not run it yet */
  TSD_KEY_DONE = 2,       /* ran: the answer is kept */
  TSD_KEY_FAILED = 3      /* a collective that never ran (timeout, conflict): the error is kept */
} tsd_key_state;

typedef struct tsd_key_sub {
  int rank;
  uint64_t ticket;
} tsd_key_sub;

typedef struct tsd_key_rec {
  struct tsd_key_rec *hnext;         /* bucket chain */
  struct tsd_key_rec *prev, *next;   /* age list, oldest first (moved to the end when answered) */
  struct tsd_key_rec *cprev, *cnext; /* list of collecting records */
  char key[TSD_KEY_MAX];
  uint64_t hash;
  tsd_key_state state;
  char what[TSD_KEY_WHAT];
  uint64_t names[TSD_KEY_NAMES];
  int nnames;
  bool all_names;
  int64_t start_ms;  /* first submission */
  int64_t until_ms;  /* collecting: deadline; done/failed: expiry */
  int timeout_ms;    /* collecting */
  int *participants; /* collecting: the ranks, and whether each arrived */
  bool *arrived;
  int nparticipants;
  tsd_key_sub *subs; /* collecting: the arrived submissions; ordered: the late ones */
  int nsubs, capsubs;
  int status;
  char *msg;
} tsd_key_rec;

typedef struct tsd_keys tsd_keys;

int tsd_keys_create(int64_t ttl_ms, int64_t max_records, tsd_keys **out);
void tsd_keys_destroy(tsd_keys **t); /* accepts NULL */
/* Frees the answered records expired at now_ms. */
void tsd_keys_sweep(tsd_keys *t, int64_t now_ms);
/* The record of a key; an answered one expired at now_ms is freed and NULL returned. */
tsd_key_rec *tsd_keys_find(tsd_keys *t, const char *key, int64_t now_ms);
/* A new record (state collecting, nothing else set); when the table is full the oldest answered
 * record gives way. NULL: full of unanswered records, or no memory. */
tsd_key_rec *tsd_keys_add(tsd_keys *t, const char *key, uint64_t hash, int64_t now_ms);
void tsd_keys_remove(tsd_keys *t, tsd_key_rec *r);
/* Collecting: the participants (copied; every one not yet arrived). 0 or -1 (no memory). */
int tsd_keys_set_participants(tsd_key_rec *r, const int32_t *ranks, int n, int timeout_ms,
                              int64_t now_ms);
/* Collecting: marks the rank arrived; true when every participant has. */
bool tsd_keys_arrive(tsd_key_rec *r, int rank);
int tsd_keys_add_sub(tsd_key_rec *r, int rank, uint64_t ticket); /* 0 or -1 (no memory) */
/* Collecting: takes back the submission (rank, ticket); the rank counts as not arrived unless
 * another of its submissions is left. False when the record has no such submission. */
bool tsd_keys_withdraw(tsd_key_rec *r, int rank, uint64_t ticket);
void tsd_keys_set_state(tsd_keys *t, tsd_key_rec *r, tsd_key_state st);
/* Done or failed with the answer: kept until now_ms + ttl. */
void tsd_keys_answer(tsd_keys *t, tsd_key_rec *r, tsd_key_state st, int status, const char *msg,
                     int64_t now_ms);
/* The earliest deadline of a collecting record (ms, the clock of now_ms), or -1 when none. */
int64_t tsd_keys_next_deadline(const tsd_keys *t);
/* A collecting record whose deadline passed at now_ms, or NULL. */
tsd_key_rec *tsd_keys_overdue(tsd_keys *t, int64_t now_ms);
/* An operation made the names appear or disappear (all: any name): done records touching one
 * end, except `keep`. */
void tsd_keys_end_names(tsd_keys *t, const uint64_t *names, int n, bool all,
                        const tsd_key_rec *keep);
/* Records held, and the configured bounds. */
int64_t tsd_keys_count(const tsd_keys *t);
int64_t tsd_keys_ttl_ms(const tsd_keys *t);
/* The missing participants of a collecting record as text ("3, 5"), at most cap bytes. */
void tsd_keys_missing(const tsd_key_rec *r, char *buf, size_t cap);
/* The arrived participants, as text. */
void tsd_keys_arrived(const tsd_key_rec *r, char *buf, size_t cap);

#endif
