/* test_reshard.c - the reshard executor and the tensor store under mpirun (any world size).
 *
 * A generated family of attribute pairs (1-D and 2-D meshes; Shard, Replicate, Partial sum/max/
 * min; balanced, uneven and ragged splits with empty parts; identical, disjoint and overlapping
 * groups; 1-D to 4-D tensors; every dtype; plain and blocked local layouts) is resharded with the
 * automatic strategy and with every strategy that applies. Values are a function of the global
 * index (and of the partial index for partial sources), so every rank checks its own slice
 * against the global tensor, reading it through the layout's address formula. Partial targets are
 * checked by reducing the target slices over the ranks (an MPI_Allreduce in this test). Forced
 * strategies must give the same bytes as auto. Also: chains of reshards that come back bit-exact,
 * atomic failure (an allocation failure injected on one rank), the store, and error paths.
 *
 * Every rank draws the same random cases (same seed), so all take part in every collective. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_shard.h"

#define TS_TEST_SEED 0x5EED5EED12345ULL
#include "mpi_check.h"

/* ---------------------------------------------------------------------------------------------
 * Values: small integers, exact in every dtype and in sums of up to 8 contributions; a complex
 * element holds v - 2v i, read back as v when its imaginary part is -2 times its real part. */

static double value_of(int64_t lin, int64_t contributor, ts_dtype dt) {
  int64_t v = (lin * 7 + 3 + contributor * 13) % 17;
  if (dt == TS_BOOL)
    return (double)(v % 2);
  bool is_unsigned = dt == TS_U8 || dt == TS_U16 || dt == TS_U32 || dt == TS_U64;
  return is_unsigned ? (double)v : (double)(v - 8);
}

static void store_value(void *p, ts_dtype dt, double v) {
  switch (dt) {
  case TS_F32: *(float *)p = (float)v; break;
  case TS_F64: *(double *)p = v; break;
  case TS_F16: *(uint16_t *)p = ts_f32_to_f16((float)v); break;
  case TS_BF16: *(uint16_t *)p = ts_f32_to_bf16((float)v); break;
  case TS_I8: *(int8_t *)p = (int8_t)v; break;
  case TS_I32: *(int32_t *)p = (int32_t)v; break;
  case TS_I64: *(int64_t *)p = (int64_t)v; break;
  case TS_U8: *(uint8_t *)p = (uint8_t)v; break;
  case TS_BOOL: *(uint8_t *)p = v != 0; break;
  case TS_I16: *(int16_t *)p = (int16_t)v; break;
  case TS_U16: *(uint16_t *)p = (uint16_t)v; break;
  case TS_U32: *(uint32_t *)p = (uint32_t)v; break;
  case TS_U64: *(uint64_t *)p = (uint64_t)v; break;
  case TS_F8_E4M3: *(uint8_t *)p = ts_f32_to_f8_e4m3((float)v); break; /* small ints: exact */
  case TS_F8_E5M2: *(uint8_t *)p = ts_f32_to_f8_e5m2((float)v); break;
  case TS_C64: memcpy(p, (float[2]){(float)v, (float)(-2 * v)}, 8); break;
  case TS_C128: memcpy(p, (double[2]){v, -2 * v}, 16); break;
  default: break;
  }
}

static double load_value(const void *p, ts_dtype dt) {
  switch (dt) {
  case TS_F32: return *(const float *)p;
  case TS_F64: return *(const double *)p;
  case TS_F16: return ts_f16_to_f32(*(const uint16_t *)p);
  case TS_BF16: return ts_bf16_to_f32(*(const uint16_t *)p);
  case TS_I8: return *(const int8_t *)p;
  case TS_I32: return *(const int32_t *)p;
  case TS_I64: return (double)*(const int64_t *)p;
  case TS_U8: return *(const uint8_t *)p;
  case TS_BOOL: return *(const uint8_t *)p;
  case TS_I16: return *(const int16_t *)p;
  case TS_U16: return *(const uint16_t *)p;
  case TS_U32: return *(const uint32_t *)p;
  case TS_U64: return (double)*(const uint64_t *)p;
  case TS_F8_E4M3: return ts_f8_e4m3_to_f32(*(const uint8_t *)p);
  case TS_F8_E5M2: return ts_f8_e5m2_to_f32(*(const uint8_t *)p);
  case TS_C64: {
    float c[2];
    memcpy(c, p, 8);
    return c[1] == -2 * c[0] ? c[0] : NAN;
  }
  case TS_C128: {
    double c[2];
    memcpy(c, p, 16);
    return c[1] == -2 * c[0] ? c[0] : NAN;
  }
  default: return 0;
  }
}

static int64_t global_lin(int ndim, const int64_t *shape, const int64_t *idx) {
  int64_t lin = 0;
  for (int d = 0; d < ndim; d++)
    lin = lin * shape[d] + idx[d];
  return lin;
}

static bool next_index(int ndim, const ts_box *b, int64_t *idx) {
  for (int d = ndim - 1; d >= 0; d--) {
    if (++idx[d] < b->hi[d])
      return true;
    idx[d] = b->lo[d];
  }
  return false;
}

/* Partial index and op of a mesh position under an attribute. */
static int64_t partial_index(const ts_attr *a, int64_t mesh_index, int *has, ts_reduce_op *op) {
  int64_t stride = 1, par = 0, w = 1;
  *has = 0;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    int64_t c = (mesh_index / stride) % a->mesh_shape[m];
    if (a->place[m].kind == TS_PLACE_PARTIAL) {
      par += c * w;
      w *= a->mesh_shape[m];
      *has = 1;
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

/* The true value of element lin: the reduction of all partial contributions of the source. */
static double true_value(int64_t lin, const ts_attr *src, ts_dtype dt) {
  int has = 0;
  ts_reduce_op op = TS_REDUCE_SUM;
  partial_index(src, 0, &has, &op);
  int64_t n = partial_count(src);
  double v = value_of(lin, 0, dt);
  for (int64_t c = 1; c < n; c++) {
    double x = value_of(lin, c, dt);
    v = op == TS_REDUCE_SUM ? v + x : op == TS_REDUCE_MAX ? fmax(v, x) : fmin(v, x);
  }
  return dt == TS_BOOL ? (double)(v != 0) : v; /* bool: sum and max are "or" */
}

/* Local layouts of slices: a dense row-major one, a blocked one, a dense one with the dims in
 * another order, and (sources only) a strided view: every dim padded by one element and the
 * last dim stored backwards (a negative stride). false and true select plain and blocked. */
enum { LAYOUT_PLAIN, LAYOUT_BLOCKED, LAYOUT_PERMUTED, LAYOUT_VIEW };

static const char *tag_for(int ndim, int kind) {
  static const char *blocked[5] = {NULL, "A4a", "aB4b", "Abc2a", "aBcd4b"};
  static const char *permuted[5] = {NULL, "a", "ba", "cab", "bdca"};
  if (ndim < 1 || ndim > 4 || kind == LAYOUT_PLAIN || kind == LAYOUT_VIEW)
    return NULL;
  return kind == LAYOUT_BLOCKED ? blocked[ndim] : permuted[ndim];
}

/* The strided view layout over a padded buffer of `bytes`. */
static void view_layout(ts_layout *l, ts_dtype dt, int ndim, const int64_t *ext, size_t *bytes) {
  memset(l, 0, sizeof *l);
  l->dtype = dt;
  l->ndim = ndim;
  int64_t n = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    l->shape[d] = ext[d];
    l->strides[d] = n;
    n *= ext[d] + 1;
  }
  if (ndim > 0) {
    l->strides[ndim - 1] = -1;
    l->offset = ext[ndim - 1] * (int64_t)ts_dtype_size(dt);
  }
  *bytes = (size_t)n * ts_dtype_size(dt);
}

/* Builds this rank's source slice in the given layout kind. */
static int make_slice(const ts_attr *a, int ndim, const int64_t *shape, ts_dtype dt, int kind,
                      ts_tensor *t, ts_box *box) {
  const char *tag = tag_for(ndim, kind);
  memset(t, 0, sizeof *t);
  ts_geom *g = NULL;
  if (ts_geom_create(a, ndim, shape, &g, NULL))
    return -1;
  int64_t mi = ts_geom_mesh_index(g, world_rank);
  if (mi < 0) {
    ts_geom_destroy(&g);
    return 0;
  }
  ts_geom_index_box(g, mi, box);
  ts_geom_destroy(&g);
  int has;
  ts_reduce_op op;
  int64_t par = partial_index(a, mi, &has, &op);
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < ndim; d++)
    ext[d] = box->hi[d] - box->lo[d];
  size_t bytes;
  if (kind == LAYOUT_VIEW) {
    view_layout(&t->layout, dt, ndim, ext, &bytes);
    if (ts_layout_check(&t->layout, bytes, false, NULL))
      return -1;
  } else {
    if (tag ? ts_layout_from_tag(&t->layout, dt, ndim, ext, tag, NULL)
            : ts_layout_plain(&t->layout, dt, ndim, ext, NULL))
      return -1;
    ts_layout_span(&t->layout, &bytes, NULL);
  }
  t->data = calloc(1, bytes ? bytes : 1);
  t->bytes = bytes;
  if (ts_box_numel(box) == 0)
    return 1;
  int64_t idx[TS_MAX_DIMS], loc[TS_MAX_DIMS];
  for (int d = 0; d < ndim; d++)
    idx[d] = box->lo[d];
  do {
    for (int d = 0; d < ndim; d++)
      loc[d] = idx[d] - box->lo[d];
    store_value((char *)t->data + ts_layout_address(&t->layout, loc), dt,
                value_of(global_lin(ndim, shape, idx), par, dt));
  } while (next_index(ndim, box, idx));
  return 1;
}

/* Checks the target slices: non-partial targets element by element on each rank; partial
 * targets by reducing, over all ranks, the slices of replica 0 of every shard. */
static void check_target(const ts_plan *p, const ts_tensor *out, const char *what) {
  const ts_attr *src = ts_plan_src_attr(p), *tgt = ts_plan_tgt_attr(p);
  int ndim = ts_plan_ndim(p);
  const int64_t *shape = ts_plan_shape(p);
  ts_dtype dt = ts_plan_dtype(p);
  const ts_geom *tg = ts_plan_tgt_geom(p);
  int64_t ti = ts_geom_mesh_index(tg, world_rank);
  ts_box box;
  int has_partial;
  ts_reduce_op op = TS_REDUCE_SUM;
  partial_index(tgt, 0, &has_partial, &op);
  if (ti >= 0) {
    ts_geom_index_box(tg, ti, &box);
    CHECK(out->data != NULL, "%s: no target slice", what);
    if (!out->data)
      return;
  }
  if (!has_partial) {
    if (ti < 0 || ts_box_numel(&box) == 0)
      return;
    int64_t idx[TS_MAX_DIMS], loc[TS_MAX_DIMS], bad = 0;
    for (int d = 0; d < ndim; d++)
      idx[d] = box.lo[d];
    double got_bad = 0, want_bad = 0;
    do {
      for (int d = 0; d < ndim; d++)
        loc[d] = idx[d] - box.lo[d];
      double got = load_value((const char *)out->data + ts_layout_address(&out->layout, loc), dt);
      double want = true_value(global_lin(ndim, shape, idx), src, dt);
      if (got != want && bad++ == 0) {
        got_bad = got;
        want_bad = want;
      }
    } while (next_index(ndim, &box, idx));
    CHECK(bad == 0, "%s: %lld wrong elements (first: got %g want %g)", what, (long long)bad,
          got_bad, want_bad);
    return;
  }
  /* Partial target: full tensor of identities, this rank's slice if it is replica 0. */
  int64_t total = 1;
  for (int d = 0; d < ndim; d++)
    total *= shape[d];
  double ident = op == TS_REDUCE_SUM ? 0 : op == TS_REDUCE_MAX ? -INFINITY : INFINITY;
  double *full = malloc((size_t)(total ? total : 1) * sizeof *full);
  for (int64_t i = 0; i < total; i++)
    full[i] = ident;
  if (ti >= 0 && ts_box_numel(&box) > 0) {
    /* replica index 0: every replicate mesh coordinate is 0 */
    int64_t stride = 1;
    bool rep0 = true;
    for (int m = tgt->mesh_ndim - 1; m >= 0; m--) {
      if (tgt->place[m].kind == TS_PLACE_REPLICATE && (ti / stride) % tgt->mesh_shape[m] != 0)
        rep0 = false;
      stride *= tgt->mesh_shape[m];
    }
    int64_t idx[TS_MAX_DIMS], loc[TS_MAX_DIMS];
    for (int d = 0; rep0 && d < ndim; d++)
      idx[d] = box.lo[d];
    if (rep0)
      do {
        for (int d = 0; d < ndim; d++)
          loc[d] = idx[d] - box.lo[d];
        full[global_lin(ndim, shape, idx)] =
            load_value((const char *)out->data + ts_layout_address(&out->layout, loc), dt);
      } while (next_index(ndim, &box, idx));
  }
  MPI_Op mop = op == TS_REDUCE_SUM ? MPI_SUM : op == TS_REDUCE_MAX ? MPI_MAX : MPI_MIN;
  MPI_Allreduce(MPI_IN_PLACE, full, (int)total, MPI_DOUBLE, mop, MPI_COMM_WORLD);
  int64_t bad = 0;
  for (int64_t i = 0; i < total; i++) /* bool: the sum of the pieces is their "or" */
    bad += (dt == TS_BOOL ? (double)(full[i] != 0) : full[i]) != true_value(i, src, dt);
  CHECK(bad == 0, "%s: %lld wrong elements after reducing the partial target", what,
        (long long)bad);
  free(full);
}

/* ---------------------------------------------------------------------------------------------
 * The generated family */

/* A random mesh of at most world_size ranks: its shape, ranks (prefix, suffix, reversed,
 * interleaved or shuffled subsets of the world) and placements for an ndim tensor. */
static ts_attr *random_attr(int ndim, const int64_t *shape, bool allow_partial,
                            const int *ranks_hint, int hint_n) {
  int mnd = world_size >= 4 && rnd() % 3 == 0 ? 2 : 1;
  int64_t ms[2] = {1, 1};
  int n;
  if (ranks_hint) {
    ms[0] = hint_n;
    mnd = 1;
    if (hint_n >= 4 && hint_n % 2 == 0 && rnd() % 2) {
      mnd = 2;
      ms[0] = 2;
      ms[1] = hint_n / 2;
    }
    n = hint_n;
  } else {
    do {
      n = 1;
      for (int m = 0; m < mnd; m++) {
        ms[m] = 1 + rnd_below(world_size);
        n *= (int)ms[m];
      }
    } while (n > world_size);
  }
  int ranks[64], pool[64];
  if (ranks_hint) {
    memcpy(ranks, ranks_hint, (size_t)n * sizeof(int));
  } else {
    int kind = (int)rnd_below(4);
    for (int i = 0; i < world_size; i++)
      pool[i] = i;
    if (kind == 3)
      for (int i = world_size - 1; i > 0; i--) {
        int j = (int)rnd_below(i + 1), t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
      }
    for (int i = 0; i < n; i++)
      ranks[i] = kind == 0 ? i : kind == 1 ? world_size - n + i : kind == 2 ? n - 1 - i : pool[i];
  }
  ts_placement pl[2];
  ts_reduce_op op = (ts_reduce_op)rnd_below(3);
  int sdim[2] = {-1, -1};
  for (int m = 0; m < mnd; m++) {
    int k = (int)rnd_below(allow_partial ? 4 : 3);
    if (k <= 1) {
      sdim[m] = (int)rnd_below(ndim);
      pl[m] = ts_shard_on(sdim[m]);
    } else if (k == 2) {
      pl[m] = ts_replicate();
    } else {
      pl[m] = ts_partial(op);
    }
  }
  ts_attr *a = NULL;
  if (ts_attr_create(&a, mnd, ms, ranks, pl, NULL))
    return NULL;
  if (sdim[0] >= 0 && rnd() % 3 == 0) { /* ragged sizes with zeros */
    int d = sdim[0];
    int64_t parts = ms[0] * (sdim[1] == d ? ms[1] : 1), left = shape[d], sizes[64];
    for (int64_t i = 0; i < parts; i++) {
      sizes[i] = i + 1 == parts ? left : (rnd() % 3 == 0 ? 0 : rnd_below(left + 1));
      left -= sizes[i];
    }
    ts_attr_set_splits(a, d, (int)parts, sizes, NULL);
  }
  return a;
}

/* Two hosts of half the world each, in rank order and alternating (NULL below 4 ranks or odd). */
static ts_topology *topos[2];

typedef struct stats {
  long cases, execs, by_strategy[TS_STRATEGY_COUNT], relayed;
} stats;

/* Two results hold the same bytes (or both none). */
static bool same_bytes(const ts_tensor *a, const ts_tensor *b) {
  return (a->data == NULL) == (b->data == NULL) && a->bytes == b->bytes &&
         (a->bytes == 0 || memcmp(a->data, b->data, a->bytes) == 0);
}

/* An execution whose pieces rode on the agreement, run again with each rank sending its own:
 * the same bytes. */
static void same_without_relay(const ts_plan *p, const ts_tensor *src, const char *tag,
                               const ts_tensor *out, const char *what) {
  ts_exec_opts o = {.no_relay = true};
  ts_tensor again;
  ts_exec_report rep;
  ts_error err;
  int rc = ts_reshard_exec(W, p, src, tag, &o, &again, &rep, &err);
  CHECK(rc == TS_OK && !rep.relayed, "%s: exec without the relay: %s", what, err.msg);
  if (rc == TS_OK)
    CHECK(same_bytes(&again, out), "%s: relayed bytes differ from exchanged ones", what);
  ts_shard_free_tensor(&again);
}

/* One pair: auto, then every other strategy that applies, compared byte for byte with auto
 * (except partial targets, whose distribution of partial values may differ by strategy). */
static void run_pair(const ts_attr *sa, const ts_attr *ta, int ndim, const int64_t *shape,
                     ts_dtype dt, int src_kind, int tgt_kind, int64_t staging, stats *st) {
  char what[600], s1[256], s2[256];
  ts_attr_format(sa, s1, sizeof s1);
  ts_attr_format(ta, s2, sizeof s2);
  ts_tensor src;
  ts_box sbox;
  int has = make_slice(sa, ndim, shape, dt, src_kind, &src, &sbox);
  CHECK(has >= 0, "could not build a source slice for %s", s1);
  ts_tensor ref;
  memset(&ref, 0, sizeof ref);
  bool have_ref = false;
  bool partial_target = partial_count(ta) > 1;
  st->cases++;
  for (int s = 0; s < TS_STRATEGY_COUNT; s++) {
    ts_plan_opts o = {(ts_strategy)s, staging, world_size};
    ts_plan *p = NULL;
    ts_error err;
    /* hierarchical: on a topology of two hosts, the world's ranks in halves or alternating */
    ts_topology *topo = topos[st->cases % 2];
    int rc = s != TS_STRATEGY_HIER ? ts_plan_create(ndim, shape, dt, sa, ta, &o, &p, &err)
             : topo                ? ts_plan_create_on(ndim, shape, dt, sa, ta, &o, topo, &p, &err)
                                   : TS_BAD_STRATEGY;
    if (s != TS_STRATEGY_AUTO && rc == TS_BAD_STRATEGY)
      continue;
    snprintf(what, sizeof what, "%s -> %s, %s, %s [%d dims, layouts %d -> %d], %s", s1, s2,
             ts_strategy_name((ts_strategy)s), ts_dtype_name(dt), ndim, src_kind, tgt_kind,
             p ? ts_strategy_name(ts_plan_strategy(p)) : "-");
    CHECK(rc == TS_OK, "%s: plan: %s", what, err.msg);
    if (rc)
      continue;
    ts_tensor out;
    ts_exec_report rep;
    rc = ts_reshard_exec(W, p, has > 0 ? &src : NULL, tag_for(ndim, tgt_kind), NULL, &out, &rep,
                         &err);
    CHECK(rc == TS_OK, "%s: exec: %s", what, err.msg);
    st->execs++;
    st->by_strategy[ts_plan_strategy(p)]++;
    if (rc == TS_OK) {
      check_target(p, &out, what);
      /* Relayed on every rank of the plan's union, or on none (the others take no part). */
      int nu = 0, in_union = 0;
      const int *u = ts_plan_union_ranks(p, &nu);
      for (int i = 0; i < nu; i++)
        in_union |= u[i] == world_rank;
      int all = in_union ? rep.relayed : 1, any = in_union ? rep.relayed : 0;
      MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      CHECK(all == any, "%s: relayed on some ranks only", what);
      if (all) {
        st->relayed++;
        same_without_relay(p, has > 0 ? &src : NULL, tag_for(ndim, tgt_kind), &out, what);
      }
      if (rep.peak_extra_bytes > 0 && ts_plan_strategy(p) != TS_STRATEGY_ALLGATHER &&
          ts_plan_strategy(p) != TS_STRATEGY_ROOT && ts_plan_strategy(p) != TS_STRATEGY_HIER)
        /* Within the staging size; a staging smaller than one element per peer and direction
         * still needs that. */
        CHECK(rep.peak_extra_bytes <= ts_plan_staging_bytes(p) ||
                  rep.peak_extra_bytes <= 2 * world_size * ts_plan_pair_chunk_bytes(p),
              "%s: peak %lld", what, (long long)rep.peak_extra_bytes);
      if (s == TS_STRATEGY_AUTO) {
        ref = out;
        have_ref = true;
      } else {
        if (!partial_target && have_ref)
          CHECK(same_bytes(&out, &ref), "%s: bytes differ from auto", what);
        ts_shard_free_tensor(&out);
      }
    }
    ts_plan_destroy(&p);
  }
  ts_shard_free_tensor(&ref);
  free(src.data);
}

static void generated_family(stats *st) {
  static const int64_t shapes[][4] = {{7},       {13},      {6, 5},      {9, 4},
                                      {4, 3, 5}, {2, 3, 6}, {3, 2, 4, 5}};
  static const int ndims[] = {1, 1, 2, 2, 3, 3, 4};
  int ncases = world_size <= 2 ? 600 : world_size <= 4 ? 400 : 300;
  for (int iter = 0; iter < ncases; iter++) {
    int si = (int)rnd_below(7);
    int ndim = ndims[si];
    const int64_t *shape = shapes[si];
    ts_dtype dt = (ts_dtype)(iter % TS_DTYPE_COUNT);
    /* the 8-bit floats have no partials; complex ones no max or min (fixed_cases: their sums) */
    bool reducible = dt != TS_F8_E4M3 && dt != TS_F8_E5M2 && !ts_dtype_is_complex(dt);
    ts_attr *sa = random_attr(ndim, shape, reducible, NULL, 0);
    /* Targets: an independent mesh (disjoint or overlapping), or the same group. */
    ts_attr *ta;
    if (rnd() % 2) {
      ta = random_attr(ndim, shape, reducible, sa->ranks, sa->nranks);
    } else {
      ta = random_attr(ndim, shape, reducible, NULL, 0);
    }
    int sb = rnd() % 4 == 0 ? LAYOUT_BLOCKED : rnd() % 3 == 0 ? LAYOUT_VIEW : LAYOUT_PLAIN;
    int tb = rnd() % 4 == 0 ? LAYOUT_BLOCKED : rnd() % 4 == 0 ? LAYOUT_PERMUTED : LAYOUT_PLAIN;
    int64_t staging = rnd() % 2 ? 0 : 64 + rnd_below(512); /* tiny staging: many rounds */
    run_pair(sa, ta, ndim, shape, dt, sb, tb, staging, st);
    ts_attr_destroy(&sa);
    ts_attr_destroy(&ta);
  }
}

/* Fixed cases every world size runs: the benchmark's shapes in small, partial ops, replicas. */
static void fixed_cases(stats *st) {
  char text[2][160];
  int64_t shape[2] = {24, 20};
  int n = world_size;
  const char *pairs[][2] = {
      {"placements=[S(0)]", "placements=[S(1)]"},   {"placements=[S(0)]", "placements=[R]"},
      {"placements=[R]", "placements=[S(1)]"},      {"placements=[P(sum)]", "placements=[R]"},
      {"placements=[P(max)]", "placements=[S(0)]"}, {"placements=[P(min)]", "placements=[S(1)]"},
      {"placements=[S(1)]", "placements=[P(sum)]"}, {"placements=[R]", "placements=[P(max)]"},
  };
  /* every third dtype, and c64 (15) and c128 both; complex max and min are refused */
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
    for (int dt = 0; dt < TS_DTYPE_COUNT; dt += dt == TS_C64 ? 1 : 3) {
      snprintf(text[0], sizeof text[0], "mesh=[%d] %s", n, pairs[i][0]);
      snprintf(text[1], sizeof text[1], "mesh=[%d] %s", n, pairs[i][1]);
      ts_attr *a = NULL, *b = NULL;
      ts_attr_parse(text[0], &a, NULL);
      ts_attr_parse(text[1], &b, NULL);
      bool ordered = strstr(text[0], "max") || strstr(text[0], "min") || strstr(text[1], "max") ||
                     strstr(text[1], "min");
      if (ts_dtype_is_complex((ts_dtype)dt) && ordered) {
        ts_plan *p = NULL;
        ts_error err;
        ts_plan_opts o = {TS_STRATEGY_AUTO, 0, world_size};
        CHECK(ts_plan_create(2, shape, (ts_dtype)dt, a, b, &o, &p, &err) == TS_BAD_DTYPE && !p &&
                  strstr(err.msg, ts_dtype_name((ts_dtype)dt)) && strstr(err.msg, "no order"),
              "%s -> %s of %s: %s", text[0], text[1], ts_dtype_name((ts_dtype)dt), err.msg);
      } else {
        run_pair(a, b, 2, shape, (ts_dtype)dt, i % 2 == 1, i % 3 == 1, 0, st);
      }
      ts_attr_destroy(&a);
      ts_attr_destroy(&b);
    }
  /* The 8-bit floats have no reductions: a plan from or to a partial placement is refused,
   * naming the dtype. */
  {
    ts_attr *a = NULL, *b = NULL;
    snprintf(text[0], sizeof text[0], "mesh=[%d] placements=[P(sum)]", n);
    snprintf(text[1], sizeof text[1], "mesh=[%d] placements=[R]", n);
    ts_attr_parse(text[0], &a, NULL);
    ts_attr_parse(text[1], &b, NULL);
    const ts_dtype f8[] = {TS_F8_E4M3, TS_F8_E5M2};
    for (int k = 0; k < 2; k++) {
      ts_plan *p = NULL;
      ts_error err;
      ts_plan_opts o = {TS_STRATEGY_AUTO, 0, world_size};
      CHECK(ts_plan_create(2, shape, f8[k], a, b, &o, &p, &err) == TS_BAD_DTYPE && !p &&
                strstr(err.msg, ts_dtype_name(f8[k])) && strstr(err.msg, "sum, max and min"),
            "partial %s: %s", ts_dtype_name(f8[k]), err.msg);
      CHECK(ts_plan_create(2, shape, f8[k], b, a, &o, &p, &err) == TS_BAD_DTYPE && !p,
            "to partial %s", ts_dtype_name(f8[k]));
    }
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
  /* 2-D meshes: gathers along one mesh dim, partial reductions along one mesh dim. */
  if (n >= 4 && n % 2 == 0) {
    const char *nd[][2] = {
        {"placements=[S(0),S(1)]", "placements=[R,S(1)]"},
        {"placements=[S(1),S(0)]", "placements=[S(1),R]"},
        {"placements=[S(0),S(0)]", "placements=[S(0),R]"},
        {"placements=[R,S(1)]", "placements=[S(0),S(1)]"},
        {"placements=[P(sum),S(1)]", "placements=[R,S(1)]"},
        {"placements=[S(0),P(max)]", "placements=[S(0),S(1)]"},
    };
    for (size_t i = 0; i < sizeof nd / sizeof nd[0]; i++)
      for (int blocked = 0; blocked < 2; blocked++) {
        snprintf(text[0], sizeof text[0], "mesh=[2,%d] %s", n / 2, nd[i][0]);
        snprintf(text[1], sizeof text[1], "mesh=[2,%d] %s", n / 2, nd[i][1]);
        ts_attr *a = NULL, *b = NULL;
        ts_attr_parse(text[0], &a, NULL);
        ts_attr_parse(text[1], &b, NULL);
        run_pair(a, b, 2, shape, blocked ? TS_BF16 : TS_F32, blocked, blocked, 0, st);
        ts_attr_destroy(&a);
        ts_attr_destroy(&b);
      }
  }
  /* Scalars (0-dim tensors): partial to replicated and back. */
  {
    ts_attr *a = NULL, *b = NULL;
    snprintf(text[0], sizeof text[0], "mesh=[%d] placements=[P(sum)]", n);
    snprintf(text[1], sizeof text[1], "mesh=[%d] placements=[R]", n);
    ts_attr_parse(text[0], &a, NULL);
    ts_attr_parse(text[1], &b, NULL);
    run_pair(a, b, 0, NULL, TS_F64, false, false, 0, st);
    run_pair(b, a, 0, NULL, TS_I32, false, false, 0, st);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
  if (n >= 2) {
    /* Disjoint halves, and a ragged source with empty parts to a balanced target. */
    snprintf(text[0], sizeof text[0], "mesh=[%d]@0-%d placements=[S(0)]", n / 2, n / 2 - 1);
    snprintf(text[1], sizeof text[1], "mesh=[%d]@%d-%d placements=[S(1)]", n - n / 2, n / 2, n - 1);
    ts_attr *a = NULL, *b = NULL;
    ts_attr_parse(text[0], &a, NULL);
    ts_attr_parse(text[1], &b, NULL);
    run_pair(a, b, 2, shape, TS_F32, false, true, 0, st);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
    int64_t sizes[8] = {0};
    sizes[n - 1] = 17;
    sizes[0] = 7;
    ts_attr_parse(n == 2 ? "mesh=[2] placements=[S(0)]" : "mesh=[3] placements=[S(0)]", &a, NULL);
    if (n >= 3) {
      ts_attr_destroy(&a);
      snprintf(text[0], sizeof text[0], "mesh=[%d] placements=[S(0)]", n);
      ts_attr_parse(text[0], &a, NULL);
    }
    ts_attr_set_splits(a, 0, n, sizes, NULL);
    snprintf(text[1], sizeof text[1], "mesh=[%d] placements=[S(0)]", n);
    ts_attr_parse(text[1], &b, NULL);
    run_pair(a, b, 2, shape, TS_BF16, false, false, 0, st);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
}

/* A chain of reshards that returns to the start is bit-exact (through blocked layouts). */
static void chain_is_bit_exact(void) {
  int64_t shape[3] = {10, 7, 9};
  char texts[4][160];
  int n = world_size;
  snprintf(texts[0], 160, "mesh=[%d] placements=[S(0)]", n);
  int len = snprintf(texts[1], 160, "mesh=[%d]@", n); /* reversed ranks */
  for (int r = n - 1; r >= 0; r--)
    len += snprintf(texts[1] + len, 160 - (size_t)len, "%d%s", r, r ? "," : "");
  snprintf(texts[1] + len, 160 - (size_t)len, " placements=[S(2)]");
  snprintf(texts[2], 160, "mesh=[%d] placements=[R]", n);
  snprintf(texts[3], 160, "mesh=[%d] placements=[S(0)]", n);
  ts_attr *a[4];
  for (int i = 0; i < 4; i++)
    CHECK(ts_attr_parse(texts[i], &a[i], NULL) == TS_OK, "%s", texts[i]);
  const char *tags[4] = {NULL, "aBc4b", "Abc8a", NULL};
  ts_tensor start, cur;
  ts_box box;
  int has = make_slice(a[0], 3, shape, TS_F64, LAYOUT_PLAIN, &start, &box);
  cur = start;
  bool ok = true;
  for (int i = 1; i < 4 && ok; i++) {
    ts_plan *p = NULL;
    ts_plan_opts o = {TS_STRATEGY_AUTO, 256, world_size};
    ts_error err;
    ok = ts_plan_create(3, shape, TS_F64, a[i - 1], a[i], &o, &p, &err) == TS_OK;
    ts_tensor out = {0};
    if (ok)
      ok = ts_reshard_exec(W, p, has > 0 || i > 1 ? &cur : NULL, tags[i], NULL, &out, NULL, &err) ==
           TS_OK;
    CHECK(ok, "chain step %d: %s", i, err.msg);
    if (cur.data != start.data)
      ts_shard_free(cur.data);
    cur = out;
    ts_plan_destroy(&p);
  }
  CHECK(cur.bytes == start.bytes && memcmp(cur.data, start.data, cur.bytes) == 0,
        "chain did not return bit-exact");
  if (cur.data != start.data)
    ts_shard_free(cur.data);
  free(start.data);
  for (int i = 0; i < 4; i++)
    ts_attr_destroy(&a[i]);
}

/* An allocation failure on one rank: every rank returns the same error, nothing changes. */
static void atomic_failure(void) {
  int64_t shape[2] = {16, 12};
  ts_attr *a = NULL, *b = NULL;
  char t[2][128];
  snprintf(t[0], sizeof t[0], "mesh=[%d] placements=[S(0)]", world_size);
  snprintf(t[1], sizeof t[1], "mesh=[%d] placements=[S(1)]", world_size);
  ts_attr_parse(t[0], &a, NULL);
  ts_attr_parse(t[1], &b, NULL);
  for (int s = 0; s < TS_STRATEGY_COUNT; s++) {
    ts_plan *p = NULL;
    ts_plan_opts o = {(ts_strategy)s, 0, world_size};
    if (ts_plan_create(2, shape, TS_I32, a, b, &o, &p, NULL) != TS_OK)
      continue;
    for (int nth = 1; nth <= 3; nth++) {
      ts_tensor src, out;
      ts_box box;
      make_slice(a, 2, shape, TS_I32, LAYOUT_PLAIN, &src, &box);
      void *keep = malloc(src.bytes ? src.bytes : 1);
      memcpy(keep, src.data, src.bytes);
      int victim = (world_size - nth % 2) % world_size; /* the last rank, then rank 0 */
      if (world_rank == victim)
        ts_shard_debug_fail_alloc(nth);
      ts_error err;
      ts_exec_report rep;
      int rc = ts_reshard_exec(W, p, &src, NULL, NULL, &out, &rep, &err);
      ts_shard_debug_fail_alloc(0);
      ts_strategy chosen = ts_plan_strategy(p);
      /* 768 bytes: a run that passed moved its pieces on the agreement */
      CHECK(rc != TS_OK || world_size == 1 ||
                (chosen != TS_STRATEGY_P2P && chosen != TS_STRATEGY_ALLTOALL) || rep.relayed,
            "%s: not relayed", ts_strategy_name((ts_strategy)s));
      char expect[64];
      snprintf(expect, sizeof expect, "rank %d: ", victim);
      /* Later allocations exist only for strategies with staging. */
      if (rc == TS_OK) {
        CHECK(nth >= 2, "%s: no failure with the first allocation failing",
              ts_strategy_name((ts_strategy)s));
        ts_shard_free_tensor(&out);
      } else {
        CHECK(rc == TS_NO_MEMORY, "%s: rc %d", ts_strategy_name((ts_strategy)s), rc);
        CHECK(strncmp(err.msg, expect, strlen(expect)) == 0, "%s: message '%s'",
              ts_strategy_name((ts_strategy)s), err.msg);
        CHECK(out.data == NULL, "output set on failure");
      }
      /* Every rank got the same result. */
      int mine = rc, lo, hi;
      MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      CHECK(lo == hi, "ranks disagree on the result (%d vs %d)", lo, hi);
      CHECK(memcmp(keep, src.data, src.bytes) == 0, "source changed");
      free(keep);
      free(src.data);
    }
    ts_plan_destroy(&p);
  }
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
}

/* The store: add, reshard in place, accounting, atomic failure, collective errors. */
/* Every rank returned the same status and message. */
static void same_everywhere(int rc, const char *msg, const char *what) {
  char first[512];
  snprintf(first, sizeof first, "%s", msg);
  int lo, hi;
  MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Bcast(first, (int)sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD);
  CHECK(lo == hi && strcmp(first, msg) == 0, "%s: ranks disagree (%d..%d, '%s' vs '%s')", what, lo,
        hi, msg, first);
}

static void store_tests(void) {
  ts_store *s = NULL;
  ts_error err;
  CHECK(ts_store_create(&s, world_rank, 0, &err) == TS_OK, "%s", err.msg);
  int64_t shape[2] = {12, 10};
  ts_attr *a = NULL, *b = NULL, *c = NULL;
  char t[3][128];
  snprintf(t[0], sizeof t[0], "mesh=[%d] placements=[S(0)]", world_size);
  snprintf(t[1], sizeof t[1], "mesh=[%d] placements=[S(1)]", world_size);
  snprintf(t[2], sizeof t[2], "mesh=[1]@%d placements=[R]", world_size - 1);
  ts_attr_parse(t[0], &a, NULL);
  ts_attr_parse(t[1], &b, NULL);
  ts_attr_parse(t[2], &c, NULL);
  ts_stored *e = NULL;
  CHECK(ts_store_add(s, "w", 2, shape, TS_F32, a, NULL, &e, &err) == TS_OK, "%s", err.msg);
  CHECK(ts_store_add(s, "w", 2, shape, TS_F32, a, NULL, NULL, &err) == TS_EXISTS, "exists");
  CHECK(ts_store_add(s, "", 2, shape, TS_F32, a, NULL, NULL, &err) == TS_INVALID_ARGUMENT, "name");
  CHECK(ts_store_add(s, "x", 2, shape, TS_F32, b, "zz", NULL, &err) != TS_OK, "bad tag");
  CHECK(ts_store_count(s) == 1, "count %d", ts_store_count(s));
  /* fill w with the global pattern */
  ts_tensor src;
  ts_box box;
  make_slice(a, 2, shape, TS_F32, LAYOUT_PLAIN, &src, &box);
  memcpy(e->local.data, src.data, src.bytes);
  free(src.data);
  int64_t used0 = ts_store_used_bytes(s);
  CHECK(used0 == (int64_t)e->local.bytes, "used %lld", (long long)used0);

  CHECK(ts_store_reshard(s, W, "w", b, "aB4b", NULL, NULL, &err) == TS_OK, "%s", err.msg);
  e = ts_store_find(s, "w");
  CHECK(e && ts_attr_equal(e->attr, b), "attribute not replaced");
  CHECK(e && strcmp(e->layout_tag, "aB4b") == 0, "tag not replaced");
  CHECK(ts_store_used_bytes(s) == (int64_t)e->local.bytes, "accounting after reshard");
  /* Verify the content through a plan-free check: compare with a fresh slice. */
  ts_tensor want;
  make_slice(b, 2, shape, TS_F32, LAYOUT_BLOCKED, &want, &box);
  CHECK(want.bytes == e->local.bytes && memcmp(want.data, e->local.data, want.bytes) == 0,
        "store content after reshard");
  free(want.data);

  /* Failure on one rank: the entry stays as it was everywhere. */
  void *before = malloc(e->local.bytes);
  memcpy(before, e->local.data, e->local.bytes);
  size_t before_bytes = e->local.bytes;
  if (world_rank == 0)
    ts_shard_debug_fail_alloc(1);
  int rc = ts_store_reshard(s, W, "w", c, NULL, NULL, NULL, &err);
  ts_shard_debug_fail_alloc(0);
  e = ts_store_find(s, "w");
  /* Rank 0's first allocation is its target slice or its send staging: every rank fails. */
  CHECK(rc == TS_NO_MEMORY && strncmp(err.msg, "rank 0: ", 8) == 0, "store failure: %d %s", rc,
        err.msg);
  int lo, hi;
  MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi, "store ranks disagree (%d vs %d)", lo, hi);
  if (rc != TS_OK) {
    CHECK(e && ts_attr_equal(e->attr, b) && e->local.bytes == before_bytes &&
              memcmp(before, e->local.data, before_bytes) == 0,
          "entry changed after a failed reshard");
    /* Now without failure. */
    rc = ts_store_reshard(s, W, "w", c, NULL, NULL, NULL, &err);
    CHECK(rc == TS_OK, "%s", err.msg);
  }
  free(before);
  e = ts_store_find(s, "w");
  CHECK(e && e->has_slice == (world_rank == world_size - 1), "slice after gather to one rank");
  CHECK(ts_store_used_bytes(s) == (e && e->has_slice ? 12 * 10 * 4 : 0), "accounting %lld",
        (long long)ts_store_used_bytes(s));

  /* A tensor missing on one rank: every rank gets NOT_FOUND. */
  if (world_rank == 0)
    ts_store_add(s, "only0", 2, shape, TS_F32, a, NULL, NULL, NULL);
  rc = ts_store_reshard(s, W, "only0", b, NULL, NULL, NULL, &err);
  CHECK(world_size == 1 ? rc == TS_OK : rc == TS_NOT_FOUND, "missing on some ranks: %d %s", rc,
        err.msg);
  rc = ts_store_reshard(s, W, "nope", b, NULL, NULL, NULL, &err);
  CHECK(rc == TS_NOT_FOUND && strstr(err.msg, "nope"), "%s", err.msg);
  /* A forced strategy that does not apply: every rank gets BAD_STRATEGY. */
  ts_plan_opts o = {TS_STRATEGY_ALLREDUCE, 0, 0};
  rc = ts_store_reshard(s, W, "w", a, NULL, &o, NULL, &err);
  CHECK(rc == TS_BAD_STRATEGY, "forced: %d %s", rc, err.msg);
  /* A tag that does not fit the tensor, from the last rank to rank 0: the ranks outside both
   * meshes too return BAD_LAYOUT with the same message, and w stays as it was everywhere. */
  ts_attr *r0 = NULL;
  ts_attr_parse("mesh=[1]@0 placements=[R]", &r0, NULL);
  rc = ts_store_reshard(s, W, "w", r0, "A0ab", NULL, NULL, &err);
  CHECK(rc == TS_BAD_LAYOUT, "tag that does not fit: %d %s", rc, err.msg);
  same_everywhere(rc, err.msg, "tag that does not fit");
  e = ts_store_find(s, "w");
  CHECK(e && ts_attr_equal(e->attr, c) && e->layout_tag[0] == '\0', "w changed by a bad tag");
  /* A failure the caller met on the last rank only fails the reshard on every rank. */
  ts_error injected;
  ts_error_set(&injected, TS_LIMIT, "injected on the last rank");
  rc = ts_store_reshard_after(s, W, "w", r0, NULL, NULL,
                              world_rank == world_size - 1 ? TS_LIMIT : TS_OK, &injected, NULL,
                              &err);
  CHECK(rc == TS_LIMIT && strstr(err.msg, "injected on the last rank"), "prior: %d %s", rc,
        err.msg);
  same_everywhere(rc, err.msg, "prior failure");
  e = ts_store_find(s, "w");
  CHECK(e && ts_attr_equal(e->attr, c), "w changed by a failed reshard");
  ts_attr_destroy(&r0);

  /* Quota: a store with a tiny quota on the last rank refuses, on every rank. */
  ts_store *q = NULL;
  ts_store_create(&q, world_rank, world_rank == world_size - 1 ? 481 : 0, NULL);
  rc = ts_store_add(q, "small", 2, shape, TS_F32, a, NULL, NULL, &err);
  CHECK(rc == TS_OK, "quota add small: %s", err.msg);
  rc = ts_store_add(q, "big", 2, shape, TS_F32, c, NULL, NULL, &err);
  CHECK(world_rank == world_size - 1 ? rc == TS_LIMIT : rc == TS_OK, "quota add: %d", rc);
  rc = ts_store_reshard(q, W, "small", c, NULL, NULL, NULL, &err);
  CHECK(rc == TS_LIMIT, "quota reshard: %d %s", rc, err.msg);
  ts_store_destroy(&q);

  CHECK(ts_store_drop(s, "w", &err) == TS_OK, "drop");
  CHECK(ts_store_drop(s, "w", &err) == TS_NOT_FOUND, "drop twice");
  ts_store_destroy(&s);
  ts_store_destroy(&s);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
  ts_attr_destroy(&c);
}

/* From one host to every rank over three hosts or more (hosts of two ranks): the hierarchical
 * plan broadcasts down a chain of hosts (its EXPLAIN says so, and its busiest host link carries
 * the tensor once), and every rank holds the reference values, for sources replicated or
 * sharded on the first host, on a later host, or on one rank, in several dtypes, shapes and
 * target layouts. */
static void chain_cases(stats *st) {
  if (world_size < 6 || world_size % 2)
    return;
  char spec[32];
  snprintf(spec, sizeof spec, "hosts=%dx2", world_size / 2);
  ts_topology *topo = NULL;
  CHECK(ts_topology_parse(spec, &topo, NULL) == TS_OK, "topology %s", spec);
  const char *srcs[] = {"mesh=[2]@0,1 placements=[R]", "mesh=[2]@0,1 placements=[S(0)]",
                        "mesh=[2]@3,2 placements=[S(1)]", "mesh=[1]@4 placements=[R]",
                        "mesh=[2]@2,3 placements=[S(0)]"};
  char all[64], grid[64];
  snprintf(all, sizeof all, "mesh=[%d] placements=[R]", world_size);
  snprintf(grid, sizeof grid, "mesh=[2,%d] placements=[R,R]", world_size / 2);
  const int64_t shapes[3][3] = {{13, 7, 0}, {5, 3, 9}, {64, 33, 0}};
  const ts_dtype dts[3] = {TS_F32, TS_I64, TS_BF16};
  for (int k = 0; k < (int)(sizeof srcs / sizeof *srcs) * 2; k++) {
    ts_attr *a = NULL, *b = NULL;
    ts_attr_parse(srcs[k / 2], &a, NULL);
    ts_attr_parse(k % 2 ? grid : all, &b, NULL);
    int ndim = shapes[k % 3][2] ? 3 : 2, tkind = k % 2 ? LAYOUT_BLOCKED : LAYOUT_PLAIN;
    ts_dtype dt = dts[k % 3];
    ts_plan *p = NULL;
    ts_error err;
    char what[300];
    snprintf(what, sizeof what, "%s -> %s on %s, %s %d dims", srcs[k / 2], k % 2 ? grid : all, spec,
             ts_dtype_name(dt), ndim);
    int rc = ts_plan_create_on(ndim, shapes[k % 3], dt, a, b, NULL, topo, &p, &err);
    CHECK(rc == TS_OK, "%s: plan: %s", what, err.msg);
    if (rc == TS_OK) {
      char *ex = ts_plan_explain(p, 0);
      CHECK(ts_plan_strategy(p) == TS_STRATEGY_HIER && ex && strstr(ex, "chain broadcast"),
            "%s: %s, no chain:\n%s", what, ts_strategy_name(ts_plan_strategy(p)), ex ? ex : "");
      int64_t total = (int64_t)ts_dtype_size(dt);
      for (int d = 0; d < ndim; d++)
        total *= shapes[k % 3][d];
      CHECK(ts_plan_get_costs(p)->host_link_bytes <= total, "%s: host link %lld > %lld", what,
            (long long)ts_plan_get_costs(p)->host_link_bytes, (long long)total);
      free(ex);
      ts_tensor src, out;
      ts_box box;
      int has = make_slice(a, ndim, shapes[k % 3], dt, LAYOUT_PLAIN, &src, &box);
      ts_exec_report rep;
      rc = ts_reshard_exec(W, p, has > 0 ? &src : NULL, tag_for(ndim, tkind), NULL, &out, &rep,
                           &err);
      CHECK(rc == TS_OK, "%s: exec: %s", what, err.msg);
      if (rc == TS_OK) {
        check_target(p, &out, what);
        st->by_strategy[rep.strategy]++;
      }
      ts_shard_free_tensor(&out);
      free(src.data);
    }
    ts_plan_destroy(&p);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
  ts_topology_destroy(&topo);
}

/* Bad input to the executor: a source slice of the wrong shape on one rank. */
/* A move from one half of the world to the other, in place on both sides (nothing can fail once
 * the first agreement passed): on one host that agreement is the only one; across hosts a second
 * one makes every rank return only when every rank has its part. Agreements counted on the world
 * (agree_world). */
static void answer_waits_for_every_rank(void) {
  if (!topos[0])
    return;
  int64_t shape[2] = {16, 6};
  char t[2][128];
  snprintf(t[0], sizeof t[0], "mesh=[%d]@0-%d placements=[S(0)]", world_size / 2,
           world_size / 2 - 1);
  snprintf(t[1], sizeof t[1], "mesh=[%d]@%d-%d placements=[S(1)]", world_size / 2, world_size / 2,
           world_size - 1);
  ts_attr *a = NULL, *b = NULL;
  ts_attr_parse(t[0], &a, NULL);
  ts_attr_parse(t[1], &b, NULL);
  for (int k = 0; k < 3; k++) { /* one host; halves on two hosts; alternating ranks */
    ts_plan_opts o = {TS_STRATEGY_P2P, 0, world_size};
    ts_plan *p = NULL;
    ts_error err;
    int rc = ts_plan_create_on(2, shape, TS_F32, a, b, &o, k ? topos[k - 1] : NULL, &p, &err);
    CHECK(rc == TS_OK, "plan %s -> %s: %s", t[0], t[1], err.msg);
    ts_tensor src, out;
    ts_box box;
    int has = make_slice(a, 2, shape, TS_F32, LAYOUT_PLAIN, &src, &box);
    ts_exec_opts xo = {.agree_world = true, .no_relay = true};
    uint64_t before = ts_comm_agreements(ts_world_comm(W));
    rc = ts_reshard_exec(W, p, has > 0 ? &src : NULL, NULL, &xo, &out, NULL, &err);
    uint64_t took = ts_comm_agreements(ts_world_comm(W)) - before;
    CHECK(rc == TS_OK, "exec %s -> %s: %s", t[0], t[1], err.msg);
    if (rc == TS_OK)
      check_target(p, &out, t[1]);
    CHECK(took == (k ? 2u : 1u), "%s: %llu agreements (want %d)", k ? "across hosts" : "one host",
          (unsigned long long)took, k ? 2 : 1);
    ts_shard_free_tensor(&out);
    free(src.data);
    ts_plan_destroy(&p);
  }
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
}

static void exec_errors(void) {
  int64_t shape[2] = {8, 6};
  ts_attr *a = NULL, *b = NULL;
  char t[2][128];
  snprintf(t[0], sizeof t[0], "mesh=[%d] placements=[S(0)]", world_size);
  snprintf(t[1], sizeof t[1], "mesh=[%d] placements=[R]", world_size);
  ts_attr_parse(t[0], &a, NULL);
  ts_attr_parse(t[1], &b, NULL);
  ts_plan *p = NULL;
  ts_plan_create(2, shape, TS_F32, a, b, NULL, &p, NULL);
  ts_tensor src, out;
  ts_box box;
  make_slice(a, 2, shape, TS_F32, LAYOUT_PLAIN, &src, &box);
  if (world_rank == 0)
    src.layout.shape[1] = 5;
  ts_error err;
  int rc = ts_reshard_exec(W, p, &src, NULL, NULL, &out, NULL, &err);
  CHECK(rc == TS_BAD_SHAPE && strncmp(err.msg, "rank 0: ", 8) == 0, "wrong shape: %d %s", rc,
        err.msg);
  if (world_rank == 0)
    src.layout.shape[1] = 6;
  rc = ts_reshard_exec(W, p, &src, "zz", NULL, &out, NULL, &err);
  CHECK(rc != TS_OK && out.data == NULL, "bad target tag accepted");
  ts_exec_opts lim = {.max_alloc_bytes = 16};
  rc = ts_reshard_exec(W, p, &src, NULL, &lim, &out, NULL, &err);
  CHECK(rc == TS_LIMIT, "memory limit: %d %s", rc, err.msg);
  rc = ts_reshard_exec(W, p, NULL, NULL, NULL, &out, NULL, &err);
  CHECK(rc == TS_INVALID_ARGUMENT, "no source: %d", rc);
  CHECK(ts_reshard_exec(NULL, p, &src, NULL, NULL, &out, NULL, NULL) == TS_INVALID_ARGUMENT,
        "NULL world");
  free(src.data);
  ts_plan_destroy(&p);
  /* A plan for a larger world than this one. */
  ts_attr_destroy(&b);
  snprintf(t[1], sizeof t[1], "mesh=[1]@%d placements=[R]", world_size);
  ts_attr_parse(t[1], &b, NULL);
  ts_plan_create(2, shape, TS_F32, a, b, NULL, &p, NULL);
  make_slice(a, 2, shape, TS_F32, LAYOUT_PLAIN, &src, &box);
  rc = ts_reshard_exec(W, p, &src, NULL, NULL, &out, NULL, &err);
  CHECK(rc == TS_BAD_ATTRIBUTE, "plan beyond the world: %d", rc);
  free(src.data);
  ts_plan_destroy(&p);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
}

int main(int argc, char **argv) {
  if (!mpi_check_start(&argc, &argv))
    return 1;
  ts_kernels_set_threads(1);
  stats st = {0};
  if (world_size >= 4 && world_size % 2 == 0) {
    char halves[32], alternating[64] = "map=";
    snprintf(halves, sizeof halves, "hosts=2x%d", world_size / 2);
    for (int r = 0; r < world_size; r++)
      snprintf(alternating + strlen(alternating), sizeof alternating - strlen(alternating), "%s%d",
               r ? "," : "", r % 2);
    CHECK(ts_topology_parse(halves, &topos[0], NULL) == TS_OK &&
              ts_topology_parse(alternating, &topos[1], NULL) == TS_OK,
          "topologies %s and %s", halves, alternating);
  }
  fixed_cases(&st);
  answer_waits_for_every_rank();
  chain_cases(&st);
  generated_family(&st);
  CHECK(!topos[0] || st.by_strategy[TS_STRATEGY_HIER] >= 20, "only %ld hierarchical executions",
        st.by_strategy[TS_STRATEGY_HIER]);
  ts_topology_destroy(&topos[0]);
  ts_topology_destroy(&topos[1]);
  chain_is_bit_exact();
  atomic_failure();
  store_tests();
  exec_errors();
  CHECK(world_size == 1 || st.relayed > 0, "no execution relayed its pieces");
  long total_fail = 0, total_checks = 0;
  MPI_Allreduce(&failures, &total_fail, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&checks, &total_checks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) {
    printf("test_reshard: %d ranks, %ld pairs, %ld executions (", world_size, st.cases, st.execs);
    for (int s = 1; s < TS_STRATEGY_COUNT; s++)
      printf("%s%s %ld", s > 1 ? ", " : "", ts_strategy_name((ts_strategy)s), st.by_strategy[s]);
    printf("; relayed %ld), %ld checks, %ld failures\n", st.relayed, total_checks, total_fail);
  }
  ts_world_finalize(&W, NULL);
  return total_fail ? 1 : 0;
}
