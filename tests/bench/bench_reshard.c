/* bench_reshard.c - the reshard benchmark: `mpirun -np 4 tshard-bench-reshard` prints key=value
 * lines for a 256 MiB f32 tensor ([8192, 8192]) resharded between common attributes.
 *
 * For each case: the strategy auto picks, the median time of several runs (planning included;
 * the slowest rank counts), the bytes that crossed the wire (sum over ranks of the bytes each
 * received from others, as reported by the executor), the minimum any reshard must move
 * (computed here from the slice boxes, or the known lower bound of all-reduce and reduce-scatter
 * for partial sources), the peak staging memory (max over ranks), and the time divided by the
 * median time of a raw MPI call moving the same bytes between the same buffers in the same run
 * (r_s1 moves nothing: its reference is a plain row-by-row memcpy of the same slice).
 *
 * Casts in transit: cast_f32_bf16_s0_s1_ms is the median time of the store's reshard of the f32
 * tensor S(0) -> S(1) cast to bf16 (each rank converts its slice, the bf16 pieces travel), and
 * cast_vs_narrow_raw that time over the same store reshard of a bf16 tensor of the same shape
 * (no cast), in the same run: the price of the conversion pass.
 *
 * Block-cyclic data: cyclic_s1_s0_ms is the median time of the executor's reshard of an 8192 x
 * 8192 f64 matrix in 64 x 64 blocks from a 2 x 2 process grid to a 4 x 1 grid (ScaLAPACK's local
 * arrays on both sides; planning included), cyclic_vs_raw that time over a raw MPI_Alltoallv of
 * the same bytes per pair between contiguous buffers in the same run.
 *
 * Planning alone: plan_4096_ms (S(0) -> S(1) over 4096 ranks) and plan_cyclic_65536_ms (a
 * 65536 x 65536 f64 matrix in 64 x 64 blocks on a 64 x 64 grid to 128 x 128 blocks). */
#include <malloc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_shard.h"
#include "bench_args.h"
#include "bench_mpi.h"

#define ROWS 8192
#define COLS 8192
#define REPS 7
#define WARMUP 2

static int rank, size;
static ts_world *W;

/* This rank's source slice, dense row-major, filled with a pattern. */
static void make_source(const ts_attr *a, ts_tensor *t) {
  int64_t shape[2] = {ROWS, COLS};
  ts_box b;
  bool in;
  memset(t, 0, sizeof *t);
  ts_attr_rank_box(a, 2, shape, rank, &b, &in, NULL);
  if (!in)
    return;
  int64_t ext[2] = {b.hi[0] - b.lo[0], b.hi[1] - b.lo[1]};
  ts_layout_plain(&t->layout, TS_F32, 2, ext, NULL);
  t->bytes = (size_t)(ext[0] * ext[1]) * 4;
  t->data = malloc(t->bytes ? t->bytes : 1);
  float *f = t->data;
  for (int64_t i = 0; i < ext[0] * ext[1]; i++)
    f[i] = (float)((i + rank) % 251);
}

/* The minimum bytes of a non-partial reshard: every target element not held by the same rank. */
static int64_t min_wire_intersection(const ts_attr *s, const ts_attr *t) {
  int64_t shape[2] = {ROWS, COLS}, total = 0;
  for (int i = 0; i < t->nranks; i++) {
    ts_box tb, sb, x;
    bool in_t, in_s;
    ts_attr_rank_box(t, 2, shape, t->ranks[i], &tb, &in_t, NULL);
    ts_attr_rank_box(s, 2, shape, t->ranks[i], &sb, &in_s, NULL);
    int64_t local = in_s && ts_box_intersect(&sb, &tb, &x) ? ts_box_numel(&x) : 0;
    total += (ts_box_numel(&tb) - local) * 4;
  }
  return total;
}

typedef struct result {
  double ms, raw_ms;
  ts_strategy strategy;
  int64_t wire, peak;
} result;

/* Raw MPI references, same buffers (the source slice and a target-sized buffer). */
typedef enum {
  RAW_NONE,
  RAW_ALLTOALL,
  RAW_ALLTOALLW,
  RAW_ALLGATHER,
  RAW_MEMCPY_CUT,
  RAW_ALLTOALLV,
  RAW_SENDRECV,
  RAW_ALLREDUCE,
  RAW_REDUCE_SCATTER
} raw_kind;

typedef struct raw_setup {
  char *dst;
  size_t tbytes;
  ts_box tb, sb;
  bool in_t, in_s;
  int *sc, *sd, *rc, *rd;
  MPI_Datatype *st, *rt; /* RAW_ALLTOALLW: per-peer types */
} raw_setup;

static void raw_prepare(raw_kind kind, const ts_attr *s, const ts_attr *t, raw_setup *x) {
  int64_t shape[2] = {ROWS, COLS};
  ts_attr_rank_box(t, 2, shape, rank, &x->tb, &x->in_t, NULL);
  ts_attr_rank_box(s, 2, shape, rank, &x->sb, &x->in_s, NULL);
  x->tbytes = x->in_t ? (size_t)ts_box_numel(&x->tb) * 4 : 0;
  x->dst = malloc(x->tbytes ? x->tbytes : 1);
  memset(x->dst, 0, x->tbytes);
  x->sc = calloc(4 * (size_t)size, sizeof(int));
  x->sd = x->sc + size;
  x->rc = x->sc + 2 * size;
  x->rd = x->sc + 3 * size;
  x->st = x->rt = NULL;
  if (kind == RAW_ALLTOALLW) { /* S(0) -> S(1): MPI moves each peer's columns of my rows (a
                                * subarray of the source slice) into its row range of the
                                * target slice: the same bytes between the same buffers */
    x->st = malloc(2 * (size_t)size * sizeof(MPI_Datatype));
    x->rt = x->st + size;
    int64_t srows = x->sb.hi[0] - x->sb.lo[0], tcols = x->tb.hi[1] - x->tb.lo[1];
    for (int j = 0; j < size; j++) {
      ts_box a, b;
      bool ia, ib;
      ts_attr_rank_box(t, 2, shape, j, &a, &ia, NULL); /* peer's target: its columns */
      ts_attr_rank_box(s, 2, shape, j, &b, &ib, NULL); /* peer's source: its rows */
      int sizes[2] = {(int)srows, COLS}, sub[2] = {(int)srows, (int)(a.hi[1] - a.lo[1])},
          start[2] = {0, (int)a.lo[1]};
      MPI_Type_create_subarray(2, sizes, sub, start, MPI_ORDER_C, MPI_FLOAT, &x->st[j]);
      MPI_Type_commit(&x->st[j]);
      x->sc[j] = 1;
      x->sd[j] = 0;
      x->rt[j] = MPI_FLOAT;
      x->rc[j] = (int)((b.hi[0] - b.lo[0]) * tcols);
      x->rd[j] = (int)(b.lo[0] * tcols * 4);
    }
  }
  if (kind == RAW_ALLTOALLV) /* row ranges of S(0) -> S(0): contiguous both ways */
    for (int j = 0; j < size; j++) {
      ts_box a, b, i;
      bool ia, ib;
      ts_attr_rank_box(t, 2, shape, j, &a, &ia, NULL); /* peer's target */
      ts_attr_rank_box(s, 2, shape, j, &b, &ib, NULL); /* peer's source */
      if (x->in_s && ia && ts_box_intersect(&x->sb, &a, &i)) {
        x->sc[j] = (int)(ts_box_numel(&i) * 4);
        x->sd[j] = (int)((i.lo[0] - x->sb.lo[0]) * COLS * 4);
      }
      if (x->in_t && ib && ts_box_intersect(&x->tb, &b, &i)) {
        x->rc[j] = (int)(ts_box_numel(&i) * 4);
        x->rd[j] = (int)((i.lo[0] - x->tb.lo[0]) * COLS * 4);
      }
    }
}

static void raw_run(raw_kind kind, const ts_tensor *src, raw_setup *x) {
  switch (kind) {
  case RAW_NONE: break;
  case RAW_ALLTOALL:
    MPI_Alltoall(src->data, (int)(src->bytes / (size_t)size), MPI_BYTE, x->dst,
                 (int)(x->tbytes / (size_t)size), MPI_BYTE, MPI_COMM_WORLD);
    break;
  case RAW_ALLTOALLW:
    MPI_Alltoallw(src->data, x->sc, x->sd, x->st, x->dst, x->rc, x->rd, x->rt, MPI_COMM_WORLD);
    break;
  case RAW_ALLGATHER:
    MPI_Allgather(src->data, (int)src->bytes, MPI_BYTE, x->dst, (int)src->bytes, MPI_BYTE,
                  MPI_COMM_WORLD);
    break;
  case RAW_MEMCPY_CUT: {
    int64_t w = x->tb.hi[1] - x->tb.lo[1];
    for (int64_t i = 0; i < x->tb.hi[0] - x->tb.lo[0]; i++)
      memcpy(x->dst + i * w * 4, (char *)src->data + ((x->tb.lo[0] + i) * COLS + x->tb.lo[1]) * 4,
             (size_t)w * 4);
    break;
  }
  case RAW_ALLTOALLV:
    MPI_Alltoallv(src->data, x->sc, x->sd, MPI_BYTE, x->dst, x->rc, x->rd, MPI_BYTE,
                  MPI_COMM_WORLD);
    break;
  case RAW_SENDRECV: { /* mesh [0,1] -> [2,3]: rank r sends its slice to r + 2 */
    MPI_Request req;
    if (rank < 2)
      MPI_Isend(src->data, (int)src->bytes, MPI_BYTE, rank + 2, 9, MPI_COMM_WORLD, &req);
    else
      MPI_Irecv(x->dst, (int)x->tbytes, MPI_BYTE, rank - 2, 9, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    break;
  }
  case RAW_ALLREDUCE:
    MPI_Allreduce(src->data, x->dst, (int)(x->tbytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    break;
  case RAW_REDUCE_SCATTER:
    MPI_Reduce_scatter_block(src->data, x->dst, (int)(x->tbytes / 4), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD);
    break;
  }
}

/* One case: WARMUP runs of each, then REPS runs of the reshard and of the raw reference,
 * alternating so that both see the same machine; medians of the slowest rank's times. */
static result run_case(const ts_attr *s, const ts_attr *t, ts_strategy forced, raw_kind kind) {
  int64_t shape[2] = {ROWS, COLS};
  ts_tensor src;
  make_source(s, &src);
  raw_setup x;
  raw_prepare(kind, s, t, &x);
  double times[REPS], raw_times[REPS];
  result r = {0};
  for (int k = -WARMUP; k < REPS; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    ts_plan_opts o = {forced, 0, size};
    ts_plan *p = NULL;
    ts_error err;
    int rc = ts_plan_create(2, shape, TS_F32, s, t, &o, &p, &err);
    ts_tensor out;
    ts_exec_report rep;
    if (rc == TS_OK)
      rc = ts_reshard_exec(W, p, src.data ? &src : NULL, NULL, NULL, &out, &rep, &err);
    double dt = MPI_Wtime() - t0;
    if (rc) {
      fprintf(stderr, "rank %d: reshard failed: %s\n", rank, err.msg);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    dt = slowest(dt) * 1e3;
    MPI_Allreduce(&rep.bytes_received, &r.wire, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&rep.peak_extra_bytes, &r.peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    r.strategy = ts_plan_strategy(p);
    ts_shard_free_tensor(&out);
    ts_plan_destroy(&p);

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    raw_run(kind, &src, &x);
    double raw = slowest(MPI_Wtime() - t0) * 1e3;
    if (k >= 0) {
      times[k] = dt;
      raw_times[k] = raw;
    }
  }
  for (int j = 0; x.st && j < size; j++)
    MPI_Type_free(&x.st[j]);
  free(x.st);
  free(x.sc);
  free(x.dst);
  free(src.data);
  r.ms = median(times, REPS);
  r.raw_ms = median(raw_times, REPS);
  return r;
}

/* The median time of the store's reshard of a fresh [ROWS, COLS] tensor of dtype dt from s to t,
 * cast to *cast (NULL: none); each run's tensor is made and filled outside the timed part. */
static double run_store_case(const ts_attr *s, const ts_attr *t, ts_dtype dt,
                             const ts_dtype *cast) {
  int64_t shape[2] = {ROWS, COLS};
  ts_store *st = NULL;
  ts_error err;
  if (ts_store_create(&st, rank, 0, &err)) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double times[REPS];
  for (int k = -WARMUP; k < REPS; k++) {
    ts_stored *e = NULL;
    if (ts_store_add_unfilled(st, "w", 2, shape, dt, s, NULL, &e, &err)) {
      fprintf(stderr, "rank %d: %s\n", rank, err.msg);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t n = e->local.bytes / ts_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
      float v = (float)((i + (size_t)rank) % 251) * 0.37f;
      if (dt == TS_BF16)
        ((uint16_t *)e->local.data)[i] = ts_f32_to_bf16(v);
      else
        ((float *)e->local.data)[i] = v;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int rc = ts_store_reshard_cast(st, W, "w", t, NULL, NULL, cast, TS_OK, NULL, NULL, &err);
    double dt_ms = slowest(MPI_Wtime() - t0) * 1e3;
    if (rc) {
      fprintf(stderr, "rank %d: reshard failed: %s\n", rank, err.msg);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ts_store_drop(st, "w", NULL);
    if (k >= 0)
      times[k] = dt_ms;
  }
  ts_store_destroy(&st);
  return median(times, REPS);
}

static void report(const char *name, const result *r, int64_t min_wire) {
  if (rank != 0)
    return;
  printf("%s_strategy=%s\n", name, ts_strategy_name(r->strategy));
  printf("%s_ms=%.2f\n", name, r->ms);
  printf("%s_wire_bytes=%lld\n", name, (long long)r->wire);
  printf("%s_min_wire_bytes=%lld\n", name, (long long)min_wire);
  printf("%s_peak_extra_bytes=%lld\n", name, (long long)r->peak);
  printf("%s_vs_raw_mpi=%.3f\n", name, r->ms / r->raw_ms);
  fflush(stdout);
}

/* The block-cyclic case (see the top): this rank's local array under a, and the elements it shares
 * with each target rank under b (row-major parts over both grids). */
#define CYC_N 8192
#define CYC_NB 64
static int64_t cyc_local(const ts_attr *a, int r, const int64_t *grid, int64_t *ext) {
  int64_t coord[2] = {r / grid[1], r % grid[1]}, n = 1;
  (void)a;
  for (int d = 0; d < 2; d++) {
    ts_dim_deal dd = {CYC_N, grid[d], CYC_NB, 0, NULL};
    n *= ext[d] = ts_deal_owned_before(&dd, coord[d], CYC_N);
  }
  return n;
}

static void cyclic_case(void) {
  ts_attr *a = attr("mesh=[2,2]@0-3 placements=[S(0,cyclic=64),S(1,cyclic=64)]");
  ts_attr *b = attr("mesh=[4,1]@0-3 placements=[S(0,cyclic=64),S(1,cyclic=64)]");
  int64_t ga[2] = {2, 2}, gb[2] = {4, 1}, ext[2], shape[2] = {CYC_N, CYC_N};
  int64_t n = cyc_local(a, rank, ga, ext);
  ts_tensor src = {0};
  ts_layout_plain(&src.layout, TS_F64, 2, ext, NULL);
  src.bytes = (size_t)n * 8;
  src.data = malloc(src.bytes);
  for (int64_t i = 0; i < n; i++)
    ((double *)src.data)[i] = (double)((i + rank) % 251);
  double t[REPS];
  for (int k = -WARMUP; k < REPS; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    ts_plan *p = NULL;
    ts_tensor out;
    ts_error err;
    int rc = ts_plan_create(2, shape, TS_F64, a, b, NULL, &p, &err);
    rc = rc ? rc : ts_reshard_exec(W, p, &src, NULL, NULL, &out, NULL, &err);
    double ms = slowest((MPI_Wtime() - t0) * 1e3);
    if (rc)
      fprintf(stderr, "rank %d: cyclic reshard failed: %s\n", rank, err.msg);
    else
      ts_shard_free_tensor(&out);
    ts_plan_destroy(&p);
    if (k >= 0)
      t[k] = ms;
  }
  /* The raw reference: each pair's shared elements as one contiguous block. */
  ts_overlay *ov[2];
  for (int d = 0; d < 2; d++) {
    ts_dim_deal da = {CYC_N, ga[d], CYC_NB, 0, NULL}, db = {CYC_N, gb[d], CYC_NB, 0, NULL};
    ts_overlay_create(&da, &db, &ov[d], NULL);
  }
  int sc[4], sd[4], rc_[4], rd[4], ms = 0, mr = 0;
  int64_t mine[2] = {rank / ga[1], rank % ga[1]}, mt[2] = {rank / gb[1], rank % gb[1]};
  for (int q = 0; q < size; q++) {
    int64_t qt[2] = {q / gb[1], q % gb[1]}, qs[2] = {q / ga[1], q % ga[1]};
    sc[q] = (int)(ts_overlay_pair_len(ov[0], mine[0], qt[0]) *
                  ts_overlay_pair_len(ov[1], mine[1], qt[1]));
    rc_[q] =
        (int)(ts_overlay_pair_len(ov[0], qs[0], mt[0]) * ts_overlay_pair_len(ov[1], qs[1], mt[1]));
    sd[q] = ms, rd[q] = mr;
    ms += sc[q], mr += rc_[q];
  }
  double *sb = malloc((size_t)ms * 8 + 8), *rb = malloc((size_t)mr * 8 + 8), rt[REPS];
  memset(sb, 1, (size_t)ms * 8);
  memset(rb, 0, (size_t)mr * 8);
  for (int k = -WARMUP; k < REPS; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Alltoallv(sb, sc, sd, MPI_DOUBLE, rb, rc_, rd, MPI_DOUBLE, MPI_COMM_WORLD);
    double v = slowest((MPI_Wtime() - t0) * 1e3);
    if (k >= 0)
      rt[k] = v;
  }
  double cm = median(t, REPS), rm = median(rt, REPS);
  if (rank == 0)
    printf("cyclic_s1_s0_ms=%.2f\ncyclic_raw_alltoallv_ms=%.2f\ncyclic_vs_raw=%.3f\n", cm, rm,
           cm / rm);
  free(sb), free(rb), free(src.data);
  ts_overlay_destroy(&ov[0]);
  ts_overlay_destroy(&ov[1]);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
}

static const char usage[] =
    "usage: mpirun -np 4 tshard-bench-reshard [--help]\n"
    "Reshards of a 256 MiB f32 tensor through the executor (S(0)->S(1), S(0)->R, R->S(1),\n"
    "ragged, cross-group, P(sum)->R, P(sum)->S(0)), a cast in transit and a block-cyclic\n"
    "move, each against raw MPI of the same bytes in the same run; prints key=value lines\n"
    "(<case>_ms, <case>_wire_bytes, <case>_vs_raw_mpi, cast_vs_narrow_raw, cyclic_vs_raw).\n";

int main(int argc, char **argv) {
  ts_error err;
  if (ts_world_init(&argc, &argv, MPI_THREAD_SERIALIZED, &W, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  rank = ts_world_rank(W);
  size = ts_world_size(W);
  int rc = tsb_no_options(argc, argv, "tshard-bench-reshard", usage, rank == 0);
  if (rc >= 0) {
    ts_world_finalize(&W, NULL);
    return rc;
  }
  if (size != 4) {
    if (rank == 0)
      fprintf(stderr, "run with 4 ranks: mpirun -np 4 %s\n", argv[0]);
    ts_world_finalize(&W, NULL);
    return 2;
  }
  ts_kernels_set_threads(1); /* four ranks share the cores */
  /* Keep freed slices in the heap, as a long-running daemon does, so that each run measures the
   * data movement and not the kernel faulting in fresh pages (the raw references reuse their
   * buffers too). */
  if (!mallopt(M_MMAP_MAX, 0) || !mallopt(M_TRIM_THRESHOLD, 1 << 30))
    fprintf(stderr, "rank %d: mallopt failed; times include page faults\n", rank);
  int64_t n = (int64_t)ROWS * COLS * 4;

  ts_attr *s0 = attr("mesh=[4]@0-3 placements=[S(0)]");
  ts_attr *s1 = attr("mesh=[4]@0-3 placements=[S(1)]");
  ts_attr *r = attr("mesh=[4]@0-3 placements=[R]");
  ts_attr *rag = attr("mesh=[4]@0-3 placements=[S(0)] splits={0:[4096,2048,1024,1024]}");
  ts_attr *g01 = attr("mesh=[2]@0-1 placements=[S(0)]");
  ts_attr *g23 = attr("mesh=[2]@2-3 placements=[S(0)]");
  ts_attr *pr = attr("mesh=[4]@0-3 placements=[P(sum)]");

  /* The raw reference of S(0) -> S(1) is an all-to-all-w with subarray types: the same bytes
   * from the same source slice into the same target slice. A plain all-to-all of contiguous
   * blocks (which does not deliver the right elements) is printed beside it. */
  result res = run_case(s0, s1, TS_STRATEGY_AUTO, RAW_ALLTOALLW);
  report("s0_s1", &res, min_wire_intersection(s0, s1));
  result contiguous = run_case(s0, s1, TS_STRATEGY_AUTO, RAW_ALLTOALL);
  if (rank == 0)
    printf("s0_s1_vs_raw_contiguous_alltoall=%.3f\n", contiguous.ms / contiguous.raw_ms);
  res = run_case(s0, r, TS_STRATEGY_AUTO, RAW_ALLGATHER);
  report("s0_r", &res, min_wire_intersection(s0, r));
  res = run_case(r, s1, TS_STRATEGY_AUTO, RAW_MEMCPY_CUT);
  report("r_s1", &res, min_wire_intersection(r, s1));
  res = run_case(rag, s0, TS_STRATEGY_AUTO, RAW_ALLTOALLV);
  report("ragged_s0_s0", &res, min_wire_intersection(rag, s0));
  res = run_case(g01, g23, TS_STRATEGY_AUTO, RAW_SENDRECV);
  report("cross_group", &res, min_wire_intersection(g01, g23));
  /* Partial sources: the lower bounds of all-reduce (2 (P-1)/P of the data per rank) and
   * reduce-scatter ((P-1)/P per rank). */
  res = run_case(pr, r, TS_STRATEGY_AUTO, RAW_ALLREDUCE);
  report("p_r", &res, 2 * (size - 1) * n);
  res = run_case(pr, s0, TS_STRATEGY_AUTO, RAW_REDUCE_SCATTER);
  report("p_s0", &res, (size - 1) * n);

  /* Casts in transit: f32 -> bf16 against the same move of bf16 data. */
  ts_dtype bf16 = TS_BF16;
  double cast_ms = run_store_case(s0, s1, TS_F32, &bf16);
  double narrow_ms = run_store_case(s0, s1, TS_BF16, NULL);
  if (rank == 0) {
    printf("cast_f32_bf16_s0_s1_ms=%.2f\n", cast_ms);
    printf("cast_narrow_bf16_s0_s1_ms=%.2f\n", narrow_ms);
    printf("cast_vs_narrow_raw=%.3f\n", cast_ms / narrow_ms);
  }

  result ag = run_case(s0, s1, TS_STRATEGY_ALLGATHER, RAW_NONE);
  result a2a = run_case(s0, s1, TS_STRATEGY_ALLTOALL, RAW_NONE);
  if (rank == 0) {
    printf("s0_s1_allgather_ms=%.2f\n", ag.ms);
    printf("s0_s1_alltoall_ms=%.2f\n", a2a.ms);
  }

  cyclic_case();

  /* Planning S(0) -> S(1) over a 4096-rank mesh. */
  ts_attr *b0 = attr("mesh=[4096] placements=[S(0)]"), *b1 = attr("mesh=[4096] placements=[S(1)]");
  double pt[REPS];
  int64_t shape[2] = {ROWS, COLS};
  for (int k = 0; k < REPS; k++) {
    double t0 = MPI_Wtime();
    ts_plan *p = NULL;
    ts_plan_create(2, shape, TS_F32, b0, b1, NULL, &p, NULL);
    pt[k] = (MPI_Wtime() - t0) * 1e3;
    ts_plan_destroy(&p);
  }
  if (rank == 0)
    printf("plan_4096_ms=%.2f\n", median(pt, REPS));

  /* Planning a 65536 x 65536 f64 ScaLAPACK-style matrix, 64 x 64 blocks on a 64 x 64 grid, to
   * 128 x 128 blocks on the same grid (block-cyclic overlays, 4096 ranks). */
  ts_attr *c64 = attr("mesh=[64,64] placements=[S(0,cyclic=64),S(1,cyclic=64)]");
  ts_attr *c128 = attr("mesh=[64,64] placements=[S(0,cyclic=128),S(1,cyclic=128)]");
  int64_t big[2] = {65536, 65536};
  for (int k = 0; k < REPS; k++) {
    double t0 = MPI_Wtime();
    ts_plan *p = NULL;
    ts_error perr;
    if (ts_plan_create(2, big, TS_F64, c64, c128, NULL, &p, &perr) != TS_OK)
      fprintf(stderr, "rank %d: cyclic plan failed: %s\n", rank, perr.msg);
    pt[k] = (MPI_Wtime() - t0) * 1e3;
    ts_plan_destroy(&p);
  }
  if (rank == 0)
    printf("plan_cyclic_65536_ms=%.2f\n", median(pt, REPS));
  ts_attr_destroy(&c64);
  ts_attr_destroy(&c128);

  ts_attr *all[] = {s0, s1, r, rag, g01, g23, pr, b0, b1};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    ts_attr_destroy(&all[i]);
  ts_world_finalize(&W, NULL);
  return 0;
}
