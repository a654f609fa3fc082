/* ckpt.c - the daemon's checkpoint operations, save and load: validators, collective
 * handlers and change sets named by the table (handlers.c). The work is shard/ckpt/ (ckpt_save.c,
 * ckpt_load.c; collective over the world, every rank the same outcome); this file turns the
 * requests into their arguments (the validators are in ckpt_validate.c, with the wire layer);
 * the save itself, synchronous or in the background, is bgsave.c's. Test hooks, read at each save: TSHARD_CKPT_FAIL_RANK=k makes
 * rank k's file write fail after TSHARD_CKPT_FAIL_AFTER bytes (default 0) with EIO, or with
 * TSHARD_CKPT_FAIL_KILL=1 kills rank k there (a rank dying mid-save). Saves cut pieces above
 * twice --ckpt-chunk into chunks of about that size (config.c; 0: whole pieces). */
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

int tsd_run_load(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin, ts_error *err) {
  (void)origin;
  const Tshard__LoadRequest *q = op->req->load;
  ts_attr *a = NULL;
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = attr_given(q->attr) ? tsd_attr_from_msg(q->attr, &a, &lerr) : TS_OK;
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc == TS_OK) {
    ts_ckpt_load_opts o = {q->per_node, e->cfg->staging, TS_CKPT_PATH_AUTO};
    ts_ckpt_report rep;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = ts_ckpt_load(e->store, e->world, q->dir, (const char *const *)q->names,
                      (int)q->n_names, a, &o, &rep, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (rc == TS_OK)
      tsd_ckpt_answer_load(op, q->dir, &rep, sec);
    if (rc == TS_OK)
      TSD_LOG(TSD_LOG_INFO, "loaded %d tensors from '%s' (%lld bytes read here, %lld to verify)",
              rep.tensors, q->dir, (long long)rep.bytes_read,
              (long long)rep.bytes_verified_extra);
  }
  ts_attr_destroy(&a);
  return rc;
}

/* A load adds names: the listed ones, or any (all). */
void tsd_changes_load(const Tshard__Request *r, tsd_changes *ch) {
  for (size_t i = 0; i < r->load->n_names; i++)
    tsd_changes_add(ch, r->load->names[i]);
  ch->names = true;
  if (r->load->n_names == 0)
    ch->all = true;
}
