/* placement.c - the placement check of a program run SPMD on local slices (ts_program.h): each
 * node's placement from its operands', in program order, or a refusal that names the op and the
 * reshard that would make it valid. Every node also records the program input its placement
 * comes from, so a refusal names the user's tensors (the labels the caller gives, e.g. the
 * stored tensors bound to the inputs) rather than intermediate values only, and the reshard
 * that fixes it, with the target placement's text when the caller gives it. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *opname(const tsp_program *p, int n) { return tsp_op(p->nodes[n].op)->name; }

/* What a refusal may say about the inputs: per node the program input its placement comes from
 * (-1: none), and the caller's names and placement texts of the inputs (NULL when not given). */
typedef struct origins {
  int *of;
  const char *const *labels;
  const char *const *attrs;
} origins;

/* "'m2' (computed from tensor 'gcol', input 'g')", "tensor 'gcol' (input 'g')", "'m2'" */
static const char *describe(const tsp_program *p, const origins *o, int n, char *buf, size_t cap) {
  char l[TSP_NAME + 16];
  int i = o->of ? o->of[n] : -1;
  const char *in = i >= 0 ? p->nodes[p->inputs[i]].name : NULL;
  const char *lab = i >= 0 && o->labels && o->labels[i] ? o->labels[i] : NULL;
  tsp_node_label(p, n, l, sizeof l);
  if (p->nodes[n].op == TSP_OP_INPUT && lab)
    snprintf(buf, cap, "tensor '%s' (input '%s')", lab, l);
  else if (p->nodes[n].op == TSP_OP_INPUT || !in)
    snprintf(buf, cap, "'%s'", l);
  else if (lab)
    snprintf(buf, cap, "'%s' (computed from tensor '%s', input '%s')", l, lab, in);
  else
    snprintf(buf, cap, "'%s' (computed from input '%s')", l, in);
  return buf;
}

/* The user's name of what to reshard: "'gcol'" (a tensor) or "input 'g'", else the value's. */
static const char *target(const tsp_program *p, const origins *o, int n, char *buf, size_t cap) {
  int i = o->of ? o->of[n] : -1;
  if (i >= 0 && o->labels && o->labels[i])
    snprintf(buf, cap, "'%s'", o->labels[i]);
  else if (i >= 0)
    snprintf(buf, cap, "input '%s'", p->nodes[p->inputs[i]].name);
  else
    tsp_node_label(p, n, buf, cap);
  return buf;
}

/* "to mesh=[4]@0-3 placements=[S(0)]" (the text of the placement of `like`'s input), else "to
 * the placement of 'm'" */
static const char *to_placement_of(const tsp_program *p, const origins *o, int like, char *buf,
                                   size_t cap) {
  int i = o->of ? o->of[like] : -1;
  char t[TSP_NAME + 32];
  if (i >= 0 && o->attrs && o->attrs[i])
    snprintf(buf, cap, "to %s", o->attrs[i]);
  else
    snprintf(buf, cap, "to the placement of %s", target(p, o, like, t, sizeof t));
  return buf;
}

static const char *label(const tsp_program *p, int n, char *buf, size_t cap) {
  return tsp_node_label(p, n, buf, cap);
}

static void mask_text(uint32_t m, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "{");
  bool first = true;
  for (int b = 0; b < 32 && len < cap; b++)
    if (m & (1u << b)) {
      len += (size_t)snprintf(buf + len, cap - len, "%s%d", first ? "" : ",", b);
      first = false;
    }
  if (len < cap)
    snprintf(buf + len, cap - len, "}");
}

static bool is_one(const tsp_expr *e) { return tsp_expr_is_static(e) && e->c == 1; }

static int refuse_partial(const tsp_program *p, const origins *o, int n, int a, ts_error *err) {
  char l[TSP_NAME + 16], al[2 * TSP_NAME + 64], tl[TSP_NAME + 16];
  return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                      "%s '%s': operand %s holds partial values, "
                      "which this op cannot take on local slices; reshard %s to a Replicate or "
                      "Shard placement first",
                      opname(p, n), label(p, n, l, sizeof l), describe(p, o, a, al, sizeof al),
                      target(p, o, a, tl, sizeof tl));
}

static int elementwise(const tsp_program *p, const origins *o, int n, tsp_placement *pl,
                       ts_error *err) {
  const tsp_node *nd = &p->nodes[n];
  tsp_placement *r = &pl[n];
  memset(r, 0, sizeof *r);
  bool set[TSP_MAX_DIMS] = {false};
  int from[TSP_MAX_DIMS];
  int partial_from = -1;
  char l[TSP_NAME + 16], al[2 * TSP_NAME + 64], bl[2 * TSP_NAME + 64], m1[64], m2[64];
  char tl[TSP_NAME + 16], to[200];
  for (int i = 0; i < nd->nargs; i++) {
    int a = nd->args[i];
    const tsp_node *an = &p->nodes[a];
    if (an->op == TSP_OP_CONST)
      continue;
    const tsp_placement *ap = &pl[a];
    if (ap->partial) {
      bool linear =
          nd->op == TSP_OP_ADD || nd->op == TSP_OP_SUB || nd->op == TSP_OP_NEG ||
          nd->op == TSP_OP_COPY || nd->op == TSP_OP_CAST ||
          ((nd->op == TSP_OP_MUL || nd->op == TSP_OP_DIV) && nd->nargs == 2 &&
           p->nodes[nd->args[1 - i]].op == TSP_OP_CONST && (nd->op == TSP_OP_MUL || i == 0));
      if (!linear || ap->partial_op != TSP_PARTIAL_SUM)
        return refuse_partial(p, o, n, a, err);
      if (partial_from >= 0 && pl[partial_from].partial != ap->partial)
        return refuse_partial(p, o, n, a, err);
      partial_from = a;
      r->partial = ap->partial;
      r->partial_op = TSP_PARTIAL_SUM;
    }
    for (int d = 0; d < nd->ndim; d++) {
      int ad = d - (nd->ndim - an->ndim);
      if (ad < 0)
        continue;
      if (is_one(&an->shape[ad])) {
        if (ap->split[ad])
          return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                              "%s '%s': %s dim %d has size 1 but is "
                              "split; reshard %s to Replicate",
                              opname(p, n), label(p, n, l, sizeof l),
                              describe(p, o, a, al, sizeof al), ad, target(p, o, a, tl, sizeof tl));
        continue;
      }
      if (!set[d]) {
        set[d] = true;
        from[d] = a;
        r->split[d] = ap->split[ad];
      } else if (r->split[d] != ap->split[ad]) {
        mask_text(r->split[d], m1, sizeof m1);
        mask_text(ap->split[ad], m2, sizeof m2);
        return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                            "%s '%s': operands are split differently on result dim %d (%s over "
                            "mesh dims %s, %s over %s): the local slices do not line up; reshard "
                            "%s %s (or both to Replicate) first",
                            opname(p, n), label(p, n, l, sizeof l), d,
                            describe(p, o, from[d], bl, sizeof bl), m1,
                            describe(p, o, a, al, sizeof al), m2, target(p, o, a, tl, sizeof tl),
                            to_placement_of(p, o, from[d], to, sizeof to));
      }
    }
  }
  if (partial_from >= 0 && (nd->op == TSP_OP_ADD || nd->op == TSP_OP_SUB)) {
    /* a partial sum plus a non-partial value would add the latter once per rank */
    for (int i = 0; i < nd->nargs; i++)
      if (p->nodes[nd->args[i]].op == TSP_OP_CONST || !pl[nd->args[i]].partial)
        return refuse_partial(p, o, n, partial_from, err);
  }
  return TS_OK;
}

static int reduce(const tsp_program *p, const origins *o, int n, tsp_placement *pl, ts_error *err) {
  const tsp_node *nd = &p->nodes[n];
  int a = nd->args[0];
  const tsp_node *an = &p->nodes[a];
  const tsp_placement *ap = &pl[a];
  tsp_placement *r = &pl[n];
  memset(r, 0, sizeof *r);
  char l[TSP_NAME + 16], al[2 * TSP_NAME + 64], tl[TSP_NAME + 16];
  if (ap->partial)
    return refuse_partial(p, o, n, a, err);
  int od = 0;
  for (int d = 0; d < an->ndim; d++) {
    if (!(nd->axes & (1u << d))) {
      r->split[od++] = ap->split[d];
      continue;
    }
    if (nd->keepdims)
      r->split[od++] = 0;
    if (!ap->split[d])
      continue;
    if (nd->op == TSP_OP_MEAN)
      return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "mean '%s': dim %d of %s is split over "
                          "ranks, and a mean of local slices is not a partial value; use sum and "
                          "divide by the global count, or reshard %s to replicate dim %d",
                          label(p, n, l, sizeof l), d, describe(p, o, a, al, sizeof al),
                          target(p, o, a, tl, sizeof tl), d);
    r->partial |= ap->split[d];
    r->partial_op = nd->op == TSP_OP_SUM    ? TSP_PARTIAL_SUM
                    : nd->op == TSP_OP_RMAX ? TSP_PARTIAL_MAX
                                            : TSP_PARTIAL_MIN;
  }
  return TS_OK;
}

static int einsum(const tsp_program *p, const origins *o, int n, tsp_placement *pl, ts_error *err) {
  const tsp_node *nd = &p->nodes[n];
  tsp_placement *r = &pl[n];
  memset(r, 0, sizeof *r);
  uint32_t lab[128];
  bool seen[128] = {false};
  char l[TSP_NAME + 16], al[2 * TSP_NAME + 64];
  const char *s = nd->eq;
  for (int i = 0; i < nd->nargs; i++) {
    int a = nd->args[i];
    if (pl[a].partial)
      return refuse_partial(p, o, n, a, err);
    for (int d = 0; *s && *s != ',' && *s != '-'; s++, d++) {
      unsigned char c = (unsigned char)*s;
      uint32_t m = is_one(&p->nodes[a].shape[d]) ? 0 : pl[a].split[d];
      if (seen[c] && lab[c] != m)
        return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                            "einsum '%s': label '%c' is split "
                            "differently in %s than in an earlier operand; reshard the operands "
                            "so that '%c' is split alike (or replicated) in all of them",
                            label(p, n, l, sizeof l), c, describe(p, o, a, al, sizeof al), c);
      seen[c] = true;
      lab[c] = m;
    }
    if (*s == ',')
      s++;
  }
  const char *out = strstr(nd->eq, "->") + 2;
  for (int d = 0; out[d]; d++) {
    r->split[d] = lab[(unsigned char)out[d]];
  }
  for (int c = 0; c < 128; c++)
    if (seen[c] && !strchr(out, c) && lab[c]) {
      r->partial |= lab[c];
      r->partial_op = TSP_PARTIAL_SUM;
    }
  return TS_OK;
}

/* The input a node's placement comes from: its first operand's that is split or partial, else
 * its first operand's with one. */
static int origin_of(const tsp_program *p, const tsp_placement *pl, const int *of, int n) {
  const tsp_node *nd = &p->nodes[n];
  if (nd->op == TSP_OP_INPUT)
    return nd->input_index;
  int any = -1;
  for (int i = 0; i < nd->nargs; i++) {
    int a = nd->args[i];
    if (of[a] < 0)
      continue;
    bool placed = pl[a].partial != 0;
    for (int d = 0; d < p->nodes[a].ndim; d++)
      placed = placed || pl[a].split[d];
    if (placed)
      return of[a];
    if (any < 0)
      any = of[a];
  }
  return any;
}

int tsp_program_placement(const tsp_program *p, const tsp_placement *inputs, int n_in,
                          tsp_placement *outputs, int n_out, ts_error *err) {
  return tsp_program_placement_named(p, inputs, NULL, NULL, n_in, outputs, n_out, err);
}

int tsp_program_placement_named(const tsp_program *p, const tsp_placement *inputs,
                                const char *const *labels, const char *const *attrs, int n_in,
                                tsp_placement *outputs, int n_out, ts_error *err) {
  if (n_in != p->n_inputs || n_out != p->n_outputs)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "program '%s' has %d inputs and %d outputs, "
                        "got %d and %d placements",
                        p->name, p->n_inputs, p->n_outputs, n_in, n_out);
  tsp_placement *pl = calloc((size_t)p->n_nodes + 1, sizeof *pl);
  int *of = malloc(((size_t)p->n_nodes + 1) * sizeof *of);
  if (!pl || !of) {
    free(pl);
    free(of);
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  }
  origins org = {of, labels, attrs}, *o = &org;
  int rc = TS_OK;
  char l[TSP_NAME + 16], al[2 * TSP_NAME + 64], tl[2 * TSP_NAME + 64], to[200];
  for (int n = 0; n < p->n_nodes && rc == TS_OK; n++) {
    const tsp_node *nd = &p->nodes[n];
    of[n] = -1;
    if (!nd->live)
      continue;
    of[n] = origin_of(p, pl, of, n);
    switch (tsp_op(nd->op)->cat) {
    case TSP_CAT_INPUT:
      pl[n] = inputs[nd->input_index];
      if (nd->ndim == 0 && pl[n].partial)
        rc = ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "input '%s': a scalar cannot hold partial "
                          "values; reshard it to Replicate",
                          nd->name);
      break;
    case TSP_CAT_CONST: break;
    case TSP_CAT_ELEMENTWISE: rc = elementwise(p, o, n, pl, err); break;
    case TSP_CAT_REDUCE: rc = reduce(p, o, n, pl, err); break;
    case TSP_CAT_EINSUM: rc = einsum(p, o, n, pl, err); break;
    case TSP_CAT_LAYOUT: {
      const tsp_node *an = &p->nodes[nd->args[0]];
      const tsp_placement *ap = &pl[nd->args[0]];
      pl[n] = *ap;
      if (nd->op == TSP_OP_TRANSPOSE) {
        for (int d = 0; d < nd->ndim; d++)
          pl[n].split[d] = ap->split[nd->perm[d]];
        break;
      }
      if (nd->op == TSP_OP_WINDOW) {
        /* the new last dim is whole on every rank; the windowed dim must not be split */
        if (ap->split[nd->perm[0]])
          rc = ts_error_set(err, TS_PROGRAM_PLACEMENT,
                            "window '%s': dim %d of %s is split over "
                            "ranks, and a window would miss the elements across the cut; "
                            "reshard %s to replicate dim %d first",
                            nd->name, nd->perm[0], describe(p, o, nd->args[0], al, sizeof al),
                            target(p, o, nd->args[0], l, sizeof l), nd->perm[0]);
        pl[n].split[nd->ndim - 1] = 0;
        break;
      }
      if (nd->op == TSP_OP_SLICE) {
        /* positions on a split dim are local to each rank's slice: only a whole dim is kept */
        for (int d = 0; d < nd->ndim && rc == TS_OK; d++) {
          bool whole = tsp_expr_eq(&nd->slice[d], &(tsp_expr){0}) && nd->step[d] == 1 &&
                       tsp_expr_eq(&nd->slice[TSP_MAX_DIMS + d], &an->shape[d]);
          if (ap->split[d] && !whole)
            rc = ts_error_set(err, TS_PROGRAM_PLACEMENT,
                              "slice '%s': dim %d of %s is split "
                              "over ranks, and a slice of the local slices would take local "
                              "positions; reshard %s to replicate dim %d first (or slice only "
                              "dims that are not split)",
                              nd->name, d, describe(p, o, nd->args[0], al, sizeof al),
                              target(p, o, nd->args[0], l, sizeof l), d);
        }
        break;
      }
      memset(pl[n].split, 0, sizeof pl[n].split);
      bool ok = true;
      for (int d = 1; d < an->ndim; d++)
        ok = ok && !ap->split[d];
      if (an->ndim && ap->split[0]) {
        ok = ok && nd->ndim > 0 && tsp_expr_eq(&an->shape[0], &nd->shape[0]);
        pl[n].split[0] = ap->split[0];
      }
      if (!ok)
        rc = ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "reshape '%s': %s is split on a dim the "
                          "reshape merges or moves (only a split first dim kept as it is can be "
                          "reshaped locally); reshard %s to Replicate first",
                          nd->name, describe(p, o, nd->args[0], al, sizeof al),
                          target(p, o, nd->args[0], l, sizeof l));
      break;
    }
    default: break;
    }
    /* in-place stores need the target's placement */
    if (rc == TS_OK && nd->assign_input >= 0) {
      const tsp_placement *tp = &inputs[nd->assign_input];
      const tsp_node *t = &p->nodes[p->inputs[nd->assign_input]];
      bool same = pl[n].partial == tp->partial &&
                  memcmp(pl[n].split, tp->split, sizeof(uint32_t) * (size_t)t->ndim) == 0;
      if (!same) {
        of[p->inputs[nd->assign_input]] = nd->assign_input;
        rc = ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "assign to '%s': the value %s is placed "
                          "differently from %s (split or partial); reshard %s %s first",
                          t->name, describe(p, o, n, al, sizeof al),
                          describe(p, o, p->inputs[nd->assign_input], tl, sizeof tl),
                          target(p, o, n, l, sizeof l),
                          to_placement_of(p, o, p->inputs[nd->assign_input], to, sizeof to));
      }
    }
  }
  for (int k = 0; rc == TS_OK && k < n_out; k++)
    outputs[k] = pl[p->outputs[k]];
  free(pl);
  free(of);
  return rc;
}
