/* einsum_path.c - the contraction order of an n-operand einsum and the label classes of each
 * pairwise step.
 *
 * Greedy (like opt_einsum's greedy): among the pairs of live tensors that share a label (any
 * pair when none do), contract the one whose result grows memory the least (result size minus
 * the two inputs' sizes), ties broken by fewer flops, then by the lower indices. Left to right is
 * the source design's order. A step keeps the labels that the output or a live tensor still
 * needs; the rest are contracted (in both) or reduced (in one only). */
#include <string.h>

#include "einsum_internal.h"

static double set_numel(const ts_einsum_plan *p, ts__ein_set s) {
  double v = 1.0;
  for (int l = 0; l < TS__EIN_MAXL; l++)
    if (s >> l & 1)
      v *= (double)p->pe.size[l];
  return v;
}

/* Labels that the output or a live node other than x and y still needs. */
static ts__ein_set needed(const ts_einsum_plan *p, const int *live, int n_live, int x, int y) {
  ts__ein_set s = p->pe.out_set;
  for (int i = 0; i < n_live; i++)
    if (live[i] != x && live[i] != y)
      s |= p->node[live[i]].set;
  return s;
}

int ts__ein_path(ts_einsum_plan *p, ts_error *err) {
  int live[TS_EINSUM_MAX_OPERANDS];
  int n_live = p->pe.n;
  for (int i = 0; i < n_live; i++)
    live[i] = i;
  p->n_steps = 0;
  p->flops = 0.0;
  while (n_live > 1) {
    int bi = 0, bj = 1;
    if (p->opts.path == TS_EINSUM_PATH_GREEDY) {
      double best_cost = 0.0, best_flops = 0.0;
      bool found = false;
      for (int pass = 0; pass < 2 && !found; pass++)
        for (int i = 0; i < n_live; i++)
          for (int j = i + 1; j < n_live; j++) {
            const ts__ein_node *x = &p->node[live[i]], *y = &p->node[live[j]];
            if (pass == 0 && (x->set & y->set) == 0)
              continue;
            ts__ein_set keep = (x->set | y->set) & needed(p, live, n_live, live[i], live[j]);
            double cost = set_numel(p, keep) - x->numel - y->numel;
            double flops = set_numel(p, x->set | y->set);
            if (!found || cost < best_cost || (cost == best_cost && flops < best_flops)) {
              found = true;
              best_cost = cost;
              best_flops = flops;
              bi = i;
              bj = j;
            }
          }
    }
    int x = live[bi], y = live[bj];
    ts__ein_step *s = &p->step[p->n_steps];
    s->x = x;
    s->y = y;
    s->result = p->n_nodes;
    ts__ein_node *r = &p->node[p->n_nodes++];
    r->set = (p->node[x].set | p->node[y].set) & needed(p, live, n_live, x, y);
    r->numel = set_numel(p, r->set);
    if (r->numel > 4.0e18)
      return ts_error_set(err, TS_OVERFLOW,
                          "einsum: step %d of the path makes an intermediate of %.3g elements",
                          p->n_steps, r->numel);
    p->flops += 2.0 * set_numel(p, p->node[x].set | p->node[y].set);
    p->n_steps++;
    /* The result replaces x; y leaves. */
    live[bi] = s->result;
    memmove(&live[bj], &live[bj + 1], (size_t)(n_live - bj - 1) * sizeof live[0]);
    n_live--;
  }
  return TS_OK;
}

/* Appends to g the labels of set in the order they appear in lab[0..nd-1]. */
static int take_in_order(int8_t *g, ts__ein_set set, const int8_t *lab, int nd) {
  int n = 0;
  for (int d = 0; d < nd; d++)
    if (set >> lab[d] & 1)
      g[n++] = lab[d];
  return n;
}

void ts__ein_classify(ts_einsum_plan *p) {
  for (int si = 0; si < p->n_steps; si++) {
    ts__ein_step *s = &p->step[si];
    const ts__ein_node *x = &p->node[s->x], *y = &p->node[s->y];
    ts__ein_node *r = &p->node[s->result];
    ts__ein_set keep = r->set, sx = x->set, sy = y->set;
    ts__ein_set cls[TS__G_COUNT] = {
        [TS__G_ABO] = sx & sy & keep,   [TS__G_AO] = (sx & keep) & ~sy,
        [TS__G_BO] = (sy & keep) & ~sx, [TS__G_AB] = (sx & sy) & ~keep,
        [TS__G_RA] = sx & ~sy & ~keep,  [TS__G_RB] = sy & ~sx & ~keep,
    };
    bool last = si == p->n_steps - 1;
    for (int g = 0; g < TS__G_COUNT; g++) {
      /* Kept labels of the last step follow the output's order, so that the GEMM can write the
       * output in place; the others follow the operand they come from. */
      if (last && (g == TS__G_ABO || g == TS__G_AO || g == TS__G_BO))
        s->ng[g] = take_in_order(s->g[g], cls[g], p->pe.out_lab, p->pe.out_ndim);
      else if (g == TS__G_BO || g == TS__G_RB)
        s->ng[g] = take_in_order(s->g[g], cls[g], y->lab, y->nd);
      else
        s->ng[g] = take_in_order(s->g[g], cls[g], x->lab, x->nd);
    }
    int64_t prod[TS__G_COUNT];
    for (int g = 0; g < TS__G_COUNT; g++) {
      prod[g] = 1;
      for (int j = 0; j < s->ng[g]; j++)
        prod[g] *= p->pe.size[s->g[g][j]];
    }
    for (int j = 0; j < s->ng[TS__G_ABO]; j++)
      s->bsize[j] = p->pe.size[s->g[TS__G_ABO][j]];
    s->batch = prod[TS__G_ABO];
    s->m = prod[TS__G_AO];
    s->n = prod[TS__G_BO];
    s->k = prod[TS__G_AB];
    r->nd = 0;
    for (int g = TS__G_ABO; g <= TS__G_BO; g++)
      for (int j = 0; j < s->ng[g]; j++)
        r->lab[r->nd++] = s->g[g][j];
  }
}
