/* dtype.c - element types: names, sizes, and conversions between every pair.
 *
 * f16 and bf16 are converted with round-to-nearest-even, from f32 by bit arithmetic and from f64
 * and from 64-bit integers by exact rounding of the wider value (never through an intermediate
 * rounding, so there is no double rounding); the 8-bit floats f8_e4m3 (E4M3FN) and f8_e5m2 the
 * same way from the exact value. Conversions to bool give 1 for every nonzero value. Same-dtype
 * conversions are byte moves. c64 and c128 are pairs (real, imaginary) of f32 and f64: a real value
 * becomes the real part (imaginary 0), c64 and c128 convert part by part, and a complex value has
 * no real conversion (ts_convert_check refuses it, naming both dtypes). The row
 * functions here are the inner loops of the strided-copy kernel's dtype-converting paths. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_internal.h"

static const struct {
  const char *name;
  size_t size;
  bool is_float;
} dtype_info[TS_DTYPE_COUNT] = {
#define TS_X_DT(name, text, size, isfloat) {text, size, isfloat},
    TS_DTYPE_LIST(TS_X_DT)
#undef TS_X_DT
};

bool ts_dtype_valid(int dtype) { return dtype >= 0 && dtype < TS_DTYPE_COUNT; }

size_t ts_dtype_size(ts_dtype dt) { return ts_dtype_valid(dt) ? dtype_info[dt].size : 0; }

bool ts_dtype_is_float(ts_dtype dt) { return ts_dtype_valid(dt) && dtype_info[dt].is_float; }

bool ts_dtype_is_complex(ts_dtype dt) { return dt == TS_C64 || dt == TS_C128; }

const char *ts_dtype_name(ts_dtype dt) {
  return ts_dtype_valid(dt) ? dtype_info[dt].name : "invalid";
}

void ts_shape_text(int ndim, const int64_t *shape, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)shape[d]);
  if (n < cap)
    snprintf(buf + n, cap - n, "]");
}

int ts_dtype_parse(const char *text, ts_dtype *out, ts_error *err) {
  for (int i = 0; text && i < TS_DTYPE_COUNT; i++) {
    if (strcmp(text, dtype_info[i].name) == 0) {
      *out = (ts_dtype)i;
      return TS_OK;
    }
  }
  return ts_error_set(err, TS_BAD_DTYPE, "unknown dtype '%s': valid dtypes are " TS_DTYPE_NAMES,
                      text ? text : "(null)");
}

static const struct {
  const char *text;
  ts_dtype dt;
} spellings[] = {
    /* numpy's and PyTorch's names; the tshard names are dtype_info's */
    {.text = "float32", .dt = TS_F32},
    {.text = "float64", .dt = TS_F64},
    {.text = "float16", .dt = TS_F16},
    {.text = "bfloat16", .dt = TS_BF16},
    {.text = "int8", .dt = TS_I8},
    {.text = "int32", .dt = TS_I32},
    {.text = "int64", .dt = TS_I64},
    {.text = "uint8", .dt = TS_U8},
    {.text = "int16", .dt = TS_I16},
    {.text = "uint16", .dt = TS_U16},
    {.text = "uint32", .dt = TS_U32},
    {.text = "uint64", .dt = TS_U64},
    {.text = "float8_e4m3fn", .dt = TS_F8_E4M3},
    {.text = "float8_e5m2", .dt = TS_F8_E5M2},
    {.text = "complex64", .dt = TS_C64},
    {.text = "complex128", .dt = TS_C128},
};

int ts_dtype_parse_spelling(const char *text, ts_dtype *out, ts_error *err) {
  if (ts_dtype_parse(text, out, NULL) == TS_OK)
    return TS_OK;
  for (size_t i = 0; text && i < sizeof spellings / sizeof spellings[0]; i++) {
    if (strcmp(text, spellings[i].text) == 0) {
      *out = spellings[i].dt;
      return TS_OK;
    }
  }
  return ts_error_set(err, TS_BAD_DTYPE,
                      "unknown dtype '%s': valid dtypes are f32 (float32), f64 (float64), f16 "
                      "(float16), bf16 (bfloat16), i8 (int8), i32 (int32), i64 (int64), u8 "
                      "(uint8), bool, i16 (int16), u16 (uint16), u32 (uint32), u64 (uint64), "
                      "f8_e4m3 (float8_e4m3fn), f8_e5m2 (float8_e5m2), c64 (complex64), c128 "
                      "(complex128)",
                      text ? text : "(null)");
}

/* ---- scalar conversions ---------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float ts_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) /* inf or NaN; the payload moves to the top of the f32 mantissa */
    return bits_f32(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in f32 */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Shifts m right by s bits rounding to nearest even (s may exceed 63). */
static uint64_t shift_round_even(uint64_t m, int s) {
  if (s <= 0)
    return m;
  if (s > 64)
    return 0;
  uint64_t q = s == 64 ? 0 : m >> s;
  uint64_t rem = s == 64 ? m : m & ((UINT64_C(1) << s) - 1);
  uint64_t half = UINT64_C(1) << (s - 1);
  if (rem > half || (rem == half && (q & 1)))
    q++;
  return q;
}

uint16_t ts_f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x > 0x7f800000) /* NaN: quiet, keep the top payload bits */
    return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x1ff);
  if (x >= 0x477ff000) /* >= 65520 (half-way above the largest f16) rounds to infinity */
    return sign | 0x7c00;
  if (x >= 0x38800000) /* normal f16: drop 13 mantissa bits with rounding, rebias exponent */
    return sign | (uint16_t)((x + 0xfff + ((x >> 13) & 1) - 0x38000000) >> 13);
  uint32_t exp = x >> 23; /* subnormal f16 (or zero): value in units of 2^-24 */
  if (exp == 0)
    return sign;
  uint64_t mant = (x & 0x7fffff) | 0x800000; /* value = mant * 2^(exp-150) */
  return sign | (uint16_t)shift_round_even(mant, 126 - (int)exp);
}

float ts_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t ts_f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t rounded = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
  uint32_t quiet_nan = (x >> 16) | 0x40;
  return (uint16_t)((x & 0x7fffffff) > 0x7f800000 ? quiet_nan : rounded); /* a select: vectorizes */
}

/* Rounds a finite non-negative magnitude m * 2^e (m an integer) to a small binary float format
 * with mbits mantissa bits and exponent bias `bias`, round to nearest even, returning the bit
 * pattern without sign (infinity on overflow). Exact: no intermediate rounding. */
static uint16_t round_small_float(uint64_t m, int e, int mbits, int bias, int maxexp_field) {
  if (m == 0)
    return 0;
  int top = 63 - __builtin_clzll(m); /* value in [2^(top+e), 2^(top+e+1)) */
  int exp = top + e;                 /* unbiased exponent of the leading bit */
  int emin = 1 - bias;
  int shift; /* bits of m below the kept mantissa */
  if (exp < emin)
    shift = (emin - mbits) - e; /* subnormal: units of 2^(emin-mbits) */
  else
    shift = top - mbits;
  uint64_t q = shift >= 0 ? shift_round_even(m, shift) : m << -shift;
  uint32_t bits;
  if (exp < emin) {
    bits = (uint32_t)q; /* q == 2^mbits carries into the smallest normal, which is right */
  } else {
    if (q >> (mbits + 1)) { /* rounding carried to the next power of two */
      q >>= 1;
      exp++;
    }
    if (exp + bias >= maxexp_field)
      return (uint16_t)(maxexp_field << mbits);
    bits = ((uint32_t)(exp + bias) << mbits) | (uint32_t)(q & ((UINT64_C(1) << mbits) - 1));
  }
  return (uint16_t)bits;
}

static uint16_t f64_to_small(double d, int mbits, int bias, int maxexp_field, uint16_t nan_bits) {
  uint16_t sign = signbit(d) ? (uint16_t)(1u << 15) : 0;
  if (isnan(d))
    return sign | nan_bits;
  if (isinf(d))
    return sign | (uint16_t)(maxexp_field << mbits);
  int e;
  double fr = frexp(fabs(d), &e);       /* |d| = fr * 2^e, fr in [0.5, 1) */
  uint64_t m = (uint64_t)ldexp(fr, 53); /* exact: 53 significant bits */
  return sign | round_small_float(m, e - 53, mbits, bias, maxexp_field);
}

uint16_t ts_f64_to_f16(double d) { return f64_to_small(d, 10, 15, 31, 0x7e00); }
uint16_t ts_f64_to_bf16(double d) { return f64_to_small(d, 7, 127, 255, 0x7fc0); }

static uint16_t i64_to_small(int64_t v, int mbits, int bias, int maxexp_field) {
  uint16_t sign = v < 0 ? (uint16_t)(1u << 15) : 0;
  uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  return sign | round_small_float(m, 0, mbits, bias, maxexp_field);
}

/* ---- 8-bit floats ------------------------------------------------------------------------ */

float ts_f8_e4m3_to_f32(uint8_t b) {
  int exp = (b >> 3) & 0xf, mant = b & 7;
  float v;
  if (exp == 0xf && mant == 7)
    v = NAN;
  else if (exp == 0) /* subnormal: mant * 2^-9 */
    v = ldexpf((float)mant, -9);
  else
    v = ldexpf((float)(8 + mant), exp - 10); /* (1 + mant/8) * 2^(exp-7) */
  return (b & 0x80) ? -v : v;
}

float ts_f8_e5m2_to_f32(uint8_t b) { return ts_f16_to_f32((uint16_t)(b << 8)); }

/* E4M3FN rounds as if exponent field 15 were a normal binade throughout; the patterns past 448
 * (0x7F, and the carry out of the binade) are NaN. */
static uint8_t e4m3_from_bits(uint16_t mag) { return mag > 0x7e ? 0x7f : (uint8_t)mag; }

uint8_t ts_f64_to_f8_e4m3(double d) {
  uint8_t sign = signbit(d) ? 0x80 : 0;
  if (isnan(d) || isinf(d))
    return sign | 0x7f;
  int e;
  double fr = frexp(fabs(d), &e);
  uint64_t m = (uint64_t)ldexp(fr, 53);
  return sign | e4m3_from_bits(round_small_float(m, e - 53, 3, 7, 16));
}

uint8_t ts_f64_to_f8_e5m2(double d) {
  uint8_t sign = signbit(d) ? 0x80 : 0;
  if (isnan(d))
    return sign | 0x7e;
  if (isinf(d))
    return sign | 0x7c;
  int e;
  double fr = frexp(fabs(d), &e);
  uint64_t m = (uint64_t)ldexp(fr, 53);
  return sign | (uint8_t)round_small_float(m, e - 53, 2, 15, 31);
}

/* f32 -> f64 is exact: one rounding. */
uint8_t ts_f32_to_f8_e4m3(float f) { return ts_f64_to_f8_e4m3((double)f); }
uint8_t ts_f32_to_f8_e5m2(float f) { return ts_f64_to_f8_e5m2((double)f); }

/* Integer magnitudes (the sign separately): exact rounding of the 64-bit value. */
static uint8_t mag_to_e4m3(bool neg, uint64_t m) {
  return (uint8_t)((neg ? 0x80 : 0) | e4m3_from_bits(round_small_float(m, 0, 3, 7, 16)));
}
static uint8_t mag_to_e5m2(bool neg, uint64_t m) {
  return (uint8_t)((neg ? 0x80 : 0) | round_small_float(m, 0, 2, 15, 31));
}
static uint64_t magnitude(int64_t v) { return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; }

/* ---- element loads and stores, by the C type of the value ---------------------------- */

static inline float ld_f32(const char *p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}
static inline double ld_f64(const char *p) {
  double v;
  memcpy(&v, p, 8);
  return v;
}
static inline float ld_f16(const char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return ts_f16_to_f32(v);
}
static inline float ld_bf16(const char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return ts_bf16_to_f32(v);
}
static inline int64_t ld_i8(const char *p) {
  int8_t v;
  memcpy(&v, p, 1);
  return v;
}
static inline int64_t ld_i32(const char *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline int64_t ld_i64(const char *p) {
  int64_t v;
  memcpy(&v, p, 8);
  return v;
}
static inline int64_t ld_u8(const char *p) {
  uint8_t v;
  memcpy(&v, p, 1);
  return v;
}
static inline int64_t ld_b1(const char *p) { return *(const unsigned char *)p != 0; }
static inline int64_t ld_i16(const char *p) {
  int16_t v;
  memcpy(&v, p, 2);
  return v;
}
static inline int64_t ld_u16(const char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
static inline int64_t ld_u32(const char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline uint64_t ld_u64(const char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static inline float ld_f8_e4m3(const char *p) { return ts_f8_e4m3_to_f32(*(const uint8_t *)p); }
static inline float ld_f8_e5m2(const char *p) { return ts_f8_e5m2_to_f32(*(const uint8_t *)p); }

/* Float to integer: truncate toward zero, saturate, NaN gives 0 (no undefined behaviour). */
#define SAT(x, lo, hi)                                                                             \
  ((x) != (x) ? 0 : (x) <= (double)(lo) ? (lo) : (x) >= (double)(hi) ? (hi) : (x))

static inline uint64_t sat_u64(double x) {
  if (x != x || x <= 0)
    return 0;
  if (x >= 0x1p64)
    return UINT64_MAX;
  return (uint64_t)x;
}

static inline int64_t sat_i64(double x) {
  if (x != x)
    return 0;
  if (x <= -0x1p63)
    return INT64_MIN;
  if (x >= 0x1p63)
    return INT64_MAX;
  return (int64_t)x;
}

#define ST_F32(x) ((float)(x))
#define ST_F64(x) ((double)(x))
/* Integer sources are int64_t, or uint64_t for u64; every store takes both. */
#define ST_F16(x)                                                                                  \
  _Generic((x), float                                                                              \
           : ts_f32_to_f16, double                                                                 \
           : ts_f64_to_f16, int64_t                                                                \
           : i64_to_f16, uint64_t                                                                  \
           : u64_to_f16)(x)
#define ST_BF16(x)                                                                                 \
  _Generic((x), float                                                                              \
           : ts_f32_to_bf16, double                                                                \
           : ts_f64_to_bf16, int64_t                                                               \
           : i64_to_bf16, uint64_t                                                                 \
           : u64_to_bf16)(x)
#define ST_F8_E4M3(x)                                                                              \
  _Generic((x), float                                                                              \
           : ts_f32_to_f8_e4m3, double                                                             \
           : ts_f64_to_f8_e4m3, int64_t                                                            \
           : i64_to_e4m3, uint64_t                                                                 \
           : u64_to_e4m3)(x)
#define ST_F8_E5M2(x)                                                                              \
  _Generic((x), float                                                                              \
           : ts_f32_to_f8_e5m2, double                                                             \
           : ts_f64_to_f8_e5m2, int64_t                                                            \
           : i64_to_e5m2, uint64_t                                                                 \
           : u64_to_e5m2)(x)
#define ST_INT(x, F, W) _Generic((x), float : F, double : F, int64_t : W, uint64_t : W)(x)
#define ST_I8(x) ST_INT(x, f_to_i8, wrap_i8)
#define ST_I16(x) ST_INT(x, f_to_i16, wrap_i16)
#define ST_I32(x) ST_INT(x, f_to_i32, wrap_i32)
#define ST_I64(x) ST_INT(x, sat_i64, wrap_i64)
#define ST_U8(x) ST_INT(x, f_to_u8, wrap_u8)
#define ST_U16(x) ST_INT(x, f_to_u16, wrap_u16)
#define ST_U32(x) ST_INT(x, f_to_u32, wrap_u32)
#define ST_U64(x) ST_INT(x, sat_u64, wrap_u64)
#define ST_BOOL(x) ((uint8_t)((x) != 0))
/* A real value as the real part (converted as to f32 or f64), imaginary part 0. */
typedef struct {
  float re, im;
} c64_parts;
typedef struct {
  double re, im;
} c128_parts;
#define ST_C64(x) ((c64_parts){(float)(x), 0.0f})
#define ST_C128(x) ((c128_parts){(double)(x), 0.0})

static inline uint16_t i64_to_f16(int64_t v) { return i64_to_small(v, 10, 15, 31); }
static inline uint16_t i64_to_bf16(int64_t v) { return i64_to_small(v, 7, 127, 255); }
static inline uint16_t u64_to_f16(uint64_t v) { return round_small_float(v, 0, 10, 15, 31); }
static inline uint16_t u64_to_bf16(uint64_t v) { return round_small_float(v, 0, 7, 127, 255); }
static inline uint8_t i64_to_e4m3(int64_t v) { return mag_to_e4m3(v < 0, magnitude(v)); }
static inline uint8_t u64_to_e4m3(uint64_t v) { return mag_to_e4m3(false, v); }
static inline uint8_t i64_to_e5m2(int64_t v) { return mag_to_e5m2(v < 0, magnitude(v)); }
static inline uint8_t u64_to_e5m2(uint64_t v) { return mag_to_e5m2(false, v); }
static inline int8_t f_to_i8(double x) { return (int8_t)SAT(x, -128, 127); }
static inline int16_t f_to_i16(double x) { return (int16_t)SAT(x, INT16_MIN, INT16_MAX); }
static inline int32_t f_to_i32(double x) { return (int32_t)SAT(x, INT32_MIN, INT32_MAX); }
static inline uint8_t f_to_u8(double x) { return (uint8_t)SAT(x, 0, 255); }
static inline uint16_t f_to_u16(double x) { return (uint16_t)SAT(x, 0, UINT16_MAX); }
static inline uint32_t f_to_u32(double x) { return (uint32_t)SAT(x, 0, UINT32_MAX); }
/* Integer to integer: the low bits, as a C cast through the unsigned type. */
static inline int8_t wrap_i8(uint64_t v) { return (int8_t)(uint8_t)v; }
static inline int16_t wrap_i16(uint64_t v) { return (int16_t)(uint16_t)v; }
static inline int32_t wrap_i32(uint64_t v) { return (int32_t)(uint32_t)v; }
static inline int64_t wrap_i64(uint64_t v) { return (int64_t)v; }
static inline uint8_t wrap_u8(uint64_t v) { return (uint8_t)v; }
static inline uint16_t wrap_u16(uint64_t v) { return (uint16_t)v; }
static inline uint32_t wrap_u32(uint64_t v) { return (uint32_t)v; }
static inline uint64_t wrap_u64(uint64_t v) { return v; }

/* ---- row functions for every (dst, src) pair ------------------------------------------- */

/* X(name, store macro, stored C type) for destinations; Y(name, load fn) for sources. */
#define DST_LIST(X, S, SSIZE)                                                                      \
  X(S, SSIZE, f32, ST_F32, float)                                                                  \
  X(S, SSIZE, f64, ST_F64, double)                                                                 \
  X(S, SSIZE, f16, ST_F16, uint16_t)                                                               \
  X(S, SSIZE, bf16, ST_BF16, uint16_t)                                                             \
  X(S, SSIZE, i8, ST_I8, int8_t)                                                                   \
  X(S, SSIZE, i32, ST_I32, int32_t)                                                                \
  X(S, SSIZE, i64, ST_I64, int64_t)                                                                \
  X(S, SSIZE, u8, ST_U8, uint8_t)                                                                  \
  X(S, SSIZE, b1, ST_BOOL, uint8_t)                                                                \
  X(S, SSIZE, i16, ST_I16, int16_t)                                                                \
  X(S, SSIZE, u16, ST_U16, uint16_t)                                                               \
  X(S, SSIZE, u32, ST_U32, uint32_t)                                                               \
  X(S, SSIZE, u64, ST_U64, uint64_t)                                                               \
  X(S, SSIZE, f8_e4m3, ST_F8_E4M3, uint8_t)                                                        \
  X(S, SSIZE, f8_e5m2, ST_F8_E5M2, uint8_t)                                                        \
  X(S, SSIZE, c64, ST_C64, c64_parts)                                                              \
  X(S, SSIZE, c128, ST_C128, c128_parts)
/* Y(name, element size, dtype) for the real sources (the complex ones have their own rows below);
 * bool is b1 (numpy's code), as <stdbool.h> makes bool a macro */
#define SRC_LIST(Y)                                                                                \
  Y(f32, 4, TS_F32)                                                                                \
  Y(f64, 8, TS_F64)                                                                                \
  Y(f16, 2, TS_F16)                                                                                \
  Y(bf16, 2, TS_BF16)                                                                              \
  Y(i8, 1, TS_I8)                                                                                  \
  Y(i32, 4, TS_I32)                                                                                \
  Y(i64, 8, TS_I64)                                                                                \
  Y(u8, 1, TS_U8)                                                                                  \
  Y(b1, 1, TS_BOOL)                                                                                \
  Y(i16, 2, TS_I16)                                                                                \
  Y(u16, 2, TS_U16)                                                                                \
  Y(u32, 4, TS_U32)                                                                                \
  Y(u64, 8, TS_U64)                                                                                \
  Y(f8_e4m3, 1, TS_F8_E4M3)                                                                        \
  Y(f8_e5m2, 1, TS_F8_E5M2)

/* The contiguous branch lets the compiler vectorize the common dense conversions; on x86-64 each
 * row function also gets an AVX2 clone, chosen at load time when the CPU has it. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ROW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ROW_CLONES
#endif
#define ROW_FN(S, SSIZE, D, STORE, DTYPE)                                                          \
  ROW_CLONES static void row_##D##_from_##S(char *d, ptrdiff_t ds, const char *s, ptrdiff_t ss,    \
                                            size_t n) {                                            \
    if (ds == (ptrdiff_t)sizeof(DTYPE) && ss == SSIZE) {                                           \
      for (size_t i = 0; i < n; i++) {                                                             \
        DTYPE o = STORE(ld_##S(s + i * SSIZE));                                                    \
        memcpy(d + i * sizeof(DTYPE), &o, sizeof o);                                               \
      }                                                                                            \
    } else {                                                                                       \
      for (size_t i = 0; i < n; i++) {                                                             \
        DTYPE o = STORE(ld_##S(s + (ptrdiff_t)i * ss));                                            \
        memcpy(d + (ptrdiff_t)i * ds, &o, sizeof o);                                               \
      }                                                                                            \
    }                                                                                              \
  }

#define ROWS_FROM(S, SSIZE, DT) DST_LIST(ROW_FN, S, SSIZE)
SRC_LIST(ROWS_FROM)

/* Same-dtype moves by element size: exact bytes. */
#define MOVE_FN(bytes, ctype)                                                                      \
  static void move_##bytes(char *d, ptrdiff_t ds, const char *s, ptrdiff_t ss, size_t n) {         \
    if (ds == bytes && ss == bytes) {                                                              \
      memcpy(d, s, n *bytes);                                                                      \
      return;                                                                                      \
    }                                                                                              \
    for (size_t i = 0; i < n; i++) {                                                               \
      ctype v;                                                                                     \
      memcpy(&v, s + (ptrdiff_t)i * ss, bytes);                                                    \
      memcpy(d + (ptrdiff_t)i * ds, &v, bytes);                                                    \
    }                                                                                              \
  }
MOVE_FN(1, uint8_t)
MOVE_FN(2, uint16_t)
MOVE_FN(4, uint32_t)
MOVE_FN(8, uint64_t)
MOVE_FN(16, ts__bytes16)

/* c64 and c128 part by part: f32 to f64 exactly, f64 to f32 rounded to nearest even. */
static void row_c128_from_c64(char *d, ptrdiff_t ds, const char *s, ptrdiff_t ss, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double o[2] = {ld_f32(s + (ptrdiff_t)i * ss), ld_f32(s + (ptrdiff_t)i * ss + 4)};
    memcpy(d + (ptrdiff_t)i * ds, o, sizeof o);
  }
}

static void row_c64_from_c128(char *d, ptrdiff_t ds, const char *s, ptrdiff_t ss, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float o[2] = {(float)ld_f64(s + (ptrdiff_t)i * ss), (float)ld_f64(s + (ptrdiff_t)i * ss + 8)};
    memcpy(d + (ptrdiff_t)i * ds, o, sizeof o);
  }
}

#define ROW_ENTRY(S, SSIZE, D, STORE, DTYPE) row_##D##_from_##S,
#define ROW_TABLE_FOR(S, SSIZE, DT) [DT] = {DST_LIST(ROW_ENTRY, S, SSIZE)},
/* row_table[src][dst]; DST_LIST is in ts_dtype order. A complex source has no real targets. */
static const ts__row_fn row_table[TS_DTYPE_COUNT][TS_DTYPE_COUNT] = {
    SRC_LIST(ROW_TABLE_FOR)[TS_C64] = {[TS_C128] = row_c128_from_c64}, [TS_C128] = {
                                                                           [TS_C64] =
                                                                               row_c64_from_c128}};

ts__row_fn ts__row_function(ts_dtype dd, ts_dtype sd) {
  if (!ts_dtype_valid(dd) || !ts_dtype_valid(sd))
    return NULL;
  if (dd == sd) {
    switch (ts_dtype_size(dd)) {
    case 1: return move_1;
    case 2: return move_2;
    case 4: return move_4;
    case 8: return move_8;
    default: return move_16;
    }
  }
  return row_table[sd][dd];
}

void ts_convert(void *dst, ts_dtype dt_dst, const void *src, ts_dtype dt_src, size_t n) {
  ts__row_fn fn = ts__row_function(dt_dst, dt_src);
  if (fn)
    fn(dst, (ptrdiff_t)ts_dtype_size(dt_dst), src, (ptrdiff_t)ts_dtype_size(dt_src), n);
}

/* ---- checks that a conversion keeps every value ----------------------------------------- */

/* The largest magnitudes that round to a finite value in each float dtype: half an ulp above the
 * largest finite value, where ties round to even: to infinity for f16, bf16, f32 and f8_e5m2 (an
 * odd largest mantissa; the limit itself fails), to 448 for f8_e4m3 (its limit is kept, the next
 * double fails). */
static double float_limit(ts_dtype dt) {
  switch (dt) {
  case TS_F16: return 65520.0;
  case TS_BF16: return 0x1p128 - 0x1p119;
  case TS_F32: return 0x1p128 - 0x1p103;
  case TS_F8_E5M2: return 61440.0;
  case TS_F8_E4M3: return nextafter(464.0, INFINITY);
  default: return INFINITY;
  }
}

static double float_max(ts_dtype dt) {
  switch (dt) {
  case TS_F16: return 65504.0;
  case TS_BF16: return 0x1p128 - 0x1p120;
  case TS_F8_E5M2: return 57344.0;
  case TS_F8_E4M3: return 448.0;
  default: return 0x1p128 - 0x1p104;
  }
}

/* The integer range of an integer dtype (bool: 0 and 1). */
static void int_range(ts_dtype dt, int64_t *lo, uint64_t *hi) {
  static const struct {
    int64_t lo;
    uint64_t hi;
  } ranges[TS_DTYPE_COUNT] = {
      [TS_I8] = {.lo = INT8_MIN, .hi = INT8_MAX},
      [TS_I16] = {.lo = INT16_MIN, .hi = INT16_MAX},
      [TS_I32] = {.lo = INT32_MIN, .hi = INT32_MAX},
      [TS_I64] = {.lo = INT64_MIN, .hi = INT64_MAX},
      [TS_U8] = {.lo = 0, .hi = UINT8_MAX},
      [TS_U16] = {.lo = 0, .hi = UINT16_MAX},
      [TS_U32] = {.lo = 0, .hi = UINT32_MAX},
      [TS_U64] = {.lo = 0, .hi = UINT64_MAX},
      [TS_BOOL] = {.lo = 0, .hi = 1},
  };
  *lo = ranges[dt].lo;
  *hi = ranges[dt].hi;
}

/* The shortest of %.15g, %.16g, %.17g that reads back as v (300.7, not 300.69999999999999). */
static void shortest(char *buf, size_t cap, double v) {
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, v);
    if (v != v || strtod(buf, NULL) == v)
      return;
  }
}

/* An element of a float dtype as a double (exact). */
static double load_float(const char *p, ts_dtype dt) {
  switch (dt) {
  case TS_F32: return ld_f32(p);
  case TS_F64: return ld_f64(p);
  case TS_F16: return ld_f16(p);
  case TS_F8_E4M3: return ld_f8_e4m3(p);
  case TS_F8_E5M2: return ld_f8_e5m2(p);
  default: return ld_bf16(p);
  }
}

/* An element as text, exactly (integers in full, floats the shortest that reads back). */
static void format_element(char *buf, size_t cap, const char *p, ts_dtype dt) {
  switch (dt) {
  case TS_I8: snprintf(buf, cap, "%lld", (long long)ld_i8(p)); break;
  case TS_I16: snprintf(buf, cap, "%lld", (long long)ld_i16(p)); break;
  case TS_I32: snprintf(buf, cap, "%lld", (long long)ld_i32(p)); break;
  case TS_I64: snprintf(buf, cap, "%lld", (long long)ld_i64(p)); break;
  case TS_U8: snprintf(buf, cap, "%lld", (long long)ld_u8(p)); break;
  case TS_U16: snprintf(buf, cap, "%lld", (long long)ld_u16(p)); break;
  case TS_U32: snprintf(buf, cap, "%lld", (long long)ld_u32(p)); break;
  case TS_U64: snprintf(buf, cap, "%llu", (unsigned long long)ld_u64(p)); break;
  case TS_BOOL: snprintf(buf, cap, "%lld", (long long)ld_b1(p)); break;
  default: shortest(buf, cap, load_float(p, dt)); break;
  }
}

enum target { TO_FLOAT, TO_INT, TO_BOOL };

/* Whether value v (exact in a double) does not survive the conversion: to an integer dtype it
 * must truncate into [lo, hi], i.e. lo_incl <= v < hi_excl (NaN and infinities fail); to bool it
 * must be 0 or 1; to a float dtype a finite |v| must stay below the overflow limit (NaN passes,
 * infinities pass unless hi_excl is infinite's stand-in: f8_e4m3 has no infinity). */
static inline bool unfit(double v, int to, double lo_incl, double hi_excl, bool no_inf) {
  double m = fabs(v);
  if (to == TO_BOOL)
    return !(v == 0 || v == 1);
  if (to == TO_INT)
    return !(v >= lo_incl && v < hi_excl);
  return (m >= hi_excl) & ((m != INFINITY) | no_inf);
}

/* The index of the first element that does not survive, or n: blocks are scanned without a
 * branch per element (the loop vectorizes for the plain dtypes), a failing block again. */
#define SCAN_FN(S, SIZE, DT)                                                                       \
  static size_t scan_##S(const char *s, size_t n, int to, double lo, double hi, bool no_inf) {     \
    for (size_t i0 = 0; i0 < n; i0 += 1024) {                                                      \
      size_t end = n - i0 < 1024 ? n : i0 + 1024;                                                  \
      bool bad = false;                                                                            \
      for (size_t i = i0; i < end; i++)                                                            \
        bad |= unfit((double)ld_##S(s + i * SIZE), to, lo, hi, no_inf);                            \
      for (size_t i = i0; bad && i < end; i++)                                                     \
        if (unfit((double)ld_##S(s + i * SIZE), to, lo, hi, no_inf))                               \
          return i;                                                                                \
    }                                                                                              \
    return n;                                                                                      \
  }
SRC_LIST(SCAN_FN)

static size_t first_unfit(const char *s, ts_dtype dt, size_t n, int to, double lo, double hi,
                          bool no_inf) {
  switch (dt) {
#define SCAN_CASE(S, SIZE, DT)                                                                     \
  case DT: return scan_##S(s, n, to, lo, hi, no_inf);
    SRC_LIST(SCAN_CASE)
#undef SCAN_CASE
  default: return n;
  }
}

/* f32 to a narrower float dtype on the bit patterns (the common cast of a reshard to bf16 or
 * f16; a vectorized pass): a finite magnitude at or above lim (the bits of the overflow limit,
 * exact in f32) fails, and with no_inf an infinity too; NaN passes. The same verdicts as unfit. */
static inline uint32_t f32_overflows(const char *p, uint32_t lim, uint32_t no_inf) {
  uint32_t u;
  memcpy(&u, p, 4);
  uint32_t m = u & 0x7fffffffu;
  return (uint32_t)(m >= lim) & ((uint32_t)(m < 0x7f800000u) | (no_inf & (m == 0x7f800000u)));
}

static size_t first_f32_overflow(const char *s, size_t n, uint32_t lim, bool no_inf) {
  for (size_t i0 = 0; i0 < n; i0 += 1024) {
    size_t end = n - i0 < 1024 ? n : i0 + 1024;
    uint32_t bad = 0;
    for (size_t i = i0; i < end; i++)
      bad |= f32_overflows(s + i * 4, lim, no_inf);
    for (size_t i = i0; bad && i < end; i++)
      if (f32_overflows(s + i * 4, lim, no_inf))
        return i;
  }
  return n;
}

/* u64 to i64 compares integers: doubles near 2^63 are too coarse. */
static size_t first_u64_above_i64(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (ld_u64(s + i * 8) >> 63)
      return i;
  return n;
}

/* Whether every value of integer dtype a is a value of integer dtype b. */
static bool int_range_within(ts_dtype a, ts_dtype b) {
  int64_t alo, blo;
  uint64_t ahi, bhi;
  int_range(a, &alo, &ahi);
  int_range(b, &blo, &bhi);
  return alo >= blo && ahi <= bhi;
}

static int refuse(const char *s, ts_dtype dt_src, ts_dtype dt_dst, size_t i, int to,
                  ts_error *err) {
  char value[48];
  format_element(value, sizeof value, s + i * ts_dtype_size(dt_src), dt_src);
  const char *sn = ts_dtype_name(dt_src), *dn = ts_dtype_name(dt_dst);
  if (to == TO_FLOAT && dt_dst == TS_F8_E4M3)
    return ts_error_set(err, TS_BAD_DTYPE,
                        "converting %s to %s would change values: element %zu (%s) becomes NaN "
                        "(f8_e4m3 has no infinities; the largest finite f8_e4m3 is 448)",
                        sn, dn, i, value);
  if (to == TO_FLOAT)
    return ts_error_set(err, TS_BAD_DTYPE,
                        "converting %s to %s would change values: element %zu (%s) overflows to "
                        "infinity (the largest finite %s is %.9g)",
                        sn, dn, i, value, dn, float_max(dt_dst));
  if (to == TO_BOOL)
    return ts_error_set(err, TS_BAD_DTYPE,
                        "converting %s to bool would change values: element %zu (%s) is not 0 or "
                        "1 (bool holds 0 and 1)",
                        sn, i, value);
  double fv = ts_dtype_is_float(dt_src) ? load_float(s + i * ts_dtype_size(dt_src), dt_src) : 0;
  const char *what = fv != fv || isinf(fv) ? "has no integer value; " : "is outside the range of ";
  int64_t lo;
  uint64_t hi;
  int_range(dt_dst, &lo, &hi);
  return ts_error_set(err, TS_BAD_DTYPE,
                      "converting %s to %s would change values: element %zu (%s) %s%s holds "
                      "%lld to %llu",
                      sn, dn, i, value, what, dn, (long long)lo, (unsigned long long)hi);
}

/* Conversions from or to a complex dtype: from complex only to complex; to c64 the f64 values
 * (f64's, or c128's parts) must not overflow f32 (the other real dtypes all fit). */
static int complex_check(const char *s, ts_dtype dt_src, ts_dtype dt_dst, size_t n, ts_error *err) {
  const char *sn = ts_dtype_name(dt_src), *dn = ts_dtype_name(dt_dst);
  if (!ts_dtype_is_complex(dt_dst))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "converting %s to %s would discard the imaginary part: a complex dtype "
                        "converts to c64 and c128 only (take the real part, e.g. numpy's .real, "
                        "and put that)",
                        sn, dn);
  if (dt_dst == TS_C128 || (dt_src != TS_F64 && dt_src != TS_C128))
    return TS_OK;
  size_t parts = dt_src == TS_C128 ? 2 : 1;
  double lim = float_limit(TS_F32);
  for (size_t i = 0; i < n * parts; i++) {
    double v = ld_f64(s + i * 8);
    if (fabs(v) >= lim && !isinf(v)) {
      char value[48];
      shortest(value, sizeof value, v);
      return ts_error_set(err, TS_BAD_DTYPE,
                          "converting %s to c64 would change values: element %zu%s (%s) overflows "
                          "to infinity (the largest finite f32, a c64 part, is %.9g)",
                          sn, i / parts,
                          parts == 1 ? ""
                          : i % 2    ? "'s imaginary part"
                                     : "'s real part",
                          value, float_max(TS_F32));
    }
  }
  return TS_OK;
}

int ts_convert_check(const void *src, ts_dtype dt_src, ts_dtype dt_dst, size_t n, ts_error *err) {
  if (!ts_dtype_valid(dt_src) || !ts_dtype_valid(dt_dst))
    return ts_error_set(err, TS_BAD_DTYPE, "unknown dtype in a conversion");
  const char *s = src;
  if (dt_src != dt_dst && (ts_dtype_is_complex(dt_src) || ts_dtype_is_complex(dt_dst)))
    return complex_check(s, dt_src, dt_dst, n, err);
  bool from_float = ts_dtype_is_float(dt_src), to_float = ts_dtype_is_float(dt_dst);
  int to = to_float ? TO_FLOAT : dt_dst == TS_BOOL ? TO_BOOL : TO_INT;
  if (dt_src == dt_dst || dt_dst == TS_F64 ||
      (!from_float && !to_float && to != TO_BOOL && int_range_within(dt_src, dt_dst)) ||
      (to_float && !from_float && (dt_dst == TS_F32 || dt_dst == TS_BF16)) || dt_src == TS_BOOL ||
      (to_float && (dt_src == TS_F8_E4M3 || dt_src == TS_F8_E5M2) && dt_dst != TS_F8_E4M3))
    return TS_OK; /* every value has an image (the largest u64 is far below 2^128, the largest
                     f8_e5m2 below the largest f16, and 0 and 1 are in every dtype) */
  size_t i;
  if (dt_src == TS_U64 && dt_dst == TS_I64) {
    i = first_u64_above_i64(s, n);
  } else if (dt_src == TS_F32 && to_float) {
    /* the limit as an f32 magnitude: the least one that fails (f8_e4m3: any above 464) */
    float limit = dt_dst == TS_F8_E4M3 ? nextafterf(464.0f, INFINITY) : (float)float_limit(dt_dst);
    uint32_t lim;
    memcpy(&lim, &limit, 4);
    i = first_f32_overflow(s, n, lim, dt_dst == TS_F8_E4M3);
  } else {
    int64_t lo = 0;
    uint64_t hi = 0;
    double lo_incl = 0, hi_excl = float_limit(dt_dst);
    if (to == TO_INT) {
      int_range(dt_dst, &lo, &hi);
      lo_incl = lo == INT64_MIN ? -0x1p63 : nextafter((double)lo - 1.0, 0.0);
      hi_excl = hi == INT64_MAX ? 0x1p63 : hi == UINT64_MAX ? 0x1p64 : (double)hi + 1.0;
    }
    i = first_unfit(s, dt_src, n, to, lo_incl, hi_excl, dt_dst == TS_F8_E4M3);
  }
  return i == n ? TS_OK : refuse(s, dt_src, dt_dst, i, to, err);
}
