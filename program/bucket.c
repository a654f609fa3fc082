/* bucket.c - dynamic shapes: the buckets (every combination of the groups' bucket values), the
 * choice of the smallest covering bucket for a run, and the padding analysis. Inputs are padded
 * with the fill their consumers need (-inf under a max, +inf under a min, else 0); the value of
 * every padded element is then followed through the elementwise ops by evaluating them on the
 * fills (constant folding's evaluator). A reduction over a dynamic dim whose padded elements do
 * not hold its identity loops over the true extent instead (masked); a mean divides by the true
 * count; an einsum with dynamic dims runs on the true extents of its operands (strided views of
 * the padded buffers). A reshape that would mix padding with real elements is refused earlier
 * (verify.c) with the reason. A slice keeps its operand's padding only when it runs to the end
 * of each dynamic dim; its bounds are checked against each run's true dims, and its padded view
 * against each bucket's extents (formulas with negative terms take their largest value over the
 * true values a bucket serves: tsp_bucket_extent). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static bool is_dynamic(const tsp_node *n) {
  for (int d = 0; d < n->ndim; d++)
    if (!tsp_expr_is_static(&n->shape[d]))
      return true;
  return false;
}

int tsp_buckets_make(tsp_program *p, ts_error *err) {
  int64_t count = 1;
  for (int g = 0; g < p->n_groups; g++) {
    count *= p->groups[g].n_values;
    if (count > TSP_MAX_BUCKETS)
      return ts_error_set(err, TS_LIMIT,
                          "program: more than %d buckets (the product of the "
                          "groups' bucket counts); narrow the ranges or use coarser rules",
                          TSP_MAX_BUCKETS);
  }
  p->buckets = calloc((size_t)count, sizeof *p->buckets);
  if (!p->buckets)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  p->n_buckets = (int)count;
  for (int b = 0; b < p->n_buckets; b++) {
    int r = b;
    for (int g = p->n_groups - 1; g >= 0; g--) {
      int i = r % p->groups[g].n_values;
      p->buckets[b].values[g] = p->groups[g].values[i];
      p->buckets[b].lo[g] = i == 0 ? p->groups[g].min : p->groups[g].values[i - 1] + 1;
      r /= p->groups[g].n_values;
    }
  }
  return TS_OK;
}

int64_t tsp_bucket_extent(const tsp_bucket *b, const tsp_expr *e) {
  int64_t v = e->c;
  for (int g = 0; g < TSP_MAX_GROUPS; g++)
    if (e->k[g])
      v += e->k[g] * (e->k[g] > 0 ? b->values[g] : b->lo[g]);
  return v > 0 ? v : 0;
}

/* A slice's padded view in a bucket: with a static start s it covers [s, s + (ext-1)*step + 1)
 * of the operand, which must fit in the operand's extent (a formula stop such as k, under a
 * group bucketed more coarsely than the operand's, may not). A start that depends on the groups
 * comes with a static length (verify.c): its view ends at the true stop, inside the operand. */
static void bucket_text(const tsp_program *p, const tsp_bucket *b, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int g = 0; g < p->n_groups && len < cap; g++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s=%lld", g ? " " : "", p->groups[g].name,
                            (long long)b->values[g]);
}

int tsp_bucket_check(const tsp_program *p, const tsp_bucket *b, ts_error *err) {
  for (int i = 0; i < p->n_nodes; i++) {
    const tsp_node *n = &p->nodes[i];
    if (n->live && n->op == TSP_OP_WINDOW) {
      /* rows [0, ext(D-size+1)) and window [0, ext(size)) read up to their sum - 1 */
      int d = n->perm[0];
      int64_t rows = tsp_bucket_extent(b, &n->shape[d]), win = tsp_bucket_extent(b, &n->slice[0]);
      int64_t size = tsp_bucket_extent(b, &p->nodes[n->args[0]].shape[d]);
      if (rows && win && rows + win - 1 > size) {
        char vals[160];
        bucket_text(p, b, vals, sizeof vals);
        return ts_error_set(err, TS_UNSUPPORTED,
                            "window '%s': in the bucket %s the padded "
                            "window reaches %lld, past the %lld elements of its padded operand; "
                            "bucket the window size's group with every value ({\"step\": 1}) or "
                            "give a static size",
                            n->name, vals, (long long)(rows + win - 1), (long long)size);
      }
      continue;
    }
    if (!n->live || n->op != TSP_OP_SLICE)
      continue;
    const tsp_node *a = &p->nodes[n->args[0]];
    for (int d = 0; d < n->ndim; d++) {
      if (!tsp_expr_is_static(&n->slice[d]))
        continue;
      int64_t ext = tsp_bucket_extent(b, &n->shape[d]), size = tsp_bucket_extent(b, &a->shape[d]);
      int64_t end = ext ? n->slice[d].c + (ext - 1) * n->step[d] + 1 : 0;
      if (end <= size)
        continue;
      char vals[160];
      bucket_text(p, b, vals, sizeof vals);
      char tp[64];
      tsp_expr_format(p, &n->slice[TSP_MAX_DIMS + d], tp, sizeof tp);
      return ts_error_set(err, TS_UNSUPPORTED,
                          "slice '%s' dim %d: in the bucket %s the padded "
                          "view up to stop %s reaches %lld, past the %lld elements of its padded "
                          "operand; bucket the groups of the stop and of the operand's dim alike",
                          n->name, d, vals, tp, (long long)end, (long long)size);
    }
  }
  return TS_OK;
}

int tsp_slices_bind(const tsp_program *p, const int64_t *sym, ts_error *err) {
  for (int g = 0; g < p->n_groups; g++)
    if (sym[g] < p->groups[g].min || sym[g] > p->groups[g].max)
      return TS_OK; /* out of range: the bucket choice refuses it, naming the group */
  for (int i = 0; i < p->n_nodes; i++) {
    const tsp_node *n = &p->nodes[i];
    if (n->live && n->op == TSP_OP_WINDOW) {
      int64_t win = tsp_expr_eval(&n->slice[0], sym);
      int64_t size = tsp_expr_eval(&p->nodes[n->args[0]].shape[n->perm[0]], sym);
      if (win < 1 || win > size) {
        char ts[64];
        tsp_expr_format(p, &n->slice[0], ts, sizeof ts);
        return ts_error_set(err, TS_BAD_SHAPE,
                            "window '%s': size %s = %lld must be between 1 and "
                            "the windowed dim's %lld",
                            n->name, ts, (long long)win, (long long)size);
      }
      continue;
    }
    if (!n->live || n->op != TSP_OP_SLICE)
      continue;
    const tsp_node *a = &p->nodes[n->args[0]];
    for (int d = 0; d < n->ndim; d++) {
      int64_t st = tsp_expr_eval(&n->slice[d], sym);
      int64_t sp = tsp_expr_eval(&n->slice[TSP_MAX_DIMS + d], sym);
      int64_t size = tsp_expr_eval(&a->shape[d], sym);
      if (0 <= st && st <= sp && sp <= size)
        continue;
      char ts[64], tp[64], vals[160] = "";
      tsp_expr_format(p, &n->slice[d], ts, sizeof ts);
      tsp_expr_format(p, &n->slice[TSP_MAX_DIMS + d], tp, sizeof tp);
      size_t len = 0;
      for (int g = 0; g < p->n_groups && len < sizeof vals; g++)
        len += (size_t)snprintf(vals + len, sizeof vals - len, "%s%s=%lld", g ? ", " : "",
                                p->groups[g].name, (long long)sym[g]);
      return ts_error_set(err, TS_BAD_SHAPE,
                          "slice '%s' dim %d: start %s = %lld and stop %s = "
                          "%lld are out of range for a dim of %lld with %s (need 0 <= start <= "
                          "stop <= size)",
                          n->name, d, ts, (long long)st, tp, (long long)sp, (long long)size, vals);
    }
  }
  return TS_OK;
}

int tsp_program_pick_bucket(const tsp_program *p, const int64_t *values, ts_error *err) {
  int b = 0;
  for (int g = 0; g < p->n_groups; g++) {
    const tsp_group *gr = &p->groups[g];
    if (values[g] < gr->min || values[g] > gr->max) {
      ts_error_set(err, TS_BAD_SHAPE, "dim group '%s' = %lld is outside its range [%lld, %lld]",
                   gr->name, (long long)values[g], (long long)gr->min, (long long)gr->max);
      return -1;
    }
    int i = 0;
    while (gr->values[i] < values[g])
      i++;
    b = b * gr->n_values + i;
  }
  return b;
}

int tsp_padding_check(tsp_program *p, ts_error *err) {
  (void)err;
  for (int i = 0; i < p->n_nodes; i++) {
    tsp_node *n = &p->nodes[i];
    n->pad_known = false;
    n->masked = false;
    if (!n->live)
      continue;
    switch (tsp_op(n->op)->cat) {
    case TSP_CAT_INPUT: {
      int want = 0; /* 0: zero, 1: -inf, 2: +inf, 3: conflicting */
      for (int j = 0; j < p->n_nodes; j++) {
        const tsp_node *c = &p->nodes[j];
        if (!c->live || c->nargs < 1 || c->args[0] != i || c->op == TSP_OP_ASSIGN)
          continue;
        int w = c->op == TSP_OP_RMAX ? 1 : c->op == TSP_OP_RMIN ? 2 : 3;
        want = want == 0 ? w : (want == w ? w : 3);
      }
      n->pad_known = true;
      n->pad = 0;
      if (ts_dtype_is_float(n->dtype) && want == 1)
        n->pad = -INFINITY;
      else if (ts_dtype_is_float(n->dtype) && want == 2)
        n->pad = INFINITY;
      break;
    }
    case TSP_CAT_CONST:
      n->pad_known = true;
      n->pad = n->value;
      break;
    case TSP_CAT_LAYOUT:
      n->pad_known = p->nodes[n->args[0]].pad_known;
      n->pad = p->nodes[n->args[0]].pad;
      /* a slice's padded elements on a dynamic dim are its operand's padding only when it runs
       * to the operand's end; a stop before it (n-2, n-k+1) puts real elements there */
      for (int d = 0; n->op == TSP_OP_SLICE && d < n->ndim; d++)
        if (!tsp_expr_is_static(&n->shape[d]) &&
            !tsp_expr_eq(&n->slice[TSP_MAX_DIMS + d], &p->nodes[n->args[0]].shape[d]))
          n->pad_known = false;
      /* a window over a dynamic dim (or of a dynamic size) reads real elements in its padding */
      if (n->op == TSP_OP_WINDOW && (!tsp_expr_is_static(&n->slice[0]) ||
                                     !tsp_expr_is_static(&p->nodes[n->args[0]].shape[n->perm[0]])))
        n->pad_known = false;
      break;
    case TSP_CAT_ELEMENTWISE: {
      bool known = true;
      double v[3] = {0, 0, 0};
      for (int a = 0; a < n->nargs; a++) {
        const tsp_node *an = &p->nodes[n->args[a]];
        bool ok = an->op == TSP_OP_CONST || (is_dynamic(an) && an->pad_known);
        known = known && ok;
        if (a < 3)
          v[a] = an->pad;
      }
      if (known) {
        ts_dtype dt = p->nodes[n->args[n->op == TSP_OP_WHERE ? 1 : 0]].dtype;
        n->pad_known = true;
        n->pad = tsp_round(n->dtype, tsp_eval(n->op, dt, v[0], v[1], v[2]));
      }
      break;
    }
    case TSP_CAT_REDUCE: {
      const tsp_node *a = &p->nodes[n->args[0]];
      bool dyn_reduced = false;
      for (int d = 0; d < a->ndim; d++)
        if ((n->axes & (1u << d)) && !tsp_expr_is_static(&a->shape[d]))
          dyn_reduced = true;
      if (!dyn_reduced)
        break;
      bool safe = a->pad_known && (((n->op == TSP_OP_SUM || n->op == TSP_OP_MEAN) && a->pad == 0) ||
                                   (n->op == TSP_OP_RMAX && a->pad == -INFINITY) ||
                                   (n->op == TSP_OP_RMIN && a->pad == INFINITY));
      n->masked = !safe;
      break;
    }
    default: break;
    }
  }
  return TS_OK;
}
