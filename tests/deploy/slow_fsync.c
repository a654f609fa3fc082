/* slow_fsync.c - a slow disk for the launcher's tests, preloaded (LD_PRELOAD) into the daemons:
 * fsync of a checkpoint's rank file (rank-NNNNN.safetensors) first waits
 * TSHARD_TEST_FSYNC_DELAY_MS milliseconds, as a disk would that takes that long to take the
 * file, so that a background save is still writing when the test signals the job. Every other
 * fsync, and every process without the variable, goes straight to the C library's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*fsync_fn)(int);

/* Whether descriptor fd is open on a file named rank-*.safetensors. */
static int is_rank_file(int fd) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0)
    return 0;
  path[n] = '\0';
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t len = strlen(base), suffix = strlen(".safetensors");
  return strncmp(base, "rank-", 5) == 0 && len > suffix &&
         strcmp(base + len - suffix, ".safetensors") == 0;
}

/* Sleeps ms milliseconds, through signals. */
static void wait_ms(long ms) {
  struct timespec left = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR)
    ;
}

int fsync(int fd) {
  fsync_fn real = (fsync_fn)dlsym(RTLD_NEXT, "fsync");
  const char *env = getenv("TSHARD_TEST_FSYNC_DELAY_MS");
  if (env && env[0] && is_rank_file(fd)) {
    int saved = errno;
    wait_ms(strtol(env, NULL, 10));
    errno = saved;
  }
  return real ? real(fd) : (errno = ENOSYS, -1);
}
