/* observe.c - the internal observe operation behind the live page's ranks (the metrics
 * endpoint's GET /api/ranks on rank 0). While the page is watched (daemon/view.c), rank 0 orders
 * it about once a second; it runs in rank 0's order between the clients' operations like any
 * collective one. Every rank fills its own row of the job's table (memory account, tensors,
 * answers, collectives, connections, requests in flight) and one allreduce sums the rows, so
 * rank 0 holds every rank's numbers, which it publishes for the HTTP thread. Nobody watching,
 * it is never ordered. */
#include <stdlib.h>

#include "handlers.h"

static struct {
  int64_t next_ms; /* rank 0: not before then */
  bool ordered;    /* rank 0: one ordered and not run yet */
} obs;

static void own_row(int64_t *v) {
  uint64_t in_use = tsd_gauge_get(TSD_G_MEM_IN_USE), staging = tsd_gauge_get(TSD_G_MEM_STAGING);
  v[TSD_VIEW_HELD] = (int64_t)(in_use > staging ? in_use - staging : 0);
  v[TSD_VIEW_STAGING] = (int64_t)staging;
  v[TSD_VIEW_CACHED] = (int64_t)tsd_gauge_get(TSD_G_MEM_CACHED);
  v[TSD_VIEW_LIMIT] = (int64_t)tsd_gauge_get(TSD_G_MEM_LIMIT);
  v[TSD_VIEW_PEAK] = (int64_t)tsd_gauge_get(TSD_G_MEM_PEAK);
  v[TSD_VIEW_TENSORS] = (int64_t)tsd_gauge_get(TSD_G_TENSORS);
  v[TSD_VIEW_STORED] = (int64_t)tsd_gauge_get(TSD_G_STORED_BYTES);
  v[TSD_VIEW_ANSWERS] = (int64_t)tsd_counted_answers_total();
  v[TSD_VIEW_COLLECTIVES] = (int64_t)tsd_gauge_get(TSD_G_COLLECTIVE_OPS);
  v[TSD_VIEW_CONNECTIONS] = (int64_t)tsd_gauge_get(TSD_G_CONNECTIONS);
  v[TSD_VIEW_INFLIGHT] = (int64_t)tsd_gauge_get(TSD_G_INFLIGHT);
}

int tsd_run_observe(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)op, (void)origin;
  if (e->rank == 0)
    obs.ordered = false;
  int rc = ts_comm_agree(ts_world_comm(e->world), TS_OK, NULL, err);
  if (rc)
    return rc;
  int n = e->size;
  int64_t *v = calloc((size_t)n * TSD_VIEW_FIELDS, sizeof *v);
  int lst = v ? TS_OK : TS_NO_MEMORY;
  ts_error lerr;
  ts_error_clear(&lerr);
  if (!v)
    ts_error_set(&lerr, TS_NO_MEMORY, "observe: no memory for the job's table of %d ranks", n);
  if ((rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err))) {
    free(v);
    return rc;
  }
  own_row(v + (size_t)e->rank * TSD_VIEW_FIELDS);
  rc = ts_comm_allreduce_i64(ts_world_comm(e->world), v, n * TSD_VIEW_FIELDS, TS_COMM_SUM, err);
  if (rc == TS_OK && e->rank == 0)
    tsd_view_publish(v, n, tsd_view_now_ms());
  free(v);
  return rc;
}

/* An observe built here and ordered by rank 0 (no client: conn 0 answers nobody). */
static bool order_observe(tsd_engine *e) {
  Tshard__Request *req = malloc(sizeof *req);
  Tshard__ObserveRequest *q = malloc(sizeof *q);
  if (!req || !q) {
    free(req), free(q);
    return false; /* asked again at the next period */
  }
  tshard__request__init(req);
  tshard__observe_request__init(q);
  req->op_case = TSHARD__REQUEST__OP_OBSERVE;
  req->observe = q;
  tsd_submit(e, 0, req, NULL, 0); /* freed by protobuf-c's free_unpacked, default allocator */
  return true;
}

static bool observing(const tsd_engine *e, int64_t now) {
  return e->rank == 0 && !e->stopping && e->cfg->metrics[0] && e->cfg->metrics_page &&
         tsd_view_watched(now);
}

bool tsd_observe_tick(tsd_engine *e) {
  int64_t now = tsd_view_now_ms();
  if (!observing(e, now) || obs.ordered || now < obs.next_ms)
    return false;
  obs.next_ms = now + TSD_VIEW_PERIOD_MS;
  obs.ordered = order_observe(e);
  return obs.ordered;
}

int64_t tsd_observe_due_ms(tsd_engine *e) {
  int64_t now = tsd_view_now_ms();
  if (!observing(e, now) || obs.ordered)
    return -1;
  return obs.next_ms > now ? obs.next_ms - now : 0;
}
