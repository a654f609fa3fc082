/* attr_echo.c - the daemon's attribute parser as a filter, for the differential tests of the
 * Python port (tests/python/test_attr_corpus.py): reads one JSON string per line on stdin (an
 * attribute's text) and writes one JSON object per line: {"canonical": TEXT} when ts_attr_parse
 * accepts it (TEXT is ts_attr_format's canonical form), else {"error": STATUS_NAME,
 * "message": MSG}. A NUL in the text ends it, as for the C API. Exits 2 on a line that is not a
 * JSON string. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_plan.h"

static json_t *echo(const char *text) {
  ts_attr *a = NULL;
  ts_error err = {0};
  int rc = ts_attr_parse(text, &a, &err);
  if (rc != TS_OK)
    return json_pack("{s:s, s:s}", "error", ts_status_name(rc), "message", err.msg);
  size_t n = ts_attr_format(a, NULL, 0);
  char *buf = malloc(n + 1);
  json_t *out = NULL;
  if (buf) {
    ts_attr_format(a, buf, n + 1);
    out = json_pack("{s:s}", "canonical", buf);
  }
  free(buf);
  ts_attr_destroy(&a);
  return out;
}

int main(void) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int status = 0;
  while ((len = getline(&line, &cap, stdin)) > 0) {
    json_error_t jerr;
    json_t *in = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!in || !json_is_string(in)) {
      fprintf(stderr, "attr_echo: line is not a JSON string: %s\n", in ? "" : jerr.text);
      json_decref(in);
      status = 2;
      break;
    }
    json_t *out = echo(json_string_value(in));
    char *dump = out ? json_dumps(out, JSON_COMPACT) : NULL;
    if (!dump) {
      fprintf(stderr, "attr_echo: out of memory\n");
      status = 2;
    } else {
      puts(dump);
      fflush(stdout);
    }
    free(dump);
    json_decref(out);
    json_decref(in);
    if (status)
      break;
  }
  free(line);
  return status;
}
