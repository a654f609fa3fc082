/* ckpt_validate.c - the validators of the checkpoint operations save and load, part of
 * the wire layer (libtsdwire, the fuzz target): the directory's length, the names' rules and the
 * target attribute against the world; what depends on the store or the files is the handlers'
 * (ckpt.c). */
#include <stdio.h>
#include <string.h>

#include "tsd_wire.h"
#include "ts_rules.h"

static int check_dir(const char *dir, ts_error *err) {
  size_t n = dir ? strlen(dir) : 0;
  if (n == 0 || n >= 4000)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "checkpoint directory of %zu bytes; give a path of 1 to 3999 bytes", n);
  return ts_text_check("checkpoint directory", dir, n, "paths", err);
}

static int check_names(char **names, size_t n, ts_error *err) {
  for (size_t i = 0; i < n; i++) {
    int rc = ts_name_check("tensor name", names[i], strlen(names[i]), err);
    if (rc)
      return rc;
  }
  return TS_OK;
}

static bool attr_given(const Tshard__DistAttr *a) {
  return a && (a->n_mesh_shape > 0 || (a->text && a->text[0]));
}

int tsd_check_selection(const char *what, size_t n_names, const char *prefix, bool all,
                        ts_error *err) {
  bool has_prefix = prefix && prefix[0];
  if (!all && !has_prefix && n_names == 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%s of no tensors: give names (exact, or "
                        "globs such as layers.*.weight) or a prefix, or ask for all tensors "
                        "(all=True in Python, --all in the CLI, .all = 1 in C)",
                        what);
  if (all && (has_prefix || n_names > 0))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%s: all takes every tensor; give it without "
                        "names or a prefix",
                        what);
  if (has_prefix && n_names > 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "%s: give names or a prefix, not both", what);
  return has_prefix ? ts_text_check("prefix", prefix, strlen(prefix), "names", err) : TS_OK;
}

int tsd_attr_msg_check(const Tshard__DistAttr *m, const tsd_limits *lim, ts_error *err) {
  if (!attr_given(m))
    return TS_OK;
  ts_attr *a = NULL;
  int rc = tsd_attr_from_msg(m, &a, err);
  for (int i = 0; !rc && i < a->nranks; i++)
    if (a->ranks[i] >= lim->world_size)
      rc = ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "attribute names rank %d; the world has ranks "
                        "0 to %d",
                        a->ranks[i], lim->world_size - 1);
  ts_attr_destroy(&a);
  return rc;
}

int tsd_validate_save(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)lim;
  const Tshard__SaveRequest *q = r->save;
  if (q->snapshot) /* the daemons choose the directory and save every tensor */
    return q->n_names || q->all || q->prefix[0] || q->overwrite
               ? ts_error_set(err, TS_INVALID_ARGUMENT,
                              "a snapshot saves every tensor into a "
                              "new directory; give no names, prefix, all or overwrite")
               : TS_OK;
  int rc = check_dir(q->dir, err);
  if (!rc)
    rc = tsd_check_selection("save", q->n_names, q->prefix, q->all, err);
  return rc ? rc : check_names(q->names, q->n_names, err);
}

int tsd_validate_load(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  const Tshard__LoadRequest *q = r->load;
  int rc = check_dir(q->dir, err);
  if (!rc)
    rc = check_names(q->names, q->n_names, err);
  if (!rc && q->in_place && (attr_given(q->attr) || q->n_rules))
    rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                      "an in-place load keeps each tensor's "
                      "attribute; give no attribute rules or default");
  if (!rc)
    rc = tsd_attr_msg_check(q->attr, lim, err);
  for (size_t i = 0; !rc && i < q->n_rules; i++) {
    const Tshard__AttrRule *k = q->rules[i];
    rc = ts_attr_rule_pattern_check("load: attribute rule", k->name, strlen(k->name), err);
    if (!rc && (rc = tsd_attr_msg_check(k->attr, lim, err))) {
      char why[320];
      snprintf(why, sizeof why, "%.300s", err->msg);
      rc = ts_error_set(err, rc, "load: the rule '%.150s': %.300s", k->name, why);
    }
  }
  return rc;
}

int tsd_validate_save_finish(const Tshard__Request *r, const tsd_limits *lim, ts_error *err) {
  (void)r, (void)lim;
  return ts_error_set(err, TS_INVALID_ARGUMENT,
                      "save_finish is ordered by the daemons "
                      "themselves when a background save's files are written; clients wait "
                      "for it through stats (saves) instead");
}
