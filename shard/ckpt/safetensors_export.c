/* safetensors_export.c - exporting stored tensors as a Hugging Face safetensors model, collective
 * over the world: one consolidated file, or HF shards (`model-00001-of-00003.safetensors`) and
 * `model.safetensors.index.json` when the bytes exceed the shard size asked for.
 *
 * Every rank computes the same layout from the store's metadata alone (tensors in order, each
 * file's JSON header with `__metadata__` first, padded with spaces so that the data section
 * starts on a 4 KiB boundary, the data packed without gaps as the format requires). The
 * metadata is the request's, else the one every exported tensor keeps from its import
 * (compared by reference, then by text once per distinct one), else {"format": "pt"}; it is
 * written into each file's header from where it is held, never copied per file. A tensor named
 * `__metadata__` is refused (the format's key). Every pass over the tensors is linear or a sort
 * (names given twice). Rank 0
 * creates each file under a temporary name next to the target (`.NAME.tmp-STAMP`, O_CREAT |
 * O_EXCL | O_NOFOLLOW, mode 0600), writes its header, sets its size and allocates its blocks
 * (fallocate: a full disk fails here, ENOSPC naming the file), after dropping the cached pages of
 * the files it replaces (their memory then serves the new ones); agreement. Then every rank opens
 * the files (O_NOFOLLOW) and writes its own part of each slice: a box held by several replicas is
 * cut along its first dim among them, so no rank gathers a tensor and replicas share the writing.
 * With every rank on one node and the blocks allocated, each rank maps the file bytes its part
 * spans (MAP_SHARED), faults their pages in ahead (MADV_POPULATE_WRITE) and copies its byte runs
 * in (a non-row-major slice through the strided-copy kernel, straight into the mapping): page
 * faults do not take the file's write lock, which serializes the pwrites of ranks writing one
 * file. Otherwise each rank pwrites its byte runs at their offsets (non-row-major slices packed
 * first), and ranks on several nodes fsync what they wrote; agreement. Rank 0 fsyncs every file
 * (on one node that is every rank's writes, through the shared page cache), renames them into
 * place (the index last), fsyncs the directory; agreement. On any failure every rank returns the
 * same error and the temporary files are removed: the target appears whole or not at all. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "safetensors_internal.h"
#include "ts_comm.h"

#define ST_DATA_ALIGN ((int64_t)4096)

/* A tensor of the export: its stored entry, file and offset there (relative to the data). */
typedef struct xtensor {
  ts_stored *e;
  int64_t bytes;
  int file;
  int64_t offset;
} xtensor;

/* A file of the export: its final and temporary paths, its tensors (ts[first .. first + count),
 * assigned in order), the JSON of their header entries, its size. Its header is 8 bytes of
 * length, `{"__metadata__":` META `,` the entries without their `{`, then spaces. */
typedef struct xfile {
  char path[4500], tmp[4500];
  int first, count;
  char *entries; /* `{...}`: the tensors' entries */
  size_t elen;
  size_t hlen; /* 8 + the JSON with its padding: where the data starts */
  int64_t size;
} xfile;

typedef struct xplan {
  int nt, nf;
  xtensor *ts;
  xfile *fs;
  char parent[4096], base[256], index[4500], index_tmp[4500];
  bool sharded;
  int64_t total;
  const char *meta; /* the __metadata__ object's JSON text, every file's */
  size_t mlen;
  char *meta_made; /* meta, when made here from the request's pairs */
} xplan;

static void plan_free(xplan *p) {
  for (int i = 0; p->fs && i < p->nf; i++)
    free(p->fs[i].entries);
  free(p->fs);
  free(p->ts);
  free(p->meta_made);
}

static int cmp_entry_name(const void *a, const void *b) {
  const xtensor *x = a, *y = b;
  return strcmp(x->e->name, y->e->name);
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return (x > y) - (x < y);
}

/* No tensor named twice: the entries sorted by address and compared side by side. */
static int named_once(const xplan *p, ts_error *err) {
  const ts_stored **e = malloc(sizeof *e * (size_t)p->nt);
  if (!e)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors export: no memory");
  for (int i = 0; i < p->nt; i++)
    e[i] = p->ts[i].e;
  qsort(e, (size_t)p->nt, sizeof *e, cmp_ptr);
  int rc = TS_OK;
  for (int i = 1; i < p->nt && !rc; i++)
    if (e[i] == e[i - 1])
      rc = ts_error_set(err, TS_INVALID_ARGUMENT, "safetensors export: '%s' named twice",
                        e[i]->name);
  free(e);
  return rc;
}

/* The tensors: the named ones in order, or every stored tensor by name; whole values only, and
 * no name the format keeps for itself. */
static int pick_tensors(ts_store *s, const char *const *names, int n, xplan *p, ts_error *err) {
  int all = names && n > 0 ? n : ts_store_count(s);
  if (all == 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "safetensors export: no tensor to export");
  p->ts = calloc((size_t)all, sizeof *p->ts);
  if (!p->ts)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors export: no memory");
  for (int i = 0; i < all; i++) {
    ts_stored *e = names && n > 0 ? ts_store_find(s, names[i]) : ts_store_at(s, i);
    if (!e)
      return ts_error_set(err, TS_NOT_FOUND, "safetensors export: no tensor named '%s'", names[i]);
    if (strcmp(e->name, "__metadata__") == 0)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "safetensors export: tensor '__metadata__' "
                          "cannot be written: a safetensors file keeps its metadata under that "
                          "key; rename the tensor (reshard it with keep_source_as set to another "
                          "name, then drop '__metadata__') or leave it out of the names");
    for (int d = 0; d < e->attr->mesh_ndim; d++)
      if (e->attr->place[d].kind == TS_PLACE_PARTIAL)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "safetensors export: '%s' holds partial "
                            "values; reshard it to S or R placements first",
                            e->name);
    if (ts_dtype_is_complex(e->dtype))
      return ts_error_set(err, TS_BAD_DTYPE,
                          "safetensors export: '%s' is %s, and safetensors "
                          "has no complex dtype tshard writes (Hugging Face's loaders read "
                          "none); leave it out of the names, or save it in a checkpoint, which "
                          "keeps c64 and c128",
                          e->name, ts_dtype_name(e->dtype));
    int64_t b = (int64_t)ts_dtype_size(e->dtype);
    for (int d = 0; d < e->ndim; d++)
      b *= e->shape[d];
    p->ts[i] = (xtensor){e, b, 0, 0};
    p->total += b;
  }
  p->nt = all;
  if (!(names && n > 0))
    qsort(p->ts, (size_t)all, sizeof *p->ts, cmp_entry_name);
  return names && n > 0 ? named_once(p, err) : TS_OK;
}

/* The metadata every exported tensor keeps from its import when all keep the same text (the
 * distinct ones, sorted by address, each compared once with the first: O(n log n) plus their
 * bytes), else NULL. */
static const st_meta *common_kept(const xplan *p, ts_error *err) {
  const st_meta **k = malloc(sizeof *k * (size_t)p->nt);
  if (!k) {
    ts_error_set(err, TS_NO_MEMORY, "safetensors export: no memory");
    return NULL;
  }
  bool all = true;
  for (int i = 0; i < p->nt && all; i++)
    all = (k[i] = ts__st_kept(p->ts[i].e)) != NULL;
  if (all)
    qsort(k, (size_t)p->nt, sizeof *k, cmp_ptr);
  for (int i = 1; i < p->nt && all; i++)
    all = k[i] == k[i - 1] ||
          (k[i]->len == k[0]->len && memcmp(k[i]->text, k[0]->text, k[0]->len) == 0);
  const st_meta *m = all ? k[0] : NULL;
  free(k);
  return m;
}

/* The files' __metadata__: the request's pairs (nm > 0), else the metadata every tensor kept
 * from its import, else {"format": "pt"}. */
static int plan_meta(xplan *p, const char *const *mk, const char *const *mv, int nm,
                     ts_error *err) {
  if (nm == 0) {
    ts_error_clear(err);
    const st_meta *k = common_kept(p, err);
    if (err->code)
      return err->code;
    p->meta = k ? k->text : "{\"format\":\"pt\"}";
    p->mlen = strlen(p->meta);
    return TS_OK;
  }
  json_t *meta = json_object();
  for (int i = 0; meta && i < nm; i++)
    if (json_object_set_new(meta, mk[i], json_string(mv[i])) != 0)
      json_decref(meta), meta = NULL;
  p->meta_made = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
  json_decref(meta);
  if (!p->meta_made)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors export: no memory for the metadata");
  p->meta = p->meta_made;
  p->mlen = strlen(p->meta);
  return TS_OK;
}

/* One file's header entries (its tensors with their data_offsets) and the header's length. */
static int build_header(xplan *p, int fi, ts_error *err) {
  xfile *f = &p->fs[fi];
  json_t *h = json_object();
  for (int i = f->first; h && i < f->first + f->count; i++) {
    const xtensor *t = &p->ts[i];
    json_t *o = json_object(), *shape = json_array();
    for (int d = 0; d < t->e->ndim; d++)
      json_array_append_new(shape, json_integer(t->e->shape[d]));
    json_object_set_new(o, "dtype", json_string(ts_ckpt_dtype_name(t->e->dtype)));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(
        o, "data_offsets",
        json_pack("[II]", (json_int_t)t->offset, (json_int_t)(t->offset + t->bytes)));
    json_object_set_new(h, t->e->name, o);
  }
  f->entries = h ? json_dumps(h, JSON_COMPACT) : NULL;
  json_decref(h);
  if (!f->entries)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors export: no memory for a header");
  f->elen = strlen(f->entries);
  /* {"__metadata__":META,ENTRIES} or, without entries, {"__metadata__":META} */
  size_t json = 16 + p->mlen + (f->elen > 2 ? f->elen : 1);
  size_t total = 8 + json;
  f->hlen = (total + (size_t)ST_DATA_ALIGN - 1) / (size_t)ST_DATA_ALIGN * (size_t)ST_DATA_ALIGN;
  return TS_OK;
}

/* Rank 0: file f's header written at the start of fd, in pieces (the metadata is not copied). */
static int write_header(int fd, const xplan *p, const xfile *f) {
  char spaces[512];
  memset(spaces, ' ', sizeof spaces);
  uint8_t lb[8];
  uint64_t hl = f->hlen - 8;
  for (int i = 0; i < 8; i++)
    lb[i] = (uint8_t)(hl >> (8 * i));
  bool entries = f->elen > 2;
  struct {
    const void *b;
    size_t n;
  } piece[] = {{lb, 8},
               {"{\"__metadata__\":", 16},
               {p->meta, p->mlen},
               {entries ? "," : "}", 1},
               {f->entries + 1, entries ? f->elen - 1 : 0}};
  int64_t at = 0;
  for (size_t i = 0; i < sizeof piece / sizeof *piece; i++) {
    if (piece[i].n && ts__ckpt_pwrite_full(fd, piece[i].b, piece[i].n, at) != 0)
      return -1;
    at += (int64_t)piece[i].n;
  }
  while (at < (int64_t)f->hlen) {
    size_t n = (size_t)((int64_t)f->hlen - at) < sizeof spaces ? (size_t)((int64_t)f->hlen - at)
                                                               : sizeof spaces;
    if (ts__ckpt_pwrite_full(fd, spaces, n, at) != 0)
      return -1;
    at += (int64_t)n;
  }
  return 0;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The files: the tensors assigned in order (a new shard when the next would pass the size), the
 * paths, the headers. */
static int plan_files(xplan *p, const char *path, int64_t max_shard, const char *const *mk,
                      const char *const *mv, int nm, ts_error *err) {
  int rc = plan_meta(p, mk, mv, nm, err);
  if (rc)
    return rc;
  rc = ts__ckpt_split_path(path, p->parent, sizeof p->parent, p->base, sizeof p->base, err);
  if (rc)
    return rc;
  if (!ends_with(p->base, ".safetensors") || strlen(p->base) > 200)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "safetensors export to '%s': give a file name "
                        "ending in .safetensors (of at most 200 bytes)",
                        path);
  p->sharded = max_shard > 0 && p->total > max_shard;
  int nf = 1;
  int64_t cur = 0;
  for (int i = 0; i < p->nt; i++) {
    if (p->sharded && cur > 0 && cur + p->ts[i].bytes > max_shard)
      nf++, cur = 0;
    p->ts[i].file = nf - 1;
    p->ts[i].offset = cur;
    cur += p->ts[i].bytes;
  }
  p->fs = calloc((size_t)nf, sizeof *p->fs);
  if (!p->fs)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors export: no memory");
  p->nf = nf;
  for (int i = p->nt - 1; i >= 0; i--) { /* each file's tensors: one run of ts */
    p->fs[p->ts[i].file].first = i;
    p->fs[p->ts[i].file].count++;
  }
  int stem = (int)(strlen(p->base) - strlen(".safetensors"));
  for (int fi = 0; fi < nf && !rc; fi++) {
    if (p->sharded)
      snprintf(p->fs[fi].path, sizeof p->fs[fi].path, "%s/%.*s-%05d-of-%05d.safetensors", p->parent,
               stem, p->base, fi + 1, nf);
    else
      snprintf(p->fs[fi].path, sizeof p->fs[fi].path, "%s/%s", p->parent, p->base);
    rc = build_header(p, fi, err);
    if (!rc) {
      xfile *f = &p->fs[fi];
      f->size = (int64_t)f->hlen;
      for (int i = f->first; i < f->first + f->count; i++)
        f->size += p->ts[i].bytes;
    }
  }
  snprintf(p->index, sizeof p->index, "%s/%s.index.json", p->parent, p->base);
  return rc;
}

/* A target that exists must be a regular file (it is replaced); never a link or a directory. */
static int check_target(const char *path, ts_error *err) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? TS_OK
                           : ts_error_set(err, TS_CHECKPOINT_IO,
                                          "safetensors export: cannot "
                                          "examine '%s': %s",
                                          path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "safetensors export: '%s' exists and is not a "
                        "regular file (a link or a directory is never replaced); choose another "
                        "path",
                        path);
  return TS_OK;
}

/* The cached pages of a file the export replaces dropped (POSIX_FADV_DONTNEED on a regular file
 * there; its bytes stay as they are until the rename), so that the new file's pages reuse that
 * memory rather than the cache holding both for a while. */
static void drop_cached(const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (fd >= 0)
    close(fd);
}

/* The blocks of the file's size [0, size) allocated (fallocate), so that no later write into the
 * file, through pwrite or a shared mapping, can run out of room: 1 when allocated, 0 where the
 * filesystem cannot (EOPNOTSUPP), -1 with errno on failure (ENOSPC: the disk is full). */
static int allocate(int fd, int64_t size) {
  int r;
  while ((r = fallocate(fd, 0, 0, (off_t)size)) != 0 && errno == EINTR)
    ;
  if (r == 0)
    return 1;
  return errno == EOPNOTSUPP || errno == ENOSYS ? 0 : -1;
}

/* Rank 0: the targets checked (their cached pages dropped), every file created under its
 * temporary name with its header, its size set and its blocks allocated where the filesystem can
 * (*allocated: in every file). */
static int create_files(xplan *p, bool *allocated, ts_error *err) {
  struct stat st;
  if (stat(p->parent, &st) != 0 || !S_ISDIR(st.st_mode))
    return ts_error_set(err, TS_CHECKPOINT_IO,
                        "safetensors export: directory '%s' does not "
                        "exist",
                        p->parent);
  int rc = p->sharded ? check_target(p->index, err) : TS_OK;
  for (int fi = 0; fi < p->nf && !rc; fi++)
    rc = check_target(p->fs[fi].path, err);
  for (int fi = 0; fi < p->nf && !rc; fi++)
    drop_cached(p->fs[fi].path);
  for (int fi = 0; fi < p->nf && !rc; fi++) {
    xfile *f = &p->fs[fi];
    int fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return ts_error_set(err, TS_CHECKPOINT_IO, "safetensors export: cannot create '%s': %s",
                          f->tmp, strerror(errno));
    int got = 0;
    if (write_header(fd, p, f) != 0 || ftruncate(fd, f->size) != 0)
      rc = ts_error_set(err, TS_CHECKPOINT_IO, "safetensors export: cannot write '%s': %s", f->tmp,
                        strerror(errno));
    else if ((got = allocate(fd, f->size)) < 0)
      rc = ts_error_set(err, TS_CHECKPOINT_IO,
                        "safetensors export: cannot allocate the %lld "
                        "bytes of '%s': %s",
                        (long long)f->size, f->tmp, strerror(errno));
    *allocated = *allocated && got == 1;
    close(fd);
  }
  return rc;
}

/* This rank's part of a box held by several replicas: the box cut along its first dim. */
static bool my_part(const ts_stored *e, int rank, int size, ts_box *part, ts_error *err) {
  if (!e->has_slice || ts_box_numel(&e->box) == 0)
    return false;
  ts_geom *g = NULL;
  if (ts_geom_create(e->attr, e->ndim, e->shape, &g, err))
    return false;
  int j = 0, k = 0;
  for (int r = 0; r < size; r++) {
    ts_box b;
    if (ts_geom_rank_box(g, r, &b) && ts_box_equal(&b, &e->box)) {
      j += r < rank;
      k++;
    }
  }
  ts_geom_destroy(&g);
  *part = e->box;
  if (e->ndim == 0)
    return j == 0;
  int64_t lo = e->box.lo[0], ext = e->box.hi[0] - lo;
  part->lo[0] = lo + ext * j / k;
  part->hi[0] = lo + ext * (j + 1) / k;
  return part->hi[0] > part->lo[0];
}

/* This rank's part of a tensor: the part, the whole tensor as a box, where the part starts in the
 * slice, whether the slice is stored row-major over its box. */
typedef struct xpart {
  ts_box part, P;
  size_t es;
  int64_t at[TS_MAX_DIMS], pext[TS_MAX_DIMS];
  bool row_major;
} xpart;

static bool part_of(const ts_stored *e, int rank, int size, xpart *x) {
  ts_error gerr;
  if (!my_part(e, rank, size, &x->part, &gerr))
    return false;
  x->P = (ts_box){.ndim = e->ndim};
  for (int d = 0; d < e->ndim; d++) {
    x->P.lo[d] = 0, x->P.hi[d] = e->shape[d];
    x->at[d] = x->part.lo[d] - e->box.lo[d];
    x->pext[d] = x->part.hi[d] - x->part.lo[d];
  }
  x->es = ts_dtype_size(e->dtype);
  int64_t ext[TS_MAX_DIMS];
  for (int d = 0; d < e->ndim; d++)
    ext[d] = e->box.hi[d] - e->box.lo[d];
  ts_layout plain;
  ts_layout_plain(&plain, e->dtype, e->ndim, ext, NULL);
  x->row_major =
      e->local.layout.n_inner == 0 && e->local.layout.offset == 0 &&
      memcmp(e->local.layout.strides, plain.strides, sizeof(int64_t) * (size_t)e->ndim) == 0;
  return true;
}

/* The part written with pwrite, one call per run (a non-row-major slice packed row-major by the
 * strided-copy kernel first). */
static int write_runs(int fd, const xfile *f, const xtensor *t, const xpart *x, int64_t *written,
                      ts_error *err) {
  const ts_stored *e = t->e;
  size_t es = x->es;
  const uint8_t *src = e->local.data;
  const ts_box *B = &e->box;
  void *packed = NULL;
  if (!x->row_major) {
    int64_t zero[TS_MAX_DIMS] = {0};
    size_t len = (size_t)ts_box_numel(&x->part) * es;
    ts_tensor dst = {NULL, len, {0}};
    ts_layout_plain(&dst.layout, e->dtype, e->ndim, x->pext, NULL);
    dst.data = packed = ts_shard_alloc_as(len, TS_POOL_STAGING, "the export packing buffer", err);
    int rc = packed ? ts_copy_box(&dst, zero, &e->local, x->at, x->pext, NULL, err) : err->code;
    if (rc) {
      ts_shard_free(packed);
      return rc;
    }
    src = packed;
    B = &x->part;
  }
  ckpt_runs it;
  ts__ckpt_runs_init(&it, &x->part, &x->P, B);
  int64_t poff, boff, base = (int64_t)f->hlen + t->offset;
  int rc = TS_OK;
  while (!rc && ts__ckpt_runs_next(&it, &poff, &boff)) {
    size_t len = (size_t)it.len * es;
    if (ts__ckpt_pwrite_full(fd, src + boff * (int64_t)es, len, base + poff * (int64_t)es))
      rc = ts_error_set(err, TS_CHECKPOINT_IO,
                        "safetensors export: cannot write tensor '%s' to "
                        "'%s': %s",
                        e->name, f->tmp, strerror(errno));
    else
      *written += (int64_t)len;
  }
  ts_shard_free(packed);
  return rc;
}

/* Write faults on the pages of bytes [a, b) of the mapping at map taken ahead
 * (MADV_POPULATE_WRITE): the pages read in and made writable, where a condition that would raise
 * SIGBUS on a store fails with EFAULT instead. 0 when done, 1 when the kernel lacks it (EINVAL:
 * the copy takes the faults), -1 with errno on failure. */
static int populate(uint8_t *map, int64_t a, int64_t b, int64_t page) {
#ifdef MADV_POPULATE_WRITE
  a = a / page * page;
  b = (b + page - 1) / page * page;
  if (madvise(map + a, (size_t)(b - a), MADV_POPULATE_WRITE) == 0)
    return 0;
  return errno == EINVAL ? 1 : -1;
#else
  (void)map, (void)a, (void)b, (void)page;
  return 1;
#endif
}

/* The pages of the part's runs populated ahead, the pages of runs that touch or share a page
 * together (a row split: one call; a column split: one per row). it: the runs over the file. */
static int populate_runs(uint8_t *map, ckpt_runs *it, int64_t at, size_t es, int64_t page) {
  int64_t poff, boff, a = -1, b = -1;
  int pr = 0;
  while (pr == 0 && ts__ckpt_runs_next(it, &poff, &boff)) {
    int64_t s0 = at + poff * (int64_t)es, s1 = s0 + it->len * (int64_t)es;
    if (a >= 0 && s0 >= (b + page - 1) / page * page) {
      pr = populate(map, a, b, page);
      a = -1;
    }
    if (a < 0)
      a = s0;
    b = s1;
  }
  return pr == 0 && a >= 0 ? populate(map, a, b, page) : pr;
}

/* The part copied into a shared mapping of the file bytes its runs span. The pages are faulted
 * in ahead (populate_runs; a page fault does not take the file's write lock that serializes
 * pwrites, so the ranks fill their parts at once), then the runs copied with memcpy, or a
 * non-row-major slice by the strided-copy kernel straight into the mapping with the file's
 * row-major strides. The file's blocks were allocated before (allocate), so no store into the
 * mapping runs out of room. */
static int write_mapped(int fd, const xfile *f, const xtensor *t, const xpart *x, int64_t *written,
                        ts_error *err) {
  const ts_stored *e = t->e;
  size_t es = x->es;
  int64_t page = sysconf(_SC_PAGESIZE), base = (int64_t)f->hlen + t->offset;
  int64_t last[TS_MAX_DIMS];
  for (int d = 0; d < e->ndim; d++)
    last[d] = x->part.hi[d] - 1;
  int64_t lo = base + ts__ckpt_box_offset(&x->P, x->part.lo) * (int64_t)es;
  int64_t hi = base + (ts__ckpt_box_offset(&x->P, last) + 1) * (int64_t)es;
  int64_t mlo = lo / page * page;
  if ((uint64_t)(hi - mlo) > SIZE_MAX)
    return write_runs(fd, f, t, x, written, err);
  uint8_t *map = mmap(NULL, (size_t)(hi - mlo), PROT_READ | PROT_WRITE, MAP_SHARED, fd, mlo);
  if (map == MAP_FAILED)
    return ts_error_set(err, TS_CHECKPOINT_IO,
                        "safetensors export: cannot map tensor '%s' of "
                        "'%s': %s",
                        e->name, f->tmp, strerror(errno));
  const ts_box *B = x->row_major ? &e->box : &x->part;
  ckpt_runs it;
  ts__ckpt_runs_init(&it, &x->part, &x->P, B);
  int rc = TS_OK;
  if (populate_runs(map, &it, base - mlo, es, page) < 0)
    rc = ts_error_set(err, TS_CHECKPOINT_IO,
                      "safetensors export: cannot write tensor '%s' to "
                      "'%s': %s",
                      e->name, f->tmp, strerror(errno));
  if (!rc && x->row_major) {
    const uint8_t *src = e->local.data;
    int64_t poff, boff;
    ts__ckpt_runs_init(&it, &x->part, &x->P, B);
    while (ts__ckpt_runs_next(&it, &poff, &boff))
      memcpy(map + (base - mlo) + poff * (int64_t)es, src + boff * (int64_t)es,
             (size_t)it.len * es);
  } else if (!rc) {
    ts_tensor dst = {map + (lo - mlo), (size_t)(hi - lo), {0}};
    ts_layout_plain(&dst.layout, e->dtype, e->ndim, x->pext, NULL);
    int64_t stride = 1, zero[TS_MAX_DIMS] = {0};
    for (int d = e->ndim - 1; d >= 0; d--) {
      dst.layout.strides[d] = stride;
      stride *= e->shape[d];
    }
    rc = ts_copy_box(&dst, zero, &e->local, x->at, x->pext, NULL, err);
  }
  munmap(map, (size_t)(hi - mlo));
  if (!rc)
    *written += ts_box_numel(&x->part) * (int64_t)es;
  return rc;
}

/* Writes this rank's part of one tensor into the file fd: through a shared mapping when `mapped`,
 * else with pwrite. */
static int write_tensor(int fd, const xfile *f, const xtensor *t, int rank, int size, bool mapped,
                        int64_t *written, ts_error *err) {
  xpart x;
  if (!part_of(t->e, rank, size, &x))
    return TS_OK;
  return mapped ? write_mapped(fd, f, t, &x, written, err) : write_runs(fd, f, t, &x, written, err);
}

/* Every rank: its parts of every tensor into the temporary files, fsynced when `sync` (ranks on
 * several nodes: each node's writes reach the disk through its own fsync). */
static int write_parts(const xplan *p, int rank, int size, bool sync, bool mapped, int64_t *written,
                       ts_error *err) {
  int rc = TS_OK;
  for (int fi = 0; fi < p->nf && !rc; fi++) {
    const xfile *f = &p->fs[fi];
    int fd = open(f->tmp, (mapped ? O_RDWR : O_WRONLY) | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      return ts_error_set(err, TS_CHECKPOINT_IO, "safetensors export: cannot open '%s': %s", f->tmp,
                          strerror(errno));
    int64_t before = *written;
    for (int i = f->first; i < f->first + f->count && !rc; i++)
      rc = write_tensor(fd, f, &p->ts[i], rank, size, mapped, written, err);
    if (!rc && sync && *written > before && fsync(fd) != 0)
      rc = ts_error_set(err, TS_CHECKPOINT_IO, "safetensors export: cannot sync '%s': %s", f->tmp,
                        strerror(errno));
    close(fd);
  }
  return rc;
}

/* Rank 0: the HF index of a sharded export under its temporary name. */
static int write_index(xplan *p, ts_error *err) {
  json_t *j = json_object(), *wm = json_object();
  json_object_set_new(j, "metadata", json_pack("{sI}", "total_size", (json_int_t)p->total));
  for (int i = 0; i < p->nt; i++) {
    const char *slash = strrchr(p->fs[p->ts[i].file].path, '/');
    json_object_set_new(wm, p->ts[i].e->name, json_string(slash + 1));
  }
  json_object_set_new(j, "weight_map", wm);
  char *text = json_dumps(j, JSON_INDENT(2));
  json_decref(j);
  if (!text)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors export: no memory for the index");
  int fd = open(p->index_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  int rc = TS_OK;
  if (fd < 0 || ts__ckpt_pwrite_full(fd, text, strlen(text), 0) != 0 || fsync(fd) != 0)
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "safetensors export: cannot write '%s': %s",
                      p->index_tmp, strerror(errno));
  if (fd >= 0)
    close(fd);
  free(text);
  return rc;
}

/* Rank 0: every file synced (the whole file: on one node this is every rank's writes), then
 * renamed into place (the index last), the directory synced. */
static int into_place(xplan *p, ts_error *err) {
  int rc = p->sharded ? write_index(p, err) : TS_OK;
  for (int fi = 0; fi < p->nf && !rc; fi++) {
    int fd = open(p->fs[fi].tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
      rc = ts_error_set(err, TS_CHECKPOINT_IO, "safetensors export: cannot sync '%s': %s",
                        p->fs[fi].tmp, strerror(errno));
    if (fd >= 0)
      close(fd);
  }
  for (int fi = 0; fi < p->nf && !rc; fi++)
    if (rename(p->fs[fi].tmp, p->fs[fi].path) != 0)
      rc = ts_error_set(err, TS_CHECKPOINT_IO,
                        "safetensors export: cannot rename '%s' to '%s': "
                        "%s",
                        p->fs[fi].tmp, p->fs[fi].path, strerror(errno));
  if (!rc && p->sharded && rename(p->index_tmp, p->index) != 0)
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "safetensors export: cannot rename '%s' to '%s': %s",
                      p->index_tmp, p->index, strerror(errno));
  return rc ? rc : ts__ckpt_fsync_dir(p->parent, err);
}

/* The temporary names, from rank 0's stamp (one name for every rank). Collective. */
static int tmp_names(ts_comm *c, int rank, xplan *p, ts_error *err) {
  int64_t stamp = 0;
  if (rank == 0) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    stamp = ((int64_t)now.tv_sec * 1000000000 + now.tv_nsec) ^ ((int64_t)getpid() << 40);
    stamp = stamp < 0 ? -stamp : stamp;
  }
  int rc = ts_comm_allreduce_i64(c, &stamp, 1, TS_COMM_MAX, err);
  for (int fi = 0; fi < p->nf; fi++) {
    const char *b = strrchr(p->fs[fi].path, '/') + 1;
    snprintf(p->fs[fi].tmp, sizeof p->fs[fi].tmp, "%s/.%s.tmp-%llx", p->parent, b,
             (unsigned long long)stamp);
  }
  snprintf(p->index_tmp, sizeof p->index_tmp, "%s/.%s.index.json.tmp-%llx", p->parent, p->base,
           (unsigned long long)stamp);
  return rc;
}

static void remove_tmp(const xplan *p) {
  for (int fi = 0; fi < p->nf; fi++)
    unlink(p->fs[fi].tmp);
  if (p->sharded)
    unlink(p->index_tmp);
}

int ts_st_export(ts_store *s, ts_world *w, const char *path, const char *const *names, int n,
                 int64_t max_shard_bytes, const char *const *mk, const char *const *mv, int nm,
                 ts_st_result *res, ts_error *err) {
  memset(res, 0, sizeof *res);
  ts_comm *c = ts_world_comm(w);
  int rank = ts_world_rank(w), size = ts_world_size(w);
  ts_error lerr;
  ts_error_clear(&lerr);
  xplan p;
  memset(&p, 0, sizeof p);
  int lst = pick_tensors(s, names, n, &p, &lerr);
  if (!lst)
    lst = plan_files(&p, path, max_shard_bytes, mk, mv, nm, &lerr);
  if (!lst) { /* the answer's paths, made before the outcome is agreed */
    res->items = calloc((size_t)p.nf + 1, sizeof *res->items);
    for (int fi = 0; res->items && fi < p.nf; fi++)
      if ((res->items[res->n] = strdup(p.fs[fi].path)))
        res->n++;
    if (res->items && p.sharded && (res->items[res->n] = strdup(p.index)))
      res->n++;
    if (res->n != p.nf + (p.sharded ? 1 : 0))
      lst = ts_error_set(&lerr, TS_NO_MEMORY, "safetensors export: no memory");
  }
  int rc = ts_comm_agree(c, lst, &lerr, err);
  bool created = false, mapped = false;
  if (!rc && !(rc = tmp_names(c, rank, &p, err))) {
    bool allocated = true;
    lst = rank == 0 ? create_files(&p, &allocated, &lerr) : TS_OK;
    created = true;
    rc = ts_comm_agree(c, lst, &lerr, err);
    if (!rc && ts_comm_single_copy(c)) { /* one node: mapped when rank 0 allocated the files */
      int64_t all = allocated;
      rc = ts_comm_allreduce_i64(c, &all, 1, TS_COMM_MIN, err);
      mapped = !rc && all == 1;
    }
  }
  res->mapped = mapped;
  if (!rc) {
    lst = write_parts(&p, rank, size, !ts_comm_single_copy(c), mapped, &res->bytes, &lerr);
    rc = ts_comm_agree(c, lst, &lerr, err);
  }
  if (!rc) {
    lst = rank == 0 ? into_place(&p, &lerr) : TS_OK;
    rc = ts_comm_agree(c, lst, &lerr, err);
  }
  if (rc && created && rank == 0)
    remove_tmp(&p);
  if (rc) {
    int64_t b = res->bytes;
    ts_st_result_clear(res);
    res->bytes = b;
  }
  plan_free(&p);
  return rc;
}
