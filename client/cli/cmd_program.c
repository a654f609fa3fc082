/* cmd_program.c - `tshard program compile|run|show|drop`: compiled programs on the daemons
 * (program/PROGRAM.md). compile reads the JSON file (or a serialized ProgramGraph message:
 * --format pb, or a .pb file; --buckets NAME=RULE overrides a dim group's bucketing rule), builds
 * buckets on their first run (--buckets ahead: all now) and prints the id, then the connected
 * rank's short report (--verbose: the full one, every bucket); run binds --input NAME=TENSOR (or
 * NAME=NUMBER for a scalar) and --output NAME=TENSOR (an output not named becomes a tensor of its
 * own name; --overwrite lets outputs replace existing tensors); show prints the full report;
 * drop forgets the program. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "tshard.h"

static int failed(tshard_client *c, int rc) {
  char msg[1024];
  const char *m = tshard_last_message(c);
  snprintf(msg, sizeof msg, "%s (%s)", m && *m ? m : tshard_strerror(rc), tshard_status_name(rc));
  return cli_fail(CLI_FAILED, msg);
}

/* Every "--opt NAME=VALUE" (or "--opt=NAME=VALUE") into args; names and values point into argv
 * (the '=' is replaced). */
static int collect(cli_args *a, const char *opt, tshard_program_arg *args, int max, bool outputs) {
  int n = 0;
  size_t ol = strlen(opt);
  for (int i = 1; i < a->argc; i++) {
    char *v = NULL;
    if (strncmp(a->argv[i], "--", 2) == 0 && strncmp(a->argv[i] + 2, opt, ol) == 0) {
      const char *rest = a->argv[i] + 2 + ol;
      if (*rest == '=')
        v = (char *)rest + 1;
      else if (*rest == '\0' && i + 1 < a->argc)
        v = a->argv[++i];
      else
        continue;
    } else {
      continue;
    }
    char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1] || n == max) {
      fprintf(stderr, "tshard: --%s takes NAME=%s (at most %d)\n", opt,
              outputs ? "TENSOR" : "TENSOR or NAME=NUMBER", max);
      return -1;
    }
    *eq = '\0';
    args[n].name = v;
    args[n].tensor = eq + 1;
    args[n].value = 0;
    char *end;
    double d = strtod(eq + 1, &end);
    if (!outputs && *end == '\0') {
      args[n].tensor = NULL;
      args[n].value = d;
    }
    n++;
  }
  return n;
}

/* A run's one-line summary: the program, its inputs (tensor or number), the outputs named on
 * the command line, and the time the run took as this client saw it. */
static void print_run(const char *id, const tshard_program_arg *in, int n_in,
                      const tshard_program_arg *out, int n_out, double ms) {
  printf("ran program %s on", id);
  for (int i = 0; i < n_in; i++) {
    if (in[i].tensor && strcmp(in[i].name, in[i].tensor) == 0)
      printf("%s %s", i ? "," : "", in[i].name);
    else if (in[i].tensor)
      printf("%s %s=%s", i ? "," : "", in[i].name, in[i].tensor);
    else
      printf("%s %s=%g", i ? "," : "", in[i].name, in[i].value);
  }
  if (n_in == 0)
    printf(" no inputs");
  for (int i = 0; i < n_out; i++)
    printf("%s %s=%s", i ? "," : "; outputs", out[i].name, out[i].tensor);
  printf(" in %.3f ms\n", ms);
}

int cli_cmd_program(cli_args *a, tshard_client *c) {
  const char *sub = cli_positional(a, 0), *arg = cli_positional(a, 1);
  if (!sub || !arg ||
      (strcmp(sub, "compile") && strcmp(sub, "run") && strcmp(sub, "show") &&
       strcmp(sub, "drop"))) {
    fprintf(stderr, "tshard: program needs 'compile FILE', 'run ID', 'show ID' or 'drop ID' (see "
                    "tshard program --help)\n");
    return CLI_USAGE;
  }
  if (!strcmp(sub, "compile")) {
    /* --buckets (repeatable): ahead or lazy, or NAME=RULE overriding a group's bucketing rule */
    int lazy = 1;
    char rules[1024] = "";
    size_t rl = 0;
    for (int i = 1; i < a->argc; i++) {
      const char *v = NULL, *s = a->argv[i];
      if (!strcmp(s, "--buckets") && i + 1 < a->argc)
        v = a->argv[++i];
      else if (!strncmp(s, "--buckets=", 10))
        v = s + 10;
      if (!v)
        continue;
      if (!strcmp(v, "lazy") || !strcmp(v, "ahead")) {
        lazy = !strcmp(v, "lazy");
      } else if (strchr(v, '=') && rl + strlen(v) + 2 < sizeof rules) {
        rl += (size_t)snprintf(rules + rl, sizeof rules - rl, "%s%s", rl ? " " : "", v);
      } else {
        fprintf(stderr,
                "tshard: --buckets is 'lazy' (each on its first run, the default), "
                "'ahead' (all now) or NAME=RULE (a dim group's rule: pow2, step:S or "
                "V1,V2,...); got '%s'\n",
                v);
        return CLI_USAGE;
      }
    }
    /* the JSON text, or a serialized ProgramGraph message (--format pb, or a .pb file) */
    const char *fmt = cli_opt(a, "format");
    size_t al = strlen(arg);
    bool pb = fmt ? !strcmp(fmt, "pb") : (al > 3 && !strcmp(arg + al - 3, ".pb"));
    if (fmt && strcmp(fmt, "json") && strcmp(fmt, "pb")) {
      fprintf(stderr, "tshard: --format is 'json' (the program's text, the default) or 'pb' (a "
                      "serialized ProgramGraph message; the default for a .pb file)\n");
      return CLI_USAGE;
    }
    size_t len = 0;
    char *text = cli_read_file(arg, &len);
    if (!text) {
      fprintf(stderr, "tshard: cannot read '%s': %s\n", arg, strerror(errno));
      return CLI_IO;
    }
    char id[32];
    int rc = tshard_program_compile_ex(c, pb ? NULL : text, pb ? text : NULL, len,
                                       rl ? rules : NULL, lazy, id, sizeof id, cli_opt(a, "key"));
    free(text);
    if (rc)
      return failed(c, rc);
    char *report = NULL;
    rc = cli_flag(a, "verbose") ? tshard_program_show(c, id, &report)
                                : tshard_program_summary(c, id, &report);
    if (rc)
      return failed(c, rc);
    printf("id=%s\n%s", id, report);
    free(report);
    return CLI_OK;
  }
  if (!strcmp(sub, "drop")) {
    int rc = tshard_program_drop(c, arg, cli_opt(a, "key"));
    return rc ? failed(c, rc) : CLI_OK;
  }
  if (!strcmp(sub, "show")) {
    char *report = NULL;
    int rc = tshard_program_show(c, arg, &report);
    if (rc)
      return failed(c, rc);
    printf("%s", report);
    free(report);
    return CLI_OK;
  }
  tshard_program_arg in[64], out[64];
  int n_in = collect(a, "input", in, 64, false), n_out = collect(a, "output", out, 64, true);
  if (n_in < 0 || n_out < 0)
    return CLI_USAGE;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = tshard_program_run_ex(c, arg, in, n_in, out, n_out,
                                 cli_flag(a, "overwrite") ? TSHARD_PROGRAM_OVERWRITE : 0,
                                 cli_opt(a, "key"));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (rc)
    return failed(c, rc);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  print_run(arg, in, n_in, out, n_out, ms);
  return CLI_OK;
}
