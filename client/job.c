/* job.c - tshard_describe_job: the job's layout (its ranks, their hosts with each host's name, the
 * NUMA node of every rank) from the connected daemon's statistics, asked with their layout. The
 * answer is checked before it is copied: one host index per rank below the host count, one NUMA
 * node per rank, and host names no longer than a host name may be. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

void tshard_job_clear(tshard_job *job) {
  if (!job)
    return;
  for (int h = 0; job->host_names && h < job->nhosts; h++)
    free(job->host_names[h]);
  free(job->host_names);
  free(job->rank_hosts);
  free(job->rank_numa);
  memset(job, 0, sizeof *job);
}

/* Whether the answer holds a whole, consistent layout; else the reason in why. */
static bool layout_ok(const Tshard__StatsResult *x, char *why, size_t cap) {
  if (x->n_rank_hosts == 0 || x->n_host_names == 0) {
    snprintf(why, cap,
             "the daemon's statistics carry no layout (a daemon older than this "
             "client); upgrade the daemons");
    return false;
  }
  if (x->n_rank_numa != x->n_rank_hosts || x->n_rank_hosts > INT32_MAX ||
      x->n_host_names > x->n_rank_hosts || x->hosts != x->n_host_names) {
    snprintf(why, cap,
             "the daemon's layout is inconsistent: %zu ranks with a host, %zu with a "
             "NUMA node, %zu host names for %u hosts",
             x->n_rank_hosts, x->n_rank_numa, x->n_host_names, x->hosts);
    return false;
  }
  for (size_t r = 0; r < x->n_rank_hosts; r++)
    if (x->rank_hosts[r] >= x->n_host_names) {
      snprintf(why, cap, "the daemon's layout puts rank %zu on host %u of %zu", r, x->rank_hosts[r],
               x->n_host_names);
      return false;
    }
  for (size_t h = 0; h < x->n_host_names; h++)
    if (!x->host_names[h] || strlen(x->host_names[h]) > 255) {
      snprintf(why, cap, "the daemon's layout names host %zu with more than 255 bytes", h);
      return false;
    }
  return true;
}

static int job_copy(tshard_client *c, const Tshard__StatsResult *x, tshard_job *job) {
  job->nranks = (int)x->n_rank_hosts;
  job->nhosts = (int)x->n_host_names;
  snprintf(job->topology, sizeof job->topology, "%s", x->topology ? x->topology : "");
  job->link_rate_host = x->link_rate_host;
  job->link_rate_cross = x->link_rate_cross;
  job->host_names = calloc(x->n_host_names, sizeof *job->host_names);
  job->rank_hosts = malloc(x->n_rank_hosts * sizeof *job->rank_hosts);
  job->rank_numa = malloc(x->n_rank_hosts * sizeof *job->rank_numa);
  bool ok = job->host_names && job->rank_hosts && job->rank_numa;
  for (size_t h = 0; ok && h < x->n_host_names; h++)
    ok = (job->host_names[h] = strdup(x->host_names[h])) != NULL;
  if (!ok) {
    tshard_job_clear(job);
    return tsc_fail(c, TS_NO_MEMORY, "no memory for the layout of %zu ranks", x->n_rank_hosts);
  }
  for (size_t r = 0; r < x->n_rank_hosts; r++) {
    job->rank_hosts[r] = (int)x->rank_hosts[r];
    job->rank_numa[r] = x->rank_numa[r];
  }
  return TS_OK;
}

int tshard_describe_job(tshard_client *c, tshard_job *job) {
  if (!c || !job)
    return TS_INVALID_ARGUMENT;
  memset(job, 0, sizeof *job);
  int rank = -1;
  int rc = tshard_ping(c, &rank, NULL);
  if (rc)
    return rc;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__StatsRequest q = TSHARD__STATS_REQUEST__INIT;
  q.layout = true;
  req.op_case = TSHARD__REQUEST__OP_STATS;
  req.stats = &q;
  Tshard__Response *r = NULL;
  rc = tsc_call(c, &req, &r);
  if (rc == TS_OK && r->result_case != TSHARD__RESPONSE__RESULT_STATS)
    rc = tsc_fail(c, TS_PROTOCOL, "stats answered without statistics");
  char why[300];
  if (rc == TS_OK && !layout_ok(r->stats, why, sizeof why))
    rc = tsc_fail(c, TS_PROTOCOL, "%s", why);
  if (rc == TS_OK && (rc = job_copy(c, r->stats, job)) == TS_OK)
    job->rank = rank;
  if (r)
    tsc_free(c, r);
  return rc;
}
