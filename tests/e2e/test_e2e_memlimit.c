/* test_e2e_memlimit.c - the memory limit counts everything a daemon holds: stored slices, the
 * staging of puts in progress, get copies and the executor's buffers, and is never exceeded.
 *
 * Daemons of 2 ranks with --memory-limit 16M. Part one, step by step: with 6 MiB of slices stored
 * on each rank, a put of a 4 MiB tensor is left in progress on each rank (first chunk sent on a
 * raw connection: 4 MiB of staging); a create of 8 MiB more a rank, which fits beside the slices
 * but not beside that staging, must be refused with TS_LIMIT (the old accounting let it through:
 * the store's quota did not see put staging), and so must a reshard whose target does not fit.
 * After one put completes and the other is abandoned (their staging freed into the pool's cache)
 * the same reshard must succeed (the cache gives way), the data of the put and of the resharded
 * tensor must read back exactly, and the create must now fit. Part two, concurrently: clients put
 * and get whole tensors from both ranks while others create, reshard and drop tensors that fit
 * only part of the time; every answer must be OK or TS_LIMIT, a poller checks that no daemon's
 * memory in use (nor in use + cached) is ever above the limit, the pool's peak stays within it,
 * the data read back is exact, and once every client has gone nothing is left in use. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tshard.pb-c.h"

#define MiB ((uint64_t)1 << 20)
#define LIMIT (16 * MiB)

static tse_job job;

static bool io_full(int fd, void *buf, size_t n, bool out) {
  uint8_t *p = buf;
  while (n > 0) {
    struct pollfd pfd = {fd, out ? POLLOUT : POLLIN, 0};
    if (poll(&pfd, 1, 60000) <= 0)
      return false;
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k <= 0)
      return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

/* Sends a request and reads its answer; returns the status, or -1 when none came. */
static int raw_call(int fd, Tshard__Request *req) {
  size_t n = tshard__request__get_packed_size(req);
  uint8_t *b = malloc(n + 4);
  if (!b)
    return -1;
  b[0] = (uint8_t)n, b[1] = (uint8_t)(n >> 8), b[2] = (uint8_t)(n >> 16), b[3] = (uint8_t)(n >> 24);
  tshard__request__pack(req, b + 4);
  bool sent = io_full(fd, b, n + 4, true);
  free(b);
  uint8_t h[4];
  if (!sent || !io_full(fd, h, 4, false))
    return -1;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  uint8_t *body = malloc(len ? len : 1);
  int status = -1;
  if (body && io_full(fd, body, len, false)) {
    Tshard__Response *r = tshard__response__unpack(NULL, len, body);
    if (r) {
      status = r->status;
      tshard__response__free_unpacked(r, NULL);
    }
  }
  free(body);
  return status;
}

/* One chunk of a whole-tensor put on a raw connection. */
static int put_chunk(int fd, const char *name, const uint8_t *data, uint64_t offset, size_t len,
                     uint64_t total) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
  p.name = (char *)name;
  p.offset = offset;
  p.total_bytes = total;
  p.data.len = len;
  p.data.data = (uint8_t *)data + offset;
  req.id = offset + 1;
  req.op_case = TSHARD__REQUEST__OP_PUT;
  req.put = &p;
  return raw_call(fd, &req);
}

static void check_within_limit(tshard_client *c, const char *when) {
  tshard_stats s;
  TSE_OK(c, tshard_stats_get(c, &s));
  TSE_CHECK(s.memory_limit == LIMIT, "%s: limit %llu", when, (unsigned long long)s.memory_limit);
  TSE_CHECK(s.memory_in_use <= LIMIT && s.memory_in_use + s.pool_cached <= LIMIT &&
                s.pool_peak <= LIMIT,
            "%s: in use %llu, cached %llu, peak %llu above the limit %llu", when,
            (unsigned long long)s.memory_in_use, (unsigned long long)s.pool_cached,
            (unsigned long long)s.pool_peak, (unsigned long long)LIMIT);
}

static const int64_t p_shape[1] = {1 << 20}; /* f32: 4 MiB whole, 2 MiB a rank */
static const int64_t tiny_shape[1] = {4};

/* A get keeps its copy until the connection's next get: a get of the tiny tensor releases it. */
static void release_copy(tshard_client *c) {
  float t[4];
  TSE_OK(c, tshard_get(c, "tiny", t, sizeof t));
}

static void part_one(tshard_client *c0, tshard_client *c1) {
  const uint64_t total = 4 * MiB;
  int64_t lo[1] = {0};
  int64_t r_shape[1] = {(int64_t)(2 * MiB)}; /* f32: 8 MiB whole */
  int64_t c_shape[1] = {(int64_t)(8 * MiB / 4)};
  uint8_t *ref = malloc(total), *rref = malloc(8 * MiB), *back = malloc(8 * MiB);
  int fd0 = -1, fd1 = -1;
  if (!ref || !rref || !back) {
    TSE_CHECK(0, "no memory for the test's buffers");
    goto out;
  }
  TSE_OK(c0, tshard_create(c0, "p", "f32", 1, p_shape, "mesh=[2] placements=[S(0)]", NULL, NULL));
  TSE_OK(c0, tshard_create(c0, "r", "f32", 1, r_shape, "mesh=[2] placements=[S(0)]", NULL, NULL));
  TSE_OK(c0,
         tshard_create(c0, "tiny", "f32", 1, tiny_shape, "mesh=[2] placements=[R]", NULL, NULL));
  tse_fill_box("f32", 11, 1, p_shape, lo, p_shape, ref);
  tse_fill_box("f32", 12, 1, r_shape, lo, r_shape, rref);
  TSE_OK(c1, tshard_put(c1, "r", rref, 8 * MiB, NULL));
  /* A put in progress on each rank: 2 + 4 MiB of slices + 4 MiB of staging = 10 MiB there. */
  fd0 = tse_raw_connect(&job, 0);
  fd1 = tse_raw_connect(&job, 1);
  if (fd0 < 0 || fd1 < 0)
    goto out;
  TSE_CHECK(put_chunk(fd0, "p", ref, 0, MiB, total) == TS_OK, "first chunk on rank 0");
  TSE_CHECK(put_chunk(fd1, "p", ref, 0, MiB, total) == TS_OK, "first chunk on rank 1");
  /* 8 MiB of replicated slices: 6 + 8 fits the limit, 6 + 4 + 8 does not. */
  int rc = tshard_create(c0, "c", "f32", 1, c_shape, "mesh=[2] placements=[R]", NULL, NULL);
  TSE_CHECK(rc == TS_LIMIT,
            "create beside a put in progress: %s (%s); the put's staging must "
            "count",
            tshard_status_name(rc), tshard_last_message(c0));
  TSE_CHECK(strstr(tshard_last_message(c0), "memory limit") != NULL, "message: %s",
            tshard_last_message(c0));
  if (rc == TS_OK)
    TSE_OK(c0, tshard_drop(c0, "c", NULL));
  check_within_limit(c0, "after the refused create (rank 0)");
  check_within_limit(c1, "after the refused create (rank 1)");
  /* 4 MiB a rank to replicated (8 MiB a rank): 10 + 8 > 16. */
  rc = tshard_reshard(c0, "r", "mesh=[2] placements=[R]", NULL);
  TSE_CHECK(rc == TS_LIMIT, "reshard beside a put in progress: %s (%s)", tshard_status_name(rc),
            tshard_last_message(c0));
  check_within_limit(c0, "after the refused reshard (rank 0)");
  check_within_limit(c1, "after the refused reshard (rank 1)");
  /* The put on rank 0 completes; the one on rank 1 is abandoned by a chunk out of order. */
  for (uint64_t off = MiB; off < total; off += MiB)
    TSE_CHECK(put_chunk(fd0, "p", ref, off, MiB, total) == TS_OK, "chunk at %llu",
              (unsigned long long)off);
  TSE_CHECK(put_chunk(fd1, "p", ref, 2 * MiB, MiB, total) == TS_INVALID_ARGUMENT,
            "a chunk out of order was accepted");
  /* The freed staging sits in the pools' caches; the reshard fits once the cache gives way. */
  TSE_OK(c0, tshard_reshard(c0, "r", "mesh=[2] placements=[R]", NULL));
  check_within_limit(c0, "after the reshard (rank 0)");
  check_within_limit(c1, "after the reshard (rank 1)");
  TSE_OK(c0, tshard_reshard(c0, "r", "mesh=[2] placements=[S(0)]", NULL));
  memset(back, 0xee, 8 * MiB);
  TSE_OK(c0, tshard_get(c0, "r", back, 8 * MiB));
  TSE_CHECK(memcmp(back, rref, 8 * MiB) == 0, "the resharded tensor does not read back");
  release_copy(c0);
  memset(back, 0xee, total);
  TSE_OK(c1, tshard_get(c1, "p", back, total));
  TSE_CHECK(memcmp(back, ref, total) == 0, "the put's data does not read back");
  release_copy(c1);
  /* With the room back, the create that was refused fits. */
  TSE_OK(c0, tshard_create(c0, "c", "f32", 1, c_shape, "mesh=[2] placements=[R]", NULL, NULL));
  check_within_limit(c0, "after the create (rank 0)");
  TSE_OK(c0, tshard_drop(c0, "c", NULL));
  TSE_OK(c0, tshard_drop(c0, "r", NULL));
out:
  if (fd0 >= 0)
    close(fd0);
  if (fd1 >= 0)
    close(fd1);
  free(ref);
  free(rref);
  free(back);
}

/* ---------------------------------------------------------------------------------------------
 * Part two: concurrent clients */

static volatile int stop_polling;
static volatile int over_limit_seen;

static void *poller(void *arg) {
  (void)arg;
  tshard_client *c[2] = {tse_connect(&job, 0), tse_connect(&job, 1)};
  while (c[0] && c[1] && !__atomic_load_n(&stop_polling, __ATOMIC_ACQUIRE)) {
    for (int r = 0; r < 2; r++) {
      tshard_stats s;
      if (tshard_stats_get(c[r], &s) != TS_OK)
        continue;
      if (s.memory_in_use > LIMIT || s.memory_in_use + s.pool_cached > LIMIT) {
        fprintf(stderr, "rank %d: in use %llu, cached %llu above %llu\n", r,
                (unsigned long long)s.memory_in_use, (unsigned long long)s.pool_cached,
                (unsigned long long)LIMIT);
        __atomic_store_n(&over_limit_seen, 1, __ATOMIC_RELEASE);
      }
    }
  }
  tshard_close(&c[0]);
  tshard_close(&c[1]);
  return NULL;
}

/* Puts of a 4 MiB tensor of its own from rank `id` % 2, each read back. */
static void *putter(void *arg) {
  int id = (int)(intptr_t)arg;
  tshard_client *c = tse_connect(&job, id % 2);
  uint8_t *ref = malloc(4 * MiB), *back = malloc(4 * MiB);
  char name[16];
  snprintf(name, sizeof name, "put%d", id);
  int64_t lo[1] = {0};
  if (c && ref && back) {
    for (int it = 0; it < 6; it++) {
      tse_fill_box("f32", (uint64_t)(100 + id * 10 + it), 1, p_shape, lo, p_shape, ref);
      int rc = tshard_put(c, name, ref, 4 * MiB, NULL);
      TSE_CHECK(rc == TS_OK || rc == TS_LIMIT, "put %s: %s (%s)", name, tshard_status_name(rc),
                tshard_last_message(c));
      if (rc != TS_OK)
        continue;
      rc = tshard_get(c, name, back, 4 * MiB);
      TSE_CHECK(rc == TS_OK || rc == TS_LIMIT, "get %s: %s (%s)", name, tshard_status_name(rc),
                tshard_last_message(c));
      if (rc == TS_OK)
        TSE_CHECK(memcmp(back, ref, 4 * MiB) == 0, "%s iteration %d does not read back", name, it);
    }
  }
  free(ref);
  free(back);
  tshard_close(&c);
  return NULL;
}

/* Creates, reshards and drops tensors of 3 MiB a rank that fit only part of the time. */
static void *shaper(void *arg) {
  int id = (int)(intptr_t)arg;
  tshard_client *c = tse_connect(&job, id % 2);
  int64_t shape[2] = {1024, 1536}; /* f32: 6 MiB whole */
  for (int it = 0; c && it < 6; it++) {
    char name[16];
    snprintf(name, sizeof name, "s%d.%d", id, it);
    int rc = tshard_create(c, name, "f32", 2, shape, "mesh=[2] placements=[S(0)]", NULL, NULL);
    TSE_CHECK(rc == TS_OK || rc == TS_LIMIT, "create %s: %s (%s)", name, tshard_status_name(rc),
              tshard_last_message(c));
    if (rc != TS_OK)
      continue;
    rc = tshard_reshard(c, name, "mesh=[2] placements=[S(1)]", NULL);
    TSE_CHECK(rc == TS_OK || rc == TS_LIMIT, "reshard %s: %s (%s)", name, tshard_status_name(rc),
              tshard_last_message(c));
    TSE_OK(c, tshard_drop(c, name, NULL));
  }
  tshard_close(&c);
  return NULL;
}

static void part_two(tshard_client *c0, tshard_client *c1) {
  for (int id = 0; id < 2; id++) {
    char name[16];
    snprintf(name, sizeof name, "put%d", id);
    TSE_OK(c0,
           tshard_create(c0, name, "f32", 1, p_shape, "mesh=[2] placements=[S(0)]", NULL, NULL));
  }
  pthread_t poll_t, t[4];
  pthread_create(&poll_t, NULL, poller, NULL);
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, putter, (void *)(intptr_t)i);
  for (int i = 0; i < 2; i++)
    pthread_create(&t[2 + i], NULL, shaper, (void *)(intptr_t)i);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  __atomic_store_n(&stop_polling, 1, __ATOMIC_RELEASE);
  pthread_join(poll_t, NULL);
  TSE_CHECK(!over_limit_seen, "a daemon held more than its memory limit");
  check_within_limit(c0, "after the concurrent clients (rank 0)");
  check_within_limit(c1, "after the concurrent clients (rank 1)");
  for (int id = 0; id < 2; id++) {
    char name[16];
    snprintf(name, sizeof name, "put%d", id);
    TSE_OK(c0, tshard_drop(c0, name, NULL));
  }
  TSE_OK(c0, tshard_drop(c0, "p", NULL));
  TSE_OK(c0, tshard_drop(c0, "tiny", NULL));
}

/* Once every client has gone and every tensor is dropped, nothing is in use (a bounded wait for
 * the daemons to see the closed connections free their get copies). */
static void check_empty(void) {
  for (int r = 0; r < 2; r++) {
    tshard_client *c = tse_connect(&job, r);
    tshard_stats s;
    memset(&s, 0, sizeof s);
    for (int i = 0; c && i < 400; i++) {
      if (tshard_stats_get(c, &s) != TS_OK || s.memory_in_use == 0)
        break;
      usleep(25000);
    }
    TSE_CHECK(s.memory_in_use == 0 && s.pool_staging == 0 && s.stored_bytes == 0,
              "rank %d still holds %llu bytes (%llu staging, %llu stored)", r,
              (unsigned long long)s.memory_in_use, (unsigned long long)s.pool_staging,
              (unsigned long long)s.stored_bytes);
    TSE_CHECK(s.pool_peak <= LIMIT, "rank %d: peak %llu above the limit", r,
              (unsigned long long)s.pool_peak);
    tshard_close(&c);
  }
}

int main(void) {
  /* The clients' shared-memory segments are charged to the same account (test_e2e_shm covers
   * them); here every byte in use must be the staging and slices this test accounts for. */
  setenv("TSHARD_SHM", "0", 1);
  const char *extra[] = {"--memory-limit", "16M", "--staging", "1M", NULL};
  if (tse_start(&job, 2, extra, 120) != 0)
    return 1;
  tshard_client *c0 = tse_connect(&job, 0), *c1 = tse_connect(&job, 1);
  if (c0 && c1) {
    part_one(c0, c1);
    part_two(c0, c1);
  } else {
    TSE_CHECK(0, "no clients");
  }
  tshard_close(&c0);
  tshard_close(&c1);
  check_empty();
  int code = tse_stop(&job) == 0 && tse_failures == 0 ? 0 : 1;
  return tse_finish(&job, code);
}
