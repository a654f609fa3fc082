/* program_graph.c - the message form of a program (ProgramGraph, program/PROGRAM.md "The message
 * form") turned into the program's JSON document, field for field, with libjansson: the compiler
 * then parses that document like any JSON text, so both forms go through the one parser and its
 * checks (unknown ops, undefined names, bad dim references give the same errors, with the same
 * places such as `ops[3] add: ...`). This file only maps structure: unset values become absent
 * keys (or null entries in lists), and the only errors it raises itself are the ones a JSON
 * object cannot express (a dim group named twice, text that is not UTF-8); names it echoes in
 * those errors are first checked with the program's name rule (ts_program.h). The request's
 * overrides of groups' bucketing rules (`tshard program compile --buckets n=pow2`) are applied to
 * the document here too, for a text or a message. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"
#include "ts_program.h"

typedef struct conv {
  ts_error *err;
  int rc;
} conv;

/* A JSON string, or an error (jansson takes UTF-8 only). */
static json_t *str(conv *c, const char *s, const char *where) {
  json_t *j = json_string(s ? s : "");
  if (!j && c->rc == TS_OK)
    c->rc = ts_error_set(c->err, TS_PARSE, "%s: text is not valid UTF-8", where);
  return j;
}

static void oom(conv *c) {
  if (c->rc == TS_OK) /* a NULL from str() has set its own error */
    c->rc = ts_error_set(c->err, TS_NO_MEMORY, "out of memory converting the program graph");
}

static void set(conv *c, json_t *obj, const char *key, json_t *v) {
  if (!obj || !v || json_object_set_new(obj, key, v) != 0)
    oom(c);
}

static void push(conv *c, json_t *arr, json_t *v) {
  if (!arr || !v || json_array_append_new(arr, v) != 0)
    oom(c);
}

static bool utf8(const char *s) {
  json_t *t = json_string(s);
  json_decref(t);
  return t != NULL;
}

static json_t *ints(conv *c, const Tshard__ProgramGraphInts *m) {
  json_t *a = json_array();
  for (size_t i = 0; a && m && i < m->n_values; i++)
    push(c, a, json_integer(m->values[i]));
  return a;
}

/* A shape entry or slice bound: an int, a dim name or formula, or null (unset). */
static json_t *dimref(conv *c, const Tshard__ProgramGraphDimRef *r, const char *where) {
  if (r && r->ref_case == TSHARD__PROGRAM_GRAPH_DIM_REF__REF_SIZE)
    return json_integer(r->size);
  if (r && r->ref_case == TSHARD__PROGRAM_GRAPH_DIM_REF__REF_EXPR)
    return str(c, r->expr, where);
  return json_null();
}

static json_t *dimrefs(conv *c, Tshard__ProgramGraphDimRef **r, size_t n, const char *where) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    push(c, a, dimref(c, r[i], where));
  return a;
}

static json_t *group(conv *c, const Tshard__ProgramGraphDim *d) {
  json_t *g = json_object();
  if (!g)
    return NULL;
  set(c, g, "min", json_integer(d->min));
  set(c, g, "max", json_integer(d->max));
  switch (d->buckets_case) {
  case TSHARD__PROGRAM_GRAPH_DIM__BUCKETS_POW2: set(c, g, "buckets", json_string("pow2")); break;
  case TSHARD__PROGRAM_GRAPH_DIM__BUCKETS_STEP: {
    json_t *s = json_object();
    if (s)
      set(c, s, "step", json_integer(d->step));
    set(c, g, "buckets", s);
    break;
  }
  case TSHARD__PROGRAM_GRAPH_DIM__BUCKETS_LIST: set(c, g, "buckets", ints(c, d->list)); break;
  default: break;
  }
  return g;
}

static json_t *input(conv *c, const Tshard__ProgramGraphInput *in) {
  json_t *o = json_object();
  if (!o)
    return NULL;
  if (in->name && in->name[0])
    set(c, o, "name", str(c, in->name, "inputs: name"));
  if (in->dtype && in->dtype[0])
    set(c, o, "dtype", str(c, in->dtype, "inputs: dtype"));
  set(c, o, "shape", dimrefs(c, in->shape, in->n_shape, "inputs: shape"));
  return o;
}

static json_t *op(conv *c, size_t k, const Tshard__ProgramGraphOp *m) {
  json_t *o = json_object();
  if (!o)
    return NULL;
  bool reshape = m->op && strcmp(m->op, "reshape") == 0;
  if (m->op && m->op[0])
    set(c, o, "op", str(c, m->op, "ops: op"));
  if (m->out && m->out[0])
    set(c, o, "out", str(c, m->out, "ops: out"));
  json_t *args = json_array();
  for (size_t i = 0; args && i < m->n_args; i++) {
    const Tshard__ProgramGraphArg *a = m->args[i];
    if (a->arg_case == TSHARD__PROGRAM_GRAPH_ARG__ARG_NAME)
      push(c, args, str(c, a->name, "ops: args"));
    else if (a->arg_case == TSHARD__PROGRAM_GRAPH_ARG__ARG_VALUE && !isfinite(a->value)) {
      if (c->rc == TS_OK) /* JSON has no NaN or infinity either */
        c->rc = ts_error_set(c->err, TS_PARSE,
                             "ops[%zu]: args[%zu] is %g; literals must be "
                             "finite numbers",
                             k, i, a->value);
    } else if (a->arg_case == TSHARD__PROGRAM_GRAPH_ARG__ARG_VALUE)
      push(c, args, json_real(a->value));
    else
      push(c, args, json_null());
  }
  set(c, o, "args", args);
  if (m->dims)
    set(c, o, "dims", ints(c, m->dims));
  if (m->keepdims)
    set(c, o, "keepdims", json_true());
  if (m->perm)
    set(c, o, "perm", ints(c, m->perm));
  if (m->n_shape || reshape)
    set(c, o, "shape", dimrefs(c, m->shape, m->n_shape, "ops: shape"));
  if (m->eq && m->eq[0])
    set(c, o, "eq", str(c, m->eq, "ops: eq"));
  if (m->dtype && m->dtype[0])
    set(c, o, "dtype", str(c, m->dtype, "ops: dtype"));
  if (m->n_start)
    set(c, o, "start", dimrefs(c, m->start, m->n_start, "ops: start"));
  if (m->n_stop)
    set(c, o, "stop", dimrefs(c, m->stop, m->n_stop, "ops: stop"));
  if (m->dim) /* window: one int (a list is passed on for the parser to refuse) */
    set(c, o, "dim", m->dim->n_values == 1 ? json_integer(m->dim->values[0]) : ints(c, m->dim));
  if (m->size)
    set(c, o, "size", dimref(c, m->size, "ops: size"));
  if (m->n_step) {
    json_t *s = json_array();
    for (size_t i = 0; s && i < m->n_step; i++)
      push(c, s, json_integer(m->step[i]));
    set(c, o, "step", s);
  }
  return o;
}

static json_t *graph_doc(conv *c, const Tshard__ProgramGraph *g) {
  json_t *root = json_object();
  if (!root) {
    oom(c);
    return NULL;
  }
  if (g->name && g->name[0])
    set(c, root, "name", str(c, g->name, "name"));
  if (g->n_dims) {
    json_t *dims = json_object();
    for (size_t i = 0; dims && c->rc == TS_OK && i < g->n_dims; i++) {
      const char *nm = g->dims[i]->name ? g->dims[i]->name : "";
      char field[40];
      snprintf(field, sizeof field, "dims[%zu].name", i);
      if ((c->rc = tsp_name_check(field, nm, c->err)) != TS_OK)
        break;
      if (json_object_get(dims, nm))
        c->rc = ts_error_set(c->err, TS_PARSE,
                             "dims[%zu]: group '%s' is defined twice (each "
                             "group once, with one range and one bucketing rule)",
                             i, nm);
      else if (!utf8(nm))
        c->rc = ts_error_set(c->err, TS_PARSE, "dims[%zu]: name is not valid UTF-8", i);
      else
        set(c, dims, nm, group(c, g->dims[i]));
    }
    set(c, root, "dims", dims);
  }
  json_t *ins = json_array();
  for (size_t i = 0; ins && i < g->n_inputs; i++)
    push(c, ins, input(c, g->inputs[i]));
  set(c, root, "inputs", ins);
  json_t *ops = json_array();
  for (size_t i = 0; ops && i < g->n_ops; i++)
    push(c, ops, op(c, i, g->ops[i]));
  set(c, root, "ops", ops);
  json_t *outs = json_array();
  for (size_t i = 0; outs && i < g->n_outputs; i++)
    push(c, outs, str(c, g->outputs[i], "outputs"));
  set(c, root, "outputs", outs);
  return root;
}

/* The request's overrides of groups' bucketing rules, into the document's "dims" (the parser
 * then checks the rules like any others). */
static void override(conv *c, json_t *root, Tshard__ProgramGraphDim **o, size_t n) {
  json_t *dims = json_is_object(root) ? json_object_get(root, "dims") : NULL;
  for (size_t i = 0; i < n && c->rc == TS_OK; i++) {
    const char *nm = o[i]->name ? o[i]->name : "";
    char field[40];
    snprintf(field, sizeof field, "buckets[%zu].name", i);
    if ((c->rc = tsp_name_check(field, nm, c->err)) != TS_OK)
      return;
    json_t *g = json_is_object(dims) ? json_object_get(dims, nm) : NULL;
    if (!json_is_object(g)) {
      char names[256] = "";
      size_t len = 0;
      const char *key;
      json_t *v;
      if (json_is_object(dims))
        json_object_foreach(dims, key, v) if (len < sizeof names) len +=
            (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", key);
      c->rc = ts_error_set(c->err, TS_INVALID_ARGUMENT,
                           "buckets: the program has no dim group "
                           "'%s' to set the rule of (its groups: %s)",
                           nm, len ? names : "none");
      return;
    }
    json_t *rule = group(c, o[i]);
    json_t *b = rule ? json_object_get(rule, "buckets") : NULL;
    if (b)
      set(c, g, "buckets", json_incref(b));
    else
      json_object_del(g, "buckets"); /* unset: the default, pow2 */
    json_decref(rule);
  }
}

int tsd_program_request_text(const Tshard__ProgramCompileRequest *q, char **text, ts_error *err) {
  *text = NULL;
  if (!q->graph && q->n_buckets == 0)
    return TS_OK; /* the text as it is */
  conv c = {err, TS_OK};
  json_t *root = NULL;
  if (q->graph) {
    root = graph_doc(&c, q->graph);
  } else {
    json_error_t je;
    root = json_loads(q->text, JSON_REJECT_DUPLICATES, &je);
    if (!root)
      c.rc = ts_error_set(err, TS_PARSE, "program JSON: %s at line %d column %d", je.text, je.line,
                          je.column);
  }
  if (c.rc == TS_OK)
    override(&c, root, q->buckets, q->n_buckets);
  if (c.rc == TS_OK) {
    *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (!*text)
      oom(&c);
  }
  json_decref(root);
  return c.rc;
}
