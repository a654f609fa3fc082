/* bench_service.c - tshard-bench-service: the service measured along the user's path. It starts
 * its own 4 tshardd daemons under mpirun and prints key=value lines (GB = 1e9 bytes; medians):
 *
 *   fault_gbps, populate_gbps, memcpy_gbps   this machine's limits at SIZE (default 1 GiB): a
 *                         first touch (memset) of fresh anonymous memory, mmap with MAP_POPULATE,
 *                         memcpy between pre-faulted buffers (bytes copied / time)
 *   put_1gib_gbps, get_1gib_gbps              a whole f32 tensor of SIZE ([SIZE/16 KiB, 4096],
 *                         S(0) over 4 ranks) put and got by the C client connected to rank 0 as
 *                         it connects by default (on a Unix socket: every daemon copies its
 *                         piece straight from or into the client's buffer, process_vm_readv)
 *   put_1gib_socket_gbps, get_1gib_socket_gbps   the same with TSHARD_SHM=0 (the socket stream)
 *   put_1gib_segment_gbps, get_1gib_segment_gbps the same with TSHARD_DIRECT=0 (through the
 *                         connection's shared segment: one more copy, by the client)
 *   py_put_1gib_gbps, py_get_1gib_gbps        the same through the Python package under
 *                         /usr/bin/python3 (tests/bench/bench_service_py.py)
 *                         (median of IO_REPS, default 5; a tensor's first put also fills new
 *                         slices (a put is atomic: it reads into new slices, which the pool
 *                         keeps for the next put) and a fresh segment is slow to fill here:
 *                         the first pair is printed apart as <x>_first_gbps and stays in the
 *                         median)
 *   <x>_vs_memcpy         each of those divided by memcpy_gbps
 *   s0_s1_ms, s1_s0_f64_ms, s0_r_ms           reshards timed at the client: f32[D,D] S(0)->S(1),
 *                         f64[D,D] S(1)->S(0) and f32[D,D] S(0)->R over the 4 ranks (D = 8192),
 *                         each reshard followed by the one back; median of REPS (>= 7 by
 *                         default); <case>_first_ms the first of them
 *   <case>_raw_ms         raw MPI moving the same bytes between pre-faulted buffers in an MPI job
 *                         of 4 ranks started by this program (--raw): MPI_Alltoall of the blocks
 *                         for the S->S cases, MPI_Allgather for S(0)->R; slowest rank, median of
 *                         the runs before and after the daemons' runs (the daemons idle meanwhile)
 *   <case>_vs_raw         <case>_ms / <case>_raw_ms
 *   rss_after_drop_mib    rank 0's RSS minus its RSS when the daemons became ready, once
 *                         everything is dropped and the pool had time to release (polled every
 *                         100 ms until it is <= 64 MiB or 15 s passed: rss_wait_s)
 *   mpi_single_copy       Open MPI's single-copy mechanism of the daemons and the reference: cma
 *                         (as a job started by tshard-launch uses) where process_vm_readv works
 *                         here, else none; an OMPI_MCA_btl_vader_single_copy_mechanism set by
 *                         the caller wins
 *   targets_missed        the targets below that this run missed, or none
 *
 * Targets: put/get >= 0.4 x memcpy_gbps; py_put/py_get >= 0.3 x memcpy_gbps; every
 * <case>_vs_raw <= 1.5; rss_after_drop_mib <= 64. Every tensor got back is compared with what was
 * put (outside the timed calls); a mismatch or a failed call makes the exit status 1.
 * --help prints the usage; a signal, --timeout or a SIGKILL stops the daemons too (bench_guard.h).
 * A benchmark, not a test: the figures of a shared machine are noisy. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_guard.h"
#include "harness.h"

#define NP 4
#define COLS 4096 /* of the put/get tensor */
#define RSS_LIMIT_MIB 64.0

typedef struct opts {
  long size_mib;
  int dim, reps, io_reps, timeout_s;
  bool wait_stdin;
} opts;

typedef struct rcase {
  const char *key, *dtype;
  size_t esize;
  const char *from, *to;
} rcase;

static const rcase CASES[] = {
    {"s0_s1", "f32", 4, "mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]"},
    {"s1_s0_f64", "f64", 8, "mesh=[4] placements=[S(1)]", "mesh=[4] placements=[S(0)]"},
    {"s0_r", "f32", 4, "mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]"},
};
enum { NCASES = sizeof CASES / sizeof CASES[0], MAX_REPS = 1000 };

static void usage(const char *self) {
  printf("usage: %s [--size-mib N] [--dim D] [--reps R] [--io-reps R] [--timeout SEC]\n"
         "          [--wait-stdin]\n"
         "Starts 4 tshardd daemons and prints key=value lines: this machine's memory limits\n"
         "(fault_gbps, populate_gbps, memcpy_gbps), whole-tensor put and get through the C client\n"
         "(shared memory, then the socket stream) and the Python package, reshards timed at the\n"
         "client beside raw MPI moving the same bytes (s0_s1, s1_s0_f64, s0_r), and rank 0's RSS\n"
         "after everything is dropped. The header of tests/bench/bench_service.c explains each.\n"
         "options:\n"
         "  --size-mib N     put/get tensor and memory-limit size in MiB (default 1024)\n"
         "  --dim D          the reshard tensors are [D, D], D a multiple of 4 up to 16384\n"
         "                   (default 8192)\n"
         "  --reps R         timed reshards per case, and MPI reference runs (default 7)\n"
         "  --io-reps R      timed puts and gets of each client (default 5)\n" TSB_COMMON_USAGE,
         self);
}

/* 0: run; 1: --help printed; -1: bad command line (message printed). */
static int parse_opts(int argc, char **argv, opts *o) {
  *o = (opts){1024, 8192, 7, 5, 0, false};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long x;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(argv[0]);
      return 1;
    }
    int taken = tsb_common_option(argc, argv, &i, &o->timeout_s, &o->wait_stdin);
    if (taken < 0)
      return -1;
    if (taken)
      continue;
    if (strcmp(a, "--size-mib") == 0) {
      if (tsb_parse_long(argv[0], a, v, 1, 65536, &o->size_mib))
        return -1;
    } else if (strcmp(a, "--dim") == 0) {
      if (tsb_parse_long(argv[0], a, v, 4, 16384, &x))
        return -1;
      if (x % NP) {
        fprintf(stderr, "%s: --dim %ld: must be a multiple of %d\n", argv[0], x, NP);
        return -1;
      }
      o->dim = (int)x;
    } else if (strcmp(a, "--reps") == 0) {
      if (tsb_parse_long(argv[0], a, v, 1, MAX_REPS, &x))
        return -1;
      o->reps = (int)x;
    } else if (strcmp(a, "--io-reps") == 0) {
      if (tsb_parse_long(argv[0], a, v, 1, MAX_REPS, &x))
        return -1;
      o->io_reps = (int)x;
    } else {
      fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], a);
      return -1;
    }
    i++;
  }
  return 0;
}

/* ---- this machine's limits ------------------------------------------------------------------ */

static void *map_fresh(size_t n, int extra_flags) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void machine_limits(size_t n, const void *src, void *dst, double *memcpy_gbps) {
  double tf[3], tp[3], tm[5];
  int nf = 0, np = 0;
  for (int k = 0; k < 3; k++) {
    char *p = map_fresh(n, 0);
    if (p) {
      double t0 = tsb_now();
      memset(p, 1, n);
      tf[nf++] = tsb_now() - t0;
      munmap(p, n);
    }
    double t0 = tsb_now();
    p = map_fresh(n, MAP_POPULATE);
    double dt = tsb_now() - t0;
    if (p) {
      tp[np++] = dt;
      munmap(p, n);
    }
  }
  for (int k = 0; k < 5; k++) {
    double t0 = tsb_now();
    memcpy(dst, src, n);
    tm[k] = tsb_now() - t0;
  }
  TSE_CHECK(nf == 3 && np == 3, "mmap of %zu bytes failed", n);
  *memcpy_gbps = (double)n / tsb_median(tm, 5) / 1e9;
  printf("fault_gbps=%.2f\npopulate_gbps=%.2f\nmemcpy_gbps=%.2f\n",
         (double)n / tsb_median(tf, nf) / 1e9, (double)n / tsb_median(tp, np) / 1e9, *memcpy_gbps);
  char thp[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f && fgets(thp, sizeof thp, f))
    printf("transparent_hugepage=%s", thp); /* the line keeps its newline */
  if (f)
    fclose(f);
  fflush(stdout);
}

/* ---- whole-tensor put and get --------------------------------------------------------------- */

/* REPS puts and gets of `name` (created by the caller) through c; the data got back is compared
 * with what was put. Prints <prefix>put<suffix>_gbps, ... and their _vs_memcpy. */
static void put_get(tshard_client *c, const char *name, const void *data, void *back, size_t n,
                    int reps, double memcpy_gbps, const char *suffix, double *put, double *get) {
  double tp[MAX_REPS], tg[MAX_REPS];
  for (int k = 0; k < reps; k++) {
    double t0 = tsb_now();
    TSE_OK(c, tshard_put(c, name, data, n, NULL));
    double t1 = tsb_now();
    TSE_OK(c, tshard_get(c, name, back, n));
    tg[k] = tsb_now() - t1;
    tp[k] = t1 - t0;
    TSE_CHECK(memcmp(data, back, n) == 0, "put/get%s: the tensor got back differs", suffix);
    memset(back, 0, n);
  }
  *put = (double)n / tsb_median(tp, reps) / 1e9;
  *get = (double)n / tsb_median(tg, reps) / 1e9;
  printf("put_1gib%s_first_gbps=%.2f\nget_1gib%s_first_gbps=%.2f\n", suffix,
         (double)n / tp[0] / 1e9, suffix, (double)n / tg[0] / 1e9);
  printf("put_1gib%s_gbps=%.2f\nget_1gib%s_gbps=%.2f\n", suffix, *put, suffix, *get);
  printf("put_1gib%s_vs_memcpy=%.3f\nget_1gib%s_vs_memcpy=%.3f\n", suffix, *put / memcpy_gbps,
         suffix, *get / memcpy_gbps);
  fflush(stdout);
}

/* The Python package: bench_service_py.py against rank 0; forwards its py_* lines. */
static void python_put_get(const tse_job *j, const opts *o, double memcpy_gbps, double *put,
                           double *get) {
  char sock[400], size[32], reps[32];
  tse_socket_path(j, 0, sock, sizeof sock);
  snprintf(size, sizeof size, "%ld", o->size_mib);
  snprintf(reps, sizeof reps, "%d", o->io_reps);
  const char *argv[] = {"/usr/bin/python3", TSB_PY_SCRIPT, "--socket", sock, "--size-mib", size,
                        "--reps",           reps,          NULL};
  const char *env[] = {"PYTHONPATH=" TSB_PYTHONPATH, NULL};
  FILE *out = NULL;
  pid_t pid = tsb_spawn(argv, env, &out);
  char line[256];
  while (out && fgets(line, sizeof line, out)) {
    sscanf(line, "py_put_1gib_gbps=%lf", put);
    sscanf(line, "py_get_1gib_gbps=%lf", get);
    if (strncmp(line, "py_", 3) == 0)
      fputs(line, stdout);
  }
  int rc = pid > 0 ? tsb_wait(pid, &out) : -1;
  TSE_CHECK(rc == 0 && *put > 0 && *get > 0, "the Python client's run failed (exit status %d)", rc);
  printf("py_put_1gib_vs_memcpy=%.3f\npy_get_1gib_vs_memcpy=%.3f\n", *put / memcpy_gbps,
         *get / memcpy_gbps);
  fflush(stdout);
}

/* ---- the raw MPI reference (--raw, under mpirun -np 4) -------------------------------------- */

static double slowest_ms(double t0) {
  double dt = (MPI_Wtime() - t0) * 1e3, m;
  MPI_Allreduce(&dt, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

/* Per case: a warm-up, then REPS timed runs; rank 0 prints "raw_ms CASE MS" per run. */
static int raw_mode(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  opts o;
  if (size != NP || parse_opts(argc - 1, argv + 1, &o) != 0) {
    if (rank == 0)
      fprintf(stderr, "%s --raw: runs under mpirun -np %d with the benchmark's options\n", argv[0],
              NP);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t d = (size_t)o.dim;
  for (int c = 0; c < NCASES; c++) {
    size_t slice = d * d * CASES[c].esize / NP; /* every rank's source slice, pre-packed */
    bool gather = strstr(CASES[c].to, "[R]") != NULL;
    size_t target = gather ? d * d * CASES[c].esize : slice;
    char *src = malloc(slice), *dst = malloc(target);
    if (!src || !dst) {
      fprintf(stderr, "rank %d: out of memory\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(src, rank + 1, slice); /* pre-faulted */
    memset(dst, 0, target);
    for (int k = -1; k < o.reps; k++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (gather)
        MPI_Allgather(src, (int)slice, MPI_BYTE, dst, (int)slice, MPI_BYTE, MPI_COMM_WORLD);
      else
        MPI_Alltoall(src, (int)(slice / NP), MPI_BYTE, dst, (int)(slice / NP), MPI_BYTE,
                     MPI_COMM_WORLD);
      double ms = slowest_ms(t0);
      if (rank == 0 && k >= 0)
        printf("raw_ms %s %.3f\n", CASES[c].key, ms);
    }
    /* what arrived from the last rank is its bytes */
    size_t from_last = gather ? slice * (NP - 1) : (slice / NP) * (NP - 1);
    if (dst[from_last] != (char)NP) {
      fprintf(stderr, "rank %d: %s: the raw reference delivered wrong bytes\n", rank, CASES[c].key);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(src);
    free(dst);
  }
  fflush(stdout);
  MPI_Finalize();
  return 0;
}

/* Runs the reference job; appends its times per case to raw[c][n[c]++]. */
static void raw_reference(int argc, char **argv, double raw[][2 * MAX_REPS], int *n) {
  FILE *out = NULL;
  pid_t pid = tsb_spawn_raw(NP, argc, argv, &out);
  char line[256], key[64];
  double ms;
  while (out && fgets(line, sizeof line, out))
    if (sscanf(line, "raw_ms %63s %lf", key, &ms) == 2)
      for (int c = 0; c < NCASES; c++)
        if (strcmp(key, CASES[c].key) == 0 && n[c] < 2 * MAX_REPS)
          raw[c][n[c]++] = ms;
  int rc = pid > 0 ? tsb_wait(pid, &out) : -1;
  TSE_CHECK(rc == 0, "the raw MPI reference job failed (exit status %d)", rc);
}

/* ---- reshards through the daemons ----------------------------------------------------------- */

static void fill(const rcase *rc, void *buf, size_t numel) {
  for (size_t i = 0; i < numel; i++) {
    double v = (double)(i % 1000);
    if (rc->esize == 8)
      ((double *)buf)[i] = v;
    else
      ((float *)buf)[i] = (float)v;
  }
}

/* REPS reshards there and back of case rc; returns the median ms of the way there. The tensor
 * got back after the last reshard there is compared with what was put. */
static double reshard_case(tshard_client *c, const rcase *rc, int dim, int reps, void *data,
                           void *back) {
  int64_t shape[2] = {dim, dim};
  size_t numel = (size_t)dim * (size_t)dim, n = numel * rc->esize;
  fill(rc, data, numel);
  TSE_OK(c, tshard_create(c, rc->key, rc->dtype, 2, shape, rc->from, NULL, NULL));
  TSE_OK(c, tshard_put(c, rc->key, data, n, NULL));
  double there[MAX_REPS], back_ms[MAX_REPS];
  for (int k = 0; k < reps; k++) {
    double t0 = tsb_now();
    TSE_OK(c, tshard_reshard(c, rc->key, rc->to, NULL));
    double t1 = tsb_now();
    there[k] = (t1 - t0) * 1e3;
    if (k == reps - 1) {
      memset(back, 0, n);
      TSE_OK(c, tshard_get(c, rc->key, back, n));
      TSE_CHECK(memcmp(data, back, n) == 0, "%s: the tensor differs after the reshard", rc->key);
      t1 = tsb_now();
    }
    TSE_OK(c, tshard_reshard(c, rc->key, rc->from, NULL));
    back_ms[k] = (tsb_now() - t1) * 1e3;
  }
  TSE_OK(c, tshard_drop(c, rc->key, NULL));
  printf("%s_first_ms=%.2f\n", rc->key, there[0]);
  printf("%s_back_ms=%.2f\n", rc->key, tsb_median(back_ms, reps));
  return tsb_median(there, reps);
}

/* ---- rank 0's memory ------------------------------------------------------------------------ */

/* A field of /proc/PID/status in MiB (VmRSS, VmHWM), -1 when unreadable. */
static double proc_mib(int pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  double mib = -1;
  size_t len = strlen(field);
  long kb;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, len) == 0 && line[len] == ':' &&
        sscanf(line + len + 1, "%ld", &kb) == 1)
      mib = (double)kb / 1024.0;
  if (f)
    fclose(f);
  return mib;
}

/* Polls rank 0's RSS every 100 ms until it is within the limit of its start or 15 s passed. */
static double rss_after_drop(int pid, double rss0, double *waited) {
  double t0 = tsb_now(), rss = proc_mib(pid, "VmRSS");
  struct timespec nap = {0, 100 * 1000 * 1000};
  while (rss - rss0 > RSS_LIMIT_MIB && tsb_now() - t0 < 15.0) {
    nanosleep(&nap, NULL); /* polling a condition, bounded by the deadline */
    rss = proc_mib(pid, "VmRSS");
  }
  *waited = tsb_now() - t0;
  return rss - rss0;
}

/* ---- the run -------------------------------------------------------------------------------- */

static void *xalloc(size_t n) {
  void *p = malloc(n);
  if (!p) {
    fprintf(stderr, "tshard-bench-service: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  memset(p, 0, n); /* pre-faulted */
  return p;
}

static void miss(char *list, size_t cap, const char *what) {
  size_t len = strlen(list);
  snprintf(list + len, cap - len, "%s%s", len ? "," : "", what);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--raw") == 0)
    return raw_mode(argc, argv);
  opts o;
  int prc = parse_opts(argc, argv, &o);
  if (prc)
    return prc > 0 ? 0 : 2;
  tsb_guard_install(o.timeout_s);
  static tse_job job; /* the guard's handler reads it */
  tsb_guard_job(&job);
  /* Daemons and the raw reference move data as a user's job would: with Open MPI's single-copy
   * transfers where this machine allows them (the test harness turns them off by default). */
  tsb_single_copy_as_users();
  if (tse_start(&job, NP, NULL, 120))
    return 1;
  tsb_announce(&job, o.wait_stdin);
  int pid0 = job.daemon_pids[0];
  double rss0 = proc_mib(pid0, "VmRSS");
  printf("size_mib=%ld\ndim=%d\nreps=%d\nio_reps=%d\n", o.size_mib, o.dim, o.reps, o.io_reps);

  size_t n = (size_t)o.size_mib << 20;
  char *data = xalloc(n), *back = xalloc(n);
  for (size_t i = 0; i < n / 4; i++)
    ((float *)data)[i] = (float)(i % 1000);
  double memcpy_gbps;
  machine_limits(n, data, back, &memcpy_gbps);

  /* Whole tensors: the default connection (shared memory), then the socket stream. */
  int64_t shape[2] = {(int64_t)(n / (4 * COLS)), COLS};
  tshard_client *c = tse_connect(&job, 0), *cs = NULL;
  if (!c) {
    tse_stop(&job);
    return 1;
  }
  TSE_OK(c, tshard_create(c, "big", "f32", 2, shape, "mesh=[4] placements=[S(0)]", NULL, NULL));
  double put = 0, get = 0, put_s = 0, get_s = 0, py_put = 0, py_get = 0;
  put_get(c, "big", data, back, n, o.io_reps, memcpy_gbps, "", &put, &get);
  setenv("TSHARD_SHM", "0", 1); /* read when connecting */
  cs = tse_connect(&job, 0);
  unsetenv("TSHARD_SHM");
  if (cs)
    put_get(cs, "big", data, back, n, o.io_reps, memcpy_gbps, "_socket", &put_s, &get_s);
  tshard_close(&cs);
  setenv("TSHARD_DIRECT", "0", 1); /* the segment, for comparison (read when connecting) */
  cs = tse_connect(&job, 0);
  unsetenv("TSHARD_DIRECT");
  double put_g = 0, get_g = 0;
  if (cs)
    put_get(cs, "big", data, back, n, o.io_reps, memcpy_gbps, "_segment", &put_g, &get_g);
  tshard_close(&cs);
  TSE_OK(c, tshard_drop(c, "big", NULL));
  free(data);
  free(back);
  python_put_get(&job, &o, memcpy_gbps, &py_put, &py_get);

  /* Reshards, between two runs of the raw reference (the daemons hold nothing meanwhile). */
  static double raw[NCASES][2 * MAX_REPS];
  int nraw[NCASES] = {0};
  raw_reference(argc, argv, raw, nraw);
  size_t cn = (size_t)o.dim * (size_t)o.dim * 8;
  data = xalloc(cn);
  back = xalloc(cn);
  double ms[NCASES];
  for (int k = 0; k < NCASES; k++)
    ms[k] = reshard_case(c, &CASES[k], o.dim, o.reps, data, back);
  free(data);
  free(back);
  raw_reference(argc, argv, raw, nraw);
  char missed[512] = "";
  for (int k = 0; k < NCASES; k++) {
    double r = tsb_median(raw[k], nraw[k]);
    printf("%s_ms=%.3f\n%s_raw_ms=%.3f\n%s_vs_raw=%.3f\n", CASES[k].key, ms[k], CASES[k].key, r,
           CASES[k].key, r > 0 ? ms[k] / r : -1);
    if (!(r > 0 && ms[k] / r <= 1.5))
      miss(missed, sizeof missed, CASES[k].key);
  }
  fflush(stdout);
  tshard_close(&c);

  double waited, rss = rss_after_drop(pid0, rss0, &waited);
  printf("rss_start_mib=%.1f\nrss_peak_mib=%.1f\n", rss0, proc_mib(pid0, "VmHWM"));
  printf("rss_after_drop_mib=%.1f\nrss_wait_s=%.2f\n", rss, waited);
  if (put < 0.4 * memcpy_gbps)
    miss(missed, sizeof missed, "put_1gib");
  if (get < 0.4 * memcpy_gbps)
    miss(missed, sizeof missed, "get_1gib");
  if (py_put < 0.3 * memcpy_gbps)
    miss(missed, sizeof missed, "py_put_1gib");
  if (py_get < 0.3 * memcpy_gbps)
    miss(missed, sizeof missed, "py_get_1gib");
  if (!(rss <= RSS_LIMIT_MIB))
    miss(missed, sizeof missed, "rss_after_drop");
  printf("targets_missed=%s\n", missed[0] ? missed : "none");
  fflush(stdout);
  tse_stop(&job);
  tsb_guard_job(NULL);
  return tse_failures ? 1 : 0;
}
