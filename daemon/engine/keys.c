/* keys.c - rank 0's table of idempotency keys (see keys.h): a chained hash table (XXH3 of the
 * key) over records that also sit in one age list, oldest first. A record moves to the end of
 * the list when it is answered, so the answered records are in expiry order (one --key-ttl for
 * all) apart from the few still collecting or ordered among them; sweeping frees from the front
 * while the front is answered and expired. When the table holds --key-max records, the oldest
 * answered one gives way to a new key (never a record still waiting: those end by themselves,
 * within the collective timeout, when rank 0 runs them, or when every client that submitted
 * them disconnected). Collecting records are also in a short list of their own, scanned for
 * deadlines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "keys.h"

struct tsd_keys {
  tsd_key_rec **buckets;
  size_t nbuckets; /* a power of two */
  tsd_key_rec *oldest, *newest;
  tsd_key_rec *collecting;
  int64_t count, max, ttl_ms;
};

static size_t bucket_of(const tsd_keys *t, const char *key) {
  return (size_t)XXH3_64bits(key, strlen(key)) & (t->nbuckets - 1);
}

int tsd_keys_create(int64_t ttl_ms, int64_t max_records, tsd_keys **out) {
  *out = NULL;
  tsd_keys *t = calloc(1, sizeof *t);
  if (!t)
    return -1;
  t->nbuckets = 64;
  while ((int64_t)t->nbuckets < max_records / 2 && t->nbuckets < ((size_t)1 << 20))
    t->nbuckets *= 2;
  t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
  if (!t->buckets) {
    free(t);
    return -1;
  }
  t->ttl_ms = ttl_ms;
  t->max = max_records > 0 ? max_records : 1;
  *out = t;
  return 0;
}

static void rec_free(tsd_key_rec *r) {
  free(r->participants);
  free(r->arrived);
  free(r->subs);
  free(r->msg);
  free(r);
}

static void unlink_age(tsd_keys *t, tsd_key_rec *r) {
  if (r->prev)
    r->prev->next = r->next;
  else
    t->oldest = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    t->newest = r->prev;
  r->prev = r->next = NULL;
}

static void append_age(tsd_keys *t, tsd_key_rec *r) {
  r->prev = t->newest;
  r->next = NULL;
  if (t->newest)
    t->newest->next = r;
  else
    t->oldest = r;
  t->newest = r;
}

static void unlink_collecting(tsd_keys *t, tsd_key_rec *r) {
  if (r->cprev)
    r->cprev->cnext = r->cnext;
  else if (t->collecting == r)
    t->collecting = r->cnext;
  if (r->cnext)
    r->cnext->cprev = r->cprev;
  r->cprev = r->cnext = NULL;
}

void tsd_keys_remove(tsd_keys *t, tsd_key_rec *r) {
  for (tsd_key_rec **pp = &t->buckets[bucket_of(t, r->key)]; *pp; pp = &(*pp)->hnext)
    if (*pp == r) {
      *pp = r->hnext;
      break;
    }
  unlink_age(t, r);
  if (r->state == TSD_KEY_COLLECTING)
    unlink_collecting(t, r);
  t->count--;
  rec_free(r);
}

void tsd_keys_destroy(tsd_keys **pt) {
  if (!pt || !*pt)
    return;
  tsd_keys *t = *pt;
  while (t->oldest) {
    tsd_key_rec *r = t->oldest;
    t->oldest = r->next;
    rec_free(r);
  }
  free(t->buckets);
  free(t);
  *pt = NULL;
}

static bool answered(const tsd_key_rec *r) {
  return r->state == TSD_KEY_DONE || r->state == TSD_KEY_FAILED;
}

void tsd_keys_sweep(tsd_keys *t, int64_t now_ms) {
  while (t->oldest && answered(t->oldest) && t->oldest->until_ms <= now_ms)
    tsd_keys_remove(t, t->oldest);
  /* An expired record behind a waiting one at the front is found by tsd_keys_find's check. */
}

tsd_key_rec *tsd_keys_find(tsd_keys *t, const char *key, int64_t now_ms) {
  for (tsd_key_rec *r = t->buckets[bucket_of(t, key)]; r; r = r->hnext)
    if (strcmp(r->key, key) == 0) {
      if (answered(r) && r->until_ms <= now_ms) {
        tsd_keys_remove(t, r);
        return NULL;
      }
      return r;
    }
  return NULL;
}

tsd_key_rec *tsd_keys_add(tsd_keys *t, const char *key, uint64_t hash, int64_t now_ms) {
  if (t->count >= t->max) {
    tsd_key_rec *victim = t->oldest;
    while (victim && !answered(victim))
      victim = victim->next;
    if (!victim)
      return NULL;
    tsd_keys_remove(t, victim);
  }
  tsd_key_rec *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  snprintf(r->key, sizeof r->key, "%s", key);
  r->hash = hash;
  r->state = TSD_KEY_COLLECTING;
  r->start_ms = now_ms;
  size_t b = bucket_of(t, key);
  r->hnext = t->buckets[b];
  t->buckets[b] = r;
  append_age(t, r);
  r->cnext = t->collecting;
  if (t->collecting)
    t->collecting->cprev = r;
  t->collecting = r;
  t->count++;
  return r;
}

int tsd_keys_set_participants(tsd_key_rec *r, const int32_t *ranks, int n, int timeout_ms,
                              int64_t now_ms) {
  r->participants = malloc((size_t)(n > 0 ? n : 1) * sizeof *r->participants);
  r->arrived = calloc((size_t)(n > 0 ? n : 1), sizeof *r->arrived);
  if (!r->participants || !r->arrived)
    return -1;
  for (int i = 0; i < n; i++)
    r->participants[i] = ranks[i];
  r->nparticipants = n;
  r->timeout_ms = timeout_ms;
  r->until_ms = now_ms + timeout_ms;
  return 0;
}

bool tsd_keys_arrive(tsd_key_rec *r, int rank) {
  bool all = true;
  for (int i = 0; i < r->nparticipants; i++) {
    if (r->participants[i] == rank)
      r->arrived[i] = true;
    all = all && r->arrived[i];
  }
  return all;
}

int tsd_keys_add_sub(tsd_key_rec *r, int rank, uint64_t ticket) {
  if (r->nsubs == r->capsubs) {
    int cap = r->capsubs ? 2 * r->capsubs : 4;
    tsd_key_sub *s = realloc(r->subs, (size_t)cap * sizeof *s);
    if (!s)
      return -1;
    r->subs = s;
    r->capsubs = cap;
  }
  r->subs[r->nsubs].rank = rank;
  r->subs[r->nsubs].ticket = ticket;
  r->nsubs++;
  return 0;
}

bool tsd_keys_withdraw(tsd_key_rec *r, int rank, uint64_t ticket) {
  int at = -1;
  bool other = false;
  for (int i = 0; i < r->nsubs; i++) {
    if (r->subs[i].rank == rank && r->subs[i].ticket == ticket)
      at = i;
    else if (r->subs[i].rank == rank)
      other = true;
  }
  if (at < 0)
    return false;
  memmove(&r->subs[at], &r->subs[at + 1], (size_t)(r->nsubs - at - 1) * sizeof *r->subs);
  r->nsubs--;
  for (int i = 0; !other && i < r->nparticipants; i++)
    if (r->participants[i] == rank)
      r->arrived[i] = false;
  return true;
}

void tsd_keys_set_state(tsd_keys *t, tsd_key_rec *r, tsd_key_state st) {
  if (r->state == TSD_KEY_COLLECTING && st != TSD_KEY_COLLECTING)
    unlink_collecting(t, r);
  r->state = st;
  if (st == TSD_KEY_ORDERED)
    r->nsubs = 0; /* the arrived submissions are answered by their ranks' runs */
}

void tsd_keys_answer(tsd_keys *t, tsd_key_rec *r, tsd_key_state st, int status, const char *msg,
                     int64_t now_ms) {
  tsd_keys_set_state(t, r, st);
  r->status = status;
  free(r->msg);
  r->msg = strdup(msg ? msg : "");
  r->until_ms = now_ms + t->ttl_ms;
  free(r->participants);
  free(r->arrived);
  r->participants = NULL;
  r->arrived = NULL;
  unlink_age(t, r);
  append_age(t, r);
}

int64_t tsd_keys_next_deadline(const tsd_keys *t) {
  int64_t next = -1;
  for (const tsd_key_rec *r = t->collecting; r; r = r->cnext)
    if (r->nparticipants > 0 && (next < 0 || r->until_ms < next))
      next = r->until_ms;
  return next;
}

tsd_key_rec *tsd_keys_overdue(tsd_keys *t, int64_t now_ms) {
  for (tsd_key_rec *r = t->collecting; r; r = r->cnext)
    if (r->nparticipants > 0 && r->until_ms <= now_ms)
      return r;
  return NULL;
}

static bool touches(const tsd_key_rec *r, const uint64_t *names, int n, bool all) {
  if (all || r->all_names)
    return true;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < r->nnames; j++)
      if (names[i] == r->names[j])
        return true;
  return false;
}

void tsd_keys_end_names(tsd_keys *t, const uint64_t *names, int n, bool all,
                        const tsd_key_rec *keep) {
  tsd_key_rec *r = t->oldest;
  while (r) {
    tsd_key_rec *next = r->next;
    if (r != keep && r->state == TSD_KEY_DONE && touches(r, names, n, all))
      tsd_keys_remove(t, r);
    r = next;
  }
}

int64_t tsd_keys_count(const tsd_keys *t) { return t->count; }
int64_t tsd_keys_ttl_ms(const tsd_keys *t) { return t->ttl_ms; }

static void rank_list(const tsd_key_rec *r, bool want_arrived, char *buf, size_t cap) {
  size_t n = 0;
  int shown = 0, more = 0;
  buf[0] = '\0';
  for (int i = 0; i < r->nparticipants; i++) {
    if (r->arrived[i] != want_arrived)
      continue;
    if (shown == 32 || n + 16 >= cap) {
      more++;
      continue;
    }
    n += (size_t)snprintf(buf + n, cap - n, "%s%d", shown ? ", " : "", r->participants[i]);
    shown++;
  }
  if (more && n + 24 < cap)
    snprintf(buf + n, cap - n, " and %d more", more);
  if (!shown && cap > 5)
    snprintf(buf, cap, "none");
}

void tsd_keys_missing(const tsd_key_rec *r, char *buf, size_t cap) {
  rank_list(r, false, buf, cap);
}
void tsd_keys_arrived(const tsd_key_rec *r, char *buf, size_t cap) { rank_list(r, true, buf, cap); }
