/* lost.c - names a lost rank to the C client (and so to the CLI).
 *
 * When one rank of a job dies, Open MPI stops the whole job: the other daemons answer SHUTDOWN
 * or close their connections, and by themselves say nothing of why. The launcher
 * (deploy/tshard-launch) records the job's fate in a status file beside the sockets,
 * `<dir>/tshard-<job>.status`, key=value lines: `state=running|stopping|stopped|failed|lost`,
 * and for a lost rank `rank`, `host`, `cause` (the signal or exit code) and `log`, `final=1` once
 * Open MPI's own report was read. A connection that ends, or an answer SHUTDOWN, reads that file
 * here, waiting up to TSC_LOST_WAIT_MS while the job is still recorded as running (the launcher
 * learns of the loss when Open MPI reports it), and longer while the record says a rank was lost
 * without naming it yet (across nodes Open MPI names it once every rank ended). A lost rank turns
 * the failure into RANK_LOST naming the rank, host, cause and log, and every later call on the
 * connection fails with the same error; a connect that finds no daemon where the record says the
 * job lost a rank fails with RANK_LOST too (connect_message.c, without waiting: a job still
 * starting is recorded as running). Without a status file (daemons started by hand) the
 * failure stays as it was; so it does with a file that is not a regular file of this user's or
 * root's that only its owner may write (trust.c): such a file is never read, nor waited for. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "ts_wait.h"

#define TSC_LOST_WAIT_MS 2000
#define TSC_LOST_UNNAMED_WAIT_MS 8000 /* more, while the record says a rank was lost, not which */

typedef struct job_status {
  char state[16], final[4], rank[16], host[64], cause[160], log[256], job[72];
} job_status;

/* The status file of the job whose socket is `sock` (".../tshard-<job>-<rank>.sock"): 0, or -1
 * when the path is not of that form. */
static int status_path(const char *sock, char *out, size_t cap) {
  size_t n = strlen(sock);
  const char *suffix = ".sock";
  if (n < 6 || strcmp(sock + n - 5, suffix) != 0)
    return -1;
  size_t i = n - 5;
  while (i > 0 && sock[i - 1] >= '0' && sock[i - 1] <= '9')
    i--;
  if (i == n - 5 || i == 0 || sock[i - 1] != '-')
    return -1;
  if ((size_t)snprintf(out, cap, "%.*s.status", (int)(i - 1), sock) >= cap)
    return -1;
  return 0;
}

static void copy_value(char *dst, size_t cap, const char *line, size_t len) {
  if (len >= cap)
    len = cap - 1;
  memcpy(dst, line, len);
  dst[len] = '\0';
}

/* Reads the status file: 0, or -1 when there is none (or it cannot be read). */
static int read_status(const char *path, job_status *st) {
  memset(st, 0, sizeof *st);
  int fd = tsc_trust_file_open(path); /* another user's file, a link or a FIFO: none */
  if (fd < 0)
    return -1;
  char buf[4096];
  ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0)
    return -1;
  buf[got] = '\0';
  static const struct {
    const char *key;
    size_t off, cap;
  } keys[] = {
      {"state=", offsetof(job_status, state), sizeof st->state},
      {"final=", offsetof(job_status, final), sizeof st->final},
      {"rank=", offsetof(job_status, rank), sizeof st->rank},
      {"host=", offsetof(job_status, host), sizeof st->host},
      {"cause=", offsetof(job_status, cause), sizeof st->cause},
      {"log=", offsetof(job_status, log), sizeof st->log},
      {"job=", offsetof(job_status, job), sizeof st->job},
  };
  for (char *line = buf; *line;) {
    char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
      size_t kl = strlen(keys[k].key);
      if (len >= kl && strncmp(line, keys[k].key, kl) == 0)
        copy_value((char *)st + keys[k].off, keys[k].cap, line + kl, len - kl);
    }
    line += len + (end ? 1 : 0);
  }
  return 0;
}

int tsc_lost_describe(const char *sock, char *out, size_t cap) {
  char path[640];
  job_status st;
  if (status_path(sock, path, sizeof path) != 0 || read_status(path, &st) != 0 ||
      strcmp(st.state, "lost") != 0)
    return -1;
  snprintf(out, cap,
           "job %s lost rank %s (host %s): %s; Open MPI stopped the whole job (the "
           "launcher's log: %s); start it again with tshard-launch start and load the last "
           "checkpoint",
           st.job, st.rank[0] ? st.rank : "?", st.host[0] ? st.host : "unknown",
           st.cause[0] ? st.cause : "cause unknown", st.log[0] ? st.log : "unknown");
  return 0;
}

int tsc_lost_check(tshard_client *c, int status) {
  if (c->lost_status)
    return tsc_fail(c, c->lost_status, "%s", c->lost);
  char path[sizeof c->path + 16];
  if (!c->path[0] || status_path(c->path, path, sizeof path) != 0)
    return status;
  job_status st;
  int64_t named_by = ts_wait_now_ns() + TSC_LOST_WAIT_MS * 1000000LL;
  ts_waiter w; /* polling the launcher's record, up to the longer bound */
  ts_waiter_init(&w, &ts_wait_poll,
                 ts_wait_deadline_ms(TSC_LOST_WAIT_MS + TSC_LOST_UNNAMED_WAIT_MS));
  for (;;) {
    if (read_status(path, &st) != 0)
      return status; /* no launcher's record: nothing more to say */
    bool lost = strcmp(st.state, "lost") == 0;
    if ((lost && strcmp(st.final, "1") == 0) || (!lost && strcmp(st.state, "running") != 0))
      break;
    /* a loss recorded without its rank (a job across nodes): Open MPI names it later */
    if ((!lost || st.rank[0]) && ts_wait_now_ns() >= named_by)
      break;
    if (ts_waiter_pause(&w) == TS_TIMEOUT)
      break;
  }
  if (strcmp(st.state, "lost") != 0)
    return status;
  snprintf(c->lost, sizeof c->lost,
           "rank %s (host %s) was lost: %s; Open MPI stopped job '%s', and every tensor the "
           "job held in memory is gone (complete checkpoints on disk remain); the launcher's "
           "log: %s",
           st.rank[0] ? st.rank : "?", st.host[0] ? st.host : "unknown",
           st.cause[0] ? st.cause : "cause unknown", st.job, st.log[0] ? st.log : "unknown");
  c->lost_status = TS_RANK_LOST;
  c->broken = true;
  return tsc_fail(c, TS_RANK_LOST, "%s", c->lost);
}
