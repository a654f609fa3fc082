/* test_wait.c - the wait policy (proto/wait/): a waiter spins for its schedule's spin, then naps
 * from nap_min doubling up to nap_max (nap_min alone while hot), never past its deadline, and
 * says -1 once the deadline passed; progress starts the schedule over. Where the node's cores
 * are oversubscribed at most twice over, a wait that a ring ends spins (yielding) for its
 * yield_ns and then blocks; with more processes per core, or on a core of its own, it does not
 * yield-spin. Waiters are aged by moving their start back, so nothing here sleeps long, and
 * every window checked against the moving clock is wide (hundreds of ms): a test descheduled
 * on a loaded machine still sees the same schedule. */
#include <check.h>
#include <stdint.h>
#include <unistd.h>

#include "check_main.h"
#include "ts_wait.h"

#define US 1000LL
#define MS 1000000LL

static const ts_wait_policy test_policy = {.spin_ns = 100 * US,
                                           .hot_ns = 0,
                                           .nap_min_ns = 50 * US,
                                           .nap_max_ns = 1 * MS,
                                           .yield_ns = 80 * US};
/* The same shape with wide margins, for what is checked against the clock as it moves. */
static const ts_wait_policy slow_policy = {.spin_ns = 400 * MS,
                                           .hot_ns = 0,
                                           .nap_min_ns = 50 * US,
                                           .nap_max_ns = 1 * MS,
                                           .yield_ns = 200 * MS};

/* A waiter whose start (or last progress) was ago_ns before now. */
static ts_waiter aged(const ts_wait_policy *p, int64_t ago_ns, int64_t deadline_ns) {
  ts_waiter w;
  ts_waiter_init(&w, p, deadline_ns);
  w.active_ns -= ago_ns;
  return w;
}

static int cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

START_TEST(spins_then_naps_doubling_to_the_cap) {
  ts_waiter w = aged(&slow_policy, 0, TS_WAIT_FOREVER);
  ck_assert_int_eq(ts_waiter_next(&w), 0); /* within the spin */
  w = aged(&test_policy, 200 * US, TS_WAIT_FOREVER);
  int64_t want[] = {50 * US, 100 * US, 200 * US, 400 * US, 800 * US, 1 * MS, 1 * MS};
  for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++)
    ck_assert_int_eq(ts_waiter_next(&w), want[i]);
  w = aged(&slow_policy, 500 * MS, TS_WAIT_FOREVER);
  ck_assert_int_eq(ts_waiter_next(&w), 50 * US);
  ck_assert_int_eq(ts_waiter_next(&w), 100 * US);
  ts_waiter_progress(&w); /* the schedule starts over, its back-off too */
  ck_assert_int_eq(ts_waiter_next(&w), 0);
  w.active_ns -= 500 * MS;
  ck_assert_int_eq(ts_waiter_next(&w), 50 * US);
}
END_TEST

START_TEST(hot_naps_stay_at_the_minimum) {
  /* The engine's shape (no spin, naps at the minimum while hot), with a wide hot window. */
  static const ts_wait_policy hot = {
      .hot_ns = 400 * MS, .nap_min_ns = 10 * US, .nap_max_ns = 8 * MS};
  ts_waiter w = aged(&hot, 1 * MS, TS_WAIT_FOREVER);
  for (int i = 0; i < 5; i++)
    ck_assert_int_eq(ts_waiter_next(&w), 10 * US);
  w.active_ns -= 500 * MS; /* past hot: doubling */
  ck_assert_int_eq(ts_waiter_next(&w), 10 * US);
  ck_assert_int_eq(ts_waiter_next(&w), 20 * US);
  ck_assert(ts_wait_engine.hot_ns > 0 && ts_wait_engine.spin_ns == 0);
}
END_TEST

START_TEST(deadline_bounds_the_naps) {
  static const ts_wait_policy long_naps = {.nap_min_ns = 1000 * MS, .nap_max_ns = 2000 * MS};
  int64_t now = ts_wait_now_ns();
  ts_waiter w = aged(&long_naps, 1 * MS, now + 300 * MS);
  int64_t ns = ts_waiter_next(&w);
  ck_assert(ns > 0 && ns <= 300 * MS); /* never past the deadline */
  w = aged(&test_policy, 0, now - 1);
  ck_assert_int_eq(ts_waiter_next(&w), -1);
  ck_assert_int_eq(ts_waiter_pause(&w), TS_TIMEOUT);
  w = aged(&test_policy, 200 * US, ts_wait_now_ns() + 400 * MS);
  ck_assert_int_eq(ts_waiter_pause(&w), TS_OK); /* a nap of 50 us */
  ck_assert_int_eq(ts_wait_deadline_ms(-1), TS_WAIT_FOREVER);
  ck_assert_int_eq(ts_wait_deadline_ms(INT64_MAX / 2), TS_WAIT_FOREVER);
  int64_t d = ts_wait_deadline_ms(5);
  ck_assert(d > now && d <= ts_wait_now_ns() + 5 * MS);
}
END_TEST

START_TEST(yield_spin_where_cores_are_short_twice_over_at_most) {
  int c = cores();
  ts_waiter fresh = aged(&slow_policy, 0, TS_WAIT_FOREVER);
  ts_waiter late = aged(&slow_policy, 300 * MS, TS_WAIT_FOREVER); /* past yield_ns, in spin */
  ts_wait_set_node_processes(c); /* a core each: spins without yielding, no yield-spin */
  ck_assert(!ts_wait_oversubscribed());
  ck_assert(!ts_waiter_yield_spin(&fresh));
  ts_wait_set_node_processes(c + 1);
  ck_assert(ts_wait_oversubscribed());
  ck_assert(ts_waiter_yield_spin(&fresh));
  ck_assert(!ts_waiter_yield_spin(&late));
  ck_assert_int_eq(ts_waiter_next(&late), 0); /* its spin on a core of its own is longer */
  ts_wait_set_node_processes(2 * c);
  ck_assert(ts_waiter_yield_spin(&fresh));
  ts_wait_set_node_processes(2 * c + 1); /* more than two per core: block at once */
  ck_assert(!ts_waiter_yield_spin(&fresh));
  ts_wait_set_node_processes(c + 1);
  ts_waiter none = aged(&ts_wait_mpi, 0, TS_WAIT_FOREVER); /* no yield_ns: never */
  ck_assert(!ts_waiter_yield_spin(&none));
  ck_assert(ts_wait_engine_bell.yield_ns <= ts_wait_engine_bell.spin_ns);
  ck_assert(ts_wait_bell.yield_ns <= ts_wait_bell.spin_ns);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wait");
  TCase *tc = tcase_create("policy");
  tcase_set_timeout(tc, 20);
  tcase_add_test(tc, spins_then_naps_doubling_to_the_cap);
  tcase_add_test(tc, hot_naps_stay_at_the_minimum);
  tcase_add_test(tc, deadline_bounds_the_naps);
  tcase_add_test(tc, yield_spin_where_cores_are_short_twice_over_at_most);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
