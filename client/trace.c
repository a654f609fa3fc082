/* trace.c - tshard_trace_get: the operations one daemon recorded in its trace ring, with the times
 * each reached each point of its way (rank 0's clock). The answer is checked before it is copied:
 * the daemon's point names must be this client's, one time per point, in order. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

static const char *const points[TSHARD_TRACE_POINTS] = {
    "received", "submitted", "ordered",   "started", "planned",
    "agreed",   "moved",     "committed", "ended",   "answered",
};

const char *tshard_trace_point_name(int i) {
  return i >= 0 && i < TSHARD_TRACE_POINTS ? points[i] : NULL;
}

void tshard_trace_clear(tshard_trace *t) {
  if (!t)
    return;
  free(t->ops);
  memset(t, 0, sizeof *t);
}

/* Whether the daemon's points are this client's; else why. */
static bool points_ok(const Tshard__TraceResult *x, char *why, size_t cap) {
  if (x->n_point_names != TSHARD_TRACE_POINTS) {
    snprintf(why, cap,
             "the daemon's trace has %zu points, this client knows %d: use a client of "
             "the daemons' version",
             x->n_point_names, TSHARD_TRACE_POINTS);
    return false;
  }
  for (int i = 0; i < TSHARD_TRACE_POINTS; i++)
    if (strcmp(x->point_names[i], points[i]) != 0) {
      snprintf(why, cap, "the daemon's trace point %d is '%.32s', this client's '%s'", i,
               x->point_names[i], points[i]);
      return false;
    }
  for (size_t k = 0; k < x->n_ops; k++)
    if (x->ops[k]->n_points != TSHARD_TRACE_POINTS) {
      snprintf(why, cap, "the daemon's traced operation %zu has %zu times for %d points", k,
               x->ops[k]->n_points, TSHARD_TRACE_POINTS);
      return false;
    }
  return true;
}

static void copy_op(const Tshard__TraceOp *o, tshard_trace_op *d) {
  d->seq = o->seq;
  d->request_id = o->request_id;
  snprintf(d->kind, sizeof d->kind, "%s", o->kind);
  snprintf(d->name, sizeof d->name, "%s", o->name);
  snprintf(d->strategy, sizeof d->strategy, "%s", o->strategy);
  d->status = o->status;
  d->origin = o->origin;
  d->bytes_sent = o->bytes_sent;
  d->bytes_received = o->bytes_received;
  memcpy(d->points, o->points, sizeof d->points);
}

int tshard_trace_get(tshard_client *c, uint32_t last, int64_t within_ns, tshard_trace *out) {
  if (!c || !out || within_ns < 0)
    return TS_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__TraceRequest q = TSHARD__TRACE_REQUEST__INIT;
  q.last = last;
  q.within_ns = within_ns;
  req.op_case = TSHARD__REQUEST__OP_TRACE;
  req.trace = &q;
  Tshard__Response *r;
  int rc = tsc_call_expect(c, &req, TSHARD__RESPONSE__RESULT_TRACE,
                           "trace answered without a trace", &r);
  char why[256];
  if (rc == TS_OK && !points_ok(r->trace, why, sizeof why))
    rc = tsc_fail(c, TS_PROTOCOL, "%s", why);
  const Tshard__TraceResult *x = rc == TS_OK ? r->trace : NULL;
  if (x && x->n_ops > 0 && !(out->ops = calloc(x->n_ops, sizeof *out->ops)))
    rc = tsc_fail(c, TS_NO_MEMORY, "no memory for %zu traced operations", x->n_ops);
  if (rc == TS_OK) {
    out->rank = x->rank;
    out->clock_offset_ns = x->clock_offset_ns;
    out->clock_rtt_ns = x->clock_rtt_ns;
    out->dropped = x->dropped;
    out->ring = x->ring;
    snprintf(out->host, sizeof out->host, "%s", x->host);
    for (size_t k = 0; k < x->n_ops; k++)
      copy_op(x->ops[k], &out->ops[k]);
    out->nops = (int)x->n_ops;
  }
  if (r)
    tsc_free(c, r);
  return rc;
}
