/* topology.c - where the ranks of a job live: the host of every world rank. The daemons build it
 * from the host names the ranks exchange at start; `tshard plan --topology` builds it from a
 * spec (`hosts=64x8`, `hosts=4,4,2`, `map=0,1,0,1`) or from the text of an Open MPI hostfile, to
 * simulate a job it does not run. Hosts are numbered in the order of their first rank, so two
 * descriptions of the same placement give the same topology. It carries the rates of the two
 * link classes the cost model weighs (inside a host, between hosts): measured by the daemons at
 * start, given by a flag, or defaults. Immutable once shared by reference (plans keep one). */
#include <math.h>
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_plan.h"

struct ts_topology {
  atomic_int refs;
  int nranks, nhosts;
  int *host_of;               /* nranks: the host of each world rank */
  int *host_ranks;            /* nhosts: ranks on each host */
  double rate[TS_LINK_COUNT]; /* bytes per second of each link class; 0: the default */
};

static const double default_rates[TS_LINK_COUNT] = {
    [TS_LINK_HOST] = TS_LINK_HOST_DEFAULT_BPS,
    [TS_LINK_CROSS] = TS_LINK_CROSS_DEFAULT_BPS,
};

/* Numbers the hosts of `raw` (labels 0 to TS_TOPOLOGY_RANKS_MAX - 1) in the order of their
 * first rank. */
int ts_topology_create(int nranks, const int *raw, ts_topology **out, ts_error *err) {
  *out = NULL;
  if (nranks < 1 || nranks > TS_TOPOLOGY_RANKS_MAX || !raw)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "a topology of %d ranks; valid: 1 to %d", nranks,
                        TS_TOPOLOGY_RANKS_MAX);
  int top = 0;
  for (int r = 0; r < nranks; r++) {
    if (raw[r] < 0 || raw[r] >= TS_TOPOLOGY_RANKS_MAX)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "rank %d is on host %d; hosts are 0 to %d", r,
                          raw[r], TS_TOPOLOGY_RANKS_MAX - 1);
    top = raw[r] > top ? raw[r] : top;
  }
  ts_topology *t = calloc(1, sizeof *t);
  int *label = malloc(((size_t)top + 1) * sizeof *label); /* raw label -> host */
  if (!t || !label || !(t->host_of = malloc((size_t)nranks * sizeof(int))) ||
      !(t->host_ranks = calloc((size_t)nranks, sizeof(int)))) {
    free(label);
    ts_topology_destroy(&t);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a topology of %d ranks", nranks);
  }
  atomic_init(&t->refs, 1);
  t->nranks = nranks;
  for (int l = 0; l <= top; l++)
    label[l] = -1;
  for (int r = 0; r < nranks; r++) {
    if (label[raw[r]] < 0)
      label[raw[r]] = t->nhosts++;
    t->host_of[r] = label[raw[r]];
    t->host_ranks[t->host_of[r]]++;
  }
  free(label);
  *out = t;
  return TS_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int ts_topology_from_names(int nranks, const char *const *names, ts_topology **out, ts_error *err) {
  *out = NULL;
  if (nranks < 1 || nranks > TS_TOPOLOGY_RANKS_MAX || !names)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "a topology of %d ranks; valid: 1 to %d", nranks,
                        TS_TOPOLOGY_RANKS_MAX);
  const char **sorted = malloc((size_t)nranks * sizeof *sorted);
  int *raw = malloc((size_t)nranks * sizeof *raw);
  if (!sorted || !raw) {
    free(sorted), free(raw);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a topology of %d ranks", nranks);
  }
  memcpy(sorted, names, (size_t)nranks * sizeof *sorted);
  qsort(sorted, (size_t)nranks, sizeof *sorted, cmp_str);
  for (int r = 0; r < nranks; r++) { /* the label of a name: its first place in sorted order */
    const char *const *at = bsearch(&names[r], sorted, (size_t)nranks, sizeof *sorted, cmp_str);
    while (at > sorted && strcmp(at[-1], names[r]) == 0)
      at--;
    raw[r] = (int)(at - sorted);
  }
  int rc = ts_topology_create(nranks, raw, out, err);
  free(sorted), free(raw);
  return rc;
}

/* A list of non-negative integers separated by `sep` ("4,4,2"); count returned. */
static int parse_ints(const char *s, char sep, int *vals, int cap, int *count, ts_error *err,
                      const char *what) {
  *count = 0;
  while (*s) {
    char *end;
    if (!isdigit((unsigned char)*s))
      return ts_error_set(err, TS_PARSE, "%s: '%s' is not a number", what, s);
    long v = strtol(s, &end, 10);
    if (v < 0 || v > TS_TOPOLOGY_RANKS_MAX || (*end && *end != sep))
      return ts_error_set(err, TS_PARSE, "%s: '%.*s' is not a number from 0 to %d", what,
                          (int)(end - s + (*end != 0)), s, TS_TOPOLOGY_RANKS_MAX);
    if (*count == cap)
      return ts_error_set(err, TS_LIMIT, "%s: more than %d entries", what, cap);
    vals[(*count)++] = (int)v;
    s = *end ? end + 1 : end;
    if (*end && !*s)
      return ts_error_set(err, TS_PARSE, "%s ends in '%c'", what, sep);
  }
  return TS_OK;
}

/* Hosts from the ranks on each host, in rank order. */
static int from_counts(const int *per_host, int nhosts, ts_topology **out, ts_error *err) {
  int64_t n = 0;
  for (int h = 0; h < nhosts; h++) {
    if (per_host[h] < 1)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "host %d has %d ranks; at least 1", h,
                          per_host[h]);
    n += per_host[h];
  }
  if (n < 1 || n > TS_TOPOLOGY_RANKS_MAX)
    return ts_error_set(err, TS_LIMIT, "a topology of %lld ranks; valid: 1 to %d", (long long)n,
                        TS_TOPOLOGY_RANKS_MAX);
  int *raw = malloc((size_t)n * sizeof *raw);
  if (!raw)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a topology of %lld ranks", (long long)n);
  for (int h = 0, r = 0; h < nhosts; h++)
    for (int k = 0; k < per_host[h]; k++)
      raw[r++] = h;
  int rc = ts_topology_create((int)n, raw, out, err);
  free(raw);
  return rc;
}

#define SPEC_HELP                                                                                  \
  "valid: hosts=HxR (H hosts of R ranks, ranks in order), hosts=R1,R2,... (ranks "                 \
  "per host, in order) or map=H0,H1,... (the host of each rank)"

int ts_topology_parse(const char *spec, ts_topology **out, ts_error *err) {
  *out = NULL;
  if (!spec || strlen(spec) > 1 << 20)
    return ts_error_set(err, TS_PARSE, "topology spec missing or too long; " SPEC_HELP);
  int cap = TS_TOPOLOGY_RANKS_MAX, n = 0, rc;
  int *vals = malloc((size_t)cap * sizeof *vals);
  if (!vals)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to parse a topology");
  const char *x = strncmp(spec, "hosts=", 6) == 0 ? strchr(spec + 6, 'x') : NULL;
  if (x) {
    char hosts[16];
    size_t hl = (size_t)(x - spec - 6);
    snprintf(hosts, sizeof hosts, "%.*s", (int)(hl < sizeof hosts ? hl : sizeof hosts - 1),
             spec + 6);
    int h[1], r[1], nh, nr;
    rc = hl < sizeof hosts ? parse_ints(hosts, ',', h, 1, &nh, err, "hosts") : TS_PARSE;
    if (!rc)
      rc = parse_ints(x + 1, ',', r, 1, &nr, err, "ranks per host");
    if (!rc && (nh != 1 || nr != 1 || (int64_t)h[0] * r[0] > TS_TOPOLOGY_RANKS_MAX))
      rc = ts_error_set(err, TS_PARSE, "topology '%s': " SPEC_HELP ", at most %d ranks", spec,
                        TS_TOPOLOGY_RANKS_MAX);
    for (int i = 0; !rc && i < h[0]; i++)
      vals[n++] = r[0];
    if (!rc)
      rc = from_counts(vals, n, out, err);
  } else if (strncmp(spec, "hosts=", 6) == 0) {
    rc = parse_ints(spec + 6, ',', vals, cap, &n, err, "hosts");
    if (!rc)
      rc = from_counts(vals, n, out, err);
  } else if (strncmp(spec, "map=", 4) == 0) {
    rc = parse_ints(spec + 4, ',', vals, cap, &n, err, "map");
    if (!rc)
      rc = ts_topology_create(n, vals, out, err);
  } else {
    rc = ts_error_set(err, TS_PARSE, "topology '%.200s': " SPEC_HELP, spec);
  }
  free(vals);
  return rc;
}

/* One line of an Open MPI hostfile: "name [slots=N] [max_slots=M]"; a name alone is one slot. */
static int hostfile_line(const char *line, size_t len, int lineno, int *slots, ts_error *err) {
  *slots = 0;
  size_t i = 0;
  while (i < len && isspace((unsigned char)line[i]))
    i++;
  if (i == len || line[i] == '#')
    return TS_OK;
  while (i < len && !isspace((unsigned char)line[i]) && line[i] != '#')
    i++;
  *slots = 1;
  while (i < len && line[i] != '#') {
    while (i < len && isspace((unsigned char)line[i]))
      i++;
    if (i == len || line[i] == '#')
      break;
    if (len - i > 6 && strncmp(line + i, "slots=", 6) == 0) {
      char *end;
      long v = strtol(line + i + 6, &end, 10);
      if (end == line + i + 6 || v < 1 || v > TS_TOPOLOGY_RANKS_MAX)
        return ts_error_set(err, TS_PARSE, "hostfile line %d: slots must be 1 to %d", lineno,
                            TS_TOPOLOGY_RANKS_MAX);
      *slots = (int)v;
      i = (size_t)(end - line);
    } else {
      while (i < len && !isspace((unsigned char)line[i]))
        i++; /* other keywords (max_slots=) do not change where ranks go */
    }
  }
  return TS_OK;
}

int ts_topology_from_hostfile(const char *text, size_t len, ts_topology **out, ts_error *err) {
  *out = NULL;
  int cap = 1024, n = 0, lineno = 0, rc = TS_OK;
  int *per_host = malloc((size_t)cap * sizeof *per_host);
  if (!per_host)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to read a hostfile");
  for (size_t at = 0; at < len && rc == TS_OK;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t ll = nl ? (size_t)(nl - (text + at)) : len - at;
    int slots;
    rc = hostfile_line(text + at, ll, ++lineno, &slots, err);
    if (!rc && slots > 0) {
      if (n == cap) {
        int *g =
            cap < TS_TOPOLOGY_RANKS_MAX ? realloc(per_host, 2 * (size_t)cap * sizeof *g) : NULL;
        if (!g) {
          rc = ts_error_set(err, TS_LIMIT, "hostfile: more than %d hosts", cap);
          break;
        }
        per_host = g, cap *= 2;
      }
      per_host[n++] = slots;
    }
    at += ll + 1;
  }
  if (!rc && n == 0)
    rc = ts_error_set(err, TS_PARSE, "hostfile names no host (lines are 'NAME [slots=N]')");
  if (!rc)
    rc = from_counts(per_host, n, out, err);
  free(per_host);
  return rc;
}

ts_topology *ts_topology_ref(ts_topology *t) {
  if (t)
    atomic_fetch_add(&t->refs, 1);
  return t;
}

void ts_topology_destroy(ts_topology **p) {
  if (!p || !*p)
    return;
  ts_topology *t = *p;
  *p = NULL;
  if (atomic_fetch_sub(&t->refs, 1) != 1)
    return;
  free(t->host_of);
  free(t->host_ranks);
  free(t);
}

int ts_topology_nranks(const ts_topology *t) { return t ? t->nranks : 0; }
int ts_topology_nhosts(const ts_topology *t) { return t ? t->nhosts : 1; }
int ts_topology_host(const ts_topology *t, int rank) {
  return t && rank >= 0 && rank < t->nranks ? t->host_of[rank] : 0;
}
int ts_topology_host_ranks(const ts_topology *t, int host) {
  return t && host >= 0 && host < t->nhosts ? t->host_ranks[host] : 0;
}

size_t ts_topology_format(const ts_topology *t, char *buf, size_t cap) {
  if (!t)
    return (size_t)snprintf(buf, cap, "one host");
  bool even = true, in_order = true;
  for (int h = 1; h < t->nhosts; h++)
    even &= t->host_ranks[h] == t->host_ranks[0];
  for (int r = 1; r < t->nranks; r++)
    in_order &= t->host_of[r] >= t->host_of[r - 1];
  if (in_order && even)
    return (size_t)snprintf(buf, cap, "hosts=%dx%d", t->nhosts, t->host_ranks[0]);
  size_t n = (size_t)snprintf(buf, cap, in_order ? "hosts=" : "map=");
  for (int i = 0; i < (in_order ? t->nhosts : t->nranks); i++) {
    int v = in_order ? t->host_ranks[i] : t->host_of[i];
    n += (size_t)snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, "%s%d", i ? "," : "", v);
  }
  return n;
}

/* ---------------------------------------------------------------------------------------------
 * Link rates */

int ts_topology_set_rate(ts_topology *t, ts_link link, double bytes_per_s, ts_error *err) {
  if (!t || (int)link < 0 || link >= TS_LINK_COUNT)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_topology_set_rate: bad arguments");
  if (!(bytes_per_s > 0) || !isfinite(bytes_per_s))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "a link rate must be a positive number of "
                        "bytes per second (got %g)",
                        bytes_per_s);
  t->rate[link] = bytes_per_s;
  return TS_OK;
}

double ts_topology_rate(const ts_topology *t, ts_link link) {
  if ((int)link < 0 || link >= TS_LINK_COUNT)
    return 0;
  return t && t->rate[link] > 0 ? t->rate[link] : default_rates[link];
}

bool ts_topology_rate_given(const ts_topology *t, ts_link link) {
  return t && (int)link >= 0 && link < TS_LINK_COUNT && t->rate[link] > 0;
}

static const struct {
  const char *unit;
  double bytes_per_s;
} rate_units[] = {
    {"bit", 0.125},       {"kbit", 125.0},         {"mbit", 125e3},
    {"gbit", 125e6},      {"tbit", 125e9},         {"B/s", 1.0},
    {"kB/s", 1e3},        {"KB/s", 1e3},           {"MB/s", 1e6},
    {"GB/s", 1e9},        {"TB/s", 1e12},          {"KiB/s", 1024.0},
    {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
};

int ts_rate_parse(const char *text, double *out, ts_error *err) {
  const char *valid = "a number and a unit: bit, kbit, mbit, gbit, tbit (tc's, 10^3 steps) or "
                      "B/s, kB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, e.g. 500mbit or 12GB/s";
  char *end = NULL;
  double v = text ? strtod(text, &end) : 0;
  if (!text || end == text || !(v > 0) || !isfinite(v))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "link rate '%s': expected %s",
                        text ? text : "(null)", valid);
  for (size_t i = 0; i < sizeof rate_units / sizeof *rate_units; i++)
    if (strcmp(end, rate_units[i].unit) == 0 && isfinite(v * rate_units[i].bytes_per_s)) {
      *out = v * rate_units[i].bytes_per_s;
      return TS_OK;
    }
  return ts_error_set(err, TS_INVALID_ARGUMENT, "link rate '%s': expected %s", text, valid);
}

static const char *const link_names[TS_LINK_COUNT] = {
    [TS_LINK_HOST] = "host", [TS_LINK_CROSS] = "cross"};

const char *ts_link_name(ts_link link) {
  return (int)link >= 0 && link < TS_LINK_COUNT ? link_names[link] : "invalid";
}

int ts_topology_parse_rates(ts_topology *t, const char *spec, ts_error *err) {
  if (!t || !spec)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_topology_parse_rates: NULL argument");
  const char *at = spec;
  while (*at) {
    const char *comma = strchr(at, ',');
    size_t len = comma ? (size_t)(comma - at) : strlen(at);
    char item[96];
    if (len == 0 || len >= sizeof item)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "link rates '%s': expected host=RATE and/or "
                          "cross=RATE, separated by a comma (e.g. host=10GB/s,cross=500mbit)",
                          spec);
    memcpy(item, at, len);
    item[len] = '\0';
    char *eq = strchr(item, '=');
    int link = -1;
    for (int l = 0; eq && l < TS_LINK_COUNT; l++)
      if ((size_t)(eq - item) == strlen(link_names[l]) &&
          strncmp(item, link_names[l], (size_t)(eq - item)) == 0)
        link = l;
    if (link < 0)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "link rates '%s': '%s' is neither "
                          "host=RATE (inside a host) nor cross=RATE (between hosts)",
                          spec, item);
    double v;
    int rc = ts_rate_parse(eq + 1, &v, err);
    if (rc || (rc = ts_topology_set_rate(t, (ts_link)link, v, err)))
      return rc;
    at += len + (comma ? 1 : 0);
    if (comma && !*at)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "link rates '%s': a trailing comma", spec);
  }
  return TS_OK;
}
