/* bench_copy.c - tshard-bench-copy: the strided-copy kernel against memcpy and its reference.
 *
 * Prints key=value lines. Bandwidth counts bytes read plus bytes written, for memcpy too. Each
 * case runs with 1 thread (_t1) and with all cores (_tN); medians of several runs. Each run of a
 * case is followed by a memcpy of the same bytes (as many as the case reads plus writes, halved:
 * <case>_memcpy_mib) on the same kind of buffers with as many threads, and a case's ratio divides
 * by the median of those (printed as <case>_memcpy_gbps_<t>): the machine is shared, and a
 * memcpy timed minutes earlier drifts. The size matters too: glibc's memcpy changes loops with
 * the size (on the 2-core VM this was written on, 64-128 MiB copies ran at 18-20 GB/s against
 * 28-36 GB/s at 256 MiB). memcpy_gbps_* at the start are one up-front figure, at 256 MiB.
 * The reference (one address computation per element) runs once per case.
 *
 * Buffers come from ts_buffer_alloc, as the einsum engine's caches and workspaces do
 * (2 MiB-aligned, transparent huge pages when the system allows them), memcpy's too. Every case
 * and memcpy also run on buffers of 4 KiB pages (page-aligned heap memory marked
 * MADV_NOHUGEPAGE), printed under keys with "_4k"
 * (memcpy_4k_gbps_t1, transpose2d_4k_vs_memcpy_t1 against that memcpy, ...): what a caller whose
 * buffers are not huge-page backed gets. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ts_kernels.h"
#include "ts_pool.h"
#include "bench_args.h"

#define REPS 5

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* The two kinds of buffers: [0] ts_buffer_alloc (huge pages when possible), [1] 4 KiB pages. */
enum { HUGE, SMALL_PAGES };
static const char *kind_infix[2] = {"", "_4k"};

static void *xmalloc(size_t n, int kind) {
  void *p;
  if (kind == HUGE)
    p = ts_buffer_alloc(n);
  else {
    size_t len = (n + 4095) / 4096 * 4096;
    p = aligned_alloc(4096, len);
#if defined(MADV_NOHUGEPAGE)
    if (p)
      madvise(p, len, MADV_NOHUGEPAGE); /* 4 KiB pages even where huge pages are always on */
#endif
  }
  if (!p) {
    fprintf(stderr, "tshard-bench-copy: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  memset(p, 1, n); /* touch every page before timing */
  return p;
}

static void xfree(void *p, int kind) {
  if (kind == HUGE)
    ts_buffer_free(p);
  else
    free(p);
}

typedef struct {
  char *d;
  const char *s;
  size_t n;
} memcpy_part;

static void *memcpy_thread(void *arg) {
  memcpy_part *p = arg;
  memcpy(p->d, p->s, p->n);
  return NULL;
}

/* memcpy of n bytes split over t threads (t = 1: a plain memcpy). */
static void parallel_memcpy(char *d, const char *s, size_t n, int t) {
  pthread_t tid[64];
  memcpy_part part[64] = {{0}};
  for (int i = 0; i < t; i++)
    part[i] = (memcpy_part){d + n * i / t, s + n * i / t, n * (i + 1) / t - n * i / t};
  for (int i = 1; i < t; i++)
    pthread_create(&tid[i], NULL, memcpy_thread, &part[i]);
  memcpy_thread(&part[0]);
  for (int i = 1; i < t; i++)
    pthread_join(tid[i], NULL);
}

#define MEMCPY_BYTES ((size_t)256 << 20)
static char *memcpy_src[2], *memcpy_dst[2]; /* [kind], kept for the interleaved memcpys */

/* Seconds of one memcpy of n bytes (at most MEMCPY_BYTES) on buffers of `kind` with t threads. */
static double time_memcpy(int kind, int t, size_t n) {
  double t0 = now();
  parallel_memcpy(memcpy_dst[kind], memcpy_src[kind], n, t);
  return now() - t0;
}
static int nthreads[2];
static const char *suffix[2] = {"t1", "tN"};

static void bench_memcpy(int kind) {
  memcpy_src[kind] = xmalloc(MEMCPY_BYTES, kind);
  memcpy_dst[kind] = xmalloc(MEMCPY_BYTES, kind);
  double gbps[2];
  for (int v = 0; v < 2; v++) {
    double t[REPS];
    time_memcpy(kind, nthreads[v], MEMCPY_BYTES);
    for (int r = 0; r < REPS; r++)
      t[r] = time_memcpy(kind, nthreads[v], MEMCPY_BYTES);
    gbps[v] = 2.0 * (double)MEMCPY_BYTES / median(t, REPS) / 1e9;
    printf("memcpy%s_gbps_%s=%.2f\n", kind_infix[kind], suffix[v], gbps[v]);
  }
  if (kind == HUGE) {
    printf("memcpy_gbps=%.2f\n", gbps[0]);
    printf("threads_tN=%d\n", nthreads[1]);
  }
}

static void must(int rc, const ts_error *err) {
  if (rc) {
    fprintf(stderr, "tshard-bench-copy: %s\n", err->msg);
    exit(1);
  }
}

/* Times one case: src box of `extent` at s_start copied to the whole of dst. The reference runs
 * on the ts_buffer_alloc buffers only. */
static void bench_case(const char *name, int kind, ts_tensor *dst, ts_tensor *src,
                       const int64_t *s_start) {
  ts_error err;
  const int64_t *extent = dst->layout.shape;
  int64_t numel = ts_layout_numel(&dst->layout);
  double bytes =
      (double)numel * (double)(ts_dtype_size(src->layout.dtype) + ts_dtype_size(dst->layout.dtype));
  size_t mbytes = (size_t)(bytes / 2); /* the memcpy that reads and writes as many bytes */
  if (mbytes > MEMCPY_BYTES)
    mbytes = MEMCPY_BYTES;
  printf("%s%s_memcpy_mib=%.1f\n", name, kind_infix[kind], (double)mbytes / (1 << 20));
  double fast[2], mc[2];
  for (int v = 0; v < 2; v++) {
    ts_copy_opts opts = {.threads = nthreads[v]};
    double t[REPS], tm[REPS];
    must(ts_copy_box(dst, NULL, src, s_start, extent, &opts, &err), &err);
    for (int r = 0; r < REPS; r++) {
      double t0 = now();
      must(ts_copy_box(dst, NULL, src, s_start, extent, &opts, &err), &err);
      t[r] = now() - t0;
      tm[r] = time_memcpy(kind, nthreads[v], mbytes);
    }
    fast[v] = median(t, REPS);
    mc[v] = 2.0 * (double)mbytes / median(tm, REPS) / 1e9;
    printf("%s%s_memcpy_gbps_%s=%.2f\n", name, kind_infix[kind], suffix[v], mc[v]);
  }
  for (int v = 0; v < 2; v++) {
    double gbps = bytes / fast[v] / 1e9;
    printf("%s%s_gbps_%s=%.2f\n", name, kind_infix[kind], suffix[v], gbps);
    printf("%s%s_vs_memcpy_%s=%.3f\n", name, kind_infix[kind], suffix[v], gbps / mc[v]);
  }
  if (kind == HUGE) {
    double t0 = now();
    must(ts_copy_box_reference(dst, NULL, src, s_start, extent, &err), &err);
    double ref = now() - t0;
    for (int v = 0; v < 2; v++)
      printf("%s_vs_reference_%s=%.1f\n", name, suffix[v], ref / fast[v]);
    printf("%s_reference_ms=%.1f\n", name, ref * 1e3);
  }
  fflush(stdout);
}

static ts_tensor make(ts_dtype dt, int nd, const int64_t *shape, const char *tag, int kind) {
  ts_tensor t = {0};
  ts_error err;
  must(ts_layout_from_tag(&t.layout, dt, nd, shape, tag, &err), &err);
  must(ts_layout_span(&t.layout, &t.bytes, &err), &err);
  t.data = xmalloc(t.bytes, kind);
  return t;
}

static void fill_f32(ts_tensor *t) {
  float *p = t->data;
  for (size_t i = 0; i < t->bytes / 4; i++)
    p[i] = (float)(i % 1000) * 0.5f;
}

/* One case on both kinds of buffers. */
static void run(const char *name, ts_dtype sdt, ts_dtype ddt, int nd, const int64_t *sshape,
                const char *stag, const int64_t *s_start, const int64_t *dshape, const char *dtag) {
  for (int kind = HUGE; kind <= SMALL_PAGES; kind++) {
    ts_tensor src = make(sdt, nd, sshape, stag, kind), dst = make(ddt, nd, dshape, dtag, kind);
    if (sdt == TS_F32)
      fill_f32(&src);
    bench_case(name, kind, &dst, &src, s_start);
    xfree(src.data, kind);
    xfree(dst.data, kind);
  }
}

static const char usage[] =
    "usage: tshard-bench-copy [--help]\n"
    "The strided-copy kernel against memcpy and its naive reference: 2-D transposes, 4-D\n"
    "permutes, blocked layouts (nchw <-> nchw16c), sub-boxes and f32 -> bf16 conversions, with\n"
    "1 thread (_t1) and all cores (_tN); prints key=value lines (<case>_gbps_<t>,\n"
    "<case>_vs_memcpy_<t>, <case>_vs_reference_<t>, memcpy_gbps_*). No options.\n";

int main(int argc, char **argv) {
  int rc = tsb_no_options(argc, argv, "tshard-bench-copy", usage, true);
  if (rc >= 0)
    return rc;
  nthreads[0] = 1;
  nthreads[1] = ts_kernels_threads();
  bench_memcpy(HUGE);
  bench_memcpy(SMALL_PAGES);
  int64_t sq[2] = {8192, 8192};
  run("transpose2d", TS_F32, TS_F32, 2, sq, "ab", NULL, sq, "ba");

  int64_t p4[4] = {64, 64, 64, 64};
  run("permute4d", TS_F32, TS_F32, 4, p4, "abcd", NULL, p4, "dcab");
  int64_t nchw[4] = {32, 64, 56, 56};
  run("nchw_to_nchw16c", TS_F32, TS_F32, 4, nchw, "abcd", NULL, nchw, "aBcd16b");
  run("nchw16c_to_nhwc", TS_F32, TS_F32, 4, nchw, "aBcd16b", NULL, nchw, "acdb");
  int64_t big[4] = {64, 128, 56, 56}, start[4] = {16, 32, 0, 0};
  run("subbox_to_blocked", TS_F32, TS_F32, 4, big, "abcd", start, nchw, "aBcd16b");
  int64_t n1[1] = {INT64_C(64) << 20};
  run("f32_to_bf16", TS_F32, TS_BF16, 1, n1, "a", NULL, n1, "a");
  for (int kind = HUGE; kind <= SMALL_PAGES; kind++) {
    xfree(memcpy_src[kind], kind);
    xfree(memcpy_dst[kind], kind);
  }
  return 0;
}
