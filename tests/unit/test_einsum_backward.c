/* test_einsum_backward.c - einsum gradients: random equations against the independent naive
 * gradient (every dtype, with and without the transpose cache, which must agree), central finite
 * differences on small f64 cases, and the transpose cache itself: with it, backward launches no
 * transpose of an operand (the counters say so); without it, the same results. Also the paths
 * for thin GEMMs over interleaved operands (chunked GEMM loops, operands gathered into the
 * cache), and backward without a cache from several threads (the plan's workspace). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_einsum_util.h"
#include "check_main.h"

static const ts_dtype all_dtypes[] = {TS_F32, TS_F64, TS_F16, TS_BF16, TS_I32, TS_I64};

typedef struct problem {
  rand_case c;
  ts_einsum_plan *p;
  test_tensor ops[TS_EINSUM_MAX_OPERANDS];
  const ts_tensor *op_ptr[TS_EINSUM_MAX_OPERANDS];
  test_tensor out, gout;
  bool dense_operands; /* operands row-major instead of a random layout */
} problem;

static void problem_setup(problem *pr, rng *r, const ts_einsum_opts *opts) {
  const int64_t *shapes[TS_EINSUM_MAX_OPERANDS];
  for (int i = 0; i < pr->c.n; i++) {
    test_layout kind = (test_layout)rng_int(r, 0, TL_COUNT - 1);
    tt_alloc(&pr->ops[i], pr->c.dt, pr->c.ndim[i], pr->c.shape[i],
             pr->dense_operands ? TL_DENSE : kind);
    tt_fill(&pr->ops[i], r);
    pr->op_ptr[i] = &pr->ops[i].t;
    shapes[i] = pr->c.shape[i];
  }
  ts_error err = {0};
  pr->p = NULL;
  int rc =
      ts_einsum_plan_create(&pr->p, pr->c.eq, pr->c.n, pr->c.ndim, shapes, pr->c.dt, opts, &err);
  ck_assert_msg(rc == TS_OK, "plan '%s': %s", pr->c.eq, err.msg);
  int ond;
  int64_t os[TS_MAX_DIMS];
  ts_einsum_plan_output(pr->p, &ond, os);
  tt_alloc(&pr->out, pr->c.dt, ond, os, (test_layout)rng_int(r, 0, TL_COUNT - 1));
  tt_alloc(&pr->gout, pr->c.dt, ond, os, (test_layout)rng_int(r, 0, TL_COUNT - 1));
  tt_fill(&pr->gout, r);
}

static void problem_free(problem *pr) {
  for (int i = 0; i < pr->c.n; i++)
    tt_free(&pr->ops[i]);
  tt_free(&pr->out);
  tt_free(&pr->gout);
  ts_einsum_plan_destroy(&pr->p);
}

static void grads_alloc(problem *pr, test_tensor *g, const ts_tensor **gp, rng *r, bool all) {
  for (int i = 0; i < pr->c.n; i++) {
    /* Some gradients are not asked for (NULL): they must be skipped. */
    bool want = all || rng_int(r, 0, 4) != 0;
    tt_alloc(&g[i], pr->c.dt, pr->c.ndim[i], pr->c.shape[i],
             (test_layout)rng_int(r, 0, TL_COUNT - 1));
    tt_fill(&g[i], r); /* garbage: backward overwrites */
    gp[i] = want ? &g[i].t : NULL;
  }
}

static void check_grad(const problem *pr, int i, const test_tensor *got, const test_tensor *want,
                       const char *what) {
  int64_t where = -1;
  double bad = tt_compare(got, want, &where);
  if (bad > 0) {
    int64_t idx[TS_MAX_DIMS];
    tt_index(want, where, idx);
    ck_abort_msg("'%s' %s %s: gradient %d element %lld is %g, want %g", pr->c.eq,
                 ts_dtype_name(pr->c.dt), what, i, (long long)where, tt_get(got, idx),
                 tt_get(want, idx));
  }
}

/* 100 random equations per dtype (600 in all): the engine's gradients with the cache and without
 * it, against the naive gradient. */
START_TEST(test_random_gradients) {
  ts_dtype dt = all_dtypes[_i];
  rng r = {.s = 5000u + (uint64_t)_i};
  ts_einsum_cache *cache = NULL;
  ck_assert_int_eq(ts_einsum_cache_create(&cache, NULL), TS_OK);
  for (int k = 0; k < 100; k++) {
    problem pr;
    memset(&pr, 0, sizeof pr);
    rand_case_make(&pr.c, &r, 5, dt, 10000);
    ts_einsum_opts opts = {.path = (ts_einsum_path)rng_int(&r, 0, 1),
                           .always_transpose = rng_int(&r, 0, 2) == 0};
    problem_setup(&pr, &r, &opts);
    test_tensor gc[TS_EINSUM_MAX_OPERANDS], gu[TS_EINSUM_MAX_OPERANDS], gr[TS_EINSUM_MAX_OPERANDS];
    const ts_tensor *pc[TS_EINSUM_MAX_OPERANDS], *pu[TS_EINSUM_MAX_OPERANDS],
        *pref[TS_EINSUM_MAX_OPERANDS];
    grads_alloc(&pr, gc, pc, &r, false);
    grads_alloc(&pr, gu, pu, &r, true);
    grads_alloc(&pr, gr, pref, &r, true);
    ts_error err = {0};
    int rc = ts_einsum_execute(pr.p, &pr.out.t, pr.op_ptr, cache, &err);
    ck_assert_msg(rc == TS_OK, "'%s': %s", pr.c.eq, err.msg);
    rc = ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pc, cache, &err);
    ck_assert_msg(rc == TS_OK, "'%s' cached backward: %s", pr.c.eq, err.msg);
    rc = ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pu, NULL, &err);
    ck_assert_msg(rc == TS_OK, "'%s' backward: %s", pr.c.eq, err.msg);
    rc = ts_einsum_reference_backward(pr.c.eq, pr.c.n, pr.op_ptr, &pr.gout.t, pref, &err);
    ck_assert_msg(rc == TS_OK, "'%s' reference backward: %s", pr.c.eq, err.msg);
    for (int i = 0; i < pr.c.n; i++) {
      if (pc[i])
        check_grad(&pr, i, &gc[i], &gr[i], "cached");
      check_grad(&pr, i, &gu[i], &gr[i], "uncached");
    }
    for (int i = 0; i < pr.c.n; i++) {
      tt_free(&gc[i]);
      tt_free(&gu[i]);
      tt_free(&gr[i]);
    }
    problem_free(&pr);
  }
  ts_einsum_cache_destroy(&cache);
}
END_TEST

/* f(x) = sum(grad_out * einsum(x)) is linear in each element, so a central difference is exact
 * up to rounding: it checks the engine's gradient without any gradient formula. */
START_TEST(test_finite_differences) {
  rng r = {.s = 4242};
  for (int k = 0; k < 40; k++) {
    problem pr;
    memset(&pr, 0, sizeof pr);
    rand_case_make(&pr.c, &r, 3, TS_F64, 600);
    ts_einsum_opts opts = {.path = (ts_einsum_path)(k & 1), .always_transpose = (k & 2) != 0};
    problem_setup(&pr, &r, &opts);
    test_tensor g[TS_EINSUM_MAX_OPERANDS];
    const ts_tensor *gp[TS_EINSUM_MAX_OPERANDS];
    grads_alloc(&pr, g, gp, &r, true);
    ts_error err = {0};
    ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, gp, NULL, &err), TS_OK);
    const double h = 0.5;
    for (int i = 0; i < pr.c.n; i++) {
      test_tensor *x = &pr.ops[i];
      for (int64_t e = 0; e < tt_numel(x); e++) {
        int64_t idx[TS_MAX_DIMS];
        tt_index(x, e, idx);
        double x0 = tt_get(x, idx), f[2];
        for (int s = 0; s < 2; s++) {
          tt_set(x, idx, x0 + (s ? -h : h));
          ck_assert_int_eq(ts_einsum_execute(pr.p, &pr.out.t, pr.op_ptr, NULL, &err), TS_OK);
          f[s] = 0;
          for (int64_t o = 0; o < tt_numel(&pr.out); o++) {
            int64_t oi[TS_MAX_DIMS];
            tt_index(&pr.out, o, oi);
            f[s] += tt_get(&pr.out, oi) * tt_get(&pr.gout, oi);
          }
        }
        tt_set(x, idx, x0);
        double fd = (f[0] - f[1]) / (2 * h), an = tt_get(&g[i], idx);
        ck_assert_msg(fabs(fd - an) <= 1e-9 * (1 + fabs(fd)),
                      "'%s' operand %d element %lld: gradient %g, finite difference %g", pr.c.eq, i,
                      (long long)e, an, fd);
      }
    }
    for (int i = 0; i < pr.c.n; i++)
      tt_free(&g[i]);
    problem_free(&pr);
  }
}
END_TEST

/* The cache: forward transposes A and B once; backward with the cache transposes no operand,
 * without it transposes them again; both give the same gradients. */
static void cache_case(const char *eq, int n, const int *ndim, const int64_t (*shape)[TS_MAX_DIMS],
                       bool always_transpose, int want_operand_transposes) {
  problem pr;
  memset(&pr, 0, sizeof pr);
  snprintf(pr.c.eq, sizeof pr.c.eq, "%s", eq);
  pr.c.n = n;
  pr.c.dt = TS_F32;
  for (int i = 0; i < n; i++) {
    pr.c.ndim[i] = ndim[i];
    memcpy(pr.c.shape[i], shape[i], sizeof shape[i]);
  }
  rng r = {.s = 31};
  pr.dense_operands = true;
  ts_einsum_opts opts = {.path = TS_EINSUM_PATH_LEFT_TO_RIGHT,
                         .always_transpose = always_transpose};
  problem_setup(&pr, &r, &opts);
  test_tensor gc[TS_EINSUM_MAX_OPERANDS], gu[TS_EINSUM_MAX_OPERANDS];
  const ts_tensor *pc[TS_EINSUM_MAX_OPERANDS], *pu[TS_EINSUM_MAX_OPERANDS];
  grads_alloc(&pr, gc, pc, &r, true);
  grads_alloc(&pr, gu, pu, &r, true);
  ts_einsum_cache *cache = NULL;
  ts_error err;
  ck_assert_int_eq(ts_einsum_cache_create(&cache, &err), TS_OK);
  ts_einsum_stats s0, s1, s2, s3;
  /* A first forward fills the cache; the second reuses its buffers. */
  ck_assert_int_eq(ts_einsum_execute(pr.p, &pr.out.t, pr.op_ptr, cache, &err), TS_OK);
  size_t bytes = ts_einsum_cache_bytes(cache);
  ts_einsum_stats_get(&s0);
  ck_assert_int_eq(ts_einsum_execute(pr.p, &pr.out.t, pr.op_ptr, cache, &err), TS_OK);
  ck_assert_uint_eq(ts_einsum_cache_bytes(cache), bytes);
  ts_einsum_stats_get(&s1);
  ck_assert_msg((int)(s1.operand_transposes - s0.operand_transposes) == want_operand_transposes,
                "'%s': forward transposed %d operands, want %d", eq,
                (int)(s1.operand_transposes - s0.operand_transposes), want_operand_transposes);
  if (want_operand_transposes > 0)
    ck_assert_uint_gt(ts_einsum_cache_bytes(cache), 0);
  ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pc, cache, &err), TS_OK);
  ts_einsum_stats_get(&s2);
  ck_assert_msg(s2.operand_transposes == s1.operand_transposes,
                "'%s': backward with the cache transposed %d operands", eq,
                (int)(s2.operand_transposes - s1.operand_transposes));
  ck_assert_uint_le(s2.grad_out_transposes - s1.grad_out_transposes, 1);
  /* The cache serves any number of backward calls. */
  ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pc, cache, &err), TS_OK);
  ts_einsum_stats_get(&s2);
  ck_assert_uint_eq(s2.operand_transposes, s1.operand_transposes);
  ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pu, NULL, &err), TS_OK);
  ts_einsum_stats_get(&s3);
  ck_assert_int_eq((int)(s3.operand_transposes - s2.operand_transposes), want_operand_transposes);
  /* Same arithmetic on the same data: the gradients agree exactly. */
  for (int i = 0; i < n; i++)
    for (int64_t e = 0; e < tt_numel(&gc[i]); e++) {
      int64_t idx[TS_MAX_DIMS];
      tt_index(&gc[i], e, idx);
      ck_assert(tt_get(&gc[i], idx) == tt_get(&gu[i], idx));
    }
  /* A cache filled for other operands (or another plan) is refused. */
  test_tensor other;
  tt_alloc(&other, TS_F32, ndim[0], shape[0], TL_DENSE);
  const ts_tensor *ops2[TS_EINSUM_MAX_OPERANDS];
  memcpy(ops2, pr.op_ptr, sizeof ops2);
  ops2[0] = &other.t;
  ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, ops2, pc, cache, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "cache"));
  ts_einsum_cache *empty = NULL;
  ck_assert_int_eq(ts_einsum_cache_create(&empty, &err), TS_OK);
  ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pc, empty, &err),
                   TS_INVALID_ARGUMENT);
  ts_einsum_cache_destroy(&empty);
  tt_free(&other);
  for (int i = 0; i < n; i++) {
    tt_free(&gc[i]);
    tt_free(&gu[i]);
  }
  ts_einsum_cache_destroy(&cache);
  problem_free(&pr);
}

START_TEST(test_transpose_cache) {
  {
    /* Batch labels between the matrix dims: read in place (the GEMM loop walks the batch), or,
     * forced, transposed once by forward and never again by backward. */
    int nd[2] = {4, 4};
    int64_t s[2][TS_MAX_DIMS] = {{2, 9, 3, 8}, {2, 7, 3, 8}};
    cache_case("bqhd,bkhd->bhqk", 2, nd, s, false, 0);
    cache_case("bqhd,bkhd->bhqk", 2, nd, s, true, 2);
    int64_t kv[2][TS_MAX_DIMS] = {{2, 33, 3, 4}, {2, 33, 3, 5}};
    cache_case("bqhd,bqhe->bhde", 2, nd, kv, false, 0);
    cache_case("bqhd,bqhe->bhde", 2, nd, kv, true, 2);
    /* The batch label innermost in A: no BLAS matrix there, so A is transposed, B is not. */
    int64_t bi[2][TS_MAX_DIMS] = {{5, 6, 2, 3}, {3, 4, 6, 2}};
    cache_case("ijkb,bmjk->ibm", 2, nd, bi, false, 1);
  }
  {
    /* Already GEMM-ready operands are read in place: nothing to transpose, nothing to cache but
     * the layout. Forced transposes go through the cache. */
    int nd[2] = {2, 2};
    int64_t s[2][TS_MAX_DIMS] = {{12, 7}, {7, 5}};
    cache_case("ij,jk->ik", 2, nd, s, true, 2);
  }
  {
    /* A chain: every step's A and B come from the cache, intermediates included. */
    int nd[3] = {2, 2, 2};
    int64_t s[3][TS_MAX_DIMS] = {{6, 5}, {5, 4}, {4, 3}};
    cache_case("ab,bc,cd->da", 3, nd, s, true, 4);
    int nd4[4] = {3, 2, 2, 1};
    int64_t s4[4][TS_MAX_DIMS] = {{3, 4, 2}, {2, 5}, {5, 4}, {3}};
    cache_case("iab,bc,ca,i->ia", 4, nd4, s4, true, 6);
  }
}
END_TEST

/* Thin GEMMs over interleaved batch elements (attention-style [b,q,h,d] operands read per
 * (b,h)): the GEMM loops run in chunks of the long dim (K for the kv gradient, M or N for the
 * others, with a tail chunk: q = 1100 is no multiple of the chunk), and with a cache the large
 * strided operands are gathered into it (want_gathered of them), so backward with the cache
 * transposes nothing; without a cache, backward reads them in place. Contiguous thin GEMMs too
 * large for one thread's call are chunked as well. Every result against the naive reference, f32
 * and f64. */
static void thin_case(const char *eq, const int64_t (*shape)[TS_MAX_DIMS], ts_dtype dt,
                      int want_gathered) {
  problem pr;
  memset(&pr, 0, sizeof pr);
  snprintf(pr.c.eq, sizeof pr.c.eq, "%s", eq);
  pr.c.n = 2;
  pr.c.dt = dt;
  for (int i = 0; i < 2; i++) {
    pr.c.ndim[i] = 4;
    memcpy(pr.c.shape[i], shape[i], sizeof shape[i]);
  }
  rng r = {.s = 77};
  pr.dense_operands = true;
  problem_setup(&pr, &r, NULL);
  test_tensor want, gc[2], gu[2], gr[2];
  const ts_tensor *pc[2], *pu[2], *pref[2];
  int ond;
  int64_t os[TS_MAX_DIMS];
  ts_einsum_plan_output(pr.p, &ond, os);
  tt_alloc(&want, dt, ond, os, TL_DENSE);
  grads_alloc(&pr, gc, pc, &r, true);
  grads_alloc(&pr, gu, pu, &r, true);
  grads_alloc(&pr, gr, pref, &r, true);
  ts_error err = {0};
  ck_assert_int_eq(ts_einsum_reference(eq, 2, pr.op_ptr, &want.t, &err), TS_OK);
  ck_assert_int_eq(ts_einsum_reference_backward(eq, 2, pr.op_ptr, &pr.gout.t, pref, &err), TS_OK);
  ts_einsum_stats s0, s1;

  /* Forward without a cache: in place, chunked. */
  ts_einsum_stats_get(&s0);
  ck_assert_int_eq(ts_einsum_execute(pr.p, &pr.out.t, pr.op_ptr, NULL, &err), TS_OK);
  ts_einsum_stats_get(&s1);
  ck_assert_msg(tt_compare(&pr.out, &want, NULL) == 0, "'%s' %s: forward", eq, ts_dtype_name(dt));
  ck_assert_uint_eq(s1.operand_transposes, s0.operand_transposes);
  ck_assert_msg(s1.chunked_gemms > s0.chunked_gemms, "'%s': the forward GEMM was not chunked", eq);

  /* With a cache: the strided operands gathered, twice (the second reuses the buffers). */
  ts_einsum_cache *cache = NULL;
  ck_assert_int_eq(ts_einsum_cache_create(&cache, &err), TS_OK);
  for (int k = 0; k < 2; k++) {
    ts_einsum_stats_get(&s0);
    tt_fill(&pr.out, &r);
    ck_assert_int_eq(ts_einsum_execute(pr.p, &pr.out.t, pr.op_ptr, cache, &err), TS_OK);
    ts_einsum_stats_get(&s1);
    ck_assert(tt_compare(&pr.out, &want, NULL) == 0);
    ck_assert_int_eq((int)(s1.operand_transposes - s0.operand_transposes), want_gathered);
  }
  ts_einsum_stats_get(&s0);
  ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pc, cache, &err), TS_OK);
  ts_einsum_stats_get(&s1);
  ck_assert_uint_eq(s1.operand_transposes, s0.operand_transposes);
  ck_assert_msg(s1.chunked_gemms > s0.chunked_gemms, "'%s': no backward GEMM was chunked", eq);
  /* Without a cache, twice (in place, through the plan's workspace), then a forward without a
   * cache on the same workspace. */
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 2; i++)
      tt_fill(&gu[i], &r);
    ts_einsum_stats_get(&s0);
    ck_assert_int_eq(ts_einsum_backward(pr.p, &pr.gout.t, pr.op_ptr, pu, NULL, &err), TS_OK);
    ts_einsum_stats_get(&s1);
    ck_assert_uint_eq(s1.operand_transposes, s0.operand_transposes);
    ck_assert_uint_gt(s1.chunked_gemms, s0.chunked_gemms);
    for (int i = 0; i < 2; i++)
      check_grad(&pr, i, &gu[i], &gr[i], "uncached");
  }
  for (int i = 0; i < 2; i++)
    check_grad(&pr, i, &gc[i], &gr[i], "cached");
  tt_fill(&pr.out, &r);
  ck_assert_int_eq(ts_einsum_execute(pr.p, &pr.out.t, pr.op_ptr, NULL, &err), TS_OK);
  ck_assert(tt_compare(&pr.out, &want, NULL) == 0);
  ts_einsum_cache_destroy(&cache);
  for (int i = 0; i < 2; i++) {
    tt_free(&gc[i]);
    tt_free(&gu[i]);
    tt_free(&gr[i]);
  }
  tt_free(&want);
  problem_free(&pr);
}

START_TEST(test_thin_interleaved) {
  static const int64_t kv[2][TS_MAX_DIMS] = {{2, 1100, 8, 16}, {2, 1100, 8, 16}};
  static const int64_t pv[2][TS_MAX_DIMS] = {{2, 1100, 8, 16}, {2, 8, 16, 16}};
  static const int64_t pt[2][TS_MAX_DIMS] = {{2, 8, 16, 16}, {2, 1100, 8, 16}};
  /* h = 1: nothing interleaved, but GEMMs OpenBLAS would thread (16 x 16 x 3000): K chunks. */
  static const int64_t ct[2][TS_MAX_DIMS] = {{4, 3000, 1, 16}, {4, 3000, 1, 16}};
  /* Enough work for the chunked batch to be split over threads (at least 2^22 multiply-adds
   * each), with more threads asked for than this machine may have. */
  static const int64_t kt[2][TS_MAX_DIMS] = {{4, 1100, 8, 16}, {4, 1100, 8, 16}};
  static const int64_t cbig[2][TS_MAX_DIMS] = {{12, 3000, 1, 16}, {12, 3000, 1, 16}};
  for (int t = 0; t < 2; t++) {
    ts_dtype dt = t ? TS_F64 : TS_F32;
    thin_case("bqhd,bqhe->bhde", kv, dt, 2); /* K chunks; both operands gathered */
    thin_case("bqhd,bhde->bqhe", pv, dt, 1); /* M chunks (written in place too) */
    thin_case("bhde,bqhd->bheq", pt, dt, 1); /* N chunks */
    thin_case("bqhd,bqhe->bhde", ct, dt, 0);
  }
  ts_kernels_set_threads(4);
  thin_case("bqhd,bqhe->bhde", kt, TS_F32, 2);
  thin_case("bqhd,bqhe->bhde", cbig, TS_F64, 0);
  ts_kernels_set_threads(0);
}
END_TEST

/* One plan, backward without a cache from several threads at once: they take turns at the
 * plan's workspace or use a temporary cache; every gradient against the reference. */
typedef struct grad_job {
  const ts_einsum_plan *p;
  const char *eq;
  uint64_t seed;
  int failures;
} grad_job;

static void *grad_thread(void *arg) {
  grad_job *job = arg;
  int64_t s0[3] = {4, 6, 5}, s1[3] = {5, 4, 7}, os[3] = {4, 6, 7};
  const int64_t *shape[2] = {s0, s1};
  rng r = {.s = job->seed};
  for (int k = 0; k < 30; k++) {
    test_tensor op[2], go, g[2], want[2];
    const ts_tensor *ops[2], *gp[2], *wp[2];
    for (int i = 0; i < 2; i++) {
      tt_alloc(&op[i], TS_F64, 3, shape[i], (test_layout)((k + i) % TL_COUNT));
      tt_fill(&op[i], &r);
      tt_alloc(&g[i], TS_F64, 3, shape[i], (test_layout)((k + 2 * i + 1) % TL_COUNT));
      tt_fill(&g[i], &r);
      tt_alloc(&want[i], TS_F64, 3, shape[i], TL_DENSE);
      ops[i] = &op[i].t;
      gp[i] = &g[i].t;
      wp[i] = &want[i].t;
    }
    tt_alloc(&go, TS_F64, 3, os, (test_layout)(k % TL_COUNT));
    tt_fill(&go, &r);
    if (ts_einsum_backward(job->p, &go.t, ops, gp, NULL, NULL) != TS_OK ||
        ts_einsum_reference_backward(job->eq, 2, ops, &go.t, wp, NULL) != TS_OK ||
        tt_compare(&g[0], &want[0], NULL) != 0 || tt_compare(&g[1], &want[1], NULL) != 0)
      job->failures++;
    for (int i = 0; i < 2; i++) {
      tt_free(&op[i]);
      tt_free(&g[i]);
      tt_free(&want[i]);
    }
    tt_free(&go);
  }
  return NULL;
}

START_TEST(test_backward_shared_by_threads) {
  const char *eq = "bik,kbj->bij";
  int ndim[2] = {3, 3};
  int64_t s0[3] = {4, 6, 5}, s1[3] = {5, 4, 7};
  const int64_t *shapes[2] = {s0, s1};
  ts_einsum_plan *p = NULL;
  ts_einsum_opts opts = {.always_transpose = true};
  ck_assert_int_eq(ts_einsum_plan_create(&p, eq, 2, ndim, shapes, TS_F64, &opts, NULL), TS_OK);
  grad_job jobs[3];
  pthread_t th[3];
  for (int t = 0; t < 3; t++) {
    jobs[t] = (grad_job){.p = p, .eq = eq, .seed = 300u + (uint64_t)t, .failures = 0};
    ck_assert_int_eq(pthread_create(&th[t], NULL, grad_thread, &jobs[t]), 0);
  }
  for (int t = 0; t < 3; t++) {
    pthread_join(th[t], NULL);
    ck_assert_int_eq(jobs[t].failures, 0);
  }
  ts_einsum_plan_destroy(&p);
}
END_TEST

START_TEST(test_backward_errors) {
  int nd[2] = {2, 2};
  int64_t s0[2] = {2, 3}, s1[2] = {3, 4}, so[2] = {2, 4};
  const int64_t *shapes[2] = {s0, s1};
  ts_einsum_plan *p = NULL;
  ts_error err;
  ck_assert_int_eq(ts_einsum_plan_create(&p, "ij,jk->ik", 2, nd, shapes, TS_F64, NULL, &err),
                   TS_OK);
  double a[6] = {0}, b[12] = {0}, g[8] = {0}, ga[6], gb[12];
  ts_tensor ta = {a, sizeof a, {0}}, tb = {b, sizeof b, {0}}, tg = {g, sizeof g, {0}};
  ts_tensor tga = {ga, sizeof ga, {0}}, tgb = {gb, sizeof gb, {0}};
  ts_layout_plain(&ta.layout, TS_F64, 2, s0, NULL);
  ts_layout_plain(&tb.layout, TS_F64, 2, s1, NULL);
  ts_layout_plain(&tg.layout, TS_F64, 2, so, NULL);
  ts_layout_plain(&tga.layout, TS_F64, 2, s0, NULL);
  ts_layout_plain(&tgb.layout, TS_F64, 2, s1, NULL);
  const ts_tensor *ops[2] = {&ta, &tb};
  const ts_tensor *grads[2] = {&tga, &tgb};
  const ts_tensor *wrong[2] = {&tgb, &tga};
  ck_assert_int_eq(ts_einsum_backward(p, &tg, ops, grads, NULL, &err), TS_OK);
  ck_assert_int_eq(ts_einsum_backward(p, &tg, ops, wrong, NULL, &err), TS_BAD_SHAPE);
  ck_assert_ptr_nonnull(strstr(err.msg, "gradient 0 dim 0 has size 3"));
  ck_assert_int_eq(ts_einsum_backward(p, &ta, ops, grads, NULL, &err), TS_BAD_SHAPE);
  ck_assert_ptr_nonnull(strstr(err.msg, "grad_out 0"));
  ck_assert_int_eq(ts_einsum_backward(p, &tg, ops, NULL, NULL, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_einsum_backward(NULL, &tg, ops, grads, NULL, &err), TS_INVALID_ARGUMENT);
  /* A cache filled by another plan is refused. */
  ts_einsum_plan *q = NULL;
  ck_assert_int_eq(ts_einsum_plan_create(&q, "ij,jk->ki", 2, nd, shapes, TS_F64, NULL, &err),
                   TS_OK);
  ts_einsum_cache *c = NULL;
  ck_assert_int_eq(ts_einsum_cache_create(&c, &err), TS_OK);
  double o[8];
  ts_tensor to = {o, sizeof o, {0}};
  int64_t sq[2] = {4, 2};
  ts_layout_plain(&to.layout, TS_F64, 2, sq, NULL);
  ck_assert_int_eq(ts_einsum_execute(q, &to, ops, c, &err), TS_OK);
  ck_assert_int_eq(ts_einsum_backward(p, &tg, ops, grads, c, &err), TS_INVALID_ARGUMENT);
  ts_einsum_cache_destroy(&c);
  ts_einsum_cache_destroy(&c);
  ts_einsum_cache_destroy(NULL);
  ts_einsum_plan_destroy(&q);
  ts_einsum_plan_destroy(&p);
}
END_TEST

/* A cache answers only for the views its forward call saw: the same buffer seen through other
 * strides or another offset is another operand (refused, never wrong gradients); with the same
 * views the gradients match naive loops. A byte offset misaligned for the dtype is refused. */
START_TEST(test_cache_other_view) {
  int nd[2] = {2, 2};
  int64_t s3[2] = {3, 3};
  const int64_t *shapes[2] = {s3, s3};
  ts_einsum_plan *p = NULL;
  ts_error err;
  ck_assert_int_eq(ts_einsum_plan_create(&p, "ij,jk->ik", 2, nd, shapes, TS_F32, NULL, &err),
                   TS_OK);
  float x[12], y[9], g[9], o[9], gx[9], gy[9];
  for (int i = 0; i < 12; i++)
    x[i] = (float)(i % 5) - 2.0f;
  for (int i = 0; i < 9; i++) {
    y[i] = (float)(i % 4) + 1.0f;
    g[i] = (float)(i % 3) - 1.0f;
  }
  ts_tensor tx = {x, sizeof x, {0}}, ty = {y, sizeof y, {0}}, tg = {g, sizeof g, {0}};
  ts_tensor to = {o, sizeof o, {0}}, tgx = {gx, sizeof gx, {0}}, tgy = {gy, sizeof gy, {0}};
  ts_layout_plain(&tx.layout, TS_F32, 2, s3, NULL);
  ts_layout_plain(&ty.layout, TS_F32, 2, s3, NULL);
  ts_layout_plain(&tg.layout, TS_F32, 2, s3, NULL);
  ts_layout_plain(&to.layout, TS_F32, 2, s3, NULL);
  ts_layout_plain(&tgx.layout, TS_F32, 2, s3, NULL);
  ts_layout_plain(&tgy.layout, TS_F32, 2, s3, NULL);
  const ts_tensor *ops[2] = {&tx, &ty};
  const ts_tensor *grads[2] = {&tgx, &tgy};
  ts_einsum_cache *c = NULL;
  ck_assert_int_eq(ts_einsum_cache_create(&c, &err), TS_OK);
  ck_assert_int_eq(ts_einsum_execute(p, &to, ops, c, &err), TS_OK);
  /* X transposed (strides {1,3}), then X one row further on (offset 12 bytes): refused. */
  ts_tensor tv = tx;
  tv.layout.strides[0] = 1;
  tv.layout.strides[1] = 3;
  const ts_tensor *vops[2] = {&tv, &ty};
  ck_assert_int_eq(ts_einsum_backward(p, &tg, vops, grads, c, &err), TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "cache"));
  tv = tx;
  tv.layout.offset = 3 * (int64_t)sizeof(float);
  ck_assert_int_eq(ts_einsum_backward(p, &tg, vops, grads, c, &err), TS_INVALID_ARGUMENT);
  /* The views of the forward call: right gradients, dX = dO Y^T and dY = X^T dO. */
  ck_assert_int_eq(ts_einsum_backward(p, &tg, ops, grads, c, &err), TS_OK);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      float wx = 0, wy = 0;
      for (int k = 0; k < 3; k++) {
        wx += g[i * 3 + k] * y[j * 3 + k];
        wy += x[k * 3 + i] * g[k * 3 + j];
      }
      ck_assert_float_eq_tol(gx[i * 3 + j], wx, 1e-5f);
      ck_assert_float_eq_tol(gy[i * 3 + j], wy, 1e-5f);
    }
  /* A byte offset that is not a multiple of 4 for f32, forward or backward: refused. */
  tv = tx;
  tv.layout.offset = 2;
  ck_assert_int_eq(ts_einsum_execute(p, &to, vops, NULL, &err), TS_BAD_LAYOUT);
  ck_assert_ptr_nonnull(strstr(err.msg, "multiple"));
  ck_assert_int_eq(ts_einsum_backward(p, &tg, vops, grads, NULL, &err), TS_BAD_LAYOUT);
  ck_assert_int_eq(ts_layout_check(&tv.layout, sizeof x, false, &err), TS_BAD_LAYOUT);
  ts_einsum_cache_destroy(&c);
  ts_einsum_plan_destroy(&p);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("einsum_backward");
  TCase *tc = tcase_create("backward");
  tcase_set_timeout(tc, 300); /* sized for the ASan build on a loaded 2-core box */
  tcase_add_loop_test(tc, test_random_gradients, 0, 6);
  tcase_add_test(tc, test_finite_differences);
  tcase_add_test(tc, test_transpose_cache);
  tcase_add_test(tc, test_thin_interleaved);
  tcase_add_test(tc, test_backward_shared_by_threads);
  tcase_add_test(tc, test_backward_errors);
  tcase_add_test(tc, test_cache_other_view);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return ts_run_suite(suite()); }
