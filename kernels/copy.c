/* copy.c - the strided-copy kernel: any layout to any layout, blocked on either side, converting
 * dtypes, on sub-boxes, with cache tiling and threads.
 *
 * How it works. A layout's address is separable per dim (layout.c), so a box copy is a sum over
 * dims of independent index-to-offset maps on each side. Each dim is lowered to a few segments,
 * each a product of (count, src byte stride, dst byte stride) nodes: an unblocked dim is one node;
 * a blocked dim is factored over its period (the lcm of both sides' block products) by checking
 * tabulated offsets, with the partial head and tail blocks as their own segments. One job per
 * combination of segments (almost always one big job and a few small tails) collects its nodes,
 * sorts them so the destination is written contiguously, merges nodes that are contiguous on both
 * sides, and runs one of two inner kernels over the two innermost nodes:
 *   rows       the innermost node is a (converting) row, contiguous on the destination side;
 *              same-dtype copies of TS_STREAM_MIN_BYTES or more whose destination nothing
 *              reads soon (ts_copy_opts.write_around) write their rows around the caches;
 *   transpose  the source is contiguous along another node: a cache tile of rows x columns,
 *              read along one and written along the other, so both sides stream; large f32
 *              transposes on one thread go through panels instead (transpose_panel_4), which
 *              read 16 source rows at a time and write whole destination rows of 8 lines.
 * The remaining nodes are outer loops, walked with an odometer; large jobs split their outer
 * iterations over threads. Padded tails of blocked destinations are filled by the same machinery
 * with a source of zeros (all strides 0). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels_internal.h"

#define MAX_NODES 64
#define MAX_DIM_NODES 16
#define MAX_PERIOD (INT64_C(1) << 20)
#define SOURCE_ORDER_ROW_BYTES 1024 /* rows up to this long may be walked in source order */
#define SOURCE_PAGE_BYTES 4096      /* ... when the next source row is closer than a page */
#define ROW_CHUNK_BYTES (64 * 1024) /* a rows-kernel call moves about this much */
#define TILE_BYTES 64       /* a transpose pays off when the source stride exceeds 2 lines */
#define TILE_COLS_BYTES 256 /* destination bytes per row of a transpose tile */
#define TILE_ROW_BYTES 4096 /* source bytes per visit of a source row: rows per transpose call */
#define STREAM_MIN_BYTES (32 << 20) /* transposes this large bypass the caches on writes */
#define PANEL_COLS 128 /* f32 columns per panel: destination rows written 8 lines at a time */
#define THREAD_MIN_BYTES (1024 * 1024) /* less than this per thread is not worth a thread */

typedef struct {
  int64_t n, ss, ds; /* count, source and destination byte strides */
} node;

typedef struct {
  int64_t s0, d0; /* byte offsets of the segment's first element */
  int nn;
  node nodes[MAX_DIM_NODES + 1]; /* innermost first */
} segment;

typedef struct {
  segment *v;
  int n, cap;
} segment_list;

/* ---- threads knob --------------------------------------------------------------------- */

static int default_threads;
static pthread_once_t threads_once = PTHREAD_ONCE_INIT;

static void threads_init(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  default_threads = n > 0 ? (int)n : 1;
}

void ts_kernels_set_threads(int threads) {
  pthread_once(&threads_once, threads_init);
  if (threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
  }
  __atomic_store_n(&default_threads, threads, __ATOMIC_RELAXED);
}

int ts_kernels_threads(void) {
  pthread_once(&threads_once, threads_init);
  return __atomic_load_n(&default_threads, __ATOMIC_RELAXED);
}

/* ---- lowering a dim to segments -------------------------------------------------------- */

static int push_segment(segment_list *l, const segment *s) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    segment *v = realloc(l->v, sizeof *v * (size_t)cap);
    if (!v)
      return TS_NO_MEMORY;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *s;
  return TS_OK;
}

/* Factors the tabulated offsets S, D over [0, len) into segments whose elements are a product of
 * nodes, checking every offset. `outer`, when non-NULL, is appended to each segment (the period
 * repetition of a blocked dim). */
static int factor_tables(const int64_t *S, const int64_t *D, int64_t len, const node *outer,
                         segment_list *out) {
  int64_t pos = 0;
  while (pos < len) {
    segment seg = {.s0 = S[pos], .d0 = D[pos], .nn = 0};
    int64_t unit = 1;
    while (seg.nn < MAX_DIM_NODES && pos + unit < len) {
      int64_t maxj = (len - pos) / unit;
      if (maxj < 2)
        break;
      int64_t step_s = S[pos + unit] - S[pos], step_d = D[pos + unit] - D[pos];
      int64_t m = 1;
      for (; m < maxj; m++) {
        int64_t b = pos + m * unit;
        if (S[b] - S[pos] != m * step_s || D[b] - D[pos] != m * step_d)
          break;
        int64_t r = 1;
        while (r < unit && S[b + r] - S[b] == S[pos + r] - S[pos] &&
               D[b + r] - D[b] == D[pos + r] - D[pos])
          r++;
        if (r < unit)
          break;
      }
      if (m < 2)
        break;
      seg.nodes[seg.nn++] = (node){m, step_s, step_d};
      unit *= m;
    }
    if (outer)
      seg.nodes[seg.nn++] = *outer;
    if (push_segment(out, &seg))
      return TS_NO_MEMORY;
    pos += unit;
  }
  return TS_OK;
}

/* Tabulates the offsets of indices [a, b) of dim d on both sides (relative to the box starts) and
 * factors them. */
static int factor_range(const ts_layout *sl, int64_t s_start, const ts_layout *dl, int64_t d_start,
                        int d, int64_t a, int64_t b, const node *outer, segment_list *out) {
  if (b <= a)
    return TS_OK;
  int64_t len = b - a;
  int64_t *S = malloc(sizeof(int64_t) * 2 * (size_t)len);
  if (!S)
    return TS_NO_MEMORY;
  int64_t *D = S + len;
  for (int64_t i = 0; i < len; i++) {
    S[i] = ts__dim_address(sl, d, s_start + a + i);
    D[i] = ts__dim_address(dl, d, d_start + a + i);
  }
  int rc = factor_tables(S, D, len, outer, out);
  free(S);
  return rc;
}

/* Lowers dim d of a box copy. Indices are relative to the box starts. */
static int lower_dim(const ts_layout *sl, int64_t s_start, const ts_layout *dl, int64_t d_start,
                     int64_t n, int d, segment_list *out, ts_error *err) {
  int64_t bs = ts_layout_block(sl, d), bd = ts_layout_block(dl, d);
  int64_t es = (int64_t)ts_dtype_size(sl->dtype), ed = (int64_t)ts_dtype_size(dl->dtype);
  if (bs == 1 && bd == 1) { /* affine on both sides: one node */
    segment seg = {
        .s0 = s_start * sl->strides[d] * es, .d0 = d_start * dl->strides[d] * ed, .nn = 1};
    seg.nodes[0] = (node){n, sl->strides[d] * es, dl->strides[d] * ed};
    return push_segment(out, &seg);
  }
  int64_t period = bs / ts_gcd64(bs, bd) * bd;
  if (period > MAX_PERIOD)
    return ts_error_set(err, TS_UNSUPPORTED,
                        "dim %d: source blocks of %lld and destination blocks of %lld repeat only "
                        "every %lld elements; supported up to %lld",
                        d, (long long)bs, (long long)bd, (long long)period, (long long)MAX_PERIOD);
  /* f(x + period) = f(x) + (period / B) * stride on each side, so one tabulated period repeats.
   * Start the period where both sides are block-aligned (when such a point exists) so that it
   * factors into few segments. */
  int64_t i0 = 0;
  for (int64_t i = 0; i < period && i < n; i++)
    if ((s_start + i) % bs == 0 && (d_start + i) % bd == 0) {
      i0 = i;
      break;
    }
  int rc;
  if (n - i0 < 2 * period) /* no room for repeated periods: tabulate everything */
    rc = factor_range(sl, s_start, dl, d_start, d, 0, n, NULL, out);
  else {
    int64_t count = (n - i0) / period;
    node rep = {count, period / bs * sl->strides[d] * es, period / bd * dl->strides[d] * ed};
    if (!(rc = factor_range(sl, s_start, dl, d_start, d, 0, i0, NULL, out)) &&
        !(rc = factor_range(sl, s_start, dl, d_start, d, i0, i0 + period, &rep, out)))
      rc = factor_range(sl, s_start, dl, d_start, d, i0 + count * period, n, NULL, out);
  }
  return rc ? ts_error_set(err, TS_NO_MEMORY, "out of memory lowering a copy") : TS_OK;
}
/* ---- running one job ------------------------------------------------------------------- */

typedef void (*transpose_fn)(char *d, ptrdiff_t dc, ptrdiff_t dr, const char *s, ptrdiff_t sc,
                             ptrdiff_t sr, int64_t nc, int64_t nr, bool stream);
typedef void (*block_fn)(char *d, ptrdiff_t dr, const char *s, ptrdiff_t sc, bool stream);

typedef struct {
  ts__row_fn row;
  transpose_fn tile; /* same-dtype transposes; NULL when converting */
  block_fn panel;    /* large f32 transposes go through panels with this 16x16 block; or NULL */
  bool same_dtype;   /* a pure move: the transpose tiles apply */
  bool stream;       /* non-temporal stores: the job is far larger than the caches */
  bool around;       /* the caller lets rows be written around the caches (ts_copy_opts) */
  int64_t es, ed;
  bool transpose;
  int outer; /* the first outer-loop node: 2, or 3 when [2] is a second row loop */
  int nn;
  node nodes[MAX_NODES]; /* [0] inner (dst-contiguous), [1] rows per call, [outer..] outer loops;
                          * [2] continues the rows of a transpose on the source when outer is 3 */
} job;

/* A transpose tile of same-size elements: column c of the destination (contiguous along the
 * columns) takes row-contiguous source elements. The tile is small enough to stay in L1, so the
 * strided side of each loop costs little; both sides stream whole cache lines from memory. */
#define TRANSPOSE_TILE(bytes, ctype)                                                               \
  static void transpose_tile_##bytes(char *d, ptrdiff_t dc, ptrdiff_t dr, const char *s,           \
                                     ptrdiff_t sc, ptrdiff_t sr, int64_t nc, int64_t nr,           \
                                     bool stream) {                                                \
    (void)stream;                                                                                  \
    for (int64_t c = 0; c < nc; c++) {                                                             \
      char *dp = d + c * dc;                                                                       \
      const char *sp = s + c * sc;                                                                 \
      for (int64_t r = 0; r < nr; r++) {                                                           \
        ctype v;                                                                                   \
        memcpy(&v, sp + r * sr, bytes);                                                            \
        memcpy(dp + r * dr, &v, bytes);                                                            \
      }                                                                                            \
    }                                                                                              \
  }
TRANSPOSE_TILE(1, uint8_t)
TRANSPOSE_TILE(2, uint16_t)
TRANSPOSE_TILE(8, uint64_t)
TRANSPOSE_TILE(16, ts__bytes16)

/* f32-sized elements, the common case: 16x16 blocks, transposed in registers straight from
 * memory. With power-of-two strides every line of a tile falls in the same cache set, so a line
 * must be used whole the one time it is touched: a block reads 16 whole source lines and writes 16
 * whole destination lines, finishing each destination line before starting the next. That order
 * is what lets non-temporal stores (stream) go out as full lines; they are used only when every
 * line of the block is a whole aligned line (d and dr multiples of 64). */
#if defined(__SSE2__)
static void transpose_block16_4_sse(char *d, ptrdiff_t dr, const char *s, ptrdiff_t sc,
                                    bool stream) {
  for (int r = 0; r < 16; r += 4) { /* 4 destination rows, whole 64-byte lines */
    __m128 x[4][4];
    for (int c = 0; c < 4; c++) {
      const char *p = s + 4 * c * sc + r * 4;
      x[c][0] = _mm_loadu_ps((const float *)p);
      x[c][1] = _mm_loadu_ps((const float *)(p + sc));
      x[c][2] = _mm_loadu_ps((const float *)(p + 2 * sc));
      x[c][3] = _mm_loadu_ps((const float *)(p + 3 * sc));
      _MM_TRANSPOSE4_PS(x[c][0], x[c][1], x[c][2], x[c][3]);
    }
    for (int i = 0; i < 4; i++) {
      float *q = (float *)(d + (r + i) * dr);
      if (stream)
        for (int c = 0; c < 4; c++)
          _mm_stream_ps(q + 4 * c, x[c][i]);
      else
        for (int c = 0; c < 4; c++)
          _mm_storeu_ps(q + 4 * c, x[c][i]);
    }
  }
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX2_TILE 1
/* An 8x8 register transpose: o[i] gets column i of the 8 rows of 8 floats at s, s + sc, ... */
__attribute__((target("avx2"))) static inline void transpose8_avx2(__m256 *o, const char *s,
                                                                   ptrdiff_t sc) {
  __m256 r0 = _mm256_loadu_ps((const float *)s), r1 = _mm256_loadu_ps((const float *)(s + sc)),
         r2 = _mm256_loadu_ps((const float *)(s + 2 * sc)),
         r3 = _mm256_loadu_ps((const float *)(s + 3 * sc)),
         r4 = _mm256_loadu_ps((const float *)(s + 4 * sc)),
         r5 = _mm256_loadu_ps((const float *)(s + 5 * sc)),
         r6 = _mm256_loadu_ps((const float *)(s + 6 * sc)),
         r7 = _mm256_loadu_ps((const float *)(s + 7 * sc));
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
         t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
         t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
         t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
         u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
         u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
         u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  o[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  o[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  o[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  o[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  o[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  o[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  o[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  o[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Stores destination rows q, q + dr, ... (8 of them) from the line halves lo[i] and hi[i]. */
__attribute__((target("avx2"))) static inline void
store8_avx2(char *q, ptrdiff_t dr, const __m256 *lo, const __m256 *hi, bool stream) {
  if (stream)
    for (int i = 0; i < 8; i++) {
      _mm256_stream_ps((float *)(q + i * dr), lo[i]);
      _mm256_stream_ps((float *)(q + i * dr) + 8, hi[i]);
    }
  else
    for (int i = 0; i < 8; i++) {
      _mm256_storeu_ps((float *)(q + i * dr), lo[i]);
      _mm256_storeu_ps((float *)(q + i * dr) + 8, hi[i]);
    }
}

/* Four 8x8 transposes. Source rows 0-7 are read whole (both halves) before rows 8-15: the 16
 * source lines of a block usually share one L1 set (strides of multiples of 4 KiB), which holds
 * only 8. Destination rows 0-7 are stored (whole lines) before rows 8-15. */
__attribute__((target("avx2"))) static void
transpose_block16_4_avx2(char *d, ptrdiff_t dr, const char *s, ptrdiff_t sc, bool stream) {
  __m256 top_lo[8], bottom_lo[8], top_hi[8], bottom_hi[8]; /* destination rows 0-7 / 8-15 */
  transpose8_avx2(top_lo, s, sc);
  transpose8_avx2(bottom_lo, s + 32, sc);
  transpose8_avx2(top_hi, s + 8 * sc, sc);
  store8_avx2(d, dr, top_lo, top_hi, stream);
  transpose8_avx2(bottom_hi, s + 8 * sc + 32, sc);
  store8_avx2(d + 8 * dr, dr, bottom_lo, bottom_hi, stream);
}
#endif

/* Element by element: the columns [c0, c1) of rows [r0, r1) of a tile. */
static void transpose_rect_4(char *d, ptrdiff_t dc, ptrdiff_t dr, const char *s, ptrdiff_t sc,
                             ptrdiff_t sr, int64_t c0, int64_t c1, int64_t r0, int64_t r1) {
  for (int64_t c = c0; c < c1; c++)
    for (int64_t r = r0; r < r1; r++) {
      uint32_t v;
      memcpy(&v, s + c * sc + r * sr, 4);
      memcpy(d + c * dc + r * dr, &v, 4);
    }
}

/* The whole 16x16 blocks of a tile (when both sides have a contiguous direction) with `block`,
 * the rest element by element. */
#define TRANSPOSE_TILE_4(name, block, attr)                                                        \
  attr static void name(char *d, ptrdiff_t dc, ptrdiff_t dr, const char *s, ptrdiff_t sc,          \
                        ptrdiff_t sr, int64_t nc, int64_t nr, bool stream) {                       \
    int64_t nc16 = 0, nr16 = 0;                                                                    \
    if (dc == 4 && sr == 4) {                                                                      \
      nc16 = nc / 16 * 16;                                                                         \
      nr16 = nr / 16 * 16;                                                                         \
      stream = stream && (uintptr_t)d % 64 == 0 && dr % 64 == 0;                                   \
      for (int64_t r0 = 0; r0 < nr16; r0 += 16)                                                    \
        for (int64_t c0 = 0; c0 < nc16; c0 += 16)                                                  \
          block(d + r0 * dr + c0 * 4, dr, s + r0 * 4 + c0 * sc, sc, stream);                       \
    }                                                                                              \
    transpose_rect_4(d, dc, dr, s, sc, sr, nc16, nc, 0, nr16);                                     \
    transpose_rect_4(d, dc, dr, s, sc, sr, 0, nc, nr16, nr);                                       \
  }
#if defined(__SSE2__)
TRANSPOSE_TILE_4(transpose_tile_4, transpose_block16_4_sse, )
#else
static void transpose_block16_4_c(char *d, ptrdiff_t dr, const char *s, ptrdiff_t sc, bool stream) {
  (void)stream;
  transpose_rect_4(d, 4, dr, s, sc, 4, 0, 16, 0, 16);
}
TRANSPOSE_TILE_4(transpose_tile_4, transpose_block16_4_c, )
#endif
#if defined(HAVE_AVX2_TILE)
TRANSPOSE_TILE_4(transpose_tile_4_avx2, transpose_block16_4_avx2, __attribute__((target("avx2"))))
#endif

#if defined(HAVE_AVX2_TILE)
/* Whether this CPU runs the AVX2 blocks. */
static bool have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#endif

/* The f32 tile for this CPU. */
static transpose_fn transpose_tile_4_best(void) {
#if defined(HAVE_AVX2_TILE)
  if (have_avx2())
    return transpose_tile_4_avx2;
#endif
  return transpose_tile_4;
}

#if defined(__SSE2__)
/* The f32 16x16 block for this CPU, for panels. */
static block_fn transpose_block16_4_best(void) {
#if defined(HAVE_AVX2_TILE)
  return have_avx2() ? transpose_block16_4_avx2 : transpose_block16_4_sse;
#else
  return transpose_block16_4_sse;
#endif
}

/* A panel of a large f32 transpose: `cn` destination-contiguous columns (a multiple of 16, at most
 * PANEL_COLS) by the rows of b, repeated over c, in two passes through `tmp`.
 *
 * Why two passes. A single pass (the tiles above) reads 64 source rows at once to write whole
 * lines on 4 destination rows at once; that many streams defeat the hardware prefetcher, so every
 * source line is a demand miss, and those misses share the core's few miss buffers with the
 * non-temporal stores. Here pass 1 reads 16 columns' source rows at a time (16 streams, each read
 * along its whole run, which the prefetcher follows) and transposes their 16x16 blocks into one
 * contiguous strip per 16 columns; pass 2 reads the strips (cache hits) and writes each
 * destination row's cn * 4 bytes at once: up to 8 consecutive lines, which spread over the memory
 * channels. On 8192x8192 f32, one thread: 4% faster than the single pass (median of 41 paired
 * runs on a shared 2-core VM; single runs ranged from 0% to 9%). */
static void transpose_panel_4(const job *j, block_fn block, char *d, const char *s, int64_t cn,
                              float *tmp) {
  const node *a = &j->nodes[0], *b = &j->nodes[1];
  const node *c = j->outer == 3 ? &j->nodes[2] : &(const node){1, 0, 0};
  int64_t rows = b->n * c->n, groups = cn / 16;
  for (int64_t g = 0; g < groups; g++) { /* pass 1: strip g holds rows x 16 columns */
    float *strip = tmp + g * rows * 16;
    for (int64_t k = 0; k < c->n; k++)
      for (int64_t r = 0; r < b->n; r += 16)
        block((char *)(strip + (k * b->n + r) * 16), 64, s + 16 * g * a->ss + k * c->ss + r * b->ss,
              a->ss, false);
  }
  bool stream = j->stream && (uintptr_t)d % 64 == 0 && b->ds % 64 == 0 && c->ds % 64 == 0;
  for (int64_t k = 0; k < c->n; k++) /* pass 2: whole destination rows */
    for (int64_t r = 0; r < b->n; r++) {
      float *q = (float *)(d + k * c->ds + r * b->ds);
      const float *t = tmp + (k * b->n + r) * 16;
      for (int64_t g = 0; g < groups; g++, q += 16, t += rows * 16) {
        __m128 x0 = _mm_load_ps(t), x1 = _mm_load_ps(t + 4), x2 = _mm_load_ps(t + 8),
               x3 = _mm_load_ps(t + 12);
        if (stream) {
          _mm_stream_ps(q, x0);
          _mm_stream_ps(q + 4, x1);
          _mm_stream_ps(q + 8, x2);
          _mm_stream_ps(q + 12, x3);
        } else {
          _mm_storeu_ps(q, x0);
          _mm_storeu_ps(q + 4, x1);
          _mm_storeu_ps(q + 8, x2);
          _mm_storeu_ps(q + 12, x3);
        }
      }
    }
}
#endif

/* Bytes of the panel buffer job j needs per thread, or 0 when it runs without panels: they need
 * f32 columns contiguous on the destination and rows contiguous on the source, in whole blocks
 * (split_and_run's remainder jobs may have other rows than the job the panel was chosen for). */
static size_t panel_bytes(const job *j) {
  const node *a = &j->nodes[0], *b = &j->nodes[1];
  if (!j->panel || a->ds != 4 || b->ss != 4 || b->n % 16 != 0)
    return 0;
  int64_t rows = b->n * (j->outer == 3 ? j->nodes[2].n : 1);
  return (size_t)(rows * PANEL_COLS * 4);
}

/* The two innermost loops, from base pointers; tmp is the panel buffer (NULL: no panels). */
static void run_inner(const job *j, char *d, const char *s, float *tmp) {
  const node *a = &j->nodes[0], *b = &j->nodes[1];
  if (!j->transpose) {
    for (int64_t r = 0; r < b->n; r++)
      j->row(d + r * b->ds, a->ds, s + r * b->ss, a->ss, (size_t)a->n);
    return;
  }
  /* tiles of destination-contiguous columns x the b->n source-contiguous rows; with a second
   * row loop (c, which continues the rows on the source), each column tile visits its rows for
   * every c before the next column tile, so the pages a tile reads are used whole at once */
  const node *c = j->outer == 3 ? &j->nodes[2] : &(const node){1, 0, 0};
  int64_t esize = j->es > j->ed ? j->es : j->ed, cols = TILE_COLS_BYTES / esize;
  if (tmp) /* panels */
    cols = PANEL_COLS;
  /* peel columns up to the destination's next cache line, so tiles write whole lines */
  int64_t first = cols, mis = (int64_t)((uintptr_t)d % 64);
  if (a->n > cols && a->ds == j->ed && mis % j->ed == 0 && mis != 0)
    first = (64 - mis) / j->ed;
  for (int64_t c0 = 0, cn; c0 < a->n; c0 += cn) {
    cn = c0 == 0 ? first : cols;
    if (cn > a->n - c0)
      cn = a->n - c0;
    char *dp = d + c0 * a->ds;
    const char *sp = s + c0 * a->ss;
    int64_t done = 0; /* columns the panel took */
#if defined(__SSE2__)
    if (tmp && cn >= 16) {
      done = cn / 16 * 16;
      transpose_panel_4(j, j->panel, dp, sp, done, tmp);
    }
#endif
    dp += done * a->ds;
    sp += done * a->ss;
    for (int64_t k = 0; k < c->n && done < cn; k++, dp += c->ds, sp += c->ss) {
      if (j->tile) {
        j->tile(dp, a->ds, b->ds, sp, a->ss, b->ss, cn - done, b->n, j->stream);
        continue;
      }
      for (int64_t r = 0; r < b->n; r++)
        j->row(dp + r * b->ds, a->ds, sp + r * b->ss, a->ss, (size_t)(cn - done));
    }
  }
}

/* Runs outer iterations [lo, hi) of the flattened outer loops. */
static void run_range(const job *j, char *d, const char *s, int64_t lo, int64_t hi) {
  size_t tmp_bytes = panel_bytes(j);
  float *tmp = tmp_bytes ? aligned_alloc(64, tmp_bytes) : NULL; /* NULL: tiles instead */
  int64_t idx[MAX_NODES];
  int64_t rem = lo;
  for (int k = j->outer; k < j->nn; k++) { /* decode lo, innermost outer loop fastest */
    idx[k] = rem % j->nodes[k].n;
    rem /= j->nodes[k].n;
    d += idx[k] * j->nodes[k].ds;
    s += idx[k] * j->nodes[k].ss;
  }
  for (int64_t it = lo; it < hi; it++) {
    run_inner(j, d, s, tmp);
    for (int k = j->outer; k < j->nn; k++) { /* odometer */
      d += j->nodes[k].ds;
      s += j->nodes[k].ss;
      if (++idx[k] < j->nodes[k].n)
        break;
      idx[k] = 0;
      d -= j->nodes[k].n * j->nodes[k].ds;
      s -= j->nodes[k].n * j->nodes[k].ss;
    }
  }
  if (j->stream)
    ts_copy_stream_fence(); /* non-temporal stores are weakly ordered: publish them first */
  free(tmp);
}

typedef struct {
  const job *j;
  char *d;
  const char *s;
  int64_t lo, hi;
} range_task;

static void *range_thread(void *arg) {
  range_task *t = arg;
  run_range(t->j, t->d, t->s, t->lo, t->hi);
  return NULL;
}

static void run_parallel(const job *j, char *d, const char *s, int threads) {
  int64_t outer = 1, inner_elems = 1;
  for (int k = 0; k < j->outer; k++)
    inner_elems *= j->nodes[k].n;
  for (int k = j->outer; k < j->nn; k++)
    outer *= j->nodes[k].n;
  int64_t t = outer * inner_elems * (j->es + j->ed) / THREAD_MIN_BYTES;
  if (t > threads)
    t = threads;
  if (t > outer)
    t = outer;
  if (t > 64)
    t = 64;
  if (t <= 1) {
    run_range(j, d, s, 0, outer);
    return;
  }
  pthread_t tid[64];
  range_task task[64];
  bool started[64] = {false};
  for (int64_t i = 1; i < t; i++) {
    task[i] = (range_task){j, d, s, outer * i / t, outer * (i + 1) / t};
    started[i] = pthread_create(&tid[i], NULL, range_thread, &task[i]) == 0;
  }
  run_range(j, d, s, 0, outer / t);
  for (int64_t i = 1; i < t; i++) {
    if (started[i])
      pthread_join(tid[i], NULL);
    else /* no thread could be had: do its share here */
      run_range(j, d, s, task[i].lo, task[i].hi);
  }
}

static int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

/* Sorts n nodes by |ds|, then |ss| (by |ss| first when by_source): insertion sort, few nodes. */
static void sort_nodes(node *v, int n, bool by_source) {
  for (int k = 1; k < n; k++) {
    node x = v[k];
    int64_t x1 = abs64(by_source ? x.ss : x.ds), x2 = abs64(by_source ? x.ds : x.ss);
    int i = k - 1;
    for (; i >= 0; i--) {
      int64_t v1 = abs64(by_source ? v[i].ss : v[i].ds), v2 = abs64(by_source ? v[i].ds : v[i].ss);
      if (v1 < x1 || (v1 == x1 && v2 <= x2))
        break;
      v[i + 1] = v[i];
    }
    v[i + 1] = x;
  }
}

/* Orders, merges and runs one job whose nodes are in j->nodes[0..nn). */
static void run_job(job *j, char *d, const char *s, int threads);

/* Splits node k of job j into blocks of `per` (kept at k) and their repetition (inserted at
 * position `rep_at` > k), running the whole blocks as one job and the remainder as another. */
static void split_and_run(job *j, int k, int64_t per, int rep_at, char *d, const char *s,
                          int threads) {
  node nd = j->nodes[k];
  int64_t whole = nd.n / per, rest = nd.n % per;
  if (whole > 0) {
    job m = *j;
    memmove(&m.nodes[rep_at + 1], &m.nodes[rep_at], sizeof(node) * (size_t)(m.nn - rep_at));
    m.nodes[k].n = per;
    m.nodes[rep_at] = (node){whole, per * nd.ss, per * nd.ds};
    m.nn++;
    run_parallel(&m, d, s, threads);
  }
  if (rest > 0) {
    job r = *j;
    r.nodes[k].n = rest;
    run_parallel(&r, d + whole * per * nd.ds, s + whole * per * nd.ss, threads);
  }
}

/* Bytes the job writes. */
static int64_t job_bytes(const job *j) {
  int64_t n = j->ed;
  for (int k = 0; k < j->nn; k++)
    n *= j->nodes[k].n;
  return n;
}

/* Same-dtype rows contiguous on both sides (ds == ss == the element size), written around the
 * caches: a destination larger than they keep is not read line by line before it is written. */
static void row_stream(char *d, ptrdiff_t ds, const char *s, ptrdiff_t ss, size_t n) {
  (void)ss;
  ts_copy_stream(d, s, n * (size_t)ds);
}

static void run_job(job *j, char *d, const char *s, int threads) {
  j->outer = 2;
  /* drop count-1 nodes */
  int nn = 0;
  for (int k = 0; k < j->nn; k++)
    if (j->nodes[k].n != 1)
      j->nodes[nn++] = j->nodes[k];
  sort_nodes(j->nodes, nn, false); /* destination-contiguous innermost */
  /* merge nodes contiguous on both sides */
  int m = 0;
  for (int k = 0; k < nn; k++) {
    if (m > 0 && j->nodes[k].ss == j->nodes[m - 1].n * j->nodes[m - 1].ss &&
        j->nodes[k].ds == j->nodes[m - 1].n * j->nodes[m - 1].ds) {
      j->nodes[m - 1].n *= j->nodes[k].n;
      continue;
    }
    j->nodes[m++] = j->nodes[k];
  }
  while (m < 2) /* the kernels read two inner nodes */
    j->nodes[m++] = (node){1, 0, 0};
  j->nn = m;

  /* transpose when another node reads the source more contiguously than the innermost one */
  int best = 0;
  for (int k = 1; k < m; k++)
    if (j->nodes[k].n > 1 && abs64(j->nodes[k].ss) < abs64(j->nodes[best].ss))
      best = k;
  j->transpose = best != 0 && abs64(j->nodes[0].ss) > 2 * TILE_BYTES && j->nodes[0].n > 1;
  if (j->transpose && best != 1) {
    node x = j->nodes[best];
    memmove(&j->nodes[2], &j->nodes[1], sizeof(node) * (size_t)(best - 1));
    j->nodes[1] = x;
  }
  int64_t esize = j->es > j->ed ? j->es : j->ed;
  if (j->nn >= MAX_NODES - 2) {
    run_parallel(j, d, s, threads);
    return;
  }
  if (j->transpose) {
    int64_t total = j->es + j->ed;
    for (int k = 0; k < j->nn; k++)
      total *= j->nodes[k].n;
    j->stream = total >= STREAM_MIN_BYTES;
    if (j->same_dtype)
      j->tile = j->es == 1   ? transpose_tile_1
                : j->es == 2 ? transpose_tile_2
                : j->es == 4 ? transpose_tile_4_best()
                : j->es == 8 ? transpose_tile_8
                             : transpose_tile_16;
#if defined(__SSE2__)
    /* Panels on one thread only: with every core copying, memory bandwidth is the limit rather
     * than one core's miss buffers, and the single pass (measured 0.92-1.0x memcpy on 2 threads
     * against 0.79-0.97x with panels) moves fewer bytes through the caches. */
    if (j->same_dtype && j->es == 4 && j->stream && threads == 1)
      j->panel = transpose_block16_4_best();
#endif
    int64_t rows = TILE_ROW_BYTES / esize;
    if (j->nodes[1].n > rows)
      return split_and_run(j, 1, rows, 2, d, s, threads);
    /* Rows shorter than a tile row: a node that continues them on the source becomes a second
     * row loop inside the column tiles, up to TILE_ROW_BYTES of source per visit (a permutation
     * like abcd -> dcab, whose source rows are d but whose source runs are c x d). */
    int64_t run = j->nodes[1].n * j->nodes[1].ss, per = rows / j->nodes[1].n;
    for (int k = 2; k < j->nn && per >= 2; k++)
      if (j->nodes[k].ss == run) {
        node x = j->nodes[k];
        memmove(&j->nodes[3], &j->nodes[2], sizeof(node) * (size_t)(k - 2));
        j->nodes[2] = x;
        j->outer = 3;
        if (x.n > per)
          return split_and_run(j, 2, per, 3, d, s, threads);
        break;
      }
  } else {
    int64_t row_bytes = j->nodes[0].n * esize;
    /* Large copies the caller lets write around the caches do, except gathers into
     * consecutive rows from rows far apart: their strided reads are the limit, and there the
     * stores gained nothing (4.4 against 4.1 ms for 24 MiB of 768-byte rows 3072 apart). */
    bool gather = j->nodes[1].ds == row_bytes && j->nodes[1].ss != row_bytes;
    if (j->around && j->same_dtype && j->nodes[0].ss == j->es && j->nodes[0].ds == j->ed &&
        !gather && row_bytes >= TS_STREAM_MIN_RUN && job_bytes(j) >= TS_STREAM_MIN_BYTES) {
      j->row = row_stream; /* run_range fences the stores */
      j->stream = true;
    }
    /* Rows of whole lines that the destination order would read sparsely within source pages
     * (the next row a short stride away: a row gather like abcd -> acbd): the prefetcher
     * starves on such strides, so the outer loops go in source order instead and the
     * destination takes whole lines in a few places at once. Rows that continue in another
     * page (several streams, as nchw16c -> nhwc reads) keep the destination order. */
    int64_t next_ss = abs64(j->nodes[1].ss);
    if (abs64(j->nodes[0].ss) == j->es && abs64(j->nodes[0].ds) == j->ed && row_bytes >= 64 &&
        row_bytes <= SOURCE_ORDER_ROW_BYTES && j->nodes[1].n > 1 && next_ss > row_bytes &&
        next_ss < SOURCE_PAGE_BYTES)
      sort_nodes(j->nodes + 1, j->nn - 1, true); /* the loops around the rows, source first */
    if (row_bytes > ROW_CHUNK_BYTES && j->nodes[1].n == 1) {
      /* one huge row: cut it into rows of a chunk, repeated as an outer loop threads can share */
      return split_and_run(j, 0, ROW_CHUNK_BYTES / esize, 2, d, s, threads);
    }
    int64_t rows = ROW_CHUNK_BYTES / (row_bytes > 0 ? row_bytes : 1);
    if (rows < 1)
      rows = 1;
    if (j->nodes[1].n > rows)
      return split_and_run(j, 1, rows, 2, d, s, threads);
  }
  run_parallel(j, d, s, threads);
}

/* ---- the box copy ---------------------------------------------------------------------- */

static int check_box(const char *side, const ts_layout *l, const int64_t *start,
                     const int64_t *extent, ts_error *err) {
  for (int d = 0; d < l->ndim; d++) {
    int64_t end;
    if (start[d] < 0 || extent[d] < 0 || __builtin_add_overflow(start[d], extent[d], &end) ||
        end > l->shape[d])
      return ts_error_set(err, TS_OUT_OF_BOUNDS,
                          "%s box on dim %d is [%lld, %lld+%lld) but the dim has %lld elements: a "
                          "box needs 0 <= start and start + extent <= size",
                          side, d, (long long)start[d], (long long)start[d], (long long)extent[d],
                          (long long)l->shape[d]);
  }
  return TS_OK;
}

/* Byte range [lo, hi) of the buffer a layout can touch. */
static void layout_range(const ts_layout *l, int64_t *lo, int64_t *hi) {
  int64_t es = (int64_t)ts_dtype_size(l->dtype), a = 0, b = 0;
  for (int d = 0; d < l->ndim; d++) {
    int64_t reach = (ts_layout_padded(l, d) / ts_layout_block(l, d) - 1) * l->strides[d];
    if (reach > 0)
      b += reach;
    else
      a += reach;
  }
  int64_t inner = 1;
  for (int k = 0; k < l->n_inner; k++)
    inner *= l->inner_size[k];
  *lo = l->offset + a * es;
  *hi = l->offset + (b + inner) * es;
}

/* Copies one box (already validated), src may be a zero source with all strides 0. */
static int copy_lowered(char *dbase, const ts_layout *dl, const int64_t *dst_start,
                        const char *sbase, const ts_layout *sl, const int64_t *src_start,
                        const int64_t *extent, int threads, bool around, ts_error *err) {
  int nd = dl->ndim;
  for (int d = 0; d < nd; d++)
    if (extent[d] == 0)
      return TS_OK;
  segment_list segs[TS_MAX_DIMS];
  memset(segs, 0, sizeof segs);
  int rc = TS_OK;
  for (int d = 0; d < nd && !rc; d++)
    rc = lower_dim(sl, src_start[d], dl, dst_start[d], extent[d], d, &segs[d], err);
  if (!rc) {
    ts__row_fn row = ts__row_function(dl->dtype, sl->dtype);
    int pick[TS_MAX_DIMS] = {0};
    for (;;) { /* every combination of segments */
      job j = {.row = row,
               .around = around,
               .same_dtype = dl->dtype == sl->dtype,
               .es = (int64_t)ts_dtype_size(sl->dtype),
               .ed = (int64_t)ts_dtype_size(dl->dtype)};
      char *d = dbase + dl->offset;
      const char *s = sbase + sl->offset;
      for (int k = 0; k < nd; k++) {
        const segment *g = &segs[k].v[pick[k]];
        d += g->d0;
        s += g->s0;
        for (int q = 0; q < g->nn; q++)
          j.nodes[j.nn++] = g->nodes[q];
      }
      run_job(&j, d, s, threads);
      int k = nd - 1;
      while (k >= 0 && ++pick[k] == segs[k].n)
        pick[k--] = 0;
      if (k < 0)
        break;
    }
  }
  for (int d = 0; d < nd; d++)
    free(segs[d].v);
  return rc;
}

int ts__copy_check(const ts_tensor *dst, const int64_t *dst_start, const ts_tensor *src,
                   const int64_t *src_start, const int64_t *extent, ts_error *err) {
  if (!dst || !src || (!extent && dst->layout.ndim > 0))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "copy: destination, source and extent are required");
  const ts_layout *dl = &dst->layout, *sl = &src->layout;
  int rc;
  if ((rc = ts_layout_check(sl, src->bytes, false, err)) ||
      (rc = ts_layout_check(dl, dst->bytes, true, err)))
    return rc;
  if (!ts__row_function(dl->dtype, sl->dtype))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "copy from %s to %s: a complex dtype converts to c64 and c128 only (the "
                        "imaginary part would be discarded)",
                        ts_dtype_name(sl->dtype), ts_dtype_name(dl->dtype));
  if (dl->ndim != sl->ndim)
    return ts_error_set(err, TS_BAD_SHAPE,
                        "copy between a %d-dim destination and a %d-dim source: both need the same "
                        "number of dims",
                        dl->ndim, sl->ndim);
  static const int64_t zero[TS_MAX_DIMS] = {0};
  if ((rc = check_box("destination", dl, dst_start ? dst_start : zero, extent, err)) ||
      (rc = check_box("source", sl, src_start ? src_start : zero, extent, err)))
    return rc;
  int64_t numel = 1;
  for (int d = 0; d < dl->ndim; d++)
    numel *= extent[d];
  if (numel == 0)
    return TS_OK;
  if (!dst->data || !src->data)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "copy of %lld elements from or to a NULL buffer",
                        (long long)numel);
  int64_t dlo, dhi, slo, shi;
  layout_range(dl, &dlo, &dhi);
  layout_range(sl, &slo, &shi);
  const char *da = (const char *)dst->data, *sa = (const char *)src->data;
  if (da + dlo < sa + shi && sa + slo < da + dhi)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "source and destination buffers overlap; copy through a temporary");
  return TS_OK;
}

int ts_copy_box(const ts_tensor *dst, const int64_t *dst_start, const ts_tensor *src,
                const int64_t *src_start, const int64_t *extent, const ts_copy_opts *opts,
                ts_error *err) {
  int rc = ts__copy_check(dst, dst_start, src, src_start, extent, err);
  if (rc)
    return rc;
  const ts_layout *dl = &dst->layout, *sl = &src->layout;
  int64_t zero[TS_MAX_DIMS] = {0};
  if (!dst_start)
    dst_start = zero;
  if (!src_start)
    src_start = zero;
  int64_t numel = 1;
  for (int d = 0; d < dl->ndim; d++)
    numel *= extent[d];
  int threads = opts && opts->threads > 0 ? opts->threads : ts_kernels_threads();
  bool around = opts && opts->write_around;
  if ((rc = copy_lowered(dst->data, dl, dst_start, src->data, sl, src_start, extent, threads,
                         around, err)))
    return rc;
  if (numel == 0 || !ts_layout_is_blocked(dl))
    return TS_OK;

  /* zero the padded tails of blocked dims the box reaches the end of */
  static const ts__bytes16 zeros = {0, 0}; /* one element of the widest dtype (c128) */
  ts_layout zl = *dl;
  zl.offset = 0;
  zl.n_inner = 0;
  for (int d = 0; d < zl.ndim; d++) {
    zl.strides[d] = 0;
    zl.shape[d] = INT64_MAX;
  }
  for (int d = 0; d < dl->ndim; d++) {
    int64_t pad = ts_layout_padded(dl, d);
    if (pad == dl->shape[d] || dst_start[d] + extent[d] != dl->shape[d])
      continue;
    int64_t start[TS_MAX_DIMS], ext[TS_MAX_DIMS];
    for (int e = 0; e < dl->ndim; e++) {
      start[e] = dst_start[e];
      ext[e] = extent[e];
      int64_t epad = ts_layout_padded(dl, e);
      if (e != d && epad != dl->shape[e] && dst_start[e] + extent[e] == dl->shape[e])
        ext[e] = epad - start[e];
    }
    start[d] = dl->shape[d];
    ext[d] = pad - dl->shape[d];
    ts_layout padded = *dl;
    for (int e = 0; e < dl->ndim; e++)
      padded.shape[e] = ts_layout_padded(dl, e);
    if ((rc = copy_lowered(dst->data, &padded, start, (const char *)&zeros, &zl, zero, ext, threads,
                           false, err)))
      return rc;
  }
  return TS_OK;
}

int ts_copy(const ts_tensor *dst, const ts_tensor *src, const ts_copy_opts *opts, ts_error *err) {
  if (!dst || !src)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "copy: destination and source are required");
  if (dst->layout.ndim != src->layout.ndim ||
      memcmp(dst->layout.shape, src->layout.shape,
             sizeof(int64_t) * (size_t)(dst->layout.ndim > 0 && dst->layout.ndim <= TS_MAX_DIMS
                                            ? dst->layout.ndim
                                            : 0)) != 0)
    return ts_error_set(err, TS_BAD_SHAPE,
                        "copy between different logical shapes: ts_copy needs equal shapes (use "
                        "ts_copy_box for parts)");
  return ts_copy_box(dst, NULL, src, NULL, src->layout.shape, opts, err);
}
