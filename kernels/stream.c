/* stream.c - copies whose destination bypasses the caches.
 *
 * A copy into memory that is not in the caches first reads every destination line from memory
 * (to own it), then writes it back: twice the traffic of the bytes moved. Non-temporal stores
 * write whole lines without reading them and without evicting what the caches hold. Measured on
 * a 2-core EPYC VM, 768-byte runs into cold memory: 24 MiB scattered at a stride of 3072 bytes in
 * 1.3-1.7 ms against 3.4-5.1 ms with memcpy; 100 pieces of 512 KiB in 2.1-3.0 ms against 6.0-7.2.
 * Reading such a destination soon after costs a miss per line, so the kernels use these stores
 * only for destinations larger than the caches keep (TS_STREAM_MIN_BYTES) and never for staging
 * buffers that are read right away. */
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ts_kernels.h"

void ts_copy_stream(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
#if defined(__SSE2__)
  size_t head = (64 - (uintptr_t)d % 64) % 64;
  if (n < head + 64) { /* not one whole line: the caches take it */
    memcpy(d, s, n);
    return;
  }
  memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_stream_si128((__m128i *)(d + i), a);
    _mm_stream_si128((__m128i *)(d + i + 16), b);
    _mm_stream_si128((__m128i *)(d + i + 32), c);
    _mm_stream_si128((__m128i *)(d + i + 48), e);
  }
  memcpy(d + i, s + i, n - i);
#else
  memcpy(d, s, n);
#endif
}

void ts_copy_stream_fence(void) {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}
