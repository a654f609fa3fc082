/* test_topology.c - topologies and what plans send over host links, without MPI: the specs and
 * hostfiles (and their refusals), the host numbering, and on random small reshards over random
 * topologies (1) the bound against an element-by-element count of what each host must receive
 * and send, (2) the bytes p2p moves over each host link against an element-by-element walk of
 * which rank owns each element the targets need (sources without replicas, so the owner is
 * unique), (3) every strategy's host link at least the bound. Then the choices on two hosts of
 * two ranks (a partial sum scattered by point-to-point, not through a root) and a plan of 1,024
 * hosts of 8 ranks in under 100 ms. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_main.h"
#include "ts_plan.h"

static uint64_t rng_state = 0x7090106135u;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static ts_topology *topo(const char *spec) {
  ts_topology *t = NULL;
  ts_error err;
  ck_assert_msg(ts_topology_parse(spec, &t, &err) == TS_OK, "%s: %s", spec, err.msg);
  return t;
}

START_TEST(specs) {
  ts_topology *t = topo("hosts=2x4");
  ck_assert_int_eq(ts_topology_nranks(t), 8);
  ck_assert_int_eq(ts_topology_nhosts(t), 2);
  ck_assert_int_eq(ts_topology_host(t, 3), 0);
  ck_assert_int_eq(ts_topology_host(t, 4), 1);
  char buf[64];
  ts_topology_format(t, buf, sizeof buf);
  ck_assert_str_eq(buf, "hosts=2x4");
  ts_topology_destroy(&t);
  ck_assert_ptr_null(t);
  ts_topology_destroy(NULL);

  t = topo("hosts=3,1");
  ck_assert_int_eq(ts_topology_host(t, 2), 0);
  ck_assert_int_eq(ts_topology_host(t, 3), 1);
  ck_assert_int_eq(ts_topology_host_ranks(t, 0), 3);
  ts_topology_format(t, buf, sizeof buf);
  ck_assert_str_eq(buf, "hosts=3,1");
  ts_topology_destroy(&t);

  t = topo("map=5,2,5,2,7"); /* numbered by first rank: 5 -> 0, 2 -> 1, 7 -> 2 */
  ck_assert_int_eq(ts_topology_nhosts(t), 3);
  ck_assert_int_eq(ts_topology_host(t, 2), 0);
  ck_assert_int_eq(ts_topology_host(t, 3), 1);
  ck_assert_int_eq(ts_topology_host(t, 4), 2);
  ts_topology_format(t, buf, sizeof buf);
  ck_assert_str_eq(buf, "map=0,1,0,1,2");
  ts_topology_destroy(&t);

  const char *names[5] = {"nodeB", "nodeA", "nodeB", "nodeA", "nodeC"};
  ts_error err;
  ck_assert_int_eq(ts_topology_from_names(5, names, &t, &err), TS_OK);
  ts_topology_format(t, buf, sizeof buf);
  ck_assert_str_eq(buf, "map=0,1,0,1,2");
  ts_topology_destroy(&t);

  const char *hf =
      "# two nodes\nnode1 slots=3 max_slots=4\n\n  node2   # one slot\nnode3 slots=2\n";
  ck_assert_int_eq(ts_topology_from_hostfile(hf, strlen(hf), &t, &err), TS_OK);
  ts_topology_format(t, buf, sizeof buf);
  ck_assert_str_eq(buf, "hosts=3,1,2");
  ts_topology_destroy(&t);

  static const struct {
    const char *spec, *says;
  } bad[] = {
      {"hosts=2x", "ranks per host"}, {"hosts=0x4", "0 ranks"},
      {"nodes=2x2", "valid:"},        {"map=0,,1", "not a number"},
      {"hosts=2,0", "host 1 has 0"},  {"hosts=2x4,5", "ranks per host"},
      {"map=0,-1", "not a number"},   {"hosts=4,", "ends in"},
      {"hosts=2048x1024", "at most"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    t = NULL;
    ck_assert_msg(ts_topology_parse(bad[i].spec, &t, &err) != TS_OK, "'%s' accepted", bad[i].spec);
    ck_assert_msg(strstr(err.msg, bad[i].says), "'%s': %s", bad[i].spec, err.msg);
    ck_assert_ptr_null(t);
  }
  const char *nohost = "# nothing\n\n";
  ck_assert_int_ne(ts_topology_from_hostfile(nohost, strlen(nohost), &t, &err), TS_OK);
  ck_assert_ptr_nonnull(strstr(err.msg, "names no host"));
  const char *badslots = "n1 slots=0\n";
  ck_assert_int_ne(ts_topology_from_hostfile(badslots, strlen(badslots), &t, &err), TS_OK);
  ck_assert_ptr_nonnull(strstr(err.msg, "line 1"));
}
END_TEST

/* ---- element-by-element references ---- */

typedef struct ref_case {
  int ndim;
  int64_t shape[2];
  ts_attr *src, *tgt;
  ts_topology *topo;
} ref_case;

static void rank_box(const ref_case *c, const ts_attr *a, int i, ts_box *out) {
  bool in_mesh;
  ck_assert(ts_attr_rank_box(a, c->ndim, c->shape, a->ranks[i], out, &in_mesh, NULL) == TS_OK);
}

static bool box_has(const ts_box *b, const int64_t *at) {
  for (int d = 0; d < b->ndim; d++)
    if (at[d] < b->lo[d] || at[d] >= b->hi[d])
      return false;
  return true;
}

/* A target mesh index receives data when its partial coordinates are all 0. */
static bool receiver(const ts_attr *a, int64_t i) {
  int64_t rest = i;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    int64_t c = rest % a->mesh_shape[m];
    rest /= a->mesh_shape[m];
    if (a->place[m].kind == TS_PLACE_PARTIAL && c != 0)
      return false;
  }
  return true;
}

/* The partial index of a source mesh index: its coordinates along the partial mesh dims. */
static int64_t partial_index(const ts_attr *a, int64_t i) {
  int64_t rest = i, idx = 0, w = 1;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    int64_t c = rest % a->mesh_shape[m];
    rest /= a->mesh_shape[m];
    if (a->place[m].kind == TS_PLACE_PARTIAL)
      idx += c * w, w *= a->mesh_shape[m];
  }
  return idx;
}

static int64_t npartial(const ts_attr *a) {
  int64_t n = 1;
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_PARTIAL)
      n *= a->mesh_shape[m];
  return n;
}

/* The bound, element by element: a host that needs an element and lacks one of its partial
 * contributions receives it once; a host that alone holds a contribution and another host needs
 * the element sends it once. */
static int64_t ref_bound(const ref_case *c) {
  int nh = ts_topology_nhosts(c->topo);
  int64_t in[16] = {0}, out[16] = {0}, np = npartial(c->src);
  ts_box sb[16], tb[16];
  for (int i = 0; i < c->src->nranks; i++)
    rank_box(c, c->src, i, &sb[i]);
  for (int i = 0; i < c->tgt->nranks; i++)
    rank_box(c, c->tgt, i, &tb[i]);
  int64_t at[2] = {0, 0};
  for (at[0] = 0; at[0] < c->shape[0]; at[0]++)
    for (at[1] = 0; at[1] < (c->ndim > 1 ? c->shape[1] : 1); at[1]++) {
      bool needs[16] = {false};
      int needing = 0;
      for (int i = 0; i < c->tgt->nranks; i++)
        if (receiver(c->tgt, i) && box_has(&tb[i], at)) {
          int h = ts_topology_host(c->topo, c->tgt->ranks[i]);
          needing += !needs[h];
          needs[h] = true;
        }
      int held[16] = {0};
      bool owes[16] = {false};
      for (int64_t k = 0; k < np; k++) {
        bool on[16] = {false};
        int hosts = 0, last = -1;
        for (int i = 0; i < c->src->nranks; i++)
          if (partial_index(c->src, i) == k && box_has(&sb[i], at)) {
            int h = ts_topology_host(c->topo, c->src->ranks[i]);
            hosts += !on[h];
            on[h] = true, last = h;
          }
        for (int h = 0; h < nh; h++)
          held[h] += on[h];
        if (hosts == 1 && needing > (needs[last] ? 1 : 0))
          owes[last] = true;
      }
      for (int h = 0; h < nh; h++) {
        in[h] += needs[h] && held[h] < np ? 4 : 0;
        out[h] += owes[h] ? 4 : 0;
      }
    }
  int64_t b = 0;
  for (int h = 0; h < nh; h++) {
    b = in[h] > b ? in[h] : b;
    b = out[h] > b ? out[h] : b;
  }
  return b;
}

/* p2p over host links, element by element, for a source without replicas: every element a
 * receiver needs comes once per partial contribution from the one rank that holds it. */
static void ref_p2p(const ref_case *c, int64_t *link, int64_t *cross) {
  int nh = ts_topology_nhosts(c->topo);
  int64_t in[16] = {0}, out[16] = {0};
  ts_box sb[16], tb[16];
  for (int i = 0; i < c->src->nranks; i++)
    rank_box(c, c->src, i, &sb[i]);
  for (int i = 0; i < c->tgt->nranks; i++)
    rank_box(c, c->tgt, i, &tb[i]);
  int64_t at[2];
  for (int t = 0; t < c->tgt->nranks; t++) {
    if (!receiver(c->tgt, t))
      continue;
    int r = c->tgt->ranks[t], hr = ts_topology_host(c->topo, r);
    for (at[0] = 0; at[0] < c->shape[0]; at[0]++)
      for (at[1] = 0; at[1] < (c->ndim > 1 ? c->shape[1] : 1); at[1]++) {
        if (!box_has(&tb[t], at))
          continue;
        for (int i = 0; i < c->src->nranks; i++) {
          int s = c->src->ranks[i], hs = ts_topology_host(c->topo, s);
          if (box_has(&sb[i], at) && s != r && hs != hr)
            in[hr] += 4, out[hs] += 4;
        }
      }
  }
  *link = *cross = 0;
  for (int h = 0; h < nh; h++) {
    *cross += in[h];
    int64_t b = in[h] > out[h] ? in[h] : out[h];
    *link = b > *link ? b : *link;
  }
}

static const char *random_placement(int ndim, bool allow_partial, bool allow_rep, char *buf) {
  int k = (int)(rnd() % 4);
  if (k == 3 && !allow_partial)
    k = 0;
  if (k == 2 && !allow_rep)
    k = 0;
  if (k <= 1)
    snprintf(buf, 16, "S(%d)", (int)(rnd() % (uint64_t)ndim));
  else
    snprintf(buf, 16, k == 2 ? "R" : "P(sum)");
  return buf;
}

/* A random attribute over the ranks of `ranks` (a mesh of 1 or 2 dims, ranks shuffled). */
static ts_attr *random_attr(int ndim, int nranks, const int *ranks, bool partial, bool rep) {
  char text[256], p0[16], p1[16];
  int rl = 0;
  char rlist[128];
  for (int i = 0; i < nranks; i++)
    rl += snprintf(rlist + rl, sizeof rlist - (size_t)rl, "%s%d", i ? "," : "", ranks[i]);
  if (nranks % 2 == 0 && nranks > 2 && rnd() % 2)
    snprintf(text, sizeof text, "mesh=[2,%d]@%s placements=[%s,%s]", nranks / 2, rlist,
             random_placement(ndim, partial, rep, p0), random_placement(ndim, partial, rep, p1));
  else
    snprintf(text, sizeof text, "mesh=[%d]@%s placements=[%s]", nranks, rlist,
             random_placement(ndim, partial, rep, p0));
  ts_attr *a = NULL;
  ts_error err;
  ck_assert_msg(ts_attr_parse(text, &a, &err) == TS_OK, "%s: %s", text, err.msg);
  return a;
}

static void shuffle(int *v, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint64_t)(i + 1)), t = v[i];
    v[i] = v[j], v[j] = t;
  }
}

START_TEST(random_against_elements) {
  int checked_p2p = 0, checked_bound = 0;
  for (int iter = 0; iter < 400; iter++) {
    int world = 2 + (int)(rnd() % 7), map[16], ranks[16];
    char spec[128];
    int n = snprintf(spec, sizeof spec, "map=");
    for (int r = 0; r < world; r++) {
      map[r] = (int)(rnd() % 3);
      n += snprintf(spec + n, sizeof spec - (size_t)n, "%s%d", r ? "," : "", map[r]);
    }
    ref_case c = {.ndim = 1 + (int)(rnd() % 2), .topo = topo(spec)};
    c.shape[0] = 1 + (int64_t)(rnd() % 9), c.shape[1] = 1 + (int64_t)(rnd() % 7);
    for (int r = 0; r < world; r++)
      ranks[r] = r;
    shuffle(ranks, world);
    int ns = 1 + (int)(rnd() % (uint64_t)world), nt = 1 + (int)(rnd() % (uint64_t)world);
    bool no_rep = rnd() % 2;
    c.src = random_attr(c.ndim, ns, ranks, true, !no_rep);
    shuffle(ranks, world);
    c.tgt = random_attr(c.ndim, nt, ranks, true, true);
    ts_plan_opts o = {TS_STRATEGY_AUTO, 0, world};
    ts_plan *p = NULL;
    ts_error err;
    int rc = ts_plan_create_on(c.ndim, c.shape, TS_F32, c.src, c.tgt, &o, c.topo, &p, &err);
    if (rc == TS_OK) {
      int64_t bound = ts_plan_host_bound(p);
      if (bound >= 0) {
        ck_assert_msg(bound == ref_bound(&c), "case %d (%s): bound %lld, elements say %lld", iter,
                      spec, (long long)bound, (long long)ref_bound(&c));
        checked_bound++;
        for (int s = 1; s < TS_STRATEGY_COUNT; s++) {
          ts_plan_costs k;
          if (ts_plan_applies(p, (ts_strategy)s, &k, NULL) && s != TS_STRATEGY_LOCAL)
            ck_assert_msg(k.host_link_bytes >= bound, "case %d: %s's host link %lld < bound %lld",
                          iter, ts_strategy_name((ts_strategy)s), (long long)k.host_link_bytes,
                          (long long)bound);
        }
        ts_plan_costs k;
        if (no_rep && ts_plan_applies(p, TS_STRATEGY_P2P, &k, NULL)) {
          int64_t link, cross;
          ref_p2p(&c, &link, &cross);
          ck_assert_msg(k.host_link_bytes == link && k.cross_host_bytes == cross,
                        "case %d (%s): p2p link %lld cross %lld, elements say %lld %lld", iter,
                        spec, (long long)k.host_link_bytes, (long long)k.cross_host_bytes,
                        (long long)link, (long long)cross);
          checked_p2p++;
        }
      }
    }
    ts_plan_destroy(&p);
    ts_attr_destroy(&c.src);
    ts_attr_destroy(&c.tgt);
    ts_topology_destroy(&c.topo);
  }
  ck_assert_msg(checked_bound >= 150 && checked_p2p >= 50, "only %d bounds and %d p2p checked",
                checked_bound, checked_p2p);
}
END_TEST

static ts_plan *plan_on(const char *src, const char *tgt, const char *spec, int64_t rows,
                        int64_t cols) {
  ts_attr *a = NULL, *b = NULL;
  ts_error err;
  ck_assert(ts_attr_parse(src, &a, &err) == TS_OK && ts_attr_parse(tgt, &b, &err) == TS_OK);
  ts_topology *t = topo(spec);
  int64_t shape[2] = {rows, cols};
  ts_plan *p = NULL;
  ck_assert_msg(ts_plan_create_on(2, shape, TS_F32, a, b, NULL, t, &p, &err) == TS_OK, "%s",
                err.msg);
  ts_topology_destroy(&t); /* the plan keeps its own reference */
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
  return p;
}

/* 64 MiB of f32 on two hosts of two ranks: the bounds of the moves, and the choices. */
START_TEST(two_hosts) {
  const int64_t MiB = 1 << 20;
  static const struct {
    const char *src, *tgt;
    int64_t bound_mib;
  } cases[] = {
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", 16},
      {"mesh=[2]@0-1 placements=[S(0)]", "mesh=[2]@2-3 placements=[S(1)]", 64},
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]", 32},
      {"mesh=[4]@0,2,1,3 placements=[S(0)]", "mesh=[4]@0,2,1,3 placements=[R]", 32},
      {"mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[R]", 64},
      {"mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[S(0)]", 32},
      {"mesh=[2]@0-1 placements=[R]", "mesh=[4] placements=[R]", 64},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_plan *p = plan_on(cases[i].src, cases[i].tgt, "hosts=2x2", 4096, 4096);
    ck_assert_msg(ts_plan_host_bound(p) == cases[i].bound_mib * MiB, "case %zu: bound %lld", i,
                  (long long)ts_plan_host_bound(p));
    ts_plan_destroy(&p);
  }
  /* A partial sum scattered: point-to-point sends each host 64 MiB; the ring of the flat
   * reduce-scatter (ranks 0 1 | 2 3) carries 3 of the 4 blocks over each host link each way, 48
   * MiB; the hierarchical stages (a reduce-scatter inside each host, then each host's reduced
   * half across once) the bound. */
  ts_plan *p = plan_on("mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[S(0)]", "hosts=2x2",
                       4096, 4096);
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_HIER);
  ck_assert_int_eq(ts_plan_get_costs(p)->host_link_bytes, 32 * MiB);
  ck_assert_int_eq(ts_plan_stage_count(p), 2);
  ck_assert_int_eq(ts_plan_strategy(ts_plan_stage(p, 0)), TS_STRATEGY_REDUCE_SCATTER);
  ck_assert_int_eq(ts_plan_get_costs(ts_plan_stage(p, 0))->host_link_bytes, 0);
  ts_plan_costs rs, a2a;
  ck_assert(ts_plan_applies(p, TS_STRATEGY_REDUCE_SCATTER, &rs, NULL));
  ck_assert_int_eq(rs.host_link_bytes, 48 * MiB);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_ALLTOALL, &a2a, NULL));
  ck_assert_int_eq(a2a.host_link_bytes, 64 * MiB);
  char *text = ts_plan_explain(p, 4);
  ck_assert_ptr_nonnull(strstr(text, "topology: hosts=2x2 (2 hosts)"));
  ck_assert_ptr_nonnull(strstr(text, "host link bound: 33554432 bytes"));
  ck_assert_ptr_nonnull(strstr(text, "by the busiest host link"));
  free(text);
  ts_plan_destroy(&p);
  /* The hierarchical strategy carries the bound on every host link for these moves (the one-to-
   * many and cross-group moves at two hosts too: each target host is fed once). */
  static const char *hier[][2] = {
      {"mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]"},
      {"mesh=[4]@0,2,1,3 placements=[S(0)]", "mesh=[4]@0,2,1,3 placements=[R]"},
      {"mesh=[2,2] placements=[P(max),P(max)]", "mesh=[4] placements=[S(1)]"},
      {"mesh=[2]@0-1 placements=[S(0)]", "mesh=[2]@2-3 placements=[R]"},
      {"mesh=[2]@0-1 placements=[S(0)]", "mesh=[4] placements=[R]"},
      {"mesh=[2]@0-1 placements=[R]", "mesh=[4] placements=[R]"},
  };
  for (size_t i = 0; i < sizeof hier / sizeof hier[0]; i++) {
    p = plan_on(hier[i][0], hier[i][1], "hosts=2x2", 4096, 4096);
    ck_assert_msg(ts_plan_strategy(p) == TS_STRATEGY_HIER, "case %zu chose %s", i,
                  ts_strategy_name(ts_plan_strategy(p)));
    ck_assert_msg(ts_plan_get_costs(p)->host_link_bytes == ts_plan_host_bound(p),
                  "case %zu: host link %lld, bound %lld", i,
                  (long long)ts_plan_get_costs(p)->host_link_bytes,
                  (long long)ts_plan_host_bound(p));
    ts_plan_destroy(&p);
  }
  /* A partial sum replicated: the flat all-reduce's ring over the 4 ranks carries 2 x 3/4 of the
   * tensor over each host link each way, 96 MiB; the hierarchical stages (reduce-scatter inside
   * each host, an all-reduce of each half between the hosts, all-gather inside) the bound, and
   * win. At 3 hosts of 2 the flat ring carries 2 x 5/6 of it, the hierarchical 2 x 2/3. */
  p = plan_on("mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[R]", "hosts=2x2", 4096, 4096);
  ts_plan_costs ar;
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_HIER);
  ck_assert_int_eq(ts_plan_get_costs(p)->host_link_bytes, 64 * MiB);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_ALLREDUCE, &ar, NULL));
  ck_assert_int_eq(ar.host_link_bytes, 96 * MiB);
  ts_plan_destroy(&p);
  p = plan_on("mesh=[6] placements=[P(sum)]", "mesh=[6] placements=[R]", "hosts=3x2", 6144, 4096);
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_HIER);
  ck_assert_int_eq(ts_plan_get_costs(p)->host_link_bytes, 2 * 2 * 96 * MiB / 3);
  ck_assert(ts_plan_applies(p, TS_STRATEGY_ALLREDUCE, &ar, NULL));
  ck_assert_int_eq(ar.host_link_bytes, 2 * 5 * 96 * MiB / 6);
  ts_plan_destroy(&p);
  /* Not for moves the flat strategies already make at the bound, nor without several hosts. */
  p = plan_on("mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]", "hosts=2x2", 64, 64);
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_ALLTOALL);
  ck_assert(!ts_plan_applies(p, TS_STRATEGY_HIER, NULL, NULL));
  ts_plan_destroy(&p);
  p = plan_on("mesh=[4] placements=[S(0)]", "mesh=[4] placements=[R]", "hosts=4x1", 64, 64);
  ck_assert(!ts_plan_applies(p, TS_STRATEGY_HIER, NULL, NULL));
  ts_plan_destroy(&p);
  /* One host: no host costs, the flat choice as before. */
  p = plan_on("mesh=[4] placements=[P(sum)]", "mesh=[4] placements=[S(0)]", "hosts=1x4", 64, 64);
  ck_assert_int_eq(ts_plan_strategy(p), TS_STRATEGY_REDUCE_SCATTER);
  ck_assert_int_eq(ts_plan_host_bound(p), -1);
  ts_plan_destroy(&p);
  /* A topology with fewer ranks than the meshes use. */
  ts_attr *a = NULL;
  ts_error err;
  ck_assert(ts_attr_parse("mesh=[8] placements=[S(0)]", &a, &err) == TS_OK);
  ts_topology *t = topo("hosts=2x2");
  int64_t shape[1] = {64};
  ck_assert_int_eq(ts_plan_create_on(1, shape, TS_F32, a, a, NULL, t, &p, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "the topology places 4 ranks"));
  ts_topology_destroy(&t);
  ts_attr_destroy(&a);
}
END_TEST

/* Link rates: the units, the refusals, and a choice they turn: S(0)->R on two hosts of two
 * ranks is hierarchical over a slow link (each block crosses once) and a flat all-gather over a
 * link as fast as memory (the in-host stages then cost more than the bytes they save). */
START_TEST(link_rates) {
  static const struct {
    const char *text;
    double bytes_per_s;
  } good[] = {{"500mbit", 62.5e6},           {"10gbit", 1.25e9}, {"12GB/s", 12e9},
              {"900MiB/s", 900.0 * 1048576}, {"2.5kB/s", 2500},  {"8bit", 1}};
  ts_error err;
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    double v = 0;
    ck_assert_msg(ts_rate_parse(good[i].text, &v, &err) == TS_OK, "%s: %s", good[i].text, err.msg);
    ck_assert_msg(v == good[i].bytes_per_s, "%s gave %g", good[i].text, v);
  }
  static const char *bad[] = {"", "5", "5mb", "-1gbit", "0MB/s", "1e999GB/s", "gbit", "1 GB/s"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    double v = 0;
    ck_assert_msg(ts_rate_parse(bad[i], &v, &err) == TS_INVALID_ARGUMENT, "'%s' taken", bad[i]);
    ck_assert_ptr_nonnull(strstr(err.msg, "e.g. 500mbit"));
  }
  ts_topology *t = topo("hosts=2x2");
  ck_assert(!ts_topology_rate_given(t, TS_LINK_CROSS));
  ck_assert(ts_topology_rate(t, TS_LINK_CROSS) == TS_LINK_CROSS_DEFAULT_BPS);
  static const char *bad_specs[] = {"cros=1GB/s",   "cross=", "host=1GB/s,",
                                    ",cross=1GB/s", "cross",  "cross=1GB/s,,host=1GB/s"};
  for (size_t i = 0; i < sizeof bad_specs / sizeof *bad_specs; i++)
    ck_assert_msg(ts_topology_parse_rates(t, bad_specs[i], &err) == TS_INVALID_ARGUMENT,
                  "'%s' taken", bad_specs[i]);
  ck_assert_int_eq(ts_topology_parse_rates(t, "host=10GB/s,cross=500mbit", &err), TS_OK);
  ck_assert(ts_topology_rate(t, TS_LINK_HOST) == 10e9);
  ck_assert(ts_topology_rate(t, TS_LINK_CROSS) == 62.5e6);
  ck_assert(ts_topology_rate_given(t, TS_LINK_HOST) && ts_topology_rate_given(t, TS_LINK_CROSS));
  static const struct {
    const char *rates;
    ts_strategy want;
  } choice[] = {{"cross=500mbit", TS_STRATEGY_HIER}, {"cross=50GB/s", TS_STRATEGY_ALLGATHER}};
  for (size_t i = 0; i < sizeof choice / sizeof *choice; i++) {
    ts_topology *u = topo("hosts=2x2");
    ck_assert_int_eq(ts_topology_parse_rates(u, choice[i].rates, &err), TS_OK);
    ts_attr *a = NULL, *b = NULL;
    ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[S(0)]", &a, &err), TS_OK);
    ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[R]", &b, &err), TS_OK);
    int64_t shape[2] = {4096, 4096};
    ts_plan *p = NULL;
    ck_assert_int_eq(ts_plan_create_on(2, shape, TS_F32, a, b, NULL, u, &p, &err), TS_OK);
    ck_assert_msg(ts_plan_strategy(p) == choice[i].want, "%s chose %s", choice[i].rates,
                  ts_strategy_name(ts_plan_strategy(p)));
    /* the estimate: the busiest host link at the cross rate plus the busiest rank at the
     * host rate */
    const ts_plan_costs *c = ts_plan_get_costs(p);
    double want = (double)c->host_link_bytes / ts_topology_rate(u, TS_LINK_CROSS) +
                  (double)c->max_rank_bytes / ts_topology_rate(u, TS_LINK_HOST);
    ck_assert_msg(choice[i].want == TS_STRATEGY_HIER ||
                      fabs((double)c->time_ns * 1e-9 - want) < 1e-6,
                  "time %lld ns, expected %g s", (long long)c->time_ns, want);
    ts_plan_destroy(&p);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
    ts_topology_destroy(&u);
  }
  ts_topology_destroy(&t);
}
END_TEST

START_TEST(thousand_hosts) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ts_plan *p = plan_on("mesh=[8192] placements=[S(0)]", "mesh=[8192] placements=[R]",
                       "hosts=1024x8", 8192, 4096);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  /* 128 MiB over 1,024 hosts: each host lacks all but its own 1/1024. */
  ck_assert_int_eq(ts_plan_host_bound(p), (int64_t)8192 * 4096 * 4 / 1024 * 1023);
#if defined(__SANITIZE_ADDRESS__)
  double limit = 2000; /* instrumented */
#else
  double limit = 100;
#endif
  ck_assert_msg(ms < limit, "1024 hosts x 8 ranks planned in %.1f ms (limit %.0f)", ms, limit);
  ts_plan_destroy(&p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("topology");
  TCase *tc = tcase_create("topology");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, specs);
  tcase_add_test(tc, link_rates);
  tcase_add_test(tc, random_against_elements);
  tcase_add_test(tc, two_hosts);
  tcase_add_test(tc, thousand_hosts);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
