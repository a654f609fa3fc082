/* bench_dist_einsum.c - the distributed einsum benchmark: `mpirun -np 4 tshard-bench-einsum-dist`
 * prints key=value lines for four einsums over a 4-rank world.
 *
 *   mm_rows     f64[n,n] x f64[n,n], A S(0), B R -> C S(0): no communication
 *   mm_inner    A S(1), B S(0) -> C S(0): a partial result, then a reduce-scatter
 *   mm_2d       a 2x2 mesh, A and B [S(0),S(1)] -> C [S(0),S(1)]: the planner picks (SUMMA-like:
 *               each operand gathered along one mesh dim)
 *   attn_heads  "bhqd,bhkd->bhqk" with the heads sharded on both operands: no communication
 *
 * It drives the engine in-process (ts_dein_run over a per-rank store, as the daemon's einsum
 * operation does, without the RPC): the time is the slowest rank's, planning, operand reshards,
 * the local einsum, the result's reshard and storing it included; median of several runs. Per
 * case: <case>_ms, <case>_wire_bytes (the bytes every rank handed to MPI for other ranks,
 * summed, as the executor reports them), <case>_planned_wire_bytes (the plan's cost),
 * <case>_local_ms (one process computing the whole einsum with the same kernels and BLAS, same
 * run, while the other ranks wait without spinning), <case>_vs_local, and <case>_plan. */
#include <cblas.h>
#include <mpi.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ts_comm.h"
#include "ts_dist_einsum.h"
#include "bench_mpi.h"

static int rank, size;
static ts_world *W;
static int reps = 3;
/* Threads: the machine's cores go to the one process of the local reference, and are shared out
 * among the ranks of the node for the distributed runs (BLAS and the copy kernels alike). */
static int cores, rank_threads;

static void use_threads(int t) {
  openblas_set_num_threads(t);
  ts_kernels_set_threads(t);
}

static void fill(ts_stored *e) {
  int64_t n = (int64_t)(e->local.bytes / sizeof(double));
  double *v = e->local.data;
  for (int64_t i = 0; i < n; i++)
    v[i] = (double)((i * 7 + rank) % 13) * 0.125 - 0.75;
}

static void add(ts_store *s, const char *name, int ndim, const int64_t *shape, const char *a) {
  ts_attr *at = attr(a);
  ts_stored *e = NULL;
  ts_error err;
  if (ts_store_add(s, name, ndim, shape, TS_F64, at, NULL, &e, &err)) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, name, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (e->has_slice)
    fill(e);
  ts_attr_destroy(&at);
}

/* Waits at a barrier without spinning, so that a rank computing alone has the cores. */
static void quiet_barrier(void) {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  int done = 0;
  while (!done) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (!done) {
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
  }
}

/* The whole einsum in one process (rank 0), on whole row-major operands. */
static double local_ms(const char *eq, int n, const int *ndims, const int64_t *const *shapes) {
  double ms = 0;
  if (rank == 0) {
    use_threads(cores);
    ts_tensor t[3];
    const ts_tensor *tp[3];
    for (int i = 0; i < n; i++) {
      int64_t numel = 1;
      for (int d = 0; d < ndims[i]; d++)
        numel *= shapes[i][d];
      t[i].bytes = (size_t)numel * 8;
      t[i].data = ts_buffer_alloc(t[i].bytes);
      for (int64_t k = 0; k < numel; k++)
        ((double *)t[i].data)[k] = (double)((k * 7) % 13) * 0.125 - 0.75;
      ts_layout_plain(&t[i].layout, TS_F64, ndims[i], shapes[i], NULL);
      tp[i] = &t[i];
    }
    ts_einsum_plan *p = NULL;
    ts_error err;
    if (ts_einsum_plan_create(&p, eq, n, ndims, shapes, TS_F64, NULL, &err)) {
      fprintf(stderr, "local plan: %s\n", err.msg);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int ond;
    int64_t oshape[TS_MAX_DIMS], on = 1;
    ts_einsum_plan_output(p, &ond, oshape);
    for (int d = 0; d < ond; d++)
      on *= oshape[d];
    ts_tensor out = {ts_buffer_alloc((size_t)on * 8), (size_t)on * 8, {0}};
    ts_layout_plain(&out.layout, TS_F64, ond, oshape, NULL);
    double times[16];
    for (int k = -1; k < reps; k++) {
      double t0 = MPI_Wtime();
      if (ts_einsum_execute(p, &out, tp, NULL, &err)) {
        fprintf(stderr, "local einsum: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (k >= 0)
        times[k] = (MPI_Wtime() - t0) * 1e3;
    }
    ms = median(times, reps);
    ts_einsum_plan_destroy(&p);
    ts_buffer_free(out.data);
    for (int i = 0; i < n; i++)
      ts_buffer_free(t[i].data);
    use_threads(rank_threads);
  }
  quiet_barrier();
  return ms;
}

static void run_case(const char *name, const char *eq, int n, const int *ndims,
                     const int64_t *const *shapes, const char *const *attrs, const char *out_attr) {
  ts_store *s = NULL;
  ts_error err;
  ts_store_create(&s, rank, 0, &err);
  const char *names[3] = {"A", "B", "C"};
  for (int i = 0; i < n; i++)
    add(s, names[i], ndims[i], shapes[i], attrs[i]);
  ts_attr *oa = out_attr ? attr(out_attr) : NULL;
  ts_dein_request req = {eq,   n,    {names[0], names[1], names[2]}, "OUT", oa, NULL, 0, TS_OK,
                         NULL, false};
  double times[16];
  int64_t wire = 0, planned = 0;
  char plan[32] = "";
  for (int k = -1; k < reps; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    ts_dein_report rep;
    if (ts_dein_run(s, W, &req, NULL, NULL, &rep, &err)) {
      fprintf(stderr, "rank %d: %s: %s\n", rank, name, err.msg);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double dt = slowest(MPI_Wtime() - t0) * 1e3;
    MPI_Allreduce(&rep.bytes_sent, &wire, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    planned = rep.planned_wire_bytes;
    snprintf(plan, sizeof plan, "%s", rep.plan);
    ts_store_drop(s, "OUT", NULL);
    if (k >= 0)
      times[k] = dt;
  }
  ts_store_destroy(&s);
  ts_attr_destroy(&oa);
  ts_pool_trim(true);
  double ms = median(times, reps);
  double lms = local_ms(eq, n, ndims, shapes);
  if (rank == 0) {
    printf("%s_plan=%s\n", name, plan);
    printf("%s_ms=%.2f\n", name, ms);
    printf("%s_wire_bytes=%lld\n", name, (long long)wire);
    printf("%s_planned_wire_bytes=%lld\n", name, (long long)planned);
    printf("%s_local_ms=%.2f\n", name, lms);
    printf("%s_vs_local=%.3f\n", name, ms / lms);
    fflush(stdout);
  }
  ts_pool_trim(true);
}

static void usage(FILE *f) {
  fprintf(f, "usage: mpirun -np 4 tshard-bench-einsum-dist [--n N] [--reps R] [--case NAME]\n"
             "  --n N        matrix size of the matmul cases (default 8192: f64[8192,8192]); the\n"
             "               attention case scales with it (b=2, h=16, q=k=N/8, d=64)\n"
             "  --reps R     timed runs per case, median reported (default 3, at most 15)\n"
             "  --case NAME  only this case: mm_rows, mm_inner, mm_2d or attn_heads\n"
             "  --help       this text\n"
             "Prints <case>_ms, _wire_bytes, _planned_wire_bytes, _local_ms, _vs_local, _plan.\n");
}

int main(int argc, char **argv) {
  int64_t n = 8192;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
      n = atoll(argv[++i]);
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      fprintf(stderr, "unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (n < 8 || reps < 1 || reps > 15) {
    fprintf(stderr, "--n must be at least 8 and --reps 1 to 15\n");
    return 2;
  }
  ts_error err;
  if (ts_world_init(&argc, &argv, MPI_THREAD_SERIALIZED, &W, &err) != TS_OK) {
    fprintf(stderr, "MPI: %s\n", err.msg);
    return 1;
  }
  rank = ts_world_rank(W);
  size = ts_world_size(W);
  if (size != 4) {
    if (rank == 0)
      fprintf(stderr, "run with 4 ranks: mpirun -np 4 tshard-bench-einsum-dist\n");
    ts_world_finalize(&W, NULL);
    return 2;
  }
  /* Ranks on this node: those that share its hostname's communicator. */
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int per_node = 1;
  MPI_Comm_size(node, &per_node);
  MPI_Comm_free(&node);
  cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1)
    cores = 1;
  rank_threads = cores / per_node > 0 ? cores / per_node : 1;
  use_threads(rank_threads);
  if (rank == 0)
    printf("n=%lld\nranks=%d\ncores=%d\nthreads_per_rank=%d\nlocal_threads=%d\n"
           "path=in-process engine (ts_dein_run over a per-rank store)\n",
           (long long)n, size, cores, rank_threads, cores);
  int nd2[2] = {2, 2};
  int64_t sq[2] = {n, n};
  const int64_t *mm[2] = {sq, sq};
  if (!only || strcmp(only, "mm_rows") == 0) {
    const char *a[2] = {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]"};
    run_case("mm_rows", "ij,jk->ik", 2, nd2, mm, a, "mesh=[4] placements=[S(0)]");
  }
  if (!only || strcmp(only, "mm_inner") == 0) {
    const char *a[2] = {"mesh=[4] placements=[S(1)]", "mesh=[4] placements=[S(0)]"};
    run_case("mm_inner", "ij,jk->ik", 2, nd2, mm, a, "mesh=[4] placements=[S(0)]");
  }
  if (!only || strcmp(only, "mm_2d") == 0) {
    const char *a[2] = {"mesh=[2,2] placements=[S(0),S(1)]", "mesh=[2,2] placements=[S(0),S(1)]"};
    run_case("mm_2d", "ij,jk->ik", 2, nd2, mm, a, "mesh=[2,2] placements=[S(0),S(1)]");
  }
  if (!only || strcmp(only, "attn_heads") == 0) {
    int nd4[2] = {4, 4};
    int64_t q[4] = {2, 16, n / 8, 64};
    const int64_t *at[2] = {q, q};
    const char *a[2] = {"mesh=[4] placements=[S(1)]", "mesh=[4] placements=[S(1)]"};
    run_case("attn_heads", "bhqd,bhkd->bhqk", 2, nd4, at, a, "mesh=[4] placements=[S(1)]");
  }
  ts_world_finalize(&W, NULL);
  return 0;
}
