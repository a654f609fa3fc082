/* arena.c - the shared arena: one memory file (memfd) per process, mapped whole, that the pool's
 * mapped buffers are carved from once the process shares them (ts_pool_share).
 *
 * The other processes of the node map the same file (opened through /proc/PID/fd, which the
 * kernel allows to whoever may read this process's memory) and copy out of a buffer with plain
 * loads, in user space, while this process is busy with its own copies: one copy per byte and
 * both sides of an exchange at work, where process_vm_readv copies in the kernel and MPI packs
 * and unpacks. The file is sized once (address space only: MAP_NORESERVE, and pages exist only
 * where buffers are), so it never shrinks under a reader; a freed extent's pages are removed
 * (MADV_REMOVE, which also drops them from every reader's mapping) before the extent is reused.
 *
 * Extents are placed first-fit in a sorted list of free ranges, merged with their neighbours
 * when given back. The mapping is not inherited by fork() (MADV_DONTFORK) and the descriptor is
 * closed on exec. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena.h"

typedef struct range {
  uint64_t off, len;
} range;

static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER;
static int arena_fd = -1;
static uint8_t *arena_base;
static uint64_t arena_size;
static range *free_list; /* sorted by offset, never touching each other */
static int nfree, capfree;

static int set_error(ts_error *err, const char *what, int e) {
  return ts_error_set(err, TS_NO_MEMORY, "the shared arena: %s: %s", what, strerror(e));
}

int ts_pool_share(uint64_t size, ts_pool_shared *out, ts_error *err) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), align = TS_BUFFER_HUGE_BYTES;
  if (size < 2 * align || size > ((uint64_t)1 << 46))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "a shared arena of %llu bytes (valid: %zu to "
                        "2^46)",
                        (unsigned long long)size, 2 * align);
  size = size / align * align;
  pthread_mutex_lock(&amu);
  int rc = TS_OK;
  if (arena_fd < 0) {
    int fd = memfd_create("tshard-buffers", MFD_CLOEXEC);
    uint8_t *hole = MAP_FAILED, *m = MAP_FAILED;
    if (fd < 0)
      rc = set_error(err, "memfd_create", errno);
    else if (ftruncate(fd, (off_t)size) != 0)
      rc = set_error(err, "sizing the file", errno);
    /* 2 MiB-aligned: reserve the size plus the alignment, then map the file over the aligned
     * start */
    else if ((hole = mmap(NULL, size + align, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)) == MAP_FAILED)
      rc = set_error(err, "reserving its addresses", errno);
    else if ((m = mmap((void *)(((uintptr_t)hole + align - 1) / align * align), size,
                       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0)) ==
             MAP_FAILED)
      rc = set_error(err, "mapping it", errno);
    if (hole != MAP_FAILED) {
      if (m > hole)
        munmap(hole, (size_t)(m - hole));
      uint8_t *end = m == MAP_FAILED ? hole : m + size;
      if (hole + size + align > end)
        munmap(end, (size_t)(hole + size + align - end));
    }
    if (rc == TS_OK) {
      madvise(m, size, MADV_DONTFORK);
      madvise(m, size, MADV_HUGEPAGE); /* where shared memory may have huge pages */
      free_list = malloc(16 * sizeof *free_list);
      if (!free_list)
        rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the shared arena's free list");
    }
    if (rc == TS_OK) {
      capfree = 16;
      nfree = 1;
      /* the first page stays out of the free list: a word the readers check at mapping */
      free_list[0] = (range){page, size - page};
      arena_base = m;
      arena_size = size;
      __atomic_store_n(&arena_fd, fd, __ATOMIC_RELEASE);
    } else {
      if (m != MAP_FAILED)
        munmap(m, size);
      if (fd >= 0)
        close(fd);
    }
  }
  if (rc == TS_OK) {
    out->fd = arena_fd;
    out->base = (uint64_t)(uintptr_t)arena_base;
    out->size = arena_size;
  }
  pthread_mutex_unlock(&amu);
  return rc;
}

bool ts__arena_active(void) { return __atomic_load_n(&arena_fd, __ATOMIC_ACQUIRE) >= 0; }

/* Keeps the free list's order after range i changed (len 0: removed). */
static void drop_if_empty(int i) {
  if (free_list[i].len == 0) {
    memmove(&free_list[i], &free_list[i + 1], (size_t)(nfree - i - 1) * sizeof *free_list);
    nfree--;
  }
}

static bool grow_list(void) {
  if (nfree < capfree)
    return true;
  range *n = realloc(free_list, 2 * (size_t)capfree * sizeof *n);
  if (!n)
    return false;
  free_list = n;
  capfree *= 2;
  return true;
}

void *ts__arena_take(size_t len, size_t lead, size_t align) {
  void *out = NULL;
  pthread_mutex_lock(&amu);
  for (int i = 0; arena_base && i < nfree && !out; i++) {
    range r = free_list[i];
    uint64_t at = ((r.off + lead + align - 1) / align * align) - lead;
    if (at + len > r.off + r.len)
      continue;
    uint64_t before = at - r.off, after = r.off + r.len - (at + len);
    if (before > 0 && after > 0) { /* the range splits in two */
      if (!grow_list())
        break;
      memmove(&free_list[i + 2], &free_list[i + 1], (size_t)(nfree - i - 1) * sizeof *free_list);
      nfree++;
      free_list[i] = (range){r.off, before};
      free_list[i + 1] = (range){at + len, after};
    } else {
      free_list[i] = before > 0 ? (range){r.off, before} : (range){at + len, after};
      drop_if_empty(i);
    }
    out = arena_base + at;
  }
  pthread_mutex_unlock(&amu);
  return out;
}

void ts__arena_give(void *p, size_t len) {
  madvise(p, len, MADV_REMOVE); /* the pages go, here and in every reader's mapping */
  uint64_t off = (uint64_t)((uint8_t *)p - arena_base);
  pthread_mutex_lock(&amu);
  int i = 0;
  while (i < nfree && free_list[i].off < off)
    i++;
  bool left = i > 0 && free_list[i - 1].off + free_list[i - 1].len == off;
  bool right = i < nfree && off + len == free_list[i].off;
  if (left && right) {
    free_list[i - 1].len += len + free_list[i].len;
    free_list[i].len = 0;
    drop_if_empty(i);
  } else if (left) {
    free_list[i - 1].len += len;
  } else if (right) {
    free_list[i].off = off;
    free_list[i].len += len;
  } else if (grow_list()) {
    memmove(&free_list[i + 1], &free_list[i], (size_t)(nfree - i) * sizeof *free_list);
    free_list[i] = (range){off, len};
    nfree++;
  } /* else the extent stays out of use (no memory for the list): its pages are gone already */
  pthread_mutex_unlock(&amu);
}

uint64_t ts__arena_free_bytes(void) {
  uint64_t n = 0;
  pthread_mutex_lock(&amu);
  for (int i = 0; i < nfree; i++)
    n += free_list[i].len;
  pthread_mutex_unlock(&amu);
  return n;
}
