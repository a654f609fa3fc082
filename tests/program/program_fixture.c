/* program_fixture.c - the program unit tests' shared fixture (program_fixture.h). */
#define _XOPEN_SOURCE 700
#include "program_fixture.h"

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char tsp_test_cache[256];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void tsp_test_setup(void) {
  snprintf(tsp_test_cache, sizeof tsp_test_cache, "/tmp/tsp-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tsp_test_cache));
}

void tsp_test_teardown(void) { nftw(tsp_test_cache, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

tsp_program *tsp_test_make(const char *text, const char *cflags, bool lazy) {
  ts_error err = {0};
  tsp_program *p = NULL;
  tsp_options o = {.cache_dir = tsp_test_cache, .cflags = cflags, .lazy = lazy};
  int rc = tsp_program_create(&p, text, &o, &err);
  ck_assert_msg(rc == TS_OK, "create failed: %s\n%s", err.msg, text);
  return p;
}

int tsp_test_make_fails(const char *text, char *msg, size_t cap) {
  ts_error err = {0};
  tsp_program *p = NULL;
  tsp_options o = {.cache_dir = tsp_test_cache, .cflags = FAST_FLAGS, .lazy = true};
  int rc = tsp_program_create(&p, text, &o, &err);
  ck_assert_msg(rc != TS_OK && p == NULL, "expected a failure for %s", text);
  ck_assert_int_eq(err.code, rc);
  ck_assert_msg(strlen(err.msg) > 10, "message too short: '%s'", err.msg);
  if (msg)
    snprintf(msg, cap, "%s", err.msg);
  return rc;
}
