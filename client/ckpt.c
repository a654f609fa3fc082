/* ckpt.c - the C library's checkpoint calls: save (synchronous or in the background) and load
 * requests, the directory made absolute here (the daemons do not share the caller's working
 * directory), their reports, snapshots, and the wait for background saves (by polling stats). */
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "ts_rules.h"
#include "ts_wait.h"

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
    return tsc_fail(c, TS_INVALID_ARGUMENT, "names: %d names and %s list", n, names ? "a" : "no");
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

void tsc_ckpt_info_copy(const Tshard__CkptResult *k, tshard_ckpt_info *info) {
  memset(info, 0, sizeof *info);
  snprintf(info->dir, sizeof info->dir, "%s", k->dir ? k->dir : "");
  info->tensors = (int)k->tensors;
  info->files = (int)k->files;
  info->bytes = k->bytes;
  info->seconds = k->seconds;
  info->writing = k->writing;
  info->save_id = k->save_id;
}

/* One collective call whose answer may carry a CkptResult, copied into info (NULL: not wanted). */
static int call_info(tshard_client *c, Tshard__Request *req, tshard_ckpt_info *info) {
  if (info)
    memset(info, 0, sizeof *info);
  if (tsc_apply_group(c, req))
    return TS_INVALID_ARGUMENT;
  Tshard__Response *r = NULL;
  int rc = tsc_call(c, req, &r);
  if (rc == TS_OK && info && r && r->result_case == TSHARD__RESPONSE__RESULT_CKPT)
    tsc_ckpt_info_copy(r->ckpt, info);
  if (r)
    tsc_free(c, r);
  return rc;
}

int tsc_save_interrupted(tshard_client *c, const char *path) {
  return tsc_fail(c, TS_CHECKPOINT_IO,
                  "save to %s was interrupted: %s; %s holds a complete "
                  "checkpoint or nothing: the one that was there before (or this save's, had it "
                  "been exchanged before the loss), never a partial one",
                  path, c->lost, path);
}

/* What a save or an export writes must be asked, one way: names, a prefix or all. */
int tsc_check_selection(tshard_client *c, const char *what, int n, const char *prefix, int all) {
  bool has_prefix = prefix && prefix[0];
  if (!all && !has_prefix && n == 0)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "%s of no tensors: give names (exact, or globs such "
                    "as layers.*.weight) or opts.prefix, or set opts.all = 1 to save every tensor",
                    what);
  if ((all && (has_prefix || n > 0)) || (has_prefix && n > 0))
    return tsc_fail(c, TS_INVALID_ARGUMENT, "%s: give one of names, opts.prefix or opts.all", what);
  return TS_OK;
}

int tshard_save(tshard_client *c, const char *dir, const char *const *names, int n,
                const tshard_save_opts *opts) {
  char path[4096];
  int rc = checked_args(c, dir, names, n, path, sizeof path);
  if (!rc)
    rc = tsc_check_selection(c, "save", n, opts ? opts->prefix : NULL, opts && opts->all);
  if (rc)
    return rc;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__SaveRequest q = TSHARD__SAVE_REQUEST__INIT;
  q.dir = path;
  q.n_names = (size_t)n;
  q.names = (char **)names;
  q.keep_partial = opts && opts->keep_partial;
  q.per_node = opts && opts->per_node;
  q.background = opts && opts->background;
  q.all = opts && opts->all;
  q.overwrite = opts && opts->overwrite;
  q.prefix = (char *)(opts && opts->prefix ? opts->prefix : "");
  req.op_case = TSHARD__REQUEST__OP_SAVE;
  req.save = &q;
  req.idempotency_key = (char *)(opts && opts->key ? opts->key : "");
  rc = call_info(c, &req, opts ? opts->info : NULL);
  if (rc == TS_OK && c->submit_to && *c->submit_to) /* in flight: its wait names the path */
    tsc_ticket_save_path(c, *c->submit_to, path);
  return rc == TS_RANK_LOST ? tsc_save_interrupted(c, path) : rc;
}

/* The load's rules as messages (arrays of nr each; the strings point into the rules' text, cut
 * at each pattern's end in copies). */
typedef struct load_rules {
  Tshard__AttrRule *r, **rp;
  Tshard__DistAttr *a;
  char **pats;
  int n;
} load_rules;

static void load_rules_free(load_rules *L) {
  if (!L)
    return;
  for (int i = 0; L->pats && i < L->n; i++)
    free(L->pats[i]);
  free(L->r), free(L->rp), free(L->a), free(L->pats);
}

static int load_rules_make(tshard_client *c, const tshard_load_opts *o, load_rules *L) {
  memset(L, 0, sizeof *L);
  int nr = o ? o->nrules : 0;
  if (nr < 0 || (nr > 0 && !o->rules))
    return tsc_fail(c, TS_INVALID_ARGUMENT, "load rules: %d rules and %s list", nr,
                    o->rules ? "a" : "no");
  size_t m = (size_t)(nr ? nr : 1);
  L->r = calloc(m, sizeof *L->r), L->rp = calloc(m, sizeof *L->rp);
  L->a = calloc(m, sizeof *L->a), L->pats = calloc(m, sizeof *L->pats);
  if (!L->r || !L->rp || !L->a || !L->pats)
    return tsc_fail(c, TS_NO_MEMORY, "out of memory");
  for (int i = 0; i < nr; i++) {
    ts_error err;
    size_t plen;
    const char *attr;
    if (ts_attr_rule_split("load rule", o->rules[i], &plen, &attr, &err))
      return tsc_fail(c, err.code, "%s", err.msg);
    if (!(L->pats[L->n] = strndup(o->rules[i], plen)))
      return tsc_fail(c, TS_NO_MEMORY, "out of memory");
    L->n++;
    tshard__attr_rule__init(&L->r[i]);
    tshard__dist_attr__init(&L->a[i]);
    L->r[i].name = L->pats[i];
    L->a[i].text = (char *)attr;
    L->r[i].attr = &L->a[i];
    L->rp[i] = &L->r[i];
  }
  return TS_OK;
}

int tshard_load(tshard_client *c, const char *dir, const char *const *names, int n,
                const tshard_load_opts *opts) {
  char path[4096];
  int rc = checked_args(c, dir, names, n, path, sizeof path);
  if (rc)
    return rc;
  load_rules L;
  if ((rc = load_rules_make(c, opts, &L))) {
    load_rules_free(&L);
    return rc;
  }
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__LoadRequest q = TSHARD__LOAD_REQUEST__INIT;
  Tshard__DistAttr a = TSHARD__DIST_ATTR__INIT;
  q.dir = path;
  q.n_rules = (size_t)L.n;
  q.rules = L.rp;
  q.n_names = (size_t)n;
  q.names = (char **)names;
  q.per_node = opts && opts->per_node;
  q.in_place = opts && opts->in_place;
  if (opts && opts->attr && opts->attr[0]) {
    a.text = (char *)opts->attr;
    q.attr = &a;
  }
  req.op_case = TSHARD__REQUEST__OP_LOAD;
  req.load = &q;
  req.idempotency_key = (char *)(opts && opts->key ? opts->key : "");
  rc = call_info(c, &req, opts ? opts->info : NULL);
  load_rules_free(&L);
  return rc;
}

int tshard_snapshot(tshard_client *c, tshard_ckpt_info *info) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__SaveRequest q = TSHARD__SAVE_REQUEST__INIT;
  q.snapshot = true;
  q.background = true;
  req.op_case = TSHARD__REQUEST__OP_SAVE;
  req.save = &q;
  return call_info(c, &req, info);
}

/* The state of the saves waited for: TS_OK when none writes any more (rc: the first failed
 * one's status), 1 while one writes. want (n of them, 0: those writing in s) is filled on the
 * first look. */
static int saves_state(tshard_client *c, const tshard_stats *s, uint64_t *want, int *n, int *rc) {
  if (*n == 0 && want[0] == 0)
    for (int i = 0; i < s->nsaves; i++)
      if (strcmp(s->saves[i].state, "writing") == 0)
        want[(*n)++] = s->saves[i].save_id;
  if (*n == 0 && want[0] != 0)
    *n = 1;
  *rc = TS_OK;
  for (int k = 0; k < *n; k++)
    for (int i = 0; i < s->nsaves; i++) {
      const tshard_save_stats *v = &s->saves[i];
      if (v->save_id != want[k])
        continue;
      if (strcmp(v->state, "writing") == 0)
        return 1;
      if (v->status != TS_OK && *rc == TS_OK)
        *rc = tsc_fail(c, v->status, "background save %llu to '%s' failed: %s",
                       (unsigned long long)v->save_id, v->dir, v->message);
    }
  return TS_OK;
}

int tshard_wait_saves(tshard_client *c, uint64_t save_id, int timeout_ms) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  tshard_stats *s = malloc(sizeof *s);
  if (!s)
    return tsc_fail(c, TS_NO_MEMORY, "no memory to wait for the saves");
  uint64_t want[8] = {save_id};
  int n = 0, rc = TS_OK;
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_poll, ts_wait_deadline_ms(timeout_ms));
  for (;;) {
    if ((rc = tshard_stats_get(c, s)) != TS_OK || saves_state(c, s, want, &n, &rc) == TS_OK)
      break;
    if (ts_waiter_pause(&w) == TS_TIMEOUT) { /* polling the daemon's progress */
      rc = tsc_fail(c, TS_TIMEOUT, "background saves still writing after %d ms", timeout_ms);
      break;
    }
  }
  free(s);
  return rc;
}
