/* resume.c - `tshardd --resume DIR [--resume-attr 'GLOB=ATTR' ...]`: before any client is
 * served (the engine's start hook, after snapdir.c checked DIR), every rank restores the latest
 * complete checkpoint in DIR: DIR itself when it holds an index.json (its files trusted, else
 * refused), else the trusted subdirectory (not hidden: temporary directories of saves in
 * progress are) with the highest sequence recorded in its index (snapshots; snapdir.c's one
 * order, which untrusted entries never enter). Each tensor is loaded under its saved attribute
 * when every rank it names is in this job, else under the attribute of the --resume-attr rule
 * that names it, or else of the first whose glob matches its name (proto/ts_rules.h, the rules
 * of load). Everything is decided before anything is loaded, and refused naming the directory,
 * the tensor or the rule when it cannot be: no checkpoint, an index that does not parse, a
 * tensor no rule places, a rule whose attribute does not fit the tensor or the ranks. The
 * decision is agreed over the world, so every rank exits with the same message; the load is one
 * ts_ckpt_load of every tensor (collective, checksums verified, all or none). What was restored
 * is logged, one line per tensor and a summary naming the checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "handlers.h"
#include "ts_ckpt.h"
#include "ts_rules.h"

/* The checkpoint to restore: DIR (its files trusted), or its trusted subdirectory with the
 * highest recorded sequence. Errors start "cannot resume from". */
static int choose_checkpoint(const char *dir, char *out, size_t cap, ts_error *err) {
  char path[4096];
  struct stat st;
  ts_error why;
  snprintf(path, sizeof path, "%s/%s", dir, TS_CKPT_INDEX);
  if (lstat(path, &st) == 0) {
    int rc = tsd_snapdir_check_files(dir, &why);
    if (rc)
      return ts_error_set(err, rc, "cannot resume from %.3800s", why.msg);
    snprintf(out, cap, "%s", dir);
    return TS_OK;
  }
  tsd_snap *v = NULL;
  int n = 0;
  int rc = tsd_snapdir_list("--resume", dir, false, &v, &n, &why);
  if (rc)
    return ts_error_set(err, rc, "cannot resume from '%s': %.3800s", dir, why.msg);
  if (n == 0)
    rc = ts_error_set(err, TS_NOT_FOUND,
                      "cannot resume from '%s': no complete snapshot or "
                      "checkpoint there (no %s in it or in any of its subdirectories that are "
                      "the daemon's user's)",
                      dir, TS_CKPT_INDEX);
  else
    snprintf(out, cap, "%s/%s", dir, v[n - 1].name);
  free(v);
  return rc;
}

/* The attribute tensor t is restored under: NULL (its saved one, *rule -1) when it fits this
 * job, else its rule's (ts_attr_rule_pick; *rule its number). */
static int place_tensor(const tsd_config *cfg, const ts_ckpt_tensor *t, int size, ts_attr **out,
                        int *rule, ts_error *err) {
  *out = NULL;
  *rule = -1;
  ts_attr *a = NULL;
  ts_error why;
  int rc = ts_attr_parse(t->attr, &a, &why);
  if (rc == TS_OK)
    rc = ts_attr_validate(a, t->ndim, t->shape, size, &why);
  ts_attr_destroy(&a);
  if (rc == TS_OK)
    return TS_OK;
  char globs[TSD_RESUME_RULES_MAX][512];
  const char *pats[TSD_RESUME_RULES_MAX], *attrs[TSD_RESUME_RULES_MAX];
  for (int k = 0; k < cfg->nresume_attr; k++) { /* config.c checked every rule */
    size_t plen;
    ts_error serr;
    ts_attr_rule_split("--resume-attr", cfg->resume_attr[k], &plen, &attrs[k], &serr);
    snprintf(globs[k], sizeof globs[k], "%.*s", (int)plen, cfg->resume_attr[k]);
    pats[k] = globs[k];
  }
  int k = ts_attr_rule_pick(pats, cfg->nresume_attr, t->name);
  if (k >= 0) {
    const char *r = cfg->resume_attr[k];
    ts_error rerr;
    int arc = ts_attr_parse(attrs[k], out, &rerr);
    if (arc == TS_OK)
      arc = ts_attr_validate(*out, t->ndim, t->shape, size, &rerr);
    if (arc) {
      ts_attr_destroy(out);
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "--resume-attr '%s' does not fit tensor '%s' "
                          "on this job's %d ranks: %s",
                          r, t->name, size, rerr.msg);
    }
    *rule = k;
    return TS_OK;
  }
  return ts_error_set(err, TS_BAD_ATTRIBUTE,
                      "tensor '%s' cannot be restored as saved (%s: %s) "
                      "and no --resume-attr rule matches its name; give one, e.g. "
                      "--resume-attr '%s=mesh=[%d] placements=[R]'",
                      t->name, t->attr, why.msg, t->name, size);
}

/* Loads every tensor of the checkpoint under its chosen attribute in one load (collective;
 * each tensor's attribute an exact-name rule, NULL: its saved one), logging each. */
static int load_all(tsd_engine *e, const char *ckpt, const ts_ckpt_index *idx, ts_attr **attrs,
                    const int *rules, ts_error *err) {
  int n = idx->ntensors;
  const char **names = calloc((size_t)(n ? n : 1), sizeof *names);
  if (!names)
    return ts_error_set(err, TS_NO_MEMORY, "cannot resume: no memory");
  for (int i = 0; i < n; i++)
    names[i] = idx->tensors[i].name;
  ts_ckpt_load_opts o = {.staging_bytes = e->cfg->staging,
                         .path = TS_CKPT_PATH_AUTO,
                         .nrules = n,
                         .rule_patterns = names,
                         .rule_attrs = (const ts_attr *const *)attrs};
  ts_ckpt_report rep;
  int rc = ts_ckpt_load(e->store, e->world, ckpt, names, n, NULL, &o, &rep, err);
  free(names);
  if (rc)
    return rc;
  for (int i = 0; i < n; i++) {
    const ts_ckpt_tensor *t = &idx->tensors[i];
    if (rules[i] < 0)
      TSD_LOG(TSD_LOG_INFO, "resumed '%s' under its saved attribute %s", t->name, t->attr);
    else
      TSD_LOG(TSD_LOG_INFO, "resumed '%s' (saved %s) by --resume-attr '%s'", t->name, t->attr,
              e->cfg->resume_attr[rules[i]]);
  }
  TSD_LOG(TSD_LOG_INFO, "resumed %d tensors (%lld bytes) from '%s'", n, (long long)rep.bytes_total,
          ckpt);
  return TS_OK;
}

int tsd_resume(tsd_engine *e, ts_error *err) {
  if (!e->cfg->resume_dir[0])
    return TS_OK;
  char ckpt[4096];
  ts_ckpt_index *idx = NULL;
  ts_error lerr;
  ts_error_clear(&lerr);
  snprintf(ckpt, sizeof ckpt, "%s", e->cfg->resume_dir);
  int lst = choose_checkpoint(e->cfg->resume_dir, ckpt, sizeof ckpt, &lerr);
  if (lst == TS_OK && ts_ckpt_index_read(ckpt, &idx, &lerr) != TS_OK) {
    char why[400];
    snprintf(why, sizeof why, "%s", lerr.msg);
    lst = ts_error_set(&lerr, TS_CORRUPT,
                       "cannot resume from '%s': its index does not parse: "
                       "%s",
                       ckpt, why);
  }
  int n = idx ? idx->ntensors : 0;
  ts_attr **attrs = calloc((size_t)(n ? n : 1), sizeof *attrs);
  int *rules = calloc((size_t)(n ? n : 1), sizeof *rules);
  if (lst == TS_OK && (!attrs || !rules))
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "cannot resume: no memory");
  for (int i = 0; lst == TS_OK && i < n; i++)
    lst = place_tensor(e->cfg, &idx->tensors[i], e->size, &attrs[i], &rules[i], &lerr);
  if (lst != TS_OK && strncmp(lerr.msg, "cannot resume", 13) != 0) {
    char why[480];
    snprintf(why, sizeof why, "%s", lerr.msg);
    ts_error_set(&lerr, lst, "cannot resume from '%s': %s", ckpt, why);
  }
  /* every rank the same decision, then the loads */
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc == TS_OK)
    rc = load_all(e, ckpt, idx, attrs, rules, err);
  if (rc == TS_OK && idx->sequence > 0) {
    TSD_LOG(TSD_LOG_INFO,
            "the resumed checkpoint is snapshot %lld: the next snapshot records a "
            "higher sequence",
            (long long)idx->sequence);
    tsd_bgsave_note_sequence(idx->sequence);
  }
  if (rc == TS_OK)
    tsd_catalog_publish_all(e);
  for (int i = 0; attrs && i < n; i++)
    ts_attr_destroy(&attrs[i]);
  free(attrs), free(rules);
  ts_ckpt_index_destroy(&idx);
  return rc;
}
