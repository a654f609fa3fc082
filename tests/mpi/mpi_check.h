/* mpi_check.h - what the engine's MPI tests (test_reshard.c, test_dist_einsum.c) share: the
 * world, CHECK (counts checks and failures, prints the first 20 failures with the rank), and a
 * xorshift generator seeded by the test (TS_TEST_SEED, defined before the include) so every rank
 * draws the same cases. Static: each test includes it once. */
#ifndef TS_MPI_CHECK_H
#define TS_MPI_CHECK_H

#include <stdint.h>
#include <stdio.h>

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
        fprintf(stderr, "[rank %d] %s:%d: check failed: %s: ", world_rank, __FILE__, __LINE__,    \
                #cond);                                                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static uint64_t rng_state = TS_TEST_SEED;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static int64_t rnd_below(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }

#endif
