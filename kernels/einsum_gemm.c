/* einsum_gemm.c - the batched matrix product of a pairwise einsum step: C = A * B for each batch
 * element, f32 and f64 through CBLAS (one cblas_?gemm per batch element, transpose flags taken
 * from the strides), i32 and i64 by exact loops that wrap like unsigned arithmetic.
 *
 * Matrices are strided views (row stride, column stride). When C is stored column-major the
 * product is computed as C^T = B^T * A^T, so any BLAS-readable C works. */
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

#define TS__INT_GEMM(NAME, UT)                                                                    \
  static void NAME(const ts__ein_mat *c, const ts__ein_mat *a, const ts__ein_mat *b,              \
                   int64_t batch, int64_t k) {                                                     \
    for (int64_t bi = 0; bi < batch; bi++) {                                                       \
      UT *cb = (UT *)c->base + bi * c->bstride;                                                    \
      const UT *ab = (const UT *)a->base + bi * a->bstride;                                        \
      const UT *bb = (const UT *)b->base + bi * b->bstride;                                        \
      for (int64_t i = 0; i < c->rows; i++) {                                                      \
        UT *crow = cb + i * c->rs;                                                                 \
        for (int64_t j = 0; j < c->cols; j++) crow[j * c->cs] = 0;                                 \
        for (int64_t kk = 0; kk < k; kk++) {                                                       \
          UT aik = ab[i * a->rs + kk * a->cs];                                                     \
          const UT *brow = bb + kk * b->rs;                                                        \
          for (int64_t j = 0; j < c->cols; j++) crow[j * c->cs] += aik * brow[j * b->cs];          \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }

TS__INT_GEMM(gemm_u32, uint32_t)
TS__INT_GEMM(gemm_u64, uint64_t)

int ts__ein_gemm(ts_dtype cdt, const ts__ein_mat *c_in, const ts__ein_mat *a_in,
                 const ts__ein_mat *b_in, int64_t batch, int64_t k, ts_error *err) {
  ts__ein_count(TS__CNT_GEMM);
  if (cdt == TS_I32 || cdt == TS_I64) {
    if (cdt == TS_I32) gemm_u32(c_in, a_in, b_in, batch, k);
    else gemm_u64(c_in, a_in, b_in, batch, k);
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
  for (int64_t bi = 0; bi < batch; bi++) {
    if (cdt == TS_F32)
      cblas_sgemm(CblasRowMajor, fa, fb, (blasint)c.rows, (blasint)c.cols, (blasint)k, 1.0f,
                  (const float *)a.base + bi * a.bstride, (blasint)lda,
                  (const float *)b.base + bi * b.bstride, (blasint)ldb, 0.0f,
                  (float *)c.base + bi * c.bstride, (blasint)ldc);
    else
      cblas_dgemm(CblasRowMajor, fa, fb, (blasint)c.rows, (blasint)c.cols, (blasint)k, 1.0,
                  (const double *)a.base + bi * a.bstride, (blasint)lda,
                  (const double *)b.base + bi * b.bstride, (blasint)ldb, 0.0,
                  (double *)c.base + bi * c.bstride, (blasint)ldc);
  }
  return TS_OK;
}
