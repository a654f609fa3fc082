/* trust.c - what libtshard believes on this node before it talks to a daemon or reads its files.
 *
 * The default socket directory of a user without XDG_RUNTIME_DIR is /tmp/tshard-<uid>, a name
 * any other user can take first. So a client uses a socket only in a directory that is a real
 * directory (not a link) owned by its effective uid with no group or other bits; it talks only to
 * a daemon whose process (SO_PEERCRED, captured when the daemon called listen()) runs as that uid
 * or as root; and it reads the launcher's files in that directory only when they are regular
 * files of that uid or root that nobody else may write, opened without following a link and
 * without blocking (a FIFO is not read). A directory or a daemon that fails is refused with AUTH
 * naming what is wrong; a file that fails is ignored, as if it were not there. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"

/* Fills msg and returns TS_AUTH: the refusal of a directory or a daemon. */
static int refuse(char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return TS_AUTH;
}

static const char hint[] = "remove it, or choose another directory with TSHARD_SOCKET_DIR "
                           "(tshard-launch --socket-dir)";

int tsc_trust_dir(const char *sock_path, char *msg, size_t cap) {
  char dir[sizeof((tshard_client *)0)->path];
  const char *slash = strrchr(sock_path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == sock_path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - sock_path), sock_path);
  struct stat st;
  if (lstat(dir, &st) != 0)
    return TS_OK; /* nothing there: the connect fails and says so */
  unsigned me = (unsigned)geteuid();
  if (S_ISLNK(st.st_mode))
    return refuse(msg, cap,
                  "the socket directory %s is a symbolic link: refusing it (a "
                  "client uses only a real directory of its own with mode 0700); %s",
                  dir, hint);
  if (!S_ISDIR(st.st_mode))
    return refuse(msg, cap, "the socket directory %s is not a directory: refusing it; %s", dir,
                  hint);
  if ((unsigned)st.st_uid != me)
    return refuse(msg, cap,
                  "the socket directory %s belongs to uid %u, not to you (uid %u): "
                  "refusing it (another user could serve your calls from it); %s",
                  dir, (unsigned)st.st_uid, me, hint);
  if (st.st_mode & 077)
    return refuse(msg, cap,
                  "the socket directory %s has mode %04o: it must be 0700, yours "
                  "alone (no group or other bits), or another user could plant a socket "
                  "there; refusing it (chmod 700 it if it is yours and trusted, or %s)",
                  dir, (unsigned)(st.st_mode & 07777), hint);
  return TS_OK;
}

int tsc_trust_peer(int fd, const char *sock_path, char *msg, size_t cap) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred)
    return refuse(msg, cap, "cannot tell who listens at %s (SO_PEERCRED: %s): refusing it",
                  sock_path, strerror(errno));
  unsigned me = (unsigned)geteuid();
  if ((unsigned)cred.uid == me || cred.uid == 0)
    return TS_OK;
  return refuse(msg, cap,
                "the process listening at %s runs as uid %u (pid %d), not as you "
                "(uid %u) or root: refusing to talk to it (it is not your daemon); %s",
                sock_path, (unsigned)cred.uid, (int)cred.pid, me, hint);
}

int tsc_trust_file_open(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return -1;
  struct stat st;
  uid_t me = geteuid();
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != me && st.st_uid != 0) ||
      (st.st_mode & 022)) {
    close(fd);
    return -1;
  }
  return fd;
}
