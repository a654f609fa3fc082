/* cmd_plan.c - `tshard plan`: the planner's EXPLAIN for a reshard, computed locally (the planner
 * is pure), so meshes of thousands of ranks can be simulated without any daemon. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ts_plan.h"

static void json_costs(FILE *f, const ts_plan_costs *c, bool hosts) {
  fprintf(f,
          "{\"wire_bytes\": %lld, \"max_rank_bytes\": %lld, \"messages\": %lld, "
          "\"peak_extra_bytes\": %lld, \"rounds\": %lld",
          (long long)c->wire_bytes, (long long)c->max_rank_bytes, (long long)c->messages,
          (long long)c->peak_extra_bytes, (long long)c->rounds);
  if (hosts)
    fprintf(f, ", \"host_link_bytes\": %lld, \"cross_host_bytes\": %lld, \"time_ns\": %lld",
            (long long)c->host_link_bytes, (long long)c->cross_host_bytes, (long long)c->time_ns);
  fprintf(f, "}");
}

/* --topology SPEC or --hostfile FILE (not both); *out stays NULL without either. */
static int topology_of(const cli_args *a, ts_topology **out) {
  const char *spec = cli_opt(a, "topology"), *file = cli_opt(a, "hostfile");
  ts_error err;
  *out = NULL;
  if (spec && file)
    return cli_fail(CLI_USAGE, "give --topology or --hostfile, not both");
  if (spec && ts_topology_parse(spec, out, &err))
    return cli_fail(CLI_USAGE, err.msg);
  if (file) {
    size_t len;
    char *text = cli_read_file(file, &len), msg[1024];
    if (!text) {
      snprintf(msg, sizeof msg, "--hostfile: cannot read '%.400s': %s", file, strerror(errno));
      return cli_fail(CLI_USAGE, msg);
    }
    int rc = ts_topology_from_hostfile(text, len, out, &err);
    free(text);
    if (rc) {
      snprintf(msg, sizeof msg, "--hostfile '%.300s': %.600s", file, err.msg);
      return cli_fail(CLI_USAGE, msg);
    }
  }
  const char *rates = cli_opt(a, "link-rates");
  if (rates && !*out)
    return cli_fail(CLI_USAGE, "--link-rates weighs the links between hosts: give it with "
                               "--topology or --hostfile");
  if (rates && ts_topology_parse_rates(*out, rates, &err)) {
    char msg[1024];
    snprintf(msg, sizeof msg, "--link-rates: %.900s", err.msg);
    ts_topology_destroy(out);
    return cli_fail(CLI_USAGE, msg);
  }
  return CLI_OK;
}

/* --relabel: tgt's ranks permuted among themselves so that the most stays in place; *text gets
 * the relabeled target's canonical text (malloc'd) and *kept the bytes kept. Without --relabel
 * nothing changes and *text stays NULL. */
static int relabel_of(const cli_args *a, const ts_attr *src, ts_attr *tgt, int ndim,
                      const int64_t *shape, ts_dtype dt, char **text, int64_t *kept,
                      ts_error *err) {
  *text = NULL;
  if (!cli_flag(a, "relabel"))
    return TS_OK;
  int rc = ts_attr_relabel(src, tgt, ndim, shape, kept, err);
  if (!rc) {
    *kept *= (int64_t)ts_dtype_size(dt);
    size_t len = ts_attr_format(tgt, NULL, 0);
    if ((*text = malloc(len + 1)))
      ts_attr_format(tgt, *text, len + 1);
    else
      rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the relabeled attribute");
  }
  return rc;
}

int cli_cmd_plan(cli_args *a) {
  ts_error err;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  ts_dtype dt = TS_F32;
  const char *from = cli_opt(a, "from"), *to = cli_opt(a, "to"), *dts = cli_opt(a, "dtype"),
             *strat = cli_opt(a, "strategy"), *ranks = cli_opt(a, "ranks"),
             *staging = cli_opt(a, "staging"), *to_dts = cli_opt(a, "to-dtype");
  if (!from || !to)
    return cli_fail(CLI_USAGE, "plan needs --from ATTR and --to ATTR (see tshard plan --help)");
  ts_dtype to_dt = dt;
  if (cli_parse_shape(cli_opt(a, "shape"), &ndim, shape, &err) ||
      (dts && ts_dtype_parse_spelling(dts, &dt, &err)) ||
      (to_dts && ts_dtype_parse_spelling(to_dts, &to_dt, &err)))
    return cli_fail(CLI_USAGE, err.msg);
  if (!to_dts)
    to_dt = dt;
  ts_plan_opts opts = {.strategy = TS_STRATEGY_AUTO};
  if (strat && ts_strategy_parse(strat, &opts.strategy, &err))
    return cli_fail(CLI_USAGE, err.msg);
  if (ranks) {
    char *end;
    long n = strtol(ranks, &end, 10);
    if (*end || n < 1 || n > (1 << 24))
      return cli_fail(CLI_USAGE, "--ranks: expected a number of ranks from 1 to 16777216");
    opts.world_size = (int)n;
  }
  if (staging) {
    char *end;
    long long n = strtoll(staging, &end, 10);
    if (*end || n < 1)
      return cli_fail(CLI_USAGE, "--staging: expected a positive number of bytes");
    opts.staging_bytes = n;
  }
  ts_topology *topo = NULL;
  int code = topology_of(a, &topo);
  if (code != CLI_OK)
    return code;
  if (topo && !opts.world_size)
    opts.world_size = ts_topology_nranks(topo);
  ts_attr *src = NULL, *tgt = NULL;
  ts_plan *plan = NULL;
  int rc = ts_attr_parse(from, &src, &err);
  if (!rc)
    rc = ts_attr_parse(to, &tgt, &err);
  ts_dtype wire = dt; /* a cast: the plan is the one of the dtype on the wire */
  if (!rc)
    rc = ts_cast_wire_dtype(dt, to_dt, src, tgt, &wire, &err);
  char *relabeled = NULL;
  int64_t kept = 0;
  if (!rc)
    rc = relabel_of(a, src, tgt, ndim, shape, wire, &relabeled, &kept, &err);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!rc)
    rc = ts_plan_create_on(ndim, shape, wire, src, tgt, &opts, topo, &plan, &err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  bool hosts = plan && ts_plan_host_bound(plan) != -1;
  if (rc) {
    code = cli_fail(CLI_FAILED, err.msg);
  } else if (a->json) {
    printf("{\"strategy\": \"%s\", \"plan_ms\": %.3f, \"min_wire_bytes\": %lld, ",
           ts_strategy_name(ts_plan_strategy(plan)), ms, (long long)ts_plan_min_wire_bytes(plan));
    if (to_dt != dt)
      printf("\"cast\": {\"from\": \"%s\", \"to\": \"%s\", \"wire\": \"%s\"}, ", ts_dtype_name(dt),
             ts_dtype_name(to_dt), ts_dtype_name(wire));
    if (relabeled) {
      printf("\"relabel\": {\"to\": ");
      cli_json_string(stdout, relabeled);
      printf(", \"kept_bytes\": %lld}, ", (long long)kept);
    }
    if (topo) {
      char t[200];
      ts_topology_format(topo, t, sizeof t);
      printf("\"topology\": ");
      cli_json_string(stdout, t);
      printf(", \"hosts\": %d, \"host_bound_bytes\": %lld, ", ts_topology_nhosts(topo),
             (long long)ts_plan_host_bound(plan));
      printf("\"link_rates\": {\"host\": %.0f, \"cross\": %.0f}, ",
             ts_topology_rate(topo, TS_LINK_HOST), ts_topology_rate(topo, TS_LINK_CROSS));
    }
    printf("\"costs\": ");
    json_costs(stdout, ts_plan_get_costs(plan), hosts);
    printf(", \"strategies\": {");
    bool first = true;
    for (int s = TS_STRATEGY_LOCAL; s < TS_STRATEGY_COUNT; s++) {
      ts_plan_costs c;
      const char *why = NULL;
      bool ok = ts_plan_applies(plan, (ts_strategy)s, &c, &why);
      printf("%s\"%s\": ", first ? "" : ", ", ts_strategy_name((ts_strategy)s));
      first = false;
      if (ok) {
        json_costs(stdout, &c, hosts);
      } else {
        printf("{\"applies\": false, \"why\": ");
        cli_json_string(stdout, why ? why : "");
        printf("}");
      }
    }
    printf("}}\n");
  } else {
    char *text = ts_plan_explain(plan, 8);
    if (!text) {
      code = cli_fail(CLI_FAILED, "out of memory formatting the plan");
    } else {
      if (to_dt != dt)
        printf("cast: %s -> %s, %s the wire (%s on the wire)\n", ts_dtype_name(dt),
               ts_dtype_name(to_dt), wire == to_dt ? "before" : "after", ts_dtype_name(wire));
      if (relabeled)
        printf("relabel: to %s (%lld bytes stay in place)\n", relabeled, (long long)kept);
      fputs(text, stdout);
      printf("planned in %.3f ms\n", ms);
      free(text);
    }
  }
  free(relabeled);
  ts_plan_destroy(&plan);
  ts_topology_destroy(&topo);
  ts_attr_destroy(&src);
  ts_attr_destroy(&tgt);
  return code;
}
