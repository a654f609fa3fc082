/* typed_put.c - puts that declare their data's dtype and row-major shape, so that the daemon
 * refuses data that differs from the tensor or this rank's slice instead of storing
 * reinterpreted bits (or converts it, when asked). The declaration rides on the client for the
 * one put (api.c sends it) and is cleared after. */
#include "client_internal.h"

/* Sets the declaration the next put sends; TS_INVALID_ARGUMENT for a missing dtype or a shape
 * that is not 0 to TSHARD_MAX_DIMS dims. */
static int declare(tshard_client *c, const char *dtype, int ndim, const int64_t *shape,
                   unsigned flags) {
  if (!c || !dtype || ndim < 0 || ndim > TSHARD_MAX_DIMS || (ndim && !shape))
    return TS_INVALID_ARGUMENT;
  c->put_dtype = dtype;
  c->put_ndim = ndim;
  c->put_shape = shape;
  c->put_convert = (flags & TSHARD_PUT_CONVERT) != 0;
  return TS_OK;
}

int tshard_put_typed(tshard_client *c, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, const void *data, size_t bytes, const char *key,
                     unsigned flags) {
  int rc = declare(c, dtype, ndim, shape, flags);
  if (rc != TS_OK)
    return rc;
  rc = tshard_put(c, name, data, bytes, key);
  c->put_dtype = NULL;
  return rc;
}

int tshard_put_slice_typed(tshard_client *c, const char *name, const char *layout,
                           const char *dtype, int ndim, const int64_t *shape, const void *data,
                           size_t bytes, unsigned flags) {
  int rc = declare(c, dtype, ndim, shape, flags);
  if (rc != TS_OK)
    return rc;
  rc = tshard_put_slice(c, name, layout, data, bytes);
  c->put_dtype = NULL;
  return rc;
}
