/* tsd_metrics.h - the metrics endpoint of tshardd (libtsdmetrics, daemon/metrics/): an HTTP
 * server of its own thread (libmicrohttpd, http.c) that answers GET /metrics in the Prometheus
 * text exposition format (exposition.c: the format's rules; series.c: the series tshardd
 * exposes, read from the numbers the layers publish, counters.c in the base) and, on rank 0, the
 * live page (page.c: GET /, /api/ranks, /api/tensors). It includes the base, the wire layer
 * (operation names) and the comm library (bytes moved by peer class, the ranks' hosts); no layer
 * calls it but main.c, and it reads nothing the engine holds: the tensors come through the
 * source main.c gives (the catalog, daemon/catalog/). */
#ifndef TSD_METRICS_H
#define TSD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tsd_base.h"

/* ---------------------------------------------------------------------------------------------
 * exposition.c: text in the Prometheus exposition format 0.0.4, into a growing buffer. A failed
 * allocation marks the text failed (the scrape then answers 500) and later writes do nothing. */
typedef struct tsd_text {
  char *buf;
  size_t len, cap;
  bool failed;
} tsd_text;
void tsd_text_free(tsd_text *t); /* accepts NULL */
void tsd_text_add(tsd_text *t, const char *s, size_t n);
void tsd_text_printf(tsd_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A label value with the format's escapes (backslash, double quote, line feed). */
void tsd_text_label_value(tsd_text *t, const char *v);
/* "# HELP name help" (help escaped: backslash, line feed) and "# TYPE name type". */
void tsd_text_family(tsd_text *t, const char *name, const char *type, const char *help);
/* One sample: name{common,extra} value. common: labels already formatted (name="value",...);
 * extra: NULL, or "name" then value pairs ending with NULL, escaped here. */
void tsd_text_sample(tsd_text *t, const char *name, const char *common, const char *const *extra,
                     double value);

/* ---------------------------------------------------------------------------------------------
 * series.c: every series of tshardd, each with the job and rank labels. */
typedef struct tsd_series_ctx {
  char common[256]; /* job="...",rank="..." formatted once */
} tsd_series_ctx;
void tsd_series_init(tsd_series_ctx *c, const char *job, int rank);
/* The whole /metrics answer. */
void tsd_series_write(const tsd_series_ctx *c, tsd_text *t);

/* ---------------------------------------------------------------------------------------------
 * What the endpoint reads beyond the base: the world (ranks, hosts, rank 0's doorbell) and the
 * live page's tensors as JSON text (a new string, NULL when out of memory; any thread). */
struct ts_world;
typedef struct tsd_metrics_sources {
  struct ts_world *world;
  char *(*tensors_json)(void *ctx);
  void *ctx;
} tsd_metrics_sources;

/* ---------------------------------------------------------------------------------------------
 * page.c: the live page (rank 0): its sampler thread keeps rank 0's operation rate and latency
 * for the last TSD_PAGE_HISTORY seconds. */
#define TSD_PAGE_HISTORY 300
typedef struct tsd_page tsd_page;
int tsd_page_start(const tsd_metrics_sources *src, const char *job, tsd_page **out, ts_error *err);
void tsd_page_stop(tsd_page **p); /* accepts NULL */
void tsd_page_html(tsd_page *p, tsd_text *t);
void tsd_page_ranks(tsd_page *p, tsd_text *t); /* also marks the page watched */
void tsd_page_tensors(tsd_page *p, tsd_text *t);

/* ---------------------------------------------------------------------------------------------
 * http.c: the server. */
typedef struct tsd_metrics tsd_metrics;
/* Binds cfg->metrics_host:cfg->metrics_port + rank (errors name the address and the reason)
 * and starts the HTTP thread (on rank 0 with the live page). */
int tsd_metrics_start(const tsd_config *cfg, int rank, const tsd_metrics_sources *src,
                      tsd_metrics **out, ts_error *err);
/* Stops the thread, closes the socket and every connection, frees. Accepts NULL. */
void tsd_metrics_stop(tsd_metrics **m);

#endif
