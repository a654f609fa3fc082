/* cma.c - single-copy transfers of strided regions between the processes of one node.
 *
 * MPI moves a region described by a derived datatype (regions.c) in two copies through shared
 * memory: Open MPI's single-copy mechanism (CMA) only takes contiguous buffers on both sides. When
 * the ranks of a node can read each other's memory with process_vm_readv (checked once per node,
 * collectively, by ts__cma_init), the region transfers of a communicator whose ranks all run on
 * that node (the world's own when it is one node, a host's group or mesh line when it spans
 * several) go instead as one copy between the two regions, both described as lists of
 * contiguous runs:
 *
 *   1. the two ends of every pair send each other the description of their region (small MPI
 *      messages);
 *   2. both decide alike who copies: the side whose region has more runs reads the other's
 *      (process_vm_readv) or writes into it (process_vm_writev), since the kernel pins the far
 *      side's pages, cheapest in few long runs; on a tie, the side with fewer pairs in this
 *      exchange (so a root scattering to or gathering from many peers lets them copy at once),
 *      then the receiver. A copier whose runs are short against the far side's long ones packs
 *      them through a staging buffer that stays in cache (copy_staged), since the kernel's cost
 *      per iovec outweighs a short run's copy; its pairs whose short runs lie in the same rows
 *      (a tensor's column blocks for several peers) share one buffer and go row by row, so the
 *      rows are read once rather than once per peer (group_pairs); pairs with runs under 1 KiB
 *      on one side and not long on the other go through MPI afterwards (regions.c);
 *   3. the copier tells the other side its status; nobody returns before its pairs are done, so
 *      every region stays valid while it is copied.
 *
 * All messages are posted before any wait, so no order of ranks can deadlock; a copy that fails
 * is reported by the copier and, through its status, by the other side. The check runs once per
 * node (the environment variable TSHARD_CMA=0 turns the path off).
 *
 * Shared buffers: with single copies on, every rank may also share its pool's buffers
 * (ts_pool_share: they come from one memory file) and map every other rank's file read-only,
 * once per world that is one node (share_wanted says when; any rank that cannot leaves it off
 * everywhere). A pair
 * whose sender's region lies in the sender's file is then copied by the receiver with plain
 * loads from its mapping (memcpy run by run): one copy in user space, every receiver at work at
 * once, and no system call per run, so short runs need MPI no more. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm_internal.h"
#include "ts_pool.h"

#define CMA_DESC_TAG 31744
#define CMA_ACK_TAG 31748 /* and 31749; regions.c's MPI fallback uses 31746 */
/* A pair whose runs are shorter than this on one side, and not long (CMA_STAGE_RUN) on the
 * other, goes through MPI: the kernel would take the far side's runs an iovec each. */
#define CMA_MIN_RUN 1024
#define CMA_IOV 512
/* A copier whose own runs are shorter than CMA_STAGE_RUN, against long runs on the far side,
 * copies through a staging buffer of CMA_STAGE_BYTES that stays in cache: it packs its runs
 * there and writes them out in one far run per call (or reads and unpacks). The kernel's cost
 * per iovec (about 0.2 us here) outweighs a copy of a run that short: 30 MB in runs of 768 bytes
 * took 14 ms iovec by iovec and 8.5 ms staged; MPI's pack and unpack took 5.5 ms, but on two
 * cores at once (11 ms of CPU). */
#define CMA_STAGE_RUN 4096
#define CMA_STAGE_BYTES ((int64_t)1 << 20)
/* At most this many pairs share a staging buffer (copy_staged). */
#define CMA_GROUP 8

enum { ACK_DONE = 0, ACK_USE_MPI = 1, ACK_FAILED = 2 };

static volatile uint64_t probe_word;
static const uint64_t PROBE_MAGIC = 0x7c5a3e1d9b24f681ull;

/* Address space of each rank's arena: at most ARENA_SPACE over all the arenas a rank maps (its
 * own and every other rank's of the node), and at most ARENA_MAX each. */
#define ARENA_SPACE ((uint64_t)1 << 45)
#define ARENA_MAX ((uint64_t)1 << 40)

static void arenas_free(ts_world *w) {
  for (int r = 0; w->arenas && r < w->size; r++)
    if (w->arenas[r].map)
      munmap((void *)w->arenas[r].map, (size_t)w->arenas[r].size);
  free(w->arenas);
  w->arenas = NULL;
  w->world.arenas = NULL;
}

/* Maps rank r's arena (described by a) read-only, and checks the word r wrote at its start. */
static const uint8_t *arena_map(int64_t pid, int64_t fd, const ts__arena *a) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)pid, (long long)fd);
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0)
    return NULL;
  void *m = mmap(NULL, (size_t)a->size, PROT_READ, MAP_SHARED | MAP_NORESERVE, f, 0);
  close(f);
  if (m == MAP_FAILED)
    return NULL;
  madvise(m, (size_t)a->size, MADV_DONTFORK);
  if (*(const volatile uint64_t *)m != (PROBE_MAGIC ^ (uint64_t)pid)) {
    munmap(m, (size_t)a->size);
    return NULL;
  }
  return m;
}

/* Whether this rank shares its buffers: TSHARD_SHARED_BUFFERS=1 or 0 decides; otherwise they are
 * shared when the system gives shared memory huge pages (shmem_enabled: always, within_size,
 * advise or force). With 4 KiB pages a new shared buffer costs about six times what a private
 * one with huge pages costs to fill (MADV_POPULATE_WRITE: 0.56 against 0.1 us per 4 KiB here)
 * and far more to give back (0.2 us a page against next to nothing), which the faster
 * exchanges of short runs do not repay for tensors used once. */
static bool share_wanted(void) {
  const char *env = getenv("TSHARD_SHARED_BUFFERS");
  if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0))
    return env[0] == '1';
  char line[256] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (f) {
    if (!fgets(line, sizeof line, f))
      line[0] = 0;
    fclose(f);
  }
  return strstr(line, "[always]") || strstr(line, "[within_size]") || strstr(line, "[advise]") ||
         strstr(line, "[force]");
}

/* Shares this rank's buffers and maps every other rank's arena (collective over the world): sets
 * w->arenas when every rank did, else leaves the buffers unshared as far as the exchanges go. */
static int arenas_init(ts_world *w, ts_error *err) {
  int ok = share_wanted();
  typedef struct desc {
    int64_t fd;
    uint64_t base, size;
  } desc;
  desc me = {-1, 0, 0};
  ts_pool_shared sh;
  ts_error e;
  uint64_t space = ARENA_SPACE / (uint64_t)w->size;
  if (ok && ts_pool_share(space < ARENA_MAX ? space : ARENA_MAX, &sh, &e) == TS_OK) {
    me = (desc){sh.fd, sh.base, sh.size};
    *(volatile uint64_t *)(uintptr_t)sh.base = PROBE_MAGIC ^ (uint64_t)getpid();
  }
  ok = ok && me.fd >= 0;
  desc *all = malloc((size_t)w->size * sizeof *all);
  ts__arena *a = calloc((size_t)w->size, sizeof *a);
  if (!all || !a) {
    free(all);
    free(a);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the arena table of %d ranks", w->size);
  }
  int rc =
      MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, w->world.comm);
  for (int r = 0; rc == MPI_SUCCESS && r < w->size; r++) {
    a[r].base = all[r].base;
    a[r].size = all[r].size;
    if (ok && r != w->rank)
      ok = all[r].fd >= 0 && (a[r].map = arena_map(w->pids[r], all[r].fd, &a[r])) != NULL;
  }
  if (rc == MPI_SUCCESS)
    rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, w->world.comm);
  free(all);
  w->arenas = a;
  if (rc != MPI_SUCCESS || !ok) {
    arenas_free(w); /* unmaps what was mapped */
    return rc == MPI_SUCCESS
               ? TS_OK
               : ts__mpi_error(rc, "the exchange of the shared arenas", __FILE__, __LINE__, err);
  }
  w->world.arenas = a;
  return TS_OK;
}

/* Agrees `ok` over the ranks of this node (logical and); an MPI failure is returned. */
static int node_and(MPI_Comm node, int *ok, ts_error *err) {
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ok, 1, MPI_INT, MPI_LAND, node), err);
  return TS_OK;
}

int ts__cma_init(ts_world *w, ts_error *err) {
  w->pids = NULL;
  w->world.pids = NULL;
  const char *env = getenv("TSHARD_CMA");
  MPI_Comm node;
  TS_MPI_CHECK(MPI_Comm_split_type(w->world.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
               err);
  int nsize = 0;
  MPI_Comm_size(node, &nsize);
  w->node_size = nsize > 0 ? nsize : 1;
  int ok = nsize > 1 && !(env && strcmp(env, "0") == 0);
  typedef struct who {
    int64_t pid;
    uint64_t addr;
  } who;
  who me = {(int64_t)getpid(), (uint64_t)(uintptr_t)&probe_word};
  probe_word = PROBE_MAGIC ^ (uint64_t)me.pid;
  who *all = malloc((size_t)w->size * sizeof *all);
  if (!all) {
    MPI_Comm_free(&node);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the process table of %d ranks", w->size);
  }
  int rc =
      MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, w->world.comm);
  if (rc != MPI_SUCCESS) {
    free(all);
    MPI_Comm_free(&node);
    return ts__mpi_error(rc, "MPI_Allgather", __FILE__, __LINE__, err);
  }
  /* Every rank reads a word of each other rank of its node; the node agrees. */
  for (int r = 0; ok && r < w->size; r++) {
    if (w->node_of[r] != w->node_of[w->rank])
      continue;
    uint64_t got = 0;
    struct iovec l = {&got, sizeof got}, rem = {(void *)(uintptr_t)all[r].addr, sizeof got};
    ok = process_vm_readv((pid_t)all[r].pid, &l, 1, &rem, 1, 0) == (ssize_t)sizeof got &&
         got == (PROBE_MAGIC ^ (uint64_t)all[r].pid);
  }
  int trc = node_and(node, &ok, err);
  if (trc == TS_OK && ok && (w->pids = malloc((size_t)w->size * sizeof *w->pids)) != NULL)
    for (int r = 0; r < w->size; r++) /* 0 (no process) for the ranks of other nodes */
      w->pids[r] = w->node_of[r] == w->node_of[w->rank] ? (int)all[r].pid : 0;
  free(all);
  /* A rank without memory for the table keeps MPI; tell the others of its node. */
  ok = w->pids != NULL;
  if (trc == TS_OK)
    trc = node_and(node, &ok, err);
  MPI_Comm_free(&node);
  if (trc != TS_OK || !ok) {
    free(w->pids);
    w->pids = NULL;
  }
  if (trc != TS_OK)
    return trc;
  /* The world's own communicator reads single copies only when it is one node, and so do the
   * shared arenas, which every rank maps of every other. */
  if (!w->pids || nsize != w->size)
    return TS_OK;
  w->world.pids = w->pids;
  return arenas_init(w, err);
}

void ts__cma_free(ts_world *w) {
  arenas_free(w);
  free(w->pids);
  w->pids = NULL;
  w->world.pids = NULL;
}

static int64_t region_total(const ts_comm_region *r) {
  int64_t n = r->esize;
  for (int d = 0; d < r->ndim; d++)
    n *= r->count[d];
  return n;
}

bool ts_comm_single_copy(const ts_comm *c) { return c && c->pids; }

bool ts_comm_shared_buffers(const ts_comm *c) { return c && c->arenas; }

static int add_iov(struct iovec *v, int n, uint8_t *p, int64_t len) {
  if (n > 0 && (uint8_t *)v[n - 1].iov_base + v[n - 1].iov_len == p) {
    v[n - 1].iov_len += (size_t)len;
    return n;
  }
  v[n].iov_base = p;
  v[n].iov_len = (size_t)len;
  return n + 1;
}

/* Whether a region's runs are long enough for the kernel to take them one iovec each at little
 * cost (or so few that their count does not matter). */
static bool runs_long(const ts__runs *w) { return w->run >= CMA_STAGE_RUN || w->nruns <= 4; }

/* Whether a copier with local runs l and far runs r copies through a staging buffer: short runs
 * here against long ones there. */
static bool staged_way(const ts__runs *l, const ts__runs *r) {
  return !runs_long(l) && runs_long(r);
}

static int copy_failed(pid_t pid, int peer, bool write, int64_t want, ssize_t got, ts_error *err) {
  const char *how = got < 0 ? strerror(errno) : "a partial copy";
  if (peer < 0)
    return ts_error_set(err, TS_IO, "%s %lld bytes %s the client's memory (process %d): %s",
                        write ? "writing" : "reading", (long long)want, write ? "to" : "from",
                        (int)pid, how);
  return ts_error_set(err, TS_IO, "%s %lld bytes %s rank %d (process %d): %s",
                      write ? "writing" : "reading", (long long)want, write ? "to" : "from", peer,
                      (int)pid, how);
}

/* One pair of a staged copy: the far process, the peer's rank (-1: a client), both walkers, the
 * pair's part of the staging buffer, and its status. */
typedef struct staged {
  pid_t pid;
  int peer;
  ts__runs l, r;
  uint8_t *stage;
  ts_error err; /* err.code TS_OK while the pair goes on */
} staged;

/* The kernel's half of a staged round: want bytes between g's part of the staging buffer and
 * the far side's next long runs, at most CMA_IOV of them per call. */
static int staged_kernel(staged *g, bool write, int64_t want, ts_error *err) {
  struct iovec riov[CMA_IOV];
  for (int64_t done = 0; done < want;) {
    int rn = 0;
    int64_t n = 0;
    while (done + n < want && rn < CMA_IOV) {
      int64_t len = g->r.left < want - done - n ? g->r.left : want - done - n;
      rn = add_iov(riov, rn, ts__runs_take(&g->r, len), len);
      n += len;
    }
    struct iovec liov = {g->stage + done, (size_t)n};
    ssize_t got = write ? process_vm_writev(g->pid, &liov, 1, riov, (unsigned long)rn, 0)
                        : process_vm_readv(g->pid, &liov, 1, riov, (unsigned long)rn, 0);
    if (got != (ssize_t)n)
      return copy_failed(g->pid, g->peer, write, n, got, err);
    done += n;
  }
  return TS_OK;
}

/* copy_regions through the staging buffer for k pairs whose local short runs have the same
 * shape and lie in the same rows (one tensor's column blocks for k peers; or k = 1): per round,
 * each pair's next `per` bytes of the far side's long runs, and the local runs packed into (or
 * unpacked from) each pair's part of the buffer, row by row for all k at once, so that the rows
 * are read (or written) once, in order, instead of once per peer. A pair that fails keeps its
 * error and drops out; the others go on. */
static void copy_staged(int k, staged *g, bool write, int64_t per) {
  ts__runs *w[CMA_GROUP];
  uint8_t *buf[CMA_GROUP];
  for (;;) {
    int n = 0;
    int64_t want = per;
    for (int m = 0; m < k; m++)
      if (g[m].err.code == TS_OK && g[m].l.remaining > 0) {
        want = g[m].l.remaining < want ? g[m].l.remaining : want; /* alike: they move in step */
        n++;
      }
    if (n == 0)
      return;
    for (int m = 0; !write && m < k; m++)
      if (g[m].err.code == TS_OK && g[m].l.remaining > 0)
        staged_kernel(&g[m], false, want, &g[m].err);
    n = 0;
    for (int m = 0; m < k; m++)
      if (g[m].err.code == TS_OK && g[m].l.remaining > 0) {
        w[n] = &g[m].l;
        buf[n++] = g[m].stage;
      }
    if (n > 0) /* none when every read of the round failed */
      ts__runs_copy(n, w, buf, want, write);
    for (int m = 0; write && m < k; m++)
      if (g[m].err.code == TS_OK && g[m].r.remaining > 0)
        staged_kernel(&g[m], true, want, &g[m].err);
  }
}

/* copy_staged for k pairs through one staging buffer from the pool, at most CMA_STAGE_BYTES in
 * all (whole lines per pair): true when it copied (each pair's outcome in its err), false when
 * the pool had no room for the buffer. */
static bool copy_group(int k, staged *g, bool write) {
  int64_t per = CMA_STAGE_BYTES / k / 64 * 64;
  if (per > g[0].l.remaining)
    per = g[0].l.remaining;
  uint8_t *stage = ts_pool_alloc((size_t)(per * k), TS_POOL_STAGING, NULL, NULL);
  if (!stage)
    return false;
  for (int m = 0; m < k; m++) {
    g[m].stage = stage + m * per;
    g[m].err.code = TS_OK;
    g[m].err.msg[0] = 0;
  }
  copy_staged(k, g, write, per);
  ts_pool_free(stage);
  return true;
}

/* Copies between the local region `loc` and the peer's region `rem` (in process pid): reads
 * rem into loc, or writes loc into rem. */
static int copy_regions(pid_t pid, int peer, bool write, const ts_comm_region *loc,
                        const ts_comm_region *rem, ts_error *err) {
  ts__runs l, r;
  ts__runs_init(&l, loc);
  ts__runs_init(&r, rem);
  if (staged_way(&l, &r)) {
    staged g = {.pid = pid, .peer = peer, .l = l, .r = r};
    if (copy_group(1, &g, write)) /* else no room for the buffer: an iovec per run */
      return g.err.code ? ts_error_set(err, g.err.code, "%s", g.err.msg) : TS_OK;
  }
  struct iovec liov[CMA_IOV], riov[CMA_IOV];
  while (l.remaining > 0 && r.remaining > 0) {
    int ln = 0, rn = 0;
    int64_t want = 0;
    while (l.remaining > 0 && ln < CMA_IOV && rn < CMA_IOV && want < ((int64_t)1 << 30)) {
      int64_t len = l.left < r.left ? l.left : r.left;
      if (len > ((int64_t)1 << 30) - want) /* at most 1 GiB a call: no partial copies */
        len = ((int64_t)1 << 30) - want;
      ln = add_iov(liov, ln, ts__runs_take(&l, len), len);
      rn = add_iov(riov, rn, ts__runs_take(&r, len), len);
      want += len;
    }
    ssize_t got = write
                      ? process_vm_writev(pid, liov, (unsigned long)ln, riov, (unsigned long)rn, 0)
                      : process_vm_readv(pid, liov, (unsigned long)ln, riov, (unsigned long)rn, 0);
    if (got != (ssize_t)want)
      return copy_failed(pid, peer, write, want, got, err);
  }
  return TS_OK;
}

int ts_comm_process_copy(const ts_comm_proc *proc, bool write, const ts_comm_region *local,
                         const ts_comm_region *remote, ts_error *err) {
  if (region_total(local) != region_total(remote))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the client's region holds %lld bytes where this rank's holds %lld",
                        (long long)region_total(remote), (long long)region_total(local));
  if (region_total(local) == 0)
    return TS_OK;
  int pidfd = -1;
  int rc = ts_comm_proc_pin(proc, &pidfd, err);
  if (rc == TS_OK)
    rc = copy_regions((pid_t)proc->pid, -1, write, local, remote, err);
  return ts_comm_proc_unpin(proc, &pidfd, rc, err);
}

int ts_comm_process_copy_many(const ts_comm_proc *proc, bool write, int n,
                              const ts_comm_region *local, const ts_comm_region *remote,
                              int *failed, ts_error *err) {
  *failed = -1;
  int pidfd = -1, rc = TS_OK;
  for (int i = 0; rc == TS_OK && i < n; i++)
    if (region_total(&local[i]) != region_total(&remote[i]))
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "the client's region holds %lld bytes where this rank's holds %lld",
                        (long long)region_total(&remote[i]), (long long)region_total(&local[i]));
  if (rc == TS_OK && n > 0)
    rc = ts_comm_proc_pin(proc, &pidfd, err); /* once for every copy */
  for (int i = 0; rc == TS_OK && i < n; i++)
    if (region_total(&local[i]) &&
        (rc = copy_regions((pid_t)proc->pid, -1, write, &local[i], &remote[i], err)) != TS_OK)
      *failed = i;
  return n > 0 ? ts_comm_proc_unpin(proc, &pidfd, rc, err) : rc;
}

/* Whether the n bytes at address at (in the arena's owner) lie in the arena a. */
static bool arena_contains(const ts__arena *a, uint64_t at, uint64_t n) {
  return a->size > 0 && at >= a->base && n <= a->size && at - a->base <= a->size - n;
}

/* Where this rank maps address at of the arena a's owner (a->map set: not this rank's own). */
static const uint8_t *arena_mapped(const ts__arena *a, uint64_t at) {
  return a->map + (at - a->base);
}

/* Copies a peer's region rem, which lies in its arena a (arena_holds), into the local region loc
 * of as many bytes (pair_way checked both) through this rank's mapping of that arena: memcpy run
 * by run. */
static void copy_mapped(const ts__arena *a, const ts_comm_region *loc, const ts_comm_region *rem) {
  ts_comm_region src = *rem;
  src.base = (void *)(uintptr_t)arena_mapped(a, (uint64_t)(uintptr_t)rem->base);
  ts__runs l, r;
  ts__runs_init(&l, loc);
  ts__runs_init(&r, &src);
  while (l.remaining > 0) {
    int64_t len = l.left < r.left ? l.left : r.left;
    uint8_t *to = ts__runs_take(&l, len);
    memcpy(to, ts__runs_take(&r, len), (size_t)len);
  }
}

/* Whether every byte of region r lies in the arena a. */
static bool arena_holds(const ts__arena *a, const ts_comm_region *r) {
  uint64_t lo = (uint64_t)(uintptr_t)r->base, hi = lo + (uint64_t)r->esize;
  for (int d = 0; d < r->ndim; d++) {
    if (r->count[d] == 0)
      return false;
    int64_t span = (r->count[d] - 1) * r->stride[d];
    if (span < 0)
      lo -= (uint64_t)-span;
    else
      hi += (uint64_t)span;
  }
  return lo <= hi && arena_contains(a, lo, hi - lo);
}

/* How a pair moves, decided alike on both sides from the two descriptions. */
enum { PAIR_MISMATCH, PAIR_MPI, PAIR_SENDER_COPIES, PAIR_RECEIVER_COPIES, PAIR_RECEIVER_MAPS };

/* What each end of a pair tells the other: its region, and how many pairs it has in this
 * exchange. */
typedef struct cma_desc {
  ts_comm_region region;
  int64_t pairs;
} cma_desc;

static int pair_way(const ts_comm *c, int sender, int receiver, const cma_desc *snd,
                    const cma_desc *rcv) {
  ts__runs s, r;
  ts__runs_init(&s, &snd->region);
  ts__runs_init(&r, &rcv->region);
  if (s.remaining != r.remaining)
    return PAIR_MISMATCH;
  /* The sender's region in its arena: the receiver copies it from its mapping (both sides see
   * the same table). */
  if (c->arenas && sender != receiver && arena_holds(&c->arenas[c->ranks[sender]], &snd->region))
    return PAIR_RECEIVER_MAPS;
  /* Short runs on both sides would cost the kernel an iovec each on the far side: MPI packs
   * them better. Short runs against long ones go staged (copy_staged). */
  bool s_short = s.run < CMA_MIN_RUN && s.nruns > 4, r_short = r.run < CMA_MIN_RUN && r.nruns > 4;
  if ((s_short && !runs_long(&r)) || (r_short && !runs_long(&s)))
    return PAIR_MPI;
  /* The side with more runs copies: the kernel pins the other side's pages, cheapest in few
   * long runs. On a tie the side with fewer pairs copies, so that the peers of a root copy
   * concurrently; then the receiver. */
  if (s.nruns != r.nruns)
    return s.nruns > r.nruns ? PAIR_SENDER_COPIES : PAIR_RECEIVER_COPIES;
  return snd->pairs < rcv->pairs ? PAIR_SENDER_COPIES : PAIR_RECEIVER_COPIES;
}

/* One exchange's pairs (ts__cma_exchange): pair i < nsend sends, the others receive. */
typedef struct cma_pairs {
  ts_comm *c;
  int nsend, np;
  const int *send_peers, *recv_peers;
  const ts_comm_region *send, *recv;
  cma_desc *own, *desc; /* what this rank said of each pair, and what its peer said */
  int *way, *st;
  int *group; /* a shared staging buffer's first pair: 1; its later members: -1; otherwise 0 */
  int *next;  /* a group's next member after this pair, -1 after the last */
} cma_pairs;

static int pair_peer(const cma_pairs *x, int i) {
  return i < x->nsend ? x->send_peers[i] : x->recv_peers[i - x->nsend];
}

static const ts_comm_region *pair_mine(const cma_pairs *x, int i) {
  return i < x->nsend ? &x->send[i] : &x->recv[i - x->nsend];
}

/* Whether this rank copies pair i itself (from its mapping or with the kernel). */
static bool pair_copier(const cma_pairs *x, int i) {
  int way = x->way[i];
  return (way == PAIR_SENDER_COPIES || way == PAIR_RECEIVER_COPIES || way == PAIR_RECEIVER_MAPS) &&
         (way == PAIR_SENDER_COPIES) == (i < x->nsend);
}

/* Whether the local runs b lie in the rows of a: the same shape, and b's first run less than one
 * row (a's innermost outer stride) from a's. */
static bool same_rows(const ts__runs *a, const ts__runs *b) {
  if (a->run != b->run || a->n != b->n || a->n == 0)
    return false;
  for (int d = 0; d < a->n; d++)
    if (a->cnt[d] != b->cnt[d] || a->str[d] != b->str[d])
      return false;
  int64_t gap = b->at - a->at, row = a->str[a->n - 1];
  return (gap < 0 ? -gap : gap) < (row < 0 ? -row : row);
}

typedef struct staged_key {
  uintptr_t at;
  int write, i;
} staged_key;

static int key_cmp(const void *pa, const void *pb) {
  const staged_key *a = pa, *b = pb;
  if (a->write != b->write)
    return a->write - b->write;
  if (a->at != b->at)
    return a->at < b->at ? -1 : 1;
  return a->i - b->i;
}

/* Groups the staged pairs this rank copies whose local runs lie in the same rows (a tensor's
 * column blocks for several peers), up to CMA_GROUP each: sorted by direction and address, a
 * group's pairs are neighbours. Without memory for the sort every pair stays alone. */
static void group_pairs(cma_pairs *x) {
  staged_key *key = malloc((size_t)(x->np ? x->np : 1) * sizeof *key);
  ts__runs *w = malloc((size_t)(x->np ? x->np : 1) * sizeof *w);
  int nk = 0;
  for (int i = 0; key && w && i < x->np; i++) {
    ts__runs r;
    if (x->way[i] == PAIR_RECEIVER_MAPS || !pair_copier(x, i))
      continue;
    ts__runs_init(&w[i], pair_mine(x, i));
    ts__runs_init(&r, &x->desc[i].region);
    if (staged_way(&w[i], &r))
      key[nk++] = (staged_key){(uintptr_t)w[i].at, i < x->nsend, i};
  }
  if (key && w)
    qsort(key, (size_t)nk, sizeof *key, key_cmp);
  for (int a = 0, b; key && w && a < nk; a = b) {
    const ts__runs *first = &w[key[a].i];
    int lead = key[a].i; /* the member the exchange reaches first copies the group */
    for (b = a + 1; b < nk && b - a < CMA_GROUP && key[b].write == key[a].write &&
                    same_rows(first, &w[key[b].i]);
         b++)
      lead = key[b].i < lead ? key[b].i : lead;
    if (b - a == 1)
      continue; /* alone: copy_regions stages it */
    x->group[lead] = 1;
    int last = lead;
    for (int m = a; m < b; m++) /* the others after it, in address order */
      if (key[m].i != lead) {
        x->group[key[m].i] = -1;
        x->next[last] = key[m].i;
        last = key[m].i;
      }
    x->next[last] = -1;
  }
  free(key);
  free(w);
}

/* This rank's copy of pair i, and of the later members of its staged group with it: each
 * copied pair's status in st; the first error in err (rc). */
static int copy_pair(cma_pairs *x, int i, int rc, ts_error *err) {
  ts_comm *c = x->c;
  const ts_comm_region *mine = pair_mine(x, i);
  int peer = pair_peer(x, i);
  ts_error e;
  if (x->way[i] == PAIR_RECEIVER_MAPS) {
    copy_mapped(&c->arenas[c->ranks[peer]], mine, &x->desc[i].region);
    return rc;
  }
  if (x->group[i] > 0) {
    staged g[CMA_GROUP];
    int k = 0;
    for (int j = i; j >= 0; j = x->next[j], k++) {
      int pj = pair_peer(x, j);
      g[k] = (staged){.pid = (pid_t)c->pids[c->ranks[pj]], .peer = pj};
      ts__runs_init(&g[k].l, pair_mine(x, j));
      ts__runs_init(&g[k].r, &x->desc[j].region);
    }
    if (copy_group(k, g, i < x->nsend)) {
      k = 0;
      for (int j = i; j >= 0; j = x->next[j], k++)
        if ((x->st[j] = g[k].err.code) && rc == TS_OK)
          rc = ts_error_set(err, g[k].err.code, "%s", g[k].err.msg);
      return rc;
    }
    for (int j = x->next[i]; j >= 0; j = x->next[j]) /* no room for the buffer: one by one */
      x->group[j] = 0;
  }
  x->st[i] = copy_regions((pid_t)c->pids[c->ranks[peer]], peer, i < x->nsend, mine,
                          &x->desc[i].region, &e);
  if (x->st[i] && rc == TS_OK)
    rc = ts_error_set(err, e.code, "%s", e.msg);
  return rc;
}

/* How every pair moves (pair_way), alike on both ends: MPI's pairs are marked for the caller. */
static int pair_ways(cma_pairs *x, bool *send_mpi, bool *recv_mpi, ts_error *err) {
  int rc = TS_OK;
  for (int i = 0; i < x->np; i++) {
    bool snd = i < x->nsend;
    int peer = pair_peer(x, i);
    x->way[i] = snd ? pair_way(x->c, x->c->rank, peer, &x->own[i], &x->desc[i])
                    : pair_way(x->c, peer, x->c->rank, &x->desc[i], &x->own[i]);
    if (x->way[i] == PAIR_MISMATCH && rc == TS_OK)
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "rank %d's region holds %lld bytes where this rank's holds %lld", peer,
                        (long long)region_total(&x->desc[i].region),
                        (long long)region_total(pair_mine(x, i)));
    else if (x->way[i] == PAIR_MPI)
      *(snd ? &send_mpi[i] : &recv_mpi[i - x->nsend]) = true;
  }
  return rc;
}

int ts__cma_exchange(ts_comm *c, int nsend, const int *send_peers, const ts_comm_region *send,
                     bool *send_mpi, int nrecv, const int *recv_peers, const ts_comm_region *recv,
                     bool *recv_mpi, ts_error *err) {
  int np = nsend + nrecv, n = 3 * np;
  size_t one = (size_t)(np ? np : 1);
  MPI_Request *req = malloc((size_t)(n ? n : 1) * sizeof *req);
  cma_desc *desc = malloc(one * sizeof *desc), *own = malloc(one * sizeof *own);
  int *ints = calloc(4 * one, sizeof *ints);
  if (!req || !desc || !own || !ints) {
    free(req), free(desc), free(own), free(ints);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for %d transfers", np);
  }
  cma_pairs x = {.c = c,
                 .nsend = nsend,
                 .np = np,
                 .send_peers = send_peers,
                 .recv_peers = recv_peers,
                 .send = send,
                 .recv = recv,
                 .own = own,
                 .desc = desc,
                 .way = ints,
                 .st = ints + one,
                 .group = ints + 2 * one,
                 .next = ints + 3 * one};
  /* Pair i: sends first, then receives; its peer, its local region and the peer's. */
  MPI_Request *dsend = req, *drecv = req + np, *sreq = req + 2 * np;
  for (int i = 0; i < n; i++)
    req[i] = MPI_REQUEST_NULL;
  for (int i = 0; i < nsend; i++)
    send_mpi[i] = false;
  for (int i = 0; i < nrecv; i++)
    recv_mpi[i] = false;
  int rc = TS_OK, mrc = MPI_SUCCESS;
  /* Both ends describe their regions to each other; everything is posted before any wait. */
  for (int i = 0; i < np && mrc == MPI_SUCCESS; i++) {
    bool snd = i < nsend;
    int peer = pair_peer(&x, i);
    memset(&own[i], 0, sizeof own[i]); /* no unset padding on the wire */
    own[i].region = *pair_mine(&x, i);
    own[i].pairs = np;
    /* Tags by direction: a rank both sending to and receiving from a peer keeps them apart. */
    mrc = MPI_Irecv(&desc[i], (int)sizeof *desc, MPI_BYTE, peer, CMA_DESC_TAG + !snd, c->comm,
                    &drecv[i]);
    if (mrc == MPI_SUCCESS)
      mrc = MPI_Isend(&own[i], (int)sizeof own[i], MPI_BYTE, peer, CMA_DESC_TAG + snd, c->comm,
                      &dsend[i]);
    if (mrc == MPI_SUCCESS)
      ts__comm_ring(c, peer);
  }
  /* Descriptions and words are small: waits for them block on the bell (comm_internal.h). */
  if (mrc == MPI_SUCCESS)
    mrc = ts__comm_wait_rung(c, np, drecv);
  if (mrc == MPI_SUCCESS) {
    rc = pair_ways(&x, send_mpi, recv_mpi, err);
    group_pairs(&x);
  }
  for (int i = 0; i < np && mrc == MPI_SUCCESS; i++) {
    bool snd = i < nsend;
    int peer = pair_peer(&x, i), way = x.way[i];
    if (way == PAIR_MISMATCH || way == PAIR_MPI)
      continue;
    if (pair_copier(&x, i)) { /* this rank copies (a group's later members with its first), then
                               * tells */
      if (x.group[i] >= 0)
        rc = copy_pair(&x, i, rc, err);
      mrc = MPI_Isend(&x.st[i], 1, MPI_INT, peer, CMA_ACK_TAG + snd, c->comm, &sreq[i]);
      if (mrc == MPI_SUCCESS)
        ts__comm_ring(c, peer);
    } else { /* the peer copies: wait for its word */
      mrc = MPI_Irecv(&x.st[i], 1, MPI_INT, peer, CMA_ACK_TAG + !snd, c->comm, &sreq[i]);
    }
  }
  /* Every request, posted or not (MPI_REQUEST_NULL), is completed before the buffers go. */
  int wrc =
      mrc == MPI_SUCCESS ? ts__comm_wait_rung(c, n, req) : MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
  if (mrc == MPI_SUCCESS)
    mrc = wrc;
  if (mrc != MPI_SUCCESS && rc == TS_OK)
    rc = ts__mpi_error(mrc, "the single-copy exchange", __FILE__, __LINE__, err);
  for (int i = 0; i < np && rc == TS_OK; i++) /* a copy the peer could not make */
    if (x.st[i] != TS_OK)
      rc = ts_error_set(err, TS_IO,
                        "rank %d could not copy its piece of the exchange with this "
                        "rank (status %d)",
                        pair_peer(&x, i), x.st[i]);
  free(req), free(desc), free(own), free(ints);
  return rc;
}

/* Where this rank maps n bytes at address at of comm rank r, when they lie in r's shared
 * buffers (NULL otherwise). */
static const uint8_t *mapped_bytes(const ts_comm *c, int r, uint64_t at, int64_t n) {
  const ts__arena *a = c->arenas ? &c->arenas[c->ranks[r]] : NULL;
  if (!a || !a->map || n < 0 || !arena_contains(a, at, (uint64_t)n))
    return NULL;
  return arena_mapped(a, at);
}

/* The reduce-scatter reads in pieces of this many bytes through one buffer. */
#define CMA_RS_PIECE ((int64_t)4 << 20)

int ts__cma_reduce_scatter(ts_comm *c, const void *sbuf, void *rbuf, const int *counts, ts_dtype dt,
                           ts_reduce_op op, ts_error *err) {
  int64_t es = (int64_t)ts_dtype_size(dt), at = 0;
  for (int i = 0; i < c->rank; i++)
    at += counts[i];
  int64_t bytes = (int64_t)counts[c->rank] * es, off_bytes = at * es;
  uint64_t mine = (uint64_t)(uintptr_t)sbuf;
  uint64_t *bases = malloc((size_t)c->size * sizeof *bases);
  /* The piece buffer from the pool: cached between calls, its pages filled once (a fresh
   * malloc of it faulted its pages in on every call). */
  uint8_t *piece = bytes > 0 ? ts_pool_alloc((size_t)(bytes < CMA_RS_PIECE ? bytes : CMA_RS_PIECE),
                                             TS_POOL_STAGING, NULL, NULL)
                             : NULL;
  int st = bases && (bytes == 0 || piece) ? TS_OK : TS_NO_MEMORY;
  ts_error lerr;
  ts_error_clear(&lerr);
  if (st)
    ts_error_set(&lerr, st, "no memory for a reduce-scatter of %lld bytes", (long long)bytes);
  /* Every rank's sbuf address (all ranks post it, whatever their status). */
  int mrc = MPI_Allgather(&mine, 1, MPI_UINT64_T, bases ? bases : &mine, bases ? 1 : 0,
                          MPI_UINT64_T, c->comm);
  if (mrc != MPI_SUCCESS && st == TS_OK)
    st = ts__mpi_error(mrc, "MPI_Allgather", __FILE__, __LINE__, &lerr);
  /* rbuf = block of rank 0, then (op) the blocks of ranks 1, 2, ... in order. */
  for (int r = 0; r < c->size && st == TS_OK; r++) {
    for (int64_t done = 0; done < bytes && st == TS_OK;) {
      int64_t n = bytes - done < CMA_RS_PIECE ? bytes - done : CMA_RS_PIECE;
      uint8_t *dst = (uint8_t *)rbuf + done;
      uint64_t at = bases[r] + (uint64_t)(off_bytes + done);
      /* The block: this rank's own, straight from a mapping of the rank's shared buffers, or
       * read (process_vm_readv) into rbuf (rank 0's) or the piece buffer. */
      const uint8_t *blk =
          r == c->rank ? (const uint8_t *)sbuf + off_bytes + done : mapped_bytes(c, r, at, n);
      if (!blk) {
        uint8_t *into = r == 0 ? dst : piece;
        struct iovec l = {into, (size_t)n}, rem = {(void *)(uintptr_t)at, (size_t)n};
        ssize_t got = process_vm_readv((pid_t)c->pids[c->ranks[r]], &l, 1, &rem, 1, 0);
        if (got != (ssize_t)n)
          st = ts_error_set(&lerr, TS_IO, "reduce-scatter: reading %lld bytes from rank %d: %s",
                            (long long)n, r, got < 0 ? strerror(errno) : "a partial copy");
        blk = into;
      }
      if (st == TS_OK && r == 0 && blk != dst)
        memcpy(dst, blk, (size_t)n);
      else if (st == TS_OK && r > 0)
        st = ts_reduce(dst, blk, (size_t)(n / es), dt, op, &lerr);
      done += n;
    }
  }
  ts_pool_free(piece);
  free(bases);
  /* Nobody returns (and frees its sbuf) before every rank has read; the status is agreed. */
  return ts_comm_agree(c, st, &lerr, err);
}
