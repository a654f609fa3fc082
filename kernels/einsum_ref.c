/* einsum_ref.c - the naive einsum references the tests compare the engine with: one odometer over
 * every value of every label, each operand element read through its own layout (index 0 on a
 * broadcast size-1 dim, the same index on the dims of a repeated label), products accumulated in
 * f64 (floats) or wrapping 64-bit integers. No path, no GEMM, no strided-copy kernel: only the
 * equation parser is shared with the engine. */
#include <stdlib.h>
#include <string.h>

#include "einsum_internal.h"

static bool ref_dtype_ok(ts_dtype dt) {
  return dt == TS_F32 || dt == TS_F64 || dt == TS_F16 || dt == TS_BF16 || dt == TS_I32 ||
         dt == TS_I64;
}

static const char *elem_addr(const ts_tensor *t, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < t->layout.ndim; d++)
    off += idx[d] * t->layout.strides[d];
  return (const char *)t->data + t->layout.offset + off * (int64_t)ts_dtype_size(t->layout.dtype);
}

/* Elements in and out through the dtype converter: floats as f64, integers as i64 (wrapping). */
static double read_f(const char *a, ts_dtype dt) {
  double v;
  ts_convert(&v, TS_F64, a, dt, 1);
  return v;
}

static uint64_t read_i(const char *a, ts_dtype dt) {
  int64_t v;
  ts_convert(&v, TS_I64, a, dt, 1);
  return (uint64_t)v;
}

static void write_val(char *a, ts_dtype dt, double f, uint64_t i) {
  if (ts_dtype_is_float(dt))
    ts_convert(a, dt, &f, TS_F64, 1);
  else
    ts_convert(a, dt, &i, TS_I64, 1);
}

/* Parses against the tensors' shapes and checks dtypes. */
static int ref_parse(ts__ein_parsed *pe, const char *eq, int n, const ts_tensor *const *ops,
                     ts_error *err) {
  if (ops == NULL || n < 1 || n > TS_EINSUM_MAX_OPERANDS)
    return ts_error_set(err, TS_EINSUM, "einsum reference: %d operands; valid is 1 to %d", n,
                        TS_EINSUM_MAX_OPERANDS);
  int ndims[TS_EINSUM_MAX_OPERANDS];
  const int64_t *shapes[TS_EINSUM_MAX_OPERANDS];
  for (int i = 0; i < n; i++) {
    if (ops[i] == NULL)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum reference: operand %d is NULL", i);
    if (ops[i]->layout.dtype != ops[0]->layout.dtype || !ref_dtype_ok(ops[i]->layout.dtype))
      return ts_error_set(err, TS_BAD_DTYPE, "einsum reference: operand %d has dtype %s", i,
                          ts_dtype_name(ops[i]->layout.dtype));
    ndims[i] = ops[i]->layout.ndim;
    shapes[i] = ops[i]->layout.shape;
  }
  return ts__ein_parse(pe, eq, n, ndims, shapes, err);
}

static int check_like(const ts_tensor *t, ts_dtype dt, int nd, const int64_t *shape,
                      const char *what, ts_error *err) {
  if (t->layout.dtype != dt || t->layout.ndim != nd)
    return ts_error_set(err, TS_BAD_SHAPE, "einsum reference: %s has the wrong dtype or dims",
                        what);
  for (int d = 0; d < nd; d++)
    if (t->layout.shape[d] != shape[d])
      return ts_error_set(err, TS_BAD_SHAPE, "einsum reference: %s dim %d has the wrong size", what,
                          d);
  return TS_OK;
}

/* The labels in use and an odometer over them. */
typedef struct odometer {
  int n;
  int lab[TS__EIN_MAXL];
  int64_t size[TS__EIN_MAXL];
  int64_t val[TS__EIN_MAXL]; /* indexed by label */
} odometer;

static bool odo_init(odometer *o, const ts__ein_parsed *pe) {
  memset(o, 0, sizeof *o);
  for (int l = 0; l < TS__EIN_MAXL; l++)
    if (pe->size[l] >= 0) {
      if (pe->size[l] == 0)
        return false;
      o->lab[o->n] = l;
      o->size[o->n++] = pe->size[l];
    }
  return true;
}

static bool odo_next(odometer *o) {
  for (int j = o->n - 1; j >= 0; j--) {
    if (++o->val[o->lab[j]] < o->size[j])
      return true;
    o->val[o->lab[j]] = 0;
  }
  return false;
}

/* Index of operand i's element under the current label values. */
static void operand_index(const ts__ein_parsed *pe, int i, const odometer *o, int64_t *idx) {
  for (int d = 0; d < pe->ndim[i]; d++)
    idx[d] = pe->shape[i][d] == 1 ? 0 : o->val[pe->lab[i][d]];
}

static int64_t row_major(int nd, const int64_t *shape, const int64_t *idx) {
  int64_t r = 0;
  for (int d = 0; d < nd; d++)
    r = r * shape[d] + idx[d];
  return r;
}

typedef struct acc_buf {
  double *f;
  uint64_t *i;
  int64_t n;
} acc_buf;

static int acc_alloc(acc_buf *a, int nd, const int64_t *shape, ts_error *err) {
  a->n = 1;
  for (int d = 0; d < nd; d++)
    a->n *= shape[d];
  a->f = calloc((size_t)(a->n ? a->n : 1), sizeof *a->f);
  a->i = calloc((size_t)(a->n ? a->n : 1), sizeof *a->i);
  if (a->f == NULL || a->i == NULL) {
    free(a->f);
    free(a->i);
    a->f = NULL;
    a->i = NULL;
    return ts_error_set(err, TS_NO_MEMORY, "einsum reference: no memory");
  }
  return TS_OK;
}

static void acc_store(const acc_buf *a, const ts_tensor *t) {
  int nd = t->layout.ndim;
  int64_t idx[TS_MAX_DIMS] = {0};
  for (int64_t e = 0; e < a->n; e++) {
    write_val((char *)elem_addr(t, idx), t->layout.dtype, a->f[e], a->i[e]);
    for (int d = nd - 1; d >= 0; d--) {
      if (++idx[d] < t->layout.shape[d])
        break;
      idx[d] = 0;
    }
  }
}

static void acc_free(acc_buf *a) {
  free(a->f);
  free(a->i);
}

int ts_einsum_reference(const char *equation, int n, const ts_tensor *const *ops,
                        const ts_tensor *out, ts_error *err) {
  ts__ein_parsed pe;
  int rc = ref_parse(&pe, equation, n, ops, err);
  if (rc)
    return rc;
  ts_dtype dt = ops[0]->layout.dtype;
  bool fl = ts_dtype_is_float(dt);
  int64_t oshape[TS_MAX_DIMS];
  for (int d = 0; d < pe.out_ndim; d++)
    oshape[d] = pe.size[pe.out_lab[d]];
  if (out == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum reference: out is NULL");
  rc = check_like(out, dt, pe.out_ndim, oshape, "the output", err);
  if (rc)
    return rc;
  acc_buf acc;
  rc = acc_alloc(&acc, pe.out_ndim, oshape, err);
  if (rc)
    return rc;
  odometer o;
  if (odo_init(&o, &pe)) {
    do {
      double pf = 1.0;
      uint64_t pi = 1;
      for (int i = 0; i < n; i++) {
        int64_t idx[TS_MAX_DIMS];
        operand_index(&pe, i, &o, idx);
        const char *a = elem_addr(ops[i], idx);
        if (fl)
          pf *= read_f(a, dt);
        else
          pi *= read_i(a, dt);
      }
      int64_t oidx[TS_MAX_DIMS];
      for (int d = 0; d < pe.out_ndim; d++)
        oidx[d] = o.val[pe.out_lab[d]];
      int64_t e = row_major(pe.out_ndim, oshape, oidx);
      acc.f[e] += pf;
      acc.i[e] += pi;
    } while (odo_next(&o));
  }
  acc_store(&acc, out);
  acc_free(&acc);
  return TS_OK;
}

int ts_einsum_reference_backward(const char *equation, int n, const ts_tensor *const *ops,
                                 const ts_tensor *grad_out, const ts_tensor *const *grads,
                                 ts_error *err) {
  ts__ein_parsed pe;
  int rc = ref_parse(&pe, equation, n, ops, err);
  if (rc)
    return rc;
  if (grad_out == NULL || grads == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum reference: grad_out or grads is NULL");
  ts_dtype dt = ops[0]->layout.dtype;
  bool fl = ts_dtype_is_float(dt);
  int64_t oshape[TS_MAX_DIMS];
  for (int d = 0; d < pe.out_ndim; d++)
    oshape[d] = pe.size[pe.out_lab[d]];
  rc = check_like(grad_out, dt, pe.out_ndim, oshape, "grad_out", err);
  for (int i = 0; i < n && rc == TS_OK; i++)
    if (grads[i])
      rc = check_like(grads[i], dt, pe.ndim[i], pe.shape[i], "a gradient", err);
  if (rc)
    return rc;
  acc_buf acc[TS_EINSUM_MAX_OPERANDS];
  memset(acc, 0, sizeof acc);
  for (int i = 0; i < n && rc == TS_OK; i++)
    if (grads[i])
      rc = acc_alloc(&acc[i], pe.ndim[i], pe.shape[i], err);
  odometer o;
  if (rc == TS_OK && odo_init(&o, &pe)) {
    do {
      int64_t oidx[TS_MAX_DIMS];
      for (int d = 0; d < pe.out_ndim; d++)
        oidx[d] = o.val[pe.out_lab[d]];
      const char *ga = elem_addr(grad_out, oidx);
      double gf = fl ? read_f(ga, dt) : 0.0;
      uint64_t gi = fl ? 0 : read_i(ga, dt);
      for (int i = 0; i < n; i++) {
        if (!grads[i])
          continue;
        double pf = gf;
        uint64_t pi = gi;
        for (int j = 0; j < n; j++) {
          if (j == i)
            continue;
          int64_t idx[TS_MAX_DIMS];
          operand_index(&pe, j, &o, idx);
          const char *a = elem_addr(ops[j], idx);
          if (fl)
            pf *= read_f(a, dt);
          else
            pi *= read_i(a, dt);
        }
        int64_t idx[TS_MAX_DIMS];
        operand_index(&pe, i, &o, idx);
        int64_t e = row_major(pe.ndim[i], pe.shape[i], idx);
        acc[i].f[e] += pf;
        acc[i].i[e] += pi;
      }
    } while (odo_next(&o));
  }
  for (int i = 0; i < n; i++)
    if (grads[i] && rc == TS_OK)
      acc_store(&acc[i], grads[i]);
  for (int i = 0; i < n; i++)
    acc_free(&acc[i]);
  return rc;
}
