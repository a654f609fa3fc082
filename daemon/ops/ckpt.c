/* ckpt.c - the daemon's checkpoint operations, save and load: validators, collective
 * handlers and change sets named by the table (handlers.c). The work is shard/ckpt/ (ckpt_save.c,
 * ckpt_load.c; collective over the world, every rank the same outcome); this file turns the
 * requests into their arguments (the validators are in ckpt_validate.c, with the wire layer);
 * the save itself, synchronous or in the background, is bgsave.c's. Test hooks, read at each save:
 * TSHARD_CKPT_FAIL_RANK=k makes rank k's file write fail after TSHARD_CKPT_FAIL_AFTER bytes
 * (default 0) with EIO, or with TSHARD_CKPT_FAIL_KILL=1 kills rank k there (a rank dying mid-save).
 * Saves cut pieces above twice --ckpt-chunk into chunks of about that size (config.c; 0: whole
 * pieces). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "handlers.h"
#include "ts_ckpt.h"

static bool attr_given(const Tshard__DistAttr *a) {
  return a && (a->n_mesh_shape > 0 || (a->text && a->text[0]));
}

void tsd_ckpt_arm_fail_hook(int rank) {
  const char *k = getenv("TSHARD_CKPT_FAIL_RANK");
  if (!k || atoi(k) != rank)
    return;
  const char *after = getenv("TSHARD_CKPT_FAIL_AFTER");
  const char *kill = getenv("TSHARD_CKPT_FAIL_KILL");
  ts_ckpt_debug_fail_write(after ? atoll(after) : 0, kill && strcmp(kill, "1") == 0);
}

int tsd_rules_make(Tshard__AttrRule *const *rules, size_t n, tsd_rules *out, ts_error *err) {
  memset(out, 0, sizeof *out);
  out->patterns = calloc(n ? n : 1, sizeof *out->patterns);
  out->attrs = calloc(n ? n : 1, sizeof *out->attrs);
  if (!out->patterns || !out->attrs)
    return ts_error_set(err, TS_NO_MEMORY, "attribute rules: no memory");
  for (size_t i = 0; i < n; i++) {
    out->patterns[out->n++] = rules[i]->name;
    int rc =
        attr_given(rules[i]->attr) ? tsd_attr_from_msg(rules[i]->attr, &out->attrs[i], err) : TS_OK;
    if (rc) {
      char why[320];
      snprintf(why, sizeof why, "%.300s", err->msg);
      return ts_error_set(err, rc, "the rule '%.150s': %.300s", rules[i]->name, why);
    }
  }
  return TS_OK;
}

void tsd_rules_free(tsd_rules *r) {
  if (!r)
    return;
  for (int i = 0; r->attrs && i < r->n; i++)
    ts_attr_destroy(&r->attrs[i]);
  free(r->patterns), free(r->attrs);
  memset(r, 0, sizeof *r);
}

int tsd_run_load(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__LoadRequest *q = op->req->load;
  ts_attr *a = NULL;
  tsd_rules rules = {0};
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = attr_given(q->attr) ? tsd_attr_from_msg(q->attr, &a, &lerr) : TS_OK;
  if (!lst)
    lst = tsd_rules_make(q->rules, q->n_rules, &rules, &lerr);
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc == TS_OK) {
    ts_ckpt_load_opts o = {.per_node = q->per_node,
                           .staging_bytes = e->cfg->staging,
                           .path = TS_CKPT_PATH_AUTO,
                           .nrules = rules.n,
                           .rule_patterns = rules.patterns,
                           .rule_attrs = (const ts_attr *const *)rules.attrs,
                           .in_place = q->in_place};
    ts_ckpt_report rep;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = ts_ckpt_load(e->store, e->world, q->dir, (const char *const *)q->names, (int)q->n_names, a,
                      &o, &rep, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (rc == TS_OK)
      tsd_ckpt_answer_load(op, q->dir, &rep, sec);
    if (rc == TS_OK)
      TSD_LOG(TSD_LOG_INFO,
              "loaded %d tensors%s from '%s' (%lld bytes read here, %lld to "
              "verify)",
              rep.tensors, q->in_place ? " in place" : "", q->dir, (long long)rep.bytes_read,
              (long long)rep.bytes_verified_extra);
  }
  tsd_rules_free(&rules);
  ts_attr_destroy(&a);
  return rc;
}

/* A load adds names (in place: writes them): the listed ones, or any (all). */
void tsd_changes_load(const Tshard__Request *r, tsd_changes *ch) {
  for (size_t i = 0; i < r->load->n_names; i++)
    tsd_changes_add(ch, r->load->names[i]);
  ch->names = !r->load->in_place;
  if (r->load->n_names == 0)
    ch->all = true;
}
