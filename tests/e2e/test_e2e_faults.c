/* test_e2e_faults.c - the error paths that must always answer, reached through real daemons
 * with faults injected by TSHARD_FAULT (read by each daemon once at start).
 *
 * reply: `reply-queue@0*2` on 2 daemons: the first two answers rank 0's engine builds cannot be
 * built or queued. One connection asks for stats three times: the first two calls are answered
 * NO_MEMORY saying so (not left waiting until the client's timeout), the third succeeds on the
 * same connection (each request's in-flight slot was released: with two lost, the daemon would
 * stop reading this connection).
 * order: `order-decode@1` on 2 daemons: rank 1 cannot decode the first ORDER rank 0 sends. Two
 * SPMD clients (ranks 0 and 1) create tensor 'a' under one key: both get PROTOCOL with the same
 * message naming rank 1 and the operation; then the same create under a new key succeeds on
 * both (rank 0 did not keep 'a': the failure was agreed).
 * silent: `agreement-silent@2` on 3 daemons with --agreement-timeout 1s: rank 2 answers the
 * first operation's agreement only after three timeouts. Three SPMD clients create 'b' under one
 * key: all three get TIMEOUT with one message naming rank 2 and the operation; then the create
 * under a new key succeeds on all three (the job keeps serving). */
#include <pthread.h>
#include <string.h>

#include "harness.h"

#define MAXNP 3

typedef struct spmd_arg {
  tse_job *job;
  int rank;
  const char *name, *key;
  int status;
  char msg[512];
} spmd_arg;

static void *spmd_create(void *p) {
  spmd_arg *a = p;
  a->status = -1;
  tshard_client *c = tse_connect(a->job, a->rank);
  if (!c)
    return NULL;
  tshard_set_timeout(c, 60000);
  int64_t shape[2] = {6, 4};
  char attr[64];
  snprintf(attr, sizeof attr, "mesh=[%d] placements=[S(0)]", a->job->np);
  a->status = tshard_create(c, a->name, "f32", 2, shape, attr, NULL, a->key);
  snprintf(a->msg, sizeof a->msg, "%s", tshard_last_message(c));
  tshard_close(&c);
  return NULL;
}

/* Every rank's client creates `name` under `key` at once; the statuses and messages in a. */
static void create_everywhere(tse_job *job, const char *name, const char *key, spmd_arg *a) {
  pthread_t th[MAXNP];
  for (int r = 0; r < job->np; r++) {
    a[r] = (spmd_arg){.job = job, .rank = r, .name = name, .key = key};
    pthread_create(&th[r], NULL, spmd_create, &a[r]);
  }
  for (int r = 0; r < job->np; r++)
    pthread_join(th[r], NULL);
}

static int start_with_fault(tse_job *job, int np, const char *fault, const char *const *extra) {
  setenv("TSHARD_FAULT", fault, 1);
  int rc = tse_start(job, np, extra, 120);
  unsetenv("TSHARD_FAULT");
  return rc;
}

static void reply_lost(void) {
  tse_job job;
  if (start_with_fault(&job, 2, "reply-queue@0*2", NULL)) {
    tse_failures++;
    return;
  }
  tshard_client *c = tse_connect(&job, 0);
  TSE_CHECK(c != NULL, "connect to rank 0");
  if (c) {
    tshard_set_timeout(c, 30000);
    tshard_stats st;
    for (int i = 0; i < 2; i++) {
      int rc = tshard_stats_get(c, &st);
      TSE_CHECK(rc == TS_NO_MEMORY, "lost answer %d: %s: %s", i, tshard_status_name(rc),
                tshard_last_message(c));
      TSE_CHECK(strstr(tshard_last_message(c), "no memory to build or queue this answer"),
                "the reason: %s", tshard_last_message(c));
    }
    TSE_OK(c, tshard_stats_get(c, &st)); /* the same connection is still served */
    tshard_close(&c);
  }
  TSE_CHECK(tse_stop(&job) == 0, "clean shutdown");
}

static void order_undecodable(void) {
  tse_job job;
  if (start_with_fault(&job, 2, "order-decode@1", NULL)) {
    tse_failures++;
    return;
  }
  spmd_arg a[MAXNP];
  create_everywhere(&job, "a", "fault-order-1", a);
  for (int r = 0; r < 2; r++) {
    TSE_CHECK(a[r].status == TS_PROTOCOL, "rank %d: %s: %s", r, tshard_status_name(a[r].status),
              a[r].msg);
    TSE_CHECK(strstr(a[r].msg, "rank 1 could not decode operation 1 (create)") != NULL,
              "rank %d's message: %s", r, a[r].msg);
    TSE_CHECK(strcmp(a[r].msg, a[0].msg) == 0, "rank %d: '%s' != rank 0's '%s'", r, a[r].msg,
              a[0].msg);
  }
  create_everywhere(&job, "a", "fault-order-2", a);
  for (int r = 0; r < 2; r++)
    TSE_CHECK(a[r].status == TS_OK, "create again, rank %d: %s: %s", r,
              tshard_status_name(a[r].status), a[r].msg);
  TSE_CHECK(tse_stop(&job) == 0, "clean shutdown");
}

static void agreement_silent(void) {
  tse_job job;
  const char *extra[] = {"--agreement-timeout", "1s", NULL};
  if (start_with_fault(&job, 3, "agreement-silent@2", extra)) {
    tse_failures++;
    return;
  }
  spmd_arg a[MAXNP];
  create_everywhere(&job, "b", "fault-silent-1", a);
  for (int r = 0; r < 3; r++) {
    TSE_CHECK(a[r].status == TS_TIMEOUT, "rank %d: %s: %s", r, tshard_status_name(a[r].status),
              a[r].msg);
    TSE_CHECK(strcmp(a[r].msg, "rank 2 did not answer the agreement of operation 1 (create) "
                               "within 1 s") == 0,
              "rank %d's message: %s", r, a[r].msg);
  }
  create_everywhere(&job, "b", "fault-silent-2", a);
  for (int r = 0; r < 3; r++)
    TSE_CHECK(a[r].status == TS_OK, "create again, rank %d: %s: %s", r,
              tshard_status_name(a[r].status), a[r].msg);
  TSE_CHECK(tse_stop(&job) == 0, "clean shutdown");
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : "";
  if (!only[0] || strcmp(only, "reply") == 0)
    reply_lost();
  if (!only[0] || strcmp(only, "order") == 0)
    order_undecodable();
  if (!only[0] || strcmp(only, "silent") == 0)
    agreement_silent();
  printf("%s\n", tse_failures ? "FAILED" : "ok");
  return tse_failures ? 1 : 0;
}
