/* test_einsum_forward.c - the einsum engine against the naive reference: hundreds of random
 * equations (1 to 5 operands, "...", broadcasting, diagonals, reductions, scalars, every dtype,
 * dense and strided operands, both path orders, with and without in-place operands), hand-checked
 * values, BLAS-sized cases, intermediates with more dims than one strided copy takes, and a plan
 * reused across calls. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_einsum_util.h"
#include "check_main.h"

static const ts_dtype all_dtypes[] = {TS_F32, TS_F64, TS_F16, TS_BF16, TS_I32, TS_I64};

/* Runs one case through the engine and the reference; fails with the equation on a mismatch. */
static void run_case(const rand_case *c, rng *r, const ts_einsum_opts *opts) {
  test_tensor ops[TS_EINSUM_MAX_OPERANDS];
  const ts_tensor *op_ptr[TS_EINSUM_MAX_OPERANDS];
  const int64_t *shapes[TS_EINSUM_MAX_OPERANDS];
  for (int i = 0; i < c->n; i++) {
    tt_alloc(&ops[i], c->dt, c->ndim[i], c->shape[i], (test_layout)rng_int(r, 0, TL_COUNT - 1));
    tt_fill(&ops[i], r);
    op_ptr[i] = &ops[i].t;
    shapes[i] = c->shape[i];
  }
  ts_einsum_plan *p = NULL;
  ts_error err = {0};
  int rc = ts_einsum_plan_create(&p, c->eq, c->n, c->ndim, shapes, c->dt, opts, &err);
  ck_assert_msg(rc == TS_OK, "plan '%s' (%s): %s", c->eq, ts_dtype_name(c->dt), err.msg);
  int ond;
  int64_t oshape[TS_MAX_DIMS];
  ts_einsum_plan_output(p, &ond, oshape);
  test_tensor got, want;
  tt_alloc(&got, c->dt, ond, oshape, (test_layout)rng_int(r, 0, TL_COUNT - 1));
  tt_alloc(&want, c->dt, ond, oshape, TL_DENSE);
  /* Garbage in the output first: the engine must overwrite every element. */
  tt_fill(&got, r);
  rc = ts_einsum_execute(p, &got.t, op_ptr, NULL, &err);
  ck_assert_msg(rc == TS_OK, "execute '%s' (%s): %s", c->eq, ts_dtype_name(c->dt), err.msg);
  rc = ts_einsum_reference(c->eq, c->n, op_ptr, &want.t, &err);
  ck_assert_msg(rc == TS_OK, "reference '%s': %s", c->eq, err.msg);
  int64_t where = -1;
  double bad = tt_compare(&got, &want, &where);
  if (bad > 0) {
    char shp[512] = "";
    for (int i = 0; i < c->n; i++) {
      size_t u = strlen(shp);
      snprintf(shp + u, sizeof shp - u, " op%d=[", i);
      for (int d = 0; d < c->ndim[i]; d++) {
        u = strlen(shp);
        snprintf(shp + u, sizeof shp - u, "%s%lld", d ? "," : "", (long long)c->shape[i][d]);
      }
      u = strlen(shp);
      snprintf(shp + u, sizeof shp - u, "]");
    }
    int64_t idx[TS_MAX_DIMS];
    tt_index(&want, where, idx);
    ck_abort_msg("'%s' %s%s path=%d always_transpose=%d: element %lld is %g, reference %g", c->eq,
                 ts_dtype_name(c->dt), shp, (int)opts->path, (int)opts->always_transpose,
                 (long long)where, tt_get(&got, idx), tt_get(&want, idx));
  }
  tt_free(&got);
  tt_free(&want);
  for (int i = 0; i < c->n; i++)
    tt_free(&ops[i]);
  ts_einsum_plan_destroy(&p);
  ck_assert_ptr_null(p);
}

/* 200 random equations per dtype: 1200 in all. */
START_TEST(test_random_equations) {
  ts_dtype dt = all_dtypes[_i];
  rng r = {.s = 1000u + (uint64_t)_i};
  for (int k = 0; k < 200; k++) {
    rand_case c;
    rand_case_make(&c, &r, 5, dt, 40000);
    ts_einsum_opts opts = {.path = (ts_einsum_path)rng_int(&r, 0, 1),
                           .always_transpose = rng_int(&r, 0, 3) == 0};
    run_case(&c, &r, &opts);
  }
}
END_TEST

/* A fixed case from an equation and shapes. */
static void fixed_case(const char *eq, int n, const int *ndim, const int64_t (*shape)[TS_MAX_DIMS],
                       ts_dtype dt, uint64_t seed) {
  rand_case c;
  memset(&c, 0, sizeof c);
  snprintf(c.eq, sizeof c.eq, "%s", eq);
  c.n = n;
  c.dt = dt;
  for (int i = 0; i < n; i++) {
    c.ndim[i] = ndim[i];
    for (int d = 0; d < ndim[i]; d++)
      c.shape[i][d] = shape[i][d];
  }
  rng r = {.s = seed};
  for (int mode = 0; mode < 4; mode++) {
    ts_einsum_opts opts = {.path = (ts_einsum_path)(mode & 1), .always_transpose = mode >= 2};
    run_case(&c, &r, &opts);
  }
}

START_TEST(test_blas_sized) {
  static const struct {
    const char *eq;
    int n;
    int ndim[3];
    int64_t shape[3][TS_MAX_DIMS];
  } cases[] = {
      {"ij,jk->ik", 2, {2, 2}, {{33, 17}, {17, 29}}},
      {"ij,jk->ki", 2, {2, 2}, {{33, 17}, {17, 29}}},
      {"ji,jk->ik", 2, {2, 2}, {{17, 33}, {17, 29}}},
      {"ij,kj->ik", 2, {2, 2}, {{33, 17}, {29, 17}}},
      {"bij,bjk->bik", 2, {3, 3}, {{5, 12, 7}, {5, 7, 9}}},
      {"bhqd,bhkd->bhqk", 2, {4, 4}, {{2, 3, 9, 8}, {2, 3, 7, 8}}},
      {"bqhd,bkhd->bhqk", 2, {4, 4}, {{2, 9, 3, 8}, {2, 7, 3, 8}}},
      {"bqhd,bqhe->bhde", 2, {4, 4}, {{2, 31, 3, 4}, {2, 31, 3, 5}}},
      {"ijk,jkl->il", 2, {3, 3}, {{6, 5, 4}, {5, 4, 7}}},
      {"abcd,cdef->abef", 2, {4, 4}, {{3, 4, 5, 2}, {5, 2, 3, 4}}},
      {"ab,bc,cd->ad", 3, {2, 2, 2}, {{20, 30}, {30, 5}, {5, 40}}},
      {"...ij,...jk", 2, {3, 2}, {{4, 6, 5}, {5, 3}}},
      {"bi,bj->bij", 2, {2, 2}, {{6, 7}, {6, 8}}},
      {"ij,ij->ij", 2, {2, 2}, {{16, 9}, {16, 9}}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int t = 0; t < 2; t++)
      fixed_case(cases[k].eq, cases[k].n, cases[k].ndim, cases[k].shape, t ? TS_F64 : TS_F32,
                 77 + k);
}
END_TEST

/* An intermediate with 10 labels: its transposes exceed TS_MAX_DIMS dims per strided copy. */
START_TEST(test_many_dims_intermediate) {
  int ndim[3] = {5, 5, 5};
  int64_t shape[3][TS_MAX_DIMS];
  for (int i = 0; i < 3; i++)
    for (int d = 0; d < 5; d++)
      shape[i][d] = 2 + (d + i) % 2;
  /* Left to right: abcde x fghij keeps all ten labels, interleaved against the third operand. */
  shape[2][0] = shape[0][0];
  shape[2][1] = shape[1][0];
  shape[2][2] = shape[0][2];
  shape[2][3] = shape[1][2];
  shape[2][4] = shape[1][4];
  fixed_case("abcde,fghij,afchj->bgdie", 3, ndim, (const int64_t(*)[TS_MAX_DIMS])shape, TS_F64, 5);
}
END_TEST

static void set_f64(test_tensor *t, const double *v) {
  int64_t idx[TS_MAX_DIMS];
  for (int64_t e = 0; e < tt_numel(t); e++) {
    tt_index(t, e, idx);
    tt_set(t, idx, v[e]);
  }
}

static double get_e(const test_tensor *t, int64_t e) {
  int64_t idx[TS_MAX_DIMS];
  tt_index(t, e, idx);
  return tt_get(t, idx);
}

START_TEST(test_known_values) {
  ts_error err;
  /* Matrix product, trace, diagonal, dot, outer and a sum, checked by hand. */
  test_tensor a, b, o;
  int64_t s22[2] = {2, 2};
  const double av[4] = {1, 2, 3, 4}, bv[4] = {5, 6, 7, 8};
  tt_alloc(&a, TS_F64, 2, s22, TL_DENSE);
  tt_alloc(&b, TS_F64, 2, s22, TL_COLUMN_MAJOR);
  set_f64(&a, av);
  set_f64(&b, bv);
  const ts_tensor *ab[2] = {&a.t, &b.t};
  tt_alloc(&o, TS_F64, 2, s22, TL_DENSE);
  ck_assert_int_eq(ts_einsum("ij,jk->ik", 2, ab, &o.t, &err), TS_OK);
  ck_assert(get_e(&o, 0) == 19 && get_e(&o, 1) == 22 && get_e(&o, 2) == 43 && get_e(&o, 3) == 50);
  ck_assert_int_eq(ts_einsum("ij,jk->ki", 2, ab, &o.t, &err), TS_OK);
  ck_assert(get_e(&o, 0) == 19 && get_e(&o, 1) == 43 && get_e(&o, 2) == 22 && get_e(&o, 3) == 50);
  tt_free(&o);
  test_tensor s;
  tt_alloc(&s, TS_F64, 0, NULL, TL_DENSE);
  ck_assert_int_eq(ts_einsum("ii", 1, ab, &s.t, &err), TS_OK); /* implicit: trace */
  ck_assert(get_e(&s, 0) == 5);
  ck_assert_int_eq(ts_einsum("ij->", 1, ab, &s.t, &err), TS_OK);
  ck_assert(get_e(&s, 0) == 10);
  ck_assert_int_eq(ts_einsum("ij,ij", 2, ab, &s.t, &err), TS_OK); /* Frobenius product */
  ck_assert(get_e(&s, 0) == 70);
  int64_t s2[1] = {2};
  tt_alloc(&o, TS_F64, 1, s2, TL_PADDED);
  ck_assert_int_eq(ts_einsum("ii->i", 1, ab, &o.t, &err), TS_OK);
  ck_assert(get_e(&o, 0) == 1 && get_e(&o, 1) == 4);
  ck_assert_int_eq(ts_einsum("ij->j", 1, ab, &o.t, &err), TS_OK);
  ck_assert(get_e(&o, 0) == 4 && get_e(&o, 1) == 6);
  tt_free(&o);
  /* Scalars: a 0-d operand scales. */
  const ts_tensor *sa[2] = {&s.t, &a.t};
  tt_alloc(&o, TS_F64, 2, s22, TL_DENSE);
  ck_assert_int_eq(ts_einsum(",ij->ji", 2, sa, &o.t, &err), TS_OK);
  ck_assert(get_e(&o, 0) == 70 && get_e(&o, 1) == 210 && get_e(&o, 2) == 140 &&
            get_e(&o, 3) == 280);
  tt_free(&o);
  /* Broadcasting a size-1 named dim: [2,1] against [2,2] over j. */
  int64_t s21[2] = {2, 1};
  test_tensor c;
  tt_alloc(&c, TS_F64, 2, s21, TL_DENSE);
  const double cv[2] = {10, 100};
  set_f64(&c, cv);
  const ts_tensor *ca[2] = {&c.t, &a.t};
  tt_alloc(&o, TS_F64, 2, s22, TL_DENSE);
  ck_assert_int_eq(ts_einsum("ij,ij->ij", 2, ca, &o.t, &err), TS_OK);
  ck_assert(get_e(&o, 0) == 10 && get_e(&o, 1) == 20 && get_e(&o, 2) == 300 && get_e(&o, 3) == 400);
  tt_free(&o);
  tt_free(&c);
  tt_free(&s);
  tt_free(&a);
  tt_free(&b);
}
END_TEST

/* One call of an "abc,cad->bd" plan on fresh data in the given layouts, against the reference.
 * The output starts as noise: every element must be written. */
static void check_abc_cad(ts_einsum_plan *p, const int64_t *s0, const int64_t *s1, int la, int lb,
                          int lo, ts_einsum_cache *cache, rng *r) {
  ts_error err;
  test_tensor a, b, o, w;
  int64_t os[2] = {5, 3};
  tt_alloc(&a, TS_F32, 3, s0, (test_layout)(la % TL_COUNT));
  tt_alloc(&b, TS_F32, 3, s1, (test_layout)(lb % TL_COUNT));
  tt_alloc(&o, TS_F32, 2, os, (test_layout)(lo % TL_COUNT));
  tt_alloc(&w, TS_F32, 2, os, TL_DENSE);
  tt_fill(&a, r);
  tt_fill(&b, r);
  tt_fill(&o, r);
  const ts_tensor *ops[2] = {&a.t, &b.t};
  ck_assert_int_eq(ts_einsum_execute(p, &o.t, ops, cache, &err), TS_OK);
  ck_assert_int_eq(ts_einsum_reference("abc,cad->bd", 2, ops, &w.t, &err), TS_OK);
  ck_assert(tt_compare(&o, &w, NULL) == 0);
  tt_free(&a);
  tt_free(&b);
  tt_free(&o);
  tt_free(&w);
}

/* One plan, many calls with new data and new layouts; a cache reused across forward calls. */
START_TEST(test_plan_reuse) {
  int ndim[2] = {3, 3};
  int64_t s0[3] = {4, 5, 6}, s1[3] = {6, 4, 3};
  const int64_t *shapes[2] = {s0, s1};
  ts_einsum_plan *p = NULL;
  ts_error err;
  ck_assert_int_eq(ts_einsum_plan_create(&p, "abc,cad->bd", 2, ndim, shapes, TS_F32, NULL, &err),
                   TS_OK);
  ts_einsum_cache *cache = NULL;
  ck_assert_int_eq(ts_einsum_cache_create(&cache, &err), TS_OK);
  rng r = {.s = 9};
  for (int k = 0; k < 12; k++)
    check_abc_cad(p, s0, s1, k, k / 3, k / 2, k % 2 ? cache : NULL, &r);
  /* Forced transposes without a cache go through the plan's workspace, kept across calls:
   * new data and new layouts each time. */
  ts_einsum_opts forced = {.always_transpose = true};
  ts_einsum_plan *pf = NULL;
  ck_assert_int_eq(
      ts_einsum_plan_create(&pf, "abc,cad->bd", 2, ndim, shapes, TS_F32, &forced, &err), TS_OK);
  for (int k = 0; k < 8; k++)
    check_abc_cad(pf, s0, s1, k, k + 2, k + 1, NULL, &r);
  ts_einsum_plan_destroy(&pf);
  char text[512];
  ck_assert_int_gt(ts_einsum_plan_format(p, text, sizeof text), 0);
  ck_assert_ptr_nonnull(strstr(text, "step 0"));
  ck_assert(ts_einsum_plan_flops(p) == 2.0 * 4 * 5 * 6 * 3);
  ts_einsum_cache_destroy(&cache);
  ck_assert_ptr_null(cache);
  ts_einsum_cache_destroy(&cache);
  ts_einsum_plan_destroy(&p);
}
END_TEST

/* The greedy path contracts the cheap pair first; left to right follows the operand order. */
START_TEST(test_path_choice) {
  int ndim[3] = {2, 2, 2};
  int64_t s0[2] = {100, 2}, s1[2] = {2, 100}, s2[2] = {100, 3};
  const int64_t *shapes[3] = {s0, s1, s2};
  ts_einsum_plan *g = NULL, *l = NULL;
  ts_einsum_opts og = {.path = TS_EINSUM_PATH_GREEDY}, ol = {.path = TS_EINSUM_PATH_LEFT_TO_RIGHT};
  ck_assert_int_eq(ts_einsum_plan_create(&g, "ab,bc,cd->ad", 3, ndim, shapes, TS_F64, &og, NULL),
                   TS_OK);
  ck_assert_int_eq(ts_einsum_plan_create(&l, "ab,bc,cd->ad", 3, ndim, shapes, TS_F64, &ol, NULL),
                   TS_OK);
  /* Left to right makes a 100 x 100 intermediate; greedy contracts bc x cd first (2 x 3). */
  ck_assert(ts_einsum_plan_flops(g) < ts_einsum_plan_flops(l));
  char text[512];
  ts_einsum_plan_format(g, text, sizeof text);
  ck_assert_msg(strstr(text, "step 0: op1[bc] x op2[cd]") != NULL, "%s", text);
  ts_einsum_plan_format(l, text, sizeof text);
  ck_assert_msg(strstr(text, "step 0: op0[ab] x op1[bc]") != NULL, "%s", text);
  ts_einsum_plan_destroy(&g);
  ts_einsum_plan_destroy(&l);
}
END_TEST

/* One plan, used by several threads at once, each with its own cache or none. */
typedef struct thread_job {
  const ts_einsum_plan *p;
  uint64_t seed;
  int failures;
} thread_job;

static void *thread_main(void *arg) {
  thread_job *job = arg;
  int64_t s0[3] = {3, 8, 5}, s1[3] = {5, 3, 6}, os[3] = {3, 8, 6};
  rng r = {.s = job->seed};
  ts_einsum_cache *cache = NULL;
  if (ts_einsum_cache_create(&cache, NULL)) {
    job->failures++;
    return NULL;
  }
  for (int k = 0; k < 40; k++) {
    test_tensor a, b, o, w;
    tt_alloc(&a, TS_F64, 3, s0, (test_layout)(k % TL_COUNT));
    tt_alloc(&b, TS_F64, 3, s1, (test_layout)((k + 1) % TL_COUNT));
    tt_alloc(&o, TS_F64, 3, os, TL_DENSE);
    tt_alloc(&w, TS_F64, 3, os, TL_DENSE);
    tt_fill(&a, &r);
    tt_fill(&b, &r);
    const ts_tensor *ops[2] = {&a.t, &b.t};
    /* Every other call without a cache: the threads take turns at the plan's workspace (or run
     * with a temporary cache while another holds it). */
    if (ts_einsum_execute(job->p, &o.t, ops, k % 2 ? cache : NULL, NULL) != TS_OK ||
        ts_einsum_reference("bik,kbj->bij", 2, ops, &w.t, NULL) != TS_OK ||
        tt_compare(&o, &w, NULL) != 0)
      job->failures++;
    tt_free(&a);
    tt_free(&b);
    tt_free(&o);
    tt_free(&w);
  }
  ts_einsum_cache_destroy(&cache);
  return NULL;
}

START_TEST(test_plan_shared_by_threads) {
  int ndim[2] = {3, 3};
  int64_t s0[3] = {3, 8, 5}, s1[3] = {5, 3, 6};
  const int64_t *shapes[2] = {s0, s1};
  ts_einsum_plan *p = NULL;
  ts_einsum_opts opts = {.always_transpose = true};
  ck_assert_int_eq(ts_einsum_plan_create(&p, "bik,kbj->bij", 2, ndim, shapes, TS_F64, &opts, NULL),
                   TS_OK);
  thread_job jobs[4];
  pthread_t th[4];
  for (int t = 0; t < 4; t++) {
    jobs[t] = (thread_job){.p = p, .seed = 100u + (uint64_t)t, .failures = 0};
    ck_assert_int_eq(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
  }
  for (int t = 0; t < 4; t++) {
    pthread_join(th[t], NULL);
    ck_assert_int_eq(jobs[t].failures, 0);
  }
  ts_einsum_plan_destroy(&p);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("einsum_forward");
  TCase *tc = tcase_create("forward");
  tcase_set_timeout(tc, 300); /* sized for the ASan build on a loaded 2-core box */
  tcase_add_loop_test(tc, test_random_equations, 0, 6);
  tcase_add_test(tc, test_blas_sized);
  tcase_add_test(tc, test_many_dims_intermediate);
  tcase_add_test(tc, test_known_values);
  tcase_add_test(tc, test_plan_reuse);
  tcase_add_test(tc, test_path_choice);
  tcase_add_test(tc, test_plan_shared_by_threads);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return ts_run_suite(suite()); }
