/* ts_plan.h - the public header of libtsplan (shard/plan/): distributed attributes, slice
 * geometry, the reshard planner and its EXPLAIN.
 *
 * Pure C with no MPI and no I/O, so `tshard plan` can simulate meshes far larger than the
 * machine; the CLI, the daemon's wire layer, the distributed einsum's planner and the checkpoint
 * index build on it without MPI. The executor that runs plans (libtsshard, shard/ts_shard.h) is
 * the MPI half. The text form of attributes is in shard/plan/ATTRIBUTES.md. */
#ifndef TS_PLAN_H
#define TS_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ts_kernels.h"
#include "tshard_errors.h"

/* The longest tensor name, NUL included: the store, the checkpoint index and the daemon keep
 * names in char[TS_NAME_MAX] (the wire's rule, TS_RULES_NAME_MAX, is one byte less). */
#define TS_NAME_MAX 128

/* ---------------------------------------------------------------------------------------------
 * Distributed attributes: mesh + placements + split sizes */

#define TS_MAX_MESH_DIMS 8
#define TS_AXIS_NAME_MAX 15 /* bytes of a mesh axis name ("dp", "tp"; [A-Za-z_][A-Za-z0-9_]*) */

/* The largest block size of a block-cyclic shard. */
#define TS_CYCLIC_BLOCK_MAX ((int64_t)1 << 40)

typedef enum { TS_PLACE_SHARD, TS_PLACE_REPLICATE, TS_PLACE_PARTIAL } ts_place_kind;

/* How a sharded tensor dim of length L is cut into parts when no explicit sizes are given.
 * balanced: over all k parts at once, the remainder to the first parts (13 in 4: 4,3,3,3).
 * chunk: torch.chunk's rule, as DTensor's Shard: parts of ceil(L/k), the last ones smaller or
 * empty (13 in 4: 4,4,4,1; 5 in 4: 2,2,1,0); over several mesh dims it nests in mesh-dim order
 * (10 on [S(0,chunk),S(0,chunk)] of a 2x2 mesh: 5,5, then each 3,2: 3,2,3,2). */
typedef enum { TS_SPLIT_BALANCED = 0, TS_SPLIT_CHUNK, TS_SPLIT_COUNT } ts_split_rule;

typedef struct ts_placement {
  ts_place_kind kind;
  int dim;             /* tensor dim, for TS_PLACE_SHARD; negative counts from the end (-1: the
                          last dim) until ts_attr_normalize resolves it on a tensor */
  ts_reduce_op op;     /* for TS_PLACE_PARTIAL */
  ts_split_rule split; /* for TS_PLACE_SHARD; every placement sharding one dim has the same */
  /* Block-cyclic shard (ScaLAPACK's distribution), S(d,cyclic=NB,src=S): blocks of `cyclic`
   * elements of dim d are dealt round-robin along the mesh dim, block 0 to coordinate `src`;
   * each rank keeps its blocks concatenated in global order. 0: the plain (block) split, cut by
   * `split`. */
  int64_t cyclic;
  int64_t src; /* the coordinate that holds block 0; only with cyclic >= 1 */
} ts_placement;

/* "balanced", "chunk"; NULL for another value. */
const char *ts_split_rule_name(ts_split_rule r);

/* A mesh is a row-major grid over `ranks` (world ranks, nranks == product of mesh_shape).
 * splits[d] == NULL: tensor dim d (if sharded) is split by the rule of its placements (balanced,
 * the remainder going to the first parts, or chunk); otherwise splits[d] holds nsplits[d]
 * explicit sizes, one per part. A tensor dim sharded over several mesh dims has (product of their
 * sizes) parts, numbered row-major over those mesh dims in mesh-dim order. */
typedef struct ts_attr {
  int mesh_ndim;
  int64_t mesh_shape[TS_MAX_MESH_DIMS];
  int nranks;
  int *ranks;
  ts_placement place[TS_MAX_MESH_DIMS];
  int64_t *splits[TS_MAX_DIMS];
  int nsplits[TS_MAX_DIMS];
  /* Explicit sizes given for negative dims (neg_splits[i] is dim -(i+1)), kept until
   * ts_attr_normalize moves them to splits[]. */
  int64_t *neg_splits[TS_MAX_DIMS];
  int neg_nsplits[TS_MAX_DIMS];
  /* Mesh axis names: all empty (an unnamed mesh) or one distinct name per mesh dim. Names only
   * label the mesh (text form, equality); they do not change where data lives. */
  char axis[TS_MAX_MESH_DIMS][TS_AXIS_NAME_MAX + 1];
} ts_attr;

/* Builds an attribute (ranks == NULL means 0..n-1). Checks the structure that does not depend on
 * a tensor: mesh sizes, rank list length, repeated or negative ranks, placements. */
int ts_attr_create(ts_attr **out, int mesh_ndim, const int64_t *mesh_shape, const int *ranks,
                   const ts_placement *place, ts_error *err);
/* Gives tensor dim `dim` explicit sizes (n parts); n == 0 returns it to its rule. A negative dim
 * (-TS_MAX_DIMS to -1) counts from the end and is resolved by ts_attr_normalize. */
int ts_attr_set_splits(ts_attr *a, int dim, int n, const int64_t *sizes, ts_error *err);
void ts_attr_destroy(ts_attr **p);
int ts_attr_clone(const ts_attr *a, ts_attr **out, ts_error *err);
bool ts_attr_equal(const ts_attr *a, const ts_attr *b);
/* Checks the attribute against a tensor and a world (world_size <= 0: ranks are not bounded).
 * Negative dims are checked as ts_attr_normalize would resolve them on a tensor of ndim dims. */
int ts_attr_validate(const ts_attr *a, int ndim, const int64_t *shape, int world_size,
                     ts_error *err);
/* Resolves negative dims (of placements and of splits) on a tensor of ndim dims: S(-1) becomes
 * S(ndim-1). A dim below -ndim is refused naming the valid range; a dim given split sizes both
 * as negative and positive is refused. Attributes that met a tensor (stored, planned, saved) are
 * normalized; the text of one that has not keeps its negative dims. */
int ts_attr_normalize(ts_attr *a, int ndim, ts_error *err);
/* The explicit sizes given for tensor dim `dim` as written (negative: counted from the end) and
 * their number in *n (n may be NULL); NULL when it has none. */
const int64_t *ts_attr_splits(const ts_attr *a, int dim, int *n);
/* Whether no dim of a is negative (true for NULL). */
bool ts_attr_is_normal(const ts_attr *a);
/* The split points of tensor dim `dim` (of length len) under a: parts + 1 offsets from 0 to len
 * into offsets[] (parts: the product of the mesh dims sharding it), from the explicit sizes,
 * else by the dim's rule. The one place a split is computed. a must be normalized and valid for
 * the tensor (ts_attr_validate). */
void ts_attr_split_offsets(const ts_attr *a, int dim, int64_t len, int64_t *offsets);
/* TS_OK when dt has the reduction of each of a's partial placements (the 8-bit floats have
 * none); the error names the dtype and the reductions that exist. */
int ts_attr_check_dtype(const ts_attr *a, ts_dtype dt, ts_error *err);
/* The canonical text form (see ATTRIBUTES.md). Parse errors name the offending character. */
int ts_attr_parse(const char *text, ts_attr **out, ts_error *err);
/* Writes the canonical text like snprintf: returns the length it needs (without the NUL). */
size_t ts_attr_format(const ts_attr *a, char *buf, size_t cap);

/* Placement helpers for building attributes in code. */
static inline ts_placement ts_shard_on(int dim) {
  ts_placement p = {TS_PLACE_SHARD, dim, TS_REDUCE_SUM, TS_SPLIT_BALANCED, 0, 0};
  return p;
}
static inline ts_placement ts_shard_rule(int dim, ts_split_rule rule) {
  ts_placement p = {TS_PLACE_SHARD, dim, TS_REDUCE_SUM, rule, 0, 0};
  return p;
}
static inline ts_placement ts_shard_cyclic(int dim, int64_t nb, int64_t src) {
  ts_placement p = {TS_PLACE_SHARD, dim, TS_REDUCE_SUM, TS_SPLIT_BALANCED, nb, src};
  return p;
}
static inline ts_placement ts_replicate(void) {
  ts_placement p = {TS_PLACE_REPLICATE, 0, TS_REDUCE_SUM, TS_SPLIT_BALANCED, 0, 0};
  return p;
}
static inline ts_placement ts_partial(ts_reduce_op op) {
  ts_placement p = {TS_PLACE_PARTIAL, 0, op, TS_SPLIT_BALANCED, 0, 0};
  return p;
}

/* Whether some placement of a is block-cyclic. */
bool ts_attr_is_cyclic(const ts_attr *a);
/* TS_UNSUPPORTED naming a block-cyclic attribute where slices must be boxes (a store, a
 * checkpoint), else TS_OK (geometry.c). */
int ts_attr_refuse_cyclic(const ts_attr *a, ts_error *err);

/* ScaLAPACK's NUMROC: how many of n elements, dealt in blocks of nb round-robin over nprocs
 * processes from process isrc, process iproc holds. */
int64_t ts_numroc(int64_t n, int64_t nb, int64_t iproc, int64_t isrc, int64_t nprocs);

/* The attribute of a ScaLAPACK matrix (cyclic.c). desc is the 9-int array descriptor
 * (DTYPE=1, CTXT, M, N, MB, NB, RSRC, CSRC, LLD); the process grid is nprow x npcol with
 * process (prow, pcol) at world rank ranks[prow*npcol + pcol] (ranks NULL: BLACS order `order`,
 * 'R' row-major rank = prow*npcol + pcol, 'C' column-major rank = pcol*nprow + prow). The M x N
 * column-major matrix is the tshard tensor of shape [N, M] (row-major: element [j, i] is A(i,j)),
 * so a rank's local array (LOCc x LOCr row-major) is byte for byte ScaLAPACK's local array with
 * LLD = LOCr. my_prow >= 0: LLD is checked against that process row's local rows (as ScaLAPACK
 * does); -1: against the largest over the process rows. shape_out (may be NULL) gets [N, M]. */
int ts_attr_from_scalapack_desc(const int desc[9], int nprow, int npcol, char order,
                                const int *ranks, int my_prow, ts_attr **out, int64_t shape_out[2],
                                ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * Block-cyclic arithmetic (cyclic.c)
 *
 * How an attribute deals one tensor dim of length len to its nparts parts: by split points
 * (nb == 0; off has nparts + 1 of them) or block-cyclically (blocks of nb, block k to part
 * (k + src) mod nparts). A part keeps what it owns concatenated in global order, so the local
 * index of an owned element g is the number of elements before g that the part owns. A rank's
 * holding is, per dim, a list of segments (global start, length, local start); its data is the
 * row-major product of its per-dim local extents. */
typedef struct ts_dim_deal {
  int64_t len, nparts, nb, src;
  const int64_t *off;
} ts_dim_deal;

/* Elements of [0, x) that part owns; its local extent is ts_deal_owned_before(d, part, len). */
int64_t ts_deal_owned_before(const ts_dim_deal *d, int64_t part, int64_t x);
/* The part owning element g (0 <= g < len). */
int64_t ts_deal_owner(const ts_dim_deal *d, int64_t g);

/* A run of one dim that a source part and a target part share: global start, length, and where
 * it starts in each one's local array. */
typedef struct ts_run {
  int64_t start, len, src_local, tgt_local;
} ts_run;

/* The overlay of a source deal and a target deal of one dim: the maximal runs with one source
 * and one target owner, computed over one period of the two patterns (the least common multiple
 * of nb * nparts of each cyclic deal; the whole dim otherwise) and repeated arithmetically, so
 * its size is the runs of one period, not of the dim. TS_UNSUPPORTED beyond TS_OVERLAY_MAX
 * runs in a period (blocks that small over a dim that long). */
#define TS_OVERLAY_MAX ((int64_t)1 << 22)
typedef struct ts_overlay ts_overlay;
int ts_overlay_create(const ts_dim_deal *src, const ts_dim_deal *tgt, ts_overlay **out,
                      ts_error *err);
void ts_overlay_destroy(ts_overlay **p);
/* Elements, and runs, that source part a and target part b share over the whole dim. */
int64_t ts_overlay_pair_len(const ts_overlay *o, int64_t a, int64_t b);
int64_t ts_overlay_pair_count(const ts_overlay *o, int64_t a, int64_t b);
/* The shared runs from the first-th on (in global order), at most cap of them, into out;
 * returns how many were written. */
int64_t ts_overlay_pair_runs(const ts_overlay *o, int64_t a, int64_t b, int64_t first, ts_run *out,
                             int64_t cap);
/* The number of source parts that share something with target part b. */
int64_t ts_overlay_sources_of(const ts_overlay *o, int64_t b);
/* The runs of one period (a measure of the overlay's size). */
int64_t ts_overlay_period_runs(const ts_overlay *o);
/* The local extent of source part a, and of target part b, along the overlay's dim. */
int64_t ts_overlay_src_extent(const ts_overlay *o, int64_t a);
int64_t ts_overlay_tgt_extent(const ts_overlay *o, int64_t b);

/* Moving what a source part tuple sp and a target part tuple tp share (ov[d]: the overlay of dim
 * d): the product of the dims' shared runs, the innermost dim's runs copied whole. COPY: from the
 * source's local array (row-major over its local extents) into the target's; PACK: from the
 * source's local array into a contiguous buffer, in row-major order of the shared elements;
 * UNPACK: from such a buffer into the target's local array. Both ends of a transfer compute the
 * same order. Returns the elements moved, or -1 when out of memory. */
typedef enum { TS_CYCLIC_COPY, TS_CYCLIC_PACK, TS_CYCLIC_UNPACK } ts_cyclic_mode;
int64_t ts_cyclic_pair_move(int ndim, ts_overlay *const *ov, const int64_t *sp, const int64_t *tp,
                            size_t esize, const void *from, void *to, ts_cyclic_mode mode);

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

/* TS_UNSUPPORTED for a block-cyclic attribute: its slices are not boxes (the planner models them
 * with run lists, shard/plan/cyclic.c). */
int ts_geom_create(const ts_attr *a, int ndim, const int64_t *shape, ts_geom **out, ts_error *err);
void ts_geom_destroy(ts_geom **p);
/* The geom's own copy of its attribute, normalized (no negative dims). */
const ts_attr *ts_geom_attr(const ts_geom *g);
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
int ts_attr_rank_box(const ts_attr *a, int ndim, const int64_t *shape, int world_rank, ts_box *out,
                     bool *in_mesh, ts_error *err);

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
 *   hierarchical    ranks on several hosts (a topology), the same number of the group's on each:
 *                   stages of the above over a [hosts, ranks per host] mesh, so that what
 *                   crosses a host's link crosses it once (replicated targets, partial sources;
 *                   plan_hier.c).
 * auto picks the cheapest by (wire bytes, busiest rank, messages, peak memory); with ranks on
 * several hosts, by the busiest host link first. */

#define TS_STRATEGY_LIST(X)                                                                        \
  X(AUTO, "auto")                                                                                  \
  X(LOCAL, "local")                                                                                \
  X(ALLREDUCE, "allreduce")                                                                        \
  X(REDUCE_SCATTER, "reduce_scatter")                                                              \
  X(ALLGATHER, "allgather")                                                                        \
  X(ALLTOALL, "alltoall")                                                                          \
  X(P2P, "p2p")                                                                                    \
  X(ROOT, "root")                                                                                  \
  X(HIER, "hierarchical")

typedef enum {
#define TS_X_STRAT(name, text) TS_STRATEGY_##name,
  TS_STRATEGY_LIST(TS_X_STRAT)
#undef TS_X_STRAT
      TS_STRATEGY_COUNT
} ts_strategy;

const char *ts_strategy_name(ts_strategy s);
int ts_strategy_parse(const char *text, ts_strategy *out, ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * Topology: the host of every world rank (topology.c). Hosts are numbered in the order of their
 * first rank. NULL stands for one host everywhere a topology is taken. */

#define TS_TOPOLOGY_RANKS_MAX (1 << 20)

typedef struct ts_topology ts_topology;

/* From a host label per rank (any integers 0..nranks-1), from a host name per rank, from a spec
 * (`hosts=HxR`, `hosts=R1,R2,...`, `map=H0,H1,...`) or from an Open MPI hostfile's text
 * ("NAME [slots=N]" lines, '#' comments; ranks fill the hosts in order, as `mpirun --map-by
 * slot` places them). */
int ts_topology_create(int nranks, const int *host_of, ts_topology **out, ts_error *err);
int ts_topology_from_names(int nranks, const char *const *names, ts_topology **out, ts_error *err);
int ts_topology_parse(const char *spec, ts_topology **out, ts_error *err);
int ts_topology_from_hostfile(const char *text, size_t len, ts_topology **out, ts_error *err);
ts_topology *ts_topology_ref(ts_topology *t);
/* Drops a reference; frees with the last. Accepts NULL. */
void ts_topology_destroy(ts_topology **p);
int ts_topology_nranks(const ts_topology *t);
int ts_topology_nhosts(const ts_topology *t);
/* The host of a rank (0 for ranks outside it, and for every rank of NULL). */
int ts_topology_host(const ts_topology *t, int rank);
int ts_topology_host_ranks(const ts_topology *t, int host);
/* The spec form ("hosts=2x4", "hosts=3,1", "map=0,1,0,1"; "one host" for NULL), snprintf-like. */
size_t ts_topology_format(const ts_topology *t, char *buf, size_t cap);

/* The link classes the cost model weighs, and their rates in bytes per second: set (measured or
 * given) before the topology is shared, else the defaults (a memory copy; a 10 Gbit/s link). */
typedef enum { TS_LINK_HOST, TS_LINK_CROSS, TS_LINK_COUNT } ts_link;
#define TS_LINK_HOST_DEFAULT_BPS 8e9
#define TS_LINK_CROSS_DEFAULT_BPS 1.25e9
const char *ts_link_name(ts_link link); /* "host", "cross" */
int ts_topology_set_rate(ts_topology *t, ts_link link, double bytes_per_s, ts_error *err);
/* The rate of a class (the default when none was set; NULL: the defaults). */
double ts_topology_rate(const ts_topology *t, ts_link link);
bool ts_topology_rate_given(const ts_topology *t, ts_link link);
/* A rate: a number and a unit, tc's bit rates (500mbit) or bytes (12GB/s, 900MiB/s). */
int ts_rate_parse(const char *text, double *out, ts_error *err);
/* "host=RATE,cross=RATE" (either may be left out) onto t. */
int ts_topology_parse_rates(ts_topology *t, const char *spec, ts_error *err);

/* Costs of one strategy for one reshard. Bytes exclude copies a rank makes to itself. */
typedef struct ts_plan_costs {
  int64_t wire_bytes;     /* total bytes over the network, all ranks */
  int64_t max_rank_bytes; /* max over ranks of max(bytes sent, bytes received) */
  int64_t messages;       /* point-to-point messages (pairs x chunks, or collective pairs) */
  /* max over ranks of staging memory beyond source and target slices; for p2p and alltoall an
   * upper bound: pieces of plain (unblocked, non-partial) slices move in place with none */
  int64_t peak_extra_bytes;
  int64_t rounds; /* communication rounds (chunks) */
  /* With a topology of several hosts: the most bytes that enter or leave one host over its link
   * (the busiest host link), and the bytes that cross between hosts in all. Exact for p2p and
   * alltoall (from the transfers, or an even-spread estimate beyond 2^20 pieces); for the
   * strategies that run as MPI collectives, a model of Open MPI's algorithms (plan_hosts.c). */
  int64_t host_link_bytes;
  int64_t cross_host_bytes;
  /* The estimated time: the busiest rank's bytes at the rate inside a host, plus (several hosts)
   * the busiest host link's bytes at the rate between hosts; hierarchical: its stages' sum. */
  int64_t time_ns;
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
/* The same, for ranks placed on hosts by `topo` (NULL: one host; the plan keeps a reference):
 * with several hosts, the cost model compares the busiest host link first, then as above. */
int ts_plan_create_on(int ndim, const int64_t *shape, ts_dtype dt, const ts_attr *src,
                      const ts_attr *tgt, const ts_plan_opts *opts, ts_topology *topo,
                      ts_plan **out, ts_error *err);
/* Relabeling (relabel.c): which of dst's own ranks takes which of its mesh positions, so that
 * the most elements of each position's block are already on its rank under src (none under a
 * partial src). Writes dst->nranks ranks, row-major over dst's mesh (a permutation of
 * dst->ranks; dst's order where nothing is gained), and *kept (may be NULL) the elements that stay
 * in place. An optimal assignment up to TS_RELABEL_EXACT_MAX ranks, greedy beyond. Checks both
 * attributes against the shape. */
#define TS_RELABEL_EXACT_MAX 256
int ts_plan_relabel(const ts_attr *src, const ts_attr *dst, int ndim, const int64_t *shape,
                    int *ranks, int64_t *kept, ts_error *err);
/* The same, applied: dst's ranks become the order chosen (unchanged on an error). */
int ts_attr_relabel(const ts_attr *src, ts_attr *dst, int ndim, const int64_t *shape, int64_t *kept,
                    ts_error *err);
/* The stages of a hierarchical plan (0 for the other strategies), and stage i: a plan of its own,
 * run one after the other by the executor. */
int ts_plan_stage_count(const ts_plan *p);
const ts_plan *ts_plan_stage(const ts_plan *p, int i);
/* The fewest bytes that must enter or leave one host for this reshard (every element a host's
 * target ranks need and none of its source ranks holds enters it once; partial values reduced
 * where they lie), the largest over hosts; -1 when not computed (one host, or too many cells). */
int64_t ts_plan_host_bound(const ts_plan *p);
/* Releases the caller's reference: a plan is freed with its last one. */
void ts_plan_destroy(ts_plan **p);
/* Another reference to p (plans are immutable once made, so they can be shared: plans.c keeps
 * them for repeated reshards); returns p. */
ts_plan *ts_plan_ref(ts_plan *p);
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

/* Casts in transit (cast_plan.c): the dtype a reshard of a `from` tensor with source attribute
 * src that casts to `to` moves on the wire: `to` when src has no partial placement and `to` is
 * narrower or tgt is partial (each rank converts its source slice before sending), else `from`
 * (the pieces travel, and partial sources reduce, in the source dtype; each target rank converts
 * its new slice). The reshard is planned for that dtype. TS_BAD_DTYPE for an invalid dtype, or
 * when `to` lacks the reduction of one of tgt's partial placements; TS_UNSUPPORTED for a cast
 * from a partial source to a partial target. */
int ts_cast_wire_dtype(ts_dtype from, ts_dtype to, const ts_attr *src, const ts_attr *tgt,
                       ts_dtype *wire, ts_error *err);

/* The EXPLAIN: strategy, why, costs of every strategy, per-rank summary (at most max_ranks ranks
 * listed; 0 lists 8). Returns a malloc'd string, NULL when out of memory. */
char *ts_plan_explain(const ts_plan *p, int max_ranks);

/* One piece moved between two ranks: the global box it covers. */
typedef struct ts_transfer {
  int peer;  /* world rank; may be the rank itself (a local copy) */
  int group; /* receive side: transfers with the same group are reduced together */
  ts_box box;
  int64_t bytes;
} ts_transfer;

/* What one rank does under the intersection strategies (p2p, all-to-all). */
typedef struct ts_rank_plan {
  int rank;
  bool in_src, in_tgt;
  bool receiver; /* a target rank that receives data (others of a partial target fill
                    the identity) */
  ts_box src_box, tgt_box;
  int nsend, nrecv;
  ts_transfer *send;              /* ordered by peer */
  ts_transfer *recv;              /* ordered by group, then contributor */
  int64_t send_bytes, recv_bytes; /* excluding transfers to itself */
} ts_rank_plan;

int ts_plan_rank(const ts_plan *p, int world_rank, ts_rank_plan *out, ts_error *err);
void ts_rank_plan_clear(ts_rank_plan *rp);

/* The union of source and target ranks, sorted (n returned through count). */
const int *ts_plan_union_ranks(const ts_plan *p, int *count);

#endif
