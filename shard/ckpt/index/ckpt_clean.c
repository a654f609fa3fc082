/* ckpt_clean.c - the temporary directories of saves that were cut short: a save writes into
 * PARENT/.BASE.tmp-HEX next to its target PARENT/BASE and renames it into place once complete;
 * a rank killed meanwhile leaves that directory behind. A save holds an exclusive flock on its
 * temporary directory while it writes (ts_ckpt_tmp_lock), released by the kernel when the
 * process dies, so that a leftover is told from a save in progress: the next save into BASE
 * and `tshard checkpoint clean` remove the unlocked ones (their files, then the directory) and
 * leave the locked ones. Without MPI: the CLI runs it on its own host. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_index_internal.h"

int ts_ckpt_tmp_lock(const char *tmp) {
  int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Whether entry name of the parent is a temporary directory of a save into base. */
static bool is_tmp_of(const char *name, const char *base) {
  size_t nb = strlen(base);
  if (name[0] != '.' || strncmp(name + 1, base, nb) != 0 || strncmp(name + 1 + nb, ".tmp-", 5))
    return false;
  const char *hex = name + nb + 6;
  if (!*hex)
    return false;
  for (; *hex; hex++)
    if (!strchr("0123456789abcdef", *hex))
      return false;
  return true;
}

/* Removes one leftover (its files, then itself) unless a save holds its lock: 1 removed, 0 in
 * use, < 0 could not (why in err). */
static int remove_tmp(int pfd, const char *name, const char *path, ts_error *err) {
  int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return ts_error_set(err, TS_CHECKPOINT_IO, "cannot open '%s': %s", path, strerror(errno)), -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return 0;
  }
  DIR *d = fdopendir(dup(fd));
  int rc = d ? 1 : -1;
  if (!d)
    ts_error_set(err, TS_CHECKPOINT_IO, "cannot list '%s': %s", path, strerror(errno));
  for (struct dirent *de; d && rc == 1 && (de = readdir(d));) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    if (unlinkat(fd, de->d_name, 0) != 0) {
      ts_error_set(err, TS_CHECKPOINT_IO,
                   "cannot remove '%s/%s': %s (a save's temporary "
                   "directory holds files only)",
                   path, de->d_name, strerror(errno));
      rc = -1;
    }
  }
  if (d)
    closedir(d);
  if (rc == 1 && unlinkat(pfd, name, AT_REMOVEDIR) != 0) {
    ts_error_set(err, TS_CHECKPOINT_IO, "cannot remove '%s': %s", path, strerror(errno));
    rc = -1;
  }
  close(fd);
  return rc;
}

static int add_line(char **list, size_t *len, const char *path) {
  size_t k = strlen(path);
  char *p = realloc(*list, *len + k + 2);
  if (!p)
    return -1;
  memcpy(p + *len, path, k);
  p[*len + k] = '\n';
  p[*len + k + 1] = '\0';
  *list = p;
  *len += k + 1;
  return 0;
}

int ts_ckpt_clean_tmp(const char *dir, ts_ckpt_cleaned *out, ts_error *err) {
  memset(out, 0, sizeof *out);
  char parent[4096], base[256];
  int rc = ts__ckpt_split_path(dir, parent, sizeof parent, base, sizeof base, err);
  if (rc)
    return rc;
  DIR *d = opendir(parent);
  if (!d)
    return ts_error_set(err, errno == ENOENT ? TS_NOT_FOUND : TS_CHECKPOINT_IO,
                        "cannot list "
                        "'%s' (the directory holding '%s'): %s",
                        parent, base, strerror(errno));
  size_t nr = 0, nb = 0;
  for (struct dirent *de; rc == TS_OK && (de = readdir(d));) {
    struct stat st; /* directories only: a safetensors export's temporary files look alike */
    if (!is_tmp_of(de->d_name, base) ||
        fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
      continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", parent, de->d_name);
    int k = remove_tmp(dirfd(d), de->d_name, path, err);
    if (k < 0)
      rc = err->code;
    else if (add_line(k ? &out->removed : &out->busy, k ? &nr : &nb, path) != 0)
      rc = ts_error_set(err, TS_NO_MEMORY, "no memory");
    else if (k)
      out->nremoved++;
    else
      out->nbusy++;
  }
  closedir(d);
  return rc;
}

void ts_ckpt_cleaned_clear(ts_ckpt_cleaned *c) {
  if (!c)
    return;
  free(c->removed);
  free(c->busy);
  memset(c, 0, sizeof *c);
}
