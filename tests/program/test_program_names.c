/* test_program_names.c - the character rules of program strings (program/names.c): names (1 to
 * 63 letters, digits, '_', '-', '.', the first a letter or '_'), einsum equations and dim
 * formulas, each refusal naming the field, the bad character (described, never echoed) and its
 * position, and the rule; the parser applies them to a program's name, and the emitter refuses to
 * print a name that breaks them even when the parser was bypassed. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "internal.h"
#include "program_fixture.h"
#include "ts_program.h"

#define RULE "names are 1 to 63 characters from letters, digits, '_', '-' and '.'"

START_TEST(test_name_rule) {
  static const char *good[] = {
      "x",         "_",
      "_x",        "Adam",
      "w.g-2_b",   "a0",
      "l1.weight", "a23456789012345678901234567890123456789012345678901234567890123"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    ts_error err = {0};
    ck_assert_msg(tsp_name_check("f", good[i], &err) == TS_OK, "%s: %s", good[i], err.msg);
    ck_assert(tsp_name_valid(good[i]));
  }
  /* the string, what the message must say about it */
  static const struct {
    const char *s, *says;
  } bad[] = {
      {"", "f is empty; " RULE},
      {"a*/b", "f: character '*' (0x2a) at position 1 is not allowed; " RULE},
      {"a\nb", "f: character byte 0x0a (a control) at position 1 is not allowed"},
      {"#define", "f: character '#' (0x23) at position 0"},
      {"a\"", "'\"' (0x22) at position 1"},
      {"a\\", "'\\' (0x5c) at position 1"},
      {"caf\xc3\xa9", "byte 0xc3 (not ASCII) at position 3"},
      {"a b", "byte 0x20 (a space) at position 1"},
      {"1x", "'1' (0x31) at position 0"},
      {"-x", "'-' (0x2d) at position 0"},
      {".x", "'.' (0x2e) at position 0"},
      {"a/b", "'/' (0x2f) at position 1"},
      {"a23456789012345678901234567890123456789012345678901234567890123x",
       "f has 64 characters, more than 63; " RULE},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ts_error err = {0};
    ck_assert_int_eq(tsp_name_check("f", bad[i].s, &err), TS_PARSE);
    ck_assert_int_eq(err.code, TS_PARSE);
    ck_assert_msg(strstr(err.msg, bad[i].says), "'%s' not in '%s'", bad[i].says, err.msg);
    ck_assert_msg(!strchr(err.msg, '\n'), "the message echoes a line end: %s", err.msg);
    ck_assert(!tsp_name_valid(bad[i].s));
  }
  ts_error err = {0};
  ck_assert_int_eq(tsp_name_check("f", NULL, &err), TS_PARSE);
}
END_TEST

START_TEST(test_eq_and_formula_rules) {
  ts_error err = {0};
  ck_assert_int_eq(tsp_eq_check("ops[1].eq", "ij,jk->ik", &err), TS_OK);
  ck_assert(tsp_eq_valid("Bij,Bjk->Bik"));
  static const char *bad_eq[] = {"ij->i*/", "ij->i\n", "...ij->ij",
                                 "ij->i #", "i j->ij", "ij->\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad_eq / sizeof *bad_eq; i++) {
    ck_assert_int_eq(tsp_eq_check("ops[1].eq", bad_eq[i], &err), TS_PARSE);
    ck_assert_msg(strstr(err.msg, "ops[1].eq: character") &&
                      strstr(err.msg, "an einsum equation has letters, ',' and one '->'"),
                  "%s", err.msg);
    ck_assert(!tsp_eq_valid(bad_eq[i]));
  }
  ck_assert_int_eq(tsp_formula_check("ops[3].shape[0]", "2*n - k+1", &err), TS_OK);
  static const char *bad_formula[] = {"n*/", "n\n", "n#", "n/2", "(n)", "n\"", "\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad_formula / sizeof *bad_formula; i++) {
    ck_assert_int_eq(tsp_formula_check("ops[3].shape[0]", bad_formula[i], &err), TS_PARSE);
    ck_assert_msg(strstr(err.msg, "ops[3].shape[0]: character") &&
                      strstr(err.msg, "a dim formula has group names"),
                  "%s", err.msg);
  }
}
END_TEST

static const char *prog_fmt =
    "{\"name\":\"%s\",\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[4]}],"
    "\"ops\":[{\"out\":\"y\",\"op\":\"neg\",\"args\":[\"x\"]}],\"outputs\":[\"y\"]}";

START_TEST(test_program_name_parsed) {
  char text[1024], msg[512];
  snprintf(text, sizeof text, prog_fmt, "x */ int evil; /* ");
  ck_assert_int_eq(tsp_test_make_fails(text, msg, sizeof msg), TS_PARSE);
  ck_assert_msg(strstr(msg, "name: character byte 0x20 (a space) at position 1") &&
                    strstr(msg, RULE),
                "%s", msg);
  snprintf(text, sizeof text, prog_fmt, "x\\n#include");
  ck_assert_int_eq(tsp_test_make_fails(text, msg, sizeof msg), TS_PARSE);
  ck_assert_msg(strstr(msg, "name: character byte 0x0a"), "%s", msg);
  /* a valid name is printed in the source's first comment */
  snprintf(text, sizeof text, prog_fmt, "adam_v2.step-1");
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, true);
  char *src = NULL;
  ts_error err = {0};
  ck_assert_int_eq(tsp_program_source(p, 0, &src, &err), TS_OK);
  ck_assert_msg(strncmp(src, "/* Program 'adam_v2.step-1', bucket", 35) == 0, "%.80s", src);
  free(src);
  tsp_program_destroy(p);
}
END_TEST

/* The emitter's own check: names that got past the parser (here written into the graph
 * directly) are never printed into the source. */
START_TEST(test_emitter_refuses_bad_tokens) {
  char text[1024];
  snprintf(text, sizeof text, prog_fmt, "ok");
  tsp_program *p = tsp_test_make(text, FAST_FLAGS, true);
  char *src = NULL;
  ts_error err = {0};
  char *saved = p->name;
  p->name = strdup("ok */ __attribute__((constructor)) static void f(void) {} /* ");
  ck_assert_int_eq(tsp_program_source(p, 0, &src, &err), TS_INTERNAL);
  ck_assert_ptr_null(src);
  ck_assert_msg(strstr(err.msg, "refusing to emit C: the program's name"), "%s", err.msg);
  free(p->name);
  p->name = saved;
  int last = p->n_nodes - 1;
  char name[TSP_NAME];
  memcpy(name, p->nodes[last].name, sizeof name);
  snprintf(p->nodes[last].name, sizeof p->nodes[last].name, "y\n#x");
  ck_assert_int_eq(tsp_program_source(p, 0, &src, &err), TS_INTERNAL);
  ck_assert_msg(strstr(err.msg, "refusing to emit C: node"), "%s", err.msg);
  ck_assert_int_eq(tsp_program_build(p, 0, &err), TS_INTERNAL);
  memcpy(p->nodes[last].name, name, sizeof name);
  ck_assert_int_eq(tsp_program_source(p, 0, &src, &err), TS_OK);
  free(src);
  tsp_program_destroy(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("program_names");
  TCase *t = tcase_create("program_names");
  tcase_set_timeout(t, 60);
  tcase_add_checked_fixture(t, tsp_test_setup, tsp_test_teardown);
  tcase_add_test(t, test_name_rule);
  tcase_add_test(t, test_eq_and_formula_rules);
  tcase_add_test(t, test_program_name_parsed);
  tcase_add_test(t, test_emitter_refuses_bad_tokens);
  suite_add_tcase(s, t);
  return ts_run_suite(s);
}
