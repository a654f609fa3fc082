/* wait.c - the wait policy (ts_wait.h): the schedules and the step-wise waiter.
 *
 * The numbers are what each wait needs. An MPI request (agreements, the control channel) spins
 * 50 us, the time a collective of ranks that arrived together takes, then naps from 5 us
 * doubling up to 50 us, so a rank that arrives early leaves the cores to the ranks still
 * working (where ranks outnumber cores Open MPI's own blocking calls would spin), yet a
 * non-blocking collective, which advances only inside each rank's own test, is not held up by
 * a long nap of one rank (a cap of 200 us cost a 4 KiB reshard on 4 ranks about a fifth of its
 * engine time). Spinning longer does not pay where ranks outnumber cores: it takes the cores
 * from the clients and the loop threads (measured: a hand-off share ten times longer). The
 * engine between work naps 10 us for 2 ms after its last work (the next operation's ORDER
 * reaches the other ranks while the client sends it), then doubling up to 8 ms: an idle daemon
 * wakes about a hundred times a second. Those naps are what is left where nothing rings: ranks
 * of one node ring each other's doorbells (comm/doorbell.c) when they send, so there a wait for
 * a message blocks until the ring: an MPI message spins 100 us where the rank has a core of its
 * own, then blocks for 50 us doubling up to 1 ms (the cap bounds a message that came
 * unannounced); the engine spins 200 us after work where it has a core, then blocks from 1 ms up
 * to 1 s, or until what it has on the clock is due (held log lines, cached buffers to release, a
 * collective's deadline): an idle daemon wakes once a second. Where cores are short but shared
 * by at most two processes each, the two spin shorter, yielding the core between tests: an MPI
 * message 100 us, the engine 150 us after work. A rank that blocks at once is woken for every
 * message of an operation, a wake-up that costs more than the spin (4 ranks on 2 cores, p50
 * of reshards of 4 KiB, 64 KiB and 1 MiB, alternated runs: the engine's spin against none 194,
 * 225, 320 us against 264, 323, 418; both spins against the engine's alone 163, 240, 277
 * against 211, 262, 341, and GPT-2's 148 reshards one by one 95 against 101 ms; spins twice as
 * long or half as long were slower). With more processes per core the spinners would take the
 * cores of the ranks at work: they block at once. A client waiting for an answer spins 100 us
 * (an answer that comes that fast is taken without the wake-up of a sleeping thread), then
 * blocks in poll(), which wakes on the answer itself. A client polling a record that changes
 * slowly (a background save's progress, the launcher's status file) naps from 1 ms doubling to
 * 20 ms: a change is seen within 20 ms, and a poll costs a request or a file read, not a core. */
#include "ts_wait.h"

#include <errno.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define US 1000LL
#define MS 1000000LL

const ts_wait_policy ts_wait_mpi = {
    .spin_ns = 50 * US, .hot_ns = 0, .nap_min_ns = 5 * US, .nap_max_ns = 50 * US};
const ts_wait_policy ts_wait_engine = {
    .spin_ns = 0, .hot_ns = 2 * MS, .nap_min_ns = 10 * US, .nap_max_ns = 8 * MS};
const ts_wait_policy ts_wait_bell = {.spin_ns = 100 * US,
                                     .hot_ns = 0,
                                     .nap_min_ns = 50 * US,
                                     .nap_max_ns = 1 * MS,
                                     .yield_ns = 100 * US};
const ts_wait_policy ts_wait_engine_bell = {.spin_ns = 200 * US,
                                            .hot_ns = 0,
                                            .nap_min_ns = 1 * MS,
                                            .nap_max_ns = 1000 * MS,
                                            .yield_ns = 150 * US};
const ts_wait_policy ts_wait_socket = {
    .spin_ns = 100 * US, .hot_ns = 0, .nap_min_ns = 1000 * MS, .nap_max_ns = 1000 * MS};
const ts_wait_policy ts_wait_poll = {
    .spin_ns = 0, .hot_ns = 0, .nap_min_ns = 1 * MS, .nap_max_ns = 20 * MS};

static int node_processes = 1;
static int node_cores;

int64_t ts_wait_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t ts_wait_deadline_ms(int64_t ms) {
  if (ms < 0 || ms > (TS_WAIT_FOREVER - ts_wait_now_ns()) / MS)
    return TS_WAIT_FOREVER;
  return ts_wait_now_ns() + ms * MS;
}

void ts_wait_nap_ns(int64_t ns) {
  if (ns <= 0)
    return;
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void ts_wait_set_node_processes(int n) { node_processes = n > 0 ? n : 1; }

bool ts_wait_oversubscribed(void) {
  if (node_cores == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    node_cores = n > 0 ? (int)n : 1;
  }
  return node_processes > node_cores;
}

void ts_waiter_init(ts_waiter *w, const ts_wait_policy *p, int64_t deadline_ns) {
  w->policy = *p;
  w->deadline_ns = deadline_ns;
  ts_waiter_progress(w);
}

void ts_waiter_progress(ts_waiter *w) {
  w->active_ns = ts_wait_now_ns();
  w->nap_ns = w->policy.nap_min_ns;
}

int64_t ts_waiter_next(ts_waiter *w) {
  int64_t now = ts_wait_now_ns();
  if (now >= w->deadline_ns)
    return -1;
  int64_t since = now - w->active_ns, nap;
  if (since < w->policy.spin_ns)
    return 0;
  if (since < w->policy.hot_ns) {
    nap = w->policy.nap_min_ns;
  } else {
    nap = w->nap_ns;
    w->nap_ns = nap > w->policy.nap_max_ns / 2 ? w->policy.nap_max_ns : 2 * nap;
  }
  if (nap > w->deadline_ns - now)
    nap = w->deadline_ns - now;
  return nap > 0 ? nap : 1;
}

bool ts_waiter_yield_spin(const ts_waiter *w) {
  if (!ts_wait_oversubscribed() || node_processes > 2 * node_cores)
    return false;
  return ts_wait_now_ns() - w->active_ns < w->policy.yield_ns;
}

int64_t ts_waiter_block_ns(ts_waiter *w, bool rung) {
  int64_t ns = ts_waiter_next(w);
  if (ns != 0 || !ts_wait_oversubscribed())
    return ns;
  if (!rung || ts_waiter_yield_spin(w)) {
    sched_yield();
    return 0;
  }
  return w->policy.nap_min_ns; /* where cores are short, then block: the ring wakes it */
}

int ts_waiter_pause(ts_waiter *w) {
  int64_t ns = ts_waiter_next(w);
  if (ns < 0)
    return TS_TIMEOUT;
  if (ns == 0) {
    if (ts_wait_oversubscribed())
      sched_yield();
  } else {
    ts_wait_nap_ns(ns);
  }
  return TS_OK;
}
