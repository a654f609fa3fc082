/* catalog.c - the metadata of this rank's stored tensors, published by the engine and read by
 * the loop thread, so that list and describe answer at once instead of queueing behind a long
 * collective operation.
 *
 * Each entry is a tensor's name and its DescribeResult (dtype, shape, attribute, layout), built by
 * the engine (ops.c) after every collective operation that can change metadata, under the
 * catalog's mutex, with a copy of the attribute and the world size. The bytes and box per rank,
 * whose work grows with the world, are built from them at the first describe of the entry and
 * kept until the entry changes (under the same mutex). Before such an operation starts, the
 * engine marks the names it may change as busy (and, for a create, a drop or a copy, the list of
 * names too); the loop thread does not answer from a busy entry but hands the request to the
 * engine, which answers after the operation (a list with details, which carries every tensor's
 * dtype, shape, attribute and bytes, waits while any name is busy). An operation cannot complete
 * on any rank before every rank has started it, so a client that saw it complete never reads the
 * old metadata from another rank.
 * The loop thread also leaves a request to the engine while the same connection has requests
 * with the engine, so one connection's answers keep their order. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tsd_catalog.h"

typedef tsd_catalog_entry entry;

void tsd_catalog_init(tsd_catalog *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
}

/* The bytes and box per rank of an entry: one block holding the messages, the pointers to them
 * and their lo and hi arrays. */
typedef struct ranks {
  size_t n;
  Tshard__RankBytes **p;
} ranks;

static void entry_clear(entry *v) {
  if (v->describe)
    tshard__describe_result__free_unpacked(v->describe, NULL);
  if (v->attr)
    ts_attr_destroy(&v->attr);
  free(v->ranks);
  v->describe = NULL;
  v->ranks = NULL;
}

/* One rank's box and the bytes of its slice in the tensor's layout; false if it holds none. */
static bool rank_bytes(const entry *v, ts_dtype dt, int rank, Tshard__RankBytes *x, int64_t *lohi) {
  const Tshard__DescribeResult *d = v->describe;
  int ndim = (int)d->n_shape;
  const char *tag = d->layout && d->layout->tag ? d->layout->tag : "";
  ts_box box;
  bool in = false;
  if (ts_attr_rank_box(v->attr, ndim, d->shape, rank, &box, &in, NULL) || !in)
    return false;
  int64_t ext[TS_MAX_DIMS];
  for (int k = 0; k < ndim; k++)
    ext[k] = box.hi[k] - box.lo[k];
  ts_layout l;
  size_t bytes = 0;
  if ((tag[0] ? ts_layout_from_tag(&l, dt, ndim, ext, tag, NULL)
              : ts_layout_plain(&l, dt, ndim, ext, NULL)) == TS_OK)
    ts_layout_span(&l, &bytes, NULL);
  tshard__rank_bytes__init(x);
  x->rank = rank;
  x->bytes = bytes;
  x->n_lo = x->n_hi = (size_t)ndim;
  x->lo = lohi;
  x->hi = lohi + TS_MAX_DIMS;
  memcpy(x->lo, box.lo, (size_t)ndim * sizeof *x->lo);
  memcpy(x->hi, box.hi, (size_t)ndim * sizeof *x->hi);
  return true;
}

/* Builds the bytes and box per rank of an entry (NULL: no memory). */
static ranks *ranks_build(const entry *v) {
  size_t world = (size_t)(v->world > 0 ? v->world : 0);
  size_t one =
      sizeof(Tshard__RankBytes) + sizeof(Tshard__RankBytes *) + 2 * TS_MAX_DIMS * sizeof(int64_t);
  ranks *r = malloc(sizeof *r + world * one);
  if (!r)
    return NULL;
  Tshard__RankBytes *rb = (Tshard__RankBytes *)(r + 1);
  r->p = (Tshard__RankBytes **)(rb + world);
  int64_t *lohi = (int64_t *)(r->p + world);
  r->n = 0;
  ts_dtype dt;
  if (!v->attr || v->describe->n_shape > TS_MAX_DIMS ||
      ts_dtype_parse(v->describe->dtype, &dt, NULL) != TS_OK)
    return r;
  for (int rank = 0; rank < (int)world; rank++)
    if (rank_bytes(v, dt, rank, &rb[r->n], lohi + (size_t)rank * 2 * TS_MAX_DIMS))
      r->p[r->n] = &rb[r->n], r->n++;
  return r;
}

void tsd_catalog_destroy(tsd_catalog *c) {
  for (int i = 0; i < c->n; i++)
    entry_clear(&c->v[i]);
  ts_name_index_clear(&c->index);
  free(c->v);
  c->v = NULL;
  c->n = c->cap = 0;
  pthread_mutex_destroy(&c->mu);
}

static const char *name_at(const void *ctx, int pos) {
  return ((const tsd_catalog *)ctx)->v[pos].name;
}

static int find(const tsd_catalog *c, const char *name) {
  return ts_name_index_find(&c->index, name, name_at, c);
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

int tsd_catalog_busy(tsd_catalog *c, char (*names)[TS_NAME_MAX], bool *all) {
  pthread_mutex_lock(&c->mu);
  int n = c->nbusy;
  memcpy(names, c->busy, (size_t)n * sizeof c->busy[0]);
  *all = c->all_busy;
  pthread_mutex_unlock(&c->mu);
  return n;
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

int tsd_catalog_set(tsd_catalog *c, const char *name, const uint8_t *packed, size_t len,
                    const ts_attr *attr, int world) {
  Tshard__DescribeResult *d = packed ? tshard__describe_result__unpack(NULL, len, packed) : NULL;
  ts_attr *a = NULL;
  if (packed && (!d || (attr && ts_attr_clone(attr, &a, NULL) != TS_OK))) {
    tshard__describe_result__free_unpacked(d, NULL);
    return TS_NO_MEMORY;
  }
  entry nv = {.describe = d, .attr = a, .world = world, .ranks = NULL};
  pthread_mutex_lock(&c->mu);
  int i = find(c, name);
  int rc = TS_OK;
  if (i >= 0 && d) {
    entry_clear(&c->v[i]);
    snprintf(nv.name, TS_NAME_MAX, "%s", name);
    c->v[i] = nv;
    nv.describe = NULL, nv.attr = NULL;
  } else if (i >= 0) { /* removed: the last entry takes its place */
    ts_name_index_remove(&c->index, name, name_at, c);
    if (i != c->n - 1)
      ts_name_index_moved(&c->index, c->v[c->n - 1].name, i, name_at, c);
    entry_clear(&c->v[i]);
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
      snprintf(nv.name, TS_NAME_MAX, "%s", name);
      c->v[c->n++] = nv;
      if (ts_name_index_add(&c->index, c->n - 1, c->n, name_at, c) != TS_OK) {
        c->n--; /* nv keeps what it holds: freed below */
        rc = TS_NO_MEMORY;
      } else {
        nv.describe = NULL, nv.attr = NULL;
      }
    }
  }
  pthread_mutex_unlock(&c->mu);
  entry_clear(&nv);
  return rc;
}

static bool busy_name(const tsd_catalog *c, const char *name) {
  if (c->all_busy)
    return true;
  for (int i = 0; i < c->nbusy; i++)
    if (strcmp(c->busy[i], name) == 0)
      return true;
  return false;
}

static bool busy(const tsd_catalog *c, const Tshard__Request *req) {
  if (req->op_case == TSHARD__REQUEST__OP_LIST) /* details carry every tensor's attribute */
    return c->names_busy || (req->list->details && c->nbusy > 0);
  return busy_name(c, req->describe->name);
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

/* A describe's answer, under the mutex: the entry's ranks are built at its first describe. */
static int describe_answer(tsd_catalog *c, const Tshard__Request *req, uint8_t **frame,
                           size_t *len) {
  int i = find(c, req->describe->name);
  if (i < 0) {
    char msg[TS_NAME_MAX + 32];
    snprintf(msg, sizeof msg, "no tensor named '%s'", req->describe->name);
    return tsd_error_frame(req->id, TS_NOT_FOUND, msg, frame, len);
  }
  entry *v = &c->v[i];
  if (!v->ranks)
    v->ranks = ranks_build(v);
  const ranks *rk = v->ranks;
  if (!rk)
    return tsd_error_frame(req->id, TS_NO_MEMORY, "no memory to describe", frame, len);
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  r.id = req->id;
  r.result_case = TSHARD__RESPONSE__RESULT_DESCRIBE;
  r.describe = v->describe;
  v->describe->n_ranks = rk->n; /* lent for the packing: the entry's free must not see them */
  v->describe->ranks = rk->p;
  int rc = tsd_response_frame(&r, frame, len, NULL);
  v->describe->n_ranks = 0;
  v->describe->ranks = NULL;
  return rc;
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
    rc = describe_answer(c, req, frame, len);
  }
  pthread_mutex_unlock(&c->mu);
  return rc == TS_OK ? 1 : -1;
}

static json_t *int_array(const int64_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

/* One tensor of the live page: its metadata, mesh and each holding rank's box and bytes. */
static json_t *entry_json(tsd_catalog *c, entry *v) {
  const Tshard__DescribeResult *d = v->describe;
  if (!v->ranks)
    v->ranks = ranks_build(v);
  const ranks *rk = v->ranks;
  Tshard__ListEntry le;
  list_entry(v, &le);
  json_t *o = json_object(), *ranks = json_array(), *mesh = json_array(), *mr = json_array();
  if (!o || !ranks || !mesh || !mr) {
    json_decref(o), json_decref(ranks), json_decref(mesh), json_decref(mr);
    return NULL;
  }
  json_object_set_new(o, "name", json_string(v->name));
  json_object_set_new(o, "dtype", json_string(d->dtype));
  json_object_set_new(o, "shape", int_array(d->shape, d->n_shape));
  char small[512], *text = small;
  size_t need = v->attr ? ts_attr_format(v->attr, small, sizeof small) : 0;
  if (need >= sizeof small && (text = malloc(need + 1)) != NULL)
    ts_attr_format(v->attr, text, need + 1);
  json_object_set_new(o, "attr", json_string(!v->attr ? "" : text ? text : small));
  if (text != small)
    free(text);
  json_object_set_new(o, "bytes", json_integer((json_int_t)le.bytes));
  json_object_set_new(o, "busy", json_boolean(busy_name(c, v->name)));
  int64_t positions = v->attr ? 1 : 0;
  for (int k = 0; v->attr && k < v->attr->mesh_ndim; k++) {
    json_array_append_new(mesh, json_integer(v->attr->mesh_shape[k]));
    positions *= v->attr->mesh_shape[k];
  }
  for (int64_t k = 0; k < positions; k++) /* the rank at each mesh position, row-major */
    json_array_append_new(mr, json_integer(v->attr->nranks ? v->attr->ranks[k] : k));
  json_object_set_new(o, "mesh", mesh);
  json_object_set_new(o, "mesh_ranks", mr);
  for (size_t i = 0; rk && i < rk->n; i++) {
    const Tshard__RankBytes *x = rk->p[i];
    json_t *r = json_object();
    json_object_set_new(r, "rank", json_integer(x->rank));
    json_object_set_new(r, "lo", int_array(x->lo, x->n_lo));
    json_object_set_new(r, "hi", int_array(x->hi, x->n_hi));
    json_object_set_new(r, "bytes", json_integer((json_int_t)x->bytes));
    json_array_append_new(ranks, r);
  }
  json_object_set_new(o, "ranks", ranks);
  return o;
}

char *tsd_catalog_json(tsd_catalog *c) {
  json_t *root = json_object(), *arr = json_array();
  if (!root || !arr) {
    json_decref(root), json_decref(arr);
    return NULL;
  }
  pthread_mutex_lock(&c->mu);
  bool ok = true;
  for (int i = 0; ok && i < c->n; i++) {
    json_t *o = entry_json(c, &c->v[i]);
    ok = o && json_array_append_new(arr, o) == 0;
  }
  pthread_mutex_unlock(&c->mu);
  json_object_set_new(root, "tensors", arr);
  char *s = ok ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  return s;
}
