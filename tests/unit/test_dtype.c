/* test_dtype.c - dtype names and conversions against independent references: the compiler's own
 * _Float16 for f16, a search over the bit patterns for bf16 and for exact (64-bit) sources, and
 * the documented integer rules (truncate and saturate from floats, wrap between integers); the
 * check that a conversion keeps every value, and the dtype spellings. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ts_kernels.h"
#include "check_main.h"

static uint64_t rng_state = 88172645463325252u;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Value of a non-negative bit pattern of a small float format; the infinity pattern counts as
 * the next power of two so that rounding to nearest sends half-way above the largest to inf. */
static long double small_value(uint16_t bits, bool bf16) {
  if (bf16)
    return (bits & 0x7fff) == 0x7f80 ? ldexpl(1, 128) : ts_bf16_to_f32(bits);
  return (bits & 0x7fff) == 0x7c00 ? 65536.0L : ts_f16_to_f32(bits);
}

/* Round-to-nearest-even of an exact value to f16/bf16 by binary search over the patterns. */
static uint16_t search_round(long double v, bool bf16) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  long double a = fabsl(v);
  uint16_t lo = 0, hi = bf16 ? 0x7f80 : 0x7c00; /* largest pattern with value <= a */
  if (a >= small_value(hi, bf16))
    return sign | hi;
  while (lo < hi) {
    uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
    if (small_value(mid, bf16) <= a)
      lo = mid;
    else
      hi = (uint16_t)(mid - 1);
  }
  long double down = a - small_value(lo, bf16), up = small_value((uint16_t)(lo + 1), bf16) - a;
  if (up < down || (up == down && (lo & 1)))
    lo++;
  return sign | lo;
}

START_TEST(test_names) {
  ts_dtype dt;
  ts_error err;
  ck_assert_int_eq(ts_dtype_parse("bf16", &dt, &err), TS_OK);
  ck_assert_int_eq(dt, TS_BF16);
  ck_assert_int_eq(ts_dtype_size(TS_I64), 8);
  ck_assert_str_eq(ts_dtype_name(TS_U8), "u8");
  ck_assert_int_eq(ts_dtype_parse("float", &dt, &err), TS_BAD_DTYPE);
  ck_assert_ptr_nonnull(strstr(err.msg, "f32, f64, f16, bf16, i8, i32, i64, u8"));
  ck_assert(!ts_dtype_valid(TS_DTYPE_COUNT));
}
END_TEST

START_TEST(test_f16_exhaustive) {
#ifdef __FLT16_MAX__
  for (uint32_t h = 0; h < 65536; h++) { /* widening is exact */
    _Float16 x;
    uint16_t hb = (uint16_t)h;
    memcpy(&x, &hb, 2);
    float ref = (float)x, got = ts_f16_to_f32(hb);
    ck_assert(isnan(ref) ? isnan(got) : memcmp(&ref, &got, 4) == 0);
  }
  for (int i = 0; i < 2000000; i++) { /* narrowing: random f32 patterns, all exponents */
    uint32_t u = (uint32_t)rnd();
    float f;
    memcpy(&f, &u, 4);
    _Float16 r = (_Float16)f;
    uint16_t rb;
    memcpy(&rb, &r, 2);
    uint16_t got = ts_f32_to_f16(f);
    if (isnan(f))
      ck_assert(((got & 0x7c00) == 0x7c00) && (got & 0x3ff));
    else
      ck_assert_msg(got == rb, "f32 %a: %04x != %04x", f, got, rb);
  }
#endif
  /* half-way and near-half-way values around every f16, from f32 and from f64 */
  for (uint32_t h = 0; h < 0x7c00; h++) {
    long double v = small_value((uint16_t)h, false), n = small_value((uint16_t)(h + 1), false);
    long double mid = (v + n) / 2;
    float m32 = (float)mid;
    double m64 = (double)mid;
    ck_assert_uint_eq(ts_f32_to_f16(m32), search_round(m32, false));
    ck_assert_uint_eq(ts_f64_to_f16(m64), search_round(m64, false));
    ck_assert_uint_eq(ts_f64_to_f16(nextafter(m64, 0)), search_round(nextafter(m64, 0), false));
    ck_assert_uint_eq(ts_f64_to_f16(-nextafter(m64, 1e9)), search_round(-nextafter(m64, 1e9), false));
  }
}
END_TEST

START_TEST(test_bf16) {
  for (int i = 0; i < 2000000; i++) {
    uint32_t u = (uint32_t)rnd();
    float f;
    memcpy(&f, &u, 4);
    if (isnan(f)) {
      ck_assert(isnan(ts_bf16_to_f32(ts_f32_to_bf16(f))));
      continue;
    }
    ck_assert_msg(ts_f32_to_bf16(f) == search_round(f, true), "%a", f);
    double d;
    uint64_t ud = rnd();
    memcpy(&d, &ud, 8);
    if (!isnan(d))
      ck_assert_msg(ts_f64_to_bf16(d) == search_round(d, true), "%a", d);
  }
  for (uint32_t b = 0; b < 65536; b++) /* widening is exact and round-trips */
    if (!isnan(ts_bf16_to_f32((uint16_t)b)))
      ck_assert_uint_eq(ts_f32_to_bf16(ts_bf16_to_f32((uint16_t)b)), b);
}
END_TEST

/* Integers to f16/bf16 are rounded once from the exact value (no double rounding above 2^53). */
START_TEST(test_int_to_small_floats) {
  int64_t vals[] = {0, 1, -1, 65504, 65519, 65520, -65520, 257, 259, INT64_MAX, INT64_MIN,
                    (INT64_C(1) << 53) + 1, (INT64_C(1) << 62) + (INT64_C(1) << 54) + 1};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    uint16_t h, b;
    ts_convert(&h, TS_F16, &vals[i], TS_I64, 1);
    ts_convert(&b, TS_BF16, &vals[i], TS_I64, 1);
    ck_assert_uint_eq(h, search_round((long double)vals[i], false));
    ck_assert_uint_eq(b, search_round((long double)vals[i], true));
  }
  for (int i = 0; i < 200000; i++) {
    int64_t v = (int64_t)rnd() >> (rnd() % 64);
    uint16_t b;
    ts_convert(&b, TS_BF16, &v, TS_I64, 1);
    ck_assert_uint_eq(b, search_round((long double)v, true));
  }
}
END_TEST

/* Every pair of dtypes on values each rule cares about, against the rules written out. */
START_TEST(test_all_pairs) {
  const double vals[] = {0, 1, -1, 2.75, -2.75, 127, 128, 200, 255, 300, -129, 1e10, -1e10, NAN};
  for (int sd = 0; sd < TS_DTYPE_COUNT; sd++)
    for (int dd = 0; dd < TS_DTYPE_COUNT; dd++)
      for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        /* the source element: the value stored in the source dtype */
        unsigned char sbuf[8], dbuf[8];
        double v = vals[i];
        ts_convert(sbuf, (ts_dtype)sd, &v, TS_F64, 1);
        long double sv; /* the exact source value */
        switch (sd) {
        case TS_F32: { float x; memcpy(&x, sbuf, 4); sv = x; break; }
        case TS_F64: { double x; memcpy(&x, sbuf, 8); sv = x; break; }
        case TS_F16: { uint16_t x; memcpy(&x, sbuf, 2); sv = ts_f16_to_f32(x); break; }
        case TS_BF16: { uint16_t x; memcpy(&x, sbuf, 2); sv = ts_bf16_to_f32(x); break; }
        case TS_I8: sv = (int8_t)sbuf[0]; break;
        case TS_U8: sv = sbuf[0]; break;
        case TS_I32: { int32_t x; memcpy(&x, sbuf, 4); sv = x; break; }
        default: { int64_t x; memcpy(&x, sbuf, 8); sv = (long double)x; break; }
        }
        ts_convert(dbuf, (ts_dtype)dd, sbuf, (ts_dtype)sd, 1);
        bool src_float = ts_dtype_is_float((ts_dtype)sd);
        long double lo = 0, hi = 0;
        switch (dd) {
        case TS_I8: lo = -128; hi = 127; break;
        case TS_U8: lo = 0; hi = 255; break;
        case TS_I32: lo = INT32_MIN; hi = INT32_MAX; break;
        case TS_I64: lo = (long double)INT64_MIN; hi = (long double)INT64_MAX; break;
        }
        switch (dd) {
        case TS_F32: { float x; memcpy(&x, dbuf, 4); ck_assert(isnan(sv) ? isnan(x) : x == (float)sv); break; }
        case TS_F64: { double x; memcpy(&x, dbuf, 8); ck_assert(isnan(sv) ? isnan(x) : x == (double)sv); break; }
        case TS_F16: { uint16_t x; memcpy(&x, dbuf, 2); ck_assert(isnan(sv) ? isnan(ts_f16_to_f32(x)) : x == search_round(sv, false)); break; }
        case TS_BF16: { uint16_t x; memcpy(&x, dbuf, 2); ck_assert(isnan(sv) ? isnan(ts_bf16_to_f32(x)) : x == search_round(sv, true)); break; }
        default: {
          int64_t got = 0, want;
          if (dd == TS_I8) got = (int8_t)dbuf[0];
          else if (dd == TS_U8) got = dbuf[0];
          else if (dd == TS_I32) { int32_t x; memcpy(&x, dbuf, 4); got = x; }
          else memcpy(&got, dbuf, 8);
          if (src_float) { /* truncate toward zero, saturate, NaN -> 0 */
            long double t = isnan(sv) ? 0 : truncl(sv);
            want = t <= lo ? (int64_t)lo : t >= hi ? (int64_t)hi : (int64_t)t;
          } else { /* wrap */
            uint64_t bits = (uint64_t)(int64_t)sv;
            want = dd == TS_I8 ? (int8_t)(uint8_t)bits : dd == TS_U8 ? (uint8_t)bits
                 : dd == TS_I32 ? (int32_t)(uint32_t)bits : (int64_t)bits;
          }
          ck_assert_msg(got == want, "%s -> %s of %Lg: %lld != %lld", ts_dtype_name((ts_dtype)sd),
                        ts_dtype_name((ts_dtype)dd), sv, (long long)got, (long long)want);
        }
        }
      }
}
END_TEST

/* The exact value of one element of a dtype. */
static long double exact_value(const unsigned char *b, ts_dtype dt) {
  switch (dt) {
  case TS_F32: { float x; memcpy(&x, b, 4); return x; }
  case TS_F64: { double x; memcpy(&x, b, 8); return x; }
  case TS_F16: { uint16_t x; memcpy(&x, b, 2); return ts_f16_to_f32(x); }
  case TS_BF16: { uint16_t x; memcpy(&x, b, 2); return ts_bf16_to_f32(x); }
  case TS_I8: return (int8_t)b[0];
  case TS_U8: return b[0];
  case TS_I32: { int32_t x; memcpy(&x, b, 4); return x; }
  default: { int64_t x; memcpy(&x, b, 8); return (long double)x; }
  }
}

/* ts_convert_check against a reference verdict: an integer target holds the truncated value
 * (long double comparisons with the limits); a float target overflows when the correctly
 * rounded value (the compiler's cast for f32, the pattern search for f16/bf16) is infinite. The
 * refusal names both dtypes and the element's index. */
START_TEST(test_convert_check) {
  const double vals[] = {0, 1, -1, 2.75, -0.99, 127, 127.99, 128, -128.99, -129, 255.5, 256, -1,
                         65504, 65519.99, 65520, 70000, 2147483647.0, 2147483648.0,
                         -2147483648.99, -2147483649.0, 0x1p62, 0x1p63, -0x1p63, 1e30,
                         0x1p128 - 0x1p120, 0x1p128 - 0x1p119, 3.4028234663852886e38, 1e300,
                         -1e300, INFINITY, -INFINITY, NAN, 5e-324};
  for (int sd = 0; sd < TS_DTYPE_COUNT; sd++)
    for (int dd = 0; dd < TS_DTYPE_COUNT; dd++)
      for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        unsigned char src[3][8];
        double zero = 0, v = vals[i];
        ts_convert(src[0], (ts_dtype)sd, &zero, TS_F64, 1);
        ts_convert(src[1], (ts_dtype)sd, &zero, TS_F64, 1);
        ts_convert(src[2], (ts_dtype)sd, &v, TS_F64, 1); /* saturated or rounded: any value */
        size_t es = ts_dtype_size((ts_dtype)sd);
        unsigned char packed[24];
        for (int k = 0; k < 3; k++)
          memcpy(packed + (size_t)k * es, src[k], es);
        long double sv = exact_value(src[2], (ts_dtype)sd);
        bool fits;
        switch (dd) {
        case TS_F64: fits = true; break;
        case TS_F32: fits = !isfinite(sv) || isfinite((float)sv); break;
        case TS_F16: fits = !isfinite(sv) || (search_round(sv, false) & 0x7fff) != 0x7c00; break;
        case TS_BF16: fits = !isfinite(sv) || (search_round(sv, true) & 0x7fff) != 0x7f80; break;
        default: {
          long double lo = dd == TS_I8 ? -128 : dd == TS_U8 ? 0 : dd == TS_I32 ? INT32_MIN
                                                              : (long double)INT64_MIN;
          long double hi = dd == TS_I8 ? 127 : dd == TS_U8 ? 255 : dd == TS_I32 ? INT32_MAX
                                                             : (long double)INT64_MAX;
          fits = isfinite(sv) && truncl(sv) >= lo && truncl(sv) <= hi;
        }
        }
        ts_error err;
        int rc = ts_convert_check(packed, (ts_dtype)sd, (ts_dtype)dd, 3, &err);
        ck_assert_msg((rc == TS_OK) == fits, "%s -> %s of %Lg: check says %d, reference %d",
                      ts_dtype_name((ts_dtype)sd), ts_dtype_name((ts_dtype)dd), sv, rc, fits);
        if (rc) {
          char both[32];
          snprintf(both, sizeof both, "converting %s to %s", ts_dtype_name((ts_dtype)sd),
                   ts_dtype_name((ts_dtype)dd));
          ck_assert_int_eq(rc, TS_BAD_DTYPE);
          ck_assert_msg(strstr(err.msg, both) && strstr(err.msg, "element 2"), "%s", err.msg);
        }
      }
}
END_TEST

START_TEST(test_spellings) {
  const char *const text[] = {"f32", "float32", "f64", "float64", "f16", "float16", "bf16",
                              "bfloat16", "i8", "int8", "i32", "int32", "i64", "int64", "u8",
                              "uint8"};
  const ts_dtype want[] = {TS_F32, TS_F32, TS_F64, TS_F64, TS_F16, TS_F16, TS_BF16, TS_BF16,
                           TS_I8, TS_I8, TS_I32, TS_I32, TS_I64, TS_I64, TS_U8, TS_U8};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    ts_dtype dt = TS_DTYPE_COUNT;
    ck_assert_int_eq(ts_dtype_parse_spelling(text[i], &dt, NULL), TS_OK);
    ck_assert_int_eq(dt, want[i]);
  }
  ts_dtype dt;
  ts_error err;
  ck_assert_int_eq(ts_dtype_parse_spelling("uint16", &dt, &err), TS_BAD_DTYPE);
  ck_assert(strstr(err.msg, "'uint16'") && strstr(err.msg, "bfloat16"));
  ck_assert_int_eq(ts_dtype_parse("float32", &dt, NULL), TS_BAD_DTYPE); /* the wire: names only */
}
END_TEST

int main(void) {
  Suite *s = suite_create("dtype");
  TCase *tc = tcase_create("dtype");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_f16_exhaustive);
  tcase_add_test(tc, test_bf16);
  tcase_add_test(tc, test_int_to_small_floats);
  tcase_add_test(tc, test_all_pairs);
  tcase_add_test(tc, test_convert_check);
  tcase_add_test(tc, test_spellings);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
