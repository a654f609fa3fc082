/* copy_ref.c - the naive reference of the strided-copy kernel.
 *
 * One full address computation per element on each side (ts_layout_address), one element
 * converted at a time, one thread. It shares only the validation and the scalar dtype
 * conversions with the fast kernel, so the tests can compare the two on random layouts. */
#include <string.h>

#include "kernels_internal.h"

int ts_copy_box_reference(const ts_tensor *dst, const int64_t *dst_start, const ts_tensor *src,
                          const int64_t *src_start, const int64_t *extent, ts_error *err) {
  int64_t none[TS_MAX_DIMS] = {0};
  int rc = ts__copy_check(dst, dst_start, src, src_start, extent, err);
  if (rc)
    return rc;
  const ts_layout *dl = &dst->layout, *sl = &src->layout;
  int nd = dl->ndim;
  if (!dst_start)
    dst_start = none;
  if (!src_start)
    src_start = none;

  /* the destination box grown over the padded tails it reaches, as the fast kernel fills them */
  int64_t lo[TS_MAX_DIMS], hi[TS_MAX_DIMS], idx[TS_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    if (extent[d] == 0)
      return TS_OK;
    lo[d] = dst_start[d];
    hi[d] = dst_start[d] + extent[d];
    if (hi[d] == dl->shape[d])
      hi[d] = ts_layout_padded(dl, d);
  }
  size_t esd = ts_dtype_size(dl->dtype);
  memcpy(idx, lo, sizeof(int64_t) * (size_t)nd);
  for (;;) {
    bool inside = true;
    int64_t sidx[TS_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
      inside &= idx[d] < dst_start[d] + extent[d];
      sidx[d] = src_start[d] + idx[d] - dst_start[d];
    }
    char *dp = (char *)dst->data + ts_layout_address(dl, idx);
    if (inside)
      ts_convert(dp, dl->dtype, (const char *)src->data + ts_layout_address(sl, sidx), sl->dtype,
                 1);
    else
      memset(dp, 0, esd);
    int d = nd - 1;
    while (d >= 0 && ++idx[d] == hi[d]) {
      idx[d] = lo[d];
      d--;
    }
    if (d < 0)
      break;
  }
  return TS_OK;
}
