/* plan_explain.c - the readable description of a plan (what `tshard plan` prints): the reshard,
 * the chosen strategy and why, the costs of every strategy (or why it does not apply) and a
 * per-rank summary. It reads the same plan data as the executor. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool failed;
} sbuf;

static void add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(sbuf *b, const char *fmt, ...) {
  if (b->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if (b->s && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->failed = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

static void add_box(sbuf *b, const ts_box *box) {
  add(b, "[");
  for (int d = 0; d < box->ndim; d++)
    add(b, "%s%lld:%lld", d ? "," : "", (long long)box->lo[d], (long long)box->hi[d]);
  add(b, "]");
}

static void add_attr(sbuf *b, const ts_attr *a) {
  size_t n = ts_attr_format(a, NULL, 0);
  char *t = malloc(n + 1);
  if (!t) {
    b->failed = true;
    return;
  }
  ts_attr_format(a, t, n + 1);
  add(b, "%s", t);
  free(t);
}

/* Where the ranks live, and the fewest bytes one host's link must carry. */
static void add_hosts(sbuf *b, const ts_plan *p) {
  char topo[160];
  size_t n = ts_topology_format(p->topo, topo, sizeof topo);
  add(b, "topology: %s%s (%d hosts)\n", topo, n >= sizeof topo ? "..." : "",
      ts_topology_nhosts(p->topo));
  if (p->host_bound >= 0)
    add(b, "host link bound: %lld bytes (the most that must enter or leave one host)\n",
        (long long)p->host_bound);
  else
    add(b, "host link bound: not computed (too many cells)\n");
  add(b, "link rates: inside a host %.4g MB/s (%s), between hosts %.4g MB/s (%s)\n",
      ts_topology_rate(p->topo, TS_LINK_HOST) / 1e6,
      ts_topology_rate_given(p->topo, TS_LINK_HOST) ? "set" : "default",
      ts_topology_rate(p->topo, TS_LINK_CROSS) / 1e6,
      ts_topology_rate_given(p->topo, TS_LINK_CROSS) ? "set" : "default");
}

/* A rank's slice: its box, or for a block-cyclic attribute its local extents (the elements it
 * holds per dim, its blocks concatenated); "-" when the rank is not in the mesh. */
static void add_slice(sbuf *b, const ts_plan *p, const ts_geom *g, int rank) {
  int64_t i = ts_geom_mesh_index(g, rank), parts[TS_MAX_DIMS];
  ts_box box;
  if (i < 0) {
    add(b, "-");
  } else if (!p->cyclic) {
    ts_geom_index_box(g, i, &box);
    add_box(b, &box);
  } else {
    ts__geom_decompose(g, i, parts, NULL, NULL);
    add(b, "local[");
    for (int d = 0; d < p->ndim; d++) {
      ts_dim_deal dd;
      ts__geom_deal(g, d, &dd);
      add(b, "%s%lld", d ? "," : "", (long long)ts_deal_owned_before(&dd, parts[d], dd.len));
    }
    add(b, "]");
  }
}

char *ts_plan_explain(const ts_plan *p, int max_ranks) {
  sbuf b = {0};
  if (max_ranks <= 0)
    max_ranks = 8;
  add(&b, "reshard %s[", ts_dtype_name(p->dtype));
  int64_t total = (int64_t)p->esize;
  for (int d = 0; d < p->ndim; d++) {
    add(&b, "%s%lld", d ? "," : "", (long long)p->shape[d]);
    total *= p->shape[d];
  }
  add(&b, "] (%lld bytes) over %d ranks\n  from: ", (long long)total, p->nunion);
  add_attr(&b, p->src->attr);
  add(&b, "\n  to:   ");
  add_attr(&b, p->tgt->attr);
  add(&b, "\nstrategy: %s", ts_strategy_name(p->chosen));
  if (p->chosen == TS_STRATEGY_ALLGATHER && p->gather_dim >= 0)
    add(&b, " (along mesh dim %d)", p->gather_dim);
  else if (p->chosen == TS_STRATEGY_REDUCE_SCATTER)
    add(&b, " (along mesh dim %d)", p->rs_dim);
  add(&b, "\n");
  if (p->forced) {
    add(&b, "why: forced by the caller\n");
  } else {
    int next = -1;
    for (int s = 1; s < TS_STRATEGY_COUNT; s++) {
      if (!p->applies[s] || s == (int)p->chosen)
        continue;
      const ts_plan_costs *x = &p->costs[s], *y = next >= 0 ? &p->costs[next] : NULL;
      if (!y || x->wire_bytes < y->wire_bytes ||
          (x->wire_bytes == y->wire_bytes && x->max_rank_bytes < y->max_rank_bytes))
        next = s;
    }
    if (p->hosts)
      add(&b, "why: the fastest that applies by the estimated time (the busiest rank's bytes "
              "at the rate inside a host plus the busiest host link's at the rate between "
              "hosts); within 1%%, by the busiest host link, then bytes on the wire, then the "
              "busiest rank, then messages, then peak memory");
    else
      add(&b, "why: the cheapest that applies, by bytes on the wire, then the busiest rank, "
              "then messages, then peak memory");
    if (next >= 0)
      add(&b, "; next: %s (%lld wire bytes vs %lld)", ts_strategy_name((ts_strategy)next),
          (long long)p->costs[next].wire_bytes, (long long)p->costs[p->chosen].wire_bytes);
    add(&b, "\n");
  }
  if (p->hosts)
    add_hosts(&b, p);
  for (int i = 0; i < ts_plan_stage_count(p); i++) {
    const ts_plan *st = p->stages[i];
    add(&b, "%s  %d. %s to ", i ? "" : "stages:\n", i + 1,
        st->chain ? "chain broadcast from host to host" : ts_strategy_name(st->chosen));
    add_attr(&b, st->tgt->attr);
    add(&b, " (host link %lld bytes)\n", (long long)st->costs[st->chosen].host_link_bytes);
  }
  add(&b, "minimum wire bytes (intersection): %lld\n", (long long)p->min_wire);
  add(&b, "staging: %lld bytes per rank, %lld bytes per pair per round\n", (long long)p->staging,
      (long long)p->pair_chunk);
  add(&b, "costs:\n  %-15s %15s %15s %10s %15s%s\n", "strategy", "wire_bytes", "max_rank_bytes",
      "messages", "peak_extra", p->hosts ? "       host_link      cross_host     est_ms" : "");
  for (int s = 1; s < TS_STRATEGY_COUNT; s++) {
    const ts_plan_costs *c = &p->costs[s];
    if (p->applies[s]) {
      add(&b, "%c %-15s %15lld %15lld %10lld %15lld", s == (int)p->chosen ? '*' : ' ',
          ts_strategy_name((ts_strategy)s), (long long)c->wire_bytes, (long long)c->max_rank_bytes,
          (long long)c->messages, (long long)c->peak_extra_bytes);
      if (p->hosts)
        add(&b, " %15lld %15lld %10.2f", (long long)c->host_link_bytes,
            (long long)c->cross_host_bytes, (double)c->time_ns / 1e6);
      add(&b, "\n");
    } else
      add(&b, "  %-15s does not apply: %s\n", ts_strategy_name((ts_strategy)s), p->why_not[s]);
  }
  if (p->cyclic) {
    add(&b, "block-cyclic: per dim, runs per period of the source and target deals:");
    for (int d = 0; d < p->ndim; d++)
      add(&b, " %lld", (long long)ts_overlay_period_runs(p->overlay[d]));
    add(&b, "\n");
    if (ts_topology_nhosts(p->topo) > 1)
      add(&b, "note: host link costs are not computed for block-cyclic plans (strategies "
              "compared by bytes on the wire)\n");
  }
  if (p->send_estimated)
    add(&b, "note: per-rank send bytes of the replicated source are an even-share estimate\n");
  int shown = p->nunion < max_ranks ? p->nunion : max_ranks;
  add(&b, "per rank (%d of %d):\n", shown, p->nunion);
  bool lists = p->chosen == TS_STRATEGY_P2P || p->chosen == TS_STRATEGY_ALLTOALL;
  for (int i = 0; i < shown; i++) {
    int rank = p->union_ranks[i];
    add(&b, "  rank %d: source ", rank);
    add_slice(&b, p, p->src, rank);
    add(&b, " target ");
    add_slice(&b, p, p->tgt, rank);
    if (lists && !p->cyclic) {
      ts_rank_plan rp;
      if (ts_plan_rank(p, rank, &rp, NULL) == TS_OK) {
        int ns = 0, nr = 0;
        for (int k = 0; k < rp.nsend; k++)
          ns += rp.send[k].peer != rank;
        for (int k = 0; k < rp.nrecv; k++)
          nr += rp.recv[k].peer != rank;
        add(&b, " send %d pieces %lld B, receive %d pieces %lld B", ns, (long long)rp.send_bytes,
            nr, (long long)rp.recv_bytes);
        ts_rank_plan_clear(&rp);
      } else {
        add(&b, " (out of memory listing transfers)");
      }
    }
    add(&b, "\n");
  }
  if (b.failed) {
    free(b.s);
    return NULL;
  }
  return b.s;
}
