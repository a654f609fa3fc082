/* progress.c - the progress bar of the CLI's puts and gets (and of saves in the background, fed
 * from the daemon's stats): on stderr, with the rate and the time
 * left, shown on a terminal for transfers of 16 MiB or more, or always with --progress (never
 * with --json unless --progress is given). Redrawn at most every 100 ms and at the end, which
 * ends the line. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tshard.h"

#define PROGRESS_MIN_BYTES (16u << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void draw(void *arg, uint64_t done, uint64_t total) {
  cli_progress *p = arg;
  double t = now_s(), el = t - p->start;
  if (done < total && t - p->last_draw < 0.1)
    return;
  p->last_draw = t;
  int percent = total ? (int)(done * 100 / total) : 100;
  int filled = percent * 24 / 100;
  double mib = (double)done / (1 << 20), rate = el > 0 ? mib / el : 0;
  double left = rate > 0 ? ((double)(total - done) / (1 << 20)) / rate : 0;
  fprintf(stderr, "\r%s %s [%.*s%*s] %3d%% %.1f/%.1f MiB %.1f MiB/s %d:%02d left", p->what, p->name,
          filled, "########################", 24 - filled, "", percent, mib,
          (double)total / (1 << 20), rate, (int)left / 60, (int)left % 60);
  if (done >= total)
    fprintf(stderr, " (%.2f s)\n", el);
  fflush(stderr);
}

bool cli_progress_begin(const cli_args *a, uint64_t bytes, cli_progress *p, const char *what,
                        const char *name) {
  if (!cli_flag(a, "progress") && (a->json || bytes < PROGRESS_MIN_BYTES || !isatty(STDERR_FILENO)))
    return false;
  p->what = what;
  p->name = name;
  p->start = now_s();
  p->last_draw = 0;
  return true;
}

void cli_progress_update(cli_progress *p, uint64_t done, uint64_t total) { draw(p, done, total); }

void cli_progress_start(const cli_args *a, tshard_client *c, size_t bytes, cli_progress *p,
                        const char *what, const char *name) {
  bool asked = cli_flag(a, "progress");
  if (!asked && (a->json || bytes < PROGRESS_MIN_BYTES || !isatty(STDERR_FILENO)))
    return;
  p->what = what;
  p->name = name;
  p->start = now_s();
  p->last_draw = 0;
  tshard_set_progress(c, draw, p);
}
