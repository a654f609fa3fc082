/* doorbell.c - wake-ups between the ranks of one node, so that waits block instead of napping.
 *
 * An MPI message wakes nobody: a rank waiting for one (an ORDER, an agreement's contribution or
 * verdict) has to test for it, and between tests it either spins (taking a core from the ranks,
 * loop threads and clients that share the node) or naps (arriving late by up to the nap). The
 * doorbells remove that choice on one node: the ranks of a node share one cache line per rank
 * (an MPI shared-memory window), holding a counter and a count of waiters. Whoever sends a rank
 * something it may be waiting for rings it after the send (the counter goes up, and a futex wake
 * if somebody waits); a waiting rank reads its counter, tests its condition, and blocks in a
 * futex wait on the counter until it changes or its nap ends. The counter is read before the
 * test, so a ring between the test and the wait ends the wait at once. The same bell serves the
 * rank's own threads: the daemon's loop thread rings its engine when it queues work.
 *
 * Ranks on other nodes have no bell here: ringing them does nothing and their messages arrive
 * unannounced, so the waits keep a cap (the wait policy's naps) and a world that spans nodes
 * keeps the nap schedules of old. Without a shared window (MPI refused one), nothing rings and
 * every wait is a nap, as before. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

/* One rank's bell: a cache line of its own, so that ringing one rank does not disturb others. */
struct ts__bell {
  _Atomic uint32_t seq;     /* rung: goes up by one per ring */
  _Atomic uint32_t waiters; /* threads of the rank blocked on seq */
  char pad[56];
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
  /* Not FUTEX_PRIVATE_FLAG: the word lives in memory shared between processes. */
  return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

int ts__doorbell_init(ts_world *w, ts_error *err) {
  w->bells = NULL;
  w->bell_win = MPI_WIN_NULL;
  w->bell_node = MPI_COMM_NULL;
  w->bells_local = false;
  const char *env = getenv("TSHARD_DOORBELLS");
  bool wanted = !(env && strcmp(env, "0") == 0);
  TS_MPI_CHECK(
      MPI_Comm_split_type(w->world.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &w->bell_node),
      err);
  int nsize = 1;
  MPI_Comm_size(w->bell_node, &nsize);
  /* Every rank of the node decides alike whether the window is made (it is collective). */
  int ok = wanted;
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, w->bell_node), err);
  struct ts__bell *mine = NULL;
  if (ok && MPI_Win_allocate_shared((MPI_Aint)sizeof *mine, (int)sizeof *mine, MPI_INFO_NULL,
                                    w->bell_node, &mine, &w->bell_win) != MPI_SUCCESS) {
    w->bell_win = MPI_WIN_NULL;
    ok = 0;
  }
  int *world_of = malloc((size_t)nsize * sizeof *world_of);
  w->bells = calloc((size_t)w->size, sizeof *w->bells);
  int have = ok && world_of && w->bells;
  /* Collective again: every rank takes part whatever its own allocations gave. */
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_LAND, w->bell_node), err);
  int me = w->rank;
  int rc = have ? MPI_Allgather(&me, 1, MPI_INT, world_of, 1, MPI_INT, w->bell_node) : MPI_SUCCESS;
  if (rc != MPI_SUCCESS)
    have = 0;
  for (int i = 0; have && i < nsize; i++) {
    MPI_Aint size;
    int disp;
    struct ts__bell *b = NULL;
    if (MPI_Win_shared_query(w->bell_win, i, &size, &disp, &b) != MPI_SUCCESS || !b ||
        world_of[i] < 0 || world_of[i] >= w->size) {
      have = 0;
      break;
    }
    w->bells[world_of[i]] = b;
  }
  free(world_of);
  if (!have) {
    free(w->bells);
    w->bells = NULL;
  } else {
    atomic_store(&mine->seq, 0);
    atomic_store(&mine->waiters, 0);
  }
  /* The bells cover the world when every rank is on this node and every node rank has them. */
  int local = have && nsize == w->size;
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_INT, MPI_LAND, w->world.comm), err);
  w->bells_local = local != 0;
  return TS_OK;
}

void ts__doorbell_free(ts_world *w) {
  if (w->bell_win != MPI_WIN_NULL)
    MPI_Win_free(&w->bell_win);
  if (w->bell_node != MPI_COMM_NULL)
    MPI_Comm_free(&w->bell_node);
  free(w->bells);
  w->bells = NULL;
  w->bells_local = false;
}

bool ts_world_bells_local(const ts_world *w) { return w && w->bells_local; }

uint32_t ts_world_bell_seq(const ts_world *w) {
  return w && w->bells ? atomic_load(&w->bells[w->rank]->seq) : 0;
}

void ts_world_bell_ring(const ts_world *w, int rank) {
  if (!w || !w->bells || rank < 0 || rank >= w->size || !w->bells[rank])
    return;
  struct ts__bell *b = w->bells[rank];
  atomic_fetch_add(&b->seq, 1);
  if (atomic_load(&b->waiters) > 0)
    futex(&b->seq, FUTEX_WAKE, INT_MAX, NULL);
}

void ts_world_bell_wait(const ts_world *w, uint32_t seen, int64_t ns) {
  if (ns <= 0)
    return;
  if (!w || !w->bells) {
    ts_wait_nap_ns(ns);
    return;
  }
  struct ts__bell *b = w->bells[w->rank];
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  atomic_fetch_add(&b->waiters, 1);
  /* A ring after `seen` was read changed seq: the wait returns at once (EAGAIN). */
  if (atomic_load(&b->seq) == seen)
    futex(&b->seq, FUTEX_WAIT, seen, &ts);
  atomic_fetch_sub(&b->waiters, 1);
}

int ts__comm_pause(ts_comm *c, ts_waiter *wt, uint32_t seen) {
  const ts_world *w = c ? c->world : NULL;
  int64_t ns = ts_waiter_block_ns(wt, w && w->bells);
  if (ns < 0)
    return TS_TIMEOUT;
  if (ns > 0)
    ts_world_bell_wait(w, seen, ns);
  return TS_OK;
}

void ts__comm_ring(ts_comm *c, int comm_rank) {
  if (c && c->world && comm_rank >= 0 && comm_rank < c->size)
    ts_world_bell_ring(c->world, c->ranks[comm_rank]);
}

bool ts__comm_bells(const ts_comm *c) {
  if (!c || !c->world || !c->world->bells)
    return false;
  if (c->world->bells_local)
    return true;
  for (int i = 0; i < c->size; i++)
    if (!c->world->bells[c->ranks[i]])
      return false;
  return true;
}
