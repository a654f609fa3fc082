/* main.c - tshardd: one daemon per MPI rank, started by mpirun.
 *
 * Parses the config, initializes MPI (MPI_THREAD_SERIALIZED: only this thread will call it),
 * chooses the memory limit of --memory-limit auto (from the job's ranks on this node), starts the
 * libuv loop thread on this rank's socket (and, with --metrics, the metrics endpoint's HTTP
 * thread), logs the memory limit (and how it was chosen) and the ready line, and runs the engine
 * on this thread with the operations of daemon/ops/ until a shutdown (request or SIGTERM/SIGINT)
 * has run on every rank. Then it stops the metrics endpoint and the loop thread (answers
 * flushed, sockets removed) and finalizes MPI. Exit code 0 on a clean
 * shutdown. The soft limit of open descriptors is raised to the hard one at start: clients,
 * segments and MPI all take descriptors, and the cap on unauthenticated connections
 * (--max-unauthenticated) keeps those far below it. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ts_comm.h"
#include "tsd_catalog.h"
#include "tsd_front.h"
#include "tsd_metrics.h"
#include "tsd_ops.h"

/* The soft limit of open descriptors up to the hard one (capped by what the kernel allows a
 * process, fs.nr_open, when the hard one is unlimited). */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max)
    return;
  rlim_t want = rl.rlim_max;
  if (want == RLIM_INFINITY) {
    FILE *f = fopen("/proc/sys/fs/nr_open", "r");
    unsigned long long n = 0;
    want = f && fscanf(f, "%llu", &n) == 1 && n > 0 ? (rlim_t)n : rl.rlim_cur;
    if (f)
      fclose(f);
  }
  rl.rlim_cur = want;
  setrlimit(RLIMIT_NOFILE, &rl); /* best effort: the soft limit stays otherwise */
}

/* What the engine needs to start serving once the daemon is ready (after a resume). */
typedef struct serve_ctx {
  const tsd_config *cfg;
  tsd_server_opts *so;
  tsd_server **server;
  tsd_metrics **metrics; /* --metrics: started with the server */
  tsd_catalog *catalog;  /* the live page's tensors */
  ts_world *world;
  const char *memory_why;
} serve_ctx;

static char *catalog_json(void *ctx) { return tsd_catalog_json(ctx); }

/* The engine's serve hook: every rank starts its server, or none (a job with a missing rank
 * would hang its clients). */
static int start_serving(void *arg, ts_error *err) {
  serve_ctx *sc = arg;
  ts_error lerr;
  ts_error_clear(&lerr);
  int rank = ts_world_rank(sc->world), size = ts_world_size(sc->world);
  tsd_metrics_sources src = {.world = sc->world, .tensors_json = catalog_json, .ctx = sc->catalog};
  int rc = sc->cfg->metrics[0] ? tsd_metrics_start(sc->cfg, rank, &src, sc->metrics, &lerr) : TS_OK;
  if (rc == TS_OK)
    rc = tsd_server_start(sc->so, sc->server, &lerr);
  if ((rc = ts_comm_agree(ts_world_comm(sc->world), rc, &lerr, err)))
    return rc; /* main stops what started */
  tsd_gauge_set(TSD_G_SERVING, 1);
  char tcp[200] = ""; /* this rank's own addresses: PORT + rank */
  if (sc->cfg->listen[0])
    snprintf(tcp, sizeof tcp, " and tcp://%s:%d", sc->cfg->tcp_host, sc->cfg->tcp_port + rank);
  if (sc->cfg->metrics[0])
    snprintf(tcp + strlen(tcp), sizeof tcp - strlen(tcp), ", metrics http://%s:%d/metrics",
             sc->cfg->metrics_host, sc->cfg->metrics_port + rank);
  TSD_LOG(TSD_LOG_INFO, "memory limit %lld bytes (%s)", (long long)sc->cfg->memory_limit,
          sc->memory_why);
  ts_comm *world = ts_world_comm(sc->world);
  TSD_LOG(TSD_LOG_INFO, "transfers between the daemons: %s",
          ts_comm_shared_buffers(world) ? "single copies, shared buffers"
          : ts_comm_single_copy(world)  ? "single copies (buffers not shared)"
                                        : "MPI");
  TSD_LOG(TSD_LOG_INFO, "ready: job %s rank %d of %d pid %d serving %s%s", sc->cfg->job, rank, size,
          (int)getpid(), sc->so->socket_path, tcp);
  return TS_OK;
}

/* The strided-copy kernel's threads: --copy-threads, or the node's cores shared among its ranks.
 * A copy split over more threads than a rank's share of the cores waits at its end for the
 * thread that lost its core (4 ranks on 2 cores, S(0)->S(1) of 256 MiB, five alternated daemon
 * sessions: 20.1 ms with one thread against 20.8 ms with two, lower in four). */
static int copy_threads(const tsd_config *cfg, int node_ranks) {
  if (cfg->copy_threads > 0)
    return (int)cfg->copy_threads;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long share = cores > 0 && node_ranks > 0 ? cores / node_ranks : 1;
  return share > 1 ? (int)share : 1;
}

int main(int argc, char **argv) {
  tsd_config cfg;
  int prc = tsd_config_parse(&cfg, argc, argv);
  if (prc != 0)
    return prc > 0 ? 0 : 2;
  tsd_log_threshold = cfg.log_level;
  atexit(tsd_log_flush); /* held log lines, whichever way the daemon exits */
  /* Frames and chunks (up to a few tens of MiB) come and go all the time: keep them in the heap
   * instead of mapping fresh zeroed pages for each one. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  ts_error err;
  ts_error_clear(&err);
  ts_world *world = NULL;
  if (ts_world_init(&argc, &argv, MPI_THREAD_SERIALIZED, &world, &err)) {
    TSD_LOG(TSD_LOG_ERROR, "MPI: %s", err.msg);
    return 1;
  }
  int rank = ts_world_rank(world), size = ts_world_size(world);
  tsd_log_set_rank(rank);
  ts_kernels_set_threads(copy_threads(&cfg, ts_world_node_size(world)));
  ts_world_set_agree_timeout(world, (int)cfg.agreement_timeout);
  int frc = tsd_fault_init(rank, &err); /* refused in the startup agreement below */
  char memory_why[300];
  if (cfg.memory_limit == TSD_MEMORY_AUTO)
    cfg.memory_limit = tsd_memory_auto(ts_world_node_size(world), memory_why, sizeof memory_why);
  else
    snprintf(memory_why, sizeof memory_why, "%s",
             cfg.memory_limit ? "--memory-limit" : "none: --memory-limit 0");
  if (rank == 0)
    tsd_config_log(&cfg);
  tsd_catalog catalog;
  tsd_catalog_init(&catalog);
  tsd_shared shared;
  tsd_shared_init(&shared);
  shared.catalog = &catalog;
  tsd_server_opts so;
  memset(&so, 0, sizeof so);
  so.cfg = &cfg;
  so.rank = rank;
  so.world_size = size;
  so.shared = &shared;
  tsd_server *server = NULL;
  tsd_metrics *metrics = NULL;
  serve_ctx sc = {&cfg, &so, &server, &metrics, &catalog, world, memory_why};
  int exit_code = 0;
  /* a fault setting one rank refused fails every rank alike */
  if (ts_comm_agree(ts_world_comm(world), frc, &err, &err)) {
    TSD_LOG(TSD_LOG_ERROR, "cannot start: %s", err.msg);
    exit_code = 1;
  } else {
    tsd_engine_opts eo = {.cfg = &cfg,
                          .world = world,
                          .shared = &shared,
                          .ops = &tsd_ops,
                          .serve = start_serving,
                          .serve_ctx = &sc};
    if (tsd_engine_run(&eo, &err)) {
      TSD_LOG(TSD_LOG_ERROR, "%s%s", server ? "engine: " : "cannot start: ", err.msg);
      exit_code = 1;
    }
  }
  tsd_gauge_set(TSD_G_SERVING, 0);
  tsd_metrics_stop(&metrics);
  tsd_server_stop(&server);
  tsd_shared_destroy(&shared);
  tsd_catalog_destroy(&catalog);
  if (ts_world_finalize(&world, &err)) {
    TSD_LOG(TSD_LOG_ERROR, "MPI finalize: %s", err.msg);
    exit_code = 1;
  }
  if (exit_code == 0)
    TSD_LOG(TSD_LOG_INFO, "stopped");
  return exit_code;
}
