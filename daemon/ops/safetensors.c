/* safetensors.c - the daemon's Hugging Face safetensors operations, import_safetensors and
 * export_safetensors: collective handlers, the import's change set and the answers (the names
 * created, the files written), named by the table (handlers.c). The work is
 * shard/ckpt/safetensors_*.c (collective over the world, every rank the same outcome); this file
 * turns the requests into their arguments. The validators are in wire/safetensors_validate.c.
 *
 * An import's tensors keep their file's __metadata__ by reference in their store entries, for as
 * long as each entry lives (shard/ckpt/safetensors_format.c, st_meta): an export given no
 * metadata writes the kept one when every tensor it writes has the same, else {"format": "pt"}.
 * Every rank runs the same operations in the same order, so every rank keeps the same. */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "ts_ckpt.h"
#include "ts_rules.h"

/* The result of the last import or export, for its answers (by the operation's hash). */
static struct {
  uint64_t hash;
  bool valid;
  ts_st_result res;
} last;

void tsd_safetensors_free(void) { ts_st_result_clear(&last.res); }

static bool attr_given(const Tshard__DistAttr *a) {
  return a && (a->n_mesh_shape > 0 || (a->text && a->text[0]));
}

/* The import's arguments: its attributes parsed (rank-local; agreed by the import). */
typedef struct import_args {
  ts_st_import_spec sp;
  const char **rfrom, **rto;
  tsd_rules rules;
  ts_attr *def;
} import_args;

static int import_args_make(const Tshard__ImportSafetensorsRequest *q, import_args *a,
                            ts_error *err) {
  memset(a, 0, sizeof *a);
  size_t nr = q->n_rename ? q->n_rename : 1;
  a->rfrom = calloc(nr, sizeof *a->rfrom);
  a->rto = calloc(nr, sizeof *a->rto);
  if (!a->rfrom || !a->rto)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors import: no memory");
  int rc = attr_given(q->default_attr) ? tsd_attr_from_msg(q->default_attr, &a->def, err) : TS_OK;
  if (!rc) /* a rule without an attribute: the default's */
    rc = tsd_rules_make(q->tensors, q->n_tensors, &a->rules, err);
  for (size_t i = 0; i < q->n_rename; i++)
    a->rfrom[i] = q->rename[i]->key, a->rto[i] = q->rename[i]->value;
  a->sp = (ts_st_import_spec){.path = q->path,
                              .strip_prefix = q->strip_prefix,
                              .nrename = (int)q->n_rename,
                              .rename_from = a->rfrom,
                              .rename_to = a->rto,
                              .nnames = (int)q->n_names,
                              .names = (const char **)q->names,
                              .nattrs = a->rules.n,
                              .attr_names = a->rules.patterns,
                              .attrs = (const ts_attr *const *)a->rules.attrs,
                              .default_attr = a->def};
  return rc;
}

static void import_args_free(import_args *a) {
  tsd_rules_free(&a->rules);
  ts_attr_destroy(&a->def);
  free(a->rfrom), free(a->rto);
}

int tsd_run_import_safetensors(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                               ts_error *err) {
  (void)origin;
  const Tshard__ImportSafetensorsRequest *q = op->req->import_safetensors;
  ts_st_result_clear(&last.res);
  last.valid = false;
  import_args a;
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = import_args_make(q, &a, &lerr);
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc == TS_OK) {
    rc = ts_st_import(e->store, e->world, &a.sp, &last.res, err);
    if (rc == TS_OK) {
      TSD_LOG(TSD_LOG_INFO, "imported %d tensors from safetensors '%s' (%lld bytes read here)",
              last.res.n, q->path, (long long)last.res.bytes);
    }
  }
  import_args_free(&a);
  last.valid = rc == TS_OK;
  last.hash = op->hash;
  return rc;
}

int tsd_run_export_safetensors(tsd_engine *e, const tsd_ordered *op, tsd_pending *origin,
                               ts_error *err) {
  (void)origin;
  const Tshard__ExportSafetensorsRequest *q = op->req->export_safetensors;
  ts_st_result_clear(&last.res);
  last.valid = false;
  size_t nm = q->n_metadata;
  const char **mk = calloc(nm ? nm : 1, sizeof *mk), **mv = calloc(nm ? nm : 1, sizeof *mv);
  ts_error lerr;
  ts_error_clear(&lerr);
  int lst = mk && mv ? TS_OK : ts_error_set(&lerr, TS_NO_MEMORY, "safetensors export: no memory");
  for (size_t i = 0; !lst && i < nm; i++)
    mk[i] = q->metadata[i]->key, mv[i] = q->metadata[i]->value;
  const char **names = NULL;
  int n = 0;
  if (!lst)
    lst = tsd_select_tensors(e->store, "safetensors export", q->names, q->n_names, q->prefix,
                             q->all, &names, &n, &lerr);
  int rc = ts_comm_agree(ts_world_comm(e->world), lst, &lerr, err);
  if (rc == TS_OK) {
    rc = ts_st_export(e->store, e->world, q->path, names, n, (int64_t)q->max_shard_bytes, mk, mv,
                      (int)nm, &last.res, err);
    if (rc == TS_OK)
      TSD_LOG(TSD_LOG_INFO,
              "exported to safetensors '%s' (%d files, %lld bytes written here, "
              "%s)",
              q->path, last.res.n, (long long)last.res.bytes,
              last.res.mapped ? "mapped" : "pwrite");
  }
  free(mk), free(mv), free(names);
  last.valid = rc == TS_OK;
  last.hash = op->hash;
  return rc;
}

/* An import adds names: those listed, or any (a default attribute imports every tensor). */
void tsd_changes_import_safetensors(const Tshard__Request *r, tsd_changes *ch) {
  const Tshard__ImportSafetensorsRequest *q = r->import_safetensors;
  ch->names = true;
  if (attr_given(q->default_attr) || q->n_rename > 0 || (q->strip_prefix && q->strip_prefix[0])) {
    ch->all = true;
    return;
  }
  for (size_t i = 0; i < q->n_names; i++)
    tsd_changes_add(ch, q->names[i]);
  for (size_t i = 0; i < q->n_tensors; i++) {
    if (ts_attr_rule_is_glob(q->tensors[i]->name)) { /* a glob imports what it matches */
      ch->all = true;
      return;
    }
    tsd_changes_add(ch, q->tensors[i]->name);
  }
}

void tsd_answer_safetensors(tsd_engine *e, const tsd_pending *w) {
  Tshard__Response r = TSHARD__RESPONSE__INIT;
  Tshard__SafetensorsResult res = TSHARD__SAFETENSORS_RESULT__INIT;
  r.id = w->req_id;
  r.message = "";
  r.result_case = TSHARD__RESPONSE__RESULT_SAFETENSORS;
  r.safetensors = &res;
  bool mine = last.valid && last.hash == w->hash; /* else: a retry answered by its key */
  bool import = w->op_case == TSHARD__REQUEST__OP_IMPORT_SAFETENSORS;
  if (mine && import) {
    res.n_names = (size_t)last.res.n;
    res.names = last.res.items;
  } else if (mine) {
    res.n_files = (size_t)last.res.n;
    res.files = last.res.items;
  }
  res.bytes = mine ? (uint64_t)last.res.bytes : 0;
  tsd_reply_response(e, w->conn_id, &r);
}
