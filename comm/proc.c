/* proc.c - which process a single copy into a client's memory acts on.
 *
 * A client process is named by its pid, the uid the kernel reported with its request and its
 * start time (clock ticks after boot, field 22 of /proc/PID/stat). A pid alone names whatever
 * process holds it now: the client may have exited and its pid gone to another process, of
 * another user. So before a copy the process is pinned: a pidfd is opened on the pid, its start
 * time and uids are read from /proc and compared with the ones recorded when its request was
 * read, and the pidfd must still show it alive after those reads (then the reads were about the
 * pinned process). After the copy the pidfd must still show it alive, else the copy may have
 * reached a process that took the pid during it, and its result is not used. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comm_internal.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* The text of a small /proc file of pid into buf (NUL-terminated); false when it cannot. */
static bool proc_read(int64_t pid, const char *file, char *buf, size_t cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/%s", (long long)pid, file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  size_t have = 0;
  ssize_t n;
  while (have < cap - 1 && (n = read(fd, buf + have, cap - 1 - have)) > 0)
    have += (size_t)n;
  close(fd);
  buf[have] = '\0';
  return have > 0;
}

/* Field 22 of /proc/PID/stat (the fields after the command name, which may hold spaces and
 * parentheses, are counted from its last ')'). */
static bool proc_start(int64_t pid, uint64_t *start) {
  char buf[1024];
  if (!proc_read(pid, "stat", buf, sizeof buf))
    return false;
  char *p = strrchr(buf, ')');
  if (!p)
    return false;
  p++;
  for (int field = 3; field <= 22; field++) { /* field 3 (state) follows the ')' */
    while (*p == ' ')
      p++;
    if (!*p)
      return false;
    if (field == 22)
      return sscanf(p, "%" SCNu64, start) == 1;
    while (*p && *p != ' ')
      p++;
  }
  return false;
}

/* The real, effective and saved uids of pid (the "Uid:" line of /proc/PID/status). */
static bool proc_uids(int64_t pid, unsigned uid[3]) {
  char buf[4096];
  if (!proc_read(pid, "status", buf, sizeof buf))
    return false;
  const char *p = strstr(buf, "\nUid:");
  return p && sscanf(p + 5, "%u %u %u", &uid[0], &uid[1], &uid[2]) == 3;
}

/* Whether the process of a pidfd has not exited (a pidfd becomes readable when it does). */
static bool pidfd_alive(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  int rc;
  while ((rc = poll(&p, 1, 0)) < 0 && errno == EINTR)
    ;
  return rc == 0;
}

int ts_comm_proc_open(int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX) {
    errno = ESRCH;
    return -1;
  }
  return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
}

bool ts_comm_proc_alive(int pidfd) { return pidfd >= 0 && pidfd_alive(pidfd); }

int ts_comm_proc_start(int64_t pid, int pidfd, uint64_t *start) {
  if (pidfd < 0 || !proc_start(pid, start))
    return -1;
  return pidfd_alive(pidfd) ? 0 : -1;
}

int ts_comm_proc_pin(const ts_comm_proc *p, int *pidfd, ts_error *err) {
  *pidfd = ts_comm_proc_open(p->pid);
  if (*pidfd < 0 && errno == ESRCH)
    return ts_error_set(err, TS_NOT_FOUND, "the client's process %lld is gone", (long long)p->pid);
  if (*pidfd < 0)
    return ts_error_set(err, TS_NO_DIRECT,
                        "this daemon cannot pin the client's process %lld "
                        "(pidfd_open: %s): the data goes through the shared segment instead",
                        (long long)p->pid, strerror(errno));
  uint64_t start = 0;
  unsigned uid[3] = {0, 0, 0};
  bool read = proc_start(p->pid, &start) && proc_uids(p->pid, uid);
  int rc = TS_OK;
  if (!pidfd_alive(*pidfd))
    rc = ts_error_set(err, TS_NOT_FOUND, "the client's process %lld is gone", (long long)p->pid);
  else if (!read)
    rc = ts_error_set(err, TS_NO_DIRECT,
                      "this daemon cannot read /proc/%lld: the data goes "
                      "through the shared segment instead",
                      (long long)p->pid);
  else if (start != p->start)
    rc = ts_error_set(err, TS_AUTH,
                      "process %lld is not the process that sent the request (it "
                      "started at tick %llu, the sender at tick %llu: the sender exited and its "
                      "pid went to another process); its memory is not touched",
                      (long long)p->pid, (unsigned long long)start, (unsigned long long)p->start);
  else if (uid[0] != p->uid || uid[1] != p->uid || uid[2] != p->uid)
    rc = ts_error_set(err, TS_NO_DIRECT,
                      "process %lld runs with uids %u/%u/%u (real, effective, "
                      "saved) and sent its request as uid %u: the daemon reaches only into a "
                      "process whose uids are all the sender's; the data goes through the shared "
                      "segment instead",
                      (long long)p->pid, uid[0], uid[1], uid[2], p->uid);
  if (rc) {
    close(*pidfd);
    *pidfd = -1;
  }
  return rc;
}

int ts_comm_proc_unpin(const ts_comm_proc *p, int *pidfd, int rc, ts_error *err) {
  if (*pidfd < 0)
    return rc;
  bool alive = pidfd_alive(*pidfd);
  close(*pidfd);
  *pidfd = -1;
  if (rc == TS_OK && !alive)
    rc = ts_error_set(err, TS_NOT_FOUND,
                      "the client's process %lld exited during the copy; "
                      "what was copied is not used",
                      (long long)p->pid);
  return rc;
}
