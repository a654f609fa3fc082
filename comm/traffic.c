/* traffic.c - the data bytes this process moved to and from other ranks, by peer class (a rank
 * on the same node, or on another): counted by the exchanges (ts_comm_exchange, the region
 * exchanges, the all-to-all-w), the broadcasts, allgathers and reduce-scatters once they
 * succeeded, and by the agreements that carried small pieces (ts_comm_agree_relay), as the
 * bytes of the pieces each pair moved however they went (MPI, single copies, through comm rank
 * 0). Relaxed atomics: the daemon's metrics endpoint reads
 * them from its own thread while the engine counts. */
#include <stdatomic.h>

#include "comm_internal.h"

static _Atomic uint64_t sent[2], received[2];

void ts_comm_traffic_get(ts_comm_traffic *out) {
  for (int p = 0; p < 2; p++) {
    out->sent[p] = atomic_load_explicit(&sent[p], memory_order_relaxed);
    out->received[p] = atomic_load_explicit(&received[p], memory_order_relaxed);
  }
}

void ts__traffic_count(const ts_comm *c, int peer, bool send, int64_t bytes) {
  if (bytes <= 0 || peer == c->rank || peer < 0 || peer >= c->size)
    return;
  const int *node_of = c->world ? c->world->node_of : NULL;
  int me = c->ranks ? c->ranks[c->rank] : c->rank, them = c->ranks ? c->ranks[peer] : peer;
  int cls = node_of && node_of[me] != node_of[them] ? TS_PEER_OTHER_NODE : TS_PEER_SAME_NODE;
  atomic_fetch_add_explicit(send ? &sent[cls] : &received[cls], (uint64_t)bytes,
                            memory_order_relaxed);
}

static int64_t region_bytes(const ts_comm_region *r) {
  if (!r->base)
    return 0;
  int64_t n = r->esize;
  for (int d = 0; d < r->ndim; d++)
    n *= r->count[d];
  return n;
}

void ts__traffic_regions(const ts_comm *c, int nsend, const int *send_peers,
                         const ts_comm_region *send, int nrecv, const int *recv_peers,
                         const ts_comm_region *recv) {
  for (int i = 0; i < nsend; i++)
    ts__traffic_count(c, send_peers ? send_peers[i] : i, true, region_bytes(&send[i]));
  for (int i = 0; i < nrecv; i++)
    ts__traffic_count(c, recv_peers ? recv_peers[i] : i, false, region_bytes(&recv[i]));
}
