/* gen_elementwise.c - the generator of the elementwise category: one fused loop nest per kernel.
 * Every member is computed into a register in program order from its operands (registers of
 * earlier members, literals, or loads through the operands' strides with broadcasting); the
 * stores (pool buffers, outputs, in-place assigns) come last in the body, after every load, so a
 * result may take the place of an operand it reads element for element. When every operand is
 * contiguous in the kernel's shape or a single element, the nest is one flat loop (split over
 * threads in static chunks, vectorized); otherwise the outermost dim is split over threads.
 * f16 and bf16 values live in float registers: loads widen, an op with such a result rounds it
 * (gen_half.c), stores write the rounded bits. */
#include <math.h>
#include <string.h>

#include "internal.h"

static void literal(FILE *f, ts_dtype dt, double v) {
  const char *ct = tsp_ctype_reg(dt);
  if (isnan(v))
    fprintf(f, "((%s)NAN)", ct);
  else if (isinf(v))
    fprintf(f, "((%s)%sINFINITY)", ct, v < 0 ? "-" : "");
  else if (ts_dtype_is_float(dt))
    fprintf(f, "((%s)%.17g)", ct, v);
  else
    fprintf(f, "((%s)%.0f)", ct, v);
}

static int64_t numel(int ndim, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= dims[d];
  return n;
}

/* operand o read in kernel k: its strides over the kernel's dims (0 where broadcast) */
static void operand_strides(tsp_gen *g, int o, int kndim, const int64_t *kdims, int64_t *st) {
  const tsp_node *on = &g->p->nodes[o];
  const tsp_loc *l = &g->b->locs[o];
  for (int d = 0; d < kndim; d++) {
    int ad = d - (kndim - on->ndim);
    st[d] = (ad < 0 || (g->b->dims[o][ad] == 1 && kdims[d] != 1)) ? 0 : l->strides[ad];
  }
}

static bool is_contiguous_full(tsp_gen *g, int o, int kndim, const int64_t *kdims) {
  const tsp_node *on = &g->p->nodes[o];
  if (on->ndim != kndim)
    return false;
  int64_t s = 1;
  for (int d = kndim - 1; d >= 0; d--) {
    if (g->b->dims[o][d] != kdims[d])
      return false;
    if (kdims[d] != 1 && g->b->locs[o].strides[d] != s)
      return false;
    s *= kdims[d];
  }
  return true;
}

/* the index expression of operand o: "i" (flat) or "S[0]*i0 + S[1]*i1" */
static void index_expr(tsp_gen *g, FILE *f, int o, int kndim, const int64_t *kdims, bool flat) {
  if (flat) {
    fprintf(f, "i");
    return;
  }
  int64_t st[TSP_MAX_DIMS] = {0};
  operand_strides(g, o, kndim, kdims, st);
  const char *v = tsp_vec(g, "str", st, kndim);
  bool any = false;
  for (int d = 0; d < kndim; d++) {
    if (!st[d])
      continue;
    fprintf(f, "%s%s[%d] * i%d", any ? " + " : "", v, d, d);
    any = true;
  }
  if (!any)
    fprintf(f, "0");
}

static bool is_member(const tsp_gen *g, const tsp_kernel *k, int n) {
  return g->p->nodes[n].kernel == (int)(k - g->p->kernels);
}

/* the value of operand o at the current index */
static void operand(tsp_gen *g, FILE *f, const tsp_kernel *k, int o, const int64_t *kdims,
                    bool flat, const unsigned char *hoisted) {
  const tsp_node *on = &g->p->nodes[o];
  if (on->op == TSP_OP_CONST)
    literal(f, on->dtype, on->value);
  else if (is_member(g, k, o) || hoisted[o])
    fprintf(f, "v%d", o);
  else {
    fprintf(f, "%s", tsp_half_load(on->dtype));
    tsp_emit_ptr(g, f, o);
    fprintf(f, "[");
    index_expr(g, f, o, k->ndim, kdims, flat);
    fprintf(f, "]%s", tsp_half_close(on->dtype));
  }
}

int tsp_gen_elementwise(tsp_gen *gg, int kidx, ts_error *err) {
  tsp_gen *g = gg;
  tsp_program *p = g->p;
  const tsp_kernel *k = &p->kernels[kidx];
  FILE *f = g->body;
  int64_t kdims[TSP_MAX_DIMS];
  for (int d = 0; d < k->ndim; d++)
    kdims[d] = tsp_bucket_extent(g->b, &k->shape[d]);
  int64_t total = numel(k->ndim, kdims);
  unsigned char *hoisted = g->hoisted; /* all 0 here; cleared again at the end */
  /* flat when every memory operand is contiguous in the kernel's shape or one element */
  bool flat = true;
  for (int m = 0; m < k->n_members; m++) {
    const tsp_node *mn = &p->nodes[k->members[m]];
    for (int a = 0; a < mn->nargs; a++) {
      int o = mn->args[a];
      const tsp_node *on = &p->nodes[o];
      if (on->op == TSP_OP_CONST || is_member(g, k, o))
        continue;
      if (numel(on->ndim, g->b->dims[o]) == 1)
        hoisted[o] = 1;
      else if (!is_contiguous_full(g, o, k->ndim, kdims))
        flat = false;
    }
  }
  char lbl[TSP_NAME + 16];
  fprintf(f, "/* kernel %d: elementwise, %d op%s fused, shape [", kidx, k->n_members,
          k->n_members > 1 ? "s" : "");
  for (int d = 0; d < k->ndim; d++)
    fprintf(f, "%s%lld", d ? "," : "", (long long)kdims[d]);
  fprintf(f, "]%s:", flat ? ", one flat loop" : "");
  for (int m = 0; m < k->n_members; m++)
    fprintf(f, " %s=%s", tsp_node_label(p, k->members[m], lbl, sizeof lbl),
            tsp_op(p->nodes[k->members[m]].op)->name);
  fprintf(f,
          " */\nstatic int kernel%d(void *const *args, char *pool, const int64_t *sym, "
          "const tsp_env *env) {\n  (void)args;\n  (void)pool;\n  (void)sym;\n  (void)env;\n",
          kidx);
  /* single-element operands are loaded once, before the loop (hoisted: 1 to load, 2 loaded) */
  for (int m = 0; m < k->n_members; m++)
    for (int a = 0; a < p->nodes[k->members[m]].nargs; a++) {
      int o = p->nodes[k->members[m]].args[a];
      if (hoisted[o] != 1)
        continue;
      hoisted[o] = 2;
      fprintf(f, "  const %s v%d = %s", tsp_ctype_reg(p->nodes[o].dtype), o,
              tsp_half_load(p->nodes[o].dtype));
      tsp_emit_ptr(g, f, o);
      fprintf(f, "[0]%s; /* %s */\n", tsp_half_close(p->nodes[o].dtype),
              tsp_node_label(p, o, lbl, sizeof lbl));
    }
  char ind[2 * TSP_MAX_DIMS + 8];
  int depth = flat || k->ndim == 0 ? 1 : k->ndim;
  snprintf(ind, sizeof ind, "%*s", 2 + 2 * depth, "");
  if (flat) {
    fprintf(f, "  const int64_t n = %lld;\n", (long long)total);
    fprintf(f, "#pragma omp parallel for simd schedule(static) if (n >= TSP_PAR_MIN)\n");
    fprintf(f, "  for (int64_t i = 0; i < n; i++) {\n");
  } else {
    const char *shp = tsp_vec(g, "shape", kdims, k->ndim);
    if (k->ndim > 0)
      fprintf(f, "#pragma omp parallel for schedule(static) if (%lld >= TSP_PAR_MIN)\n",
              (long long)total);
    for (int d = 0; d < k->ndim; d++)
      fprintf(f, "%*sfor (int64_t i%d = 0; i%d < %s[%d]; i%d++)%s\n", 2 + 2 * d, "", d, d, shp, d,
              d, d == k->ndim - 1 ? " {" : "");
    if (k->ndim == 0)
      fprintf(f, "  {\n");
  }
  for (int m = 0; m < k->n_members; m++) {
    int id = k->members[m];
    const tsp_node *mn = &p->nodes[id];
    const tsp_opdef *def = tsp_op(mn->op);
    ts_dtype odt = p->nodes[mn->args[mn->op == TSP_OP_WHERE ? 1 : 0]].dtype;
    const char *tpl = ts_dtype_is_float(odt) ? def->expr_f : def->expr_i;
    if (!tpl)
      return ts_error_set(err, TS_BAD_DTYPE, "%s: no code for dtype %s", def->name,
                          ts_dtype_name(odt));
    const char *rt = tsp_ctype_reg(mn->dtype);
    bool half = tsp_is_half(mn->dtype); /* the result rounded to its dtype, kept in float */
    fprintf(f, "%sconst %s v%d = ", ind, rt, id);
    if (half) /* load(store(value)): rounded to the dtype, kept in float */
      fprintf(f, "%s%s", tsp_half_load(mn->dtype), tsp_half_store(mn->dtype, odt));
    else
      fprintf(f, "(%s)", rt);
    for (const char *s = tpl; *s; s++) {
      if (*s != '%') {
        fputc(*s, f);
        continue;
      }
      s++;
      if (*s == 'a' || *s == 'b' || *s == 'c')
        operand(g, f, k, mn->args[*s - 'a'], kdims, flat, hoisted);
      else if (*s == 'f' || *s == 'F')
        fprintf(f, "%s", odt == TS_F32 || tsp_is_half(odt) ? "f" : "");
      else
        fputc(*s, f);
    }
    fprintf(f, "%s; /* %s */\n", half ? "))" : "", tsp_node_label(p, id, lbl, sizeof lbl));
  }
  for (int m = 0; m < k->n_members; m++) {
    int id = k->members[m];
    const tsp_node *mn = &p->nodes[id];
    if (!mn->local) {
      fprintf(f, "%s", ind);
      tsp_emit_ptr(g, f, id);
      fprintf(f, "[");
      index_expr(g, f, id, k->ndim, kdims, flat);
      if (tsp_is_half(mn->dtype))
        fprintf(f, "] = %sv%d);\n", tsp_half_store(mn->dtype, mn->dtype), id);
      else
        fprintf(f, "] = v%d;\n", id);
    }
    if (mn->assign_input >= 0) {
      int t = p->inputs[mn->assign_input];
      fprintf(f, "%s", ind);
      tsp_emit_ptr(g, f, t);
      fprintf(f, "[");
      index_expr(g, f, t, k->ndim, kdims, flat);
      if (tsp_is_half(mn->dtype))
        fprintf(f, "] = %sv%d); /* in place: %s */\n", tsp_half_store(mn->dtype, mn->dtype), id,
                p->nodes[t].name);
      else
        fprintf(f, "] = v%d; /* in place: %s */\n", id, p->nodes[t].name);
    }
  }
  fprintf(f, "%*s}\n  return 0;\n}\n\n", 2 * depth, "");
  for (int m = 0; m < k->n_members; m++)
    for (int a = 0; a < p->nodes[k->members[m]].nargs; a++)
      hoisted[p->nodes[k->members[m]].args[a]] = 0;
  return TS_OK;
}
