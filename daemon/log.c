/* log.c - tshardd's log: one line per event on stderr (which mpirun forwards), prefixed with the
 * time, the rank and the level. TSD_LOG checks the level before evaluating its arguments. A line
 * may quote what a client sent (a path, a key, a message naming them): control characters in it,
 * C1 ones included, are written as \xNN, so no client can end a line or forge another.
 *
 * Lines of routine events that come at the rate of the operations (TSD_LOG_HELD: one per
 * operation) are held in a buffer and written together, at most TSD_LOG_HOLD_MS after the
 * oldest of them was held, when the buffer is full, before any other line (so the order is
 * kept) and at exit. A write to stderr is a system call here and a wake-up of mpirun, which
 * forwards it: per operation, that cost the node as much CPU as the daemons' own handling of a
 * small reshard. Every other line (errors, warnings, the life of the daemon and of its
 * connections) is written at once. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "tsd_base.h"
#include "ts_wait.h"

#define HOLD_BYTES 16384

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static char held[HOLD_BYTES];
static size_t held_len;
static int64_t held_since_ns; /* when the oldest held line was held */

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

/* The whole of buf to stderr (a full pipe takes it in parts). */
static void write_all(const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return; /* stderr is gone: nothing else could say so */
    buf += n;
    len -= (size_t)n;
  }
}

/* With hold_mu held. */
static void flush_held(void) {
  write_all(held, held_len);
  held_len = 0;
}

void tsd_log_flush(void) {
  pthread_mutex_lock(&hold_mu);
  flush_held();
  pthread_mutex_unlock(&hold_mu);
}

int64_t tsd_log_due_ns(void) {
  pthread_mutex_lock(&hold_mu);
  int64_t due = -1;
  if (held_len > 0) {
    due = held_since_ns + (int64_t)TSD_LOG_HOLD_MS * 1000000 - ts_wait_now_ns();
    if (due <= 0) {
      flush_held();
      due = -1;
    }
  }
  pthread_mutex_unlock(&hold_mu);
  return due;
}

/* One line, control bytes escaped, ended by a newline: held or written at once. */
static void emit(int level, bool hold, const char *fmt, va_list ap) {
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld tshardd[%d] %s: ", tm.tm_hour,
                   tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_rank, tsd_log_level_name(level));
  if (n > 0 && (size_t)n < sizeof line)
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  char safe[sizeof line * 4 + 1];
  escape_controls(line, safe, sizeof safe - 1);
  size_t len = strlen(safe);
  safe[len++] = '\n';
  /* Under one mutex: lines of two threads neither interleave nor overtake held ones. */
  pthread_mutex_lock(&hold_mu);
  if (held_len + len > sizeof held || !hold)
    flush_held();
  if (hold && len <= sizeof held) {
    if (held_len == 0)
      held_since_ns = ts_wait_now_ns();
    memcpy(held + held_len, safe, len);
    held_len += len;
  } else {
    write_all(safe, len);
  }
  pthread_mutex_unlock(&hold_mu);
}

void tsd_log_write(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(level, false, fmt, ap);
  va_end(ap);
}

void tsd_log_write_held(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(level, true, fmt, ap);
  va_end(ap);
}
