/* layout.c - layout descriptors of a local slice: construction (row-major, oneDNN-style tags),
 * address arithmetic, text form, and validation.
 *
 * The address of a logical index is separable: offset plus, for each dim, a contribution that
 * depends only on that dim's index (its outer block index times the dim's stride, plus its inner
 * block digits times their inner strides). ts__dim_address computes one such contribution; the
 * strided-copy kernel tabulates them, and the reference kernel sums them per element. */
#include <stdlib.h>
#include <string.h>

#include "kernels_internal.h"

bool ts_layout_is_blocked(const ts_layout *l) { return l->n_inner > 0; }

int64_t ts_layout_block(const ts_layout *l, int d) {
  int64_t b = 1;
  for (int k = 0; k < l->n_inner; k++)
    if (l->inner_dim[k] == d)
      b *= l->inner_size[k];
  return b;
}

int64_t ts_layout_padded(const ts_layout *l, int d) {
  int64_t b = ts_layout_block(l, d);
  return (l->shape[d] + b - 1) / b * b;
}

int64_t ts_layout_numel(const ts_layout *l) {
  int64_t n = 1;
  for (int d = 0; d < l->ndim; d++)
    n *= l->shape[d];
  return n;
}

/* Stride, in elements, of inner block k: the product of the later inner block sizes. */
static int64_t inner_stride(const ts_layout *l, int k) {
  int64_t s = 1;
  for (int j = k + 1; j < l->n_inner; j++)
    s *= l->inner_size[j];
  return s;
}

int64_t ts__dim_address(const ts_layout *l, int d, int64_t x) {
  int64_t esize = (int64_t)ts_dtype_size(l->dtype);
  int64_t elems = (x / ts_layout_block(l, d)) * l->strides[d];
  int64_t below = 1; /* product of the inner sizes of dim d after block k */
  for (int k = l->n_inner - 1; k >= 0; k--) {
    if (l->inner_dim[k] != d)
      continue;
    elems += (x / below) % l->inner_size[k] * inner_stride(l, k);
    below *= l->inner_size[k];
  }
  return elems * esize;
}

int64_t ts_layout_address(const ts_layout *l, const int64_t *index) {
  int64_t a = l->offset;
  for (int d = 0; d < l->ndim; d++)
    a += ts__dim_address(l, d, index[d]);
  return a;
}

static int check_dims(ts_dtype dt, int ndim, const int64_t *shape, ts_error *err) {
  if (!ts_dtype_valid(dt))
    return ts_error_set(err, TS_BAD_DTYPE, "invalid dtype %d: valid are 0..%d (" TS_DTYPE_NAMES ")",
                        (int)dt, TS_DTYPE_COUNT - 1);
  if (ndim < 0 || ndim > TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE, "%d dims: a layout has 0 to %d dims", ndim, TS_MAX_DIMS);
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return ts_error_set(err, TS_BAD_SHAPE, "dim %d has negative size %lld: sizes are >= 0", d,
                          (long long)shape[d]);
  return TS_OK;
}

int ts_layout_plain(ts_layout *l, ts_dtype dt, int ndim, const int64_t *shape, ts_error *err) {
  char tag[TS_MAX_DIMS + 1];
  if (ndim < 0 || ndim > TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE, "%d dims: a layout has 0 to %d dims", ndim, TS_MAX_DIMS);
  for (int d = 0; d < ndim; d++)
    tag[d] = (char)('a' + d);
  tag[ndim] = '\0';
  return ts_layout_from_tag(l, dt, ndim, shape, tag, err);
}

int ts_layout_from_tag(ts_layout *l, ts_dtype dt, int ndim, const int64_t *shape, const char *tag,
                       ts_error *err) {
  int rc = check_dims(dt, ndim, shape, err);
  if (rc)
    return rc;
  memset(l, 0, sizeof *l);
  l->dtype = dt;
  l->ndim = ndim;
  memcpy(l->shape, shape, sizeof(int64_t) * (size_t)ndim);

  int order[TS_MAX_DIMS], norder = 0;
  bool seen[TS_MAX_DIMS] = {false}, upper[TS_MAX_DIMS] = {false};
  const char *p = tag ? tag : "";
  /* the outer dims: one letter each, outermost first */
  for (; *p && !(*p >= '0' && *p <= '9'); p++) {
    int d = (*p >= 'a' && *p <= 'z') ? *p - 'a' : (*p >= 'A' && *p <= 'Z') ? *p - 'A' : -1;
    if (d < 0 || d >= ndim)
      return ts_error_set(err, TS_BAD_LAYOUT,
                          "layout tag '%s': '%c' at position %d is not a dim letter: for %d dims "
                          "use 'a'..'%c' (upper case marks a blocked dim)",
                          tag, *p, (int)(p - tag), ndim, ndim ? 'a' + ndim - 1 : 'a');
    if (seen[d])
      return ts_error_set(err, TS_BAD_LAYOUT, "layout tag '%s': dim '%c' appears twice", tag,
                          'a' + d);
    seen[d] = true;
    upper[d] = *p >= 'A' && *p <= 'Z';
    order[norder++] = d;
  }
  if (norder != ndim)
    return ts_error_set(err, TS_BAD_LAYOUT,
                        "layout tag '%s' names %d dims before its blocks, the tensor has %d: each "
                        "dim appears exactly once",
                        tag ? tag : "", norder, ndim);
  /* the inner blocks: <number><lower-case letter> */
  while (*p) {
    char *end;
    long long size = strtoll(p, &end, 10);
    if (end == p || size < 1 || size > (1 << 20) || !(*end >= 'a' && *end <= 'z') ||
        *end - 'a' >= ndim)
      return ts_error_set(err, TS_BAD_LAYOUT,
                          "layout tag '%s': expected an inner block '<size><dim letter>' "
                          "(size 1..1048576, letter 'a'..'%c') at position %d",
                          tag, 'a' + ndim - 1, (int)(p - tag));
    int d = *end - 'a';
    if (!upper[d])
      return ts_error_set(err, TS_BAD_LAYOUT,
                          "layout tag '%s': block on dim '%c' but the dim is lower case; write "
                          "'%c' in upper case to mark it blocked",
                          tag, 'a' + d, 'A' + d);
    if (l->n_inner == TS_MAX_INNER)
      return ts_error_set(err, TS_BAD_LAYOUT, "layout tag '%s': more than %d inner blocks", tag,
                          TS_MAX_INNER);
    l->inner_dim[l->n_inner] = d;
    l->inner_size[l->n_inner] = size;
    l->n_inner++;
    p = end + 1;
  }
  for (int d = 0; d < ndim; d++) {
    bool has_block = false;
    for (int k = 0; k < l->n_inner; k++)
      has_block |= l->inner_dim[k] == d;
    if (upper[d] && !has_block)
      return ts_error_set(err, TS_BAD_LAYOUT,
                          "layout tag '%s': dim '%c' is upper case (blocked) but has no inner "
                          "block",
                          tag, 'a' + d);
  }
  /* dense strides: inner blocks innermost, then the outer dims in tag order */
  int64_t stride = inner_stride(l, -1);
  for (int i = ndim - 1; i >= 0; i--) {
    int d = order[i];
    l->strides[d] = stride;
    int64_t count = ts_layout_padded(l, d) / ts_layout_block(l, d);
    if (count > 0 && __builtin_mul_overflow(stride, count, &stride))
      return ts_error_set(err, TS_OVERFLOW, "layout tag '%s': the tensor's size overflows", tag);
  }
  return ts_layout_check(l, SIZE_MAX, true, err);
}

int ts_layout_format(const ts_layout *l, char *buf, size_t cap) {
  size_t n = 0;
#define PUT(...)                                                                                   \
  do {                                                                                             \
    int w_ = snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__);                                \
    if (w_ > 0)                                                                                    \
      n += (size_t)w_;                                                                             \
  } while (0)
  PUT("%s[", ts_dtype_name(l->dtype));
  for (int d = 0; d < l->ndim; d++)
    PUT("%s%lld", d ? "," : "", (long long)l->shape[d]);
  PUT("] strides=[");
  for (int d = 0; d < l->ndim; d++)
    PUT("%s%lld", d ? "," : "", (long long)l->strides[d]);
  PUT("] offset=%lld", (long long)l->offset);
  if (l->n_inner) {
    PUT(" blocks=[");
    for (int k = 0; k < l->n_inner; k++)
      PUT("%s%d:%lld", k ? "," : "", l->inner_dim[k], (long long)l->inner_size[k]);
    PUT("]");
  }
#undef PUT
  return (int)n;
}

/* The physical loops of a layout: every outer dim (count = padded / block) and inner block. */
typedef struct {
  int64_t count, stride;
} phys_dim;

static int physical_dims(const ts_layout *l, phys_dim *out) {
  int n = 0;
  for (int d = 0; d < l->ndim; d++)
    out[n++] = (phys_dim){ts_layout_padded(l, d) / ts_layout_block(l, d), l->strides[d]};
  for (int k = 0; k < l->n_inner; k++)
    out[n++] = (phys_dim){l->inner_size[k], inner_stride(l, k)};
  return n;
}

static int compare_abs_stride(const void *a, const void *b) {
  int64_t x = llabs(((const phys_dim *)a)->stride), y = llabs(((const phys_dim *)b)->stride);
  return (x > y) - (x < y);
}

int ts_layout_span(const ts_layout *l, size_t *bytes, ts_error *err) {
  int rc = ts_layout_check(l, SIZE_MAX, false, err);
  if (rc)
    return rc;
  phys_dim pd[TS_MAX_DIMS + TS_MAX_INNER];
  int n = physical_dims(l, pd);
  int64_t hi = 0;
  for (int i = 0; i < n; i++) {
    if (pd[i].count == 0) {
      *bytes = 0;
      return TS_OK;
    }
    if (pd[i].stride > 0)
      hi += (pd[i].count - 1) * pd[i].stride;
  }
  *bytes = (size_t)(l->offset + (hi + 1) * (int64_t)ts_dtype_size(l->dtype));
  return TS_OK;
}

int ts_layout_check(const ts_layout *l, size_t buf_bytes, bool writable, ts_error *err) {
  if (!l)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "layout is NULL");
  int rc = check_dims(l->dtype, l->ndim, l->shape, err);
  if (rc)
    return rc;
  if (l->n_inner < 0 || l->n_inner > TS_MAX_INNER)
    return ts_error_set(err, TS_BAD_LAYOUT, "%d inner blocks: a layout has 0 to %d", l->n_inner,
                        TS_MAX_INNER);
  int64_t inner_total = 1;
  for (int k = 0; k < l->n_inner; k++) {
    if (l->inner_dim[k] < 0 || l->inner_dim[k] >= l->ndim)
      return ts_error_set(err, TS_BAD_LAYOUT,
                          "inner block %d is on dim %d, which the %d-dim layout does not have", k,
                          l->inner_dim[k], l->ndim);
    if (l->inner_size[k] < 1 ||
        __builtin_mul_overflow(inner_total, l->inner_size[k], &inner_total) ||
        inner_total > (INT64_C(1) << 24))
      return ts_error_set(err, TS_BAD_LAYOUT,
                          "inner block %d has size %lld: block sizes are >= 1 and all inner blocks "
                          "together hold at most 2^24 elements",
                          k, (long long)l->inner_size[k]);
  }
  int64_t esize = (int64_t)ts_dtype_size(l->dtype);
  if (l->offset < 0)
    return ts_error_set(err, TS_OUT_OF_BOUNDS, "byte offset %lld is negative",
                        (long long)l->offset);
  if (l->offset % esize != 0)
    return ts_error_set(err, TS_BAD_LAYOUT,
                        "byte offset %lld is not a multiple of the %lld-byte element size",
                        (long long)l->offset, (long long)esize);

  /* the span of addresses, with overflow checks; padding counts (blocked buffers hold it) */
  phys_dim pd[TS_MAX_DIMS + TS_MAX_INNER];
  int n = physical_dims(l, pd);
  int64_t lo = 0, hi = 0, numel = 1;
  for (int i = 0; i < n; i++) {
    if (pd[i].count == 0)
      return TS_OK; /* an empty tensor touches no memory */
    int64_t reach;
    if (__builtin_mul_overflow(pd[i].count - 1, pd[i].stride, &reach) ||
        __builtin_add_overflow(reach > 0 ? hi : lo, reach, reach > 0 ? &hi : &lo) ||
        __builtin_mul_overflow(numel, pd[i].count, &numel))
      return ts_error_set(err, TS_OVERFLOW,
                          "layout addresses overflow 64 bits (dim count %lld, stride %lld)",
                          (long long)pd[i].count, (long long)pd[i].stride);
  }
  int64_t blo, bhi;
  if (__builtin_mul_overflow(lo, esize, &blo) || __builtin_mul_overflow(hi + 1, esize, &bhi) ||
      __builtin_add_overflow(bhi, l->offset, &bhi))
    return ts_error_set(err, TS_OVERFLOW, "layout byte addresses overflow 64 bits");
  blo += l->offset;
  if (blo < 0)
    return ts_error_set(err, TS_OUT_OF_BOUNDS,
                        "the view reaches %lld bytes before its buffer (negative strides need an "
                        "offset of at least that much)",
                        (long long)-blo);
  if ((uint64_t)bhi > (uint64_t)buf_bytes)
    return ts_error_set(err, TS_OUT_OF_BOUNDS,
                        "the view needs a buffer of %lld bytes but the buffer has %zu",
                        (long long)bhi, buf_bytes);
  if (!writable)
    return TS_OK;

  /* a destination must give every element its own address: sorted by |stride|, each stride must
   * be at least the extent of all smaller ones together */
  qsort(pd, (size_t)n, sizeof pd[0], compare_abs_stride);
  int64_t extent = 1;
  for (int i = 0; i < n; i++) {
    if (pd[i].count == 1)
      continue;
    if (llabs(pd[i].stride) < extent)
      return ts_error_set(err, TS_ALIASING,
                          "destination strides alias: a loop of %lld with stride %lld overlaps "
                          "smaller strides spanning %lld elements; each stride must be at least "
                          "the span of the smaller ones",
                          (long long)pd[i].count, (long long)pd[i].stride, (long long)extent);
    extent = llabs(pd[i].stride) * pd[i].count;
  }
  return TS_OK;
}

int64_t ts_gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}
