/* batch.c - the C client's batched operations: tshard_reshard_many and tshard_drop_many, each one
 * request naming many tensors, run by the daemons as one collective operation that changes every
 * tensor or none (daemon/README.md, "Batches"). Both are collectives of the client's SPMD group
 * when it declared one (tsc_call_collective). */
#include <stdlib.h>

#include "client_internal.h"

int tshard_reshard_many(tshard_client *c, int n, const char *const *names,
                        const char *const *attrs, const tshard_reshard_opts *opts) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (n < 1 || !names || !attrs)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_reshard_many: %d tensors; give at least one name and attribute", n);
  tshard_reshard_opts none = {NULL, NULL, NULL, NULL};
  const tshard_reshard_opts *o = opts ? opts : &none;
  if (o->keep_source_as && o->keep_source_as[0])
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_reshard_many reshards in place; keep_source_as must be NULL");
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
  int rc = tsc_call_collective(c, &req);
  free(items), free(itemp), free(a);
  return rc;
}

int tshard_drop_many(tshard_client *c, int n, const char *const *names, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (n < 1 || !names)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_drop_many: %d tensors; give at least one name", n);
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
