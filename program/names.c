/* names.c - the character rules for the strings of a program. Every name (the program's, dim
 * groups', inputs', results', references in args and outputs, dtypes and op names) follows one
 * rule: 1 to TSP_NAME_MAX characters from letters, digits, '_', '-' and '.', the first a letter
 * or '_'. Einsum equations and dim formulas have their own small alphabets. The parser checks
 * each string against its rule before using it, and the emitter checks again what it prints into
 * the generated C (comments only), so no text a client sends reaches the compiler unchecked. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define NAME_RULE                                                                                  \
  "names are 1 to 63 characters from letters, digits, '_', '-' and '.', the first a letter or '_'"
#define EQ_RULE "an einsum equation has letters, ',' and one '->' (\"ij,jk->ik\")"
#define FORMULA_RULE "a dim formula has group names, digits, '+', '-', '*' and spaces (\"2*n-1\")"

_Static_assert(TSP_NAME_MAX < TSP_NAME, "a valid name fits a node's name buffer");

static bool letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool name_char(unsigned char c, size_t i) {
  return letter(c) || c == '_' || (i > 0 && (digit(c) || c == '-' || c == '.'));
}

static bool eq_char(unsigned char c, size_t i) {
  (void)i;
  return letter(c) || c == ',' || c == '-' || c == '>';
}

static bool formula_char(unsigned char c, size_t i) {
  (void)i;
  return letter(c) || digit(c) || c == '_' || c == '+' || c == '-' || c == '*' || c == ' ';
}

/* The first position of s (at most max bytes) outside the alphabet; -1 when all are in it. */
static long first_bad(const char *s, size_t max, bool (*ok)(unsigned char, size_t)) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n && i < max; i++)
    if (!ok((unsigned char)s[i], i))
      return (long)i;
  return -1;
}

/* The error for s: empty, too long, or its first character outside the rule. The string itself
 * is never echoed (it may hold line ends or terminal controls); the bad byte is described. */
static int refuse(const char *field, const char *s, size_t max, long bad, const char *rule,
                  ts_error *err) {
  size_t n = strlen(s);
  if (n == 0)
    return ts_error_set(err, TS_PARSE, "%s is empty; %s", field, rule);
  if (bad < 0)
    return ts_error_set(err, TS_PARSE, "%s has %zu characters, more than %zu; %s", field, n, max,
                        rule);
  unsigned char c = (unsigned char)s[bad];
  char what[32];
  if (c > 0x20 && c < 0x7f)
    snprintf(what, sizeof what, "'%c' (0x%02x)", c, c);
  else if (c < 0x80)
    snprintf(what, sizeof what, "byte 0x%02x (%s)", c, c == ' ' ? "a space" : "a control");
  else
    snprintf(what, sizeof what, "byte 0x%02x (not ASCII)", c);
  return ts_error_set(err, TS_PARSE, "%s: character %s at position %ld is not allowed; %s", field,
                      what, bad, rule);
}

static int check(const char *field, const char *s, size_t max, bool (*ok)(unsigned char, size_t),
                 const char *rule, ts_error *err) {
  if (!s)
    s = "";
  long bad = first_bad(s, max, ok);
  if (*s && bad < 0 && strlen(s) <= max)
    return TS_OK;
  return refuse(field, s, max, bad, rule, err);
}

bool tsp_name_valid(const char *s) {
  return s && *s && strlen(s) <= TSP_NAME_MAX && first_bad(s, TSP_NAME_MAX, name_char) < 0;
}

int tsp_name_check(const char *field, const char *s, ts_error *err) {
  return check(field, s, TSP_NAME_MAX, name_char, NAME_RULE, err);
}

bool tsp_eq_valid(const char *s) {
  return s && *s && strlen(s) <= TSP_EQ_MAX && first_bad(s, TSP_EQ_MAX, eq_char) < 0;
}

int tsp_eq_check(const char *field, const char *s, ts_error *err) {
  return check(field, s, TSP_EQ_MAX, eq_char, EQ_RULE, err);
}

int tsp_formula_check(const char *field, const char *s, ts_error *err) {
  return check(field, s, TSP_FORMULA_MAX, formula_char, FORMULA_RULE, err);
}
