/* test_dtype.c - dtype names and conversions against independent references: the compiler's own
 * _Float16 for f16, a search over the bit patterns for bf16 and for exact (64-bit) sources, and
 * the documented integer rules (truncate and saturate from floats, wrap between integers, nonzero
 * to bool); the 8-bit floats against their format written out (every code decoded by its fields,
 * rounding by picking the nearest of all codes, ties to the even code); the check that a
 * conversion keeps every value, and the dtype spellings; c64 and c128: a real value as the real
 * part (imaginary 0), part by part between them, no conversion to a real dtype (refused by the
 * check and the copy kernel), and strided c128 copies against the reference kernel. */
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

/* ---- 8-bit float references: the formats written out field by field ---------------------- */

/* The value of code c (NaN for the NaN codes). */
static long double f8_ref_value(uint8_t c, bool e4m3) {
  int mbits = e4m3 ? 3 : 2, ebits = e4m3 ? 4 : 5, bias = e4m3 ? 7 : 15;
  int e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
  long double sign = (c & 0x80) ? -1.0L : 1.0L, frac = (long double)m / (1 << mbits);
  if (e4m3 && e == 15 && m == 7)
    return NAN;
  if (!e4m3 && e == 31)
    return m ? NAN : sign * INFINITY;
  if (e == 0)
    return sign * frac * powl(2.0L, 1 - bias);
  return sign * (1 + frac) * powl(2.0L, e - bias);
}

/* Round to nearest of every finite non-negative code, ties to the even code; past the largest:
 * f8_e5m2 gives infinity from 61440 (half way to 2^16, a tie that goes to the even infinity
 * code), f8_e4m3 keeps 448 up to 464 (the tie goes to 448's even code) and gives NaN above. */
static uint8_t f8_ref_round(long double v, bool e4m3) {
  if (isnan(v))
    return e4m3 ? 0x7f : 0x7e;
  uint8_t sign = signbit(v) ? 0x80 : 0;
  long double a = fabsl(v);
  if (e4m3 && a > 464)
    return sign | 0x7f;
  if (!e4m3 && a >= 61440)
    return sign | 0x7c;
  int best = 0;
  long double bd = INFINITY;
  for (int c = 0; c < 0x80; c++) {
    long double x = f8_ref_value((uint8_t)c, e4m3);
    if (isnan(x) || isinf(x))
      continue;
    long double d = fabsl(x - a);
    if (d < bd || (d == bd && (c & 1) == 0)) {
      bd = d;
      best = c;
    }
  }
  return sign | (uint8_t)best;
}

static bool f8_is_nan(uint8_t c, bool e4m3) {
  return e4m3 ? (c & 0x7f) == 0x7f : (c & 0x7f) > 0x7c;
}

START_TEST(test_f8_decode_exhaustive) {
  for (int k = 0; k < 2; k++) {
    bool e4m3 = k == 0;
    for (int c = 0; c < 256; c++) {
      float got = e4m3 ? ts_f8_e4m3_to_f32((uint8_t)c) : ts_f8_e5m2_to_f32((uint8_t)c);
      long double want = f8_ref_value((uint8_t)c, e4m3);
      ck_assert_msg(isnan(want) ? isnan(got)
                                : (long double)got == want && !signbit(got) == !signbit(want),
                    "%s code 0x%02x: %a, want %La", e4m3 ? "e4m3" : "e5m2", c, got, want);
      if (isnan(want))
        continue;
      uint8_t back = e4m3 ? ts_f32_to_f8_e4m3(got) : ts_f32_to_f8_e5m2(got); /* round trip */
      ck_assert_uint_eq(back, c);
      ck_assert_uint_eq(e4m3 ? ts_f64_to_f8_e4m3(got) : ts_f64_to_f8_e5m2(got), c);
    }
  }
  ck_assert(ts_f8_e4m3_to_f32(0x7e) == 448.0f && ts_f8_e5m2_to_f32(0x7b) == 57344.0f);
  ck_assert(isnan(ts_f8_e4m3_to_f32(0x7f)) && isnan(ts_f8_e4m3_to_f32(0xff)));
  ck_assert(isinf(ts_f8_e5m2_to_f32(0x7c)) && isnan(ts_f8_e5m2_to_f32(0x7d)));
}
END_TEST

/* f32, f64 and 64-bit integers to f8 against the nearest-code search. */
START_TEST(test_f8_round) {
  for (int k = 0; k < 2; k++) {
    bool e4m3 = k == 0;
    ts_dtype dt = e4m3 ? TS_F8_E4M3 : TS_F8_E5M2;
    /* every midpoint between neighbouring codes, and the doubles either side of it */
    for (int c = 0; c < 0x7f; c++) {
      long double v = f8_ref_value((uint8_t)c, e4m3), n = f8_ref_value((uint8_t)(c + 1), e4m3);
      if (!isfinite(v))
        continue;
      if (isnan(n) || isinf(n))
        n = e4m3 ? 480 : 65536;
      double mid = (double)((v + n) / 2);
      double probes[] = {mid, nextafter(mid, 0), nextafter(mid, 1e9), -mid, (double)v, -(double)n};
      for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        double d = probes[i];
        uint8_t want = f8_ref_round(d, e4m3);
        uint8_t got64 = e4m3 ? ts_f64_to_f8_e4m3(d) : ts_f64_to_f8_e5m2(d);
        uint8_t got32 = e4m3 ? ts_f32_to_f8_e4m3((float)d) : ts_f32_to_f8_e5m2((float)d);
        ck_assert_msg(got64 == want, "%s of %a: 0x%02x, want 0x%02x", ts_dtype_name(dt), d, got64,
                      want);
        ck_assert_uint_eq(got32, f8_ref_round((float)d, e4m3));
      }
    }
    for (int i = 0; i < 300000; i++) { /* random f32 patterns of every exponent */
      uint32_t u = (uint32_t)rnd();
      float f;
      memcpy(&f, &u, 4);
      uint8_t got = e4m3 ? ts_f32_to_f8_e4m3(f) : ts_f32_to_f8_e5m2(f);
      if (isnan(f))
        ck_assert(f8_is_nan(got, e4m3));
      else
        ck_assert_msg(got == f8_ref_round(f, e4m3), "%a: 0x%02x", f, got);
    }
    int64_t ints[] = {0,   1,     -1,    17,    19,     447,       448,      464,
                      465, 57344, 61439, 61440, -61440, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
      uint8_t got;
      ts_convert(&got, dt, &ints[i], TS_I64, 1);
      ck_assert_uint_eq(got, f8_ref_round((long double)ints[i], e4m3));
    }
    uint64_t big = UINT64_MAX;
    uint8_t got;
    ts_convert(&got, dt, &big, TS_U64, 1);
    ck_assert_uint_eq(got, f8_ref_round((long double)big, e4m3));
    double inf = -INFINITY;
    ts_convert(&got, dt, &inf, TS_F64, 1);
    ck_assert_uint_eq(got, e4m3 ? 0xff : 0xfc); /* e4m3 has no infinity: NaN */
  }
}
END_TEST

START_TEST(test_names) {
  ts_dtype dt;
  ts_error err;
  ck_assert_int_eq(ts_dtype_parse("bf16", &dt, &err), TS_OK);
  ck_assert_int_eq(dt, TS_BF16);
  ck_assert_int_eq(ts_dtype_size(TS_I64), 8);
  ck_assert_str_eq(ts_dtype_name(TS_U8), "u8");
  ck_assert_int_eq(ts_dtype_parse("float", &dt, &err), TS_BAD_DTYPE);
  ck_assert_ptr_nonnull(strstr(err.msg, "f32, f64, f16, bf16, i8, i32, i64, u8, bool, i16, u16, "
                                        "u32, u64, f8_e4m3, f8_e5m2"));
  ck_assert(!ts_dtype_valid(TS_DTYPE_COUNT));
  const char *const names[] = {"bool", "i16", "u16", "u32", "u64", "f8_e4m3", "f8_e5m2"};
  const ts_dtype dts[] = {TS_BOOL, TS_I16, TS_U16, TS_U32, TS_U64, TS_F8_E4M3, TS_F8_E5M2};
  const size_t sizes[] = {1, 2, 2, 4, 8, 1, 1};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    ck_assert_int_eq(ts_dtype_parse(names[i], &dt, &err), TS_OK);
    ck_assert_int_eq(dt, dts[i]);
    ck_assert_str_eq(ts_dtype_name(dts[i]), names[i]);
    ck_assert_uint_eq(ts_dtype_size(dts[i]), sizes[i]);
    ck_assert(ts_dtype_is_float(dts[i]) == (i >= 5));
  }
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
    ck_assert_uint_eq(ts_f64_to_f16(-nextafter(m64, 1e9)),
                      search_round(-nextafter(m64, 1e9), false));
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
  int64_t vals[] = {0,
                    1,
                    -1,
                    65504,
                    65519,
                    65520,
                    -65520,
                    257,
                    259,
                    INT64_MAX,
                    INT64_MIN,
                    (INT64_C(1) << 53) + 1,
                    (INT64_C(1) << 62) + (INT64_C(1) << 54) + 1};
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

/* The exact value of one element of a dtype. */
static long double exact_value(const unsigned char *b, ts_dtype dt) {
  switch (dt) {
  case TS_F32: {
    float x;
    memcpy(&x, b, 4);
    return x;
  }
  case TS_F64: {
    double x;
    memcpy(&x, b, 8);
    return x;
  }
  case TS_F16: {
    uint16_t x;
    memcpy(&x, b, 2);
    return ts_f16_to_f32(x);
  }
  case TS_BF16: {
    uint16_t x;
    memcpy(&x, b, 2);
    return ts_bf16_to_f32(x);
  }
  case TS_F8_E4M3: return f8_ref_value(b[0], true);
  case TS_F8_E5M2: return f8_ref_value(b[0], false);
  case TS_I8: return (int8_t)b[0];
  case TS_U8: return b[0];
  case TS_BOOL: return b[0];
  case TS_I16: {
    int16_t x;
    memcpy(&x, b, 2);
    return x;
  }
  case TS_U16: {
    uint16_t x;
    memcpy(&x, b, 2);
    return x;
  }
  case TS_I32: {
    int32_t x;
    memcpy(&x, b, 4);
    return x;
  }
  case TS_U32: {
    uint32_t x;
    memcpy(&x, b, 4);
    return x;
  }
  case TS_U64: {
    uint64_t x;
    memcpy(&x, b, 8);
    return (long double)x;
  }
  default: {
    int64_t x;
    memcpy(&x, b, 8);
    return (long double)x;
  }
  }
}

/* The range and width of an integer dtype (bool: 0 to 1, width 0: not wrapped). */
static void int_ref_range(ts_dtype dt, long double *lo, long double *hi, int *bits, bool *sgn) {
  static const struct {
    int bits;
    bool sgn;
  } t[TS_DTYPE_COUNT] = {[TS_I8] = {8, true},    [TS_I16] = {16, true},  [TS_I32] = {32, true},
                         [TS_I64] = {64, true},  [TS_U8] = {8, false},   [TS_U16] = {16, false},
                         [TS_U32] = {32, false}, [TS_U64] = {64, false}, [TS_BOOL] = {1, false}};
  *bits = t[dt].bits;
  *sgn = t[dt].sgn;
  *lo = *sgn ? -ldexpl(1, *bits - 1) : 0;
  *hi = *sgn ? ldexpl(1, *bits - 1) - 1 : ldexpl(1, *bits) - 1;
}

/* Every pair of dtypes on values each rule cares about, against the rules written out. */
START_TEST(test_all_pairs) {
  const double vals[] = {0,     1,     -1,   2.75,  -2.75, 127,   128,    200,
                         255,   300,   -129, 448,   464,   465,   40000,  -40000,
                         70000, 61440, 1e10, -1e10, 1e20,  -1e20, 0x1p63, NAN};
  for (int sd = 0; sd < TS_DTYPE_COUNT; sd++)
    for (int dd = 0; dd < TS_DTYPE_COUNT; dd++)
      for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        if (ts_dtype_is_complex((ts_dtype)sd) || ts_dtype_is_complex((ts_dtype)dd))
          continue; /* test_complex_convert */
        /* the source element: the value stored in the source dtype */
        unsigned char sbuf[8], dbuf[8];
        double v = vals[i];
        ts_convert(sbuf, (ts_dtype)sd, &v, TS_F64, 1);
        long double sv = exact_value(sbuf, (ts_dtype)sd); /* the exact source value */
        ts_convert(dbuf, (ts_dtype)dd, sbuf, (ts_dtype)sd, 1);
        bool src_float = ts_dtype_is_float((ts_dtype)sd);
        const char *sn = ts_dtype_name((ts_dtype)sd), *dn = ts_dtype_name((ts_dtype)dd);
        switch (dd) {
        case TS_F32: {
          float x;
          memcpy(&x, dbuf, 4);
          ck_assert(isnan(sv) ? isnan(x) : x == (float)sv);
          break;
        }
        case TS_F64: {
          double x;
          memcpy(&x, dbuf, 8);
          ck_assert(isnan(sv) ? isnan(x) : x == (double)sv);
          break;
        }
        case TS_F16: {
          uint16_t x;
          memcpy(&x, dbuf, 2);
          ck_assert(isnan(sv) ? isnan(ts_f16_to_f32(x)) : x == search_round(sv, false));
          break;
        }
        case TS_BF16: {
          uint16_t x;
          memcpy(&x, dbuf, 2);
          ck_assert(isnan(sv) ? isnan(ts_bf16_to_f32(x)) : x == search_round(sv, true));
          break;
        }
        case TS_F8_E4M3:
        case TS_F8_E5M2: {
          bool e4m3 = dd == TS_F8_E4M3;
          ck_assert_msg(isnan(sv) ? f8_is_nan(dbuf[0], e4m3) : dbuf[0] == f8_ref_round(sv, e4m3),
                        "%s -> %s of %Lg: 0x%02x", sn, dn, sv, dbuf[0]);
          break;
        }
        default: {
          long double got = exact_value(dbuf, (ts_dtype)dd), want, lo, hi;
          int bits;
          bool sgn;
          int_ref_range((ts_dtype)dd, &lo, &hi, &bits, &sgn);
          if (dd == TS_BOOL) { /* nonzero (NaN too) is true */
            want = sv != 0;
          } else if (src_float) { /* truncate toward zero, saturate, NaN -> 0 */
            long double t = isnan(sv) ? 0 : truncl(sv);
            want = t <= lo ? lo : t >= hi ? hi : t;
          } else { /* wrap: the value modulo 2^bits, into the dtype's range */
            long double m = fmodl(sv, ldexpl(1, bits));
            if (m < 0)
              m += ldexpl(1, bits);
            want = sgn && m > hi ? m - ldexpl(1, bits) : m;
          }
          ck_assert_msg(got == want, "%s -> %s of %Lg: %Lg != %Lg", sn, dn, sv, got, want);
        }
        }
      }
}
END_TEST

/* ts_convert_check against a reference verdict: an integer target holds the truncated value
 * (long double comparisons with the limits); a float target overflows when the correctly
 * rounded value (the compiler's cast for f32, the pattern search for f16/bf16) is infinite. The
 * refusal names both dtypes and the element's index. */
START_TEST(test_convert_check) {
  const double vals[] = {0,
                         1,
                         -1,
                         2.75,
                         -0.99,
                         127,
                         127.99,
                         128,
                         -128.99,
                         -129,
                         255.5,
                         256,
                         -1,
                         65504,
                         65519.99,
                         65520,
                         70000,
                         2147483647.0,
                         2147483648.0,
                         -2147483648.99,
                         -2147483649.0,
                         0x1p62,
                         0x1p63,
                         -0x1p63,
                         1e30,
                         0x1p128 - 0x1p120,
                         0x1p128 - 0x1p119,
                         3.4028234663852886e38,
                         1e300,
                         -1e300,
                         INFINITY,
                         -INFINITY,
                         NAN,
                         5e-324,
                         0.5,
                         448,
                         464,
                         464.5,
                         480,
                         57344,
                         61439,
                         61440,
                         65535,
                         65536,
                         -32768,
                         -32769,
                         4294967295.0,
                         4294967296.0,
                         0x1p64,
                         0x1p63 - 1024};
  for (int sd = 0; sd < TS_DTYPE_COUNT; sd++)
    for (int dd = 0; dd < TS_DTYPE_COUNT; dd++)
      for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        if (ts_dtype_is_complex((ts_dtype)sd) || ts_dtype_is_complex((ts_dtype)dd))
          continue; /* test_complex_convert */
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
        case TS_F8_E5M2: fits = !isfinite(sv) || (f8_ref_round(sv, false) & 0x7f) != 0x7c; break;
        case TS_F8_E4M3:
          fits = isnan(sv) || (isfinite(sv) && !f8_is_nan(f8_ref_round(sv, true), true));
          break;
        case TS_BOOL: fits = sv == 0 || sv == 1; break;
        default: {
          long double lo, hi;
          int bits;
          bool sgn;
          int_ref_range((ts_dtype)dd, &lo, &hi, &bits, &sgn);
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
  const char *const text[] = {
      "f32",      "float32",   "f64",    "float64",    "f16",           "float16", "bf16",
      "bfloat16", "i8",        "int8",   "i32",        "int32",         "i64",     "int64",
      "u8",       "uint8",     "bool",   "int16",      "i16",           "uint16",  "u16",
      "uint32",   "u32",       "uint64", "u64",        "float8_e4m3fn", "f8_e4m3", "float8_e5m2",
      "f8_e5m2",  "complex64", "c64",    "complex128", "c128"};
  const ts_dtype want[] = {TS_F32,     TS_F32, TS_F64,  TS_F64,  TS_F16,     TS_F16,     TS_BF16,
                           TS_BF16,    TS_I8,  TS_I8,   TS_I32,  TS_I32,     TS_I64,     TS_I64,
                           TS_U8,      TS_U8,  TS_BOOL, TS_I16,  TS_I16,     TS_U16,     TS_U16,
                           TS_U32,     TS_U32, TS_U64,  TS_U64,  TS_F8_E4M3, TS_F8_E4M3, TS_F8_E5M2,
                           TS_F8_E5M2, TS_C64, TS_C64,  TS_C128, TS_C128};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    ts_dtype dt = TS_DTYPE_COUNT;
    ck_assert_int_eq(ts_dtype_parse_spelling(text[i], &dt, NULL), TS_OK);
    ck_assert_int_eq(dt, want[i]);
  }
  ts_dtype dt;
  ts_error err;
  ck_assert_int_eq(ts_dtype_parse_spelling("complex32", &dt, &err), TS_BAD_DTYPE);
  ck_assert(strstr(err.msg, "'complex32'") && strstr(err.msg, "bfloat16") &&
            strstr(err.msg, "f8_e4m3 (float8_e4m3fn)") && strstr(err.msg, "c64 (complex64)") &&
            strstr(err.msg, "c128 (complex128)"));
  ck_assert_int_eq(ts_dtype_parse("complex64", &dt, &err), TS_BAD_DTYPE);
  ck_assert_ptr_nonnull(strstr(err.msg, "f8_e5m2, c64, c128"));
  ck_assert_int_eq(ts_dtype_parse("float32", &dt, NULL), TS_BAD_DTYPE); /* the wire: names only */
}
END_TEST

/* The parts of element i of a c64 or c128 buffer. */
static void complex_parts(const unsigned char *b, ts_dtype dt, size_t i, long double *re,
                          long double *im) {
  if (dt == TS_C64) {
    float x[2];
    memcpy(x, b + i * 8, 8);
    *re = x[0];
    *im = x[1];
  } else {
    double x[2];
    memcpy(x, b + i * 16, 16);
    *re = x[0];
    *im = x[1];
  }
}

START_TEST(test_complex_convert) {
  const double vals[] = {0,     1,        -1,        2.75,  -2.75,  255,
                         300,   65504,    1e10,      -1e20, 0x1p63, 3.4028234663852886e38,
                         1e-40, INFINITY, -INFINITY, NAN};
  const size_t nv = sizeof vals / sizeof vals[0];
  const ts_dtype cdt[] = {TS_C64, TS_C128};
  /* every real dtype to c64 and c128: the value (rounded as by a cast to f32 or f64), imag +0 */
  for (int sd = 0; sd < TS_DTYPE_COUNT; sd++) {
    if (ts_dtype_is_complex((ts_dtype)sd))
      continue;
    for (int t = 0; t < 2; t++)
      for (size_t i = 0; i < nv; i++) {
        unsigned char sbuf[8], dbuf[16];
        double v = vals[i];
        if (sd == TS_F64 && cdt[t] == TS_C64 && isfinite(v) && fabs(v) > 3.4e38)
          continue;
        ts_convert(sbuf, (ts_dtype)sd, &v, TS_F64, 1);
        long double sv = exact_value(sbuf, (ts_dtype)sd), re, im;
        ts_convert(dbuf, cdt[t], sbuf, (ts_dtype)sd, 1);
        complex_parts(dbuf, cdt[t], 0, &re, &im);
        long double want = cdt[t] == TS_C64 ? (long double)(float)sv : (long double)(double)sv;
        ck_assert_msg((isnan(sv) ? isnan(re) : re == want) && im == 0 && !signbit(im),
                      "%s -> %s of %Lg: %Lg%+Lgi", ts_dtype_name((ts_dtype)sd),
                      ts_dtype_name(cdt[t]), sv, re, im);
        ts_error err;
        ck_assert_int_eq(ts_convert_check(sbuf, (ts_dtype)sd, cdt[t], 1, &err), TS_OK);
      }
  }
  /* c64 <-> c128 part by part; the same dtype moves the bytes */
  double parts[2 * 6] = {1.5, -2.25, 0.1, 1e-30, NAN, INFINITY, -0.0, 3e38, 1e39, -1e39, 7, 8};
  unsigned char c128[16 * 6], c64[8 * 6], back[16 * 6];
  memcpy(c128, parts, sizeof parts);
  ts_convert(c64, TS_C64, c128, TS_C128, 6);
  ts_convert(back, TS_C128, c64, TS_C64, 6);
  for (size_t i = 0; i < 6; i++) {
    long double r32, i32, r64, i64;
    complex_parts(c64, TS_C64, i, &r32, &i32);
    complex_parts(back, TS_C128, i, &r64, &i64);
    float wr = (float)parts[2 * i], wi = (float)parts[2 * i + 1];
    ck_assert(isnan(wr) ? isnan(r32) : r32 == wr);
    ck_assert(isnan(wi) ? isnan(i32) : i32 == wi);
    ck_assert(isnan(wr) ? isnan(r64) : r64 == wr); /* widening is exact */
    ck_assert(isnan(wi) ? isnan(i64) : i64 == wi);
  }
  ck_assert(signbit(((float *)c64)[6]));
  ts_convert(back, TS_C128, c128, TS_C128, 6);
  ck_assert(memcmp(back, c128, sizeof c128) == 0);
  /* the check: element 4's imaginary part (-1e39) overflows c64; infinities and NaN pass */
  ts_error err;
  ck_assert_int_eq(ts_convert_check(c128, TS_C128, TS_C64, 6, &err), TS_BAD_DTYPE);
  ck_assert_msg(strstr(err.msg, "converting c128 to c64") &&
                    strstr(err.msg, "element 4's real "
                                    "part") &&
                    strstr(err.msg, "1e+39"),
                "%s", err.msg);
  ck_assert_int_eq(ts_convert_check(c128, TS_C128, TS_C64, 4, &err), TS_OK);
  ck_assert_int_eq(ts_convert_check(c128, TS_C128, TS_C128, 6, &err), TS_OK);
  ck_assert_int_eq(ts_convert_check(c64, TS_C64, TS_C128, 6, &err), TS_OK);
  double big[2] = {1, 1e300};
  ck_assert_int_eq(ts_convert_check(big, TS_F64, TS_C64, 2, &err), TS_BAD_DTYPE);
  ck_assert_msg(strstr(err.msg, "converting f64 to c64") && strstr(err.msg, "element 1 "), "%s",
                err.msg);
  ck_assert_int_eq(ts_convert_check(big, TS_F64, TS_C128, 2, &err), TS_OK);
  /* complex to any real dtype: refused whatever the values, naming both */
  double zero[4] = {0, 0, 0, 0};
  for (int t = 0; t < 2; t++)
    for (int dd = 0; dd < TS_DTYPE_COUNT; dd++) {
      if (ts_dtype_is_complex((ts_dtype)dd))
        continue;
      char both[40];
      snprintf(both, sizeof both, "converting %s to %s", ts_dtype_name(cdt[t]),
               ts_dtype_name((ts_dtype)dd));
      ck_assert_int_eq(ts_convert_check(zero, cdt[t], (ts_dtype)dd, 1, &err), TS_BAD_DTYPE);
      ck_assert_msg(strstr(err.msg, both) && strstr(err.msg, "imaginary part") &&
                        strstr(err.msg, "c64 and c128 only"),
                    "%s", err.msg);
      ts_tensor src = {zero, 16, {0}}, dst = {back, 16, {0}};
      int64_t one[1] = {1};
      ck_assert_int_eq(ts_layout_plain(&src.layout, cdt[t], 1, one, NULL), TS_OK);
      ck_assert_int_eq(ts_layout_plain(&dst.layout, (ts_dtype)dd, 1, one, NULL), TS_OK);
      ck_assert_int_eq(ts_copy(&dst, &src, NULL, &err), TS_BAD_DTYPE);
      ck_assert_ptr_nonnull(strstr(err.msg, "imaginary part"));
    }
}
END_TEST

/* A transposing c128 copy (the 16-byte tiles) and a c64 -> c128 one against the reference. */
START_TEST(test_complex_copy) {
  const int64_t rows = 67, cols = 45;
  const ts_dtype dts[][2] = {{TS_C128, TS_C128}, {TS_C64, TS_C128}, {TS_F32, TS_C128}};
  for (int k = 0; k < 3; k++) {
    ts_dtype sdt = dts[k][0], ddt = dts[k][1];
    size_t se = ts_dtype_size(sdt), de = ts_dtype_size(ddt), n = (size_t)(rows * cols);
    unsigned char *s = malloc(n * se), *d1 = calloc(n, de), *d2 = calloc(n, de);
    for (size_t i = 0; i < n * se; i++)
      s[i] = (unsigned char)(rnd() % 64); /* small exponents: finite values */
    int64_t shape[2] = {rows, cols}, tshape[2] = {cols, rows};
    ts_tensor src = {s, n * se, {0}}, a = {d1, n * de, {0}}, b = {d2, n * de, {0}};
    ck_assert_int_eq(ts_layout_plain(&src.layout, sdt, 2, shape, NULL), TS_OK);
    ck_assert_int_eq(ts_layout_plain(&a.layout, ddt, 2, tshape, NULL), TS_OK);
    /* the destination seen transposed: [rows, cols] with strides (1, rows) */
    a.layout.shape[0] = rows;
    a.layout.shape[1] = cols;
    a.layout.strides[0] = 1;
    a.layout.strides[1] = rows;
    b.layout = a.layout;
    ts_error err;
    ck_assert_msg(ts_copy(&a, &src, NULL, &err) == TS_OK, "%s", err.msg);
    ck_assert_int_eq(ts_copy_box_reference(&b, NULL, &src, NULL, shape, &err), TS_OK);
    ck_assert_msg(memcmp(d1, d2, n * de) == 0, "%s -> %s", ts_dtype_name(sdt), ts_dtype_name(ddt));
    free(s);
    free(d1);
    free(d2);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("dtype");
  TCase *tc = tcase_create("dtype");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_f8_decode_exhaustive);
  tcase_add_test(tc, test_f8_round);
  tcase_add_test(tc, test_f16_exhaustive);
  tcase_add_test(tc, test_bf16);
  tcase_add_test(tc, test_int_to_small_floats);
  tcase_add_test(tc, test_all_pairs);
  tcase_add_test(tc, test_convert_check);
  tcase_add_test(tc, test_spellings);
  tcase_add_test(tc, test_complex_convert);
  tcase_add_test(tc, test_complex_copy);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
