/* gen_half.c - f16 and bf16 in generated code. Such values are stored as their 16 bits and
 * computed in float: a load widens (exactly), an op whose result is f16 or bf16 rounds its float
 * (or double) result to nearest even, as numpy's float16 arithmetic does, and a store writes the
 * bits of the already rounded value. The conversion functions emitted into a bucket's C file
 * are the algorithms of the kernels' dtype conversions (kernels/dtype.c), so a program rounds bit
 * for bit like a strided copy that converts dtypes: f32 by bit arithmetic, f64 and the 64-bit
 * integers by one exact rounding of the wider value, NaN kept quiet with its top payload bits.
 * tests/program/test_program_half.c checks every f16 and bf16 bit pattern and a sweep of f32, f64
 * and i64 values against the kernels' functions. */
#include <string.h>

#include "internal.h"

/* The emitted conversions; the text is fixed (no program text reaches it). */
static const char half_preamble[] =
    "/* f16 and bf16: stored as bits, computed in float, rounded to nearest even like the\n"
    " * kernels' dtype conversions (kernels/dtype.c). */\n"
    "static inline uint32_t tsp_bits(float f) {\n"
    "  uint32_t u;\n  memcpy(&u, &f, 4);\n  return u;\n}\n"
    "static inline float tsp_float(uint32_t u) {\n"
    "  float f;\n  memcpy(&f, &u, 4);\n  return f;\n}\n"
    "static inline float tsp_f16_to_f32(uint16_t h) {\n"
    "  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;\n"
    "  if (exp == 0x1f)\n    return tsp_float(sign | 0x7f800000 | (mant << 13));\n"
    "  if (exp == 0) {\n    float v = (float)mant * 0x1p-24f;\n    return sign ? -v : v;\n  }\n"
    "  return tsp_float(sign | ((exp + 112) << 23) | (mant << 13));\n}\n"
    "static inline uint64_t tsp_shift_round_even(uint64_t m, int s) {\n"
    "  if (s <= 0)\n    return m;\n  if (s > 64)\n    return 0;\n"
    "  uint64_t q = s == 64 ? 0 : m >> s;\n"
    "  uint64_t rem = s == 64 ? m : m & ((UINT64_C(1) << s) - 1);\n"
    "  uint64_t half = UINT64_C(1) << (s - 1);\n"
    "  if (rem > half || (rem == half && (q & 1)))\n    q++;\n  return q;\n}\n"
    "static inline uint16_t tsp_f32_to_f16(float f) {\n"
    "  uint32_t x = tsp_bits(f);\n  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);\n"
    "  x &= 0x7fffffff;\n"
    "  if (x > 0x7f800000)\n    return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x1ff);\n"
    "  if (x >= 0x477ff000)\n    return sign | 0x7c00;\n"
    "  if (x >= 0x38800000)\n"
    "    return sign | (uint16_t)((x + 0xfff + ((x >> 13) & 1) - 0x38000000) >> 13);\n"
    "  uint32_t exp = x >> 23;\n  if (exp == 0)\n    return sign;\n"
    "  uint64_t mant = (x & 0x7fffff) | 0x800000;\n"
    "  return sign | (uint16_t)tsp_shift_round_even(mant, 126 - (int)exp);\n}\n"
    "static inline float tsp_bf16_to_f32(uint16_t b) { return tsp_float((uint32_t)b << 16); }\n"
    "static inline uint16_t tsp_f32_to_bf16(float f) {\n"
    "  uint32_t x = tsp_bits(f);\n"
    "  uint32_t rounded = (x + 0x7fff + ((x >> 16) & 1)) >> 16;\n"
    "  uint32_t quiet_nan = (x >> 16) | 0x40;\n"
    "  return (uint16_t)((x & 0x7fffffff) > 0x7f800000 ? quiet_nan : rounded);\n}\n"
    "static uint16_t tsp_round_small(uint64_t m, int e, int mbits, int bias, int maxexp) {\n"
    "  if (m == 0)\n    return 0;\n"
    "  int top = 63 - __builtin_clzll(m), exp = top + e, emin = 1 - bias;\n"
    "  int shift = exp < emin ? (emin - mbits) - e : top - mbits;\n"
    "  uint64_t q = shift >= 0 ? tsp_shift_round_even(m, shift) : m << -shift;\n"
    "  if (exp < emin)\n    return (uint16_t)q;\n"
    "  if (q >> (mbits + 1)) {\n    q >>= 1;\n    exp++;\n  }\n"
    "  if (exp + bias >= maxexp)\n    return (uint16_t)(maxexp << mbits);\n"
    "  return (uint16_t)(((uint32_t)(exp + bias) << mbits) |\n"
    "                    (uint32_t)(q & ((UINT64_C(1) << mbits) - 1)));\n}\n"
    "static uint16_t tsp_f64_to_small(double d, int mbits, int bias, int maxexp, uint16_t nan) {\n"
    "  uint16_t sign = signbit(d) ? (uint16_t)(1u << 15) : 0;\n"
    "  if (isnan(d))\n    return sign | nan;\n"
    "  if (isinf(d))\n    return sign | (uint16_t)(maxexp << mbits);\n"
    "  int e;\n  double fr = frexp(fabs(d), &e);\n"
    "  uint64_t m = (uint64_t)ldexp(fr, 53);\n"
    "  return sign | tsp_round_small(m, e - 53, mbits, bias, maxexp);\n}\n"
    "static inline uint16_t tsp_f64_to_f16(double d) {\n"
    "  return tsp_f64_to_small(d, 10, 15, 31, 0x7e00);\n}\n"
    "static inline uint16_t tsp_f64_to_bf16(double d) {\n"
    "  return tsp_f64_to_small(d, 7, 127, 255, 0x7fc0);\n}\n"
    "static uint16_t tsp_i64_to_small(int64_t v, int mbits, int bias, int maxexp) {\n"
    "  uint16_t sign = v < 0 ? (uint16_t)(1u << 15) : 0;\n"
    "  uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;\n"
    "  return sign | tsp_round_small(m, 0, mbits, bias, maxexp);\n}\n"
    "static inline uint16_t tsp_i64_to_f16(int64_t v) { return tsp_i64_to_small(v, 10, 15, 31); }\n"
    "static inline uint16_t tsp_i64_to_bf16(int64_t v) {\n"
    "  return tsp_i64_to_small(v, 7, 127, 255);\n}\n\n";

void tsp_emit_half_preamble(FILE *f) { fputs(half_preamble, f); }

bool tsp_program_uses_half(const tsp_program *p) {
  for (int n = 0; n < p->n_nodes; n++)
    if (p->nodes[n].live && (int)p->nodes[n].dtype >= 0 && tsp_is_half(p->nodes[n].dtype))
      return true;
  return false;
}

const char *tsp_half_load(ts_dtype dt) {
  return dt == TS_F16 ? "tsp_f16_to_f32(" : dt == TS_BF16 ? "tsp_bf16_to_f32(" : "";
}

const char *tsp_half_close(ts_dtype dt) { return tsp_is_half(dt) ? ")" : ""; }

const char *tsp_half_store(ts_dtype dt, ts_dtype from) {
  bool fl = from == TS_F32 || tsp_is_half(from), dbl = from == TS_F64;
  if (dt == TS_F16)
    return fl ? "tsp_f32_to_f16(" : dbl ? "tsp_f64_to_f16(" : "tsp_i64_to_f16((int64_t)";
  if (dt == TS_BF16)
    return fl ? "tsp_f32_to_bf16(" : dbl ? "tsp_f64_to_bf16(" : "tsp_i64_to_bf16((int64_t)";
  return "(";
}
