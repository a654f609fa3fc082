/* view.c - the job's ranks as rank 0's engine last gathered them for the live page, and whether
 * anyone watches it. The metrics endpoint's HTTP thread marks every read of the page's rank data
 * (tsd_view_watch); while the last mark is recent, rank 0's engine orders the internal observe
 * operation about once a second (ops/observe.c), which gathers every rank's numbers and publishes
 * them here (tsd_view_publish); the HTTP thread reads a copy (tsd_view_read). Nobody watching,
 * nothing is gathered. One mutex, held only to copy. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tsd_base.h"

static struct {
  pthread_mutex_t mu;
  int64_t *v; /* nranks * TSD_VIEW_FIELDS */
  int nranks;
  int64_t at_ms;
  _Atomic int64_t watched_ms; /* the last read of the page's rank data (0: never) */
} view = {.mu = PTHREAD_MUTEX_INITIALIZER};

int64_t tsd_view_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

bool tsd_view_watch(void) {
  int64_t now = tsd_view_now_ms();
  int64_t was = atomic_exchange_explicit(&view.watched_ms, now, memory_order_relaxed);
  return was == 0 || now - was >= TSD_VIEW_WATCH_MS;
}

bool tsd_view_watched(int64_t now_ms) {
  int64_t w = atomic_load_explicit(&view.watched_ms, memory_order_relaxed);
  return w != 0 && now_ms - w < TSD_VIEW_WATCH_MS;
}

void tsd_view_publish(const int64_t *v, int nranks, int64_t at_ms) {
  size_t bytes = (size_t)nranks * TSD_VIEW_FIELDS * sizeof *v;
  pthread_mutex_lock(&view.mu);
  if (nranks != view.nranks) {
    int64_t *nv = realloc(view.v, bytes ? bytes : 1);
    if (!nv) { /* the previous view stays */
      pthread_mutex_unlock(&view.mu);
      return;
    }
    view.v = nv;
    view.nranks = nranks;
  }
  memcpy(view.v, v, bytes);
  view.at_ms = at_ms;
  pthread_mutex_unlock(&view.mu);
}

int tsd_view_read(int64_t **out, int64_t *at_ms) {
  *out = NULL;
  pthread_mutex_lock(&view.mu);
  int n = view.nranks;
  size_t bytes = (size_t)n * TSD_VIEW_FIELDS * sizeof **out;
  if (n > 0 && (*out = malloc(bytes)) != NULL)
    memcpy(*out, view.v, bytes);
  else
    n = 0;
  *at_ms = view.at_ms;
  pthread_mutex_unlock(&view.mu);
  return n;
}
