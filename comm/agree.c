/* agree.c - the agreement that makes an operation atomic, and the relay of small pieces that can
 * ride on it.
 *
 * Point to point through comm rank 0, so that a rank that does not answer can be named: every other
 * rank sends its contribution (status, values, message) to rank 0, which takes the lowest failing
 * rank's status and message and the maximum of the values, and sends the verdict back. Rank 0 waits
 * at most the world's agreement timeout for the contributions: past it the verdict is TIMEOUT
 * naming the ranks that did not answer. The others wait twice that for the verdict (rank 0 may have
 * started late by up to the timeout), then name rank 0. So a rank that stops answering fails the
 * operation on every rank that still answers, with one message. Each agreement has its number on
 * its communicator (every member counts alike) and travels on a tag of its own, number modulo
 * AGREE_TAGS, the number checked in the message too: the late contribution of an agreement that
 * timed out is never taken for a later one's.
 *
 * The relay: a rank may append the pieces it would send to its peers to its contribution (an
 * offer). When every rank offered and the agreement passes, rank 0 forwards each rank's pieces in
 * that rank's verdict, and nobody exchanges anything afterwards: an operation on small tensors then
 * costs one round trip through rank 0 instead of a round trip plus an exchange in which every rank
 * waits for peers that each wake on the verdict. Whether the pieces went through rank 0 is rank 0's
 * one decision, carried by every verdict; when they did not (a rank offered nothing, or some rank's
 * verdict would grow past TS_COMM_RELAY_MESSAGE_MAX bytes) every rank sends its own.
 *
 * A message is its head, n values, the message text, and then, when its head says so, a relay
 * section: a count, that many parts (comm rank, bytes), the parts' bytes in order. In an offer a
 * part's rank is its destination, in a verdict its source. */
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "ts_wait.h"

#define AGREE_TAG_BASE 28672 /* below cma.c's and regions.c's tags, above scatter's */
#define AGREE_TAGS 2048

typedef struct agree_head {
  uint64_t number;
  int32_t status;
  int32_t rank; /* the verdict's failing comm rank; -1 when its message says all */
  int32_t nvalues;
  int32_t relay; /* a relay section follows: an offer, or the verdict's relayed
                    pieces */
} agree_head;

#define AGREE_MSG_BYTES ((int)sizeof(((ts_error *)0)->msg))

static size_t agree_bytes(int n) {
  return sizeof(agree_head) + (size_t)n * sizeof(int64_t) + AGREE_MSG_BYTES;
}
static int64_t *agree_values(void *buf) { return (int64_t *)((char *)buf + sizeof(agree_head)); }
static char *agree_msg(void *buf, int n) {
  return (char *)buf + sizeof(agree_head) + (size_t)n * sizeof(int64_t);
}

void ts__orphan_keep(ts_world *w, MPI_Request req, void *buf) {
  if (w->norphans == w->caporphans) {
    int cap = w->caporphans ? 2 * w->caporphans : 8;
    ts__orphan *o = realloc(w->orphans, (size_t)cap * sizeof *o);
    if (!o) {
      MPI_Cancel(&req);
      MPI_Request_free(&req); /* the buffer leaks: MPI may still read it */
      return;
    }
    w->orphans = o;
    w->caporphans = cap;
  }
  w->orphans[w->norphans++] = (ts__orphan){req, buf};
}

void ts__orphans_retire(ts_world *w, bool all) {
  for (int i = 0; i < w->norphans;) {
    int done = 0;
    if (MPI_Test(&w->orphans[i].req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      done = 1;
    if (!done && all) {
      MPI_Cancel(&w->orphans[i].req);
      MPI_Request_free(&w->orphans[i].req);
      done = 1;
    }
    if (done) {
      free(w->orphans[i].buf);
      w->orphans[i] = w->orphans[--w->norphans];
    } else {
      i++;
    }
  }
  if (all) {
    free(w->orphans);
    w->orphans = NULL;
    w->norphans = w->caporphans = 0;
  }
}

/* "60 s", or "1500 ms" */
static void format_ms(char *buf, size_t cap, int64_t ms) {
  if (ms % 1000 == 0)
    snprintf(buf, cap, "%lld s", (long long)(ms / 1000));
  else
    snprintf(buf, cap, "%lld ms", (long long)ms);
}

static const char *agree_label(const ts_comm *c) {
  return c->world && c->world->agree_label[0] ? c->world->agree_label : "an operation";
}

static int agree_timeout_ms(const ts_comm *c) {
  return c->world && c->world->agree_timeout_ms > 0 ? c->world->agree_timeout_ms
                                                    : TS_AGREE_TIMEOUT_DEFAULT_MS;
}

/* Where a message's relay section starts: after its message text, aligned for its parts. */
static size_t relay_at(int n) { return (agree_bytes(n) + 7) & ~(size_t)7; }

/* The largest message of an agreement over c with n values. */
static size_t agree_max_bytes(int n) {
  return agree_bytes(n) > TS_COMM_RELAY_MESSAGE_MAX ? agree_bytes(n) : TS_COMM_RELAY_MESSAGE_MAX;
}

/* The size of a message with a relay section of np parts and `data` bytes. */
static size_t relay_bytes(int n, int64_t np, int64_t data) {
  return relay_at(n) + sizeof(int64_t) + (size_t)np * sizeof(ts_comm_relay_part) + (size_t)data;
}

/* A message's relay section, checked: parts of ranks ascending within the communicator, whose bytes
 * add up to the rest of the message. false when it has none or a malformed one. */
typedef struct relay_view {
  int nparts;
  const ts_comm_relay_part *parts;
  const char *data;
} relay_view;

static bool relay_parse(const ts_comm *c, int n, const void *msg, size_t count, relay_view *rv) {
  memset(rv, 0, sizeof *rv);
  size_t at = relay_at(n);
  int64_t np = 0;
  if (!((const agree_head *)msg)->relay || count < at + sizeof np)
    return false;
  memcpy(&np, (const char *)msg + at, sizeof np);
  at += sizeof np;
  if (np < 0 || np > c->size || (count - at) / sizeof(ts_comm_relay_part) < (size_t)np)
    return false;
  const ts_comm_relay_part *parts = (const void *)((const char *)msg + at);
  at += (size_t)np * sizeof *parts;
  size_t total = 0;
  for (int64_t i = 0; i < np; i++) {
    if (parts[i].rank < 0 || parts[i].rank >= c->size ||
        (i > 0 && parts[i].rank <= parts[i - 1].rank) || parts[i].bytes < 0 ||
        parts[i].bytes > TS_COMM_RELAY_MESSAGE_MAX)
      return false;
    total += (size_t)parts[i].bytes;
  }
  if (total != count - at)
    return false;
  *rv = (relay_view){(int)np, parts, (const char *)msg + at};
  return true;
}

/* Whether r is an offer this agreement can carry: parts of destinations ascending within the
 * communicator, in a message of at most TS_COMM_RELAY_MESSAGE_MAX bytes. */
static bool offer_valid(const ts_comm *c, int n, const ts_comm_relay *r) {
  if (!r || !r->offer || r->nout < 0 || r->nout > c->size || (r->nout > 0 && !r->out))
    return false;
  int64_t total = 0;
  for (int i = 0; i < r->nout; i++) {
    const ts_comm_relay_part *p = &r->out[i];
    if (p->rank < 0 || p->rank >= c->size || (i > 0 && p->rank <= r->out[i - 1].rank) ||
        p->bytes < 0 || (p->bytes > 0 && !r->out_data))
      return false;
    total += p->bytes;
  }
  return relay_bytes(n, r->nout, total) <= TS_COMM_RELAY_MESSAGE_MAX;
}

/* This rank's contribution: v (agree_bytes(n)), then its offer r when it makes one (checked by
 * offer_valid; NULL: none). */
static void *contribution(const void *v, int n, const ts_comm_relay *r, size_t *count) {
  bool offer = r != NULL;
  int64_t np = offer ? r->nout : 0, data = 0;
  for (int i = 0; i < np; i++)
    data += r->out[i].bytes;
  size_t bytes = offer ? relay_bytes(n, np, data) : agree_bytes(n);
  char *m = calloc(1, bytes);
  if (!m)
    return NULL;
  memcpy(m, v, agree_bytes(n));
  ((agree_head *)m)->relay = offer;
  if (offer) {
    size_t at = relay_at(n);
    memcpy(m + at, &np, sizeof np);
    at += sizeof np;
    memcpy(m + at, r->out, (size_t)np * sizeof *r->out);
    at += (size_t)np * sizeof *r->out;
    if (data > 0)
      memcpy(m + at, r->out_data, (size_t)data);
  }
  *count = bytes;
  return m;
}

/* Comm rank 0: the verdict for comm rank d carrying the pieces every offer holds for it. */
static void *relayed_verdict(const ts_comm *c, const void *v, int n, const relay_view *offers,
                             int d, size_t *count) {
  int64_t np = 0, data = 0;
  for (int s = 0; s < c->size; s++)
    for (int i = 0; i < offers[s].nparts; i++)
      if (offers[s].parts[i].rank == d) {
        np++;
        data += offers[s].parts[i].bytes;
      }
  size_t at = relay_at(n), bytes = relay_bytes(n, np, data);
  char *m = calloc(1, bytes);
  if (!m)
    return NULL;
  memcpy(m, v, agree_bytes(n));
  ((agree_head *)m)->relay = 1;
  memcpy(m + at, &np, sizeof np);
  ts_comm_relay_part *parts = (void *)(m + at + sizeof np);
  char *out = (char *)(parts + np);
  for (int s = 0, k = 0; s < c->size; s++) {
    const char *src = offers[s].data;
    for (int i = 0; i < offers[s].nparts; i++) {
      const ts_comm_relay_part *p = &offers[s].parts[i];
      if (p->rank == d) {
        parts[k++] = (ts_comm_relay_part){.rank = s, .bytes = p->bytes};
        memcpy(out, src, (size_t)p->bytes);
        out += p->bytes;
      }
      src += p->bytes;
    }
  }
  *count = bytes;
  return m;
}

/* Comm rank 0, once every contribution is in and the verdict passed: whether every rank offered and
 * every verdict stays within TS_COMM_RELAY_MESSAGE_MAX; offers[] filled. */
static bool relay_possible(const ts_comm *c, int n, void *const *kept, const size_t *kcount,
                           relay_view *offers) {
  int64_t *to = calloc(2 * (size_t)c->size, sizeof *to), *parts = to ? to + c->size : NULL;
  bool ok = to != NULL;
  for (int s = 0; ok && s < c->size; s++) {
    ok = kept[s] && relay_parse(c, n, kept[s], kcount[s], &offers[s]);
    for (int i = 0; ok && i < offers[s].nparts; i++) {
      int d = offers[s].parts[i].rank;
      to[d] += offers[s].parts[i].bytes;
      ok = relay_bytes(n, ++parts[d], to[d]) <= TS_COMM_RELAY_MESSAGE_MAX;
    }
  }
  free(to);
  return ok;
}

/* Receives a message of this agreement from `src` (MPI_ANY_SOURCE) if one has arrived: *got 1, the
 * message (malloc'd), its size and source; *got 0 if none. Messages of other agreements are
 * dropped. Returns an MPI failure. */
static int agree_take(ts_comm *c, int src, int tag, uint64_t number, int n, void **msg,
                      size_t *count, int *from, int *got, ts_error *err) {
  *got = 0;
  for (;;) {
    int flag = 0, bytes = 0;
    MPI_Status st;
    TS_MPI_CHECK(MPI_Iprobe(src, tag, c->comm, &flag, &st), err);
    if (!flag) /* the first probe's progress may have just taken the message in */
      TS_MPI_CHECK(MPI_Iprobe(src, tag, c->comm, &flag, &st), err);
    if (!flag)
      return TS_OK;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    void *b = malloc(bytes > 0 ? (size_t)bytes : 1);
    if (!b) /* the message stays for the next look */
      return ts_error_set(err, TS_NO_MEMORY, "no memory for a message of %d bytes", bytes);
    int mrc = MPI_Recv(b, bytes, MPI_BYTE, st.MPI_SOURCE, tag, c->comm, MPI_STATUS_IGNORE);
    if (mrc != MPI_SUCCESS) {
      free(b);
      return ts__mpi_error(mrc, "MPI_Recv", __FILE__, __LINE__, err);
    }
    if (bytes < (int)agree_bytes(n) || (size_t)bytes > agree_max_bytes(n) ||
        ((agree_head *)b)->number != number || ((agree_head *)b)->nvalues != n) {
      free(b); /* another agreement's, or a late one's */
      continue;
    }
    *msg = b;
    *count = (size_t)bytes;
    *from = st.MPI_SOURCE;
    *got = 1;
    return TS_OK;
  }
}

/* Comm rank 0: the contributions that did not arrive, named in the verdict's message. */
static void name_silent(const ts_comm *c, void *v, int n, const bool *arrived, int left,
                        int timeout) {
  char *m = agree_msg(v, n), t[32];
  format_ms(t, sizeof t, timeout);
  int k = snprintf(m, AGREE_MSG_BYTES, "rank%s", left > 1 ? "s" : "");
  for (int r = 1, listed = 0; r < c->size && k < AGREE_MSG_BYTES; r++)
    if (!arrived[r])
      k +=
          snprintf(m + k, (size_t)(AGREE_MSG_BYTES - k), "%s %d", listed++ ? "," : "", c->ranks[r]);
  if (k < AGREE_MSG_BYTES)
    snprintf(m + k, (size_t)(AGREE_MSG_BYTES - k), " did not answer the agreement of %s within %s",
             agree_label(c), t);
  agree_head *h = v;
  h->status = TS_TIMEOUT;
  h->rank = -1;
}

/* Comm rank 0: collects every contribution into v (its own already there) and decides. With kept
 * (one slot per comm rank), the contributions that carry an offer are kept there, with their sizes
 * in kcount. */
static int agree_collect(ts_comm *c, uint64_t number, int tag, void *v, int n, void **kept,
                         size_t *kcount, ts_error *err) {
  bool *arrived = calloc((size_t)c->size, sizeof *arrived);
  if (!arrived)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to agree over %d ranks", c->size);
  agree_head *h = v;
  int left = c->size - 1, rc = TS_OK, timeout = agree_timeout_ms(c);
  arrived[0] = true;
  ts_waiter w;
  ts_waiter_init(&w, ts__comm_bells(c) ? &ts_wait_bell : &ts_wait_mpi,
                 ts_wait_deadline_ms(timeout));
  while (left > 0) {
    uint32_t seen = ts_world_bell_seq(c->world);
    void *in = NULL;
    size_t count = 0;
    int from = -1, got = 0;
    if ((rc = agree_take(c, MPI_ANY_SOURCE, tag, number, n, &in, &count, &from, &got, err)))
      break;
    if (got && from > 0 && from < c->size && !arrived[from]) {
      agree_head *ih = in;
      arrived[from] = true;
      left--;
      if (ih->status != TS_OK && (h->status == TS_OK || from < h->rank)) {
        h->status = ih->status;
        h->rank = from;
        memcpy(agree_msg(v, n), agree_msg(in, n), AGREE_MSG_BYTES);
      }
      for (int i = 0; i < n; i++)
        agree_values(v)[i] =
            agree_values(in)[i] > agree_values(v)[i] ? agree_values(in)[i] : agree_values(v)[i];
      if (kept && ih->relay) {
        kept[from] = in;
        kcount[from] = count;
        in = NULL;
      }
      free(in);
      ts_waiter_progress(&w);
      continue;
    }
    free(in);
    if (!got && ts__comm_pause(c, &w, seen) == TS_TIMEOUT)
      break;
  }
  if (rc == TS_OK && left > 0)
    name_silent(c, v, n, arrived, left, timeout);
  free(arrived);
  return rc;
}

/* Comm rank 0: sends the verdict to every other rank: msgs[i - 1] (taken) for comm rank i when msgs
 * is given, else a copy of v. Verdicts of at most TS_COMM_RELAY_MESSAGE_MAX bytes go out eagerly:
 * the receivers have them without this rank's progress, so the sends not yet complete become
 * orphans at once (retired at the next agreement) instead of a wait that spins and yields the
 * core the receivers need. Larger ones are waited for, at most the agreement timeout (a rank
 * that stopped answering keeps its copy as an orphan). */
static int agree_announce(ts_comm *c, int tag, const void *v, int n, void **msgs,
                          const size_t *sizes, ts_error *err) {
  size_t bytes = agree_bytes(n);
  int peers = c->size - 1, rc = TS_OK, posted = 0;
  bool eager = true;
  MPI_Request *req = malloc((size_t)peers * sizeof *req);
  void **copy = calloc((size_t)peers, sizeof *copy);
  if (!req || !copy) {
    free(req), free(copy);
    for (int i = 0; msgs && i < peers; i++)
      free(msgs[i]);
    return ts_error_set(err, TS_NO_MEMORY, "no memory to announce an agreement");
  }
  for (; posted < peers; posted++) {
    size_t size = msgs ? sizes[posted] : bytes;
    eager = eager && size <= TS_COMM_RELAY_MESSAGE_MAX;
    copy[posted] = msgs ? msgs[posted] : malloc(bytes);
    if (msgs)
      msgs[posted] = NULL;
    else if (copy[posted])
      memcpy(copy[posted], v, bytes);
    if (!copy[posted]) {
      rc = ts_error_set(err, TS_NO_MEMORY, "no memory to announce an agreement");
      break;
    }
    int mrc = MPI_Isend(copy[posted], (int)size, MPI_BYTE, posted + 1, tag, c->comm, &req[posted]);
    if (mrc != MPI_SUCCESS) {
      free(copy[posted]);
      rc = ts__mpi_error(mrc, "MPI_Isend", __FILE__, __LINE__, err);
      break;
    }
    ts__comm_ring(c, posted + 1);
  }
  for (int i = posted + 1; msgs && i < peers; i++)
    free(msgs[i]);
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_mpi, ts_wait_deadline_ms(agree_timeout_ms(c)));
  int done = 0;
  while (posted > 0) {
    int mrc = MPI_Testall(posted, req, &done, MPI_STATUSES_IGNORE);
    if (mrc != MPI_SUCCESS && rc == TS_OK)
      rc = ts__mpi_error(mrc, "MPI_Testall", __FILE__, __LINE__, err);
    if (done || mrc != MPI_SUCCESS || (eager && c->world) || ts_waiter_pause(&w) == TS_TIMEOUT)
      break;
  }
  for (int i = 0; i < posted; i++) {
    if (done || req[i] == MPI_REQUEST_NULL)
      free(copy[i]);
    else if (c->world)
      ts__orphan_keep(c->world, req[i], copy[i]);
  }
  free(req);
  free(copy);
  return rc;
}

/* Another rank: sends its contribution (out, count bytes; taken) to comm rank 0 and waits for the
 * verdict: its first agree_bytes(n) into v, the whole message into *verdict (malloc'd). */
static int agree_ask(ts_comm *c, uint64_t number, int tag, void *out, size_t count, void *v, int n,
                     void **verdict, size_t *vcount, ts_error *err) {
  MPI_Request sreq;
  int mrc = MPI_Isend(out, (int)count, MPI_BYTE, 0, tag, c->comm, &sreq);
  if (mrc != MPI_SUCCESS) {
    free(out);
    return ts__mpi_error(mrc, "MPI_Isend", __FILE__, __LINE__, err);
  }
  ts__comm_ring(c, 0);
  int64_t wait_ms = 2 * (int64_t)agree_timeout_ms(c);
  ts_waiter w;
  ts_waiter_init(&w, ts__comm_bells(c) ? &ts_wait_bell : &ts_wait_mpi,
                 ts_wait_deadline_ms(wait_ms));
  int rc = TS_OK, sent = 0;
  for (;;) {
    uint32_t seen = ts_world_bell_seq(c->world);
    if (!sent && (mrc = MPI_Test(&sreq, &sent, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
      rc = ts__mpi_error(mrc, "MPI_Test", __FILE__, __LINE__, err);
      break;
    }
    int from, got = 0;
    if ((rc = agree_take(c, 0, tag, number, n, verdict, vcount, &from, &got, err)) || got) {
      if (got)
        memcpy(v, *verdict, agree_bytes(n));
      break;
    }
    if (ts__comm_pause(c, &w, seen) == TS_TIMEOUT) {
      agree_head *h = v;
      char t[32];
      format_ms(t, sizeof t, wait_ms);
      h->status = TS_TIMEOUT;
      h->rank = -1;
      snprintf(agree_msg(v, n), AGREE_MSG_BYTES,
               "rank %d did not answer the agreement of %s within %s", c->ranks[0], agree_label(c),
               t);
      break;
    }
  }
  if (sent || sreq == MPI_REQUEST_NULL)
    free(out);
  else if (c->world)
    ts__orphan_keep(c->world, sreq, out);
  return rc;
}

/* Comm rank 0, the verdict passed and every rank offered: each other rank's verdict with its pieces
 * (msgs, sizes), and this rank's own pieces into r. false (nothing made) when the pieces cannot go
 * this way, or on no memory: then every rank sends its own. */
static bool relay_verdicts(ts_comm *c, const void *v, int n, void *const *kept,
                           const size_t *kcount, void **msgs, size_t *sizes, ts_comm_relay *r) {
  relay_view *offers = calloc((size_t)c->size, sizeof *offers);
  bool ok = offers && relay_possible(c, n, kept, kcount, offers);
  size_t own = 0;
  void *mine = ok ? relayed_verdict(c, v, n, offers, 0, &own) : NULL;
  ok = mine != NULL;
  for (int d = 1; ok && d < c->size; d++)
    ok = (msgs[d - 1] = relayed_verdict(c, v, n, offers, d, &sizes[d - 1])) != NULL;
  free(offers);
  if (!ok) {
    for (int d = 1; d < c->size; d++) {
      free(msgs[d - 1]);
      msgs[d - 1] = NULL;
    }
    free(mine);
    return false;
  }
  r->in_msg = mine;
  relay_view rv;
  relay_parse(c, n, mine, own, &rv);
  r->nin = rv.nparts;
  r->in = rv.parts;
  r->in_data = rv.data;
  r->relayed = true;
  return true;
}

/* Comm rank 0's side: collects, decides, and announces (with the relayed pieces when every rank
 * offered). mine: its own offer as a contribution, NULL when it makes none. */
static int agree_root(ts_comm *c, uint64_t number, int tag, void *v, int n, ts_comm_relay *r,
                      void *mine, size_t mine_bytes, ts_error *err) {
  bool offered = mine != NULL;
  void **kept = offered ? calloc((size_t)c->size, sizeof *kept) : NULL;
  size_t *kcount = offered ? calloc((size_t)c->size, sizeof *kcount) : NULL;
  void **msgs = offered ? calloc((size_t)c->size, sizeof *msgs) : NULL;
  size_t *sizes = offered ? calloc((size_t)c->size, sizeof *sizes) : NULL;
  if (offered && (!kept || !kcount || !msgs || !sizes)) {
    free(kept), free(kcount), free(msgs), free(sizes);
    kept = msgs = NULL;
    kcount = sizes = NULL;
  }
  int rc = agree_collect(c, number, tag, v, n, kept, kcount, err);
  bool relay = false;
  if (rc == TS_OK && kept && ((agree_head *)v)->status == TS_OK) {
    kept[0] = mine;
    kcount[0] = mine_bytes;
    relay = relay_verdicts(c, v, n, kept, kcount, msgs, sizes, r);
    kept[0] = NULL;
  }
  if (rc == TS_OK)
    rc = agree_announce(c, tag, v, n, relay ? msgs : NULL, sizes, err);
  for (int i = 0; kept && i < c->size; i++)
    free(kept[i]);
  free(kept), free(kcount), free(msgs), free(sizes);
  return rc;
}

/* Rank 0 decides; another rank asks and takes the pieces its verdict relays into r. mine, this
 * rank's contribution, is taken (rank 0 has one only when it offers). */
static int agree_decide(ts_comm *c, uint64_t number, int tag, void *v, int n, ts_comm_relay *r,
                        void *mine, size_t mine_bytes, ts_error *err) {
  if (c->rank == 0) {
    int rc = agree_root(c, number, tag, v, n, r, mine, mine_bytes, err);
    free(mine);
    return rc;
  }
  void *verdict = NULL;
  size_t vcount = 0;
  int rc = agree_ask(c, number, tag, mine, mine_bytes, v, n, &verdict, &vcount, err);
  relay_view rv;
  bool relayed = rc == TS_OK && verdict && ((agree_head *)verdict)->relay &&
                 ((agree_head *)v)->status == TS_OK;
  if (relayed && (!r || !relay_parse(c, n, verdict, vcount, &rv))) {
    /* rank 0 builds every verdict whole: only a corrupted one lands here; this rank fails
     * rather than wait in an exchange nobody else runs */
    rc = ts_error_set(err, TS_INTERNAL, "the verdict of %s relays pieces this rank cannot take",
                      agree_label(c));
  } else if (relayed) {
    r->relayed = true;
    r->nin = rv.nparts;
    r->in = rv.parts;
    r->in_data = rv.data;
    r->in_msg = verdict;
    verdict = NULL;
  }
  free(verdict);
  return rc;
}

int ts_comm_agree_relay(ts_comm *c, int status, const ts_error *local, int64_t *values, int n,
                        ts_comm_relay *r, ts_error *err) {
  ts_comm_relay_clear(r);
  if (n < 0 || (n > 0 && !values))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "agreement on %d values", n);
  uint64_t number = ++c->agreements;
  if (c->size == 1)
    return status == TS_OK
               ? TS_OK
               : ts_error_set(err, status, "rank %d: %.480s", c->ranks[0],
                              local && local->msg[0] ? local->msg : ts_strerror(status));
  int tag = AGREE_TAG_BASE + (int)(number % AGREE_TAGS);
  void *v = calloc(1, agree_bytes(n));
  if (!v)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to agree on %d values", n);
  agree_head *h = v;
  h->number = number;
  h->status = status;
  h->rank = status != TS_OK ? c->rank : 0;
  h->nvalues = n;
  for (int i = 0; i < n; i++)
    agree_values(v)[i] = values[i];
  if (status != TS_OK)
    snprintf(agree_msg(v, n), AGREE_MSG_BYTES, "%s",
             local && local->msg[0] ? local->msg : ts_strerror(status));
  if (c->world) {
    ts__orphans_retire(c->world, false);
    if (c->world->agree_delay_ms > 0) { /* fault injection: this rank answers late */
      ts_wait_nap_ns((int64_t)c->world->agree_delay_ms * 1000000);
      c->world->agree_delay_ms = 0;
    }
  }
  /* Rank 0 sends no contribution: it needs one only to forward its offer from. */
  const ts_comm_relay *offer = status == TS_OK && offer_valid(c, n, r) ? r : NULL;
  size_t mine_bytes = 0;
  void *mine = c->rank != 0 || offer ? contribution(v, n, offer, &mine_bytes) : NULL;
  if (!mine && (c->rank != 0 || offer)) {
    free(v);
    return ts_error_set(err, TS_NO_MEMORY, "no memory to agree over %d ranks", c->size);
  }
  int rc = agree_decide(c, number, tag, v, n, r, mine, mine_bytes, err);
  if (rc == TS_OK)
    for (int i = 0; i < n; i++)
      values[i] = agree_values(v)[i];
  if (rc == TS_OK && h->status != TS_OK) {
    if (h->rank < 0 || h->rank >= c->size)
      rc = ts_error_set(err, h->status, "%s", agree_msg(v, n));
    else
      rc = ts_error_set(err, h->status, "rank %d: %.480s", c->ranks[h->rank], agree_msg(v, n));
  }
  if (rc != TS_OK)
    ts_comm_relay_clear(r);
  for (int i = 0; rc == TS_OK && r && r->relayed && i < r->nout; i++) /* pieces moved */
    ts__traffic_count(c, r->out[i].rank, true, r->out[i].bytes);
  for (int i = 0; rc == TS_OK && r && r->relayed && i < r->nin; i++)
    ts__traffic_count(c, r->in[i].rank, false, r->in[i].bytes);
  free(v);
  return rc;
}

void ts_comm_relay_clear(ts_comm_relay *r) {
  if (!r)
    return;
  free(r->in_msg);
  r->in_msg = NULL;
  r->in = NULL;
  r->in_data = NULL;
  r->nin = 0;
  r->relayed = false;
}

int ts_comm_agree_max(ts_comm *c, int status, const ts_error *local, int64_t *values, int n,
                      ts_error *err) {
  return ts_comm_agree_relay(c, status, local, values, n, NULL, err);
}

int ts_comm_agree(ts_comm *c, int status, const ts_error *local, ts_error *err) {
  return ts_comm_agree_max(c, status, local, NULL, 0, err);
}

void ts_world_set_agree_timeout(ts_world *w, int timeout_ms) {
  if (w)
    w->agree_timeout_ms = timeout_ms > 0 ? timeout_ms : TS_AGREE_TIMEOUT_DEFAULT_MS;
}

void ts_world_set_agree_label(ts_world *w, const char *label) {
  if (w)
    snprintf(w->agree_label, sizeof w->agree_label, "%s", label ? label : "");
}

uint64_t ts_comm_agreements(const ts_comm *c) { return c ? c->agreements : 0; }

void ts_world_delay_next_agreement(ts_world *w, int ms) {
  if (w)
    w->agree_delay_ms = ms > 0 ? ms : 0;
}
