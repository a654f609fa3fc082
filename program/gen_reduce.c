/* gen_reduce.c - the generator of the reduction category (sum, mean, max, min over dims, with
 * keepdims): a loop over the kept dims around a loop over the reduced dims, accumulating in double
 * for floats (int64 for integer sums). Split over threads: across the kept dims when there are
 * several results, else across the outermost reduced dim with an OpenMP reduction. A masked
 * reduction (bucket.c: the padding does not hold the op's identity) runs its dynamic reduced dims
 * to their true extents; a mean always divides by the true count. max and min propagate NaN.
 * f16 and bf16 operands are widened as they are loaded; their results are rounded once. */
#include <string.h>

#include "internal.h"

static const char *int_min(ts_dtype dt) {
  return dt == TS_I8 ? "-128" : dt == TS_I32 ? "INT32_MIN" : dt == TS_I64 ? "INT64_MIN" : "0";
}
static const char *int_max(ts_dtype dt) {
  return dt == TS_I8 ? "127" : dt == TS_I32 ? "INT32_MAX" : dt == TS_I64 ? "INT64_MAX" : "255";
}

int tsp_gen_reduce(tsp_gen *g, int kidx, ts_error *err) {
  (void)err;
  tsp_program *p = g->p;
  FILE *f = g->body;
  int id = p->kernels[kidx].members[0];
  const tsp_node *n = &p->nodes[id];
  int a = n->args[0];
  const tsp_node *an = &p->nodes[a];
  const int64_t *adims = g->b->dims[a];
  const tsp_loc *al = &g->b->locs[a];
  bool fl = ts_dtype_is_float(an->dtype);
  const char *ct = tsp_ctype(an->dtype);
  const char *acc_t = fl ? "double" : (n->op == TSP_OP_SUM ? "int64_t" : ct);
  int kept[TSP_MAX_DIMS], red[TSP_MAX_DIMS], nk = 0, nr = 0;
  int64_t nout = 1, nred = 1;
  for (int d = 0; d < an->ndim; d++) {
    if (n->axes & (1u << d)) {
      red[nr++] = d;
      nred *= adims[d];
    } else {
      kept[nk++] = d;
      nout *= adims[d];
    }
  }
  /* the result is contiguous over the kept dims (keepdims' ones do not move it) */
  int64_t ost[TSP_MAX_DIMS], s = 1;
  for (int j = nk - 1; j >= 0; j--) {
    ost[j] = s;
    s *= adims[kept[j]];
  }
  const char *ostv = tsp_vec(g, "ostr", ost, nk);
  const char *astv = tsp_vec(g, "str", al->strides, an->ndim);
  const char *ashp = tsp_vec(g, "shape", adims, an->ndim);
  char lbl[TSP_NAME + 16], albl[TSP_NAME + 16];
  fprintf(f, "/* kernel %d: %s of %s over %d dim%s%s -> %s */\n", kidx, tsp_op(n->op)->name,
          tsp_node_label(p, a, albl, sizeof albl), nr, nr == 1 ? "" : "s",
          n->masked ? " (masked: true extents of the dynamic dims)" : "",
          tsp_node_label(p, id, lbl, sizeof lbl));
  fprintf(f,
          "static int kernel%d(void *const *args, char *pool, const int64_t *sym, "
          "const tsp_env *env) {\n  (void)args;\n  (void)pool;\n  (void)sym;\n  (void)env;\n",
          kidx);
  /* reduced extents: bucket values, or the true ones when masked */
  for (int j = 0; j < nr; j++) {
    fprintf(f, "  const int64_t e%d = ", j);
    tsp_emit_extent(g, f, &an->shape[red[j]], adims[red[j]], n->masked || n->op == TSP_OP_MEAN);
    fprintf(f, ";\n");
  }
  fprintf(f, "  const double count = 1.0");
  for (int j = 0; j < nr; j++)
    fprintf(f, " * (double)e%d", j);
  fprintf(f, ";\n  (void)count;\n");
  const char *init = n->op == TSP_OP_SUM || n->op == TSP_OP_MEAN ? "0"
                     : n->op == TSP_OP_RMAX ? (fl ? "-INFINITY" : int_min(an->dtype))
                                            : (fl ? "INFINITY" : int_max(an->dtype));
  const char *combine =
      n->op == TSP_OP_SUM || n->op == TSP_OP_MEAN ? "acc += x;"
      : n->op == TSP_OP_RMAX
          ? (fl ? "acc = (acc != acc || x <= acc) ? acc : x;" : "acc = x > acc ? x : acc;")
          : (fl ? "acc = (acc != acc || x >= acc) ? acc : x;" : "acc = x < acc ? x : acc;");
  const char *omp_op = n->op == TSP_OP_RMAX ? "max" : n->op == TSP_OP_RMIN ? "min" : "+";
  bool split_kept = nk > 0;
  if (split_kept)
    fprintf(f, "#pragma omp parallel for schedule(static) if (%lld >= 2 && %lld >= TSP_PAR_MIN)\n",
            (long long)nout, (long long)(nout * nred));
  int depth = 1;
  for (int j = 0; j < nk; j++, depth++)
    fprintf(f, "%*sfor (int64_t i%d = 0; i%d < %s[%d]; i%d++)\n", 2 * depth, "", kept[j], kept[j],
            ashp, kept[j], kept[j]);
  fprintf(f, "%*s{\n", 2 * depth, "");
  depth++;
  fprintf(f, "%*s%s acc = %s;\n", 2 * depth, "", acc_t, init);
  if (!split_kept && nr > 0)
    fprintf(f,
            "#pragma omp parallel for schedule(static) reduction(%s : acc) if (%lld >= "
            "TSP_PAR_MIN)\n",
            omp_op, (long long)nred);
  for (int j = 0; j < nr; j++)
    fprintf(f, "%*sfor (int64_t i%d = 0; i%d < e%d; i%d++)%s\n", 2 * (depth + j), "", red[j],
            red[j], j, red[j], j == nr - 1 ? " {" : "");
  int bd = depth + (nr ? nr : 0);
  if (nr == 0)
    fprintf(f, "%*s{\n", 2 * bd, "");
  fprintf(f, "%*sconst %s x = %s", 2 * (bd + 1), "", acc_t, tsp_half_load(an->dtype));
  tsp_emit_ptr(g, f, a);
  fprintf(f, "[0");
  for (int d = 0; d < an->ndim; d++)
    if (al->strides[d] && adims[d] > 1)
      fprintf(f, " + %s[%d] * i%d", astv, d, d);
  fprintf(f, "]%s;\n%*s%s\n%*s}\n", tsp_half_close(an->dtype), 2 * (bd + 1), "", combine, 2 * bd,
          "");
  fprintf(f, "%*s", 2 * depth, "");
  tsp_emit_ptr(g, f, id);
  fprintf(f, "[0");
  for (int j = 0; j < nk; j++)
    fprintf(f, " + %s[%d] * i%d", ostv, j, kept[j]);
  if (tsp_is_half(n->dtype)) /* the double result rounded once, like the kernels' f64 -> f16 */
    fprintf(f, "] = %s%s);\n", tsp_half_store(n->dtype, TS_F64),
            n->op == TSP_OP_MEAN ? "acc / count" : "acc");
  else
    fprintf(f, "] = (%s)(%s);\n", tsp_ctype(n->dtype),
            n->op == TSP_OP_MEAN ? "acc / count" : "acc");
  fprintf(f, "%*s}\n  return 0;\n}\n\n", 2 * (depth - 1), "");
  return TS_OK;
}
