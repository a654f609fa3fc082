/* ts_program.h - the public header of libtsprogram: small tensor programs written as JSON text
 * (program/PROGRAM.md), compiled ahead of time to C, built with the system C compiler into a
 * shared object, cached on disk and run on local buffers.
 *
 * A program is parsed, verified (shapes, dtypes) and optimized once (tsp_program_create); each
 * bucket (one value per dynamic dim group) is a separate static build made on demand or ahead
 * (tsp_program_build). A run picks the smallest bucket covering its inputs' shapes, pads the
 * inputs into it, runs the compiled kernel and cuts the outputs back to their true shapes with the
 * output shape formulas. Nothing here calls MPI: the daemon runs a program on each rank's local
 * slices. A program object serializes its runs (one mutex); separate objects run in parallel. */
#ifndef TS_PROGRAM_H
#define TS_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ts_kernels.h"
#include "ts_pool.h" /* outputs are the pool's buffers (ts_pool_free) */
#include "tshard_errors.h"

#define TSP_MAX_DIMS 8
#define TSP_MAX_GROUPS 8
#define TSP_MAX_BUCKETS 256
#define TSP_NAME_MAX 63 /* the longest name in a program */

typedef struct tsp_program tsp_program;

/* The rule every name in a program follows (the program's, dim groups', inputs', results',
 * references, dtypes, op names): 1 to TSP_NAME_MAX characters from letters, digits, '_', '-' and
 * '.', the first a letter or '_'. TS_OK, or TS_PARSE naming `field` (e.g. "inputs[2].name"), the
 * first bad character and its position, and the rule; the string itself is not echoed. */
int tsp_name_check(const char *field, const char *s, ts_error *err);

/* Build options. Every field may be 0/NULL for the default. */
typedef struct tsp_options {
  const char *cache_dir;    /* default: $TSHARD_PROGRAM_CACHE, else $XDG_CACHE_HOME/tshard/programs,
                               else $HOME/.cache/tshard/programs, else
                               $XDG_RUNTIME_DIR/tshard/programs, else /tmp/tshard-<uid>/programs;
                               it must be owned by this user and not writable by others (build.c) */
  const char *cc;           /* default: $TSHARD_PROGRAM_CC, else "gcc" */
  const char *cflags;       /* default: TSP_DEFAULT_CFLAGS */
  const char *extra_cflags; /* appended to cflags (and part of the cache key) */
  bool lazy; /* true: buckets are built on first use; false: tsp_program_create builds all */
} tsp_options;

#define TSP_DEFAULT_CFLAGS "-O3 -march=native -fopenmp -fPIC -shared -fno-math-errno"

/* A dense row-major tensor given to or returned by a run. */
typedef struct tsp_tensor {
  void *data;
  ts_dtype dtype;
  int ndim;
  int64_t shape[TSP_MAX_DIMS];
} tsp_tensor;

/* Parses, verifies and optimizes `text`; with opts->lazy false also builds every bucket. Errors:
 * TS_PARSE (malformed JSON or program, with the place), TS_BAD_SHAPE / TS_BAD_DTYPE (verification,
 * naming the op), TS_UNSUPPORTED (a program that cannot be bucketed, with the reason),
 * TS_PROGRAM_COMPILE (the C compiler failed: its message), TS_IO / TS_AUTH (the cache directory
 * cannot be made, or is not private: its path, owner and mode). */
int tsp_program_create(tsp_program **out, const char *text, const tsp_options *opts, ts_error *err);
void tsp_program_destroy(tsp_program *p); /* accepts NULL */

/* Builds bucket b (or every bucket when b < 0): from the disk cache when there, else compiled. */
int tsp_program_build(tsp_program *p, int b, ts_error *err);

/* Inputs in the program's order; their shapes give the dynamic dims' values. Outputs: n_out
 * entries filled with data from the buffer pool (free with ts_pool_free) and their true shapes.
 * Assigned inputs are updated in place. Outputs, padded bucket copies and the bucket's work buffer
 * come from the buffer pool, so a configured memory limit refuses them (TS_LIMIT naming the
 * buffer, its bytes and the limit) before anything is allocated. */
int tsp_program_run(tsp_program *p, tsp_tensor *inputs, int n_in, tsp_tensor *outputs, int n_out,
                    ts_error *err);

/* Checks that these inputs bind (dtypes, dims, ranges) and builds their bucket: what a run could
 * refuse, without running. */
int tsp_program_prepare(tsp_program *p, const tsp_tensor *inputs, int n_in, ts_error *err);

/* The bucket a run with these dims' values (one per group, in group order) would use; -1 and an
 * error when out of range. */
int tsp_program_pick_bucket(const tsp_program *p, const int64_t *values, ts_error *err);

/* Description of the interface. */
int tsp_program_n_inputs(const tsp_program *p);
int tsp_program_n_outputs(const tsp_program *p);
const char *tsp_program_input_name(const tsp_program *p, int i);
const char *tsp_program_output_name(const tsp_program *p, int i);
ts_dtype tsp_program_input_dtype(const tsp_program *p, int i);
ts_dtype tsp_program_output_dtype(const tsp_program *p, int i);
int tsp_program_input_ndim(const tsp_program *p, int i);
int tsp_program_output_ndim(const tsp_program *p, int i);
bool tsp_program_input_assigned(const tsp_program *p, int i); /* updated in place by the program */
/* The output's shape for these inputs' shapes (the output shape formulas). */
int tsp_program_output_shape(const tsp_program *p, const tsp_tensor *inputs, int n_in, int k,
                             int64_t *shape, ts_error *err);
/* Output dim d's formula as text ("n", "2*n", "n-3", "16"). */
int tsp_program_output_formula(const tsp_program *p, int k, int d, char *buf, size_t cap);
/* Input i's dim d as text: a static size ("50") or its group or formula ("n"). */
int tsp_program_input_formula(const tsp_program *p, int i, int d, char *buf, size_t cap);
#define TSP_FORMULA_TEXT 128 /* room for any dim formula's text */

int tsp_program_n_buckets(const tsp_program *p);
int tsp_program_n_groups(const tsp_program *p);
const char *tsp_program_group_name(const tsp_program *p, int g);
void tsp_program_bucket_values(const tsp_program *p, int b, int64_t *values);
bool tsp_program_bucket_built(const tsp_program *p, int b);

typedef struct tsp_stats {
  int64_t compiles;   /* C compiler runs */
  int64_t cache_hits; /* builds served by the disk cache */
  int64_t
      cache_refused; /* cached objects that failed a check (owner, mode, hash): compiled again */
  int64_t runs;
  double compile_ms; /* time in the compiler, summed */
} tsp_stats;
void tsp_program_stats(const tsp_program *p, tsp_stats *out);

/* The C source of bucket b (malloc'd, NUL-terminated; free()). */
int tsp_program_source(tsp_program *p, int b, char **text, ts_error *err);
/* A readable report: the graph after optimization, the fused kernels, buckets, padding decisions,
 * the pool plan of bucket 0 and the cache (malloc'd; free()). */
int tsp_program_show(tsp_program *p, char **text, ts_error *err);
/* A short report: interface, kernels, dim groups, buckets built (and how the others get built),
 * the cache (malloc'd; free()). What a compile prints by default. */
int tsp_program_summary(tsp_program *p, char **text, ts_error *err);
/* The cache file path of bucket b (after a build). */
const char *tsp_program_cache_path(const tsp_program *p, int b);

/* Placement check: the program runs SPMD on every rank's local slices; this says whether that
 * computes the right thing for the inputs' distributed attributes, and the attributes of the
 * outputs. A placement per tensor: for each tensor dim the mesh dims that split it (bit m = mesh
 * dim m), and the mesh dims whose values are partial (with their reduce op). Elementwise ops need
 * equal splits on every dim they do not broadcast; a reduction over a split dim gives a Partial
 * result (sum, max, min; a mean over a split dim is refused); an einsum needs each label split
 * alike in every operand, a split contracted label gives Partial(sum); a transpose permutes the
 * splits; a reshape keeps only a split first dim; an assign needs the target's placement.
 * Anything else fails with TS_PROGRAM_PLACEMENT naming the op and suggesting the reshard. */
typedef enum { TSP_PARTIAL_SUM = 0, TSP_PARTIAL_MAX = 1, TSP_PARTIAL_MIN = 2 } tsp_partial_op;
typedef struct tsp_placement {
  uint32_t split[TSP_MAX_DIMS]; /* per tensor dim: mesh dims splitting it */
  uint32_t partial;             /* mesh dims holding partial values */
  tsp_partial_op partial_op;
} tsp_placement;
int tsp_program_placement(const tsp_program *p, const tsp_placement *inputs, int n_in,
                          tsp_placement *outputs, int n_out, ts_error *err);
/* The same check, its refusals in the caller's words: labels[i] names what input i is bound to
 * (a stored tensor: "reshard 'gcol' ..."), attrs[i] the text of its placement (the reshard's
 * target: "reshard 'gcol' to mesh=[4]@0-3 placements=[S(0)]"); either array, or any entry, may
 * be NULL (then the program's input names and "the placement of ..."). A refusal names the
 * values involved with the input each is computed from. */
int tsp_program_placement_named(const tsp_program *p, const tsp_placement *inputs,
                                const char *const *labels, const char *const *attrs, int n_in,
                                tsp_placement *outputs, int n_out, ts_error *err);

#endif
