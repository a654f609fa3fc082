/* batch.c - the C client's batched operations: tshard_reshard_many and tshard_drop_many, each one
 * request naming many tensors, run by the daemons as one collective operation that changes every
 * tensor or none (daemon/README.md, "Batches"); tshard_reshard_many_results also gives each
 * tensor's result (strategy, bytes) from the answer. Both are collectives of the client's SPMD
 * group when it declared one (tsc_call_collective). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

int tshard_reshard_many(tshard_client *c, int n, const char *const *names, const char *const *attrs,
                        const tshard_reshard_opts *opts) {
  return tshard_reshard_many_results(c, n, names, attrs, opts, NULL);
}

/* The answer's per-tensor results into results[0..n) by name (the answer lists the request's
 * tensors in its order; a retry answered by its key lists none: the entries stay empty). */
static int fill_results(tshard_client *c, const Tshard__Response *r, int n,
                        const char *const *names, tshard_reshard_item_result *results) {
  for (int i = 0; i < n; i++) {
    memset(&results[i], 0, sizeof results[i]);
    snprintf(results[i].name, sizeof results[i].name, "%s", names[i]);
  }
  if (r->result_case != TSHARD__RESPONSE__RESULT_RESHARD_MANY)
    return TS_OK;
  const Tshard__ReshardManyResult *m = r->reshard_many;
  if (m->n_items && m->n_items != (size_t)n)
    return tsc_fail(c, TS_PROTOCOL,
                    "the daemon answered a reshard_many of %d tensors with %zu "
                    "results",
                    n, m->n_items);
  for (size_t i = 0; i < m->n_items; i++) {
    if (strcmp(m->items[i]->name, names[i]) != 0)
      return tsc_fail(c, TS_PROTOCOL,
                      "the daemon answered result %zu of a reshard_many for "
                      "'%s', not '%s'",
                      i, m->items[i]->name, names[i]);
    snprintf(results[i].strategy, sizeof results[i].strategy, "%s", m->items[i]->strategy);
    results[i].bytes_sent = m->items[i]->bytes_sent;
    results[i].bytes_received = m->items[i]->bytes_received;
  }
  return TS_OK;
}

int tshard_reshard_many_results(tshard_client *c, int n, const char *const *names,
                                const char *const *attrs, const tshard_reshard_opts *opts,
                                tshard_reshard_item_result *results) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (n < 1 || !names || !attrs)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_reshard_many: %d tensors; give at least one name and attribute", n);
  tshard_reshard_opts none = {0};
  const tshard_reshard_opts *o = opts ? opts : &none;
  if (o->keep_source_as && o->keep_source_as[0])
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_reshard_many reshards in place; keep_source_as must be NULL");
  if (o->relabel)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_reshard_many does not relabel; relabel one "
                    "tensor with tshard_reshard");
  for (int i = 0; i < n; i++)
    if (tsc_name_ok(c, "tensor name", names[i]))
      return TS_INVALID_ARGUMENT;
  Tshard__ReshardItem *items = calloc((size_t)n, sizeof *items);
  Tshard__ReshardItem **itemp = calloc((size_t)n, sizeof *itemp);
  Tshard__DistAttr *a = calloc((size_t)n, sizeof *a);
  if (!items || !itemp || !a) {
    free(items), free(itemp), free(a);
    return tsc_fail(c, TS_NO_MEMORY, "no memory for a batch of %d tensors", n);
  }
  Tshard__Layout l = TSHARD__LAYOUT__INIT;
  l.tag = tsc_str(o->layout);
  for (int i = 0; i < n; i++) {
    tshard__reshard_item__init(&items[i]);
    tshard__dist_attr__init(&a[i]);
    a[i].text = tsc_str(attrs[i]);
    items[i].name = tsc_str(names[i]);
    items[i].attr = &a[i];
    items[i].strategy = tsc_str(NULL);
    items[i].layout = &l;
    items[i].dtype = tsc_str(o->dtype);
    itemp[i] = &items[i];
  }
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ReshardManyRequest q = TSHARD__RESHARD_MANY_REQUEST__INIT;
  q.n_items = (size_t)n;
  q.items = itemp;
  q.strategy = tsc_str(o->strategy);
  req.op_case = TSHARD__REQUEST__OP_RESHARD_MANY;
  req.reshard_many = &q;
  req.idempotency_key = tsc_str(o->key);
  Tshard__Response *r = NULL;
  int rc = tsc_apply_group(c, &req) ? TS_INVALID_ARGUMENT : tsc_call(c, &req, &r);
  if (rc == TS_OK && results)
    rc = fill_results(c, r, n, names, results);
  if (r)
    tsc_free(c, r);
  free(items), free(itemp), free(a);
  return rc;
}

int tshard_drop_many(tshard_client *c, int n, const char *const *names, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (n < 1 || !names)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "tshard_drop_many: %d tensors; give at least one name",
                    n);
  for (int i = 0; i < n; i++)
    if (tsc_name_ok(c, "tensor name", names[i]))
      return TS_INVALID_ARGUMENT;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__DropManyRequest q = TSHARD__DROP_MANY_REQUEST__INIT;
  q.n_names = (size_t)n;
  q.names = (char **)names;
  req.op_case = TSHARD__REQUEST__OP_DROP_MANY;
  req.drop_many = &q;
  req.idempotency_key = tsc_str(key);
  return tsc_call_collective(c, &req);
}
