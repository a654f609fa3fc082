/* test_comm.c - the MPI layer: world, cached group and mesh-line communicators, typed reductions
 * of every dtype and op (f16/bf16 and max/min through the project's kernel), the agreement that
 * makes reshards atomic (and waits for a late rank without holding a core), point-to-point
 * exchange, and MPI errors mapped to TS_MPI with MPI's message and the call site, and transfers of
 * strided regions (all-to-all-w and point-to-point) checked element by element against the values
 * each rank computes for itself. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ts_comm.h"
#include "ts_pool.h"

static int rank, size;
static long failures, checks;

static double now_s(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "[rank %d] %s:%d: %s: ", rank, __FILE__, __LINE__, #cond);                   \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

/* Region transfers: rank r sends peer p the [3][5] plane p of its int32 array src[size][3][5]
 * read column-major (a transposed region), and receives it into a padded [5][4] plane of dst:
 * dst[p][j][i] must be src_p[r][i][j] = p*1000 + r*100 + i*10 + j. */
static void test_regions(ts_comm *world) {
  ts_error err;
  int32_t *src = malloc((size_t)size * 15 * sizeof *src), *dst = calloc((size_t)size * 20, 4);
  ts_comm_region *sr = calloc(2 * (size_t)size, sizeof *sr), *rr = sr + size;
  for (int p = 0; p < size; p++) {
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++)
        src[(p * 3 + i) * 5 + j] = rank * 1000 + p * 100 + i * 10 + j;
    sr[p] = (ts_comm_region){src + p * 15, 2, 4, {5, 3}, {4, 20}};
    rr[p] = (ts_comm_region){dst + p * 20, 2, 4, {5, 3}, {16, 4}};
  }
  CHECK(ts_comm_alltoallw(world, sr, rr, &err) == TS_OK, "%s", err.msg);
  long bad = 0;
  for (int p = 0; p < size; p++)
    for (int j = 0; j < 5; j++)
      for (int i = 0; i < 4; i++) {
        int32_t want = i < 3 ? p * 1000 + rank * 100 + i * 10 + j : 0; /* padding untouched */
        bad += dst[(p * 5 + j) * 4 + i] != want;
      }
  CHECK(bad == 0, "all-to-all-w: %ld wrong elements", bad);

  /* Ring, bytes: a reversed region (stride -2) meets a packed one; empty regions move nothing. */
  uint8_t line[16], got[8] = {0};
  for (int k = 0; k < 16; k++)
    line[k] = (uint8_t)(rank * 16 + k);
  int to = (rank + 1) % size, from = (rank + size - 1) % size;
  ts_comm_region s1 = {line + 14, 1, 1, {8}, {-2}}, r1 = {got, 1, 1, {8}, {1}};
  CHECK(ts_comm_region_supported(&s1), "stride -2 is supported");
  CHECK(ts_comm_exchange_regions(world, 1, &to, &s1, 1, &from, &r1, 7, &err) == TS_OK, "%s",
        err.msg);
  bad = 0;
  for (int k = 0; k < 8; k++)
    bad += got[k] != (uint8_t)(from * 16 + 14 - 2 * k);
  CHECK(bad == 0, "ring of regions: %ld wrong bytes", bad);
  ts_comm_region empty = {line, 2, 1, {0, 4}, {4, 1}}, none = {0};
  CHECK(ts_comm_exchange_regions(world, 1, &to, &empty, 1, &from, &none, 8, &err) == TS_OK, "%s",
        err.msg);

  /* What MPI would get wrong is refused up front; bad regions are clear errors. */
  ts_comm_region back = {line + 15, 1, 1, {8}, {-1}};
  CHECK(!ts_comm_region_supported(&back), "stride -1 over bytes must be packed");
  back.count[0] = 1;
  CHECK(ts_comm_region_supported(&back), "one element at any stride");
  ts_comm_region zero = {line, 1, 0, {4}, {1}};
  CHECK(ts_comm_exchange_regions(world, 1, &to, &zero, 0, NULL, NULL, 9, &err) ==
                TS_INVALID_ARGUMENT &&
            strstr(err.msg, "element size 0"),
        "%s", err.msg);
  ts_comm_region huge = {line, 2, 1, {1 << 16, 1 << 16}, {0, 0}};
  CHECK(ts_comm_exchange_regions(world, 1, &to, &huge, 0, NULL, NULL, 9, &err) ==
                TS_INVALID_ARGUMENT &&
            strstr(err.msg, "chunks"),
        "%s", err.msg);
  free(src);
  free(dst);
  free(sr);
}

/* Large regions (what the single-copy path of one node copies itself, TSHARD_CMA=0 makes it
 * MPI's): rank r's int32 matrix a[size*R][C] is cut in column blocks, block p goes to rank p
 * (strided rows of W elements at the sender, one contiguous run at the receiver), and back the
 * other way (contiguous at the sender, strided at the receiver), once by all-to-all-w and once
 * point to point. got[q][i][j] must be q's a[i][r*W + j] = q*1e6 + i*1000 + r*W + j. Rows of
 * 2400 bytes (long runs on both sides), of 768 bytes (short runs on the copier's own side only:
 * still single copies) and of 160 bytes (too short: MPI's). */
static void test_large_regions(ts_comm *world, int W, bool pooled) {
  enum { R = 64 };
  ts_error err;
  int64_t rows = (int64_t)size * R, cols = (int64_t)size * W;
  size_t na = (size_t)(rows * cols) * sizeof(int32_t), ngot = (size_t)(rows * W) * sizeof(int32_t);
  int32_t *a = pooled ? ts_pool_alloc(na, 0, NULL, NULL) : malloc(na);
  int32_t *got = pooled ? ts_pool_alloc(ngot, 0, NULL, NULL) : malloc(ngot);
  int32_t *back = pooled ? ts_pool_alloc(na, 0, NULL, NULL) : malloc(na);
  ts_comm_region *sr = calloc(2 * (size_t)size, sizeof *sr), *rr = sr + size;
  int *peers = malloc((size_t)size * sizeof *peers);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      a[i * cols + j] = (int32_t)(rank * 1000000 + i * 1000 + j);
  for (int round = 0; round < 2; round++) {
    memset(got, 0, (size_t)(rows * W) * sizeof *got);
    memset(back, 0, (size_t)(rows * cols) * sizeof *back);
    for (int p = 0; p < size; p++) {
      peers[p] = p;
      /* there: rows 0..R-1 of column block p, into got's block of rows p*R.. */
      sr[p] = (ts_comm_region){a + (int64_t)p * W, 2, 4, {R, W}, {cols * 4, 4}};
      rr[p] = (ts_comm_region){got + (int64_t)p * R * W, 1, 4, {R * W}, {4}};
    }
    int rc = round == 0
                 ? ts_comm_alltoallw(world, sr, rr, &err)
                 : ts_comm_exchange_regions(world, size, peers, sr, size, peers, rr, 11, &err);
    CHECK(rc == TS_OK, "large regions of %d there (round %d): %s", W, round, err.msg);
    long bad = 0;
    for (int q = 0; q < size; q++)
      for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < W; j++)
          bad += got[(q * R + i) * W + j] != (int32_t)(q * 1000000 + i * 1000 + rank * W + j);
    CHECK(bad == 0, "large regions of %d there (round %d): %ld wrong elements", W, round, bad);
    /* and back: contiguous at the sender, strided rows at the receiver */
    for (int p = 0; p < size; p++) {
      sr[p] = (ts_comm_region){got + (int64_t)p * R * W, 1, 4, {R * W}, {4}};
      rr[p] = (ts_comm_region){back + (int64_t)p * W, 2, 4, {R, W}, {cols * 4, 4}};
    }
    rc = round == 0 ? ts_comm_alltoallw(world, sr, rr, &err)
                    : ts_comm_exchange_regions(world, size, peers, sr, size, peers, rr, 12, &err);
    CHECK(rc == TS_OK, "large regions of %d back (round %d): %s", W, round, err.msg);
    bad = 0;
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        int32_t want = i < R ? a[i * cols + j] : 0; /* rows R.. stay untouched */
        bad += back[i * cols + j] != want;
      }
    CHECK(bad == 0, "large regions of %d back (round %d): %ld wrong elements", W, round, bad);
  }
  if (pooled) {
    ts_pool_free(a);
    ts_pool_free(got);
    ts_pool_free(back);
  } else {
    free(a);
    free(got);
    free(back);
  }
  free(sr);
  free(peers);
}

/* Short runs against long ones (cma.c copies them through a staging buffer): rank r sends each
 * peer p rows of W int32 of its matrix a[R][size*W] (column block p; W = 192 gives runs of 768
 * bytes, W = 193 runs of 772 that straddle the staging buffer's 1 MiB), and p receives them as
 * runs of K int32 K + 256 apart (long runs, many of them), then sends them back the other way
 * (the far side now the short one). R*W*4 bytes a pair: more than one staging buffer's worth.
 * Element e of the pair's stream is a[i][p*W + j] with e = i*W + j, checked against the formula
 * for a, and after the round trip against a itself. */
static void test_staged_regions(ts_comm *world, int W) {
  enum { R = 2048, K = 2048, GAP = 256 };
  ts_error err;
  int64_t cols = (int64_t)size * W, per = (int64_t)R * W, nk = per / K;
  int32_t *a = malloc((size_t)(R * cols) * sizeof *a), *back = malloc((size_t)(R * cols) * 4);
  int32_t *got = calloc((size_t)(size * nk * (K + GAP)), sizeof *got);
  memset(back, 0xa5, (size_t)(R * cols) * 4); /* every byte the way back misses shows */
  ts_comm_region *sr = calloc(2 * (size_t)size, sizeof *sr), *rr = sr + size;
  int *peers = malloc((size_t)size * sizeof *peers);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < cols; j++)
      a[i * cols + j] = (int32_t)(rank * 1000000 + i * 1000 + j);
  for (int p = 0; p < size; p++) {
    peers[p] = p;
    sr[p] = (ts_comm_region){a + (int64_t)p * W, 2, 4, {R, W}, {cols * 4, 4}};
    rr[p] = (ts_comm_region){got + p * nk * (K + GAP), 2, 4, {nk, K}, {(K + GAP) * 4, 4}};
  }
  CHECK(ts_comm_exchange_regions(world, size, peers, sr, size, peers, rr, 13, &err) == TS_OK,
        "staged regions of %d there: %s", W, err.msg);
  long bad = 0, gaps = 0;
  for (int q = 0; q < size; q++)
    for (int64_t b = 0; b < nk; b++)
      for (int64_t k = 0; k < K + GAP; k++) {
        int32_t v = got[(q * nk + b) * (K + GAP) + k];
        int64_t e = b * K + k, i = e / W, j = e % W;
        if (k >= K)
          gaps += v != 0;
        else
          bad += v != (int32_t)(q * 1000000 + i * 1000 + rank * W + j);
      }
  CHECK(bad == 0 && gaps == 0, "staged regions of %d there: %ld wrong elements, %ld written gaps",
        W, bad, gaps);
  for (int p = 0; p < size; p++) { /* back: the long runs are the sender's now */
    ts_comm_region t = sr[p];
    sr[p] = rr[p];
    rr[p] = t;
    rr[p].base = back + (int64_t)p * W;
  }
  CHECK(ts_comm_exchange_regions(world, size, peers, sr, size, peers, rr, 14, &err) == TS_OK,
        "staged regions of %d back: %s", W, err.msg);
  CHECK(memcmp(a, back, (size_t)(R * cols) * sizeof *a) == 0,
        "staged regions of %d back: the round trip changed the matrix", W);
  free(a);
  free(back);
  free(got);
  free(sr);
  free(peers);
}

/* Staged copies that share one buffer (a tensor's column blocks for every peer) with one pair
 * that fails: the last rank's receive regions lie in memory nobody may write (PROT_NONE), so
 * each sender's copy to it fails while its copies to the others go on. Every rank reports an
 * error (the senders their own copy, the last rank its peers' statuses), and every other
 * rank's regions arrive whole. */
static void test_staged_fault(ts_comm *world) {
  enum { R = 2048, W = 192 };
  if (!ts_comm_single_copy(world) || size < 2)
    return;
  int64_t cols = (int64_t)size * W, per = (int64_t)R * W;
  int32_t *a = malloc((size_t)(R * cols) * sizeof *a);
  int32_t *got = malloc((size_t)(size * per) * sizeof *got);
  size_t hole_bytes = (size_t)(size * per) * sizeof *got;
  int32_t *hole = mmap(NULL, hole_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ts_comm_region *sr = calloc(2 * (size_t)size, sizeof *sr), *rr = sr + size;
  int *peers = malloc((size_t)size * sizeof *peers);
  CHECK(hole != MAP_FAILED, "mapping the hole");
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < cols; j++)
      a[i * cols + j] = (int32_t)(rank * 1000000 + i * 1000 + j);
  memset(got, 0xa5, (size_t)(size * per) * sizeof *got);
  bool bad = rank == size - 1;
  for (int p = 0; p < size; p++) {
    peers[p] = p;
    sr[p] = (ts_comm_region){a + (int64_t)p * W, 2, 4, {R, W}, {cols * 4, 4}};
    rr[p] = (ts_comm_region){(bad ? hole : got) + p * per, 1, 4, {per}, {4}};
  }
  ts_error err;
  int rc = ts_comm_exchange_regions(world, size, peers, sr, size, peers, rr, 15, &err);
  CHECK(rc != TS_OK, "a staged exchange into memory nobody may write succeeded on rank %d", rank);
  long wrong = 0;
  for (int q = 0; !bad && q < size; q++)
    for (int64_t e = 0; e < per; e++)
      wrong += got[q * per + e] != (int32_t)(q * 1000000 + (e / W) * 1000 + rank * W + e % W);
  CHECK(wrong == 0, "rank %d: %ld elements wrong beside the failed pairs", rank, wrong);
  munmap(hole, hole_bytes);
  free(a);
  free(got);
  free(sr);
  free(peers);
}

/* Shared buffers (cma.c): on wherever single copies are and TSHARD_SHARED_BUFFERS=1 asks for
 * them, off with 0; then the large regions again from pool buffers, which the receivers copy
 * from their mappings of the senders' arenas, and a reduce-scatter (any other way gives the
 * same bytes: the checks are the same). */
static void test_shared_buffers(ts_comm *world) {
  const char *env = getenv("TSHARD_SHARED_BUFFERS");
  bool on = ts_comm_shared_buffers(world);
  if (env && strcmp(env, "1") == 0)
    CHECK(on == ts_comm_single_copy(world), "shared buffers %d with single copies %d", on,
          ts_comm_single_copy(world));
  if (env && strcmp(env, "0") == 0)
    CHECK(!on, "shared buffers on with TSHARD_SHARED_BUFFERS=0");
  CHECK(!on || ts_comm_single_copy(world), "shared buffers without single copies");
  test_large_regions(world, 600, true);
  test_large_regions(world, 192, true);
  test_large_regions(world, 40, true);
  /* A reduce-scatter from pool buffers, in pieces of more than one read (4 MiB): each rank
   * reduces the others' blocks straight from its mappings where buffers are shared. */
  ts_error err;
  int *counts = malloc((size_t)size * sizeof *counts);
  int64_t total = 0, at = 0;
  for (int i = 0; i < size; i++)
    total += counts[i] = (3 << 19) + i * 7;
  int32_t *sb = ts_pool_alloc((size_t)total * 4, 0, NULL, NULL);
  int32_t *rb = ts_pool_alloc((size_t)counts[rank] * 4, 0, NULL, NULL);
  for (int64_t i = 0; i < total; i++)
    sb[i] = (int32_t)(i % 1000 + rank);
  CHECK(ts_comm_reduce_scatter(world, sb, rb, counts, TS_I32, TS_REDUCE_SUM, &err) == TS_OK,
        "reduce-scatter from pool buffers: %s", err.msg);
  for (int i = 0; i < rank; i++)
    at += counts[i];
  long bad = 0;
  for (int64_t k = 0; k < counts[rank]; k++)
    bad += rb[k] != (int32_t)(size * ((at + k) % 1000) + size * (size - 1) / 2);
  CHECK(bad == 0, "reduce-scatter from pool buffers: %ld wrong elements", bad);
  ts_pool_free(sb);
  ts_pool_free(rb);
  free(counts);
}

/* The chain broadcast: from every root, sizes around a piece and the window (more pieces than
 * the window holds), every rank gets the root's bytes; bad arguments are refused. */
static void test_bcast_chain(ts_comm *world) {
  const int64_t piece = 1000, sizes[] = {0, 1, 999, 1000, 1001, 70 * 1000 + 7};
  ts_error err;
  for (int root = 0; root < size; root++)
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      int64_t n = sizes[k];
      unsigned char *b = malloc((size_t)n + 1);
      for (int64_t i = 0; i < n; i++)
        b[i] = rank == root ? (unsigned char)(i * 7 + root) : 0xEE;
      int rc = ts_comm_bcast_chain(world, b, n, root, piece, &err);
      CHECK(rc == TS_OK, "chain from %d, %lld bytes: %s", root, (long long)n, err.msg);
      long bad = 0;
      for (int64_t i = 0; i < n; i++)
        bad += b[i] != (unsigned char)(i * 7 + root);
      CHECK(bad == 0, "chain from %d, %lld bytes: %ld wrong", root, (long long)n, bad);
      free(b);
    }
  char one;
  CHECK(ts_comm_bcast_chain(world, &one, 1, size, piece, &err) == TS_INVALID_ARGUMENT,
        "a root beyond the comm accepted");
  CHECK(ts_comm_bcast_chain(world, &one, -1, 0, piece, &err) == TS_INVALID_ARGUMENT,
        "a negative size accepted");
}

/* Doorbells: every rank of this one-node job has one (unless TSHARD_DOORBELLS=0, when nothing
 * rings and waits only nap). A ring of the rank itself, then a message passed around the ring
 * of ranks, each announced by its sender's ring: every hop ends long before one 20 s nap, so no
 * wait ran its nap out. A futex wait may end without a ring (a signal, or the late wake of a ring
 * whose count was read before the wait): the waiter tests again, as the engine's waits do. */
static void test_doorbells(ts_world *w) {
  const char *env = getenv("TSHARD_DOORBELLS");
  bool off = env && strcmp(env, "0") == 0;
  CHECK(ts_world_bells_local(w) == !off, "bells_local %d with TSHARD_DOORBELLS=%s",
        ts_world_bells_local(w), env ? env : "(unset)");
  if (off) {
    uint32_t s = ts_world_bell_seq(w);
    ts_world_bell_ring(w, rank); /* nothing to ring: no effect, no crash */
    CHECK(ts_world_bell_seq(w) == s, "a ring without bells changed the counter");
    return;
  }
  const int64_t long_nap = 20LL * 1000000000;
  uint32_t seen = ts_world_bell_seq(w);
  ts_world_bell_ring(w, rank);
  ts_world_bell_wait(w, seen, long_nap); /* rung already: returns at once */
  CHECK(ts_world_bell_seq(w) != seen, "own ring not seen");
  ts_world_bell_ring(w, -1); /* out of range: ignored */
  ts_world_bell_ring(w, size);
  if (size < 2)
    return;
  MPI_Comm comm = ts_comm_handle(ts_world_comm(w));
  MPI_Barrier(comm);
  int token = -1, next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (int hop = 0; hop < 3; hop++) {
    if (rank == 0) {
      token = hop;
      MPI_Send(&token, 1, MPI_INT, next, 77, comm);
      ts_world_bell_ring(w, next);
    }
    int waits = 0;
    double t0 = now_s(CLOCK_MONOTONIC);
    for (;;) {
      uint32_t s = ts_world_bell_seq(w);
      int flag = 0;
      MPI_Iprobe(prev, 77, comm, &flag, MPI_STATUS_IGNORE);
      if (!flag)
        MPI_Iprobe(prev, 77, comm, &flag, MPI_STATUS_IGNORE);
      if (flag || ++waits > 1000)
        break;
      ts_world_bell_wait(w, s, long_nap);
    }
    double took = now_s(CLOCK_MONOTONIC) - t0;
    CHECK(took < 10.0, "hop %d: %.1f s, as long as a nap: a wait was not rung", hop, took);
    CHECK(waits <= 1000, "hop %d: %d waits without the message", hop, waits);
    MPI_Recv(&token, 1, MPI_INT, prev, 77, comm, MPI_STATUS_IGNORE);
    CHECK(token == hop, "hop %d: token %d", hop, token);
    if (rank != 0) {
      MPI_Send(&token, 1, MPI_INT, next, 77, comm);
      ts_world_bell_ring(w, next);
    }
  }
}

/* Many regions per pair (ts_comm_exchange_many): to each peer p (itself included), rank r sends
 * three regions in order: a transposed 3x5 int32 plane (small: one message per pair with the
 * others of the pair), an empty one, and rows of a large 64x600 int32 block (single copies where
 * they work, or that pair's one message); `big` leaves the large ones out (every pair small). The
 * receiver's regions have the same element counts in other strides; every element is checked. */
static void test_exchange_many(ts_comm *world, bool big) {
  enum { R = 64, W = 600 };
  ts_error err;
  int per = 3, n = size * per;
  int32_t *small_src = malloc((size_t)size * 15 * sizeof(int32_t));
  int32_t *small_dst = calloc((size_t)size * 15, sizeof(int32_t));
  int32_t *large_src = malloc((size_t)size * R * W * sizeof(int32_t));
  int32_t *large_dst = calloc((size_t)size * R * W, sizeof(int32_t));
  ts_comm_region *sr = calloc(2 * (size_t)n, sizeof *sr), *rr = sr + n;
  int *speer = malloc(2 * (size_t)n * sizeof *speer), *rpeer = speer + n;
  for (int p = 0; p < size; p++) {
    for (int k = 0; k < 15; k++)
      small_src[p * 15 + k] = rank * 1000 + p * 100 + k;
    for (int k = 0; k < R * W; k++)
      large_src[(int64_t)p * R * W + k] = rank * 10000000 + p * 100000 + k;
    /* sends: plane p read column-major; an empty region; block p row-major */
    sr[p * per] = (ts_comm_region){small_src + p * 15, 2, 4, {5, 3}, {4, 20}};
    sr[p * per + 1] = (ts_comm_region){NULL, 1, 4, {0}, {4}};
    sr[p * per + 2] =
        (ts_comm_region){big ? large_src + (int64_t)p * R * W : NULL, 1, 4, {big ? R * W : 0}, {4}};
    rr[p * per] = (ts_comm_region){small_dst + p * 15, 1, 4, {15}, {4}};
    rr[p * per + 1] = (ts_comm_region){NULL, 1, 4, {0}, {4}};
    rr[p * per + 2] = (ts_comm_region){big ? large_dst + (int64_t)p * R * W : NULL,
                                       2,
                                       4,
                                       {big ? W : 0, R},
                                       {4, W * 4}}; /* transposed */
    for (int k = 0; k < per; k++)
      speer[p * per + k] = rpeer[p * per + k] = p;
  }
  CHECK(ts_comm_exchange_many(world, n, speer, sr, n, rpeer, rr, 21, &err) == TS_OK, "%s", err.msg);
  long bad = 0;
  for (int p = 0; p < size; p++) {
    for (int j = 0; j < 5; j++) /* small_dst[p][j*3 + i] = src_p[rank][i][j] (column-major) */
      for (int i = 0; i < 3; i++)
        bad += small_dst[p * 15 + j * 3 + i] != p * 1000 + rank * 100 + i * 5 + j;
    for (int64_t c = 0; big && c < W; c++)
      for (int64_t r = 0; r < R; r++)
        bad += large_dst[(int64_t)p * R * W + r * W + c] !=
               (int32_t)(p * 10000000 + rank * 100000 + c * R + r);
  }
  CHECK(bad == 0, "exchange_many (large %d): %ld wrong elements", big, bad);
  int bad_peer[1] = {size};
  ts_comm_region one = {small_src, 1, 4, {1}, {4}};
  CHECK(ts_comm_exchange_many(world, 1, bad_peer, &one, 0, NULL, NULL, 22, &err) ==
                TS_INVALID_ARGUMENT &&
            strstr(err.msg, "names rank"),
        "a peer outside the communicator: %s", err.msg);
  free(small_src), free(small_dst), free(large_src), free(large_dst), free(sr), free(speer);
}

/* Many small regions per pair whose bytes together exceed a single copy's threshold (as a batch
 * of many small tensors makes): 60 regions of 600 int32 to each peer, every other one read
 * column-wise, received transposed; every element checked. */
static void test_exchange_many_small(ts_comm *world) {
  enum { K = 60, R = 20, W = 30 };
  ts_error err;
  int n = size * K;
  int64_t per = (int64_t)R * W;
  int32_t *src = malloc((size_t)(n * per) * sizeof *src), *dst = calloc((size_t)(n * per), 4);
  ts_comm_region *sr = calloc(2 * (size_t)n, sizeof *sr), *rr = sr + n;
  int *peer = malloc((size_t)n * sizeof *peer);
  for (int p = 0; p < size; p++)
    for (int k = 0; k < K; k++) {
      int i = p * K + k;
      int32_t *s = src + i * per, *d = dst + i * per;
      for (int64_t e = 0; e < per; e++)
        s[e] = (int32_t)(rank * 1000000 + p * 10000 + k * 100 + e % 97);
      peer[i] = p;
      sr[i] = (ts_comm_region){s, 1, 4, {per}, {4}};
      rr[i] = k % 2 ? (ts_comm_region){d, 2, 4, {R, W}, {W * 4, 4}}
                    : (ts_comm_region){d, 2, 4, {W, R}, {4, W * 4}}; /* transposed */
    }
  CHECK(ts_comm_exchange_many(world, n, peer, sr, n, peer, rr, 23, &err) == TS_OK, "%s", err.msg);
  long bad = 0;
  for (int p = 0; p < size; p++)
    for (int k = 0; k < K; k++) {
      const int32_t *d = dst + (p * K + k) * per;
      for (int64_t e = 0; e < per; e++) { /* element e of p's region, where it landed here */
        int64_t at = k % 2 ? e : e / R + (e % R) * W;
        bad += d[at] != (int32_t)(p * 1000000 + rank * 10000 + k * 100 + e % 97);
      }
    }
  CHECK(bad == 0, "exchange_many of many small regions: %ld wrong elements", bad);
  free(src), free(dst), free(sr), free(peer);
}

/* One relayed agreement: rank s offers len(s, d) bytes to every rank d (itself too) when it
 * offers at all; checks what arrived against what every rank sent, or that nothing did. */
static size_t relay_len(int s, int d, size_t big) {
  return big ? big : (size_t)(8 * ((s + 2 * d) % 5 + 1));
}
static unsigned char relay_byte(int s, int d, size_t k) { return (unsigned char)(s * 16 + d + k); }

static void relay_case(ts_comm *world, const char *what, bool offer, int status, size_t big,
                       int only_to, bool want_relayed) {
  int rank = ts_comm_rank(world), size = ts_comm_size(world);
  ts_comm_relay_part *parts = calloc((size_t)size, sizeof *parts);
  unsigned char *data = malloc((size_t)size * (big ? big : 40) + 1);
  size_t at = 0;
  int np = 0;
  for (int d = 0; d < size; d++) {
    if (only_to >= 0 && d != only_to)
      continue;
    size_t n = relay_len(rank, d, big);
    parts[np++] = (ts_comm_relay_part){.rank = d, .bytes = (int64_t)n};
    for (size_t k = 0; k < n; k++)
      data[at++] = relay_byte(rank, d, k);
  }
  ts_comm_relay r = {.offer = offer, .nout = np, .out = parts, .out_data = data};
  ts_error local, err;
  ts_error_clear(&local);
  if (status != TS_OK)
    ts_error_set(&local, status, "relay refused here");
  int64_t values[2] = {rank, -rank};
  int rc = ts_comm_agree_relay(world, status, &local, values, 2, &r, &err);
  int want_rc = TS_OK;
  MPI_Allreduce(&status, &want_rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(rc == want_rc, "%s: agreement %d, expected %d (%s)", what, rc, want_rc, err.msg);
  CHECK(rc != TS_OK || (values[0] == size - 1 && values[1] == 0), "%s: values %lld %lld", what,
        (long long)values[0], (long long)values[1]);
  CHECK(r.relayed == want_relayed, "%s: relayed %d, expected %d", what, r.relayed, want_relayed);
  if (r.relayed) {
    int expect = 0;
    for (int s = 0; s < size; s++)
      expect += only_to < 0 || only_to == rank;
    CHECK(r.nin == expect, "%s: %d parts arrived, expected %d", what, r.nin, expect);
    const char *p = r.in_data;
    long bad = 0;
    for (int i = 0; i < r.nin; i++) {
      int s = r.in[i].rank;
      CHECK(s == i && r.in[i].bytes == (int64_t)relay_len(s, rank, big),
            "%s: part %d from %d of %lld bytes", what, i, s, (long long)r.in[i].bytes);
      for (int64_t k = 0; k < r.in[i].bytes; k++)
        bad += (unsigned char)p[k] != relay_byte(s, rank, (size_t)k);
      p += r.in[i].bytes;
    }
    CHECK(bad == 0, "%s: %ld wrong bytes relayed", what, bad);
  } else {
    CHECK(r.nin == 0 && r.in_msg == NULL, "%s: pieces without a relay", what);
  }
  ts_comm_relay_clear(&r);
  CHECK(r.in_msg == NULL && !r.relayed, "%s: cleared", what);
  free(parts);
  free(data);
}

/* The relay of small pieces on an agreement: every rank offers (relayed, contents checked), one
 * rank offers nothing or fails (nothing relayed anywhere), a verdict that would grow past the
 * limit, an offer past the limit. */
static void test_agree_relay(ts_comm *world) {
  int rank = ts_comm_rank(world), size = ts_comm_size(world);
  bool many = size > 1;
  relay_case(world, "all offer", true, TS_OK, 0, -1, many);
  relay_case(world, "all offer again", true, TS_OK, 0, -1, many);
  relay_case(world, "last rank keeps its pieces", rank != size - 1, TS_OK, 0, -1, false);
  relay_case(world, "last rank fails", true, rank == size - 1 ? TS_LIMIT : TS_OK, 0, -1, false);
  /* 1500 bytes from every rank (rank 0 too) to rank 0: two fit a verdict, three do not. */
  relay_case(world, "one destination", true, TS_OK, 1500, 0, size == 2);
  relay_case(world, "offer past the limit", true, TS_OK, TS_COMM_RELAY_MESSAGE_MAX, 0, false);
  relay_case(world, "all offer after the refusals", true, TS_OK, 0, -1, many);
}

int main(int argc, char **argv) {
  ts_world *w = NULL;
  ts_error err;
  CHECK(ts_world_init(&argc, &argv, 99, &w, &err) == TS_INVALID_ARGUMENT, "bad level");
  if (ts_world_init(&argc, &argv, MPI_THREAD_SERIALIZED, &w, &err) != TS_OK) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  rank = ts_world_rank(w);
  size = ts_world_size(w);
  CHECK(ts_world_thread_level(w) >= MPI_THREAD_SERIALIZED, "thread level");
  ts_comm *world = ts_world_comm(w);
  CHECK(ts_comm_size(world) == size && ts_comm_rank(world) == rank, "world comm");
  test_doorbells(w);
  test_bcast_chain(world);
  test_exchange_many(world, false);
  test_exchange_many(world, true);
  test_exchange_many_small(world);

  /* Groups: reversed world order, cached on the second call. */
  int *rev = malloc((size_t)size * sizeof *rev);
  for (int i = 0; i < size; i++)
    rev[i] = size - 1 - i;
  ts_comm *g1 = NULL, *g2 = NULL;
  CHECK(ts_comm_group(w, rev, size, &g1, &err) == TS_OK, "%s", err.msg);
  int cached = ts_world_cached_comms(w);
  CHECK(ts_comm_group(w, rev, size, &g2, &err) == TS_OK && g1 == g2, "cache");
  CHECK(ts_world_cached_comms(w) == cached, "cache grew");
  CHECK(ts_comm_rank(g1) == size - 1 - rank && ts_comm_world_rank(g1, 0) == size - 1,
        "group order");
  int bad[1] = {size};
  CHECK(ts_comm_group(w, bad, 1, &g2, &err) == TS_INVALID_ARGUMENT, "rank outside");
  if (size > 1) {
    int other[1] = {(rank + 1) % size};
    CHECK(ts_comm_group(w, other, 1, &g2, &err) == TS_INVALID_ARGUMENT && strstr(err.msg, "not in"),
          "not a member");
  }

  /* Mesh lines of a [2, size/2] mesh. */
  if (size % 2 == 0) {
    int64_t ms[2] = {2, size / 2};
    int *ranks = malloc((size_t)size * sizeof *ranks);
    for (int i = 0; i < size; i++)
      ranks[i] = i;
    ts_comm *l0 = NULL, *l1 = NULL;
    CHECK(ts_comm_mesh_line(w, 2, ms, ranks, 0, &l0, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_comm_mesh_line(w, 2, ms, ranks, 1, &l1, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_comm_size(l0) == 2 && ts_comm_rank(l0) == rank / (size / 2), "line 0");
    CHECK(ts_comm_size(l1) == size / 2 && ts_comm_rank(l1) == rank % (size / 2), "line 1");
    int64_t v = rank;
    CHECK(ts_comm_allreduce_i64(l1, &v, 1, TS_COMM_SUM, &err) == TS_OK, "%s", err.msg);
    int64_t base = (rank / (size / 2)) * (size / 2), want = 0;
    for (int i = 0; i < size / 2; i++)
      want += base + i;
    CHECK(v == want, "line sum %lld want %lld", (long long)v, (long long)want);
    CHECK(ts_comm_mesh_line(w, 2, ms, ranks, 2, &l0, &err) == TS_INVALID_ARGUMENT, "bad dim");
    free(ranks);
  }

  /* Typed reductions: every dtype and op against a direct computation (avg combines as the
   * sum: its division is the executor's). */
  for (int dt = 0; dt < TS_DTYPE_COUNT; dt++)
    for (int op = 0; op < TS_REDUCE_COUNT; op++) {
      size_t es = ts_dtype_size((ts_dtype)dt);
      unsigned char buf[16 * 5], want[16 * 5];
      bool prod = op == TS_REDUCE_PROD;
      for (int i = 0; i < 5; i++) {
        /* complex: the imaginary part (r + i) % 3 - 1; Gaussian integers stay exact */
        double cre = 0, cim = 0;
        for (int r = 0; r < size; r++) {
          double x = prod ? 1 + (r * 3 + i) % 2 : (r * 3 + i) % 7, y = (r + i) % 3 - 1;
          double re = r == 0 ? x : prod ? cre * x - cim * y : cre + x;
          cim = r == 0 ? y : prod ? cre * y + cim * x : cim + y;
          cre = re;
        }
        /* element i on rank r: (r * 3 + i) % 7, small enough to be exact; for prod 1 or 2 */
        double best = 0;
        bool any = false, all = true; /* bool's or and and */
        for (int r = 0; r < size; r++) {
          double x = prod ? 1 + (r * 3 + i) % 2 : (r * 3 + i) % 7;
          any = any || x != 0;
          all = all && x != 0;
          best = r == 0                                       ? x
                 : op == TS_REDUCE_SUM || op == TS_REDUCE_AVG ? best + x
                 : prod                                       ? best * x
                 : op == TS_REDUCE_MAX                        ? fmax(best, x)
                                                              : fmin(best, x);
        }
        double mine = prod ? 1 + (rank * 3 + i) % 2 : (rank * 3 + i) % 7;
        float f = (float)mine, fb = (float)best;
        switch ((ts_dtype)dt) {
        case TS_F32:
          memcpy(buf + i * es, &f, 4);
          memcpy(want + i * es, &fb, 4);
          break;
        case TS_F64:
          memcpy(buf + i * es, &mine, 8);
          memcpy(want + i * es, &best, 8);
          break;
        case TS_F16: {
          uint16_t h = ts_f32_to_f16(f), hb = ts_f32_to_f16(fb);
          memcpy(buf + i * es, &h, 2);
          memcpy(want + i * es, &hb, 2);
          break;
        }
        case TS_BF16: {
          uint16_t h = ts_f32_to_bf16(f), hb = ts_f32_to_bf16(fb);
          memcpy(buf + i * es, &h, 2);
          memcpy(want + i * es, &hb, 2);
          break;
        }
        case TS_I8:
        case TS_U8:
          buf[i] = (unsigned char)mine;
          want[i] = (unsigned char)best;
          break;
        case TS_BOOL: /* sum and max: or, min and prod: and */
          buf[i] = mine != 0;
          want[i] = op == TS_REDUCE_MIN || prod ? all : any;
          break;
        case TS_I16:
        case TS_U16:
        case TS_U32:
        case TS_U64: /* small non-negative: exact */
          ts_convert(buf + i * es, (ts_dtype)dt, &mine, TS_F64, 1);
          ts_convert(want + i * es, (ts_dtype)dt, &best, TS_F64, 1);
          break;
        case TS_I32: {
          int32_t a = (int32_t)mine, b = (int32_t)best;
          memcpy(buf + i * es, &a, 4);
          memcpy(want + i * es, &b, 4);
          break;
        }
        case TS_I64: {
          int64_t a = (int64_t)mine, b = (int64_t)best;
          memcpy(buf + i * es, &a, 8);
          memcpy(want + i * es, &b, 8);
          break;
        }
        case TS_C64: {
          float a[2] = {f, (float)((rank + i) % 3 - 1)}, b[2] = {(float)cre, (float)cim};
          memcpy(buf + i * es, a, 8);
          memcpy(want + i * es, b, 8);
          break;
        }
        case TS_C128: {
          double a[2] = {mine, (double)((rank + i) % 3 - 1)}, b[2] = {cre, cim};
          memcpy(buf + i * es, a, 16);
          memcpy(want + i * es, b, 16);
          break;
        }
        default: break;
        }
      }
      if (ts_dtype_is_complex((ts_dtype)dt) && (op == TS_REDUCE_MAX || op == TS_REDUCE_MIN)) {
        CHECK(ts_comm_allreduce(world, NULL, buf, 5, (ts_dtype)dt, (ts_reduce_op)op, &err) ==
                      TS_BAD_DTYPE &&
                  strstr(err.msg, ts_dtype_name((ts_dtype)dt)) &&
                  strstr(err.msg, "sum, avg and prod"),
              "allreduce %s of %s", ts_reduce_name((ts_reduce_op)op), ts_dtype_name((ts_dtype)dt));
        continue;
      }
      if (dt == TS_F8_E4M3 || dt == TS_F8_E5M2) { /* no reductions: refused, naming the dtype */
        CHECK(ts_comm_allreduce(world, NULL, buf, 5, (ts_dtype)dt, (ts_reduce_op)op, &err) ==
                      TS_BAD_DTYPE &&
                  strstr(err.msg, ts_dtype_name((ts_dtype)dt)),
              "allreduce %s", ts_dtype_name((ts_dtype)dt));
        continue;
      }
      if (op == TS_REDUCE_AVG && !ts_dtype_is_float((ts_dtype)dt) &&
          !ts_dtype_is_complex((ts_dtype)dt)) { /* avg: the float and complex dtypes only */
        CHECK(ts_comm_allreduce(world, NULL, buf, 5, (ts_dtype)dt, (ts_reduce_op)op, &err) ==
                      TS_BAD_DTYPE &&
                  strstr(err.msg, ts_dtype_name((ts_dtype)dt)),
              "allreduce avg of %s", ts_dtype_name((ts_dtype)dt));
        continue;
      }
      CHECK(ts_comm_allreduce(world, NULL, buf, 5, (ts_dtype)dt, (ts_reduce_op)op, &err) == TS_OK,
            "%s", err.msg);
      CHECK(memcmp(buf, want, 5 * es) == 0, "allreduce %s %s", ts_dtype_name((ts_dtype)dt),
            ts_reduce_name((ts_reduce_op)op));
    }

  /* 8-bit sums wrap like a C cast in both collectives (Open MPI 4.1's vectorized MPI_SUM
   * saturates them): 256 elements a rank, long enough for its vector paths. */
  {
    enum { N8 = 256 };
    uint8_t *u = malloc((size_t)N8 * (size_t)size), ru[N8];
    int8_t *i8 = malloc((size_t)N8 * (size_t)size), ri[N8];
    int *counts = malloc((size_t)size * sizeof *counts);
    for (int k = 0; k < N8 * size; k++) {
      u[k] = (uint8_t)(200 - (k % 7));
      i8[k] = (int8_t)(100 + (k % 5));
    }
    for (int k = 0; k < size; k++)
      counts[k] = N8;
    CHECK(ts_comm_allreduce(world, NULL, u, N8, TS_U8, TS_REDUCE_SUM, &err) == TS_OK, "%s",
          err.msg);
    CHECK(ts_comm_allreduce(world, NULL, i8, N8, TS_I8, TS_REDUCE_SUM, &err) == TS_OK, "%s",
          err.msg);
    for (int k = 0; k < N8; k++) {
      CHECK(u[k] == (uint8_t)((unsigned)(200 - (k % 7)) * (unsigned)size), "u8 allreduce %d: %d", k,
            u[k]);
      CHECK(i8[k] == (int8_t)(uint8_t)((unsigned)(100 + (k % 5)) * (unsigned)size),
            "i8 allreduce %d: %d", k, i8[k]);
    }
    for (int k = 0; k < N8 * size; k++) {
      u[k] = (uint8_t)(200 - (k % 7));
      i8[k] = (int8_t)(100 + (k % 5));
    }
    CHECK(ts_comm_reduce_scatter(world, u, ru, counts, TS_U8, TS_REDUCE_SUM, &err) == TS_OK, "%s",
          err.msg);
    CHECK(ts_comm_reduce_scatter(world, i8, ri, counts, TS_I8, TS_REDUCE_SUM, &err) == TS_OK, "%s",
          err.msg);
    for (int k = 0; k < N8; k++) {
      int g = rank * N8 + k;
      CHECK(ru[k] == (uint8_t)((unsigned)(200 - (g % 7)) * (unsigned)size),
            "u8 reduce_scatter %d: %d", k, ru[k]);
      CHECK(ri[k] == (int8_t)(uint8_t)((unsigned)(100 + (g % 5)) * (unsigned)size),
            "i8 reduce_scatter %d: %d", k, ri[k]);
    }
    free(u);
    free(i8);
    free(counts);
  }

  /* Reduce-scatter of i32 sums: rank r gets r + 1 elements. */
  {
    int *counts = malloc((size_t)size * sizeof *counts), total = 0;
    for (int i = 0; i < size; i++)
      total += counts[i] = i + 1;
    int32_t *sb = malloc((size_t)total * sizeof *sb), rb[16];
    for (int i = 0; i < total; i++)
      sb[i] = i + rank;
    CHECK(ts_comm_reduce_scatter(world, sb, rb, counts, TS_I32, TS_REDUCE_SUM, &err) == TS_OK, "%s",
          err.msg);
    int start = rank * (rank + 1) / 2;
    for (int k = 0; k <= rank; k++)
      CHECK(rb[k] == (start + k) * size + size * (size - 1) / 2, "reduce_scatter element %d", k);
    free(sb);
    free(counts);
  }

  /* Agreement: OK everywhere, then a failure on the last rank seen by all. */
  ts_error local;
  ts_error_clear(&local);
  CHECK(ts_comm_agree(world, TS_OK, &local, &err) == TS_OK, "agree ok");
  int st = TS_OK;
  if (rank == size - 1)
    st = ts_error_set(&local, TS_LIMIT, "quota exceeded here");
  char want[96];
  snprintf(want, sizeof want, "rank %d: quota exceeded here", size - 1);
  CHECK(ts_comm_agree(world, st, &local, &err) == TS_LIMIT && strcmp(err.msg, want) == 0, "%s",
        err.msg);
  /* A late rank (busy 300 ms first): the others get its error and wait without holding a core
   * (their thread's CPU time stays well below the time they waited). */
  if (size > 1) {
    double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
    if (rank == size - 1)
      while (now_s(CLOCK_MONOTONIC) - w0 < 0.3) {
      }
    CHECK(ts_comm_agree(world, st, &local, &err) == TS_LIMIT && strcmp(err.msg, want) == 0,
          "late: %s", err.msg);
    double waited = now_s(CLOCK_MONOTONIC) - w0, cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    if (rank != size - 1)
      CHECK(waited > 0.1 && cpu < 0.3 * waited, "waited %.3f s for the late rank, %.3f s on CPU",
            waited, cpu);
  }

  /* Exchange around a ring; allgatherv and bcast. */
  int64_t token = rank * 10, got = -1;
  int to = (rank + 1) % size, from = (rank + size - 1) % size;
  void *sbufs[1] = {&token}, *rbufs[1] = {&got};
  int64_t nb[1] = {sizeof token};
  CHECK(ts_comm_exchange(world, 1, &to, sbufs, nb, 1, &from, rbufs, nb, 5, &err) == TS_OK, "%s",
        err.msg);
  CHECK(got == from * 10, "ring got %lld", (long long)got);
  int64_t *all = calloc((size_t)size, sizeof *all), *cnt = malloc(2 * (size_t)size * 8);
  for (int i = 0; i < size; i++) {
    cnt[i] = 8;
    cnt[size + i] = 8 * i;
  }
  all[rank] = rank + 100;
  CHECK(ts_comm_allgatherv(world, all, cnt, cnt + size, &err) == TS_OK, "%s", err.msg);
  for (int i = 0; i < size; i++)
    CHECK(all[i] == i + 100, "allgatherv %d", i);
  int64_t b = rank == 0 ? 4242 : 0;
  CHECK(ts_comm_bcast(world, &b, 8, 0, &err) == TS_OK && b == 4242, "bcast");

  /* MPI errors come back as TS_MPI with MPI's text and the call site. */
  int rc = ts_comm_bcast(world, &b, 8, size + 3, &err);
  CHECK(rc == TS_MPI && strstr(err.msg, "MPI_Bcast") && strstr(err.msg, "collectives.c:"),
        "error mapping: %d %s", rc, err.msg);
  CHECK(ts_comm_bcast(world, &b, -1, 0, &err) == TS_INVALID_ARGUMENT, "negative bcast");
  test_agree_relay(world);
  test_regions(world);
  test_large_regions(world, 600, false);
  test_large_regions(world, 192, false);
  test_large_regions(world, 40, false);
  test_staged_regions(world, 192);
  test_staged_regions(world, 193);
  test_staged_fault(world);
  test_shared_buffers(world);
  free(all);
  free(cnt);
  free(rev);

  long tf = 0, tc = 0;
  MPI_Allreduce(&failures, &tf, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&checks, &tc, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("test_comm: %d ranks, %ld checks, %ld failures\n", size, tc, tf);
  CHECK(ts_world_finalize(&w, &err) == TS_OK, "finalize");
  CHECK(w == NULL, "finalize clears");
  return tf ? 1 : 0;
}
