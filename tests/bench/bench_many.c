/* bench_many.c - tshard-bench-many: many tensors and small tensors along the user's path. It
 * starts its own NP tshardd daemons (--np, default 4) under mpirun, drives them with the Python
 * package under /usr/bin/python3 (tests/bench/bench_many_py.py, connected to rank 0) and prints
 * key=value lines (times at the client; medians):
 *
 *   small_<B>_us          p50 of REPS (default 200) S(0)<->S(1) reshards of an f32 square tensor
 *                         of B bytes (B = 4096, 65536, 1048576), one synchronous call each
 *   small_<B>_raw_us      raw MPI_Alltoall of the same bytes between NP ranks of an MPI job this
 *                         program starts (--raw): p50 of REPS calls, the slowest rank's time each
 *   small_<B>_vs_raw      small_<B>_us / small_<B>_raw_us
 *   gpt2_loop_ms          GPT-2-small's 148 tensors (124M f32), one reshard call each: 2-D ones
 *                         S(0)->S(1), 1-D ones S(0)->R; median of RUNS (default 5)
 *   gpt2_raw_ms           one MPI_Alltoallv (the 2-D tensors' bytes, each pair's pieces of all
 *                         tensors in one message) and one MPI_Allgatherv (the 1-D tensors') between
 *                         pre-faulted buffers, the slowest rank; median of RUNS
 *   gpt2_loop_vs_raw      gpt2_loop_ms / gpt2_raw_ms
 *   gpt2_batched_ms       the 148 as one Client.reshard_many; gpt2_batched_vs_raw,
 *                         gpt2_batched_vs_loop (printed "unavailable" when the client lacks it)
 *   gpt2_put_loop_ms      the 148 (S(0) over the ranks) put whole, one Client.put each; median
 *                         of RUNS after a warm-up run
 *   gpt2_put_many_ms      the same as one Client.put_many; gpt2_put_many_vs_loop the ratio
 *   gpt2_get_loop_ms      the 148 got whole, one Client.get each
 *   gpt2_get_many_ms      the same as one Client.get_many; gpt2_get_many_vs_loop the ratio
 *   small148_<op>_ms      the same four for 148 tensors of 768 f32 (3 KiB each): op put_loop,
 *                         put_many, get_loop, get_many; small148_put_many_vs_loop and
 *                         small148_get_many_vs_loop the ratios
 *   async_overlap_ratio   a reshard of ASYNC MiB (default 256) issued with wait=False, numpy work
 *                         of about its duration in the client, then .result(): time over
 *                         max(reshard alone, work alone); 2.0 is no overlap ("unavailable" when
 *                         reshard takes no wait=)
 *   idle_cpu_pct          the daemons' CPU over IDLE s (10) with nothing connected after the
 *                         runs, summed over the daemons, in % of one core; idle_cpu_max_pct the
 *                         busiest daemon
 *   daemon_transfers      how the daemons move data between them, from their logs:
 *                         shared_buffers, single_copies or mpi (comm/cma.c; "mixed" when
 *                         the daemons' lines differ, "unknown" when none was found)
 *   mpi_single_copy       Open MPI's single-copy mechanism of the daemons and the raw reference:
 *                         cma (as a job started by tshard-launch uses) where this machine allows
 *                         it, else none; one set by the caller wins
 *   scrape_10000_tensors_ms  median of SCRAPES (21) GET /metrics of rank 0's Prometheus endpoint
 *                         (tshardd --metrics) with 10,000 tensors stored (the Python half leaves
 *                         them), each a fresh HTTP/1.0 connection from connect to the last byte;
 *                         scrape_bytes the answer's size
 *   small_4096_trace_on_us, small_4096_trace_off_us  small_4096_us of two fresh jobs, one
 *                         keeping the trace ring (the default --trace-ring) and one with
 *                         --trace-ring 0, measured in turn (on, off, three times each): medians;
 *                         trace_on_small_4096_vs_off their ratio
 *   targets_missed        the targets below that this run missed (unavailable keys count as
 *                         missed), or none
 *
 * Targets (4 ranks, 2 cores): small_4096_us <= 250, small_65536_us <= 300, small_1048576_us <=
 * 600, gpt2_batched_vs_raw <= 1.3, gpt2_batched_ms <= 0.5 x gpt2_loop_ms, async_overlap_ratio <=
 * 1.6, idle_cpu_pct < 0.5, scrape_10000_tensors_ms <= 1, trace_on_small_4096_vs_off <= 1.05. The
 * raw reference runs before and after the daemons' runs (the daemons idle meanwhile); each figure
 * is the median over both. --help prints the usage; a signal,
 * --timeout or a SIGKILL stops the daemons too (bench_guard.h). The daemons inherit the
 * environment, so TSHARD_SHARED_BUFFERS=1 (or 0) measures them with (or without) shared buffers
 * whatever the machine's default (comm/cma.c). A benchmark, not a test. */
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_guard.h"
#include "harness.h"

enum { NSMALL = 3, MAX_NP = 64, MAX_RUNS = 100, MAX_REPS = 10000, NGPT2 = 148 };
static const long SMALL_BYTES[NSMALL] = {4096, 65536, 1048576};
static const double SMALL_TARGET_US[NSMALL] = {250, 300, 600};

typedef struct opts {
  int np, runs, reps, async_mib, idle_s, timeout_s;
  bool quick, wait_stdin;
} opts;

static void usage(const char *self) {
  printf("usage: %s [--np N] [--runs R] [--reps R] [--async-mib N] [--quick] [--timeout SEC]\n"
         "          [--wait-stdin]\n"
         "Starts N tshardd daemons, drives them with the Python package and prints key=value\n"
         "lines: small_<B>_us, small_<B>_raw_us, small_<B>_vs_raw (B = 4096, 65536, 1048576;\n"
         "p50 of S(0)<->S(1) reshards vs raw MPI_Alltoall), gpt2_loop_ms, gpt2_batched_ms,\n"
         "gpt2_raw_ms, gpt2_loop_vs_raw, gpt2_batched_vs_raw (GPT-2-small's 148 tensors, one\n"
         "call each / one reshard_many, vs one MPI_Alltoallv + one MPI_Allgatherv),\n"
         "gpt2_put_loop_ms, gpt2_put_many_ms, gpt2_get_loop_ms, gpt2_get_many_ms (the 148\n"
         "put and got whole, one call each / one put_many or get_many), small148_* (the same\n"
         "for 148 tensors of 3 KiB),\n"
         "async_overlap_ratio (wait=False reshard overlapped with numpy work), idle_cpu_pct,\n"
         "idle_cpu_max_pct (the daemons' CPU when idle), scrape_10000_tensors_ms (GET\n"
         "/metrics of rank 0 with 10,000 tensors stored), targets_missed. The header of\n"
         "tests/bench/bench_many.c explains each. The daemons inherit the environment:\n"
         "TSHARD_SHARED_BUFFERS=1 %s measures them with shared buffers.\n"
         "options:\n"
         "  --np N           daemons (MPI ranks), 1 to %d (default 4)\n"
         "  --runs R         GPT-2, async and raw GPT-2 runs, medians (default 5)\n"
         "  --reps R         small-tensor reshards per size (default 200)\n"
         "  --async-mib N    size of the async reshard's tensor (default 256)\n"
         "  --quick          tiny counts for a check of the keys: --runs 1 --reps 10\n"
         "                   --async-mib 4, idle measured over 1 s\n" TSB_COMMON_USAGE,
         self, self, MAX_NP);
}

static int parse_int(const char *self, const char *flag, const char *text, long lo, long hi,
                     int *out) {
  long v;
  if (tsb_parse_long(self, flag, text, lo, hi, &v))
    return -1;
  *out = (int)v;
  return 0;
}

/* 0: run; 1: --help printed; -1: bad command line (message printed). */
static int parse_opts(int argc, char **argv, opts *o) {
  *o = (opts){4, 5, 200, 256, 10, 0, false, false};
  bool runs = false, reps = false, amib = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(argv[0]);
      return 1;
    }
    int taken = tsb_common_option(argc, argv, &i, &o->timeout_s, &o->wait_stdin);
    if (taken < 0)
      return -1;
    if (taken)
      continue;
    if (strcmp(a, "--quick") == 0) {
      o->quick = true;
      continue;
    }
    int rc;
    if (strcmp(a, "--np") == 0)
      rc = parse_int(argv[0], a, v, 1, MAX_NP, &o->np);
    else if (strcmp(a, "--runs") == 0)
      rc = parse_int(argv[0], a, v, 1, MAX_RUNS, &o->runs), runs = true;
    else if (strcmp(a, "--reps") == 0)
      rc = parse_int(argv[0], a, v, 1, MAX_REPS, &o->reps), reps = true;
    else if (strcmp(a, "--async-mib") == 0)
      rc = parse_int(argv[0], a, v, 1, 4096, &o->async_mib), amib = true;
    else {
      fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], a);
      return -1;
    }
    if (rc)
      return -1;
    i++;
  }
  if (o->quick) { /* explicit counts win */
    o->runs = runs ? o->runs : 1;
    o->reps = reps ? o->reps : 10;
    o->async_mib = amib ? o->async_mib : 4;
    o->idle_s = 1;
  }
  return 0;
}

/* ---- GPT-2-small's tensors ------------------------------------------------------------------ */

typedef struct gtensor {
  long d0, d1; /* d1 = 0: 1-D */
} gtensor;

static int gpt2_tensors(gtensor *t) {
  int n = 0;
  t[n++] = (gtensor){50304, 768};
  t[n++] = (gtensor){1024, 768};
  for (int b = 0; b < 12; b++) {
    const gtensor blk[12] = {{768, 0}, {768, 0}, {768, 2304}, {2304, 0}, {768, 768},  {768, 0},
                             {768, 0}, {768, 0}, {768, 3072}, {3072, 0}, {3072, 768}, {768, 0}};
    for (int k = 0; k < 12; k++)
      t[n++] = blk[k];
  }
  t[n++] = (gtensor){768, 0};
  t[n++] = (gtensor){768, 0};
  return n;
}

/* The extent of block `r` of `d` split over p ranks (blocks of ceil(d / p)). */
static long block(long d, int p, int r) {
  long b = (d + p - 1) / p, lo = b * r;
  return lo >= d ? 0 : (d - lo < b ? d - lo : b);
}

/* ---- the raw MPI reference (--raw, under mpirun -np NP) ------------------------------------- */

static void *raw_alloc(size_t n, int fillv) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "tshard-bench-many --raw: out of memory (%zu bytes)\n", n);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(p, fillv, n ? n : 1); /* pre-faulted */
  return p;
}

/* Every rank's times of `n` calls reduced to the slowest rank's per call, printed by rank 0 as
 * "raw KEY VALUE" lines (in the unit of `scale`). */
static void raw_report(const char *key, double *t, int n, double scale, int rank) {
  double *m = raw_alloc(sizeof(double) * (size_t)n, 0);
  MPI_Reduce(t, m, n, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    for (int k = 0; k < n; k++)
      printf("raw %s %.3f\n", key, m[k] * scale);
  free(m);
}

static int raw_mode(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  opts o;
  if (parse_opts(argc - 1, argv + 1, &o) != 0 || p != o.np) {
    if (rank == 0)
      fprintf(stderr, "%s --raw: runs under mpirun -np NP with the benchmark's options\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  double *t = raw_alloc(sizeof(double) * (size_t)(o.reps > o.runs ? o.reps : o.runs), 0);
  /* Small tensors: every rank holds B / p bytes and sends B / p^2 to each rank. */
  for (int s = 0; s < NSMALL; s++) {
    int per = (int)(SMALL_BYTES[s] / p / p);
    char *src = raw_alloc((size_t)per * p, rank + 1), *dst = raw_alloc((size_t)per * p, 0);
    for (int k = -5; k < o.reps; k++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Alltoall(src, per, MPI_BYTE, dst, per, MPI_BYTE, MPI_COMM_WORLD);
      if (k >= 0)
        t[k] = MPI_Wtime() - t0;
    }
    if (per > 0 && dst[(size_t)per * (p - 1)] != (char)p) {
      fprintf(stderr, "rank %d: the raw reference delivered wrong bytes\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char key[32];
    snprintf(key, sizeof key, "small_%ld", SMALL_BYTES[s]);
    raw_report(key, t, o.reps, 1e6, rank);
    free(src);
    free(dst);
  }
  /* GPT-2: the 2-D tensors' pieces rank -> rank in one MPI_Alltoallv (rows of mine x columns of
   * theirs, all tensors summed), the 1-D tensors' blocks in one MPI_Allgatherv. */
  gtensor g[NGPT2];
  int ng = gpt2_tensors(g);
  int scount[MAX_NP] = {0}, sdispl[MAX_NP], rcount[MAX_NP] = {0}, rdispl[MAX_NP];
  int gcount[MAX_NP] = {0}, gdispl[MAX_NP];
  for (int i = 0; i < ng; i++)
    for (int q = 0; q < p; q++) {
      if (g[i].d1) {
        scount[q] += (int)(block(g[i].d0, p, rank) * block(g[i].d1, p, q) * 4);
        rcount[q] += (int)(block(g[i].d0, p, q) * block(g[i].d1, p, rank) * 4);
      } else
        gcount[q] += (int)(block(g[i].d0, p, q) * 4);
    }
  size_t sn = 0, rn = 0, gn = 0;
  for (int q = 0; q < p; q++) {
    sdispl[q] = (int)sn, rdispl[q] = (int)rn, gdispl[q] = (int)gn;
    sn += (size_t)scount[q], rn += (size_t)rcount[q], gn += (size_t)gcount[q];
  }
  char *src = raw_alloc(sn, rank + 1), *dst = raw_alloc(rn, 0);
  char *gsrc = raw_alloc((size_t)gcount[rank], rank + 1), *gdst = raw_alloc(gn, 0);
  for (int k = -1; k < o.runs; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Alltoallv(src, scount, sdispl, MPI_BYTE, dst, rcount, rdispl, MPI_BYTE, MPI_COMM_WORLD);
    MPI_Allgatherv(gsrc, gcount[rank], MPI_BYTE, gdst, gcount, gdispl, MPI_BYTE, MPI_COMM_WORLD);
    if (k >= 0)
      t[k] = MPI_Wtime() - t0;
  }
  if (dst[rdispl[p - 1]] != (char)p || gdst[gdispl[p - 1]] != (char)p) {
    fprintf(stderr, "rank %d: the raw GPT-2 reference delivered wrong bytes\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  raw_report("gpt2", t, o.runs, 1e3, rank);
  free(src), free(dst), free(gsrc), free(gdst), free(t);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}

/* The raw samples: [0..NSMALL) the small sizes (us), NSMALL GPT-2 (ms). */
typedef struct raw_samples {
  double *v[NSMALL + 1];
  int n[NSMALL + 1];
} raw_samples;

/* Runs the reference job and appends its samples. */
static void raw_reference(int argc, char **argv, const opts *o, raw_samples *rs) {
  FILE *out = NULL;
  pid_t pid = tsb_spawn_raw(o->np, argc, argv, &out);
  char line[256], key[64];
  double x;
  while (out && fgets(line, sizeof line, out)) {
    if (sscanf(line, "raw %63s %lf", key, &x) != 2)
      continue;
    for (int s = 0; s <= NSMALL; s++) {
      char want[32];
      if (s < NSMALL)
        snprintf(want, sizeof want, "small_%ld", SMALL_BYTES[s]);
      else
        snprintf(want, sizeof want, "gpt2");
      if (strcmp(key, want) == 0 && rs->n[s] < 2 * MAX_REPS)
        rs->v[s][rs->n[s]++] = x;
    }
  }
  int rc = pid > 0 ? tsb_wait(pid, &out) : -1;
  TSE_CHECK(rc == 0, "the raw MPI reference job failed (exit status %d)", rc);
}

/* ---- the Python client's run ---------------------------------------------------------------- */

/* The figures the Python half printed (-1: not printed; -2: printed "unavailable"). */
typedef struct py_figs {
  double small_us[NSMALL], loop_ms, batched_ms, overlap;
} py_figs;

static void py_value(const char *line, const char *key, double *out) {
  size_t n = strlen(key);
  if (strncmp(line, key, n) != 0 || line[n] != '=')
    return;
  if (strncmp(line + n + 1, "unavailable", 11) == 0)
    *out = -2;
  else
    sscanf(line + n + 1, "%lf", out);
}

static int python_run(const tse_job *j, const opts *o, py_figs *f, bool small_only) {
  char sock[400], np[16], runs[16], reps[16], amib[16];
  tse_socket_path(j, 0, sock, sizeof sock);
  snprintf(np, sizeof np, "%d", o->np);
  snprintf(runs, sizeof runs, "%d", o->runs);
  snprintf(reps, sizeof reps, "%d", o->reps);
  snprintf(amib, sizeof amib, "%d", o->async_mib);
  const char *argv[] = {"/usr/bin/python3",
                        TSB_PY_SCRIPT,
                        "--socket",
                        sock,
                        "--np",
                        np,
                        "--runs",
                        runs,
                        "--reps",
                        reps,
                        "--async-mib",
                        amib,
                        small_only ? "--small-only" : NULL,
                        NULL};
  const char *env[] = {"PYTHONPATH=" TSB_PYTHONPATH, NULL};
  FILE *out = NULL;
  pid_t pid = tsb_spawn(argv, env, &out);
  char line[256];
  while (out && fgets(line, sizeof line, out)) {
    for (int s = 0; s < NSMALL; s++) {
      char key[32];
      snprintf(key, sizeof key, "small_%ld_us", SMALL_BYTES[s]);
      py_value(line, key, &f->small_us[s]);
    }
    py_value(line, "gpt2_loop_ms", &f->loop_ms);
    py_value(line, "gpt2_batched_ms", &f->batched_ms);
    py_value(line, "async_overlap_ratio", &f->overlap);
    if (!small_only)
      fputs(line, stdout);
    fflush(stdout);
  }
  int rc = pid > 0 ? tsb_wait(pid, &out) : -1;
  TSE_CHECK(rc == 0, "the Python client's run failed (exit status %d)", rc);
  return rc;
}

/* ---- the trace ring's cost ------------------------------------------------------------------ */

#define TRACE_PAIRS 3
static void ratio(const char *key, double a, double b);

/* small_4096_us of a job whose daemons keep the trace ring (the default) against one whose
 * daemons run with --trace-ring 0, both fresh, the small reshards run in turn on each (on, off,
 * on, off, ...): medians of TRACE_PAIRS runs each, and their ratio. Whether it met 1.05. */
static bool trace_cost(const opts *o) {
  static tse_job on, off;
  const char *no_ring[] = {"--trace-ring", "0", NULL};
  double v_on[TRACE_PAIRS], v_off[TRACE_PAIRS];
  int n = 0;
  if (tse_start(&on, o->np, NULL, 120))
    return false;
  if (tse_start(&off, o->np, no_ring, 120)) {
    tse_stop(&on);
    return false;
  }
  for (int k = 0; k < TRACE_PAIRS; k++, n++) {
    py_figs a = {{-1, -1, -1}, -1, -1, -1}, b = a;
    tsb_guard_job(&on);
    python_run(&on, o, &a, true);
    tsb_guard_job(&off);
    python_run(&off, o, &b, true);
    if (!(a.small_us[0] > 0 && b.small_us[0] > 0))
      break;
    v_on[k] = a.small_us[0], v_off[k] = b.small_us[0];
  }
  tsb_guard_job(&on);
  tse_stop(&off);
  tse_stop(&on);
  tsb_guard_job(NULL);
  if (n < TRACE_PAIRS) {
    printf("trace_on_small_4096_vs_off=unavailable\n");
    return false;
  }
  double mon = tsb_median(v_on, n), moff = tsb_median(v_off, n);
  printf("small_4096_trace_on_us=%.1f\nsmall_4096_trace_off_us=%.1f\n", mon, moff);
  ratio("trace_on_small_4096_vs_off", mon, moff);
  return mon / moff <= 1.05;
}

/* ---- idle CPU ------------------------------------------------------------------------------- */

/* The daemons' CPU over idle_s seconds, summed and the busiest, in % of one core. */
static void idle_cpu(const tse_job *j, int idle_s, double *total, double *busiest) {
  double before[MAX_NP];
  for (int r = 0; r < j->np; r++)
    before[r] = tsb_cpu_seconds(j->daemon_pids[r]);
  double w0 = tsb_now();
  struct timespec nap = {idle_s, 0};
  nanosleep(&nap, NULL); /* the measured idle period */
  double wall = tsb_now() - w0;
  *total = 0, *busiest = 0;
  for (int r = 0; r < j->np; r++) {
    double pct = (tsb_cpu_seconds(j->daemon_pids[r]) - before[r]) / wall * 100.0;
    *total += pct;
    if (pct > *busiest)
      *busiest = pct;
  }
}

/* ---- scrapes of the metrics endpoint -------------------------------------------------------- */

enum { SCRAPES = 21 };

/* A port p with p .. p+n-1 free on loopback just now (the daemons bind p + rank), or -1. */
static int free_ports(int n) {
  for (int attempt = 0; attempt < 50; attempt++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), p = -1, ok = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
      p = ntohs(sa.sin_port);
    for (int k = 1; p > 0 && k < n && ok; k++) {
      int g = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in b = sa;
      b.sin_port = htons((uint16_t)(p + k));
      ok = g >= 0 && p + k <= 65535 && bind(g, (struct sockaddr *)&b, sizeof b) == 0;
      if (g >= 0)
        close(g);
    }
    if (fd >= 0)
      close(fd);
    if (p > 0 && ok)
      return p;
  }
  return -1;
}

/* One GET /metrics (HTTP/1.0: the server closes after the answer) into buf: the bytes read, or
 * -1 when the endpoint did not answer 200. */
static long scrape_once(int port, char *buf, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  long got = 0;
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1))
    got = -1;
  while (got >= 0 && (size_t)got < cap - 1) {
    ssize_t n = read(fd, buf + got, cap - 1 - (size_t)got);
    if (n <= 0)
      break;
    got += n;
  }
  if (fd >= 0)
    close(fd);
  if (got < 0)
    return -1;
  buf[got] = '\0';
  return strncmp(buf, "HTTP/1.", 7) == 0 && strncmp(buf + 8, " 200", 4) == 0 ? got : -1;
}

/* The median ms of SCRAPES scrapes (after one to warm up), checked to show the tensors stored;
 * -1 when the endpoint failed. */
static double scrape_ms(int port, long *bytes) {
  static char buf[1 << 20];
  double t[SCRAPES];
  *bytes = scrape_once(port, buf, sizeof buf);
  const char *at = *bytes > 0 ? strstr(buf, "\ntshard_tensors{") : NULL;
  at = at ? strchr(at, '}') : NULL;
  TSE_CHECK(at && atol(at + 2) >= 10000, "the scrape shows 10,000 tensors stored");
  if (!at)
    return -1;
  for (int i = 0; i < SCRAPES; i++) {
    double t0 = tsb_now();
    long n = scrape_once(port, buf, sizeof buf);
    t[i] = (tsb_now() - t0) * 1e3;
    if (n < 0)
      return -1;
  }
  return tsb_median(t, SCRAPES);
}

/* ---- the run -------------------------------------------------------------------------------- */

static void miss(char *list, size_t cap, const char *what) {
  size_t len = strlen(list);
  snprintf(list + len, cap - len, "%s%s", len ? "," : "", what);
}

static void ratio(const char *key, double a, double b) {
  if (a > 0 && b > 0)
    printf("%s=%.3f\n", key, a / b);
  else
    printf("%s=unavailable\n", key);
}

/* daemon_transfers: the daemons' own words in their log ("transfers between the daemons: ..."). */
static void print_transfers(const tse_job *job) {
  static const struct {
    const char *says, *key;
  } kinds[] = {{"single copies, shared buffers", "shared_buffers"},
               {"single copies (buffers not shared)", "single_copies"},
               {"MPI", "mpi"}};
  const char *seen = NULL;
  bool mixed = false;
  char line[1024];
  FILE *f = fopen(job->log, "r");
  while (f && fgets(line, sizeof line, f)) {
    const char *at = strstr(line, "transfers between the daemons: ");
    if (!at)
      continue;
    at += strlen("transfers between the daemons: ");
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
      if (strncmp(at, kinds[k].says, strlen(kinds[k].says)) == 0) {
        mixed = mixed || (seen && seen != kinds[k].key);
        seen = kinds[k].key;
        break;
      }
  }
  if (f)
    fclose(f);
  printf("daemon_transfers=%s\n", mixed ? "mixed" : seen ? seen : "unknown");
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
  tsb_single_copy_as_users(); /* the daemons' and the raw reference's transfers alike */
  int mport = free_ports(o.np);
  TSE_CHECK(mport > 0, "no free ports for the metrics endpoint");
  char maddr[32];
  snprintf(maddr, sizeof maddr, "127.0.0.1:%d", mport);
  const char *extra[] = {"--metrics", maddr, NULL};
  if (mport <= 0 || tse_start(&job, o.np, extra, 120))
    return 1;
  tsb_announce(&job, o.wait_stdin);
  print_transfers(&job);
  printf("np=%d\nruns=%d\nreps=%d\nasync_mib=%d\n", o.np, o.runs, o.reps, o.async_mib);
  fflush(stdout);

  static raw_samples rs;
  for (int s = 0; s <= NSMALL; s++) {
    rs.v[s] = calloc(2 * MAX_REPS, sizeof(double));
    TSE_CHECK(rs.v[s] != NULL, "out of memory");
  }
  raw_reference(argc, argv, &o, &rs);
  py_figs f = {{-1, -1, -1}, -1, -1, -1};
  python_run(&job, &o, &f, false);
  raw_reference(argc, argv, &o, &rs);

  char missed[512] = "";
  for (int s = 0; s < NSMALL; s++) {
    double r = rs.n[s] ? tsb_median(rs.v[s], rs.n[s]) : -1;
    printf("small_%ld_raw_us=%.1f\n", SMALL_BYTES[s], r);
    char key[48];
    snprintf(key, sizeof key, "small_%ld_vs_raw", SMALL_BYTES[s]);
    ratio(key, f.small_us[s], r);
    if (!(f.small_us[s] > 0 && f.small_us[s] <= SMALL_TARGET_US[s])) {
      snprintf(key, sizeof key, "small_%ld", SMALL_BYTES[s]);
      miss(missed, sizeof missed, key);
    }
  }
  double graw = rs.n[NSMALL] ? tsb_median(rs.v[NSMALL], rs.n[NSMALL]) : -1;
  printf("gpt2_raw_ms=%.3f\n", graw);
  ratio("gpt2_loop_vs_raw", f.loop_ms, graw);
  if (f.batched_ms == -1) /* the Python half stopped before it: say so, never a number */
    printf("gpt2_batched_ms=unavailable\n");
  ratio("gpt2_batched_vs_raw", f.batched_ms, graw);
  ratio("gpt2_batched_vs_loop", f.batched_ms, f.loop_ms);
  if (!(f.batched_ms > 0 && graw > 0 && f.batched_ms / graw <= 1.3))
    miss(missed, sizeof missed, "gpt2_batched_vs_raw");
  if (!(f.batched_ms > 0 && f.batched_ms <= 0.5 * f.loop_ms))
    miss(missed, sizeof missed, "gpt2_batched_vs_loop");
  if (f.overlap == -1)
    printf("async_overlap_ratio=unavailable\n");
  if (!(f.overlap > 0 && f.overlap <= 1.6))
    miss(missed, sizeof missed, "async_overlap_ratio");
  long sbytes = 0;
  double sms = scrape_ms(mport, &sbytes);
  if (sms >= 0)
    printf("scrape_10000_tensors_ms=%.3f\nscrape_bytes=%ld\n", sms, sbytes);
  else
    printf("scrape_10000_tensors_ms=unavailable\n");
  if (!(sms >= 0 && sms <= 1.0))
    miss(missed, sizeof missed, "scrape_10000_tensors_ms");
  fflush(stdout);

  double total, busiest;
  idle_cpu(&job, o.idle_s, &total, &busiest);
  printf("idle_s=%d\nidle_cpu_pct=%.2f\nidle_cpu_max_pct=%.2f\n", o.idle_s, total, busiest);
  if (!(total < 0.5))
    miss(missed, sizeof missed, "idle_cpu_pct");
  fflush(stdout);
  tse_stop(&job);
  tsb_guard_job(NULL);
  if (!trace_cost(&o))
    miss(missed, sizeof missed, "trace_on_small_4096_vs_off");
  printf("targets_missed=%s\n", missed[0] ? missed : "none");
  fflush(stdout);
  for (int s = 0; s <= NSMALL; s++)
    free(rs.v[s]);
  return tse_failures ? 1 : 0;
}
