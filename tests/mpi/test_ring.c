/* test_ring.c - the ring reductions (comm/ring.c) against a naive reference: every rank builds
 * every rank's input (small integers, exact in every dtype), reduces them in double and converts
 * the result to the dtype; the ring's all-reduce and reduce-scatter must match it byte for byte,
 * for every reducible dtype and op (avg combining as the sum), on the world and on a group in
 * reversed order, with sizes of zero, fewer elements than ranks, uneven blocks (some empty) and
 * blocks of several pieces; and the link-rate measurement (the same figure on every member). */
#define TS_TEST_SEED 0x51a6u
#include "comm_internal.h"
#include "mpi_check.h"

static const ts_dtype dtypes[] = {TS_F32, TS_F64, TS_F16, TS_BF16, TS_I8, TS_I32, TS_I64, TS_U8};

/* Rank q's element k: a small integer (its sum over 8 ranks stays exact in bf16 and i8); for
 * prod 1 or 2 (a product over 6 ranks stays exact in i8). */
static ts_reduce_op value_op;
static int value(int q, int64_t k, int seed) {
  return value_op == TS_REDUCE_PROD ? 1 + (int)((k * 7 + q * 5 + seed) % 2)
                                    : (int)((k * 7 + q * 5 + seed) % 13);
}

/* Elements [0, n) of rank q's input in dtype dt. */
static void *input(int q, int64_t n, ts_dtype dt, int seed) {
  int32_t *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  void *out = malloc((size_t)(n > 0 ? n : 1) * ts_dtype_size(dt));
  for (int64_t k = 0; k < n; k++)
    v[k] = value(q, k, seed);
  ts_convert(out, dt, v, TS_I32, (size_t)n);
  free(v);
  return out;
}

/* The reduction of every member's elements [0, n), in double, converted to dt. */
static void *reference(int members, int64_t n, ts_dtype dt, ts_reduce_op op, int seed) {
  double *acc = malloc((size_t)(n > 0 ? n : 1) * sizeof *acc);
  for (int64_t k = 0; k < n; k++) {
    double a = value(0, k, seed);
    for (int q = 1; q < members; q++) {
      double x = value(q, k, seed);
      /* avg combines as the sum (the executor divides) */
      a = op == TS_REDUCE_SUM || op == TS_REDUCE_AVG ? a + x
          : op == TS_REDUCE_PROD                     ? a * x
          : op == TS_REDUCE_MAX                      ? (x > a ? x : a)
                                                     : (x < a ? x : a);
    }
    acc[k] = a;
  }
  void *out = malloc((size_t)(n > 0 ? n : 1) * ts_dtype_size(dt));
  ts_convert(out, dt, acc, TS_F64, (size_t)n);
  free(acc);
  return out;
}

static void test_allreduce(ts_comm *c, int64_t n, ts_dtype dt, ts_reduce_op op, bool in_place) {
  ts_error err;
  int me = ts_comm_rank(c), seed = (int)(n % 11) + (int)op;
  size_t es = ts_dtype_size(dt);
  void *in = input(me, n, dt, seed), *out = malloc((size_t)(n > 0 ? n : 1) * es);
  if (in_place)
    memcpy(out, in, (size_t)n * es);
  int rc = ts__ring_allreduce(c, in_place ? NULL : in, out, n, dt, op, &err);
  CHECK(rc == TS_OK, "%s", err.msg);
  void *want = reference(ts_comm_size(c), n, dt, op, seed);
  CHECK(rc || memcmp(out, want, (size_t)n * es) == 0, "all-reduce of %lld %s (%s%s) differs",
        (long long)n, ts_dtype_name(dt), ts_reduce_name(op), in_place ? ", in place" : "");
  free(in);
  free(out);
  free(want);
}

/* Blocks of uneven sizes (some empty), the same on every rank. */
static void test_reduce_scatter(ts_comm *c, int64_t unit, ts_dtype dt, ts_reduce_op op) {
  ts_error err;
  int n = ts_comm_size(c), me = ts_comm_rank(c), seed = (int)(unit % 7) + 3 * (int)op;
  int64_t *counts = malloc((size_t)n * sizeof *counts), total = 0, before = 0;
  for (int i = 0; i < n; i++) {
    counts[i] = i % 3 == 1 ? 0 : unit * (i + 1) + i;
    if (i < me)
      before += counts[i];
    total += counts[i];
  }
  size_t es = ts_dtype_size(dt);
  void *in = input(me, total, dt, seed);
  char *out = malloc((size_t)(counts[me] > 0 ? counts[me] : 1) * es);
  int rc = ts__ring_reduce_scatter(c, in, out, counts, dt, op, &err);
  CHECK(rc == TS_OK, "%s", err.msg);
  char *want = reference(n, total, dt, op, seed);
  CHECK(rc || memcmp(out, want + before * (int64_t)es, (size_t)counts[me] * es) == 0,
        "reduce-scatter of %lld %s (%s) differs at rank %d", (long long)total, ts_dtype_name(dt),
        ts_reduce_name(op), me);
  free(counts);
  free(in);
  free(out);
  free(want);
}

static void run_all(ts_comm *c) {
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
    ts_dtype dt = dtypes[d];
    const int64_t sizes[] = {0, 1, world_size > 1 ? world_size - 1 : 1, 1000, 20011};
    for (int op = 0; op < TS_REDUCE_COUNT; op++) {
      if (op == TS_REDUCE_AVG && !ts_dtype_is_float(dt))
        continue; /* refused (test_reduce, test_comm) */
      value_op = (ts_reduce_op)op;
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        test_allreduce(c, sizes[s], dt, (ts_reduce_op)op, s % 2 == 0);
      test_reduce_scatter(c, 5, dt, (ts_reduce_op)op);
    }
  }
  /* Blocks of two pieces and more, pieces of uneven length (sums: the pieces are what is
   * tested; one dtype of each width). */
  value_op = TS_REDUCE_SUM;
  const ts_dtype wide[] = {TS_U8, TS_BF16, TS_F32, TS_I64};
  for (size_t d = 0; d < sizeof wide / sizeof *wide; d++) {
    int64_t piece = ((int64_t)4 << 20) / (int64_t)ts_dtype_size(wide[d]);
    test_allreduce(c, piece * world_size + 17, wide[d], TS_REDUCE_SUM, d % 2 == 0);
    test_reduce_scatter(c, piece + 3, wide[d], TS_REDUCE_SUM);
  }
}

/* The link rate between two members: positive, the same on every member; bad members refused. */
static void test_link_rate(ts_comm *c) {
  ts_error err;
  double r = 0;
  if (ts_comm_size(c) > 1) {
    CHECK(ts_comm_link_rate(c, 0, ts_comm_size(c) - 1, 1 << 20, &r, &err) == TS_OK, "%s", err.msg);
    double lo = r, hi = r;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    CHECK(r > 0 && lo == hi, "link rate %g (from %g to %g over the ranks)", r, lo, hi);
  }
  CHECK(ts_comm_link_rate(c, 0, 0, 1 << 20, &r, &err) == TS_INVALID_ARGUMENT, "a == b taken");
  CHECK(ts_comm_link_rate(c, 0, ts_comm_size(c), 1 << 20, &r, &err) == TS_INVALID_ARGUMENT,
        "a member past the end taken");
}

int main(int argc, char **argv) {
  if (!mpi_check_start(&argc, &argv))
    return 1;
  run_all(ts_world_comm(W));
  test_link_rate(ts_world_comm(W));
  int *rev = malloc((size_t)world_size * sizeof *rev);
  for (int i = 0; i < world_size; i++)
    rev[i] = world_size - 1 - i;
  ts_comm *g = NULL;
  ts_error err;
  CHECK(ts_comm_group(W, rev, world_size, &g, &err) == TS_OK, "%s", err.msg);
  if (g)
    run_all(g);
  free(rev);
  return mpi_check_finish("test_ring");
}
