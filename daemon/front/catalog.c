/* catalog.c - the metadata of this rank's stored tensors, published by the engine and read by
 * the loop thread, so that list and describe answer at once instead of queueing behind a long
 * collective operation.
 *
 * Each entry is a tensor's name and its DescribeResult (dtype, shape, attribute, layout, bytes
 * and box per rank), built by the engine (ops.c) after every collective operation that can
 * change metadata, under the catalog's mutex. Before such an operation starts, the engine marks
 * the names it may change as busy (and, for a create, a drop or a copy, the list of names too);
 * the loop thread does not answer from a busy entry but hands the request to the engine, which
 * answers after the operation (a list with details, which carries every tensor's dtype, shape,
 * attribute and bytes, waits while any name is busy). An operation cannot complete on any rank before every rank has
 * started it, so a client that saw it complete never reads the old metadata from another rank.
 * The loop thread also leaves a request to the engine while the same connection has requests
 * with the engine, so one connection's answers keep their order. */
#include <stdlib.h>
#include <string.h>

#include "tsd_front.h"

typedef tsd_catalog_entry entry;

void tsd_catalog_init(tsd_catalog *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
}

void tsd_catalog_destroy(tsd_catalog *c) {
  for (int i = 0; i < c->n; i++)
    tshard__describe_result__free_unpacked(c->v[i].describe, NULL);
  free(c->v);
  c->v = NULL;
  c->n = c->cap = 0;
  pthread_mutex_destroy(&c->mu);
}

static int find(const tsd_catalog *c, const char *name) {
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->v[i].name, name) == 0)
      return i;
  return -1;
}

void tsd_catalog_begin(tsd_catalog *c, const tsd_changes *ch) {
  pthread_mutex_lock(&c->mu);
  c->nbusy = 0;
  for (int i = 0; i < ch->n && i < TSD_CHANGES_MAX; i++)
    if (ch->name[i] && ch->name[i][0])
      snprintf(c->busy[c->nbusy++], TS_NAME_MAX, "%s", ch->name[i]);
  c->names_busy = ch->names || ch->all;
  c->all_busy = ch->all;
  pthread_mutex_unlock(&c->mu);
}

void tsd_catalog_end(tsd_catalog *c) {
  pthread_mutex_lock(&c->mu);
  c->nbusy = 0;
  c->names_busy = c->all_busy = false;
  pthread_mutex_unlock(&c->mu);
}

char (*tsd_catalog_names(tsd_catalog *c, int *n))[TS_NAME_MAX] {
  pthread_mutex_lock(&c->mu);
  char(*v)[TS_NAME_MAX] = c->n ? malloc((size_t)c->n * sizeof *v) : NULL;
  *n = v ? c->n : 0;
  for (int i = 0; i < *n; i++)
    memcpy(v[i], c->v[i].name, TS_NAME_MAX);
  pthread_mutex_unlock(&c->mu);
  return v;
}

int tsd_catalog_set(tsd_catalog *c, const char *name, const uint8_t *packed, size_t len) {
  Tshard__DescribeResult *d = packed ? tshard__describe_result__unpack(NULL, len, packed) : NULL;
  if (packed && !d)
    return TS_NO_MEMORY;
  pthread_mutex_lock(&c->mu);
  int i = find(c, name);
  int rc = TS_OK;
  if (i >= 0 && d) {
    tshard__describe_result__free_unpacked(c->v[i].describe, NULL);
    c->v[i].describe = d;
  } else if (i >= 0) { /* removed: the last entry takes its place */
    tshard__describe_result__free_unpacked(c->v[i].describe, NULL);
    c->v[i] = c->v[--c->n];
  } else if (d) {
    if (c->n == c->cap) {
      int cap = c->cap ? 2 * c->cap : 16;
      entry *v = realloc(c->v, (size_t)cap * sizeof *v);
      if (!v)
        rc = TS_NO_MEMORY;
      else
        c->v = v, c->cap = cap;
    }
    if (rc == TS_OK) {
      snprintf(c->v[c->n].name, TS_NAME_MAX, "%s", name);
      c->v[c->n++].describe = d;
      d = NULL;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (rc)
    tshard__describe_result__free_unpacked(d, NULL);
  return rc;
}

static bool busy(const tsd_catalog *c, const Tshard__Request *req) {
  if (req->op_case == TSHARD__REQUEST__OP_LIST) /* details carry every tensor's attribute */
    return c->names_busy || (req->list->details && c->nbusy > 0);
  if (c->all_busy)
    return true;
  for (int i = 0; i < c->nbusy; i++)
    if (strcmp(c->busy[i], req->describe->name) == 0)
      return true;
  return false;
}

/* A tensor's line of the list, pointing into its DescribeResult: name, dtype, shape, attribute
 * and the whole tensor's bytes. */
static void list_entry(const entry *v, Tshard__ListEntry *out) {
  const Tshard__DescribeResult *d = v->describe;
  tshard__list_entry__init(out);
  out->name = (char *)v->name;
  out->dtype = d->dtype;
  out->n_shape = d->n_shape;
  out->shape = d->shape;
  out->attr = d->attr;
  ts_dtype dt;
  uint64_t bytes = ts_dtype_parse(d->dtype, &dt, NULL) == TS_OK ? ts_dtype_size(dt) : 0;
  for (size_t k = 0; k < d->n_shape; k++)
    bytes *= (uint64_t)d->shape[k];
  out->bytes = bytes;
}

int tsd_catalog_answer(tsd_catalog *c, const Tshard__Request *req, bool wait_if_busy,
                       uint8_t **frame, size_t *len) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__ListResult lr = TSHARD__LIST_RESULT__INIT;
  r.id = req->id;
  pthread_mutex_lock(&c->mu);
  if (wait_if_busy && busy(c, req)) {
    pthread_mutex_unlock(&c->mu);
    return 0;
  }
  int rc;
  if (req->op_case == TSHARD__REQUEST__OP_LIST) {
    size_t n = (size_t)(c->n ? c->n : 1);
    char **names = malloc(n * sizeof *names);
    Tshard__ListEntry *ent = malloc(n * sizeof *ent);
    Tshard__ListEntry **entp = malloc(n * sizeof *entp);
    for (int i = 0; names && ent && entp && i < c->n; i++)
      list_entry(&c->v[i], &ent[i]), entp[i] = &ent[i], names[i] = c->v[i].name;
    r.result_case = TSHARD__RESPONSE__RESULT_LIST;
    r.list = &lr;
    lr.n_names = (size_t)c->n;
    lr.names = names;
    lr.n_tensors = req->list->details ? (size_t)c->n : 0;
    lr.tensors = entp;
    rc = names && ent && entp
             ? tsd_response_frame(&r, frame, len, NULL)
             : tsd_error_frame(req->id, TS_NO_MEMORY, "no memory for the list", frame, len);
    free(names), free(ent), free(entp);
  } else {
    int i = find(c, req->describe->name);
    if (i < 0) {
      char msg[TS_NAME_MAX + 32];
      snprintf(msg, sizeof msg, "no tensor named '%s'", req->describe->name);
      rc = tsd_error_frame(req->id, TS_NOT_FOUND, msg, frame, len);
    } else {
      r.result_case = TSHARD__RESPONSE__RESULT_DESCRIBE;
      r.describe = c->v[i].describe;
      rc = tsd_response_frame(&r, frame, len, NULL);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return rc == TS_OK ? 1 : -1;
}

int tsd_catalog_loop_answer(const tsd_loop_info *info, const Tshard__Request *req,
                            uint8_t **frame, size_t *len) {
  return tsd_catalog_answer(info->catalog, req, true, frame, len);
}
