/* test_einsum_parse.c - einsum equations: implicit and explicit outputs, "...", and every error
 * path, each checked for its code and for a message that says what is wrong and where. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ts_kernels.h"
#include "check_main.h"

/* Plans eq over operands of the given dims/shapes (one shape per operand, up to 4). */
static int plan(const char *eq, int n, const int *ndim, const int64_t (*shape)[TS_MAX_DIMS],
                ts_dtype dt, int *ond, int64_t *oshape, ts_error *err) {
  const int64_t *shapes[TS_EINSUM_MAX_OPERANDS];
  for (int i = 0; i < n; i++)
    shapes[i] = shape[i];
  static char not_a_plan;
  ts_einsum_plan *p = (ts_einsum_plan *)&not_a_plan; /* must be reset to NULL on failure */
  int rc = ts_einsum_plan_create(&p, eq, n, ndim, shapes, dt, NULL, err);
  if (rc) {
    ck_assert_ptr_null(p);
    return rc;
  }
  ts_einsum_plan_output(p, ond, oshape);
  ck_assert_int_eq(ts_einsum_plan_n_operands(p), n);
  ck_assert_int_eq(ts_einsum_plan_dtype(p), dt);
  ts_einsum_plan_destroy(&p);
  ck_assert_ptr_null(p);
  return TS_OK;
}

/* Checks an equation's output shape; label sizes encode which labels came out in which order. */
static void expect_output(const char *eq, int n, const int *ndim,
                          const int64_t (*shape)[TS_MAX_DIMS], int want_nd, const int64_t *want) {
  int ond = -1;
  int64_t os[TS_MAX_DIMS];
  ts_error err = {0};
  int rc = plan(eq, n, ndim, shape, TS_F32, &ond, os, &err);
  ck_assert_msg(rc == TS_OK, "'%s': %s", eq, err.msg);
  ck_assert_msg(ond == want_nd, "'%s': %d output dims, want %d", eq, ond, want_nd);
  for (int d = 0; d < ond; d++)
    ck_assert_msg(os[d] == want[d], "'%s': output dim %d is %lld, want %lld", eq, d,
                  (long long)os[d], (long long)want[d]);
}

START_TEST(test_outputs) {
  /* Implicit: labels seen once, ASCII order (upper case first), "..." first. */
  {
    int nd[1] = {2};
    int64_t s[1][TS_MAX_DIMS] = {{2, 3}};
    expect_output("ba", 1, nd, s, 2, (int64_t[]){3, 2});
    expect_output("aB", 1, nd, s, 2, (int64_t[]){3, 2});
    expect_output(" a b ", 1, nd, s, 2, (int64_t[]){2, 3});
    expect_output("ab->", 1, nd, s, 0, NULL);
  }
  {
    int nd[1] = {2};
    int64_t s[1][TS_MAX_DIMS] = {{3, 3}};
    expect_output("ii", 1, nd, s, 0, NULL);
    expect_output("ii->i", 1, nd, s, 1, (int64_t[]){3});
  }
  {
    int nd[2] = {3, 2};
    int64_t s[2][TS_MAX_DIMS] = {{7, 2, 3}, {3, 5}};
    expect_output("...ij,jk", 2, nd, s, 3, (int64_t[]){7, 2, 5});
    expect_output("...ij,jk->k...i", 2, nd, s, 3, (int64_t[]){5, 7, 2});
    expect_output("z...j,jk->...", 2, nd, s, 1, (int64_t[]){2}); /* z=7, ... = one dim of 2 */
  }
  {
    /* "..." broadcasting: [4,1,2] against [3,2]: the output "..." is [4,3]. */
    int nd[2] = {3, 2};
    int64_t s[2][TS_MAX_DIMS] = {{4, 1, 2}, {3, 2}};
    expect_output("...i,...i->...", 2, nd, s, 2, (int64_t[]){4, 3});
    expect_output("...i,...i", 2, nd, s, 2, (int64_t[]){4, 3});
  }
  {
    /* Named size-1 dims broadcast too. */
    int nd[2] = {2, 2};
    int64_t s[2][TS_MAX_DIMS] = {{1, 4}, {3, 4}};
    expect_output("ij,ij->ij", 2, nd, s, 2, (int64_t[]){3, 4});
  }
  {
    /* Scalars. */
    int nd[2] = {0, 1};
    int64_t s[2][TS_MAX_DIMS] = {{0}, {6}};
    expect_output(",i", 2, nd, s, 1, (int64_t[]){6});
    expect_output(",i->", 2, nd, s, 0, NULL);
    expect_output("...,...i->i", 2, nd, s, 1, (int64_t[]){6});
  }
}
END_TEST

/* Expects code and every fragment in the message. */
static void expect_error(const char *eq, int n, const int *ndim,
                         const int64_t (*shape)[TS_MAX_DIMS], ts_dtype dt, int code,
                         const char *frag1, const char *frag2) {
  ts_error err = {0};
  int ond;
  int64_t os[TS_MAX_DIMS];
  int rc = plan(eq, n, ndim, shape, dt, &ond, os, &err);
  ck_assert_msg(rc == code, "'%s': code %s, want %s (%s)", eq, ts_status_name(rc),
                ts_status_name(code), err.msg);
  ck_assert_int_eq(err.code, code);
  ck_assert_msg(strstr(err.msg, frag1) != NULL, "'%s': message \"%s\" lacks \"%s\"", eq, err.msg,
                frag1);
  if (frag2)
    ck_assert_msg(strstr(err.msg, frag2) != NULL, "'%s': message \"%s\" lacks \"%s\"", eq, err.msg,
                  frag2);
}

START_TEST(test_errors) {
  int nd2[2] = {2, 2};
  int64_t s2[2][TS_MAX_DIMS] = {{2, 3}, {3, 4}};
  expect_error("ij,j%->ik", 2, nd2, s2, TS_F32, TS_EINSUM, "unknown character '%'", "position 4");
  expect_error("ij,jk->i1", 2, nd2, s2, TS_F32, TS_EINSUM, "unknown character '1'", "position 8");
  /* Mismatched sizes: which label, which operand and dim. */
  int64_t bad[2][TS_MAX_DIMS] = {{2, 3}, {5, 4}};
  expect_error("ij,jk->ik", 2, nd2, bad, TS_F32, TS_BAD_SHAPE, "label 'j'",
               "operand 1 dim 0 has size 5 but operand 0 dim 1 has size 3");
  int64_t diag[1][TS_MAX_DIMS] = {{2, 3}};
  expect_error("ii", 1, nd2, diag, TS_F32, TS_BAD_SHAPE, "label 'i' is repeated in operand 0",
               "diagonal");
  int64_t ell[2][TS_MAX_DIMS] = {{4, 2}, {5, 2}};
  expect_error("...i,...i", 2, nd2, ell, TS_F32, TS_BAD_SHAPE, "\"...\" dims do not broadcast",
               "operand 1 dim 0 has size 5");
  expect_error("ij,jk->ii", 2, nd2, s2, TS_F32, TS_EINSUM, "label 'i' is repeated in the output",
               NULL);
  expect_error("ij,jk->iz", 2, nd2, s2, TS_F32, TS_EINSUM, "output label 'z' appears in no input",
               NULL);
  /* Operand counts. */
  expect_error("ij,jk,kl->il", 2, nd2, s2, TS_F32, TS_EINSUM, "3 input terms but 2 operands", NULL);
  expect_error("ij->ij", 2, nd2, s2, TS_F32, TS_EINSUM, "1 input terms but 2 operands", NULL);
  {
    ts_einsum_plan *p = NULL;
    ts_error err;
    const int64_t *shapes[1] = {s2[0]};
    ck_assert_int_eq(ts_einsum_plan_create(&p, "ij", 0, nd2, shapes, TS_F32, NULL, &err),
                     TS_EINSUM);
    ck_assert_ptr_nonnull(strstr(err.msg, "0 operands given; valid is 1 to 32"));
    int nd33[33];
    const int64_t *sh33[33];
    for (int i = 0; i < 33; i++) {
      nd33[i] = 2;
      sh33[i] = s2[0];
    }
    ck_assert_int_eq(ts_einsum_plan_create(&p, "ij", 33, nd33, sh33, TS_F32, NULL, &err),
                     TS_EINSUM);
    ck_assert_ptr_nonnull(strstr(err.msg, "33 operands given"));
    ck_assert_int_eq(ts_einsum_plan_create(&p, NULL, 1, nd2, shapes, TS_F32, NULL, &err),
                     TS_INVALID_ARGUMENT);
    ck_assert_int_eq(ts_einsum_plan_create(NULL, "ij", 1, nd2, shapes, TS_F32, NULL, &err),
                     TS_INVALID_ARGUMENT);
    ts_einsum_opts o = {.path = (ts_einsum_path)7};
    ck_assert_int_eq(ts_einsum_plan_create(&p, "ij", 1, nd2, shapes, TS_F32, &o, &err),
                     TS_INVALID_ARGUMENT);
    ck_assert_ptr_null(p);
    ts_einsum_plan_destroy(&p);
    ts_einsum_plan_destroy(NULL);
    /* Getters forgive a NULL plan. */
    int ond = -1;
    ts_einsum_plan_output(NULL, &ond, NULL);
    ck_assert_int_eq(ond, 0);
    ck_assert_int_eq(ts_einsum_plan_n_operands(NULL), 0);
    ck_assert(ts_einsum_plan_flops(NULL) == 0.0);
    char text[8] = "x";
    ck_assert_int_eq(ts_einsum_plan_format(NULL, text, sizeof text), 0);
    ck_assert_str_eq(text, "");
    ts_einsum_stats_get(NULL);
    ck_assert_uint_eq(ts_einsum_cache_bytes(NULL), 0);
    ck_assert_int_eq(ts_einsum_cache_create(NULL, &err), TS_INVALID_ARGUMENT);
  }
  /* Dims against terms. */
  expect_error("ijk,jk->ik", 2, nd2, s2, TS_F32, TS_EINSUM, "operand 0 has 2 dims",
               "names 3 labels");
  expect_error("i,jk->ik", 2, nd2, s2, TS_F32, TS_EINSUM, "operand 0 has 2 dims", "no \"...\"");
  /* Ellipsis syntax. */
  expect_error("i.j,jk->ik", 2, nd2, s2, TS_F32, TS_EINSUM, "a lone '.' at position 1", NULL);
  expect_error("......,jk", 2, nd2, s2, TS_F32, TS_EINSUM, "a second \"...\"", NULL);
  expect_error("...j,jk->jk", 2, nd2, s2, TS_F32, TS_EINSUM, "covers 1 dims",
               "output has no \"...\"");
  expect_error("ij,jk-ik", 2, nd2, s2, TS_F32, TS_EINSUM, "'-' at position 5", NULL);
  expect_error("ij,jk->ik,i", 2, nd2, s2, TS_F32, TS_EINSUM, "unexpected ','", NULL);
  /* dtypes. */
  expect_error("ij,jk->ik", 2, nd2, s2, TS_U8, TS_BAD_DTYPE, "dtype u8 is not supported", "f32");
  expect_error("ij,jk->ik", 2, nd2, s2, TS_F8_E4M3, TS_BAD_DTYPE, "dtype f8_e4m3 is not supported",
               "f32");
  expect_error("ij,jk->ik", 2, nd2, s2, TS_BOOL, TS_BAD_DTYPE, "dtype bool is not supported",
               "i64");
  expect_error("ij,jk->ik", 2, nd2, s2, TS_U64, TS_BAD_DTYPE, "dtype u64 is not supported", "bf16");
  expect_error("ij,jk->ik", 2, nd2, s2, TS_I8, TS_BAD_DTYPE, "dtype i8", NULL);
  /* Too many output dims. */
  {
    int nd[2] = {5, 5};
    int64_t s[2][TS_MAX_DIMS] = {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}};
    expect_error("abcde,fghij", 2, nd, s, TS_F32, TS_EINSUM, "more than 8 dims", NULL);
    expect_error("abcde,fghij->abcdefghi", 2, nd, s, TS_F32, TS_EINSUM, "9 dims", NULL);
  }
  /* Negative sizes and too many dims. */
  {
    int nd[1] = {9};
    int64_t s[1][TS_MAX_DIMS] = {{1}};
    expect_error("abcdefghi", 1, nd, s, TS_F32, TS_BAD_SHAPE, "operand 0 has 9 dims", NULL);
    int nd1[1] = {1};
    int64_t neg[1][TS_MAX_DIMS] = {{-2}};
    expect_error("a", 1, nd1, neg, TS_F32, TS_BAD_SHAPE, "operand 0 dim 0 has size -2", NULL);
  }
}
END_TEST

/* Tensors that do not match the plan are refused at execution. */
START_TEST(test_execute_errors) {
  int nd[2] = {2, 2};
  int64_t s0[2] = {2, 3}, s1[2] = {3, 4}, so[2] = {2, 4};
  const int64_t *shapes[2] = {s0, s1};
  ts_einsum_plan *p = NULL;
  ts_error err;
  ck_assert_int_eq(ts_einsum_plan_create(&p, "ij,jk->ik", 2, nd, shapes, TS_F32, NULL, &err),
                   TS_OK);
  float a[6] = {0}, b[12] = {0}, o[8], d[8] = {0};
  ts_tensor ta = {a, sizeof a, {0}}, tb = {b, sizeof b, {0}}, to = {o, sizeof o, {0}};
  ts_layout_plain(&ta.layout, TS_F32, 2, s0, NULL);
  ts_layout_plain(&tb.layout, TS_F32, 2, s1, NULL);
  ts_layout_plain(&to.layout, TS_F32, 2, so, NULL);
  const ts_tensor *ops[2] = {&ta, &tb};
  ck_assert_int_eq(ts_einsum_execute(p, &to, ops, NULL, &err), TS_OK);
  /* Wrong shape of an operand. */
  const ts_tensor *swapped[2] = {&tb, &ta};
  ck_assert_int_eq(ts_einsum_execute(p, &to, swapped, NULL, &err), TS_BAD_SHAPE);
  ck_assert_ptr_nonnull(strstr(err.msg, "operand 0 dim 0 has size 3; the plan's is 2"));
  /* Wrong dtype. */
  ts_tensor td = {d, sizeof d, {0}};
  ts_layout_plain(&td.layout, TS_F64, 2, so, NULL);
  ck_assert_int_eq(ts_einsum_execute(p, &td, ops, NULL, &err), TS_BAD_DTYPE);
  ck_assert_ptr_nonnull(strstr(err.msg, "output 0 has dtype f64"));
  /* A buffer too small for its layout. */
  ts_tensor small = to;
  small.bytes = 4;
  ck_assert_int_eq(ts_einsum_execute(p, &small, ops, NULL, &err) != TS_OK, 1);
  ck_assert_ptr_nonnull(strstr(err.msg, "output 0"));
  /* A blocked layout. */
  ts_tensor blk = ta;
  blk.layout.n_inner = 1;
  blk.layout.inner_dim[0] = 1;
  blk.layout.inner_size[0] = 3;
  const ts_tensor *bops[2] = {&blk, &tb};
  ck_assert_int_eq(ts_einsum_execute(p, &to, bops, NULL, &err), TS_BAD_LAYOUT);
  ck_assert_ptr_nonnull(strstr(err.msg, "blocked"));
  /* NULLs. */
  ck_assert_int_eq(ts_einsum_execute(NULL, &to, ops, NULL, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_einsum_execute(p, NULL, ops, NULL, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_einsum_execute(p, &to, NULL, NULL, &err), TS_INVALID_ARGUMENT);
  const ts_tensor *nops[2] = {&ta, NULL};
  ck_assert_int_eq(ts_einsum_execute(p, &to, nops, NULL, &err), TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "operand 1 is NULL"));
  /* The one-call form reports the plan's errors. */
  ck_assert_int_eq(ts_einsum("ij,jk->ikk", 2, ops, &to, &err), TS_EINSUM);
  ck_assert_int_eq(ts_einsum("ij,jk->ik", 0, ops, &to, &err), TS_EINSUM);
  /* The reference refuses what the engine refuses. */
  ck_assert_int_eq(ts_einsum_reference("ij,kk->ik", 2, ops, &to, &err), TS_BAD_SHAPE);
  ts_einsum_plan_destroy(&p);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("einsum_parse");
  TCase *tc = tcase_create("parse");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_outputs);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_execute_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return ts_run_suite(suite()); }
