/* batch_io.c - put_many and get_many: many whole tensors in or out through ONE request and ONE
 * collective operation, so that a model's many small tensors cost about one operation's fixed
 * cost (ordering by rank 0, agreements, answers) rather than one per tensor.
 *
 * Both are checked whole before anything moves, the same on every rank: --batch-max-tensors,
 * every name exists, --batch-max-bytes (tsd_batch_check), then every item (a put's declared dtype
 * and shape as a single put checks them, a get's expected bytes); the wire layer already refused
 * empty batches and a name given twice. The data takes the single put's and get's paths:
 *
 * - The client's own memory (every item names it; a client on this node): put_many is ordered
 *   without data and every rank reads its piece of every tensor straight from the client into
 *   new slices, then ONE agreement swaps all of them in or frees all of them
 *   (ts_scatter_gather_direct_many); get_many writes every rank's pieces straight into the
 *   client's arrays, then one agreement. Tensors the direct path does not serve (partial
 *   placements, blocked layouts) go through the asking rank: the put reads them into staging
 *   before ordering, the get gathers them there and writes them to the client.
 * - Otherwise the items' bytes travel one after another in item order, in chunks (frames or the
 *   connection's shared segment) like a single put's data; the complete data is staged on the
 *   asking rank, converted when asked, and every tensor is scattered from it into a new slice;
 *   the tensors are replaced only when every scatter succeeded. A get_many gathers every tensor
 *   into one copy (in the shared segment when it fits) that the client reads in chunks.
 *
 * On one node with single copies (and no partial placement or blocked layout in the batch) the
 * staged data moves in ONE region exchange for every tensor between two agreements
 * (ts_scatter_gather_many); elsewhere each tensor's scatter or gather still agrees on its own
 * inside the one operation. */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "oplog.h"
#include "put_verify.h"

/* The names a put_many's staging and a get_many's copy go by in the connection's session
 * (reserved: no tensor can be named so). */
#define PUT_MANY_STAGING "__tshard put_many"
#define GET_MANY_COPY "__tshard get_many"

/* Whether t's attribute is the one of m (the wire checked m parses). */
static int attr_is(const ts_stored *t, const Tshard__DistAttr *m, ts_error *err) {
  ts_attr *a = NULL;
  int rc = tsd_attr_from_msg(m, &a, err);
  if (!rc) /* dims from the end, as the store keeps them */
    rc = ts_attr_normalize(a, t->ndim, err);
  if (!rc && !ts_attr_equal(a, t->attr)) {
    char have[200], want[200];
    ts_attr_format(t->attr, have, sizeof have);
    ts_attr_format(a, want, sizeof want);
    rc = ts_error_set(err, TS_BAD_ATTRIBUTE,
                      "its attribute is %s, not %s as the put asks; "
                      "nothing was stored",
                      have, want);
  }
  ts_attr_destroy(&a);
  return rc;
}

/* A put_many item's tensor (present: tsd_batch_check ran first), its source dtype and its data
 * bytes; the checks of a single put, the error naming the tensor. */
static int put_item(tsd_engine *e, const Tshard__PutManyItem *it, bool convert, ts_stored **out,
                    ts_dtype *from, bool *conv, uint64_t *data_bytes, ts_error *err) {
  ts_error lerr;
  ts_stored *t = *out = ts_store_find(e->store, it->name);
  uint64_t expected = tsd_tensor_bytes(t), total = expected;
  int rc = tsd_put_source_dtype(t, it->dtype, convert, from, conv, &lerr);
  if (!rc && it->client_memory) {
    total = it->client_memory->bytes;
  } else if (!rc && it->dtype[0]) { /* the declared data's bytes */
    total = ts_dtype_size(*from);
    for (size_t d = 0; d < it->n_shape; d++)
      total *= (uint64_t)(it->shape[d] > 0 ? it->shape[d] : 0);
  }
  if (!rc)
    rc = tsd_put_check(t, false, "", it->dtype, it->n_shape, it->shape, *conv, total, expected,
                       &lerr);
  if (!rc && it->attr && (it->attr->n_mesh_shape || (it->attr->text && it->attr->text[0])))
    rc = attr_is(t, it->attr, &lerr);
  *data_bytes = total;
  return rc ? ts_error_set(err, rc, "tensor '%s' of the batch: %s", it->name, lerr.msg) : TS_OK;
}

/* The checks of a put_many against the store: the batch, then every item. *data_total: the
 * items' data bytes (as sent), *tensor_total: the tensors' bytes (after conversion). */
static int put_many_check(tsd_engine *e, const Tshard__PutManyRequest *q, uint64_t *data_total,
                          uint64_t *tensor_total, ts_error *err) {
  *data_total = *tensor_total = 0;
  char **names = calloc(q->n_items ? q->n_items : 1, sizeof *names);
  if (!names)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a batch of %zu", q->n_items);
  for (size_t i = 0; i < q->n_items; i++)
    names[i] = q->items[i]->name;
  int rc = tsd_batch_check(e, q->n_items, names, err);
  free(names);
  for (size_t i = 0; !rc && i < q->n_items; i++) {
    ts_stored *t;
    ts_dtype from;
    bool conv;
    uint64_t bytes;
    rc = put_item(e, q->items[i], q->convert, &t, &from, &conv, &bytes, err);
    *data_total += bytes;
    *tensor_total += tsd_tensor_bytes(t);
  }
  return rc;
}

/* Whether every item's tensor goes by the direct path (every rank copies its own piece). */
static bool all_direct(tsd_engine *e, const Tshard__PutManyItem *const *items, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!ts_scatter_direct_applies(e->world, ts_store_find(e->store, items[i]->name)))
      return false;
  return true;
}

/* A put_many naming the client's memory (checked): ordered without data when every tensor goes
 * by the direct path, else read here into staging (item after item) and put as staged data. */
static void direct_put_many(tsd_engine *e, tsd_work *w, uint64_t total) {
  Tshard__Request *req = w->req;
  Tshard__PutManyRequest *q = req->put_many;
  ts_error err;
  int rc = TS_OK;
  if (q->n_items) /* whether this daemon may reach the client (each copy checks its range) */
    rc = tsd_client_probe(q->items[0]->client_memory, &err);
  uint8_t *staging = NULL;
  if (!rc && !all_direct(e, (const Tshard__PutManyItem *const *)q->items, q->n_items)) {
    staging = tsd_buf_take(e, total, "the put_many's staging", &err);
    rc = staging ? TS_OK : err.code;
    for (uint64_t i = 0, off = 0; !rc && i < q->n_items; i++) {
      const Tshard__ClientMemory *m = q->items[i]->client_memory;
      rc = tsd_client_copy(m, false, staging + off, m->bytes, &err);
      off += m->bytes;
    }
    for (size_t i = 0; !rc && i < q->n_items; i++) { /* staged data from here on */
      tshard__client_memory__free_unpacked(q->items[i]->client_memory, NULL);
      q->items[i]->client_memory = NULL;
    }
  }
  if (!rc && e->stopping)
    rc = ts_error_set(&err, TS_SHUTDOWN, "the daemon is shutting down");
  if (rc) {
    tsd_buf_give(e, staging, total);
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
    return;
  }
  w->req = NULL;
  tsd_submit(e, w->conn_id, req, staging, staging ? total : 0);
}

/* The complete staged data converted to the tensors' dtypes, item after item (convert asked);
 * NULL with err when the buffer cannot be had or a value would not survive its conversion
 * (BAD_DTYPE naming the tensor; nothing is stored). Frees the staging either way. */
static uint8_t *convert_staged(tsd_engine *e, const Tshard__PutManyRequest *q, uint8_t *staged,
                               uint64_t staged_bytes, uint64_t tensor_total, ts_error *err) {
  uint8_t *out = tsd_buf_take(e, tensor_total, "the put_many's converted copy", err);
  uint64_t at = 0, to = 0;
  for (size_t i = 0; out && i < q->n_items; i++) {
    ts_stored *t;
    ts_dtype from;
    bool conv;
    uint64_t bytes;
    if (put_item(e, q->items[i], true, &t, &from, &conv, &bytes, err) ||  /* checked: cannot */
        (conv && tsd_put_values_fit(t, from, staged + at, bytes, err))) { /* a value would change */
      tsd_buf_give(e, out, tensor_total);
      out = NULL;
      break;
    }
    ts_convert(out + to, t->dtype, staged + at, from, (size_t)(bytes / ts_dtype_size(from)));
    at += bytes;
    to += tsd_tensor_bytes(t);
  }
  tsd_buf_give(e, staged, staged_bytes);
  return out;
}

void tsd_handle_put_many(tsd_engine *e, tsd_work *w) {
  Tshard__Request *req = w->req;
  Tshard__PutManyRequest *q = req->put_many;
  ts_error err;
  tsd_session *c = tsd_session_get(e, w->conn_id, true);
  if (!c) {
    tsd_reply_status(e, w->conn_id, req->id, TS_NO_MEMORY, "no memory for the connection state");
    return;
  }
  bool direct = q->n_items && q->items[0]->client_memory;
  uint64_t data_total = q->total_bytes, tensor_total = 0;
  if (q->offset == 0 || direct) {
    tsd_session_put_reset(e, c); /* a put in progress is abandoned */
    int rc = put_many_check(e, q, &data_total, &tensor_total, &err);
    if (!rc && !direct && q->total_bytes != data_total)
      rc = ts_error_set(&err, TS_INVALID_ARGUMENT,
                        "the put_many's total_bytes is %llu but its %zu items' data add up to "
                        "%llu bytes",
                        (unsigned long long)q->total_bytes, q->n_items,
                        (unsigned long long)data_total);
    if (rc) {
      tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
      return;
    }
  }
  if (direct) {
    direct_put_many(e, w, data_total);
    return;
  }
  const uint8_t *src = q->data.data;
  size_t len = q->data.len;
  if (q->shm) {
    uint8_t *p;
    uint64_t n;
    if (tsd_shm_region(c, q->shm, q->shm->bytes, &p, &n, &err)) {
      tsd_session_put_reset(e, c);
      tsd_reply_status(e, w->conn_id, req->id, err.code, err.msg);
      return;
    }
    src = p;
    len = (size_t)q->shm->bytes;
  }
  tsd_put_target tgt = {PUT_MANY_STAGING, false, "", NULL, data_total};
  int rc = tsd_session_put_stage(e, c, &tgt, q->offset, q->total_bytes, src, len, &err);
  if (rc) {
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
    return;
  }
  if (!tsd_session_put_done(c)) {
    tsd_reply_put(e, w->conn_id, req->id, tsd_session_put_received(c), false);
    return;
  }
  uint64_t bytes;
  uint8_t *staging = tsd_session_put_take(c, &bytes, NULL);
  if (q->convert) { /* the tensors may have changed since offset 0: checked again */
    rc = put_many_check(e, q, &data_total, &tensor_total, &err);
    if (!rc && data_total != bytes)
      rc = ts_error_set(&err, TS_INVALID_ARGUMENT,
                        "a tensor of the put_many changed during "
                        "its transfer; put it again");
    if (!rc) { /* convert_staged frees the staging either way */
      staging = convert_staged(e, q, staging, bytes, tensor_total, &err);
      bytes = tensor_total;
      rc = staging ? TS_OK : err.code;
    }
  }
  if (!rc && e->stopping)
    rc = ts_error_set(&err, TS_SHUTDOWN, "the daemon is shutting down");
  if (rc) {
    tsd_buf_give(e, staging, bytes); /* NULL after a failed conversion */
    tsd_reply_status(e, w->conn_id, req->id, rc, err.msg);
    return;
  }
  q->data.len = 0; /* bulk data never travels on the control channel */
  w->req = NULL;
  tsd_submit(e, w->conn_id, req, staging, bytes);
}

/* The attribute "the whole tensor on one rank". */
static int one_rank_attr(int rank, ts_attr **out, ts_error *err) {
  int64_t shape1 = 1;
  ts_placement r = ts_replicate();
  return ts_attr_create(out, 1, &shape1, &rank, &r, err);
}

/* One tensor between the whole row-major data at `root` (whole, there only) and a slice of the
 * stored attribute, collective with its own agreements (the status is agreed). put: into *out,
 * a new slice (for partial placements through the executor); get: into whole. */
static int move_one(tsd_engine *e, ts_stored *t, int root, uint8_t *whole, bool put, ts_tensor *out,
                    ts_error *err) {
  if (!ts_attr_has_partial(t->attr)) {
    ts_stored tmp = *t; /* a put writes into the new slice, the stored one stays as it is */
    if (put)
      tmp.local = *out;
    return ts_scatter_gather(e->world, put ? &tmp : t, root, whole, put, e->cfg->staging, err);
  }
  ts_error lerr;
  ts_error_clear(&lerr);
  ts_attr *one = NULL;
  ts_plan *plan = NULL;
  ts_plan_opts po = {TS_STRATEGY_AUTO, e->cfg->staging, e->size};
  int lst = one_rank_attr(root, &one, &lerr);
  if (!lst)
    lst = ts_plan_cache_get(ts_store_plans(e->store), t->ndim, t->shape, t->dtype,
                            put ? one : t->attr, put ? t->attr : one, &po, &plan, &lerr);
  ts_tensor src, got;
  memset(&src, 0, sizeof src);
  bool have = !put ? t->has_slice : e->rank == root && lst == TS_OK;
  if (put && have) {
    src.data = whole;
    src.bytes = tsd_tensor_bytes(t);
    ts_layout_plain(&src.layout, t->dtype, t->ndim, t->shape, NULL);
  }
  ts_exec_opts xo = {.agree_world = true, .prior_status = lst, .prior_err = &lerr};
  ts_exec_report rep;
  memset(&rep, 0, sizeof rep);
  int rc = ts_reshard_exec(e->world, plan, have ? (put ? &src : &t->local) : NULL,
                           put ? t->layout_tag : NULL, &xo, &got, &rep, err);
  if (rc == TS_OK) {
    tsd_record_exec(e, &rep);
    if (put) {
      *out = got;
    } else {
      if (e->rank == root && got.bytes == tsd_tensor_bytes(t) && got.bytes)
        memcpy(whole, got.data, got.bytes);
      ts_shard_free_tensor(&got);
    }
  }
  ts_plan_destroy(&plan);
  ts_attr_destroy(&one);
  return rc;
}

/* A transfer naming the client's memory runs only while its connection is open. */
static int client_here(const tsd_pending *origin, ts_error *err) {
  if (origin && origin->conn_id)
    return TS_OK;
  return ts_error_set(err, TS_IO,
                      "the client closed its connection before its transfer ran; "
                      "its memory is not touched and the tensors are unchanged");
}

/* The tensors of a batch (checked: present) and the addresses of their client memory. */
static int batch_tensors(tsd_engine *e, size_t n, char *const *names,
                         Tshard__ClientMemory *const *mem, ts_stored ***ts, uint64_t **addrs,
                         ts_error *err) {
  *ts = calloc(n ? n : 1, sizeof **ts);
  *addrs = calloc(n ? n : 1, sizeof **addrs);
  if (!*ts || !*addrs)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a batch of %zu tensors", n);
  for (size_t i = 0; i < n; i++) {
    (*ts)[i] = ts_store_find(e->store, names[i]);
    (*addrs)[i] = mem && mem[i] ? mem[i]->address : 0;
  }
  return TS_OK;
}

/* New slices for a staged put_many, had before the first agreement (within the memory limit):
 * one per tensor this rank holds a slice of, in its layout (blocked tails zero-filled); tensors
 * with partial placements get theirs from the executor. */
static int new_slices(ts_stored *const *ts, size_t n, ts_tensor *news, ts_error *err) {
  for (size_t i = 0; i < n; i++) {
    news[i] = ts[i]->local;
    news[i].data = NULL;
    if (!ts[i]->has_slice || !ts[i]->local.bytes || ts_attr_has_partial(ts[i]->attr))
      continue;
    news[i].data = ts_shard_alloc_as(ts[i]->local.bytes, 0, "the put's new slice", err);
    if (!news[i].data)
      return err->code;
    if (ts_layout_is_blocked(&news[i].layout))
      memset(news[i].data, 0, news[i].bytes);
  }
  return TS_OK;
}

/* Every tensor between the asking rank's row-major data (whole: the tensors one after another,
 * there only) and the slices in one region exchange (ts_scatter_gather_many); a put writes into
 * the new slices news (NULL: a get). The status is agreed. */
static int coalesced(tsd_engine *e, int root, ts_stored *const *ts, size_t n, uint8_t *whole,
                     const ts_tensor *news, int lst, ts_error *lerr, ts_error *err) {
  ts_stored *tmp = calloc(n ? n : 1, sizeof *tmp);
  ts_stored **ptr = calloc(n ? n : 1, sizeof *ptr);
  void **wholes = calloc(n ? n : 1, sizeof *wholes);
  if (!lst && (!tmp || !ptr || !wholes))
    lst = ts_error_set(lerr, TS_NO_MEMORY, "no memory for a batch of %zu tensors", n);
  uint64_t off = 0;
  for (size_t i = 0; tmp && ptr && wholes && i < n; i++) {
    tmp[i] = *ts[i]; /* a put writes into the new slice, the stored one stays as it is */
    if (news)
      tmp[i].local = news[i];
    ptr[i] = news ? &tmp[i] : ts[i];
    wholes[i] = whole ? whole + off : NULL;
    off += tsd_tensor_bytes(ts[i]);
  }
  int rc = ts_scatter_gather_many(e->world, lst ? 0 : (int)n, ptr, root, wholes, news != NULL, lst,
                                  lerr, err);
  free(tmp), free(ptr), free(wholes);
  return rc;
}

/* A staged put_many on every rank: the new slices, one agreement, every tensor scattered from the
 * asking rank's staging into its new slice, then every tensor replaced, or none. */
static int staged_put_many(tsd_engine *e, const tsd_ordered *op, const tsd_pending *origin,
                           ts_stored *const *ts, size_t n, uint64_t tensor_total, int lst,
                           ts_error *lerr, ts_error *err) {
  bool root = op->origin == e->rank;
  if (!lst && root && (!origin || !origin->staging || origin->staging_bytes != tensor_total))
    lst = ts_error_set(lerr, TS_INVALID_ARGUMENT,
                       "the data of the put_many does not match its "
                       "%zu tensors (%llu bytes) any more",
                       n, (unsigned long long)tensor_total);
  ts_tensor *news = calloc(n ? n : 1, sizeof *news);
  if (!lst && !news)
    lst = ts_error_set(lerr, TS_NO_MEMORY, "no memory for a batch of %zu tensors", n);
  if (!lst)
    lst = new_slices(ts, n, news, lerr);
  bool one = ts_scatter_many_applies(e->world, (int)n, ts); /* one exchange for every tensor */
  int rc =
      one ? coalesced(e, op->origin, ts, n, root ? origin->staging : NULL, news, lst, lerr, err)
          : ts_comm_agree(ts_world_comm(e->world), lst, lerr, err);
  uint64_t off = 0;
  for (size_t i = 0; rc == TS_OK && !one && i < n; i++) {
    ts_error ierr;
    rc = move_one(e, ts[i], op->origin, root ? origin->staging + off : NULL, true, &news[i], &ierr);
    if (rc)
      ts_error_set(err, rc, "tensor '%s' of the batch: %s", ts[i]->name, ierr.msg);
    off += tsd_tensor_bytes(ts[i]);
  }
  for (size_t i = 0; news && i < n; i++) { /* the statuses were agreed: the same everywhere */
    if (rc == TS_OK && news[i].data) {
      ts_shard_free(ts[i]->local.data);
      ts[i]->local = news[i];
    } else {
      ts_shard_free(news[i].data);
    }
  }
  free(news);
  return rc;
}

int tsd_run_put_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  const Tshard__PutManyRequest *q = op->req->put_many;
  size_t n = q->n_items;
  ts_error lerr;
  ts_error_clear(&lerr);
  tsd_oplog_batch(n);
  uint64_t data_total, tensor_total;
  int lst = put_many_check(e, q, &data_total, &tensor_total, &lerr);
  bool direct = n && q->items[0]->client_memory;
  char **names = calloc(n ? n : 1, sizeof *names);
  Tshard__ClientMemory **mem = calloc(n ? n : 1, sizeof *mem);
  ts_stored **ts = NULL;
  uint64_t *addrs = NULL;
  if (!lst && (!names || !mem))
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for a batch of %zu tensors", n);
  for (size_t i = 0; names && mem && i < n; i++) {
    names[i] = q->items[i]->name;
    mem[i] = q->items[i]->client_memory;
  }
  if (!lst)
    lst = batch_tensors(e, n, names, mem, &ts, &addrs, &lerr);
  int rc;
  if (direct) { /* every rank reads its pieces from the client's memory; one agreement */
    if (!lst && !all_direct(e, (const Tshard__PutManyItem *const *)q->items, n))
      lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT,
                         "a tensor of the put_many changed since "
                         "the put was checked; put it again");
    if (!lst && op->origin == e->rank)
      lst = client_here(origin, &lerr);
    ts_comm_proc proc = tsd_client_proc(q->items[0]->client_memory);
    rc = ts_scatter_gather_direct_many(e->world, lst ? 0 : (int)n, ts, op->origin, &proc, addrs,
                                       true, lst, &lerr, err);
  } else {
    rc = staged_put_many(e, op, origin, ts, lst ? 0 : n, tensor_total, lst, &lerr, err);
  }
  tsd_oplog_bytes(tensor_total);
  free(names), free(mem), free(ts), free(addrs);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * get_many */

/* The checks of a get_many against the store: the batch, then every item's bytes. */
static int get_many_check(tsd_engine *e, const Tshard__GetManyRequest *q, char **names,
                          uint64_t *total, ts_error *err) {
  *total = 0;
  for (size_t i = 0; i < q->n_items; i++)
    names[i] = q->items[i]->name;
  int rc = tsd_batch_check(e, q->n_items, names, err);
  for (size_t i = 0; !rc && i < q->n_items; i++) {
    uint64_t b = tsd_tensor_bytes(ts_store_find(e->store, names[i]));
    if (b != q->items[i]->bytes)
      rc = ts_error_set(err, TS_BAD_SHAPE,
                        "tensor '%s' of the batch has %llu bytes; the client "
                        "expects %llu",
                        names[i], (unsigned long long)b, (unsigned long long)q->items[i]->bytes);
    *total += b;
  }
  return rc;
}

/* A get_many into the client's memory: the tensors the direct path does not serve are gathered
 * at the asking rank one by one (each agreed, into one buffer had before the first agreement) and
 * written there; then every rank writes its pieces of the others, and one agreement carries every
 * rank's outcome. Whether a tensor goes directly is the same on every rank. */
static int direct_get_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                           ts_stored *const *ts, const uint64_t *addrs, size_t n, int lst,
                           ts_error *lerr, ts_error *err) {
  const Tshard__GetManyRequest *q = op->req->get_many;
  bool root = op->origin == e->rank;
  if (!lst && root)
    lst = client_here(origin, lerr);
  size_t ndirect = 0;
  uint64_t staged = 0; /* the bytes of the tensors gathered at the asking rank */
  ts_stored **dts = calloc(n ? n : 1, sizeof *dts);
  uint64_t *daddrs = calloc(n ? n : 1, sizeof *daddrs);
  if (!lst && (!dts || !daddrs))
    lst = ts_error_set(lerr, TS_NO_MEMORY, "no memory for a batch of %zu tensors", n);
  bool any_staged = false;
  for (size_t i = 0; i < n; i++)
    if (!ts_scatter_direct_applies(e->world, ts[i])) {
      any_staged = true;
      staged += tsd_tensor_bytes(ts[i]);
    }
  uint8_t *buf = NULL;
  if (!lst && root && staged && !(buf = tsd_buf_take(e, staged, "the gathered tensors", lerr)))
    lst = lerr->code;
  int rc = TS_OK;
  if (any_staged) { /* the checks first: the gathers below are collectives of their own */
    rc = ts_comm_agree(ts_world_comm(e->world), lst, lerr, err);
    lst = TS_OK;
  }
  uint64_t off = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    if (ts_scatter_direct_applies(e->world, ts[i])) {
      dts[ndirect] = ts[i];
      daddrs[ndirect++] = addrs[i];
      continue;
    }
    uint64_t b = tsd_tensor_bytes(ts[i]);
    ts_error ierr;
    rc = move_one(e, ts[i], op->origin, buf ? buf + off : NULL, false, NULL, &ierr);
    if (rc)
      ts_error_set(err, rc, "tensor '%s' of the batch: %s", ts[i]->name, ierr.msg);
    if (!rc && !lst && root && b) /* carried into the last agreement */
      lst = tsd_client_copy(q->items[i]->client_memory, true, buf + off, b, lerr);
    off += b;
  }
  tsd_buf_give(e, buf, staged);
  if (!rc) {
    ts_comm_proc proc = tsd_client_proc(q->items[0]->client_memory);
    rc = ts_scatter_gather_direct_many(e->world, lst ? 0 : (int)ndirect, dts, op->origin, &proc,
                                       daddrs, false, lst, lerr, err);
  }
  free(dts), free(daddrs);
  return rc;
}

/* A get_many into one copy at the asking rank: in the region of the shared segment the request
 * named when it fits there, else a pool buffer; every tensor gathered into its place. */
static int staged_get_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                           ts_stored *const *ts, size_t n, uint64_t total, int lst, ts_error *lerr,
                           ts_error *err) {
  const Tshard__GetManyRequest *q = op->req->get_many;
  bool root = op->origin == e->rank;
  tsd_session *c = NULL;
  uint8_t *whole = NULL;
  bool in_shm = false;
  if (!lst && root) {
    c = origin && origin->conn_id ? tsd_session_get(e, origin->conn_id, true) : NULL;
    tsd_session_copy_reset(e, c);
    uint64_t room = 0;
    if (c) {
      tsd_session_set_get_region(c, q->shm);
      in_shm = q->shm && total && !tsd_shm_region(c, q->shm, total, &whole, &room, NULL);
    }
    if (!in_shm && total && !(whole = tsd_buf_take(e, total, "the gathered tensors", lerr)))
      lst = lerr->code;
  }
  bool one = ts_scatter_many_applies(e->world, (int)n, ts); /* one exchange for every tensor */
  int rc = one ? coalesced(e, op->origin, ts, n, whole, NULL, lst, lerr, err)
               : ts_comm_agree(ts_world_comm(e->world), lst, lerr, err);
  uint64_t off = 0;
  for (size_t i = 0; rc == TS_OK && !one && i < n; i++) {
    ts_error ierr;
    rc = move_one(e, ts[i], op->origin, whole ? whole + off : NULL, false, NULL, &ierr);
    if (rc)
      ts_error_set(err, rc, "tensor '%s' of the batch: %s", ts[i]->name, ierr.msg);
    off += tsd_tensor_bytes(ts[i]);
  }
  if (rc == TS_OK && c)
    tsd_session_copy_set(e, c, GET_MANY_COPY, false, whole, total, in_shm);
  else if (!in_shm)
    tsd_buf_give(e, whole, total);
  return rc;
}

int tsd_run_get_many(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  const Tshard__GetManyRequest *q = op->req->get_many;
  size_t n = q->n_items;
  ts_error lerr;
  ts_error_clear(&lerr);
  tsd_oplog_batch(n);
  char **names = calloc(n ? n : 1, sizeof *names);
  Tshard__ClientMemory **mem = calloc(n ? n : 1, sizeof *mem);
  ts_stored **ts = NULL;
  uint64_t *addrs = NULL, total = 0;
  int lst = names && mem ? TS_OK : ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the batch");
  if (!lst)
    lst = get_many_check(e, q, names, &total, &lerr);
  for (size_t i = 0; mem && i < n; i++)
    mem[i] = q->items[i]->client_memory;
  if (!lst)
    lst = batch_tensors(e, n, names, mem, &ts, &addrs, &lerr);
  bool direct = n && q->items[0]->client_memory;
  if (origin && op->origin == e->rank) /* the first answer's chunk, as the client asked */
    origin->max_bytes = q->max_bytes;
  int rc = direct ? direct_get_many(e, op, origin, ts, addrs, lst ? 0 : n, lst, &lerr, err)
                  : staged_get_many(e, op, origin, ts, lst ? 0 : n, total, lst, &lerr, err);
  if (rc == TS_OK && direct && op->origin == e->rank && origin && origin->conn_id)
    tsd_session_copy_direct(e, tsd_session_get(e, origin->conn_id, true), GET_MANY_COPY, total);
  tsd_oplog_bytes(total);
  free(names), free(mem), free(ts), free(addrs);
  return rc;
}

void tsd_handle_get_many(tsd_engine *e, tsd_work *w) {
  Tshard__Request *req = w->req;
  const Tshard__GetManyRequest *q = req->get_many;
  if (q->offset == 0) { /* the gather: every rank, in rank 0's order */
    if (e->stopping) {
      tsd_reply_status(e, w->conn_id, req->id, TS_SHUTDOWN, "the daemon is shutting down");
      return;
    }
    w->req = NULL;
    tsd_submit(e, w->conn_id, req, NULL, 0);
    return;
  }
  tsd_session *c = tsd_session_get(e, w->conn_id, false);
  const tsd_copy *cp = tsd_session_copy(c, GET_MANY_COPY, false);
  if (!cp || q->offset > cp->total) {
    char msg[200];
    snprintf(msg, sizeof msg,
             "no gathered copy of a get_many on this connection covers offset "
             "%llu; a get_many starts at offset 0",
             (unsigned long long)q->offset);
    tsd_reply_status(e, w->conn_id, req->id, TS_INVALID_ARGUMENT, msg);
    return;
  }
  tsd_serve_chunk(e, c, cp, w->conn_id, req->id, q->offset, q->max_bytes, q->shm);
}

void tsd_answer_get_many(tsd_engine *e, const tsd_pending *w) {
  tsd_answer_gathered(e, w, GET_MANY_COPY);
}
