/* cyclic.c - block-cyclic arithmetic: ScaLAPACK's NUMROC, who owns what along a dim dealt by
 * split points or in blocks round-robin, the overlay of a source and a target deal of one dim, and
 * the attribute of a ScaLAPACK array descriptor.
 *
 * A deal of a dim gives every element one owner part. Along a cyclic deal (block size nb over K
 * parts, block 0 to part src) ownership repeats every nb * K elements; a split-point deal is one
 * run per part (and a single part owns everything, which repeats with any period). The overlay
 * of two deals walks one common period (the least common multiple of the two, or the whole dim)
 * from boundary to boundary, so it costs the runs of a period, never an element or block at a
 * time beyond that; runs are kept sorted by (source part, target part, start), and the runs a
 * pair shares over the whole dim are those of the period repeated, the last repetition cut at the
 * dim's end. The planner (plan_cyclic.c) builds on it. */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shard_internal.h"

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* nb * k, or INT64_MAX when it overflows. */
static int64_t mul_sat(int64_t nb, int64_t k) {
  int64_t r;
  return __builtin_mul_overflow(nb, k, &r) ? INT64_MAX : r;
}

int64_t ts_deal_owned_before(const ts_dim_deal *d, int64_t part, int64_t x) {
  x = clamp64(x, 0, d->len);
  if (d->nb == 0)
    return clamp64(x, d->off[part], d->off[part + 1]) - d->off[part];
  int64_t k = d->nparts, rel = ((part - d->src) % k + k) % k;
  int64_t period = mul_sat(d->nb, k), begin = mul_sat(rel, d->nb);
  int64_t full = period == INT64_MAX ? 0 : x / period;
  int64_t rest = period == INT64_MAX ? x : x % period;
  return full * d->nb + clamp64(rest - begin, 0, d->nb);
}

int64_t ts_numroc(int64_t n, int64_t nb, int64_t iproc, int64_t isrc, int64_t nprocs) {
  if (n <= 0 || nb < 1 || nprocs < 1)
    return 0;
  ts_dim_deal d = {n, nprocs, nb, isrc, NULL};
  return ts_deal_owned_before(&d, iproc, n);
}

int64_t ts_deal_owner(const ts_dim_deal *d, int64_t g) {
  if (d->nb > 0)
    return (g / d->nb + d->src) % d->nparts;
  /* the last part whose first split point is <= g (empty parts come before it) */
  int64_t a = 0, b = d->nparts - 1;
  while (a < b) {
    int64_t mid = a + (b - a + 1) / 2;
    if (d->off[mid] <= g)
      a = mid;
    else
      b = mid - 1;
  }
  return a;
}

/* The end of the run of g's owner that holds g. */
static int64_t deal_run_end(const ts_dim_deal *d, int64_t g) {
  if (d->nb > 0)
    return g / d->nb * d->nb + d->nb < d->len ? g / d->nb * d->nb + d->nb : d->len;
  return d->off[ts_deal_owner(d, g) + 1];
}

/* The period of a deal's ownership: nb * nparts when cyclic, 1 for a single part, else the dim. */
static int64_t deal_period(const ts_dim_deal *d) {
  if (d->nb > 0)
    return mul_sat(d->nb, d->nparts);
  return d->nparts == 1 ? 1 : d->len;
}

/* One run of the overlay's period. */
typedef struct piece {
  int64_t start, size, a, b;
} piece;

struct ts_overlay {
  ts_dim_deal src, tgt; /* with their own copies of the split points */
  int64_t *src_off, *tgt_off;
  int64_t period; /* 0 for an empty dim */
  int64_t n;
  piece *pieces;    /* by (a, b, start) */
  int64_t *row;     /* src.nparts + 1: the pieces of source part a are row[a] .. row[a + 1] */
  int64_t *sources; /* tgt.nparts: source parts sharing something with each target part */
};

void ts_overlay_destroy(ts_overlay **p) {
  if (!p || !*p)
    return;
  ts_overlay *o = *p;
  free(o->src_off);
  free(o->tgt_off);
  free(o->pieces);
  free(o->row);
  free(o->sources);
  free(o);
  *p = NULL;
}

static int cmp_piece(const void *x, const void *y) {
  const piece *p = x, *q = y;
  if (p->a != q->a)
    return (p->a > q->a) - (p->a < q->a);
  if (p->b != q->b)
    return (p->b > q->b) - (p->b < q->b);
  return (p->start > q->start) - (p->start < q->start);
}

/* A deal's copy in o (split points duplicated, so the overlay outlives its inputs). */
static int copy_deal(const ts_dim_deal *in, ts_dim_deal *out, int64_t **own, ts_error *err) {
  *out = *in;
  *own = NULL;
  if (in->nb > 0)
    return TS_OK;
  *own = malloc((size_t)(in->nparts + 1) * sizeof **own);
  if (!*own)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %lld split points",
                        (long long)in->nparts);
  memcpy(*own, in->off, (size_t)(in->nparts + 1) * sizeof **own);
  out->off = *own;
  return TS_OK;
}

/* The common period, and a bound on the runs within it. */
static int64_t overlay_period(const ts_dim_deal *a, const ts_dim_deal *b, int64_t *bound) {
  int64_t L = a->len, pa = deal_period(a), pb = deal_period(b), period = L;
  if (pa < L && pb < L) {
    int64_t q = pa / ts_gcd64(pa, pb), l = mul_sat(q, pb);
    period = l < L ? l : L;
  }
  int64_t ra = a->nb > 0 ? period / a->nb + 1 : a->nparts;
  int64_t rb = b->nb > 0 ? period / b->nb + 1 : b->nparts;
  *bound = ra + rb;
  return period;
}

/* Walks [0, period) from boundary to boundary, one piece per (source owner, target owner)
 * run; adjacent pieces with the same owners merge. */
static int64_t overlay_walk(ts_overlay *o) {
  int64_t n = 0, g = 0;
  while (g < o->period) {
    int64_t ea = deal_run_end(&o->src, g), eb = deal_run_end(&o->tgt, g);
    int64_t end = ea < eb ? ea : eb;
    end = end < o->period ? end : o->period;
    int64_t a = ts_deal_owner(&o->src, g), b = ts_deal_owner(&o->tgt, g);
    if (n > 0 && o->pieces[n - 1].a == a && o->pieces[n - 1].b == b &&
        o->pieces[n - 1].start + o->pieces[n - 1].size == g)
      o->pieces[n - 1].size += end - g;
    else
      o->pieces[n++] = (piece){g, end - g, a, b};
    g = end;
  }
  return n;
}

int ts_overlay_create(const ts_dim_deal *src, const ts_dim_deal *tgt, ts_overlay **out,
                      ts_error *err) {
  if (!src || !tgt || !out || src->len != tgt->len || src->nparts < 1 || tgt->nparts < 1)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_overlay_create: invalid deals");
  *out = NULL;
  ts_overlay *o = calloc(1, sizeof *o);
  if (!o)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for an overlay");
  int rc = copy_deal(src, &o->src, &o->src_off, err);
  if (rc == TS_OK)
    rc = copy_deal(tgt, &o->tgt, &o->tgt_off, err);
  int64_t bound = 0;
  o->period = overlay_period(&o->src, &o->tgt, &bound);
  if (rc == TS_OK && bound > TS_OVERLAY_MAX)
    rc = ts_error_set(err, TS_UNSUPPORTED,
                      "a dim of %lld elements has up to %lld runs per period between its source "
                      "and target deals; at most %lld are supported (use larger cyclic blocks)",
                      (long long)src->len, (long long)bound, (long long)TS_OVERLAY_MAX);
  if (rc == TS_OK) {
    o->pieces = malloc((size_t)(bound > 0 ? bound : 1) * sizeof *o->pieces);
    o->row = calloc((size_t)src->nparts + 1, sizeof *o->row);
    o->sources = calloc((size_t)tgt->nparts, sizeof *o->sources);
    if (!o->pieces || !o->row || !o->sources)
      rc = ts_error_set(err, TS_NO_MEMORY, "no memory for an overlay of %lld runs",
                        (long long)bound);
  }
  if (rc) {
    ts_overlay_destroy(&o);
    return rc;
  }
  o->n = overlay_walk(o);
  qsort(o->pieces, (size_t)o->n, sizeof *o->pieces, cmp_piece);
  for (int64_t i = 0; i < o->n; i++) {
    o->row[o->pieces[i].a + 1]++;
    if (i == 0 || o->pieces[i].a != o->pieces[i - 1].a || o->pieces[i].b != o->pieces[i - 1].b)
      o->sources[o->pieces[i].b]++;
  }
  for (int64_t a = 0; a < src->nparts; a++)
    o->row[a + 1] += o->row[a];
  *out = o;
  return TS_OK;
}

/* The pieces of pair (a, b): [*lo, *hi). */
static void pair_range(const ts_overlay *o, int64_t a, int64_t b, int64_t *lo, int64_t *hi) {
  *lo = *hi = 0;
  if (a < 0 || a >= o->src.nparts || b < 0 || b >= o->tgt.nparts)
    return;
  int64_t x = o->row[a], y = o->row[a + 1];
  while (x < y) { /* first piece with b' >= b */
    int64_t mid = x + (y - x) / 2;
    if (o->pieces[mid].b < b)
      x = mid + 1;
    else
      y = mid;
  }
  *lo = x;
  y = o->row[a + 1];
  while (x < y) { /* first piece with b' > b */
    int64_t mid = x + (y - x) / 2;
    if (o->pieces[mid].b <= b)
      x = mid + 1;
    else
      y = mid;
  }
  *hi = x;
}

int64_t ts_overlay_pair_len(const ts_overlay *o, int64_t a, int64_t b) {
  int64_t lo, hi, sum = 0, cut = 0;
  pair_range(o, a, b, &lo, &hi);
  if (lo == hi)
    return 0;
  int64_t full = o->src.len / o->period, tail = o->src.len % o->period;
  for (int64_t i = lo; i < hi; i++) {
    const piece *p = &o->pieces[i];
    sum += p->size;
    cut += clamp64(tail - p->start, 0, p->size);
  }
  return full * sum + cut;
}

int64_t ts_overlay_pair_count(const ts_overlay *o, int64_t a, int64_t b) {
  int64_t lo, hi, cut = 0;
  pair_range(o, a, b, &lo, &hi);
  if (lo == hi)
    return 0;
  int64_t full = o->src.len / o->period, tail = o->src.len % o->period;
  for (int64_t i = lo; i < hi; i++)
    cut += o->pieces[i].start < tail;
  return full * (hi - lo) + cut;
}

int64_t ts_overlay_pair_runs(const ts_overlay *o, int64_t a, int64_t b, int64_t first, ts_run *out,
                             int64_t cap) {
  int64_t lo, hi, total = ts_overlay_pair_count(o, a, b), n = 0;
  pair_range(o, a, b, &lo, &hi);
  for (int64_t k = first < 0 ? 0 : first; k < total && n < cap; k++, n++) {
    const piece *p = &o->pieces[lo + k % (hi - lo)];
    int64_t start = k / (hi - lo) * o->period + p->start;
    int64_t len = p->size < o->src.len - start ? p->size : o->src.len - start;
    out[n] = (ts_run){start, len, ts_deal_owned_before(&o->src, a, start),
                      ts_deal_owned_before(&o->tgt, b, start)};
  }
  return n;
}

int64_t ts_overlay_sources_of(const ts_overlay *o, int64_t b) {
  return b >= 0 && b < o->tgt.nparts ? o->sources[b] : 0;
}

int64_t ts_overlay_period_runs(const ts_overlay *o) { return o->n; }

/* ---------------------------------------------------------------------------------------------
 * ScaLAPACK descriptors */

int ts_attr_from_scalapack_desc(const int desc[9], int nprow, int npcol, char order,
                                const int *ranks, int my_prow, ts_attr **out, int64_t shape_out[2],
                                ts_error *err) {
  if (!desc || !out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_from_scalapack_desc: NULL argument");
  *out = NULL;
  int m = desc[2], n = desc[3], mb = desc[4], nb = desc[5], rsrc = desc[6], csrc = desc[7];
  int lld = desc[8];
  if (desc[0] != 1)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "ScaLAPACK descriptor: DTYPE_ is %d; only 1 (a "
                        "dense block-cyclic matrix) is supported",
                        desc[0]);
  if (nprow < 1 || npcol < 1 || (int64_t)nprow * npcol > INT_MAX)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "ScaLAPACK process grid %d x %d; both sizes "
                        "must be at least 1",
                        nprow, npcol);
  if (m < 0 || n < 0)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "ScaLAPACK descriptor: M_=%d, N_=%d; the matrix "
                        "sizes must be >= 0",
                        m, n);
  if (mb < 1 || nb < 1)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "ScaLAPACK descriptor: MB_=%d, NB_=%d; block "
                        "sizes must be at least 1",
                        mb, nb);
  if (rsrc < 0 || rsrc >= nprow || csrc < 0 || csrc >= npcol)
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "ScaLAPACK descriptor: RSRC_=%d, CSRC_=%d on a "
                        "%d x %d grid; valid: RSRC_ 0 to %d, CSRC_ 0 to %d",
                        rsrc, csrc, nprow, npcol, nprow - 1, npcol - 1);
  if (my_prow < -1 || my_prow >= nprow)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "process row %d on a grid of %d rows (-1: "
                        "check LLD_ against the largest)",
                        my_prow, nprow);
  int64_t locr = ts_numroc(m, mb, my_prow >= 0 ? my_prow : rsrc, rsrc, nprow);
  if (lld < (locr > 1 ? locr : 1))
    return ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "ScaLAPACK descriptor: LLD_=%d but process row "
                        "%d holds %lld local rows; LLD_ must be at least max(1, %lld)",
                        lld, my_prow >= 0 ? my_prow : rsrc, (long long)locr, (long long)locr);
  char o = (char)toupper((unsigned char)order);
  if (!ranks && o != 'R' && o != 'C')
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "BLACS grid order '%c'; valid: 'R' (row-major) "
                        "or 'C' (column-major)",
                        order ? order : '?');
  int np = nprow * npcol;
  int *r = malloc((size_t)np * sizeof *r);
  if (!r)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %d ranks", np);
  for (int i = 0; i < nprow; i++)
    for (int j = 0; j < npcol; j++)
      r[i * npcol + j] = ranks ? ranks[i * npcol + j] : o == 'R' ? i * npcol + j : j * nprow + i;
  int64_t mesh[2] = {nprow, npcol};
  ts_placement place[2] = {ts_shard_cyclic(1, mb, rsrc), ts_shard_cyclic(0, nb, csrc)};
  int rc = ts_attr_create(out, 2, mesh, r, place, err);
  free(r);
  if (rc == TS_OK && shape_out) {
    shape_out[0] = n;
    shape_out[1] = m;
  }
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Moving the shared elements of two part tuples */

int64_t ts_overlay_src_extent(const ts_overlay *o, int64_t a) {
  return ts_deal_owned_before(&o->src, a, o->src.len);
}

int64_t ts_overlay_tgt_extent(const ts_overlay *o, int64_t b) {
  return ts_deal_owned_before(&o->tgt, b, o->tgt.len);
}

/* One move: per dim its shared runs and the local strides (elements) of both ends. */
typedef struct mover {
  int ndim;
  size_t esize;
  ts_run *runs[TS_MAX_DIMS];
  int64_t nruns[TS_MAX_DIMS];
  int64_t sstride[TS_MAX_DIMS], tstride[TS_MAX_DIMS];
  const char *from;
  char *to;
  ts_cyclic_mode mode;
  int64_t packed; /* elements through the contiguous buffer so far */
} mover;

/* Dim d onward, from source offset so and target offset to (elements). */
static void move_dims(mover *m, int d, int64_t so, int64_t to) {
  size_t es = m->esize;
  for (int64_t r = 0; r < m->nruns[d]; r++) {
    const ts_run *run = &m->runs[d][r];
    int64_t s0 = so + run->src_local * m->sstride[d], t0 = to + run->tgt_local * m->tstride[d];
    if (d + 1 < m->ndim) {
      for (int64_t i = 0; i < run->len; i++)
        move_dims(m, d + 1, s0 + i * m->sstride[d], t0 + i * m->tstride[d]);
      continue;
    }
    size_t bytes = (size_t)run->len * es;
    if (m->mode == TS_CYCLIC_COPY)
      memcpy(m->to + (size_t)t0 * es, m->from + (size_t)s0 * es, bytes);
    else if (m->mode == TS_CYCLIC_PACK)
      memcpy(m->to + (size_t)m->packed * es, m->from + (size_t)s0 * es, bytes);
    else
      memcpy(m->to + (size_t)t0 * es, m->from + (size_t)m->packed * es, bytes);
    m->packed += run->len;
  }
}

int64_t ts_cyclic_pair_move(int ndim, ts_overlay *const *ov, const int64_t *sp, const int64_t *tp,
                            size_t esize, const void *from, void *to, ts_cyclic_mode mode) {
  mover m = {.ndim = ndim, .esize = esize, .from = from, .to = to, .mode = mode};
  if (ndim == 0) {
    memcpy(to, from, esize);
    return 1;
  }
  int64_t total = 1, ss = 1, ts = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    m.sstride[d] = ss;
    m.tstride[d] = ts;
    ss *= ts_overlay_src_extent(ov[d], sp[d]);
    ts *= ts_overlay_tgt_extent(ov[d], tp[d]);
    m.nruns[d] = ts_overlay_pair_count(ov[d], sp[d], tp[d]);
    total *= ts_overlay_pair_len(ov[d], sp[d], tp[d]);
  }
  int rc = 0;
  for (int d = 0; d < ndim && total > 0; d++) {
    m.runs[d] = malloc((size_t)(m.nruns[d] > 0 ? m.nruns[d] : 1) * sizeof(ts_run));
    if (!m.runs[d])
      rc = -1;
    else
      ts_overlay_pair_runs(ov[d], sp[d], tp[d], 0, m.runs[d], m.nruns[d]);
  }
  if (rc == 0 && total > 0)
    move_dims(&m, 0, 0, 0);
  for (int d = 0; d < ndim; d++)
    free(m.runs[d]);
  return rc ? -1 : total;
}
