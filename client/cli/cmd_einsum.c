/* cmd_einsum.c - `tshard einsum`, `tshard einsum-backward` and `tshard einsum-release`: the
 * distributed einsum of the daemons. `tshard einsum EQ A B --out C` runs it;
 * --explain prints the planner's EXPLAIN (with --out: of the run; without: nothing runs). With
 * --ranks N the EXPLAIN is computed locally by the planner (pure, no daemon) from --shape and
 * --attr given once per operand, so any world size can be simulated. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ts_dist_einsum_plan.h"
#include "tshard.h"

#define MAX_OPS TS_DEIN_MAX_OPERANDS

static int failed(tshard_client *c, int rc) {
  char msg[1024];
  const char *m = tshard_last_message(c);
  snprintf(msg, sizeof msg, "%s (%s)", m && *m ? m : tshard_strerror(rc), tshard_status_name(rc));
  return cli_fail(CLI_FAILED, msg);
}

/* The operands: positionals after the equation. */
static int operands(const cli_args *a, const char **ops) {
  int n = 0;
  for (const char *s; n <= MAX_OPS && (s = cli_positional(a, n + 1)); n++)
    if (n < MAX_OPS)
      ops[n] = s;
  return n;
}

static int offline(cli_args *a, const char *eq, int n) {
  const char *shapes_t[MAX_OPS], *attrs_t[MAX_OPS];
  int ns = cli_opt_all(a, "shape", shapes_t, MAX_OPS);
  int na = cli_opt_all(a, "attr", attrs_t, MAX_OPS);
  if (n < 1 || n > MAX_OPS)
    n = ns;
  if (ns != n || na != n || n < 1 || n > MAX_OPS)
    return cli_fail(CLI_USAGE, "offline einsum: give --shape and --attr once per operand (1 to 3, "
                               "in the equation's order)");
  char *end;
  long r = strtol(cli_opt(a, "ranks"), &end, 10);
  if (*end || r < 1 || r > (1 << 24))
    return cli_fail(CLI_USAGE, "--ranks: expected a number of ranks from 1 to 16777216");
  ts_error err;
  ts_dtype dt = TS_F32;
  const char *dts = cli_opt(a, "dtype");
  if (dts && ts_dtype_parse_spelling(dts, &dt, &err))
    return cli_fail(CLI_USAGE, err.msg);
  int ndims[MAX_OPS];
  int64_t shapes[MAX_OPS][TS_MAX_DIMS];
  const int64_t *sp[MAX_OPS];
  ts_attr *attrs[MAX_OPS] = {NULL}, *to = NULL;
  int rc = TS_OK;
  for (int i = 0; rc == TS_OK && i < n; i++) {
    rc = cli_parse_shape(shapes_t[i], &ndims[i], shapes[i], &err);
    sp[i] = shapes[i];
    if (rc == TS_OK)
      rc = ts_attr_parse(attrs_t[i], &attrs[i], &err);
  }
  const char *to_t = cli_opt(a, "to");
  if (rc == TS_OK && to_t)
    rc = ts_attr_parse(to_t, &to, &err);
  ts_dein_plan *p = NULL;
  ts_dein_opts o = {to, cli_opt(a, "plan"), (int)r, 0};
  if (rc == TS_OK)
    rc = ts_dein_plan_create(eq, n, ndims, sp, (const ts_attr *const *)attrs, dt, &o, &p, &err);
  int code = CLI_OK;
  if (rc) {
    code = cli_fail(CLI_FAILED, err.msg);
  } else {
    char *text = ts_dein_plan_explain(p);
    if (a->json) {
      printf("{\"plan\": ");
      cli_json_string(stdout, ts_dein_plan_chosen(p)->name);
      printf(", \"planned_wire_bytes\": %lld, \"explain\": ",
             (long long)ts_dein_plan_chosen(p)->wire_bytes);
      cli_json_string(stdout, text ? text : "");
      printf("}\n");
    } else {
      fputs(text ? text : "no memory for the explain text\n", stdout);
    }
    free(text);
  }
  ts_dein_plan_destroy(&p);
  for (int i = 0; i < MAX_OPS; i++)
    ts_attr_destroy(&attrs[i]);
  ts_attr_destroy(&to);
  return code;
}

static void print_result(const cli_args *a, const char *what, const char *out,
                         const tshard_einsum_result *r) {
  if (a->json) {
    printf("{\"operation\": \"%s\", \"out\": ", what);
    cli_json_string(stdout, out ? out : "");
    printf(", \"forward_id\": %llu, \"plan\": ", (unsigned long long)r->forward_id);
    cli_json_string(stdout, r->plan);
    printf(", \"planned_wire_bytes\": %lld, \"kept_bytes\": %lld, \"explain\": ",
           (long long)r->planned_wire_bytes, (long long)r->kept_bytes);
    cli_json_string(stdout, r->explain ? r->explain : "");
    printf("}\n");
    return;
  }
  if (r->explain)
    fputs(r->explain, stdout);
  if (out)
    printf("einsum -> %s: done (plan %s, %lld bytes planned on the wire, forward id %llu%s)\n", out,
           r->plan, (long long)r->planned_wire_bytes, (unsigned long long)r->forward_id,
           r->kept_bytes ? ", kept for backward" : "");
}

int cli_cmd_einsum(cli_args *a) {
  const char *eq = cli_positional(a, 0);
  if (!eq)
    return cli_fail(CLI_USAGE, "einsum needs an EQUATION and operand names (see tshard einsum "
                               "--help)");
  const char *ops[MAX_OPS];
  int n = operands(a, ops);
  if (n > MAX_OPS)
    return cli_fail(CLI_USAGE, "einsum takes 1 to 3 operand names");
  if (cli_opt(a, "ranks"))
    return offline(a, eq, n);
  if (n < 1)
    return cli_fail(CLI_USAGE, "einsum needs operand names after the equation");
  const char *out = cli_opt(a, "out");
  bool explain = cli_flag(a, "explain");
  if (!out && !explain)
    return cli_fail(CLI_USAGE, "einsum needs --out NAME (or --explain alone to plan only)");
  tshard_client *c;
  int code = cli_connect(a, &c);
  if (code)
    return code;
  tshard_einsum_result r;
  int rc;
  if (out) {
    tshard_einsum_opts o = {cli_opt(a, "to"), cli_opt(a, "plan"), cli_flag(a, "keep"), explain,
                            cli_opt(a, "key")};
    rc = tshard_einsum(c, eq, n, ops, out, &o, &r);
  } else {
    rc = tshard_einsum_plan(c, eq, n, ops, cli_opt(a, "to"), cli_opt(a, "plan"), &r);
  }
  if (rc)
    code = failed(c, rc);
  else
    print_result(a, out ? "einsum" : "einsum_plan", out, &r);
  tshard_einsum_result_clear(&r);
  tshard_close(&c);
  return code;
}

static int parse_id(const cli_args *a, uint64_t *id) {
  const char *t = cli_positional(a, 0);
  char *end;
  if (!t)
    return cli_fail(CLI_USAGE, "give the forward's id (printed by tshard einsum)");
  unsigned long long v = strtoull(t, &end, 10);
  if (*end || end == t)
    return cli_fail(CLI_USAGE, "the forward id must be a number (printed by tshard einsum)");
  *id = v;
  return CLI_OK;
}

int cli_cmd_einsum_backward(cli_args *a, tshard_client *c) {
  uint64_t id = 0;
  int code = parse_id(a, &id);
  if (code)
    return code;
  const char *gout = cli_opt(a, "grad-out"), *grads_t = cli_opt(a, "grads");
  if (!gout || !grads_t)
    return cli_fail(CLI_USAGE, "einsum-backward needs --grad-out NAME and --grads G0,G1,... "
                               "(one per operand, empty for none)");
  char buf[3 * 130];
  snprintf(buf, sizeof buf, "%s", grads_t);
  const char *grads[MAX_OPS];
  int n = 0;
  char *s = buf;
  for (;;) {
    char *comma = strchr(s, ',');
    if (comma)
      *comma = '\0';
    if (n == MAX_OPS)
      return cli_fail(CLI_USAGE, "--grads: at most 3 names (one per operand)");
    grads[n++] = s;
    if (!comma)
      break;
    s = comma + 1;
  }
  int rc = tshard_einsum_backward(c, id, gout, n, grads, cli_opt(a, "key"));
  if (rc)
    return failed(c, rc);
  if (!a->json)
    printf("einsum backward of %llu: done\n", (unsigned long long)id);
  else
    printf("{\"operation\": \"einsum_backward\", \"forward_id\": %llu}\n", (unsigned long long)id);
  return CLI_OK;
}

int cli_cmd_einsum_release(cli_args *a, tshard_client *c) {
  uint64_t id = 0;
  int code = parse_id(a, &id);
  if (code)
    return code;
  int rc = tshard_einsum_release(c, id, cli_opt(a, "key"));
  if (rc)
    return failed(c, rc);
  if (!a->json)
    printf("einsum forward %llu released\n", (unsigned long long)id);
  else
    printf("{\"operation\": \"einsum_release\", \"forward_id\": %llu}\n", (unsigned long long)id);
  return CLI_OK;
}
