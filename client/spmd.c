/* spmd.c - SPMD collectives in the C client: a client that declares its group
 * (tshard_set_group) sends create, reshard and drop with the group's ranks as participants, so
 * the daemons run each once every rank of the group submitted it (matched by the idempotency
 * key, which these calls then require), and answer every participant with one error naming the
 * missing ranks when the collective timeout passes first. The timeout sent is the group's, or
 * by default the client's own less 5 s, so that the daemons' error arrives before the client
 * gives up waiting. */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

void tsc_group_free(tshard_client *c) {
  free(c->group);
  c->group = NULL;
  c->ngroup = 0;
}

int tshard_set_group(tshard_client *c, const int *ranks, int n, int timeout_ms) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (n < 0 || (n > 0 && !ranks) || timeout_ms < 0)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "tshard_set_group: %d ranks, timeout %d ms; give n >= 0 ranks and a timeout "
                    ">= 0 (0: the client's timeout less 5 s)",
                    n, timeout_ms);
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0)
      return tsc_fail(c, TS_INVALID_ARGUMENT, "group rank %d is negative", ranks[i]);
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return tsc_fail(c, TS_INVALID_ARGUMENT, "group rank %d is named twice", ranks[i]);
  }
  int32_t *g = NULL;
  if (n > 0) {
    g = malloc((size_t)n * sizeof *g);
    if (!g)
      return tsc_fail(c, TS_NO_MEMORY, "no memory for a group of %d ranks", n);
    for (int i = 0; i < n; i++)
      g[i] = ranks[i];
  }
  tsc_group_free(c);
  c->group = g;
  c->ngroup = n;
  c->group_timeout_ms = timeout_ms;
  return TS_OK;
}

int tsc_apply_group(tshard_client *c, Tshard__Request *req) {
  if (c->ngroup == 0)
    return TS_OK;
  if (!req->idempotency_key || !req->idempotency_key[0])
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "a client with a group (tshard_set_group) gives each collective call "
                    "(create, reshard, drop, einsum, save, load) an idempotency key, the same "
                    "in every process of the group for the same call: the key matches the "
                    "participants' submissions");
  req->n_participants = (size_t)c->ngroup;
  req->participants = c->group;
  int t = c->group_timeout_ms;
  if (t == 0)
    t = c->timeout_ms > 6000 ? c->timeout_ms - 5000 : 1000;
  if (c->group_timeout_ms == 0 && t > TSC_COLLECTIVE_TIMEOUT_MAX_MS)
    t = TSC_COLLECTIVE_TIMEOUT_MAX_MS;
  req->collective_timeout_ms = (uint32_t)t;
  return TS_OK;
}
