/* program_validate.c - the wire checks of the program operations (program_compile, program_run,
 * program_show, program_drop): sizes and names, before anything runs. Part of the wire library (the
 * fuzz target drives it); the operations themselves are in program.c. */
#include <string.h>

#include "tsd_wire.h"
#include "ts_rules.h"

#define TSD_PROGRAM_TEXT_MAX (1 << 20)

static int check_id(const char *id, ts_error *err) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n > 64)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "program id must be 1 to 64 characters (the "
                        "id a program_compile answered)");
  return TS_OK;
}

int tsd_validate_program_compile(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__ProgramCompileRequest *q = r->program_compile;
  const char *t = q->text;
  bool has_text = t && t[0];
  if (has_text == (q->graph != NULL))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "program_compile takes exactly one of the "
                        "program's JSON text and its graph message (ProgramGraph), got %s",
                        has_text ? "both" : "neither");
  if (has_text && strlen(t) > TSD_PROGRAM_TEXT_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "program text must be 1 byte to 1 MiB of JSON "
                        "(program/PROGRAM.md)");
  const Tshard__ProgramGraph *g = q->graph;
  if (g && (g->n_dims > 8 || g->n_inputs > 64 || g->n_outputs > 64 || g->n_ops > 4096))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "program graph: at most 8 dim groups, 64 "
                        "inputs, 64 outputs and 4096 ops (got %zu, %zu, %zu, %zu)",
                        g->n_dims, g->n_inputs, g->n_outputs, g->n_ops);
  if (q->n_buckets > 8)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "buckets: at most 8 rule overrides (one per "
                        "dim group), got %zu",
                        q->n_buckets);
  for (size_t i = 0; i < q->n_buckets; i++)
    if (!q->buckets[i]->name || !q->buckets[i]->name[0])
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "buckets[%zu]: a rule override needs the dim "
                          "group's name",
                          i);
  return TS_OK;
}

int tsd_validate_program_run(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__ProgramRunRequest *q = r->program_run;
  int rc = check_id(q->id, err);
  if (rc)
    return rc;
  if (q->n_inputs > 64 || q->n_outputs > 64)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "a program takes at most 64 inputs and 64 "
                        "outputs");
  for (size_t i = 0; i < q->n_inputs + q->n_outputs; i++) {
    const Tshard__ProgramArg *a = i < q->n_inputs ? q->inputs[i] : q->outputs[i - q->n_inputs];
    if (!a->name || !a->name[0] || strlen(a->name) >= 64)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "program argument %zu needs the program's "
                          "input or output name",
                          i);
    if (a->tensor && a->tensor[0] &&
        (rc = ts_name_check("tensor name", a->tensor, strlen(a->tensor), err)))
      return rc;
    if (i >= q->n_inputs && (!a->tensor || !a->tensor[0]))
      return ts_error_set(err, TS_INVALID_ARGUMENT, "program output '%s' needs a tensor name",
                          a->name);
  }
  return TS_OK;
}

int tsd_validate_program_drop(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  return check_id(r->program_drop->id, err);
}

int tsd_validate_program_show(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  return check_id(r->program_show->id, err);
}
