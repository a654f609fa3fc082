/* ops.c - the handlers of the tensor operations that the table (handlers.c) names.
 *
 * Local handlers (this rank, at once) answer themselves. Collective handlers run on every rank in
 * rank 0's order and return a status that is the same on every rank: each checks locally, then
 * agrees with the others (ts_comm_agree) before anything changes, and the store's reshard and the
 * executor are atomic across ranks. Every collective handler ends in a collective call, so when
 * any rank answers, every rank has run the operation up to its end. Around every create, drop and
 * reshard the names involved are marked busy in the catalog (catalog/catalog.c) and their metadata
 * is published afterwards; the loop thread answers list and describe from it. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "einsum.h"
#include "handlers.h"
#include "oplog.h"
#include "put_verify.h"
#include "trace.h"
#include "tsd_catalog.h"

static const char *tag_of(const Tshard__Layout *l) { return l && l->tag ? l->tag : ""; }

/* ---------------------------------------------------------------------------------------------
 * Local operations */

/* The DescribeResult of a stored tensor without its ranks, packed into a malloc'd buffer for the
 * catalog, which adds the box and bytes per rank when a describe asks for them: the work here
 * does not grow with the world. */
static int describe_pack(const ts_stored *t, uint8_t **out, size_t *len, ts_error *err) {
  Tshard__DescribeResult d = TSHARD__DESCRIBE_RESULT__INIT;
  Tshard__DistAttr am;
  Tshard__Layout lay = TSHARD__LAYOUT__INIT;
  int rc = tsd_attr_to_msg(t->attr, &am, err);
  if (rc)
    return rc;
  d.name = (char *)t->name;
  d.dtype = (char *)ts_dtype_name(t->dtype);
  d.n_shape = (size_t)t->ndim;
  d.shape = (int64_t *)t->shape;
  d.attr = &am;
  lay.tag = (char *)t->layout_tag;
  d.layout = &lay;
  *len = tshard__describe_result__get_packed_size(&d);
  *out = malloc(*len ? *len : 1);
  if (*out)
    tshard__describe_result__pack(&d, *out);
  else
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory to describe");
  tsd_attr_msg_clear(&am);
  return rc;
}

/* Publishes the metadata of `name` as the store now has it (or its absence). */
static void catalog_refresh(tsd_engine *e, const char *name) {
  if (!name || !name[0])
    return;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const ts_stored *t = ts_store_find(e->store, name);
  uint8_t *packed = NULL;
  size_t len = 0;
  ts_error err;
  int rc = t ? describe_pack(t, &packed, &len, &err) : TS_OK;
  if (rc == TS_OK)
    rc = tsd_catalog_set(e->sh->catalog, name, packed, len, t ? t->attr : NULL, e->size);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  TSD_LOG(TSD_LOG_DEBUG, "catalog refresh of '%s': %ld ns", name,
          (long)((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec)));
  if (rc) /* list and describe then miss it or show it as it was; the tensor itself is fine */
    TSD_LOG(TSD_LOG_ERROR, "cannot publish the metadata of '%s': %s", name, ts_strerror(rc));
  free(packed);
}

/* List and describe are answered from the catalog by the loop thread; these answer the ones it
 * left to the engine (busy names, or a connection with requests here), after what came before. */
void tsd_op_catalog(tsd_engine *e, tsd_work *w) {
  uint8_t *frame;
  size_t len;
  if (tsd_catalog_answer(e->sh->catalog, w->req, false, &frame, &len) == 1) {
    e->ops_answered++;
    tsd_count_answer(e->answering, TS_OK);
    tsd_push_reply(e->sh, w->conn_id, frame, len, w->req->id);
  } else {
    tsd_reply_status(e, w->conn_id, w->req->id, TS_NO_MEMORY, "no memory for the answer");
  }
}

static int parse_strategy(const char *s, ts_strategy *out, ts_error *err) {
  *out = TS_STRATEGY_AUTO;
  return s && s[0] ? ts_strategy_parse(s, out, err) : TS_OK;
}

void tsd_op_plan(tsd_engine *e, tsd_work *w) {
  const Tshard__PlanRequest *p = w->req->plan;
  ts_error err;
  ts_attr *tgt = NULL;
  ts_plan *plan = NULL;
  char *text = NULL;
  ts_stored *t = ts_store_find(e->store, p->name);
  ts_plan_opts o = {TS_STRATEGY_AUTO, e->cfg->staging, e->size};
  int rc = t ? TS_OK : ts_error_set(&err, TS_NOT_FOUND, "no tensor named '%s'", p->name);
  if (!rc)
    rc = parse_strategy(p->strategy, &o.strategy, &err);
  if (!rc)
    rc = tsd_attr_from_msg(p->attr, &tgt, &err);
  if (!rc)
    rc = ts_plan_cache_get(ts_store_plans(e->store), t->ndim, t->shape, t->dtype, t->attr, tgt, &o,
                           &plan, &err); /* the plan a reshard would run, on the topology */
  if (!rc && !(text = ts_plan_explain(plan, 0)))
    rc = ts_error_set(&err, TS_NO_MEMORY, "no memory for the explain text");
  if (rc) {
    tsd_reply_status(e, w->conn_id, w->req->id, rc, err.msg);
  } else {
    Tshard__Response r = TSHARD__RESPONSE__INIT;
    Tshard__PlanResult pr = TSHARD__PLAN_RESULT__INIT;
    r.id = w->req->id;
    r.result_case = TSHARD__RESPONSE__RESULT_PLAN;
    r.plan = &pr;
    pr.strategy = (char *)ts_strategy_name(ts_plan_strategy(plan));
    pr.explain = text;
    tsd_reply_response(e, w->conn_id, &r);
  }
  free(text);
  ts_plan_destroy(&plan);
  ts_attr_destroy(&tgt);
}

/* The job's layout for stats: each host's name (its first rank's) once, every rank's host and
 * NUMA node, into arrays the caller frees with stats_layout_free. */
typedef struct stats_layout {
  char **names;
  uint32_t *hosts;
  int32_t *numa;
} stats_layout;

static void stats_layout_free(stats_layout *l) {
  free(l->names);
  free(l->hosts);
  free(l->numa);
}

static int stats_layout_fill(tsd_engine *e, const ts_topology *topo, Tshard__StatsResult *s,
                             stats_layout *l) {
  int nh = ts_topology_nhosts(topo), n = e->size;
  l->names = calloc((size_t)nh, sizeof *l->names);
  l->hosts = malloc((size_t)n * sizeof *l->hosts);
  l->numa = malloc((size_t)n * sizeof *l->numa);
  if (!l->names || !l->hosts || !l->numa)
    return TS_NO_MEMORY;
  for (int r = 0; r < n; r++) {
    int h = ts_topology_host(topo, r);
    l->hosts[r] = (uint32_t)h;
    l->numa[r] = ts_world_numa_of(e->world, r);
    if (h < nh && !l->names[h])
      l->names[h] = (char *)ts_world_host_name(e->world, r);
  }
  for (int h = 0; h < nh; h++)
    l->names[h] = l->names[h] ? l->names[h] : "";
  s->n_host_names = (size_t)nh;
  s->host_names = l->names;
  s->n_rank_hosts = (size_t)n;
  s->rank_hosts = l->hosts;
  s->n_rank_numa = (size_t)n;
  s->rank_numa = l->numa;
  return TS_OK;
}

void tsd_op_stats(tsd_engine *e, tsd_work *w) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__StatsResult s = TSHARD__STATS_RESULT__INIT;
  Tshard__StrategyBytes sb[TS_STRATEGY_COUNT];
  Tshard__StrategyBytes *sbp[TS_STRATEGY_COUNT];
  tsd_oplog_kind kinds[64];
  Tshard__OpKindStats ks[64];
  Tshard__OpKindStats *ksp[64];
  r.id = w->req->id;
  r.result_case = TSHARD__RESPONSE__RESULT_STATS;
  r.stats = &s;
  s.operations = e->ops_answered;
  s.collective_ops = tsd_seq_ops_run(e->seq);
  s.tensors = (uint64_t)ts_store_count(e->store);
  ts_pool_stats ps;
  ts_pool_get_stats(&ps);
  s.memory_in_use = ps.in_use;
  s.memory_limit = (uint64_t)e->cfg->memory_limit;
  s.pool_staging = ps.staging;
  s.pool_cached = ps.cached;
  s.pool_peak = ps.peak;
  s.pool_cache_cap = ps.cache_cap;
  s.pool_hits = ps.hits;
  s.pool_misses = ps.misses;
  s.pool_released = ps.released;
  s.stored_bytes = (uint64_t)ts_store_used_bytes(e->store);
  s.connections = atomic_load_explicit(&e->sh->connections, memory_order_relaxed);
  const ts_topology *topo = ts_plan_cache_topology(ts_store_plans(e->store));
  char topology[256];
  if (ts_topology_format(topo, topology, sizeof topology) >= sizeof topology)
    memcpy(topology + sizeof topology - 4, "...", 4); /* a long map: its start */
  s.topology = topology;
  s.hosts = (uint32_t)ts_topology_nhosts(topo);
  s.host = (uint32_t)ts_topology_host(topo, e->rank);
  const char *host_name = ts_world_host_name(e->world, e->rank);
  s.host_name = (char *)(host_name ? host_name : "");
  s.numa = ts_world_numa_of(e->world, e->rank);
  s.link_rate_host = ts_topology_rate(topo, TS_LINK_HOST);
  s.link_rate_cross = ts_topology_rate(topo, TS_LINK_CROSS);
  stats_layout lay = {0};
  if (w->req->stats->layout && stats_layout_fill(e, topo, &s, &lay) != TS_OK) {
    stats_layout_free(&lay);
    tsd_reply_status(e, w->conn_id, w->req->id, TS_NO_MEMORY,
                     "no memory for the job's layout in the statistics");
    return;
  }
  for (int i = 0; i < TS_STRATEGY_COUNT; i++) {
    tshard__strategy_bytes__init(&sb[i]);
    sb[i].strategy = (char *)ts_strategy_name((ts_strategy)i);
    sb[i].reshards = e->strat_runs[i];
    sb[i].bytes_sent = e->strat_sent[i];
    sb[i].bytes_received = e->strat_recv[i];
    sb[i].relayed = e->strat_relayed[i];
    sbp[i] = &sb[i];
  }
  s.n_strategies = TS_STRATEGY_COUNT;
  s.strategies = sbp;
  int nk = tsd_oplog_kinds(kinds, 64);
  for (int i = 0; i < nk; i++) {
    tshard__op_kind_stats__init(&ks[i]);
    ks[i].kind = (char *)tsd_op_name(kinds[i].op_case);
    ks[i].count = kinds[i].count;
    ks[i].p50_us = kinds[i].p50_us;
    ks[i].p99_us = kinds[i].p99_us;
    ks[i].batch_p50 = kinds[i].batch_p50;
    ks[i].batch_max = kinds[i].batch_max;
    ksp[i] = &ks[i];
  }
  s.n_ops = (size_t)nk;
  s.ops = ksp;
  Tshard__SaveProgress sv[16];
  Tshard__SaveProgress *svp[16];
  s.n_saves = (size_t)tsd_bgsave_stats(sv, svp, 16);
  s.saves = svp;
  tsd_reply_response(e, w->conn_id, &r);
  stats_layout_free(&lay);
}

/* ---------------------------------------------------------------------------------------------
 * Collective operations */

static ts_comm *world_comm(tsd_engine *e) { return ts_world_comm(e->world); }

static int agree(tsd_engine *e, int status, const ts_error *local, ts_error *err) {
  return ts_comm_agree(world_comm(e), status, local, err);
}

static void record(tsd_engine *e, const ts_exec_report *rep) {
  if ((int)rep->strategy >= 0 && rep->strategy < TS_STRATEGY_COUNT) {
    e->strat_runs[rep->strategy]++;
    e->strat_sent[rep->strategy] += (uint64_t)rep->bytes_sent;
    e->strat_recv[rep->strategy] += (uint64_t)rep->bytes_received;
    e->strat_relayed[rep->strategy] += rep->relayed;
  }
}

void tsd_record_exec(tsd_engine *e, const ts_exec_report *rep) { record(e, rep); }

/* The executor's options for a put or get through it: its agreements span the world, and carry
 * this rank's own checks (status, error). */
static int exec_opts(tsd_engine *e, int status, const ts_error *local, ts_exec_opts *xo) {
  memset(xo, 0, sizeof *xo);
  xo->agree_world = true;
  xo->prior_status = status;
  xo->prior_err = local;
  int64_t limit = e->cfg->memory_limit;
  if (limit > 0) {
    ts_pool_stats ps;
    ts_pool_get_stats(&ps);
    int64_t free_bytes = limit - (int64_t)ps.in_use;
    xo->max_alloc_bytes = free_bytes > 0 ? free_bytes : 1;
  }
  return TS_OK;
}

int tsd_run_create(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__CreateRequest *c = op->req->create;
  ts_error lerr;
  ts_error_clear(&lerr);
  ts_attr *a = NULL;
  ts_dtype dt;
  bool skip, swap; /* exist_ok, stored as asked: nothing to make */
  int lst = tsd_create_check(e, c, false, &dt, &a, &skip, &swap, &lerr);
  if (!lst && !skip)
    lst = ts_store_add(e->store, c->name, (int)c->n_shape, c->shape, dt, a, tag_of(c->layout), NULL,
                       &lerr);
  ts_attr_destroy(&a);
  int rc = agree(e, lst, &lerr, err);
  if (rc && lst == TS_OK && !skip)
    ts_store_drop(e->store, c->name, NULL); /* another rank failed: undo here too */
  return rc;
}

int tsd_run_drop(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const char *name = op->req->drop->name;
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = ts_store_drop(e->store, name, &lerr);
  int rc = agree(e, lst, &lerr, err);
  if (lst == TS_OK)
    tsd_einsum_forget(e, name); /* einsum forwards that read it (einsum.c) */
  return rc;
}

/* The attribute "the whole tensor on one rank". */
static int one_rank_attr(int rank, ts_attr **out, ts_error *err) {
  int64_t shape1 = 1;
  ts_placement r = ts_replicate();
  return ts_attr_create(out, 1, &shape1, &rank, &r, err);
}

/* A transfer naming the client's memory runs only while its connection is open: a client that
 * gave up (a timeout closes the connection) may have reused that memory. */
static int client_here(const tsd_pending *origin, ts_error *err) {
  if (origin && origin->conn_id)
    return TS_OK;
  return ts_error_set(err, TS_IO,
                      "the client closed its connection before its transfer ran; "
                      "its memory is not touched and the tensor is unchanged");
}

int tsd_run_put(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  const char *name = op->req->put->name;
  ts_error lerr;
  ts_error_clear(&lerr);
  ts_stored *t = ts_store_find(e->store, name);
  int lst = t ? TS_OK : ts_error_set(&lerr, TS_NOT_FOUND, "no tensor named '%s'", name);
  uint64_t bytes = 0;
  if (t) {
    bytes = ts_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
      bytes *= (uint64_t)t->shape[d];
  }
  const Tshard__ClientMemory *m = op->req->put->client_memory;
  if (m) { /* every rank copies its piece from the client's memory (transfer.c) */
    if (!lst && (m->bytes != bytes || !ts_scatter_direct_applies(e->world, t)))
      lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT,
                         "'%s' changed since the put was checked (now %llu bytes, %s layout); "
                         "put it again",
                         name, (unsigned long long)bytes,
                         t->layout_tag[0] ? t->layout_tag : "row-major");
    if (!lst && op->origin == e->rank)
      lst = client_here(origin, &lerr);
    int rc = agree(e, lst, &lerr, err);
    ts_comm_proc proc = tsd_client_proc(m);
    return rc ? rc
              : ts_scatter_gather_direct(e->world, t, op->origin, &proc, m->address, true, err);
  }
  if (!lst && op->origin == e->rank &&
      (!origin || !origin->staging || origin->staging_bytes != bytes))
    lst = ts_error_set(&lerr, TS_INVALID_ARGUMENT,
                       "the data of the put does not match '%s' (%llu bytes) any more", name,
                       (unsigned long long)bytes);
  int rc;
  if (!t || !ts_attr_has_partial(t->attr)) {
    if ((rc = agree(e, lst, &lerr, err)))
      return rc;
    /* the data is checked and complete: write in place */
    return ts_scatter_gather(e->world, t, op->origin,
                             op->origin == e->rank ? origin->staging : NULL, true, e->cfg->staging,
                             err);
  }
  /* Through the executor, whose first agreement (over the world) takes this rank's checks. */
  ts_attr *src_attr = NULL;
  ts_plan *plan = NULL;
  ts_plan_opts po = {TS_STRATEGY_AUTO, e->cfg->staging, e->size};
  if (!lst)
    lst = one_rank_attr(op->origin, &src_attr, &lerr);
  if (!lst)
    lst = ts_plan_cache_get(ts_store_plans(e->store), t->ndim, t->shape, t->dtype, src_attr,
                            t->attr, &po, &plan, &lerr);
  ts_tensor src;
  memset(&src, 0, sizeof src);
  bool have_src = op->origin == e->rank && lst == TS_OK;
  if (have_src) {
    src.data = origin->staging;
    src.bytes = origin->staging_bytes;
    ts_layout_plain(&src.layout, t->dtype, t->ndim, t->shape, NULL);
  }
  ts_exec_opts xo;
  exec_opts(e, lst, &lerr, &xo);
  ts_tensor out;
  ts_exec_report rep;
  memset(&rep, 0, sizeof rep);
  rc = ts_reshard_exec(e->world, plan, have_src ? &src : NULL, t->layout_tag, &xo, &out, &rep, err);
  if (rc == TS_OK) {
    record(e, &rep);
    if (out.bytes != t->local.bytes) { /* same attribute and tag: cannot differ */
      ts_shard_free_tensor(&out);
      lst = ts_error_set(&lerr, TS_INTERNAL, "scattered slice has %zu bytes, the stored one %zu",
                         out.bytes, t->local.bytes);
    }
    rc = agree(e, lst, &lerr, err);
    if (rc == TS_OK) {
      ts_shard_free(t->local.data);
      t->local = out;
    } else {
      ts_shard_free_tensor(&out);
    }
  }
  ts_plan_destroy(&plan);
  ts_attr_destroy(&src_attr);
  return rc;
}

/* A get into the client's memory where the direct path does not apply: the asking rank writes
 * its gathered copy there (after the collective part; only it answers a get). */
static int copy_to_client(tsd_engine *e, tsd_session *c, const char *name,
                          const Tshard__ClientMemory *m, int rc, ts_error *err) {
  const tsd_copy *cp = rc == TS_OK && c ? tsd_session_copy(c, name, false) : NULL;
  if (!cp)
    return rc;
  if ((rc = tsd_client_copy(m, true, cp->buf, cp->total, err)) != TS_OK) {
    tsd_session_copy_reset(e, c);
    return rc;
  }
  tsd_session_copy_direct(e, c, name, cp->total);
  return TS_OK;
}

int tsd_run_get(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  const char *name = op->req->get->name;
  ts_error lerr;
  ts_error_clear(&lerr);
  ts_stored *t = ts_store_find(e->store, name);
  int lst = t ? TS_OK : ts_error_set(&lerr, TS_NOT_FOUND, "no tensor named '%s'", name);
  tsd_session *c = NULL;
  uint8_t *in_shm = NULL; /* the gather goes straight into the client's shared segment */
  uint64_t bytes = 0;
  if (t) {
    bytes = ts_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
      bytes *= (uint64_t)t->shape[d];
  }
  const Tshard__ClientMemory *m = op->req->get->client_memory; /* the client's own memory */
  if (!lst && m && m->bytes != bytes)
    lst = ts_error_set(&lerr, TS_BAD_SHAPE, "'%s' has %llu bytes; the client's buffer has %llu",
                       name, (unsigned long long)bytes, (unsigned long long)m->bytes);
  if (!lst && m && op->origin == e->rank)
    lst = client_here(origin, &lerr);
  if (!lst && m && op->origin == e->rank)
    lst = tsd_client_probe(m, &lerr);
  if (m && t && ts_scatter_direct_applies(e->world, t)) { /* every rank writes its piece there */
    int rc = agree(e, lst, &lerr, err);
    ts_comm_proc proc = tsd_client_proc(m);
    if (!rc)
      rc = ts_scatter_gather_direct(e->world, t, op->origin, &proc, m->address, false, err);
    if (!rc && op->origin == e->rank && origin && origin->conn_id)
      tsd_session_copy_direct(e, tsd_session_get(e, origin->conn_id, true), name, bytes);
    return rc;
  }
  if (!lst && op->origin == e->rank) {
    c = origin && origin->conn_id ? tsd_session_get(e, origin->conn_id, true) : NULL;
    tsd_session_copy_reset(e, c);
    in_shm = ts_attr_has_partial(t->attr) ? NULL : tsd_shm_gather_target(c, op->req->get, bytes);
    if (ts_attr_has_partial(t->attr)) /* the executor allocates after its first agreement */
      lst = tsd_memory_check(e, bytes, "the gathered tensor", &lerr);
  }
  int rc;
  if (!t || !ts_attr_has_partial(t->attr)) {
    /* The gathered copy is had (within the memory limit) before the one agreement. */
    uint8_t *whole = NULL;
    if (!lst && op->origin == e->rank) {
      whole = in_shm ? in_shm : tsd_buf_take(e, bytes, "the gathered tensor", &lerr);
      if (!whole)
        lst = lerr.code;
    }
    if ((rc = agree(e, lst, &lerr, err))) {
      if (!in_shm)
        tsd_buf_give(e, whole, bytes);
      return rc;
    }
    rc = ts_scatter_gather(e->world, t, op->origin, whole, false, e->cfg->staging, err);
    if (rc == TS_OK && c) {
      tsd_session_copy_set(e, c, name, false, whole, bytes, in_shm != NULL);
    } else if (!in_shm) {
      tsd_buf_give(e, whole, bytes);
    }
    return m ? copy_to_client(e, c, name, m, rc, err) : rc;
  }
  /* Through the executor, whose first agreement (over the world) takes this rank's checks. */
  ts_attr *tgt = NULL;
  ts_plan *plan = NULL;
  ts_plan_opts po = {TS_STRATEGY_AUTO, e->cfg->staging, e->size};
  if (!lst)
    lst = one_rank_attr(op->origin, &tgt, &lerr);
  if (!lst)
    lst = ts_plan_cache_get(ts_store_plans(e->store), t->ndim, t->shape, t->dtype, t->attr, tgt,
                            &po, &plan, &lerr);
  ts_exec_opts xo;
  exec_opts(e, lst, &lerr, &xo);
  ts_tensor out;
  ts_exec_report rep;
  memset(&rep, 0, sizeof rep);
  rc = ts_reshard_exec(e->world, plan, t->has_slice ? &t->local : NULL, NULL, &xo, &out, &rep, err);
  if (rc == TS_OK) {
    record(e, &rep);
    if (op->origin == e->rank && c && out.bytes == bytes) {
      tsd_session_copy_set(e, c, name, false, out.data, bytes, false);
      ts_pool_set_staging(out.data, true); /* a get copy now, no longer a slice */
    } else {
      ts_shard_free_tensor(&out); /* the asking client is gone */
    }
  }
  ts_plan_destroy(&plan);
  ts_attr_destroy(&tgt);
  return m ? copy_to_client(e, c, name, m, rc, err) : rc;
}

/* A relabeled reshard: tgt's ranks permuted among themselves so that the most of t stays in
 * place (every rank computes the same order from the same request); its answer gives them. */
static int relabel(const ts_stored *t, ts_attr *tgt, ts_error *err) {
  int rc = ts_attr_relabel(t->attr, tgt, t->ndim, t->shape, NULL, err);
  if (!rc)
    tsd_oplog_ranks(tgt->ranks, tgt->nranks);
  return rc;
}

/* Prepare here (the request, the tensor, the copy that keeps the source) without agreeing: the
 * store's reshard carries a failure into its one agreement over the world, then transfers and
 * agrees once more to commit, so every rank records the same outcome. */
int tsd_run_reshard(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__ReshardRequest *q = op->req->reshard;
  ts_error lerr;
  ts_error_clear(&lerr);
  ts_attr *tgt = NULL;
  ts_plan_opts po = {TS_STRATEGY_AUTO, e->cfg->staging, e->size};
  const char *tag = tag_of(q->layout);
  int lst = parse_strategy(q->strategy, &po.strategy, &lerr);
  if (!lst)
    lst = tsd_attr_from_msg(q->attr, &tgt, &lerr);
  ts_stored *t = ts_store_find(e->store, q->name);
  if (!lst && !t)
    lst = ts_error_set(&lerr, TS_NOT_FOUND, "no tensor named '%s'", q->name);
  if (!lst && q->relabel)
    lst = relabel(t, tgt, &lerr);
  ts_dtype cast = t ? t->dtype : TS_F32; /* the dtype of the result */
  if (!lst && q->dtype[0])
    lst = ts_dtype_parse(q->dtype, &cast, &lerr);
  ts_layout tag_layout; /* the request before resources: a tag that does not fit the tensor */
  if (!lst && tag[0])
    lst = ts_layout_from_tag(&tag_layout, cast, t->ndim, t->shape, tag, &lerr);
  const char *target = q->name;
  bool copied = false;
  if (!lst && q->keep_source_as[0]) {
    /* Keep the source: reshard a copy under the new name. */
    ts_stored *copy = NULL;
    lst = ts_store_add(e->store, q->keep_source_as, t->ndim, t->shape, t->dtype, t->attr,
                       t->layout_tag, &copy, &lerr);
    if (!lst) {
      copied = true;
      if (t->local.bytes)
        memcpy(copy->local.data, t->local.data, t->local.bytes);
    }
    target = q->keep_source_as;
  }
  ts_exec_report rep;
  int rc = ts_store_reshard_cast(e->store, e->world, target, tgt, tag, &po, &cast, lst, &lerr, &rep,
                                 err);
  if (rc == TS_OK) {
    record(e, &rep);
    tsd_oplog_note(rep.strategy, (uint64_t)(rep.bytes_sent + rep.bytes_received));
    tsd_trace_exec(&rep);
  }
  if (copied && rc)
    ts_store_drop(e->store, target, NULL);
  ts_attr_destroy(&tgt);
  return rc;
}

int tsd_run_shutdown(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)op, (void)origin, (void)err;
  TSD_LOG(TSD_LOG_INFO, "shutdown requested (operation %llu)", (unsigned long long)op->seq);
  tsd_bgsave_finish_all(e); /* a background save still writing completes, or is abandoned on
                             * every rank after --shutdown-save-wait */
  e->stopping = true;
  return TS_OK;
}

/* The names each operation may change (busy in the catalog while it runs). */
void tsd_changes_create(const Tshard__Request *r, tsd_changes *ch) {
  tsd_changes_add(ch, r->create->name);
  ch->names = true;
}

void tsd_touches_put(const Tshard__Request *r, tsd_changes *ch) {
  tsd_changes_add(ch, r->put->name);
}

void tsd_changes_drop(const Tshard__Request *r, tsd_changes *ch) {
  tsd_changes_add(ch, r->drop->name);
  ch->names = true;
}

void tsd_changes_reshard(const Tshard__Request *r, tsd_changes *ch) {
  tsd_changes_add(ch, r->reshard->name);
  tsd_changes_add(ch, r->reshard->keep_source_as);
  ch->names = r->reshard->keep_source_as[0] != '\0';
}

/* After an operation that may have changed any tensor: every name the catalog or the store has
 * is published again (removed ones leave the catalog). */
static void catalog_refresh_all(tsd_engine *e) {
  int n = 0;
  char(*old)[TS_NAME_MAX] = tsd_catalog_names(e->sh->catalog, &n);
  for (int i = 0; i < n; i++)
    catalog_refresh(e, old[i]);
  free(old);
  for (int i = 0; i < ts_store_count(e->store); i++)
    catalog_refresh(e, ts_store_at(e->store, i)->name);
}

void tsd_catalog_publish_all(tsd_engine *e) { catalog_refresh_all(e); }

/* Whether the last collective operation left its catalog entries for after its answer
 * (tsd_ops_after): the names it may have changed stay busy in the catalog until then (the loop
 * thread hands their list and describe to the engine, which publishes them first). Publishing
 * and the log line cost a 4 KiB reshard at 4 ranks about 11 of its 155 us before its answer. */
static bool after_pending;

static void publish_pending(tsd_engine *e) {
  after_pending = false;
  char names[TSD_CHANGES_MAX][TS_NAME_MAX];
  bool all;
  int n = tsd_catalog_busy(e->sh->catalog, names, &all);
  if (all)
    catalog_refresh_all(e);
  else
    for (int i = 0; i < n; i++)
      catalog_refresh(e, names[i]);
  tsd_catalog_end(e->sh->catalog);
}

bool tsd_ops_after(tsd_engine *e) {
  bool did = tsd_oplog_flush();
  if (!after_pending)
    return did;
  publish_pending(e);
  return true;
}

int tsd_run_collective(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  const tsd_op_handlers *entry = tsd_op_handlers_find((int)op->req->op_case);
  if (!entry || !entry->run_collective) /* rank 0 orders validated operations only */
    return ts_error_set(err, TS_UNSUPPORTED, "operation %s is not collective",
                        tsd_op_name(op->req->op_case));
  tsd_ops_after(e);            /* the previous operation's, before this one marks its names */
  tsd_oplog_begin();           /* one log line per operation (oplog.c) */
  tsd_trace_begin(op, origin); /* and its points in the trace ring (trace.c) */
  if (!entry->changes) {
    int rc = entry->run_collective(e, op, origin, err);
    tsd_oplog_end(e, op, origin, rc);
    tsd_trace_end(rc);
    return rc;
  }
  tsd_changes ch = {.n = 0};
  entry->changes(op->req, &ch);
  tsd_catalog_begin(e->sh->catalog, &ch);
  int rc = entry->run_collective(e, op, origin, err);
  after_pending = true;
  /* One that may change the list of names (a create, a drop, a copy) publishes before its answer:
   * every list waits while the names are busy, and a list handed to the engine just before the
   * next collective starts would wait for all of it. */
  if (ch.names || ch.all)
    publish_pending(e);
  tsd_oplog_end(e, op, origin, rc);
  tsd_trace_end(rc);
  return rc;
}

void tsd_answer_collective(tsd_engine *e, int op_case, const tsd_pending *w, int status,
                           const char *msg) {
  const tsd_op_handlers *entry = tsd_op_handlers_find(op_case);
  /* Stamped before the write: a write that wakes the client may give it this core first. */
  tsd_trace_answered(w->req_id);
  if (status == TS_OK && entry && entry->answer)
    entry->answer(e, w);
  else
    tsd_reply_status(e, w->conn_id, w->req_id, status, status == TS_OK ? "" : msg);
}
