/* safetensors_validate.c - the validators of the Hugging Face safetensors operations (import and
 * export), part of the wire layer (libtsdwire, the fuzz target): the path's length and text, the
 * names' rules, the attributes against the world, the metadata's strings; what depends on the
 * files or the store is the handlers' (daemon/ops/safetensors.c, shard/ckpt/safetensors_*.c).
 * They run on the loop thread, so each is linear in the request or a sort: metadata keys given
 * twice are found by sorting pointers to them and comparing neighbours. */
#include <stdlib.h>
#include <string.h>

#include "ts_rules.h"
#include "tsd_wire.h"

static int check_path(const char *path, ts_error *err) {
  size_t n = path ? strlen(path) : 0;
  if (n == 0 || n >= 4000 || path[0] != '/')
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "safetensors path of %zu bytes%s; give an "
                        "absolute path of 1 to 3999 bytes",
                        n, n && path[0] != '/' ? " not absolute" : "");
  return ts_text_check("safetensors path", path, n, "paths", err);
}

static int check_name(const char *what, const char *name, ts_error *err) {
  return ts_name_check(what, name, name ? strlen(name) : 0, err);
}

int tsd_validate_import_safetensors(const Tshard__Request *r, const tsd_limits *lim,
                                    ts_error *err) {
  const Tshard__ImportSafetensorsRequest *q = r->import_safetensors;
  int rc = check_path(q->path, err);
  for (size_t i = 0; !rc && i < q->n_tensors; i++)
    if (!(rc = ts_attr_rule_pattern_check("attribute rule", q->tensors[i]->name,
                                          strlen(q->tensors[i]->name), err)))
      rc = tsd_attr_msg_check(q->tensors[i]->attr, lim, err);
  if (!rc)
    rc = tsd_attr_msg_check(q->default_attr, lim, err);
  for (size_t i = 0; !rc && i < q->n_names; i++)
    rc = check_name("tensor name", q->names[i], err);
  for (size_t i = 0; !rc && i < q->n_rename; i++)
    if (!(rc = ts_text_check("renamed name", q->rename[i]->key, strlen(q->rename[i]->key), "names",
                             err)))
      rc = check_name("tensor name", q->rename[i]->value, err);
  if (!rc && q->strip_prefix && strlen(q->strip_prefix) > 1024)
    rc = ts_error_set(err, TS_INVALID_ARGUMENT, "strip_prefix of %zu bytes; at most 1024",
                      strlen(q->strip_prefix));
  return rc;
}

static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* No metadata key given twice: the keys sorted (pointers to them) and neighbours compared. */
static int keys_once(const Tshard__ExportSafetensorsRequest *q, ts_error *err) {
  if (q->n_metadata < 2)
    return TS_OK;
  const char **k = malloc(sizeof *k * q->n_metadata);
  if (!k)
    return ts_error_set(err, TS_NO_MEMORY, "no memory to check %zu metadata keys", q->n_metadata);
  for (size_t i = 0; i < q->n_metadata; i++)
    k[i] = q->metadata[i]->key;
  qsort(k, q->n_metadata, sizeof *k, cmp_key);
  int rc = TS_OK;
  for (size_t i = 1; i < q->n_metadata && !rc; i++)
    if (strcmp(k[i - 1], k[i]) == 0)
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "metadata key '%.200s' given twice; give each "
                        "key once",
                        k[i]);
  free(k);
  return rc;
}

int tsd_validate_export_safetensors(const Tshard__Request *r, const tsd_limits *lim,
                                    ts_error *err) {
  (void)lim;
  const Tshard__ExportSafetensorsRequest *q = r->export_safetensors;
  int rc = check_path(q->path, err);
  if (!rc)
    rc = tsd_check_selection("safetensors export", q->n_names, q->prefix, q->all, err);
  for (size_t i = 0; !rc && i < q->n_names; i++)
    rc = check_name("tensor name", q->names[i], err);
  for (size_t i = 0; !rc && i < q->n_metadata; i++) {
    const char *k = q->metadata[i]->key, *v = q->metadata[i]->value;
    if (!k[0] || strlen(k) > 4096 || strlen(v) > 65536)
      rc = ts_error_set(err, TS_INVALID_ARGUMENT,
                        "metadata entry %zu: keys of 1 to 4096 bytes "
                        "and values of at most 65536",
                        i);
  }
  return rc ? rc : keys_once(q, err);
}
