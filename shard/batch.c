/* batch.c - many stored tensors resharded as one collective operation (ts_store_reshard_many),
 * atomic over all of them: every item is planned on every rank before anything moves, one
 * agreement over the world takes the planning (a failure names the item's tensor), the items'
 * transfers run one after another with each new slice kept beside its old one, and only when every
 * transfer succeeded are the tensors replaced, all at once (ts_store_commit cannot fail). A
 * transfer's failure is the same on every rank (the executor agrees on it), so every rank stops at
 * the same item, frees the new slices made so far and keeps every tensor as it was.
 *
 * Items whose pieces move in place (row-major on both sides, no partial placement, the strategy
 * left to the batch or point-to-point / all-to-all: ts_exec_coalescable) are coalesced: every
 * piece between two ranks, of every such item, goes in one message (ts_reshard_exec_many), after
 * one agreement that also takes the planning. Items that sum (or otherwise reduce) partial
 * slices into replicas on the same mesh (ts_exec_reducible, the strategy left to the batch or
 * allreduce) join them: after that exchange, those of the same mesh lines, dtype and operation
 * are packed together and reduced in one allreduce per staging-sized round. The other items then
 * run the executor one after another, each with its own agreements and exchange. */
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_shard.h"

typedef struct planned {
  ts_stored *e;
  ts_plan *plan;
  ts_attr *attr; /* the clone of the target, handed to the store at the commit */
  ts_tensor out;
  bool coalesced; /* moved by the batch's one exchange */
  ts_cast cast;   /* the item's cast (cast.c); off when it keeps its dtype */
} planned;

/* Plans one item on this rank; the error names the item's tensor. */
static int plan_item(ts_store *s, ts_world *w, const ts_batch_item *it, int64_t staging, planned *p,
                     ts_error *err) {
  ts_error lerr;
  ts_error_clear(&lerr);
  int rc = TS_OK;
  p->e = ts_store_find(s, it->name);
  if (!p->e)
    rc = ts_error_set(&lerr, TS_NOT_FOUND, "no tensor named '%s'", it->name);
  else if (!it->tgt)
    rc = ts_error_set(&lerr, TS_INVALID_ARGUMENT, "no target attribute");
  else if (it->layout_tag && strlen(it->layout_tag) >= sizeof p->e->layout_tag)
    rc = ts_error_set(&lerr, TS_BAD_LAYOUT, "layout tag of %zu characters; at most %zu",
                      strlen(it->layout_tag), sizeof p->e->layout_tag - 1);
  if (!rc)
    rc = ts_attr_refuse_cyclic(it->tgt, &lerr); /* stored slices are boxes */
  if (!rc)
    rc = ts_cast_prepare(&p->cast, p->e, it->cast ? it->dtype : p->e->dtype, it->tgt, &lerr);
  if (!rc && it->layout_tag && it->layout_tag[0]) {
    ts_layout l;
    rc = ts_layout_from_tag(&l, p->cast.to, p->e->ndim, p->e->shape, it->layout_tag, &lerr);
  }
  if (!rc) {
    ts_plan_opts o = {it->strategy, staging, ts_world_size(w)};
    rc = ts_plan_cache_get(ts_store_plans(s), p->e->ndim, p->e->shape, p->cast.wire, p->e->attr,
                           it->tgt, &o, &p->plan, &lerr);
  }
  if (!rc)
    rc = ts_attr_clone(ts_plan_tgt_attr(p->plan), &p->attr, &lerr); /* normalized */
  if (rc)
    ts_error_set(err, rc, "tensor '%s' of the batch: %s", it->name, lerr.msg);
  return rc;
}

static void planned_free(planned *p, int n) {
  for (int i = 0; i < n; i++) {
    ts_plan_destroy(&p[i].plan);
    ts_attr_destroy(&p[i].attr);
    ts_shard_free_tensor(&p[i].out);
    ts_cast_clear(&p[i].cast);
  }
  free(p);
}

/* Runs the transfers of the planned items in order; stops at the first failure (the same item on
 * every rank), whose error names its tensor. */
static int run_items(ts_store *s, ts_world *w, int n, const ts_batch_item *items, planned *p,
                     int fail_item, ts_exec_report *reports, ts_error *err) {
  int64_t held = 0; /* the new slices made so far, against the quota */
  for (int i = 0; i < n; i++)
    held += (int64_t)p[i].out.bytes; /* the coalesced ones' */
  for (int i = 0; i < n; i++) {
    if (p[i].coalesced)
      continue;
    ts_error lerr, xerr;
    ts_error_clear(&lerr);
    int lst = TS_OK;
    if (i == fail_item)
      lst = ts_error_set(&lerr, TS_INTERNAL, "injected batch transfer failure on rank %d",
                         ts_world_rank(w));
    ts_exec_opts xo = {.agree_world = true, .prior_status = lst, .prior_err = &lerr};
    int64_t left = ts_store_quota_left(s);
    if (left > 0)
      xo.max_alloc_bytes = left - held > 0 ? left - held : 1;
    ts_exec_report rep;
    memset(&rep, 0, sizeof rep);
    int rc = ts_reshard_exec(w, p[i].plan, ts_cast_source(&p[i].cast, p[i].e), items[i].layout_tag,
                             &xo, &p[i].out, &rep, &xerr);
    if (rc)
      return ts_error_set(err, rc, "tensor '%s' of the batch: %s", items[i].name, xerr.msg);
    held += (int64_t)p[i].out.bytes;
    if (reports)
      reports[i] = rep;
  }
  return TS_OK;
}

static bool coalescable(const ts_batch_item *it, const planned *p) {
  ts_strategy st = it->strategy;
  if ((st == TS_STRATEGY_AUTO || st == TS_STRATEGY_ALLREDUCE) &&
      ts_exec_reducible(p->plan, p->e->layout_tag, it->layout_tag))
    return true;
  return (st == TS_STRATEGY_AUTO || st == TS_STRATEGY_P2P || st == TS_STRATEGY_ALLTOALL) &&
         ts_exec_coalescable(p->plan, p->e->layout_tag, it->layout_tag);
}

/* The coalesced items in one exchange, after the batch's one agreement (which takes the
 * planning's status, lst: a rank that could not plan brings its failure, with no items). */
static int run_coalesced(ts_store *s, ts_world *w, int n, const ts_batch_item *items, planned *p,
                         int lst, const ts_error *lerr, int fail_item, ts_exec_report *reports,
                         ts_error *err) {
  ts_exec_item *x = lst == TS_OK ? calloc((size_t)(n ? n : 1), sizeof *x) : NULL;
  int *at = lst == TS_OK ? calloc((size_t)(n ? n : 1), sizeof *at) : NULL;
  ts_error merr = lerr ? *lerr : (ts_error){.code = lst};
  if (lst == TS_OK && (!x || !at))
    lst = ts_error_set(&merr, TS_NO_MEMORY, "no memory for a batch of %d tensors", n);
  int m = 0;
  ts_error ferr;
  for (int i = 0; lst == TS_OK && i < n; i++) {
    if (!(p[i].coalesced = coalescable(&items[i], &p[i])))
      continue;
    at[m] = i;
    x[m] = (ts_exec_item){.name = items[i].name,
                          .plan = p[i].plan,
                          .src = ts_cast_source(&p[i].cast, p[i].e),
                          .max_alloc = ts_store_quota_left(s)};
    if (i == fail_item) {
      x[m].prior_status = ts_error_set(
          &ferr, TS_INTERNAL, "injected batch transfer failure on rank %d", ts_world_rank(w));
      x[m].prior_err = &ferr;
    }
    m++;
  }
  int rc = ts_reshard_exec_many(w, lst == TS_OK ? m : 0, x, lst, &merr, err);
  for (int k = 0; rc == TS_OK && k < m; k++) {
    p[at[k]].out = x[k].out;
    if (reports)
      reports[at[k]] = x[k].report;
  }
  free(x);
  free(at);
  return rc;
}

/* The casts after the wire: every such item's new slice converted, then one agreement over the
 * world (every rank has the same items, so all of them agree or none does). */
static int finish_casts(ts_world *w, int n, planned *p, ts_error *err) {
  bool any = false;
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = TS_OK;
  for (int i = 0; i < n; i++) {
    any = any || ts_cast_after(&p[i].cast);
    ts_error cerr;
    if (lst == TS_OK && (lst = ts_cast_finish(&p[i].cast, &p[i].out, &cerr)))
      ts_error_set(&lerr, lst, "tensor '%s' of the batch: %s", p[i].e->name, cerr.msg);
  }
  return any ? ts_comm_agree(ts_world_comm(w), lst, &lerr, err) : TS_OK;
}

int ts_store_reshard_many(ts_store *s, ts_world *w, int n, const ts_batch_item *items,
                          int64_t staging, int prior_status, const ts_error *prior_err,
                          int fail_item, ts_exec_report *reports, ts_error *err) {
  ts_error scratch, lerr;
  if (!err)
    err = &scratch;
  if (!s || !w || n < 0 || (n > 0 && !items))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_store_reshard_many: bad argument");
  if (reports)
    memset(reports, 0, (size_t)n * sizeof *reports);
  ts_error_clear(&lerr);
  int lst = prior_status;
  if (lst != TS_OK)
    lerr = prior_err ? *prior_err : lerr;
  if (lst != TS_OK && !prior_err)
    ts_error_set(&lerr, lst, "%s", ts_strerror(lst));
  planned *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
  if (!p && lst == TS_OK)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory to plan a batch of %d tensors", n);
  for (int i = 0; p && lst == TS_OK && i < n; i++)
    lst = plan_item(s, w, &items[i], staging, &p[i], &lerr);
  /* The one agreement on the plans and the coalesced items' preparation: every rank goes on, or
   * none. */
  int rc = run_coalesced(s, w, n, items, p, lst, &lerr, fail_item, reports, err);
  if (rc == TS_OK)
    rc = run_items(s, w, n, items, p, fail_item, reports, err);
  if (rc == TS_OK)
    rc = finish_casts(w, n, p, err);
  if (rc == TS_OK)
    for (int i = 0; i < n; i++) {
      ts_store_commit(s, p[i].e, p[i].plan, &p[i].out, &p[i].attr, items[i].layout_tag);
      ts_store_set_dtype(s, p[i].e, p[i].cast.to);
    }
  if (p)
    planned_free(p, n);
  return rc;
}
