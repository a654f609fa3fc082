/* ts_control.h - the daemon's control channel: small point-to-point messages between daemons
 * (operations forwarded to rank 0, rank 0's ordered broadcast), on a private duplicate of the
 * world communicator so that they never mix with data transfers.
 *
 * Waiting never holds a core: Open MPI's blocking calls busy-poll one, so every wait here is a
 * loop of MPI_Test / MPI_Iprobe under the wait policy (ts_wait.h: a short spin, then naps). Sends
 * are non-blocking and buffered (the message is copied); ts_control_progress retires completed
 * sends. Only the engine thread calls these. */
#ifndef TS_CONTROL_H
#define TS_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "ts_comm.h"

typedef struct ts_control ts_control;

/* Collective over the world: duplicates its communicator. */
int ts_control_create(ts_world *w, ts_control **out, ts_error *err);
/* Collective over the world: waits (without spinning) for the pending sends, frees the
 * communicator. Accepts NULL; sets *c = NULL. */
void ts_control_destroy(ts_control **c);
int ts_control_rank(const ts_control *c);
int ts_control_size(const ts_control *c);

/* Queues a copy of len bytes to world rank dest with a tag (0 .. 30000). */
int ts_control_send(ts_control *c, int dest, int tag, const void *buf, size_t len, ts_error *err);
/* Retires completed sends; returns how many are still pending, or a negative status when MPI
 * failed a send (err names the call; the failed send is retired, the others stay). */
int ts_control_progress(ts_control *c, ts_error *err);
/* Receives one message if one has arrived (any source, any tag): returns 1 and a malloc'd buffer
 * (free it) with its length, source and tag; 0 when nothing is there; a negative status on error
 * (err says which call failed). */
int ts_control_poll(ts_control *c, int *src, int *tag, void **buf, size_t *len, ts_error *err);
/* Waits, sleeping between tests, until every queued send has completed or timeout_ms passed
 * (then TS_TIMEOUT). */
int ts_control_flush(ts_control *c, int timeout_ms, ts_error *err);

#endif
