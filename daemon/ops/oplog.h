/* oplog.h - the operation log (oplog.c): the time and report of the collective operation running
 * now (ops.c calls begin and end around it, the reshard handler notes its strategy), a line at
 * info level per operation, and the reshard's answer carrying the strategy and the time. */
#ifndef TSD_OPLOG_H
#define TSD_OPLOG_H

#include "tsd_ops.h"

void tsd_oplog_begin(void);
void tsd_oplog_note(ts_strategy strategy, uint64_t bytes);
void tsd_oplog_end(tsd_engine *e, const tsd_ordered *op, const tsd_pending *origin, int status);
void tsd_answer_reshard(tsd_engine *e, const tsd_pending *w);
/* The line of a local data operation (put_slice complete, get_slice's copy made). */
void tsd_oplog_local(const Tshard__Request *req, uint64_t conn_id, uint64_t bytes, int status);

#endif
