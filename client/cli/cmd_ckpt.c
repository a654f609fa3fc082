/* cmd_ckpt.c - the checkpoint subcommands: `tshard save DIR [NAME...]`,
 * `tshard load DIR [NAME...] [--attr ATTR]` through a daemon, and `tshard checkpoint show DIR`,
 * which reads the index alone (no daemon). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ts_ckpt_index.h"
#include "tshard.h"

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

int cli_cmd_save(cli_args *a, tshard_client *c) {
  const char *dir, **names;
  int n, code = dir_and_names(a, &dir, &names, &n);
  if (code)
    return code;
  tshard_save_opts o = {cli_flag(a, "keep-partial"), cli_flag(a, "per-node"), cli_opt(a, "key")};
  int rc = tshard_save(c, dir, names, n, &o);
  free(names);
  if (rc)
    return failed(c, rc);
  printf("saved %s to %s\n", n ? "the named tensors" : "every tensor", dir);
  return CLI_OK;
}

int cli_cmd_load(cli_args *a, tshard_client *c) {
  const char *dir, **names;
  int n, code = dir_and_names(a, &dir, &names, &n);
  if (code)
    return code;
  tshard_load_opts o = {cli_opt(a, "attr"), cli_flag(a, "per-node"), cli_opt(a, "key")};
  int rc = tshard_load(c, dir, names, n, &o);
  free(names);
  if (rc)
    return failed(c, rc);
  printf("loaded %s from %s\n", n ? "the named tensors" : "every tensor", dir);
  return CLI_OK;
}

int cli_cmd_checkpoint(cli_args *a) {
  const char *what = cli_positional(a, 0), *dir = cli_positional(a, 1);
  if (!what || strcmp(what, "show") != 0 || !dir)
    return cli_fail(CLI_USAGE, "usage: tshard checkpoint show DIR");
  ts_ckpt_index *idx = NULL;
  ts_error err;
  int rc = ts_ckpt_index_read(dir, &idx, &err);
  if (rc)
    return cli_fail(rc == TS_NOT_FOUND || rc == TS_CHECKPOINT_IO ? CLI_IO : CLI_FAILED, err.msg);
  char *text = ts_ckpt_index_describe(idx, dir);
  ts_ckpt_index_destroy(&idx);
  if (!text)
    return cli_fail(CLI_FAILED, "out of memory");
  fputs(text, stdout);
  free(text);
  return CLI_OK;
}
