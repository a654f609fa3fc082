/* cmd_daemon.c - the tshard subcommands that talk to a daemon through libtshard: create, put,
 * get, get-slice, reshard, drop, list, describe, stats, ping, shutdown, and show NAME.
 *
 * Connection options, common to all: --socket PATH, or --tcp HOST:PORT with --token-file FILE,
 * or --job JOB (default $TSHARD_JOB or "default") and --rank R (default 0); --timeout SECONDS.
 * Read commands take --json. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "npy.h"
#include "tshard.h"
#include "ts_kernels.h"
#include "ts_rules.h"

int cli_draw(const cli_args *a, const char *name, const char *dtype, int ndim, const int64_t *shape,
             const char *attr_text);

int cli_connect_tcp(const cli_args *a, int port_offset, int timeout_ms, tshard_client **out,
                    int *rc) {
  const char *tcp = cli_opt(a, "tcp"), *tok = cli_opt(a, "token-file");
  const char *colon = tcp ? strrchr(tcp, ':') : NULL;
  if (!colon || !tok)
    return cli_fail(CLI_USAGE, "--tcp HOST:PORT needs --token-file FILE too");
  char token[TS_RULES_TOKEN_MAX + 1];
  ts_error terr;
  if (ts_token_file_read(tok, token, sizeof token, &terr)) {
    char msg[sizeof terr.msg + 32];
    snprintf(msg, sizeof msg, "--token-file: %s", terr.msg);
    return cli_fail(terr.code == TS_IO ? CLI_IO : CLI_USAGE, msg);
  }
  char host[256];
  snprintf(host, sizeof host, "%.*s", (int)(colon - tcp), tcp);
  *rc = tshard_connect_tcp(host, atoi(colon + 1) + port_offset, token, timeout_ms, out);
  return CLI_OK;
}

int cli_connect(const cli_args *a, tshard_client **out) {
  const char *sock = cli_opt(a, "socket"), *tcp = cli_opt(a, "tcp"), *job = cli_opt(a, "job"),
             *rank = cli_opt(a, "rank"), *to = cli_opt(a, "timeout");
  int timeout_ms = to ? (int)(atof(to) * 1000) : TSHARD_DEFAULT_TIMEOUT_MS;
  if (timeout_ms <= 0)
    return cli_fail(CLI_USAGE, "--timeout: expected a positive number of seconds");
  int rc;
  char where[512];
  if (tcp) {
    int code = cli_connect_tcp(a, 0, timeout_ms, out, &rc);
    if (code)
      return code;
    snprintf(where, sizeof where, "%s", tcp);
  } else if (sock) {
    snprintf(where, sizeof where, "%s", sock);
    rc = tshard_connect_path(sock, timeout_ms, out);
  } else {
    if (!job)
      job = getenv("TSHARD_JOB") ? getenv("TSHARD_JOB") : "default";
    char *end = NULL;
    long r = rank ? strtol(rank, &end, 10) : 0;
    if (rank && (*end || r < 0 || r > 1 << 20))
      return cli_fail(CLI_USAGE, "--rank: expected a rank number >= 0");
    tshard_socket_path(where, sizeof where, job, (int)r);
    rc = tshard_connect_rank(job, (int)r, timeout_ms, out);
    char why[768];
    snprintf(why, sizeof why, "%s", tshard_connect_message());
    tshard_client *c0 = NULL;
    int rank0, world;
    if (rc == TS_IO && r > 0 && tshard_connect_rank(job, 0, timeout_ms, &c0) == TS_OK &&
        tshard_ping(c0, &rank0, &world) == TS_OK && r >= world) {
      char msg[256];
      snprintf(msg, sizeof msg, "--rank %ld: job %s has %d ranks (0 to %d)", r, job, world,
               world - 1);
      tshard_close(&c0);
      return cli_fail(CLI_USAGE, msg);
    }
    tshard_close(&c0);
    if (rc)
      return cli_fail(rc == TS_INVALID_ARGUMENT ? CLI_USAGE : CLI_CONNECT, why);
  }
  if (rc && sock && *tshard_connect_message()) /* no daemon there, or a timeout naming --timeout */
    return cli_fail(CLI_CONNECT, tshard_connect_message());
  if (rc) {
    char msg[768];
    snprintf(msg, sizeof msg,
             "cannot reach a daemon at %s: %s (is tshardd running? see "
             "deploy/tshard-launch)",
             where, tshard_strerror(rc));
    return cli_fail(CLI_CONNECT, msg);
  }
  return CLI_OK;
}

/* Reports a failed call with the daemon's message. */
static int failed(tshard_client *c, int rc) {
  char msg[1024];
  const char *m = tshard_last_message(c);
  snprintf(msg, sizeof msg, "%s (%s)", m && *m ? m : tshard_strerror(rc), tshard_status_name(rc));
  return cli_fail(CLI_FAILED, msg);
}

static const char *need_name(const cli_args *a) {
  const char *name = cli_positional(a, 0);
  if (!name)
    fprintf(stderr, "tshard: %s needs a tensor NAME (see tshard %s --help)\n", a->argv[0],
            a->argv[0]);
  return name;
}

static const char *opt_key(const cli_args *a) { return cli_opt(a, "key"); }

/* What a data command did: a line for people, or with --json an object for scripts. The data
 * went `dir` ("to" or "from") the file; rank >= 0: one rank's slice. */
static void report(const cli_args *a, const char *what, const char *name, size_t bytes,
                   const char *dir, const char *file, int rank) {
  if (!a->json) {
    if (rank >= 0)
      printf("%s %s: rank %d's %zu bytes %s %s\n", what, name, rank, bytes, dir, file);
    else
      printf("%s %s: %zu bytes %s %s\n", what, name, bytes, dir, file);
    return;
  }
  printf("{\"operation\": ");
  cli_json_string(stdout, a->argv[0]);
  printf(", \"name\": ");
  cli_json_string(stdout, name);
  printf(", \"bytes\": %zu, \"file\": ", bytes);
  cli_json_string(stdout, file);
  if (rank >= 0)
    printf(", \"rank\": %d", rank);
  printf("}\n");
}

int cli_cmd_ping(cli_args *a, tshard_client *c) {
  int code = CLI_OK, rank, world;
  int rc = tshard_ping(c, &rank, &world);
  if (rc)
    code = failed(c, rc);
  else if (a->json)
    printf("{\"rank\": %d, \"world_size\": %d}\n", rank, world);
  else
    printf("rank %d of %d: serving\n", rank, world);
  return code;
}

int cli_cmd_create(cli_args *a, tshard_client *c) {
  const char *name = need_name(a), *attr = cli_opt(a, "attr"), *dt = cli_opt(a, "dtype");
  ts_error err;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  if (!name)
    return CLI_USAGE;
  if (!attr)
    return cli_fail(CLI_USAGE, "create needs --attr ATTR");
  if (cli_parse_shape(cli_opt(a, "shape"), &ndim, shape, &err))
    return cli_fail(CLI_USAGE, err.msg);
  ts_dtype dtype = TS_F32;
  if (dt && ts_dtype_parse_spelling(dt, &dtype, &err))
    return cli_fail(CLI_USAGE, err.msg);
  int g = cli_apply_group(a, c);
  if (g)
    return g;
  int rc = tshard_create(c, name, ts_dtype_name(dtype), ndim, shape, attr, cli_opt(a, "layout"),
                         opt_key(a));
  return rc ? failed(c, rc) : CLI_OK;
}

int cli_cmd_put(cli_args *a, tshard_client *c) {
  const char *name = need_name(a), *file = cli_positional(a, 1);
  if (!name)
    return CLI_USAGE;
  if (!file)
    return cli_fail(CLI_USAGE, "put needs NAME FILE.npy");
  return cli_put_checked(a, c, name, file); /* cmd_put.c */
}

static int dtype_of(const char *text, ts_dtype *dt) { return ts_dtype_parse(text, dt, NULL); }

int cli_cmd_get(cli_args *a, tshard_client *c) {
  const char *name = need_name(a), *file = cli_positional(a, 1);
  if (!name)
    return CLI_USAGE;
  if (!file)
    return cli_fail(CLI_USAGE, "get needs NAME FILE.npy");
  int code = CLI_OK;
  tshard_info info = {0};
  npy_array arr = {0};
  int rc = tshard_describe(c, name, &info);
  if (!rc && dtype_of(info.dtype, &arr.dtype))
    rc = TS_BAD_DTYPE;
  if (!rc) {
    arr.ndim = info.ndim;
    memcpy(arr.shape, info.shape, sizeof(int64_t) * (size_t)info.ndim);
    arr.bytes = ts_dtype_size(arr.dtype);
    for (int d = 0; d < arr.ndim; d++)
      arr.bytes *= (size_t)arr.shape[d];
    arr.data = malloc(arr.bytes ? arr.bytes : 1);
    cli_progress bar;
    cli_progress_start(a, c, arr.bytes, &bar, "get", name);
    rc = arr.data ? tshard_get(c, name, arr.data, arr.bytes) : TS_NO_MEMORY;
  }
  if (rc) {
    code = failed(c, rc);
  } else {
    ts_error err;
    if (cli_npy_write(file, &arr, &err))
      code = cli_fail(CLI_IO, err.msg);
    else
      report(a,
             arr.dtype == TS_BF16      ? "get (bf16 as uint16 bits)"
             : arr.dtype == TS_F8_E4M3 ? "get (f8_e4m3 as uint8 bits)"
             : arr.dtype == TS_F8_E5M2 ? "get (f8_e5m2 as uint8 bits)"
                                       : "get",
             name, arr.bytes, "to", file, -1);
  }
  cli_npy_free(&arr);
  tshard_info_clear(&info);
  return code;
}

static bool holds(const tshard_info *info, int rank) {
  for (int i = 0; i < info->nranks; i++)
    if (info->ranks[i].rank == rank)
      return true;
  return false;
}

int cli_cmd_get_slice(cli_args *a, tshard_client *c) {
  const char *name = need_name(a), *file = cli_positional(a, 1), *layout = cli_opt(a, "layout");
  if (!name)
    return CLI_USAGE;
  if (!file)
    return cli_fail(CLI_USAGE, "get-slice needs NAME FILE.npy");
  int code = CLI_OK, rank, world;
  tshard_info info = {0};
  npy_array arr = {0};
  int rc = tshard_ping(c, &rank, &world);
  if (!rc)
    rc = tshard_describe(c, name, &info);
  if (!rc && dtype_of(info.dtype, &arr.dtype))
    rc = TS_BAD_DTYPE;
  size_t bytes = 0;
  if (!rc)
    rc = tshard_get_slice(c, name, layout, NULL, 0, &bytes);
  if (rc == TS_LIMIT && bytes > 0) { /* learned the size: fetch it */
    arr.data = malloc(bytes);
    rc = arr.data ? tshard_get_slice(c, name, layout, arr.data, bytes, &bytes) : TS_NO_MEMORY;
  }
  if (rc) {
    code = failed(c, rc);
  } else if (bytes == 0 && !holds(&info, rank)) {
    code = cli_fail(CLI_FAILED, "this rank holds no slice of the tensor");
  } else { /* a zero-size slice is an empty array of its box's shape */
    /* a row-major slice keeps its box shape; another layout is written flat */
    arr.bytes = bytes;
    arr.ndim = 1;
    arr.shape[0] = (int64_t)(bytes / ts_dtype_size(arr.dtype));
    bool plain = !layout || !*layout;
    for (int i = 0; i < info.nranks && plain; i++)
      if (info.ranks[i].rank == rank) {
        arr.ndim = info.ndim;
        for (int d = 0; d < info.ndim; d++)
          arr.shape[d] = info.ranks[i].hi[d] - info.ranks[i].lo[d];
      }
    ts_error err;
    if (cli_npy_write(file, &arr, &err))
      code = cli_fail(CLI_IO, err.msg);
    else
      report(a, "get-slice", name, bytes, "to", file, rank);
  }
  cli_npy_free(&arr);
  tshard_info_clear(&info);
  return code;
}

/* reshard A B C --to ATTR: one batch, every tensor to the same attribute. */
static int reshard_batch(cli_args *a, tshard_client *c, const char *to,
                         const tshard_reshard_opts *o) {
  if (o->keep_source_as)
    return cli_fail(CLI_USAGE, "--keep-as takes one tensor; a batch of several reshards in place");
  if (o->relabel)
    return cli_fail(CLI_USAGE, "--relabel takes one tensor; a batch keeps every target's ranks");
  const char *to_all[CLI_MAX_POS];
  for (int i = 0; i < a->npos; i++)
    to_all[i] = to;
  int rc = tshard_reshard_many(c, a->npos, a->pos, to_all, o);
  if (rc)
    return failed(c, rc);
  if (!a->json) {
    printf("reshard of %d tensors -> %s: done\n", a->npos, to);
    return CLI_OK;
  }
  printf("{\"operation\": \"reshard_many\", \"names\": [");
  for (int i = 0; i < a->npos; i++) {
    printf("%s", i ? ", " : "");
    cli_json_string(stdout, a->pos[i]);
  }
  printf("]}\n");
  return CLI_OK;
}

int cli_cmd_reshard(cli_args *a, tshard_client *c) {
  const char *name = need_name(a), *to = cli_opt(a, "to");
  if (!name)
    return CLI_USAGE;
  if (!to)
    return cli_fail(CLI_USAGE, "reshard needs --to ATTR");
  int code = CLI_OK;
  tshard_reshard_opts o = {.strategy = cli_opt(a, "strategy"),
                           .keep_source_as = cli_opt(a, "keep-as"),
                           .layout = cli_opt(a, "layout"),
                           .key = opt_key(a),
                           .relabel = cli_flag(a, "relabel")};
  const char *cast = cli_opt(a, "dtype");
  ts_dtype cast_dt;
  ts_error err;
  if (cast && ts_dtype_parse_spelling(cast, &cast_dt, &err))
    return cli_fail(CLI_USAGE, err.msg);
  o.dtype = cast ? ts_dtype_name(cast_dt) : NULL;
  int g = cli_apply_group(a, c);
  if (g)
    return g;
  if (a->npos > 1)
    return reshard_batch(a, c, to, &o);
  char strategy[32] = "?";
  uint64_t us = 0; /* the strategy the daemons ran and its time (an old daemon: unknown) */
  int rc = cli_reshard_progress(a, c, name, to, &o, strategy, sizeof strategy, &us);
  int nranks = rc ? 0 : tshard_reshard_ranks(c, NULL, 0);
  int *ranks = nranks ? malloc((size_t)nranks * sizeof *ranks) : NULL;
  if (ranks)
    tshard_reshard_ranks(c, ranks, nranks);
  if (rc)
    code = failed(c, rc);
  else if (!a->json) {
    printf("reshard %s -> %s%s%s%s: done by %s in %.3f ms", name,
           o.keep_source_as ? o.keep_source_as : name, o.dtype ? " (" : "", o.dtype ? o.dtype : "",
           o.dtype ? ")" : "", strategy, (double)us / 1000.0);
    for (int i = 0; ranks && i < nranks; i++)
      printf("%s%d", i ? "," : "; ranks ", ranks[i]);
    printf("\n");
  } else {
    printf("{\"operation\": \"reshard\", \"name\": ");
    cli_json_string(stdout, name);
    printf(", \"result\": ");
    cli_json_string(stdout, o.keep_source_as ? o.keep_source_as : name);
    printf(", \"strategy\": ");
    cli_json_string(stdout, strategy);
    if (o.dtype)
      printf(", \"dtype\": \"%s\"", o.dtype);
    for (int i = 0; ranks && i < nranks; i++)
      printf("%s%d", i ? ", " : ", \"ranks\": [", ranks[i]);
    printf("%s, \"ms\": %.3f}\n", ranks ? "]" : "", (double)us / 1000.0);
  }
  free(ranks);
  return code;
}

int cli_cmd_drop(cli_args *a, tshard_client *c) {
  const char *name = need_name(a);
  if (!name)
    return CLI_USAGE;
  int code = CLI_OK;
  int g = cli_apply_group(a, c);
  if (g)
    return g;
  int rc = a->npos > 1 ? tshard_drop_many(c, a->npos, a->pos, opt_key(a))
                       : tshard_drop(c, name, opt_key(a));
  code = rc ? failed(c, rc) : CLI_OK;
  return code;
}

int cli_cmd_list(cli_args *a, tshard_client *c) {
  int code = CLI_OK;
  char **names = NULL;
  int n = 0, rc = tshard_list(c, &names, &n);
  if (rc) {
    code = failed(c, rc);
  } else if (a->json) {
    printf("[");
    for (int i = 0; i < n; i++) {
      printf("%s", i ? ", " : "");
      cli_json_string(stdout, names[i]);
    }
    printf("]\n");
  } else {
    for (int i = 0; i < n; i++)
      printf("%s\n", names[i]);
  }
  tshard_free_names(names, n);
  return code;
}

/* describe without a tensor: the job's layout. */
static int describe_job(cli_args *a, tshard_client *c) {
  tshard_job job;
  int rc = tshard_describe_job(c, &job);
  int code = rc ? failed(c, rc) : cli_job_describe(a, &job);
  tshard_job_clear(&job);
  return code;
}

int cli_cmd_describe(cli_args *a, tshard_client *c) {
  const char *name = cli_positional(a, 0);
  if (!name)
    return describe_job(a, c);
  int code = CLI_OK;
  tshard_info info = {0};
  int rc = tshard_describe(c, name, &info);
  if (rc) {
    code = failed(c, rc);
  } else if (a->json) {
    printf("{\"name\": ");
    cli_json_string(stdout, info.name);
    printf(", \"dtype\": \"%s\", \"shape\": [", info.dtype);
    for (int d = 0; d < info.ndim; d++)
      printf("%s%lld", d ? ", " : "", (long long)info.shape[d]);
    printf("], \"attr\": ");
    cli_json_string(stdout, info.attr ? info.attr : "");
    printf(", \"layout\": "); /* as the text shows it */
    cli_json_string(stdout, info.layout[0] ? info.layout : "row-major");
    printf(", \"ranks\": [");
    for (int i = 0; i < info.nranks; i++) {
      printf("%s{\"rank\": %d, \"bytes\": %llu, \"lo\": [", i ? ", " : "", info.ranks[i].rank,
             (unsigned long long)info.ranks[i].bytes);
      for (int d = 0; d < info.ndim; d++)
        printf("%s%lld", d ? ", " : "", (long long)info.ranks[i].lo[d]);
      printf("], \"hi\": [");
      for (int d = 0; d < info.ndim; d++)
        printf("%s%lld", d ? ", " : "", (long long)info.ranks[i].hi[d]);
      printf("]}");
    }
    printf("]}\n");
  } else {
    printf("%s: %s[", info.name, info.dtype);
    for (int d = 0; d < info.ndim; d++)
      printf("%s%lld", d ? "," : "", (long long)info.shape[d]);
    printf("]\n  attr:   %s\n  layout: %s\n", info.attr ? info.attr : "",
           info.layout[0] ? info.layout : "row-major");
    for (int i = 0; i < info.nranks; i++) {
      printf("  rank %d: %llu bytes, box [", info.ranks[i].rank,
             (unsigned long long)info.ranks[i].bytes);
      for (int d = 0; d < info.ndim; d++)
        printf("%s%lld:%lld", d ? "," : "", (long long)info.ranks[i].lo[d],
               (long long)info.ranks[i].hi[d]);
      printf("]\n");
    }
  }
  tshard_info_clear(&info);
  return code;
}

int cli_cmd_stats(cli_args *a, tshard_client *c) {
  int code = CLI_OK;
  tshard_stats s;
  tshard_job job = {0};
  int rc = tshard_stats_get(c, &s);
  if (rc == TS_OK && tshard_describe_job(c, &job) != TS_OK) /* the rest still shows */
    fprintf(stderr, "tshard: stats without the job's layout: %s\n", tshard_last_message(c));
  if (rc) {
    code = failed(c, rc);
  } else if (a->json) {
    printf("{\"operations\": %llu, \"collective_ops\": %llu, \"tensors\": %llu, "
           "\"memory_in_use\": %llu, \"memory_limit\": %llu, \"connections\": %llu, "
           "\"pool\": {\"stored\": %llu, \"staging\": %llu, \"cached\": %llu, \"peak\": %llu, "
           "\"cache_cap\": %llu, \"hits\": %llu, \"misses\": %llu, \"released\": %llu}, "
           "\"strategies\": {",
           (unsigned long long)s.operations, (unsigned long long)s.collective_ops,
           (unsigned long long)s.tensors, (unsigned long long)s.memory_in_use,
           (unsigned long long)s.memory_limit, (unsigned long long)s.connections,
           (unsigned long long)s.stored_bytes, (unsigned long long)s.pool_staging,
           (unsigned long long)s.pool_cached, (unsigned long long)s.pool_peak,
           (unsigned long long)s.pool_cache_cap, (unsigned long long)s.pool_hits,
           (unsigned long long)s.pool_misses, (unsigned long long)s.pool_released);
    for (int i = 0; i < s.nstrategies; i++)
      printf("%s\"%s\": {\"reshards\": %llu, \"bytes_sent\": %llu, \"bytes_received\": %llu, "
             "\"relayed\": %llu}",
             i ? ", " : "", s.strategies[i].name, (unsigned long long)s.strategies[i].reshards,
             (unsigned long long)s.strategies[i].bytes_sent,
             (unsigned long long)s.strategies[i].bytes_received,
             (unsigned long long)s.strategies[i].relayed);
    printf("}, \"topology\": ");
    cli_json_string(stdout, s.topology);
    printf(", \"hosts\": %d, \"host\": %d, \"host_name\": ", s.hosts, s.host);
    cli_json_string(stdout, s.host_name);
    printf(", \"numa\": %d, ", s.numa);
    cli_job_json_fields(&job);
    printf(", \"ops\": {");
    for (int i = 0; i < s.nops; i++)
      printf("%s\"%s\": {\"count\": %llu, \"p50_us\": %llu, \"p99_us\": %llu, "
             "\"batch_p50\": %llu, \"batch_max\": %llu}",
             i ? ", " : "", s.ops[i].kind, (unsigned long long)s.ops[i].count,
             (unsigned long long)s.ops[i].p50_us, (unsigned long long)s.ops[i].p99_us,
             (unsigned long long)s.ops[i].batch_p50, (unsigned long long)s.ops[i].batch_max);
    printf("}, \"saves\": [");
    for (int i = 0; i < s.nsaves; i++) {
      const tshard_save_stats *v = &s.saves[i];
      printf("%s{\"save_id\": %llu, \"dir\": ", i ? ", " : "", (unsigned long long)v->save_id);
      cli_json_string(stdout, v->dir);
      printf(", \"state\": \"%s\", \"bytes_written\": %llu, \"bytes_total\": %llu, "
             "\"checkpoint_bytes\": %llu, \"seconds\": %.3f, \"status\": %d, \"message\": ",
             v->state, (unsigned long long)v->bytes_written, (unsigned long long)v->bytes_total,
             (unsigned long long)v->checkpoint_bytes, v->seconds, v->status);
      cli_json_string(stdout, v->message);
      printf("}");
    }
    printf("]}\n");
  } else {
    char limit[64] = "no limit";
    if (s.memory_limit)
      snprintf(limit, sizeof limit, "limit %llu", (unsigned long long)s.memory_limit);
    printf("operations %llu (collective %llu), tensors %llu, memory in use %llu bytes (%s), "
           "connections %llu\n",
           (unsigned long long)s.operations, (unsigned long long)s.collective_ops,
           (unsigned long long)s.tensors, (unsigned long long)s.memory_in_use, limit,
           (unsigned long long)s.connections);
    char numa[32] = "unknown";
    if (s.numa >= 0)
      snprintf(numa, sizeof numa, "%d", s.numa);
    printf("hosts: %d (%s), this rank on host %d (%s), NUMA node %s\n", s.hosts, s.topology, s.host,
           s.host_name, numa);
    code = cli_job_text(&job);
    printf("pool: stored %llu, staging %llu, cached %llu (cap %llu), peak %llu bytes; "
           "%llu hits, %llu misses, %llu bytes released\n",
           (unsigned long long)s.stored_bytes, (unsigned long long)s.pool_staging,
           (unsigned long long)s.pool_cached, (unsigned long long)s.pool_cache_cap,
           (unsigned long long)s.pool_peak, (unsigned long long)s.pool_hits,
           (unsigned long long)s.pool_misses, (unsigned long long)s.pool_released);
    for (int i = 0; i < s.nstrategies; i++)
      printf("  %-15s %llu reshards (%llu relayed), %llu bytes sent, %llu received\n",
             s.strategies[i].name, (unsigned long long)s.strategies[i].reshards,
             (unsigned long long)s.strategies[i].relayed,
             (unsigned long long)s.strategies[i].bytes_sent,
             (unsigned long long)s.strategies[i].bytes_received);
    if (s.nops)
      printf("latency per operation (last 1024 of each): kind, count, p50 us, p99 us, "
             "tensors per run p50 / max\n");
    for (int i = 0; i < s.nops; i++)
      printf("  %-15s %llu, p50 %llu us, p99 %llu us, batch %llu / %llu\n", s.ops[i].kind,
             (unsigned long long)s.ops[i].count, (unsigned long long)s.ops[i].p50_us,
             (unsigned long long)s.ops[i].p99_us, (unsigned long long)s.ops[i].batch_p50,
             (unsigned long long)s.ops[i].batch_max);
    if (s.nsaves)
      printf("background saves (this daemon's bytes):\n");
    for (int i = 0; i < s.nsaves; i++) {
      const tshard_save_stats *v = &s.saves[i];
      printf("  save %llu to %s: %s, %llu of %llu bytes written, %.1f s%s%s\n",
             (unsigned long long)v->save_id, v->dir, v->state, (unsigned long long)v->bytes_written,
             (unsigned long long)v->bytes_total, v->seconds, v->status ? ": " : "", v->message);
    }
  }
  tshard_job_clear(&job);
  return code;
}

int cli_cmd_shutdown(cli_args *a, tshard_client *c) {
  int code = CLI_OK;
  int rc = tshard_shutdown(c, opt_key(a));
  code = rc ? failed(c, rc) : CLI_OK;
  if (!rc && !a->json)
    printf("the daemons of the job are shutting down\n");
  return code;
}

/* show NAME: the tensor's attribute and shape from the daemon, drawn. */
int cli_cmd_show_tensor(cli_args *a, const char *name) {
  tshard_client *c;
  int code = cli_connect(a, &c);
  if (code)
    return code;
  tshard_info info = {0};
  int rc = tshard_describe(c, name, &info);
  if (rc)
    code = failed(c, rc);
  else
    code = cli_draw(a, info.name, info.dtype, info.ndim, info.shape, info.attr);
  tshard_info_clear(&info);
  tshard_close(&c);
  return code;
}
