/* test_plan.c - the reshard planner without MPI: strategy applicability and choice, forced
 * strategies that do not apply, the per-rank transfer lists against an element-by-element
 * reference (every target element covered exactly once per partial contribution, every receive
 * matched by a send), wire bytes equal to the exact minimum, the EXPLAIN, and a 4096-rank plan. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ts_plan.h"
#include "check_main.h"

static uint64_t rng_state = 0xC0FFEE1234567u;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  ck_assert_msg(ts_attr_parse(text, &a, &err) == TS_OK, "%s: %s", text, err.msg);
  return a;
}

static ts_plan *plan(const char *src, const char *tgt, int ndim, const int64_t *shape,
                     ts_strategy s, int *rc_out, ts_error *err) {
  ts_attr *a = attr(src), *b = attr(tgt);
  ts_plan_opts o = {s, 0, 0};
  ts_plan *p = NULL;
  *rc_out = ts_plan_create(ndim, shape, TS_F32, a, b, &o, &p, err);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
  return p;
}

START_TEST(auto_choices) {
  int64_t shape[2] = {64, 48};
  struct {
    const char *src, *tgt;
    ts_strategy want;
  } cases[] = {
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", TS_STRATEGY_ALLTOALL},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]", TS_STRATEGY_ALLGATHER},
      {"mesh=[4] placements=[R]", "mesh=[4] placements=[S(1)]", TS_STRATEGY_LOCAL},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(0)]", TS_STRATEGY_LOCAL},
      {"mesh=[2]@0-1 placements=[S(0)]", "mesh=[2]@2-3 placements=[S(0)]", TS_STRATEGY_P2P},
      {"mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[R]", TS_STRATEGY_ALLREDUCE},
      {"mesh=[4] placements=[P(max)]", "mesh=[4] placements=[S(0)]", TS_STRATEGY_REDUCE_SCATTER},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[P(sum)]", TS_STRATEGY_LOCAL},
      {"mesh=[4] placements=[R]", "mesh=[4] placements=[P(min)]", TS_STRATEGY_LOCAL},
      {"mesh=[4] placements=[S(0)] splits={0:[10,0,30,24]}", "mesh=[4] placements=[S(0)]",
       TS_STRATEGY_ALLTOALL},
      {"mesh=[2,2] placements=[S(0),R]", "mesh=[2,2] placements=[R,S(1)]", TS_STRATEGY_ALLTOALL},
      {"mesh=[4,2] placements=[P(sum),S(1)]", "mesh=[4,2] placements=[R,S(1)]",
       TS_STRATEGY_ALLREDUCE},
      {"mesh=[2,2] placements=[S(0),S(1)]", "mesh=[2,2] placements=[R,S(1)]",
       TS_STRATEGY_ALLGATHER},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc;
    ts_error err;
    ts_plan *p = plan(cases[i].src, cases[i].tgt, 2, shape, TS_STRATEGY_AUTO, &rc, &err);
    ck_assert_msg(rc == TS_OK, "%s -> %s: %s", cases[i].src, cases[i].tgt, err.msg);
    ck_assert_msg(ts_plan_strategy(p) == cases[i].want, "%s -> %s: %s, want %s", cases[i].src,
                  cases[i].tgt, ts_strategy_name(ts_plan_strategy(p)),
                  ts_strategy_name(cases[i].want));
    ts_plan_destroy(&p);
    ck_assert_ptr_null(p);
  }
  ts_plan_destroy(NULL);
}
END_TEST

START_TEST(forced_strategies_that_do_not_apply) {
  int64_t shape[2] = {64, 48};
  struct {
    const char *src, *tgt;
    ts_strategy s;
    const char *why;
  } cases[] = {
      {"mesh=[2]@0-1 placements=[S(0)]", "mesh=[2]@2-3 placements=[S(0)]", TS_STRATEGY_ALLTOALL,
       "groups differ"},
      {"mesh=[2]@0-1 placements=[S(0)]", "mesh=[2]@2-3 placements=[S(0)]", TS_STRATEGY_ALLGATHER,
       "groups differ"},
      {"mesh=[4] placements=[S(0)] splits={0:[10,0,30,24]}", "mesh=[4] placements=[R]",
       TS_STRATEGY_ALLGATHER, "not uniform"},
      {"mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[R]", TS_STRATEGY_ROOT, "partial"},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", TS_STRATEGY_LOCAL,
       "needs data from other ranks"},
      {"mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[R]", TS_STRATEGY_LOCAL,
       "must be reduced"},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", TS_STRATEGY_ALLREDUCE,
       "Partial to Replicate"},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]", TS_STRATEGY_REDUCE_SCATTER,
       "Partial to Shard"},
      /* several ops, one of them kept: p2p and alltoall would reduce it too */
      {"mesh=[2,2] placements=[P(sum),P(max)]", "mesh=[2,2] placements=[P(sum),R]", TS_STRATEGY_P2P,
       "several ops"},
      {"mesh=[2,2] placements=[P(avg),P(min)]", "mesh=[2,2] placements=[S(0),P(min)]",
       TS_STRATEGY_ALLTOALL, "several ops"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc;
    ts_error err;
    ts_plan *p = plan(cases[i].src, cases[i].tgt, 2, shape, cases[i].s, &rc, &err);
    ck_assert_int_eq(rc, TS_BAD_STRATEGY);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.msg, cases[i].why) && strstr(err.msg, ts_strategy_name(cases[i].s)),
                  "%s", err.msg);
  }
  /* A strategy that applies can be forced. */
  int rc;
  ts_plan *p = plan("mesh=[4] placements=[S(0)] splits={0:[10,0,30,24]}", "mesh=[4] placements=[R]",
                    2, shape, TS_STRATEGY_ROOT, &rc, NULL);
  ck_assert_int_eq(rc, TS_OK);
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_ROOT);
  ts_plan_destroy(&p);
  ts_strategy s;
  ts_error err;
  ck_assert_int_eq(ts_strategy_parse("alltoall", &s, NULL), TS_OK);
  ck_assert_int_eq(s, TS_STRATEGY_ALLTOALL);
  ck_assert_int_eq(ts_strategy_parse("scatter", &s, &err), TS_BAD_STRATEGY);
  ck_assert_ptr_nonnull(strstr(err.msg, "reduce_scatter"));
  /* every name, hierarchical too, as the names table has them */
  for (int k = 0; k < TS_STRATEGY_COUNT; k++) {
    ck_assert_ptr_nonnull(strstr(err.msg, ts_strategy_name((ts_strategy)k)));
    ck_assert_int_eq(ts_strategy_parse(ts_strategy_name((ts_strategy)k), &s, NULL), TS_OK);
    ck_assert_int_eq(s, k);
  }
}
END_TEST

START_TEST(plan_input_errors) {
  int64_t shape[2] = {8, 8};
  ts_attr *a = attr("mesh=[4] placements=[S(0)]"), *b = attr("mesh=[4]@4-7 placements=[S(2)]");
  ts_plan *p = NULL;
  ts_error err;
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, a, b, NULL, &p, &err), TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "target attribute"));
  ts_plan_opts o = {TS_STRATEGY_AUTO, 0, 6};
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, b, a, &o, &p, &err), TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "source attribute"));
  ck_assert_int_eq(ts_plan_create(2, shape, (ts_dtype)77, a, a, NULL, &p, &err), TS_BAD_DTYPE);
  o.world_size = 0;
  o.strategy = (ts_strategy)42;
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, a, a, &o, &p, &err), TS_BAD_STRATEGY);
  o.strategy = TS_STRATEGY_AUTO;
  o.staging_bytes = -5;
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, a, a, &o, &p, &err), TS_INVALID_ARGUMENT);
  int64_t huge[2] = {INT64_MAX / 2, 8};
  ck_assert_int_eq(ts_plan_create(2, huge, TS_F32, a, a, NULL, &p, &err), TS_OVERFLOW);
  ck_assert_ptr_null(p);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Transfer lists against an element-by-element reference */

typedef struct family {
  char text[256];
} family;

/* A random attribute over up to 8 ranks for a tensor of `ndim` dims. */
static void random_attr(char *out, size_t cap, int ndim, const int64_t *shape, int world) {
  int mnd = 1 + (int)(rnd() % 2);
  int64_t ms[2] = {1, 1};
  int n;
  do {
    n = 1;
    for (int m = 0; m < mnd; m++) {
      ms[m] = 1 + (int64_t)(rnd() % 4);
      n *= (int)ms[m];
    }
  } while (n > world);
  /* ranks: a random subset of the world, in random order */
  int perm[8];
  for (int i = 0; i < world; i++)
    perm[i] = i;
  for (int i = world - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int len = snprintf(out, cap, "mesh=[%lld", (long long)ms[0]);
  if (mnd == 2)
    len += snprintf(out + len, cap - (size_t)len, ",%lld", (long long)ms[1]);
  len += snprintf(out + len, cap - (size_t)len, "]@");
  for (int i = 0; i < n; i++)
    len += snprintf(out + len, cap - (size_t)len, "%s%d", i ? "," : "", perm[i]);
  len += snprintf(out + len, cap - (size_t)len, " placements=[");
  int shard_dim[2] = {-1, -1};
  const char *op = (const char *[]){"sum", "max", "min"}[rnd() % 3];
  for (int m = 0; m < mnd; m++) {
    int k = (int)(rnd() % 4);
    if (k <= 1) {
      shard_dim[m] = (int)(rnd() % (uint64_t)ndim);
      len += snprintf(out + len, cap - (size_t)len, "%sS(%d)", m ? "," : "", shard_dim[m]);
    } else if (k == 2) {
      len += snprintf(out + len, cap - (size_t)len, "%sR", m ? "," : "");
    } else {
      len += snprintf(out + len, cap - (size_t)len, "%sP(%s)", m ? "," : "", op);
    }
  }
  len += snprintf(out + len, cap - (size_t)len, "]");
  /* Sometimes ragged splits (with zeros) for the first sharded dim. */
  if (shard_dim[0] >= 0 && rnd() % 2) {
    int d = shard_dim[0];
    int64_t parts = ms[0] * (shard_dim[1] == d ? ms[1] : 1), left = shape[d];
    len += snprintf(out + len, cap - (size_t)len, " splits={%d:[", d);
    for (int64_t i = 0; i < parts; i++) {
      int64_t v = i + 1 == parts ? left : (int64_t)(rnd() % (uint64_t)(left + 1));
      if (rnd() % 3 == 0 && i + 1 < parts)
        v = 0;
      left -= v;
      len += snprintf(out + len, cap - (size_t)len, "%s%lld", i ? "," : "", (long long)v);
    }
    snprintf(out + len, cap - (size_t)len, "]}");
  }
}

/* Checks a plan's transfer lists for every rank against the geometry, element by element. */
static void check_lists(const ts_plan *p, int world) {
  const ts_geom *sg = ts_plan_src_geom(p), *tg = ts_plan_tgt_geom(p);
  int ndim = ts_plan_ndim(p);
  const int64_t *shape = ts_plan_shape(p);
  const ts_attr *sa = ts_plan_src_attr(p), *ta = ts_plan_tgt_attr(p);
  int npartial = 1;
  for (int m = 0; m < sa->mesh_ndim; m++)
    if (sa->place[m].kind == TS_PLACE_PARTIAL)
      npartial *= (int)sa->mesh_shape[m];
  ts_rank_plan rp[8];
  int64_t wire = 0, want_min = 0;
  for (int r = 0; r < world; r++)
    ck_assert_int_eq(ts_plan_rank(p, r, &rp[r], NULL), TS_OK);
  for (int r = 0; r < world; r++) {
    ts_box tb;
    bool in_t = ts_geom_rank_box(tg, r, &tb);
    ck_assert(in_t == rp[r].in_tgt);
    wire += rp[r].recv_bytes;
    /* receiver: partial index 0 of the target */
    bool receiver = in_t;
    if (in_t) {
      int64_t ti = ts_geom_mesh_index(tg, r), stride = 1;
      for (int m = ta->mesh_ndim - 1; m >= 0; m--) {
        if (ta->place[m].kind == TS_PLACE_PARTIAL && (ti / stride) % ta->mesh_shape[m] != 0)
          receiver = false;
        stride *= ta->mesh_shape[m];
      }
    }
    ck_assert(receiver == rp[r].receiver);
    if (!receiver) {
      ck_assert_int_eq(rp[r].nrecv, 0);
      continue;
    }
    /* Each element of the target box: received npartial times, each from a rank whose source
     * box holds it; locally when the rank itself holds it. */
    int64_t n = ts_box_numel(&tb);
    int *count = calloc((size_t)(n ? n : 1), sizeof(int));
    ts_box own;
    bool has_own = ts_geom_rank_box(sg, r, &own);
    for (int k = 0; k < rp[r].nrecv; k++) {
      const ts_transfer *t = &rp[r].recv[k];
      ts_box pb;
      ck_assert(ts_geom_rank_box(sg, t->peer, &pb));
      ck_assert(ts_box_contains(&pb, &t->box));
      ck_assert(ts_box_contains(&tb, &t->box));
      ck_assert_int_eq(t->bytes, ts_box_numel(&t->box) * 4);
      /* the sender lists the same piece */
      bool found = false;
      for (int j = 0; j < rp[t->peer].nsend; j++)
        found |= rp[t->peer].send[j].peer == r && ts_box_equal(&rp[t->peer].send[j].box, &t->box);
      ck_assert(found);
      int64_t idx[TS_MAX_DIMS];
      for (int d = 0; d < ndim; d++)
        idx[d] = t->box.lo[d];
      for (int64_t e = 0; e < ts_box_numel(&t->box); e++) {
        int64_t lin = 0;
        for (int d = 0; d < ndim; d++)
          lin = lin * (tb.hi[d] - tb.lo[d]) + idx[d] - tb.lo[d];
        count[lin]++;
        for (int d = ndim - 1; d >= 0; d--) {
          if (++idx[d] < t->box.hi[d])
            break;
          idx[d] = t->box.lo[d];
        }
      }
    }
    for (int64_t e = 0; e < n; e++)
      ck_assert_int_eq(count[e], npartial);
    free(count);
    /* The minimum: every element npartial times, minus what this rank holds itself. */
    ts_box x;
    int64_t local = has_own && ts_box_intersect(&own, &tb, &x) ? ts_box_numel(&x) : 0;
    want_min += (n * npartial - local) * 4;
  }
  /* Every send is received. */
  int64_t sent = 0;
  for (int r = 0; r < world; r++) {
    sent += rp[r].send_bytes;
    for (int j = 0; j < rp[r].nsend; j++) {
      int peer = rp[r].send[j].peer;
      bool found = false;
      for (int k = 0; k < rp[peer].nrecv; k++)
        found |=
            rp[peer].recv[k].peer == r && ts_box_equal(&rp[peer].recv[k].box, &rp[r].send[j].box);
      ck_assert(found);
    }
  }
  ck_assert_int_eq(sent, wire);
  ck_assert_int_eq(wire, want_min);
  ck_assert_int_eq(ts_plan_min_wire_bytes(p), want_min);
  ts_plan_costs c;
  ck_assert(ts_plan_applies(p, TS_STRATEGY_P2P, &c, NULL));
  ck_assert_int_eq(c.wire_bytes, want_min);
  if (ts_plan_applies(p, TS_STRATEGY_ALLTOALL, &c, NULL))
    ck_assert_int_eq(c.wire_bytes, want_min);
  for (int r = 0; r < world; r++)
    ts_rank_plan_clear(&rp[r]);
  (void)shape;
}

START_TEST(random_pairs_lists_and_minimum) {
  for (int iter = 0; iter < 400; iter++) {
    int world = 1 + (int)(rnd() % 8);
    int ndim = 1 + (int)(rnd() % 3);
    int64_t shape[3];
    for (int d = 0; d < ndim; d++)
      shape[d] = (int64_t)(rnd() % 9);
    char s[256], t[256];
    random_attr(s, sizeof s, ndim, shape, world);
    random_attr(t, sizeof t, ndim, shape, world);
    ts_attr *a = attr(s), *b = attr(t);
    ts_plan *p = NULL;
    ts_error err;
    ts_plan_opts o = {TS_STRATEGY_AUTO, 64, world};
    ck_assert_msg(ts_plan_create(ndim, shape, TS_F32, a, b, &o, &p, &err) == TS_OK, "%s -> %s: %s",
                  s, t, err.msg);
    check_lists(p, world);
    /* auto is never worse on the wire than the intersection minimum, except the partial
     * collectives, which combine contributions on the way. */
    const ts_plan_costs *c = ts_plan_get_costs(p);
    if (ts_plan_strategy(p) != TS_STRATEGY_ALLREDUCE)
      ck_assert_int_le(c->wire_bytes, ts_plan_min_wire_bytes(p));
    char *ex = ts_plan_explain(p, 3);
    ck_assert_ptr_nonnull(ex);
    ck_assert_ptr_nonnull(strstr(ex, ts_strategy_name(ts_plan_strategy(p))));
    free(ex);
    ts_plan_destroy(&p);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
}
END_TEST

START_TEST(costs_of_known_cases) {
  int64_t shape[2] = {64, 48}; /* 12288 bytes of f32 */
  int rc;
  ts_plan *p = plan("mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", 2, shape,
                    TS_STRATEGY_AUTO, &rc, NULL);
  ts_plan_costs c;
  ck_assert(ts_plan_applies(p, TS_STRATEGY_ALLTOALL, &c, NULL));
  ck_assert_int_eq(c.wire_bytes, 12288 * 3 / 4); /* each rank keeps 1/16, sends 3/16 */
  ck_assert_int_eq(c.max_rank_bytes, 12288 * 3 / 16);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_ALLGATHER, &c, NULL));
  ck_assert_int_eq(c.wire_bytes, 12288 * 3);
  ck_assert_int_eq(c.peak_extra_bytes, 12288);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_ROOT, &c, NULL));
  ck_assert_int_eq(c.wire_bytes, 12288 * 3 / 4 + 3 * 12288);
  char *ex = ts_plan_explain(p, 0);
  ck_assert_ptr_nonnull(strstr(ex, "strategy: alltoall"));
  ck_assert_ptr_nonnull(strstr(ex, "reduce_scatter  does not apply"));
  ck_assert_ptr_nonnull(strstr(ex, "rank 3: source [48:64,0:48] target [0:64,36:48]"));
  free(ex);
  ts_plan_destroy(&p);

  p = plan("mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[R]", 2, shape, TS_STRATEGY_AUTO,
           &rc, NULL);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_ALLREDUCE, &c, NULL));
  ck_assert_int_eq(c.wire_bytes, 4 * 2 * 3 * 12288 / 4);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_P2P, &c, NULL));
  ck_assert_int_eq(c.wire_bytes, 4 * 3 * 12288);
  ts_plan_destroy(&p);

  p = plan("mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[S(0)]", 2, shape, TS_STRATEGY_AUTO,
           &rc, NULL);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_REDUCE_SCATTER, &c, NULL));
  ck_assert_int_eq(c.wire_bytes, 3 * 12288);
  ck_assert_int_eq(ts_plan_min_wire_bytes(p), 3 * 12288);
  ts_plan_destroy(&p);

  /* allgather along one mesh dim of a 2-D mesh moves exactly the minimum. */
  p = plan("mesh=[2,2] placements=[S(0),S(1)]", "mesh=[2,2] placements=[R,S(1)]", 2, shape,
           TS_STRATEGY_AUTO, &rc, NULL);
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_ALLGATHER);
  ck_assert_int_eq(ts_plan_get_costs(p)->wire_bytes, ts_plan_min_wire_bytes(p));
  ck_assert_int_eq(ts_plan_min_wire_bytes(p), 12288); /* each rank lacks 1/4 */
  ex = ts_plan_explain(p, 0);
  ck_assert_ptr_nonnull(strstr(ex, "strategy: allgather (along mesh dim 0)"));
  free(ex);
  ts_plan_destroy(&p);

  /* Disjoint groups: everything crosses the wire once. */
  p = plan("mesh=[2]@0-1 placements=[S(0)]", "mesh=[2]@2-3 placements=[S(1)]", 2, shape,
           TS_STRATEGY_AUTO, &rc, NULL);
  ck_assert_int_eq(ts_plan_get_costs(p)->wire_bytes, 12288);
  ck_assert_int_eq(ts_plan_get_costs(p)->max_rank_bytes, 12288 / 2);
  int n;
  const int *u = ts_plan_union_ranks(p, &n);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(u[3], 3);
  ts_plan_destroy(&p);

  /* Replicated source: the load of a piece is spread over the replicas. */
  p = plan("mesh=[2,2] placements=[R,S(0)]", "mesh=[4]@0-3 placements=[S(1)]", 2, shape,
           TS_STRATEGY_P2P, &rc, NULL);
  ts_rank_plan rp;
  int64_t sends[4];
  for (int r = 0; r < 4; r++) {
    ck_assert_int_eq(ts_plan_rank(p, r, &rp, NULL), TS_OK);
    sends[r] = rp.send_bytes;
    ts_rank_plan_clear(&rp);
  }
  ck_assert_int_gt(sends[0], 0);
  ck_assert_int_gt(sends[2], 0);
  ts_plan_destroy(&p);
}
END_TEST

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

START_TEST(plan_4096_ranks) {
  int64_t shape[2] = {1 << 16, 1 << 14};
  ts_attr *a = attr("mesh=[4096] placements=[S(0)]"), *b = attr("mesh=[4096] placements=[S(1)]");
  ts_plan *p = NULL;
  double t0 = now_ms();
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, a, b, NULL, &p, NULL), TS_OK);
  double ms = now_ms() - t0;
  ck_assert_msg(ms < 100.0, "planning took %.1f ms", ms);
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_ALLTOALL);
  int64_t total = ((int64_t)1 << 30) * 4;
  ck_assert_int_eq(ts_plan_min_wire_bytes(p), total - total / 4096);
  /* One rank's lists: 4095 pieces in, 4095 out (plus its own). */
  ts_rank_plan rp;
  ck_assert_int_eq(ts_plan_rank(p, 1234, &rp, NULL), TS_OK);
  ck_assert_int_eq(rp.nrecv, 4096);
  ck_assert_int_eq(rp.nsend, 4096);
  ts_rank_plan_clear(&rp);
  ts_plan_destroy(&p);
  /* A 2-D mesh of 4096 with a replicated dim and ragged splits, also fast. */
  ts_attr_destroy(&b);
  b = attr("mesh=[64,64] placements=[R,S(1)]");
  t0 = now_ms();
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, a, b, NULL, &p, NULL), TS_OK);
  ms = now_ms() - t0;
  ck_assert_msg(ms < 100.0, "planning took %.1f ms", ms);
  ts_plan_destroy(&p);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
}
END_TEST

/* Casts in transit: a narrowing cast of a non-partial source travels in the narrow dtype, so its
 * plan's wire bytes are the uncast plan's times the size ratio (f32 -> bf16: half; f64 -> f8:
 * an eighth); widening casts and partial sources travel in the source dtype (the same bytes),
 * casts to a partial target in the target dtype; partial targets of a dtype without reductions,
 * a partial source to a partial target and invalid dtypes are refused. */
START_TEST(casts_in_transit) {
  int64_t shape[2] = {64, 48};
  struct {
    const char *src, *tgt;
    ts_dtype from, to, wire;
  } cases[] = {
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", TS_F32, TS_BF16, TS_BF16},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]", TS_F32, TS_F16, TS_F16},
      {"mesh=[2,2] placements=[S(0),R]", "mesh=[2,2] placements=[R,S(1)]", TS_F64, TS_F8_E4M3,
       TS_F8_E4M3},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", TS_BF16, TS_F32, TS_BF16},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", TS_F32, TS_I32, TS_F32},
      {"mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[S(0)]", TS_F32, TS_BF16, TS_F32},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[P(sum)]", TS_F32, TS_BF16, TS_BF16},
      /* to a partial target: converted before (the identity filled in the target dtype) */
      {"mesh=[4] placements=[R]", "mesh=[4] placements=[P(max)]", TS_F32, TS_I32, TS_I32},
      {"mesh=[2]@0-1 placements=[S(0)]", "mesh=[2]@2-3 placements=[P(sum)]", TS_BF16, TS_F32,
       TS_F32},
      /* complex: c128 -> c64 narrows before the wire, f32 -> c64 widens after it */
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", TS_C128, TS_C64, TS_C64},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]", TS_F32, TS_C64, TS_F32},
      {"mesh=[4] placements=[R]", "mesh=[4] placements=[P(prod)]", TS_F64, TS_C128, TS_C128},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_attr *a = attr(cases[i].src), *b = attr(cases[i].tgt);
    ts_dtype wire = TS_U8;
    ts_error err;
    ck_assert_int_eq(ts_cast_wire_dtype(cases[i].from, cases[i].to, a, b, &wire, &err), TS_OK);
    ck_assert_msg(wire == cases[i].wire, "case %zu: wire %s", i, ts_dtype_name(wire));
    ts_plan *uncast = NULL, *cast = NULL;
    ck_assert_int_eq(ts_plan_create(2, shape, cases[i].from, a, b, NULL, &uncast, NULL), TS_OK);
    ck_assert_int_eq(ts_plan_create(2, shape, wire, a, b, NULL, &cast, NULL), TS_OK);
    int64_t full = ts_plan_get_costs(uncast)->wire_bytes;
    int64_t got = ts_plan_get_costs(cast)->wire_bytes;
    ck_assert_msg(
        got * (int64_t)ts_dtype_size(cases[i].from) == full * (int64_t)ts_dtype_size(wire),
        "case %zu: %lld wire bytes cast, %lld uncast", i, (long long)got, (long long)full);
    if (i == 0)
      ck_assert_int_eq(got * 2, full); /* f32 -> bf16: half the bytes, the same strategy */
    ck_assert_int_eq(ts_plan_strategy(cast), ts_plan_strategy(uncast));
    ts_plan_destroy(&uncast);
    ts_plan_destroy(&cast);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
  ts_attr *a = attr("mesh=[4] placements=[S(0)]"), *p = attr("mesh=[4] placements=[P(sum)]");
  ts_dtype wire;
  ts_error err;
  ck_assert_int_eq(ts_cast_wire_dtype(TS_F32, TS_F8_E5M2, a, p, &wire, &err), TS_BAD_DTYPE);
  ck_assert_msg(strstr(err.msg, "no reductions") != NULL, "%s", err.msg);
  ck_assert_int_eq(ts_cast_wire_dtype(TS_F32, TS_BF16, p, p, &wire, &err), TS_UNSUPPORTED);
  ck_assert_msg(strstr(err.msg, "partial target") != NULL, "%s", err.msg);
  ck_assert_int_eq(ts_cast_wire_dtype(TS_F32, TS_F32, p, p, &wire, &err), TS_OK);
  ck_assert_int_eq(wire, TS_F32);
  ck_assert_int_eq(ts_cast_wire_dtype(TS_F32, (ts_dtype)99, a, a, &wire, &err), TS_BAD_DTYPE);
  ck_assert_msg(strstr(err.msg, "valid dtypes are") && strstr(err.msg, "c64, c128"), "%s", err.msg);
  /* a complex tensor casts to complex dtypes only; a complex partial target has no max */
  const ts_dtype reals[] = {TS_F32, TS_F64, TS_BF16, TS_I64, TS_BOOL};
  for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
    ck_assert_int_eq(ts_cast_wire_dtype(TS_C64, reals[i], a, a, &wire, &err), TS_BAD_DTYPE);
    ck_assert_msg(strstr(err.msg, "cast from c64 to") && strstr(err.msg, ts_dtype_name(reals[i])) &&
                      strstr(err.msg, "imaginary part"),
                  "%s", err.msg);
  }
  ts_attr *mx = attr("mesh=[4] placements=[P(max)]");
  ck_assert_int_eq(ts_cast_wire_dtype(TS_F32, TS_C64, a, mx, &wire, &err), TS_BAD_DTYPE);
  ck_assert_msg(strstr(err.msg, "no order") && strstr(err.msg, "c64"), "%s", err.msg);
  ts_attr_destroy(&mx);
  ts_attr_destroy(&a);
  ts_attr_destroy(&p);
}
END_TEST

/* Who receives on the intersection path: along a target P(avg) dim every rank (the value on
 * each), along the other partial ops coordinate 0 only; every receive has its send (a rank
 * waiting for a piece nobody sends would hang). */
START_TEST(partial_targets_receivers) {
  int64_t shape[2] = {8, 6};
  struct {
    const char *src, *tgt;
    int receivers;
  } cases[] = {
      {"mesh=[4] placements=[P(avg)]", "mesh=[4] placements=[P(avg)]", 4},
      {"mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[P(sum)]", 1},
      {"mesh=[4] placements=[R]", "mesh=[4] placements=[P(prod)]", 1},
      {"mesh=[2,2] placements=[S(0),R]", "mesh=[2,2] placements=[P(avg),P(max)]", 2},
      {"mesh=[2,2] placements=[P(sum),P(max)]", "mesh=[2,2] placements=[R,P(avg)]", 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc;
    ts_error err;
    ts_plan *p = plan(cases[i].src, cases[i].tgt, 2, shape, TS_STRATEGY_P2P, &rc, &err);
    ck_assert_msg(rc == TS_OK, "%s -> %s: %s", cases[i].src, cases[i].tgt, err.msg);
    int receivers = 0;
    int64_t sent = 0, received = 0;
    for (int r = 0; r < 4; r++) {
      ts_rank_plan rp;
      ck_assert_int_eq(ts_plan_rank(p, r, &rp, NULL), TS_OK);
      receivers += rp.receiver;
      for (int k = 0; k < rp.nsend; k++)
        sent += rp.send[k].bytes;
      for (int k = 0; k < rp.nrecv; k++)
        received += rp.recv[k].bytes;
      ts_rank_plan_clear(&rp);
    }
    ck_assert_msg(receivers == cases[i].receivers, "%s -> %s: %d receivers", cases[i].src,
                  cases[i].tgt, receivers);
    ck_assert_msg(sent == received, "%s -> %s: %lld bytes sent, %lld received", cases[i].src,
                  cases[i].tgt, (long long)sent, (long long)received);
    ts_plan_destroy(&p);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("plan");
  TCase *tc = tcase_create("plan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, auto_choices);
  tcase_add_test(tc, forced_strategies_that_do_not_apply);
  tcase_add_test(tc, plan_input_errors);
  tcase_add_test(tc, random_pairs_lists_and_minimum);
  tcase_add_test(tc, costs_of_known_cases);
  tcase_add_test(tc, plan_4096_ranks);
  tcase_add_test(tc, casts_in_transit);
  tcase_add_test(tc, partial_targets_receivers);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
