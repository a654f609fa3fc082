/* counters.c - the numbers every layer of tshardd publishes for the metrics endpoint
 * (daemon/metrics/): answers by operation kind and status, operation latencies in fixed buckets,
 * and gauges (tensors, bytes by dtype, the memory account, connections, requests in flight,
 * background saves). Each number is a relaxed atomic written by the thread that owns it (the
 * engine after each turn with work, the loop thread as connections and requests come and go, the
 * operations as saves end) and read by the HTTP thread at any time: a scrape takes no lock any
 * producer holds, so it never waits for the engine and the engine never waits for it. */
#include <stdatomic.h>

#include "tsd_base.h"

/* Upper bounds of the latency buckets, in ns: 1, 2.5 and 5 per decade from 10 us to 100 s. */
static const uint64_t bounds_ns[TSD_LATENCY_BUCKETS] = {
    10000ULL,       25000ULL,       50000ULL,       100000ULL,      250000ULL,     500000ULL,
    1000000ULL,     2500000ULL,     5000000ULL,     10000000ULL,    25000000ULL,   50000000ULL,
    100000000ULL,   250000000ULL,   500000000ULL,   1000000000ULL,  2500000000ULL, 5000000000ULL,
    10000000000ULL, 25000000000ULL, 50000000000ULL, 100000000000ULL};

typedef struct latency {
  _Atomic uint64_t bucket[TSD_LATENCY_BUCKETS + 1]; /* the last: above every bound */
  _Atomic uint64_t sum_ns;
} latency;

static struct {
  _Atomic uint64_t answers[TSD_OP_KINDS][TSD_STATUS_CODES];
  latency lat[TSD_OP_KINDS];
  _Atomic uint64_t gauge[TSD_GAUGE_COUNT];
  _Atomic uint64_t dtype_bytes[TSD_DTYPES_MAX];
} numbers;

static int kind_of(int op_case) { return op_case > 0 && op_case < TSD_OP_KINDS ? op_case : 0; }

void tsd_count_answer(int op_case, int status) {
  int st = status >= 0 && status < TSD_STATUS_CODES ? status : TSD_STATUS_CODES - 1;
  atomic_fetch_add_explicit(&numbers.answers[kind_of(op_case)][st], 1, memory_order_relaxed);
}

void tsd_count_latency(int op_case, uint64_t ns) {
  latency *l = &numbers.lat[kind_of(op_case)];
  int b = 0;
  while (b < TSD_LATENCY_BUCKETS && ns > bounds_ns[b])
    b++;
  atomic_fetch_add_explicit(&l->bucket[b], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&l->sum_ns, ns, memory_order_relaxed);
}

void tsd_gauge_set(tsd_gauge g, uint64_t v) {
  atomic_store_explicit(&numbers.gauge[g], v, memory_order_relaxed);
}

void tsd_gauge_add(tsd_gauge g, int64_t delta) {
  atomic_fetch_add_explicit(&numbers.gauge[g], (uint64_t)delta, memory_order_relaxed);
}

void tsd_gauge_set_dtype_bytes(int dtype, uint64_t bytes) {
  if (dtype >= 0 && dtype < TSD_DTYPES_MAX)
    atomic_store_explicit(&numbers.dtype_bytes[dtype], bytes, memory_order_relaxed);
}

uint64_t tsd_gauge_get(tsd_gauge g) {
  return atomic_load_explicit(&numbers.gauge[g], memory_order_relaxed);
}

uint64_t tsd_counted_answers(int op_case, int status) {
  if (op_case < 0 || op_case >= TSD_OP_KINDS || status < 0 || status >= TSD_STATUS_CODES)
    return 0;
  return atomic_load_explicit(&numbers.answers[op_case][status], memory_order_relaxed);
}

uint64_t tsd_counted_answers_total(void) {
  uint64_t n = 0;
  for (int k = 0; k < TSD_OP_KINDS; k++)
    for (int s = 0; s < TSD_STATUS_CODES; s++)
      n += atomic_load_explicit(&numbers.answers[k][s], memory_order_relaxed);
  return n;
}

uint64_t tsd_counted_dtype_bytes(int dtype) {
  if (dtype < 0 || dtype >= TSD_DTYPES_MAX)
    return 0;
  return atomic_load_explicit(&numbers.dtype_bytes[dtype], memory_order_relaxed);
}

uint64_t tsd_latency_bound_ns(int b) {
  return b >= 0 && b < TSD_LATENCY_BUCKETS ? bounds_ns[b] : 0;
}

uint64_t tsd_counted_latency(int op_case, uint64_t buckets[TSD_LATENCY_BUCKETS + 1],
                             uint64_t *sum_ns) {
  const latency *l = &numbers.lat[op_case >= 0 && op_case < TSD_OP_KINDS ? op_case : 0];
  uint64_t count = 0;
  for (int b = 0; b <= TSD_LATENCY_BUCKETS; b++) {
    buckets[b] = atomic_load_explicit(&l->bucket[b], memory_order_relaxed);
    count += buckets[b];
  }
  *sum_ns = atomic_load_explicit(&l->sum_ns, memory_order_relaxed);
  return count;
}
