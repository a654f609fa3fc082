/* names.c - an index from names to positions in an array its owner keeps (the store's tensors,
 * the daemon's catalog), so that finding a tensor by name costs the same with ten tensors or
 * ten thousand: a batch of N tensors looks up N names, which a linear search made N^2 string
 * comparisons.
 *
 * Open addressing with linear probing over a power-of-two table of positions + 1 (0: empty),
 * at most half full; the owner gives the name at a position through a callback, so the index
 * holds no strings. A removal shifts the entries after it back (no tombstones): a probe sequence
 * never crosses an empty slot it should not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ts_shard.h"

static uint64_t hash_name(const char *s) { return XXH3_64bits(s, strlen(s)); }

/* The slot holding name, or the empty slot where its probe ends. */
static int probe(const ts_name_index *x, const char *name, ts_name_at at, const void *ctx) {
  int mask = x->cap - 1, i = (int)(hash_name(name) & (uint64_t)mask);
  while (x->slot[i] && strcmp(at(ctx, x->slot[i] - 1), name) != 0)
    i = (i + 1) & mask;
  return i;
}

int ts_name_index_find(const ts_name_index *x, const char *name, ts_name_at at, const void *ctx) {
  if (!x || x->cap == 0 || !name)
    return -1;
  int i = probe(x, name, at, ctx);
  return x->slot[i] - 1;
}

/* A new table of cap slots holding positions 0..count-1. */
static int rebuild(ts_name_index *x, int cap, int count, ts_name_at at, const void *ctx) {
  int *slot = calloc((size_t)cap, sizeof *slot);
  if (!slot)
    return TS_NO_MEMORY;
  free(x->slot);
  x->slot = slot;
  x->cap = cap;
  for (int pos = 0; pos < count; pos++)
    x->slot[probe(x, at(ctx, pos), at, ctx)] = pos + 1;
  return TS_OK;
}

int ts_name_index_add(ts_name_index *x, int pos, int count, ts_name_at at, const void *ctx) {
  if (2 * (int64_t)count > x->cap) {
    int cap = x->cap ? x->cap : 16;
    while (2 * (int64_t)count > cap)
      cap *= 2;
    return rebuild(x, cap, count, at, ctx); /* pos is among 0..count-1 */
  }
  x->slot[probe(x, at(ctx, pos), at, ctx)] = pos + 1;
  return TS_OK;
}

void ts_name_index_remove(ts_name_index *x, const char *name, ts_name_at at, const void *ctx) {
  if (!x || x->cap == 0)
    return;
  int mask = x->cap - 1, hole = probe(x, name, at, ctx);
  if (!x->slot[hole])
    return;
  x->slot[hole] = 0;
  for (int j = (hole + 1) & mask; x->slot[j]; j = (j + 1) & mask) {
    int home = (int)(hash_name(at(ctx, x->slot[j] - 1)) & (uint64_t)mask);
    /* The entry at j stays unless its home lies cyclically outside (hole, j]. */
    bool stays = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      x->slot[hole] = x->slot[j];
      x->slot[j] = 0;
      hole = j;
    }
  }
}

void ts_name_index_moved(ts_name_index *x, const char *name, int to, ts_name_at at,
                         const void *ctx) {
  if (!x || x->cap == 0)
    return;
  int i = probe(x, name, at, ctx);
  if (x->slot[i])
    x->slot[i] = to + 1;
}

void ts_name_index_clear(ts_name_index *x) {
  if (!x)
    return;
  free(x->slot);
  x->slot = NULL;
  x->cap = 0;
}
