/* connect_message.c - why a connect failed, in words a user can act on: which job, rank and
 * socket had no daemon and how to start one, what a valid job name is, or what the daemon that
 * answered said. One message per thread, read by tshard_connect_message(). */
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

static _Thread_local char connect_msg[768];

int tsc_job_check(const char *job) {
  size_t n = strlen(job);
  if (n == 0 || n > 64 || job[0] == '.')
    return -1;
  for (const char *p = job; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_' || *p == '.'))
      return -1;
  return 0;
}

void tsc_connect_failed(const char *path, const char *job, int rank, int status) {
  if (tsc_job_check(job)) {
    snprintf(connect_msg, sizeof connect_msg,
             "job name '%s': use 1 to 64 letters, digits, '-', "
             "'_' and '.' (not first)",
             job);
    return;
  }
  bool gone =
      status == TS_IO && strncmp(connect_msg, "the daemon at ", 14) != 0 &&
      (strstr(connect_msg, "No such file") || strstr(connect_msg, "refused") || !connect_msg[0]);
  if (gone)
    snprintf(connect_msg, sizeof connect_msg,
             "no daemon serves job %s on rank %d at %s; start "
             "one with tshard-launch start -np N --job %s (deploy/tshard-launch)",
             job, rank, path, job);
  else if (!connect_msg[0])
    snprintf(connect_msg, sizeof connect_msg, "job %s rank %d at %s: %s", job, rank, path,
             ts_strerror(status));
}

bool tsc_connect_lost(const char *path) {
  return tsc_lost_describe(path, connect_msg, sizeof connect_msg) == 0;
}

void tsc_connect_note(const char *path, const tshard_client *c, int status) {
  if (!c)
    connect_msg[0] = '\0';
  else
    snprintf(connect_msg, sizeof connect_msg, "the daemon at %.128s: %.600s", path,
             c->message[0] ? c->message : ts_strerror(status));
}

void tsc_connect_refused(const char *path, int err) {
  snprintf(connect_msg, sizeof connect_msg,
           "cannot reach a daemon at %.600s: nothing listens "
           "there (%s); is tshardd running for that job and rank? (deploy/tshard-launch)",
           path, strerror(err));
}

void tsc_connect_distrust(const char *why) { snprintf(connect_msg, sizeof connect_msg, "%s", why); }

const char *tshard_connect_message(void) { return connect_msg; }
