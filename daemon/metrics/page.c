/* page.c - the live page on rank 0's metrics port: GET / (page.html, built into the daemon, no
 * external assets), GET /api/ranks (the job's ranks: host and NUMA node from the world, the
 * numbers rank 0 last gathered from every rank, daemon/view.c, and rank 0's operations per second
 * and mean latency over the last TSD_PAGE_HISTORY seconds, sampled here once a second) and GET
 * /api/tensors (the catalog's tensors with each rank's box, from the source main.c gives).
 * Reading /api/ranks marks the page watched, so rank 0's engine gathers the ranks about once a
 * second while it is (its doorbell rung when nobody watched before); none of this waits for the
 * engine. */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ts_comm.h"
#include "tsd_metrics.h"
#include "tsd_wire.h"

extern const unsigned char tsd_page_html_bytes[];
extern const unsigned long tsd_page_html_len;

typedef struct sample {
  int64_t t_ms;
  uint64_t answers, lat_count, lat_sum_ns;
} sample;

struct tsd_page {
  tsd_metrics_sources src;
  const char *job;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: the sampler's nap, cut short at stop */
  bool stop;
  sample ring[TSD_PAGE_HISTORY + 1];
  int head, n; /* the oldest at head */
};

/* Rank 0's counts now: answers, and the latencies of every kind but the page's own observe. */
static sample take(void) {
  sample s = {.t_ms = tsd_view_now_ms(), .answers = tsd_counted_answers_total()};
  for (int k = 1; k < TSD_OP_KINDS; k++) {
    if (k == TSHARD__REQUEST__OP_OBSERVE)
      continue;
    uint64_t b[TSD_LATENCY_BUCKETS + 1], sum;
    s.lat_count += tsd_counted_latency(k, b, &sum);
    s.lat_sum_ns += sum;
  }
  return s;
}

static void *sampler(void *arg) {
  tsd_page *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    sample s = take();
    int cap = TSD_PAGE_HISTORY + 1;
    p->ring[(p->head + p->n) % cap] = s;
    if (p->n < cap)
      p->n++;
    else
      p->head = (p->head + 1) % cap;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += 1;
    while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &t) == 0) {
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int tsd_page_start(const tsd_metrics_sources *src, const char *job, tsd_page **out, ts_error *err) {
  *out = NULL;
  tsd_page *p = calloc(1, sizeof *p);
  if (!p)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the live page");
  p->src = *src;
  p->job = job;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&p->mu, NULL);
  if (pthread_create(&p->thread, NULL, sampler, p) != 0) {
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return ts_error_set(err, TS_IO, "cannot start the live page's sampler thread");
  }
  *out = p;
  return TS_OK;
}

void tsd_page_stop(tsd_page **pp) {
  tsd_page *p = pp ? *pp : NULL;
  if (!p)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
  *pp = NULL;
}

void tsd_page_html(tsd_page *p, tsd_text *t) {
  (void)p;
  tsd_text_add(t, (const char *)tsd_page_html_bytes, tsd_page_html_len);
}

/* Text of a jansson value into t (compact), then the value freed. */
static void add_json(tsd_text *t, json_t *v) {
  char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
  if (s)
    tsd_text_add(t, s, strlen(s));
  else
    t->failed = true;
  free(s);
  json_decref(v);
}

static json_t *history(tsd_page *p) {
  json_t *a = json_array();
  pthread_mutex_lock(&p->mu);
  int cap = TSD_PAGE_HISTORY + 1;
  int64_t t0 = p->n ? p->ring[p->head].t_ms : 0;
  for (int i = 1; a && i < p->n; i++) {
    const sample *x = &p->ring[(p->head + i - 1) % cap], *y = &p->ring[(p->head + i) % cap];
    double dt = (double)(y->t_ms - x->t_ms) / 1000.0;
    uint64_t dn = y->lat_count - x->lat_count;
    json_t *o = json_object();
    json_object_set_new(o, "t", json_real((double)(y->t_ms - t0) / 1000.0));
    json_object_set_new(o, "ops_per_s",
                        json_real(dt > 0 ? (double)(y->answers - x->answers) / dt : 0.0));
    json_object_set_new(o, "latency_ms",
                        json_real(dn ? (double)(y->lat_sum_ns - x->lat_sum_ns) / dn / 1e6 : 0.0));
    json_array_append_new(a, o);
  }
  pthread_mutex_unlock(&p->mu);
  return a;
}

static const char *const field_names[TSD_VIEW_FIELDS] = {
    [TSD_VIEW_HELD] = "held",
    [TSD_VIEW_STAGING] = "staging",
    [TSD_VIEW_CACHED] = "cached",
    [TSD_VIEW_LIMIT] = "limit",
    [TSD_VIEW_PEAK] = "peak",
    [TSD_VIEW_TENSORS] = "tensors",
    [TSD_VIEW_STORED] = "stored",
    [TSD_VIEW_ANSWERS] = "answers",
    [TSD_VIEW_COLLECTIVES] = "collectives",
    [TSD_VIEW_CONNECTIONS] = "connections",
    [TSD_VIEW_INFLIGHT] = "inflight",
};

void tsd_page_ranks(tsd_page *p, tsd_text *t) {
  if (tsd_view_watch())
    ts_world_bell_ring(p->src.world, 0); /* rank 0's engine gathers from now on */
  int64_t *v = NULL, at_ms = 0;
  int nv = tsd_view_read(&v, &at_ms);
  int size = ts_world_size(p->src.world);
  json_t *root = json_object(), *ranks = json_array();
  json_object_set_new(root, "job", json_string(p->job));
  json_object_set_new(root, "world", json_integer(size));
  json_object_set_new(root, "gathered_ms_ago",
                      nv ? json_integer(tsd_view_now_ms() - at_ms) : json_null());
  for (int r = 0; ranks && r < size; r++) {
    json_t *o = json_object();
    json_object_set_new(o, "rank", json_integer(r));
    json_object_set_new(o, "host", json_string(ts_world_host_name(p->src.world, r)));
    json_object_set_new(o, "numa", json_integer(ts_world_numa_of(p->src.world, r)));
    for (int f = 0; f < TSD_VIEW_FIELDS; f++)
      json_object_set_new(o, field_names[f],
                          r < nv ? json_integer(v[(size_t)r * TSD_VIEW_FIELDS + f]) : json_null());
    json_array_append_new(ranks, o);
  }
  free(v);
  json_object_set_new(root, "ranks", ranks);
  json_object_set_new(root, "history", history(p));
  add_json(t, root);
}

void tsd_page_tensors(tsd_page *p, tsd_text *t) {
  char *s = p->src.tensors_json ? p->src.tensors_json(p->src.ctx) : NULL;
  if (s)
    tsd_text_add(t, s, strlen(s));
  else if (p->src.tensors_json)
    t->failed = true;
  else
    tsd_text_add(t, "{\"tensors\":[]}", 14);
  free(s);
}
