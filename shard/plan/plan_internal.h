/* plan_internal.h - the plan structure, shared by plan.c and plan_explain.c, and by the executor
 * (shard/exec.c, libtsshard), which reads a plan's fields as it runs it: planner and executor are
 * one subsystem, two libraries only so that the planner stays free of MPI. Nothing else includes
 * this header. */
#ifndef TS_PLAN_INTERNAL_H
#define TS_PLAN_INTERNAL_H

#include <stdatomic.h>

#include "shard_internal.h"

struct ts_plan {
  atomic_int refs; /* references (ts_plan_ref, ts_plan_destroy) */
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  ts_dtype dtype;
  size_t esize;
  ts_geom *src, *tgt;
  int64_t staging;    /* per-rank staging bound */
  int64_t pair_chunk; /* bytes per pair per round of the chunked strategies */
  int *union_ranks;   /* sorted union of source and target ranks */
  int nunion;
  bool same_group; /* source and target hold the same set of ranks */
  ts_strategy chosen;
  bool forced;
  bool applies[TS_STRATEGY_COUNT];
  const char *why_not[TS_STRATEGY_COUNT];
  ts_plan_costs costs[TS_STRATEGY_COUNT];
  int64_t min_wire;
  bool send_estimated; /* per-rank send bytes of replicated sources are an even-share estimate */
  int rs_dim;          /* reduce_scatter: the mesh dim that goes P -> S */
  int gather_dim;      /* allgather along this mesh dim only (S -> R), or -1: the whole group */
  ts_topology *topo;   /* where the ranks live (a reference; NULL: one host) */
  bool hosts;          /* the union spans several hosts: host costs computed and compared */
  int64_t host_bound;  /* ts_plan_host_bound */
  ts_plan *stages[4];  /* hierarchical: the stages (plan_hier.c) */
  int nstages;
  /* A stage of a hierarchical plan run as a pipelined chain broadcast down each column of its
   * [hosts, ranks per host] target mesh, from row chain_root (whose ranks hold the source): a
   * p2p plan by its transfers, its costs the chain's (plan_hier.c, shard/exec.c). */
  bool chain;
  int chain_root;
  /* A block-cyclic source or target (plan_cyclic.c): the geoms keep the mesh bookkeeping, the
   * holdings are the per-dim overlays of the source and target deals (shard/exec_cyclic.c runs
   * it). */
  bool cyclic;
  ts_overlay *overlay[TS_MAX_DIMS];
};

/* The pieces a chain broadcast forwards (a piece per hop is what the chain adds to one
 * transfer). */
#define TS_CHAIN_PIECE ((int64_t)60 << 10)

/* Position of a world rank in the sorted union, -1 when absent. */
int ts__plan_union_pos(const ts_plan *p, int rank);
/* A target position that receives data: coordinate 0 along every target partial mesh dim but
 * the P(avg) ones (the others hold the identity). */
bool ts__plan_receiver(const ts_plan *p, int64_t tgt_index);
/* How many target positions receive each target part: its replicas, times the sizes of the
 * target's P(avg) mesh dims. */
int64_t ts__plan_part_receivers(const ts_plan *p);
/* How many contributions the chosen strategy sums into each element of a P(avg) source, which
 * the executor then divides by (ts_reduce_finish): the product of the sizes of the P(avg) mesh
 * dims it reduces; 1 when it reduces none. */
int64_t ts__plan_avg_count(const ts_plan *p);
/* local strategy: whether mesh position i copies its source data into its target slice (ranks
 * that turn a Replicate mesh dim into Partial contribute only at coordinate 0), and the group of
 * positions whose target values are reduced together (coordinates of the dims that become
 * Partial set to 0). */
bool ts__plan_local_contributor(const ts_plan *p, int64_t i);
int64_t ts__plan_local_group(const ts_plan *p, int64_t i);
/* plan_hosts.c: strategy s's bytes over the host links into c (host_link_bytes,
 * cross_host_bytes), and the bound (-1: too many cells to count). */
int ts__plan_host_costs(ts_plan *p, ts_strategy s, ts_plan_costs *c, ts_error *err);
/* The estimated time of a one-step strategy's costs at the topology's link rates
 * (ts_plan_costs). */
int64_t ts__plan_time_ns(const ts_plan *p, const ts_plan_costs *c);
int64_t ts__plan_host_bound(const ts_plan *p);
/* plan_hier.c: whether the hierarchical strategy applies (its stages into p->stages), its costs
 * (the stages' summed), or why not; *rc set on an error that ends the planning. */
bool ts__plan_hier_applies(ts_plan *p, ts_plan_costs *c, const char **why, ts_error *err, int *rc);

/* plan_cyclic.c: how geom g deals tensor dim d; the elements a part tuple holds; and the
 * strategies, costs and overlays of a plan with a block-cyclic side (keeps: keeps_some_ops). */
void ts__geom_deal(const ts_geom *g, int d, ts_dim_deal *out);
int64_t ts__plan_cyclic_held(const ts_geom *g, const int64_t *parts);
int ts__plan_cyclic(ts_plan *p, const char *keeps, ts_error *err);

#endif
