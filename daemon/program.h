/* program.h - the daemon's compiled-program operations (program_compile, program_run,
 * program_show, program_drop): validators (program_validate.c, wire library) and handlers (program.c). */
#ifndef TSD_PROGRAM_H
#define TSD_PROGRAM_H

#include "daemon.h"

int tsd_validate_program_compile(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_program_run(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_program_show(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_program_drop(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);

int tsd_run_program_compile(struct tsd_engine *e, const struct tsd_ordered *op,
                            struct tsd_pending *origin, ts_error *err);
void tsd_answer_program_compile(struct tsd_engine *e, const struct tsd_pending *w);
int tsd_run_program_run(struct tsd_engine *e, const struct tsd_ordered *op,
                        struct tsd_pending *origin, ts_error *err);
void tsd_changes_program_run(const Tshard__Request *r, tsd_changes *ch);
void tsd_op_program_show(struct tsd_engine *e, struct tsd_work *w);
int tsd_run_program_drop(struct tsd_engine *e, const struct tsd_ordered *op,
                         struct tsd_pending *origin, ts_error *err);
/* The message form of a program as its JSON text (program_graph.c; *text malloc'd: free()). */
int tsd_program_graph_text(const Tshard__ProgramGraph *g, char **text, ts_error *err);
/* Frees every compiled program (engine shutdown). */
void tsd_programs_free(void);

#endif
