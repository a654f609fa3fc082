/* wireattr.c - the DistAttr message and ts_attr, one to one: mesh_shape, ranks, placements and
 * explicit splits map field by field onto the canonical text form. A message with an empty
 * mesh_shape and a `text` is parsed from the text instead. Everything a peer sends is bounded
 * before it is used (mesh dims, rank counts, tensor dims of splits); a dim's splits come once. */
#include <stdlib.h>
#include <string.h>

#include "tsd_wire.h"

#define MAX_WIRE_RANKS (1 << 20)

int tsd_attr_from_msg(const Tshard__DistAttr *m, ts_attr **out, ts_error *err) {
  *out = NULL;
  if (!m)
    return ts_error_set(err, TS_BAD_ATTRIBUTE, "no distributed attribute given");
  if (m->n_mesh_shape == 0) {
    if (!m->text || !m->text[0])
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "empty distributed attribute: give mesh_shape and placements, or the "
                          "text form such as 'mesh=[2]@0-1 placements=[S(0)]'");
    return ts_attr_parse(m->text, out, err);
  }
  if (m->n_mesh_shape > TS_MAX_MESH_DIMS)
    return ts_error_set(err, TS_BAD_ATTRIBUTE, "mesh of %zu dims; at most %d", m->n_mesh_shape,
                        TS_MAX_MESH_DIMS);
  if (m->n_placements != m->n_mesh_shape)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "%zu placements for a mesh of %zu dims; give one "
                        "per mesh dim",
                        m->n_placements, m->n_mesh_shape);
  int64_t n = 1;
  for (size_t i = 0; i < m->n_mesh_shape; i++) {
    if (m->mesh_shape[i] < 1 || m->mesh_shape[i] > MAX_WIRE_RANKS)
      return ts_error_set(err, TS_BAD_ATTRIBUTE, "mesh dim %zu has size %lld; sizes are 1 to %d", i,
                          (long long)m->mesh_shape[i], MAX_WIRE_RANKS);
    n *= m->mesh_shape[i];
    if (n > MAX_WIRE_RANKS)
      return ts_error_set(err, TS_BAD_ATTRIBUTE, "mesh of more than %d ranks", MAX_WIRE_RANKS);
  }
  if (m->n_ranks != 0 && (int64_t)m->n_ranks != n)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "%zu ranks for a mesh of %lld; give one per mesh "
                        "position or none (0..n-1)",
                        m->n_ranks, (long long)n);
  ts_placement place[TS_MAX_MESH_DIMS];
  for (size_t i = 0; i < m->n_placements; i++) {
    const Tshard__Placement *p = m->placements[i];
    switch (p->kind) {
    case TSHARD__PLACEMENT_KIND__SHARD:
      if (!ts_split_rule_name((ts_split_rule)p->split))
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "placement %zu: split rule %d; valid: "
                            "0 balanced, 1 chunk",
                            i, (int)p->split);
      place[i] = ts_shard_rule(p->dim, (ts_split_rule)p->split);
      place[i].cyclic = p->cyclic; /* 0: the plain split */
      place[i].src = p->src;
      break;
    case TSHARD__PLACEMENT_KIND__REPLICATE: place[i] = ts_replicate(); break;
    case TSHARD__PLACEMENT_KIND__PARTIAL:
      if ((int)p->op < 0 || (int)p->op >= TS_REDUCE_COUNT)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "placement %zu: reduce op %d; valid: 0 sum, "
                            "1 max, 2 min, 3 avg, 4 prod",
                            i, (int)p->op);
      place[i] = ts_partial((ts_reduce_op)p->op);
      break;
    default:
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "placement %zu: kind %d; valid: 0 shard, "
                          "1 replicate, 2 partial",
                          i, (int)p->kind);
    }
  }
  ts_attr *a = NULL;
  int rc = ts_attr_create(&a, (int)m->n_mesh_shape, m->mesh_shape, m->n_ranks ? m->ranks : NULL,
                          place, err);
  if (rc)
    return rc;
  for (size_t i = 0; i < m->n_splits; i++) {
    const Tshard__DimSplit *s = m->splits[i];
    if (s->dim < -TS_MAX_DIMS || s->dim >= TS_MAX_DIMS || s->n_sizes == 0 ||
        s->n_sizes > MAX_WIRE_RANKS) {
      ts_attr_destroy(&a);
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "split %zu: dim %d with %zu sizes; dims are %d "
                          "to %d with 1 to %d sizes",
                          i, s->dim, s->n_sizes, -TS_MAX_DIMS, TS_MAX_DIMS - 1, MAX_WIRE_RANKS);
    }
    if (ts_attr_splits(a, s->dim, NULL)) {
      ts_attr_destroy(&a);
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "split %zu: dim %d already has its splits; give "
                          "each dim's splits once",
                          i, s->dim);
    }
    if ((rc = ts_attr_set_splits(a, s->dim, (int)s->n_sizes, s->sizes, err))) {
      ts_attr_destroy(&a);
      return rc;
    }
  }
  *out = a;
  return TS_OK;
}

void tsd_attr_msg_clear(Tshard__DistAttr *m) {
  if (!m)
    return;
  free(m->mesh_shape);
  free(m->ranks);
  for (size_t i = 0; i < m->n_placements; i++)
    free(m->placements[i]);
  free(m->placements);
  for (size_t i = 0; i < m->n_splits; i++) {
    free(m->splits[i]->sizes);
    free(m->splits[i]);
  }
  free(m->splits);
  if (m->text && m->text != protobuf_c_empty_string)
    free(m->text);
  tshard__dist_attr__init(m);
}

int tsd_attr_to_msg(const ts_attr *a, Tshard__DistAttr *m, ts_error *err) {
  tshard__dist_attr__init(m);
  int nd = a->mesh_ndim;
  int nsplit = 0;
  for (int d = 0; d < TS_MAX_DIMS; d++)
    nsplit += (a->splits[d] != NULL) + (a->neg_splits[d] != NULL);
  size_t tlen = ts_attr_format(a, NULL, 0);
  m->mesh_shape = malloc((size_t)nd * sizeof *m->mesh_shape);
  m->ranks = malloc((size_t)a->nranks * sizeof *m->ranks);
  m->placements = calloc((size_t)nd, sizeof *m->placements);
  m->splits = calloc((size_t)(nsplit ? nsplit : 1), sizeof *m->splits);
  m->text = malloc(tlen + 1);
  if (!m->mesh_shape || !m->ranks || !m->placements || !m->splits || !m->text)
    goto oom;
  ts_attr_format(a, m->text, tlen + 1);
  m->n_mesh_shape = (size_t)nd;
  memcpy(m->mesh_shape, a->mesh_shape, (size_t)nd * sizeof *m->mesh_shape);
  m->n_ranks = (size_t)a->nranks;
  memcpy(m->ranks, a->ranks, (size_t)a->nranks * sizeof *m->ranks);
  for (int i = 0; i < nd; i++) {
    Tshard__Placement *p = malloc(sizeof *p);
    if (!p)
      goto oom;
    tshard__placement__init(p);
    m->placements[i] = p;
    m->n_placements = (size_t)i + 1;
    p->kind = a->place[i].kind == TS_PLACE_SHARD       ? TSHARD__PLACEMENT_KIND__SHARD
              : a->place[i].kind == TS_PLACE_REPLICATE ? TSHARD__PLACEMENT_KIND__REPLICATE
                                                       : TSHARD__PLACEMENT_KIND__PARTIAL;
    p->dim = a->place[i].kind == TS_PLACE_SHARD ? a->place[i].dim : 0;
    p->op = (Tshard__ReduceOp)a->place[i].op;
    p->split = (Tshard__SplitRule)a->place[i].split;
    p->cyclic = a->place[i].kind == TS_PLACE_SHARD ? a->place[i].cyclic : 0;
    p->src = a->place[i].kind == TS_PLACE_SHARD ? a->place[i].src : 0;
  }
  for (int d = -TS_MAX_DIMS; d < TS_MAX_DIMS; d++) {
    int n;
    const int64_t *sizes = ts_attr_splits(a, d, &n);
    if (!sizes)
      continue;
    Tshard__DimSplit *s = malloc(sizeof *s);
    if (!s)
      goto oom;
    tshard__dim_split__init(s);
    m->splits[m->n_splits++] = s;
    s->dim = d;
    s->sizes = malloc((size_t)n * sizeof *s->sizes);
    if (!s->sizes)
      goto oom;
    memcpy(s->sizes, sizes, (size_t)n * sizeof *s->sizes);
    s->n_sizes = (size_t)n;
  }
  return TS_OK;
oom:
  tsd_attr_msg_clear(m);
  return ts_error_set(err, TS_NO_MEMORY, "no memory for an attribute message");
}
