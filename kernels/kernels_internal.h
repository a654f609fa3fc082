/* kernels_internal.h - declarations shared between the files of libtskernels, never installed.
 * Names here are ts__* (internal, not part of ts_kernels.h). */
#ifndef TS_KERNELS_INTERNAL_H
#define TS_KERNELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ts_kernels.h"

/* Converts n elements from src (byte stride ss) to dst (byte stride ds). For dd == sd this is an
 * exact byte move (NaN payloads kept). */
typedef void (*ts__row_fn)(char *dst, ptrdiff_t ds, const char *src, ptrdiff_t ss, size_t n);
ts__row_fn ts__row_function(ts_dtype dd, ts_dtype sd);

/* A 16-byte element (c128) moved as a whole. */
typedef struct {
  uint64_t lo, hi;
} ts__bytes16;

/* The byte contribution of index x of dim d to the address (outer and inner block parts of that
 * dim only; the address is offset plus the sum of these over the dims). */
int64_t ts__dim_address(const ts_layout *l, int d, int64_t x);

/* Validates a box copy exactly as ts_copy_box does (shared with the reference kernel). */
int ts__copy_check(const ts_tensor *dst, const int64_t *dst_start, const ts_tensor *src,
                   const int64_t *src_start, const int64_t *extent, ts_error *err);

#endif
