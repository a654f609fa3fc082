/* program.h - the daemon's compiled-program operations (program_compile, program_run,
 * program_show, program_drop): their handlers (program.c, program_graph.c); their validators are
 * the wire layer's (wire/program_validate.c). Internal to daemon/ops/. */
#ifndef TSD_PROGRAM_H
#define TSD_PROGRAM_H

#include "tsd_ops.h"

int tsd_run_program_compile(struct tsd_engine *e, const struct tsd_ordered *op,
                            struct tsd_pending *origin, ts_error *err);
void tsd_answer_program_compile(struct tsd_engine *e, const struct tsd_pending *w);
int tsd_run_program_run(struct tsd_engine *e, const struct tsd_ordered *op,
                        struct tsd_pending *origin, ts_error *err);
void tsd_changes_program_run(const Tshard__Request *r, tsd_changes *ch);
void tsd_op_program_show(struct tsd_engine *e, struct tsd_work *w);
int tsd_run_program_drop(struct tsd_engine *e, const struct tsd_ordered *op,
                         struct tsd_pending *origin, ts_error *err);
/* The program's JSON text when the request needs one made (program_graph.c): the message form
 * as its document, or bucket rule overrides applied to the document (*text malloc'd: free());
 * *text NULL: the request's text as it is. */
int tsd_program_request_text(const Tshard__ProgramCompileRequest *q, char **text, ts_error *err);
/* Frees every compiled program (engine shutdown). */
void tsd_programs_free(void);

#endif
