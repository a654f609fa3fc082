/* optimize.c - the graph optimizer: constant folding (elementwise ops of literals become
 * literals), copies where a value must land in a place of its own (outputs that are inputs,
 * views or literals; assigns whose value cannot be stored in place), dead code removal (only what
 * reaches an output or an assign stays), fusion of elementwise chains of one shape into one loop
 * nest (a kernel), registers for values used only inside their kernel, and in-place stores of
 * assigned values from inside their kernel when no later kernel reads the old value. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void fold_constants(tsp_program *p) {
  for (int i = 0; i < p->n_nodes; i++) {
    tsp_node *n = &p->nodes[i];
    if (tsp_op(n->op)->cat != TSP_CAT_ELEMENTWISE)
      continue;
    bool all = true;
    double v[3] = {0, 0, 0};
    for (int a = 0; a < n->nargs; a++) {
      all = all && p->nodes[n->args[a]].op == TSP_OP_CONST;
      if (a < 3)
        v[a] = p->nodes[n->args[a]].value;
    }
    if (!all)
      continue;
    ts_dtype dt = p->nodes[n->args[n->op == TSP_OP_WHERE ? 1 : 0]].dtype;
    n->value = tsp_round(n->dtype, tsp_eval(n->op, dt, v[0], v[1], v[2]));
    n->op = TSP_OP_CONST;
    n->nargs = 0;
  }
}

static int add_copy(tsp_program *p, int src, int shape_of, ts_error *err) {
  int c = tsp_add_node(p, TSP_OP_COPY, err);
  if (c < 0)
    return c;
  tsp_node *n = &p->nodes[c];
  const tsp_node *s = &p->nodes[shape_of];
  n->nargs = 1;
  n->args[0] = src;
  n->dtype = s->dtype;
  n->ndim = s->ndim;
  memcpy(n->shape, s->shape, sizeof n->shape);
  return c;
}

static bool same_shape(const tsp_node *a, int ndim, const tsp_expr *shape) {
  if (a->ndim != ndim)
    return false;
  for (int d = 0; d < ndim; d++)
    if (!tsp_expr_eq(&a->shape[d], &shape[d]))
      return false;
  return true;
}

/* The kernel a node's values come from (views: their base's), -1 for inputs and literals. */
static int source_kernel(const tsp_program *p, int n) {
  while (tsp_op(p->nodes[n].op)->cat == TSP_CAT_LAYOUT)
    n = p->nodes[n].args[0];
  return p->nodes[n].kernel;
}

static int new_kernel(tsp_program *p, int node, ts_error *err) {
  tsp_kernel *k = realloc(p->kernels, (size_t)(p->n_kernels + 1) * sizeof *k);
  if (!k)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  p->kernels = k;
  tsp_kernel *kk = &k[p->n_kernels];
  memset(kk, 0, sizeof *kk);
  kk->cat = tsp_op(p->nodes[node].op)->cat;
  kk->ndim = p->nodes[node].ndim;
  memcpy(kk->shape, p->nodes[node].shape, sizeof kk->shape);
  p->nodes[node].kernel = p->n_kernels++;
  return TS_OK;
}

/* Kernels in node order; an elementwise node joins the latest elementwise kernel of its shape
 * that runs after every kernel its operands come from (among the last 64 kernels). */
static int fuse(tsp_program *p, bool *assign_copy, ts_error *err) {
  for (int i = 0; i < p->n_nodes; i++) {
    tsp_node *n = &p->nodes[i];
    tsp_category cat = tsp_op(n->op)->cat;
    if (!n->live || cat == TSP_CAT_INPUT || cat == TSP_CAT_CONST || cat == TSP_CAT_LAYOUT ||
        cat == TSP_CAT_ASSIGN)
      continue;
    int join = -1;
    if (cat == TSP_CAT_ELEMENTWISE && !assign_copy[i]) {
      /* the latest elementwise kernel of this shape that runs after all the operands' */
      int ready = -1;
      for (int a = 0; a < n->nargs; a++) {
        int k = source_kernel(p, n->args[a]);
        if (k > ready)
          ready = k;
      }
      for (int k = p->n_kernels - 1; k >= 0 && k >= ready && k >= p->n_kernels - 64 && join < 0;
           k--)
        if (p->kernels[k].cat == TSP_CAT_ELEMENTWISE && p->kernels[k].ndim == n->ndim &&
            memcmp(p->kernels[k].shape, n->shape, sizeof(tsp_expr) * (size_t)n->ndim) == 0)
          join = k;
    }
    if (join >= 0) {
      n->kernel = join;
    } else {
      int rc = new_kernel(p, i, err);
      if (rc != TS_OK)
        return rc;
    }
  }
  /* member lists */
  int *count = calloc((size_t)p->n_kernels + 1, sizeof *count);
  if (!count)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  for (int i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].live && p->nodes[i].kernel >= 0)
      count[p->nodes[i].kernel]++;
  for (int k = 0; k < p->n_kernels; k++) {
    p->kernels[k].members = malloc((size_t)count[k] * sizeof(int));
    if (!p->kernels[k].members) {
      free(count);
      return ts_error_set(err, TS_NO_MEMORY, "out of memory");
    }
  }
  free(count);
  for (int i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].live && p->nodes[i].kernel >= 0) {
      tsp_kernel *k = &p->kernels[p->nodes[i].kernel];
      k->members[k->n_members++] = i;
    }
  return TS_OK;
}

/* Operands come before their users: one backward sweep marks everything a root reaches. */
static void mark_live(tsp_program *p) {
  for (int n = p->n_nodes - 1; n >= 0; n--) {
    if (!p->nodes[n].live)
      continue;
    for (int a = 0; a < p->nodes[n].nargs; a++)
      p->nodes[p->nodes[n].args[a]].live = true;
  }
}

/* An in-place store into input t from kernel k is safe when every other reader of t runs in an
 * earlier kernel or is an elementwise member of k (which reads t at the index it writes). */
static bool store_safe(const tsp_program *p, int t, int k) {
  for (int i = 0; i < p->n_nodes; i++) {
    const tsp_node *n = &p->nodes[i];
    if (!n->live || n->op == TSP_OP_ASSIGN)
      continue;
    for (int a = 0; a < n->nargs; a++) {
      if (n->args[a] != t)
        continue;
      tsp_category cat = tsp_op(n->op)->cat;
      if (cat == TSP_CAT_LAYOUT)
        return false;
      if (n->kernel == k && cat == TSP_CAT_ELEMENTWISE)
        continue;
      if (n->kernel >= k || n->kernel < 0)
        return false;
    }
  }
  return true;
}

int tsp_optimize(tsp_program *p, ts_error *err) {
  for (int i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].op == TSP_OP_CONST && (int)p->nodes[i].dtype < 0)
      p->nodes[i].dtype = TS_F64; /* a literal used as an output or an operand of nothing */
  fold_constants(p);
  int n0 = p->n_nodes;
  /* outputs that need a place of their own */
  for (int k = 0; k < p->n_outputs; k++) {
    int o = p->outputs[k];
    tsp_category cat = tsp_op(p->nodes[o].op)->cat;
    bool dup = false;
    for (int j = 0; j < k; j++)
      dup = dup || p->outputs[j] == o;
    if (cat == TSP_CAT_INPUT || cat == TSP_CAT_CONST || cat == TSP_CAT_LAYOUT || dup) {
      int c = add_copy(p, o, o, err);
      if (c < 0)
        return -c;
      o = c;
    }
    p->outputs[k] = o;
    p->nodes[o].output_index = k;
  }
  /* assigns: a store from the value's kernel when it is an elementwise value of the target's
   * shape, else a copy kernel at the end */
  bool *assign_copy = calloc((size_t)p->n_nodes * 2 + 64, sizeof(bool));
  if (!assign_copy)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  int rc = TS_OK;
  for (int i = 0; i < n0; i++) {
    tsp_node *a = &p->nodes[i];
    if (a->op != TSP_OP_ASSIGN)
      continue;
    int t = a->args[0], s = a->args[1];
    const tsp_node *sn = &p->nodes[s];
    if (tsp_op(sn->op)->cat != TSP_CAT_ELEMENTWISE || sn->assign_input >= 0 ||
        !same_shape(sn, p->nodes[t].ndim, p->nodes[t].shape)) {
      int c = add_copy(p, s, t, err);
      if (c < 0) {
        free(assign_copy);
        return -c;
      }
      assign_copy[c] = true;
      s = c;
      p->nodes[i].args[1] = c; /* p->nodes may have moved */
    }
    p->nodes[s].assign_input = p->nodes[t].input_index;
  }
  for (int i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].output_index >= 0 || p->nodes[i].op == TSP_OP_ASSIGN)
      p->nodes[i].live = true;
  mark_live(p);
  for (int i = 0; i < p->n_inputs; i++)
    p->nodes[p->inputs[i]].live = true;
  rc = fuse(p, assign_copy, err);
  if (rc != TS_OK) {
    free(assign_copy);
    return rc;
  }
  /* in-place stores that would clobber a value still to be read move to a copy kernel */
  for (int i = 0; i < p->n_nodes; i++) {
    tsp_node *n = &p->nodes[i];
    if (!n->live || n->assign_input < 0 || assign_copy[i])
      continue;
    int t = p->inputs[n->assign_input];
    if (store_safe(p, t, n->kernel))
      continue;
    int in = n->assign_input;
    n->assign_input = -1;
    int c = add_copy(p, i, t, err);
    if (c < 0) {
      free(assign_copy);
      return -c;
    }
    p->nodes[c].assign_input = in;
    p->nodes[c].live = true;
    rc = new_kernel(p, c, err);
    if (rc == TS_OK) {
      tsp_kernel *k = &p->kernels[p->n_kernels - 1];
      k->members = malloc(sizeof(int));
      if (!k->members)
        rc = ts_error_set(err, TS_NO_MEMORY, "out of memory");
      else
        k->members[k->n_members++] = c;
    }
    if (rc != TS_OK) {
      free(assign_copy);
      return rc;
    }
  }
  free(assign_copy);
  /* uses and registers */
  for (int i = 0; i < p->n_nodes; i++)
    p->nodes[i].uses = 0;
  for (int i = 0; i < p->n_nodes; i++) {
    const tsp_node *n = &p->nodes[i];
    if (!n->live || n->op == TSP_OP_ASSIGN)
      continue;
    for (int a = 0; a < n->nargs; a++)
      p->nodes[n->args[a]].uses++;
  }
  /* registers: elementwise values whose every reader is an elementwise op of their kernel */
  for (int i = 0; i < p->n_nodes; i++) {
    tsp_node *n = &p->nodes[i];
    n->local = n->live && tsp_op(n->op)->cat == TSP_CAT_ELEMENTWISE && n->output_index < 0;
  }
  for (int j = 0; j < p->n_nodes; j++) {
    const tsp_node *c = &p->nodes[j];
    if (!c->live || c->op == TSP_OP_ASSIGN)
      continue;
    for (int a = 0; a < c->nargs; a++) {
      tsp_node *n = &p->nodes[c->args[a]];
      if (c->kernel != n->kernel || tsp_op(c->op)->cat != TSP_CAT_ELEMENTWISE)
        n->local = false;
    }
  }
  return TS_OK;
}
