/* ckpt_load.c - loading a checkpoint into new tensors of the store, collective over the world.
 *
 * Every rank reads the index and checks it (pieces inside the tensor, pairwise disjoint and
 * covering it exactly). For each tensor the target attribute (the caller's, else the saved one)
 * gives every rank its target box; the tensor is created with a row-major slice and each rank
 * reads, for every piece meeting its box, only the bytes of the intersection: runs contiguous in
 * the file and in the slice, pread straight into the slice (a piece whose intersection spans the
 * inner dims of both is one pread). Every piece's XXH3-64 is verified once, by its verifier: the
 * rank reading the most of it (ties spread round the mesh from piece to piece). When that rank
 * reads the whole piece it hashes the runs as they arrive (a streaming XXH3 state over the runs in file order), so a
 * load under the saved attribute reads every byte exactly once; otherwise it reads the whole
 * piece through a bounded buffer to hash it, copying its own part out of that buffer on the way
 * (the other readers of the piece still read their parts: a resharding load reads up to twice
 * the bytes, the price of whole-piece checksums). Each file header is checked against the index
 * (dtype, shape, offsets inside the file). Any failure on any rank (missing file, lying header,
 * checksum, memory) is agreed over the world: every rank returns the same error naming the file
 * and the piece, and no loaded tensor is kept.
 *
 * Attributes with partial placements: a target with P(op) is loaded replicated along those mesh
 * dims and then resharded to it; a checkpoint saved with keep_partial is loaded under its saved
 * attribute (each rank reads the piece of its own box and partial coordinates) and resharded to
 * the target when it differs. Both reshards go through the store's atomic reshard. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ckpt_internal.h"
#include "ts_comm.h"

#define MAX_OPEN 64

typedef struct reader {
  const char *dir;
  ckpt_file files[MAX_OPEN];
  int nfiles;
  uint8_t *vbuf; /* the verify buffer */
  size_t vcap;
  ts_ckpt_report *rep;
} reader;

static int open_file(reader *r, const char *name, ckpt_file **out, ts_error *err) {
  for (int i = 0; i < r->nfiles; i++)
    if (strcmp(r->files[i].name, name) == 0) {
      *out = &r->files[i];
      return TS_OK;
    }
  if (r->nfiles == MAX_OPEN) {
    ckpt_file_close(&r->files[0]);
    memmove(&r->files[0], &r->files[1], sizeof r->files[0] * (MAX_OPEN - 1));
    r->nfiles--;
  }
  int rc = ckpt_file_open(r->dir, name, &r->files[r->nfiles], err);
  if (rc)
    return rc;
  *out = &r->files[r->nfiles++];
  return TS_OK;
}

static void reader_close(reader *r) {
  for (int i = 0; i < r->nfiles; i++)
    ckpt_file_close(&r->files[i]);
  r->nfiles = 0;
  ts_shard_free(r->vbuf);
  r->vbuf = NULL;
}

static int mismatch(const ts_ckpt_tensor *t, const ts_ckpt_piece *p, uint64_t got,
                    ts_error *err) {
  char bt[256];
  ckpt_box_text(&p->box, bt, sizeof bt);
  return ts_error_set(err, TS_CORRUPT,
                      "checkpoint file '%s', piece '%s' (tensor '%s', box %s): checksum "
                      "xxh3 %016llx, the index says %016llx",
                      p->file, p->key, t->name, bt, (unsigned long long)got,
                      (unsigned long long)p->xxh3);
}

static int io_fail(const ts_ckpt_piece *p, const ts_ckpt_tensor *t, ts_error *err) {
  return ts_error_set(err, errno == EIO ? TS_CORRUPT : TS_CHECKPOINT_IO,
                      "checkpoint file '%s', piece '%s' (tensor '%s'): cannot read: %s", p->file,
                      p->key, t->name, errno == EIO ? "the file is shorter than its header says"
                                                    : strerror(errno));
}

/* Reads I = box ∩ piece of a piece at file offset `off` into dst (row-major over box). With st,
 * hashes the runs in order (only when I is the whole piece). */
static int read_runs(int fd, int64_t off, const ts_box *P, const ts_box *I, const ts_box *B,
                     uint8_t *dst, size_t es, XXH3_state_t *st, int64_t *nread) {
  int n = P->ndim;
  int64_t ps[TS_MAX_DIMS + 1], bs[TS_MAX_DIMS + 1]; /* row-major element strides */
  ps[n] = bs[n] = 1;
  for (int d = n - 1; d >= 0; d--) {
    ps[d] = ps[d + 1] * (P->hi[d] - P->lo[d]);
    bs[d] = bs[d + 1] * (B->hi[d] - B->lo[d]);
  }
  if (n == 0) {
    if (ckpt_pread_full(fd, dst, es, off))
      return -1;
    if (st)
      XXH3_64bits_update(st, dst, es);
    *nread += (int64_t)es;
    return 0;
  }
  int k0 = n - 1;
  while (k0 > 0 && I->lo[k0] == P->lo[k0] && I->hi[k0] == P->hi[k0] && I->lo[k0] == B->lo[k0] &&
         I->hi[k0] == B->hi[k0])
    k0--;
  int64_t run = (I->hi[k0] - I->lo[k0]) * ps[k0 + 1]; /* elements; dims > k0 are full */
  int64_t idx[TS_MAX_DIMS];
  for (int d = 0; d < n; d++)
    idx[d] = I->lo[d];
  for (;;) {
    int64_t pe = 0, be = 0;
    for (int d = 0; d < n; d++) {
      pe += (idx[d] - P->lo[d]) * ps[d + 1];
      be += (idx[d] - B->lo[d]) * bs[d + 1];
    }
    uint8_t *to = dst + (size_t)be * es;
    if (ckpt_pread_full(fd, to, (size_t)run * es, off + pe * (int64_t)es))
      return -1;
    if (st)
      XXH3_64bits_update(st, to, (size_t)run * es);
    *nread += run * (int64_t)es;
    int d = k0 - 1;
    while (d >= 0 && ++idx[d] == I->hi[d]) {
      idx[d] = I->lo[d];
      d--;
    }
    if (d < 0)
      break;
  }
  return 0;
}

/* A dense row-major view of a box-shaped buffer. */
static void box_view(const ts_box *b, ts_dtype dt, void *data, ts_tensor *t) {
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < b->ndim; d++)
    ext[d] = b->hi[d] - b->lo[d];
  t->data = data;
  t->bytes = (size_t)ts_box_numel(b) * ts_dtype_size(dt);
  ts_layout_plain(&t->layout, dt, b->ndim, ext, NULL);
}

/* Reads a whole piece through the verify buffer to hash it, in chunks of whole dim-0 slabs;
 * with I (the part this rank needs, NULL: none) copies that part of each chunk into dst
 * (row-major over B) on the way, so the verifier reads its own part only once. Returns
 * TS_UNSUPPORTED (nothing read) when I is given but a slab does not fit the buffer. */
static int verify_whole(reader *r, int fd, int64_t off, const ts_ckpt_tensor *t,
                        const ts_ckpt_piece *p, int64_t bytes, const ts_box *I, const ts_box *B,
                        uint8_t *dst, ts_error *err) {
  if (!r->vbuf) {
    r->vcap = 16u << 20;
    r->vbuf = ts_shard_alloc_as(r->vcap, TS_POOL_STAGING, "the checkpoint verify buffer", err);
    if (!r->vbuf)
      return err ? err->code : TS_NO_MEMORY;
  }
  const ts_box *P = &p->box;
  int64_t rows = P->ndim ? P->hi[0] - P->lo[0] : 1;
  int64_t slab = rows ? bytes / rows : bytes;
  if (I && (P->ndim == 0 || slab > (int64_t)r->vcap))
    return TS_UNSUPPORTED;
  int64_t step = I ? ((int64_t)r->vcap / slab) * slab : (int64_t)r->vcap;
  XXH3_state_t *st = XXH3_createState();
  if (!st)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  XXH3_64bits_reset(st);
  ts_tensor to;
  if (I)
    box_view(B, t->dtype, dst, &to);
  int rc = TS_OK;
  for (int64_t done = 0; done < bytes && !rc;) {
    size_t n = (size_t)(bytes - done < step ? bytes - done : step);
    if (ckpt_pread_full(fd, r->vbuf, n, off + done)) {
      rc = io_fail(p, t, err);
      break;
    }
    XXH3_64bits_update(st, r->vbuf, n);
    if (I) { /* the chunk's box: slabs [done / slab, (done + n) / slab) of the piece */
      ts_box C = *P, X;
      C.lo[0] = P->lo[0] + done / slab;
      C.hi[0] = P->lo[0] + (done + (int64_t)n) / slab;
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
        r->rep->bytes_read += ts_box_numel(&X) * (int64_t)ts_dtype_size(t->dtype);
      }
    }
    done += (int64_t)n;
  }
  if (!rc)
    r->rep->bytes_verified_extra +=
        bytes - (I ? ts_box_numel(I) * (int64_t)ts_dtype_size(t->dtype) : 0);
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return rc ? rc : h == p->xxh3 ? TS_OK : mismatch(t, p, h, err);
}

/* Every piece inside the tensor, pairwise disjoint, covering it (pieces not kept partial). */
static int check_cover(const char *dir, const ts_ckpt_tensor *t, ts_error *err) {
  int64_t total = 1, sum = 0;
  for (int d = 0; d < t->ndim; d++)
    total *= t->shape[d];
  for (int k = 0; k < t->npieces; k++) {
    sum += ts_box_numel(&t->pieces[k].box);
    for (int j = 0; j < k; j++) {
      ts_box x;
      if (ts_box_intersect(&t->pieces[j].box, &t->pieces[k].box, &x))
        return ts_error_set(err, TS_CORRUPT, "checkpoint '%s': tensor '%s': pieces '%s' and '%s' "
                            "overlap", dir, t->name, t->pieces[j].key, t->pieces[k].key);
    }
  }
  if (sum != total)
    return ts_error_set(err, TS_CORRUPT, "checkpoint '%s': tensor '%s': its pieces hold %lld of "
                        "its %lld elements", dir, t->name, (long long)sum, (long long)total);
  return TS_OK;
}

/* This rank's reads of one tensor (not kept partial) into its slice. */
static int read_tensor(reader *r, const ts_ckpt_tensor *t, const ts_geom *g, const ts_attr *a,
                       ts_stored *e, int rank, ts_error *err) {
  size_t es = ts_dtype_size(t->dtype);
  int64_t me = ts_geom_mesh_index(g, rank);
  for (int k = 0; k < t->npieces; k++) {
    const ts_ckpt_piece *p = &t->pieces[k];
    /* the verifier: the mesh index reading the most of this piece; ties go round the mesh
     * from piece to piece (a resharding load spreads the verifying reads over the ranks) */
    int64_t best = -1, best_n = 0;
    for (int64_t j = 0; j < a->nranks; j++) {
      int64_t i = (k + j) % a->nranks;
      ts_box b, x;
      ts_geom_index_box(g, i, &b);
      int64_t nx = ts_box_intersect(&b, &p->box, &x) ? ts_box_numel(&x) : 0;
      if (nx > best_n)
        best = i, best_n = nx;
    }
    ts_box I;
    bool reads = me >= 0 && e->has_slice && ts_box_intersect(&e->box, &p->box, &I) &&
                 ts_box_numel(&I) > 0;
    bool verifier = me >= 0 && me == best;
    if (!reads && !verifier)
      continue;
    ckpt_file *f;
    int64_t off;
    int rc = open_file(r, p->file, &f, err);
    if (!rc)
      rc = ckpt_file_piece(f, t, p, &off, err);
    if (rc)
      return rc;
    int64_t bytes = ts_box_numel(&p->box) * (int64_t)es;
    bool inline_hash = verifier && reads && ts_box_equal(&I, &p->box);
    XXH3_state_t *st = NULL;
    if (inline_hash) {
      if (!(st = XXH3_createState()))
        return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
      XXH3_64bits_reset(st);
    }
    if (verifier && reads && !inline_hash) { /* verify and take this rank's part at once */
      rc = verify_whole(r, f->fd, off, t, p, bytes, &I, &e->box, e->local.data, err);
      if (rc == TS_OK)
        continue;
      if (rc != TS_UNSUPPORTED) /* UNSUPPORTED: slabs too large; read and verify apart */
        return rc;
    }
    if (reads && read_runs(f->fd, off, &p->box, &I, &e->box, e->local.data, es, st,
                           &r->rep->bytes_read)) {
      XXH3_freeState(st);
      return io_fail(p, t, err);
    }
    if (st) {
      uint64_t h = XXH3_64bits_digest(st);
      XXH3_freeState(st);
      if (h != p->xxh3)
        return mismatch(t, p, h, err);
    } else if (verifier &&
               (rc = verify_whole(r, f->fd, off, t, p, bytes, NULL, NULL, NULL, err))) {
      return rc;
    }
  }
  return TS_OK;
}

/* A kept-partial checkpoint under its saved attribute: the piece of this rank's box and partial
 * coordinates, read whole and verified. */
static int read_partial(reader *r, const ts_ckpt_tensor *t, const ts_geom *g, const ts_attr *a,
                        ts_stored *e, int rank, ts_error *err) {
  int64_t me = ts_geom_mesh_index(g, rank);
  if (me < 0 || !e->has_slice || ts_box_numel(&e->box) == 0)
    return TS_OK;
  int64_t c[TS_MAX_MESH_DIMS], pc[TS_MAX_MESH_DIMS], idx = me;
  int npc = 0;
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    c[m] = idx % a->mesh_shape[m];
    idx /= a->mesh_shape[m];
  }
  for (int m = 0; m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_PARTIAL)
      pc[npc++] = c[m];
  for (int k = 0; k < t->npieces; k++) {
    const ts_ckpt_piece *p = &t->pieces[k];
    if (!ts_box_equal(&p->box, &e->box) || p->npcoord != npc ||
        memcmp(p->pcoord, pc, sizeof(int64_t) * (size_t)npc) != 0)
      continue;
    ckpt_file *f;
    int64_t off;
    int rc = open_file(r, p->file, &f, err);
    if (!rc)
      rc = ckpt_file_piece(f, t, p, &off, err);
    if (rc)
      return rc;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
      return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
    XXH3_64bits_reset(st);
    if (read_runs(f->fd, off, &p->box, &p->box, &e->box, e->local.data, ts_dtype_size(t->dtype),
                  st, &r->rep->bytes_read)) {
      XXH3_freeState(st);
      return io_fail(p, t, err);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h == p->xxh3 ? TS_OK : mismatch(t, p, h, err);
  }
  char bt[256];
  ckpt_box_text(&e->box, bt, sizeof bt);
  return ts_error_set(err, TS_CORRUPT, "checkpoint '%s': tensor '%s': no partial piece for box %s "
                      "at rank %d", r->dir, t->name, bt, rank);
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

int ts_ckpt_load(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                 const ts_attr *attr, const ts_ckpt_load_opts *o, ts_ckpt_report *rep,
                 ts_error *err) {
  ts_ckpt_load_opts none = {false, 0};
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
  int lst = ts_ckpt_index_read(dir, &idx, &lerr);
  int nt = 0;
  const ts_ckpt_tensor **list = NULL;
  if (!lst) {
    nt = names && n > 0 ? n : idx->ntensors;
    list = calloc((size_t)(nt ? nt : 1), sizeof *list);
    if (!list)
      lst = ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint: no memory");
  }
  for (int i = 0; !lst && i < nt; i++) {
    list[i] = names && n > 0 ? ts_ckpt_index_find(idx, names[i]) : &idx->tensors[i];
    if (!list[i])
      lst = ts_error_set(&lerr, TS_NOT_FOUND, "checkpoint '%s' holds no tensor named '%s'", dir,
                         names[i]);
    else if (ts_store_find(s, list[i]->name))
      lst = ts_error_set(&lerr, TS_EXISTS, "checkpoint load: a tensor named '%s' already exists; "
                         "drop it first", list[i]->name);
    else if (!list[i]->partial_kept)
      lst = check_cover(dir, list[i], &lerr);
    for (int j = 0; !lst && j < i; j++)
      if (list[j] == list[i])
        lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT, "checkpoint load: '%s' named twice",
                           list[i]->name);
  }
  int rc = ts_comm_agree(c, lst, &lerr, err);
  int loaded = 0;
  reader r = {.dir = dir, .rep = rep};
  for (int i = 0; rc == TS_OK && i < nt; i++) {
    const ts_ckpt_tensor *t = list[i];
    ts_attr *want = NULL, *base = NULL;
    ts_geom *g = NULL;
    ts_stored *e = NULL;
    bool reshard = false;
    lst = attr ? ts_attr_clone(attr, &want, &lerr) : ts_attr_parse(t->attr, &want, &lerr);
    char why[512];
    if (!lst && (lst = ts_attr_validate(want, t->ndim, t->shape, size, &lerr))) {
      snprintf(why, sizeof why, "%s", lerr.msg);
      ts_error_set(&lerr, lst, "checkpoint load of '%s' on %d ranks: %s%s", t->name, size, why,
                   attr ? "" : " (give an attribute for this world)");
    }
    if (!lst)
      lst = read_attr(t, want, &base, &reshard, &lerr);
    if (!lst && (lst = ts_attr_validate(base, t->ndim, t->shape, size, &lerr))) {
      snprintf(why, sizeof why, "%s", lerr.msg);
      ts_error_set(&lerr, lst, "checkpoint load of '%s': the saved attribute does not fit %d "
                   "ranks (%s); a checkpoint with partial values kept loads on its saved ranks",
                   t->name, size, why);
    }
    if (!lst)
      lst = ts_geom_create(base, t->ndim, t->shape, &g, &lerr);
    if (!lst)
      lst = ts_store_add(s, t->name, t->ndim, t->shape, t->dtype, base, "", &e, &lerr);
    if (!lst)
      lst = t->partial_kept ? read_partial(&r, t, g, base, e, rank, &lerr)
                            : read_tensor(&r, t, g, base, e, rank, &lerr);
    rc = ts_comm_agree(c, lst, &lerr, err);
    if (e && rc)
      ts_store_drop(s, t->name, NULL);
    if (!rc) {
      loaded = i + 1;
      if (reshard) {
        ts_plan_opts po = {TS_STRATEGY_AUTO, o->staging_bytes, size};
        rc = ts_store_reshard(s, w, t->name, want, "", &po, NULL, err);
      }
    }
    ts_geom_destroy(&g);
    ts_attr_destroy(&want);
    ts_attr_destroy(&base);
  }
  reader_close(&r);
  if (rc) /* every rank: no loaded tensor is kept */
    for (int i = 0; i < loaded; i++)
      ts_store_drop(s, list[i]->name, NULL);
  else
    rep->tensors = nt;
  free(list);
  ts_ckpt_index_destroy(&idx);
  return rc;
}
