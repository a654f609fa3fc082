/* harness.h - end-to-end test helpers: start the daemons of a job under mpirun with a private
 * socket directory and job id, wait for every rank's socket (bounded), and stop them (shutdown
 * request, then signals to the mpirun we started if it does not exit in time). Also the
 * deterministic reference data every test compares with, and a minimal check macro. */
#ifndef TSE_HARNESS_H
#define TSE_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "tshard.h"

typedef struct tse_job {
  pid_t pid; /* mpirun */
  int np;
  char dir[256];
  char job[64];
  char log[320];
  int daemon_pids[64];
} tse_job;

extern int tse_failures;

#define TSE_CHECK(cond, ...)                                                                       \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      __atomic_add_fetch(&tse_failures, 1, __ATOMIC_RELAXED);                                      \
    }                                                                                              \
  } while (0)

/* Checks a status; prints the client's last message. */
#define TSE_OK(client, call)                                                                       \
  do {                                                                                             \
    int tse_rc_ = (call);                                                                          \
    TSE_CHECK(tse_rc_ == TS_OK, "%s -> %s: %s", #call, tshard_status_name(tse_rc_),                \
              tshard_last_message(client));                                                        \
  } while (0)

/* Starts np daemons with extra flags (NULL-terminated, may be NULL). Returns 0 when all sockets
 * accept connections within timeout_s; otherwise prints the log and returns -1 (daemons
 * stopped). */
int tse_start(tse_job *j, int np, const char *const *extra, int timeout_s);
/* Asks rank 0 for a shutdown and waits for mpirun; returns mpirun's exit status (0 expected),
 * or -1 when it had to be killed. Also checks that the sockets are gone. */
int tse_stop(tse_job *j);
/* Waits for mpirun to exit by itself (after a signal or shutdown sent by the test). */
int tse_wait(tse_job *j, int timeout_s);
/* After mpirun exited: checks the sockets are gone, prints the log on failures, removes the
 * job's directory; returns code. */
int tse_finish(tse_job *j, int code);
/* A fresh private directory for a test's files: /tmp/tshard-e2e-WHAT- and six characters
 * mkdtemp fills in. 0, or -1 with a failed check. */
int tse_scratch_dir(char *out, size_t cap, const char *what);
/* Removes a directory made by tse_scratch_dir and everything in it (a failed check if it
 * cannot). */
void tse_scratch_remove(const char *dir);
/* The mpirun the daemons are started with. */
const char *tse_mpiexec(void);
void tse_socket_path(const tse_job *j, int rank, char *buf, size_t cap);
tshard_client *tse_connect(const tse_job *j, int rank);
/* A plain connected socket to rank's daemon, for tests that write frames by hand; -1 (a check
 * failed) when it cannot connect. */
int tse_raw_connect(const tse_job *j, int rank);
/* Reads exactly n bytes, each wait bounded by timeout_ms; false on a timeout, an error or EOF. */
bool tse_read_full(int fd, void *buf, size_t n, int timeout_ms);

/* The reference value of global element `index` of tensor `seed` (exact in every dtype). */
double tse_value(uint64_t seed, uint64_t index);
/* Writes the value as dtype (f32 f64 f16 bf16 i8 i32 i64 u8) at p; element size returned. */
size_t tse_dtype_size(const char *dtype);
void tse_store(const char *dtype, void *p, double v);
double tse_load(const char *dtype, const void *p);
/* Fills buf (row-major over the box [lo, hi) of a tensor of shape `shape`) with reference
 * values; compares the same; returns mismatches (prints the first few). */
void tse_fill_box(const char *dtype, uint64_t seed, int ndim, const int64_t *shape,
                  const int64_t *lo, const int64_t *hi, void *buf);
long tse_compare_box(const char *what, const char *dtype, uint64_t seed, int ndim,
                     const int64_t *shape, const int64_t *lo, const int64_t *hi, const void *buf);
int64_t tse_numel(int ndim, const int64_t *shape);
/* Every rank puts its slice of f32 `name` (shape [rows, cols], f32) in layout tag through its
 * own client cl[rank] and gets it back in that layout; the whole tensor is then checked against
 * the reference of seed. Tags are "" or "Ba4b" (column blocks of 4 outermost, padding zero). */
void tse_slices_roundtrip(tshard_client **cl, const char *name, int64_t rows, int64_t cols,
                          const char *tag, uint64_t seed);

#endif
