/* put_verify.h - the daemon's check of what a put declares: the data's dtype and row-major shape
 * against the tensor or this rank's slice, and the byte count (put_verify.c). */
#ifndef TSD_PUT_VERIFY_H
#define TSD_PUT_VERIFY_H

#include "tsd_ops.h"

/* A put (box NULL) or put_slice (box: this rank's slice, NULL-able has_slice false) of `total`
 * bytes declaring dtype (may be "": no declaration) and shape. Checks the declaration against the
 * tensor or slice and the byte count, with messages in dtypes and shapes. tag: the slice's layout
 * ("" row-major); a declared shape is the box's logical shape whatever the layout. */
int tsd_put_check(const ts_stored *t, bool slice, const char *tag, const char *dtype,
                  size_t n_shape, const int64_t *shape, bool convert, uint64_t total,
                  uint64_t expected, ts_error *err);
/* The dtype a put's data arrives in: the tensor's, or the declared one when the put asks for
 * conversion (*convert then true). Errors for an unknown declared dtype. */
int tsd_put_source_dtype(const ts_stored *t, const char *dtype, bool convert_asked, ts_dtype *from,
                         bool *convert, ts_error *err);
/* Checks that the put's data (`bytes` bytes of dtype `from`, converted into t's dtype) keeps every
 * value (ts_convert_check): TS_BAD_DTYPE naming the tensor, both dtypes and the first value that
 * does not fit. */
int tsd_put_values_fit(const ts_stored *t, ts_dtype from, const void *data, uint64_t bytes,
                       ts_error *err);
/* A layout tag whose bytes are the row-major box ("" or "ab..." over ndim dims). */
bool tsd_tag_plain(const char *tag, int ndim);

#endif
