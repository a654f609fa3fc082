/* test_dist_einsum_plan.c - the distributed einsum planner alone (no MPI): known cases whose
 * choice and wire bytes are computed here by hand, the natural and gradient attributes, forced
 * plans, errors, the EXPLAIN, and planning offline for 4096 ranks. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ts_dist_einsum_plan.h"
#include "check_main.h"

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  ck_assert_msg(ts_attr_parse(text, &a, &err) == TS_OK, "%s: %s", text, err.msg);
  return a;
}

static bool attr_is(const ts_attr *a, const char *text) {
  ts_attr *b = attr(text);
  bool eq = ts_attr_equal(a, b);
  ts_attr_destroy(&b);
  return eq;
}

/* Plans a 2-operand einsum of [n,n] f64 matrices. */
static ts_dein_plan *plan2(const char *eq, int64_t n, const char *a, const char *b, const char *out,
                           const char *force, int world, int *rc, ts_error *err) {
  int nd[2] = {2, 2};
  int64_t s[2] = {n, n};
  const int64_t *sh[2] = {s, s};
  ts_attr *at[2] = {attr(a), attr(b)};
  ts_attr *o = out ? attr(out) : NULL;
  ts_dein_opts opts = {o, force, world, 0};
  ts_dein_plan *p = NULL;
  *rc = ts_dein_plan_create(eq, 2, nd, sh, (const ts_attr *const *)at, TS_F64, &opts, &p, err);
  ts_attr_destroy(&at[0]);
  ts_attr_destroy(&at[1]);
  ts_attr_destroy(&o);
  return p;
}

START_TEST(mm_rows_moves_nothing) {
  int rc;
  ts_error err;
  ts_dein_plan *p = plan2("ij,jk->ik", 64, "mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]",
                          "mesh=[4] placements=[S(0)]", NULL, 4, &rc, &err);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  const ts_dein_cand *c = ts_dein_plan_chosen(p);
  ck_assert_int_eq(c->wire_bytes, 0);
  ck_assert(!c->moves[0] && !c->moves[1] && !c->out_move);
  ck_assert(attr_is(c->natural, "mesh=[4] placements=[S(0)]"));
  /* gradients: A's keeps its rows; B's is a partial sum over the row blocks */
  ts_attr *g = NULL;
  ck_assert_int_eq(ts_dein_grad_attr(p, 0, &g, &err), TS_OK);
  ck_assert(attr_is(g, "mesh=[4] placements=[S(0)]"));
  ts_attr_destroy(&g);
  ck_assert_int_eq(ts_dein_grad_attr(p, 1, &g, &err), TS_OK);
  ck_assert(attr_is(g, "mesh=[4] placements=[P(sum)]"));
  ts_attr_destroy(&g);
  ck_assert_int_eq(ts_dein_grad_out_attr(p, &g, &err), TS_OK);
  ck_assert(attr_is(g, "mesh=[4] placements=[S(0)]"));
  ts_attr_destroy(&g);
  ts_dein_plan_destroy(&p);
}
END_TEST

START_TEST(mm_inner_partial_then_reduce_scatter) {
  int rc;
  ts_error err;
  const int64_t n = 64;
  ts_dein_plan *p =
      plan2("ij,jk->ik", n, "mesh=[4] placements=[S(1)]", "mesh=[4] placements=[S(0)]",
            "mesh=[4] placements=[S(0)]", NULL, 4, &rc, &err);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  const ts_dein_cand *c = ts_dein_plan_chosen(p);
  ck_assert(!c->moves[0] && !c->moves[1]);
  ck_assert(attr_is(c->natural, "mesh=[4] placements=[P(sum)]"));
  ck_assert(c->out_move && ts_plan_strategy(c->out_move) == TS_STRATEGY_REDUCE_SCATTER);
  /* each rank sends the 3 quarters of its partial [n,n] that the others own */
  ck_assert_int_eq(c->wire_bytes, 4 * 3 * (n / 4) * n * 8);
  ts_attr *g = NULL;
  ck_assert_int_eq(ts_dein_grad_out_attr(p, &g, &err), TS_OK);
  ck_assert(attr_is(g, "mesh=[4] placements=[R]"));
  ts_attr_destroy(&g);
  ts_dein_plan_destroy(&p);
  /* without a requested attribute the result stays partial: nothing on the wire */
  p = plan2("ij,jk->ik", n, "mesh=[4] placements=[S(1)]", "mesh=[4] placements=[S(0)]", NULL, NULL,
            4, &rc, &err);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  ck_assert_int_eq(ts_dein_plan_chosen(p)->wire_bytes, 0);
  ck_assert(attr_is(ts_dein_plan_chosen(p)->final, "mesh=[4] placements=[P(sum)]"));
  ts_dein_plan_destroy(&p);
}
END_TEST

START_TEST(cheapest_is_chosen_and_explained) {
  int rc;
  ts_error err;
  ts_dein_plan *p = plan2("ij,jk->ik", 96, "mesh=[2,2] placements=[S(0),S(1)]",
                          "mesh=[2,2] placements=[S(0),S(1)]", "mesh=[2,2] placements=[S(0),S(1)]",
                          NULL, 4, &rc, &err);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  const ts_dein_cand *c = ts_dein_plan_chosen(p);
  for (int k = 0; k < p->ncand; k++)
    if (p->cand[k].applies)
      ck_assert_msg(p->cand[k].wire_bytes >= c->wire_bytes, "%s is cheaper than %s",
                    p->cand[k].name, c->name);
  char *text = ts_dein_plan_explain(p);
  ck_assert(text && strstr(text, "chosen: ") && strstr(text, c->name));
  for (int k = 0; k < p->ncand; k++)
    ck_assert_msg(strstr(text, p->cand[k].name), "%s missing from the explain", p->cand[k].name);
  free(text);
  /* forcing another candidate runs that one */
  const char *other = p->cand[p->chosen == 0 ? 1 : 0].name;
  char name[32];
  snprintf(name, sizeof name, "%s", other);
  ts_dein_plan_destroy(&p);
  p = plan2("ij,jk->ik", 96, "mesh=[2,2] placements=[S(0),S(1)]",
            "mesh=[2,2] placements=[S(0),S(1)]", "mesh=[2,2] placements=[S(0),S(1)]", name, 4, &rc,
            &err);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  ck_assert_str_eq(ts_dein_plan_chosen(p)->name, name);
  ck_assert(p->forced);
  ts_dein_plan_destroy(&p);
}
END_TEST

START_TEST(partial_inputs) {
  int rc;
  ts_error err;
  /* P(sum) x R: linear, computed as it is, the result partial */
  ts_dein_plan *p = plan2("ij,jk->ik", 32, "mesh=[4] placements=[P(sum)]",
                          "mesh=[4] placements=[R]", NULL, "as_is", 4, &rc, &err);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  ck_assert(attr_is(ts_dein_plan_chosen(p)->natural, "mesh=[4] placements=[P(sum)]"));
  ts_attr *g = NULL;
  ck_assert_int_eq(ts_dein_grad_attr(p, 0, &g, &err), TS_OK); /* the whole's gradient */
  ck_assert(attr_is(g, "mesh=[4] placements=[R]"));
  ts_attr_destroy(&g);
  ck_assert_int_eq(ts_dein_grad_attr(p, 1, &g, &err), TS_OK);
  ck_assert(attr_is(g, "mesh=[4] placements=[P(sum)]"));
  ts_attr_destroy(&g);
  ts_dein_plan_destroy(&p);
  /* P(max) is not linear: no candidate keeps it */
  p = plan2("ij,jk->ik", 32, "mesh=[4] placements=[P(max)]", "mesh=[4] placements=[R]", NULL,
            "as_is", 4, &rc, &err);
  ck_assert_int_eq(rc, TS_EINSUM_PLAN);
  p = plan2("ij,jk->ik", 32, "mesh=[4] placements=[P(max)]", "mesh=[4] placements=[R]", NULL, NULL,
            4, &rc, &err);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  ck_assert(ts_dein_plan_chosen(p)->moves[0]);
  ts_dein_plan_destroy(&p);
}
END_TEST

START_TEST(errors) {
  int rc;
  ts_error err;
  const char *a = "mesh=[4] placements=[S(0)]", *r = "mesh=[4] placements=[R]";
  struct {
    const char *eq, *force, *out;
    int world, code;
    const char *says;
  } cases[] = {
      {"...j,jk->...k", NULL, NULL, 4, TS_EINSUM, "..."},
      {"ij,jk,kl->il", NULL, NULL, 4, TS_EINSUM, "operands"},
      {"ijk,jk->ik", NULL, NULL, 4, TS_EINSUM, "dims"},
      {"ij,jk->iz", NULL, NULL, 4, TS_EINSUM, "'z'"},
      {"ij,jk->ii", NULL, NULL, 4, TS_EINSUM, "repeated"},
      {"i1,jk->ik", NULL, NULL, 4, TS_EINSUM, "'1'"},
      {"ij,jk->ik", "nope", NULL, 4, TS_EINSUM_PLAN, "candidates"},
      {"ij,jk->ik", NULL, NULL, 2, TS_BAD_ATTRIBUTE, "operand 0"},
      {"ij,jk->ik", NULL, "mesh=[8] placements=[R]", 4, TS_BAD_ATTRIBUTE, "output attribute"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_dein_plan *p =
        plan2(cases[i].eq, 16, a, r, cases[i].out, cases[i].force, cases[i].world, &rc, &err);
    ck_assert_msg(rc == cases[i].code && !p, "%s: %d %s", cases[i].eq, rc, err.msg);
    ck_assert_msg(strstr(err.msg, cases[i].says), "%s: '%s' lacks '%s'", cases[i].eq, err.msg,
                  cases[i].says);
  }
}
END_TEST

START_TEST(offline_4096_ranks) {
  int rc;
  ts_error err;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ts_dein_plan *p =
      plan2("ij,jk->ik", 8192, "mesh=[4096] placements=[S(1)]", "mesh=[4096] placements=[S(0)]",
            "mesh=[4096] placements=[S(0)]", NULL, 4096, &rc, &err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ck_assert_msg(rc == TS_OK, "%s", err.msg);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  ck_assert_msg(ms < 20000, "planning 4096 ranks took %.0f ms", ms);
  const ts_dein_cand *c = ts_dein_plan_chosen(p);
  /* the partial [8192,8192] per rank reduced-scattered: each rank sends 4095/4096 of it */
  ck_assert_str_eq(c->name, "match:0");
  ck_assert_int_eq(c->wire_bytes, (int64_t)4096 * 4095 * 2 * 8192 * 8);
  ts_dein_plan_destroy(&p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("dist_einsum_plan");
  TCase *tc = tcase_create("plan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, mm_rows_moves_nothing);
  tcase_add_test(tc, mm_inner_partial_then_reduce_scatter);
  tcase_add_test(tc, cheapest_is_chosen_and_explained);
  tcase_add_test(tc, partial_inputs);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, offline_4096_ranks);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
