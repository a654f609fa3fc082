/* ref.c - the naive reference of ref.h. */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ref_t ref_new(int ndim, const int64_t *shape) {
  ref_t t;
  memset(&t, 0, sizeof t);
  t.ndim = ndim;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    t.shape[d] = shape[d];
    n *= shape[d];
  }
  t.d = calloc((size_t)n + 1, sizeof(double));
  return t;
}

void ref_free(ref_t *t) {
  free(t->d);
  t->d = NULL;
}

int64_t ref_numel(const ref_t *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    n *= t->shape[d];
  return n;
}

ref_t ref_scalar(double v) {
  ref_t t = ref_new(0, NULL);
  t.d[0] = v;
  return t;
}

/* the element of a at the broadcast position idx of an nd-dim result */
static double at(const ref_t *a, int nd, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < a->ndim; d++) {
    int rd = d + nd - a->ndim;
    int64_t i = a->shape[d] == 1 ? 0 : idx[rd];
    off = off * a->shape[d] + i;
  }
  return a->d[off];
}

static double apply(const char *op, double x, double y, double z) {
  if (!strcmp(op, "add"))
    return x + y;
  if (!strcmp(op, "sub"))
    return x - y;
  if (!strcmp(op, "mul"))
    return x * y;
  if (!strcmp(op, "div"))
    return x / y;
  if (!strcmp(op, "pow"))
    return pow(x, y);
  if (!strcmp(op, "max"))
    return isnan(x) || x > y ? x : y;
  if (!strcmp(op, "min"))
    return isnan(x) || x < y ? x : y;
  if (!strcmp(op, "neg"))
    return -x;
  if (!strcmp(op, "abs"))
    return fabs(x);
  if (!strcmp(op, "exp"))
    return exp(x);
  if (!strcmp(op, "log"))
    return log(x);
  if (!strcmp(op, "sqrt"))
    return sqrt(x);
  if (!strcmp(op, "rsqrt"))
    return 1.0 / sqrt(x);
  if (!strcmp(op, "tanh"))
    return tanh(x);
  if (!strcmp(op, "sigmoid"))
    return 1.0 / (1.0 + exp(-x));
  if (!strcmp(op, "relu"))
    return x > 0 ? x : 0;
  if (!strcmp(op, "gelu"))
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  if (!strcmp(op, "where"))
    return x != 0 ? y : z;
  if (!strcmp(op, "eq"))
    return x == y;
  if (!strcmp(op, "ne"))
    return x != y;
  if (!strcmp(op, "lt"))
    return x < y;
  if (!strcmp(op, "le"))
    return x <= y;
  if (!strcmp(op, "gt"))
    return x > y;
  if (!strcmp(op, "ge"))
    return x >= y;
  if (!strcmp(op, "cast_i32"))
    return (double)(int32_t)x;
  if (!strcmp(op, "round_f32"))
    return (double)(float)x;
  abort();
}

ref_t ref_elementwise(const char *op, const ref_t *a, const ref_t *b, const ref_t *c) {
  const ref_t *ops[3] = {a, b, c};
  int nd = 0;
  int64_t shape[8];
  for (int i = 0; i < 3; i++)
    if (ops[i] && ops[i]->ndim > nd)
      nd = ops[i]->ndim;
  for (int d = 0; d < nd; d++) {
    shape[d] = 1;
    for (int i = 0; i < 3; i++) {
      if (!ops[i])
        continue;
      int ad = d - (nd - ops[i]->ndim);
      if (ad >= 0 && ops[i]->shape[ad] != 1)
        shape[d] = ops[i]->shape[ad];
    }
  }
  ref_t r = ref_new(nd, shape);
  int64_t n = ref_numel(&r), idx[8];
  for (int64_t k = 0; k < n; k++) {
    int64_t rem = k;
    for (int d = nd - 1; d >= 0; d--) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
    }
    double x = at(a, nd, idx), y = b ? at(b, nd, idx) : 0, z = c ? at(c, nd, idx) : 0;
    r.d[k] = apply(op, x, y, z);
  }
  return r;
}

ref_t ref_reduce(const char *op, const ref_t *a, uint32_t axes, bool keepdims) {
  int64_t shape[8];
  int nd = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (!(axes & (1u << d)))
      shape[nd++] = a->shape[d];
    else if (keepdims)
      shape[nd++] = 1;
  }
  ref_t r = ref_new(nd, shape);
  int64_t nout = ref_numel(&r);
  double *acc = malloc((size_t)(nout + 1) * sizeof *acc);
  int64_t *cnt = calloc((size_t)nout + 1, sizeof *cnt);
  for (int64_t o = 0; o < nout; o++)
    acc[o] = !strcmp(op, "max") ? -INFINITY : !strcmp(op, "min") ? INFINITY : 0;
  int64_t n = ref_numel(a), idx[8];
  for (int64_t k = 0; k < n; k++) {
    int64_t rem = k;
    for (int d = a->ndim - 1; d >= 0; d--) {
      idx[d] = rem % a->shape[d];
      rem /= a->shape[d];
    }
    int64_t o = 0;
    for (int d = 0; d < a->ndim; d++)
      if (!(axes & (1u << d)))
        o = o * a->shape[d] + idx[d];
    double x = a->d[k];
    if (!strcmp(op, "max"))
      acc[o] = isnan(acc[o]) || x <= acc[o] ? acc[o] : x;
    else if (!strcmp(op, "min"))
      acc[o] = isnan(acc[o]) || x >= acc[o] ? acc[o] : x;
    else
      acc[o] += x;
    cnt[o]++;
  }
  for (int64_t o = 0; o < nout; o++)
    r.d[o] = !strcmp(op, "mean") ? acc[o] / (double)cnt[o] : acc[o];
  free(acc);
  free(cnt);
  return r;
}

ref_t ref_transpose(const ref_t *a, const int *perm) {
  int64_t shape[8];
  for (int d = 0; d < a->ndim; d++)
    shape[d] = a->shape[perm[d]];
  ref_t r = ref_new(a->ndim, shape);
  int64_t n = ref_numel(&r), idx[8], src[8];
  for (int64_t k = 0; k < n; k++) {
    int64_t rem = k;
    for (int d = a->ndim - 1; d >= 0; d--) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
    }
    for (int d = 0; d < a->ndim; d++)
      src[perm[d]] = idx[d];
    int64_t off = 0;
    for (int d = 0; d < a->ndim; d++)
      off = off * a->shape[d] + src[d];
    r.d[k] = a->d[off];
  }
  return r;
}
