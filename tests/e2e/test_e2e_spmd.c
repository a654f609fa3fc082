/* test_e2e_spmd.c - SPMD collectives through the C library (tshard_set_group) on 3 real
 * daemons: one thread per rank, each with its own client declaring the group {0, 1, 2}.
 * Skewed: one thread sleeps before its put_slice (skew of the client under test); the create,
 * the reshards and the drop each run once, after every rank submitted them, and every rank's
 * slices equal the reference (tse_fill_box) after each reshard. Missing: a rank that never
 * submits makes the others' create fail with TS_INCOMPLETE naming it, nothing created.
 * Misuse: a group call without a key, bad groups (negative, twice, n < 0), and clearing the
 * group restores plain calls. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define NP 3

static tse_job job;
static const int group[NP] = {0, 1, 2};
static const int64_t shape[2] = {9, 6};
static const char *const targets[] = {"mesh=[3] placements=[S(1)]", "mesh=[3] placements=[R]",
                                      "mesh=[3] placements=[S(0)] splits={0:[2,0,7]}"};

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* This rank's box of the tensor; false when it holds none. */
static bool my_box(tshard_client *c, const char *name, int rank, int64_t *lo, int64_t *hi) {
  tshard_info info;
  bool found = false;
  TSE_OK(c, tshard_describe(c, name, &info));
  for (int i = 0; i < info.nranks; i++)
    if (info.ranks[i].rank == rank) {
      memcpy(lo, info.ranks[i].lo, sizeof(int64_t) * 2);
      memcpy(hi, info.ranks[i].hi, sizeof(int64_t) * 2);
      found = true;
    }
  tshard_info_clear(&info);
  return found;
}

typedef struct arg {
  int rank;
  int late; /* the rank whose put comes late */
} arg;

static void *skewed(void *p) {
  arg *a = p;
  tshard_client *c = tse_connect(&job, a->rank);
  if (!c)
    return NULL;
  TSE_OK(c, tshard_set_group(c, group, NP, 0));
  char key[64];
  snprintf(key, sizeof key, "skew-%d-create", a->late);
  TSE_OK(c, tshard_create(c, "g", "f32", 2, shape, "mesh=[3] placements=[S(0)]", NULL, key));
  int64_t lo[2], hi[2];
  float buf[54];
  if (my_box(c, "g", a->rank, lo, hi)) {
    tse_fill_box("f32", 5, 2, shape, lo, hi, buf);
    if (a->rank == a->late)
      nap_ms(500); /* skew of this client, not a synchronization of the test */
    size_t n = (size_t)((hi[0] - lo[0]) * (hi[1] - lo[1])) * sizeof(float);
    TSE_OK(c, tshard_put_slice(c, "g", NULL, buf, n));
  }
  for (int t = 0; t < 3; t++) {
    snprintf(key, sizeof key, "skew-%d-reshard-%d", a->late, t);
    tshard_reshard_opts o = {.key = key};
    TSE_OK(c, tshard_reshard(c, "g", targets[t], &o));
    if (my_box(c, "g", a->rank, lo, hi)) {
      size_t got = 0;
      memset(buf, 0xee, sizeof buf);
      TSE_OK(c, tshard_get_slice(c, "g", NULL, buf, sizeof buf, &got));
      char what[96];
      snprintf(what, sizeof what, "rank %d (late %d) after %s", a->rank, a->late, targets[t]);
      TSE_CHECK(tse_compare_box(what, "f32", 5, 2, shape, lo, hi, buf) == 0, "%s", what);
    }
  }
  snprintf(key, sizeof key, "skew-%d-drop", a->late);
  TSE_OK(c, tshard_drop(c, "g", key));
  tshard_close(&c);
  return NULL;
}

static char missing_msg[NP][1024];

static void *missing(void *p) {
  arg *a = p;
  tshard_client *c = tse_connect(&job, a->rank);
  if (!c)
    return NULL;
  TSE_OK(c, tshard_set_group(c, group, NP, 800));
  int st = tshard_create(c, "m", "f32", 2, shape, "mesh=[3] placements=[R]", NULL, "miss");
  TSE_CHECK(st == TS_INCOMPLETE, "rank %d: a missing participant gives %s", a->rank,
            tshard_status_name(st));
  snprintf(missing_msg[a->rank], sizeof missing_msg[a->rank], "%s", tshard_last_message(c));
  tshard_close(&c);
  return NULL;
}

static void run_threads(void *(*fn)(void *), int n, int late) {
  pthread_t th[NP];
  arg args[NP];
  for (int i = 0; i < n; i++) {
    args[i].rank = i;
    args[i].late = late;
    pthread_create(&th[i], NULL, fn, &args[i]);
  }
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
}

int main(void) {
  if (tse_start(&job, NP, NULL, 120))
    return 1;
  tshard_client *c0 = tse_connect(&job, 0);
  tshard_stats before, after;
  if (c0)
    TSE_OK(c0, tshard_stats_get(c0, &before));
  run_threads(skewed, NP, 2);
  run_threads(skewed, NP, 0);
  if (c0) {
    TSE_OK(c0, tshard_stats_get(c0, &after));
    uint64_t ran = 0;
    for (int i = 0; i < after.nstrategies; i++)
      ran += after.strategies[i].reshards;
    for (int i = 0; i < before.nstrategies; i++)
      ran -= before.strategies[i].reshards;
    TSE_CHECK(ran == 6, "each collective reshard ran once: %llu for 6", (unsigned long long)ran);
    TSE_CHECK(after.tensors == 0, "the collective drops ran: %llu tensors",
              (unsigned long long)after.tensors);
  }
  run_threads(missing, 2, -1); /* rank 2 never comes */
  TSE_CHECK(strstr(missing_msg[0], "rank(s) 2 never submitted it") != NULL, "message: %s",
            missing_msg[0]);
  TSE_CHECK(strcmp(missing_msg[0], missing_msg[1]) == 0, "one message: '%s' / '%s'", missing_msg[0],
            missing_msg[1]);
  if (c0) {
    TSE_CHECK(tshard_describe(c0, "m", &(tshard_info){0}) == TS_NOT_FOUND, "nothing created");
    /* misuse */
    TSE_OK(c0, tshard_set_group(c0, group, NP, 0));
    int st = tshard_drop(c0, "x", NULL);
    TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c0), "idempotency key"),
              "a group call without a key: %s %s", tshard_status_name(st), tshard_last_message(c0));
    const int twice[2] = {1, 1}, negative[1] = {-3};
    st = tshard_set_group(c0, twice, 2, 0);
    TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c0), "named twice"),
              "a rank twice: %s", tshard_last_message(c0));
    st = tshard_set_group(c0, negative, 1, 0);
    TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c0), "negative"),
              "a negative rank: %s", tshard_last_message(c0));
    TSE_CHECK(tshard_set_group(c0, group, -1, 0) == TS_INVALID_ARGUMENT, "n < 0");
    TSE_CHECK(tshard_set_group(NULL, group, NP, 0) == TS_INVALID_ARGUMENT, "NULL client");
    TSE_OK(c0, tshard_set_group(c0, NULL, 0, 0)); /* cleared: a plain create again */
    TSE_OK(c0, tshard_create(c0, "p", "f32", 2, shape, "mesh=[3] placements=[R]", NULL, NULL));
    TSE_OK(c0, tshard_drop(c0, "p", NULL));
    tshard_close(&c0);
  }
  int rc = tse_stop(&job);
  TSE_CHECK(rc == 0, "daemons stopped: %d", rc);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
