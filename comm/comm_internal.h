/* comm_internal.h - structures, the MPI check macros and the transfer loop shared by world.c,
 * collectives.c and regions.c. */
#ifndef TS_COMM_INTERNAL_H
#define TS_COMM_INTERNAL_H

#include "ts_comm.h"
#include "ts_wait.h"

/* A rank's shared buffer arena (ts_pool_share) as every rank sees it: where that rank maps it
 * (base) and its size, the same on every rank, and where this rank maps it (map; NULL for this
 * rank's own). */
typedef struct ts__arena {
  uint64_t base, size;
  const uint8_t *map;
} ts__arena;

struct ts_comm {
  MPI_Comm comm;
  int rank, size;
  int *ranks;              /* world rank of each comm rank */
  bool owned;              /* freed by the world (false for the world's own entry until finalize) */
  const int *pids;         /* process id of each world rank when single-copy reads work (cma.c) */
  const ts__arena *arenas; /* per world rank when every rank maps every other's arena */
  bool hosts; /* the members run on several nodes: large reductions go around a ring (ring.c) */
  struct ts_world *world;
  uint64_t agreements; /* agreements entered on this communicator (every member counts alike) */
  struct ts_comm *next;
};

/* A send an agreement gave up waiting for (its peer stopped answering): its buffer stays until
 * MPI is done with it, at a later agreement or at finalize. */
typedef struct ts__orphan {
  MPI_Request req;
  void *buf;
} ts__orphan;

struct ts_world {
  bool initialized_mpi; /* we called MPI_Init_thread, so we finalize */
  int rank, size, thread_level;
  int node_size;     /* ranks of the world on this rank's node (cma.c) */
  int *node_of;      /* per world rank: the lowest world rank on its node (world.c) */
  int *numa_of;      /* per world rank: its NUMA node, -1 unknown (place.c) */
  int64_t *host_off; /* per world rank: where its host name starts in host_names */
  char *host_names;  /* every rank's host name, NUL-terminated, in rank order */
  ts_comm world;     /* duplicate of MPI_COMM_WORLD */
  ts_comm *cache;    /* group communicators */
  int ncached;
  int *pids;            /* see ts__cma_init; NULL when regions go through MPI */
  ts__arena *arenas;    /* see ts__cma_init; NULL when the buffers are not shared */
  int agree_timeout_ms; /* how long an agreement waits for every rank */
  int agree_delay_ms;   /* fault injection: the next agreement starts this late */
  char agree_label[96]; /* what the agreements decide now, for timeout messages */
  ts__orphan *orphans;
  int norphans, caporphans;
  /* Doorbells (doorbell.c): each world rank's bell on this node, NULL for ranks elsewhere (the
   * array NULL without a shared window); bells_local when every rank of the world has one. */
  struct ts__bell **bells;
  MPI_Win bell_win;
  MPI_Comm bell_node;
  bool bells_local;
};

/* Keeps an unfinished send of an agreement until MPI is done with it (takes buf; on no memory
 * cancels the send instead). ts__orphans_retire frees the finished ones (all, cancelling the
 * rest, when `all`). */
void ts__orphan_keep(ts_world *w, MPI_Request req, void *buf);
void ts__orphans_retire(ts_world *w, bool all);

/* Where the ranks run (place.c): found and exchanged by ts_world_init (collective over the
 * world; on failure ts__place_free still frees what was made), freed by ts_world_finalize. */
int ts__place_init(ts_world *w, ts_error *err);
void ts__place_free(ts_world *w);

/* The doorbells (doorbell.c): made by ts_world_init (collective over the world), freed by
 * ts_world_finalize before the world's communicator. */
int ts__doorbell_init(ts_world *w, ts_error *err);
void ts__doorbell_free(ts_world *w);
/* Whether every rank of c has a bell (then its waits block until rung, else they nap). */
bool ts__comm_bells(const ts_comm *c);
/* Rings comm rank r of c (nothing for a rank without a bell). */
void ts__comm_ring(ts_comm *c, int comm_rank);
/* One pause of a wait on c under the waiter: yields while spinning, else blocks on this rank's
 * bell (ending at a ring after `seen` was read) for the waiter's nap. TS_TIMEOUT past its
 * deadline. */
int ts__comm_pause(ts_comm *c, ts_waiter *wt, uint32_t seen);
/* MPI_Waitall of requests whose messages are small (within the eager limit: they travel whole
 * within their Isend) and whose senders ring this rank after posting them: where every rank of
 * c has a bell, tests and blocks on the bell between tests instead of spinning in MPI. */
int ts__comm_wait_rung(ts_comm *c, int k, MPI_Request *req);

/* traffic.c: counts bytes moved between this rank and comm rank peer of c (nothing for itself),
 * under the peer's class; the regions form counts every region of an exchange that succeeded
 * (peers NULL: region i is comm rank i's). */
void ts__traffic_count(const ts_comm *c, int peer, bool send, int64_t bytes);
void ts__traffic_regions(const ts_comm *c, int nsend, const int *send_peers,
                         const ts_comm_region *send, int nrecv, const int *recv_peers,
                         const ts_comm_region *recv);

/* Maps an MPI error code to TS_MPI with MPI's message, the call and where it was made. */
int ts__mpi_error(int mpi_rc, const char *call, const char *file, int line, ts_error *err);

/* Checks an MPI call; on failure sets err and returns from the calling function. */
#define TS_MPI_CHECK(call, err)                                                                    \
  do {                                                                                             \
    int ts_mpi_rc_ = (call);                                                                       \
    if (ts_mpi_rc_ != MPI_SUCCESS)                                                                 \
      return ts__mpi_error(ts_mpi_rc_, #call, __FILE__, __LINE__, (err));                          \
  } while (0)

/* Checks an MPI call; on failure sets err, stores the status in rc and jumps to label. */
#define TS_MPI_TRY(call, err, rc, label)                                                           \
  do {                                                                                             \
    int ts_mpi_rc_ = (call);                                                                       \
    if (ts_mpi_rc_ != MPI_SUCCESS) {                                                               \
      (rc) = ts__mpi_error(ts_mpi_rc_, #call, __FILE__, __LINE__, (err));                          \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

/* One point-to-point transfer of `count` items of `type` at buf (MPI_BOTTOM with a type placed
 * at absolute addresses), to or from comm rank `peer`. */
typedef struct ts__transfer {
  void *buf;
  int count;
  MPI_Datatype type;
  int peer;
  bool send;
} ts__transfer;

/* Posts the n transfers in order (put the receives first), then waits for all of them. When a
 * post fails, the ones already posted are waited for before returning (their buffers may go). */
int ts__comm_transfers(ts_comm *c, int n, const ts__transfer *t, int tag, ts_error *err);

/* A region's dims without those of size 1, and with dims that continue each other merged (outer
 * stride = inner count x inner stride), outermost first, into cnt and str; returns their number.
 * (regions.c; the datatypes and the single-copy runs both start from it.) */
int ts__region_fold(const ts_comm_region *r, int64_t *cnt, int64_t *str);

/* A region as contiguous runs of `run` bytes, walked in order (regions.c): ts__runs_take gives
 * the next len bytes, at most what is left of the current run. */
typedef struct ts__runs {
  int n; /* outer dims */
  int64_t cnt[TS_MAX_DIMS], str[TS_MAX_DIMS], idx[TS_MAX_DIMS];
  int64_t run, nruns, left, remaining;
  uint8_t *at; /* the current run */
} ts__runs;

void ts__runs_init(ts__runs *w, const ts_comm_region *r);

/* Inline: the copies of short runs call it once a run. */
static inline uint8_t *ts__runs_take(ts__runs *w, int64_t len) {
  uint8_t *p = w->at + (w->run - w->left);
  w->left -= len;
  w->remaining -= len;
  if (w->left == 0 && w->remaining > 0) { /* the next run: an outer index that does not wrap */
    int d = w->n - 1;
    while (++w->idx[d] == w->cnt[d]) {
      w->idx[d] = 0;
      w->at -= (w->cnt[d] - 1) * w->str[d];
      d--;
    }
    w->at += w->str[d];
    w->left = w->run;
  }
  return p;
}

/* Moves the next n bytes (at most their remaining) of k walkers into their contiguous buffers
 * buf[m] (pack) or out of them into the runs: around the caches when the regions are larger
 * than they keep. The walkers move in step: the same run shape and the same bytes taken so far
 * (k regions in the same rows of one tensor go row by row, each row's runs in turn). */
void ts__runs_copy(int k, ts__runs *const *w, uint8_t *const *buf, int64_t n, bool pack);

/* Single-copy region transfers (cma.c). ts__cma_init (collective over the world, after the node
 * map) sets w->pids when every rank of this node can read the others' memory (the process of
 * each rank of the node; 0 for the ranks elsewhere), w->world.pids when the world is that one
 * node, and w->arenas when, in addition, every rank shares its buffers and maps every other
 * rank's arena. A communicator reads single copies when all its ranks are on this node
 * (ts_comm_group). ts__cma_exchange moves the
 * non-empty regions listed; the pairs it leaves to MPI come back flagged in send_mpi/recv_mpi. */
int ts__cma_init(ts_world *w, ts_error *err);
/* Unmaps the other ranks' arenas and frees the tables of ts__cma_init. */
void ts__cma_free(ts_world *w);
/* Reduce-scatter on one node (c->pids set): every rank reads its block from each rank's sbuf
 * with process_vm_readv (or straight from its mapping of that rank's shared buffers), in rank
 * order, and reduces it into rbuf with the kernel (so the sum's
 * order is the same whatever the load); one agreement at the end keeps every sbuf alive until
 * all reads are done and gives every rank the same status. */
int ts__cma_reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int *counts, ts_dtype dt,
                           ts_reduce_op op, ts_error *err);
int ts__cma_exchange(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                     bool *send_mpi, int nrecv, const int *recv_peers, const ts_comm_region *recv,
                     bool *recv_mpi, ts_error *err);

/* Reductions around a ring ordered host by host (ring.c), for communicators that span hosts:
 * counts in elements per comm rank (blocks in rank order, as MPI_Reduce_scatter); sbuf == NULL
 * reduces the all-reduce in place in rbuf. */
int ts__ring_reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int64_t *counts,
                            ts_dtype dt, ts_reduce_op op, ts_error *err);
int ts__ring_allreduce(ts_comm *c, const void *sbuf, void *rbuf, int64_t n, ts_dtype dt,
                       ts_reduce_op op, ts_error *err);

/* Typed reductions: the MPI datatype and op for a dtype and reduce op (built once per world). */
int ts__comm_types_init(ts_error *err);
int ts__comm_types_free(ts_error *err);
int ts__comm_reduce_types(ts_dtype dt, ts_reduce_op op, MPI_Datatype *type, MPI_Op *mop,
                          ts_error *err);

#endif
