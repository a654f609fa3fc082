/* ts_shard.h - the public header of the sharding layer: distributed attributes, slice geometry,
 * the reshard planner, the executor and the per-rank tensor store.
 *
 * Two libraries implement it. libtsplan (attributes, geometry, planner, EXPLAIN) is pure C with no
 * MPI, so `tshard plan` can simulate meshes far larger than the machine. libtsshard (executor and
 * store) adds the MPI layer through libtscomm; this header only forward-declares ts_world so that
 * planner users never see mpi.h. The text form of attributes is in shard/ATTRIBUTES.md. */
#ifndef TS_SHARD_H
#define TS_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ts_kernels.h"
#include "tshard_errors.h"

/* ---------------------------------------------------------------------------------------------
 * Distributed attributes: mesh + placements + split sizes */

#define TS_MAX_MESH_DIMS 8
#define TS_AXIS_NAME_MAX 15 /* bytes of a mesh axis name ("dp", "tp"; [A-Za-z_][A-Za-z0-9_]*) */

typedef enum { TS_PLACE_SHARD, TS_PLACE_REPLICATE, TS_PLACE_PARTIAL } ts_place_kind;

typedef struct ts_placement {
  ts_place_kind kind;
  int dim;            /* tensor dim, for TS_PLACE_SHARD */
  ts_reduce_op op;    /* for TS_PLACE_PARTIAL */
} ts_placement;

/* A mesh is a row-major grid over `ranks` (world ranks, nranks == product of mesh_shape).
 * splits[d] == NULL: tensor dim d (if sharded) is split balanced, the remainder going to the first
 * parts; otherwise splits[d] holds nsplits[d] explicit sizes, one per part. A tensor dim sharded
 * over several mesh dims has (product of their sizes) parts, numbered row-major over those mesh
 * dims in mesh-dim order. */
typedef struct ts_attr {
  int mesh_ndim;
  int64_t mesh_shape[TS_MAX_MESH_DIMS];
  int nranks;
  int *ranks;
  ts_placement place[TS_MAX_MESH_DIMS];
  int64_t *splits[TS_MAX_DIMS];
  int nsplits[TS_MAX_DIMS];
  /* Mesh axis names: all empty (an unnamed mesh) or one distinct name per mesh dim. Names only
   * label the mesh (text form, equality); they do not change where data lives. */
  char axis[TS_MAX_MESH_DIMS][TS_AXIS_NAME_MAX + 1];
} ts_attr;

/* Builds an attribute (ranks == NULL means 0..n-1). Checks the structure that does not depend on
 * a tensor: mesh sizes, rank list length, repeated or negative ranks, placements. */
int ts_attr_create(ts_attr **out, int mesh_ndim, const int64_t *mesh_shape, const int *ranks,
                   const ts_placement *place, ts_error *err);
/* Gives tensor dim `dim` explicit sizes (n parts); n == 0 returns it to balanced. */
int ts_attr_set_splits(ts_attr *a, int dim, int n, const int64_t *sizes, ts_error *err);
void ts_attr_destroy(ts_attr **p);
int ts_attr_clone(const ts_attr *a, ts_attr **out, ts_error *err);
bool ts_attr_equal(const ts_attr *a, const ts_attr *b);
/* Checks the attribute against a tensor and a world (world_size <= 0: ranks are not bounded). */
int ts_attr_validate(const ts_attr *a, int ndim, const int64_t *shape, int world_size,
                     ts_error *err);
/* The canonical text form (see ATTRIBUTES.md). Parse errors name the offending character. */
int ts_attr_parse(const char *text, ts_attr **out, ts_error *err);
/* Writes the canonical text like snprintf: returns the length it needs (without the NUL). */
size_t ts_attr_format(const ts_attr *a, char *buf, size_t cap);

/* Placement helpers for building attributes in code. */
static inline ts_placement ts_shard_on(int dim) {
  ts_placement p = {TS_PLACE_SHARD, dim, TS_REDUCE_SUM};
  return p;
}
static inline ts_placement ts_replicate(void) {
  ts_placement p = {TS_PLACE_REPLICATE, 0, TS_REDUCE_SUM};
  return p;
}
static inline ts_placement ts_partial(ts_reduce_op op) {
  ts_placement p = {TS_PLACE_PARTIAL, 0, op};
  return p;
}

/* ---------------------------------------------------------------------------------------------
 * Slice geometry */

/* A box: [lo[d], hi[d]) per tensor dim. */
typedef struct ts_box {
  int ndim;
  int64_t lo[TS_MAX_DIMS];
  int64_t hi[TS_MAX_DIMS];
} ts_box;

int64_t ts_box_numel(const ts_box *b);
/* Writes a ∩ b to out; returns true when it is not empty. */
bool ts_box_intersect(const ts_box *a, const ts_box *b, ts_box *out);
bool ts_box_contains(const ts_box *outer, const ts_box *inner);
bool ts_box_equal(const ts_box *a, const ts_box *b);

/* An attribute resolved on a tensor shape: split points per dim, rank lookup. */
typedef struct ts_geom ts_geom;

int ts_geom_create(const ts_attr *a, int ndim, const int64_t *shape, ts_geom **out,
                   ts_error *err);
void ts_geom_destroy(ts_geom **p);
/* Index of a world rank in the mesh (row-major), or -1 when it is not in the mesh. */
int64_t ts_geom_mesh_index(const ts_geom *g, int world_rank);
/* The box of the slice a world rank holds; false when the rank is not in the mesh. */
bool ts_geom_rank_box(const ts_geom *g, int world_rank, ts_box *out);
/* The box of the slice at mesh index i. */
void ts_geom_index_box(const ts_geom *g, int64_t mesh_index, ts_box *out);
/* Split points of tensor dim d: parts(d) + 1 offsets, from 0 to shape[d]. */
int64_t ts_geom_parts(const ts_geom *g, int d);
const int64_t *ts_geom_offsets(const ts_geom *g, int d);

/* Convenience: the box of one rank's slice straight from an attribute. */
int ts_attr_rank_box(const ts_attr *a, int ndim, const int64_t *shape, int world_rank,
                     ts_box *out, bool *in_mesh, ts_error *err);

/* Chunking a box into sub-boxes of at most max_bytes (row-major slabs; a single element is never
 * split). Both ends of a transfer compute the same chunks from the same box. */
int64_t ts_box_chunk_count(const ts_box *b, size_t esize, int64_t max_bytes);
void ts_box_chunk(const ts_box *b, size_t esize, int64_t max_bytes, int64_t index, ts_box *out);

/* ---------------------------------------------------------------------------------------------
 * The planner (pure, no MPI)
 *
 * Strategies:
 *   local           every rank builds its target slice from its own source slice (R -> S,
 *                   S/R -> P, layout changes, ...): no bytes on the wire.
 *   allreduce       P -> R along one or more mesh dims (the rest unchanged), per mesh-dim line.
 *   reduce_scatter  P -> S(d) along one mesh dim (the rest unchanged), per mesh-dim line.
 *   allgather       S -> R along one mesh dim of an N-D mesh (per line); or, over one group of
 *                   ranks with a uniform split, gather every slice and cut locally.
 *   alltoall        one group, any split: the intersection transfers as all-to-all-v rounds.
 *   p2p             any pair of attributes (disjoint or overlapping groups): each target rank
 *                   receives only the intersecting pieces, one replica per piece.
 *   root            one group, any split: a root receives every slice, broadcasts the whole
 *                   tensor, every rank cuts.
 * auto picks the cheapest by (wire bytes, busiest rank, messages, peak memory). */

#define TS_STRATEGY_LIST(X)                                                                        \
  X(AUTO, "auto")                                                                                  \
  X(LOCAL, "local")                                                                                \
  X(ALLREDUCE, "allreduce")                                                                        \
  X(REDUCE_SCATTER, "reduce_scatter")                                                              \
  X(ALLGATHER, "allgather")                                                                        \
  X(ALLTOALL, "alltoall")                                                                          \
  X(P2P, "p2p")                                                                                    \
  X(ROOT, "root")

typedef enum {
#define TS_X_STRAT(name, text) TS_STRATEGY_##name,
  TS_STRATEGY_LIST(TS_X_STRAT)
#undef TS_X_STRAT
      TS_STRATEGY_COUNT
} ts_strategy;

const char *ts_strategy_name(ts_strategy s);
int ts_strategy_parse(const char *text, ts_strategy *out, ts_error *err);

/* Costs of one strategy for one reshard. Bytes exclude copies a rank makes to itself. */
typedef struct ts_plan_costs {
  int64_t wire_bytes;       /* total bytes over the network, all ranks */
  int64_t max_rank_bytes;   /* max over ranks of max(bytes sent, bytes received) */
  int64_t messages;         /* point-to-point messages (pairs x chunks, or collective pairs) */
  /* max over ranks of staging memory beyond source and target slices; for p2p and alltoall an
   * upper bound: pieces of plain (unblocked, non-partial) slices move in place with none */
  int64_t peak_extra_bytes;
  int64_t rounds;           /* communication rounds (chunks) */
} ts_plan_costs;

/* The largest per-rank staging bound a plan accepts. */
#define TS_PLAN_STAGING_MAX ((int64_t)1 << 30)

typedef struct ts_plan_opts {
  ts_strategy strategy;  /* TS_STRATEGY_AUTO picks the cheapest */
  int64_t staging_bytes; /* per-rank staging bound; 0: 64 MiB; at most TS_PLAN_STAGING_MAX */
  int world_size;        /* ranks must be below it; <= 0: not bounded */
} ts_plan_opts;

typedef struct ts_plan ts_plan;

int ts_plan_create(int ndim, const int64_t *shape, ts_dtype dt, const ts_attr *src,
                   const ts_attr *tgt, const ts_plan_opts *opts, ts_plan **out, ts_error *err);
void ts_plan_destroy(ts_plan **p);
ts_strategy ts_plan_strategy(const ts_plan *p);
const ts_plan_costs *ts_plan_get_costs(const ts_plan *p);
/* Whether strategy s applies to this reshard, its costs when it does, and when it does not, why. */
bool ts_plan_applies(const ts_plan *p, ts_strategy s, ts_plan_costs *costs, const char **why_not);
/* The minimum bytes any intersection transfer must move (each target element not held locally
 * crosses the wire once from one source; partial sources once per partial contributor). */
int64_t ts_plan_min_wire_bytes(const ts_plan *p);
int64_t ts_plan_staging_bytes(const ts_plan *p);
const ts_geom *ts_plan_src_geom(const ts_plan *p);
const ts_geom *ts_plan_tgt_geom(const ts_plan *p);
const ts_attr *ts_plan_src_attr(const ts_plan *p);
const ts_attr *ts_plan_tgt_attr(const ts_plan *p);
ts_dtype ts_plan_dtype(const ts_plan *p);
int ts_plan_ndim(const ts_plan *p);
const int64_t *ts_plan_shape(const ts_plan *p);
/* The per-pair chunk size of the p2p and all-to-all rounds (bytes). */
int64_t ts_plan_pair_chunk_bytes(const ts_plan *p);

/* The EXPLAIN: strategy, why, costs of every strategy, per-rank summary (at most max_ranks ranks
 * listed; 0 lists 8). Returns a malloc'd string, NULL when out of memory. */
char *ts_plan_explain(const ts_plan *p, int max_ranks);

/* One piece moved between two ranks: the global box it covers. */
typedef struct ts_transfer {
  int peer;      /* world rank; may be the rank itself (a local copy) */
  int group;     /* receive side: transfers with the same group are reduced together */
  ts_box box;
  int64_t bytes;
} ts_transfer;

/* What one rank does under the intersection strategies (p2p, all-to-all). */
typedef struct ts_rank_plan {
  int rank;
  bool in_src, in_tgt;
  bool receiver;       /* a target rank that receives data (others of a partial target fill
                          the identity) */
  ts_box src_box, tgt_box;
  int nsend, nrecv;
  ts_transfer *send;   /* ordered by peer */
  ts_transfer *recv;   /* ordered by group, then contributor */
  int64_t send_bytes, recv_bytes; /* excluding transfers to itself */
} ts_rank_plan;

int ts_plan_rank(const ts_plan *p, int world_rank, ts_rank_plan *out, ts_error *err);
void ts_rank_plan_clear(ts_rank_plan *rp);

/* The union of source and target ranks, sorted (n returned through count). */
const int *ts_plan_union_ranks(const ts_plan *p, int *count);

/* ---------------------------------------------------------------------------------------------
 * The executor (MPI through libtscomm) */

typedef struct ts_world ts_world;

typedef struct ts_exec_opts {
  int64_t max_alloc_bytes; /* local bound on target + staging bytes; 0: unbounded */
  int copy_threads;        /* strided-copy threads; 0: kernel default */
  /* The two agreements (before any data moves, and the commit) span the whole world instead of
   * the union of the source and target ranks: every rank calls, ranks outside both meshes move
   * nothing, and every rank returns the same status and message. */
  bool agree_world;
  /* A failure the caller met while preparing this reshard on this rank (TS_OK: none), agreed on
   * with the executor's own checks in the first agreement; with agree_world the plan may then be
   * NULL on this rank. */
  int prior_status;
  const ts_error *prior_err;
} ts_exec_opts;

typedef struct ts_exec_report {
  ts_strategy strategy;
  int64_t bytes_sent;       /* this rank, to other ranks, as handed to MPI */
  int64_t bytes_received;
  int64_t peak_extra_bytes; /* this rank's peak staging memory */
} ts_exec_report;

/* Runs a plan: prepare, one agreement, transfer, one commit agreement. Every rank of the world may
 * call it; without opts->agree_world, ranks outside the source and target meshes return at once. src: this rank's source slice (ignored when it holds none). tgt_tag: the layout
 * tag of the target slice (NULL: row-major). On success *out holds the new slice (data == NULL
 * when this rank holds none; free it with ts_shard_free_tensor). Atomic: on any failure on any
 * rank, every participating rank returns the same error and *out is left empty. */
int ts_reshard_exec(ts_world *w, const ts_plan *plan, const ts_tensor *src, const char *tgt_tag,
                    const ts_exec_opts *opts, ts_tensor *out, ts_exec_report *report,
                    ts_error *err);
void ts_shard_free_tensor(ts_tensor *t);

/* Allocation used by the executor, the store and the daemon (target slices, staging): the
 * process's buffer pool (ts_pool_alloc: pre-faulted mappings reused by size class, counted against
 * the pool's memory limit), 4 KiB pages (huge pages made reshards slower when they were faulted in
 * while MPI wrote them; the pool's huge setting turns them on). ts_shard_alloc_as takes the pool's
 * flags (TS_POOL_STAGING), names the buffer and reports TS_LIMIT or TS_NO_MEMORY in err; free with
 * ts_shard_free. A test hook: the countdown-th allocation from now fails (1: the next one; 0 turns
 * it off); it is per process, so one rank can be made to fail. */
void *ts_shard_alloc(size_t bytes);
void *ts_shard_alloc_as(size_t bytes, unsigned flags, const char *what, ts_error *err);
void ts_shard_free(void *p); /* accepts NULL */
void ts_shard_debug_fail_alloc(long countdown);

/* ---------------------------------------------------------------------------------------------
 * The per-rank tensor store */

#define TS_NAME_MAX 128

typedef struct ts_stored {
  char name[TS_NAME_MAX];
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  ts_dtype dtype;
  ts_attr *attr;
  char layout_tag[32]; /* the tag of the local slice ("" : row-major) */
  bool has_slice;      /* this rank holds a slice */
  ts_box box;
  ts_tensor local;     /* data NULL when the rank holds no slice */
} ts_stored;

typedef struct ts_store ts_store;

/* quota_bytes: total local slice bytes allowed (0: unbounded). */
int ts_store_create(ts_store **out, int world_rank, int64_t quota_bytes, ts_error *err);
void ts_store_destroy(ts_store **p);
/* Adds a tensor with a zero-filled local slice in the given layout tag (NULL: row-major); the
 * caller fills (*entry)->local. */
int ts_store_add(ts_store *s, const char *name, int ndim, const int64_t *shape, ts_dtype dt,
                 const ts_attr *attr, const char *layout_tag, ts_stored **entry, ts_error *err);
/* The same, the slice left as the allocator gave it: for a caller that writes every byte
 * (checkpoint load) or drops the tensor. */
int ts_store_add_unfilled(ts_store *s, const char *name, int ndim, const int64_t *shape,
                          ts_dtype dt, const ts_attr *attr, const char *layout_tag,
                          ts_stored **entry, ts_error *err);
ts_stored *ts_store_find(ts_store *s, const char *name);
int ts_store_drop(ts_store *s, const char *name, ts_error *err);
int64_t ts_store_used_bytes(const ts_store *s);
int ts_store_count(const ts_store *s);
/* The i-th stored tensor (0 <= i < ts_store_count), in no particular order; NULL outside. */
ts_stored *ts_store_at(ts_store *s, int i);
/* Reshards a stored tensor in place: plans, runs, and only when every rank succeeded replaces the
 * slice and attribute; otherwise the tensor stays as it was on every rank. Collective over the
 * whole world (every rank calls it; all return the same status and message). */
int ts_store_reshard(ts_store *s, ts_world *w, const char *name, const ts_attr *tgt,
                     const char *layout_tag, const ts_plan_opts *popts, ts_exec_report *report,
                     ts_error *err);
/* The same, after the caller's own preparation: prior_status (TS_OK: none) is a failure the
 * caller met on this rank, agreed on in the reshard's first agreement. Every rank then returns
 * the same status and message. */
int ts_store_reshard_after(ts_store *s, ts_world *w, const char *name, const ts_attr *tgt,
                           const char *layout_tag, const ts_plan_opts *popts, int prior_status,
                           const ts_error *prior_err, ts_exec_report *report, ts_error *err);

/* scatter.c: a whole-tensor put (the row-major tensor at `root` -> the stored slices, written in
 * place) or get (slices -> the whole tensor at root) for attributes without partial placements,
 * in chunks of at most max_chunk bytes (and 16 MiB). Collective over the world; the status is
 * agreed. `whole` is used at the root only. */
bool ts_attr_has_partial(const ts_attr *a);
int ts_scatter_gather(ts_world *world, ts_stored *t, int root, void *whole, bool put,
                      int64_t max_chunk, ts_error *err);
/* The same with the whole tensor in another process of this node (a client's memory: the
 * process, checked by every rank before its copy, and the address of its first byte there): every rank copies its own piece straight between its
 * slice and that memory (ts_comm_process_copy), all at once; a get writes each distinct box
 * once, a put reads into new slices that replace the stored ones only when every rank read its
 * piece (a put that fails anywhere leaves the tensor as it was). Only where
 * ts_scatter_direct_applies (one node with single copies, no partial placement, no blocked
 * layout): the same answer on every rank. Collective; the status is agreed. */
bool ts_scatter_direct_applies(ts_world *world, const ts_stored *t);
typedef struct ts_comm_proc ts_comm_proc; /* ts_comm.h */
int ts_scatter_gather_direct(ts_world *world, ts_stored *t, int root, const ts_comm_proc *proc,
                             uint64_t addr, bool put, ts_error *err);

#endif
