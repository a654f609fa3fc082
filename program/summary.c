/* summary.c - the short report of a compiled program (tsp_program_summary): what a compile
 * prints by default, in a few lines (interface, kernels, dim groups, buckets built and how the
 * rest get built, the cache), where tsp_program_show gives the full report with every bucket. */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

int tsp_program_summary(tsp_program *p, char **text, ts_error *err) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  pthread_mutex_lock(&p->lock);
  fprintf(f, "program %s: %d inputs, %d outputs, %d in-place assigns\n", p->name, p->n_inputs,
          p->n_outputs, p->n_assigns);
  int ops = 0, ew = 0;
  for (int k = 0; k < p->n_kernels; k++) {
    ew += p->kernels[k].cat == TSP_CAT_ELEMENTWISE;
    ops += p->kernels[k].n_members;
  }
  fprintf(f, "kernels: %d (%d elementwise loop nest%s, %d ops in all)\n", p->n_kernels, ew,
          ew == 1 ? "" : "s", ops);
  for (int g = 0; g < p->n_groups; g++) {
    const tsp_group *gr = &p->groups[g];
    fprintf(f, "%s %s in [%lld, %lld], %s:", g ? "          " : "dim groups:", gr->name,
            (long long)gr->min, (long long)gr->max, gr->rule);
    for (int v = 0; v < gr->n_values; v++)
      fprintf(f, " %lld", (long long)gr->values[v]);
    fprintf(f, "\n");
  }
  int built = 0, hits = 0, unusable = 0;
  for (int b = 0; b < p->n_buckets; b++) {
    ts_error why;
    built += p->buckets[b].built;
    hits += p->buckets[b].built && p->buckets[b].from_cache;
    unusable += !p->buckets[b].built && tsp_bucket_check(p, &p->buckets[b], &why) != TS_OK;
  }
  fprintf(f, "buckets: %d, %d built (%d from the cache)", p->n_buckets, built, hits);
  if (unusable)
    fprintf(f, ", %d not usable", unusable);
  if (built + unusable < p->n_buckets)
    fprintf(f, "; the others are built on their first run (to build all now: `tshard program "
               "compile FILE --buckets ahead`, Python lazy=False)");
  fprintf(f, "\ncache: %s\n", p->cache_dir);
  pthread_mutex_unlock(&p->lock);
  fclose(f);
  if (!buf)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  *text = buf;
  return TS_OK;
}
