/* test_cyclic_exec.c - reshards with a block-cyclic side run by the executor under mpirun (any
 * world size), against a model of every rank's local array written here from the rules alone.
 *
 * Random cases (the same on every rank): 1-D to 3-D tensors of a few dtypes, 1-D and 2-D meshes
 * over all ranks or a subset (cross-group moves), each mesh dim Replicate, a balanced Shard or a
 * block-cyclic Shard (random block size and source coordinate), at least one side block-cyclic.
 * Every source rank fills its local array with a function of each element's global index, read
 * off the model: per tensor dim, the globals its part owns in order (block k of a cyclic dim to
 * part (k + src) mod parts; a balanced split's first L mod k parts one longer). After the
 * reshard every target rank's array must hold that function at its own model's globals, and the
 * bytes sent must add up to the bytes received. Large cases (2-D, hundreds of elements per dim,
 * blocks of 8 to 64) move the pieces of most pairs as strided regions with no staging: they must
 * be as right, and some must have moved with no staged bytes at all. Also: a blocked target
 * layout and a partial source refused with the same error on every rank, nothing changed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_shard.h"

#define TS_TEST_SEED 0xC7C11CULL
#include "mpi_check.h"

#define CASES 120
#define LARGE_CASES 24
#define MAXLEN 512   /* the longest dim of a case */
static int ran;      /* cases with a block-cyclic side */
static int unstaged; /* large cases where every rank moved its pieces without staging */

typedef struct dim_model {
  int mdim;        /* the mesh dim that shards it, -1: none */
  int64_t nb, src; /* block-cyclic: block size and source coordinate; nb 0: balanced */
} dim_model;

typedef struct side {
  int mesh_ndim;
  int64_t mesh[2];
  int first, nranks; /* ranks first .. first + nranks - 1 */
  dim_model dm[3];
  char text[256];
} side;

/* The globals part `part` of `parts` owns along a dim of length len, in order: how many. */
static int64_t owned(const dim_model *m, int64_t len, int64_t parts, int64_t part, int64_t *out) {
  int64_t n = 0;
  if (m->mdim < 0) {
    for (int64_t g = 0; g < len; g++)
      out[n++] = g;
    return n;
  }
  if (m->nb > 0) {
    for (int64_t g = 0; g < len; g++)
      if ((g / m->nb + m->src) % parts == part)
        out[n++] = g;
    return n;
  }
  int64_t base = len / parts, extra = len % parts, lo = 0;
  for (int64_t q = 0; q < part; q++)
    lo += base + (q < extra);
  for (int64_t g = lo; g < lo + base + (part < extra); g++)
    out[n++] = g;
  return n;
}

static void draw_side(side *s, int ndim, bool cyclic, int64_t max_nb) {
  s->nranks = world_size > 1 && rnd_below(3) == 0 ? 1 + (int)rnd_below(world_size) : world_size;
  s->first = (int)rnd_below(world_size - s->nranks + 1);
  s->mesh_ndim = 1;
  s->mesh[0] = s->nranks;
  for (int a = 2; a < s->nranks; a++)
    if (s->nranks % a == 0 && rnd_below(2)) {
      s->mesh_ndim = 2, s->mesh[0] = a, s->mesh[1] = s->nranks / a;
      break;
    }
  for (int d = 0; d < ndim; d++)
    s->dm[d] = (dim_model){-1, 0, 0};
  char pl[2][48];
  for (int m = 0; m < s->mesh_ndim; m++) {
    int d = (int)rnd_below(ndim);
    if (s->dm[d].mdim >= 0 || rnd_below(4) == 0) {
      snprintf(pl[m], sizeof pl[m], "R");
      continue;
    }
    s->dm[d].mdim = m;
    if (cyclic || rnd_below(2)) {
      s->dm[d].nb = max_nb > 5 ? 8 + rnd_below(max_nb - 7) : 1 + rnd_below(5);
      s->dm[d].src = rnd_below(s->mesh[m]);
      snprintf(pl[m], sizeof pl[m], "S(%d,cyclic=%lld,src=%lld)", d, (long long)s->dm[d].nb,
               (long long)s->dm[d].src);
      cyclic = false;
    } else {
      snprintf(pl[m], sizeof pl[m], "S(%d)", d);
    }
  }
  if (s->mesh_ndim == 1)
    snprintf(s->text, sizeof s->text, "mesh=[%lld]@%d-%d placements=[%s]", (long long)s->mesh[0],
             s->first, s->first + s->nranks - 1, pl[0]);
  else
    snprintf(s->text, sizeof s->text, "mesh=[%lld,%lld]@%d-%d placements=[%s,%s]",
             (long long)s->mesh[0], (long long)s->mesh[1], s->first, s->first + s->nranks - 1,
             pl[0], pl[1]);
}

static bool side_cyclic(const side *s, int ndim) {
  for (int d = 0; d < ndim; d++)
    if (s->dm[d].nb > 0 && s->dm[d].mdim >= 0)
      return true;
  return false;
}

/* This rank's per-dim owned globals under side s (false: not in its mesh). */
static bool model(const side *s, int ndim, const int64_t *shape, int64_t *counts,
                  int64_t (*globals)[MAXLEN]) {
  int idx = world_rank - s->first;
  if (idx < 0 || idx >= s->nranks)
    return false;
  int64_t coord[2] = {s->mesh_ndim == 2 ? idx / s->mesh[1] : idx,
                      s->mesh_ndim == 2 ? idx % s->mesh[1] : 0};
  for (int d = 0; d < ndim; d++) {
    const dim_model *m = &s->dm[d];
    int64_t parts = m->mdim >= 0 ? s->mesh[m->mdim] : 1, part = m->mdim >= 0 ? coord[m->mdim] : 0;
    counts[d] = owned(m, shape[d], parts, part, globals[d]);
  }
  return true;
}

static double value(const int64_t *g, int ndim, const int64_t *shape) {
  int64_t lin = 0;
  for (int d = 0; d < ndim; d++)
    lin = lin * shape[d] + g[d];
  return (double)(lin % 251);
}

/* Visits the local array (row-major over counts) with each element's globals. */
static void fill_or_check(void *data, ts_dtype dt, int ndim, const int64_t *shape,
                          const int64_t *counts, int64_t (*globals)[MAXLEN], bool fill,
                          long *wrong) {
  int64_t n = 1, idx[3] = {0, 0, 0};
  for (int d = 0; d < ndim; d++)
    n *= counts[d];
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, g[3];
    for (int d = ndim - 1; d >= 0; d--)
      idx[d] = r % counts[d], r /= counts[d];
    for (int d = 0; d < ndim; d++)
      g[d] = globals[d][idx[d]];
    double v = value(g, ndim, shape), got = 0;
    switch (dt) {
    case TS_F64: fill ? (void)(((double *)data)[i] = v) : (void)(got = ((double *)data)[i]); break;
    case TS_F32:
      fill ? (void)(((float *)data)[i] = (float)v) : (void)(got = ((float *)data)[i]);
      break;
    case TS_I16:
      fill ? (void)(((int16_t *)data)[i] = (int16_t)v) : (void)(got = ((int16_t *)data)[i]);
      break;
    default:
      fill ? (void)(((uint8_t *)data)[i] = (uint8_t)v) : (void)(got = ((uint8_t *)data)[i]);
      break;
    }
    if (!fill && got != v)
      (*wrong)++;
  }
}

/* One case (large: 2-D f64 of up to MAXLEN per dim, blocks of 8 to 64). */
static void one_case(int k, bool large) {
  static const ts_dtype dts[] = {TS_F64, TS_F32, TS_I16, TS_U8};
  ts_dtype dt = large ? TS_F64 : dts[rnd_below(4)];
  int ndim = large ? 2 : 1 + (int)rnd_below(3);
  int64_t shape[3];
  for (int d = 0; d < ndim; d++)
    shape[d] = large ? 128 + rnd_below(MAXLEN - 127)
                     : 1 + rnd_below(ndim == 1   ? 60
                                     : ndim == 2 ? 24
                                                 : 9);
  side s, t;
  bool first_cyclic = rnd_below(2);
  draw_side(&s, ndim, first_cyclic, large ? 64 : 5);
  draw_side(&t, ndim, !first_cyclic || rnd_below(3) == 0, large ? 64 : 5);
  if (!side_cyclic(&s, ndim) && !side_cyclic(&t, ndim))
    return; /* the same on every rank: the draw made no cyclic placement */
  ran++;
  ts_error err;
  ts_attr *sa = NULL, *ta = NULL;
  ts_plan *plan = NULL;
  int rc = ts_attr_parse(s.text, &sa, &err);
  rc = rc ? rc : ts_attr_parse(t.text, &ta, &err);
  ts_plan_opts po = {TS_STRATEGY_AUTO, 0, world_size};
  rc = rc ? rc : ts_plan_create(ndim, shape, dt, sa, ta, &po, &plan, &err);
  CHECK(rc == TS_OK, "case %d: %s -> %s: %s", k, s.text, t.text, err.msg);
  static int64_t sg[3][MAXLEN], tg[3][MAXLEN];
  int64_t sc[3], tc[3];
  bool in_s = model(&s, ndim, shape, sc, sg), in_t = model(&t, ndim, shape, tc, tg);
  ts_tensor src = {0}, out;
  size_t es = ts_dtype_size(dt);
  if (rc == TS_OK && in_s) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
      n *= sc[d];
    ts_layout_plain(&src.layout, dt, ndim, sc, &err);
    src.bytes = (size_t)n * es;
    src.data = malloc(src.bytes + 1);
    fill_or_check(src.data, dt, ndim, shape, sc, sg, true, NULL);
  }
  ts_exec_report rep;
  if (rc == TS_OK) {
    rc = ts_reshard_exec(W, plan, in_s ? &src : NULL, NULL, NULL, &out, &rep, &err);
    CHECK(rc == TS_OK, "case %d: %s -> %s: %s", k, s.text, t.text, err.msg);
  }
  if (rc == TS_OK && in_t) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
      n *= tc[d];
    long wrong = 0;
    CHECK(out.bytes == (size_t)n * es, "case %d: %zu bytes, want %lld", k, out.bytes,
          (long long)(n * (int64_t)es));
    if (out.bytes == (size_t)n * es && n > 0)
      fill_or_check(out.data, dt, ndim, shape, tc, tg, false, &wrong);
    CHECK(wrong == 0, "case %d: %s -> %s: %ld of %lld elements wrong", k, s.text, t.text, wrong,
          (long long)n);
  }
  if (rc == TS_OK) {
    int64_t io[2] = {rep.bytes_sent, rep.bytes_received};
    MPI_Allreduce(MPI_IN_PLACE, io, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(io[0] == io[1], "case %d: %lld bytes sent, %lld received", k, (long long)io[0],
          (long long)io[1]);
    int64_t staged = rep.peak_extra_bytes;
    MPI_Allreduce(MPI_IN_PLACE, &staged, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    unstaged += large && io[0] > 0 && staged == 0;
    ts_shard_free_tensor(&out);
  }
  free(src.data);
  ts_plan_destroy(&plan);
  ts_attr_destroy(&sa);
  ts_attr_destroy(&ta);
}

/* Refusals: the same error on every rank, nothing made. */
static void refusals(void) {
  const char *pairs[][3] = {
      {"placements=[S(0,cyclic=2)]", "placements=[S(1)]", "aB4b"},
      {"placements=[P(sum)]", "placements=[S(0,cyclic=2)]", NULL},
  };
  for (int i = 0; i < (world_size > 1 ? 2 : 1); i++) { /* a partial over 1 rank is no partial */
    char a[128], b[128];
    snprintf(a, sizeof a, "mesh=[%d] %s", world_size, pairs[i][0]);
    snprintf(b, sizeof b, "mesh=[%d] %s", world_size, pairs[i][1]);
    ts_error err;
    ts_attr *sa = NULL, *ta = NULL;
    ts_plan *plan = NULL;
    int64_t shape[2] = {8, 8};
    int rc = ts_attr_parse(a, &sa, &err);
    rc = rc ? rc : ts_attr_parse(b, &ta, &err);
    ts_plan_opts po = {TS_STRATEGY_AUTO, 0, world_size};
    rc = rc ? rc : ts_plan_create(2, shape, TS_F32, sa, ta, &po, &plan, &err);
    if (rc == TS_OK) { /* no source needed: the refusal comes first */
      ts_tensor out;
      rc = ts_reshard_exec(W, plan, NULL, pairs[i][2], NULL, &out, NULL, &err);
      CHECK(rc == TS_UNSUPPORTED && out.data == NULL, "refusal %d: %d %s", i, rc,
            rc ? err.msg : "");
    }
    same_error_everywhere(rc, &err, "refusal");
    ts_plan_destroy(&plan);
    ts_attr_destroy(&sa);
    ts_attr_destroy(&ta);
  }
}

int main(int argc, char **argv) {
  if (!mpi_check_start(&argc, &argv))
    return 1;
  for (int k = 0; k < CASES; k++)
    one_case(k, false);
  CHECK(ran >= CASES / 2, "only %d of %d cases had a block-cyclic side", ran, CASES);
  for (int k = 0; k < LARGE_CASES; k++)
    one_case(CASES + k, true);
  CHECK(world_size == 1 || unstaged >= LARGE_CASES / 6,
        "only %d of %d large cases moved every piece without staging", unstaged, LARGE_CASES);
  refusals();
  return mpi_check_finish("test_cyclic_exec");
}
