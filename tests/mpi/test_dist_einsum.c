/* test_dist_einsum.c - distributed einsum over the store under mpirun (any world size), against
 * the kernels' naive einsum reference on the whole tensors.
 *
 * Every rank draws the same random cases (same seed): equations of 1 to 3 operands, label sizes
 * 1 to 7, operand attributes on random 1-D and 2-D meshes over random subsets of the world
 * (sub-meshes, different groups per operand) with Shard, Replicate and Partial(sum|max)
 * placements, balanced, uneven and ragged (zero-size parts) splits, plain and blocked local
 * layouts; the output attribute natural or requested; the plan automatic or forced to any
 * candidate. Element values are a function of the global index (and of the partial contributor),
 * so every rank knows the whole tensors and computes the reference itself. Results (and
 * gradients, with and without the forward's kept state) are brought to Replicate over the world
 * with the store's reshard and compared on every rank. The measured bytes on the wire must equal
 * the plan's. Misuse and an allocation failure injected on one rank must leave the store as it
 * was, with the same error on every rank. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_dist_einsum.h"

#define TS_TEST_SEED 0xE1A5E1A5ULL
#include "mpi_check.h"

/* ---------------------------------------------------------------------------------------------
 * Values */

static double value_of(int64_t lin, int tensor, int64_t contributor) {
  return (double)((lin * 7 + 3 + tensor * 5 + contributor * 13) % 11) - 5.0;
}

static int64_t partial_index(const ts_attr *a, int64_t mesh_index, ts_reduce_op *op) {
  int64_t stride = 1, par = 0, w = 1;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    int64_t c = (mesh_index / stride) % a->mesh_shape[m];
    if (a->place[m].kind == TS_PLACE_PARTIAL) {
      par += c * w;
      w *= a->mesh_shape[m];
      *op = a->place[m].op;
    }
    stride *= a->mesh_shape[m];
  }
  return par;
}

static int64_t partial_count(const ts_attr *a) {
  int64_t n = 1;
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_PARTIAL)
      n *= a->mesh_shape[m];
  return n;
}

static double true_value(int64_t lin, int tensor, const ts_attr *a) {
  ts_reduce_op op = TS_REDUCE_SUM;
  partial_index(a, 0, &op);
  double v = value_of(lin, tensor, 0);
  for (int64_t c = 1; c < partial_count(a); c++) {
    double x = value_of(lin, tensor, c);
    v = op == TS_REDUCE_SUM ? v + x : op == TS_REDUCE_MAX ? fmax(v, x) : fmin(v, x);
  }
  return v;
}

static int64_t numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= shape[d];
  return n;
}

/* The whole tensor (f64, row-major) of tensor id `tensor` under attribute a. */
static double *whole_of(int ndim, const int64_t *shape, int tensor, const ts_attr *a) {
  int64_t n = numel(ndim, shape);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = true_value(i, tensor, a);
  return v;
}

/* Creates tensor `name` in the store with attribute a, layout tag, filled with its values. */
static int put_tensor(ts_store *s, const char *name, int ndim, const int64_t *shape, ts_dtype dt,
                      const ts_attr *a, const char *tag, int tensor) {
  ts_stored *e = NULL;
  ts_error err;
  int rc = ts_store_add(s, name, ndim, shape, dt, a, tag, &e, &err);
  CHECK(rc == TS_OK, "store_add %s: %s", name, err.msg);
  if (rc || !e->has_slice)
    return rc;
  ts_geom *g = NULL;
  ts_geom_create(a, ndim, shape, &g, NULL);
  int64_t mi = ts_geom_mesh_index(g, world_rank);
  ts_geom_destroy(&g);
  ts_reduce_op op = TS_REDUCE_SUM;
  int64_t par = partial_index(a, mi, &op);
  int64_t n = ts_box_numel(&e->box);
  int64_t idx[TS_MAX_DIMS], loc[TS_MAX_DIMS];
  for (int64_t k = 0; k < n; k++) {
    int64_t r = k;
    for (int d = ndim - 1; d >= 0; d--) {
      int64_t ext = e->box.hi[d] - e->box.lo[d];
      loc[d] = r % ext;
      r /= ext;
      idx[d] = loc[d] + e->box.lo[d];
    }
    int64_t lin = 0;
    for (int d = 0; d < ndim; d++)
      lin = lin * shape[d] + idx[d];
    uint8_t *p = (uint8_t *)e->local.data + ts_layout_address(&e->local.layout, loc);
    double v = value_of(lin, tensor, par);
    if (dt == TS_F64)
      *(double *)p = v;
    else
      *(float *)p = (float)v;
  }
  return TS_OK;
}

/* Brings `name` to Replicate over the world (in the store) and returns its values as f64. */
static double *fetch_whole(ts_store *s, const char *name) {
  ts_stored *e = ts_store_find(s, name);
  if (!e)
    return NULL;
  int64_t one = world_size;
  ts_placement r = ts_replicate();
  ts_attr *all = NULL;
  ts_attr_create(&all, 1, &one, NULL, &r, NULL);
  ts_error err;
  int rc = ts_store_reshard(s, W, name, all, NULL, NULL, NULL, &err);
  ts_attr_destroy(&all);
  CHECK(rc == TS_OK, "reshard %s to R: %s", name, err.msg);
  if (rc)
    return NULL;
  int64_t n = numel(e->ndim, e->shape);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = e->dtype == TS_F64 ? ((double *)e->local.data)[i] : ((float *)e->local.data)[i];
  return v;
}

/* ---------------------------------------------------------------------------------------------
 * Random attributes */

static void random_ranks(int *ranks, int n) {
  int perm[64];
  for (int i = 0; i < world_size; i++)
    perm[i] = i;
  for (int i = world_size - 1; i > 0; i--) {
    int j = (int)rnd_below(i + 1);
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int i = 0; i < n; i++)
    ranks[i] = perm[i];
}

/* partial_ok: Partial placements allowed (sum mostly, sometimes max). */
static ts_attr *random_attr(int ndim, const int64_t *shape, bool partial_ok) {
  int64_t mesh[2];
  int mnd = world_size >= 4 && rnd_below(2) ? 2 : 1;
  if (mnd == 1) {
    mesh[0] = 1 + rnd_below(world_size);
  } else {
    mesh[0] = 2;
    mesh[1] = 1 + rnd_below(world_size / 2);
  }
  int n = (int)(mesh[0] * (mnd == 2 ? mesh[1] : 1));
  int ranks[64];
  random_ranks(ranks, n);
  ts_placement pl[2];
  ts_reduce_op pop = rnd_below(5) == 0 ? TS_REDUCE_MAX : TS_REDUCE_SUM;
  for (int m = 0; m < mnd; m++) {
    int k = (int)rnd_below(partial_ok ? 6 : 5);
    if (ndim > 0 && k < 3)
      pl[m] = ts_shard_on((int)rnd_below(ndim));
    else if (k == 5)
      pl[m] = ts_partial(pop);
    else
      pl[m] = ts_replicate();
  }
  ts_attr *a = NULL;
  ts_attr_create(&a, mnd, mesh, ranks, pl, NULL);
  /* ragged splits now and then */
  for (int d = 0; d < ndim; d++) {
    int64_t parts = 1;
    for (int m = 0; m < mnd; m++)
      if (pl[m].kind == TS_PLACE_SHARD && pl[m].dim == d)
        parts *= mesh[m];
    if (parts == 1 || rnd_below(3))
      continue;
    int64_t sizes[64], left = shape[d];
    for (int64_t p = 0; p < parts - 1; p++) {
      sizes[p] = rnd_below(left + 1);
      left -= sizes[p];
    }
    sizes[parts - 1] = left;
    ts_attr_set_splits(a, d, (int)parts, sizes, NULL);
  }
  return a;
}

static const char *blocked_tag(int ndim) {
  static const char *tags[5] = {NULL, "A4a", "aB4b", "abC2c", "abcD2d"};
  return ndim >= 1 && ndim <= 4 ? tags[ndim] : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Cases */

static const char *const equations[] = {
    "ij,jk->ik",       "ij,jk",   "bij,bjk->bik", "ij->ji",       "ij->j",
    "ii->i",           "i,i->",   "ij,j->i",      "ij,jk,kl->il", "ab,bc,ca->",
    "bhqd,bhkd->bhqk", "i,j->ij", "ij,ij->ij",    "ijk->",        "abc,cd->abd",
};
#define NEQ ((int)(sizeof equations / sizeof equations[0]))

typedef struct eq_info {
  int n;
  char labels[3][9];
} eq_info;

static void split_eq(const char *eq, eq_info *info) {
  memset(info, 0, sizeof *info);
  const char *c = eq;
  int k = 0;
  for (; *c && !(c[0] == '-' && c[1] == '>'); c++) {
    if (*c == ',') {
      info->n++;
      k = 0;
      continue;
    }
    info->labels[info->n][k++] = *c;
  }
  info->n++;
}

static int same_everywhere(int v) {
  int lo = v, hi = v;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

static void compare(const char *what, const double *got, const double *want, int64_t n,
                    int caseno) {
  int bad = 0;
  for (int64_t i = 0; i < n && !bad; i++)
    if (fabs(got[i] - want[i]) > 1e-6 * (1 + fabs(want[i])))
      bad = 1;
  CHECK(!bad, "case %d: %s differs from the reference", caseno, what);
}

static void run_case(ts_store *s, int caseno) {
  const char *eq = equations[rnd_below(NEQ)];
  eq_info info;
  split_eq(eq, &info);
  int64_t size[128];
  for (int c = 0; c < 128; c++)
    size[c] = 1 + rnd_below(7);
  ts_dtype dt = rnd_below(4) ? TS_F64 : TS_F32;
  char names[3][32], out[32], gnames[3][32], gout[32];
  int ndims[3];
  int64_t shapes[3][TS_MAX_DIMS];
  ts_attr *attrs[3] = {NULL};
  for (int i = 0; i < info.n; i++) {
    ndims[i] = (int)strlen(info.labels[i]);
    for (int d = 0; d < ndims[i]; d++)
      shapes[i][d] = size[(int)info.labels[i][d]];
    attrs[i] = random_attr(ndims[i], shapes[i], true);
    snprintf(names[i], sizeof names[i], "op%d_%d", caseno, i);
    const char *tag = rnd_below(4) == 0 ? blocked_tag(ndims[i]) : NULL;
    put_tensor(s, names[i], ndims[i], shapes[i], dt, attrs[i], tag, i);
  }
  snprintf(out, sizeof out, "out%d", caseno);
  /* The output's shape from a local plan; a requested attribute half the time. */
  const int64_t *shp[3] = {shapes[0], shapes[1], shapes[2]};
  ts_dein_plan *probe = NULL;
  ts_dein_opts po = {NULL, NULL, world_size, 0};
  ts_error err;
  int rc = ts_dein_plan_create(eq, info.n, ndims, shp, (const ts_attr *const *)attrs, dt, &po,
                               &probe, &err);
  CHECK(rc == TS_OK, "case %d: plan %s: %s", caseno, eq, err.msg);
  if (rc) {
    for (int i = 0; i < info.n; i++)
      ts_attr_destroy(&attrs[i]);
    return;
  }
  int ond = probe->out_ndim;
  int64_t oshape[TS_MAX_DIMS];
  memcpy(oshape, probe->out_shape, sizeof oshape);
  ts_dein_plan_destroy(&probe);
  ts_attr *oattr = rnd_below(2) ? random_attr(ond, oshape, true) : NULL;
  /* A forced plan a third of the time: any candidate that applies. */
  char forced[32] = "";
  po.out_attr = oattr;
  ts_dein_plan_create(eq, info.n, ndims, shp, (const ts_attr *const *)attrs, dt, &po, &probe, NULL);
  if (probe && rnd_below(3) == 0) {
    const ts_dein_cand *c = &probe->cand[rnd_below(probe->ncand)];
    if (c->applies)
      snprintf(forced, sizeof forced, "%s", c->name);
  }
  ts_dein_plan_destroy(&probe);
  bool keep = rnd_below(2);
  ts_dein_request req = {eq,   info.n, {names[0], names[1], names[2]}, out, oattr, forced, 0, TS_OK,
                         NULL, false};
  ts_dein_kept *kept = NULL;
  ts_dein_report rep;
  char *explain = NULL;
  rc = ts_dein_run(s, W, &req, keep ? &kept : NULL, &explain, &rep, &err);
  CHECK(rc == TS_OK, "case %d: %s (plan '%s'): %s", caseno, eq, forced, err.msg);
  CHECK(same_everywhere(rc), "case %d: status differs between ranks", caseno);
  if (rc == TS_OK) {
    CHECK(explain && strstr(explain, "chosen: "), "case %d: explain", caseno);
    int64_t sent = rep.bytes_sent;
    MPI_Allreduce(MPI_IN_PLACE, &sent, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sent == rep.planned_wire_bytes, "case %d: %s plan %s: %lld bytes sent, %lld planned",
          caseno, eq, rep.plan, (long long)sent, (long long)rep.planned_wire_bytes);
    if (oattr) {
      ts_stored *e = ts_store_find(s, out);
      CHECK(e && ts_attr_equal(e->attr, oattr), "case %d: output attribute", caseno);
    }
  }
  free(explain);
  /* The reference */
  double *whole[3];
  ts_tensor wt[3];
  const ts_tensor *wp[3];
  for (int i = 0; i < info.n; i++) {
    whole[i] = whole_of(ndims[i], shapes[i], i, attrs[i]);
    wt[i].data = whole[i];
    wt[i].bytes = (size_t)numel(ndims[i], shapes[i]) * 8;
    ts_layout_plain(&wt[i].layout, TS_F64, ndims[i], shapes[i], NULL);
    wp[i] = &wt[i];
  }
  int64_t on = numel(ond, oshape);
  double *want = calloc((size_t)(on ? on : 1), sizeof *want);
  ts_tensor wo = {want, (size_t)on * 8, {0}};
  ts_layout_plain(&wo.layout, TS_F64, ond, oshape, NULL);
  ts_einsum_reference(eq, info.n, wp, &wo, NULL);
  if (rc == TS_OK) {
    /* Backward before the output is resharded (it reads the output gradient's attribute). */
    ts_attr *gattr = random_attr(ond, oshape, false);
    snprintf(gout, sizeof gout, "gout%d", caseno);
    put_tensor(s, gout, ond, oshape, dt, gattr, NULL, 7);
    const char *gn[3] = {NULL, NULL, NULL};
    for (int i = 0; i < info.n; i++) {
      snprintf(gnames[i], sizeof gnames[i], "grad%d_%d", caseno, i);
      if (rnd_below(3))
        gn[i] = gnames[i];
    }
    if (!gn[0] && !gn[1] && !gn[2])
      gn[0] = gnames[0];
    ts_dein_report brep;
    int brc = ts_dein_backward(s, W, &req, kept, gout, gn, &brep, &err);
    CHECK(brc == TS_OK, "case %d: backward %s (kept %d): %s", caseno, eq, keep, err.msg);
    CHECK(same_everywhere(brc), "case %d: backward status differs", caseno);
    if (brc == TS_OK) {
      double *gw = whole_of(ond, oshape, 7, gattr);
      ts_tensor gt = {gw, (size_t)on * 8, {0}};
      ts_layout_plain(&gt.layout, TS_F64, ond, oshape, NULL);
      double *gref[3] = {NULL};
      ts_tensor grt[3];
      const ts_tensor *grp[3] = {NULL, NULL, NULL};
      for (int i = 0; i < info.n; i++) {
        int64_t n = numel(ndims[i], shapes[i]);
        gref[i] = calloc((size_t)(n ? n : 1), sizeof(double));
        grt[i].data = gref[i];
        grt[i].bytes = (size_t)n * 8;
        ts_layout_plain(&grt[i].layout, TS_F64, ndims[i], shapes[i], NULL);
        grp[i] = &grt[i];
      }
      ts_einsum_reference_backward(eq, info.n, wp, &gt, grp, NULL);
      for (int i = 0; i < info.n; i++) {
        if (gn[i]) {
          double *got = fetch_whole(s, gn[i]);
          if (got)
            compare("a gradient", got, gref[i], numel(ndims[i], shapes[i]), caseno);
          free(got);
          ts_store_drop(s, gn[i], NULL);
        }
        free(gref[i]);
      }
      free(gw);
    }
    ts_store_drop(s, gout, NULL);
    ts_attr_destroy(&gattr);
    double *got = fetch_whole(s, out);
    if (got)
      compare("the result", got, want, on, caseno);
    free(got);
    ts_store_drop(s, out, NULL);
  }
  free(want);
  for (int i = 0; i < info.n; i++) {
    free(whole[i]);
    ts_store_drop(s, names[i], NULL);
    ts_attr_destroy(&attrs[i]);
  }
  ts_dein_kept_destroy(&kept);
  ts_attr_destroy(&oattr);
}

/* ---------------------------------------------------------------------------------------------
 * Misuse: an error on every rank, the same one, and the store as it was */

static void expect_error(ts_store *s, const ts_dein_request *req, int code, const char *what) {
  int before = ts_store_count(s);
  ts_error err;
  ts_error_clear(&err);
  int rc = ts_dein_run(s, W, req, NULL, NULL, NULL, &err);
  CHECK(rc == code, "%s: status %d (%s), expected %d", what, rc, err.msg, code);
  CHECK(same_everywhere(rc), "%s: status differs between ranks", what);
  CHECK(ts_store_count(s) == before, "%s: the store changed", what);
  CHECK(err.msg[0] != '\0', "%s: no message", what);
  if (world_rank == 0 && getenv("TS_TEST_VERBOSE"))
    printf("%s -> %s\n", what, err.msg);
}

static void misuse(ts_store *s) {
  int64_t sa[2] = {6, 4}, sb[2] = {4, 5}, sc[2] = {3, 5};
  int64_t n = world_size;
  ts_placement p0 = ts_shard_on(0);
  ts_attr *a = NULL;
  ts_attr_create(&a, 1, &n, NULL, &p0, NULL);
  put_tensor(s, "A", 2, sa, TS_F64, a, NULL, 0);
  put_tensor(s, "B", 2, sb, TS_F64, a, NULL, 1);
  put_tensor(s, "C", 2, sc, TS_F64, a, NULL, 2);
  put_tensor(s, "X", 2, sc, TS_F32, a, NULL, 2);
  ts_dein_request r = {"ij,jk->ik", 2, {"A", "B"}, "Y", NULL, NULL, 0, TS_OK, NULL, false};
  r.equation = "ij,jk->iq";
  expect_error(s, &r, TS_EINSUM, "output label absent");
  r.equation = "ij,j?->ik";
  expect_error(s, &r, TS_EINSUM, "bad character");
  r.equation = "ij,jk,kl->il";
  expect_error(s, &r, TS_EINSUM, "operand count");
  r.equation = "...j,jk->...k";
  expect_error(s, &r, TS_EINSUM, "ellipsis");
  r.equation = "ijk,jk->ik";
  expect_error(s, &r, TS_EINSUM, "dims mismatch");
  r.equation = "ij,jk->ik";
  r.operands[1] = "C";
  expect_error(s, &r, TS_BAD_SHAPE, "shape mismatch");
  r.operands[1] = "nope";
  expect_error(s, &r, TS_NOT_FOUND, "missing operand");
  r.operands[1] = "X";
  expect_error(s, &r, TS_EINSUM, "dtype mismatch");
  r.operands[1] = "B";
  r.out = "A";
  expect_error(s, &r, TS_EXISTS, "name collision");
  r.out = "Y";
  r.plan = "bogus";
  expect_error(s, &r, TS_EINSUM_PLAN, "unknown plan");
  r.plan = NULL;
  ts_attr *bad = NULL;
  int64_t big = world_size + 1;
  ts_placement rr = ts_replicate();
  ts_attr_create(&bad, 1, &big, NULL, &rr, NULL);
  r.out_attr = bad;
  expect_error(s, &r, TS_BAD_ATTRIBUTE, "output attribute outside the world");
  r.out_attr = NULL;
  ts_attr_destroy(&bad);
  /* An allocation failure on the last rank only: every rank fails, nothing is created. */
  if (world_rank == world_size - 1)
    ts_shard_debug_fail_alloc(1);
  int before = ts_store_count(s);
  ts_error err;
  int rc = ts_dein_run(s, W, &r, NULL, NULL, NULL, &err);
  ts_shard_debug_fail_alloc(0);
  CHECK(rc != TS_OK, "injected failure: succeeded");
  CHECK(same_everywhere(rc), "injected failure: status differs");
  CHECK(ts_store_count(s) == before && !ts_store_find(s, "Y"), "injected failure: store changed");
  /* Then it works, and the output may not be created twice. */
  rc = ts_dein_run(s, W, &r, NULL, NULL, NULL, &err);
  CHECK(rc == TS_OK, "after the failure: %s", err.msg);
  expect_error(s, &r, TS_EXISTS, "output exists");
  /* Backward misuse */
  const char *gn[3] = {"gA", NULL, NULL};
  rc = ts_dein_backward(s, W, &r, NULL, "nope", gn, NULL, &err);
  CHECK(rc == TS_NOT_FOUND && same_everywhere(rc), "backward without grad_out: %d", rc);
  rc = ts_dein_backward(s, W, &r, NULL, "C", gn, NULL, &err);
  CHECK(rc == TS_BAD_SHAPE && same_everywhere(rc), "backward wrong grad shape: %d %s", rc, err.msg);
  const char *gn2[3] = {"B", NULL, NULL};
  rc = ts_dein_backward(s, W, &r, NULL, "Y", gn2, NULL, &err);
  CHECK(rc == TS_EXISTS && same_everywhere(rc), "backward name collision: %d", rc);
  const char *none[3] = {NULL, NULL, NULL};
  rc = ts_dein_backward(s, W, &r, NULL, "Y", none, NULL, &err);
  CHECK(rc == TS_INVALID_ARGUMENT && same_everywhere(rc), "backward nothing asked: %d", rc);
  CHECK(ts_store_count(s) == before + 1, "backward misuse changed the store");
  const char *names[] = {"A", "B", "C", "X", "Y"};
  for (int i = 0; i < 5; i++)
    ts_store_drop(s, names[i], NULL);
  ts_attr_destroy(&a);
}

int main(int argc, char **argv) {
  ts_error err;
  if (!mpi_check_start(&argc, &argv))
    return 1;
  int ncases = argc > 1 ? atoi(argv[1]) : 60;
  ts_store *s = NULL;
  ts_store_create(&s, world_rank, 0, &err);
  misuse(s);
  for (int k = 0; k < ncases; k++)
    run_case(s, k);
  CHECK(ts_store_count(s) == 0, "tensors left: %d", ts_store_count(s));
  ts_store_destroy(&s);
  long f = failures, c = checks;
  MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &c, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0)
    printf("test_dist_einsum: %d ranks, %ld checks, %ld failures\n", world_size, c, f);
  ts_world_finalize(&W, NULL);
  return f ? 1 : 0;
}
