/* http.c - the metrics endpoint's HTTP server: libmicrohttpd with its own polling thread, on a
 * socket bound here (so a bad address or a port in use is a clear startup error). Requests are
 * routed by exact path through one table (GET and HEAD only: other methods 405 with Allow,
 * unknown paths 404): /metrics on every rank, the live page (/, /api/ranks, /api/tensors:
 * page.c) on rank 0, other ranks answering 404 naming rank 0's port. A scrape formats from the
 * published numbers (series.c) and never waits for the engine. Slow or many clients cannot hurt the
 * daemon: at most TSD_METRICS_CONNECTIONS connections (more are refused at accept), each closed
 * after TSD_METRICS_TIMEOUT_S without progress, with TSD_METRICS_CONN_MEMORY bytes for its request
 * (larger headers are answered 431 and closed); none of it touches the engine or the loop
 * thread. The endpoint neither asks nor shows the RPC token. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tsd_metrics.h"

#define TSD_METRICS_CONNECTIONS 32
#define TSD_METRICS_TIMEOUT_S 5
#define TSD_METRICS_CONN_MEMORY (32 * 1024)

struct tsd_metrics {
  struct MHD_Daemon *mhd; /* owns the listening socket once started (closes it when stopped) */
  tsd_series_ctx series;
  tsd_page *page; /* rank 0 only */
  int page_port;  /* rank 0's port, named by the other ranks' 404 */
};

/* A route: the answer to GET of its path, into a new text with its content type. */
typedef struct route {
  const char *path;
  const char *content_type;
  bool page; /* the live page's: rank 0 only */
  void (*answer)(tsd_metrics *m, tsd_text *t);
} route;

static void answer_metrics(tsd_metrics *m, tsd_text *t) { tsd_series_write(&m->series, t); }
static void answer_page(tsd_metrics *m, tsd_text *t) { tsd_page_html(m->page, t); }
static void answer_ranks(tsd_metrics *m, tsd_text *t) { tsd_page_ranks(m->page, t); }
static void answer_tensors(tsd_metrics *m, tsd_text *t) { tsd_page_tensors(m->page, t); }

static const route routes[] = {
    {.path = "/metrics",
     .content_type = "text/plain; version=0.0.4; charset=utf-8",
     .answer = answer_metrics},
    {.path = "/", .content_type = "text/html; charset=utf-8", .page = true, .answer = answer_page},
    {.path = "/api/ranks",
     .content_type = "application/json",
     .page = true,
     .answer = answer_ranks},
    {.path = "/api/tensors",
     .content_type = "application/json",
     .page = true,
     .answer = answer_tensors},
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *ctype,
                             char *body, size_t len, bool owned, const char *allow) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    if (owned)
      free(body);
    return MHD_NO; /* MHD closes the connection */
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (allow)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  enum MHD_Result rc = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **req_cls) {
  (void)version, (void)upload_data, (void)upload_size, (void)req_cls;
  tsd_metrics *m = cls;
  static char not_found[] = "not found: this endpoint serves GET /metrics, and on rank 0 the "
                            "live page: GET /, /api/ranks, /api/tensors\n";
  static char bad_method[] = "method not allowed: use GET\n";
  static char no_memory[] = "no memory to format the metrics\n";
  const route *r = NULL;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (strcmp(url, routes[i].path) == 0)
      r = &routes[i];
  if (!r)
    return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", not_found, strlen(not_found), false, NULL);
  if (r->page && !m->page) {
    char *msg = malloc(160);
    if (!msg)
      return MHD_NO;
    int n = m->page_port < 0
                ? snprintf(msg, 160, "not found: the live page is off (--metrics-page 0)\n")
                : snprintf(msg, 160,
                           "not found: the live page is served by rank 0, on port "
                           "%d\n",
                           m->page_port);
    return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", msg, (size_t)n, true, NULL);
  }
  bool head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (!head && strcmp(method, MHD_HTTP_METHOD_GET) != 0)
    return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", bad_method, strlen(bad_method),
                 false, "GET, HEAD");
  tsd_text t = {0};
  r->answer(m, &t);
  if (t.failed || !t.buf) {
    tsd_text_free(&t);
    return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", no_memory, strlen(no_memory),
                 false, NULL);
  }
  return reply(conn, MHD_HTTP_OK, r->content_type, t.buf, t.len, true, NULL);
}

/* The listening socket on host:port, or -1 with err naming the address and why. */
static int listen_on(const char *host, int port, ts_error *err) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
    ts_error_set(err, TS_INVALID_ARGUMENT, "--metrics: '%s' is not an IPv4 address", host);
    return -1;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
  if (fd < 0) {
    ts_error_set(err, TS_IO, "--metrics: cannot make a socket: %s", strerror(errno));
    return -1;
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* past TIME_WAIT only */
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    ts_error_set(err, TS_IO, "cannot serve metrics on %s:%d: %s%s", host, port, strerror(e),
                 e == EADDRINUSE ? " (another process listens there: choose another --metrics "
                                   "port)"
                                 : "");
    close(fd);
    return -1;
  }
  return fd;
}

int tsd_metrics_start(const tsd_config *cfg, int rank, const tsd_metrics_sources *src,
                      tsd_metrics **out, ts_error *err) {
  *out = NULL;
  int port = cfg->metrics_port + rank;
  if (port > 65535)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "--metrics %s: rank %d would serve on port "
                        "%d, above 65535; give a lower port",
                        cfg->metrics, rank, port);
  tsd_metrics *m = calloc(1, sizeof *m);
  if (!m)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the metrics endpoint");
  tsd_series_init(&m->series, cfg->job, rank);
  m->page_port = cfg->metrics_page ? (int)cfg->metrics_port : -1;
  if (rank == 0 && cfg->metrics_page && tsd_page_start(src, cfg->job, &m->page, err) != TS_OK) {
    free(m);
    return err->code;
  }
  int fd = listen_on(cfg->metrics_host, port, err);
  if (fd < 0) {
    tsd_page_stop(&m->page);
    free(m);
    return err->code;
  }
  m->mhd =
      MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL, on_request,
                       m, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
                       (unsigned)TSD_METRICS_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                       (unsigned)TSD_METRICS_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                       (size_t)TSD_METRICS_CONN_MEMORY, MHD_OPTION_END);
  if (!m->mhd) { /* whether it closed the socket is not said: left to the exit that follows */
    tsd_page_stop(&m->page);
    free(m);
    return ts_error_set(err, TS_IO,
                        "cannot start the metrics server on %s:%d (libmicrohttpd "
                        "refused: out of threads or descriptors?)",
                        cfg->metrics_host, port);
  }
  *out = m;
  return TS_OK;
}

void tsd_metrics_stop(tsd_metrics **pm) {
  tsd_metrics *m = pm ? *pm : NULL;
  if (!m)
    return;
  MHD_stop_daemon(m->mhd); /* joins its thread, closes the connections and the socket */
  tsd_page_stop(&m->page);
  free(m);
  *pm = NULL;
}
