/* ts_wait.h - the one wait policy of tshard: every wait of the daemon (the engine between work,
 * MPI requests, agreements, the control channel's flush) and of the C client (an answer on its
 * socket) tests its condition, spins for a short while, yields when the node's cores are
 * oversubscribed, then naps with a doubling back-off up to a cap, and ends at a deadline.
 *
 * The waiter is step-wise: the caller tests its own condition and asks the waiter how long to
 * block before the next test (ts_waiter_next), then blocks in whatever suits it (nanosleep in
 * ts_waiter_pause, a condition variable, poll() on a socket). Pure C, no MPI, no I/O: the client
 * library links it beside the wire schema. */
#ifndef TS_WAIT_H
#define TS_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "tshard_errors.h"

/* A schedule. After the wait starts (or after progress, ts_waiter_progress) the caller tests
 * without sleeping for spin_ns (yielding the core between tests when oversubscribed), then naps
 * nap_min_ns until hot_ns have passed, then naps doubling from nap_min_ns up to nap_max_ns. A
 * wait that a ring ends (a doorbell) spins on a core of its own for spin_ns, and where cores are
 * short only for yield_ns (at most spin_ns; ts_waiter_yield_spin) before it blocks. */
typedef struct ts_wait_policy {
  int64_t spin_ns;
  int64_t hot_ns;
  int64_t nap_min_ns;
  int64_t nap_max_ns;
  int64_t yield_ns;
} ts_wait_policy;

/* The schedules in use (wait.c documents each one's numbers). */
extern const ts_wait_policy ts_wait_mpi;    /* an MPI request or message: spin 50 us, 5..50 us */
extern const ts_wait_policy ts_wait_engine; /* the engine between work: 10 us for 2 ms, ..8 ms */
extern const ts_wait_policy ts_wait_bell;   /* an MPI message that rings: spin 100 us, ..1 ms */
extern const ts_wait_policy ts_wait_engine_bell; /* the engine, rung: 200 us (150), 1 ms..1 s */
extern const ts_wait_policy ts_wait_socket;      /* a client's answer: spin 100 us, then poll() */
extern const ts_wait_policy ts_wait_poll;        /* a client polling a slow record: 1 ms .. 20 ms */

/* No deadline, for waits that something else ends: the engine's idle wait (the daemon's life),
 * an MPI message waited on with a doorbell (comm/collectives.c: MPI ends it, a lost peer aborts
 * the job), the CLI following a background save (the daemon's answer ends it). */
#define TS_WAIT_FOREVER INT64_MAX

typedef struct ts_waiter {
  ts_wait_policy policy;
  int64_t deadline_ns; /* CLOCK_MONOTONIC, absolute */
  int64_t active_ns;   /* the start, or the last progress */
  int64_t nap_ns;      /* the next nap of the back-off */
} ts_waiter;

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t ts_wait_now_ns(void);
/* The deadline ms milliseconds from now (ms < 0: TS_WAIT_FOREVER). */
int64_t ts_wait_deadline_ms(int64_t ms);
/* Sleeps ns nanoseconds (resumed after signals). */
void ts_wait_nap_ns(int64_t ns);
/* How many processes share this node's cores (default 1): above the core count, spinning
 * yields the core between tests. The daemon sets it to its ranks on the node. */
void ts_wait_set_node_processes(int n);
bool ts_wait_oversubscribed(void);

void ts_waiter_init(ts_waiter *w, const ts_wait_policy *p, int64_t deadline_ns);
/* Something happened (work done, bytes received): the schedule starts over from its spin. */
void ts_waiter_progress(ts_waiter *w);
/* How long to block before testing again: 0 (test again now; spinning), a number of
 * nanoseconds (never past the deadline), or -1 when the deadline has passed. */
int64_t ts_waiter_next(ts_waiter *w);
/* ts_waiter_next, then yields (spinning and oversubscribed) or sleeps that long: TS_OK, or
 * TS_TIMEOUT when the deadline has passed (nothing slept). */
int ts_waiter_pause(ts_waiter *w);
/* Whether a wait that a ring ends still spins, yielding the core between its tests, where the
 * node's cores are oversubscribed: within yield_ns of its start or progress, and only while the
 * node has at most two processes per core (beyond, the spinners would take the cores the
 * working ranks need: it blocks at once). */
bool ts_waiter_yield_spin(const ts_waiter *w);
/* One step of a wait that a ring may end (rung: the waiter has a doorbell that its event
 * rings): -1 past the deadline; 0 to test again at once (spinning on a core of its own, or
 * having yielded the core where cores are short: without a doorbell, or within yield_ns); else
 * how long to block (at most until the ring). The one decision of the engine's idle wait and of
 * the waits for MPI messages (comm/doorbell.c). */
int64_t ts_waiter_block_ns(ts_waiter *w, bool rung);

#endif
