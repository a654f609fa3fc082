/* ckpt_blocks.c - block checksums of checkpoint pieces, and the ranged read that uses them.
 *
 * Save writes, with each piece, a table of XXH3-64 checksums of its consecutive blocks of
 * CKPT_BLOCK_BYTES (the last one shorter), and the index holds the table's own XXH3-64. A rank
 * of a load that needs only part of a piece (saved S(0), loaded S(1)) then reads just the byte
 * runs of its target box, straight into its slice, plus the rest of the blocks at the runs'
 * edges into a scratch buffer, and checks every block it read against the table, which it checked
 * against the index first. So every byte that ends up in the slice was hashed from the very read
 * that brought it, and no other byte of the piece is read.
 *
 * Runs are read in groups, one preadv each: runs sharing a block go into one group (the bytes
 * between them into the scratch buffer), and a long run is cut at block boundaries into steps of
 * at most CKPT_HASH_STEP, each verified right after it arrived, while still in the cache. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <xxhash.h>

#include "ckpt_internal.h"

/* A group's bounds: its iovecs, and the span that runs sharing blocks may merge into. */
#define GROUP_IOV 256
#define GROUP_SPAN ((int64_t)2 << 20)
/* The cost of a run inside a group, in bytes of sequential reading. */
#define DENSE_RUN_COST ((int64_t)1024)

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void ckpt_blocks_hash(const void *bytes, int64_t len, int64_t block, uint8_t *table) {
  const uint8_t *b = bytes;
  for (int64_t at = 0, k = 0; at < len; at += block, k++)
    put_le64(table + 8 * k, XXH3_64bits(b + at, (size_t)(len - at < block ? len - at : block)));
}

/* ---------------------------------------------------------------------------------------------
 * The runs of a box I inside piece P and target box B: stretches contiguous in both (the dims
 * after k0 are whole in I, P and B), in the piece's row-major (file) order. */

typedef struct runs {
  const ts_box *I, *P, *B;
  int n, k0;
  int64_t ps[TS_MAX_DIMS + 1], bs[TS_MAX_DIMS + 1]; /* row-major element strides (ps[d+1]: dim d) */
  int64_t len;   /* elements per run */
  int64_t count; /* runs */
  int64_t idx[TS_MAX_DIMS];
  bool more;
} runs;

static void runs_init(runs *it, const ts_box *I, const ts_box *P, const ts_box *B) {
  memset(it, 0, sizeof *it);
  it->I = I, it->P = P, it->B = B;
  int n = it->n = I->ndim;
  it->ps[n] = it->bs[n] = 1;
  for (int d = n - 1; d >= 0; d--) {
    it->ps[d] = it->ps[d + 1] * (P->hi[d] - P->lo[d]);
    it->bs[d] = it->bs[d + 1] * (B->hi[d] - B->lo[d]);
  }
  int k0 = n > 0 ? n - 1 : 0;
  while (k0 > 0 && I->lo[k0] == P->lo[k0] && I->hi[k0] == P->hi[k0] && I->lo[k0] == B->lo[k0] &&
         I->hi[k0] == B->hi[k0])
    k0--;
  it->k0 = k0;
  it->len = n ? (I->hi[k0] - I->lo[k0]) * it->ps[k0 + 1] : 1;
  it->count = 1;
  for (int d = 0; d < k0; d++)
    it->count *= I->hi[d] - I->lo[d];
  for (int d = 0; d < n; d++)
    it->idx[d] = I->lo[d];
  it->more = ts_box_numel(I) > 0;
}

/* The next run's element offsets in the piece and in B (false: none left). */
static bool runs_next(runs *it, int64_t *poff, int64_t *boff) {
  if (!it->more)
    return false;
  int64_t po = 0, bo = 0;
  for (int d = 0; d < it->n; d++) {
    po += (it->idx[d] - it->P->lo[d]) * it->ps[d + 1];
    bo += (it->idx[d] - it->B->lo[d]) * it->bs[d + 1];
  }
  *poff = po, *boff = bo;
  int d = it->k0 - 1;
  while (d >= 0 && ++it->idx[d] == it->I->hi[d]) {
    it->idx[d] = it->I->lo[d];
    d--;
  }
  it->more = d >= 0;
  return true;
}

static int64_t align_down(int64_t x, int64_t b) { return x - x % b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The blocks covering bytes [a, b) of a piece of pbytes bytes, in bytes. */
static int64_t cover(int64_t a, int64_t b, int64_t block, int64_t pbytes) {
  return min64(align_down(b + block - 1, block), pbytes) - align_down(a, block);
}

int64_t ckpt_read_cost(const ts_ckpt_piece *p, const ts_box *I, const ts_box *B, size_t es) {
  int64_t E = (int64_t)es, pbytes = ts_box_numel(&p->box) * E, need = ts_box_numel(I) * E;
  int64_t steps = pbytes / (int64_t)CKPT_HASH_STEP + 1;
  runs it;
  runs_init(&it, I, &p->box, B);
  if (ts_box_equal(I, &p->box)) /* read whole, run by run */
    return pbytes + (it.count + steps) * CKPT_CALL_COST;
  if (p->block_bytes <= 0) /* the whole piece through the verify buffer, then the copy */
    return pbytes + need + steps * CKPT_CALL_COST;
  int64_t blk = p->block_bytes, L = it.len * E, pitch = it.ps[it.k0] * E;
  int64_t a0 = ckpt_box_offset(&p->box, I->lo) * E, bytes, calls = it.count;
  if (it.count == 1)
    bytes = cover(a0, a0 + L, blk, pbytes);
  else if (pitch - L < blk) /* runs share blocks: groups of them, nearly everything between,
                              * with a cost per run (its segments, blocks hashed across them) */
    bytes = min64(pbytes, it.count * pitch) + it.count * DENSE_RUN_COST,
    calls = it.count / (GROUP_IOV / 2) + 1;
  else if (pitch % blk == 0) /* every run sits alike in its blocks */
    bytes = it.count * cover(a0, a0 + L, blk, pbytes);
  else
    bytes = it.count * min64(pitch, L + blk);
  return bytes + ckpt_blocks_count(pbytes, blk) * 8 + (calls + bytes / (int64_t)CKPT_HASH_STEP) *
                                                          CKPT_CALL_COST;
}

/* ---------------------------------------------------------------------------------------------
 * The ranged read */

typedef struct ranged {
  int fd;
  int64_t off;    /* the piece's first byte in the file */
  int64_t pbytes, block;
  const uint8_t *table;
  XXH3_state_t *st;
  /* the group being gathered: [start, end) of the piece, start block-aligned, end block-aligned
   * or the piece's end; data_end: where its last run ends (scratch from there to end) */
  int64_t start, end, data_end;
  int n;
  struct iovec iov[GROUP_IOV];
  uint8_t *scratch;
  size_t sused, scap;
  int64_t bad_block; /* the first block that failed its checksum (-1: none) */
  uint64_t bad_hash;
  int64_t read, extra;
} ranged;

static void seg(ranged *x, uint8_t *dst, int64_t len) {
  if (len <= 0)
    return;
  if (!dst) {
    dst = x->scratch + x->sused;
    x->sused += (size_t)len;
  }
  x->iov[x->n++] = (struct iovec){dst, (size_t)len};
}

/* preadv until every iovec is full; -1 with errno (EIO: the file ended first). */
static int preadv_full(int fd, const struct iovec *in, int n, int64_t off) {
  struct iovec v[GROUP_IOV], *iov = v;
  memcpy(v, in, sizeof *in * (size_t)n);
  while (n > 0) {
    ssize_t r = preadv(fd, iov, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      if (r == 0)
        errno = EIO;
      return -1;
    }
    off += r;
    while (n > 0 && (size_t)r >= iov->iov_len) {
      r -= (ssize_t)iov->iov_len;
      iov++, n--;
    }
    if (n > 0) {
      iov->iov_base = (uint8_t *)iov->iov_base + r;
      iov->iov_len -= (size_t)r;
    }
  }
  return 0;
}

/* Reads the group and checks each of its blocks against the table. -1: a read failed (errno) or
 * a block differs (bad_block). */
static int flush(ranged *x) {
  if (x->n == 0)
    return 0;
  if (preadv_full(x->fd, x->iov, x->n, x->off + x->start))
    return -1;
  int s = 0;
  size_t so = 0;
  for (int64_t at = x->start; at < x->end;) {
    int64_t stop = min64(at + x->block, x->pbytes);
    size_t len = (size_t)(stop - at);
    uint64_t h;
    if (x->iov[s].iov_len - so >= len) { /* inside one segment */
      h = XXH3_64bits((const uint8_t *)x->iov[s].iov_base + so, len);
      so += len;
    } else { /* across segments */
      XXH3_64bits_reset(x->st);
      while (len > 0) {
        size_t take = x->iov[s].iov_len - so < len ? x->iov[s].iov_len - so : len;
        XXH3_64bits_update(x->st, (const uint8_t *)x->iov[s].iov_base + so, take);
        so += take, len -= take;
        if (so == x->iov[s].iov_len && len > 0)
          s++, so = 0;
      }
      h = XXH3_64bits_digest(x->st);
    }
    if (so == x->iov[s].iov_len && s + 1 < x->n)
      s++, so = 0;
    if (h != get_le64(x->table + 8 * (at / x->block))) {
      x->bad_block = at / x->block;
      x->bad_hash = h;
      return -1;
    }
    at = stop;
  }
  x->extra += (int64_t)x->sused;
  x->read += x->end - x->start - (int64_t)x->sused;
  x->n = 0;
  x->sused = 0;
  return 0;
}

/* Adds bytes [a, b) of the piece, going to dst, as a run of the group (at most one step long):
 * merged into the group when it starts in the group's last block and fits, else the group is
 * read first and a new one starts at a's block. */
static int add_step(ranged *x, int64_t a, int64_t b, uint8_t *dst) {
  int64_t ca = align_down(a, x->block), cb = min64(align_down(b + x->block - 1, x->block),
                                                   x->pbytes);
  bool merge = x->n > 0 && a < x->end && x->n + 2 <= GROUP_IOV &&
               (int64_t)x->sused - (x->end - a) + (cb - b) <= (int64_t)x->scap &&
               cb - x->start <= GROUP_SPAN;
  if (merge) { /* the group's tail scratch now ends where this run starts */
    x->sused -= (size_t)(x->end - a);
    x->iov[x->n - 1].iov_len -= (size_t)(x->end - a);
    if (x->iov[x->n - 1].iov_len == 0)
      x->n--;
  } else {
    if (flush(x))
      return -1;
    x->start = ca;
    seg(x, NULL, a - ca);
  }
  seg(x, dst, b - a);
  seg(x, NULL, cb - b);
  x->end = cb;
  x->data_end = b;
  return 0;
}

static int add_run(ranged *x, int64_t a, int64_t b, uint8_t *dst) {
  int64_t step = (int64_t)CKPT_HASH_STEP / x->block * x->block;
  if (step < x->block)
    step = x->block;
  while (a < b) {
    int64_t e = min64(align_down(a, x->block) + step, b);
    if (add_step(x, a, e, dst))
      return -1;
    dst += e - a;
    a = e;
  }
  return 0;
}

int ckpt_read_ranges(ckpt_reader *r, int fd, int64_t off, const ts_ckpt_tensor *t,
                     const ts_ckpt_piece *p, const ts_box *I, const ts_box *B, uint8_t *dst,
                     ts_error *err) {
  size_t es = ts_dtype_size(t->dtype);
  char bt[256];
  ckpt_box_text(&p->box, bt, sizeof bt);
  ranged x;
  memset(&x, 0, sizeof x);
  x.fd = fd, x.off = off, x.block = p->block_bytes, x.bad_block = -1;
  x.pbytes = ts_box_numel(&p->box) * (int64_t)es;
  int64_t nb = ckpt_blocks_count(x.pbytes, x.block), toff;
  int rc = ckpt_reader_table(r, t, p, &toff, err);
  if (rc || (rc = ckpt_reader_vbuf(r, err)))
    return rc;
  uint8_t *table = malloc((size_t)nb * 8);
  x.st = XXH3_createState();
  if (!table || !x.st) {
    free(table);
    XXH3_freeState(x.st);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for the block table of '%s'",
                        p->key);
  }
  x.table = table;
  x.scratch = r->vbuf;
  x.scap = r->vcap;
  uint64_t th = 0;
  if (ckpt_pread_full(fd, table, (size_t)nb * 8, toff)) {
    rc = ckpt_piece_io_fail(t, p, err);
  } else if ((th = XXH3_64bits(table, (size_t)nb * 8)) != p->block_xxh3) {
    rc = ts_error_set(err, TS_CORRUPT, "checkpoint file '%s', piece '%s' (tensor '%s', box %s): "
                      "its block table '%s': checksum xxh3 %016llx, the index says %016llx",
                      p->file, p->key, t->name, bt, p->block_key, (unsigned long long)th,
                      (unsigned long long)p->block_xxh3);
  } else {
    r->rep->bytes_verified_extra += nb * 8;
    runs it;
    runs_init(&it, I, &p->box, B);
    int64_t po, bo, E = (int64_t)es;
    int io = 0;
    while (!io && runs_next(&it, &po, &bo))
      io = add_run(&x, po * E, (po + it.len) * E, dst + bo * E);
    if (!io)
      io = flush(&x);
    if (io && x.bad_block >= 0) {
      int64_t lo = x.bad_block * x.block;
      rc = ts_error_set(err, TS_CORRUPT, "checkpoint file '%s', piece '%s' (tensor '%s', box %s): "
                        "block %lld (bytes %lld to %lld of the piece): checksum xxh3 %016llx, "
                        "its block table says %016llx", p->file, p->key, t->name, bt,
                        (long long)x.bad_block, (long long)lo,
                        (long long)min64(lo + x.block, x.pbytes), (unsigned long long)x.bad_hash,
                        (unsigned long long)get_le64(table + 8 * x.bad_block));
    } else if (io) {
      rc = ckpt_piece_io_fail(t, p, err);
    }
    r->rep->bytes_read += x.read;
    r->rep->bytes_verified_extra += x.extra;
  }
  free(table);
  XXH3_freeState(x.st);
  return rc;
}
