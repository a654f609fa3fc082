/* ts_comm.h - the public header of libtscomm, the only code of tshard that calls MPI.
 *
 * A ts_world owns MPI for the process (initialized with a thread level, or adopted when the
 * caller initialized it), a private duplicate of MPI_COMM_WORLD and a cache of communicators per
 * ordered group of world ranks (a mesh, a line of a mesh along one dim, the union of two meshes).
 * Every MPI call runs under MPI_ERRORS_RETURN and is checked; a failure becomes TS_MPI with MPI's
 * own message, the call and file:line. Byte counts are 64-bit: transfers above INT_MAX bytes are
 * split into pieces. */
#ifndef TS_COMM_H
#define TS_COMM_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "ts_kernels.h"
#include "tshard_errors.h"

typedef struct ts_world ts_world;
typedef struct ts_comm ts_comm;

/* Initializes MPI with at least `thread_level` (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE), or
 * adopts it when it is already initialized (then ts_world_finalize does not finalize it). */
int ts_world_init(int *argc, char ***argv, int thread_level, ts_world **out, ts_error *err);
/* Frees the communicators and, when ts_world_init initialized MPI, finalizes it. */
int ts_world_finalize(ts_world **w, ts_error *err);
int ts_world_rank(const ts_world *w);
int ts_world_size(const ts_world *w);
int ts_world_thread_level(const ts_world *w);
/* How many ranks of the world run on this rank's node (this one included). */
int ts_world_node_size(const ts_world *w);
/* The node (host) of every world rank, as MPI's shared-memory split sees them: world_size
 * entries, each the lowest world rank on that rank's node. */
const int *ts_world_node_of(const ts_world *w);
/* Where each world rank runs, found by that rank at ts_world_init and known to every rank
 * (place.c). The host name is gethostname's, at most TS_HOST_NAME_MAX bytes of printable ASCII
 * (other bytes, the space among them, become '?'; "unknown" when empty); NULL for a rank outside
 * 0..size-1. The NUMA node is the system's for the CPU the rank ran on at start (sched_getcpu,
 * then /sys/devices/system/cpu/cpuN/nodeM or /sys/devices/system/node/nodeM/cpulist); -1 when
 * the system does not say (no /sys, no NUMA) and for a rank outside the world. */
#define TS_HOST_NAME_MAX 255
const char *ts_world_host_name(const ts_world *w, int rank);
int ts_world_numa_of(const ts_world *w, int rank);
/* The two steps, for tests: raw made into such a host name in out (cap bytes, NUL-terminated;
 * returns its length), and the NUMA node of a CPU under a sysfs root ("/sys"), -1 unknown. */
size_t ts_host_name_clean(const char *raw, char *out, size_t cap);
int ts_numa_node_of_cpu(const char *sys_root, int cpu);
/* Doorbells: a rank waiting for a message from a rank of its node blocks until that rank rings
 * it, instead of napping (doorbell.c). ts_world_bell_seq reads this rank's bell; after testing
 * its condition, a waiter calls ts_world_bell_wait with what it read, which returns when the
 * bell was rung since, or after ns nanoseconds. ts_world_bell_ring rings a world rank (its own
 * rank too: how another thread of the process wakes the waiter); ranks on other nodes have no
 * bell (nothing happens). ts_world_bells_local: every rank of the world has a bell, so waits
 * for messages of any rank end when rung. Thread-safe; no MPI call. */
uint32_t ts_world_bell_seq(const ts_world *w);
void ts_world_bell_ring(const ts_world *w, int rank);
void ts_world_bell_wait(const ts_world *w, uint32_t seen, int64_t ns);
bool ts_world_bells_local(const ts_world *w);
/* The whole world (a private duplicate of MPI_COMM_WORLD). */
ts_comm *ts_world_comm(ts_world *w);
/* clock.c: this rank's monotonic clock (ts_wait_now_ns) against rank 0's: rank 0's time of an
 * instant of this rank is the instant plus *offset_ns, within half of *rtt_ns (the best round
 * trip of the measurement; both 0 on rank 0). Collective over the world. */
int ts_world_clock_offset(ts_world *w, int64_t *offset_ns, int64_t *rtt_ns, ts_error *err);

/* The communicator of an ordered list of world ranks: comm rank i is ranks[i]. Collective over
 * those ranks (only they call it), cached: the second call with the same list is free. The caller
 * must be in the list. */
int ts_comm_group(ts_world *w, const int *ranks, int n, ts_comm **out, ts_error *err);
/* The line of a mesh (row-major over ranks) through the caller's position along mesh dim `dim`:
 * the ranks that differ from the caller only in that coordinate, ordered by it. */
int ts_comm_mesh_line(ts_world *w, int mesh_ndim, const int64_t *mesh_shape, const int *ranks,
                      int dim, ts_comm **out, ts_error *err);
int ts_comm_rank(const ts_comm *c);
int ts_comm_size(const ts_comm *c);
/* The world rank of comm rank i. */
int ts_comm_world_rank(const ts_comm *c, int i);
MPI_Comm ts_comm_handle(const ts_comm *c);
/* How many communicators the world has cached (for tests). */
int ts_world_cached_comms(const ts_world *w);

/* Every rank passes its status and error; all return the status of the lowest failing comm rank
 * with the same message ("rank R: ..."), or TS_OK when none failed. An agreement has a deadline:
 * when a rank does not answer within the world's agreement timeout, every rank that still
 * answers returns TIMEOUT naming it ("rank 2 did not answer the agreement of operation 17
 * within 60 s"; when comm rank 0 is the silent one, the others name it after twice the
 * timeout). The communicator stays usable for later agreements. */
int ts_comm_agree(ts_comm *c, int status, const ts_error *local, ts_error *err);
/* The same agreement, in the same exchange also taking the maximum over ranks of n values (in
 * place): how the executor agrees on success and on its round counts at once. */
int ts_comm_agree_max(ts_comm *c, int status, const ts_error *local, int64_t *values, int n,
                      ts_error *err);

/* Small pieces can ride on an agreement (agree.c). A rank offers the pieces it would send, packed
 * per destination comm rank (parts ascending by rank, their bytes concatenated in out_data in
 * that order), in a message of at most TS_COMM_RELAY_MESSAGE_MAX bytes with the agreement's own
 * (within Open MPI's eager sends on one node, so no relayed message waits for its sender). When
 * every rank of the communicator offered and the agreement passes, comm rank 0 forwards the
 * pieces in the verdicts: `relayed` is then true on every rank, and nin parts (by source comm
 * rank, ascending) hold this rank's pieces, in_data their bytes in order (8-byte aligned when
 * every part's size is a multiple of 8). Otherwise relayed is false on every rank, and each sends
 * its own pieces. r must start zeroed; ts_comm_relay_clear frees what an agreement filled in. */
#define TS_COMM_RELAY_MESSAGE_MAX 4000
typedef struct ts_comm_relay_part {
  int32_t rank; /* destination in an offer, source in what arrived */
  int32_t pad;
  int64_t bytes;
} ts_comm_relay_part;
typedef struct ts_comm_relay {
  bool offer;
  int nout;
  const ts_comm_relay_part *out;
  const void *out_data;
  bool relayed;
  int nin;
  const ts_comm_relay_part *in;
  const char *in_data;
  void *in_msg;
} ts_comm_relay;
/* ts_comm_agree_max, with r (NULL: no offer) as above. */
int ts_comm_agree_relay(ts_comm *c, int status, const ts_error *local, int64_t *values, int n,
                        ts_comm_relay *r, ts_error *err);
void ts_comm_relay_clear(ts_comm_relay *r);

#define TS_AGREE_TIMEOUT_DEFAULT_MS 300000
/* How long an agreement waits for every rank (timeout_ms <= 0: the default above). */
void ts_world_set_agree_timeout(ts_world *w, int timeout_ms);
/* What the agreements decide now, named in their timeout messages ("operation 17"); NULL or
 * "": "an operation". */
void ts_world_set_agree_label(ts_world *w, const char *label);
/* Fault injection for tests: this rank's next agreement starts ms late, as if the rank had
 * stopped answering for that long. */
void ts_world_delay_next_agreement(ts_world *w, int ms);
/* Agreements entered on c so far (every member counts alike): for tests of how many an operation
 * takes. */
uint64_t ts_comm_agreements(const ts_comm *c);

typedef enum { TS_COMM_MAX, TS_COMM_MIN, TS_COMM_SUM } ts_comm_op;
int ts_comm_allreduce_i64(ts_comm *c, int64_t *values, int n, ts_comm_op op, ts_error *err);
int ts_comm_barrier(ts_comm *c, ts_error *err);
int ts_comm_bcast(ts_comm *c, void *buf, int64_t bytes, int root, ts_error *err);
/* A pipelined broadcast along the chain root, root + 1, ... (comm ranks, wrapping): buf goes in
 * pieces of `piece` bytes (<= 0: 1 GiB), each rank forwarding a piece to the next while it
 * receives the following one, so each link between neighbours carries the bytes once and the
 * whole takes about one transfer plus a piece per hop. */
int ts_comm_bcast_chain(ts_comm *c, void *buf, int64_t bytes, int root, int64_t piece,
                        ts_error *err);
/* In place: every rank's contribution already sits at displs[rank] in buf. */
int ts_comm_allgatherv(ts_comm *c, void *buf, const int64_t *counts, const int64_t *displs,
                       ts_error *err);
/* The rate of the link between members a and b, in bytes per second: a sends b `bytes` (twice,
 * the faster run kept, less a one-byte round trip), and broadcasts the rate to every member, who
 * all call it. */
int ts_comm_link_rate(ts_comm *c, int a, int b, int64_t bytes, double *bytes_per_s, ts_error *err);
/* Typed reductions (all dtypes; f16/bf16 and max/min through the project's reduce kernel).
 * sbuf == NULL reduces in place in rbuf. */
int ts_comm_allreduce(ts_comm *c, const void *sbuf, void *rbuf, int64_t n, ts_dtype dt,
                      ts_reduce_op op, ts_error *err);
/* counts[i]: elements comm rank i receives; sbuf holds the blocks of all ranks in rank order. */
int ts_comm_reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int *counts, ts_dtype dt,
                           ts_reduce_op op, ts_error *err);
/* The data bytes this process moved to and from other ranks since it started, by the peer's
 * class (traffic.c): the pieces of ts_comm_exchange, the region exchanges, the all-to-all-w,
 * those relayed on agreements, broadcasts (as from the root), allgathers and reduce-scatters,
 * however they went; the agreements' own messages and allreduces are not counted. Any
 * thread may read them. */
enum { TS_PEER_SAME_NODE, TS_PEER_OTHER_NODE };
typedef struct ts_comm_traffic {
  uint64_t sent[2], received[2]; /* by TS_PEER_* */
} ts_comm_traffic;
void ts_comm_traffic_get(ts_comm_traffic *out);

/* Point-to-point: posts every receive and send (peers are comm ranks), then waits for all. */
int ts_comm_exchange(ts_comm *c, int nsend, const int *send_peers, void *const *send_bufs,
                     const int64_t *send_bytes, int nrecv, const int *recv_peers,
                     void *const *recv_bufs, const int64_t *recv_bytes, int tag, ts_error *err);

/* A strided region of memory: elements of `esize` bytes at base + sum(i[d] * stride[d]) bytes,
 * 0 <= i[d] < count[d], taken row-major (dim 0 slowest); ndim 0 is one element, base NULL is no
 * region. The two ends of a transfer must hold the same number of elements, in any strides. At
 * most INT_MAX bytes per region: larger pieces go in chunks. */
typedef struct ts_comm_region {
  void *base;
  int ndim;
  int64_t esize;
  int64_t count[TS_MAX_DIMS];
  int64_t stride[TS_MAX_DIMS];
} ts_comm_region;

/* False for a region MPI cannot be trusted to move: Open MPI 4.1 reads a dim of 1-byte elements
 * at stride -1 as if it ran forwards. Such regions must be packed first. */
bool ts_comm_region_supported(const ts_comm_region *r);

/* Every comm rank i receives send[i] of each rank into its recv[i] (a region per comm rank,
 * base NULL for none), as one all-to-all-w of derived datatypes: MPI reads and writes the strided
 * regions in place. Collective over c. */
int ts_comm_alltoallw(ts_comm *c, const ts_comm_region *send, const ts_comm_region *recv,
                      ts_error *err);
/* Like ts_comm_exchange_regions, where a peer may appear any number of times (send_peers and
 * recv_peers are comm ranks): the regions between two ranks, in the order listed (both ends list
 * a pair's regions in the same order), go as one message each way (their bytes packed into one
 * buffer, which costs less than building a datatype per region each time), or, when the pair is
 * large and single copies work, as single copies each. How the many tensors of a batch move in
 * one exchange. */
int ts_comm_exchange_many(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                          int nrecv, const int *recv_peers, const ts_comm_region *recv, int tag,
                          ts_error *err);
/* Whether region exchanges over c go as single copies between the processes (every rank on one
 * node and process_vm_readv allowed: cma.c); the same on every rank of c. */
bool ts_comm_single_copy(const ts_comm *c);
/* Whether, in addition, every rank of c shares its pool's buffers and maps the others' (cma.c):
 * a region in a sender's buffers is then copied by its receiver with plain loads. */
bool ts_comm_shared_buffers(const ts_comm *c);
/* A client process a single copy acts on (proc.c): its pid, the uid the kernel reported with
 * its request, and its start time (clock ticks after boot, /proc/PID/stat), which together name
 * one process even after its pid went to another. */
typedef struct ts_comm_proc {
  int64_t pid;
  uint32_t uid;
  uint64_t start;
} ts_comm_proc;
/* A pidfd of pid (-1 with errno set when it cannot be had). */
int ts_comm_proc_open(int64_t pid);
/* Whether the process of a pidfd has not exited (false for -1). */
bool ts_comm_proc_alive(int pidfd);
/* The start time of the process of pidfd, whose pid is pid: 0, or -1 when it cannot be read or
 * the process exited meanwhile. */
int ts_comm_proc_start(int64_t pid, int pidfd, uint64_t *start);
/* Pins the process p names: *pidfd open on it when it is alive, has p's start time and all its
 * uids (real, effective, saved) are p's uid. Else -1 and TS_NOT_FOUND (gone), TS_AUTH (another
 * process holds the pid now) or TS_NO_DIRECT (its uids differ; /proc or pidfds unavailable). */
int ts_comm_proc_pin(const ts_comm_proc *p, int *pidfd, ts_error *err);
/* Closes the pidfd of ts_comm_proc_pin (-1: nothing) and returns rc, or TS_NOT_FOUND when rc was
 * TS_OK and the process exited meanwhile (what was copied may come from another process). */
int ts_comm_proc_unpin(const ts_comm_proc *p, int *pidfd, int rc, ts_error *err);
/* One copy between a region of this process and a region of a client process of this node
 * (`remote`'s base is an address there), pinned around the copy (ts_comm_proc_pin): reads
 * remote into local (process_vm_readv), or writes local into remote. Both regions hold the same
 * bytes. Errors name the process and the reason (those of the pin; EPERM: ptrace rules;
 * EFAULT: not mapped there). Not collective. */
int ts_comm_process_copy(const ts_comm_proc *proc, bool write, const ts_comm_region *local,
                         const ts_comm_region *remote, ts_error *err);
/* n such copies (local[i] with remote[i]) with the process pinned once around all of them; the
 * first that fails stops them, its index in *failed (-1 when none did). */
int ts_comm_process_copy_many(const ts_comm_proc *proc, bool write, int n,
                              const ts_comm_region *local, const ts_comm_region *remote,
                              int *failed, ts_error *err);
/* Point-to-point regions: posts every receive and send (peers are comm ranks), then waits. */
int ts_comm_exchange_regions(ts_comm *c, int nsend, const int *send_peers,
                             const ts_comm_region *send, int nrecv, const int *recv_peers,
                             const ts_comm_region *recv, int tag, ts_error *err);

#endif
