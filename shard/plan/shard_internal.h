/* shard_internal.h - declarations shared by the files of libtsplan (attributes, geometry, the
 * planner; ts__ names); not part of the public API. */
#ifndef TS_SHARD_INTERNAL_H
#define TS_SHARD_INTERNAL_H

#include "ts_plan.h"

/* Number of parts tensor dim `dim` is split into (1 when it is not sharded). */
int64_t ts__attr_parts(const ts_attr *a, int dim);
/* A dim with explicit split sizes is not also given the chunk rule (the error says so). */
int ts__attr_check_splits_rule(const ts_attr *a, ts_error *err);

/* A resolved attribute. Mesh dims are classified: shard (tensor dim), replicate, partial. */
struct ts_geom {
  const ts_attr *attr; /* borrowed copy owned by the geom (attr_own) */
  ts_attr *attr_own;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  int64_t nparts[TS_MAX_DIMS];
  int64_t *offsets[TS_MAX_DIMS]; /* nparts + 1 split points */
  int64_t *zeros[TS_MAX_DIMS];   /* nparts + 1: zero-size parts among the first p */
  int64_t mesh_stride[TS_MAX_MESH_DIMS];
  int64_t part_weight[TS_MAX_MESH_DIMS]; /* weight of a shard mesh dim in its dim's part index */
  int64_t nrep, npartial;                /* number of replicate / partial positions */
  int64_t rep_weight[TS_MAX_MESH_DIMS];  /* weight of a replicate dim in the replica index */
  int64_t par_weight[TS_MAX_MESH_DIMS];  /* weight of a partial dim in the partial index */
  int max_rank;
  int64_t *index_of_rank; /* max_rank + 1 entries, -1 for ranks outside the mesh */
};

/* ts_geom_create that also takes a block-cyclic attribute (for the planner: the offsets of a cyclic
 * dim are then a balanced split, not its holdings; shard/plan/cyclic.c has those). */
int ts__geom_create_any(const ts_attr *a, int ndim, const int64_t *shape, ts_geom **out,
                        ts_error *err);

/* The coordinates of a mesh index decomposed into a part per tensor dim, a replica index and a
 * partial index; and the way back. */
void ts__geom_decompose(const ts_geom *g, int64_t mesh_index, int64_t *parts, int64_t *rep,
                        int64_t *par);
int64_t ts__geom_compose(const ts_geom *g, const int64_t *parts, int64_t rep, int64_t par);
/* The box of a part tuple. */
void ts__geom_parts_box(const ts_geom *g, const int64_t *parts, ts_box *out);
/* Parts of dim d whose range meets [lo, hi): [*first, *last); empty when lo >= hi. */
void ts__geom_part_range(const ts_geom *g, int d, int64_t lo, int64_t hi, int64_t *first,
                         int64_t *last);
/* True when every sharded dim is split in equal parts. */
bool ts__geom_uniform(const ts_geom *g);
/* Parts of dim d in [first, last) that are not empty. */
int64_t ts__geom_nonempty_parts(const ts_geom *g, int d, int64_t first, int64_t last);

#endif
