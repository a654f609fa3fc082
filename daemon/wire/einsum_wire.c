/* einsum_wire.c - the validators of the distributed einsum operations: the request
 * alone, before any handler sees it (names, operand count, equation and plan lengths, the output
 * attribute against the world). What needs stored tensors (the equation against their shapes,
 * unknown or taken names) is the handlers' (einsum.c) and the planner's. */
#include <string.h>

#include "tsd_wire.h"
#include "ts_dist_einsum_plan.h"
#include "ts_rules.h"

#define EQ_MAX 159
#define PLAN_MAX 31

static int check_name(const char *what, const char *name, ts_error *err) {
  return ts_name_check(what, name, name ? strlen(name) : 0, err);
}

static int check_request(const Tshard__EinsumRequest *q, bool need_out, const tsd_limits *lim,
                         ts_error *err) {
  size_t eq = q->equation ? strlen(q->equation) : 0;
  if (eq == 0 || eq > EQ_MAX)
    return ts_error_set(err, TS_EINSUM,
                        "einsum equation of %zu characters; give 1 to %d, e.g. "
                        "'ij,jk->ik'",
                        eq, EQ_MAX);
  if (q->n_operands < 1 || q->n_operands > TS_DEIN_MAX_OPERANDS)
    return ts_error_set(err, TS_EINSUM, "%zu einsum operands; give 1 to %d tensor names",
                        q->n_operands, TS_DEIN_MAX_OPERANDS);
  for (size_t i = 0; i < q->n_operands; i++) {
    int rc = check_name("einsum operand", q->operands[i], err);
    if (rc)
      return rc;
  }
  if (need_out || (q->out && q->out[0])) {
    int rc = check_name("einsum output", q->out, err);
    if (rc)
      return rc;
    for (size_t i = 0; i < q->n_operands; i++)
      if (strcmp(q->operands[i], q->out) == 0)
        return ts_error_set(err, TS_EXISTS,
                            "the einsum output '%s' is also an operand; give a new name", q->out);
  }
  size_t pl = q->plan ? strlen(q->plan) : 0;
  if (pl > PLAN_MAX)
    return ts_error_set(err, TS_EINSUM_PLAN,
                        "plan name of %zu characters; at most %d (auto, "
                        "as_is, match:I, free:I, gather:I, output, replicate)",
                        pl, PLAN_MAX);
  if (q->attr) {
    ts_attr *a = NULL;
    int rc = tsd_attr_from_msg(q->attr, &a, err);
    for (int i = 0; rc == TS_OK && i < a->nranks; i++)
      if (a->ranks[i] >= lim->world_size)
        rc = ts_error_set(err, TS_BAD_ATTRIBUTE, "rank %d is not in the world of %d ranks",
                          a->ranks[i], lim->world_size);
    ts_attr_destroy(&a);
    return rc;
  }
  return TS_OK;
}

int tsd_validate_einsum(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  return check_request(r->einsum, true, lim, err);
}

int tsd_validate_einsum_plan(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  return check_request(r->einsum_plan, false, lim, err);
}

int tsd_validate_einsum_backward(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__EinsumBackwardRequest *q = r->einsum_backward;
  int rc = check_name("output gradient", q->grad_out, err);
  if (rc)
    return rc;
  if (q->n_grads < 1 || q->n_grads > TS_DEIN_MAX_OPERANDS)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%zu gradient names; give one per operand ('' for none), 1 to %d",
                        q->n_grads, TS_DEIN_MAX_OPERANDS);
  int named = 0;
  for (size_t i = 0; i < q->n_grads; i++) {
    if (!q->grads[i][0])
      continue;
    named++;
    if ((rc = check_name("gradient", q->grads[i], err)))
      return rc;
  }
  if (!named)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "no gradient asked for; name the gradient of at least one operand");
  return TS_OK;
}

int tsd_validate_einsum_release(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)r, (void)lim, (void)err;
  return TS_OK;
}
