/* reshard_progress.c - the progress line of `tshard reshard` for large tensors: on stderr when it
 * is a terminal and the tensor has 16 MiB or more, or always with --progress (never with --json
 * unless --progress is given), as put and get draw theirs.
 *
 * A reshard is one operation on the daemons (its collectives report nothing until they end), so
 * the line shows the time elapsed against an estimate: the tensor's bytes over the rate the
 * job's earlier reshards by the same strategy reached, measured by this tool and kept beside the
 * job's sockets in `tshard-<job>.rates` ("STRATEGY BYTES_PER_SECOND" lines). The strategy is the
 * planner's choice (or --strategy). The first reshard by a strategy on a job has no estimate and
 * says so; every finished reshard prints its measured rate and records it. The reshard itself is
 * submitted and waited on in steps of 100 ms (tshard_submit_reshard, tshard_wait). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tshard.h"

#define RESHARD_PROGRESS_MIN_BYTES (16u << 20)
#define RATES_MAX 32

typedef struct rate_entry {
  char strategy[32];
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

static int rates_read(const char *path, rate_entry *r) {
  FILE *f = path ? fopen(path, "r") : NULL;
  int n = 0;
  if (!f)
    return 0;
  while (n < RATES_MAX && fscanf(f, "%31s %lf", r[n].strategy, &r[n].bytes_per_s) == 2)
    if (isfinite(r[n].bytes_per_s) && r[n].bytes_per_s > 0)
      n++;
  fclose(f);
  return n;
}

/* Records the measured rate of a strategy (a fresh file renamed over the old one). */
static void rates_write(const char *path, const char *strategy, double bytes_per_s) {
  rate_entry r[RATES_MAX + 1];
  int n = rates_read(path, r), k = 0;
  while (k < n && strcmp(r[k].strategy, strategy) != 0)
    k++;
  if (k == n && n < RATES_MAX)
    n++;
  if (k == n)
    return;
  snprintf(r[k].strategy, sizeof r[k].strategy, "%s", strategy);
  r[k].bytes_per_s = bytes_per_s;
  char tmp[640];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid()) >= sizeof tmp)
    return;
  FILE *f = fopen(tmp, "wx");
  if (!f)
    return;
  for (int i = 0; i < n; i++)
    fprintf(f, "%s %.0f\n", r[i].strategy, r[i].bytes_per_s);
  if (fclose(f) == 0)
    rename(tmp, path);
  else
    unlink(tmp);
}

/* The whole tensor's bytes (dtype size times its elements), or 0 when it cannot be described. */
static uint64_t tensor_bytes(tshard_client *c, const char *name) {
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

static void draw(const char *name, const char *strategy, uint64_t bytes, double el, double est) {
  double mib = (double)bytes / (1 << 20);
  if (est <= 0) {
    fprintf(stderr, "\rreshard %s by %s: %.1f MiB, %.1f s (no earlier reshard by %s on this "
            "job: no estimate yet)", name, strategy, mib, el, strategy);
  } else {
    int percent = el >= est ? 99 : (int)(el * 100 / est);
    int filled = percent * 24 / 100;
    double left = est - el;
    fprintf(stderr, "\rreshard %s by %s [%.*s%*s] %3d%% %.1f MiB at ~%.1f MiB/s %s%d:%02d left ",
            name, strategy, filled, "########################", 24 - filled, "", percent, mib,
            mib / est, left > 0 ? "~" : "over the estimate, ", (int)fabs(left) / 60,
            (int)fabs(left) % 60);
  }
  fflush(stderr);
}

int cli_reshard_progress(const cli_args *a, tshard_client *c, const char *name, const char *to,
                         const tshard_reshard_opts *o, char *strategy, size_t cap, uint64_t *us) {
  bool asked = cli_flag(a, "progress");
  uint64_t bytes = 0;
  if (asked || (!a->json && isatty(STDERR_FILENO)))
    bytes = tensor_bytes(c, name);
  if (!asked && bytes < RESHARD_PROGRESS_MIN_BYTES) { /* no line: the plain call */
    int rc = tshard_reshard(c, name, to, o);
    tshard_reshard_report(c, strategy, cap, us);
    return rc;
  }
  char planned[32] = "";
  char *explain = NULL;
  if (o->strategy && o->strategy[0] && strcmp(o->strategy, "auto") != 0)
    snprintf(planned, sizeof planned, "%s", o->strategy);
  else if (tshard_plan(c, name, to, NULL, &explain, planned, sizeof planned) != TS_OK)
    snprintf(planned, sizeof planned, "auto");
  free(explain);
  char path[600];
  bool have_path = rates_path(a, path, sizeof path) == 0;
  rate_entry r[RATES_MAX];
  int n = have_path ? rates_read(path, r) : 0;
  double est = 0;
  for (int i = 0; i < n; i++)
    if (strcmp(r[i].strategy, planned) == 0)
      est = (double)bytes / r[i].bytes_per_s;
  uint64_t ticket = 0;
  int rc = tshard_submit_reshard(c, name, to, o, &ticket);
  double start = now_s();
  tshard_result res = {.status = -1};
  while (rc == TS_OK) {
    res.status = -1;
    rc = tshard_wait(c, ticket, 100, &res);
    if (rc == TS_TIMEOUT && res.status == -1) { /* not answered yet: the operation goes on */
      draw(name, planned, bytes, now_s() - start, est);
      rc = TS_OK;
      continue;
    }
    break;
  }
  double el = now_s() - start;
  if (res.status != -1) {
    snprintf(strategy, cap, "%s", res.strategy);
    *us = res.elapsed_us;
  }
  if (rc == TS_OK) {
    double mib = (double)bytes / (1 << 20);
    fprintf(stderr, "\rreshard %s by %s [########################] 100%% %.1f MiB in %.2f s, "
            "%.1f MiB/s\n", name, strategy, mib, el, el > 0 ? mib / el : 0);
    if (have_path && el > 0 && bytes > 0)
      rates_write(path, strategy, (double)bytes / el);
  } else if (ticket) {
    fprintf(stderr, "\n");
  }
  return rc;
}
