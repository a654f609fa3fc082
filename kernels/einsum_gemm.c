/* einsum_gemm.c - the batched matrix product of a pairwise einsum step: C = A * B for each batch
 * element, f32 and f64 through CBLAS (one cblas_?gemm per batch element, transpose flags taken
 * from the strides; thin GEMMs over interleaved batch elements, or too large for one thread's
 * call, cut into chunks of one long dim with the whole batch run per chunk and the batch split
 * over threads, see chunk_dim), i32 and i64 by exact loops that wrap like unsigned arithmetic.
 *
 * Matrices are strided views (row stride, column stride, a stride per batch label). When C is
 * stored column-major the product is computed as C^T = B^T * A^T, so any BLAS-readable C works. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

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
  for (int j = 0; j < nb; j++)
    w->idx[j] = 0;
  w->off[0] = w->off[1] = w->off[2] = 0;
}

static bool walk_next(batch_walk *w) {
  for (int j = w->nb - 1; j >= 0; j--) {
    if (++w->idx[j] < w->size[j]) {
      for (int t = 0; t < 3; t++)
        w->off[t] += w->m[t]->bstride[j];
      return true;
    }
    for (int t = 0; t < 3; t++)
      w->off[t] -= (w->size[j] - 1) * w->m[t]->bstride[j];
    w->idx[j] = 0;
  }
  return false;
}

/* Chunking a thin GEMM loop (the product of two of M, N, K at most TS__EIN_CHUNK_THIN, the third
 * long), for two reasons:
 *  - interleaved batch elements: when a batch label's stride is smaller than the stride along
 *    the long dim (as in [b,q,h,d] read per (b,h): the rows of the 16 h sit side by side), each
 *    GEMM alone reads (or writes) one short piece of every line over a long span, and the next
 *    batch element comes back for the neighbouring pieces after the span has left the caches.
 *    Chunks of about TS__EIN_CHUNK_BYTES of span, the whole batch per chunk, consume each region
 *    together while it is cache-hot.
 *  - threads: a thin GEMM of more than TS__EIN_THREAD_CALL_MAX multiply-adds is split by
 *    OpenBLAS over its threads along the short dims (little to share, each thread packing the
 *    long operand, idle ones spinning), while the batch is the natural parallelism. Chunks of at
 *    most TS__EIN_THREAD_CALL_MAX multiply-adds stay on the calling thread, and the batch is
 *    split over threads instead (run_chunks_threaded).
 * A K chunk accumulates into C with beta = 1; the extra calls and re-reads of the small matrices
 * cost little for thin GEMMs. */
/* interleaved spans longer than this are chunked */
#define TS__EIN_CHUNK_SPAN ((int64_t)512 << 10)
#define TS__EIN_CHUNK_BYTES ((int64_t)256 << 10)
#define TS__EIN_CHUNK_MIN 64
#define TS__EIN_CHUNK_THIN 4096
/* OpenBLAS threads a GEMM from 2^18 multiply-adds (interface/gemm.c: 65536 x
 * GEMM_MULTITHREAD_THRESHOLD 4); calls below half that run on the caller. */
#define TS__EIN_THREAD_CALL_MAX ((int64_t)1 << 17)

/* True when the stride of a batch label of m (of size > 1) is nonzero and shorter than the stride
 * st along a GEMM dim. */
static bool interleaved(int nb, const int64_t *bsize, const ts__ein_mat *m, int64_t st) {
  for (int j = 0; j < nb; j++)
    if (bsize[j] > 1 && m->bstride[j] != 0 && llabs(m->bstride[j]) < llabs(st))
      return true;
  return false;
}

/* The GEMM dim to chunk (0: M, 1: N, 2: K) and the chunk length, or -1 for none; count is the
 * number of batch elements. c, a, b are the row-major CBLAS operands (C: M x N, A: M x K,
 * B: K x N). An interleaved long dim comes first (the longest span), else a long dim of calls
 * that OpenBLAS would thread. */
static int chunk_dim(int nb, const int64_t *bsize, int64_t count, const ts__ein_mat *c,
                     const ts__ein_mat *a, const ts__ein_mat *b, int64_t k, size_t es,
                     int64_t *chunk) {
  if (count < 2)
    return -1;
  int64_t len[3] = {c->rows, c->cols, k};
  /* The two matrices along each dim and their strides along it. */
  const ts__ein_mat *m1[3] = {c, c, a}, *m2[3] = {a, b, b};
  int64_t s1[3] = {c->rs, c->cs, a->cs}, s2[3] = {a->rs, b->cs, b->rs};
  int best = -1, big = -1;
  int64_t best_span = TS__EIN_CHUNK_SPAN, big_chunk = 0;
  for (int d = 0; d < 3; d++) {
    int64_t other = len[(d + 1) % 3] * len[(d + 2) % 3];
    if (other > TS__EIN_CHUNK_THIN)
      continue;
    if (!interleaved(nb, bsize, m1[d], s1[d]) && !interleaved(nb, bsize, m2[d], s2[d])) {
      int64_t ch = TS__EIN_THREAD_CALL_MAX / (other > 0 ? other : 1);
      if (ch < TS__EIN_CHUNK_MIN)
        ch = TS__EIN_CHUNK_MIN;
      if (ch * 2 <= len[d] && len[d] * other > TS__EIN_THREAD_CALL_MAX) {
        big = d;
        big_chunk = ch;
      }
      continue;
    }
    int64_t st = llabs(s1[d]) > llabs(s2[d]) ? llabs(s1[d]) : llabs(s2[d]);
    int64_t span = len[d] * st * (int64_t)es;
    if (span <= best_span)
      continue;
    int64_t ch = TS__EIN_CHUNK_BYTES / (st * (int64_t)es);
    if (ch < TS__EIN_CHUNK_MIN)
      ch = TS__EIN_CHUNK_MIN;
    if (ch * 2 > len[d])
      continue;
    best = d;
    best_span = span;
    *chunk = ch;
  }
  if (best < 0 && big >= 0) {
    best = big;
    *chunk = big_chunk;
  }
  return best;
}

/* One batched GEMM as CBLAS calls: the row-major operands (C: M x N, A: M x K, B: K x N), the
 * dim cut into chunks (0: M, 1: N, 2: K; a single chunk when not chunked). */
typedef struct chunk_run {
  ts_dtype cdt;
  int nb;
  const int64_t *bsize;
  ts__ein_mat c, a, b;
  enum CBLAS_TRANSPOSE fa, fb;
  int64_t lda, ldb, ldc;
  int64_t len[3];
  int dim;
  int64_t chunk;
} chunk_run;

/* Positions a walk at batch element number e (the last batch label fastest). */
static void walk_seek(batch_walk *w, int64_t e) {
  for (int j = w->nb - 1; j >= 0; j--) {
    w->idx[j] = e % w->size[j];
    e /= w->size[j];
    for (int t = 0; t < 3; t++)
      w->off[t] += w->idx[j] * w->m[t]->bstride[j];
  }
}

/* Every chunk of batch elements [lo, hi); a K chunk after the first accumulates (beta = 1). */
static void run_chunks(const chunk_run *r, int64_t lo, int64_t hi) {
  const ts__ein_mat *c = &r->c, *a = &r->a, *b = &r->b;
  int dim = r->dim;
  for (int64_t c0 = 0; c0 < r->len[dim]; c0 += r->chunk) {
    int64_t l[3] = {r->len[0], r->len[1], r->len[2]};
    l[dim] = r->len[dim] - c0 < r->chunk ? r->len[dim] - c0 : r->chunk;
    /* Element offsets of the chunk in C, A and B. */
    int64_t oc = dim == 0 ? c0 * c->rs : dim == 1 ? c0 * c->cs : 0;
    int64_t oa = dim == 0 ? c0 * a->rs : dim == 2 ? c0 * a->cs : 0;
    int64_t ob = dim == 1 ? c0 * b->cs : dim == 2 ? c0 * b->rs : 0;
    bool accumulate = dim == 2 && c0 > 0;
    batch_walk w;
    walk_init(&w, r->nb, r->bsize, c, a, b);
    walk_seek(&w, lo);
    for (int64_t e = lo; e < hi; e++, walk_next(&w)) {
      if (r->cdt == TS_F32)
        cblas_sgemm(CblasRowMajor, r->fa, r->fb, (blasint)l[0], (blasint)l[1], (blasint)l[2], 1.0f,
                    (const float *)a->base + w.off[1] + oa, (blasint)r->lda,
                    (const float *)b->base + w.off[2] + ob, (blasint)r->ldb,
                    accumulate ? 1.0f : 0.0f, (float *)c->base + w.off[0] + oc, (blasint)r->ldc);
      else
        cblas_dgemm(CblasRowMajor, r->fa, r->fb, (blasint)l[0], (blasint)l[1], (blasint)l[2], 1.0,
                    (const double *)a->base + w.off[1] + oa, (blasint)r->lda,
                    (const double *)b->base + w.off[2] + ob, (blasint)r->ldb,
                    accumulate ? 1.0 : 0.0, (double *)c->base + w.off[0] + oc, (blasint)r->ldc);
    }
  }
}

/* A chunked loop is many small CBLAS calls, each on the calling thread (at most
 * TS__EIN_THREAD_CALL_MAX multiply-adds, so the threads here never share OpenBLAS's own pool):
 * the batch elements are shared among ts_kernels_threads() threads, as the GEMM of one large
 * matrix would be split by BLAS. The batch is cut into about TS__EIN_GROUPS_PER_THREAD groups per
 * thread, which the threads take in turn, so a thread slowed by other load on its core takes
 * fewer. Each thread runs every chunk of the groups it takes, so the K accumulation of a batch
 * element stays on one thread and in order. */
#define TS__EIN_THREAD_MIN_WORK ((int64_t)1 << 22) /* multiply-adds per thread */
#define TS__EIN_MAX_THREADS 64
#define TS__EIN_GROUPS_PER_THREAD 8

typedef struct chunk_pool {
  const chunk_run *r;
  int64_t count, group, groups;
  atomic_int_fast64_t next; /* the next group to take */
} chunk_pool;

static void *chunk_worker(void *arg) {
  chunk_pool *pool = arg;
  for (;;) {
    int64_t g = atomic_fetch_add(&pool->next, 1);
    if (g >= pool->groups)
      return NULL;
    int64_t lo = g * pool->group, hi = lo + pool->group;
    run_chunks(pool->r, lo, hi < pool->count ? hi : pool->count);
  }
}

static void run_chunks_threaded(const chunk_run *r, int64_t count) {
  int64_t l[3] = {r->len[0], r->len[1], r->len[2]};
  if (l[r->dim] > r->chunk)
    l[r->dim] = r->chunk;
  int64_t per_call = l[0] * l[1] * l[2], work = count * r->len[0] * r->len[1] * r->len[2];
  int64_t t = ts_kernels_threads();
  if (t > TS__EIN_MAX_THREADS)
    t = TS__EIN_MAX_THREADS;
  if (t > count)
    t = count;
  if (t > work / TS__EIN_THREAD_MIN_WORK)
    t = work / TS__EIN_THREAD_MIN_WORK;
  if (t < 2 || per_call > TS__EIN_THREAD_CALL_MAX) {
    run_chunks(r, 0, count);
    return;
  }
  chunk_pool pool = {.r = r, .count = count};
  pool.group = count / (t * TS__EIN_GROUPS_PER_THREAD);
  if (pool.group < 1)
    pool.group = 1;
  pool.groups = (count + pool.group - 1) / pool.group;
  atomic_init(&pool.next, 0);
  pthread_t tid[TS__EIN_MAX_THREADS];
  int started = 0;
  for (int64_t i = 1; i < t; i++)
    if (pthread_create(&tid[started], NULL, chunk_worker, &pool) == 0)
      started++;
  chunk_worker(&pool); /* this thread takes groups too (all of them if no thread started) */
  for (int i = 0; i < started; i++)
    pthread_join(tid[i], NULL);
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
        for (int64_t j = 0; j < c->cols; j++)                                                      \
          crow[j * c->cs] = 0;                                                                     \
        for (int64_t kk = 0; kk < k; kk++) {                                                       \
          UT aik = ab[i * a->rs + kk * a->cs];                                                     \
          const UT *brow = bb + kk * b->rs;                                                        \
          for (int64_t j = 0; j < c->cols; j++)                                                    \
            crow[j * c->cs] += aik * brow[j * b->cs];                                              \
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
  chunk_run r = {.cdt = cdt,
                 .nb = nb,
                 .bsize = bsize,
                 .c = c,
                 .a = a,
                 .b = b,
                 .fa = ta ? CblasTrans : CblasNoTrans,
                 .fb = tb ? CblasTrans : CblasNoTrans,
                 .lda = lda,
                 .ldb = ldb,
                 .ldc = ldc,
                 .len = {c.rows, c.cols, k}};
  int64_t count = 1;
  for (int j = 0; j < nb; j++)
    count *= bsize[j];
  r.dim = chunk_dim(nb, bsize, count, &c, &a, &b, k, ts_dtype_size(cdt), &r.chunk);
  if (r.dim < 0) { /* one pass: a single "chunk" of M */
    r.dim = 0;
    r.chunk = r.len[0] > 0 ? r.len[0] : 1;
    run_chunks(&r, 0, count);
    return TS_OK;
  }
  ts__ein_count(TS__CNT_CHUNKED);
  run_chunks_threaded(&r, count);
  return TS_OK;
}
