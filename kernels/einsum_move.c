/* einsum_move.c - how the einsum engine moves data: every transpose, broadcast, diagonal write
 * and dtype conversion goes through the strided-copy kernel (ts_copy) on views built here; the
 * only loops of its own are the sums over reduced labels. Also the process-wide counters of
 * those copies, which the tests use to prove that backward reuses the cache.
 *
 * A view may have more dims than ts_copy takes (an intermediate can carry many labels): dims that
 * are contiguous in both source and destination are fused first, and what still exceeds
 * TS_MAX_DIMS is looped over, one ts_copy per outer index. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "einsum_internal.h"

static atomic_uint_least64_t counters[5];

void ts__ein_count(int which) { atomic_fetch_add(&counters[which], 1); }

void ts_einsum_stats_get(ts_einsum_stats *out) {
  if (out == NULL)
    return;
  out->operand_transposes = atomic_load(&counters[TS__CNT_OPERAND]);
  out->grad_out_transposes = atomic_load(&counters[TS__CNT_GRAD_OUT]);
  out->result_moves = atomic_load(&counters[TS__CNT_RESULT]);
  out->gemm_calls = atomic_load(&counters[TS__CNT_GEMM]);
  out->chunked_gemms = atomic_load(&counters[TS__CNT_CHUNKED]);
}

/* A ts_tensor over the strided box at base (element 0), whatever the signs of the strides. */
static void make_tensor(ts_tensor *t, char *base, ts_dtype dt, int nd, const int64_t *size,
                        const int64_t *stride) {
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < nd; d++) {
    int64_t reach = (size[d] - 1) * stride[d];
    if (reach < 0)
      lo += reach;
    else
      hi += reach;
  }
  size_t es = ts_dtype_size(dt);
  memset(t, 0, sizeof *t);
  t->data = base + lo * (int64_t)es;
  t->bytes = (size_t)(hi - lo + 1) * es;
  t->layout.dtype = dt;
  t->layout.ndim = nd;
  t->layout.offset = -lo * (int64_t)es;
  t->layout.n_inner = 0;
  for (int d = 0; d < nd; d++) {
    t->layout.shape[d] = size[d];
    t->layout.strides[d] = stride[d];
  }
}

/* Copies the box of fused dims (outermost first; element strides ds, ss) through the
 * strided-copy kernel, looping over the dims beyond TS_MAX_DIMS. */
static int copy_dims(char *dbase, ts_dtype ddt, const char *sbase, ts_dtype sdt, int nd,
                     const int64_t *size, const int64_t *ds, const int64_t *ss, ts_error *err) {
  int outer = nd > TS_MAX_DIMS ? nd - TS_MAX_DIMS : 0;
  int inner = nd - outer;
  size_t des = ts_dtype_size(ddt), ses = ts_dtype_size(sdt);
  int64_t idx[TS__EIN_MAXL] = {0};
  for (;;) {
    int64_t doff = 0, soff = 0;
    for (int d = 0; d < outer; d++) {
      doff += idx[d] * ds[d];
      soff += idx[d] * ss[d];
    }
    ts_tensor td, tsrc;
    make_tensor(&td, dbase + doff * (int64_t)des, ddt, inner, size + outer, ds + outer);
    make_tensor(&tsrc, (char *)sbase + soff * (int64_t)ses, sdt, inner, size + outer, ss + outer);
    int rc = ts_copy(&td, &tsrc, NULL, err);
    if (rc)
      return rc;
    int d = outer - 1;
    while (d >= 0 && ++idx[d] == size[d])
      idx[d--] = 0;
    if (d < 0)
      break;
  }
  return TS_OK;
}

int ts__ein_copy(const ts__ein_view *dst, const ts__ein_view *src, ts_error *err) {
  int64_t size[TS__EIN_MAXL], ds[TS__EIN_MAXL], ss[TS__EIN_MAXL];
  int nd = 0;
  for (int d = 0; d < dst->nd; d++) {
    if (dst->size[d] == 0)
      return TS_OK;
    if (dst->size[d] == 1)
      continue;
    /* Fuse with the previous (outer) kept dim when both sides are contiguous across them. */
    if (nd > 0 && ds[nd - 1] == dst->stride[d] * dst->size[d] &&
        ss[nd - 1] == src->stride[d] * dst->size[d]) {
      size[nd - 1] *= dst->size[d];
      ds[nd - 1] = dst->stride[d];
      ss[nd - 1] = src->stride[d];
      continue;
    }
    size[nd] = dst->size[d];
    ds[nd] = dst->stride[d];
    ss[nd] = src->stride[d];
    nd++;
  }
  if (nd == 0) {
    size[0] = 1;
    ds[0] = ss[0] = 0;
    nd = 1;
  }
  return copy_dims(dst->base, dst->dt, src->base, src->dt, nd, size, ds, ss, err);
}

int ts__ein_zero(const ts__ein_view *v, ts_error *err) {
  static const uint64_t zeros[2];
  ts__ein_view z = *v;
  z.base = (char *)zeros;
  for (int d = 0; d < z.nd; d++)
    z.stride[d] = 0;
  return ts__ein_copy(v, &z, err);
}

static bool dense(const ts__ein_view *v) {
  int64_t expect = 1;
  for (int d = v->nd - 1; d >= 0; d--) {
    if (v->size[d] != 1 && v->stride[d] != expect)
      return false;
    expect *= v->size[d];
  }
  return true;
}

/* acc[t] (+)= tmp[r * nd + t] for r in [0, nr). */
static void sum_slices(ts_dtype cdt, void *acc, const void *tmp, int64_t nr, int64_t nd) {
  switch (cdt) {
  case TS_F32: {
    float *a = acc;
    const float *t = tmp;
    memcpy(a, t, (size_t)nd * sizeof *a);
    for (int64_t r = 1; r < nr; r++)
      for (int64_t i = 0; i < nd; i++)
        a[i] += t[r * nd + i];
    break;
  }
  case TS_F64: {
    double *a = acc;
    const double *t = tmp;
    memcpy(a, t, (size_t)nd * sizeof *a);
    for (int64_t r = 1; r < nr; r++)
      for (int64_t i = 0; i < nd; i++)
        a[i] += t[r * nd + i];
    break;
  }
  case TS_I32: {
    uint32_t *a = acc;
    const uint32_t *t = tmp;
    memcpy(a, t, (size_t)nd * sizeof *a);
    for (int64_t r = 1; r < nr; r++)
      for (int64_t i = 0; i < nd; i++)
        a[i] += t[r * nd + i];
    break;
  }
  default: {
    uint64_t *a = acc;
    const uint64_t *t = tmp;
    memcpy(a, t, (size_t)nd * sizeof *a);
    for (int64_t r = 1; r < nr; r++)
      for (int64_t i = 0; i < nd; i++)
        a[i] += t[r * nd + i];
    break;
  }
  }
}

int ts__ein_reduce_copy(const ts__ein_view *dst, const ts__ein_view *src, ts_dtype cdt,
                        ts_error *err) {
  int r = src->nd - dst->nd;
  if (r == 0)
    return ts__ein_copy(dst, src, err);
  int64_t nd_elems = 1, nr = 1;
  for (int d = 0; d < dst->nd; d++)
    nd_elems *= dst->size[d];
  for (int d = dst->nd; d < src->nd; d++)
    nr *= src->size[d];
  if (nd_elems == 0)
    return TS_OK;
  if (nr == 0)
    return ts__ein_zero(dst, err);
  size_t es = ts_dtype_size(cdt);
  /* Bring src to a dense [reduced..., kept...] buffer in cdt, then add up its slices. */
  char *tmp = ts_buffer_alloc((size_t)(nr * nd_elems) * es);
  if (tmp == NULL)
    return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a reduction of %lld elements",
                        (long long)(nr * nd_elems));
  ts__ein_view tv, sv;
  tv.base = tmp;
  tv.dt = cdt;
  tv.nd = sv.nd = src->nd;
  sv.base = src->base;
  sv.dt = src->dt;
  int j = 0;
  for (int d = dst->nd; d < src->nd; d++, j++) {
    sv.lab[j] = src->lab[d];
    sv.size[j] = src->size[d];
    sv.stride[j] = src->stride[d];
  }
  for (int d = 0; d < dst->nd; d++, j++) {
    sv.lab[j] = src->lab[d];
    sv.size[j] = src->size[d];
    sv.stride[j] = src->stride[d];
  }
  int64_t st = 1;
  for (int d = tv.nd - 1; d >= 0; d--) {
    tv.lab[d] = sv.lab[d];
    tv.size[d] = sv.size[d];
    tv.stride[d] = st;
    st *= sv.size[d];
  }
  int rc = ts__ein_copy(&tv, &sv, err);
  if (rc == TS_OK) {
    if (dst->dt == cdt && dense(dst)) {
      sum_slices(cdt, dst->base, tmp, nr, nd_elems);
    } else {
      char *acc = ts_buffer_alloc((size_t)nd_elems * es);
      if (acc == NULL) {
        rc = ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a reduction of %lld elements",
                          (long long)nd_elems);
      } else {
        sum_slices(cdt, acc, tmp, nr, nd_elems);
        ts__ein_view av = *dst;
        av.base = acc;
        av.dt = cdt;
        st = 1;
        for (int d = av.nd - 1; d >= 0; d--) {
          av.stride[d] = st;
          st *= av.size[d];
        }
        rc = ts__ein_copy(dst, &av, err);
        ts_buffer_free(acc);
      }
    }
  }
  ts_buffer_free(tmp);
  return rc;
}

bool ts__ein_fuse(const ts__ein_view *v, int first, int count, int64_t *size, int64_t *stride) {
  int64_t sz = 1, st = 0;
  bool any = false;
  for (int d = first; d < first + count; d++) {
    if (v->size[d] == 1)
      continue;
    if (any && st != v->stride[d] * v->size[d])
      return false;
    sz *= v->size[d];
    st = v->stride[d];
    any = true;
  }
  *size = sz;
  *stride = st;
  return true;
}

bool ts__ein_mat_blas(const ts__ein_mat *m, bool *trans, int64_t *ld) {
  const int64_t max_int = 2147483647;
  if (m->rows > max_int || m->cols > max_int)
    return false;
  if (m->cols == 1 && m->rows == 1) {
    *trans = false;
    *ld = 1;
    return true;
  }
  if (m->cs == 1 || m->cols == 1) {
    *trans = false;
    *ld = m->rows == 1 ? m->cols : m->rs;
    return *ld >= m->cols && *ld <= max_int;
  }
  if (m->rs == 1 || m->rows == 1) {
    *trans = true;
    *ld = m->cols == 1 ? m->rows : m->cs;
    return *ld >= m->rows && *ld <= max_int;
  }
  return false;
}
