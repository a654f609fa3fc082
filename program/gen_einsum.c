/* gen_einsum.c - the generator of the einsum category: the emitted kernel calls back into the
 * library (env->einsum), which runs the kernels' einsum engine (kernels/ts_kernels.h) on strided
 * views of the operands and the result. With static shapes the bucket's plan made ahead
 * (memplan.c) is used; with dynamic dims the views take the run's true extents (so padding never
 * enters a contraction) and a plan is made for them. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int tsp_gen_einsum(tsp_gen *g, int kidx, ts_error *err) {
  (void)err;
  int id = g->p->kernels[kidx].members[0];
  char lbl[TSP_NAME + 16];
  fprintf(g->body,
          "/* kernel %d: einsum '%s' -> %s, through the kernels' einsum engine */\n"
          "static int kernel%d(void *const *args, char *pool, const int64_t *sym, "
          "const tsp_env *env) {\n  return env->einsum(env->ctx, %d, args, pool, sym);\n}\n\n",
          kidx, g->p->nodes[id].eq, tsp_node_label(g->p, id, lbl, sizeof lbl), kidx, id);
  return TS_OK;
}

static void view(const tsp_program *p, const tsp_bucket *b, int n, void *const *args, char *pool,
                 const int64_t *sym, bool true_extent, ts_tensor *t) {
  const tsp_node *nd = &p->nodes[n];
  const tsp_loc *l = &b->locs[n];
  memset(t, 0, sizeof *t);
  int64_t off = l->view_off; /* a slice's start */
  for (int g = 0; g < TSP_MAX_GROUPS; g++)
    off += l->view_sym[g] * sym[g];
  t->data = (char *)(l->kind == TSP_LOC_ARG ? args[l->index] : pool + l->offset) +
            off * (int64_t)ts_dtype_size(nd->dtype);
  t->layout.dtype = nd->dtype;
  t->layout.ndim = nd->ndim;
  int64_t span = 1;
  for (int d = 0; d < nd->ndim; d++) {
    t->layout.shape[d] = true_extent ? tsp_expr_eval(&nd->shape[d], sym) : b->dims[n][d];
    t->layout.strides[d] = l->strides[d];
    if (t->layout.shape[d] > 0)
      span += (t->layout.shape[d] - 1) * l->strides[d];
  }
  t->bytes = (size_t)span * ts_dtype_size(nd->dtype);
}

int tsp_einsum_callback(void *ctx, int node, void *const *args, char *pool, const int64_t *sym) {
  tsp_einsum_ctx *c = ctx;
  const tsp_node *n = &c->p->nodes[node];
  ts_tensor ops[TSP_MAX_ARGS], out;
  const ts_tensor *opp[TSP_MAX_ARGS];
  ts_einsum_plan *plan = c->b->plans[node];
  bool masked = plan == NULL;
  for (int a = 0; a < n->nargs; a++) {
    view(c->p, c->b, n->args[a], args, pool, sym, masked, &ops[a]);
    opp[a] = &ops[a];
  }
  view(c->p, c->b, node, args, pool, sym, masked, &out);
  if (!masked)
    return ts_einsum_execute(plan, &out, opp, NULL, c->err) != TS_OK;
  return ts_einsum(n->eq, n->nargs, opp, &out, c->err) != TS_OK;
}
