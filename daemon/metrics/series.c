/* series.c - the series tshardd exposes at /metrics, every one with the job and rank labels,
 * formatted from the numbers the layers publish (counters.c) and the comm library's byte
 * counters: nothing here reads what the engine holds or takes a lock it takes, and the work does
 * not grow with the tensors stored (the bytes by dtype are totals the store keeps). The list is
 * docs/metrics.md. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ts_comm.h"
#include "ts_kernels.h"
#include "tsd_metrics.h"
#include "tsd_wire.h"

void tsd_series_init(tsd_series_ctx *c, const char *job, int rank) {
  tsd_text t = {0};
  tsd_text_add(&t, "job=\"", 5);
  tsd_text_label_value(&t, job);
  tsd_text_printf(&t, "\",rank=\"%d\"", rank);
  snprintf(c->common, sizeof c->common, "%s", t.failed ? "job=\"\"" : t.buf);
  tsd_text_free(&t);
}

/* A family of one sample without labels of its own. */
static void single(const tsd_series_ctx *c, tsd_text *t, const char *name, const char *type,
                   const char *help, double v) {
  tsd_text_family(t, name, type, help);
  tsd_text_sample(t, name, c->common, NULL, v);
}

static void operations(const tsd_series_ctx *c, tsd_text *t) {
  tsd_text_family(t, "tshard_operations_total", "counter",
                  "Requests this daemon answered, by operation kind and status (the engine's "
                  "answers and the loop thread's: pings, lists, describes, refusals).");
  for (int k = 0; k < TSD_OP_KINDS; k++)
    for (int s = 0; s < TSD_STATUS_CODES; s++) {
      uint64_t n = tsd_counted_answers(k, s);
      if (!n)
        continue;
      const char *extra[] = {"kind", k ? tsd_op_name(k) : "undecoded", "status", ts_status_name(s),
                             NULL};
      tsd_text_sample(t, "tshard_operations_total", c->common, extra, (double)n);
    }
}

static void latencies(const tsd_series_ctx *c, tsd_text *t) {
  const char *name = "tshard_operation_duration_seconds";
  tsd_text_family(t, name, "histogram",
                  "Time of the operations this rank ran, by kind: collective ones from the "
                  "engine taking them in order to their outcome (on every rank), local ones "
                  "their handler's run, ping, list and describe the loop thread's answer.");
  for (int k = 1; k < TSD_OP_KINDS; k++) {
    uint64_t b[TSD_LATENCY_BUCKETS + 1], sum_ns;
    uint64_t count = tsd_counted_latency(k, b, &sum_ns);
    if (!count)
      continue;
    const char *kind = tsd_op_name(k);
    uint64_t cum = 0;
    char le[32];
    for (int i = 0; i <= TSD_LATENCY_BUCKETS; i++) {
      cum += b[i];
      if (i < TSD_LATENCY_BUCKETS)
        snprintf(le, sizeof le, "%g", (double)tsd_latency_bound_ns(i) * 1e-9);
      else
        snprintf(le, sizeof le, "+Inf");
      const char *extra[] = {"kind", kind, "le", le, NULL};
      tsd_text_sample(t, "tshard_operation_duration_seconds_bucket", c->common, extra, (double)cum);
    }
    const char *extra[] = {"kind", kind, NULL};
    tsd_text_sample(t, "tshard_operation_duration_seconds_sum", c->common, extra,
                    (double)sum_ns * 1e-9);
    tsd_text_sample(t, "tshard_operation_duration_seconds_count", c->common, extra, (double)count);
  }
}

static void memory(const tsd_series_ctx *c, tsd_text *t) {
  tsd_text_family(t, "tshard_tensor_bytes", "gauge",
                  "Bytes of this rank's slices of the stored tensors, by dtype.");
  for (int d = 0; d < TS_DTYPE_COUNT && d < TSD_DTYPES_MAX; d++) {
    const char *extra[] = {"dtype", ts_dtype_name((ts_dtype)d), NULL};
    tsd_text_sample(t, "tshard_tensor_bytes", c->common, extra, (double)tsd_counted_dtype_bytes(d));
  }
  uint64_t in_use = tsd_gauge_get(TSD_G_MEM_IN_USE), staging = tsd_gauge_get(TSD_G_MEM_STAGING);
  tsd_text_family(t, "tshard_memory_bytes", "gauge",
                  "The buffer pool's account, which --memory-limit bounds: held (stored slices "
                  "and what lives as long as a tensor), staging (put staging, get copies, "
                  "executor staging, shared segments), cached (freed buffers kept for reuse).");
  const char *held[] = {"account", "held", NULL}, *stg[] = {"account", "staging", NULL},
             *cached[] = {"account", "cached", NULL};
  tsd_text_sample(t, "tshard_memory_bytes", c->common, held,
                  (double)(in_use > staging ? in_use - staging : 0));
  tsd_text_sample(t, "tshard_memory_bytes", c->common, stg, (double)staging);
  tsd_text_sample(t, "tshard_memory_bytes", c->common, cached,
                  (double)tsd_gauge_get(TSD_G_MEM_CACHED));
  single(c, t, "tshard_memory_limit_bytes", "gauge",
         "--memory-limit: held + staging + cached never exceed it (0: no limit).",
         (double)tsd_gauge_get(TSD_G_MEM_LIMIT));
  single(c, t, "tshard_memory_peak_bytes", "gauge", "The highest in use + cached the pool reached.",
         (double)tsd_gauge_get(TSD_G_MEM_PEAK));
}

static void traffic(const tsd_series_ctx *c, tsd_text *t) {
  ts_comm_traffic tr;
  ts_comm_traffic_get(&tr);
  const char *name = "tshard_transfer_bytes_total";
  tsd_text_family(t, name, "counter",
                  "Data bytes this rank sent to and received from other ranks, by peer class "
                  "(same_node, other_node): the pieces of exchanges, all-to-alls, allgathers, "
                  "reduce-scatters, broadcasts (from the root) and those riding on agreements, "
                  "through MPI or single copies; allreduces are not counted.");
  const char *dirs[2] = {"sent", "received"}, *peers[2] = {"same_node", "other_node"};
  for (int d = 0; d < 2; d++)
    for (int p = 0; p < 2; p++) {
      const char *extra[] = {"direction", dirs[d], "peer", peers[p], NULL};
      tsd_text_sample(t, name, c->common, extra, (double)(d == 0 ? tr.sent[p] : tr.received[p]));
    }
}

static void saves(const tsd_series_ctx *c, tsd_text *t) {
  single(c, t, "tshard_background_save_writing", "gauge",
         "1 while a background save or snapshot writes on this rank.",
         (double)tsd_gauge_get(TSD_G_SAVE_WRITING));
  single(c, t, "tshard_background_save_written_bytes", "gauge",
         "This rank's bytes written by the background save writing (else by the last one).",
         (double)tsd_gauge_get(TSD_G_SAVE_WRITTEN));
  single(c, t, "tshard_background_save_size_bytes", "gauge",
         "This rank's bytes that background save writes in all.",
         (double)tsd_gauge_get(TSD_G_SAVE_TOTAL));
  tsd_text_family(t, "tshard_background_saves_total", "counter",
                  "Background saves and snapshots that ended, by outcome (done; failed: failed "
                  "or abandoned).");
  const char *done[] = {"outcome", "done", NULL}, *failed[] = {"outcome", "failed", NULL};
  tsd_text_sample(t, "tshard_background_saves_total", c->common, done,
                  (double)tsd_gauge_get(TSD_G_SAVES_DONE));
  tsd_text_sample(t, "tshard_background_saves_total", c->common, failed,
                  (double)tsd_gauge_get(TSD_G_SAVES_FAILED));
  single(c, t, "tshard_background_save_written_bytes_total", "counter",
         "Bytes this rank wrote for the background saves that completed.",
         (double)tsd_gauge_get(TSD_G_SAVED_BYTES));
  uint64_t snap_ms = tsd_gauge_get(TSD_G_SNAPSHOT_MS);
  if (!snap_ms)
    return; /* no snapshot completed: no age */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  double age = (double)now.tv_sec + (double)now.tv_nsec * 1e-9 - (double)snap_ms * 1e-3;
  single(c, t, "tshard_snapshot_age_seconds", "gauge",
         "Seconds since the last snapshot (--snapshot-dir) completed; absent before the first.",
         age > 0 ? age : 0);
}

void tsd_series_write(const tsd_series_ctx *c, tsd_text *t) {
  single(c, t, "tshard_up", "gauge", "1 while the daemon serves its clients.",
         (double)tsd_gauge_get(TSD_G_SERVING));
  operations(c, t);
  latencies(c, t);
  single(c, t, "tshard_collective_operations_total", "counter",
         "Collective operations this rank ran, in rank 0's order.",
         (double)tsd_gauge_get(TSD_G_COLLECTIVE_OPS));
  single(c, t, "tshard_tensors", "gauge", "Tensors stored.", (double)tsd_gauge_get(TSD_G_TENSORS));
  memory(c, t);
  traffic(c, t);
  single(c, t, "tshard_connections", "gauge", "Clients connected (Unix socket and TCP).",
         (double)tsd_gauge_get(TSD_G_CONNECTIONS));
  single(c, t, "tshard_requests_in_flight", "gauge",
         "Requests handed to the engine and not answered yet.",
         (double)tsd_gauge_get(TSD_G_INFLIGHT));
  saves(c, t);
}
