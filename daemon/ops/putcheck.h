/* putcheck.h - issue 14's client-trust checks in the daemon: a put's declared dtype and shape
 * against the tensor (putcheck.c), and one log line per operation with the reshard's strategy
 * and time in its answer (oplog.c). */
#ifndef TSD_PUTCHECK_H
#define TSD_PUTCHECK_H

#include "tsd_ops.h"

/* A put (box NULL) or put_slice (box: this rank's slice, NULL-able has_slice false) of `total`
 * bytes declaring dtype (may be "": no declaration) and shape. Checks the declaration against the
 * tensor or slice and the byte count, with messages in dtypes and shapes. tag: the slice's layout
 * ("" row-major); a declared shape is the box's logical shape whatever the layout. */
int tsd_put_check(const ts_stored *t, bool slice, const char *tag, const char *dtype, size_t n_shape,
                  const int64_t *shape, bool convert, uint64_t total, uint64_t expected,
                  ts_error *err);
/* The dtype a put's data arrives in: the tensor's, or the declared one when the put asks for
 * conversion (*convert then true). Errors for an unknown declared dtype. */
int tsd_put_source_dtype(const ts_stored *t, const char *dtype, bool convert_asked, ts_dtype *from,
                         bool *convert, ts_error *err);
/* A layout tag whose bytes are the row-major box ("" or "ab..." over ndim dims). */
bool tsd_tag_plain(const char *tag, int ndim);

/* oplog.c: the time and report of the collective operation running now (ops.c calls begin and
 * end around it, the reshard handler notes its strategy), a line at info level per operation,
 * and the reshard's answer carrying the strategy and the time. */
void tsd_oplog_begin(void);
void tsd_oplog_note(ts_strategy strategy, uint64_t bytes);
void tsd_oplog_end(tsd_engine *e, const tsd_ordered *op, const tsd_pending *origin, int status);
void tsd_answer_reshard(tsd_engine *e, const tsd_pending *w);
/* The line of a local data operation (put_slice complete, get_slice's copy made). */
void tsd_oplog_local(const Tshard__Request *req, uint64_t conn_id, uint64_t bytes, int status);

#endif
