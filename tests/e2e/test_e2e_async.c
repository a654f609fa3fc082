/* test_e2e_async.c - operations in flight through the C library on 3 real daemons:
 * tshard_submit_create / _reshard / _drop return tickets at once, synchronous puts and gets made
 * meanwhile read past the tickets' answers and run after them (the daemon keeps a connection's
 * order: each get equals the reference after the reshard submitted before it), tshard_wait in
 * any order, a ticket waited twice refused, a failing operation's status and message, a wait
 * that expires (an SPMD create waiting for its other participant) returning TS_TIMEOUT and then
 * succeeding, a save and a load in flight (tshard_submit_save / _load) whose tshard_wait_ckpt
 * gives their reports, the loaded tensor equal to the reference, and a connection closed with
 * tickets in flight leaving every tensor intact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NP 3
#define N 16

static tse_job job;
static const int64_t shape[2] = {24, 9};
static const int64_t lo[2] = {0, 0};

static long compare_whole(tshard_client *c, const char *name, uint64_t seed) {
  float buf[24 * 9];
  int rc = tshard_get(c, name, buf, sizeof buf);
  TSE_CHECK(rc == TS_OK, "get %s: %s", name, tshard_last_message(c));
  return rc ? 1 : tse_compare_box(name, "f32", seed, 2, shape, lo, shape, buf);
}

static void in_order(tshard_client *c) {
  uint64_t created[N], resharded[N];
  float ref[24 * 9];
  char name[16];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "a%d", i);
    TSE_OK(c, tshard_submit_create(c, name, "f32", 2, shape, "mesh=[3] placements=[S(0)]", NULL,
                                   NULL, &created[i]));
  }
  for (int i = 0; i < N; i++) { /* synchronous, behind the creates still unanswered */
    snprintf(name, sizeof name, "a%d", i);
    tse_fill_box("f32", (uint64_t)i, 2, shape, lo, shape, ref);
    TSE_OK(c, tshard_put(c, name, ref, sizeof ref, NULL));
    TSE_OK(c, tshard_submit_reshard(c, name, "mesh=[3] placements=[S(1)]", NULL, &resharded[i]));
  }
  for (int i = 0; i < N; i++) { /* each get runs after its tensor's reshard */
    snprintf(name, sizeof name, "a%d", i);
    TSE_CHECK(compare_whole(c, name, (uint64_t)i) == 0, "a%d after its reshard", i);
  }
  for (int i = N - 1; i >= 0; i--) {
    tshard_result res;
    TSE_OK(c, tshard_wait(c, resharded[i], 60000, &res));
    TSE_CHECK(res.status == TS_OK && res.strategy[0], "reshard %d: strategy '%s'", i, res.strategy);
    TSE_OK(c, tshard_wait(c, created[i], 0, NULL));
  }
  int st = tshard_wait(c, created[0], 0, NULL);
  TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "waited on once"),
            "a ticket waited twice: %s %s", tshard_status_name(st), tshard_last_message(c));
  uint64_t bad;
  TSE_OK(c, tshard_submit_drop(c, "no-such", NULL, &bad));
  st = tshard_wait(c, bad, 60000, NULL);
  TSE_CHECK(st == TS_NOT_FOUND && strstr(tshard_last_message(c), "no-such"),
            "a failing drop: %s %s", tshard_status_name(st), tshard_last_message(c));
}

/* a0 saved into dir and loaded back, both in flight: a synchronous get made meanwhile reads past
 * the save's answer; the reports name the bytes and the tensor. */
static void save_load_in_flight(tshard_client *c, const char *dir) {
  uint64_t t;
  tshard_ckpt_info k;
  const char *names[] = {"a0"};
  tshard_save_opts so = {0};
  TSE_OK(c, tshard_submit_save(c, dir, names, 1, &so, &t));
  TSE_CHECK(compare_whole(c, "a0", 0) == 0, "a0 read behind its save");
  TSE_OK(c, tshard_wait_ckpt(c, t, 60000, NULL, &k));
  TSE_CHECK(k.tensors == 1 && k.bytes == 24 * 9 * 4 && k.files >= 2 && !k.writing &&
                strcmp(k.dir, dir) == 0,
            "save report: %d tensors, %llu bytes, %d files, %s", k.tensors,
            (unsigned long long)k.bytes, k.files, k.dir);
  TSE_OK(c, tshard_drop(c, "a0", NULL));
  tshard_load_opts lo = {.attr = "mesh=[3] placements=[R]"};
  tshard_result res;
  TSE_OK(c, tshard_submit_load(c, dir, NULL, 0, &lo, &t));
  TSE_OK(c, tshard_wait_ckpt(c, t, 60000, &res, &k));
  TSE_CHECK(res.status == TS_OK && k.tensors == 1 && k.bytes == 24 * 9 * 4,
            "load report: status %d, %d tensors, %llu bytes", res.status, k.tensors,
            (unsigned long long)k.bytes);
  TSE_CHECK(compare_whole(c, "a0", 0) == 0, "a0 loaded back");
}

static void timeout_then_done(void) {
  static const int pair[2] = {0, 1};
  tshard_client *a = tse_connect(&job, 0), *b = tse_connect(&job, 1);
  if (!a || !b)
    return;
  TSE_OK(a, tshard_set_group(a, pair, 2, 0));
  TSE_OK(b, tshard_set_group(b, pair, 2, 0));
  int64_t one = 4;
  uint64_t t;
  TSE_OK(a, tshard_submit_create(a, "tw", "f32", 1, &one, "mesh=[3] placements=[R]", NULL, "tw-1",
                                 &t));
  int st = tshard_wait(a, t, 200, NULL);
  TSE_CHECK(st == TS_TIMEOUT && strstr(tshard_last_message(a), "goes on"),
            "the wait expires: %s %s", tshard_status_name(st), tshard_last_message(a));
  TSE_OK(b, tshard_create(b, "tw", "f32", 1, &one, "mesh=[3] placements=[R]", NULL, "tw-1"));
  TSE_OK(a, tshard_wait(a, t, 60000, NULL));
  TSE_OK(a, tshard_submit_drop(a, "tw", "tw-2", &t));
  TSE_OK(b, tshard_drop(b, "tw", "tw-2"));
  TSE_OK(a, tshard_wait(a, t, 60000, NULL));
  tshard_close(&a);
  tshard_close(&b);
}

int main(void) {
  if (tse_start(&job, NP, NULL, 120))
    return 1;
  char dir[64];
  if (tse_scratch_dir(dir, sizeof dir, "async"))
    return 1;
  char ckpt[96];
  snprintf(ckpt, sizeof ckpt, "%s/ck", dir);
  tshard_client *c = tse_connect(&job, 0);
  if (c) {
    in_order(c);
    save_load_in_flight(c, ckpt);
    uint64_t t[N];
    char name[16];
    for (int i = 0; i < N; i++) { /* closed with these in flight */
      snprintf(name, sizeof name, "a%d", i);
      TSE_OK(c, tshard_submit_reshard(
                    c, name, i % 2 ? "mesh=[3] placements=[R]" : "mesh=[3] placements=[S(0)]", NULL,
                    &t[i]));
    }
    tshard_close(&c);
  }
  timeout_then_done();
  for (int r = 0; r < NP; r++) { /* every rank serves; every tensor intact */
    tshard_client *o = tse_connect(&job, r);
    if (!o)
      continue;
    char name[16];
    for (int i = 0; i < N; i++) {
      snprintf(name, sizeof name, "a%d", i);
      TSE_CHECK(compare_whole(o, name, (uint64_t)i) == 0, "rank %d: a%d intact", r, i);
    }
    tshard_close(&o);
  }
  int rc = tse_stop(&job);
  TSE_CHECK(rc == 0, "daemons stopped: %d", rc);
  tse_scratch_remove(dir);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
