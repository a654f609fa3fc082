/* ring.c - reductions over a ring of point-to-point transfers, for communicators whose members
 * span hosts. Open MPI's tuned reductions choose their algorithms blind to hosts: for large data
 * MPI_Reduce_scatter_block is a reduce to one rank and a scatter from it (the whole tensor into one
 * host), and MPI_Allreduce over 3 or 6 ranks sent 1.4x what a ring sends over each host link.
 *
 * The ring visits the members host by host (sorted by node, then by rank), so a ring over ranks
 * on H hosts crosses each host's link once in each direction. Reduce-scatter: in n - 1 steps every
 * rank passes the partial block it holds to the next rank and adds its own contribution to the
 * one it receives; after the last step each rank holds its own block, reduced by the same chain
 * on every run (the order of a sum does not depend on timing). All-reduce is that, then an
 * all-gather around the same ring. Blocks move in pieces of RING_PIECE_BYTES, so the extra memory
 * is two pieces whatever the tensor. */
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

/* The pieces travel under this tag (beside collectives.c's chain). */
#define RING_TAG 31741
#define RING_PIECE_BYTES ((int64_t)4 << 20)

typedef struct ring {
  ts_comm *c;
  int n, pos;               /* members, this rank's place in the ring */
  int *order;               /* the comm rank at each place: host by host */
  int prev, next;           /* the comm ranks before and after this one */
  int64_t *counts, *displs; /* elements of each comm rank's block, and where it starts */
  int64_t es, piece;        /* bytes per element, elements per piece */
  ts_dtype dt;
  ts_reduce_op op;
  char *a, *t; /* the partial block sent next, and the one being received */
} ring;

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static void ring_free(ring *r) {
  free(r->order);
  free(r->counts);
  free(r->a);
  free(r->t);
}

/* The ring's order and the blocks (counts in elements, by comm rank). */
static int ring_init(ring *r, ts_comm *c, const int64_t *counts, ts_dtype dt, ts_reduce_op op,
                     ts_error *err) {
  int n = c->size;
  memset(r, 0, sizeof *r);
  r->c = c, r->n = n, r->dt = dt, r->op = op;
  r->es = (int64_t)ts_dtype_size(dt);
  r->piece = RING_PIECE_BYTES / r->es;
  r->order = malloc((size_t)n * sizeof *r->order);
  r->counts = malloc(2 * (size_t)n * sizeof *r->counts);
  int64_t *key = malloc((size_t)n * sizeof *key);
  r->a = malloc((size_t)(r->piece * r->es));
  r->t = malloc((size_t)(r->piece * r->es));
  if (!r->order || !r->counts || !key || !r->a || !r->t) {
    free(key);
    ring_free(r);
    memset(r, 0, sizeof *r);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a ring reduction over %d ranks", n);
  }
  const int *node_of = c->world->node_of;
  for (int i = 0; i < n; i++)
    key[i] = (int64_t)node_of[c->ranks[i]] * n + i;
  qsort(key, (size_t)n, sizeof *key, cmp_i64);
  for (int p = 0; p < n; p++) {
    r->order[p] = (int)(key[p] % n);
    if (r->order[p] == c->rank)
      r->pos = p;
  }
  free(key);
  r->prev = r->order[(r->pos - 1 + n) % n];
  r->next = r->order[(r->pos + 1) % n];
  r->displs = r->counts + n;
  for (int i = 0; i < n; i++) {
    r->counts[i] = counts[i];
    r->displs[i] = i ? r->displs[i - 1] + counts[i - 1] : 0;
  }
  return TS_OK;
}

/* The comm rank whose block is at `back` places before this rank's. */
static int block_at(const ring *r, int back) {
  return r->order[((r->pos - back) % r->n + r->n) % r->n];
}

/* Elements of piece j of rank b's block. */
static int64_t piece_len(const ring *r, int b, int64_t j) {
  int64_t left = r->counts[b] - j * r->piece;
  return left <= 0 ? 0 : left < r->piece ? left : r->piece;
}

static char *piece_at(const ring *r, const void *buf, int b, int64_t j) {
  return (char *)buf + (r->displs[b] + j * r->piece) * r->es;
}

/* Piece j of every block reduced around the ring; this rank's reduced piece into out. */
static int reduce_scatter_piece(ring *r, const void *sbuf, int64_t j, void *out, ts_error *err) {
  for (int s = 0; s < r->n - 1; s++) {
    int sb = block_at(r, s + 1), rb = block_at(r, s + 2);
    int64_t sl = piece_len(r, sb, j), rl = piece_len(r, rb, j);
    const void *src = s == 0 ? piece_at(r, sbuf, sb, j) : r->a;
    TS_MPI_CHECK(MPI_Sendrecv(src, (int)(sl * r->es), MPI_BYTE, r->next, RING_TAG, r->t,
                              (int)(rl * r->es), MPI_BYTE, r->prev, RING_TAG, r->c->comm,
                              MPI_STATUS_IGNORE),
                 err);
    int rc = ts_reduce(r->t, piece_at(r, sbuf, rb, j), (size_t)rl, r->dt, r->op, err);
    if (rc)
      return rc;
    char *x = r->a;
    r->a = r->t, r->t = x;
  }
  int64_t mine = piece_len(r, r->c->rank, j);
  if (mine > 0) /* after n - 1 steps the piece held is this rank's own block's */
    memmove(out, r->n > 1 ? r->a : piece_at(r, sbuf, r->c->rank, j), (size_t)(mine * r->es));
  return TS_OK;
}

/* Piece j of every block around the ring, from the rank that reduced it, in place in buf. */
static int allgather_piece(ring *r, void *buf, int64_t j, ts_error *err) {
  for (int s = 0; s < r->n - 1; s++) {
    int sb = block_at(r, s), rb = block_at(r, s + 1);
    TS_MPI_CHECK(MPI_Sendrecv(piece_at(r, buf, sb, j), (int)(piece_len(r, sb, j) * r->es), MPI_BYTE,
                              r->next, RING_TAG, piece_at(r, buf, rb, j),
                              (int)(piece_len(r, rb, j) * r->es), MPI_BYTE, r->prev, RING_TAG,
                              r->c->comm, MPI_STATUS_IGNORE),
                 err);
  }
  return TS_OK;
}

static int64_t pieces(const ring *r) {
  int64_t most = 0;
  for (int i = 0; i < r->n; i++)
    most = r->counts[i] > most ? r->counts[i] : most;
  return (most + r->piece - 1) / r->piece;
}

int ts__ring_reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int64_t *counts,
                            ts_dtype dt, ts_reduce_op op, ts_error *err) {
  ring r;
  int rc = ring_init(&r, c, counts, dt, op, err);
  for (int64_t j = 0, np = rc ? 0 : pieces(&r); !rc && j < np; j++)
    rc = reduce_scatter_piece(&r, sbuf, j, (char *)rbuf + j * r.piece * r.es, err);
  ring_free(&r);
  return rc;
}

int ts__ring_allreduce(ts_comm *c, const void *sbuf, void *rbuf, int64_t n, ts_dtype dt,
                       ts_reduce_op op, ts_error *err) {
  int64_t *counts = malloc((size_t)c->size * sizeof *counts);
  if (!counts)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a ring reduction over %d ranks", c->size);
  for (int i = 0; i < c->size; i++)
    counts[i] = n / c->size + (i < n % c->size);
  ring r;
  int rc = ring_init(&r, c, counts, dt, op, err);
  free(counts);
  if (rc)
    return rc;
  const void *in = sbuf ? sbuf : rbuf;
  for (int64_t j = 0, np = pieces(&r); !rc && j < np; j++) {
    rc = reduce_scatter_piece(&r, in, j, piece_at(&r, rbuf, c->rank, j), err);
    if (!rc)
      rc = allgather_piece(&r, rbuf, j, err);
  }
  ring_free(&r);
  return rc;
}
