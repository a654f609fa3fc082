/* bench_ckpt.c - the checkpoint benchmark: `mpirun -np 4 tshard-bench-ckpt [--dir D]` saves and
 * loads a 1 GiB f32 tensor ([16384, 16384], S(0) over the ranks) with the engine (the store and
 * ts_ckpt_save / ts_ckpt_load, as the daemons run them, without the client round trip) and prints
 * key=value lines:
 *   save_gbps            save (files, fsync, index, rename into place), slowest rank
 *   load_gbps            load under the saved attribute (every byte read once, checksums inline)
 *   load_resharded_gbps  saved S(0), loaded S(1): the load's cheaper path (the move path: each
 *                        piece read once, whole, by one rank, then copied to the column bands;
 *                        load_resharded_path says which ran, load_resharded_verify_extra_bytes
 *                        what the direct path would read only to verify)
 *   write_limit_gbps     the same bytes as plain files, one per rank, 64 MiB sequential writes
 *                        and fsync, same directory; each run writes a new file and then removes
 *                        the previous run's, as the save's atomic replace holds the old and the
 *                        new checkpoint for a while (on this VM pages never used before cost
 *                        several times more than reused ones, so an in-place rewrite would not
 *                        be the same work)
 *   read_limit_gbps      those files read back with 64 MiB sequential preads
 *   *_vs_limit           the ratios; fs= the directory's filesystem type
 * GB/s are 1e9 bytes of the tensor per second. Reads are measured the same way for the limit and
 * the loads: by default the files were just written and are in the page cache (read_cache=warm);
 * --cold evicts every file (posix_fadvise DONTNEED after fsync) before each read, so both read
 * from the device. The plain write and the save alternate which goes first. Median of --runs
 * runs (default 3). The directory (default a fresh one under
 * $TMPDIR or /tmp) gets a subdirectory that is removed at the end. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "ts_ckpt.h"
#include "ts_comm.h"

#define ROWS 16384
#define COLS 16384
#define IO_CHUNK ((size_t)64 << 20)

static int rank, size;
static ts_world *W;

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

static double plain_read(const char *path, void *buf, size_t bytes) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    die(path, strerror(errno));
  for (size_t off = 0; off < bytes; off += IO_CHUNK) {
    size_t n = bytes - off < IO_CHUNK ? bytes - off : IO_CHUNK;
    if (pread(fd, (char *)buf + off, n, (off_t)off) != (ssize_t)n)
      die(path, "short read");
  }
  close(fd);
  MPI_Barrier(MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  if (ts_attr_parse(text, &a, &err))
    die(text, err.msg);
  return a;
}

int main(int argc, char **argv) {
  const char *dir_opt = NULL;
  int runs = 3;
  bool cold = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: mpirun -np 4 tshard-bench-ckpt [--dir D] [--runs N] [--cold]\n"
             "  --dir D     the directory to save into (default: a fresh one under $TMPDIR or "
             "/tmp)\n"
             "  --runs N    runs; the median is printed (default 3)\n"
             "  --cold      evict the files from the page cache before every read\n"
             "prints save_gbps, load_gbps, load_resharded_gbps, write_limit_gbps, "
             "read_limit_gbps, their ratios and fs= (key=value lines)\n");
      return 0;
    } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir_opt = argv[++i];
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--cold") == 0) {
      cold = true;
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
  double *tw = calloc((size_t)runs, 8), *tr = calloc((size_t)runs, 8), *ts = calloc((size_t)runs, 8),
         *tl = calloc((size_t)runs, 8), *tx = calloc((size_t)runs, 8);
  int64_t extra = 0;
  int moved = 0;
  for (int r = 0; r < runs; r++) {
    t = ts_store_find(s, "w"); /* reloaded by the previous run */
    snprintf(plain, sizeof plain, "%s", plains[r % 2]);
    const char *old = r ? plains[(r + 1) % 2] : NULL;
    /* the plain write and the save alternate which goes first (a virtual disk's write bursts
     * and throttling then favour neither) */
    if (r % 2 == 0)
      tw[r] = plain_write(plain, old, t->local.data, mine);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (ts_ckpt_save(s, W, ckpt, NULL, 0, NULL, NULL, &err))
      die("save", err.msg);
    ts[r] = MPI_Wtime() - t0;
    if (r % 2 == 1)
      tw[r] = plain_write(plain, old, t->local.data, mine);
    char mine_file[700];
    snprintf(mine_file, sizeof mine_file, "%s/rank-%05d.safetensors", ckpt, rank);
    if (cold)
      evict(plain);
    tr[r] = plain_read(plain, buf, mine);
    for (int k = 0; k < 2; k++) {
      ts_store_drop(s, "w", NULL);
      if (cold)
        evict(mine_file);
      ts_ckpt_report rep;
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      if (ts_ckpt_load(s, W, ckpt, NULL, 0, k ? a1 : NULL, NULL, &rep, &err))
        die("load", err.msg);
      MPI_Barrier(MPI_COMM_WORLD);
      (k ? tx : tl)[r] = MPI_Wtime() - t0;
      if (k) {
        extra = rep.bytes_verified_extra;
        moved = rep.tensors_moved;
      }
    }
    /* back to S(0) for the next save */
    ts_store_drop(s, "w", NULL);
    if (ts_ckpt_load(s, W, ckpt, NULL, 0, NULL, NULL, NULL, &err))
      die("reload", err.msg);
  }
  MPI_Allreduce(MPI_IN_PLACE, &extra, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  double gb = (double)total / 1e9;
  double save = gb / median(ts, runs), load = gb / median(tl, runs),
         resh = gb / median(tx, runs), wl = gb / median(tw, runs), rl = gb / median(tr, runs);
  if (rank == 0) {
    printf("ranks=%d\nbytes=%lld\nruns=%d\nfs=%s\ndir=%s\nread_cache=%s\n", size,
           (long long)total, runs, fs_name(base), base, cold ? "cold" : "warm");
    printf("save_gbps=%.3f\nload_gbps=%.3f\nload_resharded_gbps=%.3f\n", save, load, resh);
    printf("write_limit_gbps=%.3f\nread_limit_gbps=%.3f\n", wl, rl);
    printf("save_vs_limit=%.2f\nload_vs_limit=%.2f\nload_resharded_vs_limit=%.2f\n", save / wl,
           load / rl, resh / rl);
    printf("load_resharded_path=%s\n", moved ? "move" : "direct");
    printf("load_resharded_verify_extra_bytes=%lld\n", (long long)extra);
  }
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
  free(buf), free(tw), free(tr), free(ts), free(tl), free(tx);
  ts_attr_destroy(&a0);
  ts_attr_destroy(&a1);
  ts_world_finalize(&W, NULL);
  return 0;
}
