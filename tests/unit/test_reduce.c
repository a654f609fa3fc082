/* test_reduce.c - the reduction kernels of partial placements against naive references: sum, max,
 * min, prod and avg of every dtype that has them, f16/bf16 reduced in f32 and rounded once, avg's
 * one division (ts_reduce_finish), NaN propagation, integer wrap-around, bool as or/and,
 * identities, names and error paths (the 8-bit floats, which have no reductions, and avg of the
 * integer dtypes and bool, refused by name); c64 and c128: sums, avg and the complex product
 * against a long double reference, NaN and infinities as numpy's multiply gives them, max and
 * min refused by name. */
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
static bool is_complex(int dt) { return ts_dtype_is_complex((ts_dtype)dt); }
/* Whether dt has op (avg: the floats and complex dtypes; complex: no max or min). */
static bool has_op(int dt, int op) {
  if (is_complex(dt))
    return op != TS_REDUCE_MAX && op != TS_REDUCE_MIN;
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
  case TS_C64:
    ((float *)p)[2 * i] = (float)v;
    ((float *)p)[2 * i + 1] = 0;
    break;
  case TS_C128:
    ((double *)p)[2 * i] = v;
    ((double *)p)[2 * i + 1] = 0;
    break;
  default: break;
  }
}

START_TEST(all_dtypes_all_ops) {
  const size_t n = 257;
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++)
    for (int op = 0; op < TS_REDUCE_COUNT; op++) {
      if (!has_op(dt, op) || is_complex(dt)) /* complex: complex_against_reference */
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
      ck_assert_msg(memcmp(a, want, n * es) == 0, "dtype %s op %s", ts_dtype_name((ts_dtype)dt),
                    ts_reduce_name((ts_reduce_op)op));
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
      unsigned char id[16 * 5], v[16 * 5];
      ck_assert_int_eq(ts_reduce_fill_identity(id, 5, (ts_dtype)dt, (ts_reduce_op)op, NULL), TS_OK);
      for (size_t i = 0; i < 5; i++)
        put(v, i, (ts_dtype)dt,
            dt == TS_BOOL ? (double)(i % 2) : (double)(i * 7 % 11) - (is_unsigned(dt) ? 0 : 3));
      unsigned char keep[16 * 5];
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
  ck_assert_int_eq(ts_reduce_fill_identity(&a, 1, (ts_dtype)-1, TS_REDUCE_SUM, &err), TS_BAD_DTYPE);
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
                        strstr(err.msg, "bool"),
                    "%s", err.msg);
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
    if (ts_dtype_is_float((ts_dtype)dt) || is_complex(dt))
      continue;
    unsigned char a[8] = {3}, b[8] = {4}, keep[8] = {3};
    ck_assert_int_eq(ts_reduce(a, b, 1, (ts_dtype)dt, TS_REDUCE_AVG, &err), TS_BAD_DTYPE);
    ck_assert_msg(strstr(err.msg, ts_dtype_name((ts_dtype)dt)) && strstr(err.msg, "f32") &&
                      strstr(err.msg, "sum, prod, max or min"),
                  "%s", err.msg);
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
  ck_assert_int_eq(a8[1], -128);           /* -128 * -1 = 128 wraps to -128 */
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

/* Reads element i of a c64 or c128 array as a long double complex pair. */
static void cget(const void *p, ts_dtype dt, size_t i, long double *re, long double *im) {
  if (dt == TS_C64) {
    *re = ((const float *)p)[2 * i];
    *im = ((const float *)p)[2 * i + 1];
  } else {
    *re = ((const double *)p)[2 * i];
    *im = ((const double *)p)[2 * i + 1];
  }
}

static void cput(void *p, ts_dtype dt, size_t i, double re, double im) {
  if (dt == TS_C64) {
    ((float *)p)[2 * i] = (float)re;
    ((float *)p)[2 * i + 1] = (float)im;
  } else {
    ((double *)p)[2 * i] = re;
    ((double *)p)[2 * i + 1] = im;
  }
}

/* Whether got is within tol (relative to the operands' magnitude m) of want. */
static bool close_to(long double got, long double want, long double m, long double tol) {
  return fabsl(got - want) <= tol * (m > 1 ? m : 1);
}

/* k random contributions of c64 and c128 reduced one by one with sum, avg and prod, against
 * the same chain in long double (prod: (ac - bd) + (ad + bc)i); avg divided once at the end. */
START_TEST(complex_against_reference) {
  const ts_dtype cdt[] = {TS_C64, TS_C128};
  const ts_reduce_op ops[] = {TS_REDUCE_SUM, TS_REDUCE_AVG, TS_REDUCE_PROD};
  const size_t n = 333;
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 3; o++)
      for (int k = 1; k <= 5; k++) {
        ts_dtype dt = cdt[t];
        ts_reduce_op op = ops[o];
        size_t es = ts_dtype_size(dt);
        unsigned char *acc = malloc(n * es), *x = malloc(n * es);
        long double *rr = malloc(n * sizeof *rr), *ri = malloc(n * sizeof *ri);
        long double *mag = malloc(n * sizeof *mag);
        ck_assert_int_eq(ts_reduce_fill_identity(acc, n, dt, op, NULL), TS_OK);
        for (size_t i = 0; i < n; i++) {
          rr[i] = op == TS_REDUCE_PROD ? 1 : 0;
          ri[i] = 0;
          mag[i] = 1;
        }
        for (int c = 0; c < k; c++) {
          for (size_t i = 0; i < n; i++) {
            double re = ((double)(rnd() % 2000001) - 1e6) / 5e5; /* in [-2, 2] */
            double im = ((double)(rnd() % 2000001) - 1e6) / 5e5;
            cput(x, dt, i, re, im);
            long double a, b;
            cget(x, dt, i, &a, &b); /* the value as stored (c64: rounded to f32) */
            if (op == TS_REDUCE_PROD) {
              long double r = rr[i] * a - ri[i] * b, m = rr[i] * b + ri[i] * a;
              rr[i] = r;
              ri[i] = m;
              mag[i] *= 2 * sqrtl(a * a + b * b) + 1;
            } else {
              rr[i] += a;
              ri[i] += b;
              mag[i] += fabsl(a) + fabsl(b);
            }
          }
          ck_assert_int_eq(ts_reduce(acc, x, n, dt, op, NULL), TS_OK);
        }
        ck_assert_int_eq(ts_reduce_finish(acc, n, dt, op, k, NULL), TS_OK);
        long double tol = dt == TS_C64 ? 1e-6L * (k + 1) : 1e-15L * (k + 1);
        for (size_t i = 0; i < n; i++) {
          long double gr, gi, wr = rr[i], wi = ri[i];
          if (op == TS_REDUCE_AVG) {
            wr /= k;
            wi /= k;
          }
          cget(acc, dt, i, &gr, &gi);
          ck_assert_msg(close_to(gr, wr, mag[i], tol) && close_to(gi, wi, mag[i], tol),
                        "%s %s over %d, element %zu: got %Lg%+Lgi, want %Lg%+Lgi",
                        ts_dtype_name(dt), ts_reduce_name(op), k, i, gr, gi, wr, wi);
        }
        free(acc);
        free(x);
        free(rr);
        free(ri);
        free(mag);
      }
}
END_TEST

/* Exact products and numpy's NaN and infinities (numpy 1.24: np.complex64 a * b). */
START_TEST(complex_special_values) {
  const double inf = INFINITY, nan = NAN;
  const double a[][2] = {{1, 2}, {inf, 0}, {nan, 0}, {inf, inf}, {0, inf}, {-0.0, 0}, {1, nan}};
  const double b[][2] = {{3, 4}, {1, 0}, {1, 1}, {0, 0}, {0, 1}, {1, 0}, {2, 0}};
  /* numpy's products; 2 marks NaN */
  const double want[][2] = {{-5, 10}, {inf, 2}, {2, 2}, {2, 2}, {-inf, 2}, {-0.0, 0}, {2, 2}};
  const size_t n = sizeof a / sizeof a[0];
  for (int t = 0; t < 2; t++) {
    ts_dtype dt = t ? TS_C128 : TS_C64;
    unsigned char d[16 * 8], s[16 * 8], sum[16 * 8];
    for (size_t i = 0; i < n; i++) {
      cput(d, dt, i, a[i][0], a[i][1]);
      cput(s, dt, i, b[i][0], b[i][1]);
    }
    memcpy(sum, d, n * 16);
    ck_assert_int_eq(ts_reduce(d, s, n, dt, TS_REDUCE_PROD, NULL), TS_OK);
    for (size_t i = 0; i < n; i++) {
      long double g[2];
      cget(d, dt, i, &g[0], &g[1]);
      for (int p = 0; p < 2; p++) {
        if (want[i][p] == 2)
          ck_assert_msg(isnan(g[p]), "%s element %zu part %d: %Lg, want nan", ts_dtype_name(dt), i,
                        p, g[p]);
        else
          ck_assert_msg(g[p] == want[i][p] && !signbit(g[p]) == !signbit(want[i][p]),
                        "%s element %zu part %d: %Lg, want %g", ts_dtype_name(dt), i, p, g[p],
                        want[i][p]);
      }
    }
    /* sums part by part: inf + 1 is inf, nan stays nan, inf + -inf is nan */
    double p[] = {inf, 0, nan, 1, inf, -inf};
    double q[] = {1, 2, 0, 1, -inf, -inf};
    cput(sum, dt, 0, p[0], p[1]);
    cput(sum, dt, 1, p[2], p[3]);
    cput(sum, dt, 2, p[4], p[5]);
    cput(s, dt, 0, q[0], q[1]);
    cput(s, dt, 1, q[2], q[3]);
    cput(s, dt, 2, q[4], q[5]);
    ck_assert_int_eq(ts_reduce(sum, s, 3, dt, TS_REDUCE_SUM, NULL), TS_OK);
    long double r[6];
    for (size_t i = 0; i < 3; i++)
      cget(sum, dt, i, &r[2 * i], &r[2 * i + 1]);
    ck_assert(r[0] == inf && r[1] == 2 && isnan(r[2]) && r[3] == 2 && isnan(r[4]) && r[5] == -inf);
    /* the identity of prod is 1 + 0i */
    ck_assert_int_eq(ts_reduce_fill_identity(d, 2, dt, TS_REDUCE_PROD, NULL), TS_OK);
    long double u, v;
    cget(d, dt, 1, &u, &v);
    ck_assert(u == 1 && v == 0 && !signbit(v));
  }
}
END_TEST

/* max and min of a complex dtype are refused naming it and the reductions it has. */
START_TEST(complex_max_min_refused) {
  ts_error err;
  const ts_dtype cdt[] = {TS_C64, TS_C128};
  const ts_reduce_op ops[] = {TS_REDUCE_MAX, TS_REDUCE_MIN};
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 2; o++) {
      double x[2] = {1, 2}, y[2] = {3, 4};
      ck_assert_int_eq(ts_reduce(x, y, 1, cdt[t], ops[o], &err), TS_BAD_DTYPE);
      ck_assert_msg(strstr(err.msg, ts_dtype_name(cdt[t])) && strstr(err.msg, "no order") &&
                        strstr(err.msg, "sum, avg and prod") &&
                        strstr(err.msg, ts_reduce_name(ops[o])),
                    "%s", err.msg);
      ck_assert(x[0] == 1 && x[1] == 2);
      ck_assert_int_eq(ts_reduce_check(cdt[t], ops[o], &err), TS_BAD_DTYPE);
      ck_assert_int_eq(ts_reduce_fill_identity(x, 1, cdt[t], ops[o], &err), TS_BAD_DTYPE);
    }
  ck_assert_int_eq(ts_reduce_check(TS_C64, TS_REDUCE_AVG, NULL), TS_OK);
  ck_assert_int_eq(ts_reduce_check(TS_C128, TS_REDUCE_PROD, NULL), TS_OK);
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
  tcase_add_test(tc, complex_against_reference);
  tcase_add_test(tc, complex_special_values);
  tcase_add_test(tc, complex_max_min_refused);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
