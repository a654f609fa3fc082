/* estimate.c - the estimated progress line of one blocking call on the daemons: an operation that
 * reports nothing until it ends (a reshard, whose collectives run as one step; a synchronous save
 * or load, which keeps the daemons' engine busy so that not even their stats answer). Shown on
 * stderr when it is a terminal and the data has 16 MiB or more, or always with --progress (never
 * with --json unless --progress is given), as put and get draw theirs.
 *
 * The line is the time elapsed against an estimate: the data's bytes over the rate the job's
 * earlier calls of the same kind reached, measured here and kept beside the job's sockets in
 * `tshard-<job>.rates` ("KEY BYTES_PER_SECOND" lines; the key is a reshard's strategy, "save" or
 * "load"). The first call of a kind on a job has no estimate and says so; every finished call
 * prints its measured rate and records it. The call is submitted (a ticket) and waited on in
 * steps of 100 ms (tshard_wait_ckpt), the line drawn at once and after every step. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tshard.h"

#define ESTIMATE_MIN_BYTES (16u << 20)
#define RATES_MAX 32

typedef struct rate_entry {
  char key[32];
  double bytes_per_s;
} rate_entry;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The job's rates file, when the connection goes by job (not --socket or --tcp): 0, else -1. */
static int rates_path(const cli_args *a, char *out, size_t cap) {
  if (cli_opt(a, "socket") || cli_opt(a, "tcp"))
    return -1;
  const char *job = cli_opt(a, "job");
  if (!job)
    job = getenv("TSHARD_JOB");
  if (!job || !job[0])
    job = "default";
  char sock[512];
  tshard_socket_path(sock, sizeof sock, job, 0);
  char *slash = strrchr(sock, '/');
  if (!slash)
    return -1;
  *slash = '\0';
  return (size_t)snprintf(out, cap, "%s/tshard-%s.rates", sock, job) < cap ? 0 : -1;
}

/* The rates file for reading when it is a regular file of this user's or root's that group and
 * others cannot write, opened without following a link or blocking (a FIFO); else NULL, as if
 * there were none (the socket directory is checked at connect; this is the file's own check). */
static FILE *rates_open(const char *path) {
  int fd = path[0] ? open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC) : -1;
  struct stat st;
  if (fd < 0)
    return NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0) ||
      (st.st_mode & 022)) {
    close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, "r");
  if (!f)
    close(fd);
  return f;
}

static int rates_read(const char *path, rate_entry *r) {
  FILE *f = rates_open(path);
  int n = 0;
  if (!f)
    return 0;
  while (n < RATES_MAX && fscanf(f, "%31s %lf", r[n].key, &r[n].bytes_per_s) == 2)
    if (isfinite(r[n].bytes_per_s) && r[n].bytes_per_s > 0)
      n++;
  fclose(f);
  return n;
}

/* Records the measured rate of a key (a fresh file renamed over the old one). */
static void rates_write(const char *path, const char *key, double bytes_per_s) {
  rate_entry r[RATES_MAX + 1];
  int n = rates_read(path, r), k = 0;
  while (k < n && strcmp(r[k].key, key) != 0)
    k++;
  if (k == n && n < RATES_MAX)
    n++;
  if (k == n)
    return;
  snprintf(r[k].key, sizeof r[k].key, "%s", key);
  r[k].bytes_per_s = bytes_per_s;
  char tmp[640];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid()) >= sizeof tmp)
    return;
  FILE *f = fopen(tmp, "wx");
  if (!f)
    return;
  for (int i = 0; i < n; i++)
    fprintf(f, "%s %.0f\n", r[i].key, r[i].bytes_per_s);
  if (fclose(f) == 0)
    rename(tmp, path);
  else
    unlink(tmp);
}

bool cli_estimate_wanted(const cli_args *a) {
  return cli_flag(a, "progress") || (!a->json && isatty(STDERR_FILENO));
}

bool cli_estimate_shown(const cli_args *a, uint64_t bytes) {
  return cli_flag(a, "progress") || (cli_estimate_wanted(a) && bytes >= ESTIMATE_MIN_BYTES);
}

uint64_t cli_tensor_bytes(tshard_client *c, const char *name) {
  tshard_info info;
  memset(&info, 0, sizeof info);
  if (tshard_describe(c, name, &info) != TS_OK)
    return 0;
  ts_dtype dt;
  ts_error err;
  uint64_t n = 0;
  if (ts_dtype_parse(info.dtype, &dt, &err) == TS_OK) {
    n = ts_dtype_size(dt);
    for (int i = 0; i < info.ndim; i++)
      n *= (uint64_t)info.shape[i];
  }
  tshard_info_clear(&info);
  return n;
}

void cli_estimate_begin(const cli_args *a, cli_estimate *e, const char *key, uint64_t bytes) {
  e->bytes = bytes;
  e->est_s = 0;
  if (rates_path(a, e->path, sizeof e->path) != 0)
    e->path[0] = '\0';
  rate_entry r[RATES_MAX];
  int n = rates_read(e->path, r);
  for (int i = 0; i < n; i++)
    if (strcmp(r[i].key, key) == 0)
      e->est_s = (double)bytes / r[i].bytes_per_s;
  e->start = now_s();
}

static void draw(const cli_estimate *e, double el) {
  double mib = (double)e->bytes / (1 << 20), est = e->est_s;
  if (est <= 0) {
    fprintf(stderr, "\r%s: %.1f MiB, %.1f s (no earlier %s on this job: no estimate yet)", e->head,
            mib, el, e->earlier);
  } else {
    int percent = el >= est ? 99 : (int)(el * 100 / est);
    int filled = percent * 24 / 100;
    double left = est - el;
    fprintf(stderr, "\r%s [%.*s%*s] %3d%% %.1f MiB at ~%.1f MiB/s %s%d:%02d left ", e->head, filled,
            "########################", 24 - filled, "", percent, mib, mib / est,
            left > 0 ? "~" : "over the estimate, ", (int)fabs(left) / 60, (int)fabs(left) % 60);
  }
  fflush(stderr);
}

int cli_estimate_wait(cli_estimate *e, tshard_client *c, uint64_t ticket, tshard_result *res,
                      tshard_ckpt_info *info) {
  e->start = now_s();
  draw(e, 0);
  for (;;) {
    res->status = -1;
    int rc = tshard_wait_ckpt(c, ticket, 100, res, info);
    if (rc != TS_TIMEOUT || res->status != -1)
      return rc;
    draw(e, now_s() - e->start); /* not answered yet: the operation goes on */
  }
}

void cli_estimate_end(cli_estimate *e, int rc, bool sent, const char *key, uint64_t bytes) {
  double el = now_s() - e->start, mib = (double)bytes / (1 << 20);
  if (rc == TS_OK) {
    fprintf(stderr, "\r%s [########################] 100%% %.1f MiB in %.2f s, %.1f MiB/s\n",
            e->head, mib, el, el > 0 ? mib / el : 0);
    if (e->path[0] && el > 0 && bytes > 0)
      rates_write(e->path, key, (double)bytes / el);
  } else if (sent) {
    fprintf(stderr, "\n");
  }
}
