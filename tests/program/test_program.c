/* test_program.c - libtsprogram against naive references: random elementwise and reduction
 * programs (broadcasting, literals, transposes) against ref.c's loops, einsum against plain
 * loops, an Adam step in place, integer semantics, dynamic shapes (bucket choice, padding fills
 * and masks, output shape formulas, the refusal of a reshape that would mix padding in, lazy
 * builds), the disk cache (hits, invalidation by flags, a corrupt entry), compiler failures,
 * malformed programs and misused runs, the placement check, and a golden C file for a small
 * program. Each test has its own cache directory (made and removed by the test). */
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "ref.h"
#include "program_fixture.h"
#include "ts_program.h"

static void close_to(const double *got, const double *want, int64_t n, double tol,
                     const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(got[i] - want[i]), s = fabs(want[i]) > 1 ? fabs(want[i]) : 1;
    ck_assert_msg((isnan(got[i]) && isnan(want[i])) || d <= tol * s,
                  "%s[%lld]: got %.17g want %.17g", what, (long long)i, got[i], want[i]);
  }
}

/* ------------------------------------------------------------------------------------------
 * random elementwise / reduction programs (f64) */

typedef struct rval {
  char name[16];
  ref_t t;
  bool pooled;
} rval;

typedef struct rprog {
  char json[32768];
  size_t len;
  rval v[128];
  int n;
  int outputs[16];
  int n_out;
  unsigned seed;
} rprog;

static int rnd(rprog *g, int n) { return (int)(rand_r(&g->seed) % (unsigned)n); }

static void emit(rprog *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(rprog *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  g->len += (size_t)vsnprintf(g->json + g->len, sizeof g->json - g->len, fmt, ap);
  va_end(ap);
}

static int add_val(rprog *g, ref_t t, bool pooled) {
  int i = g->n++;
  snprintf(g->v[i].name, sizeof g->v[i].name, "v%d", i);
  g->v[i].t = t;
  g->v[i].pooled = pooled;
  return i;
}

static int pick(rprog *g) {
  for (;;) {
    int i = rnd(g, g->n);
    if (g->v[i].pooled)
      return i;
  }
}

static int op1(rprog *g, const char *op, int a) {
  emit(g, ",\n{\"out\":\"v%d\",\"op\":\"%s\",\"args\":[\"%s\"]}", g->n, op, g->v[a].name);
  return add_val(g, ref_elementwise(op, &g->v[a].t, NULL, NULL), true);
}

static int op2(rprog *g, const char *op, int a, int b) {
  emit(g, ",\n{\"out\":\"v%d\",\"op\":\"%s\",\"args\":[\"%s\",\"%s\"]}", g->n, op, g->v[a].name,
       g->v[b].name);
  return add_val(g, ref_elementwise(op, &g->v[a].t, &g->v[b].t, NULL), true);
}

static int op2lit(rprog *g, const char *op, int a, double lit) {
  emit(g, ",\n{\"out\":\"v%d\",\"op\":\"%s\",\"args\":[\"%s\",%.17g]}", g->n, op, g->v[a].name,
       lit);
  ref_t l = ref_scalar(lit);
  int r = add_val(g, ref_elementwise(op, &g->v[a].t, &l, NULL), true);
  ref_free(&l);
  return r;
}

static void random_program(rprog *g, unsigned seed) {
  memset(g, 0, sizeof *g);
  g->seed = seed;
  int64_t A = 2 + rnd(g, 5), B = A + 1 + rnd(g, 5);
  int64_t shapes[4][2] = {{A, B}, {B, 0}, {A, 1}, {0, 0}};
  int ndims[4] = {2, 1, 2, 0};
  emit(g, "{\"name\":\"random%u\",\"inputs\":[", seed);
  for (int i = 0; i < 4; i++) {
    ref_t t = ref_new(ndims[i], shapes[i]);
    for (int64_t k = 0; k < ref_numel(&t); k++)
      t.d[k] = (rnd(g, 2001) - 1000) / 250.0;
    emit(g, "%s{\"name\":\"v%d\",\"dtype\":\"f64\",\"shape\":[", i ? "," : "", i);
    for (int d = 0; d < ndims[i]; d++)
      emit(g, "%s%lld", d ? "," : "", (long long)shapes[i][d]);
    emit(g, "]}");
    add_val(g, t, true);
  }
  emit(g, "],\"ops\":[{\"out\":\"first\",\"op\":\"copy_is_not_an_op\",\"args\":[\"v0\"]}");
  g->len -= strlen(",\"ops\":[{\"out\":\"first\",\"op\":\"copy_is_not_an_op\",\"args\":[\"v0\"]}");
  g->json[g->len] = '\0';
  emit(g, ",\"ops\":[{\"out\":\"start\",\"op\":\"add\",\"args\":[\"v0\",0]}");
  int steps = 8 + rnd(g, 6);
  for (int s = 0; s < steps; s++) {
    int kind = rnd(g, 10);
    int a = pick(g), b = pick(g);
    static const char *bin[] = {"add", "sub", "mul", "max", "min"};
    static const char *un[] = {"neg", "abs", "tanh", "sigmoid", "relu", "gelu"};
    if (kind <= 2) {
      op2(g, bin[rnd(g, 5)], a, b);
    } else if (kind == 3) {
      op2lit(g, bin[rnd(g, 5)], a, (rnd(g, 200) - 100) / 16.0);
    } else if (kind == 4) {
      op1(g, un[rnd(g, 6)], a);
    } else if (kind == 5) { /* safe div, log, sqrt, rsqrt, exp, pow */
      int d = op2lit(g, "add", op1(g, "abs", b), 1.0);
      int q = op2(g, "div", a, d);
      static const char *safe[] = {"log", "sqrt", "rsqrt"};
      int r = op1(g, safe[rnd(g, 3)], d);
      op2(g, "add", q, op1(g, "exp", op1(g, "tanh", r)));
      op2lit(g, "pow", d, 1.5);
    } else if (kind == 6) { /* compare and where */
      static const char *cmp[] = {"eq", "ne", "lt", "le", "gt", "ge"};
      const char *c = cmp[rnd(g, 6)];
      int ci = g->n;
      emit(g, ",\n{\"out\":\"v%d\",\"op\":\"%s\",\"args\":[\"%s\",\"%s\"]}", ci, c, g->v[a].name,
           g->v[b].name);
      add_val(g, ref_elementwise(c, &g->v[a].t, &g->v[b].t, NULL), false);
      int w = g->n;
      emit(g, ",\n{\"out\":\"v%d\",\"op\":\"where\",\"args\":[\"v%d\",\"%s\",\"%s\"]}", w, ci,
           g->v[a].name, g->v[b].name);
      add_val(g, ref_elementwise("where", &g->v[ci].t, &g->v[a].t, &g->v[b].t), true);
    } else if (kind == 7) { /* cast round trip through i32 */
      int m = op2lit(g, "mul", a, 100.0);
      int ci = g->n;
      emit(g, ",\n{\"out\":\"v%d\",\"op\":\"cast\",\"dtype\":\"i32\",\"args\":[\"v%d\"]}", ci, m);
      add_val(g, ref_elementwise("cast_i32", &g->v[m].t, NULL, NULL), false);
      emit(g, ",\n{\"out\":\"v%d\",\"op\":\"cast\",\"dtype\":\"f64\",\"args\":[\"v%d\"]}", g->n,
           ci);
      add_val(g, ref_elementwise("cast_i32", &g->v[m].t, NULL, NULL), true);
    } else { /* reductions, maybe of a transposed view */
      int src = 0;
      for (int t = 0; t < 20; t++) {
        src = pick(g);
        if (g->v[src].t.ndim == 2 && g->v[src].t.shape[0] == A && g->v[src].t.shape[1] == B)
          break;
      }
      if (g->v[src].t.ndim != 2 || g->v[src].t.shape[1] != B)
        src = 0;
      if (rnd(g, 3) == 0) {
        int perm[2] = {1, 0};
        emit(g, ",\n{\"out\":\"v%d\",\"op\":\"transpose\",\"args\":[\"%s\"]}", g->n,
             g->v[src].name);
        src = add_val(g, ref_transpose(&g->v[src].t, perm), false);
      }
      static const char *red[] = {"sum", "mean", "max", "min"};
      const char *r = red[rnd(g, 4)];
      uint32_t axes = 1 + (uint32_t)rnd(g, 3);
      bool keep = rnd(g, 2);
      emit(g, ",\n{\"out\":\"v%d\",\"op\":\"%s\",\"args\":[\"%s\"],\"dims\":[", g->n, r,
           g->v[src].name);
      bool first = true;
      for (int d = 0; d < 2; d++)
        if (axes & (1u << d)) {
          emit(g, "%s%d", first ? "" : ",", d - (rnd(g, 2) ? 2 : 0));
          first = false;
        }
      emit(g, "],\"keepdims\":%s}", keep ? "true" : "false");
      ref_t t = ref_reduce(r, &g->v[src].t, axes, keep);
      /* poolable when it broadcasts against [A,B]: keepdims of the untransposed, or scalars */
      bool transposed = g->v[src].t.shape[0] != A;
      bool pooled = t.ndim == 0 || (keep && !transposed) || (!keep && axes == 1 && !transposed);
      int ri = add_val(g, t, pooled);
      if (!pooled && g->n_out < 8)
        g->outputs[g->n_out++] = ri;
    }
  }
  for (int i = g->n - 1; i >= 4 && g->n_out < 12; i -= 1 + rnd(g, 3))
    g->outputs[g->n_out++] = i;
  g->outputs[g->n_out++] = 1; /* an input as an output: a copy */
  emit(g, "],\"outputs\":[");
  for (int k = 0; k < g->n_out; k++)
    emit(g, "%s\"%s\"", k ? "," : "", g->v[g->outputs[k]].name);
  emit(g, "]}");
}

static void run_random(unsigned seed) {
  static rprog g;
  random_program(&g, seed);
  tsp_program *p = tsp_test_make(g.json, FAST_FLAGS, false);
  tsp_tensor in[4], out[16];
  for (int i = 0; i < 4; i++) {
    in[i].data = g.v[i].t.d;
    in[i].dtype = TS_F64;
    in[i].ndim = g.v[i].t.ndim;
    memcpy(in[i].shape, g.v[i].t.shape, sizeof in[i].shape);
  }
  ts_error err = {0};
  ck_assert_msg(tsp_program_run(p, in, 4, out, g.n_out, &err) == TS_OK, "%s", err.msg);
  for (int k = 0; k < g.n_out; k++) {
    const ref_t *r = &g.v[g.outputs[k]].t;
    ck_assert_int_eq(out[k].ndim, r->ndim);
    for (int d = 0; d < r->ndim; d++)
      ck_assert_int_eq(out[k].shape[d], r->shape[d]);
    char what[64];
    snprintf(what, sizeof what, "seed %u output %s", seed, g.v[g.outputs[k]].name);
    if (out[k].dtype == TS_U8 || out[k].dtype == TS_I32) {
      double tmp[4096];
      for (int64_t i = 0; i < ref_numel(r); i++)
        tmp[i] = out[k].dtype == TS_U8 ? ((uint8_t *)out[k].data)[i] : ((int32_t *)out[k].data)[i];
      close_to(tmp, r->d, ref_numel(r), 0, what);
    } else {
      close_to(out[k].data, r->d, ref_numel(r), 1e-9, what);
    }
    ts_pool_free(out[k].data);
  }
  /* inputs untouched */
  tsp_program_destroy(p);
  for (int i = 0; i < g.n; i++)
    ref_free(&g.v[i].t);
}

START_TEST(test_random_programs) {
  for (unsigned s = 1; s <= 8; s++)
    run_random(1000u * (unsigned)_i + s);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */

START_TEST(test_einsum_static_and_dynamic) {
  const char *text =
      "{\"name\":\"mm\",\"dims\":{\"n\":{\"min\":1,\"max\":12,\"buckets\":\"pow2\"}},"
      "\"inputs\":[{\"name\":\"a\",\"dtype\":\"f64\",\"shape\":[3,\"n\"]},"
      "{\"name\":\"b\",\"dtype\":\"f64\",\"shape\":[\"n\",4]},"
      "{\"name\":\"bias\",\"dtype\":\"f64\",\"shape\":[4]}],"
      "\"ops\":[{\"out\":\"e\",\"op\":\"exp\",\"args\":[\"a\"]},"
      "{\"out\":\"y\",\"op\":\"einsum\",\"eq\":\"ij,jk->ik\",\"args\":[\"e\",\"b\"]},"
      "{\"out\":\"z\",\"op\":\"add\",\"args\":[\"y\",\"bias\"]},"
      "{\"out\":\"o\",\"op\":\"einsum\",\"eq\":\"ij,kj->ik\",\"args\":[\"a\",\"a\"]}],"
      "\"outputs\":[\"z\",\"o\"]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, true);
  for (int64_t n = 1; n <= 12; n += 5) {
    double a[3 * 12], b[12 * 4], bias[4];
    for (int i = 0; i < 3 * n; i++)
      a[i] = (i % 7) * 0.1 - 0.3;
    for (int i = 0; i < n * 4; i++)
      b[i] = (i % 5) * 0.2 - 0.4;
    for (int i = 0; i < 4; i++)
      bias[i] = i;
    tsp_tensor in[3] = {{a, TS_F64, 2, {3, n}}, {b, TS_F64, 2, {n, 4}}, {bias, TS_F64, 1, {4}}};
    tsp_tensor out[2];
    ts_error err = {0};
    ck_assert_msg(tsp_program_run(p, in, 3, out, 2, &err) == TS_OK, "%s", err.msg);
    ck_assert_int_eq(out[0].shape[0], 3);
    ck_assert_int_eq(out[0].shape[1], 4);
    double want[12], want2[9];
    for (int i = 0; i < 3; i++)
      for (int k = 0; k < 4; k++) {
        double s = 0;
        for (int j = 0; j < n; j++)
          s += exp(a[i * n + j]) * b[j * 4 + k];
        want[i * 4 + k] = s + bias[k];
      }
    for (int i = 0; i < 3; i++)
      for (int k = 0; k < 3; k++) {
        double s = 0;
        for (int j = 0; j < n; j++)
          s += a[i * n + j] * a[k * n + j];
        want2[i * 3 + k] = s;
      }
    close_to(out[0].data, want, 12, 1e-12, "einsum+bias");
    close_to(out[1].data, want2, 9, 1e-12, "gram");
    ts_pool_free(out[0].data);
    ts_pool_free(out[1].data);
  }
  tsp_program_destroy(p);
}
END_TEST

static const char *adam_text =
    "{\"name\":\"adam\",\"inputs\":["
    "{\"name\":\"w\",\"dtype\":\"f32\",\"shape\":[1000]},{\"name\":\"g\",\"dtype\":\"f32\","
    "\"shape\":[1000]},"
    "{\"name\":\"m\",\"dtype\":\"f32\",\"shape\":[1000]},{\"name\":\"v\",\"dtype\":\"f32\","
    "\"shape\":[1000]},"
    "{\"name\":\"lr\",\"dtype\":\"f32\",\"shape\":[]}],\"ops\":["
    "{\"out\":\"m1\",\"op\":\"mul\",\"args\":[\"m\",0.9]},"
    "{\"out\":\"c1\",\"op\":\"sub\",\"args\":[1,0.9]},"
    "{\"out\":\"g1\",\"op\":\"mul\",\"args\":[\"g\",\"c1\"]},"
    "{\"out\":\"mn\",\"op\":\"add\",\"args\":[\"m1\",\"g1\"]},"
    "{\"out\":\"v1\",\"op\":\"mul\",\"args\":[\"v\",0.999]},"
    "{\"out\":\"gg\",\"op\":\"mul\",\"args\":[\"g\",\"g\"]},"
    "{\"out\":\"g2\",\"op\":\"mul\",\"args\":[\"gg\",0.001]},"
    "{\"out\":\"vn\",\"op\":\"add\",\"args\":[\"v1\",\"g2\"]},"
    "{\"out\":\"den\",\"op\":\"sqrt\",\"args\":[\"vn\"]},"
    "{\"out\":\"den2\",\"op\":\"add\",\"args\":[\"den\",1e-8]},"
    "{\"out\":\"upd\",\"op\":\"div\",\"args\":[\"mn\",\"den2\"]},"
    "{\"out\":\"step\",\"op\":\"mul\",\"args\":[\"upd\",\"lr\"]},"
    "{\"out\":\"wn\",\"op\":\"sub\",\"args\":[\"w\",\"step\"]},"
    "{\"op\":\"assign\",\"args\":[\"w\",\"wn\"]},{\"op\":\"assign\",\"args\":[\"m\",\"mn\"]},"
    "{\"op\":\"assign\",\"args\":[\"v\",\"vn\"]}],\"outputs\":[]}";

START_TEST(test_adam_in_place) {
  tsp_program *p = tsp_test_make(adam_text, NULL, false); /* the default flags */
  enum { N = 1000 };
  static float w[N], g[N], m[N], v[N], rw[N], rm[N], rv[N];
  float lr = 0.01f;
  for (int i = 0; i < N; i++) {
    w[i] = rw[i] = (float)(i % 13) * 0.1f - 0.5f;
    g[i] = (float)(i % 7) * 0.05f - 0.15f;
    m[i] = rm[i] = (float)(i % 3) * 0.01f;
    v[i] = rv[i] = (float)(i % 11) * 0.001f;
  }
  tsp_tensor in[5] = {{w, TS_F32, 1, {N}},
                      {g, TS_F32, 1, {N}},
                      {m, TS_F32, 1, {N}},
                      {v, TS_F32, 1, {N}},
                      {&lr, TS_F32, 0, {0}}};
  ts_error err = {0};
  for (int step = 0; step < 3; step++) {
    ck_assert_msg(tsp_program_run(p, in, 5, NULL, 0, &err) == TS_OK, "%s", err.msg);
    for (int i = 0; i < N; i++) {
      rm[i] = 0.9f * rm[i] + 0.1f * g[i];
      rv[i] = 0.999f * rv[i] + 0.001f * (g[i] * g[i]);
      rw[i] = rw[i] - (rm[i] / (sqrtf(rv[i]) + 1e-8f)) * lr;
    }
  }
  for (int i = 0; i < N; i++) {
    ck_assert_msg(fabsf(w[i] - rw[i]) <= 1e-5f * (1 + fabsf(rw[i])), "w[%d] %g vs %g", i, w[i],
                  rw[i]);
    ck_assert_msg(fabsf(m[i] - rm[i]) <= 1e-6f, "m[%d]", i);
    ck_assert_msg(fabsf(v[i] - rv[i]) <= 1e-6f, "v[%d]", i);
  }
  /* one fused kernel, no pool */
  char *s = NULL;
  ck_assert_int_eq(tsp_program_show(p, &s, &err), TS_OK);
  ck_assert_msg(strstr(s, "kernel 0: elementwise, 12 fused") && !strstr(s, "kernel 1:"), "%s", s);
  free(s);
  tsp_program_destroy(p);
}
END_TEST

START_TEST(test_integer_semantics) {
  const char *text = "{\"inputs\":[{\"name\":\"a\",\"dtype\":\"i32\",\"shape\":[6]},"
                     "{\"name\":\"b\",\"dtype\":\"i32\",\"shape\":[6]}],\"ops\":["
                     "{\"out\":\"q\",\"op\":\"div\",\"args\":[\"a\",\"b\"]},"
                     "{\"out\":\"mx\",\"op\":\"max\",\"args\":[\"a\",\"b\"]},"
                     "{\"out\":\"c\",\"op\":\"lt\",\"args\":[\"a\",\"b\"]},"
                     "{\"out\":\"w\",\"op\":\"where\",\"args\":[\"c\",\"q\",-1]},"
                     "{\"out\":\"s\",\"op\":\"sum\",\"args\":[\"w\"]},"
                     "{\"out\":\"lo\",\"op\":\"min\",\"args\":[\"a\"]}],"
                     "\"outputs\":[\"q\",\"mx\",\"w\",\"s\",\"lo\"]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, false);
  int32_t a[6] = {7, -7, 5, 0, 100, -3}, b[6] = {2, 2, 0, 3, 7, 4};
  tsp_tensor in[2] = {{a, TS_I32, 1, {6}}, {b, TS_I32, 1, {6}}};
  tsp_tensor out[5];
  ts_error err = {0};
  ck_assert_msg(tsp_program_run(p, in, 2, out, 5, &err) == TS_OK, "%s", err.msg);
  int32_t *q = out[0].data, *mx = out[1].data, *w = out[2].data, *s = out[3].data,
          *lo = out[4].data;
  int32_t sum = 0;
  for (int i = 0; i < 6; i++) {
    int32_t wq = b[i] ? a[i] / b[i] : 0; /* division by zero gives 0 (documented) */
    ck_assert_int_eq(q[i], wq);
    ck_assert_int_eq(mx[i], a[i] > b[i] ? a[i] : b[i]);
    ck_assert_int_eq(w[i], a[i] < b[i] ? wq : -1);
    sum += w[i];
  }
  ck_assert_int_eq(out[3].ndim, 0);
  ck_assert_int_eq(*s, sum);
  ck_assert_int_eq(*lo, -7);
  for (int k = 0; k < 5; k++)
    ts_pool_free(out[k].data);
  tsp_program_destroy(p);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * dynamic shapes */

START_TEST(test_bucket_selection) {
  const char *text =
      "{\"dims\":{\"n\":{\"min\":3,\"max\":100,\"buckets\":\"pow2\"},"
      "\"t\":{\"min\":1,\"max\":40,\"buckets\":{\"step\":16}},"
      "\"b\":{\"min\":1,\"max\":9,\"buckets\":[2,5,9]}},"
      "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[\"n\",\"t\"]},"
      "{\"name\":\"y\",\"dtype\":\"f32\",\"shape\":[\"b\",\"n\"]}],"
      "\"ops\":[{\"out\":\"s\",\"op\":\"sum\",\"args\":[\"x\"]}],\"outputs\":[\"s\"]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, true);
  ck_assert_int_eq(tsp_program_n_groups(p), 3);
  /* n: 4 8 16 32 64 100; t: 16 32 40; b: 2 5 9 */
  ck_assert_int_eq(tsp_program_n_buckets(p), 6 * 3 * 3);
  struct {
    int64_t v[3], want[3];
  } cases[] = {{{3, 1, 1}, {4, 16, 2}},      {{4, 16, 2}, {4, 16, 2}},
               {{5, 17, 3}, {8, 32, 5}},     {{65, 33, 9}, {100, 40, 9}},
               {{100, 40, 6}, {100, 40, 9}}, {{33, 31, 5}, {64, 32, 5}}};
  ts_error err = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int b = tsp_program_pick_bucket(p, cases[i].v, &err);
    ck_assert_int_ge(b, 0);
    int64_t got[3];
    tsp_program_bucket_values(p, b, got);
    for (int g = 0; g < 3; g++)
      ck_assert_int_eq(got[g], cases[i].want[g]);
  }
  int64_t bad[3] = {2, 1, 1};
  ck_assert_int_eq(tsp_program_pick_bucket(p, bad, &err), -1);
  ck_assert_msg(strstr(err.msg, "'n' = 2 is outside its range [3, 100]"), "%s", err.msg);
  int64_t bad2[3] = {3, 41, 1};
  ck_assert_int_eq(tsp_program_pick_bucket(p, bad2, &err), -1);
  for (int b = 0; b < tsp_program_n_buckets(p); b++)
    ck_assert(!tsp_program_bucket_built(p, b)); /* lazy: nothing built yet */
  tsp_program_destroy(p);
}
END_TEST

static const char *dyn_text =
    "{\"name\":\"dyn\",\"dims\":{\"n\":{\"min\":1,\"max\":64,\"buckets\":\"pow2\"}},"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[\"n\",3]},"
    "{\"name\":\"x2\",\"dtype\":\"f64\",\"shape\":[\"n\",3]}],\"ops\":["
    "{\"out\":\"e\",\"op\":\"exp\",\"args\":[\"x\"]},"
    "{\"out\":\"se\",\"op\":\"sum\",\"args\":[\"e\"],\"dims\":[0]},"
    "{\"out\":\"sx\",\"op\":\"sum\",\"args\":[\"x\"],\"dims\":[0]},"
    "{\"out\":\"mean\",\"op\":\"mean\",\"args\":[\"x\"],\"dims\":[0],\"keepdims\":true},"
    "{\"out\":\"mx\",\"op\":\"max\",\"args\":[\"x2\"],\"dims\":[0]},"
    "{\"out\":\"flat\",\"op\":\"reshape\",\"args\":[\"e\"],\"shape\":[\"3*n\"]},"
    "{\"out\":\"c\",\"op\":\"sub\",\"args\":[\"x\",\"mean\"]},"
    "{\"out\":\"t\",\"op\":\"transpose\",\"args\":[\"c\"]}],"
    "\"outputs\":[\"se\",\"sx\",\"mean\",\"mx\",\"flat\",\"c\",\"t\"]}";

START_TEST(test_padding_masks_and_formulas) {
  tsp_program *p = tsp_test_make(dyn_text, FAST_FLAGS, true);
  char f[64];
  tsp_program_output_formula(p, 4, 0, f, sizeof f);
  ck_assert_str_eq(f, "3*n");
  tsp_program_output_formula(p, 6, 1, f, sizeof f);
  ck_assert_str_eq(f, "n");
  tsp_program_output_formula(p, 2, 0, f, sizeof f);
  ck_assert_str_eq(f, "1");
  ts_error err = {0};
  char *s = NULL;
  ck_assert_int_eq(tsp_program_show(p, &s, &err), TS_OK);
  /* exp(0) = 1 in the padding: the sum of e is masked; x is padded with 0: its sum is not;
   * x2 feeds only a max: padded with -inf, no mask */
  ck_assert_msg(strstr(s, "se = sum(e) f64[3] kernel") && strstr(s, "input x2 filled with -inf") &&
                    strstr(s, "input x filled with 0"),
                "%s", s);
  ck_assert_msg(strstr(strstr(s, "se = sum"), "masked") < strstr(s, "sx = sum"), "%s", s);
  ck_assert_msg(!strstr(strstr(s, "sx = sum"), "masked") ||
                    strstr(strstr(s, "sx = sum"), "masked") > strstr(s, "mean = mean"),
                "%s", s);
  free(s);
  for (int64_t n = 1; n <= 64; n = n * 3 + 1) {
    ref_t x = ref_new(2, (int64_t[]){n, 3}), x2 = ref_new(2, (int64_t[]){n, 3});
    for (int64_t i = 0; i < 3 * n; i++) {
      x.d[i] = (double)((i * 37) % 19) / 7.0 - 1.2;
      x2.d[i] = -5.0 - (double)(i % 5);
    }
    tsp_tensor in[2] = {{x.d, TS_F64, 2, {n, 3}}, {x2.d, TS_F64, 2, {n, 3}}};
    tsp_tensor out[7];
    ck_assert_msg(tsp_program_run(p, in, 2, out, 7, &err) == TS_OK, "%s", err.msg);
    ref_t e = ref_elementwise("exp", &x, NULL, NULL);
    ref_t se = ref_reduce("sum", &e, 1, false), sx = ref_reduce("sum", &x, 1, false);
    ref_t mean = ref_reduce("mean", &x, 1, true), mx = ref_reduce("max", &x2, 1, false);
    ref_t c = ref_elementwise("sub", &x, &mean, NULL);
    ref_t t = ref_transpose(&c, (int[]){1, 0});
    const ref_t *want[7] = {&se, &sx, &mean, &mx, &e, &c, &t};
    for (int k = 0; k < 7; k++) {
      ck_assert_int_eq(ref_numel(want[k]), k == 4 ? 3 * n : ref_numel(want[k]));
      int64_t numel = 1;
      for (int d = 0; d < out[k].ndim; d++)
        numel *= out[k].shape[d];
      ck_assert_int_eq(numel, ref_numel(want[k]));
      close_to(out[k].data, want[k]->d, numel, 1e-12, tsp_program_output_name(p, k));
      ts_pool_free(out[k].data);
    }
    ck_assert_int_eq(out[4].shape[0], 3 * n);
    ck_assert_int_eq(out[6].shape[0], 3);
    ck_assert_int_eq(out[6].shape[1], n);
    ref_t *all[] = {&x, &x2, &e, &se, &sx, &mean, &mx, &c, &t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
      ref_free(all[i]);
  }
  tsp_stats st;
  tsp_program_stats(p, &st);
  ck_assert_int_eq(st.compiles, 4); /* n = 1, 4, 13, 40: buckets 1, 4, 16, 64 */
  ck_assert_int_eq(tsp_program_n_buckets(p), 7);
  tsp_program_destroy(p);
}
END_TEST

START_TEST(test_dynamic_in_place_and_refusal) {
  /* an in-place update of a padded input writes back only the true elements */
  const char *text = "{\"dims\":{\"n\":{\"min\":1,\"max\":50,\"buckets\":{\"step\":16}}},"
                     "\"inputs\":[{\"name\":\"w\",\"dtype\":\"f32\",\"shape\":[\"n\"]},"
                     "{\"name\":\"g\",\"dtype\":\"f32\",\"shape\":[\"n\"]}],\"ops\":["
                     "{\"out\":\"u\",\"op\":\"mul\",\"args\":[\"g\",0.5]},"
                     "{\"out\":\"wn\",\"op\":\"sub\",\"args\":[\"w\",\"u\"]},"
                     "{\"op\":\"assign\",\"args\":[\"w\",\"wn\"]}],\"outputs\":[]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, false);
  float w[21], g[20];
  for (int i = 0; i < 21; i++)
    w[i] = (float)i;
  for (int i = 0; i < 20; i++)
    g[i] = 2.0f;
  tsp_tensor in[2] = {{w, TS_F32, 1, {20}}, {g, TS_F32, 1, {20}}};
  ts_error err = {0};
  ck_assert_msg(tsp_program_run(p, in, 2, NULL, 0, &err) == TS_OK, "%s", err.msg);
  for (int i = 0; i < 20; i++)
    ck_assert_float_eq(w[i], (float)i - 1.0f);
  ck_assert_float_eq(w[20], 20.0f); /* past the true end: untouched */
  ck_assert(tsp_program_input_assigned(p, 0) && !tsp_program_input_assigned(p, 1));
  tsp_program_destroy(p);

  /* a reshape that moves a dynamic dim inward would mix padding into real elements: refused */
  char msg[512];
  const char *bad =
      "{\"dims\":{\"n\":{\"min\":1,\"max\":8}},"
      "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[\"n\",3]}],"
      "\"ops\":[{\"out\":\"r\",\"op\":\"reshape\",\"args\":[\"x\"],\"shape\":[3,\"n\"]}],"
      "\"outputs\":[\"r\"]}";
  ck_assert_int_eq(tsp_test_make_fails(bad, msg, sizeof msg), TS_UNSUPPORTED);
  ck_assert_msg(strstr(msg, "reshape 'r'") && strstr(msg, "padding"), "%s", msg);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * cache, compiler, errors */

static const char *small_text =
    "{\"name\":\"small\",\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2,3]},"
    "{\"name\":\"b\",\"dtype\":\"f32\",\"shape\":[3]}],\"ops\":["
    "{\"out\":\"y\",\"op\":\"add\",\"args\":[\"x\",\"b\"]},"
    "{\"out\":\"r\",\"op\":\"relu\",\"args\":[\"y\"]},"
    "{\"out\":\"dead\",\"op\":\"exp\",\"args\":[\"x\"]},"
    "{\"out\":\"s\",\"op\":\"sum\",\"args\":[\"r\"],\"dims\":[1]}],\"outputs\":[\"r\",\"s\"]}";

static void check_small(tsp_program *p) {
  float x[6] = {-1, 2, -3, 4, -5, 6}, b[3] = {0.5f, 1, 2};
  tsp_tensor in[2] = {{x, TS_F32, 2, {2, 3}}, {b, TS_F32, 1, {3}}};
  tsp_tensor out[2];
  ts_error err = {0};
  ck_assert_msg(tsp_program_run(p, in, 2, out, 2, &err) == TS_OK, "%s", err.msg);
  float r[6], s[2] = {0, 0};
  for (int i = 0; i < 6; i++) {
    r[i] = x[i] + b[i % 3] > 0 ? x[i] + b[i % 3] : 0;
    s[i / 3] += r[i];
    ck_assert_float_eq(((float *)out[0].data)[i], r[i]);
  }
  ck_assert_float_eq(((float *)out[1].data)[0], s[0]);
  ck_assert_float_eq(((float *)out[1].data)[1], s[1]);
  ts_pool_free(out[0].data);
  ts_pool_free(out[1].data);
}

START_TEST(test_cache_hits_and_invalidation) {
  tsp_stats st;
  tsp_program *p = tsp_test_make(small_text, FAST_FLAGS, false);
  tsp_program_stats(p, &st);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_int_eq(st.cache_hits, 0);
  char path[600];
  snprintf(path, sizeof path, "%s", tsp_program_cache_path(p, 0));
  ck_assert_msg(strncmp(path, tsp_test_cache, strlen(tsp_test_cache)) == 0, "%s", path);
  check_small(p);
  tsp_program_destroy(p);
  /* the same program and flags: a hit */
  p = tsp_test_make(small_text, FAST_FLAGS, false);
  tsp_program_stats(p, &st);
  ck_assert_int_eq(st.compiles, 0);
  ck_assert_int_eq(st.cache_hits, 1);
  check_small(p);
  tsp_program_destroy(p);
  /* other flags: another entry */
  p = tsp_test_make(small_text, "-O2 -fPIC -shared", false);
  tsp_program_stats(p, &st);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_str_ne(tsp_program_cache_path(p, 0), path);
  check_small(p);
  tsp_program_destroy(p);
  /* another program (one literal changed): another entry */
  char other[2048];
  snprintf(other, sizeof other, "%s", small_text);
  *strstr(other, "relu") = 'R';
  memcpy(strstr(other, "Relu"), "tanh", 4);
  p = tsp_test_make(other, FAST_FLAGS, false);
  tsp_program_stats(p, &st);
  ck_assert_int_eq(st.compiles, 1);
  tsp_program_destroy(p);
  /* a corrupt entry is compiled again */
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("not a shared object", f);
  fclose(f);
  p = tsp_test_make(small_text, FAST_FLAGS, false);
  tsp_program_stats(p, &st);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_int_eq(st.cache_hits, 0);
  check_small(p);
  tsp_program_destroy(p);
}
END_TEST

START_TEST(test_compiler_errors) {
  ts_error err = {0};
  tsp_program *p = NULL;
  tsp_options o = {
      .cache_dir = tsp_test_cache, .cflags = FAST_FLAGS, .extra_cflags = "-fno-such-flag-xyz"};
  ck_assert_int_eq(tsp_program_create(&p, small_text, &o, &err), TS_PROGRAM_COMPILE);
  ck_assert_ptr_null(p);
  ck_assert_msg(strstr(err.msg, "failed") && strstr(err.msg, "no-such-flag-xyz"), "%s", err.msg);
  tsp_options o2 = {.cache_dir = tsp_test_cache, .cc = "/nonexistent/cc"};
  ck_assert_int_eq(tsp_program_create(&p, small_text, &o2, &err), TS_PROGRAM_COMPILE);
  ck_assert_msg(strstr(err.msg, "/nonexistent/cc"), "%s", err.msg);
  /* lazy: the failure comes with the run that needs the bucket, and the program stays usable */
  tsp_options o3 = {.cache_dir = tsp_test_cache,
                    .cflags = FAST_FLAGS,
                    .extra_cflags = "-fno-such-flag-xyz",
                    .lazy = true};
  ck_assert_int_eq(tsp_program_create(&p, small_text, &o3, &err), TS_OK);
  float x[6] = {0}, b[3] = {0};
  tsp_tensor in[2] = {{x, TS_F32, 2, {2, 3}}, {b, TS_F32, 1, {3}}};
  tsp_tensor out[2];
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 2, &err), TS_PROGRAM_COMPILE);
  ck_assert_ptr_null(out[0].data);
  tsp_program_destroy(p);
  /* an unwritable cache directory */
  tsp_options o4 = {.cache_dir = "/proc/no/such/dir"};
  ck_assert_int_eq(tsp_program_create(&p, small_text, &o4, &err), TS_IO);
  ck_assert_msg(strstr(err.msg, "/proc/no/such/dir"), "%s", err.msg);
}
END_TEST

START_TEST(test_malformed_programs) {
  struct {
    const char *text;
    int code;
    const char *needle;
  } cases[] = {
      {"", TS_PARSE, "JSON"},
      {"{", TS_PARSE, "JSON"},
      {"[]", TS_PARSE, "expected an object"},
      {"{\"inputs\":[],\"ops\":[]}", TS_PARSE, "no outputs"},
      {"{\"inputs\":[],\"ops\":[],\"ops\":[]}", TS_PARSE, "duplicate"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[{\"out\":\"y\","
       "\"op\":\"frobnicate\",\"args\":[\"x\"]}],\"outputs\":[\"y\"]}",
       TS_PARSE, "unknown op"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[{\"out\":\"y\","
       "\"op\":\"add\",\"args\":[\"x\",\"z\"]}],\"outputs\":[\"y\"]}",
       TS_PARSE, "'z' is not defined"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"i32\",\"shape\":[2]}],\"ops\":[{\"out\":\"y\","
       "\"op\":\"exp\",\"args\":[\"x\"]}],\"outputs\":[\"y\"]}",
       TS_BAD_DTYPE, "float operands (f32, f64, f16, bf16)"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"q9\",\"shape\":[2]}],\"ops\":[],\"outputs\":["
       "\"x\"]}",
       TS_BAD_DTYPE, "f32"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]},{\"name\":\"y\",\"dtype\":"
       "\"f32\",\"shape\":[3]}],\"ops\":[{\"out\":\"z\",\"op\":\"add\",\"args\":[\"x\",\"y\"]}],"
       "\"outputs\":[\"z\"]}",
       TS_BAD_SHAPE, "do not broadcast"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]},{\"name\":\"y\",\"dtype\":"
       "\"f64\",\"shape\":[2]}],\"ops\":[{\"out\":\"z\",\"op\":\"mul\",\"args\":[\"x\",\"y\"]}],"
       "\"outputs\":[\"z\"]}",
       TS_BAD_DTYPE, "cast"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"i32\",\"shape\":[2]}],\"ops\":[{\"out\":\"z\","
       "\"op\":\"exp\",\"args\":[\"x\"]}],\"outputs\":[\"z\"]}",
       TS_BAD_DTYPE, "f32, f64, f16, bf16"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[{\"out\":\"z\","
       "\"op\":\"sum\",\"args\":[\"x\"],\"dims\":[3]}],\"outputs\":[\"z\"]}",
       TS_BAD_SHAPE, "out of range"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2,3]}],\"ops\":[{\"out\":\"z\","
       "\"op\":\"einsum\",\"eq\":\"ij,jk->ik\",\"args\":[\"x\"]}],\"outputs\":[\"z\"]}",
       TS_EINSUM, "does not match"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2,3]}],\"ops\":[{\"out\":\"z\","
       "\"op\":\"einsum\",\"eq\":\"ij\",\"args\":[\"x\"]}],\"outputs\":[\"z\"]}",
       TS_EINSUM, "explicit"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[{\"out\":\"y\","
       "\"op\":\"neg\",\"args\":[\"x\"]},{\"op\":\"assign\",\"args\":[\"y\",\"x\"]}],\"outputs\":[]"
       "}",
       TS_PARSE, "must be an input"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[{\"op\":\"assign\","
       "\"args\":[\"x\",1]},{\"op\":\"assign\",\"args\":[\"x\",2]}],\"outputs\":[]}",
       TS_PARSE, "args[1] must be a value name"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]},{\"name\":\"y\",\"dtype\":"
       "\"f32\",\"shape\":[2]}],\"ops\":[{\"op\":\"assign\",\"args\":[\"x\",\"y\"]},{\"op\":"
       "\"assign\",\"args\":[\"x\",\"y\"]}],\"outputs\":[]}",
       TS_PARSE, "assigned twice"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]},{\"name\":\"x\",\"dtype\":"
       "\"f32\",\"shape\":[2]}],\"ops\":[],\"outputs\":[\"x\"]}",
       TS_PARSE, "used twice"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[\"n\"]}],\"ops\":[],"
       "\"outputs\":[\"x\"]}",
       TS_PARSE, "not a group"},
      {"{\"dims\":{\"n\":{\"min\":5,\"max\":2}},\"inputs\":[],\"ops\":[],\"outputs\":[]}", TS_PARSE,
       "range"},
      {"{\"dims\":{\"n\":{\"min\":1,\"max\":20,\"buckets\":[4,8]}},\"inputs\":[],\"ops\":[],"
       "\"outputs\":[]}",
       TS_PARSE, "does not cover"},
      {"{\"dims\":{\"n\":{\"min\":1,\"max\":100000,\"buckets\":{\"step\":1}}},\"inputs\":[],"
       "\"ops\":[],\"outputs\":[]}",
       TS_PARSE, "more than 64"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2,3]}],\"ops\":[{\"out\":\"t\","
       "\"op\":\"transpose\",\"perm\":[0,0],\"args\":[\"x\"]}],\"outputs\":[\"t\"]}",
       TS_PARSE, "perm"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2,3]}],\"ops\":[{\"out\":\"t\","
       "\"op\":\"reshape\",\"shape\":[4],\"args\":[\"x\"]}],\"outputs\":[\"t\"]}",
       TS_BAD_SHAPE, "6 elements"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2,3]}],\"ops\":[{\"out\":\"t\","
       "\"op\":\"cast\",\"dtype\":\"c64\",\"args\":[\"x\"]}],\"outputs\":[\"t\"]}",
       TS_PARSE, "dtype"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[{\"out\":\"x\","
       "\"op\":\"neg\",\"args\":[\"x\"]}],\"outputs\":[\"x\"]}",
       TS_PARSE, "already defined"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[{\"out\":\"y\","
       "\"op\":\"add\",\"args\":[\"x\"]}],\"outputs\":[\"y\"]}",
       TS_PARSE, "takes 2 args"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2]}],\"ops\":[],\"outputs\":["
       "\"q\"]}",
       TS_PARSE, "outputs[0]"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[-2]}],\"ops\":[],\"outputs\":["
       "\"x\"]}",
       TS_PARSE, "non-negative"},
      {"{\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[1099511627776,1099511627776]}],"
       "\"ops\":[],\"outputs\":[\"x\"]}",
       TS_OVERFLOW, "2^40"},
      {"{\"dims\":{\"n\":{\"min\":1,\"max\":1099511627776}},\"inputs\":[{\"name\":\"x\",\"dtype\":"
       "\"f32\",\"shape\":[\"n\",\"n\"]}],\"ops\":[],\"outputs\":[\"x\"]}",
       TS_OVERFLOW, "2^40"},
      {"{\"dims\":{\"n\":{\"min\":1,\"max\":8}},\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\","
       "\"shape\":[\"n\"]}],\"ops\":[{\"out\":\"r\",\"op\":\"reshape\",\"args\":[\"x\"],"
       "\"shape\":[\"99999999999*99999999999*n\"]}],\"outputs\":[\"r\"]}",
       TS_PARSE, "too large"},
  };
  char msg[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = tsp_test_make_fails(cases[i].text, msg, sizeof msg);
    ck_assert_msg(rc == cases[i].code, "case %zu: code %s, want %s (%s)", i, ts_status_name(rc),
                  ts_status_name(cases[i].code), msg);
    ck_assert_msg(strstr(msg, cases[i].needle), "case %zu: '%s' lacks '%s'", i, msg,
                  cases[i].needle);
  }
  ts_error err = {0};
  tsp_program *p = NULL;
  ck_assert_int_eq(tsp_program_create(&p, NULL, NULL, &err), TS_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_misused_runs) {
  tsp_program *p = tsp_test_make(dyn_text, FAST_FLAGS, true);
  double x[300] = {0}, y[300] = {0};
  tsp_tensor out[7];
  ts_error err = {0};
  tsp_tensor in[2] = {{x, TS_F64, 2, {4, 3}}, {y, TS_F64, 2, {5, 3}}};
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 7, &err), TS_BAD_SHAPE);
  ck_assert_msg(strstr(err.msg, "grouped dims must be equal"), "%s", err.msg);
  in[1].shape[0] = 4;
  in[1].shape[1] = 2;
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 7, &err), TS_BAD_SHAPE);
  ck_assert_msg(strstr(err.msg, "expected 3, got 2"), "%s", err.msg);
  in[1].shape[1] = 3;
  in[1].dtype = TS_F32;
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 7, &err), TS_BAD_SHAPE);
  in[1].dtype = TS_F64;
  ck_assert_int_eq(tsp_program_run(p, in, 1, out, 7, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 3, &err), TS_INVALID_ARGUMENT);
  in[0].shape[0] = in[1].shape[0] = 65;
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 7, &err), TS_BAD_SHAPE);
  ck_assert_msg(strstr(err.msg, "outside its range [1, 64]"), "%s", err.msg);
  in[0].shape[0] = in[1].shape[0] = 0;
  ck_assert_int_eq(tsp_program_run(p, in, 2, out, 7, &err), TS_BAD_SHAPE);
  tsp_stats st;
  tsp_program_stats(p, &st);
  ck_assert_int_eq(st.compiles, 0);
  tsp_program_destroy(p);
  tsp_program_destroy(NULL);
}
END_TEST

START_TEST(test_placement) {
  ts_error err = {0};
  /* small: y = x + b; r = relu(y); s = sum(r, dims [1]) */
  tsp_program *p = tsp_test_make(small_text, FAST_FLAGS, true);
  tsp_placement in[8], out[8];
  memset(in, 0, sizeof in);
  in[0].split[0] = 1; /* x split on dim 0 over mesh dim 0; b replicated: fine */
  ck_assert_msg(tsp_program_placement(p, in, 2, out, 2, &err) == TS_OK, "%s", err.msg);
  ck_assert_int_eq(out[0].split[0], 1);
  ck_assert_int_eq(out[0].split[1], 0);
  ck_assert_int_eq(out[1].split[0], 1);
  ck_assert_int_eq(out[1].partial, 0);
  memset(in, 0, sizeof in);
  in[0].split[1] = 2; /* x split on dim 1 over mesh dim 1, b replicated: slices do not line up */
  ck_assert_int_eq(tsp_program_placement(p, in, 2, out, 2, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "add 'y'") &&
                    strstr(err.msg, "reshard input 'b' to the placement of input 'x'"),
                "%s", err.msg);
  in[1].split[0] = 2; /* b split alike: the sum over the split dim is Partial(sum) */
  ck_assert_msg(tsp_program_placement(p, in, 2, out, 2, &err) == TS_OK, "%s", err.msg);
  ck_assert_int_eq(out[0].split[1], 2);
  ck_assert_int_eq(out[1].partial, 2);
  ck_assert_int_eq(out[1].partial_op, TSP_PARTIAL_SUM);
  memset(in, 0, sizeof in);
  in[0].partial = 1; /* relu of a partial sum is wrong on local slices */
  in[1].partial = 1;
  ck_assert_int_eq(tsp_program_placement(p, in, 2, out, 2, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "relu 'r'") && strstr(err.msg, "partial"), "%s", err.msg);
  tsp_program_destroy(p);

  /* a mean over a split dim is refused; max over it gives Partial(max) */
  p = tsp_test_make(dyn_text, FAST_FLAGS, true);
  memset(in, 0, sizeof in);
  in[1].split[0] = 1;
  ck_assert_msg(tsp_program_placement(p, in, 2, out, 7, &err) == TS_OK, "%s", err.msg);
  ck_assert_int_eq(out[3].partial, 1);
  ck_assert_int_eq(out[3].partial_op, TSP_PARTIAL_MAX);
  in[0].split[0] = 1;
  ck_assert_int_eq(tsp_program_placement(p, in, 2, out, 7, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "mean 'mean'") && strstr(err.msg, "reshard input 'x'"), "%s",
                err.msg);
  ck_assert_int_eq(tsp_program_placement(p, in, 1, out, 7, &err), TS_INVALID_ARGUMENT);
  tsp_program_destroy(p);

  /* Adam on parameters split over two mesh dims, lr replicated: fine; m split differently: no */
  char text[4096];
  snprintf(text, sizeof text, "%s", adam_text);
  p = tsp_test_make(text, FAST_FLAGS, true);
  memset(in, 0, sizeof in);
  for (int i = 0; i < 4; i++)
    in[i].split[0] = 3;
  ck_assert_msg(tsp_program_placement(p, in, 5, out, 0, &err) == TS_OK, "%s", err.msg);
  in[2].split[0] = 1;
  ck_assert_int_eq(tsp_program_placement(p, in, 5, out, 0, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "reshard"), "%s", err.msg);
  tsp_program_destroy(p);

  /* einsum: a contracted label split alike gives Partial(sum); split in one operand only: no */
  const char *mm =
      "{\"inputs\":[{\"name\":\"a\",\"dtype\":\"f32\",\"shape\":[3,8]},"
      "{\"name\":\"b\",\"dtype\":\"f32\",\"shape\":[8,4]}],"
      "\"ops\":[{\"out\":\"y\",\"op\":\"einsum\",\"eq\":\"ij,jk->ik\",\"args\":[\"a\",\"b\"]}],"
      "\"outputs\":[\"y\"]}";
  p = tsp_test_make(mm, FAST_FLAGS, true);
  memset(in, 0, sizeof in);
  in[0].split[1] = 1;
  in[1].split[0] = 1;
  ck_assert_msg(tsp_program_placement(p, in, 2, out, 1, &err) == TS_OK, "%s", err.msg);
  ck_assert_int_eq(out[0].partial, 1);
  ck_assert_int_eq(out[0].split[0], 0);
  in[1].split[0] = 0;
  in[1].split[1] = 1;
  ck_assert_int_eq(tsp_program_placement(p, in, 2, out, 1, &err), TS_PROGRAM_PLACEMENT);
  ck_assert_msg(strstr(err.msg, "einsum 'y'") && strstr(err.msg, "label 'j'"), "%s", err.msg);
  tsp_program_destroy(p);
}
END_TEST

START_TEST(test_large_programs) {
  /* a long chain is optimized without deep recursion and fused into one kernel */
  static char text[600000];
  size_t len = (size_t)snprintf(text, sizeof text,
                                "{\"inputs\":[{\"name\":\"v0\",\"dtype\":"
                                "\"f32\",\"shape\":[4]}],\"ops\":[");
  for (int i = 1; i <= 4000; i++)
    len += (size_t)snprintf(text + len, sizeof text - len,
                            "%s{\"out\":\"v%d\",\"op\":\"%s\","
                            "\"args\":[\"v%d\"]}",
                            i > 1 ? "," : "", i, i % 2 ? "neg" : "abs", i - 1);
  snprintf(text + len, sizeof text - len, "],\"outputs\":[\"v4000\"]}");
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, true);
  char *s = NULL;
  ts_error err = {0};
  ck_assert_int_eq(tsp_program_show(p, &s, &err), TS_OK);
  ck_assert_msg(strstr(s, "kernel 0: elementwise, 4000 fused"), "%.300s", s);
  free(s);
  char *src = NULL;
  ck_assert_int_eq(tsp_program_source(p, 0, &src, &err), TS_OK);
  ck_assert(strlen(src) > 4000 * 20);
  free(src);
  tsp_program_destroy(p);
  /* more nodes than the limit: refused */
  len = (size_t)snprintf(text, sizeof text,
                         "{\"inputs\":[{\"name\":\"v0\",\"dtype\":\"f32\","
                         "\"shape\":[4]}],\"ops\":[");
  for (int i = 1; i <= 9000; i++)
    len += (size_t)snprintf(text + len, sizeof text - len,
                            "%s{\"out\":\"v%d\",\"op\":\"neg\","
                            "\"args\":[\"v%d\"]}",
                            i > 1 ? "," : "", i, i - 1);
  snprintf(text + len, sizeof text - len, "],\"outputs\":[\"v9000\"]}");
  char msg[512];
  ck_assert_int_eq(tsp_test_make_fails(text, msg, sizeof msg), TS_LIMIT);
  ck_assert_msg(strstr(msg, "more than 8192 nodes"), "%s", msg);
}
END_TEST

START_TEST(test_golden_source) {
  tsp_program *p = tsp_test_make(small_text, FAST_FLAGS, true);
  char *src = NULL;
  ts_error err = {0};
  ck_assert_int_eq(tsp_program_source(p, 0, &src, &err), TS_OK);
  FILE *f = fopen(TSP_GOLDEN, "r");
  ck_assert_ptr_nonnull(f);
  static char want[65536];
  size_t n = fread(want, 1, sizeof want - 1, f);
  want[n] = '\0';
  fclose(f);
  if (strcmp(src, want) != 0) {
    fprintf(stderr, "emitted C differs from %s:\n%s", TSP_GOLDEN, src);
    ck_abort_msg("golden mismatch");
  }
  free(src);
  tsp_program_destroy(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("program");
  TCase *t = tcase_create("program");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, tsp_test_setup, tsp_test_teardown);
  tcase_add_loop_test(t, test_random_programs, 0, 2);
  tcase_add_test(t, test_einsum_static_and_dynamic);
  tcase_add_test(t, test_adam_in_place);
  tcase_add_test(t, test_integer_semantics);
  tcase_add_test(t, test_bucket_selection);
  tcase_add_test(t, test_padding_masks_and_formulas);
  tcase_add_test(t, test_dynamic_in_place_and_refusal);
  tcase_add_test(t, test_cache_hits_and_invalidation);
  tcase_add_test(t, test_compiler_errors);
  tcase_add_test(t, test_malformed_programs);
  tcase_add_test(t, test_misused_runs);
  tcase_add_test(t, test_placement);
  tcase_add_test(t, test_large_programs);
  tcase_add_test(t, test_golden_source);
  suite_add_tcase(s, t);
  return ts_run_suite(s);
}
