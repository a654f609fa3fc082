/* einsum_internal.h - what the einsum files (einsum_*.c) share and nobody else sees: the parsed
 * equation, the plan with its pairwise steps, the cache, and the helpers that move data.
 *
 * Labels are small integers: 0..25 for 'a'..'z', 26..51 for 'A'..'Z' and 52 + k for the dim k
 * places from the right inside "..." (so ellipsis dims of different operands line up as numpy's
 * broadcasting does). At most 60 labels exist, so a label set is a 64-bit mask. */
#ifndef TS_EINSUM_INTERNAL_H
#define TS_EINSUM_INTERNAL_H

#include <pthread.h>

#include "ts_kernels.h"
#include "ts_pool.h" /* the workspaces and caches: ts_buffer_alloc */

#define TS__EIN_ELL 52                           /* first ellipsis label */
#define TS__EIN_MAXL (TS__EIN_ELL + TS_MAX_DIMS) /* labels in all */

typedef uint64_t ts__ein_set;

/* The equation after parsing, checked against the shapes. */
typedef struct ts__ein_parsed {
  int n;                                           /* operands */
  int ndim[TS_EINSUM_MAX_OPERANDS];                /* dims of each operand */
  int8_t lab[TS_EINSUM_MAX_OPERANDS][TS_MAX_DIMS]; /* label of each operand dim */
  int64_t shape[TS_EINSUM_MAX_OPERANDS][TS_MAX_DIMS];
  int out_ndim;
  int8_t out_lab[TS_MAX_DIMS];
  int64_t size[TS__EIN_MAXL]; /* size of each label (the broadcast size), -1 when unused */
  ts__ein_set out_set;
} ts__ein_parsed;

/* Parses equation for n operands of the given shapes (shapes may be NULL to check the text only;
 * then sizes stay unknown). */
int ts__ein_parse(ts__ein_parsed *pe, const char *equation, int n, const int *ndims,
                  const int64_t *const *shapes, ts_error *err);
/* Label as text: 'a', 'Z', or "..."-dim number as '0'+k. */
char ts__ein_label_char(int label);

/* A tensor of the path: an operand (as its diagonal/broadcast view: one dim per distinct label)
 * or an intermediate result, by its labels in storage order. */
typedef struct ts__ein_node {
  int nd;
  int8_t lab[TS__EIN_MAXL];
  ts__ein_set set;
  double numel;
} ts__ein_node;

/* Label classes of one pairwise step, each in the canonical order that every layout of the step
 * (A', B', C', dC') uses. */
enum { TS__G_ABO, TS__G_AO, TS__G_BO, TS__G_AB, TS__G_RA, TS__G_RB, TS__G_COUNT };

typedef struct ts__ein_step {
  int x, y, result; /* node indices: x is A, y is B */
  int ng[TS__G_COUNT];
  int8_t g[TS__G_COUNT][TS__EIN_MAXL];
  int64_t batch, m, n, k;      /* products of the ABO, AO, BO, AB sizes */
  int64_t bsize[TS__EIN_MAXL]; /* size of each ABO label, in order */
} ts__ein_step;

struct ts_einsum_plan {
  uint64_t id; /* unique per plan made in this process: a cache knows its plan by it */
  /* The plan's workspace: the cache of calls made without one (their transposed operands and
   * intermediates), kept across calls so that repeated calls allocate nothing and take no page
   * faults. One call at a time holds it (ws_lock, taken with a try-lock); a concurrent call uses
   * a cache of its own for that call. The only mutable part of a plan. */
  pthread_mutex_t ws_lock;
  ts_einsum_cache *ws;
  ts__ein_parsed pe;
  ts_dtype dtype; /* of operands and output */
  ts_dtype cdt;   /* computing dtype: f32, f64, i32 or i64 */
  ts_einsum_opts opts;
  bool empty;  /* some label has size 0: output and gradients are zeros */
  int n_nodes; /* n operands + n - 1 intermediates */
  ts__ein_node node[2 * TS_EINSUM_MAX_OPERANDS];
  int n_steps;
  ts__ein_step step[TS_EINSUM_MAX_OPERANDS];
  double flops;
};

/* Chooses the pairwise order: fills p->step[] (x, y, result) and the intermediate nodes. */
int ts__ein_path(ts_einsum_plan *p, ts_error *err);
/* Classifies the labels of each step (after ts__ein_path). */
void ts__ein_classify(ts_einsum_plan *p);

/* A strided view: one dim per label, strides in elements, base = address of element 0. */
typedef struct ts__ein_view {
  char *base;
  ts_dtype dt;
  int nd;
  int8_t lab[TS__EIN_MAXL];
  int64_t size[TS__EIN_MAXL];
  int64_t stride[TS__EIN_MAXL];
} ts__ein_view;

/* A matrix per batch element as CBLAS reads it. The batch is the step's ABO labels, each with its
 * own stride (so batch labels need not be contiguous, nor outermost). */
typedef struct ts__ein_mat {
  char *base;
  int64_t rs, cs; /* row and column strides in elements */
  int64_t rows, cols;
  int64_t bstride[TS__EIN_MAXL]; /* per ABO label of the step */
} ts__ein_mat;

/* One GEMM operand of a step as the forward brought it: a buffer the cache owns, or (owned ==
 * NULL) the operand or intermediate itself, read in place. */
typedef struct ts__ein_gop {
  char *owned;
  ts__ein_mat mat;
} ts__ein_gop;

typedef struct ts__ein_step_cache {
  ts__ein_gop a, b;
  char *result; /* intermediate result, dense in [ABO, AO, BO] order (NULL for the last step) */
} ts__ein_step_cache;

struct ts_einsum_cache {
  const ts_einsum_plan *plan; /* the plan of the forward call that filled it; NULL when empty */
  uint64_t plan_id;           /* and its id (a new plan may reuse a freed plan's address) */
  /* the operands it was made from: buffer and view (another view of the same buffer is another
   * operand) */
  const void *operand_data[TS_EINSUM_MAX_OPERANDS];
  ts_layout operand_layout[TS_EINSUM_MAX_OPERANDS];
  int n_steps;
  ts__ein_step_cache step[TS_EINSUM_MAX_OPERANDS];
  size_t bytes;
  bool retain; /* a plan's workspace: a buffer a call does not need is kept for the next one */
};

/* Frees the buffers a cache holds and marks it empty. */
void ts__ein_cache_clear(ts_einsum_cache *c);
/* A cache for a call made without one: the plan's workspace when no other call holds it, else
 * *local (emptied). ts__ein_scratch_release gives it back (a local one is cleared). */
ts_einsum_cache *ts__ein_scratch_acquire(const ts_einsum_plan *p, ts_einsum_cache *local);
void ts__ein_scratch_release(const ts_einsum_plan *p, ts_einsum_cache *c);

/* The forward pass; out NULL runs everything but the last GEMM (to fill a cache for backward).
 * A cache last filled by the same plan keeps its buffers: they are overwritten, not reallocated
 * (a training loop pays no allocation and no page faults per call). keep: c is the caller's
 * cache, which backward will read again any number of times, so operands whose in-place reads
 * are slow are gathered into it instead (the cost rule in einsum_exec.c). */
int ts__ein_forward(const ts_einsum_plan *p, const ts_tensor *out, const ts_tensor *const *operands,
                    ts_einsum_cache *c, bool keep, ts_error *err);

/* The view of node (operand or intermediate held by cache c) over its labels. */
void ts__ein_node_view(const ts_einsum_plan *p, int node, const ts_tensor *const *operands,
                       const ts_einsum_cache *c, ts__ein_view *v);
/* Dense row-major view over labels lab[0..nd-1] with the plan's sizes. */
void ts__ein_dense_view(const ts_einsum_plan *p, ts__ein_view *v, char *base, ts_dtype dt, int nd,
                        const int8_t *lab);
/* An output-shaped tensor (output, grad_out) as a view over the output labels. */
void ts__ein_out_view(const ts_einsum_plan *p, const ts_tensor *t, ts__ein_view *v);
/* Reads v as a batch of matrices over three label groups (batch, rows, columns): false when it is
 * not one BLAS-readable matrix per batch element (rows and columns each one stride, one of them
 * 1). Batch labels may have any strides. */
bool ts__ein_as_matrix(const ts__ein_view *v, int nb, const int8_t *bl, int nr, const int8_t *rl,
                       int nc, const int8_t *cl, ts__ein_mat *m);
/* True when v's unit-stride dim carries a label of group: that group should go innermost in a
 * copy of v, the cheaper transpose. */
bool ts__ein_unit_stride_in(const ts__ein_view *v, int n, const int8_t *group);
/* Checks operands[0..n-1] against the plan. */
int ts__ein_check_operands(const ts_einsum_plan *p, const ts_tensor *const *operands,
                           ts_error *err);

/* Data movement shared by forward and backward (einsum_move.c). */
enum { TS__CNT_OPERAND, TS__CNT_GRAD_OUT, TS__CNT_RESULT, TS__CNT_GEMM, TS__CNT_CHUNKED };
void ts__ein_count(int which);

/* Copies src to dst (same sizes per dim, dims in the same order), converting dtypes, through the
 * strided-copy kernel; dims are fused first and, past TS_MAX_DIMS, looped over. */
int ts__ein_copy(const ts__ein_view *dst, const ts__ein_view *src, ts_error *err);
/* dst = sum over the trailing src->nd - dst->nd dims of src (the leading dims match dst's). */
int ts__ein_reduce_copy(const ts__ein_view *dst, const ts__ein_view *src, ts_dtype cdt,
                        ts_error *err);
/* Writes zeros through a view. */
int ts__ein_zero(const ts__ein_view *v, ts_error *err);
/* The view of an operand tensor with one dim per distinct label of operand i: repeated labels
 * give the diagonal (strides added), dims of size 1 under a larger label size get stride 0. */
void ts__ein_operand_view(const ts_einsum_plan *p, int i, const ts_tensor *t, ts__ein_view *v);
/* The dims of a tensor view in the order of labels lab[0..nd-1] (each present in v). */
void ts__ein_view_select(ts__ein_view *dst, const ts__ein_view *v, int nd, const int8_t *lab);
/* Fuses dims of v (in their order) into one (size, stride) when they are contiguous among
 * themselves; false when they are not. Size-1 dims are ignored; no dims give (1, 0). */
bool ts__ein_fuse(const ts__ein_view *v, int first, int count, int64_t *size, int64_t *stride);
/* Normalizes a matrix for CBLAS (row-major): *trans and *ld; false when CBLAS cannot read it. */
bool ts__ein_mat_blas(const ts__ein_mat *m, bool *trans, int64_t *ld);
/* A dense buffer as the matrices of step s: [ABO][rows][cols], or [ABO][cols][rows] when
 * rows_inner. */
void ts__ein_dense_mat(const ts__ein_step *s, ts__ein_mat *m, char *base, int64_t rows,
                       int64_t cols, bool rows_inner);
/* C = A * B for every batch element (nb batch labels of sizes bsize), in dtype cdt (f32/f64
 * CBLAS, i32/i64 loops). */
int ts__ein_gemm(ts_dtype cdt, int nb, const int64_t *bsize, const ts__ein_mat *c,
                 const ts__ein_mat *a, const ts__ein_mat *b, int64_t k, ts_error *err);
/* A tensor's dtype, shape and plain layout checked against what the plan expects. */
int ts__ein_check_tensor(const ts_tensor *t, ts_dtype dt, int ndim, const int64_t *shape,
                         const char *what, int index, bool writable, ts_error *err);

#endif
