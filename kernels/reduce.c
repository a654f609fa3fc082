/* reduce.c - element-wise reductions for partial placements: dst[i] = op(dst[i], src[i]) over
 * contiguous elements, and the identity of each op. f16 and bf16 are widened to f32, reduced and
 * rounded back (round to nearest even), so a chain of reductions rounds once per step. Max and min
 * of floats propagate NaN (a NaN on either side gives NaN), matching what users of partial max
 * expect from numpy's maximum. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ts_kernels.h"

static const char *const reduce_names[TS_REDUCE_COUNT] = {"sum", "max", "min"};

const char *ts_reduce_name(ts_reduce_op op) {
  if ((int)op < 0 || op >= TS_REDUCE_COUNT)
    return "invalid";
  return reduce_names[op];
}

int ts_reduce_parse(const char *text, ts_reduce_op *out, ts_error *err) {
  for (int op = 0; text && op < TS_REDUCE_COUNT; op++)
    if (strcmp(text, reduce_names[op]) == 0) {
      if (out)
        *out = (ts_reduce_op)op;
      return TS_OK;
    }
  return ts_error_set(err, TS_INVALID_ARGUMENT, "unknown reduce op '%s'; valid: sum, max, min",
                      text ? text : "(null)");
}

#define FLOAT_LOOP(T)                                                                              \
  do {                                                                                             \
    T *d = dst;                                                                                    \
    const T *s = src;                                                                              \
    if (op == TS_REDUCE_SUM)                                                                       \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] += s[i];                                                                              \
    else if (op == TS_REDUCE_MAX)                                                                  \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = (d[i] != d[i] || s[i] != s[i]) ? d[i] + s[i] : (s[i] > d[i] ? s[i] : d[i]);         \
    else                                                                                           \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = (d[i] != d[i] || s[i] != s[i]) ? d[i] + s[i] : (s[i] < d[i] ? s[i] : d[i]);         \
  } while (0)

/* Integer sums wrap (computed in unsigned arithmetic, like a C cast). */
#define INT_LOOP(T, U)                                                                             \
  do {                                                                                             \
    T *d = dst;                                                                                    \
    const T *s = src;                                                                              \
    if (op == TS_REDUCE_SUM)                                                                       \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = (T)((U)d[i] + (U)s[i]);                                                             \
    else if (op == TS_REDUCE_MAX)                                                                  \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = s[i] > d[i] ? s[i] : d[i];                                                          \
    else                                                                                           \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = s[i] < d[i] ? s[i] : d[i];                                                          \
  } while (0)

static float reduce_f32(float a, float b, ts_reduce_op op) {
  if (op == TS_REDUCE_SUM || isnan(a) || isnan(b))
    return a + b;
  if (op == TS_REDUCE_MAX)
    return b > a ? b : a;
  return b < a ? b : a;
}

int ts_reduce(void *dst, const void *src, size_t n, ts_dtype dt, ts_reduce_op op, ts_error *err) {
  if ((int)op < 0 || op >= TS_REDUCE_COUNT)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "reduce op %d; valid: sum, max, min", (int)op);
  if (!ts_dtype_valid((int)dt))
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  if (n > 0 && (!dst || !src))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_reduce: NULL buffer for %zu elements", n);
  switch (dt) {
  case TS_F32:
    FLOAT_LOOP(float);
    break;
  case TS_F64:
    FLOAT_LOOP(double);
    break;
  case TS_F16: {
    uint16_t *d = dst;
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++)
      d[i] = ts_f32_to_f16(reduce_f32(ts_f16_to_f32(d[i]), ts_f16_to_f32(s[i]), op));
    break;
  }
  case TS_BF16: {
    uint16_t *d = dst;
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++)
      d[i] = ts_f32_to_bf16(reduce_f32(ts_bf16_to_f32(d[i]), ts_bf16_to_f32(s[i]), op));
    break;
  }
  case TS_I8:
    INT_LOOP(int8_t, uint8_t);
    break;
  case TS_I32:
    INT_LOOP(int32_t, uint32_t);
    break;
  case TS_I64:
    INT_LOOP(int64_t, uint64_t);
    break;
  case TS_U8:
    INT_LOOP(uint8_t, uint8_t);
    break;
  default:
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  }
  return TS_OK;
}

int ts_reduce_fill_identity(void *dst, size_t n, ts_dtype dt, ts_reduce_op op, ts_error *err) {
  if ((int)op < 0 || op >= TS_REDUCE_COUNT)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "reduce op %d; valid: sum, max, min", (int)op);
  if (!ts_dtype_valid((int)dt))
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  if (n > 0 && !dst)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_reduce_fill_identity: NULL buffer");
  size_t es = ts_dtype_size(dt);
  if (op == TS_REDUCE_SUM) {
    memset(dst, 0, n * es); /* all-zero bytes are zero in every dtype */
    return TS_OK;
  }
  bool max = op == TS_REDUCE_MAX;
  unsigned char one[8];
  switch (dt) {
  case TS_F32: {
    float v = max ? -INFINITY : INFINITY;
    memcpy(one, &v, 4);
    break;
  }
  case TS_F64: {
    double v = max ? -INFINITY : INFINITY;
    memcpy(one, &v, 8);
    break;
  }
  case TS_F16: {
    uint16_t v = max ? 0xFC00 : 0x7C00;
    memcpy(one, &v, 2);
    break;
  }
  case TS_BF16: {
    uint16_t v = max ? 0xFF80 : 0x7F80;
    memcpy(one, &v, 2);
    break;
  }
  case TS_I8: {
    int8_t v = max ? INT8_MIN : INT8_MAX;
    memcpy(one, &v, 1);
    break;
  }
  case TS_I32: {
    int32_t v = max ? INT32_MIN : INT32_MAX;
    memcpy(one, &v, 4);
    break;
  }
  case TS_I64: {
    int64_t v = max ? INT64_MIN : INT64_MAX;
    memcpy(one, &v, 8);
    break;
  }
  case TS_U8: {
    uint8_t v = max ? 0 : UINT8_MAX;
    memcpy(one, &v, 1);
    break;
  }
  default:
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  }
  unsigned char *d = dst;
  for (size_t i = 0; i < n; i++)
    memcpy(d + i * es, one, es);
  return TS_OK;
}
