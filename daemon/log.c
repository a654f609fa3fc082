/* log.c - tshardd's log: one line per event on stderr (which mpirun forwards), prefixed with the
 * time, the rank and the level. TSD_LOG checks the level before evaluating its arguments. A line
 * may quote what a client sent (a path, a key, a message naming them): control characters in it,
 * C1 ones included, are written as \xNN, so no client can end a line or forge another. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "tsd_base.h"

int tsd_log_threshold = TSD_LOG_INFO;
static int log_rank = -1;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void tsd_log_set_rank(int rank) { log_rank = rank; }

int tsd_log_parse_level(const char *text) {
  for (int i = 0; i < 4; i++)
    if (text && strcasecmp(text, level_names[i]) == 0)
      return i;
  return -1;
}

const char *tsd_log_level_name(int level) {
  return level >= 0 && level < 4 ? level_names[level] : "?";
}

/* Copies text into out (of size cap >= 4 * strlen(text) + 1), control bytes as \xNN. */
static void escape_controls(const char *text, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *s = (const unsigned char *)text;
  size_t o = 0;
  for (size_t i = 0; s[i] && o + 9 < cap; i++) {
    bool c1 = s[i] == 0xc2 && s[i + 1] >= 0x80 && s[i + 1] < 0xa0;
    if (s[i] >= 0x20 && s[i] != 0x7f && !c1) {
      out[o++] = (char)s[i];
      continue;
    }
    unsigned v = c1 ? s[++i] : s[i]; /* C1: its code point, which is its second byte */
    out[o++] = '\\';
    out[o++] = 'x';
    out[o++] = hex[v >> 4];
    out[o++] = hex[v & 15];
  }
  out[o] = '\0';
}

void tsd_log_write(int level, const char *fmt, ...) {
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld tshardd[%d] %s: ", tm.tm_hour,
                   tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_rank,
                   tsd_log_level_name(level));
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line)
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  char safe[sizeof line * 4];
  escape_controls(line, safe, sizeof safe);
  fprintf(stderr, "%s\n", safe); /* one call: lines of two threads do not interleave */
  fflush(stderr);
}
