/* cache.c - the program cache on disk, kept so that nobody but this process's user can put code
 * into it. The directory: the cache_dir option, else $TSHARD_PROGRAM_CACHE, else
 * $XDG_CACHE_HOME/tshard/programs, else $HOME/.cache/tshard/programs, else
 * $XDG_RUNTIME_DIR/tshard/programs, else /tmp/tshard-<uid>/programs (the last two under the
 * socket directory's per-user base, which must be ours with mode 0700). Directories it creates
 * get mode 0700; the cache directory must be owned by the effective uid and not writable by group
 * or others, and every directory above it owned by root or us and not writable by others unless
 * sticky (/tmp), so no other user can plant, replace or rename anything in it. Files are created
 * under fresh temporary names with O_CREAT|O_EXCL|O_NOFOLLOW (a name that exists, a symlink
 * included, is skipped, never followed) and renamed into place by build.c. A cached object is
 * opened with O_NOFOLLOW and checked on that descriptor (a regular file owned by us, not writable
 * by group or others) and hashed (XXH3-128) against the sidecar `<hash>.so.xxh128` its build
 * wrote. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "internal.h"
#include "ts_rules.h"

#define MAX_OBJECT_BYTES ((off_t)512 << 20) /* a cached object larger than this is refused */

static int make_dirs(const char *path, ts_error *err) {
  char buf[TSP_CACHE_PATH_MAX + 1];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *s = buf + 1;; s++) {
    if (*s != '/' && *s != '\0')
      continue;
    char c = *s;
    *s = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
      return ts_error_set(err, TS_IO,
                          "program cache directory '%s' cannot be created: %s at "
                          "'%s' (set TSHARD_PROGRAM_CACHE or the cache_dir option)",
                          path, strerror(errno), buf);
    if (c == '\0')
      return TS_OK;
    *s = c;
  }
}

/* The cache directory itself, or the per-user base of a fallback (exact: mode 0700). */
static int check_own_dir(const char *what, const char *path, bool exact, ts_error *err) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return ts_error_set(err, TS_IO, "%s '%s': %s", what, path, strerror(errno));
  uid_t me = geteuid();
  unsigned mode = (unsigned)(st.st_mode & 07777);
  bool ok =
      S_ISDIR(st.st_mode) && st.st_uid == me && (exact ? (mode & 0777) == 0700 : (mode & 022) == 0);
  if (ok)
    return TS_OK;
  return ts_error_set(err, TS_AUTH,
                      "%s '%s' is %s owned by uid %u with mode %04o; it must be a "
                      "directory owned by uid %u (the user this process runs as) and %s (tshard "
                      "creates it with mode 0700): chown/chmod it, or set TSHARD_PROGRAM_CACHE or "
                      "the cache_dir option to a private directory",
                      what, path,
                      S_ISDIR(st.st_mode)   ? "a directory"
                      : S_ISLNK(st.st_mode) ? "a symlink"
                                            : "a file",
                      (unsigned)st.st_uid, mode, (unsigned)me,
                      exact ? "of mode 0700 (the socket directory's rule)"
                            : "not writable by group or others");
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

int tsp_cache_default_dir(char *dir, size_t cap, char *base, size_t bcap) {
  const char *v;
  base[0] = '\0';
  int n;
  if ((v = env("TSHARD_PROGRAM_CACHE")))
    n = snprintf(dir, cap, "%s", v);
  else if ((v = env("XDG_CACHE_HOME")))
    n = snprintf(dir, cap, "%s/tshard/programs", v);
  else if ((v = env("HOME")))
    n = snprintf(dir, cap, "%s/.cache/tshard/programs", v);
  else {
    if ((v = env("XDG_RUNTIME_DIR")))
      snprintf(base, bcap, "%s/tshard", v);
    else
      snprintf(base, bcap, "/tmp/tshard-%u", (unsigned)getuid());
    n = snprintf(dir, cap, "%s/programs", base);
  }
  return n > 0 && (size_t)n < cap ? 0 : -1;
}

int tsp_cache_prepare(const char *dir, const char *base, char *real, size_t cap, ts_error *err) {
  if (strlen(dir) > TSP_CACHE_PATH_MAX || strlen(base) > TSP_CACHE_PATH_MAX)
    return ts_error_set(err, TS_IO,
                        "program cache directory '%.80s...' is longer than %d "
                        "characters",
                        dir, TSP_CACHE_PATH_MAX);
  int rc = make_dirs(dir, err);
  if (rc == TS_OK && base[0])
    rc = check_own_dir("the per-user directory of the program cache", base, true, err);
  if (rc != TS_OK)
    return rc;
  char buf[PATH_MAX];
  if (!realpath(dir, buf))
    return ts_error_set(err, TS_IO, "program cache directory '%s': %s", dir, strerror(errno));
  if (strlen(buf) > TSP_CACHE_PATH_MAX || strlen(buf) >= cap)
    return ts_error_set(err, TS_IO,
                        "program cache directory '%s' resolves to a path longer "
                        "than %d characters",
                        dir, TSP_CACHE_PATH_MAX);
  snprintf(real, cap, "%s", buf);
  return tsp_cache_check(real, err);
}

int tsp_cache_check(const char *real, ts_error *err) {
  int rc = check_own_dir("program cache directory", real, false, err);
  return rc == TS_OK ? ts_dir_ancestors_check("program cache directory", real, err) : rc;
}

int tsp_cache_create(const char *dir, const char *stem, const char *suffix, char *path, size_t cap,
                     int *fd, ts_error *err) {
  static unsigned counter;
  for (int tries = 0; tries < 1000; tries++) {
    unsigned seq = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(path, cap, "%s/.%s.%d.%u%s", dir, stem, (int)getpid(), seq, suffix);
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (*fd >= 0)
      return TS_OK;
    if (errno != EEXIST)
      return ts_error_set(err, TS_IO, "cannot create '%s': %s", path, strerror(errno));
  }
  return ts_error_set(err, TS_IO,
                      "cannot create a temporary file in the program cache '%s': "
                      "1000 names in a row exist",
                      dir);
}

int tsp_cache_write(const char *dir, const char *stem, const char *suffix, const void *data,
                    size_t n, char *path, size_t cap, ts_error *err) {
  int fd;
  int rc = tsp_cache_create(dir, stem, suffix, path, cap, &fd, err);
  if (rc != TS_OK)
    return rc;
  const char *s = data;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      rc = ts_error_set(err, TS_IO, "cannot write '%s': %s", path, strerror(w < 0 ? errno : EIO));
      break;
    }
    s += w;
    n -= (size_t)w;
  }
  if (close(fd) != 0 && rc == TS_OK)
    rc = ts_error_set(err, TS_IO, "cannot write '%s': %s", path, strerror(errno));
  if (rc != TS_OK)
    unlink(path);
  return rc;
}

int tsp_cache_open_file(const char *path, int *fd, struct stat *st, char *why, size_t cap) {
  *fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0) {
    if (errno == ENOENT)
      return 1;
    snprintf(why, cap, "'%s' cannot be opened: %s", path,
             errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    return -1;
  }
  if (fstat(*fd, st) != 0)
    snprintf(why, cap, "'%s' cannot be examined: %s", path, strerror(errno));
  else if (S_ISREG(st->st_mode) && st->st_uid == geteuid() && !(st->st_mode & 022) &&
           st->st_size <= MAX_OBJECT_BYTES)
    return 0;
  else if (!S_ISREG(st->st_mode))
    snprintf(why, cap, "'%s' is not a regular file", path);
  else if (st->st_uid != geteuid())
    snprintf(why, cap, "'%s' is owned by uid %u, not by uid %u (this process's user)", path,
             (unsigned)st->st_uid, (unsigned)geteuid());
  else if (st->st_mode & 022)
    snprintf(why, cap, "'%s' has mode %04o: writable by group or others", path,
             (unsigned)(st->st_mode & 07777));
  else
    snprintf(why, cap, "'%s' has %lld bytes, more than a program's object may have", path,
             (long long)st->st_size);
  close(*fd);
  *fd = -1;
  return -1;
}

int tsp_cache_hash_fd(int fd, char hex[TSP_HASH_HEX], char *why, size_t cap) {
  XXH3_state_t *h = XXH3_createState();
  char buf[1 << 16];
  int rc = h && XXH3_128bits_reset(h) == XXH_OK ? 0 : -1;
  for (off_t off = 0; rc == 0;) {
    ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      rc = -1;
    if (n <= 0)
      break;
    XXH3_128bits_update(h, buf, (size_t)n);
    off += n;
  }
  if (rc == 0) {
    XXH128_hash_t d = XXH3_128bits_digest(h);
    snprintf(hex, TSP_HASH_HEX, "%016llx%016llx", (unsigned long long)d.high64,
             (unsigned long long)d.low64);
  } else {
    snprintf(why, cap, "cannot be read to check its hash: %s", h ? strerror(errno) : "no memory");
  }
  XXH3_freeState(h);
  return rc;
}

int tsp_cache_read_sum(const char *path, char hex[TSP_HASH_HEX], char *why, size_t cap) {
  int fd;
  struct stat st;
  int r = tsp_cache_open_file(path, &fd, &st, why, cap);
  if (r == 1)
    snprintf(why, cap, "no hash was recorded for it ('%s' is missing)", path);
  if (r != 0)
    return -1;
  char buf[TSP_HASH_HEX + 1];
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  close(fd);
  if (n != TSP_HASH_HEX || buf[TSP_HASH_HEX - 1] != '\n') {
    snprintf(why, cap, "its recorded hash '%s' is not one line of %d hex digits", path,
             TSP_HASH_HEX - 1);
    return -1;
  }
  memcpy(hex, buf, TSP_HASH_HEX - 1);
  hex[TSP_HASH_HEX - 1] = '\0';
  return 0;
}
