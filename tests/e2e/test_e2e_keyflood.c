/* test_e2e_keyflood.c - collectives waiting for participants cannot fill rank 0's table of
 * idempotency keys, through real daemons (2 ranks).
 *
 * The flood, on daemons started with --key-max 16 (the table's smallest size, so that a few dozen
 * requests would fill it) and --max-inflight 2: 48 raw connections, half to each rank, each
 * submit two keyed creates naming both ranks as participants with the longest timeout allowed (600
 * s), whose other participant never comes (two requests: the daemon then stops reading the
 * connection, so it must notice the hang-up without reading), and all close at once (each
 * half-closes and waits until its daemon has closed its side). Then, at once (no timeout has
 * passed): a keyed create through rank 1 succeeds, an SPMD create of both ranks (one C client per
 * rank with a group) runs once for both, and 16 new keyed collectives (--key-max of them) through
 * 16 connections all complete; none of the flood's tensors exists. Before the daemons forgot the
 * collectives of closed connections, the table stayed full for the whole timeout and all of these
 * were LIMIT.
 *
 * The bounds, on daemons started with --collective-pending-max 1: a raw connection to rank 1 with
 * one collective waiting gets LIMIT for its second, saying how many wait and naming the flag; a
 * client (C library, tshard_set_group) asking a collective timeout one millisecond above
 * --collective-timeout-max (default 600 s) gets INVALID_ARGUMENT naming the maximum. Both jobs
 * answer a ping afterwards and stop cleanly. */
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tshard.pb-c.h"

#define NP 2
#define FLOOD 48
#define KEY_MAX 16
#define TIMEOUT_MAX_MS 600000u

static tse_job job;
static const int32_t both[NP] = {0, 1};
static const int64_t shape[1] = {4};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool send_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    struct pollfd pfd = {fd, POLLOUT, 0};
    if (poll(&pfd, 1, 60000) <= 0)
      return false;
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0)
      return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

/* Sends a keyed create of a replicated f32 [4] tensor naming both ranks as participants. */
static bool send_collective(int fd, uint64_t id, const char *name, const char *key,
                            uint32_t timeout_ms) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__CreateRequest c = TSHARD__CREATE_REQUEST__INIT;
  Tshard__DistAttr a = TSHARD__DIST_ATTR__INIT;
  a.text = (char *)"mesh=[2] placements=[R]";
  c.name = (char *)name;
  c.dtype = (char *)"f32";
  c.n_shape = 1;
  c.shape = (int64_t *)shape;
  c.attr = &a;
  req.id = id;
  req.idempotency_key = (char *)key;
  req.n_participants = NP;
  req.participants = (int32_t *)both;
  req.collective_timeout_ms = timeout_ms;
  req.op_case = TSHARD__REQUEST__OP_CREATE;
  req.create = &c;
  size_t n = tshard__request__get_packed_size(&req);
  uint8_t *b = malloc(n + 4);
  if (!b)
    return false;
  b[0] = (uint8_t)n, b[1] = (uint8_t)(n >> 8), b[2] = (uint8_t)(n >> 16), b[3] = (uint8_t)(n >> 24);
  tshard__request__pack(&req, b + 4);
  bool ok = send_all(fd, b, n + 4);
  free(b);
  return ok;
}

/* Reads one answer (each wait bounded); false when none came. */
static bool read_answer(int fd, uint64_t *id, int *status, char *msg, size_t cap) {
  uint8_t h[4];
  if (!tse_read_full(fd, h, 4, 60000))
    return false;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  uint8_t *body = malloc(len ? len : 1);
  bool ok = body && tse_read_full(fd, body, len, 60000);
  Tshard__Response *r = ok ? tshard__response__unpack(NULL, len, body) : NULL;
  free(body);
  if (!r)
    return false;
  *id = r->id;
  *status = r->status;
  snprintf(msg, cap, "%s", r->message ? r->message : "");
  tshard__response__free_unpacked(r, NULL);
  return true;
}

/* After the sending side was closed (shutdown), waits until the daemon closed its side (it has
 * then told its engine that the connection is gone); whatever it answered before is
 * discarded. */
static void wait_closed(int fd, int64_t deadline_ms) {
  uint8_t sink[4096];
  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    int64_t left = deadline_ms - now_ms();
    if (poll(&pfd, 1, left > 0 ? (int)left : 0) <= 0) {
      TSE_CHECK(0, "the daemon did not close a half-closed connection within 60 s");
      break;
    }
    if (recv(fd, sink, sizeof sink, 0) <= 0)
      break;
  }
  close(fd);
}

static void close_and_wait(int fd) {
  shutdown(fd, SHUT_WR);
  wait_closed(fd, now_ms() + 60000);
}

static void bounds(void) {
  int fd = tse_raw_connect(&job, 1);
  if (fd < 0)
    return;
  char msg[1024];
  TSE_CHECK(send_collective(fd, 1, "pend0", "pend-0", TIMEOUT_MAX_MS), "first not sent");
  TSE_CHECK(send_collective(fd, 2, "pend1", "pend-1", TIMEOUT_MAX_MS), "second not sent");
  uint64_t id = 0;
  int status = -1;
  TSE_CHECK(read_answer(fd, &id, &status, msg, sizeof msg), "no answer to the second collective");
  TSE_CHECK(id == 2 && status == TS_LIMIT, "answer to request %llu: %s: %s", (unsigned long long)id,
            tshard_status_name(status), msg);
  TSE_CHECK(strstr(msg, "this connection has 1 collective waiting for their participants") &&
                strstr(msg, "(--collective-pending-max 1)"),
            "message: %s", msg);
  close_and_wait(fd);

  tshard_client *c = tse_connect(&job, 1);
  if (!c)
    return;
  TSE_OK(c, tshard_set_group(c, (const int *)both, NP, (int)TIMEOUT_MAX_MS + 1));
  int rc = tshard_create(c, "toolong", "f32", 1, shape, "mesh=[2] placements=[R]", NULL, "tl");
  TSE_CHECK(rc == TS_INVALID_ARGUMENT &&
                strstr(tshard_last_message(c), "collective_timeout_ms 600001; at most 600000 "
                                               "(the daemons' --collective-timeout-max"),
            "timeout above the maximum: %s: %s", tshard_status_name(rc), tshard_last_message(c));
  int rank = -1, size = 0;
  TSE_OK(c, tshard_ping(c, &rank, &size));
  tshard_close(&c);
}

static void flood(void) {
  int fds[FLOOD];
  char key[32], name[32];
  for (int i = 0; i < FLOOD; i++) {
    fds[i] = tse_raw_connect(&job, i % NP);
    snprintf(key, sizeof key, "flood-%d", i);
    snprintf(name, sizeof name, "flood%d", i);
    if (fds[i] >= 0)
      TSE_CHECK(send_collective(fds[i], 1, name, key, TIMEOUT_MAX_MS) &&
                    send_collective(fds[i], 2, name, key, TIMEOUT_MAX_MS),
                "flood %d not sent", i);
  }
  for (int i = 0; i < FLOOD; i++) /* all at once */
    if (fds[i] >= 0)
      shutdown(fds[i], SHUT_WR);
  int64_t deadline = now_ms() + 60000;
  for (int i = 0; i < FLOOD; i++)
    if (fds[i] >= 0)
      wait_closed(fds[i], deadline);
}

typedef struct spmd_arg {
  int rank, status;
  char msg[512];
} spmd_arg;

static void *spmd_create(void *p) {
  spmd_arg *a = p;
  tshard_client *c = tse_connect(&job, a->rank);
  a->status = -1;
  if (!c)
    return NULL;
  TSE_OK(c, tshard_set_group(c, (const int *)both, NP, 30000));
  a->status = tshard_create(c, "spmd", "f32", 1, shape, "mesh=[2] placements=[R]", NULL, "spmd-1");
  snprintf(a->msg, sizeof a->msg, "%s", tshard_last_message(c));
  tshard_close(&c);
  return NULL;
}

/* KEY_MAX new collectives, two on each of 8 connections to rank 1, completed through 8
 * connections to rank 0: every one is answered OK on both sides. */
static void table_has_room(void) {
  enum { CONNS = KEY_MAX / 2 };
  int fds[NP][CONNS];
  char key[32], name[32], msg[1024];
  for (int r = NP - 1; r >= 0; r--)
    for (int k = 0; k < CONNS; k++) {
      fds[r][k] = tse_raw_connect(&job, r);
      for (int j = 0; j < 2 && fds[r][k] >= 0; j++) {
        snprintf(key, sizeof key, "room-%d", 2 * k + j);
        snprintf(name, sizeof name, "room%d", 2 * k + j);
        TSE_CHECK(send_collective(fds[r][k], (uint64_t)j + 1, name, key, 30000), "room %d not sent",
                  2 * k + j);
      }
    }
  for (int r = 0; r < NP; r++)
    for (int k = 0; k < CONNS; k++) {
      for (int j = 0; j < 2 && fds[r][k] >= 0; j++) {
        uint64_t id = 0;
        int status = -1;
        bool got = read_answer(fds[r][k], &id, &status, msg, sizeof msg);
        TSE_CHECK(got && status == TS_OK, "collective of rank %d's connection %d: %s: %s", r, k,
                  got ? tshard_status_name(status) : "no answer", msg);
      }
      if (fds[r][k] >= 0)
        close(fds[r][k]);
    }
}

static void after_flood(void) {
  tshard_client *c0 = tse_connect(&job, 0), *c1 = tse_connect(&job, 1);
  if (!c0 || !c1) {
    tshard_close(&c0);
    tshard_close(&c1);
    return;
  }
  /* Each engine has taken the closes queued before these (its work is in order). */
  tshard_stats s;
  TSE_OK(c0, tshard_stats_get(c0, &s));
  TSE_OK(c1, tshard_stats_get(c1, &s));
  TSE_OK(c1,
         tshard_create(c1, "after", "f32", 1, shape, "mesh=[2] placements=[R]", NULL, "after-1"));
  pthread_t th[NP];
  spmd_arg args[NP];
  for (int r = 0; r < NP; r++) {
    args[r].rank = r;
    pthread_create(&th[r], NULL, spmd_create, &args[r]);
  }
  for (int r = 0; r < NP; r++) {
    pthread_join(th[r], NULL);
    TSE_CHECK(args[r].status == TS_OK, "SPMD create through rank %d: %s: %s", r,
              tshard_status_name(args[r].status), args[r].msg);
  }
  table_has_room();
  char **names = NULL;
  int n = 0;
  TSE_OK(c0, tshard_list(c0, &names, &n));
  int rooms = 0, floods = 0, others = 0;
  for (int i = 0; i < n; i++) {
    if (strncmp(names[i], "room", 4) == 0)
      rooms++;
    else if (strncmp(names[i], "flood", 5) == 0 || strncmp(names[i], "pend", 4) == 0)
      floods++;
    else
      others += strcmp(names[i], "after") == 0 || strcmp(names[i], "spmd") == 0;
  }
  tshard_free_names(names, n);
  TSE_CHECK(rooms == KEY_MAX && floods == 0 && others == 2,
            "tensors: %d of the %d collectives, %d of the flood (none expected), %d of 2 others",
            rooms, KEY_MAX, floods, others);
  int rank = -1, size = 0;
  TSE_OK(c0, tshard_ping(c0, &rank, &size));
  TSE_OK(c1, tshard_ping(c1, &rank, &size));
  tshard_close(&c0);
  tshard_close(&c1);
}

int main(void) {
  const char *flood_flags[] = {"--key-max", "16", "--max-inflight", "2", NULL};
  if (tse_start(&job, NP, flood_flags, 120) != 0)
    return 1;
  flood();
  after_flood();
  int code = tse_stop(&job) == 0 && tse_failures == 0 ? 0 : 1;
  if (tse_finish(&job, code) != 0)
    return 1;
  const char *bound_flags[] = {"--collective-pending-max", "1", NULL};
  if (tse_start(&job, NP, bound_flags, 120) != 0)
    return 1;
  bounds();
  code = tse_stop(&job) == 0 && tse_failures == 0 ? 0 : 1;
  return tse_finish(&job, code);
}
