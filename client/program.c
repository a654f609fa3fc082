/* program.c - the C client's compiled-program calls (include/tshard.h): program_compile,
 * program_run, program_show and program_drop requests and their answers. */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "ts_rules.h"
#include "tshard.h"

static int compile(tshard_client *c, Tshard__ProgramCompileRequest *q, char *id, size_t id_cap,
                   const char *key) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_PROGRAM_COMPILE;
  req.program_compile = q;
  req.idempotency_key = tsc_str(key);
  Tshard__Response *r = NULL;
  if (tsc_apply_group(c, &req)) /* an SPMD client's group: a collective of the group */
    return TS_INVALID_ARGUMENT;
  int rc = tsc_call(c, &req, &r);
  if (rc == TS_OK && r->result_case != TSHARD__RESPONSE__RESULT_PROGRAM)
    rc = tsc_fail(c, TS_PROTOCOL, "program_compile: the answer carries no program id");
  if (rc == TS_OK)
    snprintf(id, id_cap, "%s", r->program->id);
  if (r)
    tsc_free(c, r);
  return rc;
}

/* The bucket rule overrides: "NAME=RULE" words (spaces or ';' between them), RULE pow2, step:S
 * or V1,V2,... (names and lists point into buf, a copy of the text). */
typedef struct rules {
  char buf[1024];
  Tshard__ProgramGraphDim dims[8];
  Tshard__ProgramGraphDim *ptrs[8];
  Tshard__ProgramGraphInts lists[8];
  int64_t values[8][64];
  size_t n;
} rules;

static int parse_rules(tshard_client *c, const char *text, rules *r) {
  r->n = 0;
  if (!text)
    return TS_OK;
  if (strlen(text) >= sizeof r->buf)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "buckets: the rules text is too long");
  snprintf(r->buf, sizeof r->buf, "%s", text);
  char *save = NULL;
  for (char *w = strtok_r(r->buf, " ;", &save); w; w = strtok_r(NULL, " ;", &save)) {
    char *eq = strchr(w, '=');
    if (!eq || eq == w || !eq[1] || r->n == 8)
      return tsc_fail(c, TS_INVALID_ARGUMENT,
                      "buckets: '%s' is not NAME=pow2, NAME=step:S or "
                      "NAME=V1,V2,... (at most 8 groups)",
                      w);
    *eq = '\0';
    Tshard__ProgramGraphDim *d = &r->dims[r->n];
    tshard__program_graph_dim__init(d);
    d->name = w;
    const char *rule = eq + 1;
    char *end = NULL;
    if (!strcmp(rule, "pow2")) {
      d->buckets_case = TSHARD__PROGRAM_GRAPH_DIM__BUCKETS_POW2;
      d->pow2 = true;
    } else if (!strncmp(rule, "step:", 5)) {
      long long st = strtoll(rule + 5, &end, 10);
      if (end == rule + 5 || *end)
        return tsc_fail(c, TS_INVALID_ARGUMENT,
                        "buckets: '%s' for group '%s': step:S takes an "
                        "integer",
                        rule, w);
      d->buckets_case = TSHARD__PROGRAM_GRAPH_DIM__BUCKETS_STEP;
      d->step = st;
    } else {
      Tshard__ProgramGraphInts *l = &r->lists[r->n];
      tshard__program_graph_ints__init(l);
      l->values = r->values[r->n];
      for (const char *q = rule; *q;) {
        long long v = strtoll(q, &end, 10);
        if (end == q || (*end && *end != ',') || l->n_values == 64)
          return tsc_fail(c, TS_INVALID_ARGUMENT,
                          "buckets: '%s' for group '%s' is not pow2, "
                          "step:S or a list of at most 64 integers V1,V2,...",
                          rule, w);
        l->values[l->n_values++] = v;
        q = *end ? end + 1 : end;
      }
      d->buckets_case = TSHARD__PROGRAM_GRAPH_DIM__BUCKETS_LIST;
      d->list = l;
    }
    r->ptrs[r->n++] = d;
  }
  return TS_OK;
}

int tshard_program_compile_ex(tshard_client *c, const char *text, const void *graph,
                              size_t graph_len, const char *buckets, int lazy, char *id,
                              size_t id_cap, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if ((text != NULL) == (graph != NULL) || !id || id_cap < 17)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "program_compile needs the text or a serialized "
                    "ProgramGraph message (exactly one), and room for the id (17 bytes)");
  rules *r = malloc(sizeof *r);
  if (!r)
    return tsc_fail(c, TS_NO_MEMORY, "out of memory");
  int rc = parse_rules(c, buckets, r);
  Tshard__ProgramGraph *g = NULL;
  if (rc == TS_OK && graph && !(g = tshard__program_graph__unpack(NULL, graph_len, graph)))
    rc = tsc_fail(c, TS_INVALID_ARGUMENT,
                  "program_compile: %zu bytes are not a serialized "
                  "ProgramGraph message (proto/tshard.proto)",
                  graph_len);
  if (rc == TS_OK) {
    Tshard__ProgramCompileRequest q = TSHARD__PROGRAM_COMPILE_REQUEST__INIT;
    q.text = (char *)(text ? text : "");
    q.graph = g;
    q.lazy = lazy != 0;
    q.n_buckets = r->n;
    q.buckets = r->ptrs;
    rc = compile(c, &q, id, id_cap, key);
  }
  if (g)
    tshard__program_graph__free_unpacked(g, NULL);
  free(r);
  return rc;
}

int tshard_program_compile(tshard_client *c, const char *text, int lazy, char *id, size_t id_cap,
                           const char *key) {
  if (c && !text)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "program_compile needs the text");
  return tshard_program_compile_ex(c, text, NULL, 0, NULL, lazy, id, id_cap, key);
}

int tshard_program_compile_graph(tshard_client *c, const void *graph, size_t len, int lazy,
                                 char *id, size_t id_cap, const char *key) {
  if (c && !graph)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "program_compile_graph needs the serialized "
                    "ProgramGraph message");
  return tshard_program_compile_ex(c, NULL, graph, len, NULL, lazy, id, id_cap, key);
}

static Tshard__ProgramArg *args_msg(const tshard_program_arg *a, int n, Tshard__ProgramArg *store,
                                    Tshard__ProgramArg **ptrs) {
  for (int i = 0; i < n; i++) {
    tshard__program_arg__init(&store[i]);
    store[i].name = tsc_str(a[i].name);
    store[i].tensor = tsc_str(a[i].tensor);
    store[i].value = a[i].value;
    ptrs[i] = &store[i];
  }
  return store;
}

int tshard_program_run(tshard_client *c, const char *id, const tshard_program_arg *inputs, int n_in,
                       const tshard_program_arg *outputs, int n_out, const char *key) {
  return tshard_program_run_ex(c, id, inputs, n_in, outputs, n_out, 0, key);
}

int tshard_program_run_ex(tshard_client *c, const char *id, const tshard_program_arg *inputs,
                          int n_in, const tshard_program_arg *outputs, int n_out, int flags,
                          const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (!id || n_in < 0 || n_in > 64 || n_out < 0 || n_out > 64 || (n_in && !inputs) ||
      (n_out && !outputs))
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "program_run needs the id and 0 to 64 inputs and "
                    "outputs");
  Tshard__ProgramArg in[64], out[64];
  Tshard__ProgramArg *pin[64], *pout[64];
  args_msg(inputs, n_in, in, pin);
  args_msg(outputs, n_out, out, pout);
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ProgramRunRequest q = TSHARD__PROGRAM_RUN_REQUEST__INIT;
  q.id = (char *)id;
  q.n_inputs = (size_t)n_in;
  q.inputs = pin;
  q.n_outputs = (size_t)n_out;
  q.outputs = pout;
  q.overwrite = (flags & TSHARD_PROGRAM_OVERWRITE) != 0;
  req.op_case = TSHARD__REQUEST__OP_PROGRAM_RUN;
  req.program_run = &q;
  req.idempotency_key = tsc_str(key);
  return tsc_call_collective(c, &req);
}

int tshard_program_drop(tshard_client *c, const char *id, const char *key) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (!id)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "program_drop needs the id");
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ProgramDropRequest q = TSHARD__PROGRAM_DROP_REQUEST__INIT;
  q.id = (char *)id;
  req.op_case = TSHARD__REQUEST__OP_PROGRAM_DROP;
  req.program_drop = &q;
  req.idempotency_key = tsc_str(key);
  return tsc_call_collective(c, &req);
}

static int show(tshard_client *c, const char *id, bool summary, char **text);

int tshard_program_show(tshard_client *c, const char *id, char **text) {
  return show(c, id, false, text);
}

int tshard_program_summary(tshard_client *c, const char *id, char **text) {
  return show(c, id, true, text);
}

static int show(tshard_client *c, const char *id, bool summary, char **text) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (!id || !text)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "program_show needs the id and a place for the text");
  *text = NULL;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__ProgramShowRequest q = TSHARD__PROGRAM_SHOW_REQUEST__INIT;
  q.id = (char *)id;
  q.summary = summary;
  req.op_case = TSHARD__REQUEST__OP_PROGRAM_SHOW;
  req.program_show = &q;
  Tshard__Response *r = NULL;
  int rc = tsc_call(c, &req, &r);
  if (rc == TS_OK && r->result_case != TSHARD__RESPONSE__RESULT_PROGRAM)
    rc = tsc_fail(c, TS_PROTOCOL, "program_show: the answer carries no text");
  if (rc == TS_OK && !(*text = strdup(r->program->text)))
    rc = tsc_fail(c, TS_NO_MEMORY, "out of memory for the program's report");
  if (r)
    tsc_free(c, r);
  return rc;
}
