/* test_einsum_util.h - what the einsum tests share: a deterministic generator, tensors with
 * plain (dense, column-major or padded) layouts, random equations, and comparison with a
 * tolerance per dtype. */
#ifndef TEST_EINSUM_UTIL_H
#define TEST_EINSUM_UTIL_H

#include "ts_kernels.h"

typedef struct rng {
  uint64_t s;
} rng;

uint64_t rng_next(rng *r);
int rng_int(rng *r, int lo, int hi); /* uniform in [lo, hi] */

/* How a test tensor is laid out in its buffer: row-major, column-major, row-major with a gap
 * after every row of every dim and an offset, or row-major with the last dim reversed (a
 * negative stride). */
typedef enum { TL_DENSE, TL_COLUMN_MAJOR, TL_PADDED, TL_REVERSED, TL_COUNT } test_layout;

typedef struct test_tensor {
  ts_tensor t;
  void *buf;
} test_tensor;

/* Allocates a tensor of the given shape and layout kind (zero-filled). */
void tt_alloc(test_tensor *tt, ts_dtype dt, int nd, const int64_t *shape, test_layout kind);
void tt_free(test_tensor *tt);
/* Fills with k/8, k in [-8, 8] (exact in every float dtype), or integers in [-3, 3]. */
void tt_fill(test_tensor *tt, rng *r);
double tt_get(const test_tensor *tt, const int64_t *idx); /* element as double */
void tt_set(test_tensor *tt, const int64_t *idx, double v);
int64_t tt_numel(const test_tensor *tt);
/* Element e in row-major order as an index. */
void tt_index(const test_tensor *tt, int64_t e, int64_t *idx);
/* Largest |a - b| beyond tolerance, 0 when all match; *where gets the element number. */
double tt_compare(const test_tensor *got, const test_tensor *want, int64_t *where);

/* A random einsum problem. */
typedef struct rand_case {
  char eq[256];
  int n;
  int ndim[TS_EINSUM_MAX_OPERANDS];
  int64_t shape[TS_EINSUM_MAX_OPERANDS][TS_MAX_DIMS];
  ts_dtype dt;
} rand_case;

/* Makes a random case (1..max_ops operands, ellipsis, broadcasting, diagonals, reductions,
 * scalars) whose reference loop stays below max_work label assignments. */
void rand_case_make(rand_case *c, rng *r, int max_ops, ts_dtype dt, double max_work);

#endif
