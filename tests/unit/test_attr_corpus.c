/* test_attr_corpus.c - shard/plan/attr_text.c against the shared corpus of attribute texts
 * (tests/grammar/attr_corpus.jsonl, also checked against the Python port by
 * tests/python/test_attr_corpus.py). One JSON object per line, '#' lines are comments:
 *   {"text": T, "canonical": C}             ts_attr_parse accepts T and ts_attr_format writes C
 *   {"text": T, "error": S, "message": M}   ts_attr_parse refuses T with status S and message M
 * Accepted texts also round-trip: C parses back to an equal attribute that formats to C. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "ts_plan.h"

static char *format(const ts_attr *a) {
  size_t n = ts_attr_format(a, NULL, 0);
  char *buf = malloc(n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(ts_attr_format(a, buf, n + 1), n);
  return buf;
}

static void check_entry(json_t *e, int line) {
  const char *text = json_string_value(json_object_get(e, "text"));
  const char *canon = json_string_value(json_object_get(e, "canonical"));
  const char *status = json_string_value(json_object_get(e, "error"));
  const char *message = json_string_value(json_object_get(e, "message"));
  ck_assert_msg(text && (canon || (status && message)), "corpus line %d: bad entry", line);
  ts_attr *a = NULL;
  ts_error err = {0};
  int rc = ts_attr_parse(text, &a, &err);
  if (canon) {
    ck_assert_msg(rc == TS_OK, "line %d: refused %s: %s", line, text, err.msg);
    char *got = format(a);
    ck_assert_msg(strcmp(got, canon) == 0, "line %d: %s formats as %s, corpus says %s", line, text,
                  got, canon);
    ts_attr *b = NULL;
    ck_assert_msg(ts_attr_parse(got, &b, &err) == TS_OK, "line %d: canonical refused", line);
    ck_assert_msg(ts_attr_equal(a, b), "line %d: canonical form parses to another attr", line);
    char *again = format(b);
    ck_assert_str_eq(again, canon);
    free(again);
    free(got);
    ts_attr_destroy(&b);
    ts_attr_destroy(&a);
  } else {
    ck_assert_msg(rc != TS_OK, "line %d: accepted %s, corpus says %s", line, text, message);
    ck_assert_ptr_null(a);
    ck_assert_msg(strcmp(ts_status_name(rc), status) == 0, "line %d: %s: status %s, corpus %s",
                  line, text, ts_status_name(rc), status);
    ck_assert_msg(strcmp(err.msg, message) == 0, "line %d: %s:\n  got    %s\n  corpus %s", line,
                  text, err.msg, message);
  }
}

START_TEST(corpus_agrees_with_the_c_parser) {
  FILE *f = fopen(TS_ATTR_CORPUS, "r");
  ck_assert_msg(f != NULL, "cannot open %s", TS_ATTR_CORPUS);
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int no = 0, accepted = 0, refused = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    no++;
    if (line[0] == '#' || line[0] == '\n')
      continue;
    json_error_t jerr;
    json_t *e = json_loadb(line, (size_t)len, 0, &jerr);
    ck_assert_msg(e != NULL, "corpus line %d: %s", no, jerr.text);
    check_entry(e, no);
    if (json_object_get(e, "canonical"))
      accepted++;
    else
      refused++;
    json_decref(e);
  }
  free(line);
  fclose(f);
  /* the corpus is not empty and covers both sides */
  ck_assert_int_ge(accepted, 30);
  ck_assert_int_ge(refused, 50);
}
END_TEST

int main(void) {
  Suite *s = suite_create("attr_corpus");
  TCase *tc = tcase_create("corpus");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, corpus_agrees_with_the_c_parser);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
