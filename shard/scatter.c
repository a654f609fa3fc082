/* scatter.c - the daemon's whole-tensor puts and gets without the general executor, for
 * attributes without partial placements (the common case): the rank holding the whole
 * row-major tensor sends every other rank the chunks of its slice box (or receives them), and
 * the pieces are copied straight
 * between the whole tensor, the message buffers and the stored slices with the strided-copy
 * kernel, or sent and received in place when a piece is one contiguous run of bytes on that side
 * (row blocks of row-major data). No new slice is allocated (a put writes into the stored
 * slices, whose layout it keeps) and no staging beyond one chunk per side, only on a side where
 * some chunk does not move in place; that buffer comes from the pool, counted against the memory
 * limit, and the ranks agree that each has it before any message moves.
 *
 * On one node with single-copy transfers (comm/cma.c) and unblocked slices, every piece moves in
 * one region exchange instead: each peer reads its piece straight from the root's whole tensor
 * (a put) or writes it straight into it (a get), all peers at once, while the root copies its
 * own slice; no chunk buffer at all. A client's own memory on this node is reached the same way
 * (ts_scatter_gather_direct): every rank copies its piece straight between its slice and the
 * client; for a batch of tensors (ts_scatter_gather_direct_many) every rank copies its pieces of
 * all of them with the client pinned once, and one agreement ends the batch.
 *
 * Both sides walk the same ranks and chunks in the same order (ts_box_chunk), so every message
 * is matched (peers in rank order after the root, the root's own slice last). A copy that fails on
 * one side still sends or receives its messages, so nobody waits forever; the statuses are agreed
 * at the end. A get takes each distinct box once: from the root when it holds it, else from the
 * lowest rank holding it (other replicas send nothing). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ts_comm.h"
#include "ts_shard.h"

#define SCATTER_TAG 0x5ca7

/* This rank and the world's size. */
typedef struct side {
  int rank, size;
} side;

bool ts_attr_has_partial(const ts_attr *a) {
  for (int i = 0; i < a->mesh_ndim; i++)
    if (a->place[i].kind == TS_PLACE_PARTIAL)
      return true;
  return false;
}

/* A dense row-major view of a box-shaped buffer. */
static void box_view(const ts_box *b, ts_dtype dt, void *data, size_t bytes, ts_tensor *t) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < b->ndim; d++)
    ext[d] = b->hi[d] - b->lo[d];
  t->data = data;
  t->bytes = bytes;
  ts_layout_plain(&t->layout, dt, b->ndim, ext, NULL);
}

/* Copies box cb between the whole tensor (global coordinates) and a slice whose box is sb. */
static int copy_piece(const ts_tensor *dst, const int64_t *dst_origin, const ts_tensor *src,
                      const int64_t *src_origin, const ts_box *cb, ts_error *err) {
  int64_t ds[TS_MAX_DIMS], ss[TS_MAX_DIMS], ext[TS_MAX_DIMS];
  for (int d = 0; d < cb->ndim; d++) {
    ds[d] = cb->lo[d] - dst_origin[d];
    ss[d] = cb->lo[d] - src_origin[d];
    ext[d] = cb->hi[d] - cb->lo[d];
  }
  return ts_copy_box(dst, ds, src, ss, ext, NULL, err);
}

/* Where box cb lies in a dense row-major buffer holding the box [origin, origin + ext), when it is
 * one contiguous run of bytes there (leading dims of extent 1, then one partial dim, then full
 * dims); NULL otherwise. */
static uint8_t *contiguous_at(uint8_t *base, const ts_box *cb, const int64_t *origin,
                              const int64_t *ext, size_t es) {
  int nd = cb->ndim, k = 0;
  while (k < nd - 1 && cb->hi[k] - cb->lo[k] == 1)
    k++;
  for (int d = k + 1; d < nd; d++)
    if (cb->lo[d] != origin[d] || cb->hi[d] != origin[d] + ext[d])
      return NULL;
  int64_t off = 0;
  for (int d = 0; d < nd; d++)
    off = off * ext[d] + (cb->lo[d] - origin[d]);
  return base + (size_t)off * es;
}

/* Whether a stored slice is dense row-major (then pieces may go straight to and from it). */
static bool slice_is_plain(const ts_stored *t) {
  ts_layout plain;
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    ext[d] = t->box.hi[d] - t->box.lo[d];
  if (!t->has_slice || ts_layout_plain(&plain, t->dtype, t->ndim, ext, NULL) != TS_OK)
    return false;
  const ts_layout *l = &t->local.layout;
  if (l->n_inner != 0 || l->offset != 0)
    return false;
  for (int d = 0; d < t->ndim; d++)
    if (l->strides[d] != plain.strides[d] && ext[d] != 1)
      return false;
  return true;
}

/* Whether rank r's piece moves between this rank and the root: r holds a non-empty box, a get
 * takes it from r (not from the root or a lower rank holding the same box), and this rank is
 * the root or r. */
static bool piece_here(const side *e, int root, bool put, const ts_box *boxes, const bool *has,
                       int r) {
  if (!has[r] || ts_box_numel(&boxes[r]) == 0)
    return false;
  bool dup = false;
  if (!put && r != root) {
    dup = has[root] && ts_box_equal(&boxes[root], &boxes[r]);
    for (int q = 0; q < r && !dup; q++)
      dup = has[q] && ts_box_equal(&boxes[q], &boxes[r]);
  }
  return !dup && (e->rank == root || e->rank == r);
}

/* This side's end of a chunk when it is one contiguous run there: the whole tensor at the root,
 * the slice (when plain) at the peer; NULL when the chunk goes through the message buffer. */
static uint8_t *chunk_in_place(const side *e, const ts_stored *t, int root, void *whole, bool plain,
                               const ts_box *b, const ts_box *cb) {
  size_t es = ts_dtype_size(t->dtype);
  int64_t zero[TS_MAX_DIMS] = {0}, ext[TS_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    ext[d] = b->hi[d] - b->lo[d];
  if (e->rank == root)
    return contiguous_at(whole, cb, zero, t->shape, es);
  return plain ? contiguous_at(t->local.data, cb, b->lo, ext, es) : NULL;
}

/* Bytes of message buffer this rank needs: its largest chunk that does not move in place. */
static int64_t buffer_need(const side *e, const ts_stored *t, int root, void *whole, bool put,
                           const ts_box *boxes, const bool *has, bool plain, int64_t chunk) {
  size_t es = ts_dtype_size(t->dtype);
  int64_t need = 0;
  for (int r = 0; r < e->size; r++) {
    if (r == root || !piece_here(e, root, put, boxes, has, r))
      continue;
    int64_t n = ts_box_chunk_count(&boxes[r], es, chunk);
    for (int64_t k = 0; k < n; k++) {
      ts_box cb;
      ts_box_chunk(&boxes[r], es, chunk, k, &cb);
      int64_t bytes = ts_box_numel(&cb) * (int64_t)es;
      if (bytes > need && !chunk_in_place(e, t, root, whole, plain, &boxes[r], &cb))
        need = bytes;
    }
  }
  return need;
}

/* Whether the pieces go in one region exchange: single copies between the ranks of one node,
 * unblocked slices (the layout tag, the same on every rank, has no block size) and pieces a
 * region can hold. Decided alike on every rank. */
static bool regions_apply(ts_comm *wc, const ts_stored *t, const ts_box *boxes, const bool *has,
                          int size) {
  if (!ts_comm_single_copy(wc) || strpbrk(t->layout_tag, "0123456789"))
    return false;
  for (int r = 0; r < size; r++)
    if (has[r] && ts_box_numel(&boxes[r]) * (int64_t)ts_dtype_size(t->dtype) > INT_MAX)
      return false;
  return true;
}

/* The strided region of box b in a tensor: the whole row-major tensor (origin 0) or a slice. */
static void piece_region(const ts_tensor *x, const int64_t *origin, const ts_box *b,
                         ts_comm_region *reg) {
  int64_t at[TS_MAX_DIMS];
  int64_t es = (int64_t)ts_dtype_size(x->layout.dtype);
  memset(reg, 0, sizeof *reg);
  reg->ndim = b->ndim;
  reg->esize = es;
  for (int d = 0; d < b->ndim; d++) {
    at[d] = b->lo[d] - origin[d];
    reg->count[d] = b->hi[d] - b->lo[d];
    reg->stride[d] = x->layout.strides[d] * es;
  }
  reg->base = (uint8_t *)x->data + ts_layout_address(&x->layout, at);
}

/* The pieces in one region exchange (see regions_apply); the root's own slice is copied first. */
static int exchange_pieces(ts_comm *wc, const side *e, ts_stored *t, int root, const ts_tensor *wt,
                           bool put, const ts_box *boxes, const bool *has, int lst,
                           ts_error *lerr) {
  int64_t zero[TS_MAX_DIMS] = {0};
  int *peers = malloc((size_t)e->size * sizeof *peers);
  ts_comm_region *regs = calloc((size_t)e->size, sizeof *regs);
  int n = 0;
  if (!peers || !regs) {
    free(peers);
    free(regs);
    return ts_error_set(lerr, TS_NO_MEMORY, "no memory for %d transfers", e->size);
  }
  for (int i = 1; i <= e->size; i++) {
    int r = (root + i) % e->size;
    if (!piece_here(e, root, put, boxes, has, r))
      continue;
    const ts_box *b = &boxes[r];
    if (r == root) {
      if (lst == TS_OK)
        lst = put ? copy_piece(&t->local, b->lo, wt, zero, b, lerr)
                  : copy_piece(wt, zero, &t->local, b->lo, b, lerr);
      continue;
    }
    peers[n] = e->rank == root ? r : root;
    if (e->rank == root)
      piece_region(wt, zero, b, &regs[n]);
    else
      piece_region(&t->local, b->lo, b, &regs[n]);
    n++;
  }
  /* The exchange runs even after a local failure, so no peer waits for this rank. */
  bool sends = put == (e->rank == root);
  int mrc = sends ? ts_comm_exchange_regions(wc, n, peers, regs, 0, NULL, NULL, SCATTER_TAG, lerr)
                  : ts_comm_exchange_regions(wc, 0, NULL, NULL, n, peers, regs, SCATTER_TAG, lerr);
  free(peers);
  free(regs);
  return lst ? lst : mrc;
}

/* put: whole (at `root`, row-major) -> every slice; get: every distinct slice -> whole at root. */
int ts_scatter_gather(ts_world *world, ts_stored *t, int root, void *whole, bool put,
                      int64_t max_chunk, ts_error *err) {
  side self = {ts_world_rank(world), ts_world_size(world)};
  const side *e = &self;
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = TS_OK;
  size_t es = ts_dtype_size(t->dtype);
  /* Chunks small enough that the root packs the next one while the peer unpacks this one. */
  int64_t chunk = max_chunk > 0 && max_chunk < (16 << 20) ? max_chunk : 16 << 20;
  ts_geom *g = NULL;
  int rc = ts_geom_create(t->attr, t->ndim, t->shape, &g, err);
  if (rc)
    return rc; /* the same on every rank: the attribute is the stored one */
  ts_tensor wt;
  memset(&wt, 0, sizeof wt);
  int64_t zero[TS_MAX_DIMS] = {0};
  if (e->rank == root) {
    size_t bytes = es;
    for (int d = 0; d < t->ndim; d++)
      bytes *= (size_t)t->shape[d];
    wt.data = whole;
    wt.bytes = bytes;
    ts_layout_plain(&wt.layout, t->dtype, t->ndim, t->shape, NULL);
  }
  ts_box *boxes = calloc((size_t)e->size, sizeof *boxes);
  bool *has = calloc((size_t)e->size, sizeof *has);
  if (!boxes || !has)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the slice boxes");
  for (int r = 0; boxes && has && r < e->size; r++)
    has[r] = ts_geom_rank_box(g, r, &boxes[r]);
  ts_comm *wc = ts_world_comm(world);
  bool plain = slice_is_plain(t);
  bool regions = boxes && has && regions_apply(wc, t, boxes, has, e->size);
  /* The message buffer comes from the pool, counted against the memory limit; every rank agrees
   * that it has one before any message moves. */
  uint8_t *buf = NULL;
  int64_t need = lst || regions ? 0 : buffer_need(e, t, root, whole, put, boxes, has, plain, chunk);
  if (need > 0)
    buf = ts_shard_alloc_as((size_t)need, TS_POOL_STAGING, "a transfer chunk", &lerr);
  if (need > 0 && !buf)
    lst = lerr.code;
  if ((rc = ts_comm_agree(wc, lst, &lerr, err))) {
    ts_shard_free(buf);
    free(boxes);
    free(has);
    ts_geom_destroy(&g);
    return rc;
  }
  if (regions) {
    lst = exchange_pieces(wc, e, t, root, &wt, put, boxes, has, lst, &lerr);
    free(boxes);
    free(has);
    ts_geom_destroy(&g);
    return ts_comm_agree(wc, lst, &lerr, err);
  }
  /* The root's own slice goes last, while the last peer unpacks its last chunk. */
  for (int i = 1; i <= e->size; i++) {
    int r = (root + i) % e->size;
    /* A get reads each distinct box once: from the root when it holds it, else from the lowest
     * rank that does. */
    if (!piece_here(e, root, put, boxes, has, r))
      continue;
    const ts_box *b = &boxes[r];
    if (r == root) { /* the root's own slice: one direct copy */
      if (lst == TS_OK)
        lst = put ? copy_piece(&t->local, b->lo, &wt, zero, b, &lerr)
                  : copy_piece(&wt, zero, &t->local, b->lo, b, &lerr);
      continue;
    }
    int64_t n = ts_box_chunk_count(b, es, chunk);
    for (int64_t k = 0; k < n; k++) {
      ts_box cb;
      ts_box_chunk(b, es, chunk, k, &cb);
      int64_t bytes = ts_box_numel(&cb) * (int64_t)es;
      ts_tensor bt;
      box_view(&cb, t->dtype, buf, (size_t)bytes, &bt);
      bool sender = put ? e->rank == root : e->rank == r;
      int peer = e->rank == root ? r : root;
      /* This side's end of the piece: the whole tensor at the root, the slice at the peer. When
       * the piece is one contiguous run there, it is sent from or received into place. */
      bool at_whole = e->rank == root;
      uint8_t *direct = chunk_in_place(e, t, root, whole, plain, b, &cb);
      if (sender && !direct && lst == TS_OK)
        lst = at_whole ? copy_piece(&bt, cb.lo, &wt, zero, &cb, &lerr)
                       : copy_piece(&bt, cb.lo, &t->local, b->lo, &cb, &lerr);
      void *p = direct ? (void *)direct : (void *)buf;
      int mrc =
          sender
              ? ts_comm_exchange(wc, 1, &peer, &p, &bytes, 0, NULL, NULL, NULL, SCATTER_TAG, &lerr)
              : ts_comm_exchange(wc, 0, NULL, NULL, NULL, 1, &peer, &p, &bytes, SCATTER_TAG, &lerr);
      if (mrc && lst == TS_OK)
        lst = mrc;
      if (!sender && !direct && lst == TS_OK)
        lst = at_whole ? copy_piece(&wt, zero, &bt, cb.lo, &cb, &lerr)
                       : copy_piece(&t->local, b->lo, &bt, cb.lo, &cb, &lerr);
    }
  }
  ts_shard_free(buf);
  free(boxes);
  free(has);
  ts_geom_destroy(&g);
  return ts_comm_agree(wc, lst, &lerr, err);
}

bool ts_scatter_many_applies(ts_world *world, int n, ts_stored *const *t) {
  if (!ts_comm_single_copy(ts_world_comm(world)))
    return false;
  for (int i = 0; i < n; i++) {
    uint64_t bytes = ts_dtype_size(t[i]->dtype);
    for (int d = 0; d < t[i]->ndim; d++)
      bytes *= (uint64_t)t[i]->shape[d];
    if (ts_attr_has_partial(t[i]->attr) || strpbrk(t[i]->layout_tag, "0123456789") ||
        bytes > INT_MAX)
      return false;
  }
  return true;
}

/* This rank's pieces of tensor t in a batched region exchange: the root's own piece copied now,
 * the others appended to peers/regs (k counts them), in the order both ends walk. */
static int many_pieces(const side *e, ts_stored *t, int root, void *whole, bool put, int *peers,
                       ts_comm_region *regs, int *k, ts_error *err) {
  ts_geom *g = NULL;
  int rc = ts_geom_create(t->attr, t->ndim, t->shape, &g, err);
  if (rc)
    return rc;
  ts_box *boxes = calloc((size_t)e->size, sizeof *boxes);
  bool *has = calloc((size_t)e->size, sizeof *has);
  if (!boxes || !has)
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the slice boxes");
  for (int r = 0; !rc && r < e->size; r++)
    has[r] = ts_geom_rank_box(g, r, &boxes[r]);
  ts_tensor wt;
  memset(&wt, 0, sizeof wt);
  int64_t zero[TS_MAX_DIMS] = {0};
  if (!rc && e->rank == root) {
    size_t bytes = ts_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
      bytes *= (size_t)t->shape[d];
    wt.data = whole;
    wt.bytes = bytes;
    ts_layout_plain(&wt.layout, t->dtype, t->ndim, t->shape, NULL);
  }
  for (int i = 1; !rc && i <= e->size; i++) {
    int r = (root + i) % e->size;
    if (!piece_here(e, root, put, boxes, has, r))
      continue;
    const ts_box *b = &boxes[r];
    if (r == root) {
      rc = put ? copy_piece(&t->local, b->lo, &wt, zero, b, err)
               : copy_piece(&wt, zero, &t->local, b->lo, b, err);
      continue;
    }
    peers[*k] = e->rank == root ? r : root;
    if (e->rank == root)
      piece_region(&wt, zero, b, &regs[*k]);
    else
      piece_region(&t->local, b->lo, b, &regs[*k]);
    (*k)++;
  }
  free(boxes);
  free(has);
  ts_geom_destroy(&g);
  return rc;
}

int ts_scatter_gather_many(ts_world *world, int n, ts_stored *const *t, int root,
                           void *const *wholes, bool put, int prior_status,
                           const ts_error *prior_err, ts_error *err) {
  side self = {ts_world_rank(world), ts_world_size(world)};
  ts_comm *wc = ts_world_comm(world);
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = prior_status;
  if (lst != TS_OK)
    ts_error_set(&lerr, lst, "%s", prior_err ? prior_err->msg : ts_strerror(lst));
  /* At most one piece per tensor and peer at the root, one per tensor elsewhere. */
  size_t cap = (size_t)(n > 0 ? n : 1) * (size_t)self.size;
  int *peers = malloc(cap * sizeof *peers);
  ts_comm_region *regs = calloc(cap, sizeof *regs);
  if ((!peers || !regs) && lst == TS_OK)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for the pieces of %d tensors", n);
  int k = 0;
  for (int i = 0; lst == TS_OK && i < n; i++) {
    ts_error ierr;
    lst = many_pieces(&self, t[i], root, self.rank == root ? wholes[i] : NULL, put, peers, regs, &k,
                      &ierr);
    if (lst)
      ts_error_set(&lerr, lst, "tensor '%s' of the batch: %s", t[i]->name, ierr.msg);
  }
  /* Every rank has its pieces (and the root its own copied) before any region moves. */
  int rc = ts_comm_agree(wc, lst, &lerr, err);
  if (rc == TS_OK) {
    bool sends = put == (self.rank == root);
    lst = sends ? ts_comm_exchange_regions(wc, k, peers, regs, 0, NULL, NULL, SCATTER_TAG, &lerr)
                : ts_comm_exchange_regions(wc, 0, NULL, NULL, k, peers, regs, SCATTER_TAG, &lerr);
    rc = ts_comm_agree(wc, lst, &lerr, err);
  }
  free(peers);
  free(regs);
  return rc;
}

bool ts_scatter_direct_applies(ts_world *world, const ts_stored *t) {
  return ts_comm_single_copy(ts_world_comm(world)) && !ts_attr_has_partial(t->attr) &&
         !strpbrk(t->layout_tag, "0123456789");
}

/* Box b of the client's whole row-major tensor at address addr (in its process). */
static void client_region(const ts_stored *t, uint64_t addr, const ts_box *b, ts_comm_region *reg) {
  int64_t es = (int64_t)ts_dtype_size(t->dtype), stride = es;
  uint64_t at = addr;
  memset(reg, 0, sizeof *reg);
  reg->ndim = b->ndim;
  reg->esize = es;
  for (int d = b->ndim - 1; d >= 0; d--) {
    reg->count[d] = b->hi[d] - b->lo[d];
    reg->stride[d] = stride;
    at += (uint64_t)(b->lo[d] * stride);
    stride *= t->shape[d];
  }
  reg->base = (void *)(uintptr_t)at;
}

/* This rank's part of a direct transfer of one tensor, before any copy: the regions of its piece
 * here and in the client (*mine false when this rank moves nothing of it) and, for a put, the new
 * slice it reads into (*fresh). */
static int direct_piece(const side *self, ts_stored *t, int root, uint64_t addr, bool put,
                        void **fresh, bool *mine, ts_comm_region *loc, ts_comm_region *rem,
                        ts_error *err) {
  *fresh = NULL;
  ts_geom *g = NULL;
  int rc = ts_geom_create(t->attr, t->ndim, t->shape, &g, err);
  if (rc)
    return rc;
  ts_box *boxes = calloc((size_t)self->size, sizeof *boxes);
  bool *has = calloc((size_t)self->size, sizeof *has);
  if (!boxes || !has)
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the slice boxes");
  for (int r = 0; !rc && r < self->size; r++)
    has[r] = ts_geom_rank_box(g, r, &boxes[r]);
  int me = self->rank;
  *mine = !rc && piece_here(self, root, put, boxes, has, me);
  ts_tensor dst = t->local;
  if (*mine && put) {
    dst.data = *fresh = ts_shard_alloc_as(t->local.bytes, 0, "the put's new slice", err);
    if (!dst.data)
      rc = err->code;
  }
  if (*mine && !rc) {
    piece_region(&dst, boxes[me].lo, &boxes[me], loc);
    client_region(t, addr, &boxes[me], rem);
  }
  free(boxes);
  free(has);
  ts_geom_destroy(&g);
  return rc;
}

/* Every piece of this rank: the regions, then the copies with the client pinned once. */
static int direct_pieces(const side *self, int n, ts_stored *const *t, int root,
                         const ts_comm_proc *proc, const uint64_t *addrs, bool put, void **fresh,
                         ts_error *lerr) {
  ts_comm_region *loc = calloc((size_t)(n > 0 ? n : 1), sizeof *loc);
  ts_comm_region *rem = calloc((size_t)(n > 0 ? n : 1), sizeof *rem);
  int *which = calloc((size_t)(n > 0 ? n : 1), sizeof *which);
  int k = 0, rc = loc && rem && which ? TS_OK
                                      : ts_error_set(lerr, TS_NO_MEMORY,
                                                     "no memory for the "
                                                     "regions of %d tensors",
                                                     n);
  ts_error ierr;
  for (int i = 0; rc == TS_OK && i < n; i++) {
    bool mine = false;
    rc = direct_piece(self, t[i], root, addrs[i], put, &fresh[i], &mine, &loc[k], &rem[k], &ierr);
    if (rc)
      ts_error_set(lerr, rc, n > 1 ? "tensor '%s' of the batch: %s" : "%s%s",
                   n > 1 ? t[i]->name : "", ierr.msg);
    if (mine)
      which[k++] = i;
  }
  int failed = -1;
  if (rc == TS_OK && (rc = ts_comm_process_copy_many(proc, !put, k, loc, rem, &failed, &ierr)))
    ts_error_set(lerr, rc, n > 1 && failed >= 0 ? "tensor '%s' of the batch: %s" : "%s%s",
                 n > 1 && failed >= 0 ? t[which[failed]]->name : "", ierr.msg);
  free(loc), free(rem), free(which);
  return rc;
}

int ts_scatter_gather_direct(ts_world *world, ts_stored *t, int root, const ts_comm_proc *proc,
                             uint64_t addr, bool put, ts_error *err) {
  return ts_scatter_gather_direct_many(world, 1, &t, root, proc, &addr, put, TS_OK, NULL, err);
}

int ts_scatter_gather_direct_many(ts_world *world, int n, ts_stored *const *t, int root,
                                  const ts_comm_proc *proc, const uint64_t *addrs, bool put,
                                  int prior_status, const ts_error *prior_err, ts_error *err) {
  side self = {ts_world_rank(world), ts_world_size(world)};
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = prior_status;
  if (lst != TS_OK)
    ts_error_set(&lerr, lst, "%s", prior_err ? prior_err->msg : ts_strerror(lst));
  void **fresh = calloc((size_t)(n > 0 ? n : 1), sizeof *fresh);
  if (!fresh && lst == TS_OK)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "no memory for a transfer of %d tensors", n);
  if (lst == TS_OK)
    lst = direct_pieces(&self, n, t, root, proc, addrs, put, fresh, &lerr);
  /* The one agreement: every rank read (or wrote) every piece, or the new slices go. */
  int rc = ts_comm_agree(ts_world_comm(world), lst, &lerr, err);
  for (int i = 0; fresh && i < n; i++) {
    if (rc == TS_OK && fresh[i]) {
      ts_shard_free(t[i]->local.data);
      t[i]->local.data = fresh[i];
    } else {
      ts_shard_free(fresh[i]);
    }
  }
  free(fresh);
  return rc;
}
