/* test_copy.c - the strided-copy kernel against its naive reference on random layouts, plus
 * hand-checked blocked addresses, padded tails, threads, and every validation error. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ts_kernels.h"
#include "ts_pool.h"
#include "check_main.h"

static uint64_t rng_state;
static uint64_t rnd(void) { /* xorshift64*: deterministic test data */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * UINT64_C(2685821657736338717);
}
static int64_t rnd_in(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* A random tag over nd dims: a random outer order, blocks on up to two dims (one maybe
 * two-level). */
static void random_tag(int nd, char *tag, bool blocked) {
  int perm[TS_MAX_DIMS];
  for (int d = 0; d < nd; d++)
    perm[d] = d;
  for (int d = nd - 1; d > 0; d--) {
    int k = (int)rnd_in(0, d);
    int t = perm[d];
    perm[d] = perm[k];
    perm[k] = t;
  }
  bool up[TS_MAX_DIMS] = {false};
  char blocks[64] = "";
  if (blocked && nd > 0) {
    static const int sizes[] = {2, 3, 4, 8, 16};
    int nb = (int)rnd_in(1, nd > 1 ? 3 : 2);
    for (int b = 0; b < nb; b++) {
      int d = (int)rnd_in(0, nd - 1);
      up[d] = true;
      char one[16];
      snprintf(one, sizeof one, "%d%c", sizes[rnd_in(0, 4)], 'a' + d);
      strcat(blocks, one);
    }
  }
  int n = 0;
  for (int i = 0; i < nd; i++)
    tag[n++] = (char)((up[perm[i]] ? 'A' : 'a') + perm[i]);
  tag[n] = '\0';
  strcat(tag, blocks);
}

/* A random layout holding a box of `extent`: a bigger tensor (dense, maybe blocked, any order),
 * or a plain view with steps and reversed dims. Returns the buffer bytes; box start in start[]. */
static size_t random_layout(ts_layout *l, ts_dtype dt, int nd, const int64_t *extent,
                            int64_t *start) {
  int64_t shape[TS_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    shape[d] = extent[d] + rnd_in(0, 3);
    start[d] = rnd_in(0, shape[d] - extent[d]);
  }
  char tag[64];
  int kind = (int)rnd_in(0, 2);
  random_tag(nd, tag, kind == 1);
  ts_error err;
  ck_assert_msg(ts_layout_from_tag(l, dt, nd, shape, tag, &err) == TS_OK, "%s", err.msg);
  size_t bytes;
  ck_assert(ts_layout_span(l, &bytes, &err) == TS_OK);
  if (kind == 2) { /* a strided view: steps and reversed dims over a larger dense buffer */
    int64_t esize = (int64_t)ts_dtype_size(dt), span = 1;
    int perm[TS_MAX_DIMS];
    for (int d = 0; d < nd; d++)
      perm[d] = d;
    for (int d = nd - 1; d > 0; d--) {
      int k = (int)rnd_in(0, d), t = perm[d];
      perm[d] = perm[k];
      perm[k] = t;
    }
    int64_t off = rnd_in(0, 3);
    for (int i = nd - 1; i >= 0; i--) {
      int d = perm[i];
      int64_t step = rnd_in(1, 3);
      l->strides[d] = span * step;
      span *= step * (shape[d] > 0 ? shape[d] : 1) + rnd_in(0, 2);
      if (rnd() % 4 == 0 && shape[d] > 0) {
        off += (shape[d] - 1) * l->strides[d];
        l->strides[d] = -l->strides[d];
      }
    }
    l->offset = off * esize;
    bytes = (size_t)((span + off + 1) * esize);
  }
  return bytes;
}

static void fill_random(void *p, size_t n) {
  unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    c[i] = (unsigned char)rnd();
}

/* One random case: returns the number of elements copied. */
static int64_t random_case(int max_elems, int threads) {
  int nd = (int)rnd_in(0, 6);
  int64_t extent[TS_MAX_DIMS], total = 1;
  for (int d = 0; d < nd; d++) {
    int64_t hi = rnd() % 8 == 0 ? 40 : 7;
    extent[d] = rnd() % 40 == 0 ? 0 : rnd_in(1, hi);
    if (total * (extent[d] ? extent[d] : 1) > max_elems)
      extent[d] = 1;
    total *= extent[d];
  }
  ts_dtype dt_s = (ts_dtype)rnd_in(0, TS_DTYPE_COUNT - 1);
  ts_dtype dt_d = rnd() % 2 ? dt_s : (ts_dtype)rnd_in(0, TS_DTYPE_COUNT - 1);
  if (ts_dtype_is_complex(dt_s) && !ts_dtype_is_complex(dt_d))
    dt_d = dt_s; /* a complex dtype converts to complex ones only */
  ts_tensor src = {0}, d1 = {0}, d2 = {0};
  int64_t s_start[TS_MAX_DIMS], d_start[TS_MAX_DIMS];
  src.bytes = random_layout(&src.layout, dt_s, nd, extent, s_start);
  d1.bytes = random_layout(&d1.layout, dt_d, nd, extent, d_start);
  d2.layout = d1.layout;
  d2.bytes = d1.bytes;
  src.data = malloc(src.bytes + 1);
  d1.data = malloc(d1.bytes + 1);
  d2.data = malloc(d2.bytes + 1);
  fill_random(src.data, src.bytes);
  fill_random(d1.data, d1.bytes);
  memcpy(d2.data, d1.data, d1.bytes);
  ts_error err;
  ts_copy_opts opts = {.threads = threads, .write_around = rnd() % 2 == 0};
  char a[256], b[256];
  ts_layout_format(&src.layout, a, sizeof a);
  ts_layout_format(&d1.layout, b, sizeof b);
  ck_assert_msg(ts_copy_box(&d1, d_start, &src, s_start, extent, &opts, &err) == TS_OK,
                "%s (src %s dst %s)", err.msg, a, b);
  ck_assert_msg(ts_copy_box_reference(&d2, d_start, &src, s_start, extent, &err) == TS_OK, "%s",
                err.msg);
  ck_assert_msg(memcmp(d1.data, d2.data, d1.bytes) == 0, "fast != reference: src %s dst %s", a, b);
  free(src.data);
  free(d1.data);
  free(d2.data);
  return total;
}

START_TEST(test_random_vs_reference) {
  rng_state = 0x9e3779b97f4a7c15u;
  int64_t elems = 0;
  for (int i = 0; i < 1500; i++)
    elems += random_case(4096, 1);
  ck_assert_int_gt(elems, 100000);
}
END_TEST

START_TEST(test_random_large_threads) {
  rng_state = 0x1234567u;
  for (int i = 0; i < 40; i++)
    random_case(1 << 19, (int)rnd_in(2, 4));
}
END_TEST

/* Large transposes take the streaming (non-temporal) path: check them whole, even and odd sizes. */
START_TEST(test_large_transpose) {
  rng_state = 0x2545f4914f6cdd1du; /* each test runs in its own process: seed here, not earlier */
  int64_t sizes[2][2] = {{2048, 2048}, {2049, 2051}};
  for (int k = 0; k < 2; k++) {
    ts_tensor src = {0}, d1 = {0}, d2 = {0};
    ts_layout_from_tag(&src.layout, TS_F32, 2, sizes[k], "ab", NULL);
    ts_layout_from_tag(&d1.layout, TS_F32, 2, sizes[k], "ba", NULL);
    d2.layout = d1.layout;
    src.bytes = d1.bytes = d2.bytes = (size_t)(sizes[k][0] * sizes[k][1] * 4);
    src.data = malloc(src.bytes);
    d1.data = malloc(d1.bytes);
    d2.data = malloc(d2.bytes);
    fill_random(src.data, src.bytes);
    memset(d1.data, 0, d1.bytes);
    memset(d2.data, 1, d2.bytes);
    ts_copy_opts one = {.threads = 1};
    ck_assert_int_eq(ts_copy(&d1, &src, &one, NULL), TS_OK);
    ck_assert_int_eq(ts_copy_box_reference(&d2, NULL, &src, NULL, src.layout.shape, NULL), TS_OK);
    ck_assert(memcmp(d1.data, d2.data, d1.bytes) == 0);
    memset(d1.data, 0, d1.bytes);
    ts_copy_opts two = {.threads = 2};
    ck_assert_int_eq(ts_copy(&d1, &src, &two, NULL), TS_OK);
    ck_assert(memcmp(d1.data, d2.data, d1.bytes) == 0);
    free(src.data);
    free(d1.data);
    free(d2.data);
  }
}
END_TEST

/* ts_copy_stream against memcpy: every length up to 300 bytes and some long ones, the
 * destination at every offset in a cache line, bytes around it untouched. */
START_TEST(test_stream_bytes) {
  rng_state = 0x5851f42d4c957f2du;
  enum { GUARD = 80, MAXN = 70000 };
  static const size_t longer[] = {383, 1024, 4096 + 17, 65536 - 1, MAXN - 128};
  uint8_t *src = malloc(MAXN + 64), *got = aligned_alloc(64, MAXN + 3 * 64 + GUARD);
  uint8_t *want = malloc(MAXN + 3 * 64 + GUARD);
  fill_random(src, MAXN + 64);
  for (size_t k = 0; k < 301 + sizeof longer / sizeof longer[0]; k++) {
    size_t n = k < 301 ? k : longer[k - 301];
    for (size_t off = 0; off < 64; off += k < 301 ? 1 : 7) {
      size_t soff = (off * 5) % 13, room = n + off + GUARD;
      fill_random(got, room);
      memcpy(want, got, room);
      memcpy(want + off, src + soff, n);
      ts_copy_stream(got + off, src + soff, n);
      ts_copy_stream_fence();
      ck_assert_msg(memcmp(got, want, room) == 0, "%zu bytes at offset %zu", n, off);
    }
  }
  free(src);
  free(got);
  free(want);
}
END_TEST

/* Copies of TS_STREAM_MIN_BYTES or more that may write around the caches: rows into a wider
 * tensor at an offset that is not a whole line (a scatter), a whole tensor (one row cut in
 * chunks), short rows (ordinary stores), a gather (ordinary stores), on 1 and 3 threads. */
START_TEST(test_stream_rows) {
  rng_state = 0x14057b7ef767814fu;
  static const struct {
    ts_dtype dt;
    int64_t src[2], dst[2], dst_start[2];
  } cases[] = {
      {TS_F32, {256, 300}, {256, 1000}, {0, 7}},  /* rows of 1200 bytes, 4000 apart */
      {TS_F32, {600, 600}, {600, 600}, {0, 0}},   /* contiguous: one row in chunks */
      {TS_U8, {2000, 300}, {2000, 301}, {0, 1}},  /* rows of 300 bytes, off a line */
      {TS_F64, {4096, 8}, {4096, 40}, {0, 3}},    /* rows of 64 bytes: ordinary stores */
      {TS_F32, {512, 1024}, {512, 256}, {0, 0}},  /* a gather: a box of each source row */
      {TS_F16, {300, 1000}, {301, 1000}, {1, 0}}, /* contiguous, at a row's offset */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int threads = 1; threads <= 3; threads += 2) {
      ts_tensor src = {0}, d1 = {0}, d2 = {0};
      ck_assert_int_eq(ts_layout_plain(&src.layout, cases[k].dt, 2, cases[k].src, NULL), TS_OK);
      ck_assert_int_eq(ts_layout_plain(&d1.layout, cases[k].dt, 2, cases[k].dst, NULL), TS_OK);
      d2.layout = d1.layout;
      size_t es = ts_dtype_size(cases[k].dt);
      src.bytes = (size_t)(cases[k].src[0] * cases[k].src[1]) * es;
      d1.bytes = d2.bytes = (size_t)(cases[k].dst[0] * cases[k].dst[1]) * es;
      src.data = malloc(src.bytes);
      d1.data = malloc(d1.bytes);
      d2.data = malloc(d2.bytes);
      fill_random(src.data, src.bytes);
      fill_random(d1.data, d1.bytes);
      memcpy(d2.data, d1.data, d1.bytes);
      int64_t extent[2], s_start[2] = {0, 0};
      for (int d = 0; d < 2; d++) {
        extent[d] = cases[k].dst[d] - cases[k].dst_start[d];
        if (extent[d] > cases[k].src[d])
          extent[d] = cases[k].src[d];
      }
      ck_assert_int_ge((int64_t)es * extent[0] * extent[1], TS_STREAM_MIN_BYTES);
      ts_copy_opts opts = {.threads = threads, .write_around = true};
      ts_error err;
      ck_assert_msg(ts_copy_box(&d1, cases[k].dst_start, &src, s_start, extent, &opts, &err) ==
                        TS_OK,
                    "%s", err.msg);
      ck_assert_int_eq(ts_copy_box_reference(&d2, cases[k].dst_start, &src, s_start, extent, &err),
                       TS_OK);
      ck_assert_msg(memcmp(d1.data, d2.data, d1.bytes) == 0, "case %zu, %d threads", k, threads);
      free(src.data);
      free(d1.data);
      free(d2.data);
    }
}
END_TEST

/* The f32 transpose paths: 16x16 register blocks with streaming stores (large copies), rows and
 * columns that are not multiples of 16, views whose lines start off a cache line (the blocks then
 * store normally), and permutations whose source runs span two nodes (abcd -> dcab: the rows are d,
 * continued by c on the source, visited as a second row loop). Also row gathers (abcd -> acbd:
 * rows of whole lines whose next source row is less than a page away), walked in source order.
 * Large f32 transposes on one thread go through panels (two passes through a buffer): panels
 * whose columns are not a multiple of 16 (the rest by tiles), rows not a multiple of 16 (tiles
 * instead), a second row loop split with a remainder (40x48x32x96 dcab: rows 96, 10 of c per
 * panel, then 2), misaligned sides (plain stores).
 * Against the reference, 1 and 2 threads. */
START_TEST(test_transpose_paths) {
  static const struct {
    int nd;
    int64_t shape[4];
    const char *stag, *dtag;
    int64_t soff, doff; /* elements before the first one, on each side */
  } cases[] = {
      {2, {2048, 2048}, "ab", "ba", 1, 0},
      {2, {2047, 2050}, "ab", "ba", 0, 3},
      {2, {100, 75}, "ab", "ba", 5, 7},
      {2, {16, 4096}, "ab", "ba", 0, 0},
      {4, {64, 64, 64, 64}, "abcd", "dcab", 0, 0},
      {4, {19, 33, 47, 35}, "abcd", "dcab", 1, 2},
      {4, {8, 40, 64, 16}, "abcd", "dcab", 0, 0},
      {3, {70, 33, 48}, "abc", "cab", 0, 1},
      {4, {3, 48, 40, 36}, "abcd", "adcb", 2, 0},
      {4, {8, 512, 16, 16}, "abcd", "acbd", 0, 0},
      {4, {3, 100, 5, 32}, "abcd", "acbd", 1, 0},
      {4, {2, 77, 3, 48}, "abcd", "acbd", 0, 5},
      {3, {6, 40, 256}, "abc", "bac", 0, 0},
      {4, {40, 48, 32, 96}, "abcd", "dcab", 0, 0},
      {4, {64, 64, 64, 40}, "abcd", "dcab", 0, 1},
      {2, {4100, 2051}, "ab", "ba", 0, 0},
  };
  rng_state = 0x5851f42d4c957f2du;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    ts_tensor src = {0}, d1 = {0}, d2 = {0};
    ck_assert_int_eq(
        ts_layout_from_tag(&src.layout, TS_F32, cases[k].nd, cases[k].shape, cases[k].stag, NULL),
        TS_OK);
    ck_assert_int_eq(
        ts_layout_from_tag(&d1.layout, TS_F32, cases[k].nd, cases[k].shape, cases[k].dtag, NULL),
        TS_OK);
    ck_assert_int_eq(ts_layout_span(&src.layout, &src.bytes, NULL), TS_OK);
    ck_assert_int_eq(ts_layout_span(&d1.layout, &d1.bytes, NULL), TS_OK);
    src.layout.offset = cases[k].soff * 4;
    src.bytes += (size_t)src.layout.offset;
    d1.layout.offset = cases[k].doff * 4;
    d1.bytes += (size_t)d1.layout.offset;
    d2.layout = d1.layout;
    d2.bytes = d1.bytes;
    src.data = malloc(src.bytes);
    d1.data = malloc(d1.bytes);
    d2.data = malloc(d2.bytes);
    ck_assert(src.data && d1.data && d2.data);
    fill_random(src.data, src.bytes);
    memset(d2.data, 1, d2.bytes);
    ck_assert_int_eq(ts_copy_box_reference(&d2, NULL, &src, NULL, src.layout.shape, NULL), TS_OK);
    for (int threads = 1; threads <= 2; threads++) {
      memset(d1.data, 1, d1.bytes);
      ts_copy_opts opts = {.threads = threads};
      ck_assert_int_eq(ts_copy(&d1, &src, &opts, NULL), TS_OK);
      ck_assert_msg(memcmp(d1.data, d2.data, d1.bytes) == 0, "case %zu (%s -> %s), %d threads", k,
                    cases[k].stag, cases[k].dtag, threads);
    }
    free(src.data);
    free(d1.data);
    free(d2.data);
  }
}
END_TEST

/* ts_buffer_alloc: 64-byte alignment below TS_BUFFER_HUGE_BYTES, 2 MiB alignment from it on, every
 * byte writable and kept, frees of NULL, and a transpose between two such buffers. */
START_TEST(test_buffer_alloc) {
  static const size_t sizes[] = {0,
                                 1,
                                 63,
                                 64,
                                 65,
                                 4096,
                                 100000,
                                 ((size_t)2 << 20) - 1,
                                 (size_t)2 << 20,
                                 ((size_t)2 << 20) + 1,
                                 (size_t)5 << 20,
                                 ((size_t)9 << 20) + 12345};
  for (int round = 0; round < 3; round++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = sizes[k];
      unsigned char *p = ts_buffer_alloc(n);
      ck_assert_ptr_nonnull(p);
      size_t align = n >= TS_BUFFER_HUGE_BYTES ? TS_BUFFER_HUGE_BYTES : 64;
      ck_assert_msg((uintptr_t)p % align == 0, "%zu bytes at %p: not %zu-aligned", n, (void *)p,
                    align);
      for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + k);
      size_t bad = 0;
      for (size_t i = 0; i < n; i++)
        bad += p[i] != (unsigned char)(i * 7 + k);
      ck_assert_uint_eq(bad, 0);
      ts_buffer_free(p);
    }
  ts_buffer_free(NULL);

  int64_t shape[2] = {1536, 1100};
  ts_tensor src = {0}, d1 = {0}, d2 = {0};
  ts_layout_from_tag(&src.layout, TS_F32, 2, shape, "ab", NULL);
  ts_layout_from_tag(&d1.layout, TS_F32, 2, shape, "ba", NULL);
  d2.layout = d1.layout;
  src.bytes = d1.bytes = d2.bytes = (size_t)(shape[0] * shape[1] * 4);
  src.data = ts_buffer_alloc(src.bytes);
  d1.data = ts_buffer_alloc(d1.bytes);
  d2.data = malloc(d2.bytes);
  ck_assert(src.data && d1.data && d2.data);
  rng_state = 0x3c6ef372fe94f82au;
  fill_random(src.data, src.bytes);
  ck_assert_int_eq(ts_copy(&d1, &src, NULL, NULL), TS_OK);
  ck_assert_int_eq(ts_copy_box_reference(&d2, NULL, &src, NULL, shape, NULL), TS_OK);
  ck_assert(memcmp(d1.data, d2.data, d1.bytes) == 0);
  ts_buffer_free(src.data);
  ts_buffer_free(d1.data);
  free(d2.data);
}
END_TEST

/* NCHW16c addresses by hand: shape [2, 20, 3, 5], C padded to 32. */
START_TEST(test_blocked_addresses) {
  ts_layout l;
  int64_t shape[4] = {2, 20, 3, 5};
  ck_assert_int_eq(ts_layout_from_tag(&l, TS_F32, 4, shape, "aBcd16b", NULL), TS_OK);
  ck_assert_int_eq(ts_layout_padded(&l, 1), 32);
  int64_t idx[4] = {1, 17, 2, 3};
  /* n*(2*3*5*16) + (c/16)*(3*5*16) + h*(5*16) + w*16 + c%16, times 4 bytes */
  int64_t expect = 1 * 480 + 1 * 240 + 2 * 80 + 3 * 16 + 1;
  ck_assert_int_eq(ts_layout_address(&l, idx), expect * 4);
  size_t bytes;
  ck_assert_int_eq(ts_layout_span(&l, &bytes, NULL), TS_OK);
  ck_assert_int_eq(bytes, 2 * 32 * 3 * 5 * 4);
  /* OIhw4i16o4i over [O=20, I=10, 3, 3]: blocks i:4, o:16, i:4 */
  int64_t s2[4] = {20, 10, 3, 3};
  ck_assert_int_eq(ts_layout_from_tag(&l, TS_F32, 4, s2, "ABcd4b16a4b", NULL), TS_OK);
  int64_t o = 18, i = 13, h = 1, w = 2;
  int64_t ib = (i % 16) / 4, ii = i % 4;
  expect = (o / 16) * (1 * 3 * 3 * 256) + (i / 16) * (3 * 3 * 256) + h * (3 * 256) + w * 256 +
           ib * 64 + (o % 16) * 4 + ii;
  int64_t idx2[4] = {o, i, h, w};
  ck_assert_int_eq(ts_layout_address(&l, idx2), expect * 4);
}
END_TEST

/* A copy into a blocked destination zero-fills the padded tail and nothing else beyond. */
START_TEST(test_padded_tail_zeroed) {
  int64_t shape[2] = {3, 10};
  ts_tensor src = {0}, dst = {0};
  ts_layout_plain(&src.layout, TS_F32, 2, shape, NULL);
  ts_layout_from_tag(&dst.layout, TS_F32, 2, shape, "aB8b", NULL);
  float in[30];
  for (int i = 0; i < 30; i++)
    in[i] = (float)(i + 1);
  src.data = in;
  src.bytes = sizeof in;
  float out[3 * 16];
  memset(out, 0xff, sizeof out);
  dst.data = out;
  dst.bytes = sizeof out;
  ck_assert_int_eq(ts_copy(&dst, &src, NULL, NULL), TS_OK);
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 16; c++) {
      float v = out[r * 16 + c]; /* "aB8b": rows of two 8-blocks */
      ck_assert(v == (c < 10 ? (float)(r * 10 + c + 1) : 0.0f));
    }
}
END_TEST

START_TEST(test_copy_converts) {
  float in[4] = {1.5f, -2.25f, 65519.0f, 1e-8f};
  uint16_t out[4];
  ts_tensor src = {in, sizeof in, {0}}, dst = {out, sizeof out, {0}};
  int64_t n = 4;
  ts_layout_plain(&src.layout, TS_F32, 1, &n, NULL);
  ts_layout_plain(&dst.layout, TS_F16, 1, &n, NULL);
  ck_assert_int_eq(ts_copy(&dst, &src, NULL, NULL), TS_OK);
  ck_assert_uint_eq(out[0], 0x3e00);
  ck_assert_uint_eq(out[1], 0xc080);
  ck_assert_uint_eq(out[2], 0x7bff);     /* 65519 rounds down to the largest f16 */
  ck_assert_uint_eq(out[3], 0x0000 + 0); /* 1e-8 is below half the smallest subnormal */
}
END_TEST

static void expect_error(int rc, int code, const ts_error *err, const char *needle) {
  ck_assert_int_eq(rc, code);
  ck_assert_int_eq(err->code, code);
  ck_assert_msg(strstr(err->msg, needle) != NULL, "message '%s' lacks '%s'", err->msg, needle);
}

START_TEST(test_errors) {
  ts_layout l;
  ts_error err;
  int64_t neg[2] = {3, -1};
  expect_error(ts_layout_plain(&l, TS_F32, 2, neg, &err), TS_BAD_SHAPE, &err, "negative size");
  int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  expect_error(ts_layout_plain(&l, TS_F32, 9, s9, &err), TS_BAD_SHAPE, &err, "0 to 8 dims");
  int64_t s2[2] = {4, 4};
  expect_error(ts_layout_plain(&l, (ts_dtype)42, 2, s2, &err), TS_BAD_DTYPE, &err, "invalid dtype");
  expect_error(ts_layout_from_tag(&l, TS_F32, 2, s2, "ab8c", &err), TS_BAD_LAYOUT, &err,
               "inner block");
  expect_error(ts_layout_from_tag(&l, TS_F32, 2, s2, "aa", &err), TS_BAD_LAYOUT, &err, "twice");
  expect_error(ts_layout_from_tag(&l, TS_F32, 2, s2, "ab8b", &err), TS_BAD_LAYOUT, &err,
               "upper case");
  expect_error(ts_layout_from_tag(&l, TS_F32, 2, s2, "aB", &err), TS_BAD_LAYOUT, &err,
               "no inner block");
  expect_error(ts_layout_from_tag(&l, TS_F32, 2, s2, "a", &err), TS_BAD_LAYOUT, &err,
               "exactly once");
  expect_error(ts_layout_from_tag(&l, TS_F32, 2, s2, "aB0b", &err), TS_BAD_LAYOUT, &err,
               "size 1..");
  int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  expect_error(ts_layout_plain(&l, TS_F32, 2, huge, &err), TS_OVERFLOW, &err, "overflow");
  ck_assert_int_eq(ts_layout_plain(&l, TS_F32, 2, s2, &err), TS_OK);
  expect_error(ts_layout_check(&l, 63, false, &err), TS_OUT_OF_BOUNDS, &err,
               "needs a buffer of 64");
  l.strides[1] = -1;
  expect_error(ts_layout_check(&l, 64, false, &err), TS_OUT_OF_BOUNDS, &err, "before its buffer");
  ts_layout_plain(&l, TS_F32, 2, s2, NULL);
  l.strides[0] = 2; /* rows of 4 with stride 2: elements collide */
  ck_assert_int_eq(ts_layout_check(&l, 64, false, &err), TS_OK); /* fine to read */
  expect_error(ts_layout_check(&l, 64, true, &err), TS_ALIASING, &err, "alias");
  l.strides[0] = 0;
  expect_error(ts_layout_check(&l, 64, true, &err), TS_ALIASING, &err, "alias");

  float a[16], b[16];
  ts_tensor src = {a, sizeof a, {0}}, dst = {b, sizeof b, {0}};
  ts_layout_plain(&src.layout, TS_F32, 2, s2, NULL);
  ts_layout_plain(&dst.layout, TS_F32, 2, s2, NULL);
  int64_t start[2] = {1, 0}, ext[2] = {4, 4};
  expect_error(ts_copy_box(&dst, NULL, &src, start, ext, NULL, &err), TS_OUT_OF_BOUNDS, &err,
               "source box on dim 0");
  expect_error(ts_copy_box(&dst, start, &src, NULL, ext, NULL, &err), TS_OUT_OF_BOUNDS, &err,
               "destination box on dim 0");
  int64_t s1[1] = {16};
  ts_layout_plain(&src.layout, TS_F32, 1, s1, NULL);
  expect_error(ts_copy(&dst, &src, NULL, &err), TS_BAD_SHAPE, &err, "different logical shapes");
  expect_error(ts_copy_box(&dst, NULL, &src, NULL, ext, NULL, &err), TS_BAD_SHAPE, &err,
               "same number of dims");
  ts_layout_plain(&src.layout, TS_F32, 2, s2, NULL);
  src.data = NULL;
  expect_error(ts_copy(&dst, &src, NULL, &err), TS_INVALID_ARGUMENT, &err, "NULL buffer");
  src.data = b; /* the same buffer on both sides */
  expect_error(ts_copy(&dst, &src, NULL, &err), TS_INVALID_ARGUMENT, &err, "overlap");
  src.data = a;
  src.bytes = 10;
  expect_error(ts_copy(&dst, &src, NULL, &err), TS_OUT_OF_BOUNDS, &err, "buffer has 10");
  expect_error(ts_copy(NULL, &src, NULL, &err), TS_INVALID_ARGUMENT, &err, "required");
  /* a zero-size copy with NULL buffers is fine */
  int64_t z[2] = {0, 4};
  ts_tensor e1 = {NULL, 0, {0}}, e2 = {NULL, 0, {0}};
  ts_layout_plain(&e1.layout, TS_F32, 2, z, NULL);
  ts_layout_plain(&e2.layout, TS_F32, 2, z, NULL);
  ck_assert_int_eq(ts_copy(&e1, &e2, NULL, &err), TS_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("copy");
  TCase *tc = tcase_create("copy");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_blocked_addresses);
  tcase_add_test(tc, test_padded_tail_zeroed);
  tcase_add_test(tc, test_copy_converts);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_random_vs_reference);
  tcase_add_test(tc, test_random_large_threads);
  tcase_add_test(tc, test_large_transpose);
  tcase_add_test(tc, test_stream_bytes);
  tcase_add_test(tc, test_stream_rows);
  tcase_add_test(tc, test_transpose_paths);
  tcase_add_test(tc, test_buffer_alloc);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
