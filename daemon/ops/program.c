/* program.c - compiled programs on the shards (program/PROGRAM.md): program_compile compiles the
 * program on every rank (the same text gives the same id, a hash of it; a ProgramGraph message is
 * turned into its JSON text first, program_graph.c; the ranks agree on the outcome) and answers
 * the id with the short report; program_run matches the request's names to the program's (every
 * missing, unknown or repeated name in one message), runs it SPMD on each rank's local slices
 * after the placement check (tsp_program_placement_named: refusals name the stored tensors and
 * the reshard to their target placement) and an agreement, so every rank reaches the same
 * outcome before a tensor changes; program_show reports this rank's compiled program (in full or
 * short); program_drop forgets it on every rank. Inputs are stored tensors (their row-major local
 * slices) or scalars sent with the request; outputs are tensors over the inputs' mesh, named by
 * the request or after the output, new unless the request allows overwriting (never an input),
 * each rank's slice being what it computed: replicated, partial, or split where the placement
 * check says a dim stays split (its split sizes, uneven too, are the ranks' local extents,
 * gathered); in-place updates of the inputs go straight into their slices. Only the engine
 * thread touches the registry. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "program.h"
#include "ts_program.h"
#include "ts_rules.h"

#define TSD_MAX_PROGRAMS 64

typedef struct tsd_prog {
  char id[24];
  tsp_program *p;
} tsd_prog;

static tsd_prog programs[TSD_MAX_PROGRAMS];
static int n_programs;
static char last_id[24];

void tsd_programs_free(void) {
  for (int i = 0; i < n_programs; i++)
    tsp_program_destroy(programs[i].p);
  n_programs = 0;
}

static tsp_program *find(const char *id) {
  for (int i = 0; i < n_programs; i++)
    if (strcmp(programs[i].id, id) == 0)
      return programs[i].p;
  return NULL;
}

static int agree(tsd_engine *e, int status, const ts_error *local, ts_error *err) {
  return ts_comm_agree(ts_world_comm(e->world), status, local, err);
}

int tsd_run_program_compile(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                            ts_error *err) {
  (void)origin;
  const Tshard__ProgramCompileRequest *q = op->req->program_compile;
  ts_error lerr;
  ts_error_clear(&lerr);
  /* the message form (or a text with bucket rule overrides) becomes its JSON text; the id is
   * that text's */
  char *graph_text = NULL;
  int lst = tsd_program_request_text(q, &graph_text, &lerr);
  const char *text = graph_text ? graph_text : q->text;
  char id[24] = "";
  if (lst == TS_OK)
    snprintf(id, sizeof id, "%016llx", (unsigned long long)XXH3_64bits(text, strlen(text)));
  tsp_program *p = NULL;
  if (lst == TS_OK && !find(id)) {
    if (n_programs == TSD_MAX_PROGRAMS)
      lst =
          ts_error_set(&lerr, TS_LIMIT, "this daemon holds %d programs already", TSD_MAX_PROGRAMS);
    else {
      tsp_options o = {.lazy = q->lazy};
      lst = tsp_program_create(&p, text, &o, &lerr);
    }
  }
  free(graph_text);
  int rc = agree(e, lst, &lerr, err);
  if (rc) {
    tsp_program_destroy(p);
    return rc;
  }
  if (p) {
    snprintf(programs[n_programs].id, sizeof programs[n_programs].id, "%s", id);
    programs[n_programs++].p = p;
  }
  snprintf(last_id, sizeof last_id, "%s", id);
  return TS_OK;
}

int tsd_run_program_drop(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const char *id = op->req->program_drop->id;
  ts_error lerr;
  ts_error_clear(&lerr);
  int i = 0;
  while (i < n_programs && strcmp(programs[i].id, id) != 0)
    i++;
  int lst = i < n_programs
                ? TS_OK
                : ts_error_set(&lerr, TS_NOT_FOUND, "no compiled program with id '%s'", id);
  int rc = agree(e, lst, &lerr, err);
  if (rc)
    return rc;
  tsp_program_destroy(programs[i].p);
  programs[i] = programs[--n_programs];
  return TS_OK;
}

void tsd_answer_program_compile(tsd_engine *e, const tsd_pending *w) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__ProgramResult pr = TSHARD__PROGRAM_RESULT__INIT;
  r.id = w->req_id;
  r.result_case = TSHARD__RESPONSE__RESULT_PROGRAM;
  r.program = &pr;
  pr.id = last_id;
  char *summary = NULL;
  ts_error serr;
  tsp_program *p = find(last_id);
  pr.text = p && tsp_program_summary(p, &summary, &serr) == TS_OK ? summary : "";
  tsd_reply_response(e, w->conn_id, &r);
  free(summary);
}

void tsd_op_program_show(tsd_engine *e, tsd_work *w) {
  tsp_program *p = find(w->req->program_show->id);
  if (!p) {
    tsd_reply_status(e, w->conn_id, w->req->id, TS_NOT_FOUND,
                     "no compiled program with that id "
                     "(program_compile answers the id)");
    return;
  }
  char *text = NULL;
  ts_error err;
  int rc = w->req->program_show->summary ? tsp_program_summary(p, &text, &err)
                                         : tsp_program_show(p, &text, &err);
  if (rc) {
    tsd_reply_status(e, w->conn_id, w->req->id, rc, err.msg);
    return;
  }
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__ProgramResult pr = TSHARD__PROGRAM_RESULT__INIT;
  r.id = w->req->id;
  r.result_case = TSHARD__RESPONSE__RESULT_PROGRAM;
  r.program = &pr;
  pr.id = w->req->program_show->id;
  pr.text = text;
  tsd_reply_response(e, w->conn_id, &r);
  free(text);
}

void tsd_changes_program_run(const Tshard__Request *r, tsd_changes *ch) {
  const Tshard__ProgramRunRequest *q = r->program_run;
  const tsp_program *p = find(q->id);
  /* outputs not named are written to tensors of their own names */
  for (int k = 0; p && k < tsp_program_n_outputs(p); k++)
    tsd_changes_add(ch, tsp_program_output_name(p, k));
  if (p && tsp_program_n_outputs(p))
    ch->names = true;
  for (size_t i = 0; i < q->n_inputs; i++)
    if (q->inputs[i]->tensor && q->inputs[i]->tensor[0])
      tsd_changes_add(ch, q->inputs[i]->tensor);
  for (size_t i = 0; i < q->n_outputs; i++)
    tsd_changes_add(ch, q->outputs[i]->tensor);
  if (q->n_outputs)
    ch->names = true;
}

static void placement_of(const ts_attr *a, tsp_placement *pl) {
  memset(pl, 0, sizeof *pl);
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (a->place[m].kind == TS_PLACE_SHARD)
      pl->split[a->place[m].dim] |= 1u << m;
    else if (a->place[m].kind == TS_PLACE_PARTIAL) {
      pl->partial |= 1u << m;
      pl->partial_op = a->place[m].op == TS_REDUCE_MAX   ? TSP_PARTIAL_MAX
                       : a->place[m].op == TS_REDUCE_MIN ? TSP_PARTIAL_MIN
                                                         : TSP_PARTIAL_SUM;
    }
  }
}

/* Programs take partial sum, max and min inputs, one op per tensor. */
static int check_partial_input(const ts_stored *t, ts_error *err) {
  const ts_attr *a = t->attr;
  int first = -1;
  for (int m = 0; m < a->mesh_ndim; m++) {
    if (a->place[m].kind != TS_PLACE_PARTIAL)
      continue;
    ts_reduce_op op = a->place[m].op;
    if (op != TS_REDUCE_SUM && op != TS_REDUCE_MAX && op != TS_REDUCE_MIN)
      return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "tensor '%s' is P(%s) on mesh dim %d: "
                          "programs take partial sum, max and min inputs; reshard it to R or "
                          "P(sum) first",
                          t->name, ts_reduce_name(op), m);
    if (first >= 0 && op != a->place[first].op)
      return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "tensor '%s' is partial with several ops "
                          "(%s on mesh dim %d, %s on %d): programs take one partial op per "
                          "input; reshard it first",
                          t->name, ts_reduce_name(a->place[first].op), first, ts_reduce_name(op),
                          m);
    if (first < 0)
      first = m;
  }
  return TS_OK;
}

static bool same_mesh(const ts_attr *a, const ts_attr *b) {
  if (a->mesh_ndim != b->mesh_ndim || a->nranks != b->nranks)
    return false;
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->mesh_shape[m] != b->mesh_shape[m])
      return false;
  for (int r = 0; r < a->nranks; r++)
    if (a->ranks[r] != b->ranks[r])
      return false;
  return true;
}

/* The attribute and global shape of output k from every rank's local shapes (all: per world
 * rank [here, shapes...], `per` values each): over the inputs' mesh, Partial where the placement
 * check says so, Shard(d) for every dim it leaves split with the split sizes the ranks computed
 * (parts row-major over the splitting mesh dims), Replicate elsewhere. Ranks that disagree on a
 * dim are an error naming it. */
static int output_attr(const tsp_program *p, int k, const tsp_placement *pl, const ts_attr *mesh,
                       const int64_t *all, size_t per, int64_t *shape, ts_attr **out,
                       ts_error *err) {
  int nd = tsp_program_output_ndim(p, k), mnd = mesh->mesh_ndim;
  const char *oname = tsp_program_output_name(p, k);
  ts_placement place[TS_MAX_MESH_DIMS];
  for (int m = 0; m < mnd; m++)
    place[m] = (pl->partial & (1u << m))
                   ? ts_partial(pl->partial_op == TSP_PARTIAL_MAX   ? TS_REDUCE_MAX
                                : pl->partial_op == TSP_PARTIAL_MIN ? TS_REDUCE_MIN
                                                                    : TS_REDUCE_SUM)
                   : ts_replicate();
  int64_t *sizes[TSP_MAX_DIMS] = {0};
  int nparts[TSP_MAX_DIMS] = {0};
  int rc = TS_OK;
  for (int d = 0; d < nd && !rc; d++) {
    int parts = 1;
    for (int m = 0; m < mnd; m++)
      if (pl->split[d] & (1u << m)) {
        place[m] = ts_shard_on(d);
        parts *= (int)mesh->mesh_shape[m];
      }
    nparts[d] = pl->split[d] ? parts : 0;
    sizes[d] = malloc((size_t)parts * sizeof *sizes[d]);
    if (!sizes[d]) {
      rc = ts_error_set(err, TS_NO_MEMORY, "out of memory");
      break;
    }
    for (int i = 0; i < parts; i++)
      sizes[d][i] = -1;
    for (int pos = 0; pos < mesh->nranks && !rc; pos++) {
      const int64_t *row = all + (size_t)mesh->ranks[pos] * per;
      if (!row[0])
        continue; /* ran nowhere here: nothing to say */
      int part = 0, rest = pos;
      int64_t coord[TS_MAX_MESH_DIMS];
      for (int m = mnd - 1; m >= 0; m--) {
        coord[m] = rest % mesh->mesh_shape[m];
        rest /= (int)mesh->mesh_shape[m];
      }
      for (int m = 0; m < mnd; m++)
        if (pl->split[d] & (1u << m))
          part = part * (int)mesh->mesh_shape[m] + (int)coord[m];
      int64_t ext = row[1 + (size_t)k * TSP_MAX_DIMS + (size_t)d];
      if (sizes[d][part] < 0)
        sizes[d][part] = ext;
      else if (sizes[d][part] != ext)
        rc = ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "output '%s': ranks computed %lld and %lld "
                          "along dim %d for the same part of it; the inputs' slices along that "
                          "dim differ",
                          oname, (long long)sizes[d][part], (long long)ext, d);
    }
    shape[d] = 0;
    for (int i = 0; i < parts && !rc; i++) {
      if (sizes[d][i] < 0)
        rc = ts_error_set(err, TS_INTERNAL, "output '%s': no rank computed part %d of dim %d",
                          oname, i, d);
      shape[d] = pl->split[d] ? shape[d] + sizes[d][i] : sizes[d][i];
    }
  }
  if (!rc)
    rc = ts_attr_create(out, mnd, mesh->mesh_shape, mesh->ranks, place, err);
  for (int d = 0; d < nd && !rc; d++)
    if (nparts[d])
      rc = ts_attr_set_splits(*out, d, nparts[d], sizes[d], err);
  for (int d = 0; d < nd; d++)
    free(sizes[d]);
  if (rc)
    ts_attr_destroy(out);
  return rc;
}

typedef struct run_state {
  tsp_tensor in[64], out[64];
  int64_t scalar_buf[64];
  const Tshard__ProgramArg *in_arg[64]; /* per program input: the request's argument */
  const char *out_tensor[64];           /* per program output: the tensor it becomes */
  const ts_attr *mesh;
  bool here; /* this rank holds the inputs' slices */
} run_state;

/* Appends to a message under construction (cut at its capacity). */
static void add_text(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_text(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  *len = n < 0 ? *len : (*len + (size_t)n < cap ? *len + (size_t)n : cap);
}

/* Appends "; <what> 'a', 'b'<tail>" for the names picked out of n (none: nothing). */
static void add_names(char *msg, size_t cap, size_t *len, const char *one, const char *many,
                      const char *const *names, int n, const char *tail) {
  if (!n)
    return;
  add_text(msg, cap, len, "%s%s ", *len ? "; " : "", n > 1 ? many : one);
  for (int i = 0; i < n; i++)
    add_text(msg, cap, len, "%s'%s'", i ? ", " : "", names[i]);
  add_text(msg, cap, len, "%s", tail);
}

/* One side (inputs or outputs) of the request against the program: repeated, missing (inputs
 * only: an output not named takes a default) and unknown names appended to msg; found[i] the
 * argument of the program's name i (or NULL). The number of problems. */
static int match_side(const tsp_program *p, bool outputs, Tshard__ProgramArg *const *args,
                      size_t n_args, const Tshard__ProgramArg **found, char *msg, size_t cap,
                      size_t *len) {
  int n = outputs ? tsp_program_n_outputs(p) : tsp_program_n_inputs(p);
  const char *twice[64], *missing[64], *unknown[64];
  int n_twice = 0, n_missing = 0, n_unknown = 0;
  for (int i = 0; i < n; i++) {
    const char *name = outputs ? tsp_program_output_name(p, i) : tsp_program_input_name(p, i);
    int count = 0;
    found[i] = NULL;
    for (size_t j = 0; j < n_args; j++)
      if (strcmp(args[j]->name, name) == 0 && count++ == 0)
        found[i] = args[j];
    if (count > 1)
      twice[n_twice++] = name;
    else if (count == 0 && !outputs)
      missing[n_missing++] = name;
  }
  for (size_t j = 0; j < n_args && n_unknown < 64; j++) {
    int i = 0;
    while (i < n && strcmp(args[j]->name, outputs ? tsp_program_output_name(p, i)
                                                  : tsp_program_input_name(p, i)) != 0)
      i++;
    if (i == n)
      unknown[n_unknown++] = args[j]->name;
  }
  add_names(msg, cap, len, outputs ? "missing output" : "missing input",
            outputs ? "missing outputs" : "missing inputs", missing, n_missing, "");
  add_names(msg, cap, len, outputs ? "unknown output" : "unknown input",
            outputs ? "unknown outputs" : "unknown inputs", unknown, n_unknown,
            " (not in the program)");
  add_names(msg, cap, len, outputs ? "output" : "input", outputs ? "outputs" : "inputs", twice,
            n_twice, n_twice > 1 ? " are given more than once" : " is given more than once");
  return n_twice + n_missing + n_unknown;
}

/* The request's names against the program's interface: every missing, repeated or unknown input
 * and output named in one message, with the interface. An output not named becomes a tensor of
 * the output's own name. */
static int match_names(const tsp_program *p, const Tshard__ProgramRunRequest *q, run_state *st,
                       ts_error *err) {
  char msg[400] = "";
  size_t len = 0;
  const Tshard__ProgramArg *out_arg[64];
  int bad = match_side(p, false, q->inputs, q->n_inputs, st->in_arg, msg, sizeof msg, &len);
  bad += match_side(p, true, q->outputs, q->n_outputs, out_arg, msg, sizeof msg, &len);
  for (int k = 0; k < tsp_program_n_outputs(p); k++)
    st->out_tensor[k] = out_arg[k] ? out_arg[k]->tensor : tsp_program_output_name(p, k);
  if (!bad)
    return TS_OK;
  char inputs[240] = "", outputs[240] = "";
  size_t il = 0, ol = 0;
  for (int i = 0; i < tsp_program_n_inputs(p); i++)
    add_text(inputs, sizeof inputs, &il, "%s%s", i ? ", " : "", tsp_program_input_name(p, i));
  for (int k = 0; k < tsp_program_n_outputs(p); k++)
    add_text(outputs, sizeof outputs, &ol, "%s%s", k ? ", " : "", tsp_program_output_name(p, k));
  return ts_error_set(err, TS_INVALID_ARGUMENT,
                      "%s. The program's inputs: %s (a stored tensor "
                      "each, or a number for a scalar); its outputs: %s",
                      msg, il ? inputs : "none", ol ? outputs : "none");
}

/* An output's tensor: new, or (overwrite) an existing tensor that is not an input of this run. */
static int check_output_tensor(tsd_engine *e, const tsp_program *p,
                               const Tshard__ProgramRunRequest *q, const run_state *st, int k,
                               ts_error *err) {
  const char *oname = tsp_program_output_name(p, k), *t = st->out_tensor[k];
  ts_error nerr;
  if (t == oname && ts_name_check("tensor name", t, strlen(t), &nerr) != TS_OK)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "output '%s' is not named, and its own name "
                        "is not a tensor name (%s); name its tensor (--output %s=NAME)",
                        oname, nerr.msg, oname);
  for (int j = 0; j < k; j++)
    if (strcmp(st->out_tensor[j], t) == 0)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "outputs '%s' and '%s' both name tensor '%s'; "
                          "give each output its own tensor",
                          tsp_program_output_name(p, j), oname, t);
  if (!ts_store_find(e->store, t))
    return TS_OK;
  for (int i = 0; i < tsp_program_n_inputs(p); i++) {
    const Tshard__ProgramArg *a = st->in_arg[i];
    if (a && a->tensor && strcmp(a->tensor, t) == 0)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "output '%s' names tensor '%s', which is "
                          "input '%s' of this run; update an input with an assign op, or name "
                          "another tensor for the output",
                          oname, t, tsp_program_input_name(p, i));
  }
  if (q->overwrite)
    return TS_OK;
  return ts_error_set(err, TS_EXISTS,
                      "output '%s' would become tensor '%s', which exists "
                      "already (an output not named is written to a tensor of its own name); "
                      "name another tensor (--output %s=NAME, Python outputs={'%s': NAME}) or "
                      "replace it (--overwrite, overwrite=True)",
                      oname, t, oname, oname);
}

/* A static program dim that a tensor's split cuts: the error names the dim group that serves it. */
static int static_split_hint(const tsp_program *p, int i, const ts_stored *t,
                             const tsp_placement *pl, ts_error *err) {
  for (int d = 0; d < t->ndim && d < tsp_program_input_ndim(p, i); d++) {
    char f[TSP_FORMULA_TEXT];
    if (!pl->split[d] || tsp_program_input_formula(p, i, d, f, sizeof f) >= (int)sizeof f)
      continue;
    char *end = NULL;
    long long want = strtoll(f, &end, 10);
    int64_t got = t->local.layout.shape[d];
    if (*end || got == want)
      continue;
    return ts_error_set(err, TS_BAD_SHAPE,
                        "input '%s' dim %d: the program fixes it at %lld, "
                        "but tensor '%s' (size %lld there) is split along dim %d over ranks and "
                        "this rank holds %lld; a split dim needs a dim group: declare one, e.g. "
                        "\"dims\": {\"n\": {\"min\": 1, \"max\": %lld}}, and write \"n\" for "
                        "dim %d of input '%s'",
                        tsp_program_input_name(p, i), d, want, t->name, (long long)t->shape[d], d,
                        (long long)got, (long long)(t->shape[d] > want ? t->shape[d] : want), d,
                        tsp_program_input_name(p, i));
  }
  return TS_OK;
}

/* Binds the request to the program and this rank's slices; every check before any change. */
static int bind(tsd_engine *e, tsp_program *p, const Tshard__ProgramRunRequest *q, run_state *st,
                ts_error *err) {
  int n_in = tsp_program_n_inputs(p), n_out = tsp_program_n_outputs(p);
  int rc = match_names(p, q, st, err);
  if (rc)
    return rc;
  tsp_placement pin[64], pout[64];
  const char *tensor_of[64];
  const char *labels[64], *attrs[64];
  char attr_text[64][160];
  st->here = true;
  st->mesh = NULL;
  for (int i = 0; i < n_in; i++) {
    const Tshard__ProgramArg *a = st->in_arg[i];
    ts_dtype dt = tsp_program_input_dtype(p, i);
    memset(&st->in[i], 0, sizeof st->in[i]);
    memset(&pin[i], 0, sizeof pin[i]);
    tensor_of[i] = a->tensor && a->tensor[0] ? a->tensor : NULL;
    labels[i] = tensor_of[i];
    attrs[i] = NULL;
    if (!tensor_of[i]) {
      if (tsp_program_input_ndim(p, i) != 0)
        return ts_error_set(err, TS_INVALID_ARGUMENT,
                            "program input '%s' has dims: give a "
                            "stored tensor, not a value",
                            tsp_program_input_name(p, i));
      double v = a->value;
      void *buf = &st->scalar_buf[i];
      ts_error why; /* a value the input's dtype cannot hold is refused, never saturated */
      if (ts_convert_check(&v, TS_F64, dt, 1, &why))
        return ts_error_set(err, TS_BAD_DTYPE, "program input '%s' (%s): %s",
                            tsp_program_input_name(p, i), ts_dtype_name(dt), why.msg);
      ts_convert(buf, dt, &v, TS_F64, 1);
      st->in[i].data = buf;
      st->in[i].dtype = dt;
      continue;
    }
    for (int k = 0; k < i; k++)
      if (tensor_of[k] && strcmp(tensor_of[k], tensor_of[i]) == 0 &&
          (tsp_program_input_assigned(p, i) || tsp_program_input_assigned(p, k)))
        return ts_error_set(err, TS_INVALID_ARGUMENT,
                            "tensor '%s' is given twice and updated "
                            "in place: give it once",
                            tensor_of[i]);
    ts_stored *t = ts_store_find(e->store, tensor_of[i]);
    if (!t)
      return ts_error_set(err, TS_NOT_FOUND, "no tensor named '%s' (program input '%s')",
                          tensor_of[i], tsp_program_input_name(p, i));
    if (t->dtype != dt)
      return ts_error_set(err, TS_BAD_DTYPE, "tensor '%s' is %s, program input '%s' is %s", t->name,
                          ts_dtype_name(t->dtype), tsp_program_input_name(p, i), ts_dtype_name(dt));
    if (t->layout_tag[0] && strcmp(t->layout_tag, "row-major") != 0)
      return ts_error_set(err, TS_UNSUPPORTED,
                          "tensor '%s' is stored in layout '%s': programs "
                          "read row-major slices; reshard it with the default layout first",
                          t->name, t->layout_tag);
    if (st->mesh && !same_mesh(st->mesh, t->attr))
      return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                          "tensor '%s' lives on another mesh than the "
                          "program's other inputs; reshard the inputs onto one mesh",
                          t->name);
    st->mesh = t->attr;
    st->here = st->here && t->has_slice;
    if ((rc = check_partial_input(t, err)))
      return rc;
    placement_of(t->attr, &pin[i]);
    if (ts_attr_format(t->attr, attr_text[i], sizeof attr_text[i]) < sizeof attr_text[i])
      attrs[i] = attr_text[i];
    st->in[i].data = t->local.data;
    st->in[i].dtype = dt;
    st->in[i].ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++)
      st->in[i].shape[d] = t->local.layout.shape[d];
    if (t->has_slice && (rc = static_split_hint(p, i, t, &pin[i], err)))
      return rc;
  }
  rc = tsp_program_placement_named(p, pin, labels, attrs, n_in, pout, n_out, err);
  if (rc)
    return rc;
  for (int k = 0; k < n_out; k++) {
    if ((rc = check_output_tensor(e, p, q, st, k, err)))
      return rc;
    for (int d = 0; d < TSP_MAX_DIMS; d++)
      if (pout[k].split[d] & pout[k].partial)
        return ts_error_set(err, TS_PROGRAM_PLACEMENT,
                            "output '%s' would be split (dim %d) and "
                            "partial over the same mesh dim; reshard the inputs first",
                            tsp_program_output_name(p, k), d);
    if (!st->mesh)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "output '%s': a program with outputs needs a "
                          "stored tensor among its inputs (its mesh places the outputs)",
                          tsp_program_output_name(p, k));
  }
  /* the dims bind and the bucket builds (a compiler failure is refused before any change) */
  if (st->here)
    rc = tsp_program_prepare(p, st->in, n_in, err);
  return rc;
}

int tsd_run_program_run(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__ProgramRunRequest *q = op->req->program_run;
  ts_error lerr;
  ts_error_clear(&lerr);
  run_state *st = calloc(1, sizeof *st);
  tsp_program *p = find(q->id);
  int lst = !st  ? ts_error_set(&lerr, TS_NO_MEMORY, "out of memory")
            : !p ? ts_error_set(&lerr, TS_NOT_FOUND, "no compiled program with id '%s'", q->id)
                 : bind(e, p, q, st, &lerr);
  int n_out = p ? tsp_program_n_outputs(p) : 0;
  /* outputs: the placements again (bind checked them), their new tensors */
  tsp_placement pin[64], pout[64];
  if (!lst) {
    for (int i = 0; i < tsp_program_n_inputs(p); i++) {
      const char *tn = NULL;
      for (size_t j = 0; j < q->n_inputs; j++)
        if (strcmp(q->inputs[j]->name, tsp_program_input_name(p, i)) == 0)
          tn = q->inputs[j]->tensor;
      memset(&pin[i], 0, sizeof pin[i]);
      if (tn && tn[0])
        placement_of(ts_store_find(e->store, tn)->attr, &pin[i]);
    }
    lst = tsp_program_placement(p, pin, tsp_program_n_inputs(p), pout, n_out, &lerr);
  }
  int rc = agree(e, lst, &lerr, err);
  if (rc) {
    free(st);
    return rc;
  }
  /* run here (ranks outside the mesh have nothing to compute) */
  if (st->here)
    lst = tsp_program_run(p, st->in, tsp_program_n_inputs(p), st->out, n_out, &lerr);
  /* every rank's local output shapes (one collective every rank makes, whatever its status):
   * [here, shapes of output 0, 1, ...] per world rank */
  int ws = ts_world_size(e->world), me = ts_world_rank(e->world);
  size_t per = 1 + (size_t)n_out * TSP_MAX_DIMS;
  int64_t *all = calloc((size_t)ws * per, sizeof *all), *counts = calloc(2 * (size_t)ws, 8);
  if ((!all || !counts) && !lst)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "out of memory");
  if (all && counts) {
    all[(size_t)me * per] = st->here && !lst;
    for (int k = 0; st->here && !lst && k < n_out; k++)
      memcpy(all + (size_t)me * per + 1 + (size_t)k * TSP_MAX_DIMS, st->out[k].shape,
             TSP_MAX_DIMS * sizeof(int64_t));
    for (int r = 0; r < ws; r++) {
      counts[r] = (int64_t)(per * sizeof *all);
      counts[ws + r] = (int64_t)((size_t)r * per * sizeof *all);
    }
  }
  ts_error cerr;
  int cst = all && counts
                ? ts_comm_allgatherv(ts_world_comm(e->world), all, counts, counts + ws, &cerr)
                : ts_comm_barrier(ts_world_comm(e->world), &cerr);
  if (cst && !lst) {
    lst = cst;
    lerr = cerr;
  }
  /* new tensors over the inputs' mesh */
  int made = 0;
  for (int k = 0; !lst && k < n_out; k++) {
    const char *name = st->out_tensor[k];
    ts_attr *attr = NULL;
    int64_t shape[TSP_MAX_DIMS];
    lst = output_attr(p, k, &pout[k], st->mesh, all, per, shape, &attr, &lerr);
    ts_stored *t = NULL;
    if (!lst && q->overwrite && ts_store_find(e->store, name))
      lst = ts_store_drop(e->store, name, &lerr); /* replaced (bind allowed it) */
    if (!lst)
      lst = ts_store_add(e->store, name, tsp_program_output_ndim(p, k), shape,
                         tsp_program_output_dtype(p, k), attr, NULL, &t, &lerr);
    ts_attr_destroy(&attr);
    if (!lst) {
      made++;
      if (t->has_slice && st->here) {
        for (int d = 0; d < t->ndim; d++)
          if (t->box.hi[d] - t->box.lo[d] != st->out[k].shape[d])
            lst = ts_error_set(&lerr, TS_INTERNAL,
                               "output '%s': this rank computed %lld along "
                               "dim %d where its slice holds %lld",
                               tsp_program_output_name(p, k), (long long)st->out[k].shape[d], d,
                               (long long)(t->box.hi[d] - t->box.lo[d]));
        if (!lst && t->local.bytes)
          memcpy(t->local.data, st->out[k].data, t->local.bytes);
      }
    }
  }
  free(all);
  free(counts);
  for (int k = 0; st->here && k < n_out; k++)
    ts_pool_free(st->out[k].data); /* NULL after a failed run */
  rc = agree(e, lst, &lerr, err);
  if (rc) {
    for (int k = 0; k < made; k++)
      ts_store_drop(e->store, st->out_tensor[k], NULL);
  }
  free(st);
  return rc;
}
