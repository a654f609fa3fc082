/* config.c - tshardd's settings. One table {name, kind, bounds, default, help} serves the flag
 * parser, --help and the startup log, so a setting added here is documented and logged at once.
 * Sizes accept K, M and G suffixes (powers of 1024); counts are plain decimal numbers; durations
 * ms or s (default s). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tsd_base.h"
#include "ts_rules.h"
#include "ts_plan.h" /* the bound of --staging */

/* CFG_MEMORY: a size, or "auto" (stored as TSD_MEMORY_AUTO, resolved in main.c). */
/* CFG_RULE: a string each use of the flag appends (--resume-attr). */
/* CFG_COUNT: a plain decimal number of things (no K/M/G: 5K snapshots are not 5120). */
typedef enum {
  CFG_STRING,
  CFG_SIZE,
  CFG_COUNT,
  CFG_DURATION,
  CFG_LEVEL,
  CFG_MEMORY,
  CFG_RULE
} cfg_kind;

typedef struct cfg_entry {
  const char *name;
  cfg_kind kind;
  size_t offset, cap; /* field in tsd_config; cap for strings */
  int64_t min, max;   /* sizes; durations in ms */
  const char *def;
  const char *help;
} cfg_entry;

#define STR(field) CFG_STRING, offsetof(tsd_config, field), sizeof(((tsd_config *)0)->field), 0, 0
#define SIZE(field, lo, hi) CFG_SIZE, offsetof(tsd_config, field), 0, lo, hi
#define COUNT(field, lo, hi) CFG_COUNT, offsetof(tsd_config, field), 0, lo, hi

static const cfg_entry table[] = {
    {"socket-dir", STR(socket_dir), "",
     "directory of the Unix sockets (created 0700; default $TSHARD_SOCKET_DIR, "
     "$XDG_RUNTIME_DIR/tshard or /tmp/tshard-<uid>)"},
    {"job", STR(job), "default", "job id: sockets are <dir>/tshard-<job>-<rank>.sock"},
    {"listen", STR(listen), "",
     "also listen on tcp://HOST:PORT (PORT+rank per rank; needs --token-file)"},
    {"token-file", STR(token_file), "",
     "file holding the token TCP clients must present (8 to 255 printable characters; the file "
     "readable by its owner only)"},
    {"metrics", STR(metrics), "",
     "serve Prometheus metrics (GET /metrics, no token) on HOST:PORT (PORT+rank per rank; empty "
     "host or localhost: 127.0.0.1; another address than loopback needs --metrics-remote 1); off "
     "when empty"},
    {"metrics-remote", COUNT(metrics_remote, 0, 1), "0",
     "1: --metrics may bind an address other than loopback (whoever reaches it reads the "
     "numbers: there is no token)"},
    {"metrics-page", COUNT(metrics_page, 0, 1), "1",
     "1: rank 0's --metrics port also serves the live page (GET /, /api/ranks, /api/tensors: "
     "the tensors' names, shapes and attributes, never their data); 0: only /metrics"},
    {"max-frame", SIZE(max_frame, 1024, 1LL << 30), "64M", "largest frame accepted or sent"},
    {"memory-limit", CFG_MEMORY, offsetof(tsd_config, memory_limit), 0, 0, 1LL << 50, "auto",
     "bytes of stored slices, staging and the pool's kept buffers per daemon; auto: "
     "80% of the node's MemAvailable at start divided by the daemons of the job on this node; "
     "0: no limit"},
    {"staging", SIZE(staging, 1LL << 16, TS_PLAN_STAGING_MAX), "64M",
     "executor staging chunk per rank (at most 1G: the reshard planner's bound)"},
    {"chunk", SIZE(chunk, 1024, 1LL << 30), "16M", "default data chunk of get answers"},
    {"ckpt-chunk", SIZE(ckpt_chunk, 0, 1LL << 40), "16M",
     "checkpoint saves cut pieces larger than twice this into chunks of about this size, each "
     "with its own checksum (0: whole pieces; else at least 4K; shard/ckpt/CHECKPOINT.md)"},
    {"copy-threads", COUNT(copy_threads, 0, 1024), "0",
     "threads of the strided-copy kernel (0: the node's cores shared among its ranks)"},
    {"frame-timeout", CFG_DURATION, offsetof(tsd_config, frame_timeout), 0, 10, 3600000, "30s",
     "time a client has to send a whole frame once it began one (ms or s suffix; default unit s)"},
    {"auth-timeout", CFG_DURATION, offsetof(tsd_config, auth_timeout), 0, 10, 3600000, "2s",
     "time a TCP client has to present its token after connecting; then it is closed (ms or s "
     "suffix)"},
    {"max-unauthenticated", COUNT(max_unauth, 1, 1LL << 20), "64",
     "TCP connections that have not presented their token yet, at most; past it a new TCP "
     "connection is closed at once (Unix-socket clients never count)"},
    {"max-inflight", COUNT(max_inflight, 1, 4096), "64",
     "requests of one connection with the engine at once; past it the connection is not read "
     "until one is answered (bounds what one client makes the daemon hold)"},
    {"pool-cache", SIZE(pool_cache, 0, 1LL << 50), "1G",
     "freed buffers kept for reuse, at most (0: none; the memory limit counts them too)"},
    {"pool-idle-ms", COUNT(pool_idle_ms, 0, 86400000), "2000",
     "milliseconds a cached buffer stays unused before it goes back to the OS"},
    {"pool-huge", COUNT(pool_huge, 0, 1), "1",
     "1: stored slices and staging ask for transparent huge pages"},
    {"key-ttl", CFG_DURATION, offsetof(tsd_config, key_ttl), 0, 1, 86400000, "600s",
     "an idempotency key's answer is remembered this long (retries of the identical request get "
     "it; ms or s suffix)"},
    {"key-max", COUNT(key_max, 16, 1LL << 24), "16384",
     "idempotency keys remembered at most (the oldest answered one gives way)"},
    {"trace-ring", COUNT(trace_ring, 0, 1LL << 20), "4096",
     "operations whose spans each daemon keeps for `tshard trace` (the oldest gives way; 0: "
     "tracing off)"},
    {"collective-timeout", CFG_DURATION, offsetof(tsd_config, collective_timeout), 0, 10, 86400000,
     "60s",
     "how long a collective naming participants waits for all of them unless the request says "
     "(ms or s suffix)"},
    {"collective-timeout-max", CFG_DURATION, offsetof(tsd_config, collective_timeout_max), 0, 10,
     86400000, "600s",
     "the longest collective_timeout_ms a request may ask (longer: INVALID_ARGUMENT; at least "
     "--collective-timeout)"},
    {"collective-pending-max", COUNT(collective_pending_max, 1, 1LL << 20), "64",
     "collectives naming participants one connection may have waiting for them (more: LIMIT)"},
    {"agreement-timeout", CFG_DURATION, offsetof(tsd_config, agreement_timeout), 0, 10, 86400000,
     "300s",
     "how long the ranks of an operation wait for one another where they agree on its outcome; "
     "a rank that does not answer within it fails the operation on every rank, named (ms or s "
     "suffix)"},
    {"batch-max-tensors", COUNT(batch_max_tensors, 1, 1LL << 20), "4096",
     "tensors one batched operation (reshard_many, drop_many) may name (more: LIMIT)"},
    {"batch-max-bytes", SIZE(batch_max_bytes, 1, 1LL << 50), "64G",
     "the whole bytes of the tensors one batched operation may name (more: LIMIT)"},
    {"snapshot-dir", STR(snapshot_dir), "",
     "absolute directory of snapshots: background saves of every tensor into DIR/<UTC "
     "timestamp>/, each atomic (tshard snapshot; --snapshot-every); off when empty"},
    {"snapshot-every", CFG_DURATION, offsetof(tsd_config, snapshot_every), 0, 0, 86400000 * 7LL,
     "0",
     "time between periodic snapshots (0: on demand only; ms or s suffix; needs "
     "--snapshot-dir)"},
    {"snapshot-keep", COUNT(snapshot_keep, 1, 100000), "3",
     "complete snapshots kept in --snapshot-dir, a plain count: the newest by their recorded "
     "sequence (older ones removed after each snapshot)"},
    {"shutdown-save-wait", CFG_DURATION, offsetof(tsd_config, shutdown_save_wait), 0, 0, 86400000,
     "20s",
     "how long a shutdown (request, SIGTERM or SIGINT) waits for a background save or snapshot "
     "still writing; past it the save is abandoned on every rank (its temporary directory "
     "removed, the previous checkpoint kept), and the log says which (ms or s suffix)"},
    {"resume", STR(resume_dir), "",
     "before serving, restore the latest complete snapshot or checkpoint in this absolute "
     "directory (DIR itself, or its newest subdirectory holding a complete checkpoint); "
     "refused before serving when there is none or it does not fit the job"},
    {"resume-attr", CFG_RULE, offsetof(tsd_config, resume_attr), 0, 0, 0, "",
     "'GLOB=ATTR' (repeatable, at most 16): tensors whose saved ranks are not all in this job "
     "are restored under the ATTR of the rule naming them, else of the first whose glob "
     "matches their name ('*', '?', '[a-z]', '[!a]'; the glob ends at the first '=', e.g. "
     "'*=mesh=[2] placements=[S(0)]'), the rules of tshard load --attr"},
    {"link-rates", STR(link_rates), "",
     "the link rates plans weigh, 'host=RATE,cross=RATE' (inside a host, between hosts; e.g. "
     "host=10GB/s,cross=500mbit); a rate not given is measured at start when the job spans "
     "hosts (a 4 MiB exchange between two hosts' first ranks; a copy on rank 0)"},
    {"log-level", CFG_LEVEL, offsetof(tsd_config, log_level), 0, 0, 0, "info",
     "error, warn, info or debug"},
};
#define NTABLE (sizeof table / sizeof table[0])
/* The smallest checkpoint chunk a daemon cuts: one checksum block (smaller chunks only multiply
 * the index's pieces). */
#define CKPT_CHUNK_MIN ((int64_t)4 << 10)

static int parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 0)
    return -1;
  int64_t mul = 1;
  if (*end == 'K' || *end == 'k')
    mul = 1LL << 10, end++;
  else if (*end == 'M' || *end == 'm')
    mul = 1LL << 20, end++;
  else if (*end == 'G' || *end == 'g')
    mul = 1LL << 30, end++;
  if (*end || v > INT64_MAX / mul)
    return -1;
  *out = v * mul;
  return 0;
}

/* A count: decimal digits only. */
static int parse_count(const char *s, int64_t *out) {
  if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 18)
    return -1;
  *out = strtoll(s, NULL, 10);
  return 0;
}

static int parse_duration_ms(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 0 || v > INT64_MAX / 1000)
    return -1;
  if (strcmp(end, "ms") == 0)
    *out = v;
  else if (strcmp(end, "s") == 0 || *end == '\0')
    *out = v * 1000;
  else
    return -1;
  return 0;
}

/* --resume-attr GLOB=ATTR: both parts present, text, the attribute parsed (whether it fits the
 * job's ranks and each tensor is the resume's check). */
static int add_rule(tsd_config *cfg, const char *value) {
  ts_error err;
  ts_attr *a = NULL;
  if (cfg->nresume_attr == TSD_RESUME_RULES_MAX) {
    fprintf(stderr, "tshardd: --resume-attr given more than %d times\n", TSD_RESUME_RULES_MAX);
    return -1;
  }
  if (strlen(value) >= sizeof cfg->resume_attr[0] ||
      ts_text_check("--resume-attr", value, strlen(value), "rules", &err)) {
    fprintf(stderr, "tshardd: --resume-attr: give 'GLOB=ATTR' of at most %zu bytes of text\n",
            sizeof cfg->resume_attr[0] - 1);
    return -1;
  }
  size_t plen;
  const char *attr;
  if (ts_attr_rule_split("--resume-attr", value, &plen, &attr, &err)) {
    fprintf(stderr, "tshardd: expected 'GLOB=ATTR' (the grammar of attribute rules): %s\n",
            err.msg);
    return -1;
  }
  if (ts_attr_parse(attr, &a, &err)) {
    fprintf(stderr, "tshardd: --resume-attr '%s': the attribute: %s\n", value, err.msg);
    return -1;
  }
  ts_attr_destroy(&a);
  snprintf(cfg->resume_attr[cfg->nresume_attr++], sizeof cfg->resume_attr[0], "%s", value);
  return 0;
}

static int apply(tsd_config *cfg, const cfg_entry *e, const char *value) {
  char *base = (char *)cfg + e->offset;
  switch (e->kind) {
  case CFG_STRING:
    if (strlen(value) >= e->cap) {
      fprintf(stderr, "tshardd: --%s is longer than %zu characters\n", e->name, e->cap - 1);
      return -1;
    }
    snprintf(base, e->cap, "%s", value);
    return 0;
  case CFG_SIZE: {
    int64_t v;
    if (parse_size(value, &v) || v < e->min || v > e->max) {
      fprintf(stderr, "tshardd: --%s %s: expected a size from %lld to %lld bytes (K/M/G allowed)\n",
              e->name, value, (long long)e->min, (long long)e->max);
      return -1;
    }
    *(int64_t *)base = v;
    return 0;
  }
  case CFG_COUNT: {
    int64_t v;
    if (parse_count(value, &v) || v < e->min || v > e->max) {
      fprintf(stderr,
              "tshardd: --%s %s: expected a count from %lld to %lld (a plain number, "
              "without K/M/G)\n",
              e->name, value, (long long)e->min, (long long)e->max);
      return -1;
    }
    *(int64_t *)base = v;
    return 0;
  }
  case CFG_DURATION: {
    int64_t v;
    if (parse_duration_ms(value, &v) || v < e->min || v > e->max) {
      fprintf(stderr,
              "tshardd: --%s %s: expected a duration from %lld ms to %lld s (e.g. 30s, "
              "500ms)\n",
              e->name, value, (long long)e->min, (long long)e->max / 1000);
      return -1;
    }
    *(int64_t *)base = v;
    return 0;
  }
  case CFG_MEMORY:
    if (strcmp(value, "auto") == 0) {
      *(int64_t *)base = TSD_MEMORY_AUTO;
      return 0;
    }
    int64_t v;
    if (parse_size(value, &v) || v < e->min || v > e->max) {
      fprintf(stderr,
              "tshardd: --%s %s: expected auto, 0 (no limit) or a size up to %lld bytes "
              "(K/M/G allowed)\n",
              e->name, value, (long long)e->max);
      return -1;
    }
    *(int64_t *)base = v;
    return 0;
  case CFG_RULE: return value[0] ? add_rule(cfg, value) : 0;
  case CFG_LEVEL: {
    int l = tsd_log_parse_level(value);
    if (l < 0) {
      fprintf(stderr, "tshardd: --%s %s: expected error, warn, info or debug\n", e->name, value);
      return -1;
    }
    *(int *)base = l;
    return 0;
  }
  }
  return -1;
}

static void print_help(void) {
  printf("usage: mpirun -np N tshardd [flags]\n\n"
         "One daemon per MPI rank holds slices of named tensors and serves clients over a Unix\n"
         "socket (and TCP when asked). Flags (--name value or --name=value):\n");
  for (size_t i = 0; i < NTABLE; i++) {
    printf("  --%-22s %s", table[i].name, table[i].help);
    if (table[i].def[0])
      printf(" (default: %s)", table[i].def);
    printf("\n");
  }
  printf("  --%-22s this text\n", "help");
  printf("  --%-22s this text as the Markdown reference docs/reference/flags.md\n",
         "help-markdown");
}

/* A table cell: the text with the cell separator and angle brackets escaped. */
static void markdown_cell(const char *s) {
  for (; *s; s++) {
    if (*s == '|')
      fputs("\\|", stdout);
    else if (*s == '<')
      fputs("&lt;", stdout);
    else if (*s == '>')
      fputs("&gt;", stdout);
    else
      putchar(*s);
  }
}

/* docs/reference/flags.md: the same table as --help, generated (a test compares the file with
 * it). */
static void print_markdown(void) {
  printf("# tshardd flags\n\n"
         "Generated by `tshardd --help-markdown` from the daemon's one table of settings "
         "(daemon/config.c), which also serves `--help` and the startup log: do not edit.\n"
         "Every flag is `--name value` or `--name=value`; rank r of a job listens on PORT+r "
         "wherever a flag gives a port.\n\n"
         "| flag | default | what |\n|---|---|---|\n");
  for (size_t i = 0; i < NTABLE; i++) {
    printf("| `--%s` | %s%s%s | ", table[i].name, table[i].def[0] ? "`" : "",
           table[i].def[0] ? table[i].def : "none", table[i].def[0] ? "`" : "");
    markdown_cell(table[i].help);
    printf(" |\n");
  }
  printf("| `--help` | | the flags as text; `--help-markdown`: this page |\n");
}

void tsd_default_socket_dir(char *buf, size_t cap) {
  const char *env = getenv("TSHARD_SOCKET_DIR");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (env && env[0])
    snprintf(buf, cap, "%s", env);
  else if (xdg && xdg[0])
    snprintf(buf, cap, "%s/tshard", xdg);
  else
    snprintf(buf, cap, "/tmp/tshard-%u", (unsigned)getuid());
}

/* --memory-limit auto: this share of the node's MemAvailable at start, divided among the job's
 * daemons on the node. The rest stays for what the node runs beside the daemons: the clients
 * (training processes hold their own copies of what they put and get), the kernel's page cache
 * and the shared segments' other side. Every byte a daemon holds counts: stored slices, staging,
 * shared segments and the pool's kept buffers. */
#define MEMORY_AUTO_PERCENT 80

/* Bytes the kernel says can be had without swapping (MemAvailable), else the free pages; 0 when
 * neither is known. */
static int64_t memory_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  long long kib = -1;
  if (f) {
    char line[256];
    while (kib < 0 && fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %lld kB", &kib) != 1)
        kib = -1;
    fclose(f);
  }
  if (kib >= 0)
    return (int64_t)kib * 1024;
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (int64_t)pages * page : 0;
}

int64_t tsd_memory_auto(int node_daemons, char *why, size_t cap) {
  int64_t avail = memory_available();
  if (node_daemons < 1)
    node_daemons = 1;
  if (avail <= 0) {
    snprintf(why, cap,
             "none: the available memory is unknown (no /proc/meminfo); give "
             "--memory-limit SIZE");
    return 0;
  }
  int64_t limit = avail / 100 * MEMORY_AUTO_PERCENT / node_daemons;
  snprintf(why, cap,
           "auto: %d%% of MemAvailable %lld MiB at start, shared by the %d daemon%s of the job "
           "on this node; --memory-limit SIZE to choose, 0 for none",
           MEMORY_AUTO_PERCENT, (long long)(avail >> 20), node_daemons,
           node_daemons == 1 ? "" : "s");
  return limit > 0 ? limit : 1;
}

/* The rules (length, visible characters, a file only its owner may read) are in proto/rules.c;
 * the CLI reads its --token-file with the same function. */
_Static_assert(sizeof(((tsd_config *)0)->token) == TS_RULES_TOKEN_MAX + 1,
               "the token buffer holds the longest token");

static int load_token(tsd_config *cfg) {
  ts_error err;
  if (ts_token_file_read(cfg->token_file, cfg->token, sizeof cfg->token, &err)) {
    fprintf(stderr, "tshardd: --token-file: %s\n", err.msg);
    return -1;
  }
  return 0;
}

static int parse_listen(tsd_config *cfg) {
  const char *p = cfg->listen;
  if (strncmp(p, "tcp://", 6) != 0) {
    fprintf(stderr, "tshardd: --listen %s: expected tcp://HOST:PORT\n", p);
    return -1;
  }
  p += 6;
  const char *colon = strrchr(p, ':');
  char *end;
  long port = colon ? strtol(colon + 1, &end, 10) : -1;
  if (!colon || (size_t)(colon - p) >= sizeof cfg->tcp_host || *end || port < 1 || port > 65535) {
    fprintf(stderr, "tshardd: --listen %s: expected tcp://HOST:PORT with PORT 1..65535\n",
            cfg->listen);
    return -1;
  }
  memcpy(cfg->tcp_host, p, (size_t)(colon - p));
  cfg->tcp_host[colon - p] = '\0';
  if (!cfg->tcp_host[0] || strcmp(cfg->tcp_host, "localhost") == 0)
    snprintf(cfg->tcp_host, sizeof cfg->tcp_host, "127.0.0.1"); /* loopback by default */
  cfg->tcp_port = (int)port;
  if (!cfg->token_file[0]) {
    fprintf(stderr, "tshardd: --listen needs --token-file (TCP clients must present a token)\n");
    return -1;
  }
  return load_token(cfg);
}

/* --metrics HOST:PORT: an IPv4 address (empty or localhost: 127.0.0.1) and a port; an address
 * outside 127.0.0.0/8 only with --metrics-remote 1, since the endpoint asks no token. */
static int parse_metrics(tsd_config *cfg) {
  const char *p = cfg->metrics, *colon = strrchr(p, ':');
  char *end;
  long port = colon ? strtol(colon + 1, &end, 10) : -1;
  if (!colon || (size_t)(colon - p) >= sizeof cfg->metrics_host || !colon[1] || *end || port < 1 ||
      port > 65535) {
    fprintf(stderr,
            "tshardd: --metrics %s: expected HOST:PORT with PORT 1..65535 (e.g. "
            "127.0.0.1:9400)\n",
            p);
    return -1;
  }
  memcpy(cfg->metrics_host, p, (size_t)(colon - p));
  cfg->metrics_host[colon - p] = '\0';
  if (!cfg->metrics_host[0] || strcmp(cfg->metrics_host, "localhost") == 0)
    snprintf(cfg->metrics_host, sizeof cfg->metrics_host, "127.0.0.1"); /* loopback by default */
  struct in_addr a;
  if (inet_pton(AF_INET, cfg->metrics_host, &a) != 1) {
    fprintf(stderr,
            "tshardd: --metrics %s: '%s' is not an IPv4 address (give e.g. 127.0.0.1, "
            "localhost or an interface's address)\n",
            p, cfg->metrics_host);
    return -1;
  }
  if ((ntohl(a.s_addr) >> 24) != 127 && !cfg->metrics_remote) {
    fprintf(stderr,
            "tshardd: --metrics %s: %s is not a loopback address; the endpoint asks no "
            "token, so add --metrics-remote 1 to serve it there\n",
            p, cfg->metrics_host);
    return -1;
  }
  cfg->metrics_port = (int)port;
  return 0;
}

/* --snapshot-dir: an absolute path of text (it reaches paths and logs), as the directory rule
 * of checkpoints; --snapshot-every needs it, and periods under a second are refused. */
static int check_snapshot(const tsd_config *cfg) {
  const char *d = cfg->snapshot_dir;
  ts_error err;
  if (d[0] && (d[0] != '/' || ts_text_check("--snapshot-dir", d, strlen(d), "paths", &err))) {
    fprintf(stderr, "tshardd: --snapshot-dir '%s': %s\n", d[0] == '/' ? "(not shown)" : d,
            d[0] != '/' ? "give an absolute path (every daemon writes there)" : err.msg);
    return -1;
  }
  if (cfg->snapshot_every > 0 && !d[0]) {
    fprintf(stderr, "tshardd: --snapshot-every needs --snapshot-dir DIR (where the snapshots "
                    "go)\n");
    return -1;
  }
  const char *r = cfg->resume_dir;
  if (r[0] && (r[0] != '/' || ts_text_check("--resume", r, strlen(r), "paths", &err))) {
    fprintf(stderr, "tshardd: --resume: %s\n",
            r[0] != '/' ? "give an absolute path (every "
                          "daemon reads there)"
                        : err.msg);
    return -1;
  }
  if (cfg->nresume_attr > 0 && !r[0]) {
    fprintf(stderr, "tshardd: --resume-attr needs --resume DIR (the rules apply to what it "
                    "restores)\n");
    return -1;
  }
  if (cfg->snapshot_every > 0 && cfg->snapshot_every < 1000) {
    fprintf(stderr, "tshardd: --snapshot-every %lldms: give 0 (on demand only) or at least 1s\n",
            (long long)cfg->snapshot_every);
    return -1;
  }
  return 0;
}

/* --link-rates: parsed onto a one-rank topology (the engine applies it to the job's). */
static int check_link_rates(const tsd_config *cfg) {
  ts_topology *t = NULL;
  ts_error err;
  int rc = cfg->link_rates[0] ? ts_topology_parse("hosts=1x1", &t, &err) : TS_OK;
  if (!rc && t)
    rc = ts_topology_parse_rates(t, cfg->link_rates, &err);
  ts_topology_destroy(&t);
  if (rc)
    fprintf(stderr, "tshardd: --link-rates: %s\n", err.msg);
  return rc ? -1 : 0;
}

int tsd_config_parse(tsd_config *cfg, int argc, char **argv) {
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < NTABLE; i++)
    if (apply(cfg, &table[i], table[i].def))
      return -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      print_help();
      return 1;
    }
    if (strcmp(a, "--help-markdown") == 0) {
      print_markdown();
      return 1;
    }
    if (strncmp(a, "--", 2) != 0) {
      fprintf(stderr, "tshardd: unexpected argument '%s' (see --help)\n", a);
      return -1;
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const cfg_entry *e = NULL;
    for (size_t k = 0; k < NTABLE; k++)
      if (strlen(table[k].name) == nlen && strncmp(table[k].name, name, nlen) == 0)
        e = &table[k];
    if (!e) {
      fprintf(stderr, "tshardd: unknown flag '%s' (see --help)\n", a);
      return -1;
    }
    const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (!value) {
      fprintf(stderr, "tshardd: --%s needs a value\n", e->name);
      return -1;
    }
    if (apply(cfg, e, value))
      return -1;
  }
  if (!cfg->socket_dir[0])
    tsd_default_socket_dir(cfg->socket_dir, sizeof cfg->socket_dir);
  for (const char *p = cfg->job; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_' || *p == '.')) {
      fprintf(stderr, "tshardd: --job %s: use letters, digits, '-', '_' and '.'\n", cfg->job);
      return -1;
    }
  if (!cfg->job[0]) {
    fprintf(stderr, "tshardd: --job must not be empty\n");
    return -1;
  }
  if (cfg->ckpt_chunk > 0 && cfg->ckpt_chunk < CKPT_CHUNK_MIN) {
    fprintf(stderr,
            "tshardd: --ckpt-chunk %lld: expected 0 (whole pieces) or a size of at least "
            "%lld bytes (K/M/G allowed)\n",
            (long long)cfg->ckpt_chunk, (long long)CKPT_CHUNK_MIN);
    return -1;
  }
  if (cfg->collective_timeout > cfg->collective_timeout_max) {
    fprintf(stderr,
            "tshardd: --collective-timeout %lldms is longer than --collective-timeout-max "
            "%lldms; lower the first or raise the second\n",
            (long long)cfg->collective_timeout, (long long)cfg->collective_timeout_max);
    return -1;
  }
  if (cfg->listen[0] && parse_listen(cfg))
    return -1;
  if (cfg->metrics[0] && parse_metrics(cfg))
    return -1;
  return check_snapshot(cfg) ? -1 : check_link_rates(cfg);
}

void tsd_config_log(const tsd_config *cfg) {
  for (size_t i = 0; i < NTABLE; i++) {
    const cfg_entry *e = &table[i];
    const char *base = (const char *)cfg + e->offset;
    if (e->kind == CFG_STRING)
      TSD_LOG(TSD_LOG_INFO, "config %s=%s", e->name, base);
    else if (e->kind == CFG_RULE)
      for (int k = 0; k < cfg->nresume_attr; k++)
        TSD_LOG(TSD_LOG_INFO, "config %s=%s", e->name, cfg->resume_attr[k]);
    else if (e->kind == CFG_MEMORY && *(const int64_t *)base == TSD_MEMORY_AUTO)
      TSD_LOG(TSD_LOG_INFO, "config %s=auto", e->name);
    else if (e->kind == CFG_SIZE || e->kind == CFG_COUNT || e->kind == CFG_MEMORY)
      TSD_LOG(TSD_LOG_INFO, "config %s=%lld", e->name, (long long)*(const int64_t *)base);
    else if (e->kind == CFG_DURATION)
      TSD_LOG(TSD_LOG_INFO, "config %s=%lldms", e->name, (long long)*(const int64_t *)base);
    else
      TSD_LOG(TSD_LOG_INFO, "config %s=%s", e->name, tsd_log_level_name(*(const int *)base));
  }
}

int tsd_prepare_socket_dir(const char *dir, ts_error *err) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    return ts_error_set(err, TS_IO, "cannot create the socket directory %s: %s", dir,
                        strerror(errno));
  struct stat st;
  if (lstat(dir, &st) != 0)
    return ts_error_set(err, TS_IO, "socket directory %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return ts_error_set(err, TS_IO, "socket directory %s is not a directory", dir);
  if (st.st_uid != getuid())
    return ts_error_set(err, TS_AUTH, "socket directory %s belongs to uid %u, not to us (%u)", dir,
                        (unsigned)st.st_uid, (unsigned)getuid());
  if ((st.st_mode & 0777) != 0700)
    return ts_error_set(err, TS_AUTH,
                        "socket directory %s has mode %03o; it must be 0700 (chmod 700 it)", dir,
                        (unsigned)(st.st_mode & 0777));
  return TS_OK;
}
