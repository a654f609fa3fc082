/* test_cyclic.c - block-cyclic placements without MPI: the text form and its errors, NUMROC
 * against ScaLAPACK's formula and a count, the per-dim overlays of random source and target deals
 * against an element-by-element reference (every shared element in exactly one run, local
 * offsets as counted), the run-product copy, pack and unpack of what two part tuples share
 * against element-by-element local arrays, the planner's wire bytes against per-element ownership,
 * the ScaLAPACK descriptor helper and its errors, and the planning time of a 65536 x 65536 matrix
 * on 4096 ranks. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ts_plan.h"
#include "check_main.h"

static uint64_t rng_state = 0x5CA1AB1E2026u;
static int64_t rnd(int64_t n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (int64_t)(rng_state % (uint64_t)n);
}

static void roundtrip(const char *text, const char *canon) {
  ts_attr *a = NULL, *b = NULL;
  ts_error err;
  ck_assert_msg(ts_attr_parse(text, &a, &err) == TS_OK, "%s: %s", text, err.msg);
  char buf[512];
  ts_attr_format(a, buf, sizeof buf);
  ck_assert_str_eq(buf, canon);
  ck_assert_int_eq(ts_attr_parse(buf, &b, &err), TS_OK);
  ck_assert(ts_attr_equal(a, b));
  ck_assert(ts_attr_is_cyclic(a));
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
}

static void refused(const char *text, int code, const char *needle) {
  ts_attr *a = NULL;
  ts_error err;
  ck_assert_int_eq(ts_attr_parse(text, &a, &err), code);
  ck_assert_msg(strstr(err.msg, needle), "%s: '%s' lacks '%s'", text, err.msg, needle);
  ck_assert_ptr_null(a);
}

START_TEST(grammar) {
  roundtrip("mesh=[4] placements=[S(0,cyclic=64)]", "mesh=[4]@0-3 placements=[S(0,cyclic=64)]");
  roundtrip("mesh=[2,3]@0-5 placements=[S(1, cyclic=2, src=1), S(0,cyclic=3,src=0)]",
            "mesh=[2,3]@0-5 placements=[S(1,cyclic=2,src=1),S(0,cyclic=3)]");
  roundtrip("mesh=(2,2) placements=(Shard(dim=0, cyclic=8, src=1), Replicate())",
            "mesh=[2,2]@0-3 placements=[S(0,cyclic=8,src=1),R]");
  roundtrip("mesh=[p=2,q=2] placements=[q:S(0,cyclic=5)]",
            "mesh=[p=2,q=2]@0-3 placements=[R,S(0,cyclic=5)]");
  refused("mesh=[4] placements=[S(0,cyclic=0)]", TS_PARSE, "block size of at least 1");
  refused("mesh=[4] placements=[S(0,block=4)]", TS_PARSE, "\"cyclic=\"");
  refused("mesh=[4] placements=[S(0,cyclic=4,srk=1)]", TS_PARSE, "\"src=\"");
  refused("mesh=[4] placements=[S(0,cyclic=4,src=4)]", TS_BAD_ATTRIBUTE, "src=0 to 3");
  refused("mesh=[2,2] placements=[S(0,cyclic=4),S(0)]", TS_BAD_ATTRIBUTE, "one mesh dim only");
  refused("mesh=[2] placements=[S(0,cyclic=4)] splits={0:[1,1]}", TS_BAD_ATTRIBUTE,
          "block-cyclically");
  ts_error err;
  ts_attr *a = NULL;
  int64_t mesh[1] = {2};
  ts_placement bad = ts_replicate();
  bad.cyclic = 4;
  ck_assert_int_eq(ts_attr_create(&a, 1, mesh, NULL, &bad, &err), TS_BAD_ATTRIBUTE);
  ck_assert(strstr(err.msg, "shard only"));
  ts_placement nosrc = ts_shard_cyclic(0, 0, 1);
  ck_assert_int_eq(ts_attr_create(&a, 1, mesh, NULL, &nosrc, &err), TS_BAD_ATTRIBUTE);
  ck_assert(strstr(err.msg, "without a cyclic block size"));
  ts_placement neg = ts_shard_cyclic(0, -3, 0);
  ck_assert_int_eq(ts_attr_create(&a, 1, mesh, NULL, &neg, &err), TS_BAD_ATTRIBUTE);
  /* the slices of a cyclic attribute are not boxes: geometry refuses it */
  ck_assert_int_eq(ts_attr_parse("mesh=[2] placements=[S(0,cyclic=3)]", &a, &err), TS_OK);
  int64_t shape[1] = {10};
  ts_geom *g = NULL;
  ck_assert_int_eq(ts_geom_create(a, 1, shape, &g, &err), TS_UNSUPPORTED);
  ck_assert_ptr_null(g);
  ts_attr_destroy(&a);
}
END_TEST

/* ScaLAPACK's NUMROC, as written in its TOOLS/numroc.f. */
static int64_t numroc_ref(int64_t n, int64_t nb, int64_t iproc, int64_t isrc, int64_t nprocs) {
  int64_t mydist = (nprocs + iproc - isrc) % nprocs, nblocks = n / nb;
  int64_t r = nblocks / nprocs * nb, extra = nblocks % nprocs;
  if (mydist < extra)
    r += nb;
  else if (mydist == extra)
    r += n % nb;
  return r;
}

START_TEST(numroc) {
  for (int it = 0; it < 20000; it++) {
    int64_t n = rnd(300), nb = 1 + rnd(20), np = 1 + rnd(7), isrc = rnd(np), ip = rnd(np);
    int64_t count = 0;
    for (int64_t g = 0; g < n; g++)
      count += (g / nb + isrc) % np == ip;
    ck_assert_int_eq(ts_numroc(n, nb, ip, isrc, np), numroc_ref(n, nb, ip, isrc, np));
    ck_assert_int_eq(ts_numroc(n, nb, ip, isrc, np), count);
  }
}
END_TEST

/* A random deal of a dim of length len: cyclic, balanced or ragged split points. */
static void random_deal(int64_t len, ts_dim_deal *d, int64_t *off) {
  int64_t k = 1 + rnd(6);
  *d = (ts_dim_deal){len, k, 0, 0, off};
  int kind = (int)rnd(3);
  if (kind == 0) {
    d->nb = 1 + rnd(9);
    d->src = rnd(k);
    d->off = NULL;
    return;
  }
  off[0] = 0;
  for (int64_t p = 0; p < k; p++)
    off[p + 1] = kind == 1 ? off[p] + len / k + (p < len % k) : off[p];
  for (int64_t i = 0; kind == 2 && i < len; i++)
    for (int64_t p = rnd(k) + 1; p <= k; p++)
      off[p]++;
}

static int64_t owner_ref(const ts_dim_deal *d, int64_t g) {
  if (d->nb)
    return (g / d->nb + d->src) % d->nparts;
  for (int64_t p = 0; p < d->nparts; p++)
    if (g >= d->off[p] && g < d->off[p + 1])
      return p;
  return -1;
}

static int64_t before_ref(const ts_dim_deal *d, int64_t part, int64_t g) {
  int64_t n = 0;
  for (int64_t x = 0; x < g; x++)
    n += owner_ref(d, x) == part;
  return n;
}

START_TEST(overlay_vs_elements) {
  ts_run runs[400];
  for (int it = 0; it < 3000; it++) {
    int64_t len = rnd(4) == 0 ? rnd(3) : rnd(200), offa[8], offb[8];
    ts_dim_deal a, b;
    random_deal(len, &a, offa);
    random_deal(len, &b, offb);
    ts_overlay *o = NULL;
    ts_error err;
    ck_assert_int_eq(ts_overlay_create(&a, &b, &o, &err), TS_OK);
    for (int64_t p = 0; p < a.nparts; p++)
      ck_assert_int_eq(ts_deal_owned_before(&a, p, len), before_ref(&a, p, len));
    for (int64_t q = 0; q < b.nparts; q++) {
      int64_t sources = 0;
      for (int64_t p = 0; p < a.nparts; p++) {
        int64_t n = ts_overlay_pair_runs(o, p, q, 0, runs, 400), covered = 0, shared = 0;
        ck_assert_int_eq(n, ts_overlay_pair_count(o, p, q));
        for (int64_t i = 0; i < n; i++) {
          ck_assert(runs[i].len > 0 && runs[i].start + runs[i].len <= len);
          ck_assert(i == 0 || runs[i].start >= runs[i - 1].start + runs[i - 1].len);
          ck_assert_int_eq(runs[i].src_local, before_ref(&a, p, runs[i].start));
          ck_assert_int_eq(runs[i].tgt_local, before_ref(&b, q, runs[i].start));
          for (int64_t g = runs[i].start; g < runs[i].start + runs[i].len; g++)
            ck_assert(owner_ref(&a, g) == p && owner_ref(&b, g) == q);
          covered += runs[i].len;
        }
        for (int64_t g = 0; g < len; g++)
          shared += owner_ref(&a, g) == p && owner_ref(&b, g) == q;
        ck_assert_int_eq(covered, shared); /* disjoint runs inside the pair: all of it */
        ck_assert_int_eq(ts_overlay_pair_len(o, p, q), shared);
        sources += shared > 0;
        if (n > 2) { /* paging: from the middle on */
          ts_run tail[400];
          ck_assert_int_eq(ts_overlay_pair_runs(o, p, q, 2, tail, 400), n - 2);
          ck_assert_int_eq(tail[0].start, runs[2].start);
        }
      }
      ck_assert_int_eq(ts_overlay_sources_of(o, q), sources);
    }
    ts_overlay_destroy(&o);
  }
}
END_TEST

/* The local array of part tuple parts under deals dl (row-major over its local extents), from
 * the global row-major array g: element by element, local index = owned elements before it. */
static int64_t local_of(int ndim, const int64_t *shape, const ts_dim_deal *dl, const int64_t *parts,
                        const int64_t *g, int64_t *local, bool fill) {
  int64_t ext[3], n = 1, total = 1;
  for (int d = 0; d < ndim; d++) {
    ext[d] = before_ref(&dl[d], parts[d], shape[d]);
    n *= ext[d];
    total *= shape[d];
  }
  for (int64_t i = 0; fill && i < total; i++) {
    int64_t x[3], rest = i, at = 0;
    bool mine = true;
    for (int d = ndim - 1; d >= 0; d--) {
      x[d] = rest % shape[d];
      rest /= shape[d];
    }
    for (int d = 0; d < ndim && mine; d++) {
      mine = owner_ref(&dl[d], x[d]) == parts[d];
      at = at * ext[d] + before_ref(&dl[d], parts[d], x[d]);
    }
    if (mine)
      local[at] = g[i];
  }
  return n;
}

START_TEST(pair_move_vs_elements) {
  for (int it = 0; it < 1500; it++) {
    int ndim = 1 + (int)rnd(3);
    int64_t shape[3], offa[3][8], offb[3][8], sp[3], tp[3], total = 1;
    ts_dim_deal a[3], b[3];
    ts_overlay *ov[3];
    ts_error err;
    for (int d = 0; d < ndim; d++) {
      shape[d] = 1 + rnd(11);
      total *= shape[d];
      random_deal(shape[d], &a[d], offa[d]);
      random_deal(shape[d], &b[d], offb[d]);
      ck_assert_int_eq(ts_overlay_create(&a[d], &b[d], &ov[d], &err), TS_OK);
      sp[d] = rnd(a[d].nparts);
      tp[d] = rnd(b[d].nparts);
    }
    int64_t *g = malloc((size_t)total * sizeof *g), *src = malloc((size_t)total * sizeof *src);
    int64_t *want = malloc((size_t)total * sizeof *want),
            *got = malloc((size_t)total * sizeof *got);
    int64_t *buf = malloc((size_t)total * sizeof *buf),
            *got2 = malloc((size_t)total * sizeof *got2);
    for (int64_t i = 0; i < total; i++)
      g[i] = 1000 + i;
    local_of(ndim, shape, a, sp, g, src, true);
    /* the target's expected array: shared elements from g, the rest untouched (-1) */
    int64_t nt = local_of(ndim, shape, b, tp, g, want, false), shared = 0;
    for (int64_t i = 0; i < nt; i++)
      want[i] = got[i] = got2[i] = -1;
    int64_t *masked = malloc((size_t)total * sizeof *masked);
    for (int64_t i = 0; i < total; i++) {
      int64_t rest = i;
      bool held = true;
      for (int d = ndim - 1; d >= 0; d--) {
        held = held && owner_ref(&a[d], rest % shape[d]) == sp[d];
        rest /= shape[d];
      }
      masked[i] = held ? g[i] : -1; /* what the source holds, in global places */
    }
    local_of(ndim, shape, b, tp, masked, want, true);
    for (int64_t i = 0; i < nt; i++)
      shared += want[i] >= 0;
    ck_assert_int_eq(ts_cyclic_pair_move(ndim, ov, sp, tp, 8, src, got, TS_CYCLIC_COPY), shared);
    ck_assert_int_eq(ts_cyclic_pair_move(ndim, ov, sp, tp, 8, src, buf, TS_CYCLIC_PACK), shared);
    ck_assert_int_eq(ts_cyclic_pair_move(ndim, ov, sp, tp, 8, buf, got2, TS_CYCLIC_UNPACK), shared);
    for (int64_t i = 0; i < nt; i++) {
      ck_assert_int_eq(got[i], want[i]);
      ck_assert_int_eq(got2[i], want[i]);
    }
    for (int64_t i = 1; i < shared; i++) /* packed in global row-major order */
      ck_assert(buf[i] > buf[i - 1]);
    free(g);
    free(src);
    free(want);
    free(got);
    free(got2);
    free(buf);
    free(masked);
    for (int d = 0; d < ndim; d++)
      ts_overlay_destroy(&ov[d]);
  }
}
END_TEST

/* A random attribute on mesh ranks 0..n-1 of a 1-D or 2-D mesh whose placements shard each
 * tensor dim at most once (cyclic, balanced) or replicate or are partial. */
static ts_attr *random_attr(int ndim, const int64_t *shape, bool partial) {
  int mnd = 1 + (int)rnd(2);
  int64_t mesh[2] = {1 + rnd(3), 1 + rnd(3)};
  ts_placement pl[2];
  bool used[2] = {false, false};
  for (int m = 0; m < mnd; m++) {
    int kind = (int)rnd(partial ? 4 : 3), d = (int)rnd(ndim);
    if (kind <= 1 && !used[d]) {
      used[d] = true;
      pl[m] = kind == 0 ? ts_shard_cyclic(d, 1 + rnd(5), rnd(mesh[m])) : ts_shard_on(d);
    } else {
      pl[m] = kind == 3 ? ts_partial(TS_REDUCE_SUM) : ts_replicate();
    }
  }
  (void)shape;
  ts_attr *a = NULL;
  ts_error err;
  ck_assert_int_eq(ts_attr_create(&a, mnd, mesh, NULL, pl, &err), TS_OK);
  return a;
}

/* Whether mesh index i of a holds element x, from per-element ownership. */
static bool holds(const ts_attr *a, int ndim, const int64_t *shape, int64_t i, const int64_t *x) {
  int64_t coord[2], rest = i;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    coord[m] = rest % a->mesh_shape[m];
    rest /= a->mesh_shape[m];
  }
  for (int m = 0; m < a->mesh_ndim; m++) {
    const ts_placement *p = &a->place[m];
    if (p->kind != TS_PLACE_SHARD)
      continue;
    int64_t k = a->mesh_shape[m], g = x[p->dim], L = shape[p->dim], owner = -1;
    if (p->cyclic)
      owner = (g / p->cyclic + p->src) % k;
    for (int64_t q = 0, lo = 0; !p->cyclic && q < k; q++) {
      int64_t hi = lo + L / k + (q < L % k);
      if (g >= lo && g < hi)
        owner = q;
      lo = hi;
    }
    if (owner != coord[m])
      return false;
  }
  (void)ndim;
  return true;
}

static bool receiver(const ts_attr *b, int64_t i) {
  for (int m = b->mesh_ndim - 1; m >= 0; m--) {
    if (b->place[m].kind == TS_PLACE_PARTIAL && i % b->mesh_shape[m] != 0)
      return false;
    i /= b->mesh_shape[m];
  }
  return true;
}

static int64_t npartial(const ts_attr *a) {
  int64_t n = 1;
  for (int m = 0; m < a->mesh_ndim; m++)
    n *= a->place[m].kind == TS_PLACE_PARTIAL ? a->mesh_shape[m] : 1;
  return n;
}

START_TEST(plan_vs_elements) {
  for (int it = 0; it < 600; it++) {
    int ndim = 1 + (int)rnd(2);
    int64_t shape[2] = {rnd(14), 1 + rnd(9)};
    ts_attr *a = random_attr(ndim, shape, true), *b = random_attr(ndim, shape, false);
    if (!ts_attr_is_cyclic(a) && !ts_attr_is_cyclic(b)) {
      ts_attr_destroy(&a);
      ts_attr_destroy(&b);
      continue;
    }
    ts_plan *p = NULL;
    ts_error err;
    ck_assert_msg(ts_plan_create(ndim, shape, TS_F64, a, b, NULL, &p, &err) == TS_OK, "%s",
                  err.msg);
    ck_assert(ts_plan_strategy(p) == TS_STRATEGY_P2P ||
              ts_plan_strategy(p) == TS_STRATEGY_ALLTOALL);
    int64_t wire = 0, np = npartial(a);
    for (int64_t ti = 0; ti < b->nranks; ti++) {
      if (!receiver(b, ti))
        continue;
      int64_t si = ti < a->nranks ? ti : -1; /* ranks 0..n-1 on both: the same world rank */
      for (int64_t x0 = 0; x0 < shape[0]; x0++)
        for (int64_t x1 = 0; x1 < (ndim > 1 ? shape[1] : 1); x1++) {
          int64_t x[2] = {x0, x1};
          if (holds(b, ndim, shape, ti, x))
            wire += np - (si >= 0 && holds(a, ndim, shape, si, x));
        }
    }
    ck_assert_int_eq(ts_plan_min_wire_bytes(p), wire * 8);
    char *text = ts_plan_explain(p, 4);
    ck_assert(text && strstr(text, "block-cyclic"));
    free(text);
    ts_rank_plan rp;
    ck_assert_int_eq(ts_plan_rank(p, 0, &rp, &err), TS_UNSUPPORTED);
    ts_plan_opts forced = {.strategy = TS_STRATEGY_ALLGATHER};
    ts_plan *q = NULL;
    ck_assert_int_eq(ts_plan_create(ndim, shape, TS_F64, a, b, &forced, &q, &err), TS_BAD_STRATEGY);
    ck_assert(strstr(err.msg, "not a box"));
    ts_plan_destroy(&p);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
}
END_TEST

START_TEST(scalapack_desc) {
  ts_attr *a = NULL;
  ts_error err;
  int64_t shape[2];
  /* 100 x 70 matrix, 8 x 6 blocks, 2 x 3 grid, first block on process (1, 2) */
  int desc[9] = {1, 0, 100, 70, 8, 6, 1, 2, 56};
  ck_assert_int_eq(ts_attr_from_scalapack_desc(desc, 2, 3, 'R', NULL, -1, &a, shape, &err), TS_OK);
  char buf[256];
  ts_attr_format(a, buf, sizeof buf);
  ck_assert_str_eq(buf, "mesh=[2,3]@0-5 placements=[S(1,cyclic=8,src=1),S(0,cyclic=6,src=2)]");
  ck_assert_int_eq(shape[0], 70);
  ck_assert_int_eq(shape[1], 100);
  ts_attr_destroy(&a);
  ck_assert_int_eq(ts_attr_from_scalapack_desc(desc, 2, 3, 'C', NULL, -1, &a, NULL, &err), TS_OK);
  ts_attr_format(a, buf, sizeof buf);
  ck_assert_str_eq(buf, "mesh=[2,3]@0,2,4,1,3,5 placements=[S(1,cyclic=8,src=1),"
                        "S(0,cyclic=6,src=2)]");
  ts_attr_destroy(&a);
  struct {
    int field, value, my_prow;
    const char *needle;
  } bad[] = {
      {0, 2, -1, "DTYPE_"}, {4, 0, -1, "block sizes"}, {5, -1, -1, "block sizes"},
      {6, 2, -1, "RSRC_"},  {7, 3, -1, "CSRC_"},       {8, 51, -1, "LLD_=51"},
      {2, -1, -1, "M_=-1"}, {8, 47, 0, "LLD_=47"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int d[9];
    memcpy(d, desc, sizeof d);
    d[bad[i].field] = bad[i].value;
    ck_assert_int_eq(
        ts_attr_from_scalapack_desc(d, 2, 3, 'R', NULL, bad[i].my_prow, &a, NULL, &err),
        TS_BAD_ATTRIBUTE);
    ck_assert_msg(strstr(err.msg, bad[i].needle), "%s lacks %s", err.msg, bad[i].needle);
    ck_assert_ptr_null(a);
  }
  /* process row 0 holds 48 rows: LLD 48 is enough there, not for the largest (row 1: 52) */
  desc[8] = 48;
  ck_assert_int_eq(ts_attr_from_scalapack_desc(desc, 2, 3, 'R', NULL, 0, &a, NULL, &err), TS_OK);
  ts_attr_destroy(&a);
  ck_assert_int_eq(ts_attr_from_scalapack_desc(desc, 2, 3, 'X', NULL, 0, &a, NULL, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_attr_from_scalapack_desc(desc, 0, 3, 'R', NULL, -1, &a, NULL, &err),
                   TS_BAD_ATTRIBUTE);
}
END_TEST

static double plan_ms(const char *from, const char *to) {
  ts_attr *a = NULL, *b = NULL;
  ts_error err;
  ck_assert_int_eq(ts_attr_parse(from, &a, &err), TS_OK);
  ck_assert_int_eq(ts_attr_parse(to, &b, &err), TS_OK);
  int64_t shape[2] = {65536, 65536};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ts_plan *p = NULL;
  ck_assert_msg(ts_plan_create(2, shape, TS_F64, a, b, NULL, &p, &err) == TS_OK, "%s", err.msg);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* every target element not held locally crosses once */
  ck_assert(ts_plan_min_wire_bytes(p) > 0 &&
            ts_plan_min_wire_bytes(p) <= (int64_t)65536 * 65536 * 8);
  ts_plan_destroy(&p);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
  return (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
}

START_TEST(plan_4096_ranks) {
  const char *grid = "mesh=[64,64] placements=[S(0,cyclic=64),S(1,cyclic=64)]";
  double ms1 = plan_ms(grid, "mesh=[64,64] placements=[S(0,cyclic=128),S(1,cyclic=128)]");
  double ms2 = plan_ms(grid, "mesh=[4096] placements=[S(0)]");
  double ms3 = plan_ms("mesh=[4096] placements=[S(1)]", grid);
  printf("cyclic plans of 65536 x 65536 on 4096 ranks: %.1f, %.1f, %.1f ms\n", ms1, ms2, ms3);
  ck_assert(ms1 < 10000 && ms2 < 10000 && ms3 < 10000); /* generous: sanitizer builds */
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cyclic");
  TCase *tc = tcase_create("cyclic");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, grammar);
  tcase_add_test(tc, numroc);
  tcase_add_test(tc, overlay_vs_elements);
  tcase_add_test(tc, plan_vs_elements);
  tcase_add_test(tc, pair_move_vs_elements);
  tcase_add_test(tc, scalapack_desc);
  tcase_add_test(tc, plan_4096_ranks);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return ts_run_suite(suite()); }
