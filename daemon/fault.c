/* fault.c - fault injection for tests: TSHARD_FAULT, read once at startup, arms faults that
 * the engine, the sequencer and the agreements take at the points where real failures happen
 * (an answer that cannot be queued, an ORDER that does not decode, a rank that stops answering
 * an agreement), so that tests reach the error paths through real daemons. Off by default; the
 * daemon logs a warning for every fault it arms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsd_base.h"

static const char *const fault_names[TSD_FAULT_COUNT] = {
    [TSD_FAULT_REPLY_QUEUE] = "reply-queue",
    [TSD_FAULT_ORDER_DECODE] = "order-decode",
    [TSD_FAULT_AGREEMENT_SILENT] = "agreement-silent",
    [TSD_FAULT_BATCH_TRANSFER] = "batch-transfer",
    [TSD_FAULT_SAVE_HOLD] = "save-hold",
    [TSD_FAULT_SAVE_STUCK] = "save-stuck",
};

static int armed[TSD_FAULT_COUNT];

/* One KIND[@RANK][*COUNT] item. */
static int parse_item(const char *item, int rank, ts_error *err) {
  char kind[32];
  size_t n = strcspn(item, "@*");
  if (n == 0 || n >= sizeof kind)
    goto bad;
  memcpy(kind, item, n);
  kind[n] = '\0';
  int k = 0;
  while (k < TSD_FAULT_COUNT && strcmp(fault_names[k], kind) != 0)
    k++;
  if (k == TSD_FAULT_COUNT)
    goto bad;
  const char *p = item + n;
  char *end;
  long at = -1, count = 1;
  if (*p == '@') {
    at = strtol(p + 1, &end, 10);
    if (end == p + 1 || at < 0)
      goto bad;
    p = end;
  }
  if (*p == '*') {
    count = strtol(p + 1, &end, 10);
    if (end == p + 1 || count < 1 || count > 1000000)
      goto bad;
    p = end;
  }
  if (*p != '\0')
    goto bad;
  if (at < 0 || at == rank) {
    armed[k] += (int)count;
    TSD_LOG(TSD_LOG_WARN, "fault injection armed: %s x%ld (TSHARD_FAULT)", kind, count);
  }
  return TS_OK;
bad:
  return ts_error_set(err, TS_INVALID_ARGUMENT,
                      "TSHARD_FAULT item '%s': expected KIND[@RANK][*COUNT] with KIND one of "
                      "reply-queue, order-decode, agreement-silent, batch-transfer, save-hold, "
                      "save-stuck",
                      item);
}

int tsd_fault_init(int rank, ts_error *err) {
  const char *env = getenv("TSHARD_FAULT");
  if (!env || !env[0])
    return TS_OK;
  char buf[512];
  if (strlen(env) >= sizeof buf)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "TSHARD_FAULT: at most %zu characters",
                        sizeof buf - 1);
  snprintf(buf, sizeof buf, "%s", env);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    int rc = parse_item(item, rank, err);
    if (rc)
      return rc;
  }
  return TS_OK;
}

int tsd_fault_take_all(tsd_fault_kind k) {
  int n = armed[k];
  armed[k] = 0;
  return n;
}

bool tsd_fault_fire(tsd_fault_kind k) {
  if (armed[k] <= 0)
    return false;
  armed[k]--;
  return true;
}
