/* snapdir.c - which snapshots and checkpoints under --snapshot-dir and --resume the daemon
 * trusts, and their one order. Both directories are given by whoever starts the daemons, but
 * their content is only trusted when nobody else could have put it there: the directory must be
 * a real directory (not a symbolic link) owned by the daemon's effective uid and not writable by
 * group or others, and every directory above it owned by root or that uid and not writable by
 * others unless sticky (like /tmp), else the daemon refuses to start, naming the directory, its
 * owner and mode. Each entry is checked the same way before it is restored or removed: a
 * subdirectory opened with O_NOFOLLOW and checked on its descriptor, and every file in it opened
 * with O_PATH|O_NOFOLLOW (no FIFO or device is opened for reading) and checked to be a regular
 * file of that uid, not writable by group or others. An entry that fails is skipped and logged
 * once (by its device and inode), and never removed.
 *
 * The order of both the pruning and the resume is the sequence number a snapshot records in its
 * index ("sequence", shard/ckpt/CHECKPOINT.md), never the name (a clock ahead names snapshots in
 * the future) nor the time of the files; only entries of equal sequence (0: none recorded, as
 * in checkpoints saved by clients and snapshots of older daemons, which rank below every
 * recorded one) are told apart by the time their index.json was written, then by name. An index
 * whose sequence cannot be read ranks as none, with a warning. The engine's start hook is here
 * too: both directories checked on every rank (rank 0 creates a missing --snapshot-dir 0700),
 * agreed, rank 0's highest sequence found, then the resume (resume.c). Engine thread only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handlers.h"
#include "ts_rules.h"

bool tsd_snapshot_named(const char *s) {
  /* YYYYmmddTHHMMSS.mmmZ */
  if (strlen(s) != 20 || s[8] != 'T' || s[15] != '.' || s[19] != 'Z')
    return false;
  for (int i = 0; i < 19; i++)
    if (i != 8 && i != 15 && (s[i] < '0' || s[i] > '9'))
      return false;
  return true;
}

/* The file type of a mode, for messages. */
static const char *kind_of(mode_t m) {
  return S_ISDIR(m)   ? "a directory"
         : S_ISLNK(m) ? "a symbolic link"
         : S_ISREG(m) ? "a file"
                      : "a special file";
}

int tsd_snapdir_check(const char *what, const char *dir, bool missing_ok, ts_error *err) {
  struct stat st;
  if (lstat(dir, &st) != 0) {
    if (errno == ENOENT && missing_ok)
      return TS_OK;
    return ts_error_set(err, errno == ENOENT ? TS_NOT_FOUND : TS_IO, "%s '%s': %s", what, dir,
                        strerror(errno));
  }
  uid_t me = geteuid();
  unsigned mode = (unsigned)(st.st_mode & 07777);
  if (!S_ISDIR(st.st_mode) || st.st_uid != me || (mode & 022))
    return ts_error_set(err, TS_AUTH,
                        "%s '%s' is %s owned by uid %u with mode %04o; it must be "
                        "a directory (not a symbolic link) owned by uid %u, the user the daemon "
                        "runs as, and not writable by group or others: chown/chmod it, or "
                        "choose a private directory",
                        what, dir, kind_of(st.st_mode), (unsigned)st.st_uid, mode, (unsigned)me);
  char real[PATH_MAX];
  if (!realpath(dir, real))
    return ts_error_set(err, TS_IO, "%s '%s': %s", what, dir, strerror(errno));
  return ts_dir_ancestors_check(what, real, err);
}

/* What fails the trust rule in a descriptor's fstat (NULL: nothing), into why. */
static const char *untrusted(const struct stat *st, bool dir, char *why, size_t cap) {
  unsigned mode = (unsigned)(st->st_mode & 07777);
  if (dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
    snprintf(why, cap, "%s, not %s", kind_of(st->st_mode), dir ? "a directory" : "a regular file");
  else if (st->st_uid != geteuid())
    snprintf(why, cap, "owned by uid %u", (unsigned)st->st_uid);
  else if (mode & 022)
    snprintf(why, cap, "writable by group or others (mode %04o)", mode);
  else
    return NULL;
  return why;
}

/* Entries already logged as skipped, by device and inode, so that each is logged once. */
#define LOGGED_MAX 256
static struct {
  dev_t dev;
  ino_t ino;
} logged[LOGGED_MAX];
static int nlogged;
static bool logged_full;

static void log_skipped(const char *dir, const char *name, dev_t dev, ino_t ino, const char *why) {
  for (int i = 0; i < nlogged; i++)
    if (logged[i].dev == dev && logged[i].ino == ino)
      return;
  if (nlogged == LOGGED_MAX) {
    if (!logged_full)
      TSD_LOG(TSD_LOG_WARN, "'%s': more untrusted entries, no longer logged", dir);
    logged_full = true;
    return;
  }
  logged[nlogged].dev = dev, logged[nlogged].ino = ino;
  nlogged++;
  TSD_LOG(TSD_LOG_WARN,
          "'%s/%s' skipped: %s; a snapshot or checkpoint is restored or removed "
          "only when it and its files are the daemon's user's (uid %u) and not writable by group "
          "or others",
          dir, name, why, (unsigned)geteuid());
}

/* The files of the checkpoint directory open as dfd: each a regular file of ours, not writable
 * by group or others (opened O_PATH|O_NOFOLLOW, checked on the descriptor); *has_index and the
 * index's mtime. Returns false with why (naming the file) otherwise. */
static bool files_trusted(int dfd, bool *has_index, struct timespec *mtime, char *why, size_t cap) {
  int fd2 = dup(dfd);
  DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
  if (!d) {
    if (fd2 >= 0)
      close(fd2);
    snprintf(why, cap, "cannot list it: %s", strerror(errno));
    return false;
  }
  rewinddir(d);
  *has_index = false;
  bool ok = true;
  struct dirent *de;
  while (ok && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    int fd = openat(dfd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    char w[160];
    if (fd < 0 || fstat(fd, &st) != 0) {
      snprintf(why, cap, "its entry '%.100s' cannot be examined: %s", de->d_name, strerror(errno));
      ok = false;
    } else if (untrusted(&st, false, w, sizeof w)) {
      snprintf(why, cap, "its entry '%.100s' is %s", de->d_name, w);
      ok = false;
    } else if (strcmp(de->d_name, TS_CKPT_INDEX) == 0) {
      *has_index = true;
      *mtime = st.st_mtim;
    }
    if (fd >= 0)
      close(fd);
  }
  closedir(d);
  return ok;
}

/* One entry of the directory open as dfd (path dir): 1 when it is a trusted checkpoint
 * directory (s filled), 0 when it is no checkpoint (skipped silently), -1 when it is untrusted
 * (skipped, logged once). */
static int examine(int dfd, const char *dir, const char *name, tsd_snap *s) {
  struct stat st;
  char why[400], w[160];
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return 0; /* gone meanwhile */
  if (S_ISLNK(st.st_mode)) {
    log_skipped(dir, name, st.st_dev, st.st_ino, "a symbolic link (never followed)");
    return -1;
  }
  if (!S_ISDIR(st.st_mode))
    return 0;
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0)
      close(fd);
    return 0;
  }
  bool has_index = false;
  int rc = 1;
  if (untrusted(&st, true, w, sizeof w)) {
    snprintf(why, sizeof why, "it is %s", w);
    rc = -1;
  } else if (!files_trusted(fd, &has_index, &s->mtime, why, sizeof why)) {
    rc = -1;
  } else if (!has_index) {
    rc = 0; /* not complete: no checkpoint */
  }
  close(fd);
  if (rc < 0)
    log_skipped(dir, name, st.st_dev, st.st_ino, why);
  if (rc <= 0)
    return rc;
  snprintf(s->name, sizeof s->name, "%s", name);
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  ts_error ierr;
  if (ts_ckpt_index_sequence(path, &s->sequence, &ierr) != TS_OK) {
    TSD_LOG(TSD_LOG_WARN,
            "'%s': its sequence cannot be read (%s); it ranks below every "
            "snapshot that records one",
            path, ierr.msg);
    s->sequence = 0;
  }
  return 1;
}

/* Oldest first: sequence, then the index's time, then the name (ties only). */
static int snap_cmp(const void *pa, const void *pb) {
  const tsd_snap *a = pa, *b = pb;
  if (a->sequence != b->sequence)
    return a->sequence < b->sequence ? -1 : 1;
  if (a->mtime.tv_sec != b->mtime.tv_sec)
    return a->mtime.tv_sec < b->mtime.tv_sec ? -1 : 1;
  if (a->mtime.tv_nsec != b->mtime.tv_nsec)
    return a->mtime.tv_nsec < b->mtime.tv_nsec ? -1 : 1;
  return strcmp(a->name, b->name);
}

int tsd_snapdir_list(const char *what, const char *dir, bool snapshots_only, tsd_snap **out, int *n,
                     ts_error *err) {
  *out = NULL;
  *n = 0;
  int rc = tsd_snapdir_check(what, dir, false, err);
  if (rc)
    return rc;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  char w[160];
  if (dfd < 0 || fstat(dfd, &st) != 0) {
    rc = ts_error_set(err, TS_IO, "%s '%s': cannot list it: %s", what, dir, strerror(errno));
    if (dfd >= 0)
      close(dfd);
    return rc;
  }
  if (untrusted(&st, true, w, sizeof w)) { /* replaced since the check */
    close(dfd);
    return ts_error_set(err, TS_AUTH,
                        "%s '%s' is %s; it must be the daemon's user's (uid %u) "
                        "and not writable by group or others",
                        what, dir, w, (unsigned)geteuid());
  }
  int fd2 = dup(dfd);
  DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
  if (!d) {
    rc = ts_error_set(err, TS_IO, "%s '%s': cannot list it: %s", what, dir, strerror(errno));
    if (fd2 >= 0)
      close(fd2);
    close(dfd);
    return rc;
  }
  tsd_snap *v = NULL;
  int cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.')
      continue; /* ".", "..", and the temporary directories of saves in progress */
    if (snapshots_only && !tsd_snapshot_named(de->d_name))
      continue;
    if (*n == cap) {
      tsd_snap *p = realloc(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 16));
      if (!p) {
        rc = ts_error_set(err, TS_NO_MEMORY, "%s '%s': no memory to list it", what, dir);
        break;
      }
      v = p;
    }
    memset(&v[*n], 0, sizeof v[*n]);
    if (examine(dfd, dir, de->d_name, &v[*n]) > 0)
      (*n)++;
  }
  closedir(d);
  close(dfd);
  if (rc) {
    free(v);
    *n = 0;
    return rc;
  }
  if (v)
    qsort(v, (size_t)*n, sizeof *v, snap_cmp);
  *out = v;
  return TS_OK;
}

int tsd_snapdir_check_files(const char *dir, ts_error *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return ts_error_set(err, TS_IO, "'%s': %s", dir, strerror(errno));
  bool has_index;
  struct timespec mtime;
  char why[400];
  bool ok = files_trusted(fd, &has_index, &mtime, why, sizeof why);
  close(fd);
  if (ok)
    return TS_OK;
  return ts_error_set(err, TS_AUTH,
                      "'%s': %s; a checkpoint is restored only when its files are "
                      "regular files of the daemon's user (uid %u), not writable by group or "
                      "others",
                      dir, why, (unsigned)geteuid());
}

int tsd_snapdir_start(tsd_engine *e, ts_error *err) {
  const tsd_config *cfg = e->cfg;
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = TS_OK;
  if (cfg->snapshot_dir[0]) {
    if (e->rank == 0 && mkdir(cfg->snapshot_dir, 0700) != 0 && errno != EEXIST)
      lst = ts_error_set(&lerr, TS_IO, "--snapshot-dir '%s' cannot be created: %s",
                         cfg->snapshot_dir, strerror(errno));
    if (!lst) /* the other ranks may look before rank 0 made it */
      lst = tsd_snapdir_check("--snapshot-dir", cfg->snapshot_dir, e->rank != 0, &lerr);
  }
  if (!lst && cfg->resume_dir[0])
    lst = tsd_snapdir_check("--resume", cfg->resume_dir, false, &lerr);
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc)
    return rc;
  if (e->rank == 0 && cfg->snapshot_dir[0]) { /* rank 0 numbers the snapshots */
    tsd_snap *v = NULL;
    int n = 0;
    if (tsd_snapdir_list("--snapshot-dir", cfg->snapshot_dir, true, &v, &n, &lerr) != TS_OK)
      TSD_LOG(TSD_LOG_WARN, "%s", lerr.msg);
    else if (n > 0) {
      tsd_bgsave_note_sequence(v[n - 1].sequence);
      TSD_LOG(TSD_LOG_INFO,
              "--snapshot-dir '%s': %d snapshots, the newest '%s' (sequence "
              "%lld)",
              cfg->snapshot_dir, n, v[n - 1].name, (long long)v[n - 1].sequence);
    }
    free(v);
  }
  return tsd_resume(e, err);
}
