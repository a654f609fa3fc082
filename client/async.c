/* async.c - operations in flight on one connection: tshard_submit_create, _reshard, _drop, _save
 * and _load send a request and return its ticket (the request id) without reading the answer;
 * tshard_wait (tshard_wait_ckpt: with a save's or load's report) reads answers until the
 * ticket's came, keeping those of other tickets for their own wait.
 *
 * A submit call runs the synchronous call with the client's submit_to set: tsc_call_sink then
 * sends the request and registers it here instead of reading (so each request is built and
 * checked in one place). Answers are matched by request id: tsc_recv hands an answer to a
 * ticket still in flight to tsc_ticket_keep, so synchronous calls made meanwhile read past them.
 * A wait that expires before an answer's first byte returns TS_TIMEOUT and the operation goes
 * on; one that expires in the middle of a frame breaks the connection as any call does. Each
 * ticket is waited on once (its record is then freed). */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_internal.h"

struct tsc_ticket {
  uint64_t id;
  bool done;
  int status;
  char *message; /* malloc'd, NULL: none */
  char strategy[32];
  uint64_t elapsed_us;
  tshard_ckpt_info *ckpt; /* malloc'd: a save's or load's report, NULL: none */
  char *save_path;        /* malloc'd: a save's directory (its lost-rank error names it) */
  int *ranks;             /* malloc'd: a relabeled reshard's target ranks (nranks), NULL: none */
  int nranks;
};

int tsc_ticket_add(tshard_client *c, uint64_t id, uint64_t *ticket) {
  if (c->nticket == c->ticket_cap) {
    size_t cap = c->ticket_cap ? 2 * c->ticket_cap : 16;
    tsc_ticket *t = realloc(c->tickets, cap * sizeof *t);
    if (!t) {
      c->broken = true; /* the answer would come to nobody */
      return tsc_fail(c, TS_NO_MEMORY,
                      "no memory to keep the ticket of request %llu; the "
                      "connection is closed",
                      (unsigned long long)id);
    }
    c->tickets = t;
    c->ticket_cap = cap;
  }
  c->tickets[c->nticket++] = (tsc_ticket){.id = id};
  *ticket = id;
  return TS_OK;
}

static tsc_ticket *ticket_find(tshard_client *c, uint64_t id);

void tsc_ticket_save_path(tshard_client *c, uint64_t id, const char *path) {
  tsc_ticket *t = ticket_find(c, id);
  if (t && !t->save_path)
    t->save_path = strdup(path); /* without memory: the plain lost-rank error */
}

static tsc_ticket *ticket_find(tshard_client *c, uint64_t id) {
  for (size_t i = 0; i < c->nticket; i++)
    if (c->tickets[i].id == id)
      return &c->tickets[i];
  return NULL;
}

bool tsc_ticket_keep(tshard_client *c, const Tshard__Response *r) {
  tsc_ticket *t = r->id ? ticket_find(c, r->id) : NULL;
  if (!t || t->done)
    return false;
  t->done = true;
  t->status = r->status;
  if (r->status != TS_OK)
    t->message = strdup(r->status == TS_RANK_LOST && c->lost_status ? c->lost
                        : r->message && r->message[0]               ? r->message
                                                                    : ts_strerror(r->status));
  if (r->strategy)
    snprintf(t->strategy, sizeof t->strategy, "%s", r->strategy);
  t->elapsed_us = r->elapsed_us;
  if (r->n_ranks && (t->ranks = malloc(r->n_ranks * sizeof *t->ranks))) {
    memcpy(t->ranks, r->ranks, r->n_ranks * sizeof *t->ranks);
    t->nranks = (int)r->n_ranks;
  }
  if (r->result_case == TSHARD__RESPONSE__RESULT_CKPT && (t->ckpt = malloc(sizeof *t->ckpt)))
    tsc_ckpt_info_copy(r->ckpt, t->ckpt); /* without memory the report is left out */
  return true;
}

void tsc_tickets_free(tshard_client *c) {
  for (size_t i = 0; i < c->nticket; i++) {
    free(c->tickets[i].message);
    free(c->tickets[i].ckpt);
    free(c->tickets[i].save_path);
    free(c->tickets[i].ranks);
  }
  free(c->tickets);
  c->tickets = NULL;
  c->nticket = c->ticket_cap = 0;
}

/* The ticket's outcome to the caller; its record freed. */
static int ticket_take(tshard_client *c, tsc_ticket *t, tshard_result *result,
                       tshard_ckpt_info *info) {
  int status = t->status;
  if (status != TS_OK)
    snprintf(c->message, sizeof c->message, "%s", t->message ? t->message : "");
  if (result) {
    result->status = status;
    snprintf(result->strategy, sizeof result->strategy, "%s", t->strategy);
    result->elapsed_us = t->elapsed_us;
  }
  if (t->strategy[0] && status == TS_OK) { /* a reshard's answer: tshard_reshard_ranks */
    free(c->reshard_ranks);
    c->reshard_ranks = t->ranks;
    c->reshard_nranks = t->nranks;
    t->ranks = NULL;
  }
  free(t->ranks);
  if (info && t->ckpt)
    *info = *t->ckpt;
  free(t->message);
  free(t->ckpt);
  free(t->save_path);
  *t = c->tickets[--c->nticket];
  return status;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_ticket(tshard_client *c, uint64_t ticket, int timeout_ms, tshard_result *result,
                       tshard_ckpt_info *info) {
  if (info)
    memset(info, 0, sizeof *info);
  c->message[0] = '\0';
  tsc_ticket *t = ticket ? ticket_find(c, ticket) : NULL;
  if (!t)
    return tsc_fail(c, TS_INVALID_ARGUMENT,
                    "ticket %llu is not in flight on this connection "
                    "(a ticket from tshard_submit_*, waited on once)",
                    (unsigned long long)ticket);
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  while (!(t = ticket_find(c, ticket))->done) {
    if (c->broken && c->lost_status)
      return tsc_lost_check(c, TS_IO);
    if (c->broken)
      return tsc_fail(c, TS_IO,
                      "the connection broke with request %llu in flight; what it did "
                      "on the daemons is not known here: reconnect and describe its tensors",
                      (unsigned long long)ticket);
    int left = deadline < 0 ? -1 : (int)(deadline - now_ms() > 0 ? deadline - now_ms() : 0);
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int got = poll(&p, 1, left);
    if (got == 0)
      return tsc_fail(c, TS_TIMEOUT,
                      "request %llu not answered within %d ms; it goes on (wait "
                      "again)",
                      (unsigned long long)ticket, timeout_ms);
    if (got < 0)
      continue; /* EINTR */
    Tshard__Response *r = NULL;
    tsc_recv(c, 0, &r, NULL, tsc_deadline(c)); /* one answer, any request's */
    if (r) {
      if (!tsc_ticket_keep(c, r) && r->id == 0 && r->status != TS_OK)
        c->broken = true; /* about the connection itself: it is closed */
      tsc_free(c, r);
    }
  }
  return ticket_take(c, t, result, info);
}

/* A save's ticket cut short by a lost rank answers the save's own error, naming its path, as
 * tshard_save does. */
int tshard_wait_ckpt(tshard_client *c, uint64_t ticket, int timeout_ms, tshard_result *result,
                     tshard_ckpt_info *info) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  tsc_ticket *t = ticket ? ticket_find(c, ticket) : NULL;
  char *path = t && t->save_path ? strdup(t->save_path) : NULL;
  int rc = wait_ticket(c, ticket, timeout_ms, result, info);
  if (rc == TS_RANK_LOST && path) {
    rc = tsc_save_interrupted(c, path);
    if (result)
      result->status = rc;
  }
  free(path);
  return rc;
}

int tshard_wait(tshard_client *c, uint64_t ticket, int timeout_ms, tshard_result *result) {
  return tshard_wait_ckpt(c, ticket, timeout_ms, result, NULL);
}

int tshard_submit_create(tshard_client *c, const char *name, const char *dtype, int ndim,
                         const int64_t *shape, const char *attr, const char *layout,
                         const char *key, uint64_t *ticket) {
  if (!c || !ticket)
    return TS_INVALID_ARGUMENT;
  *ticket = 0;
  c->submit_to = ticket;
  int rc = tshard_create(c, name, dtype, ndim, shape, attr, layout, key);
  c->submit_to = NULL;
  return rc;
}

int tshard_submit_reshard(tshard_client *c, const char *name, const char *attr,
                          const tshard_reshard_opts *opts, uint64_t *ticket) {
  if (!c || !ticket)
    return TS_INVALID_ARGUMENT;
  *ticket = 0;
  c->submit_to = ticket;
  int rc = tshard_reshard(c, name, attr, opts);
  c->submit_to = NULL;
  return rc;
}

int tshard_submit_drop(tshard_client *c, const char *name, const char *key, uint64_t *ticket) {
  if (!c || !ticket)
    return TS_INVALID_ARGUMENT;
  *ticket = 0;
  c->submit_to = ticket;
  int rc = tshard_drop(c, name, key);
  c->submit_to = NULL;
  return rc;
}

int tshard_submit_save(tshard_client *c, const char *dir, const char *const *names, int n,
                       const tshard_save_opts *opts, uint64_t *ticket) {
  if (!c || !ticket)
    return TS_INVALID_ARGUMENT;
  *ticket = 0;
  c->submit_to = ticket;
  int rc = tshard_save(c, dir, names, n, opts);
  c->submit_to = NULL;
  return rc;
}

int tshard_submit_load(tshard_client *c, const char *dir, const char *const *names, int n,
                       const tshard_load_opts *opts, uint64_t *ticket) {
  if (!c || !ticket)
    return TS_INVALID_ARGUMENT;
  *ticket = 0;
  c->submit_to = ticket;
  int rc = tshard_load(c, dir, names, n, opts);
  c->submit_to = NULL;
  return rc;
}
