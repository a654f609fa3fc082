/* einsum_grad.c - the backward pass. For a step C[ABO,AO,BO] = sum_AB A'[ABO,AO,AB] B'[ABO,AB,BO]:
 *
 *   dA' = dC  * B'^T   (per batch: [AO x BO] * [BO x AB]),   i.e. einsum(B, dO -> A)
 *   dB' = A'^T * dC    (per batch: [AB x AO] * [AO x BO]),   i.e. einsum(dO, A -> B)
 *
 * A' and B' are the matrices the forward made (taken from the cache), and dC is the output
 * gradient brought once to [ABO, AO, BO]: because every layout of a step orders the labels of
 * each class the same way, the cached layouts fit these products as they are, with CBLAS's
 * transpose flags, and no operand is transposed again. The path is walked backwards; an
 * intermediate's gradient is produced in the intermediate's own layout, which is exactly the dC
 * layout of the step that made it. An operand's gradient is then moved to the operand's own
 * order: labels it reduced are broadcast back, dims it broadcast (size 1) are summed, repeated
 * labels write the diagonal of a zeroed gradient. Without a cache, a forward pass without its
 * last GEMM fills the plan's workspace (or, while another call holds it, a temporary cache)
 * first. */
#include <stdlib.h>
#include <string.h>

#include "einsum_internal.h"

static bool needs_grad(const ts_einsum_plan *p, int node, const ts_tensor *const *grads) {
  if (node < p->pe.n)
    return grads[node] != NULL;
  const ts__ein_step *s = &p->step[node - p->pe.n];
  return needs_grad(p, s->x, grads) || needs_grad(p, s->y, grads);
}

/* The whole tensor t as a view of its own dims (for zeroing). */
static void tensor_view(const ts_tensor *t, ts__ein_view *v) {
  v->base = (char *)t->data + t->layout.offset;
  v->dt = t->layout.dtype;
  v->nd = t->layout.ndim;
  for (int d = 0; d < v->nd; d++) {
    v->lab[d] = (int8_t)d;
    v->size[d] = t->layout.shape[d];
    v->stride[d] = t->layout.strides[d];
  }
}

/* Selects labels lab of v; labels v lacks are broadcast (stride 0) at the plan's size. */
static void select_broadcast(const ts_einsum_plan *p, ts__ein_view *dst, const ts__ein_view *v,
                             int nd, const int8_t *lab) {
  ts__ein_view_select(dst, v, nd, lab);
  for (int j = 0; j < nd; j++) {
    bool present = false;
    for (int d = 0; d < v->nd; d++)
      if (v->lab[d] == lab[j])
        present = true;
    if (!present)
      dst->size[j] = p->pe.size[lab[j]];
  }
}

/* Writes the gradient g (over some labels of operand i, in any order) to the operand's gradient
 * tensor gt: missing labels broadcast, size-1 dims summed. With repeated labels the diagonal is
 * written into a zeroed dense buffer first (a dense diagonal view always passes the copy
 * kernel's aliasing check, a diagonal of an arbitrary strided tensor may not), then copied. */
static int grad_to_operand(const ts_einsum_plan *p, int i, const ts__ein_view *g,
                           const ts_tensor *gt, ts_error *err) {
  const ts__ein_node *nd = &p->node[i];
  int ndim = p->pe.ndim[i];
  bool diag = ndim != nd->nd;
  ts__ein_view whole, dense;
  tensor_view(gt, &whole);
  char *buf = NULL;
  if (diag) {
    /* The dims of one label next to each other (row-major among themselves), and each label's
     * block spaced so that the next label's stride is at least size x stride of the diagonal
     * inside it: the copy kernel then accepts the diagonal view as a destination (a diagonal of
     * an arbitrary strided tensor may overlap its checks). The gaps are never read. */
    dense = whole;
    dense.dt = p->cdt;
    int64_t base = 1;
    for (int j = nd->nd - 1; j >= 0; j--) {
      int64_t st = base, diag_stride = 0, s = 1;
      for (int d = ndim - 1; d >= 0; d--)
        if (p->pe.lab[i][d] == nd->lab[j]) {
          dense.stride[d] = st;
          diag_stride += st;
          s = dense.size[d];
          st *= s;
        }
      base = st > s * diag_stride ? st : s * diag_stride;
      if (base == 0)
        base = 1;
    }
    size_t need = (size_t)base * ts_dtype_size(p->cdt);
    buf = ts_buffer_alloc(need);
    if (buf == NULL)
      return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a gradient (%zu bytes)", need);
    memset(buf, 0, need);
    dense.base = buf;
  }
  const ts__ein_view *target = diag ? &dense : &whole;
  ts__ein_view dst, src;
  int8_t dlab[TS__EIN_MAXL] = {0}, blab[TS__EIN_MAXL] = {0};
  int ndst = 0, nb = 0;
  dst.base = target->base;
  dst.dt = target->dt;
  for (int j = 0; j < nd->nd; j++) {
    int l = nd->lab[j];
    int64_t own = 1, stride = 0;
    for (int d = 0; d < ndim; d++)
      if (p->pe.lab[i][d] == l) {
        own = target->size[d];
        stride += target->stride[d];
      }
    if (own == 1 && p->pe.size[l] > 1) {
      blab[nb++] = (int8_t)l; /* broadcast in the operand: summed */
      continue;
    }
    dst.lab[ndst] = (int8_t)l;
    dst.size[ndst] = own;
    dst.stride[ndst] = stride;
    dlab[ndst++] = (int8_t)l;
  }
  dst.nd = ndst;
  memcpy(dlab + ndst, blab, (size_t)nb);
  select_broadcast(p, &src, g, ndst + nb, dlab);
  int rc = ts__ein_reduce_copy(&dst, &src, p->cdt, err);
  if (rc == TS_OK && diag)
    rc = ts__ein_copy(&whole, &dense, err);
  if (rc == TS_OK)
    ts__ein_count(TS__CNT_RESULT);
  ts_buffer_free(buf);
  return rc;
}

/* True when operand i's gradient tensor can take the GEMM's output as it is. */
static bool operand_grad_direct(const ts_einsum_plan *p, int i, const ts_tensor *gt) {
  if (gt->layout.dtype != p->cdt || p->pe.ndim[i] != p->node[i].nd)
    return false;
  for (int d = 0; d < p->pe.ndim[i]; d++)
    if (gt->layout.shape[d] != p->pe.size[p->pe.lab[i][d]])
      return false;
  return true;
}

/* The gradient of one side of step s. side 0: dA' = dC * B'^T over [ABO][AO][AB];
 * side 1: dB' = A'^T * dC over [ABO][AB][BO]. */
static int grad_side(const ts_einsum_plan *p, const ts__ein_step *s, int side,
                     const ts__ein_mat *dc, const ts__ein_step_cache *sc,
                     const ts_tensor *const *grads, char **gnode, ts_error *err) {
  int node = side == 0 ? s->x : s->y;
  int gr = side == 0 ? TS__G_AO : TS__G_AB, gc = side == 0 ? TS__G_AB : TS__G_BO;
  int gred = side == 0 ? TS__G_RA : TS__G_RB;
  int64_t rows = side == 0 ? s->m : s->k, cols = side == 0 ? s->k : s->n;
  ts__ein_mat a, b;
  if (side == 0) {
    a = *dc;
    b = sc->b.mat; /* K x N, used as its transpose */
    b.rs = sc->b.mat.cs;
    b.cs = sc->b.mat.rs;
    b.rows = sc->b.mat.cols;
    b.cols = sc->b.mat.rows;
  } else {
    a = sc->a.mat; /* M x K, used as its transpose */
    a.rs = sc->a.mat.cs;
    a.cs = sc->a.mat.rs;
    a.rows = sc->a.mat.cols;
    a.cols = sc->a.mat.rows;
    b = *dc;
  }
  int64_t inner_k = side == 0 ? s->n : s->m;
  size_t es = ts_dtype_size(p->cdt);
  const ts__ein_node *nd = &p->node[node];

  /* The destination: an intermediate's gradient buffer, or the operand's gradient tensor. */
  ts__ein_view dest;
  if (node >= p->pe.n) {
    size_t need = (size_t)nd->numel * es;
    gnode[node] = ts_buffer_alloc(need ? need : 1);
    if (gnode[node] == NULL)
      return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a gradient (%zu bytes)", need);
    ts__ein_dense_view(p, &dest, gnode[node], p->cdt, nd->nd, nd->lab);
  } else {
    ts__ein_operand_view(p, node, grads[node], &dest);
  }
  ts__ein_mat cm;
  if (s->ng[gred] == 0 && (node >= p->pe.n || operand_grad_direct(p, node, grads[node])) &&
      ts__ein_as_matrix(&dest, s->ng[TS__G_ABO], s->g[TS__G_ABO], s->ng[gr], s->g[gr], s->ng[gc],
                        s->g[gc], &cm))
    return ts__ein_gemm(p->cdt, s->ng[TS__G_ABO], s->bsize, &cm, &a, &b, inner_k, err);

  /* Through a temporary in the form closest to the destination, then moved. */
  bool rows_inner = ts__ein_unit_stride_in(&dest, s->ng[gr], s->g[gr]);
  size_t need = (size_t)(s->batch * rows * cols) * es;
  char *tmp = ts_buffer_alloc(need ? need : 1);
  if (tmp == NULL)
    return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a gradient (%zu bytes)", need);
  ts__ein_dense_mat(s, &cm, tmp, rows, cols, rows_inner);
  int rc = ts__ein_gemm(p->cdt, s->ng[TS__G_ABO], s->bsize, &cm, &a, &b, inner_k, err);
  if (rc == TS_OK) {
    int8_t lab[TS__EIN_MAXL];
    int n = 0;
    int outer = rows_inner ? gc : gr, inner = rows_inner ? gr : gc;
    memcpy(lab + n, s->g[TS__G_ABO], (size_t)s->ng[TS__G_ABO]);
    n += s->ng[TS__G_ABO];
    memcpy(lab + n, s->g[outer], (size_t)s->ng[outer]);
    n += s->ng[outer];
    memcpy(lab + n, s->g[inner], (size_t)s->ng[inner]);
    n += s->ng[inner];
    ts__ein_view tv;
    ts__ein_dense_view(p, &tv, tmp, p->cdt, n, lab);
    if (node >= p->pe.n) {
      ts__ein_view sv;
      select_broadcast(p, &sv, &tv, dest.nd, dest.lab);
      rc = ts__ein_copy(&dest, &sv, err);
      if (rc == TS_OK)
        ts__ein_count(TS__CNT_RESULT);
    } else {
      rc = grad_to_operand(p, node, &tv, grads[node], err);
    }
  }
  ts_buffer_free(tmp);
  return rc;
}

static int zero_tensor(const ts_tensor *t, ts_error *err) {
  ts__ein_view v;
  tensor_view(t, &v);
  return ts__ein_zero(&v, err);
}

static int backward_steps(const ts_einsum_plan *p, const ts_tensor *grad_out,
                          const ts_tensor *const *grads, const ts_einsum_cache *c, char **gnode,
                          ts_error *err) {
  size_t es = ts_dtype_size(p->cdt);
  for (int si = p->n_steps - 1; si >= 0; si--) {
    const ts__ein_step *s = &p->step[si];
    ts__ein_mat dc;
    char *dc_owned = NULL;
    if (si == p->n_steps - 1) {
      /* grad_out, brought once to [ABO, AO, BO] unless it reads that way already. */
      ts__ein_view gv;
      ts__ein_out_view(p, grad_out, &gv);
      if (grad_out->layout.dtype != p->cdt ||
          !ts__ein_as_matrix(&gv, s->ng[TS__G_ABO], s->g[TS__G_ABO], s->ng[TS__G_AO],
                             s->g[TS__G_AO], s->ng[TS__G_BO], s->g[TS__G_BO], &dc)) {
        size_t need = (size_t)(s->batch * s->m * s->n) * es;
        dc_owned = ts_buffer_alloc(need ? need : 1);
        if (dc_owned == NULL)
          return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for grad_out (%zu bytes)",
                              need);
        const ts__ein_node *r = &p->node[s->result];
        ts__ein_view dv, sv;
        ts__ein_dense_view(p, &dv, dc_owned, p->cdt, r->nd, r->lab);
        ts__ein_view_select(&sv, &gv, r->nd, r->lab);
        int rc = ts__ein_copy(&dv, &sv, err);
        if (rc) {
          ts_buffer_free(dc_owned);
          return rc;
        }
        ts__ein_count(TS__CNT_GRAD_OUT);
        ts__ein_dense_mat(s, &dc, dc_owned, s->m, s->n, false);
      }
    } else {
      ts__ein_dense_mat(s, &dc, gnode[s->result], s->m, s->n, false);
    }
    int rc = TS_OK;
    if (needs_grad(p, s->x, grads))
      rc = grad_side(p, s, 0, &dc, &c->step[si], grads, gnode, err);
    if (rc == TS_OK && needs_grad(p, s->y, grads))
      rc = grad_side(p, s, 1, &dc, &c->step[si], grads, gnode, err);
    ts_buffer_free(dc_owned);
    ts_buffer_free(gnode[s->result]);
    gnode[s->result] = NULL;
    if (rc)
      return rc;
  }
  return TS_OK;
}

/* Whether two plain layouts are the same view (shape, strides, offset) of a buffer. */
static bool same_view(const ts_layout *a, const ts_layout *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim || a->offset != b->offset ||
      a->n_inner != b->n_inner)
    return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d])
      return false;
  return true;
}

int ts_einsum_backward(const ts_einsum_plan *p, const ts_tensor *grad_out,
                       const ts_tensor *const *operands, const ts_tensor *const *grad_operands,
                       ts_einsum_cache *cache, ts_error *err) {
  if (p == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: the plan is NULL");
  if (grad_operands == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: grad_operands is NULL");
  int64_t oshape[TS_MAX_DIMS];
  ts_einsum_plan_output(p, NULL, oshape);
  int rc = ts__ein_check_operands(p, operands, err);
  if (rc == TS_OK)
    rc =
        ts__ein_check_tensor(grad_out, p->dtype, p->pe.out_ndim, oshape, "grad_out", 0, false, err);
  for (int i = 0; i < p->pe.n && rc == TS_OK; i++)
    if (grad_operands[i])
      rc = ts__ein_check_tensor(grad_operands[i], p->dtype, p->pe.ndim[i], p->pe.shape[i],
                                "gradient", i, true, err);
  if (rc)
    return rc;
  if (cache) {
    bool same = cache->plan == p && cache->plan_id == p->id && cache->n_steps == p->n_steps;
    for (int i = 0; i < p->pe.n && same; i++)
      same = cache->operand_data[i] == operands[i]->data &&
             same_view(&cache->operand_layout[i], &operands[i]->layout);
    if (!same)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "einsum: the cache does not hold a forward call of this plan on these "
                          "operands (the same buffers seen through the same strides and offsets): "
                          "run ts_einsum_execute with it first, or pass no cache");
  }
  if (p->empty) {
    for (int i = 0; i < p->pe.n && rc == TS_OK; i++)
      if (grad_operands[i])
        rc = zero_tensor(grad_operands[i], err);
    return rc;
  }
  if (p->n_steps == 0) {
    if (grad_operands[0] == NULL)
      return TS_OK;
    ts__ein_view gv;
    ts__ein_out_view(p, grad_out, &gv);
    return grad_to_operand(p, 0, &gv, grad_operands[0], err);
  }
  ts_einsum_cache local, *scratch = NULL;
  const ts_einsum_cache *c = cache;
  if (cache == NULL) {
    scratch = ts__ein_scratch_acquire(p, &local);
    rc = ts__ein_forward(p, NULL, operands, scratch, false, err);
    c = scratch;
  }
  char *gnode[2 * TS_EINSUM_MAX_OPERANDS] = {0};
  if (rc == TS_OK)
    rc = backward_steps(p, grad_out, grad_operands, c, gnode, err);
  for (int i = 0; i < 2 * TS_EINSUM_MAX_OPERANDS; i++)
    ts_buffer_free(gnode[i]);
  if (scratch) {
    if (rc)
      ts__ein_cache_clear(scratch);
    ts__ein_scratch_release(p, scratch);
  }
  return rc;
}
