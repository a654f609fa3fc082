/* ts_shard.h - the public header of libtsshard (shard/): the reshard executor, which runs a plan
 * of libtsplan (shard/plan/ts_plan.h) over the world through libtscomm, the per-rank tensor store
 * and the whole-tensor scatter and gather.
 *
 * The store lives here, not in the daemon, because the libraries beside it work on stored
 * tensors: checkpoints (shard/ckpt/) save stored slices and load into new ones, the distributed
 * einsum (shard/einsum/) reshards its operands in the store and stores its result, and a stored
 * tensor reshards in place through the executor (ts_store_reshard). The daemon holds one store per
 * rank and calls these functions from its engine thread, the one thread that calls MPI. This
 * header only forward-declares ts_world, so its users never see mpi.h. */
#ifndef TS_SHARD_H
#define TS_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ts_plan.h"
#include "ts_pool.h" /* ts_shard_alloc_as takes the pool's flags */
#include "tshard_errors.h"

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
  /* Small pieces go through their own exchange even when every rank's would fit its agreement
   * message (ts_comm_agree_relay): for tests that compare both ways. */
  bool no_relay;
} ts_exec_opts;

typedef struct ts_exec_report {
  ts_strategy strategy;
  int64_t bytes_sent; /* this rank, to other ranks, as handed to MPI */
  int64_t bytes_received;
  int64_t peak_extra_bytes; /* this rank's peak staging memory */
  bool relayed;             /* the pieces rode on the first agreement, through comm rank 0 */
  /* When this rank reached each phase (ts_wait_now_ns; 0: not reached): the executor began
   * (planned), the first agreement passed, the data moved, the commit agreement passed. A
   * hierarchical plan: its first stage's beginning and agreement, its last stage's end. */
  int64_t t_begin_ns, t_agreed_ns, t_moved_ns, t_done_ns;
} ts_exec_report;

/* Runs a plan: prepare, one agreement, transfer, one commit agreement. Every rank of the world may
 * call it; without opts->agree_world, ranks outside the source and target meshes return at once.
 * src: this rank's source slice (ignored when it holds none). tgt_tag: the layout tag of the target
 * slice (NULL: row-major). On success *out holds the new slice (data == NULL when this rank holds
 * none; free it with ts_shard_free_tensor). Atomic: on any failure on any rank, every participating
 * rank returns the same error and *out is left empty. */
int ts_reshard_exec(ts_world *w, const ts_plan *plan, const ts_tensor *src, const char *tgt_tag,
                    const ts_exec_opts *opts, ts_tensor *out, ts_exec_report *report,
                    ts_error *err);
void ts_shard_free_tensor(ts_tensor *t);

/* Coalesced reshards: many plans run as one operation over the world, every piece between two
 * ranks of every item in one message (or single copies for large pairs: ts_comm_exchange_many),
 * after one agreement. Only plans ts_exec_coalescable accepts (no partial placement, row-major on
 * both sides, at most 1 GiB): their pieces move in place, so once every rank prepared, nothing
 * but MPI itself can fail and no commit agreement is needed. The answer is the same on every
 * rank (the same on every rank of the world). */
typedef struct ts_exec_item {
  const char *name; /* named in errors */
  const ts_plan *plan;
  const ts_tensor *src; /* this rank's source slice (ignored when it holds none) */
  int64_t max_alloc;    /* bound on the new slices made so far; 0: unbounded */
  int prior_status;     /* a failure the caller met preparing this item here (TS_OK: none) */
  const ts_error *prior_err;
  ts_tensor out; /* on success: the new slice (data NULL when this rank holds none) */
  ts_exec_report report;
} ts_exec_item;
bool ts_exec_coalescable(const ts_plan *p, const char *src_tag, const char *tgt_tag);
/* Whether a P -> R item can join the batch's grouped reductions (ts_reshard_exec_many): an
 * allreduce on one mesh, row-major slices that stay where they are. */
bool ts_exec_reducible(const ts_plan *p, const char *src_tag, const char *tgt_tag);
int ts_reshard_exec_many(ts_world *w, int n, ts_exec_item *items, int prior_status,
                         const ts_error *prior_err, ts_error *err);

/* Allocation used by the executor, the store and the daemon (target slices, staging): the
 * process's buffer pool (ts_pool_alloc: pre-faulted mappings reused by size class, counted against
 * the pool's memory limit; huge pages from 2 MiB when the pool's huge setting is on, as the
 * daemon's is by default: their pre-faulting and release cost far less). ts_shard_alloc_as takes
 * the pool's flags (TS_POOL_STAGING), names the buffer and reports TS_LIMIT or TS_NO_MEMORY in
 * err; free with
 * ts_shard_free. A test hook: the countdown-th allocation from now fails (1: the next one; 0 turns
 * it off); it is per process, so one rank can be made to fail. */
void *ts_shard_alloc(size_t bytes);
void *ts_shard_alloc_as(size_t bytes, unsigned flags, const char *what, ts_error *err);
void ts_shard_free(void *p); /* accepts NULL */
void ts_shard_debug_fail_alloc(long countdown);

/* ---------------------------------------------------------------------------------------------
 * The per-rank tensor store */

typedef struct ts_stored {
  char name[TS_NAME_MAX];
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  ts_dtype dtype;
  ts_attr *attr;
  char layout_tag[32]; /* the tag of the local slice ("" : row-major) */
  bool has_slice;      /* this rank holds a slice */
  ts_box box;
  ts_tensor local; /* data NULL when the rank holds no slice */
  /* What another library keeps with this tensor for as long as its entry lives (an imported
   * file's __metadata__, shard/ckpt/safetensors_format.c): the store calls
   * kept_release(kept) when it frees the entry (a drop, or a replacement by a new tensor of the
   * name); writes into the tensor and reshards keep it. NULL: nothing kept. */
  void *kept;
  void (*kept_release)(void *kept);
  size_t charged; /* the entry's own bytes (it and its attribute), in the memory account */
} ts_stored;

/* An index from names to positions in an array its owner keeps (names.c): O(1) lookups. The
 * owner gives the name at a position through `at`. add after the array holds pos (count
 * entries in all); remove while the removed entry and the others are still in place; moved
 * before the entry named `name` moves to position `to` (its old position still valid). */
typedef struct ts_name_index {
  int *slot; /* position + 1; 0: empty */
  int cap;   /* a power of two, or 0 */
} ts_name_index;
typedef const char *(*ts_name_at)(const void *ctx, int pos);
int ts_name_index_find(const ts_name_index *x, const char *name, ts_name_at at, const void *ctx);
int ts_name_index_add(ts_name_index *x, int pos, int count, ts_name_at at, const void *ctx);
void ts_name_index_remove(ts_name_index *x, const char *name, ts_name_at at, const void *ctx);
void ts_name_index_moved(ts_name_index *x, const char *name, int to, ts_name_at at,
                         const void *ctx);
void ts_name_index_clear(ts_name_index *x); /* frees the table; accepts NULL */

/* Plans kept for repeated reshards (plans.c): ts_plan_cache_get gives the plan ts_plan_create_on
 * would (on the cache's topology), shared with earlier calls of the same arguments (release it with
 * ts_plan_destroy as usual); at most `capacity` plans are kept, the least recently used given up
 * first. */
typedef struct ts_plan_cache ts_plan_cache;
int ts_plan_cache_create(int capacity, ts_plan_cache **out, ts_error *err);
void ts_plan_cache_destroy(ts_plan_cache **p);
int ts_plan_cache_get(ts_plan_cache *c, int ndim, const int64_t *shape, ts_dtype dt,
                      const ts_attr *src, const ts_attr *tgt, const ts_plan_opts *opts,
                      ts_plan **out, ts_error *err);
/* How many calls found their plan kept, and how many made one. */
void ts_plan_cache_counts(ts_plan_cache *c, uint64_t *hits, uint64_t *misses);
/* Plans made from now on are planned on topo (a reference is kept; NULL: one host); the plans
 * kept so far are given up. Set it before the cache is shared with other threads' lookups. */
void ts_plan_cache_set_topology(ts_plan_cache *c, ts_topology *topo);
const ts_topology *ts_plan_cache_topology(const ts_plan_cache *c);
#define TS_STORE_PLANS 64 /* plans a store keeps */

typedef struct ts_store ts_store;

/* quota_bytes: total local slice bytes allowed (0: unbounded). */
int ts_store_create(ts_store **out, int world_rank, int64_t quota_bytes, ts_error *err);
void ts_store_destroy(ts_store **p);
/* The plans this store's reshards keep. */
ts_plan_cache *ts_store_plans(ts_store *s);
/* Adds a tensor with a zero-filled local slice in the given layout tag (NULL: row-major); the
 * caller fills (*entry)->local. A name with the reserved prefix (TS_RULES_RESERVED_PREFIX) is a
 * library's temporary, which clients cannot name. */
int ts_store_add(ts_store *s, const char *name, int ndim, const int64_t *shape, ts_dtype dt,
                 const ts_attr *attr, const char *layout_tag, ts_stored **entry, ts_error *err);
/* The same, the slice left as the allocator gave it: for a caller that writes every byte
 * (checkpoint load) or drops the tensor. */
int ts_store_add_unfilled(ts_store *s, const char *name, int ndim, const int64_t *shape,
                          ts_dtype dt, const ts_attr *attr, const char *layout_tag,
                          ts_stored **entry, ts_error *err);
ts_stored *ts_store_find(ts_store *s, const char *name);
int ts_store_drop(ts_store *s, const char *name, ts_error *err);
/* Swaps everything two stored tensors are (shape, dtype, attribute, slice, kept data) but their
 * names: a replacement made beside a tensor under a temporary name takes its place. */
void ts_store_swap(ts_store *s, ts_stored *a, ts_stored *b);
int64_t ts_store_used_bytes(const ts_store *s);
/* ts_store_used_bytes by the slices' dtype, kept as tensors come, go and change (no walk). */
void ts_store_dtype_bytes(const ts_store *s, int64_t out[TS_DTYPE_COUNT]);
/* Changes e's dtype (a cast committed), moving its bytes between the dtype totals. */
void ts_store_set_dtype(ts_store *s, ts_stored *e, ts_dtype dt);
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

/* The same, casting the values to *cast (NULL: the tensor keeps its dtype) as they move
 * (cast.c): the tensor then has that dtype. A value that would not survive the cast refuses the
 * reshard on every rank (TS_BAD_DTYPE), as does a partial target whose dtype lacks the
 * reduction. */
int ts_store_reshard_cast(ts_store *s, ts_world *w, const char *name, const ts_attr *tgt,
                          const char *layout_tag, const ts_plan_opts *popts, const ts_dtype *cast,
                          int prior_status, const ts_error *prior_err, ts_exec_report *report,
                          ts_error *err);

/* cast.c: the conversions of a reshard that changes the dtype. ts_cast_prepare decides where
 * they happen (ts_cast_wire_dtype) and, for a cast before the wire, converts this rank's source
 * slice (checked as a put with conversion: TS_BAD_DTYPE for a value that would not survive);
 * the executor then sends ts_cast_source and plans for c->wire. A cast after the wire converts
 * the executor's new slice in ts_cast_finish (checked the same way; the caller agrees on it
 * before committing). ts_cast_clear accepts NULL and a cast never prepared (zeroed). */
typedef struct ts_cast {
  bool on;                 /* the dtype changes */
  ts_dtype from, to, wire; /* wire: the dtype the pieces travel in */
  char name[TS_NAME_MAX];
  ts_tensor src; /* a cast before the wire: the converted source slice */
} ts_cast;
int ts_cast_prepare(ts_cast *c, const ts_stored *e, ts_dtype to, const ts_attr *tgt, ts_error *err);
const ts_tensor *ts_cast_source(const ts_cast *c, const ts_stored *e);
bool ts_cast_after(const ts_cast *c);
int ts_cast_finish(ts_cast *c, ts_tensor *out, ts_error *err);
void ts_cast_clear(ts_cast *c);

/* Replaces e's slice, attribute and layout tag with a reshard's result: *out (the store owns it
 * then; *out is emptied), *new_attr (taken; set to NULL), the box from the plan's target. Cannot
 * fail: the caller committed to the outcome (every rank agreed). */
void ts_store_commit(ts_store *s, ts_stored *e, const ts_plan *plan, ts_tensor *out,
                     ts_attr **new_attr, const char *layout_tag);
/* The bytes the quota still allows (at least 1), or 0 when there is no quota. */
int64_t ts_store_quota_left(const ts_store *s);

/* batch.c: many stored tensors resharded as one operation, atomic over them all. Each item names
 * a tensor, its target attribute, the layout tag of its new slices (NULL: row-major) and its
 * strategy. Every rank plans every item before anything moves; one agreement over the world takes
 * every rank's planning (a failure names the item's tensor); then the items' transfers run one
 * after another, each new slice held beside the old one; the first failing transfer (the same on
 * every rank: the executor's status is agreed) frees the new slices made so far and every tensor
 * stays as it was; when all succeeded every tensor is replaced at once, with no further failure
 * possible. prior_status/prior_err: the caller's own failure on this rank (TS_OK: none), carried
 * into the planning agreement. reports: one per item (may be NULL). fail_item: a test hook, this
 * rank fails item fail_item's transfer as a local failure after the items before it moved (-1:
 * none). Collective over the world.
 *
 * Not yet coalesced: each item runs its own executor (its own agreements and exchange), so the
 * pieces of several tensors between a pair of ranks still travel as separate messages. Peak extra
 * memory: the new slices of the items done so far (the old ones stay until the commit) plus one
 * item's executor staging (at most `staging`, except for the strategies that materialize a whole
 * tensor); the store's quota bounds the new slices together. */
typedef struct ts_batch_item {
  const char *name;
  const ts_attr *tgt;
  const char *layout_tag;
  ts_strategy strategy;
  bool cast; /* convert the values to dtype as they move (ts_store_reshard_cast) */
  ts_dtype dtype;
} ts_batch_item;
int ts_store_reshard_many(ts_store *s, ts_world *w, int n, const ts_batch_item *items,
                          int64_t staging, int prior_status, const ts_error *prior_err,
                          int fail_item, ts_exec_report *reports, ts_error *err);

/* scatter.c: a whole-tensor put (the row-major tensor at `root` -> the stored slices, written in
 * place) or get (slices -> the whole tensor at root) for attributes without partial placements,
 * in chunks of at most max_chunk bytes (and 16 MiB). Collective over the world; the status is
 * agreed. `whole` is used at the root only. */
bool ts_attr_has_partial(const ts_attr *a);
int ts_scatter_gather(ts_world *world, ts_stored *t, int root, void *whole, bool put,
                      int64_t max_chunk, ts_error *err);
/* The same for n tensors at once (wholes[i] the row-major tensor i at the root), where
 * ts_scatter_many_applies (one node with single copies, no partial placement, no blocked layout,
 * no tensor over 2 GiB: the same answer on every rank): every piece of every tensor in ONE region
 * exchange between two agreements (the first carries prior_status, this rank's failure before,
 * TS_OK: none), instead of two agreements and an exchange per tensor. A put writes into
 * t[i]->local (give it new slices to keep the stored ones until the caller commits). */
bool ts_scatter_many_applies(ts_world *world, int n, ts_stored *const *t);
int ts_scatter_gather_many(ts_world *world, int n, ts_stored *const *t, int root,
                           void *const *wholes, bool put, int prior_status,
                           const ts_error *prior_err, ts_error *err);
/* The same with the whole tensor in another process of this node (a client's memory: the
 * process, checked by every rank before its copy, and the address of its first byte there): every
 * rank copies its own piece straight between its slice and that memory (ts_comm_process_copy), all
 * at once; a get writes each distinct box once, a put reads into new slices that replace the stored
 * ones only when every rank read its piece (a put that fails anywhere leaves the tensor as it was).
 * Only where ts_scatter_direct_applies (one node with single copies, no partial placement, no
 * blocked layout): the same answer on every rank. Collective; the status is agreed. */
bool ts_scatter_direct_applies(ts_world *world, const ts_stored *t);
typedef struct ts_comm_proc ts_comm_proc; /* ts_comm.h */
int ts_scatter_gather_direct(ts_world *world, ts_stored *t, int root, const ts_comm_proc *proc,
                             uint64_t addr, bool put, ts_error *err);
/* The same for n tensors (each where ts_scatter_direct_applies), addrs[i] the address of tensor
 * i: every rank copies its pieces of all of them, then ONE agreement; a put replaces the slices
 * of every tensor only when every rank read every piece (else none changes). prior_status (TS_OK:
 * none) is a failure of this rank met before, carried into that agreement (no copy is made
 * then). The error of a failed copy names its tensor. */
int ts_scatter_gather_direct_many(ts_world *world, int n, ts_stored *const *t, int root,
                                  const ts_comm_proc *proc, const uint64_t *addrs, bool put,
                                  int prior_status, const ts_error *prior_err, ts_error *err);

#endif
