/* ref.h - the tests' naive reference for programs: dense double tensors and one plain loop per op
 * (numpy broadcasting by index arithmetic, reductions, transpose), independent of the compiler. */
#ifndef TSP_TEST_REF_H
#define TSP_TEST_REF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ref_t {
  int ndim;
  int64_t shape[8];
  double *d;
} ref_t;

ref_t ref_new(int ndim, const int64_t *shape);
void ref_free(ref_t *t);
int64_t ref_numel(const ref_t *t);
/* op: "add" ... "ge", "where", "cast_i32" (truncate), "round_f32"; c may be NULL */
ref_t ref_elementwise(const char *op, const ref_t *a, const ref_t *b, const ref_t *c);
ref_t ref_reduce(const char *op, const ref_t *a, uint32_t axes, bool keepdims);
ref_t ref_transpose(const ref_t *a, const int *perm);
ref_t ref_scalar(double v);

#endif
