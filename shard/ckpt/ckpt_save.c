/* ckpt_save.c - saving stored tensors into a checkpoint directory, collective over the world.
 *
 * Every rank computes the same pieces from the attributes alone: the distinct boxes of each
 * tensor (replicas share one piece; with keep_partial, partial values along partial mesh dims are
 * distinct pieces), and the writer of each piece, chosen among the ranks holding it as the one
 * with the fewest bytes assigned so far (so replicated tensors spread their writing). Partial
 * tensors are first reduced (a reshard of a copy to the attribute with R in place of P) unless
 * keep_partial. Each writing rank writes one file, rank-NNNNN.safetensors: its header, then its
 * pieces row-major (pieces of row-major slices straight from the store, by pwrite or by pwritev
 * of a chunk's rows; blocked slices packed by the strided copy), hashed with XXH3-64 as written,
 * fsynced.
 *
 * Atomicity: everything goes into a temporary directory next to the target
 * (PARENT/.BASE.tmp-STAMP), created by the directory's leader (rank 0, or the lowest rank of each
 * node with per_node). After the files: one agreement over the world (with the checksums), the
 * leader writes index.json, fsyncs it and the directory, agreement, then swaps the directory into
 * place (renameat2 RENAME_EXCHANGE when a previous checkpoint exists, else rename), fsyncs the
 * parent, agreement, and removes the previous one. On any failure on any rank every rank returns
 * the same error and the leaders remove the temporary directory: the previous checkpoint is
 * untouched. SIGXFSZ is ignored so that a file size limit is a write error, not a kill.
 *
 * What a save replaces: nothing (a new path), an empty directory, or a tshard checkpoint (its
 * index.json parses as a tshard index and the directory holds nothing but it and regular files
 * it names); anything else is refused before anything is written, naming the directory and why.
 * Checkpoints are private to the daemons' user: the directory is created 0700, files 0600 (the
 * umask may narrow these, never widen them). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "ts_comm.h"

static int64_t fail_after = -1;
static bool fail_kill;

void ts_ckpt_debug_fail_write(int64_t after_bytes, bool kill) {
  fail_after = after_bytes;
  fail_kill = kill;
}

static void mesh_coords(const ts_attr *a, int64_t idx, int64_t *c) {
  for (int m = a->mesh_ndim - 1; m >= 0; m--) {
    c[m] = idx % a->mesh_shape[m];
    idx /= a->mesh_shape[m];
  }
}

/* The attribute with every P replaced by R. */
static int unpartial(const ts_attr *a, ts_attr **out, ts_error *err) {
  int rc = ts_attr_clone(a, out, err);
  if (rc)
    return rc;
  for (int m = 0; m < a->mesh_ndim; m++)
    if ((*out)->place[m].kind == TS_PLACE_PARTIAL)
      (*out)->place[m] = ts_replicate();
  return TS_OK;
}

/* The chunks of a slice of extents `ext` (ndim dims, es bytes an element) for about `target`
 * bytes each (<= 0, or a slice of at most twice that: the whole slice): the last dim cut into
 * the most equal blocks (a power of two up to 16, dividing it) whose rows stay at least
 * target / 1024 bytes (16 KiB for 16 MiB chunks: a row is one iovec of the reads), so that a
 * target split of that dim into as many parts reads whole chunks; then the first dim into
 * blocks of rows making up `target`; the dims between stay whole. */
#define CHUNK_MAX_COLS 16
#define CHUNK_MIN_ROW_DIV 1024
static void chunk_shape(int ndim, const int64_t *ext, size_t es, int64_t target, int64_t *c) {
  int64_t bytes = (int64_t)es;
  for (int d = 0; d < ndim; d++) {
    c[d] = ext[d];
    bytes *= ext[d];
  }
  if (target <= 0 || ndim == 0 || bytes <= 2 * target)
    return;
  if (ndim > 1) {
    int64_t last = ext[ndim - 1];
    int kc = CHUNK_MAX_COLS;
    while (kc > 1 && (last % kc != 0 || last / kc * (int64_t)es < target / CHUNK_MIN_ROW_DIV))
      kc /= 2;
    c[ndim - 1] = last / kc;
  }
  int64_t row = (int64_t)es * (ndim > 1 ? c[ndim - 1] : 1);
  for (int d = 1; d < ndim - 1; d++)
    row *= ext[d];
  int64_t rows = target / (row > 0 ? row : 1);
  c[0] = rows < 1 ? 1 : rows > ext[0] ? ext[0] : rows;
}

/* The pieces of one tensor and their writers; load[] counts bytes per world rank. Each distinct
 * slice (replicas share one) is cut into chunks (chunk_shape; kept-partial slices are not), and
 * every chunk is a piece, written by the holder of its slice with the fewest bytes so far. */
static int plan_tensor(stensor *st, bool keep_partial, int64_t chunk_bytes, int64_t *load,
                       ts_error *err) {
  ts_stored *t = st->t;
  snprintf(st->name, sizeof st->name, "%s", t->name);
  st->dtype = t->dtype;
  st->ndim = t->ndim;
  memcpy(st->shape, t->shape, sizeof st->shape);
  st->partial = ts_attr_has_partial(t->attr);
  int rc;
  if (ts_attr_has_partial(t->attr) && !keep_partial) {
    if ((rc = unpartial(t->attr, &st->attr, err)))
      return rc;
    st->reduce = true;
  } else if ((rc = ts_attr_clone(t->attr, &st->attr, err))) {
    return rc;
  }
  size_t tl = ts_attr_format(t->attr, NULL, 0);
  if (!(st->attr_text = malloc(tl + 1)))
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  ts_attr_format(t->attr, st->attr_text, tl + 1);
  ts_geom *g = NULL;
  if ((rc = ts_geom_create(st->attr, t->ndim, t->shape, &g, err)))
    return rc;
  const ts_attr *a = st->attr;
  st->pieces = calloc((size_t)a->nranks, sizeof *st->pieces);
  if (!st->pieces) {
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  }
  size_t es = ts_dtype_size(t->dtype);
  int *piece_of = malloc(sizeof(int) * (size_t)a->nranks);
  if (!piece_of) {
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  }
  for (int64_t i = 0; i < a->nranks; i++) {
    spiece p;
    memset(&p, 0, sizeof p);
    piece_of[i] = -1;
    ts_geom_index_box(g, i, &p.box);
    if (ts_box_numel(&p.box) == 0)
      continue;
    int64_t c[TS_MAX_MESH_DIMS];
    mesh_coords(a, i, c);
    for (int m = 0; m < a->mesh_ndim; m++)
      if (a->place[m].kind == TS_PLACE_PARTIAL)
        p.pc[p.npc++] = c[m];
    int found = -1;
    for (int k = 0; k < st->npieces && found < 0; k++)
      if (ts_box_equal(&st->pieces[k].box, &p.box) && st->pieces[k].npc == p.npc &&
          memcmp(st->pieces[k].pc, p.pc, sizeof p.pc) == 0)
        found = k;
    if (found < 0) {
      p.bytes = ts_box_numel(&p.box) * (int64_t)es;
      p.writer = -1;
      found = st->npieces;
      st->pieces[st->npieces++] = p;
    }
    piece_of[i] = found;
  }
  /* the chunks of every slice */
  int64_t target = chunk_bytes == 0 ? TS_CKPT_CHUNK_DEFAULT : chunk_bytes;
  int64_t(*cs)[TS_MAX_DIMS] = calloc((size_t)(st->npieces ? st->npieces : 1), sizeof *cs);
  int64_t total = 0;
  for (int k = 0; cs && k < st->npieces; k++) {
    const ts_box *b = &st->pieces[k].box;
    int64_t ext[TS_MAX_DIMS], n = 1;
    for (int d = 0; d < b->ndim; d++)
      ext[d] = b->hi[d] - b->lo[d];
    chunk_shape(b->ndim, ext, es, st->pieces[k].npc ? -1 : target, cs[k]);
    for (int d = 0; d < b->ndim; d++)
      n *= (ext[d] + cs[k][d] - 1) / cs[k][d];
    total += n;
  }
  if (cs && total > TS_CKPT_MAX_PIECES) {
    free(cs), free(piece_of);
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "checkpoint save: chunks of about %lld bytes "
                        "would cut '%s' into %lld pieces (at most %lld per tensor); give larger "
                        "chunks, or -1 for whole pieces",
                        (long long)target, t->name, (long long)total,
                        (long long)TS_CKPT_MAX_PIECES);
  }
  spiece *chunks = cs ? calloc((size_t)(total ? total : 1), sizeof *chunks) : NULL;
  if (!chunks) {
    free(cs), free(chunks), free(piece_of);
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for the chunks of '%s'", t->name);
  }
  int nc = 0;
  for (int k = 0; k < st->npieces; k++) {
    const spiece *sl = &st->pieces[k];
    int n = sl->box.ndim;
    int64_t at[TS_MAX_DIMS];
    for (int d = 0; d < n; d++)
      at[d] = sl->box.lo[d];
    for (bool more = true; more;) { /* the chunk grid, row-major */
      spiece *p = &chunks[nc];
      *p = *sl;
      for (int d = 0; d < n; d++) {
        p->box.lo[d] = at[d];
        p->box.hi[d] = at[d] + cs[k][d] < sl->box.hi[d] ? at[d] + cs[k][d] : sl->box.hi[d];
      }
      p->bytes = ts_box_numel(&p->box) * (int64_t)es;
      p->slice = k;
      snprintf(p->key, sizeof p->key, "%s#%d", t->name, nc);
      snprintf(p->tkey, sizeof p->tkey, "%s.blocks", p->key);
      nc++;
      int d = n - 1;
      while (d >= 0 && (at[d] += cs[k][d]) >= sl->box.hi[d]) {
        at[d] = sl->box.lo[d];
        d--;
      }
      more = d >= 0;
    }
  }
  free(cs);
  free(st->pieces);
  st->pieces = chunks;
  st->npieces = nc;
  /* each chunk's writer: the holder of its slice with the fewest bytes to write so far (ties:
   * mesh order), so replicated slices spread their writing */
  for (int k = 0; k < st->npieces; k++) {
    spiece *p = &st->pieces[k];
    for (int64_t i = 0; i < a->nranks; i++)
      if (piece_of[i] == p->slice && (p->writer < 0 || load[a->ranks[i]] < load[p->writer]))
        p->writer = a->ranks[i];
    load[p->writer] += p->bytes;
  }
  free(piece_of);
  ts_geom_destroy(&g);
  return TS_OK;
}

/* The block checksums of a byte stream fed in parts (a chunk's rows): whole blocks inside a part
 * are hashed where they lie, blocks across parts gathered in `tail` first. */
typedef struct block_hasher {
  uint8_t *table; /* 8 bytes per block, little-endian */
  int64_t k;      /* blocks done */
  int64_t fill;   /* bytes of the current block in tail */
  uint8_t tail[CKPT_BLOCK_BYTES];
} block_hasher;

/* The blocks gathered in tail so far (the last one may be short) go into the table. */
static void flush_tail(block_hasher *h) {
  if (h->fill) {
    ts__ckpt_blocks_hash(h->tail, h->fill, CKPT_BLOCK_BYTES, h->table + 8 * h->k);
    h->k++, h->fill = 0;
  }
}

static void feed_blocks(block_hasher *h, const uint8_t *p, int64_t n) {
  while (n > 0) {
    if (h->fill == 0 && n >= CKPT_BLOCK_BYTES) { /* the whole blocks of this part, in place */
      int64_t whole = n / CKPT_BLOCK_BYTES * CKPT_BLOCK_BYTES;
      ts__ckpt_blocks_hash(p, whole, CKPT_BLOCK_BYTES, h->table + 8 * h->k);
      h->k += whole / CKPT_BLOCK_BYTES, p += whole, n -= whole;
      continue;
    }
    int64_t take = CKPT_BLOCK_BYTES - h->fill < n ? CKPT_BLOCK_BYTES - h->fill : n;
    memcpy(h->tail + h->fill, p, (size_t)take);
    h->fill += take, p += take, n -= take;
    if (h->fill == CKPT_BLOCK_BYTES)
      flush_tail(h);
  }
}

#define GATHER_IOVS 1024 /* IOV_MAX on Linux */

/* Writes a chunk of a row-major slice straight from the slice: its runs (rows of the chunk, in
 * file order) gathered into pwritev calls, hashed (the whole and by blocks) from the slice as
 * they go. No packing copy, no staging buffer. */
static int write_gathered(int fd, const uint8_t *slice, const ts_box *slice_box, const spiece *p,
                          size_t es, uint64_t *hash, uint8_t *table) {
  XXH3_state_t *st = XXH3_createState();
  block_hasher *bh = malloc(sizeof *bh);
  struct iovec *iov = malloc(sizeof *iov * GATHER_IOVS);
  int rc = st && bh && iov ? 0 : -1;
  if (rc)
    errno = ENOMEM;
  else {
    XXH3_64bits_reset(st);
    bh->table = table, bh->k = 0, bh->fill = 0;
  }
  ckpt_runs it;
  ts__ckpt_runs_init(&it, &p->box, &p->box, slice_box);
  int64_t poff, boff, at = 0, len = it.len * (int64_t)es;
  int n = 0;
  bool more = !rc;
  while (more) {
    more = ts__ckpt_runs_next(&it, &poff, &boff);
    if (more) {
      const uint8_t *run = slice + boff * (int64_t)es;
      XXH3_64bits_update(st, run, (size_t)len);
      feed_blocks(bh, run, len);
      iov[n].iov_base = (void *)run, iov[n].iov_len = (size_t)len;
      n++;
    }
    if (n == GATHER_IOVS || (!more && n > 0)) {
      int64_t bytes = (int64_t)n * len;
      if (ts__ckpt_pwritev_full(fd, iov, n, p->offset + at) != 0) {
        rc = -1;
        break;
      }
      at += bytes, n = 0;
    }
  }
  if (!rc) {
    flush_tail(bh);
    *hash = XXH3_64bits_digest(st);
  }
  XXH3_freeState(st);
  free(bh), free(iov);
  return rc;
}

int ts__ckpt_write_piece(int fd, const char *path, const ts_tensor *src, const ts_box *slice_box,
                         spiece *p, ts_dtype dt, uint64_t *hash, uint64_t *thash, int64_t *written,
                         ts_error *err) {
  int n = p->box.ndim;
  ts_layout plain, splain;
  int64_t ext[TS_MAX_DIMS], sext[TS_MAX_DIMS], zero[TS_MAX_DIMS], at[TS_MAX_DIMS];
  for (int d = 0; d < n; d++) {
    ext[d] = p->box.hi[d] - p->box.lo[d];
    sext[d] = slice_box->hi[d] - slice_box->lo[d];
    at[d] = p->box.lo[d] - slice_box->lo[d];
    zero[d] = 0;
  }
  ts_layout_plain(&plain, dt, n, ext, NULL);
  ts_layout_plain(&splain, dt, n, sext, NULL);
  /* straight from the slice when it is row-major and the chunk is a run of its rows (the whole
   * slice included), else packed row-major by the strided-copy kernel */
  bool row_major = src->layout.n_inner == 0 && src->layout.offset == 0 &&
                   memcmp(src->layout.strides, splain.strides, sizeof(int64_t) * (size_t)n) == 0;
  bool rows = row_major;
  for (int d = 1; d < n && rows; d++)
    rows = ext[d] == sext[d];
  size_t tlen = (size_t)ckpt_blocks_count(p->bytes, CKPT_BLOCK_BYTES) * 8;
  uint8_t *table = malloc(tlen ? tlen : 1);
  if (!table)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for the block table of '%s'",
                        p->key);
  int64_t len = p->bytes;
  void *packed = NULL;
  int rc = TS_OK;
  if (row_major && !rows && fail_after < 0) { /* a chunk of a row-major slice: its rows gathered */
    rc = write_gathered(fd, src->data, slice_box, p, ts_dtype_size(dt), hash, table);
  } else {
    const void *bytes = (const uint8_t *)src->data +
                        (n && rows ? at[0] * splain.strides[0] * (int64_t)ts_dtype_size(dt) : 0);
    if (!rows) {
      packed =
          ts_shard_alloc_as((size_t)len, TS_POOL_STAGING, "the checkpoint packing buffer", err);
      ts_tensor dst = {packed, (size_t)len, plain};
      int crc = packed ? ts_copy_box(&dst, zero, src, at, ext, NULL, err)
                       : (err ? err->code : TS_NO_MEMORY);
      if (crc) {
        free(table);
        ts_shard_free(packed);
        return crc;
      }
      bytes = packed;
    }
    *hash = XXH3_64bits(bytes, (size_t)len);
    ts__ckpt_blocks_hash(bytes, len, CKPT_BLOCK_BYTES, table);
    if (fail_after >= 0 && *written + len > fail_after) {
      if (fail_kill) {
        ts__ckpt_pwrite_full(fd, bytes, (size_t)(fail_after - *written), p->offset);
        raise(SIGKILL);
      }
      errno = EIO;
      rc = -1;
    } else {
      rc = ts__ckpt_pwrite_full(fd, bytes, (size_t)len, p->offset);
    }
  }
  if (!rc) {
    *thash = XXH3_64bits(table, tlen);
    rc = ts__ckpt_pwrite_full(fd, table, tlen, p->toffset);
  }
  free(table);
  ts_shard_free(packed);
  if (rc)
    return ts_error_set(err, errno == ENOMEM ? TS_NO_MEMORY : TS_CHECKPOINT_IO,
                        "checkpoint: cannot write piece '%s' to '%s': %s", p->key, path,
                        strerror(errno));
  *written += len;
  return TS_OK;
}

/* Node leaders: the lowest world rank with the same host name. */
int ts__ckpt_node_leader(ts_comm *c, int rank, int size, int *leader, ts_error *err) {
  char *names = calloc((size_t)size, 64);
  int64_t *counts = calloc((size_t)size, sizeof *counts), *displs = calloc((size_t)size, 8);
  if (!names || !counts || !displs) {
    free(names), free(counts), free(displs);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  }
  gethostname(names + (size_t)rank * 64, 63);
  for (int i = 0; i < size; i++)
    counts[i] = 64, displs[i] = (int64_t)i * 64;
  int rc = ts_comm_allgatherv(c, names, counts, displs, err);
  *leader = rank;
  for (int i = 0; rc == TS_OK && i < size; i++)
    if (strncmp(names + (size_t)i * 64, names + (size_t)rank * 64, 64) == 0) {
      *leader = i;
      break;
    }
  free(names), free(counts), free(displs);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

#define NOT_CKPT "checkpoint save: '%s' exists and is not a tshard checkpoint"
#define CHOOSE "; choose a new or empty directory"

/* Whether the checkpoint directory `target` holds only its index and regular files the index
 * names (what removing it after the exchange deletes). */
static int only_checkpoint_files(const char *target, const ts_ckpt_index *idx, ts_error *err) {
  int64_t np = 0;
  for (int i = 0; i < idx->ntensors; i++)
    np += idx->tensors[i].npieces;
  const char **files = malloc(sizeof *files * (size_t)(np ? np : 1));
  DIR *d = files ? opendir(target) : NULL;
  if (!d) {
    int e = errno;
    free(files);
    return files ? ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint save: cannot list '%s': %s",
                                target, strerror(e))
                 : ts_error_set(err, TS_NO_MEMORY, "checkpoint save: no memory");
  }
  int64_t nf = 0;
  for (int i = 0; i < idx->ntensors; i++)
    for (int k = 0; k < idx->tensors[i].npieces; k++)
      files[nf++] = idx->tensors[i].pieces[k].file;
  qsort(files, (size_t)nf, sizeof *files, cmp_str);
  int rc = TS_OK;
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    const char *name = de->d_name, *key = name;
    struct stat st;
    if (!strcmp(name, ".") || !strcmp(name, ".."))
      continue;
    bool named = !strcmp(name, TS_CKPT_INDEX) ||
                 bsearch(&key, files, (size_t)nf, sizeof *files, cmp_str) != NULL;
    bool regular = fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    if (!named || !regular) {
      char shown[200];
      ts__ckpt_text_escape(name, shown, sizeof shown);
      rc = ts_error_set(err, TS_INVALID_ARGUMENT, NOT_CKPT " (it holds '%s', %s)" CHOOSE, target,
                        shown,
                        named ? "which is not a regular file"
                              : "which its index does "
                                "not name");
    }
  }
  closedir(d);
  free(files);
  return rc;
}

/* What the target of a save is, checked by the directory's leader before anything is written:
 * absent or an empty directory (*replace false: the new one is renamed into place), a tshard
 * checkpoint (*replace true: exchanged, then removed; refused when refuse_existing), anything
 * else refused naming it and why, untouched. */
int ts__ckpt_check_target(const char *target, bool refuse_existing, bool *replace, ts_error *err) {
  *replace = false;
  struct stat st;
  if (lstat(target, &st) != 0)
    return errno == ENOENT ? TS_OK
                           : ts_error_set(err, TS_CHECKPOINT_IO,
                                          "checkpoint save: cannot examine "
                                          "'%s': %s",
                                          target, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "checkpoint save: '%s' exists and is not a "
                        "directory" CHOOSE,
                        target);
  DIR *d = opendir(target);
  if (!d)
    return ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint save: cannot list '%s': %s", target,
                        strerror(errno));
  bool empty = true, has_index = false;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
      empty = false;
      has_index |= strcmp(de->d_name, TS_CKPT_INDEX) == 0;
    }
  closedir(d);
  if (empty)
    return TS_OK;
  if (!has_index)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        NOT_CKPT " (it is not empty and holds no "
                                 "%s)" CHOOSE,
                        target, TS_CKPT_INDEX);
  ts_ckpt_index *idx = NULL;
  ts_error ierr;
  int rc = ts_ckpt_index_read(target, &idx, &ierr);
  if (rc == TS_NO_MEMORY)
    return ts_error_set(err, rc, "%s", ierr.msg);
  if (rc)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        NOT_CKPT " (%s does not parse as one: %.300s)" CHOOSE, target,
                        TS_CKPT_INDEX, ierr.msg);
  rc = only_checkpoint_files(target, idx, err);
  ts_ckpt_index_destroy(&idx);
  *replace = rc == TS_OK;
  if (rc == TS_OK && refuse_existing)
    return ts_error_set(err, TS_EXISTS,
                        "checkpoint save: '%s' already holds a checkpoint; "
                        "choose another directory, or ask to overwrite it (overwrite=True in "
                        "Python, --overwrite in the CLI, tshard_save_opts.overwrite in C: the "
                        "old checkpoint stays until the new one is complete)",
                        target);
  return rc;
}

/* The leader's part before a save writes: the leftovers of saves into target that were cut
 * short removed (those no save holds; ckpt_clean.c), the target checked (check_target), the
 * temporary directory tmp created and locked for as long as *lock_fd stays open. */
int ts__ckpt_prepare_dirs(const char *target, const char *tmp, bool refuse_existing, bool *exists,
                          int *lock_fd, ts_error *err) {
  *lock_fd = -1;
  ts_ckpt_cleaned cl;
  ts_error cerr;
  if (ts_ckpt_clean_tmp(target, &cl, &cerr) != TS_OK && cerr.code != TS_NOT_FOUND)
    fprintf(stderr, "tshardd: leftovers of an earlier save next to '%s' not removed: %s\n", target,
            cerr.msg);
  ts_ckpt_cleaned_clear(&cl);
  int rc = ts__ckpt_check_target(target, refuse_existing, exists, err);
  if (!rc && mkdir(tmp, 0700) != 0)
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint: cannot create '%s' next to '%s': %s", tmp,
                      target, strerror(errno));
  if (!rc && (*lock_fd = ts_ckpt_tmp_lock(tmp)) < 0) {
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint: cannot lock '%s': %s", tmp,
                      strerror(errno));
    rmdir(tmp);
  }
  return rc;
}

/* The tensors of a save (names NULL: every tensor of the store), each found, named once and
 * planned (plan_tensor); load[] counts each rank's bytes to write. */
int ts__ckpt_plan_tensors(ts_store *s, const char *const *names, int nt, const ts_ckpt_save_opts *o,
                          stensor *ts, int64_t *load, ts_error *err) {
  int rc = TS_OK;
  for (int i = 0; i < nt && !rc; i++) {
    ts[i].t = names ? ts_store_find(s, names[i]) : ts_store_at(s, i);
    if (!ts[i].t)
      rc = ts_error_set(err, TS_NOT_FOUND, "checkpoint save: no tensor named '%s'", names[i]);
    for (int j = 0; j < i && !rc; j++)
      if (ts[j].t == ts[i].t)
        rc = ts_error_set(err, TS_INVALID_ARGUMENT, "checkpoint save: '%s' named twice",
                          ts[i].t->name);
    if (!rc)
      rc = plan_tensor(&ts[i], o->keep_partial, o->chunk_bytes, load, err);
  }
  return rc;
}

/* The temporary directory's path PARENT/.BASE.tmp-STAMP: one name for every rank (rank 0's
 * stamp). Collective. */
int ts__ckpt_tmp_name(ts_comm *c, int rank, const char *parent, const char *base, char *tmp,
                      size_t cap, ts_error *err) {
  int64_t stamp = 0;
  if (rank == 0) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    stamp = ((int64_t)now.tv_sec * 1000000000 + now.tv_nsec) ^ ((int64_t)getpid() << 40);
    if (stamp < 0)
      stamp = -stamp;
  }
  int rc = ts_comm_allreduce_i64(c, &stamp, 1, TS_COMM_MAX, err);
  snprintf(tmp, cap, "%s/.%s.tmp-%llx", parent, base, (unsigned long long)stamp);
  return rc;
}

/* Every piece's checksum and its table's as two non-negative 32-bit halves each, -1 for the
 * pieces other ranks write (so that a max over ranks gathers them). */
void ts__ckpt_pack_hashes(const stensor *ts, int nt, int rank, const uint64_t *hashes,
                          int64_t *hv) {
  int64_t pi = 0;
  for (int i = 0; i < nt; i++)
    for (int k = 0; k < ts[i].npieces; k++, pi++) {
      bool mine = ts[i].pieces[k].writer == rank;
      for (int h = 0; h < 2; h++) {
        hv[4 * pi + 2 * h] = mine ? (int64_t)(hashes[2 * pi + h] >> 32) : -1;
        hv[4 * pi + 2 * h + 1] = mine ? (int64_t)(hashes[2 * pi + h] & 0xffffffffu) : -1;
      }
    }
}

/* This rank's file (nmine pieces of the plan are its): the layout of its data section (every
 * piece's block checksum table, then the pieces, so that the file ends with piece bytes as files
 * without tables do), each piece's offsets, and the file created (0600, never through a link)
 * with its header written. */
int ts__ckpt_open_file(stensor *ts, int nt, int nmine, int rank, const char *path, int *fd,
                       ts_error *err) {
  ckpt_entry *ent = calloc(2 * (size_t)nmine, sizeof *ent);
  int m = 0;
  int64_t off = 0, paged = 0; /* table bytes; bytes of the pieces of whole 4 KiB pages */
  for (int i = 0; ent && i < nt; i++)
    for (int k = 0; k < ts[i].npieces; k++) {
      spiece *p = &ts[i].pieces[k];
      if (p->writer != rank)
        continue;
      ckpt_entry *te = &ent[nmine + m++];
      te->key = p->tkey;
      te->table = true;
      te->ndim = 1;
      te->ext[0] = ckpt_blocks_count(p->bytes, CKPT_BLOCK_BYTES);
      te->begin = off;
      te->end = off += te->ext[0] * 8;
      paged += p->bytes % CKPT_DATA_ALIGN == 0 ? p->bytes : 0;
    }
  /* the pieces: first those of whole 4 KiB pages, each then starting on a page of the file
   * (the header's padding puts the first there), then the others. On this machine's CPU the
   * kernel's copy into a page-aligned tensor ran 1.13-1.21x faster from a page-aligned file
   * offset than from the offsets the pieces had before */
  int64_t tables = off, rest = off + paged;
  m = 0;
  for (int i = 0; ent && i < nt; i++)
    for (int k = 0; k < ts[i].npieces; k++) {
      spiece *p = &ts[i].pieces[k];
      if (p->writer != rank)
        continue;
      int64_t *at = p->bytes % CKPT_DATA_ALIGN == 0 ? &off : &rest;
      ent[m].key = p->key;
      ent[m].dtype = ts[i].dtype;
      ent[m].ndim = p->box.ndim;
      for (int d = 0; d < p->box.ndim; d++)
        ent[m].ext[d] = p->box.hi[d] - p->box.lo[d];
      ent[m].begin = *at;
      ent[m].end = *at += p->bytes;
      m++;
    }
  uint8_t *hdr = NULL;
  size_t hlen = 0;
  int lst = ent ? ts__ckpt_header_build(ent, 2 * nmine, tables, &hdr, &hlen, err)
                : ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  m = 0;
  for (int i = 0; !lst && i < nt; i++)
    for (int k = 0; k < ts[i].npieces; k++)
      if (ts[i].pieces[k].writer == rank) {
        ts[i].pieces[k].offset = (int64_t)hlen + ent[m].begin;
        ts[i].pieces[k].toffset = (int64_t)hlen + ent[nmine + m].begin;
        m++;
      }
  free(ent);
  if (!lst) {
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (*fd < 0 || ts__ckpt_pwrite_full(*fd, hdr, hlen, 0) != 0)
      lst = ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint: cannot write '%s': %s", path,
                         strerror(errno));
  }
  free(hdr);
  return lst;
}

/* The index of the save (every piece's checksum and its table's in hv, as agreed) written into
 * the temporary directory tmp and synced with it: the directory leaders' part. */
int ts__ckpt_write_index(stensor *ts, int nt, int size, const int64_t *hv, bool keep_partial,
                         int64_t sequence, const char *tmp, ts_error *err) {
  ts_ckpt_index idx = {nt, calloc((size_t)(nt ? nt : 1), sizeof(ts_ckpt_tensor)), size, sequence};
  int lst = idx.tensors ? TS_OK : ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  int64_t pi = 0;
  for (int i = 0; !lst && i < nt; i++) {
    ts_ckpt_tensor *x = &idx.tensors[i];
    snprintf(x->name, sizeof x->name, "%s", ts[i].name);
    x->dtype = ts[i].dtype;
    x->ndim = ts[i].ndim;
    memcpy(x->shape, ts[i].shape, sizeof x->shape);
    x->attr = ts[i].attr_text;
    x->partial_kept = ts[i].partial && keep_partial;
    x->npieces = ts[i].npieces;
    x->pieces = calloc((size_t)(x->npieces ? x->npieces : 1), sizeof *x->pieces);
    if (!x->pieces) {
      lst = ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
      break;
    }
    for (int k = 0; k < x->npieces; k++, pi++) {
      spiece *p = &ts[i].pieces[k];
      ts_ckpt_piece *q = &x->pieces[k];
      snprintf(q->file, sizeof q->file, "rank-%05d.safetensors", p->writer);
      snprintf(q->key, sizeof q->key, "%s", p->key);
      q->box = p->box;
      q->xxh3 = ((uint64_t)hv[4 * pi] << 32) | (uint64_t)hv[4 * pi + 1];
      q->block_bytes = CKPT_BLOCK_BYTES;
      snprintf(q->block_key, sizeof q->block_key, "%s", p->tkey);
      q->block_xxh3 = ((uint64_t)hv[4 * pi + 2] << 32) | (uint64_t)hv[4 * pi + 3];
      q->npcoord = x->partial_kept ? p->npc : 0;
      memcpy(q->pcoord, p->pc, sizeof q->pcoord);
    }
  }
  char path[4500];
  snprintf(path, sizeof path, "%s/%s", tmp, TS_CKPT_INDEX);
  if (!lst)
    lst = ts_ckpt_index_write(&idx, path, err);
  if (!lst)
    lst = ts__ckpt_fsync_dir(tmp, err);
  for (int i = 0; idx.tensors && i < nt; i++)
    free(idx.tensors[i].pieces);
  free(idx.tensors);
  return lst;
}

/* The leader's last step: the temporary directory renamed into place (exchanged with the previous
 * checkpoint when `exists`, which is then removed; else renamed over nothing or an empty
 * directory), the parent synced. */
int ts__ckpt_into_place(const char *tmp, const char *target, const char *parent, bool exists,
                        ts_error *err) {
  if (exists ? renameat2(AT_FDCWD, tmp, AT_FDCWD, target, RENAME_EXCHANGE) != 0
             : rename(tmp, target) != 0)
    return ts_error_set(err, TS_CHECKPOINT_IO,
                        "checkpoint: cannot move '%s' into place as '%s': "
                        "%s",
                        tmp, target, strerror(errno));
  int rc = ts__ckpt_fsync_dir(parent, err);
  if (rc == TS_OK && exists)
    ts__ckpt_remove_dir(tmp); /* the previous checkpoint, swapped out */
  return rc;
}

/* The bytes a tensor's pieces are written from: its slice (NULL where this rank holds none), or
 * for a partial tensor saved reduced, the reduction run now into `reduced` (collective: every
 * rank takes part; prior is this rank's failure so far, brought to its agreement). */
int ts__ckpt_source(ts_world *w, const stensor *st, int64_t staging, int prior,
                    const ts_error *prior_err, ts_tensor *reduced, const ts_tensor **src,
                    ts_error *err) {
  ts_stored *t = st->t;
  memset(reduced, 0, sizeof *reduced);
  *src = t->has_slice ? &t->local : NULL;
  if (!st->reduce)
    return TS_OK;
  ts_plan *plan = NULL;
  ts_plan_opts po = {TS_STRATEGY_AUTO, staging, ts_world_size(w)};
  ts_error perr;
  int pst = ts_plan_create(t->ndim, t->shape, t->dtype, t->attr, st->attr, &po, &plan, &perr);
  ts_exec_opts xo;
  memset(&xo, 0, sizeof xo);
  xo.agree_world = true;
  xo.prior_status = prior ? prior : pst;
  xo.prior_err = prior ? prior_err : &perr;
  ts_exec_report xr;
  int rc = ts_reshard_exec(w, plan, *src, t->layout_tag, &xo, reduced, &xr, err);
  ts_plan_destroy(&plan);
  *src = reduced->data ? reduced : NULL;
  return rc;
}

int64_t ts__ckpt_fail_take(bool *kill) {
  int64_t after = fail_after;
  *kill = fail_kill;
  fail_after = -1;
  return after;
}

void ts__ckpt_plan_free(stensor *ts, int nt) {
  for (int i = 0; ts && i < nt; i++) {
    ts_attr_destroy(&ts[i].attr);
    free(ts[i].pieces);
    free(ts[i].attr_text);
  }
  free(ts);
}

/* The whole checkpoint's piece bytes and files (the writers' and the index). */
static void report_totals(const stensor *ts, int nt, int size, ts_ckpt_report *rep) {
  bool *writes = calloc((size_t)size, sizeof *writes);
  rep->files = 1;
  for (int i = 0; i < nt; i++)
    for (int k = 0; k < ts[i].npieces; k++) {
      const spiece *p = &ts[i].pieces[k];
      rep->bytes_total += p->bytes;
      if (writes && !writes[p->writer]) {
        writes[p->writer] = true;
        rep->files++;
      }
    }
  free(writes);
}

int ts_ckpt_save(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                 const ts_ckpt_save_opts *o, ts_ckpt_report *rep, ts_error *err) {
  ts_ckpt_save_opts none = {false, false, 0, 0, 0, false};
  if (!o)
    o = &none;
  ts_ckpt_report rdummy;
  if (!rep)
    rep = &rdummy;
  memset(rep, 0, sizeof *rep);
  signal(SIGXFSZ, SIG_IGN);
  ts_comm *c = ts_world_comm(w);
  int rank = ts_world_rank(w), size = ts_world_size(w);
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = TS_OK, rc, lock_fd = -1;
  char parent[4096], base[256], tmp[4400], target[4400], path[4500];
  lst = ts__ckpt_split_path(dir, parent, sizeof parent, base, sizeof base, &lerr);
  int leader = 0;
  if ((rc = o->per_node ? ts__ckpt_node_leader(c, rank, size, &leader, err) : TS_OK))
    return rc;
  bool lead = leader == rank;
  /* the tensors */
  int nt = names && n > 0 ? n : ts_store_count(s);
  stensor *ts = calloc((size_t)(nt ? nt : 1), sizeof *ts);
  int64_t *load = calloc((size_t)size, sizeof *load);
  if (!ts || !load) {
    free(ts), free(load);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  }
  if (!lst)
    lst = ts__ckpt_plan_tensors(s, names && n > 0 ? names : NULL, nt, o, ts, load, &lerr);
  if ((rc = ts__ckpt_tmp_name(c, rank, parent, base, tmp, sizeof tmp, err)))
    goto out;
  snprintf(target, sizeof target, "%s/%s", parent, base);
  bool made = false, exists = false;
  if (!lst && lead)
    lst = ts__ckpt_prepare_dirs(target, tmp, o->refuse_existing, &exists, &lock_fd, &lerr);
  made = !lst && lead;
  if ((rc = ts_comm_agree(c, lst, &lerr, err)))
    goto fail;
  /* my file: its entries and header */
  int nmine = 0, total_pieces = 0;
  for (int i = 0; i < nt; i++)
    for (int k = 0; k < ts[i].npieces; k++, total_pieces++)
      nmine += ts[i].pieces[k].writer == rank;
  char fname[64];
  snprintf(fname, sizeof fname, "rank-%05d.safetensors", rank);
  snprintf(path, sizeof path, "%s/%s", tmp, fname);
  int fd = -1;
  int64_t written = 0;
  uint64_t *hashes = calloc(2 * (size_t)(total_pieces ? total_pieces : 1), sizeof *hashes);
  int64_t *hv = calloc((size_t)(4 * total_pieces + 1), sizeof *hv);
  if (!hashes || !hv)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint: no memory");
  if (!lst && nmine)
    lst = ts__ckpt_open_file(ts, nt, nmine, rank, path, &fd, &lerr);
  /* the pieces, tensor by tensor (reductions are collective: every rank takes part) */
  int pi = 0;
  for (int i = 0; i < nt; i++) {
    ts_stored *t = ts[i].t;
    ts_tensor reduced;
    const ts_tensor *src = NULL;
    rc = ts__ckpt_source(w, &ts[i], o->staging_bytes, lst, &lerr, &reduced, &src, err);
    if (rc) {
      if (fd >= 0)
        close(fd);
      free(hashes), free(hv);
      goto fail;
    }
    for (int k = 0; k < ts[i].npieces; k++, pi++) {
      spiece *p = &ts[i].pieces[k];
      if (p->writer != rank || lst)
        continue;
      if (!src)
        lst = ts_error_set(&lerr, TS_INTERNAL,
                           "checkpoint: rank %d writes piece '%s' but holds "
                           "no slice",
                           rank, p->key);
      else
        lst = ts__ckpt_write_piece(fd, path, src, &t->box, p, t->dtype, &hashes[2 * pi],
                                   &hashes[2 * pi + 1], &written, &lerr);
    }
    ts_shard_free_tensor(&reduced);
  }
  if (fd >= 0) {
    if (!lst && fsync(fd) != 0)
      lst = ts_error_set(&lerr, TS_CHECKPOINT_IO, "checkpoint: cannot sync '%s': %s", path,
                         strerror(errno));
    if (close(fd) != 0 && !lst)
      lst = ts_error_set(&lerr, TS_CHECKPOINT_IO, "checkpoint: cannot close '%s': %s", path,
                         strerror(errno));
  }
  rep->bytes_written = written;
  rep->tensors = nt;
  report_totals(ts, nt, size, rep);
  /* agree, with every piece's checksum and its table's (each as two non-negative 32-bit halves,
   * max over ranks) */
  if (hv)
    ts__ckpt_pack_hashes(ts, nt, rank, hashes, hv);
  rc = ts_comm_agree_max(c, lst, &lerr, hv, hv ? 4 * total_pieces : 0, err);
  free(hashes);
  if (rc) {
    free(hv);
    goto fail;
  }
  if (lead) /* the index, written by the leaders */
    lst = ts__ckpt_write_index(ts, nt, size, hv, o->keep_partial, o->sequence, tmp, &lerr);
  free(hv);
  if ((rc = ts_comm_agree(c, lst, &lerr, err)))
    goto fail;
  if (lead && (lst = ts__ckpt_into_place(tmp, target, parent, exists, &lerr)) == TS_OK)
    made = false;
  rc = ts_comm_agree(c, lst, &lerr, err);
  if (rc)
    goto fail;
  goto out;
fail:
  if (made)
    ts__ckpt_remove_dir(tmp);
out:
  if (lock_fd >= 0)
    close(lock_fd);
  ts__ckpt_plan_free(ts, nt);
  free(load);
  if (fail_after >= 0)
    fail_after = -1; /* the hook serves one save */
  return rc;
}
