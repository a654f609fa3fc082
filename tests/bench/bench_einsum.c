/* bench_einsum.c - tshard-bench-einsum: the einsum engine against raw CBLAS GEMM in the same run.
 *
 * For each case: the forward time (median of several runs, plan made once, no cache), its
 * GFLOP/s, the ratio to a direct CBLAS GEMM loop on data already in GEMM layout (same batch,
 * M, N, K), and backward with the transpose cache against backward without it, with the number
 * of operand transposes the cache avoided. Prints key=value lines.
 *
 * Each case runs twice: with the engine's own choices (operands already GEMM-readable are not
 * transposed: keys <case>_...), and with every operand transposed (ts_einsum_opts.
 * always_transpose: keys <case>_forced_...), which shows what the transpose cache saves when
 * transposes happen. Cached and uncached backward runs alternate, so drift hits both alike.
 * <case>_fwd_warm_cache_ms is forward with a cache the same plan filled before (buffers reused,
 * as in a training loop); <case>_ms is forward without a cache; <case>_step_ms is the sum of the
 * warm-cache forward and the cached backward (a training step's einsum work). Times are medians;
 * the *_best ratios use the fastest run of each side instead. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ts_kernels.h"

typedef struct bench_case {
  const char *name, *eq;
  ts_dtype dt;
  int nd[2];
  int64_t shape[2][4];
  int64_t batch, m, n, k; /* the GEMM the einsum amounts to */
} bench_case;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *alloc_filled(size_t n, ts_dtype dt, unsigned seed) {
  size_t es = ts_dtype_size(dt);
  char *p = malloc(n * es);
  if (p == NULL) {
    fprintf(stderr, "tshard-bench-einsum: out of memory\n");
    exit(1);
  }
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    double v = ((s >> 8) & 0xffff) / 65536.0 - 0.5;
    if (dt == TS_F32)
      ((float *)p)[i] = (float)v;
    else
      ((double *)p)[i] = v;
  }
  return p;
}

static void make_tensor(ts_tensor *t, void *data, ts_dtype dt, int nd, const int64_t *shape) {
  memset(t, 0, sizeof *t);
  ts_layout_plain(&t->layout, dt, nd, shape, NULL);
  int64_t n = ts_layout_numel(&t->layout);
  t->data = data;
  t->bytes = (size_t)n * ts_dtype_size(dt);
}

static int64_t numel(int nd, const int64_t *s) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++)
    n *= s[d];
  return n;
}

static void check(int rc, const ts_error *err, const char *what) {
  if (rc) {
    fprintf(stderr, "tshard-bench-einsum: %s: %s\n", what, err->msg);
    exit(1);
  }
}

/* The raw GEMM loop on data already in GEMM layout: the limit einsum is compared with. */
typedef struct gemm_bufs {
  void *a, *b, *c;
} gemm_bufs;

static void gemm_once(const bench_case *c, const gemm_bufs *g) {
  for (int64_t bi = 0; bi < c->batch; bi++) {
    if (c->dt == TS_F32)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->m, (int)c->n, (int)c->k, 1.0f,
                  (float *)g->a + bi * c->m * c->k, (int)c->k, (float *)g->b + bi * c->k * c->n,
                  (int)c->n, 0.0f, (float *)g->c + bi * c->m * c->n, (int)c->n);
    else
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->m, (int)c->n, (int)c->k, 1.0,
                  (double *)g->a + bi * c->m * c->k, (int)c->k, (double *)g->b + bi * c->k * c->n,
                  (int)c->n, 0.0, (double *)g->c + bi * c->m * c->n, (int)c->n);
  }
}

static void run_case(const bench_case *c, int reps, bool forced) {
  ts_error err = {0};
  const int64_t *shapes[2] = {c->shape[0], c->shape[1]};
  ts_einsum_plan *p = NULL;
  ts_einsum_opts opts = {.path = TS_EINSUM_PATH_GREEDY, .always_transpose = forced};
  check(ts_einsum_plan_create(&p, c->eq, 2, c->nd, shapes, c->dt, &opts, &err), &err, c->name);
  int ond;
  int64_t os[TS_MAX_DIMS];
  ts_einsum_plan_output(p, &ond, os);
  void *a = alloc_filled((size_t)numel(c->nd[0], c->shape[0]), c->dt, 1);
  void *b = alloc_filled((size_t)numel(c->nd[1], c->shape[1]), c->dt, 2);
  void *o = alloc_filled((size_t)numel(ond, os), c->dt, 3);
  void *go = alloc_filled((size_t)numel(ond, os), c->dt, 4);
  void *ga = alloc_filled((size_t)numel(c->nd[0], c->shape[0]), c->dt, 5);
  void *gb = alloc_filled((size_t)numel(c->nd[1], c->shape[1]), c->dt, 6);
  ts_tensor ta, tb, to, tgo, tga, tgb;
  make_tensor(&ta, a, c->dt, c->nd[0], c->shape[0]);
  make_tensor(&tb, b, c->dt, c->nd[1], c->shape[1]);
  make_tensor(&to, o, c->dt, ond, os);
  make_tensor(&tgo, go, c->dt, ond, os);
  make_tensor(&tga, ga, c->dt, c->nd[0], c->shape[0]);
  make_tensor(&tgb, gb, c->dt, c->nd[1], c->shape[1]);
  const ts_tensor *ops[2] = {&ta, &tb}, *grads[2] = {&tga, &tgb};
  double t[16];

  /* Forward, alternating with the raw GEMM so that load changes hit both alike. */
  gemm_bufs gb_;
  gb_.a = alloc_filled((size_t)(c->batch * c->m * c->k), c->dt, 7);
  gb_.b = alloc_filled((size_t)(c->batch * c->k * c->n), c->dt, 8);
  gb_.c = alloc_filled((size_t)(c->batch * c->m * c->n), c->dt, 9);
  double tg[16];
  check(ts_einsum_execute(p, &to, ops, NULL, &err), &err, c->name); /* warm-up */
  gemm_once(c, &gb_);
  for (int r = 0; r < reps; r++) {
    double t0 = now_ms();
    check(ts_einsum_execute(p, &to, ops, NULL, &err), &err, c->name);
    t[r] = now_ms() - t0;
    t0 = now_ms();
    gemm_once(c, &gb_);
    tg[r] = now_ms() - t0;
  }
  double fwd = median(t, reps), gemm = median(tg, reps);
  double fwd_min = t[0], gemm_min = tg[0]; /* median() sorted them */
  free(gb_.a);
  free(gb_.b);
  free(gb_.c);

  /* Backward with the cache (forward filled it, untimed) and without, alternating. */
  ts_einsum_cache *cache = NULL;
  check(ts_einsum_cache_create(&cache, &err), &err, c->name);
  check(ts_einsum_execute(p, &to, ops, cache, &err), &err, c->name);
  ts_einsum_stats s0, s1;
  double tu[16];
  uint64_t tr_cached = 0, tr_uncached = 0;
  /* Warm-up of both (the first run without a cache allocates the plan's workspace). */
  check(ts_einsum_backward(p, &tgo, ops, grads, cache, &err), &err, c->name);
  check(ts_einsum_backward(p, &tgo, ops, grads, NULL, &err), &err, c->name);
  for (int r = 0; r < reps; r++) {
    /* Which of the two runs first alternates too (balanced for an even number of reps). */
    for (int turn = 0; turn < 2; turn++) {
      bool cached = (turn == 0) == (r % 2 == 0);
      ts_einsum_stats_get(&s0);
      double t0 = now_ms();
      check(ts_einsum_backward(p, &tgo, ops, grads, cached ? cache : NULL, &err), &err, c->name);
      double dt = now_ms() - t0;
      ts_einsum_stats_get(&s1);
      if (cached) {
        t[r] = dt;
        tr_cached = s1.operand_transposes - s0.operand_transposes;
      } else {
        tu[r] = dt;
        tr_uncached = s1.operand_transposes - s0.operand_transposes;
      }
    }
  }
  double bwd_cached = median(t, reps), bwd_cached_min = t[0];
  /* Forward again with the cache filled by the same plan: its buffers are reused (the
   * training-loop case). */
  for (int r = 0; r < reps; r++) {
    double t0 = now_ms();
    check(ts_einsum_execute(p, &to, ops, cache, &err), &err, c->name);
    tg[r] = now_ms() - t0;
  }
  double fwd_warm = median(tg, reps);
  double bwd_uncached = median(tu, reps), bwd_uncached_min = tu[0];
  ts_einsum_stats_get(&s0);
  check(ts_einsum_execute(p, &to, ops, NULL, &err), &err, c->name);
  ts_einsum_stats_get(&s1);
  uint64_t tr_fwd = s1.operand_transposes - s0.operand_transposes;

  double flops = ts_einsum_plan_flops(p);
  char k[64];
  snprintf(k, sizeof k, "%s%s", c->name, forced ? "_forced" : "");
  printf("%s_ms=%.3f\n", k, fwd);
  printf("%s_gflops=%.2f\n", k, flops / (fwd * 1e6));
  printf("%s_gemm_ms=%.3f\n", k, gemm);
  printf("%s_vs_gemm=%.3f\n", k, fwd / gemm);
  printf("%s_fwd_warm_cache_ms=%.3f\n", k, fwd_warm);
  printf("%s_fwd_transposes=%llu\n", k, (unsigned long long)tr_fwd);
  printf("%s_bwd_cached_ms=%.3f\n", k, bwd_cached);
  printf("%s_bwd_uncached_ms=%.3f\n", k, bwd_uncached);
  printf("%s_bwd_speedup=%.3f\n", k, bwd_uncached / bwd_cached);
  /* A training step's einsum work: forward filling the cache, backward using it. */
  printf("%s_step_ms=%.3f\n", k, fwd_warm + bwd_cached);
  printf("%s_bwd_transposes_saved=%llu\n", k, (unsigned long long)(tr_uncached - tr_cached));
  /* The same ratios from the fastest run of each: less sensitive to other load on the machine. */
  printf("%s_vs_gemm_best=%.3f\n", k, fwd_min / gemm_min);
  printf("%s_bwd_speedup_best=%.3f\n", k, bwd_uncached_min / bwd_cached_min);
  printf("%s_cache_mib=%.1f\n", k, ts_einsum_cache_bytes(cache) / 1048576.0);
  fflush(stdout);

  ts_einsum_cache_destroy(&cache);
  ts_einsum_plan_destroy(&p);
  free(a);
  free(b);
  free(o);
  free(go);
  free(ga);
  free(gb);
}

int main(int argc, char **argv) {
  static const bench_case cases[] = {
      {"mm_f32", "ij,jk->ik", TS_F32, {2, 2}, {{2048, 2048}, {2048, 2048}}, 1, 2048, 2048, 2048},
      {"mm_f64", "ij,jk->ik", TS_F64, {2, 2}, {{2048, 2048}, {2048, 2048}}, 1, 2048, 2048, 2048},
      {"bmm", "bij,bjk->bik", TS_F32, {3, 3}, {{64, 256, 256}, {64, 256, 256}}, 64, 256, 256, 256},
      {"attn",
       "bhqd,bhkd->bhqk",
       TS_F32,
       {4, 4},
       {{8, 16, 512, 64}, {8, 16, 512, 64}},
       128,
       512,
       512,
       64},
      {"tc3",
       "ijk,jkl->il",
       TS_F32,
       {3, 3},
       {{128, 128, 128}, {128, 128, 128}},
       1,
       128,
       128,
       16384},
      {"tc6",
       "abcd,cdef->abef",
       TS_F32,
       {4, 4},
       {{32, 32, 32, 32}, {32, 32, 32, 32}},
       1,
       1024,
       1024,
       1024},
      {"attn_bqhd",
       "bqhd,bkhd->bhqk",
       TS_F32,
       {4, 4},
       {{8, 512, 16, 64}, {8, 512, 16, 64}},
       128,
       512,
       512,
       64},
      {"kv_grad",
       "bqhd,bqhe->bhde",
       TS_F32,
       {4, 4},
       {{8, 4096, 16, 16}, {8, 4096, 16, 16}},
       128,
       16,
       16,
       4096},
  };
  int reps = 6; /* even: cached and uncached backward each run first equally often */
  const char *only = NULL;
  int modes = 3; /* 1: the engine's choices, 2: forced transposes, 3: both */
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--reps=", 7) == 0)
      reps = atoi(argv[i] + 7);
    else if (strncmp(argv[i], "--case=", 7) == 0)
      only = argv[i] + 7;
    else if (strcmp(argv[i], "--default-only") == 0)
      modes = 1;
    else if (strcmp(argv[i], "--forced-only") == 0)
      modes = 2;
    else {
      fprintf(stderr, "usage: tshard-bench-einsum [--reps=N (1..15)] [--case=NAME] "
                      "[--default-only | --forced-only]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > 15) {
    fprintf(stderr, "tshard-bench-einsum: --reps must be 1 to 15\n");
    return 2;
  }
  printf("reps=%d\n", reps);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (only == NULL || strcmp(only, cases[i].name) == 0) {
      if (modes & 1)
        run_case(&cases[i], reps, false);
      if (modes & 2)
        run_case(&cases[i], reps, true);
    }
  return 0;
}
