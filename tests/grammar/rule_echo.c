/* rule_echo.c - the C matcher of attribute rules (proto/ts_rules.h) as a filter, for the
 * differential test of the Python port (tests/python/test_attr_rules.py): reads one JSON object
 * per line on stdin, {"patterns": [...], "name": NAME, "rule": TEXT}, and writes one JSON object
 * per line: {"valid": [true or false per pattern], "pick": INDEX or -1 (among the valid
 * patterns, in order), "split": [PATTERN, ATTR] or null for the rule's text}. Exits 2 on a line
 * that is not such an object. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_rules.h"

static json_t *echo(json_t *in) {
  json_t *pats = json_object_get(in, "patterns");
  const char *name = json_string_value(json_object_get(in, "name"));
  const char *rule = json_string_value(json_object_get(in, "rule"));
  if (!json_is_array(pats) || !name || !rule)
    return NULL;
  size_t n = json_array_size(pats);
  const char **valid = calloc(n ? n : 1, sizeof *valid);
  json_t *flags = json_array();
  int nv = 0;
  for (size_t i = 0; valid && i < n; i++) {
    const char *p = json_string_value(json_array_get(pats, i));
    ts_error err;
    bool ok = p && ts_attr_rule_pattern_check("pattern", p, strlen(p), &err) == TS_OK;
    json_array_append_new(flags, json_boolean(ok));
    if (ok)
      valid[nv++] = p;
  }
  size_t plen;
  const char *attr;
  ts_error err;
  json_t *split = ts_attr_rule_split("rule", rule, &plen, &attr, &err) == TS_OK
                      ? json_pack("[s%, s]", rule, plen, attr)
                      : json_null();
  json_t *out = json_pack("{s:o, s:i, s:o}", "valid", flags, "pick",
                          ts_attr_rule_pick(valid, nv, name), "split", split);
  free(valid);
  return out;
}

int main(void) {
  char line[1 << 16];
  while (fgets(line, sizeof line, stdin)) {
    json_error_t jerr;
    json_t *in = json_loads(line, 0, &jerr);
    json_t *out = in ? echo(in) : NULL;
    json_decref(in);
    if (!out)
      return 2;
    char *s = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (!s)
      return 2;
    puts(s);
    free(s);
    fflush(stdout);
  }
  return 0;
}
