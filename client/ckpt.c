/* ckpt.c - the C library's checkpoint calls: save and load requests, the directory
 * made absolute here (the daemons do not share the caller's working directory). */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "ts_rules.h"

static int abs_dir(tshard_client *c, const char *dir, char *out, size_t cap) {
  if (!dir || !dir[0])
    return tsc_fail(c, TS_INVALID_ARGUMENT, "checkpoint directory is empty; give a path");
  if (dir[0] == '/') {
    if (strlen(dir) >= cap)
      return tsc_fail(c, TS_INVALID_ARGUMENT, "checkpoint directory path too long");
    snprintf(out, cap, "%s", dir);
    return TS_OK;
  }
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd))
    return tsc_fail(c, TS_IO, "cannot resolve the relative checkpoint directory '%s'", dir);
  if ((size_t)snprintf(out, cap, "%s/%s", cwd, dir) >= cap)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "checkpoint directory path too long");
  return TS_OK;
}

static int check_names(tshard_client *c, const char *const *names, int n) {
  if (n < 0 || (n > 0 && !names))
    return tsc_fail(c, TS_INVALID_ARGUMENT, "names: %d names and %s list", n,
                    names ? "a" : "no");
  for (int i = 0; i < n; i++) {
    ts_error err;
    if (ts_name_check("tensor name", names[i], names[i] ? strlen(names[i]) : 0, &err))
      return tsc_fail(c, err.code, "%s", err.msg);
  }
  return TS_OK;
}

/* Both calls' arguments: the directory made absolute into path, the names checked. */
static int checked_args(tshard_client *c, const char *dir, const char *const *names, int n,
                        char *path, size_t cap) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  int rc = abs_dir(c, dir, path, cap);
  return rc ? rc : check_names(c, names, n);
}

int tshard_save(tshard_client *c, const char *dir, const char *const *names, int n,
                const tshard_save_opts *opts) {
  char path[4096];
  int rc = checked_args(c, dir, names, n, path, sizeof path);
  if (rc)
    return rc;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__SaveRequest q = TSHARD__SAVE_REQUEST__INIT;
  q.dir = path;
  q.n_names = (size_t)n;
  q.names = (char **)names;
  q.keep_partial = opts && opts->keep_partial;
  q.per_node = opts && opts->per_node;
  req.op_case = TSHARD__REQUEST__OP_SAVE;
  req.save = &q;
  req.idempotency_key = (char *)(opts && opts->key ? opts->key : "");
  rc = tsc_call_collective(c, &req);
  if (rc == TS_RANK_LOST) /* the save's own error, naming its path; later calls: RANK_LOST */
    return tsc_fail(c, TS_CHECKPOINT_IO, "save to %s was interrupted: %s; %s holds a complete "
                    "checkpoint or nothing: the one that was there before (or this save's, had "
                    "it been exchanged before the loss), never a partial one", path, c->lost,
                    path);
  return rc;
}

int tshard_load(tshard_client *c, const char *dir, const char *const *names, int n,
                const tshard_load_opts *opts) {
  char path[4096];
  int rc = checked_args(c, dir, names, n, path, sizeof path);
  if (rc)
    return rc;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__LoadRequest q = TSHARD__LOAD_REQUEST__INIT;
  Tshard__DistAttr a = TSHARD__DIST_ATTR__INIT;
  q.dir = path;
  q.n_names = (size_t)n;
  q.names = (char **)names;
  q.per_node = opts && opts->per_node;
  if (opts && opts->attr && opts->attr[0]) {
    a.text = (char *)opts->attr;
    q.attr = &a;
  }
  req.op_case = TSHARD__REQUEST__OP_LOAD;
  req.load = &q;
  req.idempotency_key = (char *)(opts && opts->key ? opts->key : "");
  return tsc_call_collective(c, &req);
}
