/* test_attr.c - distributed attributes: the text form (canonical round trips, accepted variants,
 * errors that name the column and what was expected), validation errors, balanced and ragged
 * split points, slice boxes, box intersection and chunking. No MPI. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ts_plan.h"
#include "check_main.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
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
  ck_assert_uint_eq(n, strlen(buf));
  return buf;
}

START_TEST(canonical_round_trip) {
  const char *canon[] = {
      "mesh=[4]@0-3 placements=[S(0)]",
      "mesh=[2,4]@0-7 placements=[S(0),R]",
      "mesh=[2]@4,6 placements=[S(0)] splits={0:[3,0]}",
      "mesh=[2,2]@0-3 placements=[P(sum),S(1)]",
      "mesh=[3]@7,2,5 placements=[P(max)]",
      "mesh=[1]@0 placements=[R]",
      "mesh=[2,3]@0-2,6-8 placements=[S(1),S(1)] splits={1:[0,5,1,1,0,13]}",
      "mesh=[2,2]@0-3 placements=[S(0),S(2)] splits={0:[1,9],2:[4,4]}",
      "mesh=[4]@3-0 placements=[P(min)]",
      "mesh=[2,2]@0-3 placements=[P(avg),S(0)]",
      "mesh=[3]@0-2 placements=[P(prod)]",
      "mesh=[2,2]@0-3 placements=[P(sum),P(max)]",
  };
  for (size_t i = 0; i < sizeof canon / sizeof canon[0]; i++) {
    ts_attr *a = NULL;
    ts_error err;
    int rc = ts_attr_parse(canon[i], &a, &err);
    /* "3-0" is a descending range: an error that names the column. */
    if (strstr(canon[i], "3-0")) {
      ck_assert_int_eq(rc, TS_PARSE);
      ck_assert_ptr_nonnull(strstr(err.msg, "column 12"));
      ck_assert_ptr_null(a);
      continue;
    }
    ck_assert_msg(rc == TS_OK, "%s: %s", canon[i], err.msg);
    ck_assert_str_eq(fmt(a), canon[i]);
    ts_attr *b = NULL;
    ck_assert_int_eq(ts_attr_parse(fmt(a), &b, &err), TS_OK);
    ck_assert(ts_attr_equal(a, b));
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
    ck_assert_ptr_null(a);
  }
  ts_attr_destroy(NULL);
}
END_TEST

START_TEST(variants_format_canonically) {
  struct {
    const char *in, *out;
  } cases[] = {
      {"mesh=[4] placements=[Shard(0)]", "mesh=[4]@0-3 placements=[S(0)]"},
      {"  mesh=[2]@5,6\tplacements=[Replicate]  ", "mesh=[2]@5-6 placements=[R]"},
      {"mesh=[2,2]@0,1,2,3 placements=[Partial(max),R]", "mesh=[2,2]@0-3 placements=[P(max),R]"},
      {"mesh=[2] placements=[Partial(reduce_op=\"avg\")]", "mesh=[2]@0-1 placements=[P(avg)]"},
      {"mesh=[2] placements=[Partial('prod')]", "mesh=[2]@0-1 placements=[P(prod)]"},
      {"mesh=[3]@0-1,9 placements=[S(0)]   splits={0:[1,2,3]}",
       "mesh=[3]@0-1,9 placements=[S(0)] splits={0:[1,2,3]}"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_attr *a = NULL;
    ts_error err;
    ck_assert_msg(ts_attr_parse(cases[i].in, &a, &err) == TS_OK, "%s: %s", cases[i].in, err.msg);
    ck_assert_str_eq(fmt(a), cases[i].out);
    ts_attr_destroy(&a);
  }
}
END_TEST

START_TEST(parse_errors_point_at_the_character) {
  struct {
    const char *in;
    int code;
    const char *column, *expected;
  } cases[] = {
      {"", TS_PARSE, "column 1", "\"mesh=\""},
      {"mesh=[2,4]@0-7 placements=[S(0),X]", TS_PARSE, "column 33", "a placement"},
      {"mesh=[2,4]@0-7 placements=[S(0),P(mean)]", TS_PARSE, "column 35",
       "sum, avg, prod, max or min"},
      {"mesh=[0] placements=[R]", TS_PARSE, "column 7", "at least 1"},
      {"mesh=[2]@0,1placements=[R]", TS_PARSE, "column 13", "blank"},
      {"mesh=[2]@0,1 placements=[R,R]", TS_BAD_ATTRIBUTE, "column 14", "one placement per"},
      {"mesh=[2]@0,1,2 placements=[R]", TS_BAD_ATTRIBUTE, "column 1", "one rank per"},
      {"mesh=[2]@0,0 placements=[R]", TS_BAD_ATTRIBUTE, "", "appears twice"},
      {"mesh=[2] placements=[S(0)] splits={0:[1,2]", TS_PARSE, "column 43", "\"}\""},
      {"mesh=[2] placements=[S(0)] splits={1:[1,2]}", TS_BAD_ATTRIBUTE, "", "no placement shards"},
      {"mesh=[2] placements=[S(0)] splits={0:[1,2,3]}", TS_BAD_ATTRIBUTE, "", "2 parts"},
      {"mesh=[2] placements=[S(0)] splits={0:[1],0:[1]}", TS_PARSE, "column 42",
       "splits of dim 0 are given twice"},
      {"mesh=[2,2] placements=[S(0),S(1)] splits={1:[1,1],0:[1,1]}", TS_PARSE, "column 51",
       "increasing"},
      {"mesh=[2] placements=[S(0)] junk", TS_PARSE, "column 28", "end of text"},
      {"mesh=[2] placements=[S(9)]", TS_PARSE, "column 24", "at most 7"},
      {"mesh=[99999999999] placements=[R]", TS_PARSE, "column 7", "at most"},
      {"mesh=[2]@1-0 placements=[R]", TS_PARSE, "column 12", "not below"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_attr *a = NULL;
    ts_error err = {0};
    int rc = ts_attr_parse(cases[i].in, &a, &err);
    ck_assert_msg(rc == cases[i].code, "%s: got %d (%s)", cases[i].in, rc, err.msg);
    ck_assert_ptr_null(a);
    ck_assert_msg(strstr(err.msg, cases[i].column) != NULL, "%s: %s", cases[i].in, err.msg);
    ck_assert_msg(strstr(err.msg, cases[i].expected) != NULL, "%s: %s", cases[i].in, err.msg);
  }
  ck_assert_int_eq(ts_attr_parse(NULL, NULL, NULL), TS_INVALID_ARGUMENT);
}
END_TEST

/* Random attributes: parse(format(a)) == a and format is stable. */
START_TEST(random_round_trip) {
  for (int iter = 0; iter < 500; iter++) {
    int mnd = 1 + (int)(rnd() % 3);
    int64_t ms[TS_MAX_MESH_DIMS];
    int n = 1;
    for (int m = 0; m < mnd; m++) {
      ms[m] = 1 + (int64_t)(rnd() % 3);
      n *= (int)ms[m];
    }
    int ranks[64];
    for (int i = 0; i < n; i++)
      ranks[i] = i * 2 + (int)(rnd() % 2);
    if (rnd() % 2) /* shuffle */
      for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1)), t = ranks[i];
        ranks[i] = ranks[j];
        ranks[j] = t;
      }
    ts_placement pl[TS_MAX_MESH_DIMS];
    for (int m = 0; m < mnd; m++) { /* a partial op per mesh dim */
      int k = (int)(rnd() % 3);
      ts_reduce_op op = (ts_reduce_op)(rnd() % TS_REDUCE_COUNT);
      for (int j = 0; op == TS_REDUCE_PROD && j < m; j++) /* refused after avg: tested apart */
        if (pl[j].kind == TS_PLACE_PARTIAL && pl[j].op == TS_REDUCE_AVG)
          op = TS_REDUCE_SUM;
      pl[m] = k == 0 ? ts_shard_on((int)(rnd() % 3)) : k == 1 ? ts_replicate() : ts_partial(op);
    }
    ts_attr *a = NULL;
    ts_error err;
    ck_assert_int_eq(ts_attr_create(&a, mnd, ms, ranks, pl, &err), TS_OK);
    for (int d = 0; d < 3; d++) {
      int64_t parts = 1;
      bool sharded = false;
      for (int m = 0; m < mnd; m++)
        if (pl[m].kind == TS_PLACE_SHARD && pl[m].dim == d) {
          parts *= ms[m];
          sharded = true;
        }
      if (sharded && rnd() % 2) {
        int64_t sizes[64];
        for (int64_t i = 0; i < parts; i++)
          sizes[i] = (int64_t)(rnd() % 4);
        ck_assert_int_eq(ts_attr_set_splits(a, d, (int)parts, sizes, &err), TS_OK);
      }
    }
    char first[4096];
    snprintf(first, sizeof first, "%s", fmt(a));
    ts_attr *b = NULL;
    ck_assert_msg(ts_attr_parse(first, &b, &err) == TS_OK, "%s: %s", first, err.msg);
    ck_assert_msg(ts_attr_equal(a, b), "%s", first);
    ck_assert_str_eq(fmt(b), first);
    ts_attr *c = NULL;
    ck_assert_int_eq(ts_attr_clone(b, &c, &err), TS_OK);
    ck_assert(ts_attr_equal(a, c));
    ts_attr_destroy(&a);
    ts_attr_destroy(&b);
    ts_attr_destroy(&c);
  }
}
END_TEST

/* Short text truncates like snprintf and reports the needed length. */
START_TEST(format_truncates) {
  ts_attr *a = NULL;
  ck_assert_int_eq(ts_attr_parse("mesh=[2,4]@0-7 placements=[S(0),R]", &a, NULL), TS_OK);
  char small[10];
  size_t need = ts_attr_format(a, small, sizeof small);
  ck_assert_uint_eq(need, strlen("mesh=[2,4]@0-7 placements=[S(0),R]"));
  ck_assert_str_eq(small, "mesh=[2,4");
  ck_assert_uint_eq(ts_attr_format(a, NULL, 0), need);
  ts_attr_destroy(&a);
  /* every room, for attributes with every part of the text: as snprintf cuts the whole text */
  static const char *texts[] = {"mesh=[dp=2,tp=4]@8-15 placements=[P(sum),S(1)]",
                                "mesh=[3]@0,2,5 placements=[S(0)] splits={0:[1,1000000007,2]}",
                                "mesh=[2,2]@3,1-2,0 placements=[S(1),P(max)] splits={1:[5,0]}"};
  for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
    ck_assert_int_eq(ts_attr_parse(texts[t], &a, NULL), TS_OK);
    char full[256], got[256], want[256];
    size_t n = ts_attr_format(a, full, sizeof full);
    ck_assert_uint_eq(n, strlen(full));
    for (size_t room = 1; room <= n + 1; room++) {
      memset(got, 'x', sizeof got);
      ck_assert_uint_eq(ts_attr_format(a, got, room), n);
      snprintf(want, room, "%s", full);
      ck_assert_str_eq(got, want);
      ck_assert_int_eq(got[room], 'x'); /* nothing written past the room */
    }
    ts_attr_destroy(&a);
  }
}
END_TEST

static int validate(const char *text, int ndim, const int64_t *shape, int world, ts_error *err) {
  ts_attr *a = NULL;
  int rc = ts_attr_parse(text, &a, err);
  ck_assert_msg(rc == TS_OK, "%s: %s", text, err->msg);
  rc = ts_attr_validate(a, ndim, shape, world, err);
  ts_attr_destroy(&a);
  return rc;
}

START_TEST(validation_errors) {
  int64_t shape[2] = {10, 7};
  ts_error err;
  ck_assert_int_eq(validate("mesh=[2,4]@0-7 placements=[S(0),R]", 2, shape, 8, &err), TS_OK);
  ck_assert_int_eq(validate("mesh=[2,4]@0-7 placements=[S(0),R]", 2, shape, 4, &err),
                   TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "outside the world"));
  ck_assert_int_eq(validate("mesh=[2]@0-1 placements=[S(2)]", 2, shape, 0, &err), TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "tensor has 2 dims"));
  ck_assert_int_eq(validate("mesh=[2]@0-1 placements=[S(0)] splits={0:[3,6]}", 2, shape, 0, &err),
                   TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "sum to 9"));
  ck_assert_int_eq(validate("mesh=[2]@0-1 placements=[S(0)] splits={0:[3,60]}", 2, shape, 0, &err),
                   TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "sum to 63 but the dim has size 10"));
  ck_assert_int_eq(validate("mesh=[2]@0-1 placements=[S(0)] splits={0:[10,0]}", 2, shape, 0, &err),
                   TS_OK);
  int64_t bad[2] = {-1, 3};
  ck_assert_int_eq(validate("mesh=[2]@0-1 placements=[R]", 2, bad, 0, &err), TS_BAD_SHAPE);

  /* Built in code: wrong rank counts, repeats, negative ranks, bad placements. */
  ts_attr *a = NULL;
  int64_t ms[2] = {2, 2};
  int ranks[4] = {0, 1, 2, 1};
  ts_placement pl[2] = {ts_shard_on(0), ts_replicate()};
  ck_assert_int_eq(ts_attr_create(&a, 2, ms, ranks, pl, &err), TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "rank 1 appears twice"));
  ranks[3] = -4;
  ck_assert_int_eq(ts_attr_create(&a, 2, ms, ranks, pl, &err), TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, ">= 0"));
  ms[1] = 0;
  ck_assert_int_eq(ts_attr_create(&a, 2, ms, NULL, pl, &err), TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "at least 1"));
  ms[1] = 2;
  ck_assert_int_eq(ts_attr_create(&a, 0, ms, NULL, pl, &err), TS_BAD_ATTRIBUTE);
  ck_assert_int_eq(ts_attr_create(&a, 9, ms, NULL, pl, &err), TS_BAD_ATTRIBUTE);
  pl[1].kind = (ts_place_kind)7;
  ck_assert_int_eq(ts_attr_create(&a, 2, ms, NULL, pl, &err), TS_BAD_ATTRIBUTE);
  pl[1] = ts_shard_on(-9);
  ck_assert_int_eq(ts_attr_create(&a, 2, ms, NULL, pl, &err), TS_BAD_ATTRIBUTE);
  pl[1] = ts_shard_rule(0, (ts_split_rule)5);
  ck_assert_int_eq(ts_attr_create(&a, 2, ms, NULL, pl, &err), TS_BAD_ATTRIBUTE);
  ck_assert_msg(strstr(err.msg, "balanced, chunk"), "%s", err.msg);
  pl[1] = ts_replicate();
  ck_assert_int_eq(ts_attr_create(&a, 2, ms, NULL, pl, &err), TS_OK);
  int64_t neg = -1;
  ck_assert_int_eq(ts_attr_set_splits(a, 0, 1, &neg, &err), TS_BAD_ATTRIBUTE);
  ck_assert_int_eq(ts_attr_set_splits(a, 8, 0, NULL, &err), TS_BAD_ATTRIBUTE);
  int64_t two[2] = {4, 6};
  ck_assert_int_eq(ts_attr_set_splits(a, 0, 2, two, &err), TS_OK);
  ck_assert_int_eq(ts_attr_validate(a, 2, shape, 4, &err), TS_OK);
  ck_assert_int_eq(ts_attr_set_splits(a, 1, 2, two, &err), TS_OK);
  ck_assert_int_eq(ts_attr_validate(a, 2, shape, 4, &err), TS_BAD_ATTRIBUTE);
  ck_assert_ptr_nonnull(strstr(err.msg, "no placement shards"));
  ck_assert_int_eq(ts_attr_set_splits(a, 1, 0, NULL, &err), TS_OK);
  ck_assert_int_eq(ts_attr_validate(a, 2, shape, 4, &err), TS_OK);
  ck_assert_int_eq(ts_attr_validate(a, 9, shape, 4, &err), TS_BAD_SHAPE);
  ts_attr_destroy(&a);

  /* different ops per mesh dim; a product after an average refused, naming both dims */
  ck_assert_int_eq(ts_attr_parse("mesh=[2,2] placements=[P(prod),P(avg)]", &a, &err), TS_OK);
  ts_attr_destroy(&a);
  ck_assert_int_eq(ts_attr_parse("mesh=[2,1,2] placements=[P(avg),R,P(prod)]", &a, &err),
                   TS_BAD_ATTRIBUTE);
  ck_assert_msg(strstr(err.msg, "placements 0 and 2") && strstr(err.msg, "before the P(avg)"), "%s",
                err.msg);
  ck_assert_ptr_null(a);

  /* avg is for the float dtypes: the error names the dtype and what is valid */
  ck_assert_int_eq(ts_attr_parse("mesh=[2,2] placements=[R,P(avg)]", &a, &err), TS_OK);
  ck_assert_int_eq(ts_attr_check_dtype(a, TS_F32, &err), TS_OK);
  ck_assert_int_eq(ts_attr_check_dtype(a, TS_BF16, &err), TS_OK);
  const ts_dtype no_avg[] = {TS_I32, TS_I64, TS_U8, TS_BOOL};
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(ts_attr_check_dtype(a, no_avg[k], &err), TS_BAD_DTYPE);
    ck_assert_msg(strstr(err.msg, ts_dtype_name(no_avg[k])) && strstr(err.msg, "f32, f64, f16"),
                  "%s", err.msg);
  }
  ts_attr_destroy(&a);
  ck_assert_int_eq(ts_attr_parse("mesh=[2] placements=[P(prod)]", &a, &err), TS_OK);
  ck_assert_int_eq(ts_attr_check_dtype(a, TS_I32, &err), TS_OK);
  ck_assert_int_eq(ts_attr_check_dtype(a, TS_BOOL, &err), TS_OK);
  ck_assert_int_eq(ts_attr_check_dtype(a, TS_F8_E4M3, &err), TS_BAD_DTYPE);
  ts_attr_destroy(&a);
}
END_TEST

START_TEST(balanced_and_ragged_splits) {
  ts_attr *a = NULL;
  ts_geom *g = NULL;
  int64_t shape[1] = {20};
  ck_assert_int_eq(ts_attr_parse("mesh=[6] placements=[S(0)]", &a, NULL), TS_OK);
  ck_assert_int_eq(ts_geom_create(a, 1, shape, &g, NULL), TS_OK);
  const int64_t want[7] = {0, 4, 8, 11, 14, 17, 20};
  ck_assert_int_eq(ts_geom_parts(g, 0), 6);
  for (int i = 0; i < 7; i++)
    ck_assert_int_eq(ts_geom_offsets(g, 0)[i], want[i]);
  ts_geom_destroy(&g);
  ts_geom_destroy(&g);
  ts_attr_destroy(&a);

  /* 2 over 4: 1,1,0,0 - empty parts are fine. */
  shape[0] = 2;
  ck_assert_int_eq(ts_attr_parse("mesh=[4] placements=[S(0)]", &a, NULL), TS_OK);
  ts_box b;
  bool in;
  ck_assert_int_eq(ts_attr_rank_box(a, 1, shape, 3, &b, &in, NULL), TS_OK);
  ck_assert(in);
  ck_assert_int_eq(ts_box_numel(&b), 0);
  ck_assert_int_eq(ts_attr_rank_box(a, 1, shape, 1, &b, &in, NULL), TS_OK);
  ck_assert_int_eq(b.lo[0], 1);
  ck_assert_int_eq(b.hi[0], 2);
  ck_assert_int_eq(ts_attr_rank_box(a, 1, shape, 9, &b, &in, NULL), TS_OK);
  ck_assert(!in);
  ts_attr_destroy(&a);
}
END_TEST

/* Boxes of a 2-D mesh sharding one dim twice (row-major parts over the mesh dims) and another
 * dim once, with ranks in a permuted order, against a direct computation. */
START_TEST(boxes_2d_mesh) {
  ts_attr *a = NULL;
  ck_assert_int_eq(
      ts_attr_parse("mesh=[2,3]@5,4,3,2,1,0 placements=[S(0),S(0)] splits={0:[1,0,2,3,0,4]}", &a,
                    NULL),
      TS_OK);
  int64_t shape[2] = {10, 3};
  ts_geom *g = NULL;
  ck_assert_int_eq(ts_geom_create(a, 2, shape, &g, NULL), TS_OK);
  const int64_t lo[6] = {0, 1, 1, 3, 6, 6}, hi[6] = {1, 1, 3, 6, 6, 10};
  for (int i = 0; i < 6; i++) {
    ts_box b;
    ck_assert(ts_geom_rank_box(g, 5 - i, &b));
    ck_assert_int_eq(ts_geom_mesh_index(g, 5 - i), i);
    ck_assert_int_eq(b.lo[0], lo[i]);
    ck_assert_int_eq(b.hi[0], hi[i]);
    ck_assert_int_eq(b.lo[1], 0);
    ck_assert_int_eq(b.hi[1], 3);
  }
  ck_assert_int_eq(ts_geom_mesh_index(g, 6), -1);
  ck_assert_int_eq(ts_geom_mesh_index(g, -1), -1);
  ts_geom_destroy(&g);
  ts_attr_destroy(&a);

  ck_assert_int_eq(ts_attr_parse("mesh=[2,2]@0-3 placements=[S(1),S(0)]", &a, NULL), TS_OK);
  int64_t s2[2] = {5, 3};
  ck_assert_int_eq(ts_geom_create(a, 2, s2, &g, NULL), TS_OK);
  ts_box b;
  ck_assert(ts_geom_rank_box(g, 2, &b)); /* mesh (1,0): dim1 part 1, dim0 part 0 */
  ck_assert_int_eq(b.lo[0], 0);
  ck_assert_int_eq(b.hi[0], 3);
  ck_assert_int_eq(b.lo[1], 2);
  ck_assert_int_eq(b.hi[1], 3);
  ts_geom_destroy(&g);
  ts_attr_destroy(&a);
}
END_TEST

START_TEST(box_intersection) {
  ts_box a = {2, {0, 5}, {4, 9}}, b = {2, {3, 0}, {10, 6}}, x;
  ck_assert(ts_box_intersect(&a, &b, &x));
  ck_assert_int_eq(x.lo[0], 3);
  ck_assert_int_eq(x.hi[0], 4);
  ck_assert_int_eq(x.lo[1], 5);
  ck_assert_int_eq(x.hi[1], 6);
  ck_assert_int_eq(ts_box_numel(&x), 1);
  ts_box c = {2, {4, 0}, {8, 9}};
  ck_assert(!ts_box_intersect(&a, &c, &x));
  ck_assert_int_eq(ts_box_numel(&x), 0);
  ck_assert(ts_box_contains(&b, &x)); /* the empty box is in every box */
  ck_assert(!ts_box_contains(&a, &b));
  ck_assert(ts_box_equal(&a, &a));
  ck_assert(!ts_box_equal(&a, &b));
}
END_TEST

/* Chunks tile the box exactly, each within the byte bound (a single element is never split). */
START_TEST(chunks_tile_the_box) {
  for (int iter = 0; iter < 300; iter++) {
    ts_box b;
    b.ndim = 1 + (int)(rnd() % 4);
    for (int d = 0; d < b.ndim; d++) {
      b.lo[d] = (int64_t)(rnd() % 5);
      b.hi[d] = b.lo[d] + (int64_t)(rnd() % 7);
    }
    size_t es = (size_t)1 << (rnd() % 4);
    int64_t maxb = 1 + (int64_t)(rnd() % 200);
    int64_t n = ts_box_chunk_count(&b, es, maxb), total = 0;
    int64_t numel = ts_box_numel(&b);
    if (numel == 0) {
      ck_assert_int_eq(n, 0);
      continue;
    }
    /* A coverage map over the box. */
    int64_t ext[TS_MAX_DIMS], cells = 1;
    for (int d = 0; d < b.ndim; d++) {
      ext[d] = b.hi[d] - b.lo[d];
      cells *= ext[d];
    }
    unsigned char *seen = calloc((size_t)cells, 1);
    for (int64_t i = 0; i < n; i++) {
      ts_box c;
      ts_box_chunk(&b, es, maxb, i, &c);
      ck_assert(ts_box_contains(&b, &c));
      int64_t cn = ts_box_numel(&c);
      ck_assert_int_gt(cn, 0);
      ck_assert(cn * (int64_t)es <= maxb || cn == 1);
      total += cn;
      int64_t idx[TS_MAX_DIMS];
      for (int d = 0; d < b.ndim; d++)
        idx[d] = c.lo[d];
      for (int64_t k = 0; k < cn; k++) {
        int64_t lin = 0;
        for (int d = 0; d < b.ndim; d++)
          lin = lin * ext[d] + (idx[d] - b.lo[d]);
        ck_assert_int_eq(seen[lin], 0);
        seen[lin] = 1;
        for (int d = b.ndim - 1; d >= 0; d--) {
          if (++idx[d] < c.hi[d])
            break;
          idx[d] = c.lo[d];
        }
      }
    }
    ck_assert_int_eq(total, numel);
    free(seen);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("attr");
  TCase *tc = tcase_create("attr");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, canonical_round_trip);
  tcase_add_test(tc, variants_format_canonically);
  tcase_add_test(tc, parse_errors_point_at_the_character);
  tcase_add_test(tc, random_round_trip);
  tcase_add_test(tc, format_truncates);
  tcase_add_test(tc, validation_errors);
  tcase_add_test(tc, balanced_and_ragged_splits);
  tcase_add_test(tc, boxes_2d_mesh);
  tcase_add_test(tc, box_intersection);
  tcase_add_test(tc, chunks_tile_the_box);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
