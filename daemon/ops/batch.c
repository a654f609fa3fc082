/* batch.c - the batched operations reshard_many, drop_many and create_many: each is ONE
 * collective operation over many tensors, ordered once by rank 0 and atomic over all of them
 * (every tensor changes or none, the same outcome on every rank).
 *
 * Both check the batch on every rank against the stored tensors before anything moves or any
 * buffer is had: every name exists, and the batch is within --batch-max-tensors and
 * --batch-max-bytes (the named tensors' whole bytes); the wire layer already refused empty
 * batches and a name given twice. reshard_many then plans every tensor and runs them through
 * ts_store_reshard_many (shard/batch.c), which agrees once on the plans, runs the tensors'
 * transfers one after another (their pieces are not yet coalesced into one message per pair of
 * ranks) and replaces every tensor only when all succeeded. drop_many agrees once and drops them
 * all. The per-tensor results of the last reshard_many (strategy, bytes) answer its clients.
 * create_many checks every item as create does (exist_ok: one stored as asked is left, one that
 * differs refused naming every difference, or with replace made anew beside it), makes them,
 * agrees once, and then swaps the replacements in, or drops everything it made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "einsum.h"
#include "handlers.h"
#include "oplog.h"
#include "ts_comm.h"
#include "ts_rules.h"

static const char *tag_of(const Tshard__Layout *l) { return l && l->tag ? l->tag : ""; }

/* The per-tensor results of the last reshard_many, for its answers (by the operation's hash). */
static struct {
  uint64_t hash;
  bool valid;
  int n;
  ts_exec_report *reports;
  char (*names)[TS_NAME_MAX];
} last;

uint64_t tsd_tensor_bytes(const ts_stored *t) {
  uint64_t b = ts_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++)
    b *= (uint64_t)t->shape[d];
  return b;
}

/* The checks against the store, the same on every rank: the limits, then every name. */
int tsd_batch_check(tsd_engine *e, size_t n, char *const *names, ts_error *err) {
  if ((int64_t)n > e->cfg->batch_max_tensors)
    return ts_error_set(err, TS_LIMIT,
                        "a batch of %zu tensors; at most %lld (--batch-max-tensors): split it "
                        "or start the daemons with a larger --batch-max-tensors",
                        n, (long long)e->cfg->batch_max_tensors);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    const ts_stored *t = ts_store_find(e->store, names[i]);
    if (!t)
      return ts_error_set(err, TS_NOT_FOUND,
                          "no tensor named '%s' (item %zu of the batch); nothing was changed",
                          names[i], i);
    total += tsd_tensor_bytes(t);
  }
  if (total > (uint64_t)e->cfg->batch_max_bytes)
    return ts_error_set(err, TS_LIMIT,
                        "a batch of %llu bytes; at most %lld (--batch-max-bytes): split it or "
                        "start the daemons with a larger --batch-max-bytes",
                        (unsigned long long)total, (long long)e->cfg->batch_max_bytes);
  return TS_OK;
}

/* Builds this rank's items: the target attributes and strategies parsed (errors name the
 * tensor). */
static int build_items(const Tshard__ReshardManyRequest *q, ts_batch_item *items, ts_attr **attrs,
                       ts_error *err) {
  ts_strategy dflt = TS_STRATEGY_AUTO;
  ts_error lerr;
  if (q->strategy[0] && ts_strategy_parse(q->strategy, &dflt, &lerr))
    return ts_error_set(err, lerr.code, "the batch's strategy: %s", lerr.msg);
  for (size_t i = 0; i < q->n_items; i++) {
    const Tshard__ReshardItem *it = q->items[i];
    items[i].name = it->name;
    items[i].layout_tag = tag_of(it->layout);
    items[i].strategy = dflt;
    int rc = it->strategy[0] ? ts_strategy_parse(it->strategy, &items[i].strategy, &lerr) : 0;
    if (!rc)
      rc = tsd_attr_from_msg(it->attr, &attrs[i], &lerr);
    items[i].cast = it->dtype[0] != '\0';
    if (!rc && items[i].cast)
      rc = ts_dtype_parse(it->dtype, &items[i].dtype, &lerr);
    if (rc)
      return ts_error_set(err, rc, "tensor '%s' of the batch: %s", it->name, lerr.msg);
    items[i].tgt = attrs[i];
  }
  return TS_OK;
}

int tsd_run_reshard_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__ReshardManyRequest *q = op->req->reshard_many;
  size_t n = q->n_items;
  ts_error lerr;
  ts_error_clear(&lerr);
  last.valid = false;
  tsd_oplog_batch(n);
  char **names = calloc(n ? n : 1, sizeof *names);
  int lst = names ? TS_OK : ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the batch");
  for (size_t i = 0; names && i < n; i++)
    names[i] = q->items[i]->name;
  if (!lst)
    lst = tsd_batch_check(e, n, names, &lerr);
  ts_batch_item *items = NULL;
  ts_attr **attrs = NULL;
  ts_exec_report *reports = NULL;
  if (!lst) { /* within the limits: the per-tensor arrays are had now */
    items = calloc(n, sizeof *items);
    attrs = calloc(n, sizeof *attrs);
    reports = calloc(n, sizeof *reports);
    if (!items || !attrs || !reports)
      lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for a batch of %zu tensors", n);
  }
  if (!lst)
    lst = build_items(q, items, attrs, &lerr);
  int fail_item = tsd_fault_fire(TSD_FAULT_BATCH_TRANSFER) ? (int)n - 1 : -1;
  int rc = ts_store_reshard_many(e->store, e->world, lst ? 0 : (int)n, items, e->cfg->staging, lst,
                                 &lerr, fail_item, reports, err);
  uint64_t moved = 0;
  for (size_t i = 0; rc == TS_OK && i < n; i++) {
    tsd_record_exec(e, &reports[i]);
    moved += (uint64_t)(reports[i].bytes_sent + reports[i].bytes_received);
  }
  if (rc == TS_OK && n)
    tsd_oplog_note(reports[0].strategy, moved);
  free(last.reports), free(last.names);
  last.reports = rc == TS_OK ? reports : NULL;
  last.names = rc == TS_OK ? calloc(n, sizeof *last.names) : NULL;
  for (size_t i = 0; last.names && i < n; i++)
    snprintf(last.names[i], sizeof last.names[i], "%s", names[i]);
  last.valid = rc == TS_OK && last.names;
  last.hash = op->hash;
  last.n = (int)n;
  if (rc)
    free(reports);
  for (size_t i = 0; attrs && i < n; i++)
    ts_attr_destroy(&attrs[i]);
  free(attrs), free(items), free(names);
  return rc;
}

void tsd_answer_reshard_many(tsd_engine *e, const tsd_pending *w) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__ReshardManyResult res = TSHARD__RESHARD_MANY_RESULT__INIT;
  r.id = w->req_id;
  r.message = "";
  r.result_case = TSHARD__RESPONSE__RESULT_RESHARD_MANY;
  r.reshard_many = &res;
  int n = last.valid && last.hash == w->hash ? last.n : 0; /* else: a retry answered by its key */
  Tshard__ReshardItemResult *it = calloc((size_t)(n ? n : 1), sizeof *it);
  Tshard__ReshardItemResult **itp = calloc((size_t)(n ? n : 1), sizeof *itp);
  if (!it || !itp)
    n = 0;
  for (int i = 0; i < n; i++) {
    tshard__reshard_item_result__init(&it[i]);
    it[i].name = last.names[i];
    it[i].strategy = (char *)ts_strategy_name(last.reports[i].strategy);
    it[i].bytes_sent = (uint64_t)last.reports[i].bytes_sent;
    it[i].bytes_received = (uint64_t)last.reports[i].bytes_received;
    itp[res.n_items++] = &it[i];
  }
  res.items = itp;
  tsd_reply_response(e, w->conn_id, &r);
  free(it), free(itp);
}

int tsd_run_drop_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__DropManyRequest *q = op->req->drop_many;
  ts_error lerr;
  ts_error_clear(&lerr);
  tsd_oplog_batch(q->n_names);
  int lst = tsd_batch_check(e, q->n_names, q->names, &lerr);
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  for (size_t i = 0; rc == TS_OK && i < q->n_names; i++) {
    ts_store_drop(e->store, q->names[i], NULL); /* checked above: cannot fail */
    tsd_einsum_forget(e, q->names[i]);
  }
  return rc;
}

/* The names: more than the change set holds turn it into "any tensor" (tsd_changes_add). */
void tsd_changes_reshard_many(const Tshard__Request *r, tsd_changes *ch) {
  for (size_t i = 0; i < r->reshard_many->n_items; i++)
    tsd_changes_add(ch, r->reshard_many->items[i]->name);
}

void tsd_changes_drop_many(const Tshard__Request *r, tsd_changes *ch) {
  for (size_t i = 0; i < r->drop_many->n_names; i++)
    tsd_changes_add(ch, r->drop_many->names[i]);
  ch->names = true;
}

/* ---------------------------------------------------------------------------------------------
 * create_many, and the check create shares */

/* Appends ", its WHAT is HAVE (asked WANT)" to the differences. */
static void differ(char *buf, size_t cap, const char *what, const char *have, const char *want) {
  size_t n = strlen(buf);
  int k = snprintf(buf + n, cap - n, "%sits %s is %s (asked %s)", n ? "; " : "", what, have, want);
  if (k < 0 || (size_t)k >= cap - n) /* cut */
    snprintf(buf + cap - 5, 5, " ...");
}

/* The differences between a stored tensor and a create of its name ("" : none). */
static void differences(const ts_stored *t, const Tshard__CreateRequest *c, ts_dtype dt,
                        const ts_attr *a, char *buf, size_t cap) {
  char have[200], want[200];
  buf[0] = '\0';
  if (t->dtype != dt)
    differ(buf, cap, "dtype", ts_dtype_name(t->dtype), ts_dtype_name(dt));
  if (t->ndim != (int)c->n_shape || memcmp(t->shape, c->shape, sizeof(int64_t) * c->n_shape) != 0) {
    ts_shape_text(t->ndim, t->shape, have, sizeof have);
    ts_shape_text((int)c->n_shape, c->shape, want, sizeof want);
    differ(buf, cap, "shape", have, want);
  }
  if (!ts_attr_equal(t->attr, a)) {
    ts_attr_format(t->attr, have, sizeof have);
    ts_attr_format(a, want, sizeof want);
    differ(buf, cap, "attribute", have, want);
  }
  const char *tag = c->layout && c->layout->tag ? c->layout->tag : "";
  if (strcmp(t->layout_tag, tag) != 0)
    differ(buf, cap, "layout", t->layout_tag[0] ? t->layout_tag : "row-major",
           tag[0] ? tag : "row-major");
}

int tsd_create_check(tsd_engine *e, const Tshard__CreateRequest *c, bool replace, ts_dtype *dt,
                     ts_attr **attr, bool *skip, bool *swap, ts_error *err) {
  *skip = *swap = false;
  *attr = NULL;
  int rc = ts_dtype_parse(c->dtype, dt, err);
  if (!rc)
    rc = tsd_attr_from_msg(c->attr, attr, err);
  if (!rc && c->n_shape <= TS_MAX_DIMS) /* dims from the end, as the store keeps them */
    rc = ts_attr_normalize(*attr, (int)c->n_shape, err);
  const ts_stored *t = rc ? NULL : ts_store_find(e->store, c->name);
  if (!t)
    return rc;
  char diff[400];
  differences(t, c, *dt, *attr, diff, sizeof diff);
  if (diff[0] ? replace : c->exist_ok) {
    *skip = !diff[0];
    *swap = diff[0];
    return TS_OK;
  }
  if (!c->exist_ok)
    return ts_error_set(err, TS_EXISTS,
                        "a tensor named '%s' already exists; drop it first, or "
                        "give exist_ok to accept one stored as asked",
                        c->name);
  return ts_error_set(err, TS_EXISTS,
                      "a tensor named '%s' exists but not as asked: %s; drop "
                      "it first",
                      c->name, diff);
}

/* The name an item is made under: its own, or beside the tensor it replaces. */
static void made_name(const Tshard__CreateManyRequest *q, size_t i, bool swap, char *out,
                      size_t cap) {
  if (swap)
    snprintf(out, cap, "%s create_many %zu", TS_RULES_RESERVED_PREFIX, i);
  else
    snprintf(out, cap, "%s", q->items[i]->name);
}

/* Every item checked and made (replacements beside their tensors), agreed; on failure every
 * made one dropped, else the replacements swapped in at once. */
int tsd_run_create_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__CreateManyRequest *q = op->req->create_many;
  size_t n = q->n_items;
  ts_error lerr;
  ts_error_clear(&lerr);
  tsd_oplog_batch(n);
  bool *skip = calloc(n ? n : 1, sizeof *skip), *swap = calloc(n ? n : 1, sizeof *swap);
  size_t made = 0;
  int lst = skip && swap ? TS_OK : ts_error_set(&lerr, TS_NO_MEMORY, "no memory for a batch");
  if (!lst && (int64_t)n > e->cfg->batch_max_tensors)
    lst = ts_error_set(&lerr, TS_LIMIT,
                       "a batch of %zu tensors; at most %lld "
                       "(--batch-max-tensors): split it",
                       n, (long long)e->cfg->batch_max_tensors);
  uint64_t bytes = 0; /* as a put_many of them would count them */
  for (size_t i = 0; !lst && i < n; i++) {
    ts_dtype dt;
    uint64_t b = ts_dtype_parse(q->items[i]->dtype, &dt, NULL) ? 0 : ts_dtype_size(dt);
    for (size_t d = 0; d < q->items[i]->n_shape; d++)
      b *= (uint64_t)q->items[i]->shape[d];
    bytes += b;
  }
  if (!lst && bytes > (uint64_t)e->cfg->batch_max_bytes)
    lst = ts_error_set(&lerr, TS_LIMIT,
                       "a batch of %llu bytes; at most %lld "
                       "(--batch-max-bytes): split it",
                       (unsigned long long)bytes, (long long)e->cfg->batch_max_bytes);
  for (size_t i = 0; !lst && i < n; i++) {
    const Tshard__CreateRequest *c = q->items[i];
    ts_attr *a = NULL;
    ts_dtype dt;
    ts_error ierr;
    char nm[TS_NAME_MAX];
    int irc = tsd_create_check(e, c, q->replace, &dt, &a, &skip[i], &swap[i], &ierr);
    made_name(q, i, swap[i], nm, sizeof nm);
    if (!irc && !skip[i])
      irc = ts_store_add(e->store, nm, (int)c->n_shape, c->shape, dt, a, tag_of(c->layout), NULL,
                         &ierr);
    ts_attr_destroy(&a);
    if (irc)
      lst = ts_error_set(&lerr, irc, "tensor '%s' of the batch: %.400s", c->name, ierr.msg);
    else
      made = i + 1;
  }
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  for (size_t i = 0; i < made; i++) {
    char nm[TS_NAME_MAX];
    made_name(q, i, swap[i], nm, sizeof nm);
    if (skip[i])
      continue;
    if (!rc && swap[i]) { /* agreed: the same on every rank */
      ts_store_swap(e->store, ts_store_find(e->store, q->items[i]->name),
                    ts_store_find(e->store, nm));
      tsd_einsum_forget(e, q->items[i]->name);
    }
    if (rc || swap[i])
      ts_store_drop(e->store, nm, NULL);
  }
  free(skip), free(swap);
  return rc;
}

void tsd_changes_create_many(const Tshard__Request *r, tsd_changes *ch) {
  for (size_t i = 0; i < r->create_many->n_items; i++)
    tsd_changes_add(ch, r->create_many->items[i]->name);
  ch->names = true;
}
