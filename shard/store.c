/* store.c - the per-rank tensor store: name -> global shape, dtype, attribute, local layout and
 * local slice, with memory accounting against a quota. This is what the daemon keeps; it lives in
 * libtsshard, not in the daemon, because checkpoints (shard/ckpt/) and the distributed einsum
 * (shard/einsum/) read and write stored slices too.
 *
 * ts_store_reshard is collective over the whole world (every rank runs every collective
 * operation, in the same order, and every rank records every tensor): each rank prepares (the
 * tensor exists, the tag fits it, the plan; the executor adds the target buffer and staging),
 * the whole world agrees once, the ranks of the meshes move the data, and the whole world agrees
 * once more before the slice and attribute are replaced; on failure every rank keeps the tensor
 * exactly as it was and returns the same error. Two allreduces over the world per reshard. */
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_rules.h"
#include "ts_shard.h"

struct ts_store {
  int rank;
  int64_t quota, used;
  int64_t dtype_used[TS_DTYPE_COUNT]; /* used, by the slices' dtype (kept as used is) */
  ts_stored **items;
  int n, cap;
  ts_name_index index;  /* name -> position in items */
  ts_plan_cache *plans; /* plans of repeated reshards */
};

static const char *name_at(const void *ctx, int pos) {
  return ((const ts_store *)ctx)->items[pos]->name;
}

int ts_store_create(ts_store **out, int world_rank, int64_t quota_bytes, ts_error *err) {
  if (!out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_store_create: NULL output");
  if (quota_bytes < 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "quota of %lld bytes; use 0 for no quota",
                        (long long)quota_bytes);
  ts_store *s = calloc(1, sizeof *s);
  if (!s)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a tensor store");
  int rc = ts_plan_cache_create(TS_STORE_PLANS, &s->plans, err);
  if (rc) {
    free(s);
    return rc;
  }
  s->rank = world_rank;
  s->quota = quota_bytes;
  *out = s;
  return TS_OK;
}

static void entry_free(ts_stored *e) {
  if (!e)
    return;
  if (e->kept_release)
    e->kept_release(e->kept);
  ts_attr_destroy(&e->attr);
  ts_shard_free(e->local.data);
  ts_pool_uncharge_held(e->charged);
  free(e);
}

void ts_store_destroy(ts_store **p) {
  if (!p || !*p)
    return;
  ts_store *s = *p;
  for (int i = 0; i < s->n; i++)
    entry_free(s->items[i]);
  free(s->items);
  ts_name_index_clear(&s->index);
  ts_plan_cache_destroy(&s->plans);
  free(s);
  *p = NULL;
}

ts_plan_cache *ts_store_plans(ts_store *s) { return s ? s->plans : NULL; }

static int find_index(const ts_store *s, const char *name) {
  return ts_name_index_find(&s->index, name, name_at, s);
}

ts_stored *ts_store_find(ts_store *s, const char *name) {
  int i = s ? find_index(s, name) : -1;
  return i >= 0 ? s->items[i] : NULL;
}

int64_t ts_store_used_bytes(const ts_store *s) { return s ? s->used : 0; }

void ts_store_dtype_bytes(const ts_store *s, int64_t out[TS_DTYPE_COUNT]) {
  for (int d = 0; d < TS_DTYPE_COUNT; d++)
    out[d] = s ? s->dtype_used[d] : 0;
}

/* Adds bytes (negative: takes them out) to the total of e's dtype. */
static void dtype_count(ts_store *s, const ts_stored *e, int64_t bytes) {
  if (ts_dtype_valid((int)e->dtype))
    s->dtype_used[e->dtype] += bytes;
}

void ts_store_set_dtype(ts_store *s, ts_stored *e, ts_dtype dt) {
  dtype_count(s, e, -(int64_t)e->local.bytes);
  e->dtype = dt;
  dtype_count(s, e, (int64_t)e->local.bytes);
}
int ts_store_count(const ts_store *s) { return s ? s->n : 0; }
ts_stored *ts_store_at(ts_store *s, int i) { return s && i >= 0 && i < s->n ? s->items[i] : NULL; }

/* The layout of a box's local slice for a tag; bytes its buffer needs. */
static int slice_layout(const ts_box *box, ts_dtype dt, const char *tag, ts_layout *l,
                        size_t *bytes, ts_error *err) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < box->ndim; d++)
    ext[d] = box->hi[d] - box->lo[d];
  int rc = tag && tag[0] ? ts_layout_from_tag(l, dt, box->ndim, ext, tag, err)
                         : ts_layout_plain(l, dt, box->ndim, ext, err);
  if (rc)
    return rc;
  return ts_layout_span(l, bytes, err);
}

static int store_add(ts_store *s, const char *name, int ndim, const int64_t *shape, ts_dtype dt,
                     const ts_attr *attr, const char *layout_tag, bool zero, ts_stored **entry,
                     ts_error *err) {
  if (entry)
    *entry = NULL;
  if (!s || !attr)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_store_add: NULL argument");
  if (!ts_dtype_valid((int)dt))
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %d is not valid", (int)dt);
  /* a name with the reserved prefix is a library's temporary (clients cannot send one): its
   * shape is checked as any tensor's */
  bool own = name && ts_name_reserved(name, strlen(name));
  int rc = ts_tensor_check(own ? "temporary" : name, ndim, shape, ts_dtype_size(dt), err);
  if (rc)
    return rc;
  if (layout_tag && strlen(layout_tag) >= sizeof(((ts_stored *)0)->layout_tag))
    return ts_error_set(err, TS_BAD_LAYOUT, "layout tag of %zu characters; at most %zu",
                        strlen(layout_tag), sizeof(((ts_stored *)0)->layout_tag) - 1);
  if (find_index(s, name) >= 0)
    return ts_error_set(err, TS_EXISTS, "a tensor named '%s' already exists", name);
  ts_geom *g = NULL;
  if ((rc = ts_geom_create(attr, ndim, shape, &g, err)))
    return rc;
  /* The entry itself is memory a request (or a file's entry) makes the daemon hold: counted. */
  size_t charged = sizeof(ts_stored) + sizeof(ts_attr) + (size_t)attr->nranks * sizeof(int);
  ts_error cerr;
  if (ts_pool_charge_held(charged, "a tensor's entry", &cerr) != TS_OK) {
    ts_geom_destroy(&g);
    return ts_error_set(err, cerr.code, "tensor '%s': %s", name, cerr.msg);
  }
  ts_stored *e = calloc(1, sizeof *e);
  if (!e) {
    ts_pool_uncharge_held(charged);
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a store entry");
  }
  e->charged = charged;
  snprintf(e->name, sizeof e->name, "%s", name);
  snprintf(e->layout_tag, sizeof e->layout_tag, "%s", layout_tag ? layout_tag : "");
  e->ndim = ndim;
  for (int d = 0; d < ndim; d++)
    e->shape[d] = shape[d];
  e->dtype = dt;
  e->has_slice = ts_geom_rank_box(g, s->rank, &e->box);
  rc = ts_attr_clone(ts_geom_attr(g), &e->attr, err); /* normalized: no negative dims */
  ts_geom_destroy(&g);
  if (rc)
    goto fail;
  if (e->has_slice) {
    size_t bytes;
    if ((rc = slice_layout(&e->box, dt, e->layout_tag, &e->local.layout, &bytes, err)))
      goto fail;
    if (s->quota > 0 && s->used + (int64_t)bytes > s->quota) {
      rc = ts_error_set(err, TS_LIMIT,
                        "tensor '%s' needs %zu bytes here; %lld of the quota of %lld are free",
                        name, bytes, (long long)(s->quota - s->used), (long long)s->quota);
      goto fail;
    }
    ts_error aerr;
    e->local.data = ts_shard_alloc_as(bytes, 0, "the slice", &aerr);
    if (!e->local.data) {
      rc = ts_error_set(err, aerr.code, "tensor '%s': %s", name, aerr.msg);
      goto fail;
    }
    if (zero)
      memset(e->local.data, 0, bytes ? bytes : 1);
    e->local.bytes = bytes;
  }
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 8;
    ts_stored **items = realloc(s->items, (size_t)cap * sizeof *items);
    if (!items) {
      rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the store index");
      goto fail;
    }
    s->items = items;
    s->cap = cap;
  }
  s->items[s->n++] = e;
  if (ts_name_index_add(&s->index, s->n - 1, s->n, name_at, s) != TS_OK) {
    s->n--;
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the store index");
    goto fail;
  }
  s->used += (int64_t)e->local.bytes;
  dtype_count(s, e, (int64_t)e->local.bytes);
  if (entry)
    *entry = e;
  return TS_OK;
fail:
  entry_free(e);
  return rc;
}

int ts_store_add(ts_store *s, const char *name, int ndim, const int64_t *shape, ts_dtype dt,
                 const ts_attr *attr, const char *layout_tag, ts_stored **entry, ts_error *err) {
  return store_add(s, name, ndim, shape, dt, attr, layout_tag, true, entry, err);
}

int ts_store_add_unfilled(ts_store *s, const char *name, int ndim, const int64_t *shape,
                          ts_dtype dt, const ts_attr *attr, const char *layout_tag,
                          ts_stored **entry, ts_error *err) {
  return store_add(s, name, ndim, shape, dt, attr, layout_tag, false, entry, err);
}

void ts_store_swap(ts_store *s, ts_stored *a, ts_stored *b) {
  (void)s; /* the bytes held stay the same */
  ts_stored t = *a;
  *a = *b;
  *b = t;
  char n[TS_NAME_MAX]; /* each keeps its name, which the index maps to its position */
  memcpy(n, a->name, sizeof n);
  memcpy(a->name, b->name, sizeof n);
  memcpy(b->name, n, sizeof n);
}

int ts_store_drop(ts_store *s, const char *name, ts_error *err) {
  int i = s ? find_index(s, name) : -1;
  if (i < 0)
    return ts_error_set(err, TS_NOT_FOUND, "no tensor named '%s'", name ? name : "(null)");
  s->used -= (int64_t)s->items[i]->local.bytes;
  dtype_count(s, s->items[i], -(int64_t)s->items[i]->local.bytes);
  ts_name_index_remove(&s->index, name, name_at, s);
  if (i != s->n - 1)
    ts_name_index_moved(&s->index, s->items[s->n - 1]->name, i, name_at, s);
  entry_free(s->items[i]);
  s->items[i] = s->items[--s->n];
  return TS_OK;
}

void ts_store_commit(ts_store *s, ts_stored *e, const ts_plan *plan, ts_tensor *out,
                     ts_attr **new_attr, const char *layout_tag) {
  ts_box box;
  bool has = ts_geom_rank_box(ts_plan_tgt_geom(plan), s->rank, &box);
  s->used += (int64_t)out->bytes - (int64_t)e->local.bytes;
  dtype_count(s, e, (int64_t)out->bytes - (int64_t)e->local.bytes);
  ts_shard_free(e->local.data);
  e->local = *out;
  memset(out, 0, sizeof *out);
  e->has_slice = has;
  if (has)
    e->box = box;
  ts_attr_destroy(&e->attr);
  e->attr = *new_attr;
  *new_attr = NULL;
  snprintf(e->layout_tag, sizeof e->layout_tag, "%s", layout_tag ? layout_tag : "");
}

int64_t ts_store_quota_left(const ts_store *s) {
  return s && s->quota > 0 ? (s->quota - s->used > 0 ? s->quota - s->used : 1) : 0;
}

/* A cast after the wire: the new slice converted on every target rank, then one agreement over
 * the world (a value that would not survive, or the quota, fails it everywhere). */
static int cast_commit_agree(ts_store *s, ts_world *w, const ts_stored *e, ts_cast *c,
                             ts_tensor *out, ts_error *err) {
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = ts_cast_finish(c, out, &lerr);
  if (!lst && s->quota > 0 && s->used - (int64_t)e->local.bytes + (int64_t)out->bytes > s->quota)
    lst = ts_error_set(&lerr, TS_LIMIT,
                       "the cast of '%s' to %s needs %zu bytes here; %lld of the quota of %lld "
                       "are free",
                       e->name, ts_dtype_name(c->to), out->bytes,
                       (long long)(s->quota - s->used + (int64_t)e->local.bytes),
                       (long long)s->quota);
  int rc = ts_comm_agree(ts_world_comm(w), lst, &lerr, err);
  if (rc)
    ts_shard_free_tensor(out);
  return rc;
}

int ts_store_reshard_cast(ts_store *s, ts_world *w, const char *name, const ts_attr *tgt,
                          const char *layout_tag, const ts_plan_opts *popts, const ts_dtype *cast,
                          int prior_status, const ts_error *prior_err, ts_exec_report *report,
                          ts_error *err) {
  ts_error scratch, lerr;
  if (!err)
    err = &scratch;
  if (report)
    memset(report, 0, sizeof *report);
  if (!s || !w)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_store_reshard: NULL argument");
  /* Prepare: everything that can be checked before data moves, on every rank (the executor adds
   * the target buffer and staging); its one agreement is the executor's first. */
  ts_error_clear(&lerr);
  int lst = prior_status;
  if (lst != TS_OK && prior_err)
    lerr = *prior_err;
  else if (lst != TS_OK)
    ts_error_set(&lerr, lst, "%s", ts_strerror(lst));
  ts_stored *e = ts_store_find(s, name);
  ts_plan *plan = NULL;
  ts_attr *new_attr = NULL;
  ts_cast c;
  memset(&c, 0, sizeof c);
  if (lst == TS_OK && !e)
    lst = ts_error_set(&lerr, TS_NOT_FOUND, "no tensor named '%s'", name ? name : "(null)");
  else if (lst == TS_OK && !tgt)
    lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT, "no target attribute");
  else if (lst == TS_OK)
    lst = ts_attr_refuse_cyclic(tgt, &lerr); /* stored slices are boxes */
  else if (lst == TS_OK && layout_tag && strlen(layout_tag) >= sizeof e->layout_tag)
    lst = ts_error_set(&lerr, TS_BAD_LAYOUT, "layout tag of %zu characters; at most %zu",
                       strlen(layout_tag), sizeof e->layout_tag - 1);
  /* A cast: where it converts, and the converted source slice when it converts before the
   * wire (a value that does not survive fails the first agreement). */
  if (lst == TS_OK)
    lst = ts_cast_prepare(&c, e, cast ? *cast : e->dtype, tgt, &lerr);
  if (lst == TS_OK && layout_tag && layout_tag[0]) {
    /* The tag against the tensor, here on every rank, not only where a target slice is made: a
     * tag that fits the whole tensor fits each of its boxes. */
    ts_layout l;
    lst = ts_layout_from_tag(&l, c.to, e->ndim, e->shape, layout_tag, &lerr);
  }
  if (lst == TS_OK) {
    ts_plan_opts o = popts ? *popts : (ts_plan_opts){TS_STRATEGY_AUTO, 0, 0};
    o.world_size = ts_world_size(w);
    lst = ts_plan_cache_get(s->plans, e->ndim, e->shape, c.wire, e->attr, tgt, &o, &plan, &lerr);
  }
  if (lst == TS_OK)
    lst = ts_attr_clone(ts_plan_tgt_attr(plan), &new_attr, &lerr); /* normalized */
  /* Agree, transfer and commit over the whole world: every rank records the tensor. */
  ts_exec_opts xo = {.agree_world = true, .prior_status = lst, .prior_err = &lerr};
  if (s->quota > 0)
    xo.max_alloc_bytes = s->quota - s->used > 0 ? s->quota - s->used : 1;
  ts_tensor out;
  int rc = ts_reshard_exec(w, plan, e && lst == TS_OK ? ts_cast_source(&c, e) : NULL, layout_tag,
                           &xo, &out, report, err);
  if (rc == TS_OK && ts_cast_after(&c))
    rc = cast_commit_agree(s, w, e, &c, &out, err);
  if (rc == TS_OK) {
    ts_store_commit(s, e, plan, &out, &new_attr, layout_tag);
    ts_store_set_dtype(s, e, c.to);
  }
  ts_cast_clear(&c);
  ts_plan_destroy(&plan);
  ts_attr_destroy(&new_attr);
  return rc;
}

int ts_store_reshard_after(ts_store *s, ts_world *w, const char *name, const ts_attr *tgt,
                           const char *layout_tag, const ts_plan_opts *popts, int prior_status,
                           const ts_error *prior_err, ts_exec_report *report, ts_error *err) {
  return ts_store_reshard_cast(s, w, name, tgt, layout_tag, popts, NULL, prior_status, prior_err,
                               report, err);
}

int ts_store_reshard(ts_store *s, ts_world *w, const char *name, const ts_attr *tgt,
                     const char *layout_tag, const ts_plan_opts *popts, ts_exec_report *report,
                     ts_error *err) {
  return ts_store_reshard_after(s, w, name, tgt, layout_tag, popts, TS_OK, NULL, report, err);
}
