/* trace.h - the trace ring (trace.c): the points every operation reached on this rank, kept for
 * the last --trace-ring operations and answered to `tshard trace` (TraceRequest). Engine thread
 * only, like the operation log beside it. */
#ifndef TSD_TRACE_H
#define TSD_TRACE_H

#include "tsd_ops.h"

/* The points of an operation, in the order it reaches them (TraceResult.point_names). */
typedef enum tsd_trace_point {
  TSD_PT_RECEIVED,  /* the loop thread handed it to the engine */
  TSD_PT_SUBMITTED, /* submitted for ordering (collective) */
  TSD_PT_ORDERED,   /* rank 0's order of it was here */
  TSD_PT_STARTED,   /* it started to run */
  TSD_PT_PLANNED,   /* the executor began: the plan was made */
  TSD_PT_AGREED,    /* the first agreement passed */
  TSD_PT_MOVED,     /* the data moved */
  TSD_PT_COMMITTED, /* the commit agreement passed */
  TSD_PT_ENDED,     /* it ended */
  TSD_PT_ANSWERED,  /* the client's answer was handed out */
  TSD_PT_COUNT
} tsd_trace_point;

/* Whether operations are being recorded (a ring of at least one). */
bool tsd_trace_on(void);
/* Allocates the ring of n operations (0: tracing off). Frees with tsd_trace_stop. */
int tsd_trace_start(int64_t n, ts_error *err);
void tsd_trace_stop(void);
/* A collective operation starts running here (origin: this rank's submission, or NULL). */
void tsd_trace_begin(const tsd_ordered *op, const tsd_pending *origin);
/* The executor's phases, strategy and bytes of the running operation. */
void tsd_trace_exec(const ts_exec_report *rep);
/* The running operation ended with status; it goes into the ring. */
void tsd_trace_end(int status);
/* The answer to request req_id of this rank's client is being handed out (called just before
 * it is written): the last operation's answer when it is that request. */
void tsd_trace_answered(uint64_t req_id);
/* A local operation (this rank only) that was handed over at t_recv and ran from t_start to now. */
void tsd_trace_local(int op_case, const char *name, uint64_t req_id, int64_t t_recv,
                     int64_t t_start);
/* Answers a TraceRequest with the ring's operations asked, in rank 0's clock. */
void tsd_op_trace(tsd_engine *e, tsd_work *w);

#endif
