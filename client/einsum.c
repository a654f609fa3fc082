/* einsum.c - libtshard's distributed einsum calls: einsum, einsum_plan (the EXPLAIN
 * only), einsum_backward and einsum_release, over the daemon's einsum operations. Names are
 * checked here with the daemon's own rules before anything is sent. */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "ts_rules.h"

#define EINSUM_MAX_OPERANDS 3

void tshard_einsum_result_clear(tshard_einsum_result *r) {
  if (!r)
    return;
  free(r->explain);
  memset(r, 0, sizeof *r);
}

static int check_operands(tshard_client *c, const char *equation, int n,
                          const char *const *operands) {
  if (!equation || !equation[0])
    return tsc_fail(c, TS_EINSUM, "no einsum equation; give one such as 'ij,jk->ik'");
  if (n < 1 || n > EINSUM_MAX_OPERANDS || !operands)
    return tsc_fail(c, TS_EINSUM, "%d einsum operands; give 1 to %d tensor names", n,
                    EINSUM_MAX_OPERANDS);
  for (int i = 0; i < n; i++)
    if (tsc_name_ok(c, "einsum operand", operands[i]))
      return TS_INVALID_ARGUMENT;
  return TS_OK;
}

static int einsum_call(tshard_client *c, Tshard__Request *req, tshard_einsum_result *result) {
  Tshard__Response *r = NULL;
  /* einsum runs on every rank: an SPMD client's group makes it a collective of the group */
  if (req->op_case == TSHARD__REQUEST__OP_EINSUM && tsc_apply_group(c, req))
    return TS_INVALID_ARGUMENT;
  int rc = tsc_call(c, req, &r);
  if (rc == TS_OK && r->result_case != TSHARD__RESPONSE__RESULT_EINSUM)
    rc = tsc_fail(c, TS_PROTOCOL, "einsum answered without an einsum result");
  if (rc == TS_OK && result) {
    const Tshard__EinsumResult *x = r->einsum;
    result->forward_id = x->forward_id;
    snprintf(result->plan, sizeof result->plan, "%s", x->plan ? x->plan : "");
    result->planned_wire_bytes = x->planned_wire_bytes;
    result->kept_bytes = x->kept_bytes;
    if (x->explain && x->explain[0] && !(result->explain = strdup(x->explain)))
      rc = tsc_fail(c, TS_NO_MEMORY, "no memory for the explain text");
  }
  if (r)
    tsc_free(c, r);
  return rc;
}

int tshard_einsum(tshard_client *c, const char *equation, int n, const char *const *operands,
                  const char *out, const tshard_einsum_opts *opts, tshard_einsum_result *result) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (result)
    memset(result, 0, sizeof *result);
  tshard_einsum_opts none = {NULL, NULL, 0, 0, NULL};
  const tshard_einsum_opts *o = opts ? opts : &none;
  int rc = check_operands(c, equation, n, operands);
  if (rc == TS_OK && tsc_name_ok(c, "einsum output", out))
    rc = TS_INVALID_ARGUMENT;
  if (rc)
    return rc;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__EinsumRequest q = TSHARD__EINSUM_REQUEST__INIT;
  Tshard__DistAttr a = TSHARD__DIST_ATTR__INIT;
  q.equation = (char *)equation;
  q.n_operands = (size_t)n;
  q.operands = (char **)operands;
  q.out = (char *)out;
  if (o->attr && o->attr[0]) {
    a.text = (char *)o->attr;
    q.attr = &a;
  }
  q.plan = tsc_str(o->plan);
  q.keep = o->keep != 0;
  q.explain = o->explain != 0;
  req.op_case = TSHARD__REQUEST__OP_EINSUM;
  req.einsum = &q;
  req.idempotency_key = tsc_str(o->key);
  return einsum_call(c, &req, result);
}

int tshard_einsum_plan(tshard_client *c, const char *equation, int n, const char *const *operands,
                       const char *attr, const char *plan, tshard_einsum_result *result) {
  if (!c || !result)
    return TS_INVALID_ARGUMENT;
  memset(result, 0, sizeof *result);
  int rc = check_operands(c, equation, n, operands);
  if (rc)
    return rc;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__EinsumRequest q = TSHARD__EINSUM_REQUEST__INIT;
  Tshard__DistAttr a = TSHARD__DIST_ATTR__INIT;
  q.equation = (char *)equation;
  q.n_operands = (size_t)n;
  q.operands = (char **)operands;
  if (attr && attr[0]) {
    a.text = (char *)attr;
    q.attr = &a;
  }
  q.plan = tsc_str(plan);
  q.explain = true;
  req.op_case = TSHARD__REQUEST__OP_EINSUM_PLAN;
  req.einsum_plan = &q;
  return einsum_call(c, &req, result);
}

int tshard_einsum_backward(tshard_client *c, uint64_t forward_id, const char *grad_out, int n,
                           const char *const *grads, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (tsc_name_ok(c, "output gradient", grad_out))
    return TS_INVALID_ARGUMENT;
  if (n < 1 || n > EINSUM_MAX_OPERANDS || !grads)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "%d gradient names; give one per operand of the forward (NULL for none)", n);
  char *names[EINSUM_MAX_OPERANDS];
  int named = 0;
  for (int i = 0; i < n; i++) {
    names[i] = tsc_str(grads[i]);
    if (names[i][0] && tsc_name_ok(c, "gradient", names[i]))
      return TS_INVALID_ARGUMENT;
    named += names[i][0] != '\0';
  }
  if (!named)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "no gradient asked for; name the gradient of at least one operand");
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__EinsumBackwardRequest q = TSHARD__EINSUM_BACKWARD_REQUEST__INIT;
  q.forward_id = forward_id;
  q.grad_out = (char *)grad_out;
  q.n_grads = (size_t)n;
  q.grads = names;
  req.op_case = TSHARD__REQUEST__OP_EINSUM_BACKWARD;
  req.einsum_backward = &q;
  req.idempotency_key = tsc_str(key);
  return tsc_call_collective(c, &req);
}

int tshard_einsum_release(tshard_client *c, uint64_t forward_id, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__EinsumReleaseRequest q = TSHARD__EINSUM_RELEASE_REQUEST__INIT;
  q.forward_id = forward_id;
  req.op_case = TSHARD__REQUEST__OP_EINSUM_RELEASE;
  req.einsum_release = &q;
  req.idempotency_key = tsc_str(key);
  return tsc_call_collective(c, &req);
}
