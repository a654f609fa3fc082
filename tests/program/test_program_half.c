/* test_program_half.c - f16 and bf16 in compiled programs against the kernels' dtype conversions
 * (kernels/dtype.c), bit for bit: every f16 and bf16 bit pattern widened, a sweep of f32 and
 * f64 values (normals, subnormals, halfway cases, overflow, NaN with payloads) and of integers
 * rounded by casts, ops on f16 operands rounded once per op, a sum of bf16 rounded once from its
 * double total, padded buckets of bf16 inputs (max reductions over -inf padding), and the AdamW
 * example (bf16 weights, f32 master and moments) fused into one kernel, checked against a plain
 * C loop with the same operation order. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_fixture.h"
#include "check_main.h"

static uint32_t bits32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static bool same_float(float a, float b) { return bits32(a) == bits32(b); }

enum { NB = 65536, NF = 1 << 16 };

/* f32, f64 and i64 values around every rounding boundary of f16 and bf16 */
static void sweep(float *f, double *d, int64_t *iv, int n) {
  uint64_t s = 12345;
  for (int i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    uint32_t r = (uint32_t)(s >> 32);
    switch (i % 6) {
    case 0: f[i] = float_of(r); break; /* any pattern */
    case 1: f[i] = float_of((r & 0x8000ffffu) | ((uint32_t)(i % 40 + 95) << 23)); break;
    case 2: f[i] = float_of((r & 0xffff0000u) | 0x8000u | (r & 0x10000u)); break; /* halfway */
    case 3: f[i] = float_of((r & 0x80000000u) | (0x33000000u + (r & 0x07ffffffu))); break;
    case 4: f[i] = float_of((r & 0xffffe000u) | 0x1000u); break; /* f16 halfway */
    default: f[i] = (float)((double)(int32_t)r * 1e-3); break;
    }
    d[i] = (double)f[i] + (double)(int32_t)(r ^ 0x5a5a5a5au) * 0x1p-60 * fabs((double)f[i]);
    if (i % 9 == 0)
      d[i] = ldexp((double)(r | 1), (int)(r % 60) - 90); /* subnormal f16 range and beyond */
    iv[i] = (int64_t)((s >> 1) >> (i % 63)) * ((i & 1) ? -1 : 1);
  }
  f[0] = NAN;
  f[1] = -INFINITY;
  f[2] = 65520.0f; /* rounds to f16 infinity */
  f[3] = 65519.996f;
  f[4] = float_of(0x7f812345u); /* a signalling NaN with a payload */
  d[0] = NAN;
  d[1] = 1e300;
  d[2] = 65520.0;
  d[3] = 65519.99999999999;
  d[4] = -0.0;
  iv[0] = INT64_MIN;
  iv[1] = INT64_MAX;
}

START_TEST(test_conversions_bit_exact) {
  const char *text = "{\"inputs\":[{\"name\":\"h\",\"dtype\":\"f16\",\"shape\":[65536]},"
                     "{\"name\":\"b\",\"dtype\":\"bf16\",\"shape\":[65536]},"
                     "{\"name\":\"f\",\"dtype\":\"f32\",\"shape\":[65536]},"
                     "{\"name\":\"d\",\"dtype\":\"f64\",\"shape\":[65536]},"
                     "{\"name\":\"iv\",\"dtype\":\"i64\",\"shape\":[65536]}],\"ops\":["
                     "{\"out\":\"hf\",\"op\":\"cast\",\"args\":[\"h\"],\"dtype\":\"f32\"},"
                     "{\"out\":\"bf\",\"op\":\"cast\",\"args\":[\"b\"],\"dtype\":\"f32\"},"
                     "{\"out\":\"fh\",\"op\":\"cast\",\"args\":[\"f\"],\"dtype\":\"f16\"},"
                     "{\"out\":\"fb\",\"op\":\"cast\",\"args\":[\"f\"],\"dtype\":\"bf16\"},"
                     "{\"out\":\"dh\",\"op\":\"cast\",\"args\":[\"d\"],\"dtype\":\"f16\"},"
                     "{\"out\":\"db\",\"op\":\"cast\",\"args\":[\"d\"],\"dtype\":\"bf16\"},"
                     "{\"out\":\"ih\",\"op\":\"cast\",\"args\":[\"iv\"],\"dtype\":\"f16\"},"
                     "{\"out\":\"ib\",\"op\":\"cast\",\"args\":[\"iv\"],\"dtype\":\"bf16\"}],"
                     "\"outputs\":[\"hf\",\"bf\",\"fh\",\"fb\",\"dh\",\"db\",\"ih\",\"ib\"]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, false);
  uint16_t *h = malloc(NB * 2), *b = malloc(NB * 2);
  float *f = malloc(NF * 4);
  double *d = malloc(NF * 8);
  int64_t *iv = malloc(NF * 8);
  ck_assert(h && b && f && d && iv);
  for (int i = 0; i < NB; i++)
    h[i] = b[i] = (uint16_t)i;
  sweep(f, d, iv, NF);
  tsp_tensor in[5] = {{h, TS_F16, 1, {NB}},
                      {b, TS_BF16, 1, {NB}},
                      {f, TS_F32, 1, {NF}},
                      {d, TS_F64, 1, {NF}},
                      {iv, TS_I64, 1, {NF}}};
  tsp_tensor out[8];
  ts_error err = {0};
  ck_assert_msg(tsp_program_run(p, in, 5, out, 8, &err) == TS_OK, "%s", err.msg);
  const float *hf = out[0].data, *bf = out[1].data;
  const uint16_t *fh = out[2].data, *fb = out[3].data, *dh = out[4].data, *db = out[5].data;
  const uint16_t *ih = out[6].data, *ib = out[7].data;
  for (int i = 0; i < NB; i++) {
    ck_assert_msg(same_float(hf[i], ts_f16_to_f32(h[i])), "f16 0x%04x -> f32", i);
    ck_assert_msg(same_float(bf[i], ts_bf16_to_f32(b[i])), "bf16 0x%04x -> f32", i);
  }
  for (int i = 0; i < NF; i++) {
    ck_assert_msg(fh[i] == ts_f32_to_f16(f[i]), "f32 0x%08x -> f16: 0x%04x, kernels 0x%04x",
                  bits32(f[i]), fh[i], ts_f32_to_f16(f[i]));
    ck_assert_msg(fb[i] == ts_f32_to_bf16(f[i]), "f32 0x%08x -> bf16", bits32(f[i]));
    ck_assert_msg(dh[i] == ts_f64_to_f16(d[i]), "f64 %a -> f16: 0x%04x, kernels 0x%04x", d[i],
                  dh[i], ts_f64_to_f16(d[i]));
    ck_assert_msg(db[i] == ts_f64_to_bf16(d[i]), "f64 %a -> bf16", d[i]);
  }
  /* integers round exactly like the kernels' strided copy (one rounding of the 64-bit value) */
  uint16_t *kh = malloc(NF * 2), *kb = malloc(NF * 2);
  ck_assert(kh && kb);
  ts_convert(kh, TS_F16, iv, TS_I64, NF);
  ts_convert(kb, TS_BF16, iv, TS_I64, NF);
  for (int i = 0; i < NF; i++) {
    ck_assert_msg(ih[i] == kh[i], "i64 %lld -> f16", (long long)iv[i]);
    ck_assert_msg(ib[i] == kb[i], "i64 %lld -> bf16", (long long)iv[i]);
  }
  for (int k = 0; k < 8; k++)
    ts_pool_free(out[k].data);
  free(kh);
  free(kb);
  free(h);
  free(b);
  free(f);
  free(d);
  free(iv);
  tsp_program_destroy(p);
}
END_TEST

/* Ops on f16 operands: each result is the f32 result rounded once (numpy's float16 arithmetic);
 * a sum of bf16 is its double total rounded once; a max over a padded bf16 input (n dynamic)
 * ignores the -inf padding. */
START_TEST(test_half_arithmetic) {
  const char *text = "{\"dims\":{\"n\":{\"min\":1,\"max\":64,\"buckets\":[16,64]}},"
                     "\"inputs\":[{\"name\":\"a\",\"dtype\":\"f16\",\"shape\":[\"n\"]},"
                     "{\"name\":\"b\",\"dtype\":\"f16\",\"shape\":[\"n\"]},"
                     "{\"name\":\"c\",\"dtype\":\"bf16\",\"shape\":[\"n\"]}],\"ops\":["
                     "{\"out\":\"s\",\"op\":\"add\",\"args\":[\"a\",\"b\"]},"
                     "{\"out\":\"q\",\"op\":\"div\",\"args\":[\"s\",\"b\"]},"
                     "{\"out\":\"e\",\"op\":\"exp\",\"args\":[\"c\"]},"
                     "{\"out\":\"t\",\"op\":\"mul\",\"args\":[\"c\",0.1]},"
                     "{\"out\":\"tot\",\"op\":\"sum\",\"args\":[\"c\"]},"
                     "{\"out\":\"mx\",\"op\":\"max\",\"args\":[\"c\"]}],"
                     "\"outputs\":[\"q\",\"e\",\"t\",\"tot\",\"mx\"]}";
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, true);
  enum { N = 37 }; /* bucket 64: 27 padded elements */
  uint16_t a[N], b[N], c[N];
  for (int i = 0; i < N; i++) {
    a[i] = ts_f32_to_f16((float)(i * 37 % 101) * 0.173f - 7.0f);
    b[i] = ts_f32_to_f16((float)(i * 11 % 29) * 0.31f + 0.5f);
    c[i] = ts_f32_to_bf16(-(float)(i * 7 % 23) * 0.37f - 1.0f); /* all negative: max != pad */
  }
  tsp_tensor in[3] = {{a, TS_F16, 1, {N}}, {b, TS_F16, 1, {N}}, {c, TS_BF16, 1, {N}}};
  tsp_tensor out[5];
  ts_error err = {0};
  ck_assert_msg(tsp_program_run(p, in, 3, out, 5, &err) == TS_OK, "%s", err.msg);
  const uint16_t *q = out[0].data, *e = out[1].data, *t = out[2].data, *tot = out[3].data,
                 *mx = out[4].data;
  double total = 0;
  float best = -INFINITY;
  uint16_t tenth = ts_f64_to_bf16(0.1); /* the literal takes the operand's dtype, like numpy */
  for (int i = 0; i < N; i++) {
    uint16_t s = ts_f32_to_f16(ts_f16_to_f32(a[i]) + ts_f16_to_f32(b[i]));
    uint16_t want = ts_f32_to_f16(ts_f16_to_f32(s) / ts_f16_to_f32(b[i]));
    ck_assert_msg(q[i] == want, "q[%d] 0x%04x want 0x%04x", i, q[i], want);
    ck_assert_msg(e[i] == ts_f32_to_bf16(expf(ts_bf16_to_f32(c[i]))), "e[%d]", i);
    ck_assert_msg(t[i] == ts_f32_to_bf16(ts_bf16_to_f32(c[i]) * ts_bf16_to_f32(tenth)), "t[%d]", i);
    total += ts_bf16_to_f32(c[i]);
    best = fmaxf(best, ts_bf16_to_f32(c[i]));
  }
  ck_assert_msg(tot[0] == ts_f64_to_bf16(total), "sum 0x%04x want 0x%04x", tot[0],
                ts_f64_to_bf16(total));
  ck_assert_msg(mx[0] == ts_f32_to_bf16(best), "max 0x%04x", mx[0]);
  for (int k = 0; k < 5; k++)
    ts_pool_free(out[k].data);
  tsp_program_destroy(p);
}
END_TEST

static char *read_text(const char *path) {
  FILE *fp = fopen(path, "rb");
  ck_assert_msg(fp != NULL, "cannot open %s", path);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  fclose(fp);
  buf[n] = 0;
  return buf;
}

START_TEST(test_adamw_bf16_one_kernel) {
  tsp_program *p = tsp_test_make(read_text(TSP_EXAMPLES "/adamw_bf16.json"), FAST_FLAGS, true);
  enum { N = 1000 };
  static uint16_t w[N], g[N];
  static float master[N], m[N], v[N], rmaster[N], rm[N], rv[N];
  float lr = 0.01f, decay = 0.001f;
  for (int i = 0; i < N; i++) {
    rmaster[i] = master[i] = (float)(i % 13) * 0.1f - 0.5f;
    w[i] = ts_f32_to_bf16(master[i]);
    g[i] = ts_f32_to_bf16((float)(i % 7) * 0.05f - 0.15f);
    m[i] = rm[i] = (float)(i % 3) * 0.01f;
    v[i] = rv[i] = (float)(i % 11) * 0.001f;
  }
  tsp_tensor in[7] = {{w, TS_BF16, 1, {N}},    {g, TS_BF16, 1, {N}}, {master, TS_F32, 1, {N}},
                      {m, TS_F32, 1, {N}},     {v, TS_F32, 1, {N}},  {&lr, TS_F32, 0, {0}},
                      {&decay, TS_F32, 0, {0}}};
  ts_error err = {0};
  for (int step = 0; step < 2; step++) {
    ck_assert_msg(tsp_program_run(p, in, 7, NULL, 0, &err) == TS_OK, "%s", err.msg);
    for (int i = 0; i < N; i++) {
      float g32 = ts_bf16_to_f32(g[i]);
      rm[i] = rm[i] * 0.9f + g32 * 0.1f;
      rv[i] = rv[i] * 0.999f + (g32 * g32) * 0.001f;
      rmaster[i] = (rmaster[i] - rmaster[i] * decay) - (rm[i] / (sqrtf(rv[i]) + 1e-8f)) * lr;
    }
  }
  for (int i = 0; i < N; i++) {
    ck_assert_msg(fabsf(master[i] - rmaster[i]) <= 1e-6f * (1 + fabsf(rmaster[i])),
                  "master[%d] %g vs %g", i, master[i], rmaster[i]);
    /* the bf16 copy is the program's own master rounded once */
    ck_assert_msg(w[i] == ts_f32_to_bf16(master[i]), "w[%d] 0x%04x", i, w[i]);
  }
  char *s = NULL;
  ck_assert_int_eq(tsp_program_show(p, &s, &err), TS_OK);
  ck_assert_msg(strstr(s, "kernel 0: elementwise, 16 fused") && !strstr(s, "kernel 1:"), "%s", s);
  free(s);
  tsp_program_destroy(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("program_half");
  TCase *t = tcase_create("program_half");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, tsp_test_setup, tsp_test_teardown);
  tcase_add_test(t, test_conversions_bit_exact);
  tcase_add_test(t, test_half_arithmetic);
  tcase_add_test(t, test_adamw_bf16_one_kernel);
  suite_add_tcase(s, t);
  return ts_run_suite(s);
}
