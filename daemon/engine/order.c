/* order.c - a connection's operations run in the order it submitted them.
 *
 * Collective operations are ordered by rank 0 in the order this rank forwards them, so a
 * connection's collectives keep their order; its local operations (slice puts and gets, a get's
 * later chunks, describe at the engine) would run at once, overtaking a collective of the same
 * connection still waiting for its turn. So while a connection has collectives submitted and not
 * answered, its later local requests are held here, in arrival order, and so is every request
 * after a held one; they are released when the last collective is answered: local ones run, a
 * collective is submitted (and holds what follows it).
 * One record per connection that has collectives pending or requests held (a short list: a
 * connection has at most --max-inflight requests with the engine). A closed connection's held
 * requests are dropped unanswered; at shutdown they are answered SHUTDOWN. */
#include <stdlib.h>

#include "tsd_engine.h"

struct tsd_order {
  struct tsd_order *next;
  uint64_t conn_id;
  int64_t pending;       /* collectives submitted, not answered yet */
  tsd_work *held, *tail; /* requests waiting for them, in arrival order */
};

static tsd_order *order_find(tsd_engine *e, uint64_t conn_id, bool create) {
  for (tsd_order *o = e->order; o; o = o->next)
    if (o->conn_id == conn_id)
      return o;
  if (!create)
    return NULL;
  tsd_order *o = calloc(1, sizeof *o);
  if (!o)
    return NULL;
  o->conn_id = conn_id;
  o->next = e->order;
  e->order = o;
  return o;
}

static void order_forget(tsd_engine *e, tsd_order *gone) {
  for (tsd_order **p = &e->order; *p; p = &(*p)->next)
    if (*p == gone) {
      *p = gone->next;
      free(gone);
      return;
    }
}

bool tsd_order_hold(tsd_engine *e, tsd_work *w) {
  tsd_order *o = w->conn_id ? order_find(e, w->conn_id, false) : NULL;
  /* a collective goes to the sequencer unless requests before it are held: rank 0 orders the
   * connection's collectives in the order this rank forwards them */
  if (!o || (!o->held && (o->pending == 0 || w->scope == TSD_SCOPE_COLLECTIVE)))
    return false;
  w->node.next = NULL;
  if (o->tail)
    o->tail->node.next = &w->node;
  else
    o->held = w;
  o->tail = w;
  return true;
}

int tsd_order_submitted(tsd_engine *e, uint64_t conn_id, ts_error *err) {
  if (conn_id == 0)
    return TS_OK;
  tsd_order *o = order_find(e, conn_id, true);
  if (!o)
    return ts_error_set(err, TS_NO_MEMORY,
                        "no memory to keep the order of the connection's "
                        "operations");
  o->pending++;
  return TS_OK;
}

void tsd_order_answered(tsd_engine *e, uint64_t conn_id) {
  tsd_order *o = conn_id ? order_find(e, conn_id, false) : NULL;
  if (o && o->pending > 0)
    o->pending--;
}

int tsd_order_release(tsd_engine *e, void (*run)(tsd_engine *, tsd_work *)) {
  int ran = 0;
  for (tsd_order *o = e->order, *next; o; o = next) {
    while (o->pending == 0 && o->held) {
      tsd_work *w = o->held;
      o->held = (tsd_work *)w->node.next;
      if (!o->held)
        o->tail = NULL;
      run(e, w); /* may submit a collective: pending again, the rest stays held */
      ran++;
    }
    next = o->next;
    if (o->pending == 0 && !o->held)
      order_forget(e, o);
  }
  return ran;
}

void tsd_order_drop(tsd_engine *e, uint64_t conn_id, bool answer_shutdown) {
  tsd_order *o = order_find(e, conn_id, false);
  if (!o)
    return;
  while (o->held) {
    tsd_work *w = o->held;
    o->held = (tsd_work *)w->node.next;
    if (answer_shutdown && w->req) {
      e->answering = (int)w->req->op_case;
      tsd_reply_status(e, w->conn_id, w->req->id, TS_SHUTDOWN, "the daemon is shutting down");
    }
    tsd_request_free(&w->req);
    free(w);
  }
  order_forget(e, o);
}

void tsd_order_drop_all(tsd_engine *e) {
  while (e->order)
    tsd_order_drop(e, e->order->conn_id, true);
}
