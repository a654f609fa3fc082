/* buffer.c - the allocator for tensor buffers: ts_buffer_alloc / ts_buffer_free.
 *
 * Large buffers (at least TS_BUFFER_HUGE_BYTES) are mapped on their own, 2 MiB-aligned, and
 * marked for transparent huge pages (madvise MADV_HUGEPAGE, which works in the kernel's "madvise"
 * mode too). A transpose or a permutation touches many pages per cache line it moves; with 2 MiB
 * pages their translations stay in the TLB, which matters most in a virtual machine, where a TLB
 * miss walks two levels of page tables. Smaller buffers come from the C heap, 64-byte aligned.
 *
 * Each buffer is preceded by a small header saying how it was obtained, so ts_buffer_free takes
 * the pointer alone. A mapped buffer's header lives in the 4 KiB page just below it, which stays
 * mapped with it; the rest of the alignment slack is unmapped. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ts_kernels.h"

#define HEADER_BYTES 64 /* keeps the heap path 64-byte aligned */
#define MAGIC_HEAP UINT64_C(0x7473627566686570)   /* "tsbufhep" */
#define MAGIC_MAPPED UINT64_C(0x74736275666d6170) /* "tsbufmap" */

typedef struct {
  uint64_t magic;
  void *base;    /* what to give back: the heap block, or the start of the mapping */
  size_t length; /* bytes of the mapping (0 for the heap) */
} header;

static header *header_of(void *p) { return (header *)((char *)p - HEADER_BYTES); }

static void *alloc_heap(size_t bytes) {
  if (bytes > SIZE_MAX - 2 * HEADER_BYTES)
    return NULL;
  size_t total = (bytes + 2 * HEADER_BYTES - 1) / HEADER_BYTES * HEADER_BYTES;
  char *base = aligned_alloc(HEADER_BYTES, total);
  if (!base)
    return NULL;
  char *p = base + HEADER_BYTES;
  *header_of(p) = (header){MAGIC_HEAP, base, 0};
  return p;
}

static void *alloc_mapped(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), huge = TS_BUFFER_HUGE_BYTES;
  if (page < HEADER_BYTES || page > huge || bytes > SIZE_MAX - 3 * huge)
    return NULL;
  size_t len = (bytes + huge - 1) / huge * huge; /* whole huge pages */
  size_t map_len = len + 2 * huge;                /* room to align, with a page below for the header */
  char *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  char *p = (char *)(((uintptr_t)m + page + huge - 1) / huge * huge);
  char *keep = p - page, *end = m + map_len;
  if (keep > m)
    munmap(m, (size_t)(keep - m));
  if (end > p + len)
    munmap(p + len, (size_t)(end - (p + len)));
#if defined(MADV_HUGEPAGE)
  madvise(p, len, MADV_HUGEPAGE); /* advice only: without huge pages the buffer still works */
#endif
  *header_of(p) = (header){MAGIC_MAPPED, keep, len + page};
  return p;
}

void *ts_buffer_alloc(size_t bytes) {
  return bytes >= TS_BUFFER_HUGE_BYTES ? alloc_mapped(bytes) : alloc_heap(bytes);
}

void ts_buffer_free(void *p) {
  if (!p)
    return;
  header h = *header_of(p);
  header_of(p)->magic = 0; /* a second free of the same buffer then aborts instead of corrupting */
  if (h.magic == MAGIC_MAPPED)
    munmap(h.base, h.length);
  else if (h.magic == MAGIC_HEAP)
    free(h.base);
  else
    abort(); /* not from ts_buffer_alloc: refuse to guess */
}
