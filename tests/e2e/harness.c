/* harness.c - starting and stopping a job of tshardd daemons for the end-to-end tests, and the
 * reference data. See harness.h. The daemons run under mpirun in their own process group, with
 * their log in the job's private directory, and get SIGTERM when the process that started them
 * dies (PR_SET_PDEATHSIG on mpirun, which stops them); the ready condition is every rank's
 * socket answering a ping, polled every 20 ms up to a deadline. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

int tse_failures;

const char *tse_mpiexec(void) { return TSE_MPIEXEC; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

void tse_socket_path(const tse_job *j, int rank, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/tshard-%s-%d.sock", j->dir, j->job, rank);
}

tshard_client *tse_connect(const tse_job *j, int rank) {
  char path[400];
  tse_socket_path(j, rank, path, sizeof path);
  tshard_client *c = NULL;
  int rc = tshard_connect_path(path, 120000, &c);
  TSE_CHECK(rc == TS_OK, "connect to rank %d at %s: %s", rank, path, tshard_status_name(rc));
  return c;
}

static void print_log(const tse_job *j) {
  FILE *f = fopen(j->log, "r");
  if (!f)
    return;
  char line[1024];
  fprintf(stderr, "---- daemon log %s ----\n", j->log);
  while (fgets(line, sizeof line, f))
    fputs(line, stderr);
  fprintf(stderr, "---- end of log ----\n");
  fclose(f);
}

/* The daemons' pids from their "ready" lines; returns how many ranks were found. */
static int read_pids(tse_job *j) {
  FILE *f = fopen(j->log, "r");
  if (!f)
    return 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "ready: job ");
    int rank, n, pid;
    char job[64];
    if (p && sscanf(p, "ready: job %63s rank %d of %d pid %d", job, &rank, &n, &pid) == 4 &&
        rank >= 0 && rank < 64)
      j->daemon_pids[rank] = pid;
  }
  fclose(f);
  int found = 0;
  for (int r = 0; r < j->np && r < 64; r++)
    found += j->daemon_pids[r] > 0;
  return found;
}

static void kill_job(tse_job *j) {
  if (j->pid <= 0)
    return;
  kill(-j->pid, SIGTERM);
  for (int i = 0; i < 500; i++) {
    if (waitpid(j->pid, NULL, WNOHANG) == j->pid) {
      j->pid = 0;
      return;
    }
    nap_ms(20);
  }
  kill(-j->pid, SIGKILL);
  waitpid(j->pid, NULL, 0);
  j->pid = 0;
}

int tse_start(tse_job *j, int np, const char *const *extra, int timeout_s) {
  memset(j, 0, sizeof *j);
  /* What CTest sets, for runs by hand (an existing setting wins). */
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  setenv("OMPI_MCA_btl", "self,vader,tcp", 0);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  j->np = np;
  snprintf(j->dir, sizeof j->dir, "/tmp/tse-XXXXXX");
  if (!mkdtemp(j->dir)) {
    perror("mkdtemp");
    return -1;
  }
  static int counter;
  snprintf(j->job, sizeof j->job, "e2e%d-%d", (int)getpid(), ++counter);
  snprintf(j->log, sizeof j->log, "%s/daemons.log", j->dir);
  char npbuf[16];
  snprintf(npbuf, sizeof npbuf, "%d", np);
  const char *argv[64];
  int n = 0;
  argv[n++] = TSE_MPIEXEC;
  argv[n++] = "-np";
  argv[n++] = npbuf;
  argv[n++] = "--oversubscribe";
  argv[n++] = TSE_DAEMON;
  argv[n++] = "--socket-dir";
  argv[n++] = j->dir;
  argv[n++] = "--job";
  argv[n++] = j->job;
  for (int i = 0; extra && extra[i] && n < 62; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return -1;
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* a killed test or benchmark takes its daemons along */
    if (getppid() != parent)
      _exit(127);
    int fd = open(j->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  setpgid(pid, pid);
  j->pid = pid;
  double deadline = now_s() + timeout_s;
  int ready = 0;
  while (now_s() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      j->pid = 0;
      fprintf(stderr, "mpirun exited early (status %d)\n", status);
      print_log(j);
      return -1;
    }
    ready = 0;
    for (int r = 0; r < np; r++) {
      char path[400];
      tse_socket_path(j, r, path, sizeof path);
      tshard_client *c = NULL;
      if (tshard_connect_path(path, 5000, &c) == TS_OK && tshard_ping(c, NULL, NULL) == TS_OK)
        ready++;
      tshard_close(&c);
    }
    if (ready == np)
      break;
    nap_ms(20);
  }
  if (ready != np) {
    fprintf(stderr, "only %d of %d daemons ready after %d s\n", ready, np, timeout_s);
    kill_job(j);
    print_log(j);
    return -1;
  }
  /* A daemon serves before mpirun has forwarded its "ready" line to the log: wait for the
     lines too, so that every rank's pid is known when this returns. */
  while (read_pids(j) < (np < 64 ? np : 64) && now_s() < deadline)
    nap_ms(20);
  return 0;
}

int tse_wait(tse_job *j, int timeout_s) {
  double deadline = now_s() + timeout_s;
  while (now_s() < deadline) {
    int status;
    if (waitpid(j->pid, &status, WNOHANG) == j->pid) {
      j->pid = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    nap_ms(20);
  }
  fprintf(stderr, "mpirun did not exit within %d s; killing it\n", timeout_s);
  kill_job(j);
  return -1;
}

int tse_scratch_dir(char *out, size_t cap, const char *what) {
  int n = snprintf(out, cap, "/tmp/tshard-e2e-%s-XXXXXX", what);
  if (n < 0 || (size_t)n >= cap || !mkdtemp(out)) {
    TSE_CHECK(0, "scratch directory for %s: %s", what, strerror(errno));
    return -1;
  }
  return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(path);
}

void tse_scratch_remove(const char *dir) {
  TSE_CHECK(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "removing %s: %s", dir,
            strerror(errno));
}

int tse_finish(tse_job *j, int code) {
  for (int r = 0; r < j->np; r++) {
    char path[400];
    struct stat st;
    tse_socket_path(j, r, path, sizeof path);
    TSE_CHECK(stat(path, &st) != 0, "socket %s still exists after the daemons stopped", path);
  }
  if (code != 0 || tse_failures)
    print_log(j);
  unlink(j->log);
  rmdir(j->dir);
  return code;
}

int tse_stop(tse_job *j) {
  tshard_client *c = tse_connect(j, 0);
  if (c) {
    int rc = tshard_shutdown(c, NULL);
    TSE_CHECK(rc == TS_OK, "shutdown: %s %s", tshard_status_name(rc), tshard_last_message(c));
    tshard_close(&c);
  }
  int code = tse_wait(j, 120);
  TSE_CHECK(code == 0, "mpirun exit status %d", code);
  return tse_finish(j, code);
}

/* ---------------------------------------------------------------------------------------------
 * Reference data: small non-negative integers, exact in every dtype (bf16 holds integers up to
 * 256 exactly, i8 up to 127). */

double tse_value(uint64_t seed, uint64_t index) {
  return (double)((index * 131u + seed * 17u + index / 7u) % 97u);
}

int64_t tse_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= shape[d];
  return n;
}

size_t tse_dtype_size(const char *dt) {
  if (!strcmp(dt, "f64") || !strcmp(dt, "i64"))
    return 8;
  if (!strcmp(dt, "f32") || !strcmp(dt, "i32"))
    return 4;
  if (!strcmp(dt, "f16") || !strcmp(dt, "bf16"))
    return 2;
  return 1;
}

static uint16_t half_of_int(int v) { /* v in [0, 2048) */
  if (v == 0)
    return 0;
  int e = 0;
  while ((1 << (e + 1)) <= v)
    e++;
  return (uint16_t)((e + 15) << 10 | ((v << (10 - e)) & 0x3ff));
}

static double int_of_half(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0)
    return m / 16777216.0;
  return (1.0 + m / 1024.0) * (double)(1 << e) / 32768.0;
}

void tse_store(const char *dt, void *p, double v) {
  if (!strcmp(dt, "f32")) {
    float f = (float)v;
    memcpy(p, &f, 4);
  } else if (!strcmp(dt, "f64")) {
    memcpy(p, &v, 8);
  } else if (!strcmp(dt, "f16")) {
    uint16_t h = half_of_int((int)v);
    memcpy(p, &h, 2);
  } else if (!strcmp(dt, "bf16")) {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t b = (uint16_t)(bits >> 16);
    memcpy(p, &b, 2);
  } else if (!strcmp(dt, "i32")) {
    int32_t x = (int32_t)v;
    memcpy(p, &x, 4);
  } else if (!strcmp(dt, "i64")) {
    int64_t x = (int64_t)v;
    memcpy(p, &x, 8);
  } else if (!strcmp(dt, "i8")) {
    int8_t x = (int8_t)v;
    memcpy(p, &x, 1);
  } else {
    uint8_t x = (uint8_t)v;
    memcpy(p, &x, 1);
  }
}

double tse_load(const char *dt, const void *p) {
  if (!strcmp(dt, "f32")) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  if (!strcmp(dt, "f64")) {
    double d;
    memcpy(&d, p, 8);
    return d;
  }
  if (!strcmp(dt, "f16")) {
    uint16_t h;
    memcpy(&h, p, 2);
    return int_of_half(h);
  }
  if (!strcmp(dt, "bf16")) {
    uint16_t b;
    memcpy(&b, p, 2);
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  if (!strcmp(dt, "i32")) {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
  }
  if (!strcmp(dt, "i64")) {
    int64_t x;
    memcpy(&x, p, 8);
    return (double)x;
  }
  if (!strcmp(dt, "i8")) {
    int8_t x;
    memcpy(&x, p, 1);
    return x;
  }
  uint8_t x;
  memcpy(&x, p, 1);
  return x;
}

/* Walks the box row-major, calling fn with the local and global linear indices. */
#define WALK_BOX(ndim, shape, lo, hi, body)                                                        \
  do {                                                                                             \
    int64_t idx_[8], local_ = 0;                                                                   \
    bool empty_ = false;                                                                           \
    for (int d_ = 0; d_ < (ndim); d_++) {                                                          \
      idx_[d_] = (lo)[d_];                                                                         \
      empty_ |= (hi)[d_] <= (lo)[d_];                                                              \
    }                                                                                              \
    while (!empty_) {                                                                              \
      int64_t global_ = 0;                                                                         \
      for (int d_ = 0; d_ < (ndim); d_++)                                                          \
        global_ = global_ * (shape)[d_] + idx_[d_];                                                \
      body;                                                                                        \
      local_++;                                                                                    \
      int d_ = (ndim)-1;                                                                           \
      while (d_ >= 0 && ++idx_[d_] == (hi)[d_]) {                                                  \
        idx_[d_] = (lo)[d_];                                                                       \
        d_--;                                                                                      \
      }                                                                                            \
      if (d_ < 0)                                                                                  \
        break;                                                                                     \
    }                                                                                              \
  } while (0)

void tse_fill_box(const char *dt, uint64_t seed, int ndim, const int64_t *shape, const int64_t *lo,
                  const int64_t *hi, void *buf) {
  size_t es = tse_dtype_size(dt);
  WALK_BOX(ndim, shape, lo, hi,
           tse_store(dt, (char *)buf + (size_t)local_ * es, tse_value(seed, (uint64_t)global_)));
}

long tse_compare_box(const char *what, const char *dt, uint64_t seed, int ndim,
                     const int64_t *shape, const int64_t *lo, const int64_t *hi, const void *buf) {
  size_t es = tse_dtype_size(dt);
  long bad = 0;
  WALK_BOX(ndim, shape, lo, hi, {
    double want = tse_value(seed, (uint64_t)global_);
    double got = tse_load(dt, (const char *)buf + (size_t)local_ * es);
    if (got != want) {
      if (bad < 3)
        fprintf(stderr, "%s: element %lld: got %g, expected %g\n", what, (long long)global_, got,
                want);
      bad++;
    }
  });
  if (bad)
    __atomic_add_fetch(&tse_failures, 1, __ATOMIC_RELAXED);
  return bad;
}

int tse_raw_connect(const tse_job *j, int rank) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  char path[600];
  tse_socket_path(j, rank, path, sizeof path);
  if (strlen(path) >= sizeof sa.sun_path) {
    TSE_CHECK(0, "socket path %s is too long for a Unix socket", path);
    return -1;
  }
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
    return fd;
  TSE_CHECK(0, "raw connect to rank %d: %s", rank, strerror(errno));
  if (fd >= 0)
    close(fd);
  return -1;
}

bool tse_read_full(int fd, void *buf, size_t n, int timeout_ms) {
  uint8_t *p = buf;
  while (n > 0) {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) <= 0)
      return false;
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0)
      return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

void tse_slices_roundtrip(tshard_client **cl, const char *name, int64_t rows, int64_t cols,
                          const char *tag, uint64_t seed) {
  int64_t shape[2] = {rows, cols}, lo0[2] = {0, 0};
  tshard_info info;
  TSE_OK(cl[0], tshard_describe(cl[0], name, &info));
  for (int i = 0; i < info.nranks; i++) {
    const tshard_rank_info *ri = &info.ranks[i];
    tshard_client *c = cl[ri->rank];
    int64_t er = ri->hi[0] - ri->lo[0], ec = ri->hi[1] - ri->lo[1];
    int64_t pc = tag[0] ? (ec + 3) / 4 * 4 : ec; /* padded columns */
    size_t plain = (size_t)(er * ec) * 4, bytes = (size_t)(er * pc) * 4;
    float *box = malloc(plain), *lay = calloc(1, bytes), *back = malloc(bytes);
    tse_fill_box("f32", seed, 2, shape, ri->lo, ri->hi, box);
    for (int64_t r = 0; r < er; r++) /* Ba4b: [col block][row][4 cols] */
      for (int64_t k = 0; k < ec; k++)
        lay[tag[0] ? (k / 4) * er * 4 + r * 4 + k % 4 : r * ec + k] = box[r * ec + k];
    TSE_OK(c, tshard_put_slice(c, name, tag, lay, bytes));
    size_t got = 0;
    memset(back, 0xee, bytes);
    TSE_OK(c, tshard_get_slice(c, name, tag, back, bytes, &got));
    TSE_CHECK(got == bytes && memcmp(back, lay, bytes) == 0,
              "%s: rank %d's slice in '%s' differs (%zu of %zu bytes)", name, ri->rank, tag, got,
              bytes);
    free(box), free(lay), free(back);
  }
  tshard_info_clear(&info);
  size_t bytes = (size_t)(rows * cols) * 4;
  uint8_t *whole = malloc(bytes);
  TSE_OK(cl[0], tshard_get(cl[0], name, whole, bytes));
  TSE_CHECK(tse_compare_box(name, "f32", seed, 2, shape, lo0, shape, whole) == 0,
            "%s: the slices put in '%s' do not make the reference", name, tag);
  free(whole);
}
