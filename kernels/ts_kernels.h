/* ts_kernels.h - the public header of libtskernels: dtypes, layouts of a local slice, the
 * strided-copy kernel, reductions and einsum.
 *
 * Pure C over BLAS: nothing here calls MPI or does I/O. The resharding engine (shard/) and the
 * daemon's local compute use these kernels; every fast kernel has a naive reference beside it that
 * the tests compare it with. Their buffers come from the buffer pool (kernels/pool/, ts_pool.h). */
#ifndef TS_KERNELS_H
#define TS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tshard_errors.h"

/* ---------------------------------------------------------------------------------------------
 * dtypes */

#define TS_DTYPE_LIST(X)                                                                           \
  X(F32, "f32", 4, 1)                                                                              \
  X(F64, "f64", 8, 1)                                                                              \
  X(F16, "f16", 2, 1)                                                                              \
  X(BF16, "bf16", 2, 1)                                                                            \
  X(I8, "i8", 1, 0)                                                                                \
  X(I32, "i32", 4, 0)                                                                              \
  X(I64, "i64", 8, 0)                                                                              \
  X(U8, "u8", 1, 0)                                                                                \
  X(BOOL, "bool", 1, 0)                                                                            \
  X(I16, "i16", 2, 0)                                                                              \
  X(U16, "u16", 2, 0)                                                                              \
  X(U32, "u32", 4, 0)                                                                              \
  X(U64, "u64", 8, 0)                                                                              \
  X(F8_E4M3, "f8_e4m3", 1, 1)                                                                      \
  X(F8_E5M2, "f8_e5m2", 1, 1)                                                                      \
  X(C64, "c64", 8, 0)                                                                              \
  X(C128, "c128", 16, 0)
/* The names, in order, for the messages that list them. */
#define TS_DTYPE_NAMES                                                                             \
  "f32, f64, f16, bf16, i8, i32, i64, u8, bool, i16, u16, u32, u64, f8_e4m3, f8_e5m2, c64, c128"

typedef enum {
#define TS_X_DT(name, text, size, isfloat) TS_##name,
  TS_DTYPE_LIST(TS_X_DT)
#undef TS_X_DT
      TS_DTYPE_COUNT
} ts_dtype;

bool ts_dtype_valid(int dtype);
size_t ts_dtype_size(ts_dtype dt); /* bytes per element; 0 for an invalid dtype */
/* The greatest common divisor of two non-negative integers (0 when both are 0). */
int64_t ts_gcd64(int64_t a, int64_t b);
bool ts_dtype_is_float(ts_dtype dt); /* f32, f64, f16, bf16, f8_e4m3, f8_e5m2 (real floats) */
/* c64 (two f32: real, imaginary; numpy's complex64) and c128 (two f64; complex128). */
bool ts_dtype_is_complex(ts_dtype dt);
const char *ts_dtype_name(ts_dtype dt); /* "f32"...; "invalid" for an invalid dtype */
/* A shape as "[4,5]" (cut at cap), for messages. */
void ts_shape_text(int ndim, const int64_t *shape, char *buf, size_t cap);
/* Parses "f32", "bf16", ... ; on failure the error lists the valid names. */
int ts_dtype_parse(const char *text, ts_dtype *out, ts_error *err);
/* The one table of the spellings users may write for a dtype (the CLI's --dtype; the Python
 * package accepts the same): the names above and numpy's and PyTorch's, e.g. f32, float32,
 * bf16, bfloat16, u8, uint8. On failure the error lists every spelling. */
int ts_dtype_parse_spelling(const char *text, ts_dtype *out, ts_error *err);

/* Scalar conversions, round to nearest even, NaN kept NaN, overflow to infinity. */
float ts_f16_to_f32(uint16_t h);
uint16_t ts_f32_to_f16(float f);
uint16_t ts_f64_to_f16(double d);
float ts_bf16_to_f32(uint16_t b);
uint16_t ts_f32_to_bf16(float f);
uint16_t ts_f64_to_bf16(double d);
/* The two 8-bit floats of safetensors and PyTorch. f8_e4m3 is E4M3FN (bias 7, 3 mantissa bits):
 * no infinities, 0x7F and 0xFF are NaN, the largest finite is 448; a value that rounds beyond it,
 * and an infinity, become NaN. f8_e5m2 (bias 15, 2 mantissa bits) is IEEE-like: the largest
 * finite is 57344, overflow gives infinity. */
float ts_f8_e4m3_to_f32(uint8_t b);
uint8_t ts_f32_to_f8_e4m3(float f);
uint8_t ts_f64_to_f8_e4m3(double d);
float ts_f8_e5m2_to_f32(uint8_t b);
uint8_t ts_f32_to_f8_e5m2(float f);
uint8_t ts_f64_to_f8_e5m2(double d);

/* Converts n contiguous elements (fast paths for the common pairs). Float to integer truncates
 * toward zero and saturates (NaN gives 0); integer to integer wraps like a C cast to unsigned.
 * To bool: nonzero (NaN included) gives 1, as numpy's astype(bool); from bool: 0 or 1. A real
 * dtype to c64 or c128 converts the value to the real part (as to f32 or f64), imaginary part 0;
 * c64 and c128 convert part by part. There is no conversion from a complex dtype to a real one
 * (it would discard the imaginary part): ts_convert leaves dst as it is and ts_convert_check
 * refuses it. */
void ts_convert(void *dst, ts_dtype dt_dst, const void *src, ts_dtype dt_src, size_t n);

/* Checks that n contiguous elements of dt_src keep their values when converted to dt_dst by
 * ts_convert, up to the target's rounding: an integer target must hold every value (floats
 * truncated toward zero; NaN and infinities have none), a bool target only 0 and 1, a float
 * target must not overflow a finite value to infinity (NaN and infinities stay what they are;
 * f8_e4m3 has no infinity, so an infinity is refused too; to c64 each part as to f32). A complex
 * source to a real target is refused whatever its values. TS_BAD_DTYPE naming both dtypes, the
 * first element that does not fit, its value and the target's range; TS_OK when all fit. */
int ts_convert_check(const void *src, ts_dtype dt_src, ts_dtype dt_dst, size_t n, ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * Layouts of a local slice
 *
 * A layout maps a logical index x (one per dim) to a byte address:
 *
 *   addr(x) = offset + esize * ( sum_d (x_d / B_d) * strides[d]  +  inner(x) )
 *
 * Plain (DLPack-like) layouts have n_inner == 0, so B_d == 1 and strides are the usual element
 * strides (any order, negative allowed, zero allowed for a read-only broadcast view).
 * Blocked (oneDNN-like) layouts split some dims further into inner blocks stored innermost:
 * inner_dim[k] / inner_size[k] for k = 0..n_inner-1, outermost block first (oneDNN's inner_idxs
 * and inner_blks). B_d is the product of the inner sizes of dim d; the digit of block k is
 * (x_d / product of the later inner sizes of the same dim) % inner_size[k], and inner(x) is those
 * digits as a row-major index over the inner blocks. A blocked dim is stored padded to a multiple
 * of B_d; the padded tail is zero-filled when the layout is a copy destination.
 *
 * Example: NCHW16c over shape [N,C,H,W] is inner_dim={1}, inner_size={16}, strides (in elements)
 * = {C16*H*W*16, H*W*16, W*16, 16} with C16 = ceil(C/16). ts_layout_from_tag builds these. */

#define TS_MAX_DIMS 8
#define TS_MAX_INNER 4

typedef struct ts_layout {
  ts_dtype dtype;
  int ndim;
  int64_t shape[TS_MAX_DIMS];   /* logical shape */
  int64_t strides[TS_MAX_DIMS]; /* element strides of the outer (per-block) index of each dim */
  int64_t offset;               /* bytes from the buffer start to the element at index 0 */
  int n_inner;                  /* 0 for a plain layout */
  int inner_dim[TS_MAX_INNER];
  int64_t inner_size[TS_MAX_INNER];
} ts_layout;

/* A buffer seen through a layout. bytes is the buffer's size, checked against the layout. */
typedef struct ts_tensor {
  void *data;
  size_t bytes;
  ts_layout layout;
} ts_tensor;

/* Dense row-major (C order) layout. */
int ts_layout_plain(ts_layout *l, ts_dtype dt, int ndim, const int64_t *shape, ts_error *err);

/* Dense layout from a format tag over dims a,b,c,... (dim 0 is 'a'), oneDNN style:
 *   "abcd"        row-major;          "acdb"        NHWC (channels last);
 *   "aBcd16b"     NCHW16c;            "ABcd4b16a4b" OIhw4i16o4i.
 * A letter gives the order of the outer dims (outermost first; every dim exactly once); upper
 * case marks a blocked dim; "<number><letter>" after them adds an inner block of that dim. */
int ts_layout_from_tag(ts_layout *l, ts_dtype dt, int ndim, const int64_t *shape, const char *tag,
                       ts_error *err);

/* Formats a layout as text ("f32[2,3] strides=[3,1] offset=0" or with "blocks=[1:16]"). */
int ts_layout_format(const ts_layout *l, char *buf, size_t cap);

bool ts_layout_is_blocked(const ts_layout *l);
/* B_d for dim d: the product of its inner block sizes (1 when not blocked). */
int64_t ts_layout_block(const ts_layout *l, int d);
/* The padded length of dim d: shape rounded up to a multiple of B_d. */
int64_t ts_layout_padded(const ts_layout *l, int d);
int64_t ts_layout_numel(const ts_layout *l); /* product of the logical shape */
/* Bytes a buffer needs to hold every addressable element (padding included), from offset 0. */
int ts_layout_span(const ts_layout *l, size_t *bytes, ts_error *err);
/* Byte address of a logical index (padded indices allowed), relative to the buffer start. */
int64_t ts_layout_address(const ts_layout *l, const int64_t *index);

/* Validates a layout: dtype, dims, sizes (negative or overflowing), inner blocks that do not fit,
 * a span outside the buffer of buf_bytes, a misaligned offset, and for a destination
 * (writable = true) strides that alias or are zero. */
int ts_layout_check(const ts_layout *l, size_t buf_bytes, bool writable, ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * The strided-copy kernel
 *
 * Copies between any two layouts of the same logical shape, converting dtypes, computing each
 * element's physical address from its logical coordinates, strides and blocks, so that no
 * reorder through a plain layout is ever needed. ts_copy_box copies the box of extent[] starting
 * at src_start in src to the box starting at dst_start in dst: concat and split are this. When
 * the destination box reaches the end of a blocked dim, the padded tail of that dim (within the
 * box's range on the other dims) is zero-filled. Source and destination must not overlap. */

typedef struct ts_copy_opts {
  int threads; /* 0: the process default (ts_kernels_set_threads; initially all cores) */
  /* Nothing reads the destination soon (a reshard's target, not a buffer sent right after):
   * same-dtype copies of TS_STREAM_MIN_BYTES or more may write it around the caches. */
  bool write_around;
} ts_copy_opts;

void ts_kernels_set_threads(int threads); /* <= 0 restores "all cores" */
int ts_kernels_threads(void);

int ts_copy(const ts_tensor *dst, const ts_tensor *src, const ts_copy_opts *opts, ts_error *err);
int ts_copy_box(const ts_tensor *dst, const int64_t *dst_start, const ts_tensor *src,
                const int64_t *src_start, const int64_t *extent, const ts_copy_opts *opts,
                ts_error *err);
/* Copies n bytes writing the destination's whole cache lines with non-temporal stores (plain
 * memcpy where the machine has none): for destinations larger than the caches keep, which
 * nothing reads right away. The stores are weakly ordered: ts_copy_stream_fence() after the
 * last of them, before another thread or process may read the bytes. ts_copy and ts_copy_box
 * take this way for same-dtype rows of copies of TS_STREAM_MIN_BYTES or more when
 * ts_copy_opts.write_around allows it. */
#define TS_STREAM_MIN_BYTES ((int64_t)256 * 1024)
#define TS_STREAM_MIN_RUN 256 /* and runs of at least this many bytes: 3 whole lines or more */
void ts_copy_stream(void *dst, const void *src, size_t n);
void ts_copy_stream_fence(void);

/* The naive reference: one full address computation per element, one thread. */
int ts_copy_box_reference(const ts_tensor *dst, const int64_t *dst_start, const ts_tensor *src,
                          const int64_t *src_start, const int64_t *extent, ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * Reductions (partial placements): dst[i] = op(dst[i], src[i]) over n contiguous elements.
 * f16 and bf16 reduce in f32; integer sums and products wrap; on bool, sum and max are "or", min
 * and prod are "and". avg combines like sum; once every contribution is summed, ts_reduce_finish
 * divides by their count (avg exists for the float and complex dtypes only). f8_e4m3 and f8_e5m2
 * have no reductions (TS_BAD_DTYPE naming the dtype). c64 and c128 have sum, avg and prod (the
 * complex product by numpy's formula, (ac-bd) + (ad+bc)i, without C99's infinity recovery, so NaN
 * and infinities come out as numpy's multiply gives them); max and min are refused (complex
 * numbers have no order). */

typedef enum {
  TS_REDUCE_SUM,
  TS_REDUCE_MAX,
  TS_REDUCE_MIN,
  TS_REDUCE_AVG,
  TS_REDUCE_PROD,
  TS_REDUCE_COUNT
} ts_reduce_op;

const char *ts_reduce_name(ts_reduce_op op); /* "sum", "max", "min", "avg", "prod" */
int ts_reduce_parse(const char *text, ts_reduce_op *out, ts_error *err);
/* TS_OK when op is a valid reduction of dt; otherwise the error says which dtypes and ops are. */
int ts_reduce_check(ts_dtype dt, ts_reduce_op op, ts_error *err);
int ts_reduce(void *dst, const void *src, size_t n, ts_dtype dt, ts_reduce_op op, ts_error *err);
/* The identity of op for dt (0, -inf / lowest, +inf / highest, 1), written n times; avg's is
 * sum's (0), the start of the sum it divides. */
int ts_reduce_fill_identity(void *dst, size_t n, ts_dtype dt, ts_reduce_op op, ts_error *err);
/* The last step of op over `count` summed contributions: avg divides each element by count
 * (f16 and bf16 in f32, rounded once); the other ops, and count 1, leave dst as it is. */
int ts_reduce_finish(void *dst, size_t n, ts_dtype dt, ts_reduce_op op, int64_t count,
                     ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * Einsum (kernels/einsum*.c) */

/* numpy's einsum: labels a-z A-Z, "..." broadcasting (size-1 dims broadcast, for named labels too),
 * implicit output (labels seen once, in ASCII order, "..." first) or explicit "->", a label
 * repeated in one operand takes the diagonal, a label absent from the output is summed. 1 to 32
 * operands of at most TS_MAX_DIMS dims, all of one dtype: f32 and f64 through CBLAS, i32 and i64
 * exactly (wrapping like unsigned arithmetic), f16 and bf16 computed in f32. u8 and i8 are refused.
 *
 * Operands, the output and gradients are ts_tensor views with plain (not blocked) layouts of any
 * strides; the output and gradients must not overlap the operands.
 *
 * How it computes: operands are contracted pairwise along a path (greedy by cost, or left to
 * right). For a pair A, B each label is batch (ABO: in A, B and the result), AO, BO, contracted
 * (AB) or reduced (one operand only: summed first). A is brought to [ABO, AO, AB] (or
 * [ABO, AB, AO]) and B to [ABO, AB, BO] (or [ABO, BO, AB]) with the strided-copy kernel, a batched
 * GEMM follows, and the result is moved to the output order. A transpose is skipped when the
 * operand already reads as a BLAS matrix per batch element (its row labels and its column labels
 * each fused into one stride, one of the two 1; batch labels may have any strides, the GEMM loop
 * walks them): CBLAS's transpose flags then stand in for the copy. Two exceptions, both for thin
 * GEMMs (small M and N, or small N and K, ...) over interleaved batch elements ([b,q,h,d] read per
 * (b,h)): the GEMM loop runs in chunks of the long dim, the whole batch per chunk, so each memory
 * region is consumed while cache-hot (the batch split over ts_kernels_threads() threads, each
 * CBLAS call small enough to stay on its thread; contiguous thin GEMMs too large for that are
 * chunked the same way); and when a cache is given, such an operand of at least
 * 1 MiB is gathered into the cache (whole rows moved), so that both backward products read it
 * contiguously.
 *
 * A plan (equation + shapes + dtype -> label classes, GEMM shapes, path) is made once and is
 * reusable, also from several threads at once; per-call state lives in the caller's cache, or,
 * for a call without one, in the plan's workspace: buffers kept from one call to the next (so
 * repeated calls allocate nothing), held by one call at a time (a concurrent call uses temporary
 * buffers), freed by ts_einsum_plan_destroy. */

#define TS_EINSUM_MAX_OPERANDS 32

typedef enum {
  TS_EINSUM_PATH_GREEDY = 0, /* opt_einsum-like greedy: least (result - inputs) size, then flops */
  TS_EINSUM_PATH_LEFT_TO_RIGHT = 1, /* ((op0 op1) op2) ...: the source design's order */
  TS_EINSUM_PATH_COUNT
} ts_einsum_path;

typedef struct ts_einsum_opts {
  ts_einsum_path path;
  /* true: always transpose operands physically, never read them in place through CBLAS flags
   * (for tests and comparisons; results are the same). */
  bool always_transpose;
} ts_einsum_opts;

typedef struct ts_einsum_plan ts_einsum_plan;

/* Parses and plans. shapes[i] holds ndims[i] sizes (ndims[i] <= TS_MAX_DIMS). opts may be NULL
 * (greedy path). On failure *out is NULL and err says what is wrong and where (unknown
 * character, which operand and dim has a mismatched size for which label, a label repeated in the
 * output, an output label absent from the inputs, the wrong number of operands, ...). */
int ts_einsum_plan_create(ts_einsum_plan **out, const char *equation, int n_operands,
                          const int *ndims, const int64_t *const *shapes, ts_dtype dtype,
                          const ts_einsum_opts *opts, ts_error *err);
void ts_einsum_plan_destroy(ts_einsum_plan **p); /* accepts NULL and *p == NULL; sets *p = NULL */

/* The output's dims and shape (shape holds TS_MAX_DIMS entries). */
void ts_einsum_plan_output(const ts_einsum_plan *p, int *ndim, int64_t *shape);
int ts_einsum_plan_n_operands(const ts_einsum_plan *p);
ts_dtype ts_einsum_plan_dtype(const ts_einsum_plan *p);
/* Multiply-adds x 2 summed over the pairwise steps (what the path optimizer minimizes). */
double ts_einsum_plan_flops(const ts_einsum_plan *p);
/* One line per step, e.g. "step 0: op0[ij] x op1[jk] -> t2[ik] batch=1 m=4 n=5 k=3" (none for one
 * operand); returns the length of the whole text, like snprintf. */
int ts_einsum_plan_format(const ts_einsum_plan *p, char *buf, size_t cap);

/* The transpose cache: what a forward call transposed (operands brought to GEMM layouts, and the
 * intermediates of an n-operand path), kept so that ts_einsum_backward launches no further
 * transpose of an operand. Owned by the caller; one cache serves one plan and one forward call at
 * a time (a later forward with the cache replaces its contents, reusing its buffers when the plan
 * is the same, so a training loop allocates nothing per step). Not shared between threads. */
typedef struct ts_einsum_cache ts_einsum_cache;

int ts_einsum_cache_create(ts_einsum_cache **out, ts_error *err);
void ts_einsum_cache_destroy(ts_einsum_cache **c);      /* accepts NULL; sets *c = NULL */
size_t ts_einsum_cache_bytes(const ts_einsum_cache *c); /* bytes held */

/* out = einsum(operands). operands[i] and out must have the plan's shapes and dtype. cache may be
 * NULL; when given, it is filled for ts_einsum_backward. */
int ts_einsum_execute(const ts_einsum_plan *p, const ts_tensor *out,
                      const ts_tensor *const *operands, ts_einsum_cache *cache, ts_error *err);

/* Gradients of sum(grad_out * einsum(operands)) with respect to each operand:
 * grad_operands[i] (NULL entries are skipped) gets the plan's shape i and dtype and is
 * overwritten. With the cache of a forward call on the same plan and the same operand buffers, no
 * operand is transposed again (only grad_out, once, and the gradients on their way back); with
 * cache NULL the operands are transposed (and an n-operand path's intermediates recomputed). */
int ts_einsum_backward(const ts_einsum_plan *p, const ts_tensor *grad_out,
                       const ts_tensor *const *operands, const ts_tensor *const *grad_operands,
                       ts_einsum_cache *cache, ts_error *err);

/* One call: plan, execute, destroy. */
int ts_einsum(const char *equation, int n_operands, const ts_tensor *const *operands,
              const ts_tensor *out, ts_error *err);

/* The naive references: one nested loop over every label value, f64 accumulation for floats
 * (wrapping 64-bit for integers). Slow; for tests. The backward reference computes each
 * gradient element as the sum over all label values of grad_out times the other operands. */
int ts_einsum_reference(const char *equation, int n_operands, const ts_tensor *const *operands,
                        const ts_tensor *out, ts_error *err);
int ts_einsum_reference_backward(const char *equation, int n_operands,
                                 const ts_tensor *const *operands, const ts_tensor *grad_out,
                                 const ts_tensor *const *grad_operands, ts_error *err);

/* Process-wide counters of the copy launches of the einsum engine (monotonic, thread-safe). */
typedef struct ts_einsum_stats {
  uint64_t operand_transposes;  /* an operand or intermediate brought to a GEMM layout */
  uint64_t grad_out_transposes; /* grad_out brought to the GEMM layout of the last step */
  uint64_t result_moves;        /* a result or gradient moved to its final order and layout */
  uint64_t gemm_calls;          /* batched GEMMs (one per pairwise step and direction) */
  uint64_t chunked_gemms; /* of those, thin GEMMs over interleaved batch elements run in chunks of
                             one long dim, the whole batch per chunk */
} ts_einsum_stats;

void ts_einsum_stats_get(ts_einsum_stats *out);

#endif
