/* parse.c - program JSON text (program/PROGRAM.md) to the graph, with libjansson: the dynamic
 * dim groups, the inputs, the ops (each verified as it is added, so an error names the op) and the
 * outputs. Literal numbers in "args" become constant nodes whose dtype is taken from the other
 * operands (like numpy's Python scalars). Slice bounds (ints, negative from the end, formulas)
 * and window sizes become dim expressions; a reshape of a transposed, sliced or windowed view
 * gets a copy node first (it reads its operand as one contiguous run). */
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int tsp_add_node(tsp_program *p, int op, ts_error *err) {
  if (p->n_nodes == p->cap_nodes) {
    int cap = p->cap_nodes ? 2 * p->cap_nodes : 64;
    if (p->cap_nodes == TSP_MAX_NODES)
      cap = TSP_MAX_NODES + 1;
    else if (cap > TSP_MAX_NODES)
      cap = TSP_MAX_NODES;
    if (cap > TSP_MAX_NODES)
      return -ts_error_set(err, TS_LIMIT,
                           "program has more than %d nodes (ops, literals and "
                           "inserted copies)",
                           TSP_MAX_NODES);
    tsp_node *n = realloc(p->nodes, (size_t)cap * sizeof *n);
    if (!n)
      return -ts_error_set(err, TS_NO_MEMORY, "out of memory for the program graph");
    p->nodes = n;
    p->cap_nodes = cap;
  }
  tsp_node *n = &p->nodes[p->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->dtype = (ts_dtype)-1;
  n->kernel = -1;
  n->output_index = -1;
  n->assign_input = -1;
  n->input_index = -1;
  return p->n_nodes++;
}

static int find_name(const tsp_program *p, const char *name) {
  for (int i = p->n_nodes - 1; i >= 0; i--)
    if (p->nodes[i].name[0] && strcmp(p->nodes[i].name, name) == 0)
      return i;
  return -1;
}

/* Checks s with one of the rules of names.c; the field's name is formatted like printf. */
static int field_check(int (*rule)(const char *, const char *, ts_error *), const char *s,
                       ts_error *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int field_check(int (*rule)(const char *, const char *, ts_error *), const char *s,
                       ts_error *err, const char *fmt, ...) {
  char field[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(field, sizeof field, fmt, ap);
  va_end(ap);
  return rule(field, s, err);
}

/* One group: {"min": a, "max": b, "buckets": "pow2" | {"step": s} | [v, ...]} */
static int parse_group(tsp_program *p, size_t i, const char *name, json_t *g, ts_error *err) {
  if (p->n_groups == TSP_MAX_GROUPS)
    return ts_error_set(err, TS_PARSE, "program: more than %d dynamic dim groups", TSP_MAX_GROUPS);
  int rc = field_check(tsp_name_check, name, err, "dims[%zu].name", i);
  if (rc != TS_OK)
    return rc;
  tsp_group *gr = &p->groups[p->n_groups];
  memset(gr, 0, sizeof *gr);
  snprintf(gr->name, sizeof gr->name, "%s", name);
  json_t *mn = json_object_get(g, "min"), *mx = json_object_get(g, "max");
  if (!json_is_object(g) || !json_is_integer(mn) || !json_is_integer(mx))
    return ts_error_set(err, TS_PARSE,
                        "dims.%s: expected {\"min\": int, \"max\": int, \"buckets\": \"pow2\" | "
                        "{\"step\": int} | [int, ...]}",
                        name);
  gr->min = json_integer_value(mn);
  gr->max = json_integer_value(mx);
  if (gr->min < 1 || gr->max < gr->min || gr->max > ((int64_t)1 << 40))
    return ts_error_set(err, TS_PARSE, "dims.%s: range [%lld, %lld] invalid (need 1 <= min <= max)",
                        name, (long long)gr->min, (long long)gr->max);
  json_t *bk = json_object_get(g, "buckets");
  if (!bk || (json_is_string(bk) && strcmp(json_string_value(bk), "pow2") == 0)) {
    snprintf(gr->rule, sizeof gr->rule, "pow2");
    int64_t v = 1;
    while (v < gr->min)
      v *= 2;
    while (gr->n_values < 64) {
      gr->values[gr->n_values++] = v < gr->max ? v : gr->max;
      if (v >= gr->max)
        break;
      v *= 2;
    }
  } else if (json_is_object(bk) && json_is_integer(json_object_get(bk, "step"))) {
    int64_t s = json_integer_value(json_object_get(bk, "step"));
    if (s < 1)
      return ts_error_set(err, TS_PARSE, "dims.%s: step %lld must be >= 1", name, (long long)s);
    snprintf(gr->rule, sizeof gr->rule, "step %lld", (long long)s);
    int64_t v = ((gr->min + s - 1) / s) * s;
    for (;;) {
      if (gr->n_values == 64)
        return ts_error_set(err, TS_PARSE,
                            "dims.%s: step %lld gives more than 64 buckets over "
                            "[%lld, %lld]; use a larger step",
                            name, (long long)s, (long long)gr->min, (long long)gr->max);
      gr->values[gr->n_values++] = v < gr->max ? v : gr->max;
      if (v >= gr->max)
        break;
      v += s;
    }
  } else if (json_is_array(bk) && json_array_size(bk) > 0 && json_array_size(bk) <= 64) {
    snprintf(gr->rule, sizeof gr->rule, "list");
    int64_t prev = 0;
    size_t i;
    json_t *v;
    json_array_foreach(bk, i, v) {
      if (!json_is_integer(v) || json_integer_value(v) <= prev)
        return ts_error_set(err, TS_PARSE,
                            "dims.%s: buckets list must hold ascending positive "
                            "integers",
                            name);
      prev = json_integer_value(v);
      if (prev >= gr->min)
        gr->values[gr->n_values++] = prev;
    }
    if (prev < gr->max)
      return ts_error_set(err, TS_PARSE, "dims.%s: the largest bucket %lld does not cover max %lld",
                          name, (long long)prev, (long long)gr->max);
  } else {
    return ts_error_set(err, TS_PARSE,
                        "dims.%s.buckets: expected \"pow2\", {\"step\": int} or a "
                        "list of at most 64 ints",
                        name);
  }
  p->n_groups++;
  return TS_OK;
}

static int parse_input(tsp_program *p, size_t i, json_t *in, ts_error *err) {
  json_t *nm = json_object_get(in, "name"), *dt = json_object_get(in, "dtype"),
         *sh = json_object_get(in, "shape");
  if (!json_is_object(in) || !json_is_string(nm) || !json_is_string(dt) || !json_is_array(sh))
    return ts_error_set(err, TS_PARSE,
                        "inputs[%zu]: expected {\"name\": str, \"dtype\": str, "
                        "\"shape\": [int or dim name, ...]}",
                        i);
  const char *name = json_string_value(nm);
  int rc = field_check(tsp_name_check, name, err, "inputs[%zu].name", i);
  if (rc == TS_OK)
    rc = field_check(tsp_name_check, json_string_value(dt), err, "inputs[%zu].dtype", i);
  if (rc != TS_OK)
    return rc;
  if (find_name(p, name) >= 0)
    return ts_error_set(err, TS_PARSE, "inputs[%zu]: name '%s' is used twice", i, name);
  if (p->n_inputs == 64)
    return ts_error_set(err, TS_PARSE, "program: more than 64 inputs");
  int n = tsp_add_node(p, TSP_OP_INPUT, err);
  if (n < 0)
    return -n;
  tsp_node *nd = &p->nodes[n];
  snprintf(nd->name, sizeof nd->name, "%s", name);
  ts_dtype d;
  ts_error inner = {0};
  if (ts_dtype_parse(json_string_value(dt), &d, &inner) != TS_OK)
    return ts_error_set(err, TS_BAD_DTYPE, "inputs[%zu] '%s': %s", i, name, inner.msg);
  if (!tsp_ctype(d))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "inputs[%zu] '%s': dtype %s is not supported by "
                        "programs (valid: f32, f64, f16, bf16, i8, i32, i64, u8)",
                        i, name, ts_dtype_name(d));
  nd->dtype = d;
  if (json_array_size(sh) > TSP_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE, "inputs[%zu] '%s': more than %d dims", i, name,
                        TSP_MAX_DIMS);
  size_t k;
  json_t *v;
  json_array_foreach(sh, k, v) {
    tsp_expr e = tsp_expr_const(0);
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= ((int64_t)1 << 40)) {
      e.c = json_integer_value(v);
    } else if (json_is_string(v)) {
      rc = field_check(tsp_name_check, json_string_value(v), err, "inputs[%zu].shape[%zu]", i, k);
      if (rc != TS_OK)
        return rc;
      int g;
      for (g = 0; g < p->n_groups; g++)
        if (strcmp(p->groups[g].name, json_string_value(v)) == 0)
          break;
      if (g == p->n_groups)
        return ts_error_set(err, TS_PARSE, "inputs[%zu] '%s': dim '%s' is not a group of \"dims\"",
                            i, name, json_string_value(v));
      e.k[g] = 1;
    } else {
      return ts_error_set(err, TS_PARSE,
                          "inputs[%zu] '%s': shape[%zu] must be a non-negative "
                          "int or a dim group name",
                          i, name, k);
    }
    nd->shape[nd->ndim++] = e;
  }
  nd->input_index = p->n_inputs;
  p->inputs[p->n_inputs++] = n;
  return tsp_verify_node(p, n, err);
}

static int parse_int_list(json_t *a, int *out, int max, int *n) {
  if (!json_is_array(a) || (int)json_array_size(a) > max)
    return -1;
  size_t i;
  json_t *v;
  *n = 0;
  json_array_foreach(a, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < -64 || json_integer_value(v) > 64)
      return -1;
    out[(*n)++] = (int)json_integer_value(v);
  }
  return 0;
}

/* A slice bound: an int (negative: counted from the end, like numpy), a formula over the dim
 * groups (a position from the start), or null/absent (the default: 0 or the end). */
static int slice_bound(tsp_program *p, json_t *v, const tsp_expr *size, const tsp_expr *dflt,
                       tsp_expr *out, ts_error *err) {
  if (!v || json_is_null(v)) {
    *out = *dflt;
    return TS_OK;
  }
  if (json_is_integer(v) && json_integer_value(v) >= -((int64_t)1 << 40) &&
      json_integer_value(v) <= ((int64_t)1 << 40)) {
    int64_t x = json_integer_value(v);
    *out = x < 0 ? *size : tsp_expr_const(0);
    out->c += x;
    return TS_OK;
  }
  ts_error inner = {0};
  if (json_is_string(v) && tsp_expr_parse(p, json_string_value(v), out, &inner) == TS_OK)
    return TS_OK;
  return ts_error_set(err, TS_PARSE, "%s", json_is_string(v) ? inner.msg : "wrong type");
}

/* slice: "start", "stop" (lists of bounds) and "step" (list of ints >= 1), per dim of the
 * operand from the first; dims not listed are kept whole. */
static int parse_slice(tsp_program *p, size_t i, json_t *o, tsp_node *nd, ts_error *err) {
  const tsp_node *a = &p->nodes[nd->args[0]];
  json_t *lists[3] = {json_object_get(o, "start"), json_object_get(o, "stop"),
                      json_object_get(o, "step")};
  static const char *names[3] = {"start", "stop", "step"};
  for (int l = 0; l < 3; l++)
    if (lists[l] && !json_is_null(lists[l]) &&
        (!json_is_array(lists[l]) || (int)json_array_size(lists[l]) > a->ndim))
      return ts_error_set(err, TS_PARSE,
                          "ops[%zu] slice: \"%s\" must be a list of at most %d "
                          "entries (one per dim of the operand, from the first)",
                          i, names[l], a->ndim);
  nd->slice = calloc(2 * TSP_MAX_DIMS, sizeof *nd->slice);
  if (!nd->slice)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  for (int d = 0; d < a->ndim; d++) {
    tsp_expr zero = tsp_expr_const(0);
    ts_error inner = {0};
    json_t *st = json_is_array(lists[0]) ? json_array_get(lists[0], (size_t)d) : NULL;
    json_t *sp = json_is_array(lists[1]) ? json_array_get(lists[1], (size_t)d) : NULL;
    json_t *k = json_is_array(lists[2]) ? json_array_get(lists[2], (size_t)d) : NULL;
    for (int l = 0; l < 2; l++) {
      json_t *b = l ? sp : st;
      int rc = json_is_string(b) ? field_check(tsp_formula_check, json_string_value(b), err,
                                               "ops[%zu].%s[%d]", i, names[l], d)
                                 : TS_OK;
      if (rc != TS_OK)
        return rc;
    }
    if (slice_bound(p, st, &a->shape[d], &zero, &nd->slice[d], &inner) != TS_OK ||
        slice_bound(p, sp, &a->shape[d], &a->shape[d], &nd->slice[TSP_MAX_DIMS + d], &inner) !=
            TS_OK)
      return ts_error_set(err, TS_PARSE,
                          "ops[%zu] slice: dim %d: a bound must be an int "
                          "(negative: from the end), a formula over the dim groups (\"n-2\") or "
                          "null: %s",
                          i, d, inner.msg);
    nd->step[d] = 1;
    if (k && !json_is_null(k)) {
      if (!json_is_integer(k) || json_integer_value(k) < 1 ||
          json_integer_value(k) > ((int64_t)1 << 40))
        return ts_error_set(err, TS_PARSE,
                            "ops[%zu] slice: dim %d: step must be a positive int "
                            "(negative steps are not supported)",
                            i, d);
      nd->step[d] = json_integer_value(k);
    }
  }
  return TS_OK;
}

/* reductions: "dims" (absent or null: all) and "keepdims" */
static int parse_reduce(tsp_program *p, size_t i, json_t *o, tsp_node *nd, const char *opname,
                        ts_error *err) {
  json_t *dims = json_object_get(o, "dims");
  json_t *kd = json_object_get(o, "keepdims");
  if (kd && !json_is_boolean(kd))
    return ts_error_set(err, TS_PARSE, "ops[%zu] %s: keepdims must be true or false", i, opname);
  nd->keepdims = json_is_true(kd);
  const tsp_node *a = &p->nodes[nd->args[0]];
  if (!dims || json_is_null(dims)) {
    nd->axes = a->ndim ? (1u << a->ndim) - 1 : 0;
    return TS_OK;
  }
  int ax[TSP_MAX_DIMS], na;
  if (parse_int_list(dims, ax, TSP_MAX_DIMS, &na) != 0)
    return ts_error_set(err, TS_PARSE, "ops[%zu] %s: dims must be a list of ints", i, opname);
  for (int j = 0; j < na; j++) {
    int d = ax[j] < 0 ? ax[j] + a->ndim : ax[j];
    if (d < 0 || d >= a->ndim || (nd->axes & (1u << d)))
      return ts_error_set(err, TS_BAD_SHAPE,
                          "ops[%zu] %s: dim %d out of range or repeated "
                          "for an operand of %d dims",
                          i, opname, ax[j], a->ndim);
    nd->axes |= 1u << d;
  }
  return TS_OK;
}

/* transpose: "perm" (default: reversed) */
static int parse_transpose(tsp_program *p, size_t i, json_t *o, tsp_node *nd, ts_error *err) {
  json_t *pm = json_object_get(o, "perm");
  int na = 0;
  const tsp_node *a = &p->nodes[nd->args[0]];
  if (!pm) {
    for (int j = 0; j < a->ndim; j++)
      nd->perm[j] = a->ndim - 1 - j;
  } else if (parse_int_list(pm, nd->perm, TSP_MAX_DIMS, &na) != 0 || na != a->ndim) {
    return ts_error_set(err, TS_PARSE,
                        "ops[%zu] transpose: perm must list each of the %d dims "
                        "once",
                        i, a->ndim);
  }
  uint32_t seen = 0;
  for (int j = 0; j < a->ndim; j++) {
    if (nd->perm[j] < 0 || nd->perm[j] >= a->ndim || (seen & (1u << nd->perm[j])))
      return ts_error_set(err, TS_PARSE,
                          "ops[%zu] transpose: perm must list each of the %d "
                          "dims once",
                          i, a->ndim);
    seen |= 1u << nd->perm[j];
  }
  return TS_OK;
}

/* reshape: "shape", ints (one -1 when static) or dim formulas */
static int parse_reshape(tsp_program *p, size_t i, json_t *o, tsp_node *nd, ts_error *err) {
  json_t *sh = json_object_get(o, "shape");
  if (!json_is_array(sh) || json_array_size(sh) > TSP_MAX_DIMS)
    return ts_error_set(err, TS_PARSE,
                        "ops[%zu] reshape: shape must be a list of at most %d "
                        "ints or dim formulas (\"2*n\")",
                        i, TSP_MAX_DIMS);
  size_t k;
  json_t *v;
  json_array_foreach(sh, k, v) {
    tsp_expr e = tsp_expr_const(0);
    if (json_is_integer(v) && json_integer_value(v) >= -1 &&
        json_integer_value(v) <= ((int64_t)1 << 40)) {
      e.c = json_integer_value(v);
    } else {
      ts_error inner = {0};
      int rc = json_is_string(v) ? field_check(tsp_formula_check, json_string_value(v), err,
                                               "ops[%zu].shape[%zu]", i, k)
                                 : TS_OK;
      if (rc != TS_OK)
        return rc;
      if (!json_is_string(v) || tsp_expr_parse(p, json_string_value(v), &e, &inner) != TS_OK)
        return ts_error_set(err, TS_PARSE,
                            "ops[%zu] reshape: shape[%zu] must be an int or a "
                            "dim formula over the groups (\"2*n\"): %s",
                            i, k, json_is_string(v) ? inner.msg : "wrong type");
    }
    nd->shape[nd->ndim++] = e;
  }
  return TS_OK;
}

/* window: "dim" (default the last), "size": an int >= 1 or a formula over the groups ("k") */
static int parse_window(tsp_program *p, size_t i, json_t *o, tsp_node *nd, ts_error *err) {
  const tsp_node *a = &p->nodes[nd->args[0]];
  json_t *dm = json_object_get(o, "dim"), *sz = json_object_get(o, "size");
  int d = dm ? (int)json_integer_value(dm) : -1;
  if ((dm && (!json_is_integer(dm) || json_integer_value(dm) < -8 || json_integer_value(dm) > 8)) ||
      (d < 0 ? d + a->ndim : d) < 0 || (d < 0 ? d + a->ndim : d) >= a->ndim)
    return ts_error_set(err, TS_PARSE,
                        "ops[%zu] window: \"dim\" must be a dim of the operand "
                        "(%d dims; negative from the end)",
                        i, a->ndim);
  nd->perm[0] = d < 0 ? d + a->ndim : d;
  nd->slice = calloc(1, sizeof *nd->slice);
  if (!nd->slice)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  ts_error inner = {0};
  int rc = json_is_string(sz)
               ? field_check(tsp_formula_check, json_string_value(sz), err, "ops[%zu].size", i)
               : TS_OK;
  if (rc != TS_OK)
    return rc;
  if (json_is_integer(sz) && json_integer_value(sz) >= 1 &&
      json_integer_value(sz) <= ((int64_t)1 << 40))
    nd->slice[0] = tsp_expr_const(json_integer_value(sz));
  else if (!json_is_string(sz) ||
           tsp_expr_parse(p, json_string_value(sz), &nd->slice[0], &inner) != TS_OK)
    return ts_error_set(err, TS_PARSE,
                        "ops[%zu] window: \"size\" must be an int >= 1 or a "
                        "formula over the dim groups (\"k\")%s%s",
                        i, inner.msg[0] ? ": " : "", inner.msg);
  return TS_OK;
}

/* einsum: "eq"; cast: "dtype" */
static int parse_eq_or_dtype(size_t i, json_t *o, tsp_node *nd, ts_error *err) {
  if (nd->op == TSP_OP_EINSUM) {
    json_t *eq = json_object_get(o, "eq");
    if (!json_is_string(eq))
      return ts_error_set(err, TS_PARSE,
                          "ops[%zu] einsum: \"eq\" must be an equation like "
                          "\"ij,jk->ik\"",
                          i);
    int rc = field_check(tsp_eq_check, json_string_value(eq), err, "ops[%zu].eq", i);
    if (rc != TS_OK)
      return rc;
    snprintf(nd->eq, sizeof nd->eq, "%s", json_string_value(eq));
    return TS_OK;
  }
  json_t *dt = json_object_get(o, "dtype");
  ts_dtype d;
  int rc = json_is_string(dt)
               ? field_check(tsp_name_check, json_string_value(dt), err, "ops[%zu].dtype", i)
               : TS_OK;
  if (rc != TS_OK)
    return rc;
  if (!json_is_string(dt) || ts_dtype_parse(json_string_value(dt), &d, NULL) != TS_OK ||
      !tsp_ctype(d))
    return ts_error_set(err, TS_PARSE,
                        "ops[%zu] cast: \"dtype\" must be one of f32, f64, f16, "
                        "bf16, i8, i32, i64, u8",
                        i);
  nd->dtype = d;
  return TS_OK;
}

/* The attributes of the op's category (the node's args are set). */
static int parse_attributes(tsp_program *p, size_t i, json_t *o, tsp_node *nd, const char *opname,
                            ts_error *err) {
  if (tsp_op(nd->op)->cat == TSP_CAT_REDUCE)
    return parse_reduce(p, i, o, nd, opname, err);
  switch (nd->op) {
  case TSP_OP_TRANSPOSE: return parse_transpose(p, i, o, nd, err);
  case TSP_OP_RESHAPE: return parse_reshape(p, i, o, nd, err);
  case TSP_OP_SLICE: return parse_slice(p, i, o, nd, err);
  case TSP_OP_WINDOW: return parse_window(p, i, o, nd, err);
  case TSP_OP_EINSUM:
  case TSP_OP_CAST: return parse_eq_or_dtype(i, o, nd, err);
  default: return TS_OK;
  }
}

/* An op's "out" is checked before the op is looked up when it is a string. */
static bool op_out_present(json_t *o) { return json_is_string(json_object_get(o, "out")); }

static int parse_op(tsp_program *p, size_t i, json_t *o, ts_error *err) {
  json_t *opn = json_object_get(o, "op"), *args = json_object_get(o, "args"),
         *out = json_object_get(o, "out");
  if (!json_is_object(o) || !json_is_string(opn) || !json_is_array(args))
    return ts_error_set(err, TS_PARSE,
                        "ops[%zu]: expected {\"op\": str, \"args\": [...], "
                        "\"out\": str, ...}",
                        i);
  const char *opname = json_string_value(opn);
  int rc = field_check(tsp_name_check, opname, err, "ops[%zu].op", i);
  if (rc == TS_OK && op_out_present(o))
    rc = field_check(tsp_name_check, json_string_value(out), err, "ops[%zu].out", i);
  if (rc != TS_OK)
    return rc;
  int op = tsp_op_find(opname);
  size_t nargs = json_array_size(args);
  if ((op == TSP_OP_MAX || op == TSP_OP_MIN) && nargs == 1)
    op = op == TSP_OP_MAX ? TSP_OP_RMAX : TSP_OP_RMIN;
  if (op < 0 || op == TSP_OP_COPY)
    return ts_error_set(
        err, TS_PARSE,
        "ops[%zu]: unknown op '%s' (valid: add sub mul div pow max "
        "min neg abs exp log sqrt rsqrt tanh sigmoid relu gelu where eq ne lt le gt "
        "ge cast sum mean max min einsum reshape transpose slice window assign)",
        i, opname);
  const tsp_opdef *def = tsp_op(op);
  if ((def->arity >= 0 && (int)nargs != def->arity) || nargs < 1 || nargs > TSP_MAX_ARGS)
    return ts_error_set(err, TS_PARSE, "ops[%zu] %s: takes %d args, got %zu", i, opname,
                        def->arity >= 0 ? def->arity : 1, nargs);
  if (op != TSP_OP_ASSIGN && !json_is_string(out))
    return ts_error_set(err, TS_PARSE, "ops[%zu] %s: \"out\" must name the result (a string)", i,
                        opname);
  if (op != TSP_OP_ASSIGN && find_name(p, json_string_value(out)) >= 0)
    return ts_error_set(err, TS_PARSE, "ops[%zu] %s: result name '%s' is already defined", i,
                        opname, json_string_value(out));
  int argids[TSP_MAX_ARGS];
  size_t k;
  json_t *v;
  json_array_foreach(args, k, v) {
    if (json_is_string(v)) {
      if ((rc = field_check(tsp_name_check, json_string_value(v), err, "ops[%zu].args[%zu]", i,
                            k)) != TS_OK)
        return rc;
      argids[k] = find_name(p, json_string_value(v));
      if (argids[k] < 0)
        return ts_error_set(err, TS_PARSE, "ops[%zu] %s: arg '%s' is not defined before", i, opname,
                            json_string_value(v));
    } else if (json_is_number(v) && op != TSP_OP_ASSIGN) {
      int c = tsp_add_node(p, TSP_OP_CONST, err);
      if (c < 0)
        return -c;
      p->nodes[c].value = json_number_value(v);
      argids[k] = c;
    } else {
      return ts_error_set(err, TS_PARSE, "ops[%zu] %s: args[%zu] must be a value name%s", i, opname,
                          k, op == TSP_OP_ASSIGN ? "" : " or a number");
    }
  }
  if (op == TSP_OP_RESHAPE && p->nodes[argids[0]].dtype != (ts_dtype)-1) {
    /* a reshape reads its operand as one contiguous run: a transposed or sliced view is copied
     * first (here, so that the copy comes before the reshape in the graph's order) */
    bool strided = false;
    for (int a = argids[0]; tsp_op(p->nodes[a].op)->cat == TSP_CAT_LAYOUT; a = p->nodes[a].args[0])
      strided = strided || p->nodes[a].op != TSP_OP_RESHAPE;
    if (strided) {
      int c = tsp_add_node(p, TSP_OP_COPY, err);
      if (c < 0)
        return -c;
      tsp_node *cn = &p->nodes[c];
      const tsp_node *src = &p->nodes[argids[0]];
      cn->nargs = 1;
      cn->args[0] = argids[0];
      cn->dtype = src->dtype;
      cn->ndim = src->ndim;
      memcpy(cn->shape, src->shape, sizeof cn->shape);
      argids[0] = c;
    }
  }
  int n = tsp_add_node(p, op, err);
  if (n < 0)
    return -n;
  tsp_node *nd = &p->nodes[n];
  nd->nargs = (int)nargs;
  memcpy(nd->args, argids, nargs * sizeof(int));
  if (op != TSP_OP_ASSIGN)
    snprintf(nd->name, sizeof nd->name, "%s", json_string_value(out));
  rc = parse_attributes(p, i, o, nd, opname, err);
  if (rc != TS_OK)
    return rc;
  return tsp_verify_node(p, n, err);
}

int tsp_parse(tsp_program *p, const char *text, ts_error *err) {
  json_error_t je;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return ts_error_set(err, TS_PARSE, "program JSON: %s at line %d column %d", je.text, je.line,
                        je.column);
  int rc = TS_OK;
  json_t *nm = json_object_get(root, "name"), *dims = json_object_get(root, "dims"),
         *inputs = json_object_get(root, "inputs"), *ops = json_object_get(root, "ops"),
         *outputs = json_object_get(root, "outputs");
  if (!json_is_object(root) || !json_is_array(inputs) || !json_is_array(ops) ||
      (outputs && !json_is_array(outputs)) || (dims && !json_is_object(dims)) ||
      (nm && !json_is_string(nm))) {
    rc = ts_error_set(err, TS_PARSE,
                      "program: expected an object with \"inputs\" (list), \"ops\" "
                      "(list), \"outputs\" (list), optional \"name\" (str) and \"dims\" (object)");
    goto out;
  }
  if (nm && (rc = tsp_name_check("name", json_string_value(nm), err)) != TS_OK)
    goto out;
  p->name = strdup(nm ? json_string_value(nm) : "program");
  if (!p->name) {
    rc = ts_error_set(err, TS_NO_MEMORY, "out of memory");
    goto out;
  }
  const char *key;
  json_t *v;
  size_t i;
  size_t g = 0;
  if (dims)
    json_object_foreach(dims, key,
                        v) if ((rc = parse_group(p, g++, key, v, err)) != TS_OK) goto out;
  json_array_foreach(inputs, i, v) if ((rc = parse_input(p, i, v, err)) != TS_OK) goto out;
  json_array_foreach(ops, i, v) if ((rc = parse_op(p, i, v, err)) != TS_OK) goto out;
  if (outputs) {
    json_array_foreach(outputs, i, v) {
      if (json_is_string(v) &&
          (rc = field_check(tsp_name_check, json_string_value(v), err, "outputs[%zu]", i)) != TS_OK)
        goto out;
      int n = json_is_string(v) ? find_name(p, json_string_value(v)) : -1;
      if (n < 0 || p->nodes[n].op == TSP_OP_ASSIGN) {
        rc = ts_error_set(err, TS_PARSE,
                          "outputs[%zu]: must name a value defined by an input or "
                          "an op",
                          i);
        goto out;
      }
      if (p->n_outputs == 64) {
        rc = ts_error_set(err, TS_PARSE, "program: more than 64 outputs");
        goto out;
      }
      snprintf(p->output_names[p->n_outputs], TSP_NAME, "%s", json_string_value(v));
      p->outputs[p->n_outputs++] = n;
    }
  }
  if (p->n_outputs == 0 && p->n_assigns == 0)
    rc = ts_error_set(err, TS_PARSE, "program: no outputs and no assign: it would compute nothing");
out:
  json_decref(root);
  return rc;
}
