/* plans.c - plans kept for repeated reshards. A training step reshards the same tensors between
 * the same attributes again and again; the same shape, dtype, source and target attributes and
 * planner options give the same plan, and plans are immutable once made, so each is made once and
 * shared (ts_plan_ref). The key is the arguments' canonical text (attributes through
 * ts_attr_format), found through its XXH3 hash; a full table gives up its least recently used
 * plan. Arguments whose text would not fit a key are planned afresh every time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ts_shard.h"

#define KEY_MAX 2048

typedef struct slot {
  uint64_t hash, used;
  char *key;
  ts_plan *plan;
} slot;

struct ts_plan_cache {
  pthread_mutex_t lock;
  int cap, n;
  uint64_t clock, hits, misses;
  slot *slots;
  ts_topology *topo; /* where the ranks live: every plan made is planned on it */
};

int ts_plan_cache_create(int capacity, ts_plan_cache **out, ts_error *err) {
  if (!out || capacity < 1)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "plan cache of %d plans; at least 1", capacity);
  ts_plan_cache *c = calloc(1, sizeof *c);
  slot *slots = calloc((size_t)capacity, sizeof *slots);
  if (!c || !slots) {
    free(c);
    free(slots);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a plan cache");
  }
  pthread_mutex_init(&c->lock, NULL);
  c->cap = capacity;
  c->slots = slots;
  *out = c;
  return TS_OK;
}

void ts_plan_cache_destroy(ts_plan_cache **p) {
  if (!p || !*p)
    return;
  ts_plan_cache *c = *p;
  for (int i = 0; i < c->n; i++) {
    free(c->slots[i].key);
    ts_plan_destroy(&c->slots[i].plan);
  }
  free(c->slots);
  ts_topology_destroy(&c->topo);
  pthread_mutex_destroy(&c->lock);
  free(c);
  *p = NULL;
}

void ts_plan_cache_set_topology(ts_plan_cache *c, ts_topology *topo) {
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < c->n; i++) { /* plans made for another placement of the ranks */
    free(c->slots[i].key);
    ts_plan_destroy(&c->slots[i].plan);
  }
  c->n = 0;
  ts_topology_destroy(&c->topo);
  c->topo = ts_topology_ref(topo);
  pthread_mutex_unlock(&c->lock);
}

const ts_topology *ts_plan_cache_topology(const ts_plan_cache *c) { return c ? c->topo : NULL; }

/* The arguments' canonical text in key (KEY_MAX bytes); false when it does not fit. */
static bool make_key(char *key, int ndim, const int64_t *shape, ts_dtype dt, const ts_attr *src,
                     const ts_attr *tgt, const ts_plan_opts *o) {
  int k = snprintf(key, KEY_MAX, "%d %d %d %lld %d [", ndim, (int)dt, (int)o->strategy,
                   (long long)o->staging_bytes, o->world_size);
  for (int d = 0; d < ndim && k < KEY_MAX; d++)
    k += snprintf(key + k, (size_t)(KEY_MAX - k), "%lld,", (long long)shape[d]);
  if (k >= KEY_MAX - 2)
    return false;
  key[k++] = ']';
  size_t n = ts_attr_format(src, key + k, (size_t)(KEY_MAX - k));
  if (n + 2 >= (size_t)(KEY_MAX - k))
    return false;
  k += (int)n;
  key[k++] = '|';
  n = ts_attr_format(tgt, key + k, (size_t)(KEY_MAX - k));
  return n < (size_t)(KEY_MAX - k);
}

/* Keeps plan under key, in a free slot or the least recently used one's. */
static void keep(ts_plan_cache *c, uint64_t hash, const char *key, ts_plan *plan) {
  char *copy = strdup(key);
  if (!copy)
    return;
  int at = 0;
  if (c->n < c->cap)
    at = c->n++;
  else
    for (int i = 1; i < c->n; i++)
      if (c->slots[i].used < c->slots[at].used)
        at = i;
  free(c->slots[at].key);
  ts_plan_destroy(&c->slots[at].plan);
  c->slots[at] = (slot){hash, ++c->clock, copy, ts_plan_ref(plan)};
}

int ts_plan_cache_get(ts_plan_cache *c, int ndim, const int64_t *shape, ts_dtype dt,
                      const ts_attr *src, const ts_attr *tgt, const ts_plan_opts *opts,
                      ts_plan **out, ts_error *err) {
  char key[KEY_MAX];
  ts_plan_opts o = opts ? *opts : (ts_plan_opts){TS_STRATEGY_AUTO, 0, 0};
  if (!c || !out || !src || !tgt || (ndim > 0 && !shape) || ndim < 0 || ndim > TS_MAX_DIMS ||
      !make_key(key, ndim, shape, dt, src, tgt, &o))
    return ts_plan_create_on(ndim, shape, dt, src, tgt, opts, c ? c->topo : NULL, out, err);
  uint64_t hash = XXH3_64bits(key, strlen(key));
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < c->n; i++)
    if (c->slots[i].hash == hash && strcmp(c->slots[i].key, key) == 0) {
      c->slots[i].used = ++c->clock;
      c->hits++;
      *out = ts_plan_ref(c->slots[i].plan);
      pthread_mutex_unlock(&c->lock);
      return TS_OK;
    }
  c->misses++;
  pthread_mutex_unlock(&c->lock);
  int rc = ts_plan_create_on(ndim, shape, dt, src, tgt, opts, c->topo, out, err);
  if (rc == TS_OK) { /* failures are not kept: their messages are made afresh */
    pthread_mutex_lock(&c->lock);
    keep(c, hash, key, *out);
    pthread_mutex_unlock(&c->lock);
  }
  return rc;
}

void ts_plan_cache_counts(ts_plan_cache *c, uint64_t *hits, uint64_t *misses) {
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  if (hits)
    *hits = c->hits;
  if (misses)
    *misses = c->misses;
  pthread_mutex_unlock(&c->lock);
}
