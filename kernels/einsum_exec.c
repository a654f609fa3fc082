/* einsum_exec.c - the forward pass: for each pairwise step of the plan, bring A to
 * [ABO, AO, AB] and B to [ABO, AB, BO] (summing reduced labels on the way, converting f16/bf16 to
 * f32), run the batched GEMM, and leave the result in [ABO, AO, BO] for the next step or move it
 * to the output's order and layout.
 *
 * A transpose is skipped when the operand already reads as one BLAS matrix per batch element:
 * the AO (or BO) and AB labels each contiguous among themselves, one of them with stride 1,
 * batch labels anywhere (the GEMM loop walks them with their own strides). A
 * physical transpose keeps the operand's unit-stride dim innermost (choosing [ABO, AB, AO] over
 * [ABO, AO, AB] when that is the cheaper copy); both forms are the same matrix to CBLAS, up to
 * its transpose flag. What was transposed is kept in the cache for backward. When the caller's
 * cache will serve backward, a large operand of a thin GEMM whose rows are interleaved with
 * other batch elements' is gathered all the same (gather_pays): both backward products then read
 * it contiguously, any number of times. A call without a cache works in the plan's workspace. */
#include <stdlib.h>
#include <string.h>

#include "einsum_internal.h"

/* Dense view over labels lab[0..nd-1] with the plan's sizes, row-major. */
void ts__ein_dense_view(const ts_einsum_plan *p, ts__ein_view *v, char *base, ts_dtype dt, int nd,
                        const int8_t *lab) {
  v->base = base;
  v->dt = dt;
  v->nd = nd;
  int64_t st = 1;
  for (int d = nd - 1; d >= 0; d--) {
    v->lab[d] = lab[d];
    v->size[d] = p->pe.size[lab[d]];
    v->stride[d] = st;
    st *= v->size[d];
  }
}

/* The output tensor as a view over the output labels. */
void ts__ein_out_view(const ts_einsum_plan *p, const ts_tensor *t, ts__ein_view *v) {
  v->base = (char *)t->data + t->layout.offset;
  v->dt = t->layout.dtype;
  v->nd = p->pe.out_ndim;
  for (int d = 0; d < v->nd; d++) {
    v->lab[d] = p->pe.out_lab[d];
    v->size[d] = t->layout.shape[d];
    v->stride[d] = t->layout.strides[d];
  }
}

/* Reads view v (over any labels) as a batch of matrices: the labels of three groups in order. */
bool ts__ein_as_matrix(const ts__ein_view *v, int nb, const int8_t *bl, int nr, const int8_t *rl,
                       int nc, const int8_t *cl, ts__ein_mat *m) {
  int8_t lab[TS__EIN_MAXL];
  memcpy(lab, bl, (size_t)nb);
  memcpy(lab + nb, rl, (size_t)nr);
  memcpy(lab + nb + nr, cl, (size_t)nc);
  ts__ein_view s;
  ts__ein_view_select(&s, v, nb + nr + nc, lab);
  m->base = v->base;
  for (int j = 0; j < nb; j++)
    m->bstride[j] = s.stride[j];
  if (!ts__ein_fuse(&s, nb, nr, &m->rows, &m->rs) ||
      !ts__ein_fuse(&s, nb + nr, nc, &m->cols, &m->cs))
    return false;
  bool trans;
  int64_t ld;
  return ts__ein_mat_blas(m, &trans, &ld);
}

void ts__ein_node_view(const ts_einsum_plan *p, int node, const ts_tensor *const *operands,
                       const ts_einsum_cache *c, ts__ein_view *v) {
  if (node < p->pe.n) {
    ts__ein_operand_view(p, node, operands[node], v);
    return;
  }
  const ts__ein_node *nd = &p->node[node];
  ts__ein_dense_view(p, v, c->step[node - p->pe.n].result, p->cdt, nd->nd, nd->lab);
}

void ts__ein_dense_mat(const ts__ein_step *s, ts__ein_mat *m, char *base, int64_t rows,
                       int64_t cols, bool rows_inner) {
  m->base = base;
  m->rows = rows;
  m->cols = cols;
  m->rs = rows_inner ? 1 : cols;
  m->cs = rows_inner ? rows : 1;
  int64_t st = rows * cols;
  for (int j = s->ng[TS__G_ABO] - 1; j >= 0; j--) {
    m->bstride[j] = st;
    st *= s->bsize[j];
  }
}

bool ts__ein_unit_stride_in(const ts__ein_view *v, int n, const int8_t *group) {
  for (int d = 0; d < v->nd; d++)
    if (v->stride[d] == 1 && v->size[d] > 1)
      for (int j = 0; j < n; j++)
        if (group[j] == v->lab[d])
          return true;
  return false;
}

/* The cost rule for an operand that CBLAS could read in place, when a caller's cache keeps its
 * GEMM layout for backward (keep): gather it into the cache when the in-place reads are the slow
 * kind. That is a float operand of at least TS__EIN_GATHER_BYTES whose contiguous rows cover at
 * most a quarter of the rows' stride (other batch elements interleaved between them, as in
 * [b,q,h,d] read per (b,h)), in a thin GEMM (the operand's elements are reused at most
 * TS__EIN_GATHER_REUSE times), so the products stream the operand from memory and each pass
 * through the strided form pays for scattered lines again: once gathered (a copy of whole rows)
 * both backward products read it contiguously. (A call without a cache reads in place: the
 * forward product alone, or backward's own forward followed by both products, measured no faster
 * with a gather first, and the gather would hold operand-sized buffers.) */
#define TS__EIN_GATHER_BYTES ((size_t)1 << 20)
#define TS__EIN_GATHER_REUSE 64

static bool gather_pays(const ts_einsum_plan *p, const ts__ein_step *s, int side,
                        const ts__ein_mat *m) {
  if (p->cdt != TS_F32 && p->cdt != TS_F64)
    return false;
  int64_t rows = side == 0 ? s->m : s->k, cols = side == 0 ? s->k : s->n;
  size_t bytes = (size_t)(s->batch * rows * cols) * ts_dtype_size(p->cdt);
  int64_t reuse = side == 0 ? s->n : s->m;
  if (bytes < TS__EIN_GATHER_BYTES || reuse > TS__EIN_GATHER_REUSE)
    return false;
  int64_t run, ld;
  if (m->cs == 1) {
    run = m->cols;
    ld = m->rs;
  } else {
    run = m->rows;
    ld = m->cs;
  }
  if (ld < 0)
    ld = -ld;
  return ld >= 4 * run;
}

/* Brings one side of step s to its GEMM matrix. side 0 is A: [ABO][AO][AB], reduced RA;
 * side 1 is B: [ABO][AB][BO], reduced RB. keep: a caller's cache keeps the result for backward
 * (see gather_pays). */
static int prepare_side(const ts_einsum_plan *p, const ts__ein_step *s, int side,
                        const ts__ein_view *src, bool keep, bool retain, ts__ein_gop *g,
                        size_t *bytes, ts_error *err) {
  int gr = side == 0 ? TS__G_AO : TS__G_AB, gc = side == 0 ? TS__G_AB : TS__G_BO;
  int gred = side == 0 ? TS__G_RA : TS__G_RB;
  if (!p->opts.always_transpose && src->dt == p->cdt && s->ng[gred] == 0 &&
      ts__ein_as_matrix(src, s->ng[TS__G_ABO], s->g[TS__G_ABO], s->ng[gr], s->g[gr], s->ng[gc],
                        s->g[gc], &g->mat) &&
      !(keep && gather_pays(p, s, side, &g->mat))) {
    if (!retain) { /* a buffer of an earlier call, not needed this time */
      ts_buffer_free(g->owned);
      g->owned = NULL;
    }
    return TS_OK;
  }
  bool rows_inner = ts__ein_unit_stride_in(src, s->ng[gr], s->g[gr]);
  int64_t rows = side == 0 ? s->m : s->k, cols = side == 0 ? s->k : s->n;
  size_t need = (size_t)(s->batch * rows * cols) * ts_dtype_size(p->cdt);
  if (g->owned == NULL)
    g->owned = ts_buffer_alloc(need ? need : 1); /* else the same plan's buffer */
  if (g->owned == NULL)
    return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for a transposed operand (%zu bytes)",
                        need);
  *bytes += need;
  int8_t lab[TS__EIN_MAXL];
  int nd = 0;
  memcpy(lab + nd, s->g[TS__G_ABO], (size_t)s->ng[TS__G_ABO]);
  nd += s->ng[TS__G_ABO];
  int outer = rows_inner ? gc : gr, inner = rows_inner ? gr : gc;
  memcpy(lab + nd, s->g[outer], (size_t)s->ng[outer]);
  nd += s->ng[outer];
  memcpy(lab + nd, s->g[inner], (size_t)s->ng[inner]);
  nd += s->ng[inner];
  ts__ein_view dst, sv;
  ts__ein_dense_view(p, &dst, g->owned, p->cdt, nd, lab);
  memcpy(lab + nd, s->g[gred], (size_t)s->ng[gred]);
  ts__ein_view_select(&sv, src, nd + s->ng[gred], lab);
  int rc = ts__ein_reduce_copy(&dst, &sv, p->cdt, err);
  if (rc)
    return rc;
  ts__ein_count(TS__CNT_OPERAND);
  ts__ein_dense_mat(s, &g->mat, g->owned, rows, cols, rows_inner);
  return TS_OK;
}

/* Moves a dense result (cdt) in the order of lab to a view, converting. */
static int move_result(const ts__ein_view *dst_full, const ts__ein_view *src, ts_error *err) {
  ts__ein_view d;
  ts__ein_view_select(&d, dst_full, src->nd, src->lab);
  int rc = ts__ein_copy(&d, src, err);
  if (rc == TS_OK)
    ts__ein_count(TS__CNT_RESULT);
  return rc;
}

int ts__ein_check_operands(const ts_einsum_plan *p, const ts_tensor *const *operands,
                           ts_error *err) {
  if (operands == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: operands is NULL");
  for (int i = 0; i < p->pe.n; i++) {
    int rc = ts__ein_check_tensor(operands[i], p->dtype, p->pe.ndim[i], p->pe.shape[i], "operand",
                                  i, false, err);
    if (rc)
      return rc;
  }
  return TS_OK;
}

int ts__ein_forward(const ts_einsum_plan *p, const ts_tensor *out, const ts_tensor *const *operands,
                    ts_einsum_cache *c, bool keep, ts_error *err) {
  if (c->plan != p || c->plan_id != p->id || c->n_steps != p->n_steps)
    ts__ein_cache_clear(c);
  c->plan = p;
  c->plan_id = p->id;
  c->bytes = 0;
  for (int i = 0; i < p->pe.n; i++) {
    c->operand_data[i] = operands[i]->data;
    c->operand_layout[i] = operands[i]->layout;
  }
  c->n_steps = p->n_steps;
  ts__ein_view ov;
  if (out)
    ts__ein_out_view(p, out, &ov);
  if (p->empty)
    return out ? ts__ein_zero(&ov, err) : TS_OK;

  if (p->n_steps == 0) {
    /* One operand: sum the labels the output lacks, move the rest to the output order. */
    if (out == NULL)
      return TS_OK;
    ts__ein_view src, sv;
    ts__ein_operand_view(p, 0, operands[0], &src);
    int8_t lab[TS__EIN_MAXL];
    int nd = 0;
    for (int d = 0; d < p->pe.out_ndim; d++)
      lab[nd++] = p->pe.out_lab[d];
    for (int d = 0; d < src.nd; d++)
      if (!(p->pe.out_set >> src.lab[d] & 1))
        lab[nd++] = src.lab[d];
    ts__ein_view_select(&sv, &src, nd, lab);
    int rc = ts__ein_reduce_copy(&ov, &sv, p->cdt, err);
    if (rc == TS_OK)
      ts__ein_count(TS__CNT_RESULT);
    return rc;
  }

  size_t es = ts_dtype_size(p->cdt);
  for (int si = 0; si < p->n_steps; si++) {
    const ts__ein_step *s = &p->step[si];
    ts__ein_step_cache *sc = &c->step[si];
    ts__ein_view xv, yv;
    ts__ein_node_view(p, s->x, operands, c, &xv);
    ts__ein_node_view(p, s->y, operands, c, &yv);
    int rc = prepare_side(p, s, 0, &xv, keep, c->retain, &sc->a, &c->bytes, err);
    if (rc == TS_OK)
      rc = prepare_side(p, s, 1, &yv, keep, c->retain, &sc->b, &c->bytes, err);
    if (rc)
      return rc;
    const ts__ein_node *r = &p->node[s->result];
    bool last = si == p->n_steps - 1;
    if (last && out == NULL)
      break;
    ts__ein_mat cm;
    if (last && out->layout.dtype == p->cdt &&
        ts__ein_as_matrix(&ov, s->ng[TS__G_ABO], s->g[TS__G_ABO], s->ng[TS__G_AO], s->g[TS__G_AO],
                          s->ng[TS__G_BO], s->g[TS__G_BO], &cm))
      return ts__ein_gemm(p->cdt, s->ng[TS__G_ABO], s->bsize, &cm, &sc->a.mat, &sc->b.mat, s->k,
                          err);
    size_t need = (size_t)(s->batch * s->m * s->n) * es;
    char *buf = !last && sc->result ? sc->result : ts_buffer_alloc(need ? need : 1);
    sc->result = NULL;
    if (buf == NULL)
      return ts_error_set(err, TS_NO_MEMORY, "einsum: no memory for an intermediate (%zu bytes)",
                          need);
    ts__ein_dense_mat(s, &cm, buf, s->m, s->n, false);
    rc = ts__ein_gemm(p->cdt, s->ng[TS__G_ABO], s->bsize, &cm, &sc->a.mat, &sc->b.mat, s->k, err);
    if (rc == TS_OK && last) {
      ts__ein_view rv;
      ts__ein_dense_view(p, &rv, buf, p->cdt, r->nd, r->lab);
      rc = move_result(&ov, &rv, err);
    }
    if (last || rc) {
      ts_buffer_free(buf);
      return rc;
    }
    sc->result = buf;
    c->bytes += need;
  }
  return TS_OK;
}

int ts_einsum_execute(const ts_einsum_plan *p, const ts_tensor *out,
                      const ts_tensor *const *operands, ts_einsum_cache *cache, ts_error *err) {
  if (p == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: the plan is NULL");
  int64_t oshape[TS_MAX_DIMS];
  ts_einsum_plan_output(p, NULL, oshape);
  int rc = ts__ein_check_operands(p, operands, err);
  if (rc == TS_OK)
    rc = ts__ein_check_tensor(out, p->dtype, p->pe.out_ndim, oshape, "output", 0, true, err);
  if (rc)
    return rc;
  if (cache) {
    rc = ts__ein_forward(p, out, operands, cache, true, err);
    if (rc)
      ts__ein_cache_clear(cache);
    return rc;
  }
  ts_einsum_cache local;
  ts_einsum_cache *c = ts__ein_scratch_acquire(p, &local);
  rc = ts__ein_forward(p, out, operands, c, false, err);
  if (rc)
    ts__ein_cache_clear(c);
  ts__ein_scratch_release(p, c);
  return rc;
}
