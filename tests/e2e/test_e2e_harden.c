/* test_e2e_harden.c - settings refused at startup, and list/describe that do not wait behind a
 * long reshard.
 *
 * Startup: tshardd run directly (the flags are checked before MPI starts) with a token file of
 * 300 characters, a token file of mode 0644 and --staging 2G must exit with status 2 and a
 * message saying what is wrong; a valid token file (mode 0600) passes the same check.
 * Then 2 daemons: a 64 MiB tensor is resharded (S(0) -> S(1)) on one connection while another
 * connection describes a small tensor and lists the names again and again: at least 3 of those
 * answers must arrive before the reshard's answer (they used to queue behind it on the engine),
 * each must match what was created, and afterwards describe shows the new attribute with the
 * boxes the reference computes. Ordering is asserted, never wall time.
 * A flood of TCP connections that never present their token: one daemon with
 * --max-unauthenticated 32, --auth-timeout 3s and a descriptor limit of its open descriptors plus
 * 48 (prlimit), 300 TCP connections opened from here while a Unix client connects and pings after
 * every ten: every ping succeeds; at most 32 connections wait and are answered TIMEOUT (naming
 * --auth-timeout) and closed no sooner than 3 s after they connected; all the others are closed
 * well before that; the daemon's log has a few lines about them, not hundreds; a client with
 * the token is served afterwards. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tshard.pb-c.h"

/* Runs tshardd with args (no mpirun); returns its exit status, its stderr in out. */
static int run_daemon(const char *const *args, char *out, size_t cap) {
  int pipefd[2];
  if (pipe(pipefd) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 2);
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    const char *argv[32];
    int n = 0;
    argv[n++] = TSE_DAEMON_PATH;
    for (int i = 0; args[i] && n < 31; i++)
      argv[n++] = args[i];
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(pipefd[1]);
  size_t have = 0;
  out[0] = '\0';
  for (;;) { /* bounded: 60 s without output ends it */
    struct pollfd p = {pipefd[0], POLLIN, 0};
    if (poll(&p, 1, 60000) <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    ssize_t k = read(pipefd[0], out + have, cap - 1 - have);
    if (k <= 0)
      break;
    have += (size_t)k;
    out[have] = '\0';
    if (have == cap - 1)
      break;
  }
  close(pipefd[0]);
  int status = 0;
  for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; i++)
    poll(NULL, 0, 100);
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  TSE_CHECK(f != NULL, "cannot write %s", path);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  chmod(path, mode);
}

static void refused_at_startup(const char *what, const char *const *args, const char *expect) {
  char out[4096];
  int code = run_daemon(args, out, sizeof out);
  TSE_CHECK(code == 2 && strstr(out, expect), "%s: exit %d, output '%s' (expected '%s')", what,
            code, out, expect);
}

static void startup_checks(void) {
  char dir[] = "/tmp/tse-harden-XXXXXX";
  if (!mkdtemp(dir)) {
    TSE_CHECK(0, "mkdtemp: %s", strerror(errno));
    return;
  }
  char longtok[400], loose[400], good[400];
  snprintf(longtok, sizeof longtok, "%s/long", dir);
  snprintf(loose, sizeof loose, "%s/loose", dir);
  snprintf(good, sizeof good, "%s/good", dir);
  char text[302];
  memset(text, 'k', 300);
  text[300] = '\n';
  text[301] = '\0';
  write_file(longtok, text, 0600);
  write_file(loose, "a-good-token-but-readable\n", 0644);
  write_file(good, "a-good-token-0600\n", 0600);
  const char *a1[] = {"--listen", "tcp://127.0.0.1:1", "--token-file", longtok, NULL};
  refused_at_startup("token of 300 characters", a1, "tokens have 8 to 255");
  const char *a2[] = {"--listen", "tcp://127.0.0.1:1", "--token-file", loose, NULL};
  refused_at_startup("token file of mode 0644", a2, "chmod 600");
  const char *a3[] = {"--staging", "2G", NULL};
  refused_at_startup("--staging 2G", a3, "--staging 2G");
  const char *a4[] = {"--frame-timeout", "1h2m", NULL};
  refused_at_startup("--frame-timeout of a bad duration", a4, "--frame-timeout");
  /* The same reader accepts a private token file: --help after it proves the parse went on. */
  const char *a5[] = {
      "--listen", "tcp://127.0.0.1:1", "--token-file", good, "--staging", "1G", "--help", NULL};
  char out[16384]; /* the whole --help */
  int code = run_daemon(a5, out, sizeof out);
  TSE_CHECK(code == 0 && strstr(out, "--frame-timeout"), "valid flags: exit %d, '%s'", code, out);
  unlink(longtok);
  unlink(loose);
  unlink(good);
  rmdir(dir);
}

/* ---------------------------------------------------------------------------------------------
 * Raw frames, to keep a reshard in flight on one connection while another asks. */

static void send_request(int fd, Tshard__Request *req) {
  size_t n = tshard__request__get_packed_size(req);
  uint8_t *b = malloc(n + 4);
  b[0] = (uint8_t)n, b[1] = (uint8_t)(n >> 8), b[2] = (uint8_t)(n >> 16), b[3] = (uint8_t)(n >> 24);
  tshard__request__pack(req, b + 4);
  TSE_CHECK(send(fd, b, n + 4, MSG_NOSIGNAL) == (ssize_t)(n + 4), "send");
  free(b);
}

/* One answer (NULL when none came within 120 s); free with tshard__response__free_unpacked. */
static Tshard__Response *read_response(int fd) {
  uint8_t h[4];
  if (!tse_read_full(fd, h, 4, 120000))
    return NULL;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  uint8_t *body = malloc(len ? len : 1);
  Tshard__Response *r =
      tse_read_full(fd, body, len, 120000) ? tshard__response__unpack(NULL, len, body) : NULL;
  free(body);
  return r;
}

static bool readable_now(int fd) {
  struct pollfd pfd = {fd, POLLIN, 0};
  return poll(&pfd, 1, 0) > 0;
}

static void catalog_checks(void) {
  tse_job job;
  if (tse_start(&job, 2, NULL, 120) != 0) {
    TSE_CHECK(0, "daemons did not start");
    return;
  }
  tshard_client *c0 = tse_connect(&job, 0);
  int64_t small[2] = {6, 4}, big[2] = {4096, 4096};
  TSE_OK(c0, tshard_create(c0, "small", "i32", 2, small, "mesh=[2] placements=[S(0)]", NULL, NULL));
  TSE_OK(c0, tshard_create(c0, "big", "f32", 2, big, "mesh=[2] placements=[S(0)]", NULL, NULL));
  int a = tse_raw_connect(&job, 0), b = tse_raw_connect(&job, 0);
  if (a < 0 || b < 0)
    goto out;
  {
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__ReshardRequest q = TSHARD__RESHARD_REQUEST__INIT;
    Tshard__DistAttr at = TSHARD__DIST_ATTR__INIT;
    at.text = "mesh=[2] placements=[S(1)]";
    q.name = "big";
    q.attr = &at;
    req.id = 1000;
    req.op_case = TSHARD__REQUEST__OP_RESHARD;
    req.reshard = &q;
    send_request(a, &req);
  }
  int before = 0, bad = 0;
  for (uint64_t id = 1; id < 100000 && !readable_now(a); id++) {
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__DescribeRequest d = TSHARD__DESCRIBE_REQUEST__INIT;
    Tshard__ListRequest l = TSHARD__LIST_REQUEST__INIT;
    req.id = id;
    if (id % 2) {
      d.name = "small";
      req.op_case = TSHARD__REQUEST__OP_DESCRIBE;
      req.describe = &d;
    } else {
      req.op_case = TSHARD__REQUEST__OP_LIST;
      req.list = &l;
    }
    send_request(b, &req);
    Tshard__Response *r = read_response(b);
    if (!r) {
      TSE_CHECK(0, "no answer to request %llu", (unsigned long long)id);
      break;
    }
    bool ok = r->id == id && r->status == 0;
    if (ok && id % 2)
      ok = r->result_case == TSHARD__RESPONSE__RESULT_DESCRIBE &&
           strcmp(r->describe->name, "small") == 0 && strcmp(r->describe->dtype, "i32") == 0 &&
           r->describe->n_shape == 2 && r->describe->shape[0] == 6 && r->describe->shape[1] == 4 &&
           r->describe->attr &&
           strcmp(r->describe->attr->text, "mesh=[2]@0-1 placements=[S(0)]") == 0 &&
           r->describe->n_ranks == 2 && r->describe->ranks[1]->lo[0] == 3 &&
           r->describe->ranks[1]->bytes == 3 * 4 * 4;
    else if (ok)
      ok = r->result_case == TSHARD__RESPONSE__RESULT_LIST && r->list->n_names == 2;
    bad += !ok;
    /* Counted only when the reshard's answer had not come yet when this answer was read. */
    if (!readable_now(a))
      before++;
    tshard__response__free_unpacked(r, NULL);
  }
  TSE_CHECK(bad == 0, "%d wrong answers to describe/list during the reshard", bad);
  TSE_CHECK(before >= 3, "only %d describe/list answers came before the reshard's answer", before);
  Tshard__Response *r = read_response(a);
  TSE_CHECK(r && r->id == 1000 && r->status == 0, "reshard answered %d: %s", r ? r->status : -1,
            r ? r->message : "nothing");
  if (r)
    tshard__response__free_unpacked(r, NULL);
  printf("%d describe/list answers before the reshard's answer\n", before);
  /* The catalog follows the reshard: the new attribute and boxes (columns split in halves). */
  for (int rank = 0; rank < 2; rank++) {
    tshard_client *c = tse_connect(&job, rank);
    tshard_info info;
    TSE_OK(c, tshard_describe(c, "big", &info));
    TSE_CHECK(info.attr && strcmp(info.attr, "mesh=[2]@0-1 placements=[S(1)]") == 0,
              "rank %d describes big as '%s'", rank, info.attr ? info.attr : "");
    bool boxes = info.nranks == 2;
    for (int i = 0; boxes && i < 2; i++)
      boxes = info.ranks[i].lo[0] == 0 && info.ranks[i].hi[0] == 4096 &&
              info.ranks[i].lo[1] == info.ranks[i].rank * 2048 &&
              info.ranks[i].hi[1] == (info.ranks[i].rank + 1) * 2048 &&
              info.ranks[i].bytes == 4096ull * 2048 * 4;
    TSE_CHECK(boxes, "rank %d: boxes of big after the reshard are wrong", rank);
    tshard_info_clear(&info);
    tshard_close(&c);
  }
  /* A copy under a new name and a drop show in the list of every rank as soon as they answered. */
  tshard_reshard_opts o = {.keep_source_as = "small_copy"};
  TSE_OK(c0, tshard_reshard(c0, "small", "mesh=[2] placements=[R]", &o));
  TSE_OK(c0, tshard_drop(c0, "big", NULL));
  for (int rank = 0; rank < 2; rank++) {
    tshard_client *c = tse_connect(&job, rank);
    char **names = NULL;
    int n = 0;
    TSE_OK(c, tshard_list(c, &names, &n));
    bool has_copy = false, has_big = false;
    for (int i = 0; i < n; i++) {
      has_copy |= strcmp(names[i], "small_copy") == 0;
      has_big |= strcmp(names[i], "big") == 0;
    }
    TSE_CHECK(n == 2 && has_copy && !has_big, "rank %d lists %d names after copy and drop", rank,
              n);
    tshard_free_names(names, n);
    tshard_info info;
    TSE_CHECK(tshard_describe(c, "big", &info) == TS_NOT_FOUND,
              "rank %d describes a dropped tensor", rank);
    TSE_OK(c, tshard_describe(c, "small_copy", &info));
    TSE_CHECK(info.attr && strcmp(info.attr, "mesh=[2]@0-1 placements=[R]") == 0,
              "rank %d describes small_copy as '%s'", rank, info.attr ? info.attr : "");
    tshard_info_clear(&info);
    tshard_close(&c);
  }
out:
  if (a >= 0)
    close(a);
  if (b >= 0)
    close(b);
  tshard_close(&c0);
  tse_stop(&job);
}

/* ---------------------------------------------------------------------------------------------
 * A flood of unauthenticated TCP connections. */

#define FLOOD 300
#define FLOOD_CAP 32
#define FLOOD_AUTH_MS 3000

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int open_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Lines of the log that mention what the flood caused. */
static int flood_log_lines(const char *log, int *left_out) {
  FILE *f = fopen(log, "r");
  char line[2048];
  int n = 0;
  *left_out = 0;
  while (f && fgets(line, sizeof line, f)) {
    bool about = strstr(line, "refused") || strstr(line, "no token") || strstr(line, "left out");
    n += about;
    *left_out += about && strstr(line, "left out") != NULL;
  }
  if (f)
    fclose(f);
  return n;
}

typedef struct flood_conn {
  int fd;
  int64_t opened, closed; /* ms; closed 0: still open */
  uint8_t got[512];
  size_t have;
} flood_conn;

/* Reads what the connections got until each is closed or the deadline passes. */
static void flood_wait(flood_conn *fc, int n, int64_t deadline) {
  struct pollfd *p = calloc((size_t)n, sizeof *p);
  for (;;) {
    int open = 0;
    for (int i = 0; i < n; i++) {
      p[i].fd = fc[i].closed ? -1 : fc[i].fd;
      p[i].events = POLLIN;
      open += !fc[i].closed;
    }
    int64_t left = deadline - mono_ms();
    if (open == 0 || left <= 0 || poll(p, (nfds_t)n, (int)left) <= 0)
      break;
    for (int i = 0; i < n; i++) {
      if (fc[i].closed || !p[i].revents)
        continue;
      uint8_t scratch[512];
      size_t room = sizeof fc[i].got - fc[i].have;
      ssize_t k =
          read(fc[i].fd, room ? fc[i].got + fc[i].have : scratch, room ? room : sizeof scratch);
      if (k > 0 && room)
        fc[i].have += (size_t)k;
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
        fc[i].closed = mono_ms();
    }
  }
  free(p);
}

/* The status and message of the answer a connection got (-1: none whole). */
static int flood_answer(const flood_conn *c, char *msg, size_t cap) {
  msg[0] = '\0';
  if (c->have < 4)
    return -1;
  uint32_t len = (uint32_t)c->got[0] | (uint32_t)c->got[1] << 8 | (uint32_t)c->got[2] << 16 |
                 (uint32_t)c->got[3] << 24;
  Tshard__Response *r = len <= c->have - 4 ? tshard__response__unpack(NULL, len, c->got + 4) : NULL;
  if (!r)
    return -1;
  int status = (int)r->status;
  snprintf(msg, cap, "%s", r->message ? r->message : "");
  tshard__response__free_unpacked(r, NULL);
  return status;
}

static void flood_checks(void) {
  static const char *token = "flood-token-0600";
  char tok[128];
  snprintf(tok, sizeof tok, "/tmp/tse-flood-token-%d", (int)getpid());
  unlink(tok);
  write_file(tok, "flood-token-0600\n", 0600);
  struct rlimit rl; /* this test holds FLOOD descriptors at once */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  tse_job job;
  int started = -1, port = 0;
  for (int attempt = 0; attempt < 3 && started != 0; attempt++) {
    port = 21001 + (int)((getpid() * 13 + attempt * 7919) % 20000) * 2;
    char url[64], cap[16], auth[16];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    snprintf(cap, sizeof cap, "%d", FLOOD_CAP);
    snprintf(auth, sizeof auth, "%dms", FLOOD_AUTH_MS);
    const char *extra[] = {
        "--listen", url, "--token-file", tok, "--max-unauthenticated", cap, "--auth-timeout",
        auth,       NULL};
    started = tse_start(&job, 1, extra, 120);
  }
  unlink(tok);
  if (started != 0) {
    TSE_CHECK(0, "the flood's daemon did not start");
    return;
  }
  pid_t dpid = job.daemon_pids[0];
  int base = open_fds(dpid);
  struct rlimit low = {(rlim_t)base + 48, (rlim_t)base + 48};
  TSE_CHECK(dpid > 0 && base > 0 && prlimit(dpid, RLIMIT_NOFILE, &low, NULL) == 0,
            "the daemon's descriptor limit (pid %d, %d open): %s", (int)dpid, base,
            strerror(errno));
  char path[600];
  tse_socket_path(&job, 0, path, sizeof path);
  flood_conn *fc = calloc(FLOOD, sizeof *fc);
  int pings = 0, ping_ok = 0, opened = 0;
  for (int i = 0; i < FLOOD; i++) {
    fc[i].fd = tcp_connect(port);
    fc[i].opened = mono_ms();
    if (fc[i].fd < 0) {
      fc[i].closed = fc[i].opened; /* refused outright: closed at once too */
      continue;
    }
    opened++;
    fcntl(fc[i].fd, F_SETFL, O_NONBLOCK);
    if (i % 10 == 9) { /* the job owner's client meanwhile: a new connection each time */
      tshard_client *u = NULL;
      pings++;
      if (tshard_connect_path(path, 30000, &u) == TS_OK && tshard_ping(u, NULL, NULL) == TS_OK)
        ping_ok++;
      tshard_close(&u);
    }
  }
  flood_wait(fc, FLOOD, mono_ms() + FLOOD_AUTH_MS + 10000);
  int early = 0, late = 0, open_still = 0, timeouts = 0, too_soon = 0;
  for (int i = 0; i < FLOOD; i++) {
    if (!fc[i].closed) {
      open_still++;
      continue;
    }
    int64_t after = fc[i].closed - fc[i].opened;
    char msg[300];
    int st = flood_answer(&fc[i], msg, sizeof msg);
    if (st == TS_TIMEOUT) {
      late++;
      timeouts += strstr(msg, "--auth-timeout") != NULL;
      too_soon += after < FLOOD_AUTH_MS - 100;
    } else if (after < FLOOD_AUTH_MS - 1000) {
      early++;
    }
  }
  printf("flood: %d connections opened, %d closed at once, %d after the auth deadline, %d "
         "open; %d of %d Unix pings answered\n",
         opened, early, late, open_still, ping_ok, pings);
  TSE_CHECK(pings == FLOOD / 10 && ping_ok == pings,
            "only %d of %d Unix pings during the flood "
            "were answered",
            ping_ok, pings);
  TSE_CHECK(open_still == 0, "%d flood connections still open %d ms after the auth deadline",
            open_still, 10000);
  TSE_CHECK(late >= 1 && late <= FLOOD_CAP && timeouts == late && too_soon == 0,
            "%d connections closed by the auth deadline (at most %d, each answered TIMEOUT "
            "naming --auth-timeout: %d; %d closed too soon)",
            late, FLOOD_CAP, timeouts, too_soon);
  TSE_CHECK(early + late == FLOOD, "%d connections closed at once, %d by the deadline, of %d",
            early, late, FLOOD);
  for (int i = 0; i < FLOOD; i++)
    if (fc[i].fd >= 0)
      close(fc[i].fd);
  free(fc);
  int left_out = 0;
  int lines = flood_log_lines(job.log, &left_out);
  printf("flood: %d log lines about it, %d of them counting lines left out\n", lines, left_out);
  TSE_CHECK(lines >= 1 && lines <= 15 && left_out >= 1,
            "%d log lines about the flood (%d "
            "counting the lines left out): rate-limited to a few",
            lines, left_out);
  tshard_client *t = NULL;
  int rc = tshard_connect_tcp("127.0.0.1", port, token, 30000, &t);
  TSE_CHECK(rc == TS_OK, "a client with the token after the flood: %s", tshard_status_name(rc));
  tshard_close(&t);
  tse_stop(&job);
}

int main(void) {
  startup_checks();
  catalog_checks();
  flood_checks();
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
