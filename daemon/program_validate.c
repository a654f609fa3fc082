/* program_validate.c - the wire checks of the program operations (program_compile, program_run,
 * program_show, program_drop): sizes and names, before anything runs. Part of the wire library (the fuzz target
 * drives it); the operations themselves are in program.c. */
#include <string.h>

#include "daemon.h"
#include "ts_rules.h"

#define TSD_PROGRAM_TEXT_MAX (1 << 20)

static int check_id(const char *id, ts_error *err) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n > 64)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "program id must be 1 to 64 characters (the "
                        "id a program_compile answered)");
  return TS_OK;
}

int tsd_validate_program_compile(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const char *t = r->program_compile->text;
  if (!t || !t[0] || strlen(t) > TSD_PROGRAM_TEXT_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "program text must be 1 byte to 1 MiB of JSON "
                        "(program/PROGRAM.md)");
  return TS_OK;
}

int tsd_validate_program_run(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__ProgramRunRequest *q = r->program_run;
  int rc = check_id(q->id, err);
  if (rc)
    return rc;
  if (q->n_inputs > 64 || q->n_outputs > 64)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "a program takes at most 64 inputs and 64 "
                        "outputs");
  for (size_t i = 0; i < q->n_inputs + q->n_outputs; i++) {
    const Tshard__ProgramArg *a = i < q->n_inputs ? q->inputs[i] : q->outputs[i - q->n_inputs];
    if (!a->name || !a->name[0] || strlen(a->name) >= 64)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "program argument %zu needs the program's "
                          "input or output name", i);
    if (a->tensor && a->tensor[0] && (rc = ts_name_check("tensor name", a->tensor,
                                                         strlen(a->tensor), err)))
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
