/* test_e2e_owner.c - a Unix connection belongs to the process that opened it, end to end: real
 * daemons (3 ranks on this node), libtshard and frames written by hand.
 *
 * 1. libtshard after fork(): the child uses its parent's client for a direct put and get (and a
 *    get into a buffer at the address of one of its parent's); it gets its own connection and
 *    correct results; the parent's buffers, tensor and connection are intact.
 * 2. A frame whose bytes two processes wrote (the parent its first two bytes, a child the rest)
 *    is refused (AUTH, "several processes"); the connection serves its owner on.
 * 3. Pid reuse: A opens a connection, forks B (which inherits it) and exits; its pid goes to V
 *    (clone3 with set_tid), which runs as uid 65534 and holds a secret at the address B names.
 *    B's get into and put from that address are refused (AUTH, naming A and B); then, V gone, a
 *    process G made with A's very pid on the inherited connection is refused too (its owner has
 *    exited). V's secret is intact and the tensor is as it was.
 * 4. A process of another user that reaches the socket (it kept CAP_DAC_OVERRIDE, which passes
 *    the 0700 directory) is answered AUTH naming both uids and closed; the daemon serves on.
 * 5. The check every rank makes before it copies (comm/proc.c) against real processes: the
 *    right process passes; a wrong start time, a wrong uid, a gone process and a process that
 *    took the pid of an exited one (same pid, later start) are refused with their status. */
#include <errno.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "ts_comm.h"
#include "tshard.pb-c.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

#define N_BYTES 4096
/* Globals sit at one address in every process forked from this one. */
static uint8_t secret[N_BYTES];
static float keep[64 * 64];

/* A child process with pid `want` (clone3 with set_tid; root only): 0 in the child, its pid in
 * the parent, -1 when the pid could not be had. */
static pid_t fork_with_pid(pid_t want) {
  uint64_t args[11]; /* struct clone_args up to cgroup (Linux 5.7) */
  memset(args, 0, sizeof args);
  args[4] = SIGCHLD;                    /* exit_signal */
  args[8] = (uint64_t)(uintptr_t)&want; /* set_tid */
  args[9] = 1;                          /* set_tid_size */
  return (pid_t)syscall(SYS_clone3, args, sizeof args);
}

static void send_frame(int fd, Tshard__Request *req) {
  size_t n = tshard__request__get_packed_size(req);
  uint8_t *b = malloc(n + 4);
  b[0] = (uint8_t)n, b[1] = (uint8_t)(n >> 8), b[2] = (uint8_t)(n >> 16), b[3] = (uint8_t)(n >> 24);
  tshard__request__pack(req, b + 4);
  ssize_t k = send(fd, b, n + 4, MSG_NOSIGNAL);
  TSE_CHECK(k == (ssize_t)(n + 4), "send: %zd", k);
  free(b);
}

static Tshard__Response *read_answer(int fd) {
  uint8_t h[4];
  if (!tse_read_full(fd, h, 4, 60000))
    return NULL;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  uint8_t *body = malloc(len ? len : 1);
  Tshard__Response *r =
      tse_read_full(fd, body, len, 60000) ? tshard__response__unpack(NULL, len, body) : NULL;
  free(body);
  return r;
}

/* A put (or get) of tensor "vt" naming [addr, +N_BYTES) of the sender's memory, by hand; writes
 * "ok" or what went wrong to the report descriptor. `want` must be in the refusal. */
static void raw_direct(int fd, bool put, uint64_t id, const char *want1, const char *want2,
                       int report) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
  Tshard__GetRequest g = TSHARD__GET_REQUEST__INIT;
  Tshard__ClientMemory m = TSHARD__CLIENT_MEMORY__INIT;
  m.address = (uint64_t)(uintptr_t)secret;
  m.bytes = N_BYTES;
  req.id = id;
  if (put) {
    p.name = "vt";
    p.total_bytes = N_BYTES;
    p.client_memory = &m;
    req.op_case = TSHARD__REQUEST__OP_PUT;
    req.put = &p;
  } else {
    g.name = "vt";
    g.client_memory = &m;
    req.op_case = TSHARD__REQUEST__OP_GET;
    req.get = &g;
  }
  send_frame(fd, &req);
  Tshard__Response *r = read_answer(fd);
  char line[900];
  bool ok = r && r->id == id && r->status == TS_AUTH && strstr(r->message, want1) &&
            strstr(r->message, want2);
  snprintf(line, sizeof line, "%s process %d's raw %s: %s %s\n", ok ? "ok" : "FAIL", (int)getpid(),
           put ? "put" : "get", r ? tshard_status_name(r->status) : "no answer",
           r ? r->message : "");
  ssize_t w = write(report, line, strlen(line));
  (void)w;
  if (r)
    tshard__response__free_unpacked(r, NULL);
}

/* 1. libtshard in a forked child. */
static void forked_client(tshard_client *c) {
  int64_t shape[2] = {64, 64}, lo[2] = {0, 0};
  TSE_OK(c, tshard_create(c, "cf", "f32", 2, shape, "mesh=[3] placements=[S(0)]", NULL, NULL));
  tse_fill_box("f32", 11, 2, shape, lo, shape, keep);
  TSE_OK(c, tshard_put(c, "cf", keep, sizeof keep, NULL));
  pid_t pid = fork();
  if (pid == 0) {
    tse_fill_box("f32", 12, 2, shape, lo, shape, keep); /* the child's copy only */
    int bad = tshard_put(c, "cf", keep, sizeof keep, NULL) != TS_OK;
    memset(keep, 0, sizeof keep);
    bad += tshard_get(c, "cf", keep, sizeof keep) != TS_OK; /* at the parent's address */
    bad += tse_compare_box("child's get", "f32", 12, 2, shape, lo, shape, keep) != 0;
    if (bad)
      fprintf(stderr, "child: %s\n", tshard_last_message(c));
    _exit(bad ? 1 : 0);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  TSE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the forked child's put and get "
            "through its parent's client: status %d",
            status);
  TSE_CHECK(tse_compare_box("the parent's buffer", "f32", 11, 2, shape, lo, shape, keep) == 0,
            "the child's get wrote into the parent's buffer");
  float *back = calloc(64 * 64, sizeof *back);
  TSE_OK(c, tshard_get(c, "cf", back, sizeof keep));
  TSE_CHECK(tse_compare_box("cf after the child", "f32", 12, 2, shape, lo, shape, back) == 0,
            "the child's put is not the tensor");
  TSE_OK(c, tshard_put(c, "cf", keep, sizeof keep, NULL));
  TSE_OK(c, tshard_get(c, "cf", back, sizeof keep));
  TSE_CHECK(tse_compare_box("cf, the parent's again", "f32", 11, 2, shape, lo, shape, back) == 0,
            "the parent's put after the fork");
  free(back);
  TSE_OK(c, tshard_drop(c, "cf", NULL));
}

/* 2. A frame written by two processes. */
static void mixed_frame(const tse_job *job) {
  int fd = tse_raw_connect(job, 0);
  if (fd < 0)
    return;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PingRequest p = TSHARD__PING_REQUEST__INIT;
  req.id = 77;
  req.op_case = TSHARD__REQUEST__OP_PING;
  req.ping = &p;
  size_t n = tshard__request__get_packed_size(&req);
  uint8_t b[256];
  b[0] = (uint8_t)n, b[1] = (uint8_t)(n >> 8), b[2] = (uint8_t)(n >> 16), b[3] = (uint8_t)(n >> 24);
  tshard__request__pack(&req, b + 4);
  TSE_CHECK(write(fd, b, 2) == 2, "first two bytes");
  pid_t pid = fork();
  if (pid == 0)
    _exit(write(fd, b + 2, n + 2) == (ssize_t)(n + 2) ? 0 : 1);
  int status = -1;
  waitpid(pid, &status, 0);
  Tshard__Response *r = read_answer(fd);
  TSE_CHECK(r && r->id == 77 && r->status == TS_AUTH && strstr(r->message, "several processes"),
            "a frame of two writers: %s %s", r ? tshard_status_name(r->status) : "no answer",
            r ? r->message : "");
  if (r)
    tshard__response__free_unpacked(r, NULL);
  send_frame(fd, &req); /* the owner alone: answered */
  r = read_answer(fd);
  TSE_CHECK(r && r->id == 77 && r->status == TS_OK, "the owner's ping after the mixed frame");
  if (r)
    tshard__response__free_unpacked(r, NULL);
  close(fd);
}

/* V of pid_reuse: uid 65534 with the secret; exits 0 when the secret is intact at the end. */
static void victim(int ready, int done) {
  memset(secret, 0x5a, sizeof secret);
  if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
    _exit(4);
  char x = 'v';
  if (write(ready, &x, 1) != 1)
    _exit(5);
  if (read(done, &x, 1) < 0)
    _exit(6);
  for (size_t i = 0; i < sizeof secret; i++)
    if (secret[i] != 0x5a)
      _exit(3);
  _exit(0);
}

/* B of pid_reuse: raw requests on the connection A opened, after V took A's pid; then G with
 * A's pid. */
static void holder(int fd, pid_t a, int go, int report) {
  char x, want1[64], want2[64];
  if (read(go, &x, 1) != 1)
    _exit(1);
  snprintf(want1, sizeof want1, "belongs to process %d", (int)a);
  snprintf(want2, sizeof want2, "process %d sent this request", (int)getpid());
  raw_direct(fd, false, 1, want1, want2, report); /* the get first: it would write over V's */
  raw_direct(fd, true, 2, want1, want2, report);
  if (read(go, &x, 1) != 1) /* V is gone: A's pid is free again */
    _exit(1);
  pid_t g = fork_with_pid(a);
  if (g == 0) {
    memset(secret, 0x33, sizeof secret);
    raw_direct(fd, true, 3, want1, "has exited", report);
    _exit(0);
  }
  if (g < 0) {
    char line[200];
    snprintf(line, sizeof line, "FAIL clone3 with pid %d: %s\n", (int)a, strerror(errno));
    ssize_t w = write(report, line, strlen(line));
    (void)w;
  } else {
    waitpid(g, NULL, 0);
  }
  _exit(0);
}

/* 3. Pid reuse. */
static void pid_reuse(const tse_job *job, tshard_client *c) {
  int64_t shape[1] = {N_BYTES}, lo[1] = {0};
  uint8_t ref[N_BYTES], back[N_BYTES];
  tse_fill_box("u8", 21, 1, shape, lo, shape, ref);
  TSE_OK(c, tshard_create(c, "vt", "u8", 1, shape, "mesh=[3] placements=[S(0)]", NULL, NULL));
  TSE_OK(c, tshard_put(c, "vt", ref, N_BYTES, NULL));
  int info[2], go[2], report[2], ready[2], done[2];
  if (pipe(info) || pipe(go) || pipe(report) || pipe(ready) || pipe(done)) {
    TSE_CHECK(0, "pipe: %s", strerror(errno));
    return;
  }
  pid_t a = fork();
  if (a == 0) { /* A: opens the connection, forks B, exits */
    pid_t me = getpid();
    int fd = tse_raw_connect(job, 0);
    pid_t b = fd >= 0 ? fork() : -1;
    if (b == 0) {
      close(info[1]);
      holder(fd, me, go[0], report[1]);
    }
    _exit(write(info[1], &b, sizeof b) == sizeof b ? 0 : 1);
  }
  pid_t b = -1;
  TSE_CHECK(read(info[0], &b, sizeof b) == sizeof b && b > 0, "A forked B");
  int status = -1;
  waitpid(a, &status, 0); /* A exits and is reaped: its pid is free */
  close(report[1]);
  pid_t v = fork_with_pid(a);
  if (v == 0)
    victim(ready[1], done[0]);
  TSE_CHECK(v == a, "a process with A's pid %d: %s", (int)a, v < 0 ? strerror(errno) : "another");
  char x;
  if (v > 0)
    TSE_CHECK(read(ready[0], &x, 1) == 1, "V is ready");
  TSE_CHECK(write(go[1], "g", 1) == 1, "go B");
  /* B's two lines, then V goes and G comes */
  char lines[4096];
  size_t have = 0;
  int nl = 0;
  while (nl < 2 && have < sizeof lines - 1) {
    ssize_t k = read(report[0], lines + have, sizeof lines - 1 - have);
    if (k <= 0)
      break;
    for (ssize_t i = 0; i < k; i++)
      nl += lines[have + (size_t)i] == '\n';
    have += (size_t)k;
  }
  if (v > 0) {
    TSE_CHECK(write(done[1], "d", 1) == 1, "done V");
    waitpid(v, &status, 0);
    TSE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "V's secret was written over "
              "(exit status %d)",
              status);
  }
  TSE_CHECK(write(go[1], "g", 1) == 1, "go G");
  ssize_t k;
  while (have < sizeof lines - 1 &&
         (k = read(report[0], lines + have, sizeof lines - 1 - have)) > 0)
    have += (size_t)k; /* until B and G are gone (B is not this process's child) */
  lines[have] = '\0';
  printf("%s", lines);
  int oks = 0;
  for (const char *p = lines; (p = strstr(p, "ok ")) != NULL; p += 3)
    oks++;
  TSE_CHECK(oks == 3 && !strstr(lines, "FAIL"),
            "refusals on the connection of an exited "
            "process:\n%s",
            lines);
  TSE_OK(c, tshard_get(c, "vt", back, N_BYTES));
  TSE_CHECK(memcmp(back, ref, N_BYTES) == 0, "the tensor changed (%s)",
            back[0] == 0x5a ? "it holds V's secret" : "other bytes");
  TSE_OK(c, tshard_drop(c, "vt", NULL));
  int fds[] = {info[0], info[1], go[0], go[1], report[0], ready[0], ready[1], done[0], done[1]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    close(fds[i]);
}

/* The start tick of process pid (ts_comm_proc_start through a pidfd). */
static uint64_t start_of(pid_t pid) {
  int fd = ts_comm_proc_open(pid);
  uint64_t s = 0;
  TSE_CHECK(fd >= 0 && ts_comm_proc_start(pid, fd, &s) == 0, "start time of %d", (int)pid);
  if (fd >= 0)
    close(fd);
  return s;
}

static int pin(pid_t pid, uint32_t uid, uint64_t start, ts_error *err) {
  ts_comm_proc p = {pid, uid, start};
  int fd = -1;
  ts_error_clear(err);
  int rc = ts_comm_proc_pin(&p, &fd, err);
  return ts_comm_proc_unpin(&p, &fd, rc, err);
}

static uint64_t boot_ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  long hz = sysconf(_SC_CLK_TCK);
  return (uint64_t)ts.tv_sec * (uint64_t)hz + (uint64_t)ts.tv_nsec / (1000000000ull / (uint64_t)hz);
}

/* 4. The check before every copy. */
static void pin_checks(void) {
  int hold[2];
  if (pipe(hold))
    return;
  pid_t x = fork();
  if (x == 0) {
    char c;
    _exit(read(hold[0], &c, 1) < 0);
  }
  uint64_t s = start_of(x);
  ts_error err;
  TSE_CHECK(pin(x, 0, s, &err) == TS_OK, "the right process: %s", err.msg);
  int rc = pin(x, 0, s + 1, &err);
  TSE_CHECK(rc == TS_AUTH && strstr(err.msg, "not the process that sent"), "another start: %s %s",
            tshard_status_name(rc), err.msg);
  rc = pin(x, 65534, s, &err);
  TSE_CHECK(rc == TS_NO_DIRECT && strstr(err.msg, "uids"), "another uid: %s %s",
            tshard_status_name(rc), err.msg);
  /* The pid goes to a process started at a later tick (polled, bounded: ticks are 10 ms). */
  for (int64_t i = 0; i < 100000000 && boot_ticks() <= s + 1; i++)
    ;
  TSE_CHECK(write(hold[1], "x", 1) == 1, "release X");
  waitpid(x, NULL, 0);
  rc = pin(x, 0, s, &err);
  TSE_CHECK(rc == TS_NOT_FOUND && strstr(err.msg, "gone"), "a gone process: %s %s",
            tshard_status_name(rc), err.msg);
  pid_t y = fork_with_pid(x);
  if (y == 0) {
    char c;
    _exit(read(hold[0], &c, 1) < 0);
  }
  TSE_CHECK(y == x, "a process with the pid %d: %s", (int)x, y < 0 ? strerror(errno) : "other");
  if (y == x) {
    TSE_CHECK(start_of(y) > s, "the new process started later");
    rc = pin(x, 0, s, &err);
    TSE_CHECK(rc == TS_AUTH && strstr(err.msg, "pid went to another process"),
              "the pid of an exited process: %s %s", tshard_status_name(rc), err.msg);
    TSE_CHECK(write(hold[1], "x", 1) == 1, "release Y");
    waitpid(y, NULL, 0);
  }
  close(hold[0]);
  close(hold[1]);
}

/* In a child: become uid 65534 keeping CAP_DAC_OVERRIDE (so the 0700 socket directory does not
 * stop it), connect to rank 0 and ping. Exit 0 when the daemon answered AUTH naming both uids and
 * closed; else a code saying which step failed. */
static int other_user_child(const tse_job *job) {
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[2] = {{0}};
  d[0].effective = d[0].permitted = 1u << CAP_DAC_OVERRIDE;
  if (prctl(PR_SET_KEEPCAPS, 1) != 0 || setresgid(65534, 65534, 65534) != 0 ||
      setresuid(65534, 65534, 65534) != 0 || syscall(SYS_capset, &h, d) != 0)
    return 2;
  int fd = tse_raw_connect(job, 0);
  if (fd < 0)
    return 3;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PingRequest ping = TSHARD__PING_REQUEST__INIT;
  req.id = 5;
  req.op_case = TSHARD__REQUEST__OP_PING;
  req.ping = &ping;
  size_t n = tshard__request__get_packed_size(&req);
  uint8_t b[64] = {(uint8_t)n};
  tshard__request__pack(&req, b + 4);
  (void)!send(fd, b, n + 4, MSG_NOSIGNAL); /* may fail: the daemon closes at once */
  Tshard__Response *r = read_answer(fd);
  int rc = !r                                                            ? 4
           : r->status != TS_AUTH                                        ? 5
           : !strstr(r->message, "serves its own user (uid 0) and root") ? 6
           : !strstr(r->message, "runs as uid 65534")                    ? 7
                                                                         : 0;
  tshard__response__free_unpacked(r, NULL);
  uint8_t more;
  ssize_t k = rc == 0 ? recv(fd, &more, 1, 0) : 0;
  if (k > 0 || (k < 0 && errno != ECONNRESET))
    rc = 8; /* the connection must be closed (reset: the daemon closed it with our ping unread) */
  close(fd);
  return rc;
}

static void other_user(const tse_job *job, tshard_client *c) {
  if (geteuid() != 0) {
    printf("skipped: another user's process needs root to make\n");
    return;
  }
  pid_t p = fork();
  if (p == 0)
    _exit(other_user_child(job));
  int st = 0;
  TSE_CHECK(p > 0 && waitpid(p, &st, 0) == p, "fork or wait failed");
  TSE_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "another user's connection: step %d failed (2 identity, 3 connect, 4 no answer, "
            "5 not AUTH, 6/7 the message, 8 not closed)",
            WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  TSE_OK(c, tshard_ping(c, NULL, NULL));
}

int main(void) {
  unsetenv("TSHARD_DIRECT");
  unsetenv("TSHARD_SHM");
  pin_checks();
  tse_job job;
  if (tse_start(&job, 3, NULL, 120) != 0)
    return 1;
  tshard_client *c = tse_connect(&job, 0);
  if (c) {
    forked_client(c);
    mixed_frame(&job);
    pid_reuse(&job, c);
    other_user(&job, c);
    TSE_OK(c, tshard_ping(c, NULL, NULL));
    tshard_close(&c);
  }
  tse_stop(&job);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
