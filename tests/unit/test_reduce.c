/* test_reduce.c - the reduction kernels of partial placements against naive references: sum, max,
 * min, prod and avg of every dtype that has them, f16/bf16 reduced in f32 and rounded once, avg's
 * one division (ts_reduce_finish), NaN propagation, integer wrap-around, bool as or/and,
 * identities, names and error paths (the 8-bit floats, which have no reductions, and avg of the
 * integer dtypes and bool, refused by name). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ts_kernels.h"
#include "check_main.h"

static uint64_t rng_state = 0x1234567887654321u;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Writes a small integer value in any dtype. */
static bool is_unsigned(int dt) {
  return dt == TS_U8 || dt == TS_U16 || dt == TS_U32 || dt == TS_U64 || dt == TS_BOOL;
}
static bool no_reductions(int dt) { return dt == TS_F8_E4M3 || dt == TS_F8_E5M2; }
/* Whether dt has op (avg: the floats with reductions only). */
static bool has_op(int dt, int op) {
  return !no_reductions(dt) && (op != TS_REDUCE_AVG || ts_dtype_is_float((ts_dtype)dt));
}

static void put(void *p, size_t i, ts_dtype dt, double v) {
  switch (dt) {
  case TS_F32: ((float *)p)[i] = (float)v; break;
  case TS_F64: ((double *)p)[i] = v; break;
  case TS_F16: ((uint16_t *)p)[i] = ts_f32_to_f16((float)v); break;
  case TS_BF16: ((uint16_t *)p)[i] = ts_f32_to_bf16((float)v); break;
  case TS_I8: ((int8_t *)p)[i] = (int8_t)v; break;
  case TS_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case TS_I64: ((int64_t *)p)[i] = (int64_t)v; break;
  case TS_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case TS_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case TS_I16: ((int16_t *)p)[i] = (int16_t)v; break;
  case TS_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case TS_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case TS_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  default: break;
  }
}

START_TEST(all_dtypes_all_ops) {
  const size_t n = 257;
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++)
    for (int op = 0; op < TS_REDUCE_COUNT; op++) {
      if (!has_op(dt, op))
        continue;
      size_t es = ts_dtype_size((ts_dtype)dt);
      void *a = malloc(n * es), *b = malloc(n * es), *want = malloc(n * es);
      bool prod = op == TS_REDUCE_PROD;
      for (size_t i = 0; i < n; i++) {
        /* Small integers: exact in every dtype, sums and products stay in range of i8. */
        double x = (double)(rnd() % (prod ? 11 : 50)), y = (double)(rnd() % (prod ? 11 : 50));
        if (dt == TS_BOOL) { /* sum and max: or; min and prod: and */
          x = (double)(rnd() % 2);
          y = (double)(rnd() % 2);
        } else if (!is_unsigned(dt)) {
          x -= prod ? 5 : 25;
          y -= prod ? 5 : 25;
        }
        put(a, i, (ts_dtype)dt, x);
        put(b, i, (ts_dtype)dt, y);
        /* avg's step is the sum (ts_reduce_finish divides, tested below) */
        double r = op == TS_REDUCE_SUM || op == TS_REDUCE_AVG ? (dt == TS_BOOL ? fmax(x, y) : x + y)
                   : op == TS_REDUCE_PROD                     ? (dt == TS_BOOL ? fmin(x, y) : x * y)
                   : op == TS_REDUCE_MAX                      ? fmax(x, y)
                                                              : fmin(x, y);
        put(want, i, (ts_dtype)dt, r);
      }
      ck_assert_int_eq(ts_reduce(a, b, n, (ts_dtype)dt, (ts_reduce_op)op, NULL), TS_OK);
      ck_assert_msg(memcmp(a, want, n * es) == 0, "dtype %s op %s",
                    ts_dtype_name((ts_dtype)dt), ts_reduce_name((ts_reduce_op)op));
      free(a);
      free(b);
      free(want);
    }
}
END_TEST

START_TEST(half_precision_rounds_once_in_f32) {
  /* 1 + 2^-11 is not an f16 value: f16(1) + f16(2^-11) in f32 is exact, then rounds to even. */
  uint16_t a[2] = {ts_f32_to_f16(1.0f), ts_f32_to_f16(2048.0f)};
  uint16_t b[2] = {ts_f32_to_f16(0.000732421875f), ts_f32_to_f16(1.0f)};
  ck_assert_int_eq(ts_reduce(a, b, 2, TS_F16, TS_REDUCE_SUM, NULL), TS_OK);
  ck_assert_uint_eq(a[0], ts_f32_to_f16(1.0f + 0.000732421875f));
  ck_assert_uint_eq(a[1], ts_f32_to_f16(2049.0f)); /* tie to even: 2048 */
  ck_assert(ts_f16_to_f32(a[1]) == 2048.0f);
  uint16_t c[1] = {ts_f32_to_bf16(256.0f)}, d[1] = {ts_f32_to_bf16(1.0f)};
  ck_assert_int_eq(ts_reduce(c, d, 1, TS_BF16, TS_REDUCE_SUM, NULL), TS_OK);
  ck_assert(ts_bf16_to_f32(c[0]) == 256.0f); /* 257 is not a bf16: ties to even */
}
END_TEST

START_TEST(nan_propagates_and_ints_wrap) {
  float a[3] = {NAN, 1.0f, 2.0f}, b[3] = {5.0f, NAN, 1.0f};
  ck_assert_int_eq(ts_reduce(a, b, 3, TS_F32, TS_REDUCE_MAX, NULL), TS_OK);
  ck_assert(isnan(a[0]) && isnan(a[1]) && a[2] == 2.0f);
  double c[2] = {1.0, NAN}, e[2] = {NAN, 0.0};
  ck_assert_int_eq(ts_reduce(c, e, 2, TS_F64, TS_REDUCE_MIN, NULL), TS_OK);
  ck_assert(isnan(c[0]) && isnan(c[1]));
  int8_t x[1] = {120}, y[1] = {10};
  ck_assert_int_eq(ts_reduce(x, y, 1, TS_I8, TS_REDUCE_SUM, NULL), TS_OK);
  ck_assert_int_eq(x[0], -126);
  int64_t big[1] = {INT64_MAX}, one[1] = {1};
  ck_assert_int_eq(ts_reduce(big, one, 1, TS_I64, TS_REDUCE_SUM, NULL), TS_OK);
  ck_assert(big[0] == INT64_MIN);
  uint16_t u[2] = {65535, 7}, v[2] = {2, 65530};
  ck_assert_int_eq(ts_reduce(u, v, 2, TS_U16, TS_REDUCE_SUM, NULL), TS_OK);
  ck_assert(u[0] == 1 && u[1] == 1);
  int16_t s16[1] = {32767}, t16[1] = {1};
  ck_assert_int_eq(ts_reduce(s16, t16, 1, TS_I16, TS_REDUCE_SUM, NULL), TS_OK);
  ck_assert_int_eq(s16[0], -32768);
  uint64_t m[2] = {UINT64_MAX, 1}, w[2] = {UINT64_MAX - 1, UINT64_MAX};
  ck_assert_int_eq(ts_reduce(m, w, 2, TS_U64, TS_REDUCE_MAX, NULL), TS_OK);
  ck_assert(m[0] == UINT64_MAX && m[1] == UINT64_MAX); /* unsigned order, not signed */
  uint32_t x32[1] = {0x80000000u}, y32[1] = {1};
  ck_assert_int_eq(ts_reduce(x32, y32, 1, TS_U32, TS_REDUCE_MIN, NULL), TS_OK);
  ck_assert_uint_eq(x32[0], 1);
  uint8_t bb[4] = {0, 0, 1, 1}, c8[4] = {0, 1, 0, 1}, or4[4], and4[4];
  memcpy(or4, bb, 4);
  memcpy(and4, bb, 4);
  ck_assert_int_eq(ts_reduce(or4, c8, 4, TS_BOOL, TS_REDUCE_SUM, NULL), TS_OK);
  ck_assert(or4[0] == 0 && or4[1] == 1 && or4[2] == 1 && or4[3] == 1); /* a sum stays 0/1 */
  ck_assert_int_eq(ts_reduce(and4, c8, 4, TS_BOOL, TS_REDUCE_MIN, NULL), TS_OK);
  ck_assert(and4[0] == 0 && and4[1] == 0 && and4[2] == 0 && and4[3] == 1);
}
END_TEST

START_TEST(identities) {
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++)
    for (int op = 0; op < TS_REDUCE_COUNT; op++) {
      if (!has_op(dt, op))
        continue;
      size_t es = ts_dtype_size((ts_dtype)dt);
      unsigned char id[8 * 5], v[8 * 5];
      ck_assert_int_eq(ts_reduce_fill_identity(id, 5, (ts_dtype)dt, (ts_reduce_op)op, NULL),
                       TS_OK);
      for (size_t i = 0; i < 5; i++)
        put(v, i, (ts_dtype)dt, dt == TS_BOOL ? (double)(i % 2) : (double)(i * 7 % 11) - (is_unsigned(dt) ? 0 : 3));
      unsigned char keep[8 * 5];
      memcpy(keep, v, 5 * es);
      /* op(identity, v) == v */
      ck_assert_int_eq(ts_reduce(id, v, 5, (ts_dtype)dt, (ts_reduce_op)op, NULL), TS_OK);
      ck_assert_msg(memcmp(id, keep, 5 * es) == 0, "%s %s", ts_dtype_name((ts_dtype)dt),
                    ts_reduce_name((ts_reduce_op)op));
    }
}
END_TEST

START_TEST(names_and_errors) {
  ts_reduce_op op;
  ts_error err;
  for (int k = 0; k < TS_REDUCE_COUNT; k++) {
    ck_assert_int_eq(ts_reduce_parse(ts_reduce_name((ts_reduce_op)k), &op, NULL), TS_OK);
    ck_assert_int_eq(op, k);
  }
  ck_assert_int_eq(ts_reduce_parse("mean", &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "sum, avg, prod, max, min"));
  ck_assert_int_eq(ts_reduce_parse(NULL, &op, &err), TS_INVALID_ARGUMENT);
  ck_assert_str_eq(ts_reduce_name((ts_reduce_op)9), "invalid");
  float a = 1, b = 2;
  ck_assert_int_eq(ts_reduce(&a, &b, 1, (ts_dtype)99, TS_REDUCE_SUM, &err), TS_BAD_DTYPE);
  ck_assert_int_eq(ts_reduce(&a, &b, 1, TS_F32, (ts_reduce_op)TS_REDUCE_COUNT, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_reduce(NULL, &b, 1, TS_F32, TS_REDUCE_SUM, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_reduce(NULL, NULL, 0, TS_F32, TS_REDUCE_SUM, &err), TS_OK);
  ck_assert_int_eq(ts_reduce_fill_identity(&a, 1, (ts_dtype)-1, TS_REDUCE_SUM, &err),
                   TS_BAD_DTYPE);
  ck_assert_int_eq(ts_reduce_fill_identity(NULL, 1, TS_F32, TS_REDUCE_SUM, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_reduce_fill_identity(&a, 1, TS_F32, (ts_reduce_op)TS_REDUCE_COUNT, &err),
                   TS_INVALID_ARGUMENT);
  const ts_dtype f8[] = {TS_F8_E4M3, TS_F8_E5M2};
  for (int k = 0; k < 2; k++)
    for (int o = 0; o < TS_REDUCE_COUNT; o++) {
      uint8_t x[2] = {0x38, 0x38}, y[2] = {0x38, 0x38}, keep[2] = {0x38, 0x38};
      ck_assert_int_eq(ts_reduce(x, y, 2, f8[k], (ts_reduce_op)o, &err), TS_BAD_DTYPE);
      ck_assert_msg(strstr(err.msg, ts_dtype_name(f8[k])) && strstr(err.msg, "sum, max and min") &&
                        strstr(err.msg, "bool"), "%s", err.msg);
      ck_assert(memcmp(x, keep, 2) == 0); /* untouched */
      ck_assert_int_eq(ts_reduce_fill_identity(x, 2, f8[k], (ts_reduce_op)o, &err), TS_BAD_DTYPE);
      ck_assert_int_eq(ts_reduce_check(f8[k], (ts_reduce_op)o, &err), TS_BAD_DTYPE);
    }
  ck_assert_int_eq(ts_reduce_check(TS_BOOL, TS_REDUCE_MIN, &err), TS_OK);
}
END_TEST

/* avg over k contributions: the kernel's sums, then one division, against a double reference
 * rounded once to the dtype; the integer dtypes and bool are refused naming the dtype and the
 * valid ops, their data untouched. */
START_TEST(avg_divides_once) {
  const ts_dtype fl[] = {TS_F32, TS_F64, TS_F16, TS_BF16};
  const size_t n = 64;
  for (int f = 0; f < 4; f++)
    for (int k = 1; k <= 6; k++) {
      ts_dtype dt = fl[f];
      size_t es = ts_dtype_size(dt);
      unsigned char acc[8 * 64], x[8 * 64], want[8 * 64];
      double sum[64];
      /* small integers: every partial sum (|s| <= 192) is exact even in bf16 */
      for (int c = 0; c < k; c++) {
        for (size_t i = 0; i < n; i++) {
          double v = (double)(int)(rnd() % 64) - 32;
          put(c == 0 ? acc : x, i, dt, v);
          sum[i] = c == 0 ? v : sum[i] + v;
        }
        if (c > 0)
          ck_assert_int_eq(ts_reduce(acc, x, n, dt, TS_REDUCE_AVG, NULL), TS_OK);
      }
      /* the reference: the exact sum divided once (in f32 for f32, f16 and bf16), rounded */
      for (size_t i = 0; i < n; i++)
        put(want, i, dt, dt == TS_F64 ? sum[i] / k : (double)((float)sum[i] / (float)k));
      ck_assert_int_eq(ts_reduce_finish(acc, n, dt, TS_REDUCE_AVG, k, NULL), TS_OK);
      ck_assert_msg(memcmp(acc, want, n * es) == 0, "avg of %s over %d", ts_dtype_name(dt), k);
    }
  /* an exact mean: (1 + 2 + 3 + 6) / 4 == 3 in every float dtype */
  for (int f = 0; f < 4; f++) {
    unsigned char a[8], b[8];
    put(a, 0, fl[f], 1);
    const double more[] = {2, 3, 6};
    for (int j = 0; j < 3; j++) {
      put(b, 0, fl[f], more[j]);
      ck_assert_int_eq(ts_reduce(a, b, 1, fl[f], TS_REDUCE_AVG, NULL), TS_OK);
    }
    ck_assert_int_eq(ts_reduce_finish(a, 1, fl[f], TS_REDUCE_AVG, 4, NULL), TS_OK);
    put(b, 0, fl[f], 3);
    ck_assert(memcmp(a, b, ts_dtype_size(fl[f])) == 0);
  }
  /* the other ops, and a count of 1, leave the data as it is */
  float s[2] = {5, 7};
  ck_assert_int_eq(ts_reduce_finish(s, 2, TS_F32, TS_REDUCE_SUM, 4, NULL), TS_OK);
  ck_assert_int_eq(ts_reduce_finish(s, 2, TS_F32, TS_REDUCE_AVG, 1, NULL), TS_OK);
  ck_assert(s[0] == 5 && s[1] == 7);
  ts_error err;
  ck_assert_int_eq(ts_reduce_finish(s, 2, TS_F32, TS_REDUCE_AVG, 0, &err), TS_INVALID_ARGUMENT);
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++) {
    if (ts_dtype_is_float((ts_dtype)dt))
      continue;
    unsigned char a[8] = {3}, b[8] = {4}, keep[8] = {3};
    ck_assert_int_eq(ts_reduce(a, b, 1, (ts_dtype)dt, TS_REDUCE_AVG, &err), TS_BAD_DTYPE);
    ck_assert_msg(strstr(err.msg, ts_dtype_name((ts_dtype)dt)) && strstr(err.msg, "f32") &&
                      strstr(err.msg, "sum, prod, max or min"), "%s", err.msg);
    ck_assert(memcmp(a, keep, 8) == 0);
    ck_assert_int_eq(ts_reduce_finish(a, 1, (ts_dtype)dt, TS_REDUCE_AVG, 2, &err), TS_BAD_DTYPE);
    ck_assert_int_eq(ts_reduce_fill_identity(a, 1, (ts_dtype)dt, TS_REDUCE_AVG, &err),
                     TS_BAD_DTYPE);
  }
}
END_TEST

/* prod: integer products wrap like a C cast of the exact product, bool is and, floats as the
 * naive product; the identity is 1. */
START_TEST(prod_wraps_and_bool_is_and) {
  int8_t a8[2] = {100, -128}, b8[2] = {3, -1};
  ck_assert_int_eq(ts_reduce(a8, b8, 2, TS_I8, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert_int_eq(a8[0], (int8_t)(uint8_t)300);
  ck_assert_int_eq(a8[1], -128); /* -128 * -1 = 128 wraps to -128 */
  uint16_t u[1] = {65535}, v[1] = {65535}; /* 65535^2 must not overflow int on the way */
  ck_assert_int_eq(ts_reduce(u, v, 1, TS_U16, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert_uint_eq(u[0], (uint16_t)(65535u * 65535u));
  int64_t x[1] = {INT64_MAX}, y[1] = {2};
  ck_assert_int_eq(ts_reduce(x, y, 1, TS_I64, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert(x[0] == -2);
  uint8_t bb[4] = {0, 0, 1, 1}, c8[4] = {0, 1, 0, 1};
  ck_assert_int_eq(ts_reduce(bb, c8, 4, TS_BOOL, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert(bb[0] == 0 && bb[1] == 0 && bb[2] == 0 && bb[3] == 1);
  float f[3] = {1.5f, -2.0f, 0.0f}, g[3] = {4.0f, 0.25f, -3.0f};
  ck_assert_int_eq(ts_reduce(f, g, 3, TS_F32, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert(f[0] == 6.0f && f[1] == -0.5f && f[2] == 0.0f && signbit(f[2]));
  uint16_t h[1] = {ts_f32_to_bf16(3.0f)}, k[1] = {ts_f32_to_bf16(-0.5f)};
  ck_assert_int_eq(ts_reduce(h, k, 1, TS_BF16, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert(ts_bf16_to_f32(h[0]) == -1.5f);
  double one;
  ck_assert_int_eq(ts_reduce_fill_identity(&one, 1, TS_F64, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert(one == 1.0);
  uint32_t one32;
  ck_assert_int_eq(ts_reduce_fill_identity(&one32, 1, TS_U32, TS_REDUCE_PROD, NULL), TS_OK);
  ck_assert_uint_eq(one32, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("reduce");
  TCase *tc = tcase_create("reduce");
  tcase_add_test(tc, all_dtypes_all_ops);
  tcase_add_test(tc, half_precision_rounds_once_in_f32);
  tcase_add_test(tc, nan_propagates_and_ints_wrap);
  tcase_add_test(tc, identities);
  tcase_add_test(tc, names_and_errors);
  tcase_add_test(tc, avg_divides_once);
  tcase_add_test(tc, prod_wraps_and_bool_is_and);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
