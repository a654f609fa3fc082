/* regions.c - transfers of strided regions described to MPI as derived datatypes.
 *
 * A region is elements at base + sum(i[d] * stride[d]), enumerated row-major. Each becomes one
 * MPI datatype (nested hvectors placed at the region's absolute address, used with MPI_BOTTOM),
 * so MPI reads the source slice and writes the target slice in place: no pack and unpack copies
 * around the transfer, and no staging buffer. A region on one side meets a region of the same
 * element count on the other, whatever their strides: a strided slice can feed a packed buffer.
 * The many small regions of a pair in one exchange (ts_comm_exchange_many) are the exception:
 * packed into one buffer, since a datatype per region and exchange costs more than their copy. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

static int64_t region_bytes(const ts_comm_region *r) {
  int64_t n = r->esize;
  for (int d = 0; d < r->ndim; d++)
    n *= r->count[d];
  return n;
}

static int check_region(const ts_comm_region *r, ts_error *err) {
  if (r->esize <= 0 || r->ndim < 0 || r->ndim > TS_MAX_DIMS)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "region with element size %lld and %d dims (valid: size > 0, 0 to %d dims)",
                        (long long)r->esize, r->ndim, TS_MAX_DIMS);
  int64_t n = r->esize;
  for (int d = 0; d < r->ndim; d++) {
    if (r->count[d] < 0 || r->count[d] > INT_MAX)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "region dim %d counts %lld elements", d,
                          (long long)r->count[d]);
    if (r->count[d] > 0 && n > INT_MAX / r->count[d])
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "region of more than %d bytes: transfer it in chunks", INT_MAX);
    n *= r->count[d];
  }
  return TS_OK;
}

bool ts_comm_region_supported(const ts_comm_region *r) {
  for (int d = 0; d < r->ndim; d++)
    if (r->count[d] > 1 && r->stride[d] == -1)
      return false;
  return true;
}

int ts__region_fold(const ts_comm_region *r, int64_t *cnt, int64_t *str) {
  int n = 0;
  for (int d = 0; d < r->ndim; d++) {
    if (r->count[d] == 1)
      continue;
    cnt[n] = r->count[d];
    str[n++] = r->stride[d];
  }
  for (int d = n - 1; d > 0; d--)
    if (str[d - 1] == cnt[d] * str[d]) {
      cnt[d - 1] *= cnt[d];
      str[d - 1] = str[d];
      for (int k = d; k < n - 1; k++) {
        cnt[k] = cnt[k + 1];
        str[k] = str[k + 1];
      }
      n--;
    }
  return n;
}

void ts__runs_init(ts__runs *w, const ts_comm_region *r) {
  memset(w, 0, sizeof *w);
  int64_t cnt[TS_MAX_DIMS], str[TS_MAX_DIMS];
  int n = ts__region_fold(r, cnt, str);
  w->run = r->esize;
  if (n > 0 && str[n - 1] == r->esize)
    w->run = cnt[--n] * r->esize;
  w->n = n;
  w->nruns = 1;
  for (int d = 0; d < n; d++) {
    w->cnt[d] = cnt[d];
    w->str[d] = str[d];
    w->nruns *= cnt[d];
  }
  w->at = r->base;
  w->left = w->run;
  w->remaining = w->run * w->nruns;
}

void ts__runs_copy(int k, ts__runs *const *w, uint8_t *const *buf, int64_t n, bool pack) {
  /* Unpacking into a region larger than the caches keep writes around them (stream.c). */
  bool stream =
      !pack && w[0]->run >= TS_STREAM_MIN_RUN && w[0]->run * w[0]->nruns >= TS_STREAM_MIN_BYTES;
  for (int64_t at = 0; at < n;) {
    int64_t len = w[0]->left < n - at ? w[0]->left : n - at;
    for (int m = 0; m < k; m++) { /* the same piece of each walker's run: they move in step */
      uint8_t *p = ts__runs_take(w[m], len);
      if (pack)
        memcpy(buf[m] + at, p, (size_t)len);
      else if (stream)
        ts_copy_stream(p, buf[m] + at, (size_t)len);
      else
        memcpy(p, buf[m] + at, (size_t)len);
    }
    at += len;
  }
  if (stream)
    ts_copy_stream_fence();
}

/* The datatype of a non-empty region, at its absolute address. */
static int region_type(const ts_comm_region *r, MPI_Datatype *out, ts_error *err) {
  int64_t cnt[TS_MAX_DIMS], str[TS_MAX_DIMS];
  int n = ts__region_fold(r, cnt, str);
  MPI_Datatype t, next;
  int k = n - 1;
  if (n > 0 && str[k] == r->esize) { /* contiguous innermost run */
    TS_MPI_CHECK(MPI_Type_contiguous((int)(cnt[k] * r->esize), MPI_BYTE, &t), err);
    k--;
  } else {
    TS_MPI_CHECK(MPI_Type_contiguous((int)r->esize, MPI_BYTE, &t), err);
  }
  int rc = TS_OK;
  for (; k >= 0; k--) {
    TS_MPI_TRY(MPI_Type_create_hvector((int)cnt[k], 1, (MPI_Aint)str[k], t, &next), err, rc, fail);
    MPI_Type_free(&t);
    t = next;
  }
  MPI_Aint at;
  TS_MPI_TRY(MPI_Get_address(r->base, &at), err, rc, fail);
  int one = 1;
  TS_MPI_TRY(MPI_Type_create_hindexed(1, &one, &at, t, &next), err, rc, fail);
  MPI_Type_free(&t);
  t = next;
  TS_MPI_TRY(MPI_Type_commit(&t), err, rc, fail);
  *out = t;
  return TS_OK;
fail:
  MPI_Type_free(&t);
  return rc;
}

/* Types for n regions (empty ones: MPI_BYTE with count 0). */
static int build_types(int n, const ts_comm_region *r, MPI_Datatype *types, int *counts,
                       ts_error *err) {
  for (int i = 0; i < n; i++) {
    types[i] = MPI_BYTE;
    counts[i] = 0;
  }
  for (int i = 0; i < n; i++) {
    if (!r[i].base)
      continue;
    int rc = check_region(&r[i], err);
    if (rc == TS_OK && region_bytes(&r[i]) > 0) {
      rc = region_type(&r[i], &types[i], err);
      counts[i] = rc == TS_OK;
    }
    if (rc)
      return rc;
  }
  return TS_OK;
}

static void free_types(int n, MPI_Datatype *types) {
  for (int i = 0; i < n; i++)
    if (types[i] != MPI_BYTE)
      MPI_Type_free(&types[i]);
}

static int cma_regions(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                       int nrecv, const int *recv_peers, const ts_comm_region *recv, ts_error *err);

static int alltoallw(ts_comm *c, const ts_comm_region *send, const ts_comm_region *recv,
                     ts_error *err) {
  int P = c->size;
  if (c->pids) { /* every peer on this node: single-copy reads (cma.c) */
    int *peers = malloc((size_t)P * sizeof *peers);
    if (!peers)
      return ts_error_set(err, TS_NO_MEMORY, "no memory for all-to-all-w tables");
    for (int i = 0; i < P; i++)
      peers[i] = i;
    int rc = cma_regions(c, P, peers, send, P, peers, recv, err);
    free(peers);
    return rc;
  }
  MPI_Datatype *types = malloc(2 * (size_t)P * sizeof *types);
  int *ints = calloc(3 * (size_t)P, sizeof *ints);
  if (!types || !ints) {
    free(types);
    free(ints);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for all-to-all-w tables");
  }
  MPI_Datatype *st = types, *rt = types + P;
  int *sc = ints, *rcn = ints + P, *displs = ints + 2 * P; /* displacements: all 0 */
  for (int i = 0; i < 2 * P; i++)
    types[i] = MPI_BYTE; /* what free_types skips, whatever build_types reached */
  int rc = build_types(P, send, st, sc, err);
  if (rc == TS_OK)
    rc = build_types(P, recv, rt, rcn, err);
  if (rc == TS_OK) {
    int mrc = MPI_Alltoallw(MPI_BOTTOM, sc, displs, st, MPI_BOTTOM, rcn, displs, rt, c->comm);
    if (mrc != MPI_SUCCESS)
      rc = ts__mpi_error(mrc, "MPI_Alltoallw", __FILE__, __LINE__, err);
  }
  free_types(2 * P, types);
  free(types);
  free(ints);
  return rc;
}

/* Through MPI with derived datatypes. */
static int mpi_regions(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                       int nrecv, const int *recv_peers, const ts_comm_region *recv, int tag,
                       ts_error *err) {
  int n = nsend + nrecv;
  if (n == 0)
    return TS_OK;
  MPI_Datatype *types = malloc((size_t)n * sizeof *types);
  int *counts = malloc((size_t)n * sizeof *counts);
  ts__transfer *t = malloc((size_t)n * sizeof *t);
  if (!types || !counts || !t) {
    free(types);
    free(counts);
    free(t);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %d transfers", n);
  }
  for (int i = 0; i < n; i++)
    types[i] = MPI_BYTE;
  int rc = build_types(nrecv, recv, types, counts, err);
  if (rc == TS_OK)
    rc = build_types(nsend, send, types + nrecv, counts + nrecv, err);
  int k = 0;
  for (int i = 0; rc == TS_OK && i < n; i++) /* the receives first, empty regions skipped */
    if (counts[i] > 0)
      t[k++] = (ts__transfer){MPI_BOTTOM, 1, types[i],
                              i < nrecv ? recv_peers[i] : send_peers[i - nrecv], i >= nrecv};
  if (rc == TS_OK)
    rc = ts__comm_transfers(c, k, t, tag, err);
  free_types(n, types);
  free(types);
  free(counts);
  free(t);
  return rc;
}

/* The pairs the single-copy path leaves to MPI (apart from cma.c's tags). */
#define CMA_MPI_TAG 31746

static bool region_empty(const ts_comm_region *r) { return !r->base || region_bytes(r) == 0; }

/* A pair of at most this many bytes goes through MPI at once: its message costs less than the
 * round of descriptors a single-copy read needs first. Both ends decide alike from the pair's
 * size, which is the same on both. */
#define CMA_SMALL_PAIR ((int64_t)32 << 10)

/* The non-empty regions by single-copy reads, then the pairs the readers left to MPI (and the
 * small ones, which go to MPI directly). */
static int cma_regions(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                       int nrecv, const int *recv_peers, const ts_comm_region *recv,
                       ts_error *err) {
  int n = nsend + nrecv;
  for (int i = 0; i < n; i++) {
    const ts_comm_region *r = i < nsend ? &send[i] : &recv[i - nsend];
    int rc = r->base ? check_region(r, err) : TS_OK;
    if (rc)
      return rc;
  }
  /* Each pair (sends, then receives): empty (-1), small (-2), or its place among the reads. */
  size_t cap = (size_t)(n ? n : 1);
  ts_comm_region *regs = malloc(2 * cap * sizeof *regs); /* the reads, then the MPI pairs */
  int *peers = malloc(3 * cap * sizeof *peers);
  bool *mpi = malloc(cap * sizeof *mpi);
  if (!regs || !peers || !mpi) {
    free(regs);
    free(peers);
    free(mpi);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %d transfers", n);
  }
  ts_comm_region *mregs = regs + cap;
  int *mpeers = peers + cap, *where = peers + 2 * cap;
  int nread[2] = {0, 0};
  for (int i = 0; i < n; i++) {
    bool snd = i < nsend;
    const ts_comm_region *r = snd ? &send[i] : &recv[i - nsend];
    where[i] = region_empty(r) ? -1 : region_bytes(r) <= CMA_SMALL_PAIR ? -2 : nread[0] + nread[1];
    if (where[i] >= 0) {
      regs[where[i]] = *r;
      peers[where[i]] = snd ? send_peers[i] : recv_peers[i - nsend];
      nread[!snd]++;
    }
  }
  int ns = nread[0], nr = nread[1], rc = TS_OK;
  if (ns + nr > 0)
    rc = ts__cma_exchange(c, ns, peers, regs, mpi, nr, peers + ns, regs + ns, mpi + ns, err);
  /* Through MPI: the small pairs and those the readers left, sends then receives. Run even
   * after a failed read elsewhere: the flags of every pair match on both sides. */
  int nm[2] = {0, 0};
  for (int i = 0; i < n; i++)
    if (where[i] == -2 || (where[i] >= 0 && mpi[where[i]])) {
      bool snd = i < nsend;
      mregs[nm[0] + nm[1]] = snd ? send[i] : recv[i - nsend];
      mpeers[nm[0] + nm[1]] = snd ? send_peers[i] : recv_peers[i - nsend];
      nm[!snd]++;
    }
  ts_error merr;
  int mrc = nm[0] + nm[1] > 0 ? mpi_regions(c, nm[0], mpeers, mregs, nm[1], mpeers + nm[0],
                                            mregs + nm[0], CMA_MPI_TAG, &merr)
                              : TS_OK;
  if (mrc && rc == TS_OK)
    rc = ts_error_set(err, merr.code, "%s", merr.msg);
  free(regs);
  free(peers);
  free(mpi);
  return rc;
}

static int exchange_regions(ts_comm *c, int nsend, const int *send_peers,
                            const ts_comm_region *send, int nrecv, const int *recv_peers,
                            const ts_comm_region *recv, int tag, ts_error *err) {
  if (c->pids)
    return cma_regions(c, nsend, send_peers, send, nrecv, recv_peers, recv, err);
  return mpi_regions(c, nsend, send_peers, send, nrecv, recv_peers, recv, tag, err);
}

/* ---------------------------------------------------------------------------------------------
 * Many regions per pair (ts_comm_exchange_many) */

/* The MPI message of a pair's regions (n of them, in order): one datatype, the struct of the
 * regions' own (each placed at its absolute address), committed; MPI_BYTE with *count 0 when
 * they are all empty. */
static int pair_type(int n, const ts_comm_region *const *r, MPI_Datatype *out, int *count,
                     ts_error *err) {
  *out = MPI_BYTE;
  *count = 0;
  MPI_Datatype *types = malloc((size_t)(n ? n : 1) * sizeof *types);
  int *lens = malloc((size_t)(n ? n : 1) * sizeof *lens);
  MPI_Aint *at = calloc((size_t)(n ? n : 1), sizeof *at);
  if (!types || !lens || !at) {
    free(types), free(lens), free(at);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a message of %d regions", n);
  }
  int k = 0, rc = TS_OK;
  for (int i = 0; i < n && rc == TS_OK; i++)
    if (!region_empty(r[i]) && (rc = region_type(r[i], &types[k], err)) == TS_OK)
      lens[k++] = 1;
  if (rc == TS_OK && k > 0) {
    int mrc = MPI_Type_create_struct(k, lens, at, types, out);
    if (mrc == MPI_SUCCESS)
      mrc = MPI_Type_commit(out);
    if (mrc != MPI_SUCCESS)
      rc = ts__mpi_error(mrc, "MPI_Type_create_struct", __FILE__, __LINE__, err);
    else
      *count = 1;
  }
  for (int i = 0; i < k; i++)
    MPI_Type_free(&types[i]);
  free(types), free(lens), free(at);
  return rc;
}

/* The pairs of one direction: per comm rank, its regions in the order listed. */
typedef struct pair_lists {
  int *start, *count; /* per comm rank: where its regions begin in order[], and how many */
  const ts_comm_region **order;
} pair_lists;

static void pair_lists_free(pair_lists *l) {
  free(l->start);
  free(l->count);
  free(l->order);
}

static int pair_lists_make(ts_comm *c, int n, const int *peers, const ts_comm_region *r,
                           pair_lists *l, ts_error *err) {
  int P = c->size;
  l->start = calloc((size_t)P, sizeof *l->start);
  l->count = calloc((size_t)P, sizeof *l->count);
  l->order = malloc((size_t)(n ? n : 1) * sizeof *l->order);
  if (!l->start || !l->count || !l->order)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %d transfers", n);
  for (int i = 0; i < n; i++) {
    if (peers[i] < 0 || peers[i] >= P)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "transfer %d names rank %d of %d", i, peers[i],
                          P);
    int rc = r[i].base ? check_region(&r[i], err) : TS_OK;
    if (rc)
      return rc;
    l->count[peers[i]]++;
  }
  for (int p = 1; p < P; p++)
    l->start[p] = l->start[p - 1] + l->count[p - 1];
  for (int p = 0; p < P; p++)
    l->count[p] = 0;
  for (int i = 0; i < n; i++)
    l->order[l->start[peers[i]] + l->count[peers[i]]++] = &r[i];
  return TS_OK;
}

/* Whether a region goes as a single copy of its own rather than in its pair's one MPI message:
 * a large one (both ends decide alike: a region has the same size on both). Many small regions
 * of a pair, however many bytes they make together, travel in that one message. */
static bool region_reads(const ts_comm *c, const ts_comm_region *r) {
  return c->pids && !region_empty(r) && region_bytes(r) > CMA_SMALL_PAIR;
}

static int reads_of(const ts_comm *c, const pair_lists *l, int p) {
  int n = 0;
  for (int j = 0; j < l->count[p]; j++)
    n += region_reads(c, l->order[l->start[p] + j]);
  return n;
}

/* The regions of pair p (of l) that do not go as single copies, in order, into rest. */
static int pair_rest(const ts_comm *c, const pair_lists *l, int p, const ts_comm_region **rest) {
  int m = 0;
  for (int j = 0; j < l->count[p]; j++)
    if (!region_reads(c, l->order[l->start[p] + j]))
      rest[m++] = l->order[l->start[p] + j];
  return m;
}

/* Copies the non-empty regions r[0..n) into the buffer at buf one after the other (pack), or
 * back out of it. */
static void regions_copy(int n, const ts_comm_region *const *r, uint8_t *buf, bool pack) {
  for (int i = 0; i < n; i++) {
    if (region_empty(r[i]))
      continue;
    ts__runs w, *wp = &w;
    ts__runs_init(&w, r[i]);
    int64_t bytes = w.remaining;
    ts__runs_copy(1, &wp, &buf, bytes, pack);
    buf += bytes;
  }
}

/* The one message of a pair's n regions (not empty: count 0 when they all are), to or from peer:
 * bytes packed into a buffer of their own (*packed, freed by the caller; a send's already
 * filled), or, past INT_MAX bytes, the struct datatype of the regions in place. Either way the
 * message is the regions' bytes in order, so both ends choose alike or not. */
static int pair_message(int n, const ts_comm_region *const *r, bool send, int peer, ts__transfer *t,
                        uint8_t **packed, ts_error *err) {
  int64_t bytes = 0;
  for (int i = 0; i < n; i++)
    bytes += region_empty(r[i]) ? 0 : region_bytes(r[i]);
  *t = (ts__transfer){NULL, 0, MPI_BYTE, peer, send};
  if (bytes == 0)
    return TS_OK;
  if (bytes <= INT_MAX) {
    if (!(*packed = malloc((size_t)bytes)))
      return ts_error_set(err, TS_NO_MEMORY, "no memory for a message of %lld bytes",
                          (long long)bytes);
    if (send)
      regions_copy(n, r, *packed, true);
    *t = (ts__transfer){*packed, (int)bytes, MPI_BYTE, peer, send};
    return TS_OK;
  }
  int count = 0;
  MPI_Datatype type;
  int rc = pair_type(n, r, &type, &count, err);
  if (rc == TS_OK)
    *t = (ts__transfer){MPI_BOTTOM, count, type, peer, send};
  return rc;
}

/* The large regions of every pair, as single copies through cma_regions. */
static int many_reads(ts_comm *c, const pair_lists *sl, const pair_lists *rl, ts_error *err) {
  int P = c->size, ns = 0, nr = 0;
  for (int p = 0; c->pids && p < P; p++) {
    ns += reads_of(c, sl, p);
    nr += reads_of(c, rl, p);
  }
  if (ns + nr == 0)
    return TS_OK;
  ts_comm_region *regs = malloc((size_t)(ns + nr) * sizeof *regs);
  int *peers = malloc((size_t)(ns + nr) * sizeof *peers);
  int rc = TS_OK, k = 0;
  if (!regs || !peers)
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory for %d transfers", ns + nr);
  for (int side = 0; rc == TS_OK && side < 2; side++) {
    const pair_lists *l = side ? rl : sl;
    for (int p = 0; p < P; p++)
      for (int j = 0; j < l->count[p]; j++)
        if (region_reads(c, l->order[l->start[p] + j])) {
          regs[k] = *l->order[l->start[p] + j];
          peers[k++] = p;
        }
  }
  if (rc == TS_OK)
    rc = cma_regions(c, ns, peers, regs, nr, peers + ns, regs + ns, err);
  free(regs);
  free(peers);
  return rc;
}

static int exchange_many(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                         int nrecv, const int *recv_peers, const ts_comm_region *recv, int tag,
                         ts_error *err) {
  int P = c->size;
  pair_lists sl = {0}, rl = {0};
  int rc = pair_lists_make(c, nsend, send_peers, send, &sl, err);
  if (rc == TS_OK)
    rc = pair_lists_make(c, nrecv, recv_peers, recv, &rl, err);
  /* The large regions first, as single copies (their posts come before any of their waits). */
  if (rc == TS_OK)
    rc = many_reads(c, &sl, &rl, err);
  /* Then every pair's other regions as one message each way: the receives first. */
  ts__transfer *t = rc == TS_OK ? malloc(2 * (size_t)P * sizeof *t) : NULL;
  uint8_t **packed = rc == TS_OK ? calloc(2 * (size_t)P, sizeof *packed) : NULL;
  size_t most = (size_t)(nsend > nrecv ? nsend : nrecv) + 1;
  const ts_comm_region **rest = rc == TS_OK ? malloc(most * sizeof *rest) : NULL;
  if (rc == TS_OK && (!t || !rest || !packed))
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory for %d transfers", 2 * P);
  int k = 0;
  for (int side = 0; rc == TS_OK && side < 2; side++)
    for (int p = 0; rc == TS_OK && p < P; p++) {
      int m = pair_rest(c, side ? &sl : &rl, p, rest);
      if (m > 0 && (rc = pair_message(m, rest, side == 1, p, &t[k], &packed[k], err)) == TS_OK &&
          t[k].count > 0)
        k++;
    }
  if (rc == TS_OK)
    rc = ts__comm_transfers(c, k, t, tag, err);
  /* The packed messages received, into their regions (in the order they were posted). */
  for (int i = 0; rc == TS_OK && i < k; i++)
    if (!t[i].send && packed[i])
      regions_copy(pair_rest(c, &rl, t[i].peer, rest), rest, packed[i], false);
  for (int i = 0; i < k; i++)
    if (t[i].type != MPI_BYTE)
      MPI_Type_free(&t[i].type);
  for (int i = 0; packed && i < 2 * P; i++)
    free(packed[i]);
  free(packed);
  free(t);
  free(rest);
  pair_lists_free(&sl);
  pair_lists_free(&rl);
  return rc;
}

int ts_comm_alltoallw(ts_comm *c, const ts_comm_region *send, const ts_comm_region *recv,
                      ts_error *err) {
  int rc = alltoallw(c, send, recv, err);
  if (rc == TS_OK)
    ts__traffic_regions(c, c->size, NULL, send, c->size, NULL, recv);
  return rc;
}

int ts_comm_exchange_regions(ts_comm *c, int nsend, const int *send_peers,
                             const ts_comm_region *send, int nrecv, const int *recv_peers,
                             const ts_comm_region *recv, int tag, ts_error *err) {
  int rc = exchange_regions(c, nsend, send_peers, send, nrecv, recv_peers, recv, tag, err);
  if (rc == TS_OK)
    ts__traffic_regions(c, nsend, send_peers, send, nrecv, recv_peers, recv);
  return rc;
}

int ts_comm_exchange_many(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                          int nrecv, const int *recv_peers, const ts_comm_region *recv, int tag,
                          ts_error *err) {
  int rc = exchange_many(c, nsend, send_peers, send, nrecv, recv_peers, recv, tag, err);
  if (rc == TS_OK)
    ts__traffic_regions(c, nsend, send_peers, send, nrecv, recv_peers, recv);
  return rc;
}
