/* test_program_slice.c - the slice and window ops of libtsprogram and the output shape formulas
 * they make
 * (n-k+1, n-2) against plain loops, over random sizes across the buckets: a valid-mode window of
 * two dynamic groups (x[0:n-k+1]) with sums and maxes over it (masked: its padding holds real
 * elements), a 3-tap valid convolution from three slices (n-2), negative bounds (x[-3:], x[:-2])
 * whose start follows the run's true size, steps, 2-D slices, einsums over sliced views (dynamic
 * and static plans), a slice feeding a reshape, the formulas and the masks in the report, and the
 * refusals: a dynamic start with a dynamic length, a step over a dynamic length, static bounds
 * out of range, run-time bounds out of range, a bucket whose padded view would overrun its
 * operand, slices of split dims (placement). Windows: a valid-mode convolution of a dynamic size
 * through an einsum (n-k+1), a max pool, masks, their refusals. Each test has its own cache
 * directory. */
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "program_fixture.h"
#include "ts_program.h"

static void close_to(const double *got, const double *want, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(got[i] - want[i]), s = fabs(want[i]) > 1 ? fabs(want[i]) : 1;
    ck_assert_msg(got[i] == want[i] || d <= 1e-12 * s, "%s[%lld]: got %.17g want %.17g", what,
                  (long long)i, got[i], want[i]);
  }
}

static double value(unsigned *seed) { return (double)(rand_r(seed) % 2001) / 1000.0 - 1.0; }

/* x[0:n-k+1] over two groups: the output formula n-k+1, sums and maxes over it (masked), the
 * window scaled by sum(w), an einsum of two slices */
static const char *window_text =
    "{\"name\":\"window\",\"dims\":{\"n\":{\"min\":1,\"max\":100},\"k\":{\"min\":1,\"max\":20}},"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[\"n\"]},"
    "{\"name\":\"w\",\"dtype\":\"f64\",\"shape\":[\"k\"]}],\"ops\":["
    "{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[\"n-k+1\"]},"
    "{\"out\":\"sw\",\"op\":\"sum\",\"args\":[\"w\"]},"
    "{\"out\":\"ys\",\"op\":\"mul\",\"args\":[\"y\",\"sw\"]},"
    "{\"out\":\"tot\",\"op\":\"sum\",\"args\":[\"y\"]},"
    "{\"out\":\"mx\",\"op\":\"max\",\"args\":[\"y\"]},"
    "{\"out\":\"sh\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[1],\"stop\":[\"n-k+2\"]},"
    "{\"out\":\"dot\",\"op\":\"einsum\",\"args\":[\"y\",\"sh\"],\"eq\":\"i,i->\"}],"
    "\"outputs\":[\"ys\",\"tot\",\"mx\",\"dot\",\"y\"]}";

START_TEST(test_window_two_groups) {
  tsp_program *p = tsp_test_make(window_text, FAST_FLAGS, true);
  char f[64];
  tsp_program_output_formula(p, 0, 0, f, sizeof f);
  ck_assert_str_eq(f, "n-k+1");
  tsp_program_output_formula(p, 4, 0, f, sizeof f);
  ck_assert_str_eq(f, "n-k+1");
  ts_error err = {0};
  char *s = NULL;
  ck_assert_int_eq(tsp_program_show(p, &s, &err), TS_OK);
  ck_assert_msg(strstr(s, "y = slice(x) f64[n-k+1] [0:n-k+1]") && strstr(s, "ys: f64 [n-k+1]"),
                "%s", s);
  /* y's padding holds x's real elements: the sum and the max over it are masked */
  ck_assert_msg(strstr(strstr(s, "tot = sum"), "masked") < strstr(s, "mx = reduce_max"), "%s", s);
  free(s);
  unsigned seed = 11;
  for (int trial = 0; trial < 40; trial++) {
    int64_t k = 2 + rand_r(&seed) % 19, n = k + rand_r(&seed) % (101 - k);
    if (n > 100)
      n = 100;
    double x[100], w[20];
    for (int64_t i = 0; i < n; i++)
      x[i] = value(&seed);
    for (int64_t i = 0; i < k; i++)
      w[i] = value(&seed);
    tsp_tensor in[2] = {{x, TS_F64, 1, {n}}, {w, TS_F64, 1, {k}}}, out[5];
    int64_t shape[8];
    ck_assert_int_eq(tsp_program_output_shape(p, in, 2, 0, shape, &err), TS_OK);
    ck_assert_int_eq(shape[0], n - k + 1);
    ck_assert_msg(tsp_program_run(p, in, 2, out, 5, &err) == TS_OK, "n=%lld k=%lld: %s",
                  (long long)n, (long long)k, err.msg);
    int64_t m = n - k + 1;
    double sw = 0, ys[100], tot = 0, mx = -INFINITY, dot = 0;
    for (int64_t i = 0; i < k; i++)
      sw += w[i];
    for (int64_t i = 0; i < m; i++) {
      ys[i] = x[i] * sw;
      tot += x[i];
      mx = x[i] > mx ? x[i] : mx;
      dot += x[i] * x[i + 1]; /* sh = x[1:n-k+2]: inside x for k >= 2 */
    }
    ck_assert_int_eq(out[0].shape[0], m);
    ck_assert_int_eq(out[4].shape[0], m);
    close_to(out[0].data, ys, m, "ys");
    close_to(out[1].data, &tot, 1, "tot");
    close_to(out[2].data, &mx, 1, "mx");
    close_to(out[3].data, &dot, 1, "dot");
    close_to(out[4].data, x, m, "y");
    for (int i = 0; i < 5; i++)
      ts_pool_free(out[i].data);
  }
  /* k = 1 makes sh = x[1:n+1]: past the end, refused with the values */
  double x[8] = {0}, w[1] = {1};
  tsp_tensor in[2] = {{x, TS_F64, 1, {8}}, {w, TS_F64, 1, {1}}}, out[5];
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 5, &err), TS_BAD_SHAPE);
  ck_assert_msg(strstr(err.msg, "slice 'sh' dim 0") && strstr(err.msg, "n=8, k=1"), "%s", err.msg);
  /* k > n: y would have a negative length */
  in[0].shape[0] = 2;
  double w5[5] = {0};
  in[1].data = w5;
  in[1].shape[0] = 5;
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 5, &err), TS_BAD_SHAPE);
  ck_assert_msg(strstr(err.msg, "slice 'y' dim 0") && strstr(err.msg, "need 0 <= start <= stop"),
                "%s", err.msg);
  tsp_program_destroy(p);
}
END_TEST

/* a 3-tap valid convolution, negative bounds, a step, a 2-D slice and a slice into a reshape */
static const char *conv_text =
    "{\"name\":\"conv\",\"dims\":{\"n\":{\"min\":3,\"max\":200,\"buckets\":{\"step\":32}},"
    "\"m\":{\"min\":2,\"max\":9,\"buckets\":\"pow2\"}},"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[\"n\"]},"
    "{\"name\":\"t\",\"dtype\":\"f64\",\"shape\":[3]},"
    "{\"name\":\"a\",\"dtype\":\"f64\",\"shape\":[\"n\",\"m\"]},"
    "{\"name\":\"s\",\"dtype\":\"f64\",\"shape\":[10]}],\"ops\":["
    "{\"out\":\"x0\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[-2]},"
    "{\"out\":\"x1\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[1],\"stop\":[\"n-1\"]},"
    "{\"out\":\"x2\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[2]},"
    "{\"out\":\"t0\",\"op\":\"slice\",\"args\":[\"t\"],\"start\":[0],\"stop\":[1]},"
    "{\"out\":\"t1\",\"op\":\"slice\",\"args\":[\"t\"],\"start\":[1],\"stop\":[2]},"
    "{\"out\":\"t2\",\"op\":\"slice\",\"args\":[\"t\"],\"start\":[-1]},"
    "{\"out\":\"c0\",\"op\":\"mul\",\"args\":[\"x0\",\"t0\"]},"
    "{\"out\":\"c1\",\"op\":\"mul\",\"args\":[\"x1\",\"t1\"]},"
    "{\"out\":\"c2\",\"op\":\"mul\",\"args\":[\"x2\",\"t2\"]},"
    "{\"out\":\"c01\",\"op\":\"add\",\"args\":[\"c0\",\"c1\"]},"
    "{\"out\":\"conv\",\"op\":\"add\",\"args\":[\"c01\",\"c2\"]},"
    "{\"out\":\"last3\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[-3]},"
    "{\"out\":\"tdot\",\"op\":\"einsum\",\"args\":[\"last3\",\"t\"],\"eq\":\"i,i->\"},"
    "{\"out\":\"ev\",\"op\":\"slice\",\"args\":[\"s\"],\"start\":[1],\"stop\":[8],\"step\":[3]},"
    "{\"out\":\"ab\",\"op\":\"slice\",\"args\":[\"a\"],\"start\":[1,1],\"stop\":[null,\"m-1\"]},"
    "{\"out\":\"ar\",\"op\":\"max\",\"args\":[\"ab\"],\"dims\":[1]},"
    "{\"out\":\"sr\",\"op\":\"slice\",\"args\":[\"s\"],\"start\":[2]},"
    "{\"out\":\"rs\",\"op\":\"reshape\",\"args\":[\"sr\"],\"shape\":[2,4]},"
    "{\"out\":\"rsum\",\"op\":\"sum\",\"args\":[\"rs\"],\"dims\":[1]}],"
    "\"outputs\":[\"conv\",\"tdot\",\"ev\",\"ar\",\"rsum\",\"last3\"]}";

START_TEST(test_conv_negative_step_2d) {
  tsp_program *p = tsp_test_make(conv_text, FAST_FLAGS, true);
  char f[64];
  tsp_program_output_formula(p, 0, 0, f, sizeof f);
  ck_assert_str_eq(f, "n-2");
  tsp_program_output_formula(p, 3, 0, f, sizeof f);
  ck_assert_str_eq(f, "n-1");
  tsp_program_output_formula(p, 2, 0, f, sizeof f);
  ck_assert_str_eq(f, "3");
  unsigned seed = 5;
  ts_error err = {0};
  for (int trial = 0; trial < 30; trial++) {
    int64_t n = 3 + rand_r(&seed) % 198, m = 2 + rand_r(&seed) % 8;
    static double x[200], a[200 * 9];
    double t[3], s[10];
    for (int64_t i = 0; i < n; i++)
      x[i] = value(&seed);
    for (int64_t i = 0; i < n * m; i++)
      a[i] = value(&seed);
    for (int i = 0; i < 3; i++)
      t[i] = value(&seed);
    for (int i = 0; i < 10; i++)
      s[i] = value(&seed);
    tsp_tensor in[4] = {{x, TS_F64, 1, {n}},
                        {t, TS_F64, 1, {3}},
                        {a, TS_F64, 2, {n, m}},
                        {s, TS_F64, 1, {10}}},
               out[6];
    ck_assert_msg(tsp_program_run(p, in, 4, out, 6, &err) == TS_OK, "n=%lld m=%lld: %s",
                  (long long)n, (long long)m, err.msg);
    static double conv[200], ar[200];
    for (int64_t i = 0; i < n - 2; i++)
      conv[i] = x[i] * t[0] + x[i + 1] * t[1] + x[i + 2] * t[2];
    double tdot = x[n - 3] * t[0] + x[n - 2] * t[1] + x[n - 1] * t[2];
    double ev[3] = {s[1], s[4], s[7]}, rsum[2] = {0, 0};
    for (int64_t i = 1; i < n; i++) {
      ar[i - 1] = -INFINITY;
      for (int64_t j = 1; j < m - 1; j++)
        ar[i - 1] = a[i * m + j] > ar[i - 1] ? a[i * m + j] : ar[i - 1];
    }
    for (int r = 0; r < 2; r++)
      for (int j = 0; j < 4; j++)
        rsum[r] += s[2 + 4 * r + j];
    ck_assert_int_eq(out[0].shape[0], n - 2);
    ck_assert_int_eq(out[3].shape[0], n - 1);
    ck_assert_int_eq(out[5].shape[0], 3);
    close_to(out[0].data, conv, n - 2, "conv");
    close_to(out[1].data, &tdot, 1, "tdot");
    close_to(out[2].data, ev, 3, "ev");
    close_to(out[3].data, ar, n - 1, "ar");
    close_to(out[4].data, rsum, 2, "rsum");
    close_to(out[5].data, x + n - 3, 3, "last3");
    for (int i = 0; i < 6; i++)
      ts_pool_free(out[i].data);
  }
  tsp_program_destroy(p);
}
END_TEST

START_TEST(test_refusals) {
  char msg[512];
  const char *head = "{\"dims\":{\"n\":{\"min\":1,\"max\":64},\"k\":{\"min\":1,\"max\":8}},"
                     "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[\"n\",4]},"
                     "{\"name\":\"w\",\"dtype\":\"f32\",\"shape\":[\"k\"]}],\"ops\":[";
  struct {
    const char *op;
    int code;
    const char *needle;
  } cases[] = {
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[\"k\"]}", TS_UNSUPPORTED,
       "static length"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[\"n-1\"],\"step\":[2]}",
       TS_UNSUPPORTED, "step of 2"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[0,1],\"stop\":[null,5]}",
       TS_BAD_SHAPE, "out of range"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[0,-5]}", TS_BAD_SHAPE,
       "out of range"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[0,3],\"stop\":[null,2]}",
       TS_BAD_SHAPE, "before start"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"step\":[0]}", TS_PARSE, "positive int"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[\"q-1\"]}", TS_PARSE,
       "not a dim group"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[1,2,3]}", TS_PARSE, "at most 2"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[1.5]}", TS_PARSE, "wrong type"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[\"1099511627776*n\"],"
       "\"stop\":[\"1099511627776*n+1\"]}",
       TS_OVERFLOW, "beyond 2^40"},
      {"{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[\"n-k\"]}", TS_UNSUPPORTED,
       "static start"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s],\"outputs\":[\"y\"]}", head, cases[i].op);
    int rc = tsp_test_make_fails(text, msg, sizeof msg);
    ck_assert_msg(rc == cases[i].code && strstr(msg, cases[i].needle), "case %zu: %d %s", i, rc,
                  msg);
  }
}
END_TEST

/* stop "k" on a dim of n, with k bucketed more coarsely than n: some buckets' padded view would
 * overrun x; runs in them are refused with the reason, the others run; all ahead builds only the
 * usable buckets */
START_TEST(test_unusable_bucket) {
  const char *text = "{\"dims\":{\"n\":{\"min\":1,\"max\":32,\"buckets\":\"pow2\"},"
                     "\"k\":{\"min\":1,\"max\":30,\"buckets\":{\"step\":10}}},"
                     "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[\"n\"]},"
                     "{\"name\":\"w\",\"dtype\":\"f64\",\"shape\":[\"k\"]}],\"ops\":["
                     "{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[\"k\"]},"
                     "{\"out\":\"z\",\"op\":\"mul\",\"args\":[\"y\",\"w\"]}],\"outputs\":[\"z\"]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, false);
  ts_error err = {0};
  char *s = NULL;
  ck_assert_int_eq(tsp_program_show(p, &s, &err), TS_OK);
  ck_assert_msg(strstr(s, "not usable: slice 'y' dim 0") && strstr(s, "built (compiled)"), "%s", s);
  free(s);
  double x[32], w[30];
  for (int i = 0; i < 32; i++)
    x[i] = i;
  for (int i = 0; i < 30; i++)
    w[i] = 2 * i;
  tsp_tensor out[1];
  /* n = 14 (bucket 16), k = 12 (bucket 20): the view could reach 20 > 16 */
  tsp_tensor bad[2] = {{x, TS_F64, 1, {14}}, {w, TS_F64, 1, {12}}};
  ck_assert_int_eq(tsp_program_run(p, bad, 2, out, 1, &err), TS_UNSUPPORTED);
  ck_assert_msg(strstr(err.msg, "n=16 k=20") && strstr(err.msg, "bucket"), "%s", err.msg);
  /* n = 30 (bucket 32), k = 12 (bucket 20): fine */
  tsp_tensor ok[2] = {{x, TS_F64, 1, {30}}, {w, TS_F64, 1, {12}}};
  ck_assert_msg(tsp_program_run(p, ok, 2, out, 1, &err) == TS_OK, "%s", err.msg);
  ck_assert_int_eq(out[0].shape[0], 12);
  for (int i = 0; i < 12; i++)
    ck_assert(((double *)out[0].data)[i] == (double)i * 2 * i);
  ts_pool_free(out[0].data);
  tsp_program_destroy(p);
}
END_TEST

START_TEST(test_placement_of_slices) {
  const char *text = "{\"dims\":{\"n\":{\"min\":1,\"max\":64}},"
                     "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[\"n\",6]}],\"ops\":["
                     "{\"out\":\"y\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[0,2]},"
                     "{\"out\":\"z\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[\"n-1\"]}],"
                     "\"outputs\":[\"y\",\"z\"]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, true);
  tsp_placement in[1], out[2];
  ts_error err = {0};
  memset(in, 0, sizeof in);
  ck_assert_msg(tsp_program_placement(p, in, 1, out, 2, &err) == TS_OK, "%s", err.msg);
  in[0].split[1] = 1; /* dim 1 split: y slices it */
  ck_assert_int_eq(tsp_program_placement(p, in, 1, out, 2, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "slice 'y'") && strstr(err.msg, "reshard input 'x'"), "%s",
                err.msg);
  memset(in, 0, sizeof in);
  in[0].split[0] = 1; /* dim 0 split: y keeps it whole (split stays), z cuts it: refused */
  ck_assert_int_eq(tsp_program_placement(p, in, 1, out, 2, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "slice 'z'") && strstr(err.msg, "dim 0"), "%s", err.msg);
  tsp_program_destroy(p);
}
END_TEST

/* windows: a valid-mode convolution of a dynamic size k through an einsum over the window view
 * (output n-k+1), a max pool over a static window of 3 (n-2), a masked sum over a window, a
 * window of a 2-D operand; an unusable bucket when k is bucketed coarsely; size > n at run time;
 * a window of a split dim (placement) */
static const char *conv_k_text =
    "{\"name\":\"convk\",\"dims\":{\"n\":{\"min\":3,\"max\":200,\"buckets\":{\"step\":32}},"
    "\"k\":{\"min\":1,\"max\":8,\"buckets\":{\"step\":1}}},"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[\"n\"]},"
    "{\"name\":\"w\",\"dtype\":\"f64\",\"shape\":[\"k\"]},"
    "{\"name\":\"m\",\"dtype\":\"f64\",\"shape\":[\"n\",4]}],\"ops\":["
    "{\"out\":\"win\",\"op\":\"window\",\"args\":[\"x\"],\"dim\":0,\"size\":\"k\"},"
    "{\"out\":\"conv\",\"op\":\"einsum\",\"args\":[\"win\",\"w\"],\"eq\":\"ij,j->i\"},"
    "{\"out\":\"w3\",\"op\":\"window\",\"args\":[\"x\"],\"size\":3},"
    "{\"out\":\"mp\",\"op\":\"max\",\"args\":[\"w3\"],\"dims\":[1]},"
    "{\"out\":\"tot\",\"op\":\"sum\",\"args\":[\"win\"]},"
    "{\"out\":\"m2\",\"op\":\"window\",\"args\":[\"m\"],\"dim\":-2,\"size\":2},"
    "{\"out\":\"ms\",\"op\":\"sum\",\"args\":[\"m2\"],\"dims\":[2]}],"
    "\"outputs\":[\"conv\",\"mp\",\"tot\",\"ms\",\"w3\"]}";

START_TEST(test_window_conv) {
  tsp_program *p = tsp_test_make(conv_k_text, FAST_FLAGS, true);
  char f[64];
  tsp_program_output_formula(p, 0, 0, f, sizeof f);
  ck_assert_str_eq(f, "n-k+1");
  tsp_program_output_formula(p, 1, 0, f, sizeof f);
  ck_assert_str_eq(f, "n-2");
  tsp_program_output_formula(p, 3, 0, f, sizeof f);
  ck_assert_str_eq(f, "n-1");
  ts_error err = {0};
  char *s = NULL;
  ck_assert_int_eq(tsp_program_show(p, &s, &err), TS_OK);
  ck_assert_msg(strstr(s, "win = window(x) f64[n-k+1,k] [dim 0, size k]") &&
                    strstr(strstr(s, "tot = sum"), "masked") < strstr(s, "m2 = window"),
                "%s", s);
  free(s);
  unsigned seed = 3;
  for (int trial = 0; trial < 25; trial++) {
    int64_t k = 1 + rand_r(&seed) % 8, lo = k > 3 ? k : 3, n = lo + rand_r(&seed) % (201 - lo);
    static double x[200], m[800];
    double w[8];
    for (int64_t i = 0; i < n; i++)
      x[i] = value(&seed);
    for (int64_t i = 0; i < 4 * n; i++)
      m[i] = value(&seed);
    for (int64_t i = 0; i < k; i++)
      w[i] = value(&seed);
    tsp_tensor in[3] = {{x, TS_F64, 1, {n}}, {w, TS_F64, 1, {k}}, {m, TS_F64, 2, {n, 4}}}, out[5];
    ck_assert_msg(tsp_program_run(p, in, 3, out, 5, &err) == TS_OK, "n=%lld k=%lld: %s",
                  (long long)n, (long long)k, err.msg);
    static double conv[200], mp[200], ms[800], w3[600];
    double tot = 0;
    for (int64_t i = 0; i + k <= n; i++) {
      conv[i] = 0;
      for (int64_t j = 0; j < k; j++) {
        conv[i] += x[i + j] * w[j];
        tot += x[i + j];
      }
    }
    for (int64_t i = 0; i + 3 <= n; i++) {
      for (int j = 0; j < 3; j++)
        w3[i * 3 + j] = x[i + j];
      mp[i] = x[i];
      for (int j = 1; j < 3; j++)
        mp[i] = x[i + j] > mp[i] ? x[i + j] : mp[i];
    }
    for (int64_t i = 0; i + 1 < n; i++)
      for (int c = 0; c < 4; c++)
        ms[i * 4 + c] = m[i * 4 + c] + m[(i + 1) * 4 + c];
    ck_assert_int_eq(out[0].shape[0], n - k + 1);
    ck_assert_int_eq(out[3].shape[0], n - 1);
    ck_assert_int_eq(out[3].shape[1], 4);
    close_to(out[0].data, conv, n - k + 1, "conv");
    close_to(out[1].data, mp, n - 2, "maxpool");
    close_to(out[2].data, &tot, 1, "tot");
    close_to(out[3].data, ms, 4 * (n - 1), "pairs");
    ck_assert(out[4].ndim == 2 && out[4].shape[0] == n - 2 && out[4].shape[1] == 3);
    close_to(out[4].data, w3, 3 * (n - 2), "window output");
    for (int i = 0; i < 5; i++)
      ts_pool_free(out[i].data);
  }
  double x[4] = {0}, w[8] = {0}, m[16] = {0};
  tsp_tensor in[3] = {{x, TS_F64, 1, {4}}, {w, TS_F64, 1, {6}}, {m, TS_F64, 2, {4, 4}}}, out[5];
  ck_assert_int_eq(tsp_program_run(p, in, 3, out, 5, &err), TS_BAD_SHAPE);
  ck_assert_msg(strstr(err.msg, "window 'win'") && strstr(err.msg, "k = 6"), "%s", err.msg);
  tsp_placement pin[3], pout[5];
  memset(pin, 0, sizeof pin);
  ck_assert_msg(tsp_program_placement(p, pin, 3, pout, 5, &err) == TS_OK, "%s", err.msg);
  pin[2].split[1] = 1; /* m split on its columns: windows over rows are local, the sum too */
  pin[0].split[0] = 0;
  ck_assert_msg(tsp_program_placement(p, pin, 3, pout, 5, &err) == TS_OK, "%s", err.msg);
  ck_assert_int_eq(pout[3].split[1], 1);
  pin[2].split[1] = 0;
  pin[2].split[0] = 1; /* m split on its rows: the window crosses the cut */
  ck_assert_int_eq(tsp_program_placement(p, pin, 3, pout, 5, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "window 'm2'") && strstr(err.msg, "reshard input 'm'"), "%s",
                err.msg);
  tsp_program_destroy(p);

  /* k bucketed in powers of two: k = 3 runs in bucket 4, whose padded window overruns x */
  char text[4096];
  snprintf(text, sizeof text, "%s", conv_k_text);
  char *st = strstr(text, "{\"step\":1}");
  memcpy(st, "\"pow2\"    ", 10);
  p = tsp_test_make(text, FAST_FLAGS, true);
  tsp_tensor in2[3] = {{x, TS_F64, 1, {4}}, {w, TS_F64, 1, {3}}, {m, TS_F64, 2, {4, 4}}};
  ck_assert_int_eq(tsp_program_run(p, in2, 3, out, 5, &err), TS_UNSUPPORTED);
  ck_assert_msg(strstr(err.msg, "window 'win'") && strstr(err.msg, "k=4"), "%s", err.msg);
  in2[1].shape[0] = 2; /* k = 2: an exact bucket */
  ck_assert_msg(tsp_program_run(p, in2, 3, out, 5, &err) == TS_OK, "%s", err.msg);
  for (int i = 0; i < 5; i++)
    ts_pool_free(out[i].data);
  tsp_program_destroy(p);
  char msg[512];
  ck_assert_int_eq(
      tsp_test_make_fails("{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[4]}],"
                          "\"ops\":[{\"out\":\"y\",\"op\":\"window\",\"args\":[\"x\"],"
                          "\"size\":5}],\"outputs\":[\"y\"]}",
                          msg, sizeof msg),
      TS_BAD_SHAPE);
  ck_assert_msg(strstr(msg, "larger than dim 0"), "%s", msg);
  ck_assert_int_eq(
      tsp_test_make_fails("{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[4]}],"
                          "\"ops\":[{\"out\":\"y\",\"op\":\"window\",\"args\":[\"x\"],"
                          "\"dim\":1,\"size\":2}],\"outputs\":[\"y\"]}",
                          msg, sizeof msg),
      TS_PARSE);
  ck_assert_msg(strstr(msg, "\"dim\" must be a dim"), "%s", msg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("program_slice");
  TCase *t = tcase_create("slice");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, tsp_test_setup, tsp_test_teardown);
  tcase_add_test(t, test_window_two_groups);
  tcase_add_test(t, test_conv_negative_step_2d);
  tcase_add_test(t, test_refusals);
  tcase_add_test(t, test_unusable_bucket);
  tcase_add_test(t, test_placement_of_slices);
  tcase_add_test(t, test_window_conv);
  suite_add_tcase(s, t);
  return ts_run_suite(s);
}
