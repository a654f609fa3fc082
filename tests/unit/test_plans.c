/* test_plans.c - the plan cache (shard/plans.c) against fresh plans: the same arguments give the
 * same shared plan, whose EXPLAIN is a fresh plan's; any argument that differs gives another; the
 * least recently used plan goes when the cache is full, and a plan a caller still holds outlives
 * both its eviction and the cache; failures are not kept; bad arguments are refused as
 * ts_plan_create refuses them. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "ts_shard.h"

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  ck_assert_msg(ts_attr_parse(text, &a, &err) == TS_OK, "%s: %s", text, err.msg);
  return a;
}

static ts_plan *get(ts_plan_cache *c, const int64_t *shape, ts_dtype dt, const ts_attr *s,
                    const ts_attr *t, ts_strategy strategy) {
  ts_plan_opts o = {strategy, 1 << 20, 8};
  ts_plan *p = NULL;
  ts_error err;
  ck_assert_msg(ts_plan_cache_get(c, 2, shape, dt, s, t, &o, &p, &err) == TS_OK, "%s", err.msg);
  return p;
}

static void same_explain(const ts_plan *cached, const int64_t *shape, ts_dtype dt, const ts_attr *s,
                         const ts_attr *t, ts_strategy strategy) {
  ts_plan_opts o = {strategy, 1 << 20, 8};
  ts_plan *fresh = NULL;
  ts_error err;
  ck_assert_int_eq(ts_plan_create(2, shape, dt, s, t, &o, &fresh, &err), TS_OK);
  char *a = ts_plan_explain(cached, 0), *b = ts_plan_explain(fresh, 0);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(a, b);
  free(a);
  free(b);
  ts_plan_destroy(&fresh);
}

START_TEST(shared_and_distinct) {
  ts_plan_cache *c = NULL;
  ts_error err;
  ck_assert_int_eq(ts_plan_cache_create(8, &c, &err), TS_OK);
  ts_attr *s0 = attr("mesh=[4] placements=[S(0)]"), *s1 = attr("mesh=[4] placements=[S(1)]");
  ts_attr *s1b = attr("mesh=[4] placements=[S(1)]"), *r = attr("mesh=[2,2] placements=[S(0),R]");
  int64_t shape[2] = {32, 48}, other[2] = {32, 40};
  ts_plan *a = get(c, shape, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  ts_plan *b = get(c, shape, TS_F32, s0, s1b, TS_STRATEGY_AUTO); /* an equal attribute */
  ck_assert_ptr_eq(a, b);
  same_explain(a, shape, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  uint64_t hits = 0, misses = 0;
  ts_plan_cache_counts(c, &hits, &misses);
  ck_assert_uint_eq(hits, 1);
  ck_assert_uint_eq(misses, 1);
  /* Every argument matters. */
  ts_plan *d[5] = {get(c, other, TS_F32, s0, s1, TS_STRATEGY_AUTO),
                   get(c, shape, TS_F64, s0, s1, TS_STRATEGY_AUTO),
                   get(c, shape, TS_F32, s1, s0, TS_STRATEGY_AUTO),
                   get(c, shape, TS_F32, s0, r, TS_STRATEGY_AUTO),
                   get(c, shape, TS_F32, s0, s1, TS_STRATEGY_P2P)};
  for (int i = 0; i < 5; i++) {
    ck_assert_ptr_ne(d[i], a);
    for (int j = 0; j < i; j++)
      ck_assert_ptr_ne(d[i], d[j]);
  }
  ck_assert_int_eq(ts_plan_strategy(d[4]), TS_STRATEGY_P2P);
  same_explain(d[3], shape, TS_F32, s0, r, TS_STRATEGY_AUTO);
  ts_plan_cache_counts(c, &hits, &misses);
  ck_assert_uint_eq(hits, 1);
  ck_assert_uint_eq(misses, 6);
  /* Plans outlive the cache while held. */
  ts_plan_cache_destroy(&c);
  ck_assert_ptr_null(c);
  ts_plan_cache_destroy(&c);
  same_explain(a, shape, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  ts_plan_destroy(&a);
  ts_plan_destroy(&b);
  for (int i = 0; i < 5; i++)
    ts_plan_destroy(&d[i]);
  ts_attr_destroy(&s0);
  ts_attr_destroy(&s1);
  ts_attr_destroy(&s1b);
  ts_attr_destroy(&r);
}
END_TEST

START_TEST(least_recently_used_goes) {
  ts_plan_cache *c = NULL;
  ts_error err;
  ck_assert_int_eq(ts_plan_cache_create(2, &c, &err), TS_OK);
  ts_attr *s0 = attr("mesh=[4] placements=[S(0)]"), *s1 = attr("mesh=[4] placements=[S(1)]");
  int64_t x[2] = {8, 8}, y[2] = {16, 8}, z[2] = {24, 8};
  ts_plan *px = get(c, x, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  ts_plan *py = get(c, y, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  ts_plan *again = get(c, x, TS_F32, s0, s1, TS_STRATEGY_AUTO); /* x is now the recent one */
  ck_assert_ptr_eq(again, px);
  ts_plan *pz = get(c, z, TS_F32, s0, s1, TS_STRATEGY_AUTO); /* y goes */
  ts_plan *x2 = get(c, x, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  ck_assert_ptr_eq(x2, px);
  ts_plan *y2 = get(c, y, TS_F32, s0, s1, TS_STRATEGY_AUTO); /* made again; still valid */
  ck_assert_ptr_ne(y2, py);
  same_explain(py, y, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  same_explain(y2, y, TS_F32, s0, s1, TS_STRATEGY_AUTO);
  uint64_t hits = 0, misses = 0;
  ts_plan_cache_counts(c, &hits, &misses);
  ck_assert_uint_eq(hits, 2);
  ck_assert_uint_eq(misses, 4);
  ts_plan *all[] = {px, py, again, pz, x2, y2};
  for (int i = 0; i < 6; i++)
    ts_plan_destroy(&all[i]);
  ts_plan_cache_destroy(&c);
  ts_attr_destroy(&s0);
  ts_attr_destroy(&s1);
}
END_TEST

START_TEST(refusals_as_fresh) {
  ts_plan_cache *c = NULL;
  ts_error err, fresh;
  ck_assert_int_eq(ts_plan_cache_create(0, &c, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_plan_cache_create(4, &c, &err), TS_OK);
  ts_attr *s0 = attr("mesh=[4] placements=[S(0)]"), *big = attr("mesh=[16] placements=[S(1)]");
  int64_t shape[2] = {8, 8};
  ts_plan_opts o = {TS_STRATEGY_AUTO, 1 << 20, 8};
  ts_plan *p = NULL, *q = NULL;
  for (int round = 0; round < 2; round++) { /* a failure is not kept: the same refusal twice */
    int rc = ts_plan_cache_get(c, 2, shape, TS_F32, s0, big, &o, &p, &err);
    ck_assert_int_eq(rc, ts_plan_create(2, shape, TS_F32, s0, big, &o, &q, &fresh));
    ck_assert_int_ne(rc, TS_OK);
    ck_assert_str_eq(err.msg, fresh.msg);
    ck_assert_ptr_null(p);
  }
  ck_assert_int_eq(ts_plan_cache_get(c, 2, NULL, TS_F32, s0, s0, &o, &p, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_plan_cache_get(c, 2, shape, (ts_dtype)99, s0, s0, &o, &p, &err),
                   TS_BAD_DTYPE);
  /* Without a cache: a fresh plan each time. */
  ck_assert_int_eq(ts_plan_cache_get(NULL, 2, shape, TS_F32, s0, s0, &o, &p, &err), TS_OK);
  ck_assert_int_eq(ts_plan_cache_get(NULL, 2, shape, TS_F32, s0, s0, &o, &q, &err), TS_OK);
  ck_assert_ptr_ne(p, q);
  ts_plan_destroy(&p);
  ts_plan_destroy(&q);
  uint64_t hits = 9, misses = 9;
  ts_plan_cache_counts(c, &hits, &misses);
  ck_assert_uint_eq(hits, 0);
  ts_plan_cache_destroy(&c);
  ts_attr_destroy(&s0);
  ts_attr_destroy(&big);
}
END_TEST

int main(void) {
  Suite *s = suite_create("plans");
  TCase *tc = tcase_create("plans");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, shared_and_distinct);
  tcase_add_test(tc, least_recently_used_goes);
  tcase_add_test(tc, refusals_as_fresh);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
