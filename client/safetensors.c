/* safetensors.c - the C library's Hugging Face safetensors calls: import_safetensors and
 * export_safetensors requests (the path made absolute here: the daemons do not share the
 * caller's working directory), their answers turned into one name or path per line. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"
#include "ts_rules.h"

static int abs_path(tshard_client *c, const char *path, char *out, size_t cap) {
  if (!path || !path[0])
    return tsc_fail(c, TS_INVALID_ARGUMENT, "safetensors path is empty; give a path");
  char cwd[PATH_MAX] = "";
  if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
    return tsc_fail(c, TS_IO, "cannot resolve the relative path '%s'", path);
  if ((size_t)snprintf(out, cap, "%s%s%s", cwd, cwd[0] ? "/" : "", path) >= cap)
    return tsc_fail(c, TS_INVALID_ARGUMENT, "safetensors path too long");
  return TS_OK;
}

/* items joined by newlines into *out (malloc'd; NULL out: nothing). */
static int join_lines(tshard_client *c, char **items, size_t n, char **out) {
  if (!out)
    return TS_OK;
  size_t len = 1;
  for (size_t i = 0; i < n; i++)
    len += strlen(items[i]) + 1;
  char *s = malloc(len), *p = s;
  if (!s)
    return tsc_fail(c, TS_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < n; i++)
    p += sprintf(p, "%s\n", items[i]);
  *p = '\0';
  *out = s;
  return TS_OK;
}

/* Sends a collective request whose answer is a SafetensorsResult; its names or files to *out. */
static int call_result(tshard_client *c, Tshard__Request *req, bool names, char **out) {
  if (tsc_apply_group(c, req))
    return TS_INVALID_ARGUMENT;
  Tshard__Response *r = NULL;
  int rc = tsc_call(c, req, &r);
  if (rc == TS_OK && r->result_case != TSHARD__RESPONSE__RESULT_SAFETENSORS)
    rc = tsc_fail(c, TS_PROTOCOL, "the daemon's answer carries no safetensors result");
  if (rc == TS_OK)
    rc = names ? join_lines(c, r->safetensors->names, r->safetensors->n_names, out)
               : join_lines(c, r->safetensors->files, r->safetensors->n_files, out);
  tsc_free(c, r);
  return rc;
}

static int names_ok(tshard_client *c, const char *const *names, int n) {
  if (n < 0 || (n > 0 && !names))
    return tsc_fail(c, TS_INVALID_ARGUMENT, "names: %d names and %s list", n, names ? "a" : "no");
  for (int i = 0; i < n; i++)
    if (tsc_name_ok(c, "tensor name", names[i]))
      return TS_INVALID_ARGUMENT;
  return TS_OK;
}

int tshard_import_safetensors(tshard_client *c, const char *path, const tshard_st_import_opts *o,
                              char **created) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (created)
    *created = NULL;
  tshard_st_import_opts none;
  memset(&none, 0, sizeof none);
  o = o ? o : &none;
  char full[4096];
  int rc = abs_path(c, path, full, sizeof full);
  if (rc || (rc = names_ok(c, o->attr_names, o->nattrs)) || (rc = names_ok(c, o->names, o->nnames)))
    return rc;
  if (o->nrename < 0 || (o->nrename > 0 && (!o->rename_from || !o->rename_to)))
    return tsc_fail(c, TS_INVALID_ARGUMENT, "rename: %d entries without both lists", o->nrename);
  Tshard__ImportSafetensorsRequest q = TSHARD__IMPORT_SAFETENSORS_REQUEST__INIT;
  Tshard__DistAttr def = TSHARD__DIST_ATTR__INIT;
  size_t nt = (size_t)o->nattrs, nr = (size_t)o->nrename;
  Tshard__AttrRule *ts = calloc(nt ? nt : 1, sizeof *ts);
  Tshard__AttrRule **tp = calloc(nt ? nt : 1, sizeof *tp);
  Tshard__DistAttr *as = calloc(nt ? nt : 1, sizeof *as);
  Tshard__StringPair *rs = calloc(nr ? nr : 1, sizeof *rs);
  Tshard__StringPair **rp = calloc(nr ? nr : 1, sizeof *rp);
  if (!ts || !tp || !as || !rs || !rp) {
    free(ts), free(tp), free(as), free(rs), free(rp);
    return tsc_fail(c, TS_NO_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < nt; i++) {
    tshard__attr_rule__init(&ts[i]);
    tshard__dist_attr__init(&as[i]);
    ts[i].name = (char *)o->attr_names[i];
    as[i].text = tsc_str(o->attrs ? o->attrs[i] : NULL);
    ts[i].attr = &as[i];
    tp[i] = &ts[i];
  }
  for (size_t i = 0; i < nr; i++) {
    tshard__string_pair__init(&rs[i]);
    rs[i].key = (char *)o->rename_from[i];
    rs[i].value = (char *)o->rename_to[i];
    rp[i] = &rs[i];
  }
  q.path = full;
  q.n_tensors = nt, q.tensors = tp;
  q.n_names = (size_t)o->nnames, q.names = (char **)o->names;
  q.n_rename = nr, q.rename = rp;
  q.strip_prefix = tsc_str(o->strip_prefix);
  if (o->default_attr && o->default_attr[0]) {
    def.text = (char *)o->default_attr;
    q.default_attr = &def;
  }
  Tshard__Request req = TSHARD__REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_IMPORT_SAFETENSORS;
  req.import_safetensors = &q;
  req.idempotency_key = tsc_str(o->key);
  rc = call_result(c, &req, true, created);
  free(ts), free(tp), free(as), free(rs), free(rp);
  return rc;
}

int tshard_export_safetensors(tshard_client *c, const char *path, const char *const *names, int n,
                              const tshard_st_export_opts *o, char **files) {
  if (!c)
    return TS_INVALID_ARGUMENT;
  if (files)
    *files = NULL;
  tshard_st_export_opts none;
  memset(&none, 0, sizeof none);
  o = o ? o : &none;
  char full[4096];
  int rc = abs_path(c, path, full, sizeof full);
  if (rc || (rc = names_ok(c, names, n)) ||
      (rc = tsc_check_selection(c, "safetensors export", n, o->prefix, o->all)))
    return rc;
  if (o->nmeta < 0 || (o->nmeta > 0 && (!o->meta_keys || !o->meta_values)))
    return tsc_fail(c, TS_INVALID_ARGUMENT, "metadata: %d entries without both lists", o->nmeta);
  size_t nm = (size_t)o->nmeta;
  Tshard__StringPair *ms = calloc(nm ? nm : 1, sizeof *ms);
  Tshard__StringPair **mp = calloc(nm ? nm : 1, sizeof *mp);
  if (!ms || !mp) {
    free(ms), free(mp);
    return tsc_fail(c, TS_NO_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < nm; i++) {
    tshard__string_pair__init(&ms[i]);
    ms[i].key = (char *)o->meta_keys[i];
    ms[i].value = (char *)o->meta_values[i];
    mp[i] = &ms[i];
  }
  Tshard__ExportSafetensorsRequest q = TSHARD__EXPORT_SAFETENSORS_REQUEST__INIT;
  q.path = full;
  q.n_names = (size_t)n, q.names = (char **)names;
  q.all = o->all;
  q.prefix = tsc_str(o->prefix);
  q.max_shard_bytes = o->max_shard_bytes;
  q.n_metadata = nm, q.metadata = mp;
  Tshard__Request req = TSHARD__REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_EXPORT_SAFETENSORS;
  req.export_safetensors = &q;
  req.idempotency_key = tsc_str(o->key);
  rc = call_result(c, &req, false, files);
  free(ms), free(mp);
  return rc;
}
