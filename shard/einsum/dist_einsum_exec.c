/* dist_einsum_exec.c - runs a distributed einsum plan over the per-rank store: every data
 * movement through the reshard executor, the local compute with the kernels' einsum engine, the
 * output (and gradients) stored with their attributes.
 *
 * Collective over the whole world. Every rank plans from the same metadata (the store holds every
 * tensor's attribute on every rank), so every rank makes the same plan; the first agreement
 * carries any local failure; each operand reshard is the executor's own atomic collective (into a
 * new buffer: the stored operand never changes); the result reshard carries the local compute's
 * status into its first agreement; a last agreement commits the new tensors. On any failure the
 * new buffers are freed and every rank returns the same error with the store as it was. */
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_dist_einsum.h"

struct ts_dein_kept {
  ts_dein_plan *plan;
  ts_einsum_plan *kplan; /* the local einsum (NULL on ranks outside the compute mesh) */
  ts_einsum_cache *cache;
  ts_tensor ops[TS_DEIN_MAX_OPERANDS]; /* owned local operands in compute layouts */
};

void ts_dein_kept_destroy(ts_dein_kept **pk) {
  if (!pk || !*pk)
    return;
  ts_dein_kept *k = *pk;
  for (int i = 0; i < TS_DEIN_MAX_OPERANDS; i++)
    ts_shard_free(k->ops[i].data);
  ts_einsum_cache_destroy(&k->cache);
  ts_einsum_plan_destroy(&k->kplan);
  ts_dein_plan_destroy(&k->plan);
  free(k);
  *pk = NULL;
}

int64_t ts_dein_kept_bytes(const ts_dein_kept *k) {
  if (!k)
    return 0;
  int64_t b = (int64_t)ts_einsum_cache_bytes(k->cache);
  for (int i = 0; i < TS_DEIN_MAX_OPERANDS; i++)
    b += (int64_t)k->ops[i].bytes;
  return b;
}

static int agree(ts_world *w, int status, const ts_error *local, ts_error *err) {
  return ts_comm_agree(ts_world_comm(w), status, local, err);
}

/* A plain row-major tensor for a box (buffer from the pool; at least 64 bytes so that an empty
 * slice still has a buffer). */
static int alloc_box(const ts_box *b, ts_dtype dt, const char *what, ts_tensor *t, ts_error *err) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < b->ndim; d++)
    ext[d] = b->hi[d] - b->lo[d];
  memset(t, 0, sizeof *t);
  int rc = ts_layout_plain(&t->layout, dt, b->ndim, ext, err);
  size_t bytes = 0;
  if (rc == TS_OK)
    rc = ts_layout_span(&t->layout, &bytes, err);
  if (rc)
    return rc;
  t->data = ts_shard_alloc_as(bytes > 64 ? bytes : 64, 0, what, err);
  if (!t->data)
    return err ? err->code : TS_NO_MEMORY;
  t->bytes = bytes;
  return TS_OK;
}

/* The local slice of a stored tensor as the kernels take it: the slice itself when its layout is
 * plain, else (blocked) a row-major copy, also when `copy` asks for an owned buffer. */
static int local_view(const ts_stored *t, bool copy, ts_tensor *view, bool *owned, ts_error *err) {
  *owned = false;
  if (!copy && !ts_layout_is_blocked(&t->local.layout)) {
    *view = t->local;
    return TS_OK;
  }
  int rc = alloc_box(&t->box, t->dtype, "a local einsum operand", view, err);
  if (rc == TS_OK && (rc = ts_copy(view, &t->local, NULL, err)))
    ts_shard_free(view->data);
  if (rc == TS_OK)
    *owned = true;
  else
    memset(view, 0, sizeof *view);
  return rc;
}

static bool any_zero(const ts_layout *l) {
  for (int d = 0; d < l->ndim; d++)
    if (l->shape[d] == 0)
      return true;
  return false;
}

/* The world's executor options: both agreements over the world, this rank's status carried. */
static ts_exec_opts xopts(int status, const ts_error *lerr) {
  ts_exec_opts xo;
  memset(&xo, 0, sizeof xo);
  xo.agree_world = true;
  xo.prior_status = status;
  xo.prior_err = lerr;
  return xo;
}

static int prior(const ts_dein_request *req, ts_error *lerr) {
  if (req->prior_status == TS_OK)
    return TS_OK;
  if (req->prior_err)
    *lerr = *req->prior_err;
  else
    ts_error_set(lerr, req->prior_status, "%s", ts_strerror(req->prior_status));
  return req->prior_status;
}

/* Plans from the store's metadata; checks names. */
static int plan_request(ts_store *s, ts_world *w, const ts_dein_request *req, ts_stored **ops,
                        ts_dein_plan **plan, ts_error *err) {
  *plan = NULL;
  if (!req->equation || req->n < 1 || req->n > TS_DEIN_MAX_OPERANDS)
    return ts_error_set(err, TS_EINSUM, "distributed einsum takes 1 to %d operands, not %d",
                        TS_DEIN_MAX_OPERANDS, req->n);
  int ndims[TS_DEIN_MAX_OPERANDS];
  const int64_t *shapes[TS_DEIN_MAX_OPERANDS];
  const ts_attr *attrs[TS_DEIN_MAX_OPERANDS];
  for (int i = 0; i < req->n; i++) {
    ops[i] = ts_store_find(s, req->operands[i]);
    if (!ops[i])
      return ts_error_set(err, TS_NOT_FOUND, "einsum operand %d: no tensor named '%s'", i,
                          req->operands[i] ? req->operands[i] : "(null)");
    if (ops[i]->dtype != ops[0]->dtype)
      return ts_error_set(err, TS_EINSUM,
                          "einsum operands have different dtypes: '%s' is %s, '%s' is %s; give "
                          "operands of one dtype",
                          ops[0]->name, ts_dtype_name(ops[0]->dtype), ops[i]->name,
                          ts_dtype_name(ops[i]->dtype));
    ndims[i] = ops[i]->ndim;
    shapes[i] = ops[i]->shape;
    attrs[i] = ops[i]->attr;
  }
  ts_dein_opts o = {req->out_attr, req->plan, ts_world_size(w), req->staging_bytes};
  return ts_dein_plan_create(req->equation, req->n, ndims, shapes, attrs, ops[0]->dtype, &o, plan,
                             err);
}

static int check_new_name(ts_store *s, const char *name, const char *what, ts_error *err) {
  size_t len = name ? strlen(name) : 0;
  if (len == 0 || len >= TS_NAME_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "%s name of %zu characters; names have 1 to %d",
                        what, len, TS_NAME_MAX - 1);
  if (ts_store_find(s, name))
    return ts_error_set(err, TS_EXISTS, "%s: a tensor named '%s' already exists", what, name);
  return TS_OK;
}

/* Moves the operands to the chosen plan's targets (collective), then gives this rank's local
 * views (owned ones flagged). copy: owned copies even of operands that stay. */
static int move_operands(ts_world *w, const ts_dein_plan *p, ts_stored **ops, bool copy,
                         ts_tensor *local, bool *owned, ts_dein_report *rep, ts_error *err) {
  const ts_dein_cand *c = ts_dein_plan_chosen(p);
  int rc = TS_OK;
  for (int i = 0; i < p->n; i++) {
    memset(&local[i], 0, sizeof local[i]);
    owned[i] = false;
  }
  for (int i = 0; rc == TS_OK && i < p->n; i++) {
    if (!c->moves[i])
      continue;
    ts_exec_opts xo = xopts(TS_OK, NULL);
    ts_exec_report xr;
    rc = ts_reshard_exec(w, c->move[i], ops[i]->has_slice ? &ops[i]->local : NULL, NULL, &xo,
                         &local[i], &xr, err);
    if (rc == TS_OK) {
      owned[i] = local[i].data != NULL;
      if (rep)
        rep->bytes_sent += xr.bytes_sent;
    }
  }
  /* Operands that stay: a view, or a copy (blocked layouts, or kept for backward). */
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = TS_OK;
  for (int i = 0; rc == TS_OK && lst == TS_OK && i < p->n; i++)
    if (!c->moves[i] && ops[i]->has_slice)
      lst = local_view(ops[i], copy, &local[i], &owned[i], &lerr);
  if (rc == TS_OK)
    rc = agree(w, lst, &lerr, err);
  if (rc)
    for (int i = 0; i < p->n; i++) {
      if (owned[i])
        ts_shard_free(local[i].data);
      memset(&local[i], 0, sizeof local[i]);
      owned[i] = false;
    }
  return rc;
}

/* This rank's part of the compute mesh: its box of the natural result. */
static bool compute_box(const ts_dein_plan *p, int rank, ts_box *box, ts_error *err) {
  bool in = false;
  if (ts_attr_rank_box(ts_dein_plan_chosen(p)->natural, p->out_ndim, p->out_shape, rank, box, &in,
                       err))
    return false;
  return in;
}

/* The local einsum plan over this rank's operand views. */
static int local_kplan(const ts_dein_plan *p, const ts_tensor *local, ts_einsum_plan **kp,
                       ts_error *err) {
  int ndims[TS_DEIN_MAX_OPERANDS];
  const int64_t *shapes[TS_DEIN_MAX_OPERANDS];
  for (int i = 0; i < p->n; i++) {
    ndims[i] = local[i].layout.ndim;
    shapes[i] = local[i].layout.shape;
  }
  return ts_einsum_plan_create(kp, p->equation, p->n, ndims, shapes, p->dtype, NULL, err);
}

static bool operands_empty(const ts_dein_plan *p, const ts_tensor *local) {
  for (int i = 0; i < p->n; i++)
    if (any_zero(&local[i].layout))
      return true;
  return false;
}

/* Stores `t` (this rank's slice in row-major, data NULL when none) as a new tensor: the store
 * allocates a zeroed slice that is replaced by t's buffer. Takes t's buffer in every case. */
static int store_new(ts_store *s, const char *name, int ndim, const int64_t *shape, ts_dtype dt,
                     const ts_attr *attr, ts_tensor *t, ts_error *err) {
  ts_stored *e = NULL;
  int rc = ts_store_add(s, name, ndim, shape, dt, attr, "", &e, err);
  if (rc == TS_OK && e->has_slice && t->data && e->local.bytes == t->bytes) {
    ts_shard_free(e->local.data);
    e->local.data = t->data;
    t->data = NULL;
  } else if (rc == TS_OK && e->has_slice && t->bytes) {
    ts_store_drop(s, name, NULL);
    rc = ts_error_set(err, TS_INTERNAL, "'%s': the computed slice has %zu bytes, the stored %zu",
                      name, t->bytes, e->local.bytes);
  }
  ts_shard_free(t->data);
  memset(t, 0, sizeof *t);
  return rc;
}

int ts_dein_run(ts_store *s, ts_world *w, const ts_dein_request *req, ts_dein_kept **kept,
                char **explain, ts_dein_report *rep, ts_error *err) {
  ts_error scratch, lerr;
  if (!err)
    err = &scratch;
  ts_error_clear(&lerr);
  if (kept)
    *kept = NULL;
  if (explain)
    *explain = NULL;
  if (rep)
    memset(rep, 0, sizeof *rep);
  if (!s || !w || !req)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_dein_run: NULL argument");
  ts_stored *ops[TS_DEIN_MAX_OPERANDS] = {NULL};
  ts_dein_plan *p = NULL;
  int lst = prior(req, &lerr);
  if (lst == TS_OK)
    lst = plan_request(s, w, req, ops, &p, &lerr);
  if (lst == TS_OK)
    lst = check_new_name(s, req->out, "einsum output", &lerr);
  if (lst == TS_OK && req->no_scalar && p->out_ndim == 0)
    lst = ts_error_set(&lerr, TS_BAD_SHAPE,
                       "the einsum's output '%s' would be a scalar (0 dims); stored tensors have "
                       "1 to %d dims: keep a label in the output",
                       p->equation, TS_MAX_DIMS);
  if (lst == TS_OK && explain && !(*explain = ts_dein_plan_explain(p)))
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the einsum explain text");
  int rc = agree(w, lst, &lerr, err);
  if (rc) {
    ts_dein_plan_destroy(&p);
    if (explain) {
      free(*explain);
      *explain = NULL;
    }
    return rc;
  }
  const ts_dein_cand *c = ts_dein_plan_chosen(p);
  if (rep) {
    snprintf(rep->plan, sizeof rep->plan, "%s", c->name);
    rep->planned_wire_bytes = c->wire_bytes;
  }
  ts_tensor local[TS_DEIN_MAX_OPERANDS];
  bool owned[TS_DEIN_MAX_OPERANDS];
  rc = move_operands(w, p, ops, kept != NULL, local, owned, rep, err);
  if (rc) {
    ts_dein_plan_destroy(&p);
    return rc;
  }
  /* Local compute */
  ts_box box;
  bool in = compute_box(p, ts_world_rank(w), &box, &lerr);
  ts_tensor result;
  memset(&result, 0, sizeof result);
  ts_einsum_plan *kp = NULL;
  ts_einsum_cache *cache = NULL;
  if (in) {
    lst = alloc_box(&box, p->dtype, "the einsum result", &result, &lerr);
    if (lst == TS_OK && operands_empty(p, local)) {
      memset(result.data, 0, result.bytes);
    } else if (lst == TS_OK) {
      const ts_tensor *opv[TS_DEIN_MAX_OPERANDS];
      for (int i = 0; i < p->n; i++)
        opv[i] = &local[i];
      lst = local_kplan(p, local, &kp, &lerr);
      if (lst == TS_OK && kept)
        lst = ts_einsum_cache_create(&cache, &lerr);
      if (lst == TS_OK)
        lst = ts_einsum_execute(kp, &result, opv, cache, &lerr);
    }
  }
  /* The result to the requested attribute (the executor agrees on the compute's status), or an
   * agreement on it. */
  ts_tensor final;
  memset(&final, 0, sizeof final);
  if (c->out_move) {
    ts_exec_opts xo = xopts(lst, &lerr);
    ts_exec_report xr;
    rc = ts_reshard_exec(w, c->out_move, in ? &result : NULL, NULL, &xo, &final, &xr, err);
    if (rc == TS_OK && rep)
      rep->bytes_sent += xr.bytes_sent;
    ts_shard_free(result.data);
  } else {
    rc = agree(w, lst, &lerr, err);
    final = result;
    if (rc)
      ts_shard_free(result.data);
  }
  memset(&result, 0, sizeof result);
  /* Commit */
  if (rc == TS_OK) {
    lst = store_new(s, req->out, p->out_ndim, p->out_shape, p->dtype, c->final, &final, &lerr);
    rc = agree(w, lst, &lerr, err);
    if (rc && lst == TS_OK)
      ts_store_drop(s, req->out, NULL);
  }
  if (rc == TS_OK && kept) {
    ts_dein_kept *k = calloc(1, sizeof *k);
    if (k) { /* a kept state that cannot be had is an empty one: backward then moves again */
      k->plan = p;
      p = NULL;
      k->kplan = kp;
      kp = NULL;
      k->cache = cache;
      cache = NULL;
      for (int i = 0; i < k->plan->n; i++) {
        k->ops[i] = local[i];
        owned[i] = false;
      }
      *kept = k;
      if (rep)
        rep->kept_bytes = ts_dein_kept_bytes(k);
    }
  }
  for (int i = 0; i < TS_DEIN_MAX_OPERANDS && i < req->n; i++)
    if (owned[i])
      ts_shard_free(local[i].data);
  ts_einsum_cache_destroy(&cache);
  ts_einsum_plan_destroy(&kp);
  ts_dein_plan_destroy(&p);
  if (rc && explain) {
    free(*explain);
    *explain = NULL;
  }
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Backward */

int ts_dein_backward(ts_store *s, ts_world *w, const ts_dein_request *req, ts_dein_kept *kept,
                     const char *grad_out, const char *const *grad_names, ts_dein_report *rep,
                     ts_error *err) {
  ts_error scratch, lerr;
  if (!err)
    err = &scratch;
  ts_error_clear(&lerr);
  if (rep)
    memset(rep, 0, sizeof *rep);
  if (!s || !w || !req || !grad_names)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_dein_backward: NULL argument");
  if (kept && !kept->plan)
    kept = NULL;
  ts_stored *ops[TS_DEIN_MAX_OPERANDS] = {NULL};
  ts_dein_plan *own_plan = NULL;
  int lst = prior(req, &lerr);
  if (lst == TS_OK && !kept)
    lst = plan_request(s, w, req, ops, &own_plan, &lerr);
  const ts_dein_plan *p = kept ? kept->plan : own_plan;
  if (!p) { /* failed before planning: agree on it, nothing else */
    int rc = agree(w, lst, &lerr, err);
    return rc ? rc : ts_error_set(err, TS_INTERNAL, "einsum backward: no plan");
  }
  /* The output gradient and the gradients' names */
  ts_stored *g = lst == TS_OK ? ts_store_find(s, grad_out) : NULL;
  if (lst == TS_OK && !g)
    lst = ts_error_set(&lerr, TS_NOT_FOUND, "no output gradient named '%s'",
                       grad_out ? grad_out : "(null)");
  if (lst == TS_OK && (g->ndim != p->out_ndim || g->dtype != p->dtype ||
                       memcmp(g->shape, p->out_shape, (size_t)g->ndim * sizeof *g->shape))) {
    lst = ts_error_set(&lerr, TS_BAD_SHAPE,
                       "output gradient '%s' is %s with %d dims; the einsum's output is %s[%s] "
                       "with %d dims (and the same sizes)",
                       g->name, ts_dtype_name(g->dtype), g->ndim, ts_dtype_name(p->dtype),
                       p->out_labels, p->out_ndim);
  }
  int nwant = 0;
  for (int i = 0; lst == TS_OK && i < p->n; i++) {
    if (!grad_names[i] || !grad_names[i][0])
      continue;
    nwant++;
    lst = check_new_name(s, grad_names[i], "gradient", &lerr);
    for (int j = 0; lst == TS_OK && j < i; j++)
      if (grad_names[j] && strcmp(grad_names[j], grad_names[i]) == 0)
        lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT, "gradient name '%s' is given twice",
                           grad_names[i]);
  }
  if (lst == TS_OK && nwant == 0)
    lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT,
                       "no gradient asked for; name the gradient of at least one operand");
  ts_attr *gattr = NULL, *gradattr[TS_DEIN_MAX_OPERANDS] = {NULL};
  ts_plan *gmove = NULL;
  if (lst == TS_OK)
    lst = ts_dein_grad_out_attr(p, &gattr, &lerr);
  for (int i = 0; lst == TS_OK && i < p->n; i++)
    if (grad_names[i] && grad_names[i][0])
      lst = ts_dein_grad_attr(p, i, &gradattr[i], &lerr);
  if (lst == TS_OK && !ts_attr_equal(g->attr, gattr)) {
    ts_plan_opts po = {TS_STRATEGY_AUTO, req->staging_bytes, ts_world_size(w)};
    lst = ts_plan_create(g->ndim, g->shape, g->dtype, g->attr, gattr, &po, &gmove, &lerr);
  }
  int rc = agree(w, lst, &lerr, err);
  ts_tensor local[TS_DEIN_MAX_OPERANDS], gl, grads[TS_DEIN_MAX_OPERANDS];
  bool owned[TS_DEIN_MAX_OPERANDS] = {false}, gowned = false;
  memset(local, 0, sizeof local);
  memset(grads, 0, sizeof grads);
  memset(&gl, 0, sizeof gl);
  /* Operands (moved again without a kept state) and the output gradient */
  if (rc == TS_OK && !kept)
    rc = move_operands(w, p, ops, false, local, owned, rep, err);
  if (rc == TS_OK && kept)
    memcpy(local, kept->ops, sizeof local);
  if (rc == TS_OK && gmove) {
    ts_exec_opts xo = xopts(TS_OK, NULL);
    ts_exec_report xr;
    rc = ts_reshard_exec(w, gmove, g->has_slice ? &g->local : NULL, NULL, &xo, &gl, &xr, err);
    gowned = gl.data != NULL;
    if (rc == TS_OK && rep)
      rep->bytes_sent += xr.bytes_sent;
  } else if (rc == TS_OK) {
    lst = g->has_slice ? local_view(g, false, &gl, &gowned, &lerr) : TS_OK;
    rc = agree(w, lst, &lerr, err);
  }
  /* Local backward */
  ts_box box;
  bool in = rc == TS_OK && compute_box(p, ts_world_rank(w), &box, &lerr);
  lst = TS_OK;
  ts_einsum_plan *kp = NULL;
  if (in) {
    const ts_tensor *gv[TS_DEIN_MAX_OPERANDS] = {NULL}, *opv[TS_DEIN_MAX_OPERANDS];
    for (int i = 0; i < p->n; i++) {
      opv[i] = &local[i];
      if (lst == TS_OK && gradattr[i]) {
        ts_box ob;
        bool has = false;
        lst = ts_attr_rank_box(ts_dein_plan_chosen(p)->target[i], p->ndim[i], p->shape[i],
                               ts_world_rank(w), &ob, &has, &lerr);
        if (lst == TS_OK)
          lst = alloc_box(&ob, p->dtype, "an einsum gradient", &grads[i], &lerr);
        gv[i] = &grads[i];
      }
    }
    if (lst == TS_OK && (operands_empty(p, local) || any_zero(&gl.layout))) {
      for (int i = 0; i < p->n; i++)
        if (grads[i].data)
          memset(grads[i].data, 0, grads[i].bytes);
    } else if (lst == TS_OK) {
      ts_einsum_plan *use = kept && kept->kplan ? kept->kplan : NULL;
      if (!use && (lst = local_kplan(p, local, &kp, &lerr)) == TS_OK)
        use = kp;
      if (lst == TS_OK)
        lst = ts_einsum_backward(use, &gl, opv, gv, kept ? kept->cache : NULL, &lerr);
    }
  }
  /* Commit every gradient or none */
  if (rc == TS_OK) {
    rc = agree(w, lst, &lerr, err);
    bool stored[TS_DEIN_MAX_OPERANDS] = {false};
    lst = TS_OK;
    for (int i = 0; rc == TS_OK && lst == TS_OK && i < p->n; i++)
      if (gradattr[i]) {
        lst = store_new(s, grad_names[i], p->ndim[i], p->shape[i], p->dtype, gradattr[i], &grads[i],
                        &lerr);
        stored[i] = lst == TS_OK;
      }
    if (rc == TS_OK)
      rc = agree(w, lst, &lerr, err);
    for (int i = 0; rc && i < p->n; i++)
      if (stored[i])
        ts_store_drop(s, grad_names[i], NULL);
  }
  for (int i = 0; i < TS_DEIN_MAX_OPERANDS; i++) {
    ts_shard_free(grads[i].data);
    if (owned[i])
      ts_shard_free(local[i].data);
    ts_attr_destroy(&gradattr[i]);
  }
  if (gowned)
    ts_shard_free(gl.data);
  ts_einsum_plan_destroy(&kp);
  ts_plan_destroy(&gmove);
  ts_attr_destroy(&gattr);
  ts_dein_plan_destroy(&own_plan);
  return rc;
}
