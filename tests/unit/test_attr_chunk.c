/* test_attr_chunk.c - split rules and negative dims of distributed attributes: the text form of
 * S(d,chunk) and S(-1) (round trips, variants, errors), chunk split points against a naive
 * model of torch.chunk nested over mesh dims (random lengths and meshes), the documented
 * examples, the resolution of negative dims on a tensor (ts_attr_normalize, validation, geometry)
 * and the refusals (mixed rules on one dim, chunk with explicit sizes, dims out of range).
 * No MPI. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ts_plan.h"
#include "check_main.h"

static uint64_t rng_state = 0x243F6A8885A308D3u;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static char *fmt(const ts_attr *a) {
  static char buf[4096];
  size_t n = ts_attr_format(a, buf, sizeof buf);
  ck_assert_uint_lt(n, sizeof buf);
  return buf;
}

START_TEST(rules_and_negative_dims_round_trip) {
  const char *canon[] = {
      "mesh=[4]@0-3 placements=[S(0,chunk)]",
      "mesh=[2,2]@0-3 placements=[S(0,chunk),S(0,chunk)]",
      "mesh=[2,2]@0-3 placements=[S(1,chunk),S(0)]",
      "mesh=[2]@0-1 placements=[S(-1)]",
      "mesh=[2,3]@0-5 placements=[S(-2,chunk),S(-1)] splits={-1:[1,0,9]}",
      "mesh=[2]@0-1 placements=[S(-8)] splits={-8:[1,2]}",
      "mesh=[dp=2,tp=2]@0-3 placements=[R,S(-1,chunk)]",
  };
  for (size_t i = 0; i < sizeof canon / sizeof *canon; i++) {
    ts_attr *a = NULL;
    ts_error err;
    ck_assert_msg(ts_attr_parse(canon[i], &a, &err) == TS_OK, "%s: %s", canon[i], err.msg);
    ck_assert_str_eq(fmt(a), canon[i]);
    ts_attr *b = NULL;
    ck_assert_int_eq(ts_attr_parse(fmt(a), &b, &err), TS_OK);
    ck_assert(ts_attr_equal(a, b));
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
  const char *variants[][2] = {
      {"mesh=[4] placements=[Shard(dim=0, split=chunk)]", "mesh=[4]@0-3 placements=[S(0,chunk)]"},
      {"mesh=[4] placements=[S(0, balanced)]", "mesh=[4]@0-3 placements=[S(0)]"},
      {"mesh=(4,) placements=(Shard(-1,chunk),)", "mesh=[4]@0-3 placements=[S(-1,chunk)]"},
      {"mesh=[2] placements=[S(-2)] splits={ -2 : [1, 2] }",
       "mesh=[2]@0-1 placements=[S(-2)] splits={-2:[1,2]}"},
  };
  for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
    ts_attr *a = NULL;
    ts_error err;
    ck_assert_msg(ts_attr_parse(variants[i][0], &a, &err) == TS_OK, "%s: %s", variants[i][0],
                  err.msg);
    ck_assert_str_eq(fmt(a), variants[i][1]);
    ts_attr_destroy(&a);
  }
  /* The rule is part of equality. */
  ts_attr *x = NULL, *y = NULL;
  ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[S(0)]", &x, NULL), TS_OK);
  ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[S(0,chunk)]", &y, NULL), TS_OK);
  ck_assert(!ts_attr_equal(x, y));
  ts_attr_destroy(&x);
  ts_attr_destroy(&y);
}
END_TEST

START_TEST(refusals_say_what_is_valid) {
  const struct {
    const char *text;
    int code;
    const char *says;
  } bad[] = {
      {"mesh=[4] placements=[S(0,foo)]", TS_PARSE,
       "column 26 ('f'): expected a split rule "
       "(balanced or chunk) or \"cyclic=\""},
      {"mesh=[2] placements=[S(0,cyclic=4,chunk)]", TS_PARSE, "\"src=\" and the mesh coordinate"},
      {"mesh=[4] placements=[Shard(0, split=chunk, cyclic=4)]", TS_PARSE, "expected \")\""},
      {"mesh=[4] placements=[S(0,)]", TS_PARSE, "expected a split rule"},
      {"mesh=[4] placements=[S(-9)]", TS_PARSE,
       "column 24 ('-'): expected a tensor dim: 0 to 7, "
       "or -1 to -8"},
      {"mesh=[4] placements=[S(-0)]", TS_PARSE, "-1 to -8"},
      {"mesh=[4] placements=[S(-)]", TS_PARSE, "digits of a negative tensor dim"},
      {"mesh=[4] placements=[S(- 1)]", TS_PARSE, "digits of a negative tensor dim"},
      {"mesh=[2,2] placements=[S(0,chunk),S(0)]", TS_BAD_ATTRIBUTE,
       "placements 0 and 1 shard dim 0 with different split rules (chunk and balanced)"},
      {"mesh=[2] placements=[S(0,chunk)] splits={0:[1,2]}", TS_BAD_ATTRIBUTE,
       "dim 0 is given both explicit split sizes and the chunk rule"},
      {"mesh=[2] placements=[S(-1,chunk)] splits={-1:[1,2]}", TS_BAD_ATTRIBUTE,
       "dim -1 is given both explicit split sizes and the chunk rule"},
      {"mesh=[2] placements=[S(-1)] splits={-1:[1],-1:[2]}", TS_PARSE, "given twice"},
      {"mesh=[2,2] placements=[S(-1),S(-2)] splits={-1:[1,2],-2:[2,3]}", TS_PARSE,
       "increasing order"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ts_attr *a = NULL;
    ts_error err = {0};
    ck_assert_msg(ts_attr_parse(bad[i].text, &a, &err) == bad[i].code, "%s: %d %s", bad[i].text,
                  err.code, err.msg);
    ck_assert_msg(strstr(err.msg, bad[i].says), "%s: %s", bad[i].text, err.msg);
    ck_assert_ptr_null(a);
  }
  /* A placement built in code (or sent on the wire) with both the chunk rule and a cyclic block
     size is refused: a block-cyclic dim's blocks set its parts. */
  ts_placement both = ts_shard_rule(0, TS_SPLIT_CHUNK);
  both.cyclic = 4;
  int64_t four = 4;
  ts_attr *made = NULL;
  ts_error cerr = {0};
  ck_assert_int_eq(ts_attr_create(&made, 1, &four, NULL, &both, &cerr), TS_BAD_ATTRIBUTE);
  ck_assert_msg(strstr(cerr.msg, "block-cyclically and names the chunk rule"), "%s", cerr.msg);
  ck_assert_ptr_null(made);
  /* On a tensor: dims out of range name the valid range; a dim split twice over is refused. */
  const struct {
    const char *text;
    int ndim;
    const char *says;
  } on_tensor[] = {
      {"mesh=[2] placements=[S(-3)]", 2,
       "placement 0, S(-3), names dim -3 but the tensor has 2 "
       "dims (valid: -2 to 1)"},
      {"mesh=[2] placements=[S(2)]", 2, "valid: S(-2) to S(1)"},
      {"mesh=[2] placements=[S(-1)]", 0, "no dims"},
      {"mesh=[2] placements=[S(0)] splits={-3:[1,2]}", 2, "splits names dim -3"},
      {"mesh=[2,2] placements=[S(-1),S(1)] splits={-1:[1,2],1:[1,2]}", 2,
       "splits are given for dim -1 and for dim 1"},
      {"mesh=[2,2] placements=[S(-1,chunk),S(1)]", 2, "different split rules"},
      {"mesh=[2] placements=[S(-1,chunk)] splits={1:[1,2]}", 2, "both explicit split sizes"},
  };
  int64_t shape[2] = {3, 3};
  for (size_t i = 0; i < sizeof on_tensor / sizeof *on_tensor; i++) {
    ts_attr *a = NULL;
    ts_error err = {0};
    ck_assert_msg(ts_attr_parse(on_tensor[i].text, &a, &err) == TS_OK, "%s: %s", on_tensor[i].text,
                  err.msg);
    ck_assert_int_eq(ts_attr_validate(a, on_tensor[i].ndim, shape, 0, &err), TS_BAD_ATTRIBUTE);
    ck_assert_msg(strstr(err.msg, on_tensor[i].says), "%s: %s", on_tensor[i].text, err.msg);
    ts_geom *g = NULL;
    ck_assert_int_eq(ts_geom_create(a, on_tensor[i].ndim, shape, &g, &err), TS_BAD_ATTRIBUTE);
    ck_assert_ptr_null(g);
    ts_attr_destroy(&a);
  }
}
END_TEST

/* torch.chunk as PyTorch writes it: chunks of ceil(L/k) until L is used up, then (DTensor's
 * Shard) empty parts up to k. */
static int64_t torch_chunk(int64_t len, int64_t k, int64_t *sizes) {
  int64_t c = (len + k - 1) / k, n = 0;
  for (int64_t start = 0; c > 0 && start < len; start += c)
    sizes[n++] = len - start < c ? len - start : c;
  while (n < k)
    sizes[n++] = 0;
  return n;
}

/* The parts of a dim of length len sharded over mesh dims of sizes ks[0..nk): chunk each part of
 * the previous level, the first mesh dim outermost. */
static int64_t nested_chunk(int64_t len, const int64_t *ks, int nk, int64_t *out) {
  if (nk == 0) {
    out[0] = len;
    return 1;
  }
  int64_t level[64], n = 0;
  torch_chunk(len, ks[0], level);
  for (int64_t i = 0; i < ks[0]; i++)
    n += nested_chunk(level[i], ks + 1, nk - 1, out + n);
  return n;
}

START_TEST(chunk_matches_torch_chunk) {
  for (int iter = 0; iter < 3000; iter++) {
    int mesh_ndim = 1 + (int)(rnd() % 3);
    int64_t ms[3], ks[3];
    ts_placement pl[3];
    int nk = 0;
    for (int m = 0; m < mesh_ndim; m++) {
      ms[m] = 1 + (int64_t)(rnd() % 5);
      bool shard = rnd() % 4 != 0;
      pl[m] = shard ? ts_shard_rule(0, TS_SPLIT_CHUNK) : ts_replicate();
      if (shard)
        ks[nk++] = ms[m];
    }
    ts_attr *a = NULL;
    ck_assert_int_eq(ts_attr_create(&a, mesh_ndim, ms, NULL, pl, NULL), TS_OK);
    int64_t len = (int64_t)(rnd() % 61), shape[1] = {len};
    int64_t want[128];
    int64_t k = nested_chunk(len, ks, nk, want);
    ts_geom *g = NULL;
    ck_assert_int_eq(ts_geom_create(a, 1, shape, &g, NULL), TS_OK);
    ck_assert_int_eq(ts_geom_parts(g, 0), k);
    const int64_t *off = ts_geom_offsets(g, 0);
    for (int64_t p = 0; p < k; p++)
      ck_assert_msg(off[p + 1] - off[p] == want[p], "%s on %lld: part %lld is %lld, torch %lld",
                    fmt(a), (long long)len, (long long)p, (long long)(off[p + 1] - off[p]),
                    (long long)want[p]);
    ck_assert_int_eq(off[k], len);
    /* Balanced under the same mesh: the remainder to the first parts, over all parts at once. */
    for (int m = 0; m < mesh_ndim; m++)
      if (pl[m].kind == TS_PLACE_SHARD)
        pl[m].split = TS_SPLIT_BALANCED;
    ts_attr *b = NULL;
    ts_geom *gb = NULL;
    ck_assert_int_eq(ts_attr_create(&b, mesh_ndim, ms, NULL, pl, NULL), TS_OK);
    ck_assert_int_eq(ts_geom_create(b, 1, shape, &gb, NULL), TS_OK);
    for (int64_t p = 0; p < k; p++)
      ck_assert_int_eq(ts_geom_offsets(gb, 0)[p + 1] - ts_geom_offsets(gb, 0)[p],
                       len / k + (p < len % k));
    ts_geom_destroy(&g);
    ts_geom_destroy(&gb);
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
  }
}
END_TEST

/* Sizes of dim d under an attribute's text on a shape. */
static void check_sizes(const char *text, int ndim, const int64_t *shape, int d,
                        const int64_t *want, int n) {
  ts_attr *a = NULL;
  ts_geom *g = NULL;
  ts_error err;
  ck_assert_msg(ts_attr_parse(text, &a, &err) == TS_OK, "%s: %s", text, err.msg);
  ck_assert_msg(ts_geom_create(a, ndim, shape, &g, &err) == TS_OK, "%s: %s", text, err.msg);
  ck_assert_int_eq(ts_geom_parts(g, d), n);
  for (int p = 0; p < n; p++)
    ck_assert_msg(ts_geom_offsets(g, d)[p + 1] - ts_geom_offsets(g, d)[p] == want[p], "%s: part %d",
                  text, p);
  ts_geom_destroy(&g);
  ts_attr_destroy(&a);
}

START_TEST(documented_examples) {
  int64_t s13[1] = {13}, s5[1] = {5}, s10[1] = {10};
  check_sizes("mesh=[4] placements=[S(0,chunk)]", 1, s13, 0, (int64_t[]){4, 4, 4, 1}, 4);
  check_sizes("mesh=[4] placements=[S(0)]", 1, s13, 0, (int64_t[]){4, 3, 3, 3}, 4);
  check_sizes("mesh=[4] placements=[S(0,chunk)]", 1, s5, 0, (int64_t[]){2, 2, 1, 0}, 4);
  check_sizes("mesh=[2,2] placements=[S(0,chunk),S(0,chunk)]", 1, s10, 0, (int64_t[]){3, 2, 3, 2},
              4);
  check_sizes("mesh=[2,2] placements=[S(0),S(0)]", 1, s10, 0, (int64_t[]){3, 3, 2, 2}, 4);
  /* Negative dims: -1 is the last dim, explicit sizes follow it. */
  int64_t s2[2] = {6, 10};
  check_sizes("mesh=[2] placements=[S(-1,chunk)]", 2, s2, 1, (int64_t[]){5, 5}, 2);
  check_sizes("mesh=[3] placements=[S(-1,chunk)]", 2, s2, 1, (int64_t[]){4, 4, 2}, 3);
  check_sizes("mesh=[2] placements=[S(-1)] splits={-1:[3,7]}", 2, s2, 1, (int64_t[]){3, 7}, 2);
  check_sizes("mesh=[2,2] placements=[S(-2),S(1)] splits={-2:[6,0]}", 2, s2, 0, (int64_t[]){6, 0},
              2);
}
END_TEST

START_TEST(normalize_resolves_on_the_tensor) {
  ts_attr *a = NULL, *b = NULL;
  ts_error err;
  ck_assert_int_eq(
      ts_attr_parse("mesh=[2,2] placements=[S(-1,chunk),S(-3)] splits={-3:[1,4]}", &a, &err),
      TS_OK);
  ck_assert(!ts_attr_is_normal(a));
  int64_t shape[3] = {5, 2, 7};
  ck_assert_int_eq(ts_attr_validate(a, 3, shape, 4, &err), TS_OK);
  ts_geom *g = NULL;
  ck_assert_int_eq(ts_geom_create(a, 3, shape, &g, &err), TS_OK);
  ck_assert_str_eq(fmt(ts_geom_attr(g)),
                   "mesh=[2,2]@0-3 placements=[S(2,chunk),S(0)] splits={0:[1,4]}");
  ck_assert_int_eq(ts_attr_normalize(a, 3, &err), TS_OK);
  ck_assert(ts_attr_is_normal(a));
  ck_assert(ts_attr_equal(a, ts_geom_attr(g)));
  ck_assert_int_eq(
      ts_attr_parse("mesh=[2,2] placements=[S(2,chunk),S(0)] splits={0:[1,4]}", &b, &err), TS_OK);
  ck_assert(ts_attr_equal(a, b));
  /* Normalizing again changes nothing; the boxes are those of the positive spelling. */
  ck_assert_int_eq(ts_attr_normalize(a, 3, &err), TS_OK);
  ck_assert(ts_attr_equal(a, b));
  for (int r = 0; r < 4; r++) {
    ts_box x, y;
    bool in;
    ck_assert_int_eq(ts_attr_rank_box(b, 3, shape, r, &x, &in, &err), TS_OK);
    ck_assert(ts_geom_rank_box(g, r, &y));
    ck_assert(ts_box_equal(&x, &y));
  }
  ts_geom_destroy(&g);
  ts_attr_destroy(&a);
  ts_attr_destroy(&b);
  /* A refused normalization leaves the attribute as it was. */
  ck_assert_int_eq(ts_attr_parse("mesh=[2,2] placements=[S(-1),S(-2)]", &a, &err), TS_OK);
  ck_assert_int_eq(ts_attr_normalize(a, 1, &err), TS_BAD_ATTRIBUTE);
  ck_assert_str_eq(fmt(a), "mesh=[2,2]@0-3 placements=[S(-1),S(-2)]");
  ts_attr_destroy(&a);
}
END_TEST

/* The planner reshards between rules and spellings; a plan between the same layout in two
 * spellings moves nothing. */
START_TEST(plans_between_rules) {
  ts_attr *c = NULL, *bal = NULL, *neg = NULL;
  ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[S(0,chunk)]", &c, NULL), TS_OK);
  ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[S(0)]", &bal, NULL), TS_OK);
  ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[S(-2,chunk)]", &neg, NULL), TS_OK);
  int64_t shape[2] = {13, 3};
  ts_plan *p = NULL;
  ts_error err;
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, c, bal, NULL, &p, &err), TS_OK);
  ck_assert_int_gt(ts_plan_min_wire_bytes(p), 0);
  ck_assert_str_eq(fmt(ts_plan_tgt_attr(p)), "mesh=[4]@0-3 placements=[S(0)]");
  ts_plan_destroy(&p);
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, c, neg, NULL, &p, &err), TS_OK);
  ck_assert_int_eq(ts_plan_min_wire_bytes(p), 0);
  ck_assert_str_eq(fmt(ts_plan_tgt_attr(p)), "mesh=[4]@0-3 placements=[S(0,chunk)]");
  ts_plan_destroy(&p);
  /* 12 rows: both rules give 3,3,3,3, still nothing to move. */
  shape[0] = 12;
  ck_assert_int_eq(ts_plan_create(2, shape, TS_F32, c, bal, NULL, &p, &err), TS_OK);
  ck_assert_int_eq(ts_plan_min_wire_bytes(p), 0);
  ts_plan_destroy(&p);
  ts_attr_destroy(&c);
  ts_attr_destroy(&bal);
  ts_attr_destroy(&neg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("attr_chunk");
  TCase *tc = tcase_create("attr_chunk");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, rules_and_negative_dims_round_trip);
  tcase_add_test(tc, refusals_say_what_is_valid);
  tcase_add_test(tc, chunk_matches_torch_chunk);
  tcase_add_test(tc, documented_examples);
  tcase_add_test(tc, normalize_resolves_on_the_tensor);
  tcase_add_test(tc, plans_between_rules);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
