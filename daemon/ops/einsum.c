/* einsum.c - the handlers of the distributed einsum operations.
 *
 * einsum runs the planner and the execution of shard/einsum/ (libtsdein) over the engine's store
 * (collective, atomic, the same outcome on every rank). Every forward leaves a record under its
 * id (the operation's sequence number, the same on every rank): the request, so that
 * einsum_backward can plan it again, and with `keep` the kept state (local operands in their
 * compute layouts and the kernels' transposes, in the buffer pool and so under the memory limit).
 * Records without kept state are few and small: the oldest beyond RECORDS_MAX go. A record goes
 * with einsum_release, or when one of its operands is dropped. einsum_plan answers the EXPLAIN
 * from this rank's store without running anything. A client that repeats an einsum's
 * idempotency key after it ran gets its forward id and plan from the record (not its EXPLAIN). */
#include <stdlib.h>
#include <string.h>

#include "einsum.h"
#include "ts_dist_einsum.h"

#define RECORDS_MAX 256

typedef struct record {
  struct record *next;
  uint64_t id;
  char equation[160];
  int n;
  char operands[TS_DEIN_MAX_OPERANDS][TS_NAME_MAX];
  char out[TS_NAME_MAX];
  ts_attr *out_attr;
  char plan[32]; /* the candidate that ran (backward plans the same one again) */
  ts_dein_kept *kept;
  /* the answer, for a client that repeats the idempotency key after the run */
  char key[TSD_KEY_MAX];
  int64_t planned, kept_bytes;
} record;

typedef struct tsd_einsum_state {
  record *head; /* newest first */
  int count;
  /* the last forward's answer, for tsd_answer_einsum right after the run */
  uint64_t last_id;
  char last_plan[32];
  char *last_explain;
  int64_t last_planned, last_kept;
} tsd_einsum_state;

static tsd_einsum_state *state(tsd_engine *e) {
  if (!e->einsum)
    e->einsum = calloc(1, sizeof *e->einsum);
  return e->einsum;
}

static void record_free(record *r) {
  if (!r)
    return;
  ts_attr_destroy(&r->out_attr);
  ts_dein_kept_destroy(&r->kept);
  free(r);
}

void tsd_einsum_free_all(tsd_engine *e) {
  tsd_einsum_state *s = e->einsum;
  if (!s)
    return;
  while (s->head) {
    record *r = s->head;
    s->head = r->next;
    record_free(r);
  }
  free(s->last_explain);
  free(s);
  e->einsum = NULL;
}

static record *find(tsd_einsum_state *s, uint64_t id, record ***link) {
  for (record **p = &s->head; *p; p = &(*p)->next)
    if ((*p)->id == id) {
      if (link)
        *link = p;
      return *p;
    }
  return NULL;
}

/* Keeps at most RECORDS_MAX records without kept state (the oldest go). */
static void trim(tsd_einsum_state *s) {
  int light = 0;
  for (record **p = &s->head; *p;) {
    if (!(*p)->kept && ++light > RECORDS_MAX) {
      record *r = *p;
      *p = r->next;
      record_free(r);
      s->count--;
      continue;
    }
    p = &(*p)->next;
  }
}

void tsd_einsum_forget(tsd_engine *e, const char *name) {
  tsd_einsum_state *s = e->einsum;
  if (!s || !name)
    return;
  for (record **p = &s->head; *p;) {
    record *r = *p;
    bool reads = false;
    for (int i = 0; i < r->n; i++)
      reads = reads || strcmp(r->operands[i], name) == 0;
    if (reads) {
      *p = r->next;
      record_free(r);
      s->count--;
      continue;
    }
    p = &r->next;
  }
}

/* The request from the message; attr parse failures go to lst (agreed in the run). */
static void build_request(tsd_engine *e, const Tshard__EinsumRequest *q, ts_dein_request *req,
                          ts_attr **attr, int *lst, ts_error *lerr) {
  memset(req, 0, sizeof *req);
  req->equation = q->equation;
  req->n = (int)q->n_operands;
  for (int i = 0; i < req->n && i < TS_DEIN_MAX_OPERANDS; i++)
    req->operands[i] = q->operands[i];
  req->out = q->out;
  req->plan = q->plan;
  req->staging_bytes = e->cfg->staging;
  req->no_scalar = true;
  *attr = NULL;
  if (q->attr && *lst == TS_OK)
    *lst = tsd_attr_from_msg(q->attr, attr, lerr);
  req->out_attr = *attr;
}

int tsd_run_einsum(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__EinsumRequest *q = op->req->einsum;
  tsd_einsum_state *s = state(e);
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = s ? TS_OK : ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the einsum records");
  ts_attr *attr = NULL;
  ts_dein_request req;
  build_request(e, q, &req, &attr, &lst, &lerr);
  record *r = calloc(1, sizeof *r);
  if (lst == TS_OK && !r)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the einsum record");
  req.prior_status = lst;
  req.prior_err = &lerr;
  char *explain = NULL;
  ts_dein_report rep;
  ts_dein_kept *kept = NULL;
  int rc = ts_dein_run(e->store, e->world, &req, q->keep ? &kept : NULL,
                       q->explain ? &explain : NULL, &rep, err);
  if (rc) {
    ts_attr_destroy(&attr);
    free(r);
    return rc;
  }
  /* The record: the same on every rank (the allocation of r was agreed above). */
  r->id = op->seq;
  snprintf(r->equation, sizeof r->equation, "%s", q->equation);
  r->n = req.n;
  for (int i = 0; i < req.n; i++)
    snprintf(r->operands[i], sizeof r->operands[i], "%s", req.operands[i]);
  snprintf(r->out, sizeof r->out, "%s", q->out);
  snprintf(r->plan, sizeof r->plan, "%s", rep.plan);
  r->out_attr = attr;
  r->kept = kept;
  snprintf(r->key, sizeof r->key, "%s", op->req->idempotency_key);
  r->planned = rep.planned_wire_bytes;
  r->kept_bytes = rep.kept_bytes;
  r->next = s->head;
  s->head = r;
  s->count++;
  trim(s);
  free(s->last_explain);
  s->last_explain = explain;
  s->last_id = op->seq;
  snprintf(s->last_plan, sizeof s->last_plan, "%s", rep.plan);
  s->last_planned = rep.planned_wire_bytes;
  s->last_kept = rep.kept_bytes;
  return TS_OK;
}

void tsd_answer_einsum(tsd_engine *e, const tsd_pending *w) {
  tsd_einsum_state *s = e->einsum;
  Tshard__Response resp = TSHARD__RESPONSE__INIT;
  Tshard__EinsumResult res = TSHARD__EINSUM_RESULT__INIT;
  resp.id = w->req_id;
  resp.result_case = TSHARD__RESPONSE__RESULT_EINSUM;
  resp.einsum = &res;
  const record *r = NULL;
  for (const record *q = s && w->key[0] ? s->head : NULL; q && !r; q = q->next)
    if (strcmp(q->key, w->key) == 0)
      r = q;
  if (r && r->id != s->last_id) { /* a repeated key answered after other einsums ran */
    res.forward_id = r->id;
    res.plan = (char *)r->plan;
    res.explain = (char *)"";
    res.planned_wire_bytes = r->planned;
    res.kept_bytes = r->kept_bytes;
  } else if (s) {
    res.forward_id = s->last_id;
    res.plan = s->last_plan;
    res.explain = s->last_explain ? s->last_explain : (char *)"";
    res.planned_wire_bytes = s->last_planned;
    res.kept_bytes = s->last_kept;
  }
  tsd_reply_response(e, w->conn_id, &resp);
}

int tsd_run_einsum_backward(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                            ts_error *err) {
  (void)origin;
  const Tshard__EinsumBackwardRequest *q = op->req->einsum_backward;
  tsd_einsum_state *s = state(e);
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = TS_OK;
  record *r = s ? find(s, q->forward_id, NULL) : NULL;
  if (!r)
    lst = ts_error_set(&lerr, TS_NO_FORWARD,
                       "no einsum forward with id %llu (released, an operand dropped, or never "
                       "run); run the einsum again",
                       (unsigned long long)q->forward_id);
  else if ((int)q->n_grads != r->n)
    lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT,
                       "%zu gradient names for an einsum of %d operands; give one per operand "
                       "('' for none)",
                       q->n_grads, r->n);
  ts_dein_request req;
  memset(&req, 0, sizeof req);
  const char *grads[TS_DEIN_MAX_OPERANDS] = {NULL, NULL, NULL};
  if (r) {
    req.equation = r->equation;
    req.n = r->n;
    for (int i = 0; i < r->n; i++)
      req.operands[i] = r->operands[i];
    req.out = r->out;
    req.out_attr = r->out_attr;
    req.plan = r->plan;
    req.staging_bytes = e->cfg->staging;
    for (int i = 0; i < r->n && i < (int)q->n_grads; i++)
      grads[i] = q->grads[i];
  } else {
    req.equation = "";
    req.n = 1;
  }
  req.prior_status = lst;
  req.prior_err = &lerr;
  ts_dein_report rep;
  return ts_dein_backward(e->store, e->world, &req, r ? r->kept : NULL, q->grad_out, grads, &rep,
                          err);
}

/* Collective so that every rank frees the same state; unknown ids are an error everywhere. */
int tsd_run_einsum_release(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                           ts_error *err) {
  (void)origin;
  tsd_einsum_state *s = e->einsum;
  record **link = NULL;
  record *r = s ? find(s, op->req->einsum_release->forward_id, &link) : NULL;
  if (!r)
    return ts_error_set(err, TS_NO_FORWARD, "no einsum forward with id %llu to release",
                        (unsigned long long)op->req->einsum_release->forward_id);
  *link = r->next;
  record_free(r);
  s->count--;
  return TS_OK;
}

void tsd_changes_einsum(const Tshard__Request *r, tsd_changes *ch) {
  tsd_changes_add(ch, r->einsum->out);
  ch->names = true;
}

void tsd_changes_einsum_backward(const Tshard__Request *r, tsd_changes *ch) {
  for (size_t i = 0; i < r->einsum_backward->n_grads; i++)
    tsd_changes_add(ch, r->einsum_backward->grads[i]);
  ch->names = true;
}

void tsd_op_einsum_plan(tsd_engine *e, tsd_work *w) {
  const Tshard__EinsumRequest *q = w->req->einsum_plan;
  ts_error err;
  int rc = TS_OK;
  ts_attr *attr = NULL;
  ts_dein_request req;
  build_request(e, q, &req, &attr, &rc, &err);
  int ndims[TS_DEIN_MAX_OPERANDS];
  const int64_t *shapes[TS_DEIN_MAX_OPERANDS];
  const ts_attr *attrs[TS_DEIN_MAX_OPERANDS];
  ts_dtype dt = TS_F32;
  for (int i = 0; rc == TS_OK && i < req.n; i++) {
    const ts_stored *t = ts_store_find(e->store, req.operands[i]);
    if (!t) {
      rc = ts_error_set(&err, TS_NOT_FOUND, "einsum operand %d: no tensor named '%s'", i,
                        req.operands[i]);
      break;
    }
    if (i > 0 && t->dtype != dt)
      rc = ts_error_set(&err, TS_EINSUM, "einsum operands have different dtypes (%s and %s)",
                        ts_dtype_name(dt), ts_dtype_name(t->dtype));
    dt = t->dtype;
    ndims[i] = t->ndim;
    shapes[i] = t->shape;
    attrs[i] = t->attr;
  }
  ts_dein_plan *p = NULL;
  ts_dein_opts o = {attr, req.plan, e->size, e->cfg->staging};
  if (rc == TS_OK)
    rc = ts_dein_plan_create(req.equation, req.n, ndims, shapes, attrs, dt, &o, &p, &err);
  char *text = NULL;
  if (rc == TS_OK && !(text = ts_dein_plan_explain(p)))
    rc = ts_error_set(&err, TS_NO_MEMORY, "no memory for the explain text");
  if (rc) {
    tsd_reply_status(e, w->conn_id, w->req->id, rc, err.msg);
  } else {
    Tshard__Response resp = TSHARD__RESPONSE__INIT;
    Tshard__EinsumResult res = TSHARD__EINSUM_RESULT__INIT;
    resp.id = w->req->id;
    resp.result_case = TSHARD__RESPONSE__RESULT_EINSUM;
    resp.einsum = &res;
    res.plan = (char *)ts_dein_plan_chosen(p)->name;
    res.explain = text;
    res.planned_wire_bytes = ts_dein_plan_chosen(p)->wire_bytes;
    tsd_reply_response(e, w->conn_id, &resp);
  }
  free(text);
  ts_dein_plan_destroy(&p);
  ts_attr_destroy(&attr);
}
