/* kernels_demo.c - tshard-kernels-demo: a short tour of the local kernels, printing what it does.
 *
 * Builds an NCHW activation, reorders it to the blocked NCHW16c layout and on to NHWC with the
 * strided-copy kernel (no plain intermediate), narrows it to bf16, cuts a sub-box, runs an einsum
 * with its backward pass through the transpose cache, and checks every step against values
 * computed independently from the global index. Exit status 0 when every check holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_kernels.h"

static int failures;

static void check(bool ok, const char *what) {
  printf("  %-58s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok)
    failures++;
}

static void must(int rc, const ts_error *err) {
  if (rc) {
    fprintf(stderr, "tshard-kernels-demo: %s (%s)\n", err->msg, ts_status_name(rc));
    exit(2);
  }
}

static ts_tensor alloc_tensor(ts_dtype dt, int nd, const int64_t *shape, const char *tag) {
  ts_tensor t = {0};
  ts_error err;
  must(ts_layout_from_tag(&t.layout, dt, nd, shape, tag, &err), &err);
  must(ts_layout_span(&t.layout, &t.bytes, &err), &err);
  t.data = calloc(1, t.bytes ? t.bytes : 1);
  return t;
}

/* The value of element (n, c, h, w): a function of the global index. */
static float value(int64_t n, int64_t c, int64_t h, int64_t w) {
  return (float)(n * 1000 + c * 100 + h * 10 + w) * 0.25f;
}

int main(void) {
  ts_error err;
  char text[256];
  int64_t shape[4] = {2, 20, 5, 7}; /* C = 20: the 16-blocks have a padded tail */
  printf("tshard kernels demo (%d threads)\n\n", ts_kernels_threads());

  ts_tensor nchw = alloc_tensor(TS_F32, 4, shape, "abcd");
  float *p = nchw.data;
  for (int64_t n = 0, i = 0; n < 2; n++)
    for (int64_t c = 0; c < 20; c++)
      for (int64_t h = 0; h < 5; h++)
        for (int64_t w = 0; w < 7; w++)
          p[i++] = value(n, c, h, w);
  ts_layout_format(&nchw.layout, text, sizeof text);
  printf("1. an NCHW tensor: %s\n", text);

  ts_tensor blocked = alloc_tensor(TS_F32, 4, shape, "aBcd16b");
  memset(blocked.data, 0xff, blocked.bytes);
  must(ts_copy(&blocked, &nchw, NULL, &err), &err);
  ts_layout_format(&blocked.layout, text, sizeof text);
  printf("2. reordered to NCHW16c in one pass: %s\n", text);
  bool ok = true, pad_ok = true;
  for (int64_t n = 0; n < 2; n++)
    for (int64_t c = 0; c < 32; c++)
      for (int64_t h = 0; h < 5; h++)
        for (int64_t w = 0; w < 7; w++) {
          int64_t idx[4] = {n, c, h, w};
          float v;
          memcpy(&v, (char *)blocked.data + ts_layout_address(&blocked.layout, idx), 4);
          if (c < 20)
            ok &= v == value(n, c, h, w);
          else
            pad_ok &= v == 0.0f;
        }
  check(ok, "every element at its blocked address");
  check(pad_ok, "the padded channels 20..31 zero-filled");

  ts_tensor nhwc = alloc_tensor(TS_F32, 4, shape, "acdb");
  must(ts_copy(&nhwc, &blocked, NULL, &err), &err);
  printf("3. NCHW16c -> NHWC straight from the blocked layout\n");
  ok = true;
  p = nhwc.data;
  for (int64_t n = 0, i = 0; n < 2; n++)
    for (int64_t h = 0; h < 5; h++)
      for (int64_t w = 0; w < 7; w++)
        for (int64_t c = 0; c < 20; c++)
          ok &= p[i++] == value(n, c, h, w);
  check(ok, "NHWC holds the same values, channels innermost");

  ts_tensor bf = alloc_tensor(TS_BF16, 4, shape, "abcd");
  must(ts_copy(&bf, &nhwc, NULL, &err), &err);
  printf("4. NHWC f32 -> NCHW bf16 (round to nearest even)\n");
  ok = true;
  uint16_t *b = bf.data;
  for (int64_t i = 0; i < ts_layout_numel(&bf.layout); i++)
    ok &= b[i] == ts_f32_to_bf16(((float *)nchw.data)[i]);
  check(ok, "every bf16 the correctly rounded f32 value");

  int64_t box_start[4] = {1, 4, 1, 2}, box[4] = {1, 12, 3, 4};
  ts_tensor cut = alloc_tensor(TS_F32, 4, box, "abcd");
  must(ts_copy_box(&cut, NULL, &blocked, box_start, box, NULL, &err), &err);
  printf("5. a [1,12,3,4] box cut at [1,4,1,2] out of the blocked tensor\n");
  ok = true;
  p = cut.data;
  for (int64_t c = 0, i = 0; c < 12; c++)
    for (int64_t h = 0; h < 3; h++)
      for (int64_t w = 0; w < 4; w++)
        ok &= p[i++] == value(1, 4 + c, 1 + h, 2 + w);
  check(ok, "the box holds exactly that region");

  printf("6. einsum bij,bjk->bik with backward through the transpose cache\n");
  int64_t sa[3] = {4, 8, 6}, sb[3] = {4, 6, 5}, so[3] = {4, 8, 5};
  ts_tensor A = alloc_tensor(TS_F64, 3, sa, "acb"), B = alloc_tensor(TS_F64, 3, sb, "abc"),
            O = alloc_tensor(TS_F64, 3, so, "abc"), R = alloc_tensor(TS_F64, 3, so, "abc");
  for (size_t i = 0; i < A.bytes / 8; i++)
    ((double *)A.data)[i] = sin((double)i);
  for (size_t i = 0; i < B.bytes / 8; i++)
    ((double *)B.data)[i] = cos((double)i);
  const ts_tensor *ops[2] = {&A, &B};
  const int nds[2] = {3, 3};
  const int64_t *shapes[2] = {sa, sb};
  ts_einsum_plan *plan = NULL;
  ts_einsum_cache *cache = NULL;
  must(ts_einsum_plan_create(&plan, "bij,bjk->bik", 2, nds, shapes, TS_F64, NULL, &err), &err);
  must(ts_einsum_cache_create(&cache, &err), &err);
  must(ts_einsum_execute(plan, &O, ops, cache, &err), &err);
  must(ts_einsum_reference("bij,bjk->bik", 2, ops, &R, &err), &err);
  double maxdiff = 0;
  for (size_t i = 0; i < O.bytes / 8; i++)
    maxdiff = fmax(maxdiff, fabs(((double *)O.data)[i] - ((double *)R.data)[i]));
  check(maxdiff < 1e-12, "forward equals the nested-loop reference");
  ts_tensor dA = alloc_tensor(TS_F64, 3, sa, "abc"), dB = alloc_tensor(TS_F64, 3, sb, "abc");
  ts_tensor rA = alloc_tensor(TS_F64, 3, sa, "abc"), rB = alloc_tensor(TS_F64, 3, sb, "abc");
  const ts_tensor *grads[2] = {&dA, &dB}, *rgrads[2] = {&rA, &rB};
  ts_einsum_stats before, after;
  ts_einsum_stats_get(&before);
  must(ts_einsum_backward(plan, &R, ops, grads, cache, &err), &err);
  ts_einsum_stats_get(&after);
  must(ts_einsum_reference_backward("bij,bjk->bik", 2, ops, &R, rgrads, &err), &err);
  maxdiff = 0;
  for (size_t i = 0; i < dA.bytes / 8; i++)
    maxdiff = fmax(maxdiff, fabs(((double *)dA.data)[i] - ((double *)rA.data)[i]));
  for (size_t i = 0; i < dB.bytes / 8; i++)
    maxdiff = fmax(maxdiff, fabs(((double *)dB.data)[i] - ((double *)rB.data)[i]));
  check(maxdiff < 1e-12, "gradients equal the reference gradients");
  printf("  operand transposes launched by backward: %llu\n",
         (unsigned long long)(after.operand_transposes - before.operand_transposes));
  check(after.operand_transposes == before.operand_transposes,
        "backward reused the cached transposes of A and B");

  ts_einsum_cache_destroy(&cache);
  ts_einsum_plan_destroy(&plan);
  ts_tensor *all[] = {&nchw, &blocked, &nhwc, &bf, &cut, &A, &B, &O, &R, &dA, &dB, &rA, &rB};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    free(all[i]->data);
  printf("\n%s: %d failed checks\n", failures ? "FAILED" : "all checks passed", failures);
  return failures ? 1 : 0;
}
