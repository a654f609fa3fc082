/* cmd_trace.c - `tshard trace`: the operations every daemon of a job recorded in its trace ring,
 * gathered rank by rank (tshard_trace_get), written as a Chrome trace event file that Perfetto
 * and chrome://tracing open (--out), or summed up per operation kind (--summary: where the time
 * went, as the share of each span).
 *
 * The file has one process (the job) and a track per rank (more where its operations overlap in
 * time: lanes_of); each operation is a complete event
 * ("ph":"X") from the first point it reached on that rank to the last, named by its kind and
 * tensor, with its sequence number, strategy, bytes and status as arguments, and inside it one
 * event per span between two consecutive points it reached (queued, ordering, waiting, planning,
 * agreeing, moving, committing, finishing, answering; a local operation's run is "running").
 * Times are in rank 0's clock (the daemons add their offsets, measured at start-up, which the file
 * states in otherData with their error), in microseconds from the earliest point. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tshard.h"

/* The span that ends at each point (the one before it that the operation reached starts it). */
static const char *const span_names[TSHARD_TRACE_POINTS] = {
    "",         "queued", "ordering",   "waiting",   "planning",
    "agreeing", "moving", "committing", "finishing", "answering",
};
#define SPANS (TSHARD_TRACE_POINTS + 1) /* and "running": a local operation's start to end */
#define SPAN_RUNNING TSHARD_TRACE_POINTS

static int span_of(int from, int to) {
  return from == TSHARD_PT_STARTED && to == TSHARD_PT_ENDED ? SPAN_RUNNING : to;
}

static const char *span_name(int s) { return s == SPAN_RUNNING ? "running" : span_names[s]; }

typedef struct gathered {
  int nranks;
  tshard_trace *t; /* one per rank */
  int64_t t0;      /* the earliest point of all */
} gathered;

static void gathered_free(gathered *g) {
  for (int r = 0; g->t && r < g->nranks; r++)
    tshard_trace_clear(&g->t[r]);
  free(g->t);
}

/* Every rank's trace, rank 0 first (which tells the job's size). */
static int gather(const cli_args *a, uint32_t last, int64_t within_ns, gathered *g) {
  const char *job = cli_opt(a, "job"), *to = cli_opt(a, "timeout");
  if (!job)
    job = getenv("TSHARD_JOB") ? getenv("TSHARD_JOB") : "default";
  int timeout_ms = to ? (int)(atof(to) * 1000) : TSHARD_DEFAULT_TIMEOUT_MS;
  if (timeout_ms <= 0)
    return cli_fail(CLI_USAGE, "--timeout: expected a positive number of seconds");
  g->nranks = 1;
  g->t0 = INT64_MAX;
  for (int r = 0; r < g->nranks; r++) {
    tshard_client *c = NULL;
    int rc = TS_OK, me = 0, world = 0;
    if (cli_opt(a, "tcp")) {
      int code = cli_connect_tcp(a, r, timeout_ms, &c, &rc); /* rank r listens on PORT + r */
      if (code)
        return code;
    } else {
      rc = tshard_connect_rank(job, r, timeout_ms, &c);
    }
    if (rc) {
      char msg[900];
      snprintf(msg, sizeof msg, "rank %d: %s", r,
               cli_opt(a, "tcp") ? "could not connect over TCP" : tshard_connect_message());
      return cli_fail(CLI_CONNECT, msg);
    }
    if (r == 0 && (rc = tshard_ping(c, &me, &world)) == TS_OK && world > 0) {
      g->nranks = world;
      g->t = calloc((size_t)world, sizeof *g->t);
      rc = g->t ? TS_OK : TS_NO_MEMORY;
    }
    if (rc == TS_OK)
      rc = tshard_trace_get(c, last, within_ns, &g->t[r]);
    if (rc) {
      char msg[600];
      snprintf(msg, sizeof msg, "rank %d: %s", r, tshard_last_message(c));
      tshard_close(&c);
      return cli_fail(rc, msg);
    }
    tshard_close(&c);
    for (int k = 0; k < g->t[r].nops; k++)
      for (int p = 0; p < TSHARD_TRACE_POINTS; p++)
        if (g->t[r].ops[k].points[p] && g->t[r].ops[k].points[p] < g->t0)
          g->t0 = g->t[r].ops[k].points[p];
  }
  return CLI_OK;
}

/* The first and last points an operation reached (indexes), -1 when none. */
static void bounds(const tshard_trace_op *o, int *first, int *last) {
  *first = *last = -1;
  for (int p = 0; p < TSHARD_TRACE_POINTS; p++)
    if (o->points[p]) {
      if (*first < 0)
        *first = p;
      *last = p;
    }
}

static double us_of(const gathered *g, int64_t t) { return (double)(t - g->t0) / 1e3; }

/* An operation's first and last times (0, 0 when it reached no point). */
static void extent(const tshard_trace_op *o, int64_t *a, int64_t *b) {
  int first, last;
  bounds(o, &first, &last);
  *a = first < 0 ? 0 : o->points[first];
  *b = first < 0 ? 0 : o->points[last];
}

static const tshard_trace_op *sort_ops; /* qsort's context: one thread, one rank at a time */
static int by_start(const void *x, const void *y) {
  int64_t ax, bx, ay, by;
  extent(&sort_ops[*(const int *)x], &ax, &bx);
  extent(&sort_ops[*(const int *)y], &ay, &by);
  return ax < ay ? -1 : ax > ay ? 1 : bx < by ? -1 : bx > by;
}

/* A lane for each operation such that no two on one lane overlap, the lowest free one taken in
 * order of start: viewers of the Chrome format nest the slices of one track, so an operation
 * that began before the previous one ended goes on a track of its own. Returns the lanes used
 * (lane[] left 0 when out of memory). */
static int lanes_of(const tshard_trace_op *ops, int n, int *lane) {
  int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  int64_t *ends = malloc((size_t)(n ? n : 1) * sizeof *ends);
  int used = 1;
  memset(lane, 0, (size_t)n * sizeof *lane);
  if (order && ends) {
    used = 0;
    for (int i = 0; i < n; i++)
      order[i] = i;
    sort_ops = ops;
    qsort(order, (size_t)n, sizeof *order, by_start);
    for (int j = 0; j < n; j++) {
      int64_t a, b;
      extent(&ops[order[j]], &a, &b);
      int k = 0;
      while (k < used && ends[k] > a)
        k++;
      if (k == used)
        used++;
      ends[k] = b;
      lane[order[j]] = k;
    }
    if (!used)
      used = 1;
  }
  free(order), free(ends);
  return used;
}

static void write_op(FILE *f, const gathered *g, int r, int tid, const tshard_trace_op *o,
                     bool *comma) {
  int first, last;
  bounds(o, &first, &last);
  if (first < 0)
    return;
  char title[128];
  snprintf(title, sizeof title, "%s %s", o->kind, o->name);
  fprintf(f, "%s\n{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"cat\":",
          *comma ? "," : "", tid, us_of(g, o->points[first]),
          (double)(o->points[last] - o->points[first]) / 1e3);
  cli_json_string(f, o->kind);
  fprintf(f, ",\"name\":");
  cli_json_string(f, title);
  fprintf(f, ",\"args\":{\"seq\":%" PRIu64 ",\"tensor\":", o->seq);
  cli_json_string(f, o->name);
  fprintf(f, ",\"strategy\":");
  cli_json_string(f, o->strategy);
  fprintf(f,
          ",\"status\":%d,\"bytes_sent\":%" PRIu64 ",\"bytes_received\":%" PRIu64
          ",\"origin\":%s,\"request_id\":%" PRIu64 ",\"rank\":%d}}",
          o->status, o->bytes_sent, o->bytes_received, o->origin ? "true" : "false", o->request_id,
          r);
  *comma = true;
  for (int p = first + 1, prev = first; p <= last; p++) {
    if (!o->points[p])
      continue;
    fprintf(f,
            ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"cat\":\"span\","
            "\"name\":\"%s\",\"args\":{\"seq\":%" PRIu64 "}}",
            tid, us_of(g, o->points[prev]), (double)(o->points[p] - o->points[prev]) / 1e3,
            span_name(span_of(prev, p)), o->seq);
    prev = p;
  }
}

static int write_chrome(const char *path, const char *job, const gathered *g) {
  FILE *f = fopen(path, "w");
  if (!f) {
    char msg[600];
    snprintf(msg, sizeof msg, "--out %s: cannot write it", path);
    return cli_fail(CLI_IO, msg);
  }
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"job\":");
  cli_json_string(f, job);
  fprintf(f, ",\"clock\":\"each rank's CLOCK_MONOTONIC plus its offset to rank 0's, measured at "
             "start-up; the error is within half the round trip\",\"ranks\":[");
  for (int r = 0; r < g->nranks; r++)
    fprintf(f,
            "%s{\"rank\":%d,\"clock_offset_ns\":%" PRId64 ",\"clock_rtt_ns\":%" PRId64
            ",\"ring\":%u,\"dropped\":%" PRIu64 "}",
            r ? "," : "", r, g->t[r].clock_offset_ns, g->t[r].clock_rtt_ns, g->t[r].ring,
            g->t[r].dropped);
  fprintf(f, "]},\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":0,\"name\":\"process_name\","
             "\"args\":{\"name\":");
  char pname[160];
  snprintf(pname, sizeof pname, "tshard job %s", job);
  cli_json_string(f, pname);
  fprintf(f, "}}");
  bool comma = true;
  for (int r = 0; r < g->nranks; r++) {
    int n = g->t[r].nops;
    int *lane = malloc((size_t)(n ? n : 1) * sizeof *lane);
    int used = lane ? lanes_of(g->t[r].ops, n, lane) : 1;
    for (int k = 0; k < used; k++) {
      char tname[340];
      int tid = r + k * g->nranks;
      snprintf(tname, sizeof tname, k ? "rank %d (%s), overlapping %d" : "rank %d (%s)", r,
               g->t[r].host, k);
      fprintf(f,
              ",\n{\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"name\":\"thread_name\",\"args\":"
              "{\"name\":",
              tid);
      cli_json_string(f, tname);
      fprintf(f,
              "}},\n{\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"name\":\"thread_sort_index\","
              "\"args\":{\"sort_index\":%d}}",
              tid, r * 64 + k);
    }
    for (int k = 0; k < n; k++)
      write_op(f, g, r, r + (lane ? lane[k] : 0) * g->nranks, &g->t[r].ops[k], &comma);
    free(lane);
  }
  fprintf(f, "\n]}\n");
  if (fclose(f) != 0) {
    char msg[600];
    snprintf(msg, sizeof msg, "--out %s: the write failed", path);
    return cli_fail(CLI_IO, msg);
  }
  return CLI_OK;
}

/* Per kind: operations (rank records), their time from first to last point, and each span's. */
#define KINDS 64
typedef struct kind_sum {
  char kind[32];
  uint64_t n;
  double total_us, span_us[SPANS];
} kind_sum;

static int summarize(const gathered *g, kind_sum *k) {
  int nk = 0;
  for (int r = 0; r < g->nranks; r++)
    for (int i = 0; i < g->t[r].nops; i++) {
      const tshard_trace_op *o = &g->t[r].ops[i];
      int first, last, j = 0;
      bounds(o, &first, &last);
      if (first < 0)
        continue;
      while (j < nk && strcmp(k[j].kind, o->kind) != 0)
        j++;
      if (j == nk) {
        if (nk == KINDS)
          continue;
        memset(&k[nk], 0, sizeof k[nk]);
        snprintf(k[nk++].kind, sizeof k[0].kind, "%s", o->kind);
      }
      k[j].n++;
      k[j].total_us += (double)(o->points[last] - o->points[first]) / 1e3;
      for (int p = first + 1, prev = first; p <= last; p++)
        if (o->points[p]) {
          k[j].span_us[span_of(prev, p)] += (double)(o->points[p] - o->points[prev]) / 1e3;
          prev = p;
        }
    }
  return nk;
}

static void print_summary(const gathered *g, bool json) {
  kind_sum k[KINDS];
  int nk = summarize(g, k);
  if (json)
    printf("{\"ranks\":%d,\"kinds\":[", g->nranks);
  for (int j = 0; j < nk; j++) {
    double mean = k[j].total_us / (double)k[j].n;
    if (json) {
      printf("%s{\"kind\":", j ? "," : "");
      cli_json_string(stdout, k[j].kind);
      printf(",\"records\":%" PRIu64 ",\"mean_us\":%.1f,\"share\":{", k[j].n, mean);
    } else {
      printf("%s: %" PRIu64 " records over %d ranks, mean %.1f us:", k[j].kind, k[j].n, g->nranks,
             mean);
    }
    bool first = true;
    for (int s = 1; s < SPANS; s++) {
      if (k[j].span_us[s] <= 0)
        continue;
      double share = k[j].total_us > 0 ? 100.0 * k[j].span_us[s] / k[j].total_us : 0;
      if (json)
        printf("%s\"%s\":%.2f", first ? "" : ",", span_name(s), share);
      else
        printf("%s %s %.1f%%", first ? "" : ",", span_name(s), share);
      first = false;
    }
    printf(json ? "}}" : "\n");
  }
  if (json)
    printf("]}\n");
  else if (nk == 0)
    printf("no operations recorded (the daemons' --trace-ring may be 0)\n");
}

int cli_cmd_trace(cli_args *a) {
  const char *last_s = cli_opt(a, "last"), *since = cli_opt(a, "since"), *out = cli_opt(a, "out");
  char *end = NULL;
  long last = last_s ? strtol(last_s, &end, 10) : 0;
  if (last_s && (*end || last <= 0 || last > 1 << 20))
    return cli_fail(CLI_USAGE, "--last: expected a count of operations, 1 to 1048576");
  int within_ms = 0;
  if (since && (cli_parse_ms(since, &within_ms) || within_ms == 0))
    return cli_fail(CLI_USAGE, "--since: expected a duration such as 30s or 500ms (the "
                               "operations that ended that long ago or since), at most one day");
  gathered g = {0};
  int code = gather(a, (uint32_t)last, (int64_t)within_ms * 1000000, &g);
  if (code == CLI_OK && out) {
    const char *job = cli_opt(a, "job") ? cli_opt(a, "job") : getenv("TSHARD_JOB");
    code = write_chrome(out, job ? job : "default", &g);
    int n = 0;
    for (int r = 0; r < g.nranks; r++)
      n += g.t[r].nops;
    if (code == CLI_OK && !a->json && !cli_flag(a, "summary"))
      printf("wrote %d operation records of %d ranks to %s\n", n, g.nranks, out);
  }
  if (code == CLI_OK && (!out || cli_flag(a, "summary")))
    print_summary(&g, a->json);
  gathered_free(&g);
  return code;
}
