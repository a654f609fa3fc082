/* test_relabel.c - relabeling target ranks (ts_plan_relabel), without MPI: on random small
 * reshards (1-D to 3-D tensors, 1-D and 2-D meshes, uneven and explicit splits, replicated and
 * partial sources, groups that overlap in part) the elements kept in place against the best over
 * every permutation (brute force), the greedy assignment never above it and a permutation too;
 * layouts that differ only by a permutation keep everything (nothing moves); a partial source, or
 * nothing to gain, keeps the target's order; and the greedy path of a 4,096-rank mesh. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_main.h"
#include "ts_plan.h"

static uint64_t rng_state = 0x5eed1abe1u;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  ck_assert_msg(ts_attr_parse(text, &a, &err) == TS_OK, "%s: %s", text, err.msg);
  return a;
}

/* Elements of dst's blocks already on their rank under src when position j goes to ranks[j]:
 * straight from the boxes, element by element. */
static int64_t kept_by_elements(const ts_attr *src, const ts_attr *dst, const int *ranks, int ndim,
                                const int64_t *shape, bool partial) {
  if (partial)
    return 0;
  int64_t numel = 1, kept = 0;
  for (int d = 0; d < ndim; d++)
    numel *= shape[d];
  ts_error err;
  for (int j = 0; j < dst->nranks; j++) {
    ts_box b, s;
    bool in_dst, in_src;
    ck_assert_int_eq(ts_attr_rank_box(dst, ndim, shape, dst->ranks[j], &b, &in_dst, &err), TS_OK);
    ck_assert_int_eq(ts_attr_rank_box(src, ndim, shape, ranks[j], &s, &in_src, &err), TS_OK);
    if (!in_src)
      continue;
    for (int64_t e = 0; e < numel; e++) {
      int64_t rest = e;
      bool inside = true;
      for (int d = ndim - 1; d >= 0; d--) {
        int64_t x = rest % shape[d];
        rest /= shape[d];
        inside = inside && x >= b.lo[d] && x < b.hi[d] && x >= s.lo[d] && x < s.hi[d];
      }
      kept += inside;
    }
  }
  return kept;
}

static bool next_permutation(int *v, int n) {
  int i = n - 2;
  while (i >= 0 && v[i] >= v[i + 1])
    i--;
  if (i < 0)
    return false;
  int j = n - 1;
  while (v[j] <= v[i])
    j--;
  int t = v[i];
  v[i] = v[j];
  v[j] = t;
  for (int a = i + 1, b = n - 1; a < b; a++, b--) {
    t = v[a];
    v[a] = v[b];
    v[b] = t;
  }
  return true;
}

static void check_permutation(const ts_attr *dst, const int *ranks) {
  for (int j = 0; j < dst->nranks; j++) {
    int seen = 0;
    for (int k = 0; k < dst->nranks; k++)
      seen += ranks[k] == dst->ranks[j];
    ck_assert_msg(seen == 1, "rank %d chosen %d times", dst->ranks[j], seen);
  }
}

/* A random attribute over n of the 6 world ranks (in a random order) on a 1-D or 2-D mesh. */
static void random_attr(char *buf, size_t cap, int n, int ndim, bool src) {
  int pool[6] = {0, 1, 2, 3, 4, 5};
  for (int i = 5; i > 0; i--) {
    int j = (int)(rnd() % (uint64_t)(i + 1)), t = pool[i];
    pool[i] = pool[j];
    pool[j] = t;
  }
  bool two = n == 4 && rnd() % 2;
  int mesh_ndim = two ? 2 : 1;
  int len = two ? snprintf(buf, cap, "mesh=[2,2]@") : snprintf(buf, cap, "mesh=[%d]@", n);
  for (int i = 0; i < n; i++)
    len += snprintf(buf + len, cap - (size_t)len, "%s%d", i ? "," : "", pool[i]);
  len += snprintf(buf + len, cap - (size_t)len, " placements=[");
  for (int k = 0; k < mesh_ndim; k++) {
    int c = (int)(rnd() % (src ? 5 : 4));
    const char *p = c == 4 ? "P(sum)" : c == 3 ? "R" : NULL;
    if (p)
      len += snprintf(buf + len, cap - (size_t)len, "%s%s", k ? "," : "", p);
    else
      len += snprintf(buf + len, cap - (size_t)len, "%sS(%d)", k ? "," : "",
                      (int)(rnd() % (uint64_t)ndim));
  }
  snprintf(buf + len, cap - (size_t)len, "]");
}

START_TEST(random_against_brute_force) {
  int cases = 0;
  for (int iter = 0; iter < 400; iter++) {
    int ndim = 1 + (int)(rnd() % 3), n_src = 1 + (int)(rnd() % 6), n_dst = 1 + (int)(rnd() % 5);
    int64_t shape[3];
    for (int d = 0; d < ndim; d++)
      shape[d] = 1 + (int64_t)(rnd() % 9);
    char st[200], dt[200];
    random_attr(st, sizeof st, n_src, ndim, true);
    random_attr(dt, sizeof dt, n_dst, ndim, false);
    ts_attr *src = attr(st), *dst = attr(dt);
    ts_error err;
    if (ts_attr_validate(src, ndim, shape, 6, &err) ||
        ts_attr_validate(dst, ndim, shape, 6, &err)) {
      ts_attr_destroy(&src);
      ts_attr_destroy(&dst);
      continue; /* a shard dim sharded twice, say */
    }
    bool partial = strstr(st, "P(") != NULL;
    int ranks[6];
    int64_t kept = -1;
    ck_assert_int_eq(ts_plan_relabel(src, dst, ndim, shape, ranks, &kept, &err), TS_OK);
    check_permutation(dst, ranks);
    ck_assert_int_eq(kept, kept_by_elements(src, dst, ranks, ndim, shape, partial));
    int perm[6], best_perm[6];
    memcpy(perm, dst->ranks, sizeof(int) * (size_t)n_dst);
    for (int i = 0; i < n_dst; i++) /* sorted, to walk every permutation */
      for (int k = i + 1; k < n_dst; k++)
        if (perm[k] < perm[i]) {
          int t = perm[i];
          perm[i] = perm[k];
          perm[k] = t;
        }
    int64_t best = -1;
    do {
      int64_t k = kept_by_elements(src, dst, perm, ndim, shape, partial);
      if (k > best) {
        best = k;
        memcpy(best_perm, perm, sizeof perm);
      }
    } while (next_permutation(perm, n_dst));
    ck_assert_msg(kept == best, "%s -> %s shape %d-D: kept %lld, best %lld", st, dt, ndim,
                  (long long)kept, (long long)best);
    if (partial || best == kept_by_elements(src, dst, dst->ranks, ndim, shape, partial))
      ck_assert_msg(memcmp(ranks, dst->ranks, sizeof(int) * (size_t)n_dst) == 0,
                    "%s -> %s: nothing to gain, yet the order changed", st, dt);
    cases++;
    ts_attr_destroy(&src);
    ts_attr_destroy(&dst);
  }
  ck_assert_int_gt(cases, 150);
}
END_TEST

START_TEST(permuted_layouts_keep_everything) {
  int64_t shape[2] = {12, 10};
  ts_attr *src = attr("mesh=[2,3]@5,1,3,0,4,2 placements=[S(0),S(1)]");
  ts_attr *dst = attr("mesh=[2,3] placements=[S(0),S(1)]");
  int ranks[6];
  int64_t kept;
  ts_error err;
  ck_assert_int_eq(ts_plan_relabel(src, dst, 2, shape, ranks, &kept, &err), TS_OK);
  ck_assert_int_eq(kept, 120);
  int want[6] = {5, 1, 3, 0, 4, 2};
  ck_assert_mem_eq(ranks, want, sizeof want);
  ts_attr_destroy(&src);
  ts_attr_destroy(&dst);
  /* A partial source: its values are final nowhere, the order stays. */
  src = attr("mesh=[4]@3,2,1,0 placements=[P(sum)]");
  dst = attr("mesh=[4] placements=[S(0)]");
  ck_assert_int_eq(ts_plan_relabel(src, dst, 1, shape, ranks, &kept, &err), TS_OK);
  ck_assert_int_eq(kept, 0);
  int same[4] = {0, 1, 2, 3};
  ck_assert_mem_eq(ranks, same, sizeof same);
  ts_attr_destroy(&src);
  ts_attr_destroy(&dst);
  /* Checked against the shape. */
  src = attr("mesh=[4] placements=[S(2)]");
  dst = attr("mesh=[4] placements=[S(0)]");
  ck_assert_int_ne(ts_plan_relabel(src, dst, 2, shape, ranks, &kept, &err), TS_OK);
  ts_attr_destroy(&src);
  ts_attr_destroy(&dst);
}
END_TEST

/* Beyond the exact method: 4,096 ranks reversed, found again by the greedy assignment. */
START_TEST(greedy_large) {
  enum { N = 4096 };
  char *text = malloc(N * 6 + 100);
  int len = sprintf(text, "mesh=[%d]@", N);
  for (int i = 0; i < N; i++)
    len += sprintf(text + len, "%s%d", i ? "," : "", N - 1 - i);
  sprintf(text + len, " placements=[S(0)]");
  ts_attr *src = attr(text), *dst = attr("mesh=[4096] placements=[S(0)]");
  int64_t shape[1] = {N * 3 + 7};
  int *ranks = malloc(N * sizeof *ranks);
  int64_t kept;
  ts_error err;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(ts_plan_relabel(src, dst, 1, shape, ranks, &kept, &err), TS_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ck_assert_int_eq(kept, shape[0]);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(ranks[i], N - 1 - i);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  fprintf(stderr, "relabel of 4096 ranks (greedy): %.1f ms\n", ms);
  free(ranks);
  free(text);
  ts_attr_destroy(&src);
  ts_attr_destroy(&dst);
}
END_TEST

int main(void) {
  Suite *s = suite_create("relabel");
  TCase *tc = tcase_create("relabel");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, random_against_brute_force);
  tcase_add_test(tc, permuted_layouts_keep_everything);
  tcase_add_test(tc, greedy_large);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
