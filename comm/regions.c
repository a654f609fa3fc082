/* regions.c - transfers of strided regions described to MPI as derived datatypes.
 *
 * A region is elements at base + sum(i[d] * stride[d]), enumerated row-major. Each becomes one
 * MPI datatype (nested hvectors placed at the region's absolute address, used with MPI_BOTTOM),
 * so MPI reads the source slice and writes the target slice in place: no pack and unpack copies
 * around the transfer, and no staging buffer. A region on one side meets a region of the same
 * element count on the other, whatever their strides: a strided slice can feed a packed buffer. */
#include <limits.h>
#include <stdlib.h>

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

static int cma_regions(ts_comm *c, int nsend, const int *send_peers,
                       const ts_comm_region *send, int nrecv, const int *recv_peers,
                       const ts_comm_region *recv, ts_error *err);

int ts_comm_alltoallw(ts_comm *c, const ts_comm_region *send, const ts_comm_region *recv,
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
static int cma_regions(ts_comm *c, int nsend, const int *send_peers,
                       const ts_comm_region *send, int nrecv, const int *recv_peers,
                       const ts_comm_region *recv, ts_error *err) {
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

int ts_comm_exchange_regions(ts_comm *c, int nsend, const int *send_peers,
                             const ts_comm_region *send, int nrecv, const int *recv_peers,
                             const ts_comm_region *recv, int tag, ts_error *err) {
  if (c->pids)
    return cma_regions(c, nsend, send_peers, send, nrecv, recv_peers, recv, err);
  return mpi_regions(c, nsend, send_peers, send, nrecv, recv_peers, recv, tag, err);
}
