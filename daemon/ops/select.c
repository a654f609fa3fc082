/* select.c - the tensors a save or a safetensors export writes, from its request: every
 * stored tensor (all), those whose name starts with a prefix, or the names given, where a name
 * that is no stored tensor's and holds a glob character (* ? [) is an fnmatch pattern standing
 * for the stored tensors it matches. A pattern or a prefix that matches nothing is refused
 * naming it; an exact name that is not stored is left to the save, which refuses it. Exact
 * names alone keep their order; with a pattern or a prefix the list is in name order, each
 * tensor once. Runs in order on every rank over the same store: the same list everywhere. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool is_pattern(ts_store *s, const char *q) {
  return strpbrk(q, "*?[") && !ts_store_find(s, q);
}

/* Appends the stored tensors that pattern (a glob, or a prefix when is_prefix) matches: how
 * many. */
static int add_matches(ts_store *s, const char *pattern, bool is_prefix, const char **v, int *n) {
  int count = ts_store_count(s), matched = 0;
  size_t k = strlen(pattern);
  for (int i = 0; i < count; i++) {
    const char *name = ts_store_at(s, i)->name;
    if (is_prefix ? strncmp(name, pattern, k) == 0 : fnmatch(pattern, name, 0) == 0) {
      v[(*n)++] = name;
      matched++;
    }
  }
  return matched;
}

int tsd_select_tensors(ts_store *s, const char *what, char **names, size_t n_names,
                       const char *prefix, bool all, const char ***out, int *nout, ts_error *err) {
  *out = NULL;
  *nout = 0;
  if (all) /* NULL, 0: every tensor */
    return TS_OK;
  bool has_prefix = prefix && prefix[0];
  size_t npat = has_prefix;
  for (size_t i = 0; i < n_names; i++)
    npat += is_pattern(s, names[i]);
  bool patterns = npat > 0;
  int count = ts_store_count(s);
  size_t cap = n_names + (size_t)count * npat;
  const char **v = malloc(sizeof *v * (cap ? cap : 1));
  if (!v)
    return ts_error_set(err, TS_NO_MEMORY, "%s: no memory", what);
  int n = 0, rc = TS_OK;
  if (has_prefix && add_matches(s, prefix, true, v, &n) == 0)
    rc = ts_error_set(err, TS_NOT_FOUND,
                      "%s: no tensor name starts with '%s' (%d tensors "
                      "stored; tshard list shows them)",
                      what, prefix, count);
  for (size_t i = 0; !rc && i < n_names; i++) {
    if (!is_pattern(s, names[i]))
      v[n++] = names[i];
    else if (add_matches(s, names[i], false, v, &n) == 0)
      rc = ts_error_set(err, TS_NOT_FOUND,
                        "%s: the pattern '%s' matches no tensor (%d tensors "
                        "stored; tshard list shows them)",
                        what, names[i], count);
  }
  if (rc) {
    free(v);
    return rc;
  }
  if (patterns) { /* name order, each once */
    qsort(v, (size_t)n, sizeof *v, cmp_name);
    int k = 0;
    for (int i = 0; i < n; i++)
      if (k == 0 || strcmp(v[k - 1], v[i]) != 0)
        v[k++] = v[i];
    n = k;
  }
  *out = v;
  *nout = n;
  return TS_OK;
}
