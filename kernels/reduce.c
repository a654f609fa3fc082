/* reduce.c - element-wise reductions for partial placements: dst[i] = op(dst[i], src[i]) over
 * contiguous elements, and the identity of each op. f16 and bf16 are widened to f32, reduced and
 * rounded back (round to nearest even), so a chain of reductions rounds once per step. Max and min
 * of floats propagate NaN (a NaN on either side gives NaN), matching what users of partial max
 * expect from numpy's maximum. On bool, sum and max are "or", min and prod are "and" (numpy's sum
 * and product of bools stored back as bool, maximum and minimum). avg (DTensor's Partial("avg"):
 * the mean over the partial ranks) combines contributions like sum and is divided once, by
 * ts_reduce_finish, when all of them are in; it exists for the float dtypes only, as an integer
 * mean would have to round. Integer products wrap like sums. The 8-bit floats have no reductions:
 * an f8 sum rounded at every step loses most of its bits, so partial f8 tensors are refused,
 * naming the dtype; users reduce in f16, bf16 or f32. c64 and c128 sum and average part by part
 * and multiply as complex numbers by numpy's formula, (ac - bd) + (ad + bc)i in the part's
 * precision, so NaN and infinities propagate as in numpy's multiply (no C99 Annex G recovery:
 * (inf+0i)(1+0i) is inf+nan i, as numpy gives); complex numbers have no order, so max and min are
 * refused, naming the dtype and the reductions it has. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ts_kernels.h"

static const char *const reduce_names[TS_REDUCE_COUNT] = {[TS_REDUCE_SUM] = "sum",
                                                          [TS_REDUCE_MAX] = "max",
                                                          [TS_REDUCE_MIN] = "min",
                                                          [TS_REDUCE_AVG] = "avg",
                                                          [TS_REDUCE_PROD] = "prod"};

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
  return ts_error_set(err, TS_INVALID_ARGUMENT,
                      "unknown reduce op '%s'; valid: sum, avg, prod, max, min",
                      text ? text : "(null)");
}

#define FLOAT_LOOP(T)                                                                              \
  do {                                                                                             \
    T *d = dst;                                                                                    \
    const T *s = src;                                                                              \
    if (op == TS_REDUCE_SUM || op == TS_REDUCE_AVG)                                                \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] += s[i];                                                                              \
    else if (op == TS_REDUCE_PROD)                                                                 \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] *= s[i];                                                                              \
    else if (op == TS_REDUCE_MAX)                                                                  \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = (d[i] != d[i] || s[i] != s[i]) ? d[i] + s[i] : (s[i] > d[i] ? s[i] : d[i]);         \
    else                                                                                           \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = (d[i] != d[i] || s[i] != s[i]) ? d[i] + s[i] : (s[i] < d[i] ? s[i] : d[i]);         \
  } while (0)

/* Complex elements as (real, imaginary) pairs of T: sums part by part, products as numpy's. */
#define COMPLEX_LOOP(T)                                                                            \
  do {                                                                                             \
    T *d = dst;                                                                                    \
    const T *s = src;                                                                              \
    if (op == TS_REDUCE_PROD)                                                                      \
      for (size_t i = 0; i < 2 * n; i += 2) {                                                      \
        T ar = d[i], ai = d[i + 1], br = s[i], bi = s[i + 1];                                      \
        d[i] = ar * br - ai * bi;                                                                  \
        d[i + 1] = ar * bi + ai * br;                                                              \
      }                                                                                            \
    else                                                                                           \
      for (size_t i = 0; i < 2 * n; i++)                                                           \
        d[i] += s[i];                                                                              \
  } while (0)

/* Integer sums and products wrap (computed in unsigned arithmetic, like a C cast; a product of
 * narrow unsigned values is widened to unsigned int first, which cannot overflow signed int). */
#define INT_LOOP(T, U)                                                                             \
  do {                                                                                             \
    T *d = dst;                                                                                    \
    const T *s = src;                                                                              \
    if (op == TS_REDUCE_SUM)                                                                       \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = (T)((U)d[i] + (U)s[i]);                                                             \
    else if (op == TS_REDUCE_PROD)                                                                 \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = (T)((U)(1u * (U)d[i] * (U)s[i]));                                                   \
    else if (op == TS_REDUCE_MAX)                                                                  \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = s[i] > d[i] ? s[i] : d[i];                                                          \
    else                                                                                           \
      for (size_t i = 0; i < n; i++)                                                               \
        d[i] = s[i] < d[i] ? s[i] : d[i];                                                          \
  } while (0)

static float reduce_f32(float a, float b, ts_reduce_op op) {
  if (op == TS_REDUCE_PROD)
    return a * b;
  if (op == TS_REDUCE_SUM || op == TS_REDUCE_AVG || isnan(a) || isnan(b))
    return a + b;
  if (op == TS_REDUCE_MAX)
    return b > a ? b : a;
  return b < a ? b : a;
}

int ts_reduce_check(ts_dtype dt, ts_reduce_op op, ts_error *err) {
  if ((int)op < 0 || op >= TS_REDUCE_COUNT)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "reduce op %d; valid: sum, avg, prod, max, min",
                        (int)op);
  if (!ts_dtype_valid((int)dt))
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  if (dt == TS_F8_E4M3 || dt == TS_F8_E5M2)
    return ts_error_set(err, TS_BAD_DTYPE,
                        "partial %s of %s: %s has no reductions; sum, max and min exist for f32, "
                        "f64, f16, bf16, the integer dtypes and bool, as does prod, avg for the "
                        "other floats (reduce in f16, bf16 or f32); c64 and c128 have sum, avg "
                        "and prod",
                        ts_reduce_name(op), ts_dtype_name(dt), ts_dtype_name(dt));
  if (ts_dtype_is_complex(dt) && (op == TS_REDUCE_MAX || op == TS_REDUCE_MIN))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "partial %s of %s: complex numbers have no order, so %s has no max or "
                        "min; its reductions are sum, avg and prod",
                        ts_reduce_name(op), ts_dtype_name(dt), ts_dtype_name(dt));
  if (op == TS_REDUCE_AVG && !ts_dtype_is_float(dt) && !ts_dtype_is_complex(dt))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "partial avg of %s: avg exists for the float dtypes f32, f64, f16 and "
                        "bf16 and the complex c64 and c128 (an integer mean would round); for %s "
                        "use sum, prod, max or min, or cast to a float dtype first",
                        ts_dtype_name(dt), ts_dtype_name(dt));
  return TS_OK;
}

static void reduce_bool(uint8_t *d, const uint8_t *s, size_t n, ts_reduce_op op) {
  if (op == TS_REDUCE_MIN || op == TS_REDUCE_PROD)
    for (size_t i = 0; i < n; i++)
      d[i] = (uint8_t)(d[i] != 0 && s[i] != 0);
  else
    for (size_t i = 0; i < n; i++)
      d[i] = (uint8_t)(d[i] != 0 || s[i] != 0);
}

int ts_reduce(void *dst, const void *src, size_t n, ts_dtype dt, ts_reduce_op op, ts_error *err) {
  int rc = ts_reduce_check(dt, op, err);
  if (rc)
    return rc;
  if (n > 0 && (!dst || !src))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_reduce: NULL buffer for %zu elements", n);
  switch (dt) {
  case TS_F32: FLOAT_LOOP(float); break;
  case TS_F64: FLOAT_LOOP(double); break;
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
  case TS_I8: INT_LOOP(int8_t, uint8_t); break;
  case TS_I32: INT_LOOP(int32_t, uint32_t); break;
  case TS_I64: INT_LOOP(int64_t, uint64_t); break;
  case TS_U8: INT_LOOP(uint8_t, uint8_t); break;
  case TS_I16: INT_LOOP(int16_t, uint16_t); break;
  case TS_U16: INT_LOOP(uint16_t, uint16_t); break;
  case TS_U32: INT_LOOP(uint32_t, uint32_t); break;
  case TS_U64: INT_LOOP(uint64_t, uint64_t); break;
  case TS_BOOL: reduce_bool(dst, src, n, op); break;
  case TS_C64: COMPLEX_LOOP(float); break;
  case TS_C128: COMPLEX_LOOP(double); break;
  default: return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  }
  return TS_OK;
}

/* The identity of max (the lowest value) and of min (the highest) of each integer dtype. */
static const struct {
  int64_t lowest;
  uint64_t highest;
} int_identity[TS_DTYPE_COUNT] = {
    [TS_I8] = {.lowest = INT8_MIN, .highest = INT8_MAX},
    [TS_I16] = {.lowest = INT16_MIN, .highest = INT16_MAX},
    [TS_I32] = {.lowest = INT32_MIN, .highest = INT32_MAX},
    [TS_I64] = {.lowest = INT64_MIN, .highest = INT64_MAX},
    [TS_U8] = {.lowest = 0, .highest = UINT8_MAX},
    [TS_U16] = {.lowest = 0, .highest = UINT16_MAX},
    [TS_U32] = {.lowest = 0, .highest = UINT32_MAX},
    [TS_U64] = {.lowest = 0, .highest = UINT64_MAX},
    [TS_BOOL] = {.lowest = 0, .highest = 1},
};

/* One element of value 1 in dt (the identity of prod; 1 + 0i for the complex dtypes). */
static void one_of(ts_dtype dt, unsigned char *one) {
  switch (dt) {
  case TS_C64: {
    float v[2] = {1.0f, 0.0f};
    memcpy(one, v, sizeof v);
    break;
  }
  case TS_C128: {
    double v[2] = {1.0, 0.0};
    memcpy(one, v, sizeof v);
    break;
  }
  case TS_F32: {
    float v = 1.0f;
    memcpy(one, &v, 4);
    break;
  }
  case TS_F64: {
    double v = 1.0;
    memcpy(one, &v, 8);
    break;
  }
  case TS_F16:
  case TS_BF16: {
    uint16_t v = dt == TS_F16 ? 0x3C00 : 0x3F80;
    memcpy(one, &v, 2);
    break;
  }
  default: { /* integers and bool: 1 in the element's width, little or big
                endian alike */
    uint8_t v8 = 1;
    uint16_t v16 = 1;
    uint32_t v32 = 1;
    uint64_t v64 = 1;
    size_t es = ts_dtype_size(dt);
    memcpy(one, es == 1 ? (void *)&v8 : es == 2 ? (void *)&v16 : es == 4 ? (void *)&v32 : &v64, es);
    break;
  }
  }
}

int ts_reduce_fill_identity(void *dst, size_t n, ts_dtype dt, ts_reduce_op op, ts_error *err) {
  int rc = ts_reduce_check(dt, op, err);
  if (rc)
    return rc;
  if (n > 0 && !dst)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_reduce_fill_identity: NULL buffer");
  size_t es = ts_dtype_size(dt);
  if (op == TS_REDUCE_SUM || op == TS_REDUCE_AVG) {
    memset(dst, 0, n * es); /* all-zero bytes are zero in every dtype */
    return TS_OK;
  }
  bool max = op == TS_REDUCE_MAX;
  unsigned char one[16];
  if (op == TS_REDUCE_PROD)
    one_of(dt, one);
  else
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
    default: { /* integers and bool: the value truncated to the element's
                * width */
      uint64_t v = max ? (uint64_t)int_identity[dt].lowest : int_identity[dt].highest;
      uint8_t v8 = (uint8_t)v;
      uint16_t v16 = (uint16_t)v;
      uint32_t v32 = (uint32_t)v;
      memcpy(one, es == 1 ? (void *)&v8 : es == 2 ? (void *)&v16 : es == 4 ? (void *)&v32 : &v, es);
      break;
    }
    }
  unsigned char *d = dst;
  for (size_t i = 0; i < n; i++)
    memcpy(d + i * es, one, es);
  return TS_OK;
}

int ts_reduce_finish(void *dst, size_t n, ts_dtype dt, ts_reduce_op op, int64_t count,
                     ts_error *err) {
  int rc = ts_reduce_check(dt, op, err);
  if (rc)
    return rc;
  if (count < 1)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_reduce_finish: %lld contributions",
                        (long long)count);
  if (op != TS_REDUCE_AVG || count == 1 || n == 0)
    return TS_OK;
  if (!dst)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_reduce_finish: NULL buffer");
  switch (dt) {
  case TS_F32:
  case TS_C64: { /* a complex value's two parts */
    float *d = dst, c = (float)count;
    for (size_t i = 0; i < (dt == TS_C64 ? 2 * n : n); i++)
      d[i] /= c;
    break;
  }
  case TS_F64:
  case TS_C128: {
    double *d = dst, c = (double)count;
    for (size_t i = 0; i < (dt == TS_C128 ? 2 * n : n); i++)
      d[i] /= c;
    break;
  }
  case TS_F16: {
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
      d[i] = ts_f32_to_f16(ts_f16_to_f32(d[i]) / (float)count);
    break;
  }

  default: { /* bf16: ts_reduce_check admits the float dtypes only */
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
      d[i] = ts_f32_to_bf16(ts_bf16_to_f32(d[i]) / (float)count);
    break;
  }
  }
  return TS_OK;
}
