/* tsd_base.h - what every layer of tshardd may include: its settings (config.c: one table serves
 * the flags, --help and the startup log), its log (log.c) and the numbers it publishes for the
 * metrics endpoint (counters.c, and view.c for rank 0's live page). The layers below it
 * (wire/, engine/, front/, ops/) each have their own header; see daemon/README.md for the order
 * in which they may include each other. Names: tsd_* internal to the daemon, static everything
 * else. */
#ifndef TSD_BASE_H
#define TSD_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tshard_errors.h"

/* ---------------------------------------------------------------------------------------------
 * log.c: a level check before the arguments are evaluated. */
typedef enum { TSD_LOG_ERROR, TSD_LOG_WARN, TSD_LOG_INFO, TSD_LOG_DEBUG } tsd_log_level;
extern int tsd_log_threshold;
void tsd_log_set_rank(int rank);
int tsd_log_parse_level(const char *text);
const char *tsd_log_level_name(int level);
void tsd_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TSD_LOG(level, ...)                                                                        \
  do {                                                                                             \
    if ((level) <= tsd_log_threshold)                                                              \
      tsd_log_write((level), __VA_ARGS__);                                                         \
  } while (0)
/* A routine line at the rate of the operations: held, written with others within
 * TSD_LOG_HOLD_MS (and before any line of TSD_LOG, and at tsd_log_flush). */
#define TSD_LOG_HOLD_MS 100
void tsd_log_write_held(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TSD_LOG_HELD(level, ...)                                                                   \
  do {                                                                                             \
    if ((level) <= tsd_log_threshold)                                                              \
      tsd_log_write_held((level), __VA_ARGS__);                                                    \
  } while (0)
/* Writes the held lines. */
void tsd_log_flush(void);
/* Writes the held lines whose time has come; then ns until the next are due, -1 when none are
 * held. */
int64_t tsd_log_due_ns(void);

/* ---------------------------------------------------------------------------------------------
 * config.c: one table serves the flags, --help and the startup log. */
#define TSD_RESUME_RULES_MAX 16
typedef struct tsd_config {
  char socket_dir[512];
  char job[64];
  char listen[256]; /* "" or tcp://HOST:PORT */
  char token_file[512];
  char metrics[256];      /* "" or HOST:PORT of the Prometheus endpoint (daemon/metrics/) */
  int64_t metrics_remote; /* 1: --metrics may bind an address other than loopback */
  int64_t metrics_page;   /* 1: rank 0's metrics port serves the live page (metrics/page.c) */
  int64_t max_frame;
  int64_t memory_limit;  /* 0: unbounded; TSD_MEMORY_AUTO until main.c resolves it */
  int64_t staging;       /* executor staging bytes per reshard */
  int64_t chunk;         /* default chunk of get answers */
  int64_t ckpt_chunk;    /* checkpoint saves: chunk size of pieces (0: whole pieces) */
  int64_t copy_threads;  /* strided-copy threads (0: all cores) */
  int64_t frame_timeout; /* ms: to finish a frame once begun */
  int64_t auth_timeout;  /* ms: for a TCP client to present its token after connecting */
  int64_t max_unauth;    /* TCP connections without their token yet, at most */
  int64_t max_inflight;  /* requests of one connection with the engine at once */
  int64_t pool_cache;    /* bytes of freed buffers the pool keeps for reuse */
  int64_t pool_idle_ms;  /* cached buffers idle this long go back to the OS */
  int64_t pool_huge;     /* 1: stored slices and staging ask for transparent huge pages */
  /* idempotency keys and SPMD collectives (sequencer.c, keys.c) */
  int64_t key_ttl;                /* ms an answered key is remembered */
  int64_t key_max;                /* records rank 0 keeps at most */
  int64_t trace_ring;             /* operations the trace ring keeps (0: tracing off) */
  int64_t collective_timeout;     /* ms a collective waits for its participants by default */
  int64_t collective_timeout_max; /* ms a request may ask at most */
  int64_t collective_pending_max; /* collectives one connection may have waiting */
  int64_t agreement_timeout;      /* ms the ranks wait for one another in an agreement */
  int64_t batch_max_tensors;      /* tensors one batched operation may name */
  int64_t batch_max_bytes;        /* the whole bytes of the tensors one batch may name */
  /* snapshots (ops/bgsave.c): background saves of every tensor into snapshot_dir/<timestamp> */
  char snapshot_dir[512];     /* "": no snapshots */
  int64_t snapshot_every;     /* ms between periodic snapshots (0: on demand only) */
  int64_t snapshot_keep;      /* complete snapshots kept, the newest */
  int64_t shutdown_save_wait; /* ms a shutdown waits for a background save still writing */
  /* resume (ops/resume.c): the latest complete checkpoint under resume_dir restored before
   * serving; tensors whose saved ranks are not all in the job take the first rule's attribute
   * whose glob matches their name ("GLOB=ATTR", the glob up to the first '=') */
  char resume_dir[512];
  char resume_attr[TSD_RESUME_RULES_MAX][512];
  int nresume_attr;
  char link_rates[128]; /* "host=RATE,cross=RATE" (either part; missing ones measured at start) */
  int log_level;
  /* derived */
  char token[256];
  char tcp_host[128];
  int tcp_port;
  char metrics_host[64]; /* an IPv4 address */
  int metrics_port;      /* rank r serves on metrics_port + r */
} tsd_config;

#define TSD_MEMORY_AUTO (-1) /* --memory-limit auto: chosen at start (tsd_memory_auto) */
/* Returns 0 to run, 1 when --help was printed (exit 0), -1 on a bad flag (message printed). */
int tsd_config_parse(tsd_config *cfg, int argc, char **argv);
void tsd_config_log(const tsd_config *cfg);
/* --memory-limit auto: the limit for one of node_daemons daemons of the job on this node (0:
 * none, when the available memory is unknown); why gets how it was chosen, for the log. */
int64_t tsd_memory_auto(int node_daemons, char *why, size_t cap);
/* The default per-user socket directory (TSHARD_SOCKET_DIR, else $XDG_RUNTIME_DIR/tshard, else
 * /tmp/tshard-<uid>). */
void tsd_default_socket_dir(char *buf, size_t cap);
/* Creates dir with mode 0700 if missing and checks that it is ours, a directory, and 0700. */
int tsd_prepare_socket_dir(const char *dir, ts_error *err);

/* ---------------------------------------------------------------------------------------------
 * counters.c: the numbers the layers publish for the metrics endpoint (daemon/metrics/), relaxed
 * atomics: each written by the thread that owns it, read by the HTTP thread without a lock. */
#define TSD_OP_KINDS 128       /* above every op_case of Request's oneof; 0: no kind (undecoded) */
#define TSD_STATUS_CODES 64    /* above every code of tshard_errors.h; the last: any other code */
#define TSD_LATENCY_BUCKETS 22 /* 10 us, 25 us, 50 us, 100 us, ... 100 s */
#define TSD_DTYPES_MAX 32      /* above every ts_dtype */
typedef enum tsd_gauge {
  TSD_G_SERVING,      /* 1 once the sockets serve */
  TSD_G_TENSORS,      /* tensors stored */
  TSD_G_STORED_BYTES, /* this rank's slices */
  TSD_G_MEM_IN_USE,   /* the pool's account: in use (slices + staging) */
  TSD_G_MEM_STAGING,  /* of in use: staging */
  TSD_G_MEM_CACHED,   /* freed buffers kept */
  TSD_G_MEM_LIMIT,    /* --memory-limit (0: none) */
  TSD_G_MEM_PEAK,
  TSD_G_COLLECTIVE_OPS, /* collective operations run (a counter) */
  TSD_G_CONNECTIONS,    /* clients connected */
  TSD_G_INFLIGHT,       /* requests handed to the engine and not answered yet */
  TSD_G_SAVE_WRITING,   /* 1 while a background save writes */
  TSD_G_SAVE_WRITTEN,   /* this rank's bytes written by the save writing (else the last) */
  TSD_G_SAVE_TOTAL,     /* this rank's bytes that save writes */
  TSD_G_SAVES_DONE,     /* background saves completed (a counter) */
  TSD_G_SAVES_FAILED,   /* failed or abandoned (a counter) */
  TSD_G_SAVED_BYTES,    /* bytes this rank wrote for completed background saves (a counter) */
  TSD_G_SNAPSHOT_MS,    /* wall clock ms of the last complete snapshot (0: none yet) */
  TSD_GAUGE_COUNT
} tsd_gauge;
/* An answer given to a client (any thread): its request's op_case (0: not decoded) and status. */
void tsd_count_answer(int op_case, int status);
/* An operation's time on this rank, into its kind's histogram. */
void tsd_count_latency(int op_case, uint64_t ns);
void tsd_gauge_set(tsd_gauge g, uint64_t v);
void tsd_gauge_add(tsd_gauge g, int64_t delta);
void tsd_gauge_set_dtype_bytes(int dtype, uint64_t bytes);
/* The readers (the HTTP thread). */
uint64_t tsd_gauge_get(tsd_gauge g);
uint64_t tsd_counted_answers(int op_case, int status);
uint64_t tsd_counted_answers_total(void); /* every kind and status */
uint64_t tsd_counted_dtype_bytes(int dtype);
/* The upper bound of bucket b in ns (0 outside the bounds). */
uint64_t tsd_latency_bound_ns(int b);
/* A kind's buckets (each bucket's own count; the last above every bound) and sum: returns their
 * total count, from the same reads as the buckets (so the histogram is consistent). */
uint64_t tsd_counted_latency(int op_case, uint64_t buckets[TSD_LATENCY_BUCKETS + 1],
                             uint64_t *sum_ns);

/* ---------------------------------------------------------------------------------------------
 * view.c: the job's ranks as rank 0 last gathered them for the live page, and whether anyone
 * watches it. Each rank gives TSD_VIEW_FIELDS numbers, in this order. */
typedef enum tsd_view_field {
  TSD_VIEW_HELD, /* the memory account: held (in use but staging) */
  TSD_VIEW_STAGING,
  TSD_VIEW_CACHED,
  TSD_VIEW_LIMIT, /* --memory-limit (0: none) */
  TSD_VIEW_PEAK,
  TSD_VIEW_TENSORS,     /* tensors stored */
  TSD_VIEW_STORED,      /* bytes of this rank's slices */
  TSD_VIEW_ANSWERS,     /* requests answered (every kind and status) */
  TSD_VIEW_COLLECTIVES, /* collective operations run */
  TSD_VIEW_CONNECTIONS,
  TSD_VIEW_INFLIGHT,
  TSD_VIEW_FIELDS
} tsd_view_field;
#define TSD_VIEW_WATCH_MS 10000 /* the page counts as watched this long after its last read */
#define TSD_VIEW_PERIOD_MS 1000 /* rank 0 gathers this often while it is watched */
int64_t tsd_view_now_ms(void);  /* CLOCK_MONOTONIC */
/* The HTTP thread: the page's rank data was read. True when nobody watched before (so the
 * caller wakes rank 0's engine). */
bool tsd_view_watch(void);
bool tsd_view_watched(int64_t now_ms);
/* Rank 0's engine: every rank's numbers (nranks * TSD_VIEW_FIELDS, rank-major). */
void tsd_view_publish(const int64_t *v, int nranks, int64_t at_ms);
/* A copy of the last published view into *out (malloc'd; free it), its ranks (0: none yet). */
int tsd_view_read(int64_t **out, int64_t *at_ms);

/* fault.c: fault injection for tests, compiled in, off unless TSHARD_FAULT names faults when
 * the daemon starts. */
typedef enum tsd_fault_kind {
  TSD_FAULT_REPLY_QUEUE,      /* an answer cannot be queued (as out of memory) */
  TSD_FAULT_ORDER_DECODE,     /* an ORDER from rank 0 does not decode */
  TSD_FAULT_AGREEMENT_SILENT, /* this rank stops answering an operation's agreement */
  TSD_FAULT_BATCH_TRANSFER,   /* this rank fails a reshard_many's last transfer, after the others
                                 moved */
  TSD_FAULT_SAVE_HOLD,        /* a background save's writer waits after its first piece until
                               * the daemon stops (then completes) */
  TSD_FAULT_SAVE_STUCK,       /* the same, until the stopping daemon abandons the save */
  TSD_FAULT_COUNT
} tsd_fault_kind;

/* Reads TSHARD_FAULT once: a comma-separated list of KIND[@RANK][*COUNT] (KIND: reply-queue,
 * order-decode, agreement-silent,
 * batch-transfer, save-hold, save-stuck; RANK: only that rank, else every rank; COUNT: how many
 * times, default 1). Unset or empty: no fault. */
int tsd_fault_init(int rank, ts_error *err);
/* How many more times the fault fires on this rank (takes them all). */
int tsd_fault_take_all(tsd_fault_kind k);
/* Whether the fault fires now (takes one). The engine thread only, after tsd_fault_init. */
bool tsd_fault_fire(tsd_fault_kind k);

#endif
