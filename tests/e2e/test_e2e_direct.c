/* test_e2e_direct.c - whole puts and gets naming the client's own memory, end to end: real
 * daemons (3 ranks on this node) driven through libtshard, every result compared with the
 * harness's reference data.
 *
 * Checks: one request per put and per get (no segment attached, nothing through the socket) for
 * row, column, uneven and replicated attributes and a transposed local layout ("ba"); tensors the
 * direct path does not apply to (a blocked layout, a partial placement) still correct through
 * the asking rank's staging; every rank's slice put and got back through its own client, in
 * the stored layout (read straight into a new slice, written straight from it) and in another
 * (through staging and the strided copy), one request each; a put from a buffer whose middle page
 * is unmapped (both ends readable, so only the copy fails, on one rank) refused on every rank with
 * the tensor as it was and the new slices given back; a get into a read-only buffer and into a
 * buffer of the wrong size refused, the daemons serving on; and daemons started with
 * TSHARD_DIRECT=0, which answer NO_DIRECT once, after which the client goes through its segment
 * with the same results. */
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Operations rank r's daemon answered. */
static uint64_t ops(tshard_client *c) {
  tshard_stats s;
  memset(&s, 0, sizeof s);
  TSE_OK(c, tshard_stats_get(c, &s));
  return s.operations;
}

/* Creates name [rows, cols] f32 with attr and layout tag, puts the reference of seed and gets it
 * back; returns the answers the put and the get took together (the stats call excluded). */
static uint64_t roundtrip(tshard_client *c, const char *name, int64_t rows, int64_t cols,
                          const char *attr, const char *tag, uint64_t seed) {
  int64_t shape[2] = {rows, cols}, lo[2] = {0, 0};
  size_t bytes = (size_t)(rows * cols) * 4;
  uint8_t *data = malloc(bytes), *back = malloc(bytes);
  tse_fill_box("f32", seed, 2, shape, lo, shape, data);
  memset(back, 0xee, bytes);
  TSE_OK(c, tshard_create(c, name, "f32", 2, shape, attr, tag, NULL));
  uint64_t before = ops(c);
  TSE_OK(c, tshard_put(c, name, data, bytes, NULL));
  TSE_OK(c, tshard_get(c, name, back, bytes));
  uint64_t answers = ops(c) - before - 1;
  TSE_CHECK(tse_compare_box(name, "f32", seed, 2, shape, lo, shape, back) == 0,
            "%s (%s, %s) "
            "differs",
            name, attr, tag ? tag : "row-major");
  TSE_OK(c, tshard_drop(c, name, NULL));
  free(data);
  free(back);
  return answers;
}

static void attributes(tshard_client **cl) {
  static const struct {
    const char *attr, *tag;
    int64_t rows, cols;
  } cases[] = {
      {"mesh=[3] placements=[S(0)]", NULL, 300, 257},
      {"mesh=[3] placements=[S(1)]", NULL, 64, 1000},
      {"mesh=[3] placements=[S(0)] splits={0:[10,0,90]}", NULL, 100, 33},
      {"mesh=[3] placements=[R]", NULL, 50, 40},
      {"mesh=[3] placements=[S(1)]", "ba", 70, 99},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t n = roundtrip(cl[i % 3], "direct", cases[i].rows, cases[i].cols, cases[i].attr,
                           cases[i].tag, 100 + i);
    TSE_CHECK(n == 2, "%s: the put and the get took %llu answers (want one each)", cases[i].attr,
              (unsigned long long)n);
  }
  /* Not for the direct path: staged at the asking rank, still one request each. */
  uint64_t n = roundtrip(cl[1], "blocked", 40, 30, "mesh=[3] placements=[S(1)]", "Ba4b", 201);
  TSE_CHECK(n == 2, "blocked: %llu answers", (unsigned long long)n);
  n = roundtrip(cl[2], "partial", 33, 20, "mesh=[3] placements=[P(sum)]", NULL, 202);
  TSE_CHECK(n == 2, "partial: %llu answers", (unsigned long long)n);
}

/* Slices: stored row-major and Ba4b, each put and got in both layouts by every rank. */
static void slices(tshard_client **cl) {
  static const char *stored[] = {NULL, "Ba4b"}, *sent[] = {"", "Ba4b"};
  for (int s = 0; s < 2; s++) {
    TSE_OK(cl[0],
           tshard_create(cl[0], "sl", "f32", 2, (int64_t[]){90, 30},
                         "mesh=[3] placements=[S(1)] splits={1:[7,13,10]}", stored[s], NULL));
    for (int k = 0; k < 2; k++) {
      uint64_t before[3] = {ops(cl[0]), ops(cl[1]), ops(cl[2])};
      tse_slices_roundtrip(cl, "sl", 90, 30, sent[k], 400 + 2 * s + k);
      for (int r = 1; r < 3; r++) /* rank 0 also answered the describe and the whole get */
        TSE_CHECK(ops(cl[r]) - before[r] - 1 == 2,
                  "stored %s, sent '%s': rank %d's slice took "
                  "%llu answers (want one put and one get)",
                  stored[s] ? stored[s] : "row-major", sent[k], r,
                  (unsigned long long)(ops(cl[r]) - before[r] - 1));
    }
    TSE_OK(cl[0], tshard_drop(cl[0], "sl", NULL));
  }
  /* A slice from a buffer with a hole: refused, the slice as it was. */
  int64_t shape[2] = {300, 30}; /* rank 1's slice: 100 rows, 12000 bytes over three pages */
  TSE_OK(cl[0],
         tshard_create(cl[0], "sl", "f32", 2, shape, "mesh=[3] placements=[S(0)]", NULL, NULL));
  tse_slices_roundtrip(cl, "sl", 300, 30, "", 410);
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = 100 * 30 * 4;
  uint8_t *holey = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TSE_CHECK(holey != MAP_FAILED && bytes > 2 * page && bytes <= 3 * page, "mmap, page size");
  if (holey != MAP_FAILED) {
    munmap(holey + page, page);
    int rc = tshard_put_slice(cl[1], "sl", NULL, holey, bytes);
    TSE_CHECK(rc != TS_OK && strstr(tshard_last_message(cl[1]), "client's memory"),
              "a slice from a buffer with a hole: %s: %s", tshard_status_name(rc),
              tshard_last_message(cl[1]));
    munmap(holey, 3 * page);
  }
  uint8_t *whole = malloc((size_t)300 * 30 * 4);
  TSE_OK(cl[0], tshard_get(cl[0], "sl", whole, (size_t)300 * 30 * 4));
  TSE_CHECK(tse_compare_box("sl after the refused slice", "f32", 410, 2, shape, (int64_t[]){0, 0},
                            shape, whole) == 0,
            "the refused slice put changed the tensor");
  free(whole);
  TSE_OK(cl[0], tshard_drop(cl[0], "sl", NULL));
}

/* Rank 0's memory in use, once it is back to `base` (bounded wait: frees follow the answers). */
static void expect_memory(tshard_client *c, uint64_t base, const char *what) {
  tshard_stats s;
  int64_t deadline = now_ms() + 30000;
  do {
    memset(&s, 0, sizeof s);
    TSE_OK(c, tshard_stats_get(c, &s));
  } while (s.memory_in_use != base && now_ms() < deadline);
  TSE_CHECK(s.memory_in_use == base, "%s: memory in use %llu, before %llu", what,
            (unsigned long long)s.memory_in_use, (unsigned long long)base);
}

/* [rows, 4096] f32 rows of 16 KiB, S(0), stored under layout tag (NULL: row-major): rank r
 * copies rows r*rows/3.. of the client's buffer. Column-major slices ("ba") are read and written
 * an element at a time against the client's rows, in one run: the copies that go through a
 * staging buffer (comm/cma.c). */
static void faults(tshard_client **cl, int64_t rows, const char *tag) {
  const int64_t shape[2] = {rows, 4096}, lo[2] = {0, 0};
  size_t bytes = (size_t)rows * 4096 * 4, page = (size_t)sysconf(_SC_PAGESIZE);
  TSE_OK(cl[0],
         tshard_create(cl[0], "victim", "f32", 2, shape, "mesh=[3] placements=[S(0)]", tag, NULL));
  uint8_t *ref = malloc(bytes), *back = malloc(bytes);
  tse_fill_box("f32", 71, 2, shape, lo, shape, ref);
  TSE_OK(cl[0], tshard_put(cl[0], "victim", ref, bytes, NULL));
  tshard_stats base;
  memset(&base, 0, sizeof base);
  TSE_OK(cl[0], tshard_stats_get(cl[0], &base));

  /* Both ends mapped, a page of rank 1's row not: the probe passes, rank 1's copy fails. */
  uint8_t *holey = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TSE_CHECK(holey != MAP_FAILED, "mmap");
  if (holey == MAP_FAILED)
    return;
  tse_fill_box("f32", 72, 2, shape, lo, shape, holey);
  munmap(holey + bytes / 2 - bytes / 2 % page, page);
  int rc = tshard_put(cl[0], "victim", holey, bytes, NULL);
  TSE_CHECK(rc != TS_OK && strstr(tshard_last_message(cl[0]), "client's memory"),
            "a put from a buffer with a hole: %s: %s", tshard_status_name(rc),
            tshard_last_message(cl[0]));
  for (int r = 0; r < 3; r++) { /* every rank kept its slice */
    memset(back, 0, bytes);
    TSE_OK(cl[r], tshard_get(cl[r], "victim", back, bytes));
    TSE_CHECK(
        tse_compare_box("victim after the failed put", "f32", 71, 2, shape, lo, shape, back) == 0,
        "the failed put changed the tensor (seen from rank %d)", r);
  }
  expect_memory(cl[0], base.memory_in_use, "after the failed put");
  /* A get into the same buffer fails on the hole; the tensor is untouched anyway. */
  rc = tshard_get(cl[1], "victim", holey, bytes);
  TSE_CHECK(rc != TS_OK, "a get into a buffer with a hole succeeded");
  munmap(holey, bytes);

  /* A read-only buffer: the daemons cannot write the get there. */
  uint8_t *ro = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TSE_CHECK(ro != MAP_FAILED, "mmap");
  if (ro != MAP_FAILED) {
    rc = tshard_get(cl[2], "victim", ro, bytes);
    TSE_CHECK(rc != TS_OK && strstr(tshard_last_message(cl[2]), "client's memory"),
              "a get into read-only memory: %s: %s", tshard_status_name(rc),
              tshard_last_message(cl[2]));
    munmap(ro, bytes);
  }
  /* The wrong size: refused before anything moves. */
  rc = tshard_get(cl[0], "victim", back, bytes - 4);
  TSE_CHECK(rc == TS_BAD_SHAPE, "a get into a buffer 4 bytes short: %s: %s", tshard_status_name(rc),
            tshard_last_message(cl[0]));
  rc = tshard_put(cl[0], "victim", ref, bytes + 4, NULL);
  TSE_CHECK(rc != TS_OK, "a put of 4 bytes too many succeeded");

  /* The daemons serve on. */
  tse_fill_box("f32", 73, 2, shape, lo, shape, ref);
  TSE_OK(cl[2], tshard_put(cl[2], "victim", ref, bytes, NULL));
  memset(back, 0, bytes);
  TSE_OK(cl[1], tshard_get(cl[1], "victim", back, bytes));
  TSE_CHECK(tse_compare_box("victim after the faults", "f32", 73, 2, shape, lo, shape, back) == 0,
            "put and get after the faults differ");
  TSE_OK(cl[0], tshard_drop(cl[0], "victim", NULL));
  free(ref);
  free(back);
}

/* Daemons that refuse (TSHARD_DIRECT=0 where they start): NO_DIRECT once, then the segment. */
static void refused(void) {
  tse_job off;
  setenv("TSHARD_DIRECT", "0", 1);
  int started = tse_start(&off, 2, NULL, 120);
  unsetenv("TSHARD_DIRECT");
  TSE_CHECK(started == 0, "daemons with TSHARD_DIRECT=0 did not start");
  if (started != 0)
    return;
  tshard_client *c = tse_connect(&off, 0);
  if (c) {
    uint64_t n = roundtrip(c, "seg", 128, 100, "mesh=[2] placements=[S(1)]", NULL, 301);
    /* the attach, the put and the get (the refusal is answered before the engine counts it;
     * the get does not ask again) */
    TSE_CHECK(n == 3, "with a refusing daemon: %llu answers (want 3)", (unsigned long long)n);
    n = roundtrip(c, "seg", 64, 64, "mesh=[2] placements=[S(0)]", NULL, 302);
    TSE_CHECK(n == 2, "after the refusal: %llu answers (want 2)", (unsigned long long)n);
    tshard_close(&c);
  }
  tse_stop(&off);
}

int main(void) {
  unsetenv("TSHARD_DIRECT");
  unsetenv("TSHARD_SHM");
  tse_job job;
  if (tse_start(&job, 3, NULL, 120) != 0)
    return 1;
  tshard_client *cl[3] = {tse_connect(&job, 0), tse_connect(&job, 1), tse_connect(&job, 2)};
  if (!cl[0] || !cl[1] || !cl[2]) {
    tse_stop(&job);
    return 1;
  }
  attributes(cl);
  slices(cl);
  faults(cl, 3, NULL);
  faults(cl, 12, "ba");
  for (int r = 0; r < 3; r++)
    tshard_close(&cl[r]);
  tse_stop(&job);
  refused();
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
