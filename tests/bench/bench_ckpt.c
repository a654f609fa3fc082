/* bench_ckpt.c - the checkpoint benchmark: `mpirun -np 4 tshard-bench-ckpt [--dir D]` saves and
 * loads a 1 GiB f32 tensor ([16384, 16384], S(0) over the ranks) with the engine (the store and
 * ts_ckpt_save / ts_ckpt_load, as the daemons run them, without the client round trip) and prints
 * key=value lines:
 *   save_gbps            save (files, fsync, index, rename into place), slowest rank
 *   load_gbps            load under the saved attribute (every byte read once, checksums inline)
 *   load_resharded_gbps  saved S(0), loaded S(1): the load's cheaper path (the direct path: with
 *                        the default chunks each rank reads whole [1024, 4096] chunks straight
 *                        into its slice; with whole pieces, the column runs of its box, batched
 *                        through io_uring and checked by blocks); load_resharded_path says which
 *                        path ran, load_resharded_io how (preadv: whole chunks), and
 *                        load_resharded_verify_extra_bytes what was read only to verify
 *   write_limit_gbps     the same bytes as plain files, one per rank, 64 MiB sequential writes
 *                        and fsync, same directory; each run writes a new file and then removes
 *                        the previous run's, as the save's atomic replace holds the old and the
 *                        new checkpoint for a while (on this VM pages never used before cost
 *                        several times more than reused ones, so an in-place rewrite would not
 *                        be the same work)
 *   read_limit_gbps      those files read back with 64 MiB sequential preads
 *   verified_read_limit_gbps  what verifying every byte costs on this machine, apart from the
 *                        checkpoint code: after each load, the round's plain file is read again
 *                        (its pages now warm) twice, in turn first: plainly as above, and in
 *                        1 MiB preads into the loaded slice, each step hashed with XXH3 right
 *                        after it arrived (what a load's read does at least);
 *                        verified_read_vs_read_limit is the median of those two reads' time
 *                        ratios: the best a load that checks its bytes can reach against the
 *                        read limit here
 *   *_vs_limit           the median over rounds of each round's ratio: a run is two rounds
 *                        (the load under the saved attribute, then the resharded one), each a
 *                        plain write and a save, then a plain read and the load; so every load
 *                        reads a checkpoint just saved (as a job restarting from its last save
 *                        does), every limit read a file just written (on this VM the first read
 *                        of fresh page-cache pages is 2-3x slower than a second one), and each
 *                        operation is paired with the limit measured next to it (this shared
 *                        machine's speed drifts from second to second); *_vs_limit_runs lists
 *                        the rounds' ratios; fs= the directory's filesystem type
 * The asynchronous save (ts_ckpt_save_begin, a writer thread per rank running ts_ckpt_job_write,
 * ts_ckpt_save_end: the daemons' background save), per run after the rounds above:
 *   async_blocked_ms     median time from the start of an asynchronous save of the 1 GiB tensor
 *                        until every rank took its copy (what a client waits for), slowest rank
 *   async_blocked_vs_memcpy  the median of each run's blocked time over memcpy_ms, one memcpy
 *                        of each rank's slice into a buffer written before (every rank at once)
 *   async_total_vs_sync  the median of each run's time until the checkpoint is in place (the
 *                        save alone) over the synchronous save of the same run
 *   reshard_during_save_vs_alone  a 256 MiB reshard ([8192, 8192] f32, S(0) to S(1)) issued
 *                        right after the asynchronous save's copy, while the writers write,
 *                        over the same reshard with no save (median of the runs' ratios)
 * TSHARD_BENCH_VERBOSE=1 prints every round's times to stderr, with the CPU time all ranks spent
 * in the limit read and in the load (their work, apart from the machine's other tenants).
 * The checkpoint is saved in the library's default chunks (16 MiB; --chunk-bytes N other chunks,
 * -1 whole pieces); chunk_bytes= says which.
 *   hf_export_gbps       the tensor column-split S(1) exported as one Hugging Face
 *                        model.safetensors (each rank maps the file and copies its columns'
 *                        runs in, fsync, rename)
 *   hf_import_gbps       that file imported under S(1) (each rank preads its columns' runs)
 *   hf_export_vs_write_limit, hf_import_vs_read_limit  the medians of each round's ratio to
 *                        a plain write (read) of the same bytes just before it, as above
 *                        (targets: >= 0.6 and >= 0.5); *_runs lists the rounds' ratios
 * GB/s are 1e9 bytes of the tensor per second; the gbps figures are medians over runs. Reads
 * are measured the same way for the limit and the loads: by default the files were just written
 * and are in the page cache (read_cache=warm); --cold evicts every file (posix_fadvise
 * DONTNEED after fsync) before each read, so both read from the device. The plain write and the
 * save alternate which goes first. --runs runs (default 9: a load takes 60-120 ms and this
 * shared machine's speed drifts 2-3x within seconds, so single rounds' ratios range from 0.3 to
 * 1.7, and a median of five still moved by 0.2 between invocations). The directory (default a
 * fresh one under $TMPDIR or /tmp) gets a subdirectory that is removed at the end. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "ts_ckpt.h"
#include "ts_comm.h"
/* XXH3 as the checkpoint code computes it: through libxxhash's x86 dispatcher */
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#define ROWS 16384
#define COLS 16384
#define IO_CHUNK ((size_t)64 << 20)
#define VERIFY_STEP ((size_t)1 << 20)

static int rank, size;
static ts_world *W;
static volatile uint64_t verify_sink; /* keeps the verified reads' digests alive */

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, const char *msg) {
  fprintf(stderr, "tshard-bench-ckpt: rank %d: %s: %s\n", rank, what, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static const char *fs_name(const char *dir) {
  struct statfs s;
  if (statfs(dir, &s) != 0)
    return "unknown";
  switch ((unsigned long)s.f_type) {
  case 0xEF53: return "ext4";
  case 0x01021994: return "tmpfs";
  case 0x58465342: return "xfs";
  case 0x9123683E: return "btrfs";
  case 0x794c7630: return "overlayfs";
  case 0x6969: return "nfs";
  case 0x2fc12fc1: return "zfs";
  case 0x01021997: return "9p";
  case 0x65735546: return "fuse";
  default: return "other";
  }
}

/* Evicts a file's cached pages (after it was synced). */
static void evict(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd >= 0) {
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

/* Writes a new file and then removes the previous one (`old`, NULL: none), as an atomic
 * replace must: the page cache holds both for a while, as it does during a save. */
static double plain_write(const char *path, const char *old, const void *buf, size_t bytes) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    die(path, strerror(errno));
  for (size_t off = 0; off < bytes; off += IO_CHUNK) {
    size_t n = bytes - off < IO_CHUNK ? bytes - off : IO_CHUNK;
    if (pwrite(fd, (const char *)buf + off, n, (off_t)off) != (ssize_t)n)
      die(path, strerror(errno));
  }
  if (fsync(fd) != 0)
    die(path, strerror(errno));
  close(fd);
  if (old)
    unlink(old);
  MPI_Barrier(MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

/* This process's CPU time (user and system), for the verbose rounds: the loads' work apart from
 * the machine's other tenants. */
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Reads a file into buf in preads of `step` bytes, timed between barriers; with st (the
 * verified-read floor) each step is hashed right after it arrived. */
static double timed_read(const char *path, void *buf, size_t bytes, size_t step, XXH3_state_t *st) {
  if (st)
    XXH3_64bits_reset(st);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    die(path, strerror(errno));
  for (size_t off = 0; off < bytes; off += step) {
    size_t n = bytes - off < step ? bytes - off : step;
    if (pread(fd, (char *)buf + off, n, (off_t)off) != (ssize_t)n)
      die(path, "short read");
    if (st)
      XXH3_64bits_update(st, (char *)buf + off, n);
  }
  close(fd);
  if (st)
    verify_sink ^= XXH3_64bits_digest(st);
  MPI_Barrier(MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

/* The plain read of the limit: 64 MiB sequential preads. */
static double plain_read(const char *path, void *buf, size_t bytes) {
  return timed_read(path, buf, bytes, IO_CHUNK, NULL);
}

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  if (ts_attr_parse(text, &a, &err))
    die(text, err.msg);
  return a;
}

/* Hugging Face safetensors through the same store: the 1 GiB tensor, column-split S(1) on every
 * rank, exported into one model.safetensors (each rank copies its columns' runs into a shared
 * mapping of the file) and imported back under S(1) (each rank preads only its columns' runs),
 * `runs` rounds. Each export is paired with a plain write of the same bytes (`plain`, one file
 * per rank, as the write limit) just before it and each import with a plain read of that file
 * just before it (the read limit), and the ratios are the medians of the rounds' ratios, as for
 * the checkpoint's save and load. Prints hf_export_gbps, hf_import_gbps (medians),
 * hf_export_vs_write_limit, hf_import_vs_read_limit and the rounds' ratios. */
static void bench_hf(ts_store *s, const char *base, const ts_attr *a1, int runs, const char *plain,
                     void *buf, int64_t total) {
  ts_error err;
  if (ts_store_reshard(s, W, "w", a1, "", NULL, NULL, &err))
    die("reshard to S(1)", err.msg);
  char path[700];
  snprintf(path, sizeof path, "%s/model.safetensors", base);
  double *te = calloc((size_t)runs, 8), *ti = calloc((size_t)runs, 8);
  double *re = calloc((size_t)runs, 8), *ri = calloc((size_t)runs, 8);
  const char *names[1] = {"w"};
  const char *attr_names[1] = {"w"};
  const ts_attr *attrs[1] = {a1};
  ts_st_import_spec sp = {.path = path, .nattrs = 1, .attr_names = attr_names, .attrs = attrs};
  for (int r = 0; r < runs; r++) {
    ts_stored *t = ts_store_find(s, "w");
    size_t mine = t->local.bytes;
    double tw = plain_write(plain, NULL, t->local.data, mine);
    ts_st_result res;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (ts_st_export(s, W, path, names, 1, 0, NULL, NULL, 0, &res, &err))
      die("safetensors export", err.msg);
    MPI_Barrier(MPI_COMM_WORLD);
    te[r] = MPI_Wtime() - t0;
    ts_st_result_clear(&res);
    ts_store_drop(s, "w", NULL);
    double tr = plain_read(plain, buf, mine);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    if (ts_st_import(s, W, &sp, &res, &err))
      die("safetensors import", err.msg);
    MPI_Barrier(MPI_COMM_WORLD);
    ti[r] = MPI_Wtime() - t0;
    ts_st_result_clear(&res);
    re[r] = tw / te[r];
    ri[r] = tr / ti[r];
  }
  if (rank == 0) {
    printf("hf_export_vs_write_limit_runs=");
    for (int r = 0; r < runs; r++)
      printf("%s%.2f", r ? "," : "", re[r]);
    printf("\nhf_import_vs_read_limit_runs=");
    for (int r = 0; r < runs; r++)
      printf("%s%.2f", r ? "," : "", ri[r]);
    double gb = (double)total / 1e9;
    printf("\nhf_export_gbps=%.3f\nhf_import_gbps=%.3f\n", gb / median(te, runs),
           gb / median(ti, runs));
    printf("hf_export_vs_write_limit=%.2f\nhf_import_vs_read_limit=%.2f\n", median(re, runs),
           median(ri, runs));
    unlink(path);
  }
  unlink(plain);
  free(te), free(ti), free(re), free(ri);
}

/* The writer thread, as the daemon runs it (daemon/ops/bgsave.c): SCHED_IDLE. */
static void *bench_writer(void *job) {
  struct sched_param sp = {0};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
  ts_ckpt_job_write(job);
  return NULL;
}

/* The 256 MiB reshard of "r" to S(1) and back; returns the first's time (between barriers). */
static double reshard_r(ts_store *s, const ts_attr *to, const ts_attr *back) {
  ts_error err;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (ts_store_reshard(s, W, "r", to, "", NULL, NULL, &err))
    die("reshard", err.msg);
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime() - t0;
  if (ts_store_reshard(s, W, "r", back, "", NULL, NULL, &err))
    die("reshard back", err.msg);
  return t;
}

/* The asynchronous save's figures (see the top of the file), printed by rank 0. */
static void async_rounds(ts_store *s, const char *ckpt, int runs, long long chunk,
                         const ts_attr *a0, const ts_attr *a1) {
  ts_error err;
  int64_t rshape[2] = {8192, 8192};
  ts_stored *r = NULL, *t = ts_store_find(s, "w");
  if (ts_store_add(s, "r", 2, rshape, TS_F32, a0, NULL, &r, &err))
    die("create r", err.msg);
  size_t mine = t->local.bytes;
  void *dst = malloc(mine);
  if (!dst)
    die("memcpy buffer", "out of memory");
  memset(dst, 2, mine);
  double *blocked = calloc((size_t)runs, 8), *rb = calloc((size_t)runs, 8),
         *rt = calloc((size_t)runs, 8), *rr = calloc((size_t)runs, 8);
  const char *names[1] = {"w"};
  ts_ckpt_save_opts so = {false, false, 0, chunk, 0, false};
  for (int i = 0; i < runs; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    memcpy(dst, t->local.data, mine);
    MPI_Barrier(MPI_COMM_WORLD);
    double copy = MPI_Wtime() - t0;
    t0 = MPI_Wtime();
    if (ts_ckpt_save(s, W, ckpt, names, 1, &so, NULL, &err))
      die("save", err.msg);
    MPI_Barrier(MPI_COMM_WORLD);
    double sync = MPI_Wtime() - t0;
    /* the asynchronous save alone, then again with the reshard issued after its copy */
    double total = 0, during = 0;
    for (int with = 0; with < 2; with++) {
      ts_ckpt_job *job = NULL;
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      if (ts_ckpt_save_begin(s, W, ckpt, names, 1, &so, &job, &err))
        die("asynchronous save", err.msg);
      MPI_Barrier(MPI_COMM_WORLD);
      if (!with)
        blocked[i] = MPI_Wtime() - t0;
      pthread_t th;
      if (pthread_create(&th, NULL, bench_writer, job) != 0)
        die("writer thread", strerror(errno));
      if (with)
        during = reshard_r(s, a1, a0);
      pthread_join(th, NULL);
      ts_ckpt_report rep;
      if (ts_ckpt_save_end(job, W, &rep, &err))
        die("asynchronous save's end", err.msg);
      MPI_Barrier(MPI_COMM_WORLD);
      if (!with)
        total = MPI_Wtime() - t0;
      ts_ckpt_job_destroy(&job);
    }
    double alone = reshard_r(s, a1, a0);
    rb[i] = blocked[i] / copy;
    rt[i] = total / sync;
    rr[i] = during / alone;
    if (rank == 0 && getenv("TSHARD_BENCH_VERBOSE"))
      fprintf(stderr,
              "async run %d: memcpy %.3f s, blocked %.3f s, total %.3f s, sync save "
              "%.3f s; reshard alone %.3f s, during the save %.3f s\n",
              i, copy, blocked[i], total, sync, alone, during);
  }
  if (rank == 0)
    printf("async_blocked_ms=%.1f\nasync_blocked_vs_memcpy=%.2f\nasync_total_vs_sync=%.2f\n"
           "reshard_during_save_vs_alone=%.2f\n",
           1000 * median(blocked, runs), median(rb, runs), median(rt, runs), median(rr, runs));
  ts_store_drop(s, "r", NULL);
  free(dst), free(blocked), free(rb), free(rt), free(rr);
}

int main(int argc, char **argv) {
  const char *dir_opt = NULL;
  int runs = 9;
  bool cold = false, async_only = false;
  long long chunk = TS_CKPT_CHUNK_DEFAULT;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: mpirun -np 4 tshard-bench-ckpt [--dir D] [--runs N] [--cold] "
             "[--chunk-bytes N] [--async-only]\n"
             "  --dir D     the directory to save into (default: a fresh one under $TMPDIR or "
             "/tmp)\n"
             "  --runs N    runs; medians are printed (default 9)\n"
             "  --cold      evict the files from the page cache before every read\n"
             "  --async-only  only the asynchronous save's figures (async_*, reshard_*)\n"
             "  --chunk-bytes N  save in chunks of about N bytes (default 16777216, the "
             "library's; -1: whole pieces)\n"
             "prints save_gbps, load_gbps, load_resharded_gbps, write_limit_gbps, "
             "read_limit_gbps, verified_read_limit_gbps, their ratios, fs=, and the "
             "asynchronous save's async_blocked_ms, async_blocked_vs_memcpy, "
             "async_total_vs_sync, reshard_during_save_vs_alone (key=value lines)\n");
      return 0;
    } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir_opt = argv[++i];
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--cold") == 0) {
      cold = true;
    } else if (strcmp(argv[i], "--async-only") == 0) {
      async_only = true;
    } else if (strcmp(argv[i], "--chunk-bytes") == 0 && i + 1 < argc) {
      char *end = NULL;
      chunk = strtoll(argv[++i], &end, 10);
      if (!end || *end || chunk < -1 || chunk == 0) {
        fprintf(stderr, "tshard-bench-ckpt: --chunk-bytes takes a byte count (> 0) or -1 "
                        "(whole pieces)\n");
        return 2;
      }
    } else {
      fprintf(stderr, "tshard-bench-ckpt: unknown argument '%s'; see --help\n", argv[i]);
      return 2;
    }
  }
  if (runs < 1 || runs > 50) {
    fprintf(stderr, "tshard-bench-ckpt: --runs must be 1 to 50\n");
    return 2;
  }
  ts_error err;
  if (ts_world_init(&argc, &argv, MPI_THREAD_SERIALIZED, &W, &err) != TS_OK) {
    fprintf(stderr, "world init: %s\n", err.msg);
    return 1;
  }
  rank = ts_world_rank(W);
  size = ts_world_size(W);
  char base[512] = "";
  if (rank == 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/tshard-bench-ckpt-XXXXXX",
             dir_opt ? dir_opt : (tmp && tmp[0] ? tmp : "/tmp"));
    if (!mkdtemp(base))
      die(base, strerror(errno));
  }
  MPI_Bcast(base, sizeof base, MPI_CHAR, 0, MPI_COMM_WORLD);
  char ckpt[600], plain[600], plains[2][600];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", base);
  for (int k = 0; k < 2; k++)
    snprintf(plains[k], sizeof plains[k], "%s/plain-%d-%d", base, rank, k);
  int64_t shape[2] = {ROWS, COLS};
  const int64_t total = (int64_t)ROWS * COLS * 4;
  ts_store *s = NULL;
  ts_store_create(&s, rank, 0, NULL);
  char txt[128];
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[S(0)]", size);
  ts_attr *a0 = attr(txt);
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[S(1)]", size);
  ts_attr *a1 = attr(txt);
  ts_stored *t = NULL;
  if (ts_store_add(s, "w", 2, shape, TS_F32, a0, NULL, &t, &err))
    die("create", err.msg);
  float *v = t->local.data;
  for (size_t i = 0; i < t->local.bytes / 4; i++)
    v[i] = (float)(i % 1000003) + (float)rank;
  size_t mine = t->local.bytes;
  void *buf = malloc(mine);
  if (!buf)
    die("buffer", "out of memory");
  memset(buf, 1, mine);
  /* the kernel writes into the limit's buffer once before the first round: on this VM its first
   * write into a page costs several times a later one (the first round's read ran at ~1 GB/s),
   * and the loads' targets are pool buffers the kernel has written before */
  int zero = open("/dev/zero", O_RDONLY);
  for (size_t off = 0; zero >= 0 && off < mine; off += IO_CHUNK)
    if (read(zero, (char *)buf + off, mine - off < IO_CHUNK ? mine - off : IO_CHUNK) < 0)
      break;
  if (zero >= 0)
    close(zero);
  /* per run two rounds (i = 2 r + k): k = 0 the load under the saved attribute, k = 1 the
   * resharded load; each round saves anew, so every load reads a checkpoint just saved (as a job
   * restarting from its last save does) and every limit read a plain file just written */
  size_t R = 2 * (size_t)runs;
  double *tw = calloc(R, 8), *tr = calloc(R, 8), *ts = calloc(R, 8), *tl = calloc(R, 8),
         *rs = calloc(R, 8), *rl = calloc(R, 8), *tvp = calloc(R, 8), *tvv = calloc(R, 8),
         *rv = calloc(R, 8);
  XXH3_state_t *hst = XXH3_createState(); /* the verified-read floor's */
  if (!hst)
    die("hash state", "out of memory");
  int64_t extra = 0;
  int moved = 0;
  bool ring = false;
  char mine_file[700];
  snprintf(mine_file, sizeof mine_file, "%s/rank-%05d.safetensors", ckpt, rank);
  for (int i = 0; i < (async_only ? 0 : (int)R); i++) {
    int k = i % 2;
    t = ts_store_find(s, "w"); /* S(0): made or reloaded before */
    snprintf(plain, sizeof plain, "%s", plains[i % 2]);
    const char *old = i ? plains[(i + 1) % 2] : NULL;
    /* the plain write and the save alternate which goes first (a virtual disk's write bursts
     * and throttling then favour neither) */
    if ((i / 2) % 2 == 0)
      tw[i] = plain_write(plain, old, t->local.data, mine);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    ts_ckpt_save_opts so = {false, false, 0, chunk, 0, false};
    if (ts_ckpt_save(s, W, ckpt, NULL, 0, &so, NULL, &err))
      die("save", err.msg);
    ts[i] = MPI_Wtime() - t0;
    if ((i / 2) % 2 == 1)
      tw[i] = plain_write(plain, old, t->local.data, mine);
    if (cold)
      evict(plain);
    double c0 = cpu_now();
    tr[i] = plain_read(plain, buf, mine);
    double cr = cpu_now() - c0;
    ts_store_drop(s, "w", NULL);
    if (cold)
      evict(mine_file);
    ts_ckpt_report rep;
    MPI_Barrier(MPI_COMM_WORLD);
    c0 = cpu_now();
    t0 = MPI_Wtime();
    if (ts_ckpt_load(s, W, ckpt, NULL, 0, k ? a1 : NULL, NULL, &rep, &err))
      die("load", err.msg);
    MPI_Barrier(MPI_COMM_WORLD);
    tl[i] = MPI_Wtime() - t0;
    double cpu[2] = {cr, cpu_now() - c0};
    MPI_Allreduce(MPI_IN_PLACE, cpu, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    rs[i] = tw[i] / ts[i];
    rl[i] = tr[i] / tl[i];
    /* the verified-read floor: the plain file again, now warm, plainly and verified (into the
     * loaded slice, where a load's reads land), in turn first */
    t = ts_store_find(s, "w");
    for (int j = 0; j < 2; j++)
      if ((j + i) % 2 == 0)
        tvp[i] = plain_read(plain, buf, mine);
      else
        tvv[i] = timed_read(plain, t->local.data, t->local.bytes < mine ? t->local.bytes : mine,
                            VERIFY_STEP, hst);
    rv[i] = tvp[i] / tvv[i];
    if (rank == 0 && getenv("TSHARD_BENCH_VERBOSE"))
      fprintf(stderr,
              "round %d: write %.3f s, save %.3f s; read %.3f s, %s load %.3f s (cpu of all "
              "ranks: read %.3f s, load %.3f s)\n",
              i, tw[i], ts[i], tr[i], k ? "resharded" : "same-attribute", tl[i], cpu[0], cpu[1]);
    if (k) {
      extra = rep.bytes_verified_extra;
      moved = rep.tensors_moved;
      ring = rep.ranged_io_uring;
      /* back to S(0) for the next save */
      ts_store_drop(s, "w", NULL);
      if (ts_ckpt_load(s, W, ckpt, NULL, 0, NULL, NULL, NULL, &err))
        die("reload", err.msg);
    }
  }
  /* the rounds' figures apart: [0, runs) the same-attribute loads, [runs, 2 runs) the
   * resharded ones */
  double *tlx = calloc(R, 8), *rlx = calloc(R, 8);
  for (int i = 0; i < (int)R; i++) {
    tlx[(i % 2) * runs + i / 2] = tl[i];
    rlx[(i % 2) * runs + i / 2] = rl[i];
  }
  MPI_Allreduce(MPI_IN_PLACE, &extra, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  double gb = (double)total / 1e9;
  double save = gb / median(ts, (int)R), load = gb / median(tlx, runs),
         resh = gb / median(tlx + runs, runs), wl = gb / median(tw, (int)R),
         rlim = gb / median(tr, (int)R), vlim = gb / median(tvv, (int)R);
  if (rank == 0)
    printf("ranks=%d\nbytes=%lld\nruns=%d\nfs=%s\ndir=%s\nread_cache=%s\nchunk_bytes=%lld\n", size,
           (long long)total, runs, fs_name(base), base, cold ? "cold" : "warm", chunk);
  if (rank == 0 && !async_only) {
    printf("save_gbps=%.3f\nload_gbps=%.3f\nload_resharded_gbps=%.3f\n", save, load, resh);
    printf("write_limit_gbps=%.3f\nread_limit_gbps=%.3f\n", wl, rlim);
    printf("verified_read_limit_gbps=%.3f\nverified_read_vs_read_limit=%.2f\n", vlim,
           median(rv, (int)R));
    const char *keys[3] = {"save", "load", "load_resharded"};
    double *per[3] = {rs, rlx, rlx + runs};
    int nper[3] = {(int)R, runs, runs};
    for (int k = 0; k < 3; k++) { /* each round's ratio, in order, then the median */
      printf("%s_vs_limit_runs=", keys[k]);
      for (int i = 0; i < nper[k]; i++)
        printf("%s%.2f", i ? "," : "", per[k][i]);
      printf("\n");
    }
    printf("save_vs_limit=%.2f\nload_vs_limit=%.2f\nload_resharded_vs_limit=%.2f\n",
           median(rs, (int)R), median(rlx, runs), median(rlx + runs, runs));
    printf("load_resharded_path=%s\n", moved ? "move" : "direct");
    printf("load_resharded_io=%s\n", moved ? "none" : ring ? "io_uring" : "preadv");
    printf("load_resharded_verify_extra_bytes=%lld\n", (long long)extra);
  }
  async_rounds(s, ckpt, runs, chunk, a0, a1);
  if (!async_only)
    bench_hf(s, base, a1, runs, plains[0], buf, total);
  unlink(plains[0]);
  unlink(plains[1]);
  ts_store_destroy(&s);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char idx[700];
    snprintf(idx, sizeof idx, "%s/%s", ckpt, TS_CKPT_INDEX);
    for (int i = 0; i < size; i++) {
      char f[700];
      snprintf(f, sizeof f, "%s/rank-%05d.safetensors", ckpt, i);
      unlink(f);
    }
    unlink(idx);
    rmdir(ckpt);
    rmdir(base);
  }
  free(buf), free(tw), free(tr), free(ts), free(tl), free(rs), free(rl), free(tlx), free(rlx);
  free(tvp), free(tvv), free(rv);
  XXH3_freeState(hst);
  ts_attr_destroy(&a0);
  ts_attr_destroy(&a1);
  ts_world_finalize(&W, NULL);
  return 0;
}
