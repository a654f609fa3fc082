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
#include <liburing.h>
#include <sys/uio.h>

#include "ckpt_internal.h"

/* A group's bounds: its iovecs, and the span that runs sharing blocks may merge into. */
#define GROUP_IOV 256
#define GROUP_SPAN ((int64_t)2 << 20)
/* The iovecs of one read of a whole piece (ts__ckpt_read_whole). */
#define WHOLE_IOV 1024
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

void ts__ckpt_blocks_hash(const void *bytes, int64_t len, int64_t block, uint8_t *table) {
  const uint8_t *b = bytes;
  for (int64_t at = 0, k = 0; at < len; at += block, k++)
    put_le64(table + 8 * k, XXH3_64bits(b + at, (size_t)(len - at < block ? len - at : block)));
}

/* ---------------------------------------------------------------------------------------------
 * The runs of a box I inside piece P and target box B: stretches contiguous in both (the dims
 * after k0 are whole in I, P and B), in the piece's row-major (file) order. */

void ts__ckpt_runs_init(ckpt_runs *it, const ts_box *I, const ts_box *P, const ts_box *B) {
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

bool ts__ckpt_runs_next(ckpt_runs *it, int64_t *poff, int64_t *boff) {
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

int64_t ts__ckpt_read_cost(const ts_ckpt_piece *p, const ts_box *I, const ts_box *B, size_t es) {
  int64_t E = (int64_t)es, pbytes = ts_box_numel(&p->box) * E, need = ts_box_numel(I) * E;
  int64_t steps = pbytes / (int64_t)CKPT_HASH_STEP + 1;
  ckpt_runs it;
  ts__ckpt_runs_init(&it, I, &p->box, B);
  if (ts_box_equal(I, &p->box)) /* read whole, its runs gathered (ts__ckpt_read_whole) */
    return pbytes + (steps + it.count / WHOLE_IOV) * CKPT_CALL_COST;
  if (p->block_bytes <= 0) /* the whole piece through the verify buffer, then the copy */
    return pbytes + need + steps * CKPT_CALL_COST;
  int64_t blk = p->block_bytes, L = it.len * E, pitch = it.ps[it.k0] * E;
  int64_t a0 = ts__ckpt_box_offset(&p->box, I->lo) * E, bytes, calls = it.count;
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
  return bytes + ckpt_blocks_count(pbytes, blk) * 8 +
         (calls + bytes / (int64_t)CKPT_HASH_STEP) * CKPT_CALL_COST;
}

/* ---------------------------------------------------------------------------------------------
 * A whole piece inside a target box: its runs follow each other in the file, so consecutive runs
 * are read by one preadv (up to WHOLE_IOV of them, about CKPT_HASH_STEP bytes; a longer run in
 * steps) and hashed in file order right after they arrived. */

/* preadv until every iovec is full, skipping the first `done` bytes; -1 with errno (EIO: the
 * file ended first). */
static int preadv_full(int fd, const struct iovec *in, int n, int64_t off, size_t done) {
  struct iovec v[WHOLE_IOV], *iov = v;
  memcpy(v, in, sizeof *in * (size_t)n);
  for (ssize_t r = (ssize_t)done;; off += r) {
    while (n > 0 && (size_t)r >= iov->iov_len) {
      r -= (ssize_t)iov->iov_len;
      iov++, n--;
    }
    if (n == 0)
      return 0;
    iov->iov_base = (uint8_t *)iov->iov_base + r;
    iov->iov_len -= (size_t)r;
    do
      r = preadv(fd, iov, n, (off_t)off);
    while (r < 0 && errno == EINTR);
    if (r <= 0) {
      if (r == 0)
        errno = EIO;
      return -1;
    }
  }
}

int ts__ckpt_read_whole(int fd, int64_t off, const ts_box *P, const ts_box *B, uint8_t *dst,
                        size_t es, void *state, int64_t *nread) {
  XXH3_state_t *st = state;
  ckpt_runs it;
  ts__ckpt_runs_init(&it, P, P, B);
  struct iovec iov[WHOLE_IOV];
  int n = 0;
  int64_t at = 0, len = 0, E = (int64_t)es; /* the group: file bytes [at, at + len) */
  int64_t po, bo;
  bool more = ts__ckpt_runs_next(&it, &po, &bo);
  int64_t rb = po * E, rlen = more ? it.len * E : 0; /* what is left of the current run */
  uint8_t *rdst = more ? dst + bo * E : NULL;
  while (more || n > 0) {
    if (more && n < WHOLE_IOV && len < (int64_t)CKPT_HASH_STEP) { /* the run (or a step) joins */
      int64_t take = min64(rlen, (int64_t)CKPT_HASH_STEP - len);
      if (n == 0)
        at = rb;
      iov[n++] = (struct iovec){rdst, (size_t)take};
      len += take, rb += take, rdst += take, rlen -= take;
      if (rlen == 0 && (more = ts__ckpt_runs_next(&it, &po, &bo))) {
        rb = po * E, rlen = it.len * E, rdst = dst + bo * E;
      }
      continue;
    }
    if (preadv_full(fd, iov, n, off + at, 0))
      return -1;
    for (int k = 0; st && k < n; k++)
      XXH3_64bits_update(st, iov[k].iov_base, iov[k].iov_len);
    *nread += len;
    n = 0, len = 0;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The ranged read.
 *
 * A group is a stretch [start, end) of the piece, start block-aligned, end block-aligned or the
 * piece's end, read by one call into its iovecs: the runs (into the slice) and the bytes around
 * and between them (into the group's part of the scratch buffer). With io_uring (the reader's
 * ring, set up on the first ranged read of a load) up to MAX_GROUPS groups are in flight: each
 * is submitted when the next run cannot join it, and checked when its completion arrives; so a
 * run costs no system call of its own. Without io_uring (not in the kernel, refused by a
 * sandbox, or TSHARD_IO_URING=0) each group is read with preadv and checked at once. */

#define MAX_GROUPS 64
#define SUBMIT_BATCH 16

typedef struct group {
  int64_t start, end;
  int n;
  struct iovec iov[GROUP_IOV];
  uint8_t *scratch; /* its part of the scratch buffer */
  size_t sused;
  bool busy; /* submitted, not completed */
} group;

/* The groups' scratch, in all: malloc'd, not touched before use (runs on block boundaries need
 * none; this VM's first touch of memory is slow). */
#define SCRATCH_BYTES ((int64_t)16 << 20)

struct ckpt_ranger {
  struct io_uring ring;
  bool has_ring;
  uint8_t *scratch; /* SCRATCH_BYTES */
  uint8_t *table;   /* the current piece's block table, tcap bytes */
  size_t tcap;
  group groups[MAX_GROUPS];
};

static int ranger_get(ckpt_reader *r, ts_error *err) {
  if (r->ranger)
    return TS_OK;
  ckpt_ranger *g = calloc(1, sizeof *g);
  if (g && !(g->scratch = malloc((size_t)SCRATCH_BYTES))) {
    free(g);
    g = NULL;
  }
  if (!g)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for the ranged reads");
  const char *env = getenv("TSHARD_IO_URING");
  if (!(env && strcmp(env, "0") == 0))
    g->has_ring = io_uring_queue_init(2 * MAX_GROUPS, &g->ring, 0) == 0;
  r->ranger = g;
  return TS_OK;
}

void ts__ckpt_ranger_destroy(ckpt_ranger **p) {
  if (!p || !*p)
    return;
  if ((*p)->has_ring)
    io_uring_queue_exit(&(*p)->ring);
  free((*p)->scratch);
  free((*p)->table);
  free(*p);
  *p = NULL;
}

bool ts__ckpt_ranger_uses_ring(const ckpt_ranger *g) { return g && g->has_ring; }

typedef struct ranged {
  int fd;
  int64_t off; /* the piece's first byte in the file */
  int64_t pbytes, block;
  const uint8_t *table;
  XXH3_state_t *st;
  ckpt_ranger *rg;
  int ngroups, next;
  size_t scap;  /* scratch per group */
  group *cur;   /* the group being gathered (NULL: none) */
  int inflight; /* submitted, not completed */
  int pending;  /* prepared, not submitted */
  int fail;     /* 0, FAIL_IO (io_errno) or FAIL_SUM (bad_block, bad_hash) */
  int io_errno;
  int64_t bad_block;
  uint64_t bad_hash;
  int64_t read, extra;
} ranged;

enum { FAIL_IO = 1, FAIL_SUM = 2 };

static void seg(ranged *x, uint8_t *dst, int64_t len) {
  group *g = x->cur;
  if (len <= 0)
    return;
  if (!dst) {
    dst = g->scratch + g->sused;
    g->sused += (size_t)len;
  }
  g->iov[g->n++] = (struct iovec){dst, (size_t)len};
}

/* Checks each block of a group that arrived against the table. */
static void verify(ranged *x, group *g) {
  int s = 0;
  size_t so = 0;
  for (int64_t at = g->start; at < g->end;) {
    int64_t stop = min64(at + x->block, x->pbytes);
    size_t len = (size_t)(stop - at);
    uint64_t h;
    if (g->iov[s].iov_len - so >= len) { /* inside one segment */
      h = XXH3_64bits((const uint8_t *)g->iov[s].iov_base + so, len);
      so += len;
    } else { /* across segments */
      XXH3_64bits_reset(x->st);
      while (len > 0) {
        size_t take = g->iov[s].iov_len - so < len ? g->iov[s].iov_len - so : len;
        XXH3_64bits_update(x->st, (const uint8_t *)g->iov[s].iov_base + so, take);
        so += take, len -= take;
        if (so == g->iov[s].iov_len && len > 0)
          s++, so = 0;
      }
      h = XXH3_64bits_digest(x->st);
    }
    if (so == g->iov[s].iov_len && s + 1 < g->n)
      s++, so = 0;
    if (h != get_le64(x->table + 8 * (at / x->block))) {
      x->fail = FAIL_SUM;
      x->bad_block = at / x->block;
      x->bad_hash = h;
      return;
    }
    at = stop;
  }
  x->extra += (int64_t)g->sused;
  x->read += g->end - g->start - (int64_t)g->sused;
}

/* A group's read finished with `res` bytes (or -errno): the rest read synchronously if short,
 * then its blocks checked. */
static void complete(ranged *x, group *g, int64_t res) {
  g->busy = false;
  if (x->fail)
    return;
  if (res == -EAGAIN || res == -EINTR) /* not done: read it here */
    res = 0;
  if (res < 0) {
    x->fail = FAIL_IO;
    x->io_errno = (int)-res;
    return;
  }
  if (res < g->end - g->start &&
      preadv_full(x->fd, g->iov, g->n, x->off + g->start + res, (size_t)res)) {
    x->fail = FAIL_IO;
    x->io_errno = errno;
    return;
  }
  verify(x, g);
}

static void reap_ready(ranged *x) {
  struct io_uring_cqe *cqe;
  while (x->inflight > 0 && io_uring_peek_cqe(&x->rg->ring, &cqe) == 0) {
    group *g = &x->rg->groups[cqe->user_data];
    int64_t res = cqe->res;
    io_uring_cqe_seen(&x->rg->ring, cqe);
    x->inflight--;
    complete(x, g, res);
  }
}

/* Submits the prepared reads and, when `wait`, waits for at least one completion; then checks
 * what completed. A ring that fails otherwise than by EINTR/EAGAIN/EBUSY is given up after its
 * submitted reads completed (prepared ones never reach the kernel): later reads use preadv. */
static void pump(ranged *x, bool wait) {
  struct io_uring *ring = &x->rg->ring;
  for (;;) {
    int rc = wait ? io_uring_submit_and_wait(ring, 1) : io_uring_submit(ring);
    if (rc >= 0) {
      x->inflight += rc;
      x->pending -= rc;
      break;
    }
    if (rc == -EINTR)
      continue;
    if (rc == -EAGAIN || rc == -EBUSY) { /* completions first */
      reap_ready(x);
      if (x->inflight > 0) {
        struct io_uring_cqe *cqe;
        while (io_uring_wait_cqe(ring, &cqe) == -EINTR)
          ;
      }
      continue;
    }
    if (!x->fail) {
      x->fail = FAIL_IO;
      x->io_errno = -rc;
    }
    while (x->inflight > 0) {
      struct io_uring_cqe *cqe;
      int w = io_uring_wait_cqe(ring, &cqe);
      if (w == 0)
        reap_ready(x);
      else if (w != -EINTR)
        break;
    }
    for (int i = 0; i < x->ngroups; i++)
      x->rg->groups[i].busy = false;
    io_uring_queue_exit(ring);
    x->rg->has_ring = false;
    x->pending = 0;
    return;
  }
  reap_ready(x);
}

/* Reads (or submits) the current group. */
static void submit(ranged *x) {
  group *g = x->cur;
  x->cur = NULL;
  if (g->n == 0)
    return;
  if (x->fail)
    return;
  if (!x->rg->has_ring) {
    if (preadv_full(x->fd, g->iov, g->n, x->off + g->start, 0)) {
      x->fail = FAIL_IO;
      x->io_errno = errno;
      return;
    }
    verify(x, g);
    return;
  }
  struct io_uring_sqe *sqe = io_uring_get_sqe(&x->rg->ring);
  if (!sqe) {
    pump(x, false);
    if (!x->rg->has_ring) { /* the ring was given up: this group the slow way */
      x->cur = g;
      submit(x);
      return;
    }
    sqe = io_uring_get_sqe(&x->rg->ring);
  }
  if (g->n == 1)
    io_uring_prep_read(sqe, x->fd, g->iov[0].iov_base, (unsigned)g->iov[0].iov_len,
                       (uint64_t)(x->off + g->start));
  else
    io_uring_prep_readv(sqe, x->fd, g->iov, (unsigned)g->n, (uint64_t)(x->off + g->start));
  io_uring_sqe_set_data64(sqe, (uint64_t)(g - x->rg->groups));
  g->busy = true;
  if (++x->pending >= SUBMIT_BATCH)
    pump(x, false);
}

/* A free group becomes the current one (waiting for a completion when all are in flight). */
static void acquire(ranged *x) {
  for (;;) {
    for (int k = 0; k < x->ngroups; k++) {
      group *g = &x->rg->groups[(x->next + k) % x->ngroups];
      if (!g->busy) {
        x->next = (int)(g - x->rg->groups + 1) % x->ngroups;
        g->n = 0;
        g->sused = 0;
        x->cur = g;
        return;
      }
    }
    pump(x, true);
  }
}

/* Adds bytes [a, b) of the piece, going to dst, as a run (at most one step long): merged into
 * the current group when it starts in the group's last block and fits, else that group goes
 * and a new one starts at a's block. */
static void add_step(ranged *x, int64_t a, int64_t b, uint8_t *dst) {
  int64_t ca = align_down(a, x->block),
          cb = min64(align_down(b + x->block - 1, x->block), x->pbytes);
  group *g = x->cur;
  bool merge = g && g->n > 0 && a < g->end && g->n + 2 <= GROUP_IOV &&
               (int64_t)g->sused - (g->end - a) + (cb - b) <= (int64_t)x->scap &&
               cb - g->start <= GROUP_SPAN;
  if (merge) { /* the group's tail scratch now ends where this run starts */
    g->sused -= (size_t)(g->end - a);
    g->iov[g->n - 1].iov_len -= (size_t)(g->end - a);
    if (g->iov[g->n - 1].iov_len == 0)
      g->n--;
  } else {
    if (g)
      submit(x);
    acquire(x);
    g = x->cur;
    g->start = ca;
    seg(x, NULL, a - ca);
  }
  seg(x, dst, b - a);
  seg(x, NULL, cb - b);
  g->end = cb;
}

static void add_run(ranged *x, int64_t a, int64_t b, uint8_t *dst) {
  int64_t step = (int64_t)CKPT_HASH_STEP / x->block * x->block;
  if (step < x->block)
    step = x->block;
  while (a < b && !x->fail) {
    int64_t e = min64(align_down(a, x->block) + step, b);
    add_step(x, a, e, dst);
    dst += e - a;
    a = e;
  }
}

int ts__ckpt_read_ranges(ckpt_reader *r, int fd, int64_t off, const ts_ckpt_tensor *t,
                         const ts_ckpt_piece *p, const ts_box *I, const ts_box *B, uint8_t *dst,
                         ts_error *err) {
  size_t es = ts_dtype_size(t->dtype);
  char bt[256];
  ts__ckpt_box_text(&p->box, bt, sizeof bt);
  ranged x;
  memset(&x, 0, sizeof x);
  x.fd = fd, x.off = off, x.block = p->block_bytes, x.bad_block = -1;
  x.pbytes = ts_box_numel(&p->box) * (int64_t)es;
  int64_t nb = ckpt_blocks_count(x.pbytes, x.block), toff;
  int rc = ts__ckpt_reader_table(r, t, p, &toff, err);
  if (rc || (rc = ranger_get(r, err)))
    return rc;
  x.rg = r->ranger;
  /* every group in flight holds up to two blocks' worth of scratch, more when merged */
  x.ngroups = x.rg->has_ring ? (int)min64(MAX_GROUPS, SCRATCH_BYTES / (4 * x.block)) : 1;
  x.scap = (size_t)SCRATCH_BYTES / (size_t)x.ngroups;
  for (int k = 0; k < x.ngroups; k++)
    x.rg->groups[k].scratch = x.rg->scratch + (size_t)k * x.scap;
  if ((size_t)nb * 8 > x.rg->tcap) { /* the tables' buffer, kept for the load's next pieces */
    uint8_t *nt = realloc(x.rg->table, (size_t)nb * 8);
    if (nt)
      x.rg->table = nt, x.rg->tcap = (size_t)nb * 8;
  }
  uint8_t *table = (size_t)nb * 8 <= x.rg->tcap ? x.rg->table : NULL;
  x.st = XXH3_createState();
  if (!table || !x.st) {
    XXH3_freeState(x.st);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for the block table of '%s'",
                        p->key);
  }
  x.table = table;
  uint64_t th = 0;
  if (ts__ckpt_pread_full(fd, table, (size_t)nb * 8, toff)) {
    rc = ts__ckpt_piece_io_fail(t, p, err);
  } else if ((th = XXH3_64bits(table, (size_t)nb * 8)) != p->block_xxh3) {
    rc = ts_error_set(err, TS_CORRUPT,
                      "checkpoint file '%s', piece '%s' (tensor '%s', box %s): "
                      "its block table '%s': checksum xxh3 %016llx, the index says %016llx",
                      p->file, p->key, t->name, bt, p->block_key, (unsigned long long)th,
                      (unsigned long long)p->block_xxh3);
  } else {
    r->rep->bytes_verified_extra += nb * 8;
    ckpt_runs it;
    ts__ckpt_runs_init(&it, I, &p->box, B);
    int64_t po, bo, E = (int64_t)es;
    while (!x.fail && ts__ckpt_runs_next(&it, &po, &bo))
      add_run(&x, po * E, (po + it.len) * E, dst + bo * E);
    if (x.cur)
      submit(&x);
    while (x.rg->has_ring && (x.pending > 0 || x.inflight > 0))
      pump(&x, true);
    if (x.fail == FAIL_SUM) {
      int64_t lo = x.bad_block * x.block;
      rc = ts_error_set(err, TS_CORRUPT,
                        "checkpoint file '%s', piece '%s' (tensor '%s', box %s): "
                        "block %lld (bytes %lld to %lld of the piece): checksum xxh3 %016llx, "
                        "its block table says %016llx",
                        p->file, p->key, t->name, bt, (long long)x.bad_block, (long long)lo,
                        (long long)min64(lo + x.block, x.pbytes), (unsigned long long)x.bad_hash,
                        (unsigned long long)get_le64(table + 8 * x.bad_block));
    } else if (x.fail == FAIL_IO) {
      errno = x.io_errno;
      rc = ts__ckpt_piece_io_fail(t, p, err);
    }
    r->rep->bytes_read += x.read;
    r->rep->bytes_verified_extra += x.extra;
    r->rep->ranged_reads++;
    r->rep->ranged_io_uring = x.rg->has_ring;
  }
  XXH3_freeState(x.st);
  return rc;
}
