/* cmd_safetensors.c - the Hugging Face safetensors subcommands through the daemons:
 * `tshard import-safetensors PATH --attr NAME=ATTR ... [--default-attr ATTR]` (a
 * model.safetensors file or an HF model.safetensors.index.json into new tensors; each rank reads
 * its own slice's bytes) and `tshard export-safetensors PATH [NAME...]` (one file, or HF shards
 * and an index with --max-shard-size). Repeated options (--attr, --rename, --metadata) are read
 * from the argument list in order; the whole command line is checked before a daemon is asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ts_rules.h"
#include "tshard.h"

static int failed(tshard_client *c, int rc) {
  char msg[1200];
  const char *m = tshard_last_message(c);
  snprintf(msg, sizeof msg, "%s (%s)", m && *m ? m : tshard_strerror(rc), tshard_status_name(rc));
  return cli_fail(CLI_FAILED, msg);
}

/* --json: {"path": PATH, "<what>": [the lines of list]} on one line. */
static void print_json(const char *path, const char *what, const char *list) {
  printf("{\"path\": ");
  cli_json_string(stdout, path);
  printf(", \"%s\": ", what);
  cli_json_lines(stdout, list);
  printf("}\n");
}

/* Every value of a repeated option "--name V" / "--name=V", split at its first '=' into key and
 * value (keys, vals: a->argc entries each). Returns the count, or -1 after printing the error. */
static int pairs(const cli_args *a, const char *name, const char **keys, const char **vals,
                 char **copies) {
  int n = 0;
  size_t k = strlen(name);
  for (int i = 1; i < a->argc; i++) {
    const char *s = a->argv[i], *v = NULL;
    if (strncmp(s, "--", 2) != 0 || strncmp(s + 2, name, k) != 0)
      continue;
    if (s[2 + k] == '=')
      v = s + 3 + k;
    else if (s[2 + k] == '\0' && i + 1 < a->argc)
      v = a->argv[++i];
    else
      continue;
    char *eq = strchr(v, '=');
    size_t plen;
    const char *attr;
    ts_error err;
    if (strcmp(name, "attr") == 0 && ts_attr_rule_split("--attr", v, &plen, &attr, &err)) {
      fprintf(stderr, "tshard: %s\n", err.msg); /* the grammar of attribute rules */
      return -1;
    }
    if (!eq || eq == v) {
      fprintf(stderr, "tshard: --%s '%s': give KEY=VALUE (e.g. --%s w=%s)\n", name, v, name,
              strcmp(name, "attr") == 0 ? "'mesh=[4] placements=[S(0)]'" : "x");
      return -1;
    }
    if (!(copies[n] = strdup(v)))
      return -1;
    copies[n][eq - v] = '\0';
    keys[n] = copies[n];
    vals[n] = copies[n] + (eq - v) + 1;
    n++;
  }
  return n;
}

typedef struct kv {
  const char **keys, **vals;
  char **copies;
  int n;
} kv;

static int kv_read(const cli_args *a, const char *name, kv *p) {
  size_t m = (size_t)a->argc + 1;
  p->keys = calloc(m, sizeof *p->keys);
  p->vals = calloc(m, sizeof *p->vals);
  p->copies = calloc(m, sizeof *p->copies);
  p->n = p->keys && p->vals && p->copies ? pairs(a, name, p->keys, p->vals, p->copies) : -1;
  return p->n < 0 ? CLI_USAGE : CLI_OK;
}

static void kv_free(kv *p) {
  for (int i = 0; p->copies && p->copies[i]; i++)
    free(p->copies[i]);
  free(p->keys), free(p->vals), free(p->copies);
}

int cli_cmd_import_safetensors(cli_args *a) {
  const char *path = cli_positional(a, 0);
  if (!path)
    return cli_fail(CLI_USAGE, "missing the safetensors file (tshard import-safetensors PATH)");
  kv attrs = {0}, ren = {0};
  int code = kv_read(a, "attr", &attrs);
  if (!code)
    code = kv_read(a, "rename", &ren);
  const char **names = calloc((size_t)a->argc + 1, sizeof *names);
  int nnames = 0;
  const char *only = cli_opt(a, "names");
  char *list = only ? strdup(only) : NULL;
  for (char *save = NULL, *t = list ? strtok_r(list, ",", &save) : NULL; t && names;
       t = strtok_r(NULL, ",", &save))
    names[nnames++] = t;
  if (!code && !names)
    code = cli_fail(CLI_FAILED, "out of memory");
  tshard_client *c = NULL;
  if (!code) /* the command line is checked before a daemon is asked */
    code = cli_connect(a, &c);
  if (!code) {
    tshard_st_import_opts o = {.nattrs = attrs.n,
                               .attr_names = attrs.keys,
                               .attrs = attrs.vals,
                               .default_attr = cli_opt(a, "default-attr"),
                               .nnames = nnames,
                               .names = names,
                               .strip_prefix = cli_opt(a, "strip-prefix"),
                               .nrename = ren.n,
                               .rename_from = ren.keys,
                               .rename_to = ren.vals,
                               .key = cli_opt(a, "key")};
    char *created = NULL;
    int rc = tshard_import_safetensors(c, path, &o, &created);
    if (rc) {
      code = failed(c, rc);
    } else if (a->json) {
      print_json(path, "created", created);
    } else {
      int n = 0;
      for (const char *s = created; s && *s; s++)
        n += *s == '\n';
      printf("imported %d tensors from %s\n%s", n, path, created ? created : "");
    }
    free(created);
  }
  tshard_close(&c);
  free(names), free(list);
  kv_free(&attrs), kv_free(&ren);
  return code;
}

int cli_cmd_export_safetensors(cli_args *a) {
  const char *path = cli_positional(a, 0);
  if (!path)
    return cli_fail(CLI_USAGE, "missing the file to write (tshard export-safetensors PATH)");
  const char **names = calloc((size_t)a->argc + 1, sizeof *names);
  if (!names)
    return cli_fail(CLI_FAILED, "out of memory");
  int n = 0;
  for (const char *s; (s = cli_positional(a, n + 1));)
    names[n++] = s;
  uint64_t max = 0;
  const char *ms = cli_opt(a, "max-shard-size");
  if (ms) {
    char *end;
    unsigned long long v = strtoull(ms, &end, 10);
    unsigned long long mul = *end == 'K'   ? 1ull << 10
                             : *end == 'M' ? 1ull << 20
                             : *end == 'G' ? 1ull << 30
                                           : 1;
    if (end == ms || v == 0 || (*end && (mul == 1 || end[1]))) {
      free(names);
      return cli_fail(CLI_USAGE, "--max-shard-size: give a positive size in bytes, or with K, M "
                                 "or G (e.g. 5G)");
    }
    max = v * mul;
  }
  int sel = cli_selection(a, "safetensors export", n);
  if (sel) {
    free(names);
    return sel;
  }
  kv meta = {0};
  int code = kv_read(a, "metadata", &meta);
  tshard_client *c = NULL;
  if (!code) /* the command line is checked before a daemon is asked */
    code = cli_connect(a, &c);
  if (!code) {
    tshard_st_export_opts o = {.max_shard_bytes = max,
                               .nmeta = meta.n,
                               .meta_keys = meta.keys,
                               .meta_values = meta.vals,
                               .key = cli_opt(a, "key"),
                               .all = cli_flag(a, "all"),
                               .prefix = cli_opt(a, "prefix")};
    char *files = NULL;
    int rc = tshard_export_safetensors(c, path, names, n, &o, &files);
    if (rc)
      code = failed(c, rc);
    else if (a->json)
      print_json(path, "files", files);
    else
      printf("exported %s to\n%s", o.all ? "every tensor" : "the tensors asked",
             files ? files : "");
    free(files);
  }
  tshard_close(&c);
  free(names);
  kv_free(&meta);
  return code;
}
