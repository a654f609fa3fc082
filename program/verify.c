/* verify.c - shape and dtype inference for each op as it is parsed, over symbolic (affine) dims,
 * and the affine dim expressions themselves (n, 2*n, n-3+k): evaluation, equality, text. An error
 * names the op, its result and what is valid. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

bool tsp_expr_is_static(const tsp_expr *e) {
  for (int g = 0; g < TSP_MAX_GROUPS; g++)
    if (e->k[g])
      return false;
  return true;
}

bool tsp_expr_eq(const tsp_expr *a, const tsp_expr *b) { return memcmp(a, b, sizeof *a) == 0; }

tsp_expr tsp_expr_const(int64_t c) {
  tsp_expr e;
  memset(&e, 0, sizeof e);
  e.c = c;
  return e;
}

int64_t tsp_expr_eval(const tsp_expr *e, const int64_t *values) {
  int64_t v = e->c;
  for (int g = 0; g < TSP_MAX_GROUPS; g++)
    v += e->k[g] * (e->k[g] ? values[g] : 0);
  return v;
}

int tsp_expr_format(const tsp_program *p, const tsp_expr *e, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int g = 0; g < p->n_groups; g++) {
    if (!e->k[g])
      continue;
    int64_t k = e->k[g];
    const char *sign = k < 0 ? "-" : (len ? "+" : "");
    int64_t ak = k < 0 ? -k : k;
    if (ak == 1)
      len +=
          (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%s", sign, p->groups[g].name);
    else
      len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%lld*%s", sign,
                              (long long)ak, p->groups[g].name);
  }
  if (e->c || len == 0)
    len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0,
                            len && e->c > 0 ? "+%lld" : "%lld", (long long)e->c);
  return (int)len;
}

/* term := int | name | int '*' name | name '*' int; expr := ['-'] term (('+'|'-') term)* */
int tsp_expr_parse(const tsp_program *p, const char *text, tsp_expr *out, ts_error *err) {
  tsp_expr e = tsp_expr_const(0);
  const char *s = text;
  int sign = 1;
  bool first = true;
  for (;;) {
    while (*s == ' ')
      s++;
    if (*s == '-' || *s == '+') {
      sign = *s == '-' ? -1 : 1;
      s++;
    } else if (!first) {
      break;
    }
    first = false;
    while (*s == ' ')
      s++;
    int64_t coef = 1;
    int group = -1;
    for (int part = 0; part < 2; part++) {
      while (*s == ' ')
        s++;
      if (isdigit((unsigned char)*s)) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (v > ((int64_t)1 << 40))
          return ts_error_set(err, TS_PARSE, "'%s': number too large", text);
        if (__builtin_mul_overflow(coef, (int64_t)v, &coef) || coef > ((int64_t)1 << 40))
          return ts_error_set(err, TS_PARSE, "'%s': number too large", text);
        s = end;
      } else if (isalpha((unsigned char)*s) || *s == '_') {
        const char *st = s;
        while (isalnum((unsigned char)*s) || *s == '_')
          s++;
        int g;
        for (g = 0; g < p->n_groups; g++)
          if (strlen(p->groups[g].name) == (size_t)(s - st) &&
              strncmp(p->groups[g].name, st, (size_t)(s - st)) == 0)
            break;
        if (g == p->n_groups || group >= 0)
          return ts_error_set(err, TS_PARSE,
                              "'%s': '%.*s' is not a dim group (or a product of "
                              "two groups)",
                              text, (int)(s - st), st);
        group = g;
      } else {
        return ts_error_set(err, TS_PARSE, "'%s': expected a number or a dim group at '%s'", text,
                            s);
      }
      while (*s == ' ')
        s++;
      if (*s != '*')
        break;
      s++;
    }
    if (group >= 0)
      e.k[group] += sign * coef;
    else
      e.c += sign * coef;
  }
  if (*s)
    return ts_error_set(err, TS_PARSE,
                        "'%s': unexpected '%s' (formulas are sums of terms like "
                        "2*n, n, 3)",
                        text, s);
  *out = e;
  return TS_OK;
}

static const char *nm(const tsp_program *p, int n) {
  return p->nodes[n].name[0] ? p->nodes[n].name : "(literal)";
}

static int shape_text(const tsp_program *p, const tsp_node *n, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < n->ndim && len < cap; d++) {
    char e[64];
    tsp_expr_format(p, &n->shape[d], e, sizeof e);
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", d ? "," : "", e);
  }
  if (len < cap)
    len += (size_t)snprintf(buf + len, cap - len, "]");
  return (int)len;
}

/* numpy broadcasting over symbolic dims: equal, or one of them the constant 1. */
static int broadcast(tsp_program *p, tsp_node *n, ts_error *err) {
  int nd = 0;
  for (int i = 0; i < n->nargs; i++)
    if (p->nodes[n->args[i]].ndim > nd)
      nd = p->nodes[n->args[i]].ndim;
  n->ndim = nd;
  for (int d = 0; d < nd; d++) {
    tsp_expr r = tsp_expr_const(1);
    for (int i = 0; i < n->nargs; i++) {
      const tsp_node *a = &p->nodes[n->args[i]];
      int ad = d - (nd - a->ndim);
      if (ad < 0)
        continue;
      const tsp_expr *e = &a->shape[ad];
      if (tsp_expr_is_static(e) && e->c == 1)
        continue;
      if (tsp_expr_is_static(&r) && r.c == 1) {
        r = *e;
      } else if (!tsp_expr_eq(&r, e)) {
        char s0[128], s1[128];
        shape_text(p, &p->nodes[n->args[0]], s0, sizeof s0);
        shape_text(p, a, s1, sizeof s1);
        return ts_error_set(err, TS_BAD_SHAPE,
                            "%s '%s': shapes do not broadcast ('%s' is %s, "
                            "'%s' is %s; dims must be equal or 1)",
                            tsp_op(n->op)->name, n->name, nm(p, n->args[0]), s0, nm(p, n->args[i]),
                            s1);
      }
    }
    n->shape[d] = r;
  }
  return TS_OK;
}

static void set_literal_dtypes(tsp_program *p, tsp_node *n, int from, ts_dtype dt) {
  for (int i = from; i < n->nargs; i++) {
    tsp_node *a = &p->nodes[n->args[i]];
    if (a->op == TSP_OP_CONST && (int)a->dtype < 0) {
      a->dtype = dt;
      a->value = tsp_round(dt, a->value);
    }
  }
}

static int verify_elementwise(tsp_program *p, tsp_node *n, ts_error *err) {
  const tsp_opdef *def = tsp_op(n->op);
  /* literals only: folded now into a literal that stays weakly typed (numpy's Python scalars) */
  bool weak = n->op != TSP_OP_CAST;
  double v[3] = {0, 0, 0};
  for (int i = 0; i < n->nargs; i++) {
    const tsp_node *a = &p->nodes[n->args[i]];
    weak = weak && a->op == TSP_OP_CONST && (int)a->dtype < 0;
    if (i < 3)
      v[i] = a->value;
  }
  if (weak) {
    n->value = tsp_eval(n->op, TS_F64, v[0], v[1], v[2]);
    n->op = TSP_OP_CONST;
    n->nargs = 0;
    n->ndim = 0;
    return TS_OK;
  }
  int first = n->op == TSP_OP_WHERE ? 1 : 0;
  ts_dtype dt = (ts_dtype)-1;
  for (int i = first; i < n->nargs; i++)
    if ((int)p->nodes[n->args[i]].dtype >= 0) {
      dt = p->nodes[n->args[i]].dtype;
      break;
    }
  if ((int)dt < 0)
    dt = TS_F64;
  set_literal_dtypes(p, n, first, dt);
  if (n->op == TSP_OP_WHERE)
    set_literal_dtypes(p, n, 0, TS_U8); /* the condition; the others are set */
  if (n->op != TSP_OP_CAST)
    for (int i = first; i < n->nargs; i++)
      if (p->nodes[n->args[i]].dtype != dt)
        return ts_error_set(err, TS_BAD_DTYPE,
                            "%s '%s': operands have dtypes %s ('%s') and %s "
                            "('%s'); make them equal with a cast op",
                            def->name, n->name, ts_dtype_name(dt), nm(p, n->args[first]),
                            ts_dtype_name(p->nodes[n->args[i]].dtype), nm(p, n->args[i]));
  if (n->op != TSP_OP_CAST && def->float_only && !ts_dtype_is_float(dt))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "%s '%s': needs float operands (f32, f64, f16, bf16), got "
                        "%s (cast first)",
                        def->name, n->name, ts_dtype_name(dt));
  if (n->op == TSP_OP_CAST)
    ; /* dtype set by the parser */
  else if (n->op >= TSP_OP_EQ && n->op <= TSP_OP_GE)
    n->dtype = TS_U8;
  else
    n->dtype = dt;
  return broadcast(p, n, err);
}

static int verify_reduce(tsp_program *p, tsp_node *n, ts_error *err) {
  const tsp_node *a = &p->nodes[n->args[0]];
  if ((int)a->dtype < 0)
    return ts_error_set(err, TS_BAD_SHAPE, "%s '%s': the operand must be a tensor, not a literal",
                        tsp_op(n->op)->name, n->name);
  if (tsp_op(n->op)->float_only && !ts_dtype_is_float(a->dtype))
    return ts_error_set(err, TS_BAD_DTYPE,
                        "%s '%s': needs a float operand (f32, f64, f16, bf16), got "
                        "%s (cast "
                        "first)",
                        tsp_op(n->op)->name, n->name, ts_dtype_name(a->dtype));
  n->dtype = a->dtype;
  n->ndim = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (!(n->axes & (1u << d)))
      n->shape[n->ndim++] = a->shape[d];
    else if (n->keepdims)
      n->shape[n->ndim++] = tsp_expr_const(1);
  }
  return TS_OK;
}

static int verify_einsum(tsp_program *p, tsp_node *n, ts_error *err) {
  const char *arrow = strstr(n->eq, "->");
  if (!arrow)
    return ts_error_set(err, TS_EINSUM,
                        "einsum '%s': equation '%s' needs an explicit output "
                        "(\"ij,jk->ik\")",
                        n->name, n->eq);
  tsp_expr label[128];
  bool seen[128] = {false};
  const char *s = n->eq;
  ts_dtype dt = p->nodes[n->args[0]].dtype;
  if (dt != TS_F32 && dt != TS_F64 && dt != TS_I32 && dt != TS_I64)
    return ts_error_set(err, TS_BAD_DTYPE,
                        "einsum '%s': operands must be f32, f64, i32 or i64, "
                        "got %s",
                        n->name, (int)dt < 0 ? "a literal" : ts_dtype_name(dt));
  for (int i = 0; i < n->nargs; i++) {
    const tsp_node *a = &p->nodes[n->args[i]];
    if (a->dtype != dt)
      return ts_error_set(err, TS_BAD_DTYPE, "einsum '%s': operand %d is %s, operand 0 is %s",
                          n->name, i, (int)a->dtype < 0 ? "a literal" : ts_dtype_name(a->dtype),
                          ts_dtype_name(dt));
    int d = 0;
    for (; *s && *s != ',' && s != arrow; s++, d++) {
      unsigned char c = (unsigned char)*s;
      if (!isalpha(c))
        return ts_error_set(err, TS_EINSUM,
                            "einsum '%s': '%c' in '%s' is not a label (a-z, A-Z; "
                            "no \"...\")",
                            n->name, c, n->eq);
      if (d >= a->ndim)
        break;
      if (seen[c] && !tsp_expr_eq(&label[c], &a->shape[d]))
        return ts_error_set(err, TS_EINSUM,
                            "einsum '%s': label '%c' has different sizes in the "
                            "operands of '%s'",
                            n->name, c, n->eq);
      seen[c] = true;
      label[c] = a->shape[d];
    }
    if (d != a->ndim || (i < n->nargs - 1 && *s != ',') || (i == n->nargs - 1 && s != arrow))
      return ts_error_set(err, TS_EINSUM,
                          "einsum '%s': operand %d ('%s', %d dims) does not "
                          "match the equation '%s' (one term per operand, one label per dim)",
                          n->name, i, nm(p, n->args[i]), a->ndim, n->eq);
    if (*s == ',')
      s++;
  }
  n->ndim = 0;
  bool in_out[128] = {false};
  for (s = arrow + 2; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 128 || !seen[c] || in_out[c] || n->ndim == TSP_MAX_DIMS)
      return ts_error_set(err, TS_EINSUM,
                          "einsum '%s': output label '%c' of '%s' is not in the "
                          "inputs or repeated",
                          n->name, c, n->eq);
    in_out[c] = true;
    n->shape[n->ndim++] = label[c];
  }
  n->dtype = dt;
  return TS_OK;
}

static int verify_reshape(tsp_program *p, tsp_node *n, ts_error *err) {
  const tsp_node *a = &p->nodes[n->args[0]];
  n->dtype = a->dtype;
  int dyn_in = 0, dyn_out = 0, minus = -1;
  int64_t rest_in = 1, rest_out = 1;
  for (int d = 0; d < a->ndim; d++) {
    if (!tsp_expr_is_static(&a->shape[d]))
      dyn_in += d == 0 ? 1 : 100;
    else if (d > 0 || a->ndim == 0)
      rest_in *= a->shape[d].c;
  }
  for (int d = 0; d < n->ndim; d++) {
    if (!tsp_expr_is_static(&n->shape[d]))
      dyn_out += d == 0 ? 1 : 100;
    else if (n->shape[d].c == -1) {
      if (minus >= 0)
        return ts_error_set(err, TS_BAD_SHAPE, "reshape '%s': at most one -1", n->name);
      minus = d;
    } else if (d > 0)
      rest_out *= n->shape[d].c;
  }
  if (dyn_in == 0 && dyn_out == 0) {
    int64_t in = 1, out = 1;
    for (int d = 0; d < a->ndim; d++)
      in *= a->shape[d].c;
    for (int d = 0; d < n->ndim; d++)
      if (d != minus)
        out *= n->shape[d].c;
    if (minus >= 0 && out > 0 && in % out == 0)
      n->shape[minus].c = in / out;
    else if (minus >= 0 || in != out)
      return ts_error_set(err, TS_BAD_SHAPE,
                          "reshape '%s': %lld elements cannot take the new "
                          "shape (%lld elements)",
                          n->name, (long long)in, (long long)out);
    return TS_OK;
  }
  /* dynamic: only dim 0 may be dynamic, on both sides, a multiple of one group, so that the real
   * (unpadded) elements stay a prefix of the padded buffer */
  const tsp_expr *e0 = &a->shape[0], *f0 = &n->shape[0];
  bool ok = dyn_in == 1 && dyn_out == 1 && minus < 0 && e0->c == 0 && f0->c == 0;
  int g = -1;
  for (int k = 0; ok && k < TSP_MAX_GROUPS; k++) {
    if (e0->k[k] || f0->k[k]) {
      if (g >= 0 || !e0->k[k] || !f0->k[k])
        ok = false;
      g = k;
    }
  }
  if (ok && e0->k[g] * rest_in != f0->k[g] * rest_out)
    ok = false;
  if (!ok)
    return ts_error_set(err, TS_UNSUPPORTED,
                        "reshape '%s': with dynamic dims only the first dim "
                        "may be dynamic, on both sides, as a multiple of one group (\"2*n\") with "
                        "equal element counts: padding would otherwise mix with real elements",
                        n->name);
  return TS_OK;
}

/* slice: per dim [start, stop) with a step; the result's extent is stop - start (a formula such
 * as n-k+1) or, with a step, ceil((stop - start) / step) of a static length. */
static bool bound_small(const tsp_program *p, const tsp_expr *e) {
  const int64_t lim = (int64_t)1 << 40;
  if (e->c < -lim || e->c > lim)
    return false;
  for (int g = 0; g < TSP_MAX_GROUPS; g++) {
    int64_t t;
    if (e->k[g] && (g >= p->n_groups || __builtin_mul_overflow(e->k[g], p->groups[g].max, &t) ||
                    t < -lim || t > lim))
      return false;
  }
  return true;
}

static int verify_slice(tsp_program *p, tsp_node *n, ts_error *err) {
  const tsp_node *a = &p->nodes[n->args[0]];
  n->dtype = a->dtype;
  n->ndim = a->ndim;
  for (int d = 0; d < a->ndim; d++) {
    const tsp_expr *st = &n->slice[d], *sp = &n->slice[TSP_MAX_DIMS + d], *size = &a->shape[d];
    if (!bound_small(p, st) || !bound_small(p, sp))
      return ts_error_set(err, TS_OVERFLOW,
                          "slice '%s' dim %d: a bound has a term beyond 2^40 "
                          "at the groups' largest values",
                          n->name, d);
    tsp_expr len = *sp;
    len.c -= st->c;
    for (int g = 0; g < TSP_MAX_GROUPS; g++)
      len.k[g] -= st->k[g];
    char ts[64], tp[64], tz[64];
    tsp_expr_format(p, st, ts, sizeof ts);
    tsp_expr_format(p, sp, tp, sizeof tp);
    tsp_expr_format(p, size, tz, sizeof tz);
    if (tsp_expr_is_static(&len) && len.c < 0)
      return ts_error_set(err, TS_BAD_SHAPE, "slice '%s' dim %d: stop %s is before start %s",
                          n->name, d, tp, ts);
    if (tsp_expr_is_static(st) && tsp_expr_is_static(sp) && tsp_expr_is_static(size) &&
        (st->c < 0 || sp->c > size->c))
      return ts_error_set(err, TS_BAD_SHAPE,
                          "slice '%s' dim %d: [%s:%s] is out of range for a "
                          "dim of %s (need 0 <= start <= stop <= size; negative ints count from "
                          "the end)",
                          n->name, d, ts, tp, tz);
    if (!tsp_expr_is_static(st) && !tsp_expr_is_static(&len))
      return ts_error_set(err, TS_UNSUPPORTED,
                          "slice '%s' dim %d: the start %s and the length "
                          "(stop - start) both depend on the dim groups, so the padded view "
                          "could run past its operand; give a static start (\"stop\": \"n-2\") "
                          "or a static length (\"start\": -3)",
                          n->name, d, ts);
    if (n->step[d] > 1 && !tsp_expr_is_static(&len))
      return ts_error_set(err, TS_UNSUPPORTED,
                          "slice '%s' dim %d: a step of %lld needs a static "
                          "length (stop - start), not one that depends on the dim groups",
                          n->name, d, (long long)n->step[d]);
    if (n->step[d] > 1)
      len = tsp_expr_const((len.c + n->step[d] - 1) / n->step[d]);
    n->shape[d] = len;
  }
  return TS_OK;
}

/* window: along dim d of size D, the result has D - size + 1 there and a new last dim of the
 * window's size (element [.., i, .., j] is the operand's [.., i + j, ..]: a view). */
static int verify_window(tsp_program *p, tsp_node *n, ts_error *err) {
  const tsp_node *a = &p->nodes[n->args[0]];
  int d = n->perm[0];
  const tsp_expr *size = &n->slice[0];
  n->dtype = a->dtype;
  if (a->ndim >= TSP_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE,
                        "window '%s': the operand has %d dims already (at most "
                        "%d with the window's)",
                        n->name, a->ndim, TSP_MAX_DIMS);
  if (!bound_small(p, size))
    return ts_error_set(err, TS_OVERFLOW,
                        "window '%s': the size has a term beyond 2^40 at the "
                        "groups' largest values",
                        n->name);
  if (tsp_expr_is_static(size) && size->c < 1)
    return ts_error_set(err, TS_BAD_SHAPE, "window '%s': size %lld must be >= 1", n->name,
                        (long long)size->c);
  if (tsp_expr_is_static(size) && tsp_expr_is_static(&a->shape[d]) && size->c > a->shape[d].c)
    return ts_error_set(err, TS_BAD_SHAPE, "window '%s': size %lld is larger than dim %d (%lld)",
                        n->name, (long long)size->c, d, (long long)a->shape[d].c);
  n->ndim = a->ndim + 1;
  for (int k = 0; k < a->ndim; k++)
    n->shape[k] = a->shape[k];
  n->shape[d].c += 1 - size->c;
  for (int g = 0; g < TSP_MAX_GROUPS; g++)
    n->shape[d].k[g] -= size->k[g];
  n->shape[a->ndim] = *size;
  return TS_OK;
}

static int verify_node(tsp_program *p, int idx, ts_error *err);

/* Every value's largest size (each group at its max, or its min where its term is negative)
 * stays within 2^40 elements. */
int tsp_verify_node(tsp_program *p, int idx, ts_error *err) {
  int rc = verify_node(p, idx, err);
  if (rc != TS_OK)
    return rc;
  const tsp_node *n = &p->nodes[idx];
  int64_t total = 1;
  for (int d = 0; d < n->ndim; d++) {
    int64_t v = n->shape[d].c;
    for (int g = 0; g < TSP_MAX_GROUPS; g++) {
      int64_t t, k = n->shape[d].k[g];
      int64_t x = g >= p->n_groups ? 0 : k < 0 ? p->groups[g].min : p->groups[g].max;
      if (__builtin_mul_overflow(k, x, &t) || __builtin_add_overflow(v, t, &v))
        v = -1;
    }
    if (v < 0 || __builtin_mul_overflow(total, v, &total) || total > ((int64_t)1 << 40))
      return ts_error_set(err, TS_OVERFLOW,
                          "%s '%s': more than 2^40 elements (or a negative "
                          "dim) at the largest dim values",
                          tsp_op(n->op)->name, n->name);
  }
  return TS_OK;
}

static int verify_node(tsp_program *p, int idx, ts_error *err) {
  tsp_node *n = &p->nodes[idx];
  for (int i = 0; i < n->nargs; i++)
    if (p->nodes[n->args[i]].op == TSP_OP_ASSIGN)
      return ts_error_set(err, TS_PARSE, "%s: an assign has no value to use", tsp_op(n->op)->name);
  switch (tsp_op(n->op)->cat) {
  case TSP_CAT_INPUT: return TS_OK; /* the parser checked it; the size check follows */
  case TSP_CAT_ELEMENTWISE: return verify_elementwise(p, n, err);
  case TSP_CAT_REDUCE: return verify_reduce(p, n, err);
  case TSP_CAT_EINSUM: return verify_einsum(p, n, err);
  case TSP_CAT_LAYOUT: {
    const tsp_node *a = &p->nodes[n->args[0]];
    if ((int)a->dtype < 0)
      return ts_error_set(err, TS_BAD_SHAPE, "%s '%s': the operand must be a tensor",
                          tsp_op(n->op)->name, n->name);
    if (n->op == TSP_OP_RESHAPE)
      return verify_reshape(p, n, err);
    if (n->op == TSP_OP_SLICE)
      return verify_slice(p, n, err);
    if (n->op == TSP_OP_WINDOW)
      return verify_window(p, n, err);
    n->dtype = a->dtype;
    n->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++)
      n->shape[d] = a->shape[n->perm[d]];
    return TS_OK;
  }
  case TSP_CAT_ASSIGN: {
    tsp_node *t = &p->nodes[n->args[0]];
    if (t->op != TSP_OP_INPUT)
      return ts_error_set(err, TS_PARSE, "assign: the target '%s' must be an input", t->name);
    for (int i = 0; i < idx; i++)
      if (p->nodes[i].op == TSP_OP_ASSIGN && p->nodes[i].args[0] == n->args[0])
        return ts_error_set(err, TS_PARSE, "assign: input '%s' is assigned twice", t->name);
    set_literal_dtypes(p, n, 1, t->dtype);
    const tsp_node *s = &p->nodes[n->args[1]];
    if (s->dtype != t->dtype)
      return ts_error_set(err, TS_BAD_DTYPE,
                          "assign: '%s' is %s, the value '%s' is %s (cast "
                          "first)",
                          t->name, ts_dtype_name(t->dtype), nm(p, n->args[1]),
                          ts_dtype_name(s->dtype));
    n->dtype = t->dtype;
    int rc = broadcast(p, n, err);
    if (rc != TS_OK)
      return rc;
    bool same = n->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
      same = tsp_expr_eq(&n->shape[d], &t->shape[d]);
    if (!same)
      return ts_error_set(err, TS_BAD_SHAPE,
                          "assign: the value '%s' does not broadcast to the "
                          "shape of '%s'",
                          nm(p, n->args[1]), t->name);
    p->n_assigns++;
    return TS_OK;
  }
  default: return ts_error_set(err, TS_INTERNAL, "unexpected node");
  }
}
