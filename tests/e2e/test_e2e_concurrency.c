/* test_e2e_concurrency.c - 64 clients at once on 2 daemons, each doing a mixed series of
 * operations on tensors of its own (create, put whole, ping, get whole, reshard keeping the source
 * with an idempotency key, get slices, describe, list, stats, drop), all checked against the
 * reference. Collective operations of all clients interleave in rank 0's order; every answer must
 * be right, every tensor dropped at the end, and every daemon's memory back to zero. */
#include <pthread.h>
#include <string.h>

#include "harness.h"

#define NCLIENTS 64
#define ITERS 3

static tse_job job;

static const char *const attrs[] = {"mesh=[2] placements=[S(0)]", "mesh=[2] placements=[S(1)]",
                                    "mesh=[2] placements=[R]", "mesh=[1]@1 placements=[R]",
                                    "mesh=[2] placements=[S(0)] splits={0:[13,3]}"};
static const char *const dtypes[] = {"f32", "i64", "bf16", "u8"};
static const int64_t shape[2] = {16, 12};

static void *client_main(void *p) {
  int id = (int)(intptr_t)p, rank = id % 2;
  tshard_client *c = tse_connect(&job, rank);
  if (!c)
    return NULL;
  const char *dt = dtypes[id % 4];
  size_t es = tse_dtype_size(dt), bytes = (size_t)(16 * 12) * es;
  uint8_t *data = malloc(bytes), *back = malloc(bytes);
  int64_t lo[2] = {0, 0};
  for (int it = 0; it < ITERS; it++) {
    char name[32], copy[40], key[48], what[64];
    snprintf(name, sizeof name, "c%d.%d", id, it);
    snprintf(copy, sizeof copy, "%s.r", name);
    snprintf(key, sizeof key, "reshard-%s", name);
    uint64_t seed = (uint64_t)(id * 10 + it);
    const char *src = attrs[(id + it) % 5], *tgt = attrs[(id + it + 2) % 5];
    TSE_OK(c, tshard_create(c, name, dt, 2, shape, src, NULL, NULL));
    tse_fill_box(dt, seed, 2, shape, lo, shape, data);
    TSE_OK(c, tshard_put(c, name, data, bytes, NULL));
    int r = -1, n = -1;
    TSE_OK(c, tshard_ping(c, &r, &n));
    TSE_CHECK(r == rank && n == 2, "ping answered rank %d of %d", r, n);
    memset(back, 0xee, bytes);
    TSE_OK(c, tshard_get(c, name, back, bytes));
    snprintf(what, sizeof what, "client %d whole %s", id, name);
    tse_compare_box(what, dt, seed, 2, shape, lo, shape, back);
    tshard_reshard_opts o = {.keep_source_as = copy, .layout = (id & 1) ? "ba" : NULL, .key = key};
    TSE_OK(c, tshard_reshard(c, name, tgt, &o));
    memset(back, 0xee, bytes);
    TSE_OK(c, tshard_get(c, copy, back, bytes));
    snprintf(what, sizeof what, "client %d resharded %s", id, copy);
    tse_compare_box(what, dt, seed, 2, shape, lo, shape, back);
    tshard_info info;
    TSE_OK(c, tshard_describe(c, copy, &info));
    for (int i = 0; i < info.nranks; i++)
      if (info.ranks[i].rank == rank) {
        size_t got = 0;
        TSE_OK(c, tshard_get_slice(c, copy, NULL, back, bytes, &got));
        snprintf(what, sizeof what, "client %d slice of %s", id, copy);
        tse_compare_box(what, dt, seed, 2, shape, info.ranks[i].lo, info.ranks[i].hi, back);
      }
    tshard_info_clear(&info);
    char **names = NULL;
    int count = 0, found = 0;
    TSE_OK(c, tshard_list(c, &names, &count));
    for (int i = 0; i < count; i++)
      found += !strcmp(names[i], name) || !strcmp(names[i], copy);
    TSE_CHECK(found == 2, "client %d: list shows %d of its 2 tensors", id, found);
    tshard_free_names(names, count);
    tshard_stats st;
    TSE_OK(c, tshard_stats_get(c, &st));
    TSE_CHECK(st.tensors >= 2, "stats show %llu tensors", (unsigned long long)st.tensors);
    TSE_OK(c, tshard_drop(c, name, NULL));
    TSE_OK(c, tshard_drop(c, copy, NULL));
    TSE_CHECK(tshard_drop(c, copy, NULL) == TS_NOT_FOUND, "second drop of %s", copy);
  }
  free(data);
  free(back);
  tshard_close(&c);
  return NULL;
}

int main(void) {
  if (tse_start(&job, 2, NULL, 120))
    return 1;
  pthread_t th[NCLIENTS];
  for (int i = 0; i < NCLIENTS; i++)
    pthread_create(&th[i], NULL, client_main, (void *)(intptr_t)i);
  for (int i = 0; i < NCLIENTS; i++)
    pthread_join(th[i], NULL);
  for (int r = 0; r < 2; r++) {
    tshard_client *c = tse_connect(&job, r);
    tshard_stats st;
    if (c) {
      TSE_OK(c, tshard_stats_get(c, &st));
      TSE_CHECK(st.tensors == 0, "rank %d holds %llu tensors", r, (unsigned long long)st.tensors);
      TSE_CHECK(st.collective_ops >= NCLIENTS * ITERS * 7, "rank %d ran %llu collective ops", r,
                (unsigned long long)st.collective_ops);
      tshard_close(&c);
    }
  }
  tse_stop(&job);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
