/* cmd_job.c - how the CLI prints a job's layout (tshard_describe_job): `tshard describe` without
 * a tensor and the layout part of `tshard stats`.
 *
 * Text: one line per host, its ranks grouped by NUMA node as compact ranges ("host 0 box: 4
 * ranks: NUMA node 0: ranks 0-1; NUMA node 1: ranks 2-3"), so a job of thousands of ranks prints
 * a line per host. JSON: each host's name once (host_names) and every rank's host and NUMA node
 * (rank_hosts, rank_numa), as the daemon answers them; describe adds the same grouped by host
 * (by_host). */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "tshard.h"

/* The ranks of every host in rank order: host h's are order[first[h] .. first[h + 1]). NULL
 * pointers when out of memory. */
typedef struct by_host {
  int *first, *order;
} by_host;

static void group_free(by_host *g) {
  free(g->first);
  free(g->order);
}

static bool group_ranks(const tshard_job *j, by_host *g) {
  g->first = calloc((size_t)j->nhosts + 1, sizeof *g->first);
  g->order = malloc((size_t)j->nranks * sizeof *g->order);
  int *fill = malloc((size_t)j->nhosts * sizeof *fill);
  if (!g->first || !g->order || !fill) {
    group_free(g);
    free(fill);
    return false;
  }
  for (int r = 0; r < j->nranks; r++)
    g->first[j->rank_hosts[r] + 1]++;
  for (int h = 0; h < j->nhosts; h++) {
    g->first[h + 1] += g->first[h];
    fill[h] = g->first[h];
  }
  for (int r = 0; r < j->nranks; r++)
    g->order[fill[j->rank_hosts[r]]++] = r;
  free(fill);
  return true;
}

/* The ranks of one host on one NUMA node, as ranges: "0-3,8,10-11". */
static void print_ranges(const tshard_job *j, const int *ranks, int n, int numa) {
  int prev = -2, start = -1, count = 0;
  for (int i = 0; i <= n; i++) {
    int r = i < n ? ranks[i] : -1;
    if (r >= 0 && j->rank_numa[r] != numa)
      continue;
    if (r >= 0 && r == prev + 1) {
      prev = r;
      continue;
    }
    if (start >= 0)
      printf(prev > start ? "%s%d-%d" : "%s%d", count++ ? "," : "", start, prev);
    start = prev = r;
  }
}

/* One host's line: its ranks grouped by NUMA node in the order the nodes first appear. */
static void print_host(const tshard_job *j, int h, const int *ranks, int n) {
  printf("  host %d %s: %d rank%s", h, j->host_names[h], n, n == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    int numa = j->rank_numa[ranks[i]];
    bool seen = false;
    for (int k = 0; k < i && !seen; k++)
      seen = j->rank_numa[ranks[k]] == numa;
    if (seen)
      continue;
    if (numa >= 0)
      printf("%s NUMA node %d: ranks ", i ? ";" : ":", numa);
    else
      printf("%s NUMA node unknown: ranks ", i ? ";" : ":");
    print_ranges(j, ranks, n, numa);
  }
  printf("\n");
}

int cli_job_text(const tshard_job *j) {
  by_host g;
  if (j->nranks == 0) /* none known */
    return CLI_OK;
  if (!group_ranks(j, &g))
    return cli_fail(CLI_FAILED, "no memory for the job's layout");
  for (int h = 0; h < j->nhosts; h++)
    print_host(j, h, g.order + g.first[h], g.first[h + 1] - g.first[h]);
  group_free(&g);
  return CLI_OK;
}

static void print_ints(const int *v, int n) {
  printf("[");
  for (int i = 0; i < n; i++)
    printf(i ? ", %d" : "%d", v[i]);
  printf("]");
}

void cli_job_json_fields(const tshard_job *j) {
  printf("\"host_names\": [");
  for (int h = 0; h < j->nhosts; h++) {
    fputs(h ? ", " : "", stdout);
    cli_json_string(stdout, j->host_names[h]);
  }
  printf("], \"rank_hosts\": ");
  print_ints(j->rank_hosts, j->nranks);
  printf(", \"rank_numa\": ");
  print_ints(j->rank_numa, j->nranks);
}

int cli_job_describe(const cli_args *a, const tshard_job *j) {
  if (!a->json) {
    printf("%d rank%s on %d host%s (%s), answered by rank %d\n", j->nranks,
           j->nranks == 1 ? "" : "s", j->nhosts, j->nhosts == 1 ? "" : "s", j->topology, j->rank);
    if (j->nhosts > 1) /* on one host no plan weighs a link */
      printf("link rates: inside a host %.4g MB/s, between hosts %.4g MB/s (as plan "
             "--link-rates host=%.0fB/s,cross=%.0fB/s)\n",
             j->link_rate_host / 1e6, j->link_rate_cross / 1e6, j->link_rate_host,
             j->link_rate_cross);
    return cli_job_text(j);
  }
  by_host g;
  if (!group_ranks(j, &g))
    return cli_fail(CLI_FAILED, "no memory for the job's layout");
  printf("{\"rank\": %d, \"ranks\": %d, \"hosts\": %d, \"topology\": ", j->rank, j->nranks,
         j->nhosts);
  cli_json_string(stdout, j->topology);
  printf(", \"link_rates\": {\"host\": %.0f, \"cross\": %.0f}", j->link_rate_host,
         j->link_rate_cross);
  printf(", \"by_host\": [");
  for (int h = 0; h < j->nhosts; h++) {
    printf("%s{\"host\": %d, \"name\": ", h ? ", " : "", h);
    cli_json_string(stdout, j->host_names[h]);
    printf(", \"ranks\": ");
    print_ints(g.order + g.first[h], g.first[h + 1] - g.first[h]);
    printf(", \"numa\": [");
    for (int i = g.first[h]; i < g.first[h + 1]; i++)
      printf(i > g.first[h] ? ", %d" : "%d", j->rank_numa[g.order[i]]);
    printf("]}");
  }
  printf("], ");
  cli_job_json_fields(j);
  printf("}\n");
  group_free(&g);
  return CLI_OK;
}
