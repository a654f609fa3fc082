/* einsum_plan.c - plans and caches: their lifecycles, the checks of the tensors a call passes
 * against the plan, and the one-call ts_einsum.
 *
 * A plan is immutable once made, so one plan serves any number of calls, also concurrently; the
 * state of a call (transposed operands, intermediates) lives in the caller's cache, or, for a
 * call without one, in the plan's workspace (kept across calls, one call at a time). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "einsum_internal.h"

static atomic_uint_least64_t next_plan_id = 1;

static bool compute_dtype(ts_dtype dt, ts_dtype *cdt) {
  switch (dt) {
  case TS_F32:
  case TS_F16:
  case TS_BF16: *cdt = TS_F32; return true;
  case TS_F64: *cdt = TS_F64; return true;
  case TS_I32: *cdt = TS_I32; return true;
  case TS_I64: *cdt = TS_I64; return true;
  default: return false;
  }
}

int ts_einsum_plan_create(ts_einsum_plan **out, const char *equation, int n_operands,
                          const int *ndims, const int64_t *const *shapes, ts_dtype dtype,
                          const ts_einsum_opts *opts, ts_error *err) {
  if (out == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: out is NULL");
  *out = NULL;
  ts_einsum_plan *p = calloc(1, sizeof *p);
  if (p == NULL)
    return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a plan");
  p->id = atomic_fetch_add(&next_plan_id, 1);
  if (pthread_mutex_init(&p->ws_lock, NULL) != 0) {
    free(p);
    return ts_error_set(err, TS_NO_MEMORY, "einsum: cannot make a plan's lock");
  }
  int rc = ts__ein_parse(&p->pe, equation, n_operands, ndims, shapes, err);
  if (rc)
    goto fail;
  if (!ts_dtype_valid((int)dtype) || !compute_dtype(dtype, &p->cdt)) {
    rc = ts_error_set(err, TS_BAD_DTYPE,
                      "einsum '%s': dtype %s is not supported; valid are f32, "
                      "f64, f16, bf16, i32 and i64",
                      equation, ts_dtype_name(dtype));
    goto fail;
  }
  p->dtype = dtype;
  if (opts)
    p->opts = *opts;
  if ((int)p->opts.path < 0 || p->opts.path >= TS_EINSUM_PATH_COUNT) {
    rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                      "einsum '%s': path option %d is not valid (greedy 0 or left-to-right 1)",
                      equation, (int)p->opts.path);
    goto fail;
  }
  for (int l = 0; l < TS__EIN_MAXL; l++)
    if (p->pe.size[l] == 0)
      p->empty = true;
  /* One node per operand: its distinct labels in order of first appearance. */
  for (int i = 0; i < p->pe.n; i++) {
    ts__ein_node *nd = &p->node[i];
    nd->numel = 1.0;
    for (int d = 0; d < p->pe.ndim[i]; d++) {
      int l = p->pe.lab[i][d];
      if (nd->set >> l & 1)
        continue;
      nd->set |= (ts__ein_set)1 << l;
      nd->lab[nd->nd++] = (int8_t)l;
      nd->numel *= (double)p->pe.size[l];
    }
  }
  p->n_nodes = p->pe.n;
  rc = ts__ein_path(p, err);
  if (rc)
    goto fail;
  ts__ein_classify(p);
  *out = p;
  return TS_OK;
fail:
  pthread_mutex_destroy(&p->ws_lock);
  free(p);
  return rc;
}

void ts_einsum_plan_destroy(ts_einsum_plan **p) {
  if (p == NULL || *p == NULL)
    return;
  ts_einsum_cache_destroy(&(*p)->ws);
  pthread_mutex_destroy(&(*p)->ws_lock);
  free(*p);
  *p = NULL;
}

ts_einsum_cache *ts__ein_scratch_acquire(const ts_einsum_plan *p, ts_einsum_cache *local) {
  memset(local, 0, sizeof *local);
  ts_einsum_plan *mp = (ts_einsum_plan *)p; /* the workspace is the plan's mutable part */
  if (pthread_mutex_trylock(&mp->ws_lock) != 0)
    return local;
  if (mp->ws == NULL)
    mp->ws = calloc(1, sizeof *mp->ws);
  if (mp->ws == NULL) {
    pthread_mutex_unlock(&mp->ws_lock);
    return local;
  }
  mp->ws->retain = true;
  return mp->ws;
}

void ts__ein_scratch_release(const ts_einsum_plan *p, ts_einsum_cache *c) {
  ts_einsum_plan *mp = (ts_einsum_plan *)p;
  if (c != mp->ws) {
    ts__ein_cache_clear(c);
    return;
  }
  /* Kept for the next call: its buffers, not its claim on any operands. */
  memset(c->operand_data, 0, sizeof c->operand_data);
  pthread_mutex_unlock(&mp->ws_lock);
}

void ts_einsum_plan_output(const ts_einsum_plan *p, int *ndim, int64_t *shape) {
  if (p == NULL) {
    if (ndim)
      *ndim = 0;
    return;
  }
  if (ndim)
    *ndim = p->pe.out_ndim;
  if (shape)
    for (int d = 0; d < p->pe.out_ndim; d++)
      shape[d] = p->pe.size[p->pe.out_lab[d]];
}

int ts_einsum_plan_n_operands(const ts_einsum_plan *p) { return p ? p->pe.n : 0; }
ts_dtype ts_einsum_plan_dtype(const ts_einsum_plan *p) { return p ? p->dtype : TS_DTYPE_COUNT; }
double ts_einsum_plan_flops(const ts_einsum_plan *p) { return p ? p->flops : 0.0; }

static void node_text(const ts_einsum_plan *p, int i, char *buf, size_t cap) {
  const ts__ein_node *nd = &p->node[i];
  int w = snprintf(buf, cap, "%s%d[", i < p->pe.n ? "op" : "t", i);
  for (int d = 0; d < nd->nd && w > 0 && (size_t)w + 2 < cap; d++)
    buf[w++] = ts__ein_label_char(nd->lab[d]);
  if (w > 0 && (size_t)w + 2 < cap) {
    buf[w++] = ']';
    buf[w] = '\0';
  }
}

int ts_einsum_plan_format(const ts_einsum_plan *p, char *buf, size_t cap) {
  size_t used = 0;
  if (buf == NULL)
    cap = 0;
  if (cap > 0)
    buf[0] = '\0';
  if (p == NULL)
    return 0;
  for (int si = 0; si < p->n_steps; si++) {
    const ts__ein_step *s = &p->step[si];
    char x[80], y[80], r[80];
    node_text(p, s->x, x, sizeof x);
    node_text(p, s->y, y, sizeof y);
    node_text(p, s->result, r, sizeof r);
    int w = snprintf(used < cap ? buf + used : NULL, used < cap ? cap - used : 0,
                     "step %d: %s x %s -> %s batch=%lld m=%lld n=%lld k=%lld\n", si, x, y, r,
                     (long long)s->batch, (long long)s->m, (long long)s->n, (long long)s->k);
    if (w < 0)
      return 0;
    used += (size_t)w;
  }
  return (int)used;
}

int ts__ein_check_tensor(const ts_tensor *t, ts_dtype dt, int ndim, const int64_t *shape,
                         const char *what, int index, bool writable, ts_error *err) {
  if (t == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: %s %d is NULL", what, index);
  const ts_layout *l = &t->layout;
  if (l->dtype != dt)
    return ts_error_set(err, TS_BAD_DTYPE, "einsum: %s %d has dtype %s; the plan's is %s", what,
                        index, ts_dtype_name(l->dtype), ts_dtype_name(dt));
  if (l->n_inner != 0)
    return ts_error_set(err, TS_BAD_LAYOUT,
                        "einsum: %s %d has a blocked layout; einsum takes plain strided layouts",
                        what, index);
  if (l->ndim != ndim)
    return ts_error_set(err, TS_BAD_SHAPE, "einsum: %s %d has %d dims; the plan's has %d", what,
                        index, l->ndim, ndim);
  for (int d = 0; d < ndim; d++)
    if (l->shape[d] != shape[d])
      return ts_error_set(err, TS_BAD_SHAPE,
                          "einsum: %s %d dim %d has size %lld; the plan's is %lld", what, index, d,
                          (long long)l->shape[d], (long long)shape[d]);
  ts_error e2;
  int rc = ts_layout_check(l, t->bytes, writable, &e2);
  if (rc)
    return ts_error_set(err, rc, "einsum: %s %d: %s", what, index, e2.msg);
  if (t->data == NULL && t->bytes > 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: %s %d has no data", what, index);
  size_t es = ts_dtype_size(dt);
  if ((uintptr_t)t->data % es != 0)
    return ts_error_set(err, TS_BAD_LAYOUT,
                        "einsum: %s %d's buffer is not aligned to its %zu-byte elements", what,
                        index, es);
  return TS_OK;
}

void ts__ein_operand_view(const ts_einsum_plan *p, int i, const ts_tensor *t, ts__ein_view *v) {
  const ts__ein_node *nd = &p->node[i];
  const ts_layout *l = &t->layout;
  v->base = (char *)t->data + l->offset;
  v->dt = l->dtype;
  v->nd = nd->nd;
  for (int j = 0; j < nd->nd; j++) {
    int lab = nd->lab[j];
    v->lab[j] = (int8_t)lab;
    v->size[j] = p->pe.size[lab];
    v->stride[j] = 0;
    for (int d = 0; d < p->pe.ndim[i]; d++)
      if (p->pe.lab[i][d] == lab && l->shape[d] != 1)
        v->stride[j] += l->strides[d];
    /* A label of size 1 everywhere keeps stride 0: reading index 0 only. */
  }
}

void ts__ein_view_select(ts__ein_view *dst, const ts__ein_view *v, int nd, const int8_t *lab) {
  ts__ein_view r;
  r.base = v->base;
  r.dt = v->dt;
  r.nd = nd;
  for (int j = 0; j < nd; j++) {
    r.lab[j] = lab[j];
    r.size[j] = 1;
    r.stride[j] = 0;
    for (int d = 0; d < v->nd; d++)
      if (v->lab[d] == lab[j]) {
        r.size[j] = v->size[d];
        r.stride[j] = v->stride[d];
      }
  }
  *dst = r;
}

int ts_einsum_cache_create(ts_einsum_cache **out, ts_error *err) {
  if (out == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: out is NULL");
  *out = calloc(1, sizeof **out);
  if (*out == NULL)
    return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a cache");
  return TS_OK;
}

void ts__ein_cache_clear(ts_einsum_cache *c) {
  for (int s = 0; s < c->n_steps; s++) {
    ts_buffer_free(c->step[s].a.owned);
    ts_buffer_free(c->step[s].b.owned);
    ts_buffer_free(c->step[s].result);
  }
  bool retain = c->retain;
  memset(c, 0, sizeof *c);
  c->retain = retain;
}

void ts_einsum_cache_destroy(ts_einsum_cache **c) {
  if (c == NULL || *c == NULL)
    return;
  ts__ein_cache_clear(*c);
  free(*c);
  *c = NULL;
}

size_t ts_einsum_cache_bytes(const ts_einsum_cache *c) { return c ? c->bytes : 0; }

int ts_einsum(const char *equation, int n_operands, const ts_tensor *const *operands,
              const ts_tensor *out, ts_error *err) {
  if (operands == NULL || n_operands < 1 || n_operands > TS_EINSUM_MAX_OPERANDS)
    return ts_error_set(err, TS_EINSUM, "einsum '%s': %d operands given; valid is 1 to %d",
                        equation ? equation : "(null)", n_operands, TS_EINSUM_MAX_OPERANDS);
  int ndims[TS_EINSUM_MAX_OPERANDS];
  const int64_t *shapes[TS_EINSUM_MAX_OPERANDS];
  for (int i = 0; i < n_operands; i++) {
    if (operands[i] == NULL)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: operand %d is NULL", i);
    ndims[i] = operands[i]->layout.ndim;
    shapes[i] = operands[i]->layout.shape;
  }
  ts_einsum_plan *p = NULL;
  int rc = ts_einsum_plan_create(&p, equation, n_operands, ndims, shapes, operands[0]->layout.dtype,
                                 NULL, err);
  if (rc)
    return rc;
  rc = ts_einsum_execute(p, out, operands, NULL, err);
  ts_einsum_plan_destroy(&p);
  return rc;
}
