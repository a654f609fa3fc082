/* test_log.c - the daemon's log lines (daemon/log.c): a line that quotes client text keeps to one
 * line, its control characters (C0, DEL and UTF-8-encoded C1) written as \xNN and the rest as
 * sent; lines below the threshold are not written. Held lines (TSD_LOG_HELD) wait for a flush,
 * for any line written at once (before which they come, in order), for a full buffer, or for
 * their time (tsd_log_due_ns), and are never lost. stderr goes to a file for the test. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "tsd_base.h"

/* What the log wrote while fn(arg) ran, read back from a temporary file in place of stderr. */
static char *captured(void (*fn)(const char *), const char *arg) {
  char path[] = "/tmp/tshard-test-log-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  fn(arg);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  off_t n = lseek(fd, 0, SEEK_END);
  char *out = calloc(1, (size_t)n + 1);
  ck_assert_int_eq(pread(fd, out, (size_t)n, 0), n);
  close(fd);
  return out;
}

static void log_quoted(const char *text) { TSD_LOG(TSD_LOG_WARN, "refused '%s'", text); }
static void log_debug(const char *text) { TSD_LOG(TSD_LOG_DEBUG, "hidden %s", text); }

START_TEST(controls_escaped) {
  static const struct {
    const char *sent, *logged;
  } cases[] = {
      {"a\nb", "refused 'a\\x0ab'"},
      {"fake\n00:00:00.000 tshardd[0] error: forged", "refused 'fake\\x0a00:00:00.000 tshardd[0] "
                                                      "error: forged'"},
      {"\x1b[31mred\x1b[0m", "refused '\\x1b[31mred\\x1b[0m'"},
      {"cr\rtab\tdel\x7f", "refused 'cr\\x0dtab\\x09del\\x7f'"},
      {"c1\xc2\x85nel", "refused 'c1\\x85nel'"},
      {"gr\xc3\xb6\xc3\x9f"
       "e nbsp\xc2\xa0",
       "refused 'gr\xc3\xb6\xc3\x9f"
       "e nbsp\xc2\xa0'"},
  };
  tsd_log_threshold = TSD_LOG_INFO;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = captured(log_quoted, cases[i].sent);
    char *nl = strchr(out, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "case %zu: not one line: %s", i, out);
    *nl = '\0';
    ck_assert_msg(strstr(out, " warn: ") != NULL, "case %zu: %s", i, out);
    const char *body = strstr(out, " warn: ") + strlen(" warn: ");
    ck_assert_msg(strcmp(body, cases[i].logged) == 0, "case %zu: '%s', want '%s'", i, body,
                  cases[i].logged);
    free(out);
  }
}
END_TEST

START_TEST(threshold) {
  tsd_log_threshold = TSD_LOG_INFO;
  char *out = captured(log_debug, "x");
  ck_assert_str_eq(out, "");
  free(out);
}
END_TEST

static void held_then_flushed(const char *text) {
  TSD_LOG_HELD(TSD_LOG_INFO, "op one %s", text);
  TSD_LOG_HELD(TSD_LOG_INFO, "op two %s", text);
  ck_assert_int_eq(lseek(STDERR_FILENO, 0, SEEK_END), 0); /* nothing written yet */
  int64_t due = tsd_log_due_ns();
  ck_assert(due > 0 && due <= (int64_t)TSD_LOG_HOLD_MS * 1000000);
  tsd_log_flush();
  ck_assert_int_eq(tsd_log_due_ns(), -1);
}

static void held_then_warned(const char *text) {
  TSD_LOG_HELD(TSD_LOG_INFO, "op first %s", text);
  TSD_LOG(TSD_LOG_WARN, "second %s", text);
  ck_assert_int_eq(tsd_log_due_ns(), -1);
}

static void held_until_due(const char *text) {
  TSD_LOG_HELD(TSD_LOG_INFO, "op late %s", text);
  struct timespec nap = {0, (TSD_LOG_HOLD_MS + 20) * 1000000L};
  nanosleep(&nap, NULL); /* the hold's own clock: the line is due after TSD_LOG_HOLD_MS */
  ck_assert_int_eq(tsd_log_due_ns(), -1); /* due: written by the call */
  ck_assert_int_gt(lseek(STDERR_FILENO, 0, SEEK_END), 0);
}

static void held_many(const char *text) {
  for (int i = 0; i < 1000; i++)
    TSD_LOG_HELD(TSD_LOG_INFO, "op %04d %s", i, text);
  ck_assert_int_gt(lseek(STDERR_FILENO, 0, SEEK_END), 0); /* a full buffer was written */
  tsd_log_flush();
}

START_TEST(held_lines) {
  tsd_log_threshold = TSD_LOG_INFO;
  char *out = captured(held_then_flushed, "x");
  const char *one = strstr(out, "info: op one x\n"), *two = strstr(out, "info: op two x\n");
  ck_assert_msg(one && two && one < two, "%s", out);
  free(out);
  out = captured(held_then_warned, "y");
  const char *first = strstr(out, "info: op first y\n"), *second = strstr(out, "warn: second y\n");
  ck_assert_msg(first && second && first < second, "held line before the warning: %s", out);
  free(out);
  out = captured(held_until_due, "z");
  ck_assert_msg(strstr(out, "info: op late z\n") != NULL, "%s", out);
  free(out);
  out = captured(held_many, "m");
  int lines = 0, in_order = 1;
  const char *p = out;
  for (int i = 0; i < 1000; i++) {
    char want[32];
    snprintf(want, sizeof want, "info: op %04d m\n", i);
    const char *q = strstr(p, want);
    in_order &= q != NULL;
    if (q) {
      p = q + 1;
      lines++;
    }
  }
  ck_assert_msg(in_order && lines == 1000, "%d of 1000 held lines in order", lines);
  free(out);
  TSD_LOG_HELD(TSD_LOG_DEBUG, "below the threshold %s", "d");
  ck_assert_int_eq(tsd_log_due_ns(), -1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("log");
  TCase *tc = tcase_create("log");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, controls_escaped);
  tcase_add_test(tc, threshold);
  tcase_add_test(tc, held_lines);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
