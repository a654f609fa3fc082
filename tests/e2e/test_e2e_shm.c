/* test_e2e_shm.c - same-node shared memory end to end: real daemons (2 ranks, a TCP listener with
 * a token) driven through libtshard.
 *
 * Checks against the reference data of the harness: a whole put and get through the segment
 * (one request each, where the stream would have taken many chunks), every rank's slice put and
 * got in a blocked layout through that rank's segment, transfers larger than the segment (in
 * chunks through its halves, whole and slices), a tensor with a partial placement (gathered by
 * the executor, then answered through the segment), TSHARD_SHM=0 and tshard_set_shm(c, 0) (the
 * stream path, same results), and the fallback over TCP (the segment refused there, the data
 * correct). A client process killed by SIGKILL while its put, then its get, is in progress
 * through the segment (synchronised with a pipe written by its progress callback, never with
 * sleeps): the daemon frees the segment and the transfer's buffers (memory in use and connections
 * back to where they were) and serves on. Whole puts and gets naming the client's own memory
 * (test_e2e_direct.c) are turned off here with TSHARD_DIRECT=0: this test is the segment's. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static tse_job job;
static int tcp_port;
static char token_path[300];
#define TOKEN "shm-test-token"

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whole put and get of a [rows, cols] f32 tensor with attribute attr through c; returns the
 * number of answers the put took (from the stats of c's daemon). */
static uint64_t roundtrip(tshard_client *c, const char *name, int64_t rows, int64_t cols,
                          const char *attr, uint64_t seed) {
  int64_t shape[2] = {rows, cols}, lo[2] = {0, 0};
  size_t bytes = (size_t)(rows * cols) * 4;
  uint8_t *data = malloc(bytes), *back = malloc(bytes);
  tse_fill_box("f32", seed, 2, shape, lo, shape, data);
  memset(back, 0xee, bytes);
  tshard_stats s0, s1;
  TSE_OK(c, tshard_create(c, name, "f32", 2, shape, attr, NULL, NULL));
  TSE_OK(c, tshard_stats_get(c, &s0));
  TSE_OK(c, tshard_put(c, name, data, bytes, NULL));
  TSE_OK(c, tshard_stats_get(c, &s1));
  TSE_OK(c, tshard_get(c, name, back, bytes));
  TSE_CHECK(tse_compare_box(name, "f32", seed, 2, shape, lo, shape, back) == 0, "%s differs", name);
  free(data);
  free(back);
  return s1.operations - s0.operations - 1;
}

/* ------------------------------------------------------------------------------------------
 * A client killed mid-transfer */

static int ready_fd = -1, hold_fd = -1;

/* After the first chunk: tell the parent, then wait for a byte that never comes (SIGKILL). */
static void progress_then_hang(void *arg, uint64_t done, uint64_t total) {
  (void)arg;
  if (done < total && ready_fd >= 0) {
    char b = 1;
    if (write(ready_fd, &b, 1) == 1) {
      close(ready_fd);
      ready_fd = -1;
      while (read(hold_fd, &b, 1) != 0) {
      }
    }
  }
}

/* Forks a client that puts (get == false) or gets a tensor of `bytes` bytes through a 64 KiB
 * segment and is killed after its first chunk. Returns whether the kill landed mid-transfer. */
static bool killed_mid_transfer(const char *name, size_t bytes, bool get) {
  int ready[2], hold[2];
  if (pipe(ready) || pipe(hold))
    return false;
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    ready_fd = ready[1];
    hold_fd = hold[0];
    char path[512];
    tse_socket_path(&job, 0, path, sizeof path);
    tshard_client *c = NULL;
    uint8_t *buf = calloc(1, bytes);
    if (!buf || tshard_connect_path(path, 60000, &c))
      _exit(2);
    tshard_set_shm_segment(c, 64 << 10);
    tshard_set_progress(c, progress_then_hang, NULL);
    if (get)
      tshard_get(c, name, buf, bytes);
    else
      tshard_put(c, name, buf, bytes, NULL);
    _exit(3); /* not reached when the kill lands mid-transfer */
  }
  close(ready[1]);
  close(hold[0]);
  char b;
  ssize_t n = read(ready[0], &b, 1); /* the first chunk is through */
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(ready[0]);
  close(hold[1]);
  return n == 1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* Waits (bounded) until rank 0's daemon is back to the memory and connections of `base`. */
static void expect_freed(tshard_client *c, const tshard_stats *base, const char *what) {
  tshard_stats s;
  memset(&s, 0, sizeof s);
  int64_t deadline = now_ms() + 60000;
  do {
    TSE_OK(c, tshard_stats_get(c, &s));
  } while ((s.memory_in_use != base->memory_in_use || s.connections != base->connections) &&
           now_ms() < deadline);
  TSE_CHECK(s.memory_in_use == base->memory_in_use && s.connections == base->connections,
            "%s: memory in use %llu (before %llu), connections %llu (before %llu)", what,
            (unsigned long long)s.memory_in_use, (unsigned long long)base->memory_in_use,
            (unsigned long long)s.connections, (unsigned long long)base->connections);
}

static void kill_tests(tshard_client **cl) {
  const int64_t shape[2] = {256, 1024}; /* 1 MiB: 32 chunks through a 64 KiB segment */
  size_t bytes = 256 * 1024 * 4;
  TSE_OK(cl[0],
         tshard_create(cl[0], "victim", "f32", 2, shape, "mesh=[2] placements=[S(0)]", NULL, NULL));
  uint8_t *ref = malloc(bytes), *back = malloc(bytes);
  int64_t lo[2] = {0, 0};
  tse_fill_box("f32", 71, 2, shape, lo, shape, ref);
  TSE_OK(cl[0], tshard_put(cl[0], "victim", ref, bytes, NULL));
  tshard_stats base;
  TSE_OK(cl[0], tshard_stats_get(cl[0], &base));
  TSE_CHECK(killed_mid_transfer("victim", bytes, false), "the putting client was not killed "
                                                         "mid-transfer");
  expect_freed(cl[0], &base, "after a client killed mid-put");
  TSE_OK(cl[0], tshard_get(cl[0], "victim", back, bytes)); /* the interrupted put changed nothing */
  TSE_CHECK(tse_compare_box("victim after the killed put", "f32", 71, 2, shape, lo, shape, back) ==
                0,
            "the tensor changed");
  TSE_OK(cl[0], tshard_stats_get(cl[0], &base));
  TSE_CHECK(killed_mid_transfer("victim", bytes, true), "the getting client was not killed "
                                                        "mid-transfer");
  expect_freed(cl[0], &base, "after a client killed mid-get");
  /* The daemon serves on, through shared memory too. */
  tse_fill_box("f32", 72, 2, shape, lo, shape, ref);
  TSE_OK(cl[0], tshard_put(cl[0], "victim", ref, bytes, NULL));
  memset(back, 0, bytes);
  TSE_OK(cl[0], tshard_get(cl[0], "victim", back, bytes));
  TSE_CHECK(tse_compare_box("victim after the kills", "f32", 72, 2, shape, lo, shape, back) == 0,
            "put and get after the kills differ");
  TSE_OK(cl[0], tshard_drop(cl[0], "victim", NULL));
  free(ref), free(back);
}

int main(void) {
  setenv("TSHARD_DIRECT", "0", 1);
  snprintf(token_path, sizeof token_path, "/tmp/tse-shm-token-%d", (int)getpid());
  unlink(token_path);
  int tfd = open(token_path, O_WRONLY | O_CREAT | O_EXCL, 0600); /* the daemon refuses others */
  FILE *tf = tfd < 0 ? NULL : fdopen(tfd, "w");
  if (!tf)
    return 1;
  fprintf(tf, "%s\n", TOKEN);
  fclose(tf);
  int started = -1;
  for (int attempt = 0; attempt < 3 && started != 0; attempt++) {
    tcp_port = 20001 + (int)((getpid() * 11 + attempt * 7919) % 20000) * 2;
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", tcp_port);
    const char *extra[] = {"--listen", url, "--token-file", token_path, NULL};
    started = tse_start(&job, 2, extra, 120);
  }
  unlink(token_path);
  if (started != 0)
    return 1;
  tshard_client *cl[2] = {tse_connect(&job, 0), tse_connect(&job, 1)};
  if (!cl[0] || !cl[1]) {
    tse_stop(&job);
    return 1;
  }
  /* Stream chunks of 64 KiB: a put of 3 MiB takes 48 answers over the socket, 1 through the
   * segment (after the answer that attaches it). */
  for (int r = 0; r < 2; r++)
    tshard_set_chunk(cl[r], 64 << 10);
  uint64_t n = roundtrip(cl[1], "whole", 768, 1024, "mesh=[2] placements=[S(1)]", 11);
  TSE_CHECK(n == 2,
            "a 3 MiB put through shared memory took %llu answers (want the attach and "
            "the put)",
            (unsigned long long)n);
  tse_slices_roundtrip(cl, "whole", 768, 1024, "", 12);
  tse_slices_roundtrip(cl, "whole", 768, 1024, "Ba4b", 13);
  roundtrip(cl[0], "odd", 64, 30, "mesh=[2] placements=[S(1)]", 21); /* slices of 15 columns */
  tse_slices_roundtrip(cl, "odd", 64, 30, "Ba4b", 22);               /* padded to 16 */
  n = roundtrip(cl[0], "partial", 96, 130, "mesh=[2] placements=[P(sum)]", 14);
  TSE_CHECK(n == 1, "a put with a partial placement took %llu answers", (unsigned long long)n);
  /* Larger than the segment: chunks through its halves. */
  tshard_client *small = tse_connect(&job, 1);
  if (small) {
    tshard_set_shm_segment(small, 64 << 10);
    n = roundtrip(small, "halves", 300, 1000, "mesh=[2] placements=[S(0)] splits={0:[100,200]}",
                  15);
    TSE_CHECK(n == 1 + (300 * 1000 * 4 + 32767) / 32768,
              "1.2 MB through a 64 KiB segment took "
              "%llu answers (the attach and 32 KiB chunks)",
              (unsigned long long)n);
    tshard_client *pair[2] = {cl[0], small};
    tse_slices_roundtrip(pair, "halves", 300, 1000, "Ba4b", 16);
    tshard_close(&small);
  }
  /* Shared memory off: the segment is released in the daemon too; the stream path, same data. */
  tshard_stats m0, m1;
  TSE_OK(cl[1], tshard_stats_get(cl[1], &m0));
  TSE_OK(cl[1], tshard_set_shm(cl[1], 0));
  TSE_OK(cl[1], tshard_stats_get(cl[1], &m1));
  TSE_CHECK(m0.memory_in_use - m1.memory_in_use >= (3u << 20),
            "turning shared memory off gave "
            "back %llu bytes",
            (unsigned long long)(m0.memory_in_use - m1.memory_in_use));
  n = roundtrip(cl[1], "stream", 256, 1024, "mesh=[2] placements=[R]", 17);
  TSE_CHECK(n == 16, "1 MiB over the stream in 64 KiB chunks took %llu answers",
            (unsigned long long)n);
  TSE_OK(cl[1], tshard_set_shm(cl[1], 1));
  setenv("TSHARD_SHM", "0", 1);
  tshard_client *off = tse_connect(&job, 1);
  unsetenv("TSHARD_SHM");
  if (off) {
    tshard_set_chunk(off, 64 << 10);
    n = roundtrip(off, "env_off", 128, 1024, "mesh=[2] placements=[S(0)]", 18);
    TSE_CHECK(n == 8, "with TSHARD_SHM=0, 512 KiB in 64 KiB chunks took %llu answers",
              (unsigned long long)n);
    tshard_close(&off);
  }
  /* TCP: the stream, whatever is asked. */
  tshard_client *tcp = NULL;
  TSE_OK(tcp, tshard_connect_tcp("127.0.0.1", tcp_port + 1, TOKEN, 60000, &tcp));
  if (tcp) {
    TSE_CHECK(tshard_set_shm(tcp, 1) == TS_UNSUPPORTED, "shared memory enabled over TCP");
    roundtrip(tcp, "tcp", 200, 300, "mesh=[2] placements=[S(1)]", 19);
    tshard_client *pair[2] = {cl[0], tcp};
    tse_slices_roundtrip(pair, "tcp", 200, 300, "Ba4b", 20);
    tshard_close(&tcp);
  }
  const char *names[] = {"whole", "odd", "partial", "halves", "stream", "env_off", "tcp"};
  for (int i = 0; i < 7; i++)
    TSE_OK(cl[0], tshard_drop(cl[0], names[i], NULL));
  kill_tests(cl);
  tshard_close(&cl[0]);
  tshard_close(&cl[1]);
  tse_stop(&job);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
