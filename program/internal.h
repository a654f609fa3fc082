/* internal.h - the compiler's shared types: the graph (nodes with symbolic shapes), the op table
 * entries, kernels (fused groups), per-bucket builds (locations, pool plan, loaded code) and the
 * functions each stage file offers. Stages: parse.c -> verify.c -> optimize.c -> (per bucket)
 * memplan.c -> emit.c (generators from the op table, vectors.c) -> build.c -> run.c. */
#ifndef TSP_INTERNAL_H
#define TSP_INTERNAL_H

#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>

#include "ts_program.h"

#define TSP_MAX_ARGS 8
#define TSP_NAME 64
#define TSP_EQ_MAX 127      /* the longest einsum equation */
#define TSP_FORMULA_MAX 127 /* the longest dim formula ("2*n-k+1") */
#define TSP_MAX_NODES 8192  /* the passes are at worst quadratic in this */

/* An affine dim: c + sum_g k[g] * value(group g). A static dim has every k zero. */
typedef struct tsp_expr {
  int64_t c;
  int64_t k[TSP_MAX_GROUPS];
} tsp_expr;

typedef enum {
  TSP_CAT_INPUT,
  TSP_CAT_CONST,
  TSP_CAT_ELEMENTWISE,
  TSP_CAT_REDUCE,
  TSP_CAT_EINSUM,
  TSP_CAT_LAYOUT,
  TSP_CAT_ASSIGN,
  TSP_CAT_COUNT
} tsp_category;

/* Op ids, in the order of the table in opmap.c. */
typedef enum {
  TSP_OP_INPUT,
  TSP_OP_CONST,
  TSP_OP_ADD,
  TSP_OP_SUB,
  TSP_OP_MUL,
  TSP_OP_DIV,
  TSP_OP_POW,
  TSP_OP_MAX,
  TSP_OP_MIN,
  TSP_OP_NEG,
  TSP_OP_ABS,
  TSP_OP_EXP,
  TSP_OP_LOG,
  TSP_OP_SQRT,
  TSP_OP_RSQRT,
  TSP_OP_TANH,
  TSP_OP_SIGMOID,
  TSP_OP_RELU,
  TSP_OP_GELU,
  TSP_OP_WHERE,
  TSP_OP_EQ,
  TSP_OP_NE,
  TSP_OP_LT,
  TSP_OP_LE,
  TSP_OP_GT,
  TSP_OP_GE,
  TSP_OP_CAST,
  TSP_OP_COPY,
  TSP_OP_SUM,
  TSP_OP_MEAN,
  TSP_OP_RMAX,
  TSP_OP_RMIN,
  TSP_OP_EINSUM,
  TSP_OP_RESHAPE,
  TSP_OP_TRANSPOSE,
  TSP_OP_SLICE,
  TSP_OP_WINDOW,
  TSP_OP_ASSIGN,
  TSP_OP_COUNT
} tsp_op_id;

typedef struct tsp_node {
  int op;
  char name[TSP_NAME]; /* the value's name in the program ("" for literals and inserted copies) */
  int nargs;
  int args[TSP_MAX_ARGS];
  ts_dtype dtype;
  int ndim;
  tsp_expr shape[TSP_MAX_DIMS];
  /* attributes */
  uint32_t axes; /* reductions: bit d set = reduce dim d of the operand */
  bool keepdims;
  int perm[TSP_MAX_DIMS];
  char eq[TSP_EQ_MAX + 1];    /* einsum equation */
  tsp_expr *slice;            /* slice: start[ndim], stop[ndim] of the operand's dims (malloc'd);
                                 window: slice[0] is the window's size, perm[0] its dim */
  int64_t step[TSP_MAX_DIMS]; /* slice: per operand dim, >= 1 */
  double value;               /* constants */
  int input_index;            /* inputs: position in the program's input list */
  /* analysis */
  bool live;
  int uses;         /* live consumers */
  int kernel;       /* kernel index, -1 for inputs, constants and views */
  bool local;       /* elementwise value kept in a register inside its kernel */
  int output_index; /* >= 0: written to output k */
  int assign_input; /* >= 0: also stored into this input (in place) */
  bool pad_known;   /* dynamic nodes: every padded element holds `pad` */
  double pad;
  bool masked; /* reductions: loop over the true extents of dynamic dims */
} tsp_node;

/* A kernel: one fused elementwise loop nest (members in order), or one reduction or einsum. */
typedef struct tsp_kernel {
  tsp_category cat;
  int n_members;
  int *members;
  int ndim;
  tsp_expr shape[TSP_MAX_DIMS];
} tsp_kernel;

/* A dynamic dim group: one range and one bucketing rule. */
typedef struct tsp_group {
  char name[TSP_NAME];
  int64_t min, max;
  char rule[96]; /* "pow2", "step 64", "list" (for show) */
  int n_values;
  int64_t values[64]; /* bucket values, ascending, the last >= max */
} tsp_group;

/* Where a node's values live in one bucket: an argument (inputs then outputs), the pool, a
 * register of its kernel or a literal; element offset and strides. */
typedef enum { TSP_LOC_NONE, TSP_LOC_ARG, TSP_LOC_POOL, TSP_LOC_LOCAL, TSP_LOC_CONST } tsp_loc_kind;
typedef struct tsp_loc {
  tsp_loc_kind kind;
  int index;      /* argument index; pool buffer id */
  int64_t offset; /* bytes (POOL base offset, set by the planner) */
  int64_t strides[TSP_MAX_DIMS];
  /* views into their base (slices): an element offset, view_off + sum_g view_sym[g] * sym[g]
   * (a start that depends on the dim groups takes the run's true values) */
  int64_t view_off;
  int64_t view_sym[TSP_MAX_GROUPS];
} tsp_loc;

typedef struct tsp_poolbuf {
  int node;
  size_t bytes;
  int first, last; /* kernel indices of its lifetime */
  int alias_of;    /* -1, or the buffer whose place it takes (in place) */
  size_t offset;
} tsp_poolbuf;

/* The environment a compiled kernel receives (the same struct is emitted into the C file). */
typedef int (*tsp_einsum_fn)(void *ctx, int node, void *const *args, char *pool,
                             const int64_t *sym);
typedef struct tsp_env {
  tsp_einsum_fn einsum;
  void *ctx;
} tsp_env;
typedef int (*tsp_main_fn)(void *const *args, char *pool, const int64_t *sym, const tsp_env *env);

typedef struct tsp_bucket {
  int64_t values[TSP_MAX_GROUPS];
  int64_t lo[TSP_MAX_GROUPS]; /* the smallest true value of each group this bucket serves */
  bool built;
  void *dl;
  tsp_main_fn fn;
  char path[512];
  char hash[40];
  bool from_cache;
  char cache_note[720]; /* why a cached object was refused (then compiled again) */
  /* the plan (memplan.c) */
  int64_t (*dims)[TSP_MAX_DIMS]; /* per node: concrete bucket shape */
  tsp_loc *locs;                 /* per node */
  int n_bufs;
  tsp_poolbuf *bufs;
  size_t pool_bytes;
  char *pool;
  ts_einsum_plan **plans; /* per node: static einsum plans (NULL when masked) */
  void *stage[128];       /* per argument: its padded copy, made on first need and kept */
  int n_plans;
} tsp_bucket;

struct tsp_program {
  tsp_node *nodes;
  int n_nodes, cap_nodes;
  int n_inputs;
  int inputs[64];
  int n_outputs;
  int outputs[64];
  char output_names[64][TSP_NAME];
  int n_assigns;
  int n_groups;
  tsp_group groups[TSP_MAX_GROUPS];
  char *name;
  /* after optimize */
  int n_kernels;
  tsp_kernel *kernels;
  char refusal[512]; /* non-empty: why the program cannot be bucketed */
  int n_buckets;
  tsp_bucket *buckets;
  /* build */
  char *cache_dir, *cc, *cflags, *cc_version;
  pthread_mutex_t lock;
  tsp_stats stats;
};

/* names.c: the character rules (tsp_name_check is public). The *_valid forms answer without an
 * error, for the emitter's own check of what it prints. */
bool tsp_name_valid(const char *s);
bool tsp_eq_valid(const char *s);
int tsp_eq_check(const char *field, const char *s, ts_error *err);
int tsp_formula_check(const char *field, const char *s, ts_error *err);

/* cache.c: the program cache's directory and files (see the file's comment for the rules). */
#define TSP_CACHE_PATH_MAX 400 /* the longest cache directory path */
#define TSP_HASH_HEX 33        /* an XXH3-128 in hex, with its NUL */
/* The default directory (from the environment) into dir; base gets the per-user directory that
 * must be ours with mode 0700 when the fallback under the socket directory's base is taken, else
 * "". -1 when it does not fit. */
int tsp_cache_default_dir(char *dir, size_t cap, char *base, size_t bcap);
/* Creates dir (mode 0700 for what it creates), checks base (when not "") and the cache rules,
 * and gives the resolved path in real. TS_IO when it cannot be made, TS_AUTH (path, owner, mode,
 * what is accepted) when its owner or mode or a directory above it is not safe. */
int tsp_cache_prepare(const char *dir, const char *base, char *real, size_t cap, ts_error *err);
/* The rules again, on a resolved directory (before each build). */
int tsp_cache_check(const char *real, ts_error *err);
/* A new file dir/.<stem>.<pid>.<n><suffix>, created with O_EXCL|O_NOFOLLOW and mode 0600 (names
 * that exist are skipped): its path and a write descriptor. */
int tsp_cache_create(const char *dir, const char *stem, const char *suffix, char *path, size_t cap,
                     int *fd, ts_error *err);
/* tsp_cache_create, then data written and the file closed (removed on failure). */
int tsp_cache_write(const char *dir, const char *stem, const char *suffix, const void *data,
                    size_t n, char *path, size_t cap, ts_error *err);
/* Opens a cached file with O_NOFOLLOW and checks it on the descriptor: a regular file owned by
 * the effective uid, not writable by group or others, of a sane size. 0 (fd and st set), 1 when
 * it does not exist, -1 when refused (why says why). */
int tsp_cache_open_file(const char *path, int *fd, struct stat *st, char *why, size_t cap);
/* The XXH3-128 of the descriptor's content in hex; -1 (why) when it cannot be read. */
int tsp_cache_hash_fd(int fd, char hex[TSP_HASH_HEX], char *why, size_t cap);
/* The hash recorded in a sidecar file (one line of hex), checked like a cached file. */
int tsp_cache_read_sum(const char *path, char hex[TSP_HASH_HEX], char *why, size_t cap);

/* opmap.c: the one op table */
typedef struct tsp_gen tsp_gen;
typedef int (*tsp_gen_fn)(tsp_gen *g, int kernel, ts_error *err);
typedef struct tsp_opdef {
  const char *name;
  tsp_category cat;
  int arity; /* -1: one or more (einsum) */
  bool float_only;
  const char *expr_f; /* elementwise C template for floats: %a %b %c operands, %f libm suffix */
  const char *expr_i; /* the same for integers (NULL: floats only) */
  tsp_gen_fn gen;     /* the generator of the op's category */
} tsp_opdef;
const tsp_opdef *tsp_op(int op);
int tsp_op_find(const char *name);
/* Scalar evaluation (constant folding, padding values): NaN-exact like the generated code. */
double tsp_eval(int op, ts_dtype dt, double a, double b, double c);
double tsp_round(ts_dtype dt, double v); /* the value as the dtype holds it */
const char *tsp_ctype(ts_dtype dt);      /* the C type in memory; NULL for unsupported dtypes */
const char *tsp_ctype_reg(ts_dtype dt); /* the C type of a value in a register (f16, bf16: float) */
bool tsp_is_half(ts_dtype dt);          /* f16 or bf16: stored as 16 bits, computed in float */

/* expr helpers (verify.c) */
bool tsp_expr_is_static(const tsp_expr *e);
bool tsp_expr_eq(const tsp_expr *a, const tsp_expr *b);
tsp_expr tsp_expr_const(int64_t c);
int64_t tsp_expr_eval(const tsp_expr *e, const int64_t *values);
int tsp_expr_format(const tsp_program *p, const tsp_expr *e, char *buf, size_t cap);
int tsp_expr_parse(const tsp_program *p, const char *text, tsp_expr *out, ts_error *err);
/* The largest value of e over the true values a bucket serves (every group between b->lo and
 * b->values; at least 0): a node's extent in the bucket's static code, which covers its true
 * extent in every run the bucket takes, also for formulas with negative terms (n-k+1). */
int64_t tsp_bucket_extent(const tsp_bucket *b, const tsp_expr *e);

/* stages */
int tsp_parse(tsp_program *p, const char *text, ts_error *err); /* parse.c */
int tsp_add_node(tsp_program *p, int op, ts_error *err);        /* parse.c: index */
int tsp_verify_node(tsp_program *p, int n, ts_error *err);      /* verify.c */
int tsp_optimize(tsp_program *p, ts_error *err);                /* optimize.c */
int tsp_buckets_make(tsp_program *p, ts_error *err);            /* bucket.c */
int tsp_padding_check(tsp_program *p, ts_error *err);           /* bucket.c */
/* Whether bucket b's static views stay inside their operands' padded buffers (slices with a
 * static start and a formula stop); TS_UNSUPPORTED with the reason if not. (bucket.c) */
int tsp_bucket_check(const tsp_program *p, const tsp_bucket *b, ts_error *err);
/* Slices of this run's true dim values stay in range (0 <= start <= stop <= size). (bucket.c) */
int tsp_slices_bind(const tsp_program *p, const int64_t *sym, ts_error *err);
int tsp_plan_bucket(tsp_program *p, tsp_bucket *b, ts_error *err); /* memplan.c */
void tsp_plan_free(tsp_bucket *b);
int tsp_emit(tsp_program *p, tsp_bucket *b, char **src, ts_error *err); /* emit.c */
int tsp_build_bucket(tsp_program *p, tsp_bucket *b, ts_error *err);     /* build.c */
void tsp_unload_bucket(tsp_bucket *b);
int tsp_build_init(tsp_program *p, const tsp_options *o, ts_error *err); /* build.c */
typedef struct tsp_einsum_ctx {
  tsp_program *p;
  tsp_bucket *b;
  ts_error *err;
} tsp_einsum_ctx;
int tsp_einsum_callback(void *ctx, int node, void *const *args, char *pool, const int64_t *sym);

/* gen_half.c: f16 and bf16 in generated code (stored as bits, computed in float). */
void tsp_emit_half_preamble(FILE *f); /* the conversion functions, once per file */
bool tsp_program_uses_half(const tsp_program *p);
const char *tsp_half_load(ts_dtype dt);  /* "tsp_f16_to_f32(" for f16 ... "" for others */
const char *tsp_half_close(ts_dtype dt); /* ")" after a load of f16 or bf16, else "" */
/* The opening of the rounding of a value of dtype `from` (its register's type) to dt's bits:
 * "tsp_f32_to_bf16(" ...; "(" when dt is not f16 or bf16. Closed by ")". */
const char *tsp_half_store(ts_dtype dt, ts_dtype from);

/* generators (gen_*.c), called through the table */
int tsp_gen_elementwise(tsp_gen *g, int kernel, ts_error *err);
int tsp_gen_reduce(tsp_gen *g, int kernel, ts_error *err);
int tsp_gen_einsum(tsp_gen *g, int kernel, ts_error *err);

/* The generator state shared by emit.c, the generators and the vector manager. */
struct tsp_gen {
  tsp_program *p;
  tsp_bucket *b;
  FILE *body;           /* kernel functions */
  FILE *vecs;           /* the named constant arrays */
  int n_vecs, cap_vecs; /* arrays sized once per file: names stay valid */
  int64_t (*vec_values)[TSP_MAX_DIMS];
  int *vec_len;
  char (*vec_name)[32];
  unsigned char *hoisted; /* per node, cleared after each kernel (gen_elementwise.c) */
};
/* vectors.c: the name of a constant array holding values[0..n) (emitted once per content). */
const char *tsp_vec(tsp_gen *g, const char *kind, const int64_t *values, int n);
int tsp_vec_init(tsp_gen *g, int cap); /* room for cap vectors */
void tsp_vec_free(tsp_gen *g);
/* emit.c helpers for generators */
void tsp_emit_ptr(tsp_gen *g, FILE *f, int node); /* a typed base pointer expression */
void tsp_emit_extent(tsp_gen *g, FILE *f, const tsp_expr *e, int64_t bucket_value,
                     bool true_extent);
const char *tsp_node_label(const tsp_program *p, int n, char *buf, size_t cap);

#endif
