/* place.c - where every rank of the world runs: its host name and its NUMA node, found by each
 * rank at ts_world_init and exchanged so that every rank knows every rank's.
 *
 * The host name is gethostname's, made safe to show and to send: at most TS_HOST_NAME_MAX bytes,
 * every byte outside printable ASCII (and the space) replaced by '?', "unknown" when empty. The
 * NUMA node is the one the system gives for the CPU the rank ran on at start (sched_getcpu):
 * /sys/devices/system/cpu/cpuN/nodeM, else the node whose /sys/devices/system/node/nodeM/cpulist
 * holds N; -1 when neither says (no /sys, a kernel without NUMA, no CPU number). The names travel
 * in one allgatherv of their bytes (lengths first), so a job's exchange is as large as its names,
 * not ranks times the bound. */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"

size_t ts_host_name_clean(const char *raw, char *out, size_t cap) {
  if (!out || cap == 0)
    return 0;
  size_t n = 0, limit = cap - 1 < TS_HOST_NAME_MAX ? cap - 1 : TS_HOST_NAME_MAX;
  for (; raw && raw[n] && n < limit; n++) {
    unsigned char b = (unsigned char)raw[n];
    out[n] = b > ' ' && b < 0x7f ? (char)b : '?';
  }
  out[n] = '\0';
  if (n == 0) {
    snprintf(out, cap, "unknown");
    n = strlen(out);
  }
  return n;
}

/* "nodeM" with M a whole number: M, else -1. */
static int node_number(const char *name) {
  if (strncmp(name, "node", 4) != 0 || name[4] < '0' || name[4] > '9')
    return -1;
  char *end;
  long v = strtol(name + 4, &end, 10);
  return *end == '\0' && v >= 0 && v < (1 << 20) ? (int)v : -1;
}

/* Whether a cpulist text ("0-3,8,10-11\n") holds cpu. */
static bool cpulist_holds(const char *text, int cpu) {
  const char *p = text;
  while (*p && *p != '\n') {
    char *end;
    long lo = strtol(p, &end, 10), hi = lo;
    if (end == p)
      return false;
    if (*end == '-') {
      p = end + 1;
      hi = strtol(p, &end, 10);
      if (end == p)
        return false;
    }
    if (cpu >= lo && cpu <= hi)
      return true;
    if (*end != ',')
      return false;
    p = end + 1;
  }
  return false;
}

/* The NUMA node whose cpulist under root/devices/system/node holds cpu, or -1. */
static int node_by_cpulist(const char *root, int cpu) {
  char path[4200];
  snprintf(path, sizeof path, "%s/devices/system/node", root);
  DIR *d = opendir(path);
  if (!d)
    return -1;
  int found = -1;
  for (struct dirent *e; found < 0 && (e = readdir(d));) {
    int node = node_number(e->d_name);
    if (node < 0)
      continue;
    snprintf(path, sizeof path, "%s/devices/system/node/%s/cpulist", root, e->d_name);
    FILE *f = fopen(path, "r");
    char text[4096];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
      fclose(f);
    text[n] = '\0';
    if (n > 0 && cpulist_holds(text, cpu))
      found = node;
  }
  closedir(d);
  return found;
}

int ts_numa_node_of_cpu(const char *sys_root, int cpu) {
  if (!sys_root || cpu < 0 || strlen(sys_root) > 4000)
    return -1;
  char path[4100];
  snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d", sys_root, cpu);
  DIR *d = opendir(path);
  int node = -1;
  for (struct dirent *e; d && node < 0 && (e = readdir(d));)
    node = node_number(e->d_name);
  if (d)
    closedir(d);
  return node >= 0 ? node : node_by_cpulist(sys_root, cpu);
}

/* This rank's name into w->host_names' place for it, exchanged: every rank's name lands at
 * host_off[rank] in w->host_names (NUL-terminated), every rank's NUMA node in w->numa_of. */
int ts__place_init(ts_world *w, ts_error *err) {
  char raw[TS_HOST_NAME_MAX + 2] = {0}, name[TS_HOST_NAME_MAX + 1];
  if (gethostname(raw, sizeof raw - 1) != 0)
    raw[0] = '\0';
  size_t len = ts_host_name_clean(raw, name, sizeof name);
  int cpu = sched_getcpu();
  int mine[2] = {(int)len + 1, ts_numa_node_of_cpu("/sys", cpu)};
  size_t n = (size_t)w->size;
  int *both = malloc(2 * n * sizeof *both);
  int64_t *counts = malloc(2 * n * sizeof *counts);
  w->numa_of = malloc(n * sizeof *w->numa_of);
  w->host_off = malloc(n * sizeof *w->host_off);
  int ok = both && counts && w->numa_of && w->host_off, rc;
  if ((rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, w->world.comm)) == MPI_SUCCESS &&
      ok)
    rc = MPI_Allgather(mine, 2, MPI_INT, both, 2, MPI_INT, w->world.comm);
  if (rc != MPI_SUCCESS || !ok) {
    free(both), free(counts);
    return rc != MPI_SUCCESS
               ? ts__mpi_error(rc, "the exchange of the ranks' hosts", __FILE__, __LINE__, err)
               : ts_error_set(err, TS_NO_MEMORY, "no memory for the hosts of %d ranks", w->size);
  }
  int64_t *displs = counts + n, total = 0;
  for (size_t r = 0; r < n; r++) {
    w->numa_of[r] = both[2 * r + 1];
    counts[r] = both[2 * r];
    displs[r] = w->host_off[r] = total;
    total += counts[r];
  }
  free(both);
  ok = (w->host_names = malloc((size_t)total)) != NULL;
  if ((rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, w->world.comm)) != MPI_SUCCESS) {
    free(counts);
    return ts__mpi_error(rc, "the exchange of the ranks' hosts", __FILE__, __LINE__, err);
  }
  if (!ok) {
    free(counts);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the host names of %d ranks", w->size);
  }
  memcpy(w->host_names + w->host_off[w->rank], name, len + 1);
  rc = ts_comm_allgatherv(&w->world, w->host_names, counts, displs, err);
  free(counts);
  return rc;
}

void ts__place_free(ts_world *w) {
  free(w->numa_of);
  free(w->host_off);
  free(w->host_names);
  w->numa_of = NULL;
  w->host_off = NULL;
  w->host_names = NULL;
}

const char *ts_world_host_name(const ts_world *w, int rank) {
  if (!w || !w->host_names || rank < 0 || rank >= w->size)
    return NULL;
  return w->host_names + w->host_off[rank];
}

int ts_world_numa_of(const ts_world *w, int rank) {
  if (!w || !w->numa_of || rank < 0 || rank >= w->size)
    return -1;
  return w->numa_of[rank];
}
