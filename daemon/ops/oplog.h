/* oplog.h - the operation log (oplog.c): the time and report of the collective operation running
 * now (ops.c calls begin and end around it, the reshard handler notes its strategy), a line at
 * info level per operation, and the reshard's answer carrying the strategy and the time. */
#ifndef TSD_OPLOG_H
#define TSD_OPLOG_H

#include "tsd_ops.h"

void tsd_oplog_begin(void);
/* The tensor an operation names ("-" when none or unknown to the log). */
const char *tsd_oplog_tensor(const Tshard__Request *r);
void tsd_oplog_note(ts_strategy strategy, uint64_t bytes);
/* A relabeled reshard's target ranks as chosen (row-major over its mesh): its answer gives them. */
void tsd_oplog_ranks(const int *ranks, int n);
/* Records the operation's time (its answer carries it) and makes its log line, written by
 * tsd_oplog_flush: after the answer, before the next operation's. */
void tsd_oplog_end(tsd_engine *e, const tsd_ordered *op, const tsd_pending *origin, int status);
/* Writes the line tsd_oplog_end made, if not yet written: whether there was one. */
bool tsd_oplog_flush(void);
/* Latency per operation kind (Request's op_case) over its last TSD_OPLOG_WINDOW runs, with the
 * tensors each run carried: tsd_oplog_end records every collective operation, with the count a
 * batched operation noted (tsd_oplog_batch, between begin and end), else 1. Engine thread only. */
#define TSD_OPLOG_WINDOW 1024
typedef struct tsd_oplog_kind {
  int op_case;
  uint64_t count, p50_us, p99_us, batch_p50, batch_max;
} tsd_oplog_kind;
void tsd_oplog_batch(uint64_t tensors);
/* The bytes the log line gives for the operation running now (a batch's tensors together). */
void tsd_oplog_bytes(uint64_t bytes);
/* The kinds run at least once, in op_case order, at most max: how many were written. */
int tsd_oplog_kinds(tsd_oplog_kind *out, int max);
void tsd_answer_reshard(tsd_engine *e, const tsd_pending *w);
/* The line of a local data operation (put_slice complete, get_slice's copy made). */
void tsd_oplog_local(const Tshard__Request *req, uint64_t conn_id, uint64_t bytes, int status);

#endif
