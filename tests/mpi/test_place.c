/* test_place.c - where the ranks run, as ts_world_init finds and exchanges it: every rank's own
 * host name is gethostname's (printable here), its own NUMA node is one of the nodes /sys gives
 * for the CPUs it may run on (read here through the cpuN/nodeM links, -1 when there are none),
 * and every rank holds the same table of every rank's name and node, which is what each rank
 * says of itself (sent here by plain MPI, apart from the world's exchange). Ranks outside the
 * world have no name and node -1. */
#define TS_TEST_SEED 7
#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include "mpi_check.h"

/* The NUMA node of a CPU by its /sys/devices/system/cpu/cpuN/nodeM link, -1 without one. */
static int link_node(int cpu) {
  char dir[96];
  snprintf(dir, sizeof dir, "/sys/devices/system/cpu/cpu%d", cpu);
  DIR *d = opendir(dir);
  int node = -1;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strncmp(e->d_name, "node", 4) == 0 && e->d_name[4] >= '0' && e->d_name[4] <= '9')
      node = atoi(e->d_name + 4);
  if (d)
    closedir(d);
  return node;
}

/* Whether node is the node of one CPU this process may run on (or -1 when none has one). */
static bool node_allowed(int node) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return false;
  bool any = false, found = false;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, &set)) {
      int n = link_node(cpu);
      any |= n >= 0;
      found |= n == node;
    }
  return any ? found : node == -1;
}

int main(int argc, char **argv) {
  if (!mpi_check_start(&argc, &argv))
    return 1;
  char host[TS_HOST_NAME_MAX + 1] = {0};
  CHECK(gethostname(host, sizeof host - 1) == 0, "gethostname");
  const char *mine = ts_world_host_name(W, world_rank);
  CHECK(mine && strcmp(mine, host) == 0, "own name '%s', gethostname '%s'", mine ? mine : "(null)",
        host);
  int numa = ts_world_numa_of(W, world_rank);
  CHECK(node_allowed(numa), "own NUMA node %d is not the node of a CPU this rank may run on", numa);

  /* every rank's own word, by MPI directly, against the world's table on every rank */
  char *names = calloc((size_t)world_size, sizeof host);
  int *nodes = calloc((size_t)world_size, sizeof *nodes);
  MPI_Allgather(host, sizeof host, MPI_CHAR, names, sizeof host, MPI_CHAR, MPI_COMM_WORLD);
  MPI_Allgather(&numa, 1, MPI_INT, nodes, 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < world_size; r++) {
    const char *n = ts_world_host_name(W, r);
    CHECK(n && strcmp(n, names + (size_t)r * sizeof host) == 0, "rank %d's name '%s', it says '%s'",
          r, n ? n : "(null)", names + (size_t)r * sizeof host);
    CHECK(ts_world_numa_of(W, r) == nodes[r], "rank %d's node %d, it says %d", r,
          ts_world_numa_of(W, r), nodes[r]);
    /* one machine runs this test: the ranks' nodes agree with the world's node split */
    CHECK(ts_world_node_of(W)[r] == 0, "rank %d on node leader %d", r, ts_world_node_of(W)[r]);
  }
  free(names);
  free(nodes);
  CHECK(ts_world_host_name(W, -1) == NULL && ts_world_host_name(W, world_size) == NULL,
        "names outside the world");
  CHECK(ts_world_numa_of(W, -1) == -1 && ts_world_numa_of(W, world_size) == -1,
        "nodes outside the world");
  CHECK(ts_world_host_name(NULL, 0) == NULL && ts_world_numa_of(NULL, 0) == -1, "no world");
  return mpi_check_finish("test_place");
}
