/* cmd_ckpt.c - the checkpoint subcommands: `tshard save DIR [NAME...]` (synchronous, or
 * `--async` in the background, `--wait` then following its files with a progress bar from the
 * daemon's stats), `tshard load DIR [NAME...] [--attr PATTERN=ATTR...] [--default-attr ATTR]
 * [--in-place]` and `tshard snapshot` through a daemon, each reporting what it did (bytes,
 * files, seconds; `--json`), and
 * `tshard checkpoint show DIR [--json]`, which reads the index alone (no daemon), and
 * `tshard checkpoint clean DIR [--json]`, which removes what saves into DIR cut short left
 * (ckpt_clean.c, on this host). A synchronous
 * save or load of large data shows estimate.c's line while it runs (the daemons report nothing
 * meanwhile): its bytes known up front are the tensors' (save, by describe) or the index's (load),
 * its rates recorded under "save" and "load". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ts_ckpt_index.h"
#include "tshard.h"
#include "ts_wait.h"

static int failed(tshard_client *c, int rc) {
  char msg[1200];
  const char *m = tshard_last_message(c);
  snprintf(msg, sizeof msg, "%s (%s)", m && *m ? m : tshard_strerror(rc), tshard_status_name(rc));
  return cli_fail(CLI_FAILED, msg);
}

/* DIR and the names after it. *names is malloc'd. */
static int dir_and_names(const cli_args *a, const char **dir, const char ***names, int *n) {
  *dir = cli_positional(a, 0);
  *n = 0;
  *names = NULL;
  if (!*dir)
    return cli_fail(CLI_USAGE, "missing the checkpoint directory (tshard save DIR [NAME...])");
  *names = calloc((size_t)a->argc + 1, sizeof **names);
  if (!*names)
    return cli_fail(CLI_FAILED, "out of memory");
  for (const char *s; (s = cli_positional(a, *n + 1));)
    (*names)[(*n)++] = s;
  return CLI_OK;
}

/* What a save or load did, as one line or as JSON. */
static void print_info(const cli_args *a, const char *what, const tshard_ckpt_info *k) {
  if (a->json) {
    printf("{\"dir\": ");
    cli_json_string(stdout, k->dir);
    printf(", \"tensors\": %d, \"bytes\": %llu, \"files\": %d, \"seconds\": %.6f, "
           "\"writing\": %s, \"save_id\": %llu}\n",
           k->tensors, (unsigned long long)k->bytes, k->files, k->seconds,
           k->writing ? "true" : "false", (unsigned long long)k->save_id);
    return;
  }
  double mib = (double)k->bytes / (1 << 20);
  if (k->writing)
    printf("%s: copied %d tensors (%.1f MiB) in %.3f s; writing %d files to %s in the "
           "background (save %llu: tshard stats shows it)\n",
           what, k->tensors, mib, k->seconds, k->files, k->dir, (unsigned long long)k->save_id);
  else
    printf("%s %d tensors (%.1f MiB, %d files) %s %s in %.3f s (%.1f MiB/s)\n", what, k->tensors,
           mib, k->files, strcmp(what, "loaded") ? "to" : "from", k->dir, k->seconds,
           k->seconds > 0 ? mib / k->seconds : 0.0);
}

/* The stats entry of save `id`, or NULL. */
static const tshard_save_stats *find_save(const tshard_stats *s, uint64_t id) {
  for (int i = 0; i < s->nsaves; i++)
    if (s->saves[i].save_id == id)
      return &s->saves[i];
  return NULL;
}

/* --wait: follows background save `id` through the daemon's stats (a bar with the rate and the
 * time left, as puts and gets show), until its files are complete or it failed. */
static int follow_save(cli_args *a, tshard_client *c, const tshard_ckpt_info *k) {
  tshard_stats *s = malloc(sizeof *s);
  if (!s)
    return cli_fail(CLI_FAILED, "out of memory");
  cli_progress p;
  bool bar = cli_progress_begin(a, k->bytes, &p, "save", k->dir);
  int code = CLI_OK;
  ts_waiter w; /* polling the daemon's progress until the save ends (or the daemon goes) */
  ts_waiter_init(&w, &ts_wait_poll, TS_WAIT_FOREVER);
  for (;;) {
    int rc = tshard_stats_get(c, s);
    const tshard_save_stats *v = rc ? NULL : find_save(s, k->save_id);
    if (rc || !v) {
      code = rc ? failed(c, rc) : cli_fail(CLI_FAILED, "the daemon no longer reports the save");
      break;
    }
    if (bar)
      cli_progress_update(&p, v->bytes_written, v->bytes_total ? v->bytes_total : 1);
    if (strcmp(v->state, "writing") != 0) {
      if (v->status) {
        char msg[4800];
        snprintf(msg, sizeof msg, "background save to %s failed: %s (%s)", v->dir, v->message,
                 tshard_status_name(v->status));
        code = cli_fail(CLI_FAILED, msg);
      } else if (!a->json) {
        printf("save %llu complete: %s (%.3f s)\n", (unsigned long long)v->save_id, v->dir,
               v->seconds);
      }
      break;
    }
    ts_waiter_pause(&w);
  }
  free(s);
  return code;
}

/* A tensor of a checkpoint's index: its bytes (dtype size times its elements). */
static int64_t index_tensor_bytes(const ts_ckpt_tensor *t) {
  int64_t bytes = (int64_t)ts_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++)
    bytes *= t->shape[d];
  return bytes;
}

/* The bytes a save of names (n 0: every tensor) will write, 0 when not known (a prefix or a
 * glob: the daemons choose the tensors). */
static uint64_t save_bytes(tshard_client *c, const char **names, int n, const char *prefix) {
  char **all = NULL;
  int count = 0;
  for (int i = 0; i < n; i++)
    if (strpbrk(names[i], "*?["))
      return 0;
  if (prefix || (n == 0 && tshard_list(c, &all, &count) != TS_OK))
    return 0;
  uint64_t bytes = 0;
  for (int i = 0; i < (n ? n : count); i++)
    bytes += cli_tensor_bytes(c, n ? names[i] : all[i]);
  if (all)
    tshard_free_names(all, count);
  return bytes;
}

/* The bytes a load of names (n 0: every tensor) will read, from the index; 0 when not known. */
static uint64_t load_bytes(const char *dir, const char **names, int n) {
  ts_ckpt_index *idx = NULL;
  ts_error err;
  if (ts_ckpt_index_read(dir, &idx, &err) != TS_OK)
    return 0;
  uint64_t bytes = 0;
  for (int i = 0; i < idx->ntensors; i++) {
    bool named = n == 0;
    for (int k = 0; k < n && !named; k++)
      named = strcmp(names[k], idx->tensors[i].name) == 0;
    if (named)
      bytes += (uint64_t)index_tensor_bytes(&idx->tensors[i]);
  }
  ts_ckpt_index_destroy(&idx);
  return bytes;
}

/* A synchronous save (so) or load (lo) of names, with the estimated progress line when it is
 * shown: submitted, waited on while the line is drawn, ended with the measured rate. */
static int save_or_load(const cli_args *a, tshard_client *c, const char *dir, const char **names,
                        int n, const tshard_save_opts *so, const tshard_load_opts *lo,
                        tshard_ckpt_info *k) {
  const char *what = so ? "save" : "load";
  uint64_t bytes = 0;
  if (cli_estimate_wanted(a))
    bytes = so ? save_bytes(c, names, n, so->prefix) : load_bytes(dir, names, n);
  if (!cli_estimate_shown(a, bytes))
    return so ? tshard_save(c, dir, names, n, so) : tshard_load(c, dir, names, n, lo);
  cli_estimate e;
  snprintf(e.head, sizeof e.head, "%s %s", what, dir);
  snprintf(e.earlier, sizeof e.earlier, "%s", what);
  cli_estimate_begin(a, &e, what, bytes);
  uint64_t ticket = 0;
  tshard_result res;
  int rc = so ? tshard_submit_save(c, dir, names, n, so, &ticket)
              : tshard_submit_load(c, dir, names, n, lo, &ticket);
  if (rc == TS_OK)
    rc = cli_estimate_wait(&e, c, ticket, &res, k);
  cli_estimate_end(&e, rc, ticket != 0, what, rc == TS_OK && k->bytes ? k->bytes : bytes);
  return rc;
}

/* What a save or an export writes, asked one way: NAME..., --prefix or --all. */
int cli_selection(const cli_args *a, const char *what, int n) {
  bool all = cli_flag(a, "all"), prefix = cli_opt(a, "prefix") != NULL;
  char msg[400];
  if (n == 0 && !all && !prefix)
    snprintf(msg, sizeof msg,
             "%s of no tensors: give NAME... (exact names, or globs such as "
             "'layers.*.weight' in quotes), --prefix P, or --all to save every tensor",
             what);
  else if (n + all + prefix > 1 && (all || prefix))
    snprintf(msg, sizeof msg, "%s: give one of NAME..., --prefix P or --all", what);
  else
    return CLI_OK;
  return cli_fail(CLI_USAGE, msg);
}

int cli_cmd_save(cli_args *a, tshard_client *c) {
  const char *dir, **names;
  int n, code = dir_and_names(a, &dir, &names, &n);
  if (!code && cli_flag(a, "wait") && !cli_flag(a, "async"))
    code = cli_fail(CLI_USAGE, "--wait follows a save in the background: give --async too");
  if (!code)
    code = cli_selection(a, "save", n);
  if (code) {
    free(names);
    return code;
  }
  tshard_ckpt_info k;
  tshard_save_opts o = {cli_flag(a, "keep-partial"),
                        cli_flag(a, "per-node"),
                        cli_opt(a, "key"),
                        cli_flag(a, "async"),
                        &k,
                        cli_flag(a, "all"),
                        cli_flag(a, "overwrite"),
                        cli_opt(a, "prefix")};
  int rc = o.background ? tshard_save(c, dir, names, n, &o)
                        : save_or_load(a, c, dir, names, n, &o, NULL, &k);
  free(names);
  if (rc)
    return failed(c, rc);
  print_info(a, "saved", &k);
  return o.background && cli_flag(a, "wait") ? follow_save(a, c, &k) : CLI_OK;
}

int cli_cmd_snapshot(cli_args *a, tshard_client *c) {
  tshard_ckpt_info k;
  int rc = tshard_snapshot(c, &k);
  if (rc)
    return failed(c, rc);
  print_info(a, "snapshot", &k);
  return cli_flag(a, "wait") ? follow_save(a, c, &k) : CLI_OK;
}

int cli_cmd_load(cli_args *a, tshard_client *c) {
  const char *dir, **names;
  int n, code = dir_and_names(a, &dir, &names, &n);
  if (code)
    return code;
  tshard_ckpt_info k;
  const char **rules = calloc((size_t)a->argc + 1, sizeof *rules);
  if (!rules) {
    free(names);
    return cli_fail(CLI_FAILED, "out of memory");
  }
  tshard_load_opts o = {.attr = cli_opt(a, "default-attr"),
                        .per_node = cli_flag(a, "per-node"),
                        .key = cli_opt(a, "key"),
                        .info = &k,
                        .nrules = cli_opt_all(a, "attr", rules, a->argc),
                        .rules = rules,
                        .in_place = cli_flag(a, "in-place")};
  int rc = save_or_load(a, c, dir, names, n, NULL, &o, &k);
  free(names), free(rules);
  if (rc)
    return failed(c, rc);
  print_info(a, "loaded", &k);
  return CLI_OK;
}

/* checkpoint show --json: the index's tensors, their bytes and pieces, and the files. */
static void show_json(const ts_ckpt_index *idx, const char *dir) {
  int64_t total = 0;
  printf("{\"dir\": ");
  cli_json_string(stdout, dir);
  printf(", \"saved_ranks\": %d, \"tensors\": [", idx->saved_ranks);
  int files = 0;
  char seen[256][64];
  for (int i = 0; i < idx->ntensors; i++) {
    const ts_ckpt_tensor *t = &idx->tensors[i];
    int64_t bytes = index_tensor_bytes(t);
    printf("%s{\"name\": ", i ? ", " : "");
    cli_json_string(stdout, t->name);
    printf(", \"dtype\": \"%s\", \"shape\": [", ts_ckpt_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
      printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("], \"attr\": ");
    cli_json_string(stdout, t->attr);
    printf(", \"bytes\": %lld, \"pieces\": %d, \"partial_kept\": %s}", (long long)bytes, t->npieces,
           t->partial_kept ? "true" : "false");
    total += bytes;
    for (int k = 0; k < t->npieces; k++) {
      int f = 0;
      while (f < files && strcmp(seen[f], t->pieces[k].file) != 0)
        f++;
      if (f == files && files < 256)
        snprintf(seen[files++], sizeof seen[0], "%s", t->pieces[k].file);
    }
  }
  printf("], \"bytes\": %lld, \"files\": %d}\n", (long long)total, files + 1);
}

/* checkpoint clean DIR: the temporary directories of saves into DIR that were cut short. */
static int clean(const cli_args *a, const char *dir) {
  ts_ckpt_cleaned cl;
  ts_error err;
  int rc = ts_ckpt_clean_tmp(dir, &cl, &err);
  if (rc == TS_OK && a->json) {
    printf("{\"dir\": ");
    cli_json_string(stdout, dir);
    printf(", \"removed\": ");
    cli_json_lines(stdout, cl.removed);
    printf(", \"in_use\": ");
    cli_json_lines(stdout, cl.busy);
    printf("}\n");
  } else if (rc == TS_OK) {
    printf("removed %d unfinished save%s of %s%s%s", cl.nremoved, cl.nremoved == 1 ? "" : "s", dir,
           cl.nremoved ? ":\n" : "\n", cl.removed ? cl.removed : "");
    if (cl.nbusy)
      printf("left %d that a save in progress holds:\n%s", cl.nbusy, cl.busy);
  }
  ts_ckpt_cleaned_clear(&cl);
  return rc ? cli_fail(rc == TS_NOT_FOUND || rc == TS_CHECKPOINT_IO ? CLI_IO : CLI_FAILED, err.msg)
            : CLI_OK;
}

int cli_cmd_checkpoint(cli_args *a) {
  const char *what = cli_positional(a, 0), *dir = cli_positional(a, 1);
  if (what && dir && strcmp(what, "clean") == 0)
    return clean(a, dir);
  if (!what || strcmp(what, "show") != 0 || !dir)
    return cli_fail(CLI_USAGE, "usage: tshard checkpoint show DIR [--json], or tshard checkpoint "
                               "clean DIR [--json]");
  ts_ckpt_index *idx = NULL;
  ts_error err;
  int rc = ts_ckpt_index_read(dir, &idx, &err);
  if (rc)
    return cli_fail(rc == TS_NOT_FOUND || rc == TS_CHECKPOINT_IO ? CLI_IO : CLI_FAILED, err.msg);
  if (a->json) {
    show_json(idx, dir);
    ts_ckpt_index_destroy(&idx);
    return CLI_OK;
  }
  char *text = ts_ckpt_index_describe(idx, dir);
  ts_ckpt_index_destroy(&idx);
  if (!text)
    return cli_fail(CLI_FAILED, "out of memory");
  fputs(text, stdout);
  free(text);
  return CLI_OK;
}
