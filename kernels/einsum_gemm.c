/* einsum_gemm.c - the batched matrix product of a pairwise einsum step: C = A * B for each batch
 * element, f32 and f64 through CBLAS (one cblas_?gemm per batch element, transpose flags taken
 * from the strides), i32 and i64 by exact loops that wrap like unsigned arithmetic.
 *
 * Matrices are strided views (row stride, column stride, a stride per batch label). When C is
 * stored column-major the product is computed as C^T = B^T * A^T, so any BLAS-readable C works. */
#include <cblas.h>

#include "einsum_internal.h"

static ts__ein_mat transposed(const ts__ein_mat *m) {
  ts__ein_mat t = *m;
  t.rs = m->cs;
  t.cs = m->rs;
  t.rows = m->cols;
  t.cols = m->rows;
  return t;
}

/* The batch: an odometer over the ABO labels giving each matrix's element offset. */
typedef struct batch_walk {
  int nb;
  const int64_t *size;
  int64_t idx[TS__EIN_MAXL];
  int64_t off[3]; /* C, A, B */
  const ts__ein_mat *m[3];
} batch_walk;

static void walk_init(batch_walk *w, int nb, const int64_t *size, const ts__ein_mat *c,
                      const ts__ein_mat *a, const ts__ein_mat *b) {
  w->nb = nb;
  w->size = size;
  w->m[0] = c;
  w->m[1] = a;
  w->m[2] = b;
  for (int j = 0; j < nb; j++) w->idx[j] = 0;
  w->off[0] = w->off[1] = w->off[2] = 0;
}

static bool walk_next(batch_walk *w) {
  for (int j = w->nb - 1; j >= 0; j--) {
    if (++w->idx[j] < w->size[j]) {
      for (int t = 0; t < 3; t++) w->off[t] += w->m[t]->bstride[j];
      return true;
    }
    for (int t = 0; t < 3; t++) w->off[t] -= (w->size[j] - 1) * w->m[t]->bstride[j];
    w->idx[j] = 0;
  }
  return false;
}

#define TS__INT_GEMM(NAME, UT)                                                                     \
  static void NAME(batch_walk *w, const ts__ein_mat *c, const ts__ein_mat *a,                      \
                   const ts__ein_mat *b, int64_t k) {                                              \
    do {                                                                                           \
      UT *cb = (UT *)c->base + w->off[0];                                                          \
      const UT *ab = (const UT *)a->base + w->off[1];                                              \
      const UT *bb = (const UT *)b->base + w->off[2];                                              \
      for (int64_t i = 0; i < c->rows; i++) {                                                      \
        UT *crow = cb + i * c->rs;                                                                 \
        for (int64_t j = 0; j < c->cols; j++) crow[j * c->cs] = 0;                                 \
        for (int64_t kk = 0; kk < k; kk++) {                                                       \
          UT aik = ab[i * a->rs + kk * a->cs];                                                     \
          const UT *brow = bb + kk * b->rs;                                                        \
          for (int64_t j = 0; j < c->cols; j++) crow[j * c->cs] += aik * brow[j * b->cs];          \
        }                                                                                          \
      }                                                                                            \
    } while (walk_next(w));                                                                        \
  }

TS__INT_GEMM(gemm_u32, uint32_t)
TS__INT_GEMM(gemm_u64, uint64_t)

int ts__ein_gemm(ts_dtype cdt, int nb, const int64_t *bsize, const ts__ein_mat *c_in,
                 const ts__ein_mat *a_in, const ts__ein_mat *b_in, int64_t k, ts_error *err) {
  ts__ein_count(TS__CNT_GEMM);
  batch_walk w;
  if (cdt == TS_I32 || cdt == TS_I64) {
    walk_init(&w, nb, bsize, c_in, a_in, b_in);
    if (cdt == TS_I32)
      gemm_u32(&w, c_in, a_in, b_in, k);
    else
      gemm_u64(&w, c_in, a_in, b_in, k);
    return TS_OK;
  }
  ts__ein_mat c = *c_in, a = *a_in, b = *b_in;
  bool tc, ta, tb;
  int64_t ldc, lda, ldb;
  if (!ts__ein_mat_blas(&c, &tc, &ldc))
    return ts_error_set(err, TS_INTERNAL, "einsum: the result matrix is not BLAS-readable");
  if (tc) {
    /* C^T = B^T A^T */
    ts__ein_mat at = transposed(&b), bt = transposed(&a);
    c = transposed(&c);
    a = at;
    b = bt;
    if (!ts__ein_mat_blas(&c, &tc, &ldc) || tc)
      return ts_error_set(err, TS_INTERNAL, "einsum: the result matrix is not BLAS-readable");
  }
  if (!ts__ein_mat_blas(&a, &ta, &lda) || !ts__ein_mat_blas(&b, &tb, &ldb))
    return ts_error_set(err, TS_INTERNAL, "einsum: an operand matrix is not BLAS-readable");
  if (k > 2147483647 || c.rows > 2147483647 || c.cols > 2147483647)
    return ts_error_set(err, TS_UNSUPPORTED,
                        "einsum: a GEMM of %lld x %lld x %lld exceeds CBLAS's 32-bit sizes",
                        (long long)c.rows, (long long)c.cols, (long long)k);
  enum CBLAS_TRANSPOSE fa = ta ? CblasTrans : CblasNoTrans, fb = tb ? CblasTrans : CblasNoTrans;
  walk_init(&w, nb, bsize, &c, &a, &b);
  do {
    if (cdt == TS_F32)
      cblas_sgemm(CblasRowMajor, fa, fb, (blasint)c.rows, (blasint)c.cols, (blasint)k, 1.0f,
                  (const float *)a.base + w.off[1], (blasint)lda, (const float *)b.base + w.off[2],
                  (blasint)ldb, 0.0f, (float *)c.base + w.off[0], (blasint)ldc);
    else
      cblas_dgemm(CblasRowMajor, fa, fb, (blasint)c.rows, (blasint)c.cols, (blasint)k, 1.0,
                  (const double *)a.base + w.off[1], (blasint)lda,
                  (const double *)b.base + w.off[2], (blasint)ldb, 0.0, (double *)c.base + w.off[0],
                  (blasint)ldc);
  } while (walk_next(&w));
  return TS_OK;
}
