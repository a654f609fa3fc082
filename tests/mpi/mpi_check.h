/* mpi_check.h - what the MPI tests (test_reshard.c, test_dist_einsum.c, test_ckpt.c,
 * test_ckpt_move.c, test_ring.c) share: the world and its start, a scratch directory the same on
 * every rank, CHECK (counts checks and failures, prints the first 20 failures with the rank), a
 * check that every rank got rank 0's status and message, the summary at the end, and a xorshift
 * generator seeded by the test (TS_TEST_SEED, defined before the include) so every rank draws the
 * same cases. Static: each test includes it once. */
#ifndef TS_MPI_CHECK_H
#define TS_MPI_CHECK_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"

#ifndef TS_TEST_SEED
#error "define TS_TEST_SEED before including mpi_check.h"
#endif

static int world_rank, world_size;
static long checks, failures;
static ts_world *W;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      if (failures < 20) {                                                                         \
        fprintf(stderr, "[rank %d] %s:%d: check failed: %s: ", world_rank, __FILE__, __LINE__,     \
                #cond);                                                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* Starts the world (W, world_rank, world_size); false, with a message, when it cannot. */
static inline bool mpi_check_start(int *argc, char ***argv) {
  ts_error err;
  if (ts_world_init(argc, argv, MPI_THREAD_SERIALIZED, &W, &err) != TS_OK) {
    fprintf(stderr, "world init: %s\n", err.msg);
    return false;
  }
  world_rank = ts_world_rank(W);
  world_size = ts_world_size(W);
  return true;
}

/* A fresh directory /tmp/<prefix>-<6 random characters> made by rank 0, its path the same on
 * every rank ("" when it could not be made). */
static inline void mpi_check_tmpdir(const char *prefix, char *out, size_t cap) {
  out[0] = '\0';
  if (world_rank == 0) {
    snprintf(out, cap, "/tmp/%s-XXXXXX", prefix); /* mkdtemp's template */
    if (!mkdtemp(out))
      out[0] = '\0';
  }
  MPI_Bcast(out, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
}

/* Every rank got the same status and message as rank 0. */
static inline void same_error_everywhere(int rc, const ts_error *err, const char *what) {
  char msg[512] = "", mine[512];
  snprintf(mine, sizeof mine, "%s", rc ? err->msg : "");
  if (world_rank == 0)
    snprintf(msg, sizeof msg, "%s", mine);
  MPI_Bcast(msg, sizeof msg, MPI_CHAR, 0, MPI_COMM_WORLD);
  int r0 = rc;
  MPI_Bcast(&r0, 1, MPI_INT, 0, MPI_COMM_WORLD);
  CHECK(r0 == rc && strcmp(msg, mine) == 0, "%s: rank 0 has %d '%s', here %d '%s'", what, r0, msg,
        rc, mine);
}

/* The end of a test: rank 0 prints the checks and failures of every rank, the world ends; the
 * exit status (1 on any failure). */
static inline int mpi_check_finish(const char *test) {
  long tf = 0, tc = 0;
  MPI_Allreduce(&failures, &tf, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&checks, &tc, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0)
    printf("%s: %d ranks, %ld checks, %ld failures\n", test, world_size, tc, tf);
  ts_world_finalize(&W, NULL);
  return tf ? 1 : 0;
}

static uint64_t rng_state = TS_TEST_SEED;
static inline uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static inline int64_t rnd_below(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }

#endif
