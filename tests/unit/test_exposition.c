/* test_exposition.c - the metrics endpoint's text format (daemon/metrics/exposition.c) and the
 * published numbers (daemon/counters.c): label values escape backslash, double quote and line
 * feed, HELP text backslash and line feed; values print as integers when whole, +Inf, NaN;
 * a text larger than the first buffer grows whole; latencies land in the bucket of their upper
 * bound (inclusive), and a kind's buckets add up to its count; answers count by kind and status,
 * codes outside the list under the last. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "check_main.h"
#include "tsd_metrics.h"

START_TEST(label_escapes) {
  tsd_text t = {0};
  const char *extra[] = {"path", "a\\b\"c\nd", NULL};
  tsd_text_sample(&t, "m_total", "job=\"j\",rank=\"0\"", extra, 3);
  ck_assert_str_eq(t.buf, "m_total{job=\"j\",rank=\"0\",path=\"a\\\\b\\\"c\\nd\"} 3\n");
  tsd_text_free(&t);
  tsd_text_family(&t, "m", "gauge", "a \"quoted\" back\\slash\nline");
  ck_assert_str_eq(t.buf, "# HELP m a \"quoted\" back\\\\slash\\nline\n# TYPE m gauge\n");
  tsd_text_free(&t);
  tsd_text_free(NULL);
}
END_TEST

START_TEST(values) {
  static const struct {
    double v;
    const char *text;
  } cases[] = {{0, "0"},
               {12345678901234.0, "12345678901234"},
               {0.5, "0.5"},
               {INFINITY, "+Inf"},
               {-INFINITY, "-Inf"},
               {NAN, "NaN"},
               {1e-05, "1.0000000000000001e-05"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tsd_text t = {0};
    tsd_text_sample(&t, "m", "a=\"b\"", NULL, cases[i].v);
    char want[128];
    snprintf(want, sizeof want, "m{a=\"b\"} %s\n", cases[i].text);
    ck_assert_str_eq(t.buf, want);
    tsd_text_free(&t);
  }
}
END_TEST

START_TEST(grows) {
  tsd_text t = {0};
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  for (int i = 0; i < 100; i++)
    tsd_text_printf(&t, "%s%d\n", big, i);
  ck_assert(!t.failed);
  ck_assert_uint_eq(t.len, 100 * (sizeof big - 1) + 10 * 2 + 90 * 3);
  ck_assert_uint_eq(strlen(t.buf), t.len);
  tsd_text_free(&t);
}
END_TEST

START_TEST(counters) {
  tsd_count_latency(5, 10000);         /* the first bound, inclusive */
  tsd_count_latency(5, 10001);         /* the second */
  tsd_count_latency(5, 1000000000000); /* above 100 s */
  uint64_t b[TSD_LATENCY_BUCKETS + 1], sum;
  ck_assert_uint_eq(tsd_counted_latency(5, b, &sum), 3);
  ck_assert_uint_eq(b[0], 1);
  ck_assert_uint_eq(b[1], 1);
  ck_assert_uint_eq(b[TSD_LATENCY_BUCKETS], 1);
  ck_assert_uint_eq(sum, 1000000020001);
  ck_assert_uint_eq(tsd_latency_bound_ns(0), 10000);
  ck_assert_uint_eq(tsd_latency_bound_ns(TSD_LATENCY_BUCKETS - 1), 100000000000ULL);
  tsd_count_answer(7, TS_NOT_FOUND);
  tsd_count_answer(7, 1000);
  tsd_count_answer(500, TS_OK); /* no such kind: kind 0 */
  ck_assert_uint_eq(tsd_counted_answers(7, TS_NOT_FOUND), 1);
  ck_assert_uint_eq(tsd_counted_answers(7, TSD_STATUS_CODES - 1), 1);
  ck_assert_uint_eq(tsd_counted_answers(0, TS_OK), 1);
  tsd_gauge_add(TSD_G_INFLIGHT, 2);
  tsd_gauge_add(TSD_G_INFLIGHT, -1);
  ck_assert_uint_eq(tsd_gauge_get(TSD_G_INFLIGHT), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("exposition");
  TCase *tc = tcase_create("exposition");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, label_escapes);
  tcase_add_test(tc, values);
  tcase_add_test(tc, grows);
  tcase_add_test(tc, counters);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
