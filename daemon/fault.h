/* fault.h - fault injection for tests (fault.c): compiled in, off unless TSHARD_FAULT names
 * faults when the daemon starts. */
#ifndef TSD_FAULT_H
#define TSD_FAULT_H

#include <stdbool.h>

#include "tshard_errors.h"

typedef enum tsd_fault_kind {
  TSD_FAULT_REPLY_QUEUE,      /* an answer cannot be queued (as out of memory) */
  TSD_FAULT_ORDER_DECODE,     /* an ORDER from rank 0 does not decode */
  TSD_FAULT_AGREEMENT_SILENT, /* this rank stops answering an operation's agreement */
  TSD_FAULT_COUNT
} tsd_fault_kind;

/* Reads TSHARD_FAULT once: a comma-separated list of KIND[@RANK][*COUNT] (KIND: reply-queue,
 * order-decode, agreement-silent; RANK: only that rank, else every rank; COUNT: how many times,
 * default 1). Unset or empty: no fault. */
int tsd_fault_init(int rank, ts_error *err);
/* How many more times the fault fires on this rank (takes them all). */
int tsd_fault_take_all(tsd_fault_kind k);
/* Whether the fault fires now (takes one). The engine thread only, after tsd_fault_init. */
bool tsd_fault_fire(tsd_fault_kind k);

#endif
