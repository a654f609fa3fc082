/* signals.c - TERM and INT for the daemon. One process-wide handler, installed once and kept for
 * the process's life, writes the signal's number to a pipe that the loop thread watches
 * (tsd_signals_open, tsd_signals_take). Nothing ever gives the two signals their default action
 * back: one that comes while the daemon stops in order (a launcher's or a scheduler's second
 * signal, or mpirun forwarding it a little later) only writes to the pipe, where nobody reads it
 * any more, and cannot kill a daemon its job would then count lost. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tsd_front.h"

static int pipe_fds[2] = {-1, -1};
static pthread_once_t installed = PTHREAD_ONCE_INIT;
static int install_errno;

static void on_signal(int signum) {
  int saved = errno;
  unsigned char b = (unsigned char)signum;
  if (pipe_fds[1] >= 0)
    (void)!write(pipe_fds[1], &b, 1); /* a full pipe drops it: a stop is already pending */
  errno = saved;
}

static void install(void) {
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    install_errno = errno;
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
    install_errno = errno;
}

int tsd_signals_open(int *read_fd, ts_error *err) {
  pthread_once(&installed, install);
  if (install_errno != 0)
    return ts_error_set(err, TS_IO, "cannot catch TERM and INT: %s", strerror(install_errno));
  *read_fd = pipe_fds[0];
  return TS_OK;
}

int tsd_signals_take(int read_fd) {
  unsigned char b;
  ssize_t n;
  do
    n = read(read_fd, &b, 1);
  while (n < 0 && errno == EINTR);
  return n == 1 ? b : 0;
}
