/* pool.c - the one buffer pool of the process: every large buffer of the kernels (einsum
 * workspaces and caches), the shard library (stored slices, executor staging) and the daemon
 * (put staging, get copies) comes from here, and all of it is counted in one account.
 *
 * Buffers below TS_POOL_MAP_MIN come from the C heap (64-byte aligned; malloc reuses them).
 * Larger ones are mappings of their own, sized by class (four classes per power of two, so at
 * most a quarter is slack), 2 MiB-aligned from TS_BUFFER_HUGE_BYTES on, and pre-faulted when
 * mapped (MADV_POPULATE_WRITE: the kernel fills the page tables in one pass, far faster than a
 * fault per page on first touch). A freed mapping is kept in the cache for the next request of
 * its class, up to the cache cap; cached buffers go back to the OS (munmap) when they have been
 * idle for the idle period (at ts_pool_trim, called by whoever is idle, and at any free), when
 * the cache is over its cap, or when the memory limit needs their room. Once the process shares
 * its buffers (ts_pool_share), the mapped ones come from extents of the shared arena (arena.c)
 * instead of private mappings, except those asking for huge pages.
 *
 * The account: in_use (buffers handed out: mappings at their real size, heap blocks at the bytes
 * asked for), of which staging
 * (buffers tagged TS_POOL_STAGING), cached, and the peak of in_use + cached. With a limit, an
 * allocation that would take in_use over it fails with TS_LIMIT (cached buffers are released
 * first to make room, so in_use + cached stays within the limit too). One mutex guards the
 * account and the cache; mapping and unmapping happen outside it.
 *
 * Each buffer is preceded by a 64-byte header saying how it was obtained, so a free takes the
 * pointer alone. A mapped buffer's header lives in the page just below it, which stays mapped
 * with it; the rest of the alignment slack is unmapped. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
/* glibc's malloc_trim gives freed heap memory back. Not under AddressSanitizer: its allocator
 * replaces glibc's, whose arenas then stay uninitialized, and concurrent malloc_trim calls race
 * on initializing them (a crash seen in test_pool's threads). */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define TS_POOL_MALLOC_TRIM 1
#include <malloc.h>
#endif

#include "arena.h"
#include "ts_pool.h"

#define HEADER_BYTES 64                           /* keeps the heap path 64-byte aligned */
#define MAGIC_HEAP UINT64_C(0x7473706f6f6c6870)   /* "tspoolhp" */
#define MAGIC_MAPPED UINT64_C(0x7473706f6f6c6d70) /* "tspoolmp" */
#define MAGIC_CACHED UINT64_C(0x7473706f6f6c6361) /* "tspoolca": in the cache, not handed out */

typedef struct header {
  uint64_t magic;
  void *base;          /* what to give back: the heap block, or the start of the mapping */
  size_t map_len;      /* bytes of the mapping (0 for the heap) */
  size_t cap;          /* bytes counted for this buffer */
  struct header *next; /* in the cache */
  int64_t freed_ms;    /* when it entered the cache */
  uint8_t staging, huge, shared; /* shared: an extent of the arena (arena.c) */
} header;

_Static_assert(sizeof(header) <= HEADER_BYTES, "the header must fit its slot");

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static ts_pool_config cfg = {0, TS_POOL_DEFAULT_CACHE, TS_POOL_DEFAULT_IDLE_MS, false};
static ts_pool_stats st;
static header *cache_head; /* newest first */
static int64_t last_free_ms;
static bool heap_dirty; /* buffers freed since the last trim of the C heap */

static header *header_of(void *p) { return (header *)((char *)p - HEADER_BYTES); }
static void *payload(header *h) { return (char *)h + HEADER_BYTES; }

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Bytes counted for a request: the bytes asked for a heap block (the heap's own overhead is
 * not ours to see), or the mapping rounded to whole pages (the least any mapping of `bytes`
 * takes; *cls gets the size class, the usual size). */
static size_t charge_of(size_t bytes, size_t *cls) {
  if (bytes < TS_POOL_MAP_MIN) {
    if (cls)
      *cls = bytes;
    return bytes;
  }
  size_t page = page_size();
  size_t min = (bytes + page - 1) / page * page;
  if (cls) {
    int top = 63 - __builtin_clzll((unsigned long long)bytes);
    size_t step = ((size_t)1 << top) / 4;
    *cls = (bytes + step - 1) / step * step;
    if (*cls < min)
      *cls = min;
  }
  return min;
}

static void update_peak(void) {
  if (st.in_use + st.cached > st.peak)
    st.peak = st.in_use + st.cached;
}

/* Unlinks cached buffers, oldest first, until the cache holds at most `keep` bytes; returns
 * them as a list to unmap outside the lock. */
static header *evict_to(uint64_t keep) {
  header *victims = NULL;
  while (st.cached > keep && cache_head) {
    header **pp = &cache_head;
    while ((*pp)->next)
      pp = &(*pp)->next;
    header *h = *pp;
    *pp = NULL;
    st.cached -= h->cap;
    st.buffers_cached--;
    st.released += h->cap;
    h->next = victims;
    victims = h;
  }
  return victims;
}

/* Gives a mapped buffer's memory back: its arena extent, or its private mapping. */
static void release_mapping(header *h) {
  if (h->shared)
    ts__arena_give(h->base, h->map_len);
  else
    munmap(h->base, h->map_len);
}

static void unmap_all(header *h) {
  while (h) {
    header *next = h->next;
    release_mapping(h);
    h = next;
  }
}

/* Room for `cap` more bytes in use under the limit: cached buffers to give up for it. */
static header *make_room(size_t cap) {
  if (cfg.limit <= 0)
    return NULL;
  uint64_t limit = (uint64_t)cfg.limit;
  uint64_t need = st.in_use + cap;
  return evict_to(need >= limit ? 0 : limit - need);
}

static int limit_error(size_t bytes, const char *what, ts_error *err) {
  int64_t free_bytes = cfg.limit - (int64_t)st.in_use;
  return ts_error_set(err, TS_LIMIT,
                      "%s needs %llu bytes; %lld of the memory limit of %lld bytes are free",
                      what ? what : "a buffer", (unsigned long long)bytes,
                      (long long)(free_bytes > 0 ? free_bytes : 0), (long long)cfg.limit);
}

static bool over_limit(size_t cap) {
  return cfg.limit > 0 && (cap > (uint64_t)cfg.limit || st.in_use + cap > (uint64_t)cfg.limit);
}

/* The pages of a new mapped buffer: an extent of the shared arena when the process shares its
 * buffers and the buffer may be shared, else a private mapping. Returns the start (a page for
 * the header, then the buffer at p) with *p, *len and *shared set. */
static char *map_pages(size_t cap, size_t align, bool may_share, char **p, size_t *len,
                       bool *shared) {
  size_t page = page_size();
  *len = cap + page;
  *shared = false;
  if (may_share && ts__arena_active()) {
    char *keep = ts__arena_take(*len, page, align);
    if (keep) {
      *shared = true;
      *p = keep + page;
      return keep;
    }
  }
  /* room to align, and a page for the header */
  size_t map_len = cap + page + (align > page ? align : 0);
  char *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  *p = (char *)(((uintptr_t)m + page + align - 1) / align * align);
  char *keep = *p - page, *end = m + map_len;
  if (keep > m)
    munmap(m, (size_t)(keep - m));
  if (end > *p + cap)
    munmap(*p + cap, (size_t)(end - (*p + cap)));
  return keep;
}

/* huge: the kind of buffer asked for (a private mapping gets the advice; the arena has its
 * own); may_share: it may come from the shared arena (not the kernels' own TS_POOL_HUGE ones). */
static void *map_buffer(size_t cap, bool huge, bool may_share) {
  size_t page = page_size(), align = cap >= TS_BUFFER_HUGE_BYTES ? TS_BUFFER_HUGE_BYTES : page;
  if (page < HEADER_BYTES || cap > SIZE_MAX - 3 * TS_BUFFER_HUGE_BYTES)
    return NULL;
  char *p, *keep;
  size_t len;
  bool shared;
  if ((keep = map_pages(cap, align, may_share, &p, &len, &shared)) == NULL)
    return NULL;
#if defined(MADV_HUGEPAGE)
  if (huge && !shared && cap >= TS_BUFFER_HUGE_BYTES)
    madvise(p, cap, MADV_HUGEPAGE); /* advice only: without huge pages the buffer still works */
#else
  (void)huge;
#endif
  bool populated = false;
#if defined(MADV_POPULATE_WRITE)
  populated = madvise(p, cap, MADV_POPULATE_WRITE) == 0;
#endif
  if (!populated) /* an older kernel: touch each page once, still ahead of the real use */
    for (size_t i = 0; i < cap; i += page)
      ((volatile char *)p)[i] = 0;
  header *h = header_of(p);
  memset(h, 0, sizeof *h);
  h->magic = MAGIC_MAPPED;
  h->base = keep;
  h->map_len = len;
  h->cap = cap;
  h->huge = huge;
  h->shared = shared;
  return p;
}

static void *heap_buffer(size_t bytes) {
  size_t total = (bytes + 2 * HEADER_BYTES - 1) / HEADER_BYTES * HEADER_BYTES;
  char *base = aligned_alloc(HEADER_BYTES, total);
  if (!base)
    return NULL;
  header *h = (header *)base;
  memset(h, 0, sizeof *h);
  h->magic = MAGIC_HEAP;
  h->base = base;
  h->cap = bytes;
  return payload(h);
}

/* The cached buffer that best fits a request: of its class (at least `bytes`, at most `cls`)
 * and of the same page kind; the smallest such. */
static header *cache_take(size_t bytes, size_t cls, bool huge, bool may_share) {
  header **best = NULL;
  for (header **pp = &cache_head; *pp; pp = &(*pp)->next) {
    header *h = *pp;
    bool fits =
        h->cap >= bytes && h->cap <= cls && (bool)h->huge == huge && (may_share || !h->shared);
    if (fits && (!best || h->cap < (*best)->cap))
      best = pp;
  }
  if (!best)
    return NULL;
  header *h = *best;
  *best = h->next;
  h->next = NULL;
  h->magic = MAGIC_MAPPED;
  st.cached -= h->cap;
  st.buffers_cached--;
  return h;
}

void *ts_pool_alloc(size_t bytes, unsigned flags, const char *what, ts_error *err) {
  if (bytes > SIZE_MAX / 2) {
    ts_error_set(err, TS_NO_MEMORY, "%s of %zu bytes is larger than any memory",
                 what ? what : "a buffer", bytes);
    return NULL;
  }
  bool staging = flags & TS_POOL_STAGING;
  size_t cls, min = charge_of(bytes, &cls);
  pthread_mutex_lock(&mu);
  bool huge = bytes >= TS_POOL_MAP_MIN && (cfg.huge || (flags & TS_POOL_HUGE));
  bool may_share = !(flags & TS_POOL_HUGE); /* the kernels' workspaces stay private */
  header *h = bytes >= TS_POOL_MAP_MIN ? cache_take(bytes, cls, huge, may_share) : NULL;
  header *victims = NULL;
  if (h && over_limit(h->cap)) { /* the cached one is larger than the room left: give it up */
    st.released += h->cap;
    h->next = NULL;
    victims = h;
    h = NULL;
  }
  if (h) {
    st.hits++;
    st.in_use += h->cap;
    if (staging)
      st.staging += h->cap;
    h->staging = staging;
    pthread_mutex_unlock(&mu);
    return payload(h);
  }
  if (over_limit(min)) {
    limit_error(bytes, what, err);
    pthread_mutex_unlock(&mu);
    unmap_all(victims);
    return NULL;
  }
  size_t cap = over_limit(cls) ? min : cls; /* near the limit, no class slack */
  header *more = make_room(cap);
  if (more) {
    header *t = more;
    while (t->next)
      t = t->next;
    t->next = victims;
    victims = more;
  }
  st.in_use += cap; /* reserved before mapping, so that concurrent allocations see it */
  if (staging)
    st.staging += cap;
  if (bytes >= TS_POOL_MAP_MIN)
    st.misses++;
  update_peak();
  pthread_mutex_unlock(&mu);
  unmap_all(victims);
  void *p = bytes >= TS_POOL_MAP_MIN ? map_buffer(cap, huge, may_share) : heap_buffer(cap);
  if (p) {
    header_of(p)->staging = staging;
    return p;
  }
  pthread_mutex_lock(&mu);
  st.in_use -= cap;
  if (staging)
    st.staging -= cap;
  pthread_mutex_unlock(&mu);
  ts_error_set(err, TS_NO_MEMORY, "no memory for %s of %zu bytes", what ? what : "a buffer", bytes);
  return NULL;
}

/* Unlinks the cached buffers idle for the period (all of them with all = true), for unmapping
 * outside the lock. */
static header *expire(int64_t now, bool all) {
  header *victims = NULL;
  for (header **pp = &cache_head; *pp;) {
    header *h = *pp;
    if (all || now - h->freed_ms >= cfg.idle_ms) {
      *pp = h->next;
      st.cached -= h->cap;
      st.buffers_cached--;
      st.released += h->cap;
      h->next = victims;
      victims = h;
    } else {
      pp = &h->next;
    }
  }
  return victims;
}

void ts_pool_free(void *p) {
  if (!p)
    return;
  header *h = header_of(p);
  if (h->magic != MAGIC_MAPPED && h->magic != MAGIC_HEAP)
    abort(); /* not from the pool, or freed twice: refuse to guess */
  bool mapped = h->magic == MAGIC_MAPPED;
  header *victims = NULL;
  pthread_mutex_lock(&mu);
  st.in_use -= h->cap;
  if (h->staging)
    st.staging -= h->cap;
  h->staging = 0;
  last_free_ms = now_ms();
  heap_dirty = true; /* transfers free heap memory around pool buffers too (frames, chunks) */
  victims = expire(last_free_ms, false); /* a process that never calls ts_pool_trim still
                                            releases what it has not reused for the period */
  if (mapped && cfg.cache_cap > 0 && h->cap <= (uint64_t)cfg.cache_cap) {
    h->freed_ms = last_free_ms;
    h->magic = MAGIC_CACHED;
    h->next = cache_head;
    cache_head = h;
    st.cached += h->cap;
    st.buffers_cached++;
    header *over = evict_to((uint64_t)cfg.cache_cap);
    while (over) {
      header *next = over->next;
      over->next = victims;
      victims = over;
      over = next;
    }
    h = NULL;
  } else if (mapped) {
    st.released += h->cap;
  }
  pthread_mutex_unlock(&mu);
  unmap_all(victims);
  if (!mapped) {
    h->magic = 0; /* a second free of the same buffer then aborts instead of corrupting */
    free(h->base);
  } else if (h) {
    h->magic = 0;
    release_mapping(h);
  }
}

void ts_pool_set_staging(void *p, bool staging) {
  if (!p)
    return;
  header *h = header_of(p);
  pthread_mutex_lock(&mu);
  if (h->staging != staging) {
    if (staging)
      st.staging += h->cap;
    else
      st.staging -= h->cap;
    h->staging = staging;
  }
  pthread_mutex_unlock(&mu);
}

int ts_pool_check(size_t bytes, const char *what, ts_error *err) {
  size_t min = charge_of(bytes, NULL);
  pthread_mutex_lock(&mu);
  if (over_limit(min)) {
    int rc = limit_error(bytes, what, err);
    pthread_mutex_unlock(&mu);
    return rc;
  }
  pthread_mutex_unlock(&mu);
  return TS_OK; /* cached buffers give way when the allocation comes (one may be reused) */
}

static int charge(size_t bytes, bool staging, const char *what, ts_error *err) {
  pthread_mutex_lock(&mu);
  if (over_limit(bytes)) {
    int rc = limit_error(bytes, what, err);
    pthread_mutex_unlock(&mu);
    return rc;
  }
  header *victims = make_room(bytes);
  st.in_use += bytes;
  st.staging += staging ? bytes : 0;
  update_peak();
  pthread_mutex_unlock(&mu);
  unmap_all(victims);
  return TS_OK;
}

static void uncharge(size_t bytes, bool staging) {
  pthread_mutex_lock(&mu);
  st.in_use -= bytes;
  st.staging -= staging ? bytes : 0;
  pthread_mutex_unlock(&mu);
}

int ts_pool_charge(size_t bytes, const char *what, ts_error *err) {
  return charge(bytes, true, what, err);
}
void ts_pool_uncharge(size_t bytes) { uncharge(bytes, true); }
int ts_pool_charge_held(size_t bytes, const char *what, ts_error *err) {
  return charge(bytes, false, what, err);
}
void ts_pool_uncharge_held(size_t bytes) { uncharge(bytes, false); }

int64_t ts_pool_trim_due_ms(void) {
  int64_t now = now_ms(), due = -1;
  pthread_mutex_lock(&mu);
  if (heap_dirty)
    due = last_free_ms + cfg.idle_ms;
  for (header *h = cache_head; h; h = h->next)
    if (due < 0 || h->freed_ms + cfg.idle_ms < due)
      due = h->freed_ms + cfg.idle_ms;
  pthread_mutex_unlock(&mu);
  return due < 0 ? -1 : due > now ? due - now : 0;
}

int ts_pool_trim(bool all) {
  int64_t now = now_ms();
  bool trim_heap = false;
  pthread_mutex_lock(&mu);
  int64_t idle = cfg.idle_ms;
  header *victims = expire(now, all);
  if (heap_dirty && (all || now - last_free_ms >= idle)) {
    heap_dirty = false;
    trim_heap = true;
  }
  pthread_mutex_unlock(&mu);
  int n = 0;
  for (header *h = victims; h; h = h->next)
    n++;
  unmap_all(victims);
#if defined(TS_POOL_MALLOC_TRIM)
  if (trim_heap || n > 0)
    malloc_trim(0); /* freed heap blocks go back to the OS too */
#else
  (void)trim_heap;
#endif
  return n;
}

void ts_pool_configure(const ts_pool_config *c) {
  pthread_mutex_lock(&mu);
  cfg = *c;
  if (cfg.cache_cap < 0)
    cfg.cache_cap = 0;
  st.limit = cfg.limit > 0 ? (uint64_t)cfg.limit : 0;
  st.cache_cap = (uint64_t)cfg.cache_cap;
  header *victims = evict_to(st.cache_cap);
  pthread_mutex_unlock(&mu);
  unmap_all(victims);
}

void ts_pool_get_config(ts_pool_config *c) {
  pthread_mutex_lock(&mu);
  *c = cfg;
  pthread_mutex_unlock(&mu);
}

void ts_pool_get_stats(ts_pool_stats *s) {
  pthread_mutex_lock(&mu);
  *s = st;
  pthread_mutex_unlock(&mu);
}

void ts_pool_reset_peak(void) {
  pthread_mutex_lock(&mu);
  st.peak = st.in_use + st.cached;
  pthread_mutex_unlock(&mu);
}

size_t ts_pool_capacity(const void *p) { return p ? header_of((void *)p)->cap : 0; }

/* The kernels' buffers: pooled, with huge pages for large ones (transposes and permutations of
 * large tensors spend far less time on TLB misses). */
void *ts_buffer_alloc(size_t bytes) { return ts_pool_alloc(bytes, TS_POOL_HUGE, NULL, NULL); }

void ts_buffer_free(void *p) { ts_pool_free(p); }
