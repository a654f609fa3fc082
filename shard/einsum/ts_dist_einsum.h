/* ts_dist_einsum.h - the public header of libtsdein (shard/einsum/): the distributed einsum run
 * over the per-rank store. It plans with libtsdeinplan (shard/einsum/plan/ts_dist_einsum_plan.h),
 * moves the operands with the reshard executor and the store (libtsshard), and computes each
 * rank's part with the kernels' einsum. */
#ifndef TS_DIST_EINSUM_H
#define TS_DIST_EINSUM_H

#include "ts_dist_einsum_plan.h"
#include "ts_shard.h"

/* ---------------------------------------------------------------------------------------------
 * Execution over the store (libtsdein). Collective over the whole world: every rank calls it
 * with the same arguments, and all return the same status and message. Atomic: on failure no
 * stored tensor has changed and the output does not exist. */

typedef struct ts_dein_report {
  char plan[32];
  int64_t planned_wire_bytes; /* the plan's total */
  int64_t bytes_sent;         /* this rank, to other ranks, over every reshard */
  int64_t kept_bytes;         /* this rank's kept state (keep) */
} ts_dein_report;

/* What a forward keeps for its backward: the local operands in their compute layouts and the
 * kernels' transpose cache, counted in the buffer pool. */
typedef struct ts_dein_kept ts_dein_kept;

typedef struct ts_dein_request {
  const char *equation;
  int n;
  const char *operands[TS_DEIN_MAX_OPERANDS];
  const char *out;         /* the output name */
  const ts_attr *out_attr; /* NULL: the natural attribute */
  const char *plan;        /* NULL: auto */
  int64_t staging_bytes;
  /* A failure the caller met on this rank preparing the request (TS_OK: none), agreed on in the
   * first agreement: every rank then returns it. */
  int prior_status;
  const ts_error *prior_err;
  bool no_scalar; /* refuse an output of 0 dims (the daemon stores 1 to 8 dims) */
} ts_dein_request;

/* kept: NULL, or receives the kept state (NULL on this rank when it computes nothing is not
 * possible: every rank gets one, possibly empty). explain: NULL, or receives the EXPLAIN. */
int ts_dein_run(ts_store *s, ts_world *w, const ts_dein_request *req, ts_dein_kept **kept,
                char **explain, ts_dein_report *rep, ts_error *err);

/* Gradients of the forward `req` (the same request) with respect to the operands whose
 * grad_names[i] is non-NULL and non-empty, from the output gradient stored as grad_out (the
 * output's shape). kept: the forward's kept state (its transposes are reused) or NULL (the
 * operands are moved again and transposed again). Collective and atomic like ts_dein_run. */
int ts_dein_backward(ts_store *s, ts_world *w, const ts_dein_request *req, ts_dein_kept *kept,
                     const char *grad_out, const char *const *grad_names, ts_dein_report *rep,
                     ts_error *err);
void ts_dein_kept_destroy(ts_dein_kept **k); /* accepts NULL */
int64_t ts_dein_kept_bytes(const ts_dein_kept *k);

#endif
