/* ts_dist_einsum_plan.h - the public header of libtsdeinplan (shard/einsum/plan/): the planner of
 * the distributed einsum, pure C with no MPI (the CLI's offline EXPLAIN, `tshard einsum --explain
 * --ranks N`, and the daemon's wire layer link it). Its execution over the store is libtsdein
 * (shard/einsum/ts_dist_einsum.h).
 *
 * The planner looks, for every label of the equation, at where each operand shards it, and builds
 * candidate plans. A plan is an *assignment* of the compute mesh's dims: each mesh dim either
 * shards one label (every operand holding the label is split the same way there, the others are
 * replicated there), is replicated, or carries one operand's Partial(sum) (the others replicated).
 * Under an assignment each rank computes the einsum of its local slices; the result is the
 * natural output attribute: a label kept in the output gives Shard of its output dim, a
 * contracted label gives Partial(sum), a partial operand gives Partial(sum). Candidates:
 *   match:i       operand i keeps its shards, the others follow it
 *   free:i        operand i keeps only the shards of labels the output keeps (no partial result)
 *   gather:j      operand j is replicated, the others keep the shards of labels j lacks
 *   output        the shards of the requested output attribute (no reshard of the result)
 *   replicate     every operand replicated (every rank computes everything)
 * Each candidate is costed with the reshard planner (shard/plan/plan.c): the exact wire bytes of
 * moving each operand to its target and the natural result to the requested attribute, the peak
 * memory of a rank (moved operands, the result, staging) and the work of the busiest rank (the
 * product of its local label extents). The cheapest by (wire bytes, busiest rank's work, peak
 * memory) runs; "as_is" names a candidate that moves no operand. */
#ifndef TS_DIST_EINSUM_PLAN_H
#define TS_DIST_EINSUM_PLAN_H

#include "ts_plan.h"

#define TS_DEIN_MAX_OPERANDS 3
#define TS_DEIN_MAX_CANDIDATES (4 * TS_DEIN_MAX_OPERANDS + 3)

typedef struct ts_dein_opts {
  const ts_attr *out_attr; /* the requested output attribute; NULL: the natural one */
  const char *plan;        /* NULL or "" or "auto": the cheapest; else a candidate's name */
  int world_size;          /* <= 0: ranks are not bounded */
  int64_t staging_bytes;   /* the reshard planner's staging bound (0: its default) */
} ts_dein_opts;

typedef struct ts_dein_cand {
  char name[32];
  char what[160]; /* one line saying what it does */
  bool applies;
  char why_not[560];                     /* when it does not apply */
  ts_attr *target[TS_DEIN_MAX_OPERANDS]; /* each operand's compute attribute */
  bool moves[TS_DEIN_MAX_OPERANDS];      /* target differs from the operand's attribute */
  ts_plan *move[TS_DEIN_MAX_OPERANDS];   /* the reshard of each moved operand */
  ts_attr *natural;                      /* the local einsums' result */
  ts_attr *final;     /* what is stored (the requested attribute, or the natural one) */
  ts_plan *out_move;  /* natural -> final, NULL when equal */
  int64_t wire_bytes; /* operands + result */
  int64_t messages;
  int64_t peak_bytes; /* the largest rank: moved operands + result(s) + staging */
  double max_work;    /* the busiest rank's product of local label extents */
  double total_work;  /* summed over ranks (replicated work counts on every rank) */
} ts_dein_cand;

typedef struct ts_dein_plan {
  char equation[160]; /* explicit form, "ij,jk->ik" */
  int n;
  char labels[TS_DEIN_MAX_OPERANDS][TS_MAX_DIMS + 1];
  char out_labels[TS_MAX_DIMS + 1];
  int ndim[TS_DEIN_MAX_OPERANDS];
  int64_t shape[TS_DEIN_MAX_OPERANDS][TS_MAX_DIMS];
  int out_ndim;
  int64_t out_shape[TS_MAX_DIMS];
  ts_dtype dtype;
  ts_attr *source[TS_DEIN_MAX_OPERANDS]; /* the operands' attributes */
  int ncand;
  ts_dein_cand cand[TS_DEIN_MAX_CANDIDATES];
  int chosen;
  bool forced;
  char why[400];
} ts_dein_plan;

/* Plans an einsum of n (1..TS_DEIN_MAX_OPERANDS) operands of global shapes and attributes. The
 * equation is numpy's without "..." (explicit labels); errors say what is wrong (TS_EINSUM for
 * the equation and shapes, TS_BAD_ATTRIBUTE for attributes, TS_EINSUM_PLAN for a forced plan
 * that is unknown or does not apply). */
int ts_dein_plan_create(const char *equation, int n, const int *ndims, const int64_t *const *shapes,
                        const ts_attr *const *attrs, ts_dtype dt, const ts_dein_opts *opts,
                        ts_dein_plan **out, ts_error *err);
void ts_dein_plan_destroy(ts_dein_plan **p); /* accepts NULL */
const ts_dein_cand *ts_dein_plan_chosen(const ts_dein_plan *p);
/* The EXPLAIN: the labels and where each operand shards them, every candidate with its costs (or
 * why it does not apply), the choice and why. malloc'd; NULL when out of memory. */
char *ts_dein_plan_explain(const ts_dein_plan *p);

/* The attribute of the gradient of operand i under the chosen plan: the operand's compute
 * attribute with Partial(sum) on the mesh dims where its local gradients are partial sums
 * (a label it lacks is sharded there, or another operand is partial there). */
int ts_dein_grad_attr(const ts_dein_plan *p, int i, ts_attr **out, ts_error *err);
/* The attribute the output gradient is brought to for the local backward: the natural output
 * attribute with Partial replaced by Replicate. */
int ts_dein_grad_out_attr(const ts_dein_plan *p, ts_attr **out, ts_error *err);

#endif
