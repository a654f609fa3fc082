/* bench_rpc.c - the RPC benchmark of tshardd: `tshard-bench-rpc` starts its own daemons under
 * `mpirun -np 2` and prints key=value lines:
 *
 *   ping_p50_us, ping_p99_us      round trip of 20000 pings to rank 0 (served by the loop thread)
 *   collective_op_p50_us          a multi-rank operation that moves no data (drop of a missing
 *                                 name: forwarded, ordered by rank 0, run and agreed everywhere)
 *   put_1gib_gbps, get_1gib_gbps  a 1 GiB f32 tensor ([16384, 16384], S(0) over 2 ranks) put
 *                                 whole and got whole by one client (best of 2, GB = 1e9 bytes)
 *   memcpy_gbps                   memcpy of the same 1 GiB in the same run (the limit)
 *   reshard_s0_s1_daemon_ms       S(0) -> S(1) of that tensor through the daemons
 *   reshard_s0_s1_engine_ms       the same reshard through the engine directly (ts_store_reshard
 *                                 in an MPI job of 2 ranks started by this program with --engine,
 *                                 slowest rank); the two alternate in rounds of 5 (3 rounds, the
 *                                 daemons idle while the engine job runs) so that a change of the
 *                                 machine's load hits both; medians of the 15 runs each
 *   reshard_daemon_overhead_pct   (daemon - engine) / engine
 *   idle_cpu_percent              CPU of the busiest idle daemon over 10 s, in % of one core
 *   mpi_p2p_gbps                  raw MPI_Send/Recv of 512 MiB between the two ranks in 16 MiB
 *                                 messages (the same job as the engine run): the transport's limit
 *
 * Targets: ping p50 < 100 us; put and get >= 1 GB/s; overhead < 10 %; idle CPU < 2 %.
 * --help prints the usage; a signal, --timeout or a SIGKILL stops the daemons and the engine job
 * too (bench_guard.h). */
#include <malloc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_guard.h"
#include "harness.h"
#include "ts_comm.h"
#include "ts_shard.h"

#define ROWS 16384
#define COLS 16384
#define REPS 5

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* --engine: the same reshard as the daemons run, straight through the store, under mpirun. */
static int engine_mode(int argc, char **argv) {
  /* The process settings of tshardd (daemon/main.c), so that only the daemon's own work differs. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  ts_world *w = NULL;
  ts_error err;
  if (ts_world_init(&argc, &argv, MPI_THREAD_SERIALIZED, &w, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  int rank = ts_world_rank(w);
  ts_store *s = NULL;
  ts_attr *s0 = NULL, *s1 = NULL;
  int64_t shape[2] = {ROWS, COLS};
  ts_stored *e = NULL;
  if (ts_store_create(&s, rank, 0, &err) ||
      ts_attr_parse("mesh=[2] placements=[S(0)]", &s0, &err) ||
      ts_attr_parse("mesh=[2] placements=[S(1)]", &s1, &err) ||
      ts_store_add(s, "big", 2, shape, TS_F32, s0, NULL, &e, &err)) {
    fprintf(stderr, "engine setup: %s\n", err.msg);
    return 1;
  }
  memset(e->local.data, 1, e->local.bytes);
  double t[REPS];
  ts_plan_opts po = {TS_STRATEGY_AUTO, 64 << 20, 0};
  for (int i = 0; i < REPS; i++) {
    ts_comm_barrier(ts_world_comm(w), NULL);
    double t0 = now();
    int rc = ts_store_reshard(s, w, "big", s1, NULL, &po, NULL, &err);
    int64_t us = (int64_t)((now() - t0) * 1e6);
    ts_comm_allreduce_i64(ts_world_comm(w), &us, 1, TS_COMM_MAX, NULL);
    t[i] = (double)us / 1000.0;
    if (rc || ts_store_reshard(s, w, "big", s0, NULL, &po, NULL, &err)) {
      fprintf(stderr, "engine reshard: %s\n", err.msg);
      return 1;
    }
  }
  /* The raw MPI limit in the same job: 512 MiB from rank 0 to rank 1 in 16 MiB messages (what a
   * whole put or get of the 1 GiB tensor must move between the two ranks). */
  size_t piece = 16u << 20;
  char *raw = malloc(piece);
  memset(raw, 2, piece);
  double tr[REPS];
  for (int i = 0; i < REPS; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int k = 0; k < 32; k++) {
      if (rank == 0)
        MPI_Send(raw, (int)piece, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
      else if (rank == 1)
        MPI_Recv(raw, (int)piece, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    tr[i] = now() - t0;
  }
  free(raw);
  if (rank == 0) {
    for (int i = 0; i < REPS; i++)
      printf("engine_ms=%.3f\n", t[i]);
    printf("mpi_gbps=%.2f\n", 32.0 * piece / median(tr, REPS) / 1e9);
  }
  ts_attr_destroy(&s0);
  ts_attr_destroy(&s1);
  ts_store_destroy(&s);
  ts_world_finalize(&w, NULL);
  return 0;
}

/* Runs the engine job; appends its REPS times to t[*n]. */
static void engine_reshard_ms(const char *self, double *t, int *n, double *mpi_gbps) {
  const char *argv[] = {tse_mpiexec(), "-np", "2", "--oversubscribe", self, "--engine", NULL};
  FILE *p = NULL;
  pid_t pid = tsb_spawn(argv, NULL, &p);
  char line[256];
  double ms;
  while (p && fgets(line, sizeof line, p))
    if (sscanf(line, "engine_ms=%lf", &ms) == 1 && *n < 3 * REPS)
      t[(*n)++] = ms;
    else
      sscanf(line, "mpi_gbps=%lf", mpi_gbps);
  if (pid > 0 && tsb_wait(pid, &p) != 0)
    fprintf(stderr, "tshard-bench-rpc: the engine job failed\n");
}

static void usage(const char *self) {
  printf("usage: %s [--timeout SEC] [--wait-stdin]\n"
         "Starts 2 tshardd daemons under mpirun and prints key=value lines: ping latency, the\n"
         "cost of a collective operation, 1 GiB put and get, S(0)->S(1) through the daemons and\n"
         "through the engine directly, idle CPU, raw MPI point-to-point bandwidth.\n"
         "options:\n" TSB_COMMON_USAGE,
         self);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--engine") == 0)
    return engine_mode(argc, argv);
  int timeout_s = 0;
  bool wait_stdin = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(argv[0]);
      return 0;
    }
    int taken = tsb_common_option(argc, argv, &i, &timeout_s, &wait_stdin);
    if (taken < 0)
      return 2;
    if (!taken) {
      fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], argv[i]);
      return 2;
    }
  }
  tsb_guard_install(timeout_s);
  /* tse_start sets the Open MPI environment the job needs (root, transports). */
  static tse_job job;
  tsb_guard_job(&job);
  if (tse_start(&job, 2, NULL, 120))
    return 1;
  tsb_announce(&job, wait_stdin);
  tshard_client *c = tse_connect(&job, 0);
  if (!c)
    return 1;

  enum { NPING = 20000 };
  static double lat[NPING];
  for (int i = 0; i < 1000; i++)
    tshard_ping(c, NULL, NULL);
  for (int i = 0; i < NPING; i++) {
    double t0 = now();
    TSE_OK(c, tshard_ping(c, NULL, NULL));
    lat[i] = (now() - t0) * 1e6;
  }
  qsort(lat, NPING, sizeof *lat, cmp_double);
  printf("ping_p50_us=%.1f\nping_p99_us=%.1f\n", lat[NPING / 2], lat[NPING * 99 / 100]);
  fflush(stdout);

  /* A collective operation that moves no data (a drop of a missing name: ordered by rank 0, run
   * and agreed on every rank): the daemons' own cost per multi-rank operation. */
  enum { NCOLL = 300 };
  static double coll[NCOLL];
  for (int i = 0; i < NCOLL; i++) {
    double t0 = now();
    int st = tshard_drop(c, "missing", NULL);
    coll[i] = (now() - t0) * 1e6;
    TSE_CHECK(st == TS_NOT_FOUND, "drop of a missing tensor gave %s", tshard_status_name(st));
  }
  printf("collective_op_p50_us=%.1f\n", median(coll, NCOLL));
  fflush(stdout);

  size_t bytes = (size_t)ROWS * COLS * 4;
  float *data = malloc(bytes), *back = malloc(bytes);
  for (size_t i = 0; i < bytes / 4; i++)
    data[i] = (float)(i % 1000);
  memset(back, 0, bytes);
  int64_t shape[2] = {ROWS, COLS};
  TSE_OK(c, tshard_create(c, "big", "f32", 2, shape, "mesh=[2] placements=[S(0)]", NULL, NULL));
  double best_put = 1e30, best_get = 1e30;
  for (int rep = 0; rep < 2; rep++) {
    double t0 = now();
    TSE_OK(c, tshard_put(c, "big", data, bytes, NULL));
    double t1 = now();
    TSE_OK(c, tshard_get(c, "big", back, bytes));
    double t2 = now();
    if (t1 - t0 < best_put)
      best_put = t1 - t0;
    if (t2 - t1 < best_get)
      best_get = t2 - t1;
  }
  TSE_CHECK(memcmp(data, back, bytes) == 0, "the 1 GiB tensor came back different");
  double t0 = now();
  memcpy(back, data, bytes);
  double tm = now() - t0;
  t0 = now();
  memcpy(data, back, bytes);
  tm = (now() - t0) < tm ? now() - t0 : tm;
  printf("put_1gib_gbps=%.2f\nget_1gib_gbps=%.2f\nmemcpy_gbps=%.2f\n", bytes / best_put / 1e9,
         bytes / best_get / 1e9, bytes / tm / 1e9);
  fflush(stdout);
  free(data);
  free(back);

  if (getenv("TSHARD_BENCH_TRANSFER_ONLY")) { /* for quick looks at the transfer path */
    tse_stop(&job);
    tsb_guard_job(NULL);
    return tse_failures ? 1 : 0;
  }
  enum { ROUNDS = 3 };
  double td[ROUNDS * REPS], te[ROUNDS * REPS], mpi_gbps = -1;
  int nd = 0, ne = 0;
  for (int round = 0; round < ROUNDS; round++) {
    engine_reshard_ms(argv[0], te, &ne, &mpi_gbps);
    for (int i = 0; i < REPS; i++) {
      t0 = now();
      TSE_OK(c, tshard_reshard(c, "big", "mesh=[2] placements=[S(1)]", NULL));
      td[nd++] = (now() - t0) * 1e3;
      TSE_OK(c, tshard_reshard(c, "big", "mesh=[2] placements=[S(0)]", NULL));
    }
  }
  TSE_OK(c, tshard_drop(c, "big", NULL));
  double daemon_ms = median(td, nd);
  double engine_ms = ne ? median(te, ne) : -1;
  tshard_close(&c);

  /* Idle: nothing connected, 10 s. */
  double before[2], after[2];
  for (int r = 0; r < 2; r++)
    before[r] = tsb_cpu_seconds(job.daemon_pids[r]);
  double w0 = now();
  struct timespec ten = {10, 0};
  nanosleep(&ten, NULL);
  double wall = now() - w0;
  double idle = 0;
  for (int r = 0; r < 2; r++) {
    after[r] = tsb_cpu_seconds(job.daemon_pids[r]);
    double pct = (after[r] - before[r]) / wall * 100.0;
    if (pct > idle)
      idle = pct;
  }
  tse_stop(&job);
  tsb_guard_job(NULL);

  printf("reshard_s0_s1_daemon_ms=%.1f\nreshard_s0_s1_engine_ms=%.1f\n", daemon_ms, engine_ms);
  printf("reshard_daemon_overhead_pct=%.1f\n", (daemon_ms - engine_ms) / engine_ms * 100.0);
  printf("idle_cpu_percent=%.2f\n", idle);
  printf("mpi_p2p_gbps=%.2f\n", mpi_gbps);
  return tse_failures ? 1 : 0;
}
