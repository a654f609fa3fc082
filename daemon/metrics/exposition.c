/* exposition.c - the Prometheus text exposition format 0.0.4: "# HELP" and "# TYPE" lines, and
 * samples `name{label="value",...} value`, label values escaped (backslash, double quote, line
 * feed as \\, \" and \n), values as Go's strconv would print them (integers exactly, +Inf, NaN).
 * The text grows in a buffer doubled as needed. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsd_metrics.h"

void tsd_text_free(tsd_text *t) {
  if (!t)
    return;
  free(t->buf);
  memset(t, 0, sizeof *t);
}

static bool reserve(tsd_text *t, size_t more) {
  if (t->failed)
    return false;
  if (t->len + more + 1 <= t->cap)
    return true;
  size_t cap = t->cap ? t->cap : 16384;
  while (cap < t->len + more + 1)
    cap *= 2;
  char *b = realloc(t->buf, cap);
  if (!b) {
    t->failed = true;
    return false;
  }
  t->buf = b;
  t->cap = cap;
  return true;
}

void tsd_text_add(tsd_text *t, const char *s, size_t n) {
  if (!reserve(t, n))
    return;
  memcpy(t->buf + t->len, s, n);
  t->len += n;
  t->buf[t->len] = '\0';
}

void tsd_text_printf(tsd_text *t, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    t->failed = true;
    return;
  }
  if ((size_t)n < sizeof small) {
    tsd_text_add(t, small, (size_t)n);
    return;
  }
  if (!reserve(t, (size_t)n))
    return;
  va_start(ap, fmt);
  vsnprintf(t->buf + t->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

/* s with backslash and line feed escaped, and double quote too when quotes. */
static void escaped(tsd_text *t, const char *s, bool quotes) {
  const char *run = s;
  for (; *s; s++) {
    const char *esc = *s == '\\'            ? "\\\\"
                      : *s == '\n'          ? "\\n"
                      : quotes && *s == '"' ? "\\\""
                                            : NULL;
    if (!esc)
      continue;
    tsd_text_add(t, run, (size_t)(s - run));
    tsd_text_add(t, esc, 2);
    run = s + 1;
  }
  tsd_text_add(t, run, (size_t)(s - run));
}

void tsd_text_label_value(tsd_text *t, const char *v) { escaped(t, v, true); }

void tsd_text_family(tsd_text *t, const char *name, const char *type, const char *help) {
  tsd_text_printf(t, "# HELP %s ", name);
  escaped(t, help, false);
  tsd_text_printf(t, "\n# TYPE %s %s\n", name, type);
}

static void value_text(tsd_text *t, double v) {
  if (isnan(v))
    tsd_text_add(t, "NaN", 3);
  else if (isinf(v))
    tsd_text_add(t, v > 0 ? "+Inf" : "-Inf", 4);
  else if (v == floor(v) && fabs(v) < 9007199254740992.0) /* 2^53: exact as an integer */
    tsd_text_printf(t, "%.0f", v);
  else
    tsd_text_printf(t, "%.17g", v);
}

void tsd_text_sample(tsd_text *t, const char *name, const char *common, const char *const *extra,
                     double value) {
  tsd_text_add(t, name, strlen(name));
  tsd_text_add(t, "{", 1);
  tsd_text_add(t, common, strlen(common));
  for (int i = 0; extra && extra[i]; i += 2) {
    tsd_text_printf(t, ",%s=\"", extra[i]);
    tsd_text_label_value(t, extra[i + 1] ? extra[i + 1] : "");
    tsd_text_add(t, "\"", 1);
  }
  tsd_text_add(t, "} ", 2);
  value_text(t, value);
  tsd_text_add(t, "\n", 1);
}
