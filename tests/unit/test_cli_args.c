/* test_cli_args.c - Check unit tests of the strict command line (client/cli/usage_check.c): the
 * edit distance against a naive recursive reference, suggestions, and the options and positional
 * counts read from usage texts, misuse included. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The reference: optimal string alignment distance by plain recursion (short words only). */
static int ref_osa(const char *a, int la, const char *b, int lb) {
  if (la == 0)
    return lb;
  if (lb == 0)
    return la;
  int best = ref_osa(a, la - 1, b, lb) + 1;
  int v = ref_osa(a, la, b, lb - 1) + 1;
  if (v < best)
    best = v;
  v = ref_osa(a, la - 1, b, lb - 1) + (a[la - 1] != b[lb - 1]);
  if (v < best)
    best = v;
  if (la > 1 && lb > 1 && a[la - 1] == b[lb - 2] && a[la - 2] == b[lb - 1]) {
    v = ref_osa(a, la - 2, b, lb - 2) + 1;
    if (v < best)
      best = v;
  }
  return best;
}

START_TEST(edit_distance_random) {
  srand(14);
  char a[8], b[8];
  for (int t = 0; t < 3000; t++) {
    int la = rand() % 7, lb = rand() % 7;
    for (int i = 0; i < la; i++)
      a[i] = (char)('a' + rand() % 3);
    for (int i = 0; i < lb; i++)
      b[i] = (char)('a' + rand() % 3);
    a[la] = b[lb] = '\0';
    ck_assert_int_eq(cli_edit_distance(a, b), ref_osa(a, la, b, lb));
  }
  ck_assert_int_eq(cli_edit_distance("jbo", "job"), 1);
  char long_word[100];
  memset(long_word, 'x', 99);
  long_word[99] = '\0';
  ck_assert_int_gt(cli_edit_distance(long_word, "job"), 3); /* capped, no overflow */
}
END_TEST

START_TEST(nearest) {
  const char *c[] = {"job", "json", "rank", "socket", "timeout"};
  ck_assert_str_eq(cli_nearest("jbo", c, 5), "job");
  ck_assert_str_eq(cli_nearest("jsn", c, 5), "json");
  ck_assert_str_eq(cli_nearest("timeuot", c, 5), "timeout");
  ck_assert_ptr_null(cli_nearest("zzzzzz", c, 5));
  ck_assert_ptr_null(cli_nearest("", c, 0));
}
END_TEST

static const char *usage = "  NAME FILE.npy    the tensor and the file\n"
                           "  --job JOB        the job\n"
                           "  --json           machine-readable\n"
                           "  --convert        convert\n";

static int parse(int argc, const char **argv) {
  cli_args a = {.argc = argc, .argv = (char **)argv};
  int rc = cli_strict_parse(&a, usage);
  return rc ? -1 : a.npos;
}

START_TEST(strict_parse) {
  const char *ok[] = {"put", "w", "--job", "--json", "f.npy", "--convert"};
  ck_assert_int_eq(parse(6, ok), 2); /* --job takes "--json" as its value */
  const char *eq[] = {"put", "--job=x", "w"};
  ck_assert_int_eq(parse(3, eq), 1);
  const char *extra[] = {"put", "w", "f.npy", "g.npy"};
  ck_assert_int_eq(parse(4, extra), -1);
  const char *unknown[] = {"put", "--jbo", "x"};
  ck_assert_int_eq(parse(3, unknown), -1);
  const char *novalue[] = {"put", "w", "--job"};
  ck_assert_int_eq(parse(3, novalue), -1);
  const char *flagval[] = {"put", "--json=1"};
  ck_assert_int_eq(parse(2, flagval), -1);
  const char *help[] = {"put", "--help"};
  ck_assert_int_eq(parse(2, help), 0);
  const char *dash[] = {"put", "-", "--"};
  ck_assert_int_eq(parse(3, dash), 2); /* "-" and "--" are positionals */
  cli_args none = {.argc = 2, .argv = (char *[]){"list", "x"}};
  ck_assert_int_eq(cli_strict_parse(&none, "  --json           out\n"), CLI_USAGE);
  cli_args empty = {.argc = 1, .argv = (char *[]){"list"}};
  ck_assert_int_eq(cli_strict_parse(&empty, ""), CLI_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cli_args");
  TCase *tc = tcase_create("strict");
  tcase_add_test(tc, edit_distance_random);
  tcase_add_test(tc, nearest);
  tcase_add_test(tc, strict_parse);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
