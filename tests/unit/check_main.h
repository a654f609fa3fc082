/* check_main.h - the one way a Check unit test program runs its suite: every test forked (each
 * with its test case's timeout), results printed, exit status 1 when any test failed. */
#ifndef TS_CHECK_MAIN_H
#define TS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

static inline int ts_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
