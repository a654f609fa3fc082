/* fuzz_attr.c - libFuzzer target for the attribute text parser (shard/plan/attr_text.c), built and
 * run by run_fuzz_attr.sh with ASan/UBSan and leak detection. For every input: no crash, leak or
 * hang; a refused text gives PARSE or BAD_ATTRIBUTE (NO_MEMORY aside) with a message, no
 * attribute, and a column inside the text (at most its length + 1); an accepted text's canonical
 * form parses back to an equal attribute that formats the same. A NUL ends the text (C API). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_plan.h"

static char *format(const ts_attr *a) {
  size_t n = ts_attr_format(a, NULL, 0);
  char *buf = malloc(n + 1);
  if (!buf)
    abort();
  if (ts_attr_format(a, buf, n + 1) != n || strlen(buf) != n)
    abort();
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  ts_attr *a = NULL;
  ts_error err = {0};
  int rc = ts_attr_parse(text, &a, &err);
  if (rc != TS_OK) {
    if (a || !err.msg[0] || (rc != TS_PARSE && rc != TS_BAD_ATTRIBUTE && rc != TS_NO_MEMORY))
      abort();
    const char *col = strstr(err.msg, "at column ");
    if (col && strtoull(col + 10, NULL, 10) > strlen(text) + 1)
      abort();
  } else {
    char *canon = format(a);
    ts_attr *b = NULL;
    if (ts_attr_parse(canon, &b, &err) != TS_OK || !ts_attr_equal(a, b))
      abort();
    char *again = format(b);
    if (strcmp(canon, again) != 0)
      abort();
    free(again);
    free(canon);
    ts_attr_destroy(&b);
    ts_attr_destroy(&a);
  }
  free(text);
  return 0;
}
