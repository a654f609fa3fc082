/* vectors.c - the vector manager: shape and stride vectors used by the generated loops are
 * emitted once each, as named constant arrays at the top of the C file ("static const int64_t
 * str3[2] = {16, 1};"), and every generator refers to them by name. Equal contents share one
 * array; the compiler folds the constant loads. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *tsp_vec(tsp_gen *g, const char *kind, const int64_t *values, int n) {
  for (int i = 0; i < g->n_vecs; i++)
    if (g->vec_len[i] == n && strncmp(g->vec_name[i], kind, strlen(kind)) == 0 &&
        memcmp(g->vec_values[i], values, (size_t)n * sizeof(int64_t)) == 0)
      return g->vec_name[i];
  int i = g->n_vecs;
  if (i == g->cap_vecs) /* sized by emit.c for the largest file; never reached */
    return "vector_overflow";
  memcpy(g->vec_values[i], values, (size_t)n * sizeof(int64_t));
  g->vec_len[i] = n;
  snprintf(g->vec_name[i], sizeof g->vec_name[i], "%s%d", kind, i);
  g->n_vecs++;
  fprintf(g->vecs, "static const int64_t %s[%d] = {", g->vec_name[i], n > 0 ? n : 1);
  for (int d = 0; d < n; d++)
    fprintf(g->vecs, "%s%lld", d ? ", " : "", (long long)values[d]);
  fprintf(g->vecs, "%s};\n", n ? "" : "0");
  return g->vec_name[i];
}

int tsp_vec_init(tsp_gen *g, int cap) {
  g->cap_vecs = cap;
  g->vec_values = calloc((size_t)cap, sizeof *g->vec_values);
  g->vec_len = calloc((size_t)cap, sizeof *g->vec_len);
  g->vec_name = calloc((size_t)cap, sizeof *g->vec_name);
  return g->vec_values && g->vec_len && g->vec_name ? TS_OK : TS_NO_MEMORY;
}

void tsp_vec_free(tsp_gen *g) {
  free(g->vec_values);
  free(g->vec_len);
  free(g->vec_name);
  g->vec_values = NULL;
  g->vec_len = NULL;
  g->vec_name = NULL;
  g->n_vecs = 0;
}
