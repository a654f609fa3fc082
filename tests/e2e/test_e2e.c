/* test_e2e.c - end to end: real daemons under mpirun (np from argv), driven through libtshard.
 *
 * Single-driver style: one client (on the last rank, so operations are forwarded to rank 0)
 * creates tensors of several dtypes and attributes, puts them whole, gets them whole, reshards
 * each to targets under every strategy (forced; a strategy that does not apply must be refused
 * with BAD_STRATEGY and create nothing), keeping the source, and checks every result against the
 * reference: the whole tensor, every rank's slice through that rank's own daemon, slices in other
 * layouts (column-major and blocked, addressed by a naive formula here). Every strategy must have
 * run and been verified at least once. SPMD style: one thread per rank, each with its own client
 * on its own daemon, creates with a shared key, puts its own slice, submits the same reshard with
 * one key (it runs once: the collective count grows by one), checks its slice and the whole. */
#include <pthread.h>
#include <string.h>

#include "harness.h"

static int np;
static tse_job job;

static const char *const strategies[] = {"auto",      "local",    "allreduce", "reduce_scatter",
                                         "allgather", "alltoall", "p2p",       "root"};
#define NSTRAT 8
static int verified[NSTRAT];

typedef struct reshard_case {
  const char *dtype;
  int ndim;
  int64_t shape[4];
  const char *layout; /* stored layout of the source */
  const char *src;
  const char *tgt[4];
} reshard_case;

static const reshard_case cases2[] = {
    {"f32",
     2,
     {10, 7},
     "",
     "mesh=[2] placements=[S(0)]",
     {"mesh=[2] placements=[S(1)]", "mesh=[2] placements=[R]", "mesh=[1]@1 placements=[R]",
      "mesh=[2] placements=[S(0)] splits={0:[3,7]}"}},
    {"f64",
     2,
     {9, 5},
     "ba",
     "mesh=[2] placements=[R]",
     {"mesh=[2] placements=[S(1)]", "mesh=[2] placements=[S(0)] splits={0:[0,9]}", NULL, NULL}},
    {"f32",
     2,
     {6, 8},
     "",
     "mesh=[2] placements=[P(sum)]",
     {"mesh=[2] placements=[R]", "mesh=[2] placements=[S(0)]", "mesh=[2] placements=[S(1)]", NULL}},
    {"bf16",
     3,
     {6, 5, 4},
     "",
     "mesh=[2] placements=[S(2)]",
     {"mesh=[2] placements=[S(0)]", "mesh=[2] placements=[R]", NULL, NULL}},
    {"i8",
     1,
     {33},
     "",
     "mesh=[2] placements=[S(0)] splits={0:[30,3]}",
     {"mesh=[2] placements=[S(0)]", "mesh=[2] placements=[R]", NULL, NULL}},
    {"u8",
     2,
     {5, 3},
     "",
     "mesh=[1]@0 placements=[R]",
     {"mesh=[2] placements=[S(0)]", NULL, NULL, NULL}},
    {"f16",
     2,
     {4, 6},
     "",
     "mesh=[2] placements=[S(1)]",
     {"mesh=[2] placements=[P(max)]", NULL, NULL, NULL}},
    {"i32",
     2,
     {7, 7},
     "",
     "mesh=[2] placements=[P(max)]",
     {"mesh=[2] placements=[R]", NULL, NULL, NULL}},
    {"i64",
     2,
     {3, 11},
     "",
     "mesh=[2] placements=[S(1)]",
     {"mesh=[2] placements=[S(0)]", NULL, NULL, NULL}},
};

static const reshard_case cases4[] = {
    {"f32",
     2,
     {8, 9},
     "",
     "mesh=[2,2] placements=[S(0),S(1)]",
     {"mesh=[4] placements=[S(1)] splits={1:[2,0,3,4]}", "mesh=[2,2] placements=[R,S(0)]",
      "mesh=[2]@2-3 placements=[S(0)]", "mesh=[4] placements=[R]"}},
    {"f64",
     2,
     {12, 5},
     "",
     "mesh=[4] placements=[P(sum)]",
     {"mesh=[4] placements=[R]", "mesh=[4] placements=[S(0)]",
      "mesh=[2,2] placements=[S(0),P(sum)]", NULL}},
    {"i32",
     3,
     {4, 6, 5},
     "acb",
     "mesh=[2,2] placements=[R,S(1)]",
     {"mesh=[2,2] placements=[S(2),S(0)]", "mesh=[4] placements=[S(1)]",
      "mesh=[2]@1,3 placements=[R]", NULL}},
    {"bf16",
     2,
     {16, 3},
     "",
     "mesh=[4] placements=[R]",
     {"mesh=[4] placements=[S(0)]", "mesh=[2,2] placements=[S(0),S(0)]", NULL, NULL}},
};

static bool is_partial(const char *attr) { return strstr(attr, "P(") != NULL; }

static int64_t slice_bytes(const tshard_rank_info *ri, int ndim, size_t es) {
  int64_t n = (int64_t)es;
  for (int d = 0; d < ndim; d++)
    n *= ri->hi[d] - ri->lo[d];
  return n;
}

/* Checks every rank's slice of `name` through that rank's daemon, in row-major, and for 2-D
 * tensors also column-major ("ba") and blocked ("aB4b"), against the reference. */
static void check_slices(tshard_client **clients, const char *name, const reshard_case *rc,
                         uint64_t seed) {
  tshard_info info;
  int st = tshard_describe(clients[0], name, &info);
  TSE_CHECK(st == TS_OK, "describe %s: %s", name, tshard_last_message(clients[0]));
  if (st)
    return;
  size_t es = tse_dtype_size(rc->dtype);
  for (int i = 0; i < info.nranks; i++) {
    const tshard_rank_info *ri = &info.ranks[i];
    int64_t bytes = slice_bytes(ri, rc->ndim, es);
    uint8_t *buf = malloc((size_t)bytes + 1), *alt = malloc((size_t)bytes * 4 + 64);
    size_t got = 0;
    TSE_OK(clients[ri->rank],
           tshard_get_slice(clients[ri->rank], name, NULL, buf, (size_t)bytes, &got));
    TSE_CHECK(got == (size_t)bytes, "%s rank %d: slice of %zu bytes, describe says %lld", name,
              ri->rank, got, (long long)bytes);
    char what[200];
    snprintf(what, sizeof what, "%s slice of rank %d", name, ri->rank);
    tse_compare_box(what, rc->dtype, seed, rc->ndim, rc->shape, ri->lo, ri->hi, buf);
    if (rc->ndim == 2 && bytes > 0) {
      int64_t n0 = ri->hi[0] - ri->lo[0], n1 = ri->hi[1] - ri->lo[1], nb = (n1 + 3) / 4;
      TSE_OK(clients[ri->rank],
             tshard_get_slice(clients[ri->rank], name, "ba", alt, (size_t)bytes, &got));
      long bad = 0;
      for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
          bad += tse_load(rc->dtype, alt + (size_t)(b * n0 + a) * es) !=
                 tse_load(rc->dtype, buf + (size_t)(a * n1 + b) * es);
      TSE_CHECK(bad == 0, "%s rank %d: %ld elements differ in column-major", name, ri->rank, bad);
      TSE_OK(clients[ri->rank],
             tshard_get_slice(clients[ri->rank], name, "aB4b", alt, (size_t)bytes * 4 + 64, &got));
      TSE_CHECK(got == (size_t)(n0 * nb * 4) * es, "%s blocked slice of %zu bytes", name, got);
      bad = 0;
      for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < nb * 4; b++) {
          double v = tse_load(rc->dtype, alt + (size_t)((a * nb + b / 4) * 4 + b % 4) * es);
          double want = b < n1 ? tse_load(rc->dtype, buf + (size_t)(a * n1 + b) * es) : 0.0;
          bad += v != want;
        }
      TSE_CHECK(bad == 0, "%s rank %d: %ld elements differ in aB4b", name, ri->rank, bad);
    }
    free(buf);
    free(alt);
  }
  tshard_info_clear(&info);
}

static void check_whole(tshard_client *c, const char *name, const reshard_case *rc, uint64_t seed) {
  int64_t n = tse_numel(rc->ndim, rc->shape);
  size_t bytes = (size_t)n * tse_dtype_size(rc->dtype);
  void *buf = malloc(bytes);
  TSE_OK(c, tshard_get(c, name, buf, bytes));
  int64_t lo[4] = {0, 0, 0, 0};
  char what[200];
  snprintf(what, sizeof what, "whole %s", name);
  tse_compare_box(what, rc->dtype, seed, rc->ndim, rc->shape, lo, rc->shape, buf);
  free(buf);
}

static void single_driver(const reshard_case *cases, int ncases) {
  tshard_client *clients[8] = {0};
  for (int r = 0; r < np; r++)
    clients[r] = tse_connect(&job, r);
  tshard_client *drv = clients[np - 1];
  for (int k = 0; k < ncases; k++) {
    const reshard_case *rc = &cases[k];
    char name[64];
    snprintf(name, sizeof name, "t%d", k);
    uint64_t seed = (uint64_t)k + 1;
    TSE_OK(drv,
           tshard_create(drv, name, rc->dtype, rc->ndim, rc->shape, rc->src, rc->layout, NULL));
    size_t bytes = (size_t)tse_numel(rc->ndim, rc->shape) * tse_dtype_size(rc->dtype);
    void *data = malloc(bytes);
    int64_t lo[4] = {0, 0, 0, 0};
    tse_fill_box(rc->dtype, seed, rc->ndim, rc->shape, lo, rc->shape, data);
    TSE_OK(drv, tshard_put(drv, name, data, bytes, NULL));
    free(data);
    check_whole(drv, name, rc, seed);
    if (!is_partial(rc->src))
      check_slices(clients, name, rc, seed);
    for (int t = 0; t < 4 && rc->tgt[t]; t++) {
      for (int s = 0; s < NSTRAT; s++) {
        char out[96];
        snprintf(out, sizeof out, "%s.%d.%s", name, t, strategies[s]);
        tshard_reshard_opts o = {.strategy = strategies[s], .keep_source_as = out};
        int st = tshard_reshard(drv, name, rc->tgt[t], &o);
        if (st == TS_BAD_STRATEGY) {
          tshard_info info;
          TSE_CHECK(tshard_describe(drv, out, &info) == TS_NOT_FOUND,
                    "refused reshard left a tensor %s", out);
          continue;
        }
        TSE_CHECK(st == TS_OK, "%s -> %s by %s: %s %s", rc->src, rc->tgt[t], strategies[s],
                  tshard_status_name(st), tshard_last_message(drv));
        if (st)
          continue;
        int before = tse_failures;
        check_whole(drv, out, rc, seed);
        if (!is_partial(rc->tgt[t]))
          check_slices(clients, out, rc, seed);
        if (tse_failures == before)
          verified[s]++;
        TSE_OK(drv, tshard_drop(drv, out, NULL));
      }
    }
    /* The source is unchanged after all that; then reshard it in place. */
    check_whole(drv, name, rc, seed);
    TSE_OK(drv, tshard_reshard(drv, name, rc->tgt[0], NULL));
    check_whole(drv, name, rc, seed);
    if (!is_partial(rc->tgt[0]))
      check_slices(clients, name, rc, seed);
    TSE_OK(drv, tshard_drop(drv, name, NULL));
  }
  /* Data in many chunks (1000 bytes: chunks also split elements), two in flight: whole put and
   * get, every rank's slice put and got back in a blocked layout, a refused put mid-way. */
  {
    const reshard_case big = {"f32", 2, {64, 50}, "aB4b", "mesh=[2] placements=[S(1)]", {NULL}};
    size_t bytes = 64 * 50 * 4;
    uint8_t *data = malloc(bytes), *back = malloc(bytes);
    int64_t lo[2] = {0, 0};
    for (int r = 0; r < np; r++) {
      tshard_set_shm(clients[r], 0); /* the stream's chunks (test_e2e_shm covers the segment) */
      tshard_set_chunk(clients[r], 1000);
    }
    TSE_OK(drv, tshard_create(drv, "multi", "f32", 2, big.shape, big.src, big.layout, NULL));
    tse_fill_box("f32", 91, 2, big.shape, lo, big.shape, data);
    tshard_stats s0, s1;
    TSE_OK(drv, tshard_stats_get(drv, &s0));
    TSE_OK(drv, tshard_put(drv, "multi", data, bytes, NULL));
    TSE_OK(drv, tshard_stats_get(drv, &s1));
    TSE_CHECK(s1.operations - s0.operations == 1 + (bytes + 999) / 1000,
              "a put of %zu bytes in 1000-byte chunks made %llu answers", bytes,
              (unsigned long long)(s1.operations - s0.operations - 1));
    TSE_OK(drv, tshard_get(drv, "multi", back, bytes));
    tse_compare_box("multi-chunk whole", "f32", 91, 2, big.shape, lo, big.shape, back);
    int st = tshard_put(drv, "multi", data, bytes - 4, NULL);
    TSE_CHECK(st == TS_BAD_SHAPE, "put of the wrong size in chunks gave %s",
              tshard_status_name(st));
    check_slices(clients, "multi", &big, 91);
    /* Every rank puts its slice (in chunks) with another seed, then the whole is checked. */
    tshard_info info;
    TSE_OK(drv, tshard_describe(drv, "multi", &info));
    for (int i = 0; i < info.nranks; i++) {
      const tshard_rank_info *ri = &info.ranks[i];
      size_t sb = (size_t)slice_bytes(ri, 2, 4);
      tse_fill_box("f32", 92, 2, big.shape, ri->lo, ri->hi, back);
      TSE_OK(clients[ri->rank], tshard_put_slice(clients[ri->rank], "multi", NULL, back, sb));
    }
    tshard_info_clear(&info);
    TSE_OK(drv, tshard_get(drv, "multi", back, bytes));
    tse_compare_box("multi-chunk slices put", "f32", 92, 2, big.shape, lo, big.shape, back);
    TSE_OK(drv, tshard_drop(drv, "multi", NULL));
    for (int r = 0; r < np; r++) {
      tshard_set_chunk(clients[r], 16u << 20);
      tshard_set_shm(clients[r], 1);
    }
    free(data);
    free(back);
  }
  /* Plan: the EXPLAIN names the strategy, a forced one is honoured, nothing moves. */
  {
    const reshard_case *rc = &cases[0];
    TSE_OK(drv, tshard_create(drv, "p", rc->dtype, rc->ndim, rc->shape, rc->src, NULL, NULL));
    tshard_stats before, after;
    TSE_OK(drv, tshard_stats_get(drv, &before));
    char *explain = NULL, chosen[32] = "";
    TSE_OK(drv, tshard_plan(drv, "p", rc->tgt[0], NULL, &explain, chosen, sizeof chosen));
    TSE_CHECK(chosen[0] && explain && strstr(explain, chosen), "plan chose '%s': %s", chosen,
              explain ? explain : "(none)");
    free(explain);
    explain = NULL;
    TSE_OK(drv, tshard_plan(drv, "p", rc->tgt[0], "p2p", &explain, chosen, sizeof chosen));
    TSE_CHECK(strcmp(chosen, "p2p") == 0, "forced p2p planned as '%s'", chosen);
    free(explain);
    explain = NULL;
    int st = tshard_plan(drv, "p", rc->tgt[0], "allreduce", &explain, chosen, sizeof chosen);
    TSE_CHECK(st == TS_BAD_STRATEGY && explain == NULL, "plan of allreduce gave %s",
              tshard_status_name(st));
    TSE_OK(drv, tshard_stats_get(drv, &after));
    TSE_CHECK(after.collective_ops == before.collective_ops, "plan ran a collective operation");
    uint64_t runs = 0;
    for (int i = 0; i < after.nstrategies; i++)
      runs += after.strategies[i].reshards;
    TSE_CHECK(runs > 0, "stats count no reshard by strategy");
    tshard_info info;
    TSE_OK(drv, tshard_describe(drv, "p", &info));
    TSE_CHECK(info.attr && strstr(info.attr, "placements=[S(0)") && info.ndim == 2 &&
                  info.shape[0] == rc->shape[0] && !strcmp(info.dtype, rc->dtype),
              "describe: %s", info.attr ? info.attr : "(no attribute)");
    uint64_t total = 0;
    for (int i = 0; i < info.nranks; i++)
      total += info.ranks[i].bytes;
    TSE_CHECK(total == (uint64_t)tse_numel(rc->ndim, rc->shape) * tse_dtype_size(rc->dtype),
              "describe: %llu bytes over the ranks", (unsigned long long)total);
    tshard_info_clear(&info);
    TSE_OK(drv, tshard_drop(drv, "p", NULL));
  }
  char **names = NULL;
  int count = -1;
  TSE_OK(drv, tshard_list(drv, &names, &count));
  TSE_CHECK(count == 0, "%d tensors left after dropping them all", count);
  tshard_free_names(names, count);
  for (int r = 0; r < np; r++)
    tshard_close(&clients[r]);
}

/* ---------------------------------------------------------------------------------------------
 * SPMD */

typedef struct spmd_arg {
  int rank;
  const reshard_case *rc;
  pthread_barrier_t *barrier;
  int target;
  int run; /* keys are unique per run */
} spmd_arg;

#define SPMD_BARRIERS 5 /* how many times spmd_client waits at the barrier */

static void *spmd_client(void *p) {
  spmd_arg *a = p;
  const reshard_case *rc = a->rc;
  tshard_client *c = tse_connect(&job, a->rank);
  if (!c) { /* the failure is counted; still meet the others at every barrier below */
    for (int i = 0; i < SPMD_BARRIERS; i++)
      pthread_barrier_wait(a->barrier);
    return NULL;
  }
  const char *name = "spmd";
  uint64_t seed = 77;
  size_t es = tse_dtype_size(rc->dtype);
  char kcreate[32], kreshard[32], kdrop[32];
  snprintf(kcreate, sizeof kcreate, "create-spmd-%d", a->run);
  snprintf(kreshard, sizeof kreshard, "reshard-spmd-%d", a->run);
  snprintf(kdrop, sizeof kdrop, "drop-spmd-%d", a->run);
  TSE_OK(c, tshard_create(c, name, rc->dtype, rc->ndim, rc->shape, rc->src, NULL, kcreate));
  pthread_barrier_wait(a->barrier);
  tshard_info info;
  TSE_OK(c, tshard_describe(c, name, &info));
  for (int i = 0; i < info.nranks; i++)
    if (info.ranks[i].rank == a->rank) {
      size_t bytes = (size_t)slice_bytes(&info.ranks[i], rc->ndim, es);
      void *buf = malloc(bytes);
      tse_fill_box(rc->dtype, seed, rc->ndim, rc->shape, info.ranks[i].lo, info.ranks[i].hi, buf);
      TSE_OK(c, tshard_put_slice(c, name, NULL, buf, bytes));
      free(buf);
    }
  tshard_info_clear(&info);
  tshard_stats before, after;
  TSE_OK(c, tshard_stats_get(c, &before));
  pthread_barrier_wait(a->barrier); /* every slice is in before anyone reshards */
  tshard_reshard_opts o = {.key = kreshard};
  TSE_OK(c, tshard_reshard(c, name, rc->tgt[a->target], &o));
  pthread_barrier_wait(a->barrier);
  /* The same key again: answered from memory, nothing runs. */
  TSE_OK(c, tshard_reshard(c, name, rc->tgt[a->target], &o));
  tshard_reshard_opts other = {.strategy = "p2p", .key = kreshard};
  int st = tshard_reshard(c, name, rc->src, &other);
  TSE_CHECK(st == TS_KEY_CONFLICT, "a key reused for another reshard gave %s",
            tshard_status_name(st));
  TSE_OK(c, tshard_stats_get(c, &after));
  pthread_barrier_wait(a->barrier); /* before rank 0's gather, a collective operation too */
  TSE_CHECK(after.collective_ops == before.collective_ops + 1,
            "rank %d: %llu collective operations ran for one keyed reshard", a->rank,
            (unsigned long long)(after.collective_ops - before.collective_ops));
  TSE_OK(c, tshard_describe(c, name, &info));
  for (int i = 0; i < info.nranks; i++)
    if (info.ranks[i].rank == a->rank) {
      size_t bytes = (size_t)slice_bytes(&info.ranks[i], rc->ndim, es), got = 0;
      void *buf = malloc(bytes + 1);
      TSE_OK(c, tshard_get_slice(c, name, NULL, buf, bytes, &got));
      char what[64];
      snprintf(what, sizeof what, "spmd slice of rank %d", a->rank);
      tse_compare_box(what, rc->dtype, seed, rc->ndim, rc->shape, info.ranks[i].lo,
                      info.ranks[i].hi, buf);
      free(buf);
    }
  tshard_info_clear(&info);
  if (a->rank == 0)
    check_whole(c, name, rc, seed);
  pthread_barrier_wait(a->barrier);
  TSE_OK(c, tshard_drop(c, name, kdrop));
  tshard_close(&c);
  return NULL;
}

static void spmd(const reshard_case *rc, int target) {
  pthread_t th[8];
  spmd_arg args[8];
  pthread_barrier_t barrier;
  static int runs;
  runs++;
  pthread_barrier_init(&barrier, NULL, (unsigned)np);
  for (int r = 0; r < np; r++) {
    args[r] = (spmd_arg){r, rc, &barrier, target, runs};
    pthread_create(&th[r], NULL, spmd_client, &args[r]);
  }
  for (int r = 0; r < np; r++)
    pthread_join(th[r], NULL);
  pthread_barrier_destroy(&barrier);
}

int main(int argc, char **argv) {
  np = argc > 1 ? atoi(argv[1]) : 2;
  if (np != 2 && np != 4) {
    fprintf(stderr, "usage: test_e2e 2|4\n");
    return 2;
  }
  if (tse_start(&job, np, NULL, 120))
    return 1;
  /* Connecting by rank finds the socket in the default directory ($TSHARD_SOCKET_DIR). */
  setenv("TSHARD_SOCKET_DIR", job.dir, 1);
  for (int r = 0; r < np; r++) {
    tshard_client *c = NULL;
    int rank = -1, size = -1;
    TSE_CHECK(tshard_connect_rank(job.job, r, 10000, &c) == TS_OK, "connect to rank %d", r);
    if (c) {
      TSE_OK(c, tshard_ping(c, &rank, &size));
      TSE_CHECK(rank == r && size == np, "rank %d answered as %d of %d", r, rank, size);
      tshard_close(&c);
    }
  }
  const reshard_case *cases = np == 2 ? cases2 : cases4;
  int ncases =
      np == 2 ? (int)(sizeof cases2 / sizeof cases2[0]) : (int)(sizeof cases4 / sizeof cases4[0]);
  single_driver(cases, ncases);
  for (int s = 1; s < NSTRAT; s++)
    TSE_CHECK(verified[s] > 0, "strategy %s was never run and verified", strategies[s]);
  for (int s = 0; s < NSTRAT; s++)
    printf("strategy %-15s verified %d times\n", strategies[s], verified[s]);
  spmd(&cases[0], 0);
  spmd(&cases[0], np == 2 ? 3 : 1);
  tse_stop(&job);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
