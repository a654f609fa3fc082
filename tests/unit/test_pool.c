/* test_pool.c - the buffer pool (kernels/pool/pool.c): reuse of cached buffers by size class, the
 * cache cap, the idle release (with the pages really given back: the process's resident size is
 * read from /proc/self/statm), the account (in use, staging, cached, peak, hits, misses), the
 * memory limit with staging counted and cached buffers given up to make room, misuse (a second
 * free of a cached buffer aborts) and concurrent use from several threads. Shared buffers
 * (ts_pool_share, arena.c): mapped buffers come from the memory file and another mapping of it
 * sees their bytes, huge-page and small buffers do not, freed extents lose their pages and are
 * merged back (the whole arena free again), a full arena falls back to private mappings, and
 * the idle release and the threads run again with the arena. Each test runs in its own process
 * (Check forks), so each starts with an empty pool. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "check_main.h"
#include "ts_pool.h"

#define MiB ((size_t)1 << 20)

static void configure(int64_t limit, int64_t cache_cap, int64_t idle_ms) {
  ts_pool_config c = {limit, cache_cap, idle_ms, false};
  ts_pool_configure(&c);
}

static ts_pool_stats stats(void) {
  ts_pool_stats s;
  ts_pool_get_stats(&s);
  return s;
}

/* Resident bytes of this process. */
static size_t resident(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, res = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &size, &res) != 2)
      res = 0;
    fclose(f);
  }
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i += 4093)
    p[i] = (unsigned char)(i * 13 + seed);
  if (n)
    p[n - 1] = (unsigned char)seed;
}

static bool filled(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i += 4093)
    if (p[i] != (unsigned char)(i * 13 + seed) && i != n - 1)
      return false;
  return n == 0 || p[n - 1] == (unsigned char)seed;
}

START_TEST(test_reuse_by_class) {
  configure(0, 1LL << 30, 60000);
  unsigned char *a = ts_pool_alloc(3 * MiB, 0, "a", NULL);
  ck_assert_ptr_nonnull(a);
  ck_assert_uint_eq((uintptr_t)a % TS_BUFFER_HUGE_BYTES, 0);
  size_t cap = ts_pool_capacity(a);
  ck_assert_uint_ge(cap, 3 * MiB);
  ck_assert_uint_le(cap, 3 * MiB + 3 * MiB / 4);
  fill(a, 3 * MiB, 1);
  ts_pool_stats s = stats();
  ck_assert_uint_eq(s.in_use, cap);
  ck_assert_uint_eq(s.misses, 1);
  ck_assert_uint_eq(s.hits, 0);
  ts_pool_free(a);
  s = stats();
  ck_assert_uint_eq(s.in_use, 0);
  ck_assert_uint_eq(s.cached, cap);
  ck_assert_uint_eq(s.buffers_cached, 1);
  /* A slightly different size of the same class gets the same buffer back. */
  unsigned char *b = ts_pool_alloc(3 * MiB - 12345, TS_POOL_STAGING, "b", NULL);
  ck_assert_ptr_eq(b, a);
  fill(b, 3 * MiB - 12345, 2);
  ck_assert(filled(b, 3 * MiB - 12345, 2));
  s = stats();
  ck_assert_uint_eq(s.hits, 1);
  ck_assert_uint_eq(s.cached, 0);
  ck_assert_uint_eq(s.in_use, cap);
  ck_assert_uint_eq(s.staging, cap);
  /* Twice the size is another class: a fresh mapping, and the cached one stays cached. */
  ts_pool_free(b);
  unsigned char *c = ts_pool_alloc(7 * MiB, 0, "c", NULL);
  ck_assert_ptr_nonnull(c);
  ck_assert_ptr_ne(c, a);
  s = stats();
  ck_assert_uint_eq(s.misses, 2);
  ck_assert_uint_eq(s.cached, cap);
  ck_assert_uint_eq(s.staging, 0);
  ts_pool_free(c);
  ck_assert_uint_eq(stats().in_use, 0);
}
END_TEST

START_TEST(test_small_buffers_heap) {
  configure(0, 1LL << 30, 60000);
  static const size_t sizes[] = {0, 1, 63, 64, 65, 480, 4096, 100000, TS_POOL_MAP_MIN - 1};
  void *p[sizeof sizes / sizeof sizes[0]];
  size_t total = 0;
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    p[k] = ts_pool_alloc(sizes[k], 0, NULL, NULL);
    ck_assert_ptr_nonnull(p[k]);
    ck_assert_uint_eq((uintptr_t)p[k] % 64, 0);
    fill(p[k], sizes[k], (unsigned)k);
    total += sizes[k];
  }
  /* Heap buffers count exactly the bytes asked for and are never cached. */
  ck_assert_uint_eq(stats().in_use, total);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    ck_assert(filled(p[k], sizes[k], (unsigned)k));
    ts_pool_free(p[k]);
  }
  ts_pool_stats s = stats();
  ck_assert_uint_eq(s.in_use, 0);
  ck_assert_uint_eq(s.cached, 0);
  ck_assert_uint_eq(s.hits + s.misses, 0);
  ts_pool_free(NULL);
}
END_TEST

START_TEST(test_cache_cap) {
  configure(0, (int64_t)(5 * MiB), 60000);
  void *p[3];
  for (int i = 0; i < 3; i++) {
    p[i] = ts_pool_alloc(2 * MiB, 0, NULL, NULL);
    ck_assert_ptr_nonnull(p[i]);
  }
  for (int i = 0; i < 3; i++)
    ts_pool_free(p[i]);
  ts_pool_stats s = stats();
  ck_assert_uint_eq(s.cached, 4 * MiB); /* two kept, the oldest released */
  ck_assert_uint_eq(s.buffers_cached, 2);
  ck_assert_uint_eq(s.released, 2 * MiB);
  /* A buffer larger than the cap is never cached. */
  void *big = ts_pool_alloc(6 * MiB, 0, NULL, NULL);
  ck_assert_ptr_nonnull(big);
  ts_pool_free(big);
  s = stats();
  ck_assert_uint_eq(s.cached, 4 * MiB);
  ck_assert_uint_eq(s.released, 8 * MiB);
  /* Lowering the cap releases what is over it; a cap of 0 keeps nothing. */
  configure(0, 0, 60000);
  s = stats();
  ck_assert_uint_eq(s.cached, 0);
  ck_assert_uint_eq(s.released, 12 * MiB);
  void *q = ts_pool_alloc(2 * MiB, 0, NULL, NULL);
  ts_pool_free(q);
  ck_assert_uint_eq(stats().cached, 0);
}
END_TEST

/* Mappings are pre-faulted when made (resident before anyone writes them), and the idle release
 * gives the pages back to the OS. */
static void run_idle_release(void) {
  configure(0, 1LL << 30, 3600 * 1000);
  size_t n = 64 * MiB;
  size_t r0 = resident();
  unsigned char *a = ts_pool_alloc(n, 0, "a", NULL);
  ck_assert_ptr_nonnull(a);
  size_t r1 = resident();
  ck_assert_msg(r1 >= r0 + n - 4 * MiB, "not pre-faulted: %zu -> %zu bytes resident", r0, r1);
  fill(a, n, 3);
  ts_pool_free(a);
  /* Not idle for an hour yet: kept, and still resident. */
  ck_assert_int_eq(ts_pool_trim(false), 0);
  ck_assert_uint_ge(stats().cached, n);
  ck_assert_uint_ge(resident(), r0 + n - 4 * MiB);
  /* An idle period of 0: the next trim releases it, and the pages leave the process. */
  configure(0, 1LL << 30, 0);
  size_t r_cached = resident();
  ck_assert_int_eq(ts_pool_trim(false), 1);
  ts_pool_stats s = stats();
  ck_assert_uint_eq(s.cached, 0);
  ck_assert_uint_ge(s.released, n);
  size_t r2 = resident();
  ck_assert_msg(r2 + n - 4 * MiB <= r_cached, "pages not released: %zu resident, %zu before", r2,
                r_cached);
  /* trim(true) releases whatever the period. */
  configure(0, 1LL << 30, 3600 * 1000);
  void *b = ts_pool_alloc(4 * MiB, 0, NULL, NULL);
  ts_pool_free(b);
  ck_assert_int_eq(ts_pool_trim(false), 0);
  ck_assert_int_eq(ts_pool_trim(true), 1);
  ck_assert_uint_eq(stats().cached, 0);
}

START_TEST(test_prefault_and_idle_release) { run_idle_release(); }
END_TEST

START_TEST(test_accounting_and_peak) {
  configure(0, 1LL << 30, 60000);
  void *d = ts_pool_alloc(4 * MiB, 0, NULL, NULL);
  void *st = ts_pool_alloc(2 * MiB, TS_POOL_STAGING, NULL, NULL);
  void *h = ts_pool_alloc(1000, TS_POOL_STAGING, NULL, NULL);
  ck_assert(d && st && h);
  ts_pool_stats s = stats();
  ck_assert_uint_eq(s.in_use, 6 * MiB + 1000);
  ck_assert_uint_eq(s.staging, 2 * MiB + 1000);
  ck_assert_uint_eq(s.peak, 6 * MiB + 1000);
  ts_pool_set_staging(d, true); /* a slice that became a get copy */
  ck_assert_uint_eq(stats().staging, 6 * MiB + 1000);
  ts_pool_set_staging(d, false);
  ts_pool_set_staging(d, false); /* twice: no change */
  ck_assert_uint_eq(stats().staging, 2 * MiB + 1000);
  ts_pool_free(st);
  ts_pool_free(h);
  s = stats();
  ck_assert_uint_eq(s.in_use, 4 * MiB);
  ck_assert_uint_eq(s.staging, 0);
  ck_assert_uint_eq(s.cached, 2 * MiB);
  ck_assert_uint_eq(s.peak, 6 * MiB + 1000); /* in use + cached went no higher */
  ts_pool_reset_peak();
  ck_assert_uint_eq(stats().peak, 6 * MiB);
  ts_pool_free(d);
  s = stats();
  ck_assert_uint_eq(s.in_use, 0);
  ck_assert_uint_eq(s.cached, 6 * MiB);
}
END_TEST

/* The limit counts every kind (data and staging alike) and cached buffers: an allocation that
 * does not fit fails with TS_LIMIT and a message; cached buffers are given up to make room. */
START_TEST(test_limit_counts_staging) {
  configure((int64_t)(8 * MiB), 1LL << 30, 60000);
  ts_error err;
  void *data = ts_pool_alloc(5 * MiB, 0, "the slice", &err);
  ck_assert_ptr_nonnull(data);
  void *stage = ts_pool_alloc(4 * MiB, TS_POOL_STAGING, "the put's staging buffer", &err);
  ck_assert_ptr_null(stage);
  ck_assert_int_eq(err.code, TS_LIMIT);
  ck_assert_msg(strstr(err.msg, "the put's staging buffer needs 4194304 bytes") &&
                    strstr(err.msg, "memory limit of 8388608 bytes"),
                "%s", err.msg);
  ck_assert_int_eq(ts_pool_check(4 * MiB, "the gathered tensor", &err), TS_LIMIT);
  ck_assert_ptr_nonnull(strstr(err.msg, "the gathered tensor needs"));
  ck_assert_int_eq(ts_pool_check(3 * MiB, "x", &err), TS_OK);
  stage = ts_pool_alloc(3 * MiB, TS_POOL_STAGING, "staging", &err);
  ck_assert_ptr_nonnull(stage);
  /* Full now: even a small heap buffer is refused. */
  ck_assert_ptr_null(ts_pool_alloc(100, 0, "a small one", &err));
  ck_assert_int_eq(err.code, TS_LIMIT);
  ts_pool_stats s = stats();
  ck_assert_uint_le(s.in_use + s.cached, 8 * MiB);
  /* Freed: cached, then given up when a request of another class needs the room. */
  ts_pool_free(data);
  ck_assert_uint_eq(stats().cached, 5 * MiB);
  void *other = ts_pool_alloc(5 * MiB - 4096 * 3, 0, "other", &err); /* same class: reused */
  ck_assert_ptr_eq(other, data);
  ts_pool_free(other);
  void *big = ts_pool_alloc(7 * MiB / 2, 0, "big", &err); /* another class: the cache gives way */
  ck_assert_ptr_nonnull(big);
  s = stats();
  ck_assert_uint_eq(s.cached, 0);
  ck_assert_uint_le(s.in_use + s.cached, 8 * MiB);
  ck_assert_uint_le(s.peak, 8 * MiB);
  ts_pool_free(big);
  ts_pool_free(stage);
  /* Near the limit a mapping takes its page-rounded size, not its class's. */
  configure((int64_t)(5 * MiB + 8192), 1LL << 30, 60000);
  void *tight = ts_pool_alloc(5 * MiB + 1, 0, "tight", &err);
  ck_assert_msg(tight != NULL, "%s", err.msg);
  ck_assert_uint_eq(ts_pool_capacity(tight), 5 * MiB + 4096);
  ts_pool_free(tight);
  /* Larger than the whole limit, and larger than any memory. */
  ck_assert_ptr_null(ts_pool_alloc(6 * MiB, 0, "huge", &err));
  ck_assert_int_eq(err.code, TS_LIMIT);
  configure(0, 1LL << 30, 60000);
  ck_assert_ptr_null(ts_pool_alloc(SIZE_MAX - 10, 0, "absurd", &err));
  ck_assert_int_eq(err.code, TS_NO_MEMORY);
  ck_assert_uint_eq(stats().in_use, 0);
}
END_TEST

START_TEST(test_double_free_aborts) {
  configure(0, 1LL << 30, 60000);
  void *p = ts_pool_alloc(3 * MiB, 0, NULL, NULL);
  ts_pool_free(p);
  ts_pool_free(p); /* cached, not handed out: aborts */
}
END_TEST

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  size_t bad = 0;
  for (int i = 0; i < 200; i++) {
    size_t n = ((size_t)(i * 7 + seed) % 9 + 1) * MiB / 2 + (size_t)i * 100;
    unsigned char *p = ts_pool_alloc(n, (i & 1) ? TS_POOL_STAGING : 0, NULL, NULL);
    if (!p)
      return (void *)1;
    fill(p, n, seed + (unsigned)i);
    bad += !filled(p, n, seed + (unsigned)i);
    ts_pool_free(p);
    if (i % 50 == 0)
      ts_pool_trim(false);
  }
  return (void *)(uintptr_t)(bad != 0);
}

static void run_threads(void) {
  configure((int64_t)(64 * MiB), (int64_t)(16 * MiB), 0);
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)), 0);
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    ck_assert_ptr_null(r);
  }
  ts_pool_stats s = stats();
  ck_assert_uint_eq(s.in_use, 0);
  ck_assert_uint_eq(s.staging, 0);
  ck_assert_uint_le(s.cached, 16 * MiB);
  ck_assert_uint_le(s.peak, 64 * MiB);
  ck_assert_uint_gt(s.hits, 0);
  ts_pool_trim(true);
  ck_assert_uint_eq(stats().cached, 0);
}

START_TEST(test_threads) { run_threads(); }
END_TEST

/* A process that never calls ts_pool_trim still releases: a free expires what has been cached
 * for the idle period. */
START_TEST(test_free_expires_idle) {
  configure(0, 1LL << 30, 0);
  void *a = ts_pool_alloc(2 * MiB, 0, NULL, NULL), *b = ts_pool_alloc(3 * MiB, 0, NULL, NULL);
  ck_assert(a && b);
  ts_pool_free(a);
  ck_assert_uint_eq(stats().cached, 2 * MiB);
  ts_pool_free(b); /* a has been idle for the period (0 ms): released now */
  ts_pool_stats s = stats();
  ck_assert_uint_eq(s.cached, 3 * MiB);
  ck_assert_uint_eq(s.released, 2 * MiB);
  configure(0, 1LL << 30, 3600 * 1000);
  void *c = ts_pool_alloc(2 * MiB, 0, NULL, NULL);
  ts_pool_free(c); /* b was cached under the 0 ms period, but the period is an hour now */
  ck_assert_uint_eq(stats().cached, 5 * MiB);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Shared buffers */

static ts_pool_shared share(uint64_t size) {
  ts_pool_shared sh;
  ts_error err;
  ck_assert_msg(ts_pool_share(size, &sh, &err) == TS_OK, "%s", err.msg);
  return sh;
}

static bool in_arena(const ts_pool_shared *sh, const void *p, size_t n) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  return a >= sh->base && a + n <= sh->base + sh->size;
}

/* Bytes of the memory file that hold pages. */
static uint64_t file_bytes(int fd) {
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  return (uint64_t)st.st_blocks * 512;
}

START_TEST(test_shared_buffers) {
  configure(0, 1LL << 30, 3600 * 1000);
  ts_error err;
  ck_assert_int_eq(ts_pool_share(MiB, &(ts_pool_shared){0}, &err), TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "valid"));
  ts_pool_shared sh = share((uint64_t)16 << 30), again = share((uint64_t)1 << 30);
  ck_assert_int_eq(sh.fd, again.fd);
  ck_assert_uint_eq(sh.base, again.base);
  ck_assert_uint_eq(sh.size, (uint64_t)16 << 30);
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), all_free = sh.size - page;
  ck_assert_uint_eq(ts__arena_free_bytes(), all_free);
  unsigned char *a = ts_pool_alloc(3 * MiB, 0, "a", NULL);
  unsigned char *b = ts_pool_alloc(700 << 10, TS_POOL_STAGING, "b", NULL);
  unsigned char *h = ts_pool_alloc(3 * MiB, TS_POOL_HUGE, "h", NULL);
  unsigned char *s = ts_pool_alloc(100 << 10, 0, "s", NULL);
  ck_assert(a && b && h && s);
  ck_assert(in_arena(&sh, a, 3 * MiB) && in_arena(&sh, b, 700 << 10));
  ck_assert_uint_eq((uintptr_t)a % TS_BUFFER_HUGE_BYTES, 0);
  ck_assert_uint_eq((uintptr_t)b % page, 0);
  ck_assert(!in_arena(&sh, h, 1) && !in_arena(&sh, s, 1));     /* huge pages, the heap */
  ck_assert_uint_ge(file_bytes(sh.fd), 3 * MiB + (700 << 10)); /* pre-faulted in the file */
  fill(a, 3 * MiB, 5);
  fill(b, 700 << 10, 6);
  /* Another mapping of the file, as a peer process makes it, sees the same bytes. */
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", sh.fd);
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  unsigned char *view = mmap(NULL, (size_t)sh.size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
  close(fd);
  ck_assert(view != MAP_FAILED);
  ck_assert(filled(view + ((uintptr_t)a - sh.base), 3 * MiB, 5));
  ck_assert(filled(view + ((uintptr_t)b - sh.base), 700 << 10, 6));
  /* A cached buffer keeps its extent and pages; a released one gives both back. */
  ts_pool_free(a);
  ts_pool_free(b);
  ck_assert_uint_ge(file_bytes(sh.fd), 3 * MiB);
  unsigned char *a2 = ts_pool_alloc(3 * MiB, 0, "a2", NULL);
  ck_assert_ptr_eq(a2, a); /* from the cache */
  ts_pool_free(a2);
  ck_assert_int_eq(ts_pool_trim(true), 2);
  ck_assert_uint_lt(file_bytes(sh.fd), 64 << 10);
  ck_assert_uint_eq(ts__arena_free_bytes(), all_free); /* merged back whole */
  /* Extents of many sizes, given back in another order, merge back whole as well. */
  unsigned char *many[40];
  for (int i = 0; i < 40; i++) {
    size_t n = (size_t)(i % 7 + 1) * (300 << 10) + (size_t)i * 4096;
    many[i] = ts_pool_alloc(n, 0, NULL, NULL);
    ck_assert(many[i] && in_arena(&sh, many[i], n));
    fill(many[i], n, (unsigned)i);
  }
  for (int i = 0; i < 40; i++) {
    int k = (i * 17) % 40;
    size_t n = (size_t)(k % 7 + 1) * (300 << 10) + (size_t)k * 4096;
    ck_assert_msg(filled(many[k], n, (unsigned)k), "buffer %d overwritten by another", k);
    ts_pool_free(many[k]);
  }
  ts_pool_trim(true);
  ck_assert_uint_eq(ts__arena_free_bytes(), all_free);
  munmap(view, (size_t)sh.size);
  ts_pool_free(h);
  ts_pool_free(s);
}
END_TEST

/* A full arena: the buffer is a private mapping, and works the same. */
START_TEST(test_shared_arena_full) {
  configure(0, 0, 0);
  ts_pool_shared sh = share(8 * MiB);
  unsigned char *a = ts_pool_alloc(3 * MiB, 0, NULL, NULL);
  unsigned char *b = ts_pool_alloc(6 * MiB, 0, NULL, NULL);
  ck_assert(a && b);
  ck_assert(in_arena(&sh, a, 3 * MiB) && !in_arena(&sh, b, 1));
  fill(b, 6 * MiB, 9);
  ck_assert(filled(b, 6 * MiB, 9));
  ts_pool_free(a); /* no cache: released at once */
  ts_pool_free(b);
  ck_assert_uint_eq(stats().in_use, 0);
  ck_assert_uint_eq(ts__arena_free_bytes(), sh.size - (uint64_t)sysconf(_SC_PAGESIZE));
}
END_TEST

/* With every buffer asking for huge pages (the daemon's default): the shared ones still come
 * from the arena, and a kernel's TS_POOL_HUGE buffer never takes a cached shared one. */
START_TEST(test_shared_with_huge_config) {
  ts_pool_config c = {0, 1LL << 30, 3600 * 1000, true};
  ts_pool_configure(&c);
  ts_pool_shared sh = share((uint64_t)4 << 30);
  unsigned char *a = ts_pool_alloc(3 * MiB, 0, NULL, NULL);
  ck_assert(a && in_arena(&sh, a, 3 * MiB));
  ts_pool_free(a);
  unsigned char *k = ts_pool_alloc(3 * MiB, TS_POOL_HUGE, NULL, NULL);
  ck_assert(k && k != a && !in_arena(&sh, k, 1));
  unsigned char *b = ts_pool_alloc(3 * MiB, 0, NULL, NULL);
  ck_assert_ptr_eq(b, a); /* the cached shared one */
  ts_pool_free(k);
  ts_pool_free(b);
}
END_TEST

START_TEST(test_shared_idle_release) {
  share((uint64_t)4 << 30);
  run_idle_release();
}
END_TEST

START_TEST(test_shared_threads) {
  share((uint64_t)4 << 30);
  run_threads();
  ck_assert_uint_eq(ts__arena_free_bytes(), ((uint64_t)4 << 30) - (uint64_t)sysconf(_SC_PAGESIZE));
}
END_TEST

static Suite *pool_suite(void) {
  Suite *s = suite_create("pool");
  TCase *tc = tcase_create("pool");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_reuse_by_class);
  tcase_add_test(tc, test_small_buffers_heap);
  tcase_add_test(tc, test_cache_cap);
  tcase_add_test(tc, test_prefault_and_idle_release);
  tcase_add_test(tc, test_free_expires_idle);
  tcase_add_test(tc, test_accounting_and_peak);
  tcase_add_test(tc, test_limit_counts_staging);
  tcase_add_test_raise_signal(tc, test_double_free_aborts, SIGABRT);
  tcase_add_test(tc, test_threads);
  tcase_add_test(tc, test_shared_buffers);
  tcase_add_test(tc, test_shared_arena_full);
  tcase_add_test(tc, test_shared_with_huge_config);
  tcase_add_test(tc, test_shared_idle_release);
  tcase_add_test(tc, test_shared_threads);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return ts_run_suite(pool_suite()); }
