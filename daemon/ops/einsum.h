/* einsum.h - the daemon's distributed einsum operations: einsum, einsum_backward and
 * einsum_release (collective), einsum_plan (local: the EXPLAIN only). einsum.c holds the
 * handlers; their validators are the wire layer's (wire/einsum_wire.c). Internal to daemon/ops/. */
#ifndef TSD_EINSUM_H
#define TSD_EINSUM_H

#include "tsd_ops.h"

struct tsd_engine;
struct tsd_einsum_state; /* the forwards' records (einsum.c), one per engine */
int tsd_run_einsum(struct tsd_engine *e, const struct tsd_ordered *op, struct tsd_pending *origin,
                   ts_error *err);
int tsd_run_einsum_backward(struct tsd_engine *e, const struct tsd_ordered *op,
                            struct tsd_pending *origin, ts_error *err);
int tsd_run_einsum_release(struct tsd_engine *e, const struct tsd_ordered *op,
                           struct tsd_pending *origin, ts_error *err);
void tsd_changes_einsum(const Tshard__Request *r, tsd_changes *ch);
void tsd_changes_einsum_backward(const Tshard__Request *r, tsd_changes *ch);
void tsd_answer_einsum(struct tsd_engine *e, const struct tsd_pending *w);
void tsd_op_einsum_plan(struct tsd_engine *e, struct tsd_work *w);
/* A tensor was dropped: the forwards that read it lose their records (and kept state). */
void tsd_einsum_forget(struct tsd_engine *e, const char *name);
/* Frees every record (engine shutdown). */
void tsd_einsum_free_all(struct tsd_engine *e);

#endif
