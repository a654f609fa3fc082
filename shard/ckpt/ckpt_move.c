/* ckpt_move.c - the read-once-then-move path of a checkpoint load.
 *
 * For a tensor whose pieces are cut by the target boxes (saved S(0) and loaded S(1), saved on 4
 * ranks and loaded on 3 or 6), the direct path would make every rank needing part of a piece
 * read the whole piece to verify its checksum. Here every piece is read exactly once, whole, by
 * one rank, its reader: sequentially, in large preads hashed as they arrive (streaming XXH3 in
 * file order), into a staging buffer; the very bytes that were hashed are then copied into every
 * target slice they belong to, over the world's all-to-all of strided regions (single copies
 * between the processes of one node, comm/cma.c; MPI datatypes across nodes).
 *
 * The plan is the same on every rank, computed from the index and the target geometry alone:
 * pieces, largest first, go to the rank needing some of them (so a per-node directory serves as
 * it does on the direct path) that reads the fewest bytes so far, on a tie the one needing most
 * of the piece, then round the world from piece to piece. Each reader cuts its pieces into chunks
 * of at most the round size, contiguous in the file (ts_box_chunk); round q moves every rank's
 * q-th chunk. A rank whose read or checksum failed keeps taking part in the rounds (its staging
 * bytes go into a tensor that every rank drops); the outcome is agreed after the last round, so
 * every rank returns the same error, naming the file and the piece. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "ts_comm.h"

/* The fixed cost of one round (an all-to-all's latency), in bytes read or copied. */
#define ROUND_COST ((int64_t)256 << 10)
/* The copy into the target boxes, per byte, against a sequential read (it goes in row runs
 * through process_vm_readv or the all-to-all: about half the speed here). */
#define COPY_FACTOR 2

struct ckpt_move {
  int size; /* world ranks */
  int npieces;
  size_t es;
  int64_t round;       /* chunk bound, bytes */
  int *reader;         /* per piece: the world rank reading it (-1: empty, nobody needs it) */
  bool *has;           /* per world rank: it holds a non-empty target box */
  ts_box *box;         /* per world rank: that box */
  int64_t *first;      /* per world rank: its first chunk in the item lists */
  int64_t *nchunks;    /* per world rank: its chunks (in piece order, then chunk order) */
  int *item_piece;     /* per chunk: the piece */
  int64_t *item_chunk; /* per chunk: its index among the piece's chunks */
  int64_t rounds;
  int64_t direct_cost, move_cost;
};

void ts__ckpt_move_destroy(ckpt_move **p) {
  if (!p || !*p)
    return;
  ckpt_move *m = *p;
  free(m->reader);
  free(m->has);
  free(m->box);
  free(m->first);
  free(m->nchunks);
  free(m->item_piece);
  free(m->item_chunk);
  free(m);
  *p = NULL;
}

static int64_t meet(const ts_box *a, const ts_box *b) {
  ts_box x;
  return ts_box_intersect(a, b, &x) ? ts_box_numel(&x) : 0;
}

/* Pieces by bytes, largest first; by index on a tie (the same order everywhere). */
typedef struct sized {
  int64_t bytes;
  int piece;
} sized;

static int by_size(const void *a, const void *b) {
  const sized *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes > y->bytes ? -1 : 1;
  return (x->piece > y->piece) - (x->piece < y->piece);
}

int ts__ckpt_move_plan(const ts_ckpt_tensor *t, const ts_geom *g, int world_size,
                       int64_t round_bytes, ckpt_move **out, ts_error *err) {
  *out = NULL;
  int P = world_size, K = t->npieces;
  ckpt_move *m = calloc(1, sizeof *m);
  sized *order = malloc((size_t)(K ? K : 1) * sizeof *order);
  int64_t *load = calloc((size_t)P, sizeof *load);
  if (m) {
    m->reader = malloc((size_t)(K ? K : 1) * sizeof *m->reader);
    m->has = calloc((size_t)P, sizeof *m->has);
    m->box = calloc((size_t)P, sizeof *m->box);
    m->first = calloc((size_t)P, sizeof *m->first);
    m->nchunks = calloc((size_t)P, sizeof *m->nchunks);
  }
  if (!m || !order || !load || !m->reader || !m->has || !m->box || !m->first || !m->nchunks) {
    free(order);
    free(load);
    ts__ckpt_move_destroy(&m);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint load of '%s': no memory for its plan",
                        t->name);
  }
  m->size = P;
  m->npieces = K;
  m->es = ts_dtype_size(t->dtype);
  m->round = round_bytes;
  int64_t es = (int64_t)m->es;
  for (int j = 0; j < P; j++)
    m->has[j] = ts_geom_rank_box(g, j, &m->box[j]) && ts_box_numel(&m->box[j]) > 0;
  /* The direct path: every rank reads what its box needs of each piece meeting it
   * (ts__ckpt_read_cost). */
  for (int j = 0; j < P; j++) {
    int64_t c = 0;
    for (int k = 0; m->has[j] && k < K; k++) {
      ts_box I;
      if (ts_box_intersect(&m->box[j], &t->pieces[k].box, &I) && ts_box_numel(&I) > 0)
        c += ts__ckpt_read_cost(&t->pieces[k], &I, &m->box[j], m->es);
    }
    m->direct_cost = c > m->direct_cost ? c : m->direct_cost;
  }
  /* The readers. */
  for (int k = 0; k < K; k++)
    order[k] = (sized){ts_box_numel(&t->pieces[k].box), k};
  qsort(order, (size_t)K, sizeof *order, by_size);
  for (int o = 0; o < K; o++) {
    int k = order[o].piece, best = -1;
    int64_t best_need = 0;
    for (int x = 0; x < P; x++) {
      int j = (k + x) % P;
      int64_t need = m->has[j] ? meet(&m->box[j], &t->pieces[k].box) : 0;
      if (need > 0 &&
          (best < 0 || load[j] < load[best] || (load[j] == load[best] && need > best_need)))
        best = j, best_need = need;
    }
    m->reader[k] = best;
    if (best >= 0)
      load[best] += ts_box_numel(&t->pieces[k].box) * es;
  }
  /* Every reader's chunks, its pieces in index order (file order for one writer's file). */
  int64_t total = 0;
  for (int k = 0; k < K; k++)
    if (m->reader[k] >= 0)
      m->nchunks[m->reader[k]] += ts_box_chunk_count(&t->pieces[k].box, m->es, round_bytes);
  for (int j = 0; j < P; j++) {
    m->first[j] = total;
    total += m->nchunks[j];
    m->rounds = m->nchunks[j] > m->rounds ? m->nchunks[j] : m->rounds;
  }
  m->item_piece = malloc((size_t)(total ? total : 1) * sizeof *m->item_piece);
  m->item_chunk = malloc((size_t)(total ? total : 1) * sizeof *m->item_chunk);
  if (!m->item_piece || !m->item_chunk) {
    free(order);
    free(load);
    ts__ckpt_move_destroy(&m);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint load of '%s': no memory for its plan",
                        t->name);
  }
  for (int j = 0; j < P; j++) {
    int64_t at = m->first[j];
    for (int k = 0; k < K; k++) {
      if (m->reader[k] != j)
        continue;
      int64_t n = ts_box_chunk_count(&t->pieces[k].box, m->es, round_bytes);
      for (int64_t ci = 0; ci < n; ci++, at++) {
        m->item_piece[at] = k;
        m->item_chunk[at] = ci;
      }
    }
  }
  /* The move path: each rank reads its pieces and every byte of its box is copied once. */
  for (int j = 0; j < P; j++) {
    int64_t c = load[j] + COPY_FACTOR * (m->has[j] ? ts_box_numel(&m->box[j]) * es : 0) +
                m->rounds * ROUND_COST;
    m->move_cost = c > m->move_cost ? c : m->move_cost;
  }
  free(order);
  free(load);
  *out = m;
  return TS_OK;
}

void ts__ckpt_move_costs(const ckpt_move *m, int64_t *direct, int64_t *move) {
  *direct = m->direct_cost;
  *move = m->move_cost;
}

/* The region of box X inside a row-major buffer over box C. */
static void region_of(ts_comm_region *rg, uint8_t *buf, const ts_box *C, const ts_box *X,
                      size_t es) {
  memset(rg, 0, sizeof *rg);
  int64_t stride = (int64_t)es;
  for (int d = C->ndim - 1; d >= 0; d--) {
    rg->count[d] = X->hi[d] - X->lo[d];
    rg->stride[d] = stride;
    stride *= C->hi[d] - C->lo[d];
  }
  rg->ndim = C->ndim;
  rg->esize = (int64_t)es;
  rg->base = buf + ts__ckpt_box_offset(C, X->lo) * (int64_t)es;
}

/* Rank j's chunk of round q (false: it has none). */
static bool chunk_of(const ckpt_move *m, const ts_ckpt_tensor *t, int j, int64_t q, ts_box *C,
                     int *piece, int64_t *ci) {
  if (q >= m->nchunks[j])
    return false;
  *piece = m->item_piece[m->first[j] + q];
  *ci = m->item_chunk[m->first[j] + q];
  ts_box_chunk(&t->pieces[*piece].box, m->es, m->round, *ci, C);
  return true;
}

/* ---------------------------------------------------------------------------------------------
 * Pulling (every rank on one node): each round's chunks sit in their readers' staging (two
 * buffers used in turn); after one barrier every rank copies what its box needs of them straight
 * into its slice with process_vm_readv. A reader refills a buffer two rounds later, after the
 * next barrier, by when every rank has copied out of it. */

typedef struct peer_info {
  int64_t pid;
  uint64_t buf[2];
} peer_info;

/* Copies X, inside box R of the row-major buffer `remote` of process pid, into box L of the
 * row-major local buffer: runs contiguous in both (ckpt_runs), up to PULL_IOV per system call. */
#define PULL_IOV 512
static int pull_box(pid_t pid, uint64_t remote, const ts_box *R, uint8_t *local, const ts_box *L,
                    const ts_box *X, size_t es) {
  ckpt_runs it;
  ts__ckpt_runs_init(&it, X, R, L);
  size_t run = (size_t)it.len * es;
  struct iovec liov[PULL_IOV], riov[PULL_IOV];
  int cnt = 0;
  int64_t ro, lo;
  for (bool more = ts__ckpt_runs_next(&it, &ro, &lo); more;) {
    liov[cnt] = (struct iovec){local + (size_t)lo * es, run};
    riov[cnt] = (struct iovec){(void *)(uintptr_t)(remote + (uint64_t)ro * es), run};
    cnt++;
    more = ts__ckpt_runs_next(&it, &ro, &lo);
    if (cnt == PULL_IOV || !more) {
      ssize_t want = (ssize_t)(run * (size_t)cnt);
      if (process_vm_readv(pid, liov, (unsigned long)cnt, riov, (unsigned long)cnt, 0) != want)
        return -1;
      cnt = 0;
    }
  }
  return 0;
}

int ts__ckpt_move_run(const ckpt_move *m, ckpt_reader *r, ts_world *w, const ts_ckpt_tensor *t,
                      ts_stored *e, int prior, const ts_error *prior_err, ts_error *err) {
  ts_comm *c = ts_world_comm(w);
  int me = ts_world_rank(w);
  bool pull = ts_comm_single_copy(c);
  ts_error lerr;
  ts_error_clear(&lerr);
  int st = prior;
  if (st)
    lerr = *prior_err;
  else if (!m || m->size != ts_world_size(w) || !e ||
           (e->has_slice && ts_box_numel(&e->box) > 0) != m->has[me])
    st = ts_error_set(&lerr, TS_INTERNAL,
                      "checkpoint load of '%s': the ranks disagree on its "
                      "plan (do they read the same index?)",
                      t->name);
  /* The staging: this rank's largest chunk (twice when pulling). */
  int64_t cap = 0;
  for (int64_t q = 0; !st && q < m->nchunks[me]; q++) {
    ts_box C;
    int k;
    int64_t ci;
    chunk_of(m, t, me, q, &C, &k, &ci);
    int64_t n = ts_box_numel(&C) * (int64_t)m->es;
    cap = n > cap ? n : cap;
  }
  uint8_t *buf = NULL, *bufs[2] = {NULL, NULL};
  ts_comm_region *send = NULL, *recv = NULL;
  peer_info *peers = NULL;
  XXH3_state_t *hs = NULL;
  /* 4 KiB pages: huge pages made the process-to-process copies out of the staging faster, but
   * on this VM every later load under the saved attribute then ran 2-4x slower */
  unsigned flags = TS_POOL_STAGING;
  if (!st && cap > 0 &&
      !(buf = ts_shard_alloc_as((size_t)cap * (pull ? 2 : 1), flags, "the checkpoint move buffer",
                                &lerr))) {
    char why[sizeof lerr.msg];
    snprintf(why, sizeof why, "%s", lerr.msg);
    st = ts_error_set(&lerr, lerr.code, "checkpoint load of '%s': %.400s", t->name, why);
  }
  bufs[0] = buf;
  bufs[1] = buf && pull ? buf + cap : buf;
  if (!st) {
    send = calloc((size_t)m->size, sizeof *send);
    recv = calloc((size_t)m->size, sizeof *recv);
    peers = calloc((size_t)m->size, sizeof *peers);
    hs = XXH3_createState();
    if (!send || !recv || !peers || !hs)
      st = ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint load of '%s': no memory", t->name);
  }
  /* Agreement 1: every rank can take part in the rounds. */
  int rc = ts_comm_agree(c, st, &lerr, err);
  if (rc == TS_OK && pull) { /* every rank's process and staging */
    peers[me] = (peer_info){(int64_t)getpid(),
                            {(uint64_t)(uintptr_t)bufs[0], (uint64_t)(uintptr_t)bufs[1]}};
    int64_t *counts = calloc(2 * (size_t)m->size, sizeof *counts);
    if (!counts) {
      st = ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint load of '%s': no memory", t->name);
    } else {
      for (int j = 0; j < m->size; j++) {
        counts[j] = (int64_t)sizeof *peers;
        counts[m->size + j] = j * (int64_t)sizeof *peers;
      }
      /* every rank calls it; a failure is agreed after the rounds */
      if (ts_comm_allgatherv(c, peers, counts, counts + m->size, &lerr))
        st = lerr.code;
      free(counts);
    }
    rc = ts_comm_agree(c, st, &lerr, err);
  }
  int fd = -1;
  int64_t off = 0;
  for (int64_t q = 0; rc == TS_OK && q < m->rounds; q++) {
    ts_box C, X;
    int k = -1;
    int64_t ci = 0;
    bool mine = chunk_of(m, t, me, q, &C, &k, &ci);
    uint8_t *b = bufs[q % 2];
    if (mine && st == TS_OK) { /* read and hash this rank's chunk */
      const ts_ckpt_piece *p = &t->pieces[k];
      if (ci == 0) {
        st = ts__ckpt_reader_piece(r, t, p, &fd, &off, &lerr);
        XXH3_64bits_reset(hs);
      }
      size_t n = (size_t)ts_box_numel(&C) * m->es;
      if (!st && ts__ckpt_pread_hashed(
                     fd, b, n, off + ts__ckpt_box_offset(&p->box, C.lo) * (int64_t)m->es, hs))
        st = ts__ckpt_piece_io_fail(t, p, &lerr);
      if (!st)
        r->rep->bytes_read += (int64_t)n;
      if (!st && ci == ts_box_chunk_count(&p->box, m->es, m->round) - 1) {
        uint64_t h = XXH3_64bits_digest(hs);
        if (h != p->xxh3)
          st = ts__ckpt_piece_mismatch(t, p, h, &lerr);
      }
    }
    if (pull) {
      ts_error merr;
      int mrc = ts_comm_barrier(c, &merr);
      if (mrc && !st)
        st = ts_error_set(&lerr, mrc, "checkpoint load of '%s': %.400s", t->name, merr.msg);
      for (int j = 0; j < m->size && m->has[me]; j++) {
        ts_box Cj;
        int kj;
        int64_t cj;
        if (!chunk_of(m, t, j, q, &Cj, &kj, &cj) || !ts_box_intersect(&Cj, &m->box[me], &X) ||
            ts_box_numel(&X) == 0)
          continue;
        if (pull_box((pid_t)peers[j].pid, peers[j].buf[q % 2], &Cj, e->local.data, &m->box[me], &X,
                     m->es) &&
            !st)
          st = ts_error_set(&lerr, TS_IO,
                            "checkpoint load of '%s': copying round %lld from "
                            "rank %d: %s",
                            t->name, (long long)q, j, strerror(errno));
      }
      continue;
    }
    for (int j = 0; j < m->size; j++) {
      memset(&send[j], 0, sizeof send[j]);
      memset(&recv[j], 0, sizeof recv[j]);
      if (mine && m->has[j] && ts_box_intersect(&C, &m->box[j], &X) && ts_box_numel(&X) > 0)
        region_of(&send[j], b, &C, &X, m->es);
      ts_box Cj;
      int kj;
      int64_t cj;
      if (m->has[me] && chunk_of(m, t, j, q, &Cj, &kj, &cj) &&
          ts_box_intersect(&Cj, &m->box[me], &X) && ts_box_numel(&X) > 0)
        region_of(&recv[j], e->local.data, &m->box[me], &X, m->es);
    }
    ts_error merr;
    int mrc = ts_comm_alltoallw(c, send, recv, &merr);
    if (mrc && !st)
      st = ts_error_set(&lerr, mrc, "checkpoint load of '%s': moving round %lld: %.400s", t->name,
                        (long long)q, merr.msg);
  }
  /* Agreement 2 (after it nobody copies out of a staging buffer any more): every piece read
   * and verified, every byte moved. */
  if (rc == TS_OK)
    rc = ts_comm_agree(c, st, &lerr, err);
  XXH3_freeState(hs);
  free(send);
  free(recv);
  free(peers);
  ts_shard_free(buf);
  return rc;
}
