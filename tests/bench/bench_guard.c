/* bench_guard.c - the benchmarks' guard: signal handlers that stop the daemons and children a
 * benchmark started, children that die with the benchmark (PR_SET_PDEATHSIG), and the options
 * and timing helpers the benchmarks share. See bench_guard.h. The handler uses only
 * async-signal-safe calls (kill, waitpid, nanosleep, unlink, rmdir, write, _exit). */
#include "bench_guard.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_CHILDREN = 8 };
static tse_job *volatile guard_job;
static volatile pid_t children[MAX_CHILDREN];

double tsb_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double tsb_median(double *v, int n) {
  if (n <= 0)
    return -1;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void say(const char *s) {
  ssize_t rc = write(2, s, strlen(s));
  (void)rc;
}

/* Sends sig to the job's mpirun and daemons and to every child's process group. */
static void signal_all(int sig) {
  tse_job *j = guard_job;
  if (j && j->pid > 0) {
    kill(j->pid, sig);
    if (sig == SIGKILL)
      kill(-j->pid, sig);
    for (int r = 0; r < j->np && r < 64; r++)
      if (j->daemon_pids[r] > 0)
        kill(j->daemon_pids[r], sig);
  }
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i] > 0)
      kill(-children[i], sig);
}

/* Reaps what exited; returns how many of the job's mpirun and the children still run. */
static int reap(void) {
  int running = 0;
  tse_job *j = guard_job;
  if (j && j->pid > 0) {
    pid_t w = waitpid(j->pid, NULL, WNOHANG);
    if (w == j->pid || (w < 0 && errno == ECHILD))
      j->pid = 0;
    else
      running++;
  }
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i] > 0) {
      pid_t w = waitpid(children[i], NULL, WNOHANG);
      if (w == children[i] || (w < 0 && errno == ECHILD))
        children[i] = 0;
      else
        running++;
    }
  return running;
}

static void on_signal(int sig) {
  say("tshard-bench: stopping on a signal or the timeout: stopping the daemons it started\n");
  signal_all(SIGTERM);
  struct timespec nap = {0, 20 * 1000 * 1000};
  for (int i = 0; i < 750 && reap(); i++) /* up to 15 s for a clean shutdown */
    nanosleep(&nap, NULL);
  if (reap()) {
    say("tshard-bench: the daemons did not stop within 15 s: killing them\n");
    signal_all(SIGKILL);
    for (int i = 0; i < 250 && reap(); i++)
      nanosleep(&nap, NULL);
  }
  tse_job *j = guard_job;
  if (j) {
    unlink(j->log);
    rmdir(j->dir); /* empty once the daemons removed their sockets */
  }
  _exit(128 + sig);
}

void tsb_guard_install(int timeout_s) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGALRM};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaddset(&sa.sa_mask, sigs[i]); /* one handler at a time */
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaction(sigs[i], &sa, NULL);
  if (timeout_s > 0)
    alarm((unsigned)timeout_s);
}

void tsb_guard_job(tse_job *j) { guard_job = j; }

pid_t tsb_spawn(const char *const *argv, const char *const *env, FILE **out) {
  int fds[2];
  *out = NULL;
  if (pipe(fds) != 0) {
    perror("tshard-bench: pipe");
    return -1;
  }
  int slot = -1;
  for (int i = 0; i < MAX_CHILDREN && slot < 0; i++)
    if (children[i] == 0)
      slot = i;
  pid_t parent = getpid();
  pid_t pid = slot < 0 ? -1 : fork();
  if (pid < 0) {
    fprintf(stderr, "tshard-bench: cannot start %s: %s\n", argv[0],
            slot < 0 ? "too many children" : strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* dies with the benchmark, even a SIGKILLed one */
    if (getppid() != parent)
      _exit(127); /* the benchmark died before prctl */
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    for (int i = 0; env && env[i]; i++)
      putenv((char *)env[i]);
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "tshard-bench: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  children[slot] = pid;
  close(fds[1]);
  *out = fdopen(fds[0], "r");
  return pid;
}

int tsb_wait(pid_t pid, FILE **out) {
  if (*out)
    fclose(*out);
  *out = NULL;
  int status;
  pid_t w;
  do
    w = waitpid(pid, &status, 0);
  while (w < 0 && errno == EINTR);
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i] == pid)
      children[i] = 0;
  if (w != pid)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void tsb_announce(const tse_job *j, bool wait_stdin) {
  printf("job=%s\nsocket_dir=%s\ndaemon_pids=", j->job, j->dir);
  for (int r = 0; r < j->np; r++)
    printf("%s%d", r ? "," : "", j->daemon_pids[r]);
  printf("\ndaemons_ready=1\n");
  fflush(stdout);
  if (wait_stdin) {
    int c;
    while ((c = getchar()) != EOF && c != '\n')
      ;
  }
}

int tsb_common_option(int argc, char **argv, int *i, int *timeout_s, bool *wait_stdin) {
  if (strcmp(argv[*i], "--wait-stdin") == 0) {
    *wait_stdin = true;
    return 1;
  }
  if (strcmp(argv[*i], "--timeout") != 0)
    return 0;
  char *end = NULL;
  long v = *i + 1 < argc ? strtol(argv[*i + 1], &end, 10) : -1;
  if (!end || *end || v < 1 || v > 86400) {
    fprintf(stderr, "%s: --timeout needs a number of seconds from 1 to 86400\n", argv[0]);
    return -1;
  }
  *timeout_s = (int)v;
  (*i)++;
  return 1;
}

/* Whether this process may read another of its user's processes (process_vm_readv, what Open
 * MPI's CMA single-copy transfers use; a container without CAP_SYS_PTRACE or a strict Yama
 * setting refuses it). Asked of a forked child that waits on a pipe. */
static bool cma_usable(void) {
  static volatile char probe[64] = "tshard";
  int fds[2];
  if (pipe(fds) != 0)
    return false;
  pid_t pid = fork();
  if (pid == 0) {
    char b;
    close(fds[1]);
    ssize_t r = read(fds[0], &b, 1); /* until the parent closes its end */
    _exit(r < 0);
  }
  close(fds[0]);
  char got[sizeof probe];
  struct iovec local = {got, sizeof got}, remote = {(void *)probe, sizeof probe};
  bool ok = pid > 0 && process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof got &&
            memcmp(got, (const char *)probe, 7) == 0;
  close(fds[1]);
  if (pid > 0)
    waitpid(pid, NULL, 0);
  return ok;
}

void tsb_single_copy_as_users(void) {
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", cma_usable() ? "cma" : "none", 0);
  printf("mpi_single_copy=%s\n", getenv("OMPI_MCA_btl_vader_single_copy_mechanism"));
  fflush(stdout);
}

int tsb_parse_long(const char *self, const char *flag, const char *text, long lo, long hi,
                   long *out) {
  char *end = NULL;
  long v = text ? strtol(text, &end, 10) : 0;
  if (!text || !end || *end || end == text || v < lo || v > hi) {
    fprintf(stderr, "%s: %s needs a whole number from %ld to %ld\n", self, flag, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

double tsb_cpu_seconds(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long long ut = 0, st = 0;
  /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
   * stime */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

pid_t tsb_spawn_raw(int np, int argc, char **argv, FILE **out) {
  const char *args[64];
  char nps[16];
  snprintf(nps, sizeof nps, "%d", np);
  int k = 0;
  args[k++] = tse_mpiexec();
  args[k++] = "-np";
  args[k++] = nps;
  args[k++] = "--oversubscribe";
  args[k++] = argv[0];
  args[k++] = "--raw";
  for (int i = 1; i < argc && k < 62; i++)
    if (strcmp(argv[i], "--wait-stdin") != 0)
      args[k++] = argv[i];
  args[k] = NULL;
  return tsb_spawn(args, NULL, out);
}
