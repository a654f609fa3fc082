/* ckpt_load.c - loading a checkpoint into new tensors of the store, collective over the world.
 *
 * Every rank reads the index and checks it (pieces inside the tensor, pairwise disjoint and
 * covering it exactly). For each tensor the target attribute (its rule's, else the caller's,
 * else the saved one; in place: the stored tensor's) gives every rank its target box; the tensor
 * is created with a row-major slice (not zeroed: every byte is written; in place beside the
 * stored one, which takes it once every tensor loaded) and filled by one of two paths, chosen
 * per tensor alike on every rank
 * (then agreed, every tensor's in one agreement; the direct reads need no other until the one
 * that ends the load) by the estimated bytes the busiest rank reads or copies:
 *
 *   direct  each rank reads what its box needs of every piece meeting it: a piece inside the box
 *           whole, straight into the slice (its runs gathered into preadv calls of about 1 MiB,
 *           hashed as they arrive: ts__ckpt_read_whole); of a piece partly inside, through the
 *           piece's block checksum table, only the runs of the box, straight into the slice, and
 *           the blocks around them (ts__ckpt_read_ranges, batched through io_uring); a piece
 *           without a table whole through a 16 MiB buffer, copying its part out.
 *   move    (ckpt_move.c) each piece is read once, whole, by one rank, hashed as it arrives, and
 *           the very bytes hashed are copied to every box needing them (on one node pulled with
 *           process_vm_readv after a barrier per round, else all-to-all rounds): cheaper where
 *           the runs are tiny (rows shorter than a block).
 *
 * Either way every byte of a loaded slice was hashed from the read that brought it, as part of
 * its whole piece or of its block (no rank trusts bytes it read apart from the verified ones).
 * The estimated costs (ts__ckpt_read_cost, ts__ckpt_move_costs: bytes read or copied by the busiest
 * rank plus a fixed cost per read call or round) choose the path per tensor (ts_ckpt_load_opts.path
 * forces one). Each file header is checked against the index (dtype, shape, offsets inside the
 * file). Any failure on any rank (missing file, lying header, checksum, memory) is agreed over
 * the world: every rank returns the same error naming the file and the piece, and no loaded
 * tensor is kept.
 *
 * Attributes with partial placements: a target with P(op) is loaded replicated along those mesh
 * dims and then resharded to it; a checkpoint saved with keep_partial is loaded under its saved
 * attribute (each rank reads the piece of its own box and partial coordinates) and resharded to
 * the target when it differs. Both reshards go through the store's atomic reshard. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "ts_comm.h"
#include "ts_rules.h"

/* The bounds of a move round's chunk (the load's staging bytes, 0: 64 MiB). */
#define MOVE_ROUND_MIN ((int64_t)64 << 10)
#define MOVE_ROUND_MAX ((int64_t)1 << 30)
#define MOVE_PULL_CHUNK ((int64_t)8 << 20)

/* ---------------------------------------------------------------------------------------------
 * The reader: files, errors, hashed reads (shared with ckpt_move.c) */

static int open_file(ckpt_reader *r, const char *name, ckpt_file **out, ts_error *err) {
  for (int i = 0; i < r->nfiles; i++)
    if (strcmp(r->files[i].name, name) == 0) {
      *out = &r->files[i];
      return TS_OK;
    }
  if (r->nfiles == CKPT_MAX_OPEN) {
    ts__ckpt_file_close(&r->files[0]);
    memmove(&r->files[0], &r->files[1], sizeof r->files[0] * (CKPT_MAX_OPEN - 1));
    r->nfiles--;
  }
  int rc = ts__ckpt_file_open(r->dir, name, &r->files[r->nfiles], err);
  if (rc)
    return rc;
  *out = &r->files[r->nfiles++];
  return TS_OK;
}

/* The open file of a piece (errors name the piece too). */
static int piece_file(ckpt_reader *r, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                      ckpt_file **f, ts_error *err) {
  int rc = open_file(r, p->file, f, err);
  if (rc) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return ts_error_set(err, rc, "%.400s (piece '%s' of tensor '%s')", why, p->key, t->name);
  }
  return TS_OK;
}

int ts__ckpt_reader_piece(ckpt_reader *r, const ts_ckpt_tensor *t, const ts_ckpt_piece *p, int *fd,
                          int64_t *offset, ts_error *err) {
  ckpt_file *f;
  int rc = piece_file(r, t, p, &f, err);
  if (rc || (rc = ts__ckpt_file_piece(f, t, p, offset, err)))
    return rc;
  *fd = f->fd;
  return TS_OK;
}

int ts__ckpt_reader_table(ckpt_reader *r, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                          int64_t *offset, ts_error *err) {
  ckpt_file *f;
  int rc = piece_file(r, t, p, &f, err);
  return rc ? rc : ts__ckpt_file_table(f, t, p, offset, err);
}

int ts__ckpt_reader_vbuf(ckpt_reader *r, ts_error *err) {
  if (r->vbuf)
    return TS_OK;
  r->vcap = 16u << 20;
  r->vbuf = ts_shard_alloc_as(r->vcap, TS_POOL_STAGING, "the checkpoint verify buffer", err);
  return r->vbuf ? TS_OK : err->code;
}

void ts__ckpt_reader_close(ckpt_reader *r) {
  for (int i = 0; i < r->nfiles; i++)
    ts__ckpt_file_close(&r->files[i]);
  r->nfiles = 0;
  ts_shard_free(r->vbuf);
  r->vbuf = NULL;
  ts__ckpt_ranger_destroy(&r->ranger);
}

int ts__ckpt_piece_mismatch(const ts_ckpt_tensor *t, const ts_ckpt_piece *p, uint64_t got,
                            ts_error *err) {
  char bt[256];
  ts__ckpt_box_text(&p->box, bt, sizeof bt);
  return ts_error_set(err, TS_CORRUPT,
                      "checkpoint file '%s', piece '%s' (tensor '%s', box %s): checksum "
                      "xxh3 %016llx, the index says %016llx",
                      p->file, p->key, t->name, bt, (unsigned long long)got,
                      (unsigned long long)p->xxh3);
}

int ts__ckpt_piece_io_fail(const ts_ckpt_tensor *t, const ts_ckpt_piece *p, ts_error *err) {
  return ts_error_set(err, errno == EIO ? TS_CORRUPT : TS_CHECKPOINT_IO,
                      "checkpoint file '%s', piece '%s' (tensor '%s'): cannot read: %s", p->file,
                      p->key, t->name,
                      errno == EIO ? "the file is shorter than its header says" : strerror(errno));
}

int ts__ckpt_pread_hashed(int fd, void *dst, size_t len, int64_t off, void *st) {
  uint8_t *to = dst;
  for (size_t done = 0; done < len;) {
    size_t n = len - done < CKPT_HASH_STEP ? len - done : CKPT_HASH_STEP;
    if (ts__ckpt_pread_full(fd, to + done, n, off + (int64_t)done))
      return -1;
    if (st)
      XXH3_64bits_update(st, to + done, n);
    done += n;
  }
  return 0;
}

int64_t ts__ckpt_box_offset(const ts_box *b, const int64_t *at) {
  int64_t off = 0;
  for (int d = 0; d < b->ndim; d++)
    off = off * (b->hi[d] - b->lo[d]) + (at[d] - b->lo[d]);
  return off;
}

/* ---------------------------------------------------------------------------------------------
 * The direct path */

/* A dense row-major view of a box-shaped buffer. */
static void box_view(const ts_box *b, ts_dtype dt, void *data, ts_tensor *t) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < b->ndim; d++)
    ext[d] = b->hi[d] - b->lo[d];
  t->data = data;
  t->bytes = (size_t)ts_box_numel(b) * ts_dtype_size(dt);
  ts_layout_plain(&t->layout, dt, b->ndim, ext, NULL);
}

/* Reads a whole piece that this rank needs only part of (I) through the verify buffer, in chunks
 * contiguous in the file (ts_box_chunk), hashing it and copying I out of each chunk into dst
 * (row-major over B) on the way. */
static int read_through(ckpt_reader *r, int fd, int64_t off, const ts_ckpt_tensor *t,
                        const ts_ckpt_piece *p, const ts_box *I, const ts_box *B, uint8_t *dst,
                        ts_error *err) {
  int vrc = ts__ckpt_reader_vbuf(r, err);
  if (vrc)
    return vrc;
  size_t es = ts_dtype_size(t->dtype);
  const ts_box *P = &p->box;
  XXH3_state_t *st = XXH3_createState();
  if (!st)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  XXH3_64bits_reset(st);
  ts_tensor to;
  box_view(B, t->dtype, dst, &to);
  int rc = TS_OK;
  int64_t nchunks = ts_box_chunk_count(P, es, (int64_t)r->vcap);
  for (int64_t ci = 0; ci < nchunks && !rc; ci++) {
    ts_box C, X;
    ts_box_chunk(P, es, (int64_t)r->vcap, ci, &C);
    size_t n = (size_t)ts_box_numel(&C) * es;
    if (ts__ckpt_pread_hashed(fd, r->vbuf, n, off + ts__ckpt_box_offset(P, C.lo) * (int64_t)es,
                              st)) {
      rc = ts__ckpt_piece_io_fail(t, p, err);
      break;
    }
    if (ts_box_intersect(&C, I, &X) && ts_box_numel(&X) > 0) {
      ts_tensor from;
      box_view(&C, t->dtype, r->vbuf, &from);
      int64_t ds[TS_MAX_DIMS], ss[TS_MAX_DIMS], ext[TS_MAX_DIMS];
      for (int d = 0; d < X.ndim; d++) {
        ds[d] = X.lo[d] - B->lo[d];
        ss[d] = X.lo[d] - C.lo[d];
        ext[d] = X.hi[d] - X.lo[d];
      }
      rc = ts_copy_box(&to, ds, &from, ss, ext, NULL, err);
      r->rep->bytes_read += ts_box_numel(&X) * (int64_t)es;
    }
  }
  if (!rc)
    r->rep->bytes_verified_extra += (ts_box_numel(P) - ts_box_numel(I)) * (int64_t)es;
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return rc ? rc : h == p->xxh3 ? TS_OK : ts__ckpt_piece_mismatch(t, p, h, err);
}

/* Every piece inside the tensor, pairwise disjoint, covering it (pieces not kept partial). */
typedef struct by_lo {
  int64_t lo, hi; /* along the first dim (0, 1 for a scalar) */
  int k;
} by_lo;

static int cmp_lo(const void *a, const void *b) {
  const by_lo *x = a, *y = b;
  return x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : (x->k > y->k) - (x->k < y->k);
}

static int check_cover(const char *dir, const ts_ckpt_tensor *t, ts_error *err) {
  int64_t total = 1, sum = 0;
  for (int d = 0; d < t->ndim; d++)
    total *= t->shape[d];
  /* overlaps: a sweep along the first dim (a chunked tensor has thousands of pieces) */
  int K = t->npieces;
  by_lo *o = malloc(sizeof *o * (size_t)(K ? K : 1));
  if (!o)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  for (int k = 0; k < K; k++) {
    const ts_box *b = &t->pieces[k].box;
    if (__builtin_add_overflow(sum, ts_box_numel(b), &sum))
      sum = INT64_MAX; /* more than any tensor: reported below */
    o[k] = (by_lo){t->ndim ? b->lo[0] : 0, t->ndim ? b->hi[0] : 1, k};
  }
  qsort(o, (size_t)K, sizeof *o, cmp_lo);
  for (int a = 0; a < K; a++)
    for (int b = a + 1; b < K && o[b].lo < o[a].hi; b++) {
      ts_box x;
      const ts_ckpt_piece *p = &t->pieces[o[a].k], *q = &t->pieces[o[b].k];
      if (ts_box_intersect(&p->box, &q->box, &x)) {
        free(o);
        return ts_error_set(err, TS_CORRUPT,
                            "checkpoint '%s': tensor '%s': pieces '%s' and '%s' "
                            "overlap",
                            dir, t->name, p->key, q->key);
      }
    }
  free(o);
  if (sum != total)
    return ts_error_set(err, TS_CORRUPT,
                        "checkpoint '%s': tensor '%s': its pieces hold %lld of "
                        "its %lld elements",
                        dir, t->name, (long long)sum, (long long)total);
  return TS_OK;
}

/* The direct path: this rank reads every piece meeting its box whole and verifies it; a piece
 * inside its box straight into the slice, another through the verify buffer. So every byte of
 * the slice was hashed by this rank from the very read that brought it. */
static int read_direct(ckpt_reader *r, const ts_ckpt_tensor *t, ts_stored *e, ts_error *err) {
  if (!e->has_slice)
    return TS_OK;
  size_t es = ts_dtype_size(t->dtype);
  for (int k = 0; k < t->npieces; k++) {
    const ts_ckpt_piece *p = &t->pieces[k];
    ts_box I;
    if (!ts_box_intersect(&e->box, &p->box, &I) || ts_box_numel(&I) == 0)
      continue;
    int fd;
    int64_t off;
    int rc = ts__ckpt_reader_piece(r, t, p, &fd, &off, err);
    if (rc)
      return rc;
    if (!ts_box_equal(&I, &p->box)) {
      rc = p->block_bytes > 0
               ? ts__ckpt_read_ranges(r, fd, off, t, p, &I, &e->box, e->local.data, err)
               : read_through(r, fd, off, t, p, &I, &e->box, e->local.data, err);
      if (rc)
        return rc;
      continue;
    }
    XXH3_state_t *st = XXH3_createState();
    if (!st)
      return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
    XXH3_64bits_reset(st);
    if (ts__ckpt_read_whole(fd, off, &p->box, &e->box, e->local.data, es, st,
                            &r->rep->bytes_read)) {
      XXH3_freeState(st);
      return ts__ckpt_piece_io_fail(t, p, err);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (h != p->xxh3)
      return ts__ckpt_piece_mismatch(t, p, h, err);
  }
  return TS_OK;
}

/* This rank's coordinates along the partial mesh dims of a (false: not in its mesh). */
static bool partial_coords(const ts_geom *g, const ts_attr *a, int rank, int64_t *pc, int *npc) {
  int64_t me = ts_geom_mesh_index(g, rank), c[TS_MAX_MESH_DIMS];
  *npc = 0;
  if (me < 0)
    return false;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    c[m] = me % a->mesh_shape[m];
    me /= a->mesh_shape[m];
  }
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_PARTIAL)
      pc[(*npc)++] = c[m];
  return true;
}

static bool same_coords(const ts_ckpt_piece *p, const int64_t *pc, int npc) {
  return p->npcoord == npc && memcmp(p->pcoord, pc, sizeof(int64_t) * (size_t)npc) == 0;
}

/* The pieces this rank may read (those meeting its box; of a kept-partial checkpoint those of its
 * partial coordinates too): their files opened and their header entries (and block tables)
 * checked against the index and the files' sizes. Run before the tensor is planned or
 * allocated, so that nothing proportional to the shapes an index claims is done before the
 * files are known to hold them. */
static int check_pieces(ckpt_reader *r, const ts_ckpt_tensor *t, const ts_geom *g, const ts_attr *a,
                        int rank, ts_error *err) {
  ts_box box;
  int64_t pc[TS_MAX_MESH_DIMS];
  int npc;
  if (!ts_geom_rank_box(g, rank, &box) || ts_box_numel(&box) == 0)
    return TS_OK;
  bool partial = t->partial_kept && partial_coords(g, a, rank, pc, &npc);
  for (int k = 0; k < t->npieces; k++) {
    const ts_ckpt_piece *p = &t->pieces[k];
    ts_box I;
    int fd, rc;
    int64_t off;
    if (!ts_box_intersect(&box, &p->box, &I) || ts_box_numel(&I) == 0 ||
        (partial && !same_coords(p, pc, npc)))
      continue;
    if ((rc = ts__ckpt_reader_piece(r, t, p, &fd, &off, err)) ||
        (p->block_bytes > 0 && (rc = ts__ckpt_reader_table(r, t, p, &off, err))))
      return rc;
  }
  return TS_OK;
}

/* A kept-partial checkpoint under its saved attribute: the piece of this rank's box and partial
 * coordinates, read whole and verified. */
static int read_partial(ckpt_reader *r, const ts_ckpt_tensor *t, const ts_geom *g, const ts_attr *a,
                        ts_stored *e, int rank, ts_error *err) {
  int64_t pc[TS_MAX_MESH_DIMS];
  int npc;
  if (!partial_coords(g, a, rank, pc, &npc) || !e->has_slice || ts_box_numel(&e->box) == 0)
    return TS_OK;
  for (int k = 0; k < t->npieces; k++) {
    const ts_ckpt_piece *p = &t->pieces[k];
    if (!ts_box_equal(&p->box, &e->box) || !same_coords(p, pc, npc))
      continue;
    int fd;
    int64_t off;
    int rc = ts__ckpt_reader_piece(r, t, p, &fd, &off, err);
    if (rc)
      return rc;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
      return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
    XXH3_64bits_reset(st);
    if (ts__ckpt_read_whole(fd, off, &p->box, &e->box, e->local.data, ts_dtype_size(t->dtype), st,
                            &r->rep->bytes_read)) {
      XXH3_freeState(st);
      return ts__ckpt_piece_io_fail(t, p, err);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h == p->xxh3 ? TS_OK : ts__ckpt_piece_mismatch(t, p, h, err);
  }
  char bt[256];
  ts__ckpt_box_text(&e->box, bt, sizeof bt);
  return ts_error_set(err, TS_CORRUPT,
                      "checkpoint '%s': tensor '%s': no partial piece for box %s "
                      "at rank %d",
                      r->dir, t->name, bt, rank);
}

/* The attribute a tensor is read under, and whether a reshard to `want` follows. */
static int read_attr(const ts_ckpt_tensor *t, const ts_attr *want, ts_attr **out, bool *reshard,
                     ts_error *err) {
  *reshard = false;
  int rc;
  if (t->partial_kept) {
    if ((rc = ts_attr_parse(t->attr, out, err)))
      return rc;
    *reshard = !ts_attr_equal(*out, want);
    return TS_OK;
  }
  if ((rc = ts_attr_clone(want, out, err)))
    return rc;
  for (int m = 0; m < want->mesh_ndim; m++)
    if ((*out)->place[m].kind == TS_PLACE_PARTIAL) {
      (*out)->place[m] = ts_replicate();
      *reshard = true;
    }
  return TS_OK;
}

/* A tensor of the load: its index entry and what it is read under (the attribute asked for,
 * the one read under, their geometry, whether a reshard follows). */
typedef struct ltarget {
  const ts_ckpt_tensor *t;
  ts_attr *want, *base;
  ts_geom *g;
  bool reshard;
  /* in place: the stored tensor loaded into, and the name of the new slices' tensor until the
   * commit (else the tensor's own name) */
  const ts_stored *into;
  char dst[TS_NAME_MAX];
} ltarget;

/* The attributes and geometry of a tensor of the load on this world, and this rank's pieces
 * checked against their files (check_pieces). */
static int prepare_target(ltarget *L, const ts_attr *def, const ts_ckpt_load_opts *o,
                          ckpt_reader *r, int rank, int size, ts_error *err) {
  const ts_ckpt_tensor *t = L->t;
  int k = L->into ? -1 : ts_attr_rule_pick(o->rule_patterns, o->nrules, t->name);
  const ts_attr *attr = L->into                      ? L->into->attr
                        : k >= 0 && o->rule_attrs[k] ? o->rule_attrs[k]
                                                     : def;
  int rc = attr ? ts_attr_clone(attr, &L->want, err) : ts_attr_parse(t->attr, &L->want, err);
  char why[512];
  if (!rc && (rc = ts_attr_validate(L->want, t->ndim, t->shape, size, err))) {
    snprintf(why, sizeof why, "%s", err->msg);
    if (k >= 0 && o->rule_attrs[k])
      ts_error_set(err, rc, "checkpoint load of '%s' on %d ranks: the rule '%s': %s", t->name, size,
                   o->rule_patterns[k], why);
    else
      ts_error_set(err, rc, "checkpoint load of '%s' on %d ranks: %s%s", t->name, size, why,
                   attr ? " (the default attribute)"
                        : " (its saved attribute; give a rule or a default for this world)");
  }
  if (!rc) /* dims from the end resolved on the saved shape (validated just above) */
    rc = ts_attr_normalize(L->want, t->ndim, err);
  if (!rc)
    rc = read_attr(t, L->want, &L->base, &L->reshard, err);
  if (!rc && (rc = ts_attr_validate(L->base, t->ndim, t->shape, size, err))) {
    snprintf(why, sizeof why, "%s", err->msg);
    ts_error_set(err, rc,
                 "checkpoint load of '%s': the saved attribute does not fit %d "
                 "ranks (%s); a checkpoint with partial values kept loads on its saved ranks",
                 t->name, size, why);
  }
  if (!rc)
    rc = ts_geom_create(L->base, t->ndim, t->shape, &L->g, err);
  return rc ? rc : check_pieces(r, t, L->g, L->base, rank, err);
}

/* An in-place load's stored tensor of t: the one t loads into (NULL: a mismatch, appended to
 * bad, or none, err set). */
static const ts_stored *inplace_into(ts_store *s, const ts_ckpt_tensor *t, char *bad, size_t cap,
                                     int *nbad, int *code, ts_error *err) {
  const ts_stored *e = ts_store_find(s, t->name);
  if (!e) {
    ts_error_set(err, TS_NOT_FOUND,
                 "in-place load: no tensor named '%s' to load into; load it "
                 "without in_place first",
                 t->name);
    return NULL;
  }
  bool shape = e->ndim != t->ndim || memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  if (!shape && e->dtype == t->dtype)
    return e;
  char have[256], saved[256];
  ts_shape_text(e->ndim, e->shape, have, sizeof have);
  ts_shape_text(t->ndim, t->shape, saved, sizeof saved);
  size_t n = strlen(bad);
  int k = snprintf(bad + n, cap - n, "%s'%s' is %s %s here, %s %s saved", *nbad ? "; " : "",
                   t->name, ts_dtype_name(e->dtype), have, ts_dtype_name(t->dtype), saved);
  if (k < 0 || (size_t)k >= cap - n) /* cut: the count in the message says how many */
    snprintf(bad + cap - 5, 5, " ...");
  (*nbad)++;
  *code = shape ? TS_BAD_SHAPE : *code ? *code : TS_BAD_DTYPE;
  return NULL;
}

/* The tensors the load names (NULL or none: every tensor of the index), each checked: known,
 * free in the store (in place: stored with the saved dtype and shape, every mismatch named),
 * named once, pieces covering it, prepared (prepare_target). Rank-local: the caller agrees on
 * the outcome. */
static int list_targets(const ts_ckpt_index *idx, const char *dir, ts_store *s,
                        const char *const *names, int nt, const ts_attr *attr,
                        const ts_ckpt_load_opts *o, ckpt_reader *r, int rank, int size, ltarget *L,
                        ts_error *err) {
  int rc = TS_OK;
  for (int k = 0; !rc && k < o->nrules; k++) /* a misspelt name is an error, not ignored */
    if (!ts_attr_rule_is_glob(o->rule_patterns[k]) && !ts_ckpt_index_find(idx, o->rule_patterns[k]))
      rc = ts_error_set(err, TS_NOT_FOUND,
                        "checkpoint '%s' holds no tensor named '%s' (given "
                        "an attribute rule)",
                        dir, o->rule_patterns[k]);
  char bad[400] = "";
  int nbad = 0, badcode = TS_OK;
  for (int i = 0; !rc && i < nt; i++) {
    const ts_ckpt_tensor *t = names ? ts_ckpt_index_find(idx, names[i]) : &idx->tensors[i];
    L[i].t = t;
    if (t)
      snprintf(L[i].dst, sizeof L[i].dst, "%s", t->name);
    if (t && o->in_place) {
      snprintf(L[i].dst, sizeof L[i].dst, "%s.in-place.%d", TS_RULES_RESERVED_PREFIX, i);
      if (!(L[i].into = inplace_into(s, t, bad, sizeof bad, &nbad, &badcode, err))) {
        rc = nbad ? TS_OK : err->code;
        continue;
      }
    }
    if (!t)
      rc = ts_error_set(err, TS_NOT_FOUND, "checkpoint '%s' holds no tensor named '%s'", dir,
                        names[i]);
    else if (!o->in_place && ts_store_find(s, t->name))
      rc = ts_error_set(err, TS_EXISTS,
                        "checkpoint load: a tensor named '%s' already exists; "
                        "drop it first",
                        t->name);
    else if (!t->partial_kept)
      rc = check_cover(dir, t, err);
    for (int j = 0; !rc && j < i; j++)
      if (L[j].t == t)
        rc = ts_error_set(err, TS_INVALID_ARGUMENT, "checkpoint load: '%s' named twice", t->name);
    if (!rc)
      rc = prepare_target(&L[i], attr, o, r, rank, size, err);
  }
  if (!rc && nbad) /* every mismatch, the message cut when they do not fit */
    rc = ts_error_set(err, badcode,
                      "in-place load from '%.60s': %d tensor%s not as saved, "
                      "nothing loaded: %s",
                      dir, nbad, nbad > 1 ? "s are" : " is", bad);
  return rc;
}

/* Each tensor's read path (TS_CKPT_PATH_*), chosen from the estimated costs alike on every rank;
 * mv[i] the move plan of those that take the move path. */
static int choose_paths(const ltarget *L, int nt, int size, const ts_ckpt_load_opts *o,
                        int64_t round, int64_t *path, ckpt_move **mv, ts_error *err) {
  for (int i = 0; i < nt; i++) {
    path[i] = TS_CKPT_PATH_DIRECT;
    if (L[i].t->partial_kept || o->path == TS_CKPT_PATH_DIRECT)
      continue;
    int rc = ts__ckpt_move_plan(L[i].t, L[i].g, size, round, &mv[i], err);
    if (rc)
      return rc;
    int64_t direct, move;
    ts__ckpt_move_costs(mv[i], &direct, &move);
    if (o->path == TS_CKPT_PATH_MOVE || move < direct)
      path[i] = TS_CKPT_PATH_MOVE;
    else
      ts__ckpt_move_destroy(&mv[i]);
  }
  return TS_OK;
}

/* Loads every prepared tensor into the store: the read paths agreed in one agreement (with any
 * failure so far), every tensor created unfilled and filled (those of the direct path by each
 * rank alone, those of the move path collectively, in order), then one agreement for all; every
 * one dropped on failure. Collective. */
static int load_all(ts_store *s, ts_world *w, ckpt_reader *r, const ltarget *L, int nt,
                    const ts_ckpt_load_opts *o, int64_t round, ts_ckpt_report *rep, ts_error *err) {
  ts_comm *c = ts_world_comm(w);
  ts_error lerr;
  ts_error_clear(&lerr);
  size_t m = (size_t)(nt ? nt : 1);
  int64_t *path = calloc(m, sizeof *path);
  ckpt_move **mv = calloc(m, sizeof *mv);
  ts_stored **e = calloc(m, sizeof *e);
  int lst = path && mv && e ? choose_paths(L, nt, ts_world_size(w), o, round, path, mv, &lerr)
                            : ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint: no memory");
  int rc = ts_comm_agree_max(c, lst, &lerr, path, path ? nt : 0, err);
  for (int i = 0; rc == TS_OK && i < nt; i++) {
    const ts_ckpt_tensor *t = L[i].t;
    if (!lst)
      lst = ts_store_add_unfilled(s, L[i].dst, t->ndim, t->shape, t->dtype, L[i].base, "", &e[i],
                                  &lerr);
    if (path[i] == TS_CKPT_PATH_MOVE) { /* agrees on the failures so far too */
      if (!lst && !mv[i])
        lst = ts__ckpt_move_plan(t, L[i].g, ts_world_size(w), round, &mv[i], &lerr);
      rc = ts__ckpt_move_run(mv[i], r, w, t, e[i], lst, &lerr, err);
      rep->tensors_moved += rc == TS_OK;
    } else if (!lst) {
      lst = t->partial_kept ? read_partial(r, t, L[i].g, L[i].base, e[i], ts_world_rank(w), &lerr)
                            : read_direct(r, t, e[i], &lerr);
    }
  }
  if (rc == TS_OK)
    rc = ts_comm_agree(c, lst, &lerr, err);
  for (int i = 0; i < nt; i++) {
    if (rc && e && e[i])
      ts_store_drop(s, L[i].dst, NULL);
    if (mv)
      ts__ckpt_move_destroy(&mv[i]);
  }
  free(path), free(mv), free(e);
  return rc;
}

/* In place, once every rank loaded every tensor: each stored tensor takes its new slice (its
 * own attribute, layout and bytes), the old one freed with the temporary entry. Cannot fail. */
static void inplace_commit(ts_store *s, const ltarget *L, int nt) {
  for (int i = 0; i < nt; i++) {
    if (!L[i].into)
      continue;
    ts_stored *e = ts_store_find(s, L[i].t->name), *tmp = ts_store_find(s, L[i].dst);
    ts_tensor old = e->local;
    e->local = tmp->local;
    tmp->local = old;
    ts_store_drop(s, L[i].dst, NULL);
  }
}

/* A load's report: its tensors, their bytes, and the distinct data files their pieces lie in. */
static void load_totals(const ltarget *L, int nt, ts_ckpt_report *rep) {
  rep->tensors = nt;
  int64_t np = 0;
  for (int i = 0; i < nt; i++) {
    int64_t n = (int64_t)ts_dtype_size(L[i].t->dtype);
    for (int d = 0; d < L[i].t->ndim; d++)
      n *= L[i].t->shape[d];
    rep->bytes_total += n;
    np += L[i].t->npieces;
  }
  const char **f = malloc(sizeof *f * (size_t)(np ? np : 1));
  int64_t m = 0;
  for (int i = 0; f && i < nt; i++)
    for (int k = 0; k < L[i].t->npieces; k++) {
      int64_t j = 0;
      while (j < m && strcmp(f[j], L[i].t->pieces[k].file) != 0)
        j++;
      if (j == m)
        f[m++] = L[i].t->pieces[k].file;
    }
  rep->files = (int)m;
  free(f);
}

int ts_ckpt_load(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                 const ts_attr *attr, const ts_ckpt_load_opts *o, ts_ckpt_report *rep,
                 ts_error *err) {
  ts_ckpt_load_opts none = {.path = TS_CKPT_PATH_AUTO};
  if (!o)
    o = &none;
  ts_ckpt_report rdummy;
  if (!rep)
    rep = &rdummy;
  memset(rep, 0, sizeof *rep);
  ts_comm *c = ts_world_comm(w);
  int rank = ts_world_rank(w), size = ts_world_size(w);
  ts_error lerr;
  ts_error_clear(&lerr);
  ts_ckpt_index *idx = NULL;
  ckpt_reader r = {.dir = dir, .rep = rep};
  int lst = o->in_place && (attr || o->nrules)
                ? ts_error_set(&lerr, TS_INVALID_ARGUMENT,
                               "an in-place load keeps each "
                               "tensor's attribute; give no attribute rules or default")
                : ts_ckpt_index_read(dir, &idx, &lerr);
  int nt = 0;
  ltarget *L = NULL;
  if (!lst) {
    nt = names && n > 0 ? n : idx->ntensors;
    L = calloc((size_t)(nt ? nt : 1), sizeof *L);
    lst = L ? list_targets(idx, dir, s, names && n > 0 ? names : NULL, nt, attr, o, &r, rank, size,
                           L, &lerr)
            : ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint: no memory");
  }
  /* one agreement: the index, the names and every piece this load reads checked, alike on
   * every rank, before anything is planned or allocated */
  int rc = ts_comm_agree(c, lst, &lerr, err);
  int loaded = 0;
  int64_t round = o->staging_bytes > 0 ? o->staging_bytes : (int64_t)64 << 20;
  if (ts_comm_single_copy(c)) /* pulling: two buffers, short rounds */
    round = round / 2 < MOVE_PULL_CHUNK ? round / 2 : MOVE_PULL_CHUNK;
  round = round < MOVE_ROUND_MIN ? MOVE_ROUND_MIN : round > MOVE_ROUND_MAX ? MOVE_ROUND_MAX : round;
  if (rc == TS_OK && (rc = load_all(s, w, &r, L, nt, o, round, rep, err)) == TS_OK)
    loaded = nt;
  for (int i = 0; rc == TS_OK && i < nt; i++) {
    const char *tag = L[i].into ? L[i].into->layout_tag : "";
    if (L[i].reshard || tag[0]) {
      ts_plan_opts po = {TS_STRATEGY_AUTO, o->staging_bytes, size};
      rc = ts_store_reshard(s, w, L[i].dst, L[i].want, tag, &po, NULL, err);
    }
  }
  ts__ckpt_reader_close(&r);
  if (rc) /* every rank: no loaded tensor is kept, every stored one stays as it was */
    for (int i = 0; i < loaded; i++)
      ts_store_drop(s, L[i].dst, NULL);
  else
    inplace_commit(s, L, nt), load_totals(L, nt, rep);
  for (int i = 0; L && i < nt; i++) {
    ts_geom_destroy(&L[i].g);
    ts_attr_destroy(&L[i].want);
    ts_attr_destroy(&L[i].base);
  }
  free(L);
  ts_ckpt_index_destroy(&idx);
  return rc;
}
