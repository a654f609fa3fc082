/* put_verify.c - the daemon's half of "no silent corruption on put": a client declares the dtype
 * and row-major shape of the data it sends (PutRequest/PutSliceRequest fields 20-21), and a
 * declaration that differs from the tensor (or this rank's slice) is refused with both named, so
 * an int32 array never lands in an f32 tensor as reinterpreted bits and a (12,20) array never
 * fills a (20,12) tensor. Byte counts that do not match are reported in dtypes and shapes too.
 * A put that asks for conversion is refused when a value would not survive it. */
#include <stdio.h>
#include <string.h>

#include "put_verify.h"

/* "f32[20,12]" */
static void describe(char *buf, size_t cap, const char *dtype, int ndim, const int64_t *shape) {
  int n = snprintf(buf, cap, "%s[", dtype);
  for (int d = 0; d < ndim && n > 0 && (size_t)n < cap; d++)
    n += snprintf(buf + n, cap - (size_t)n, "%s%lld", d ? "," : "", (long long)shape[d]);
  if (n > 0 && (size_t)n < cap)
    snprintf(buf + n, cap - (size_t)n, "]");
}

bool tsd_tag_plain(const char *tag, int ndim) {
  if (!tag || !tag[0])
    return true;
  if ((int)strlen(tag) != ndim)
    return false;
  for (int d = 0; d < ndim; d++)
    if (tag[d] != 'a' + d)
      return false;
  return true;
}

/* Integers of a float's width put into that float: perhaps its bit patterns, which only the
 * Python wrappers mark as such. */
static const char *bits_hint(const char *data, ts_dtype tensor) {
  bool w16 = strcmp(data, "u16") == 0 || strcmp(data, "i16") == 0;
  bool w8 = strcmp(data, "u8") == 0 || strcmp(data, "i8") == 0;
  if (w16 && tensor == TS_BF16)
    return "; if these are bf16 bit patterns (e.g. torch's t.view(torch.int16)), wrap them "
           "with tshard.bf16_bits(array): convert=True would take them as integers";
  if (w8 && (tensor == TS_F8_E4M3 || tensor == TS_F8_E5M2))
    return "; if these are f8 bit patterns (e.g. torch's t.view(torch.uint8)), wrap them with "
           "tshard.f8_bits(array, 'e4m3' or 'e5m2') (tshard put: --dtype f8_e4m3 or f8_e5m2): "
           "convert=True would take them as integers";
  return "";
}

int tsd_put_check(const ts_stored *t, bool slice, const char *tag, const char *dtype,
                  size_t n_shape, const int64_t *shape, bool convert, uint64_t total,
                  uint64_t expected, ts_error *err) {
  if (slice && !t->has_slice)
    return TS_OK; /* the put_slice handler says this rank holds none */
  int ndim = t->ndim;
  int64_t want[TS_MAX_DIMS] = {0};
  for (int d = 0; d < ndim; d++)
    want[d] = slice ? t->box.hi[d] - t->box.lo[d] : t->shape[d];
  char have_s[160] = "", want_s[160];
  const char *tdt = ts_dtype_name(t->dtype);
  describe(want_s, sizeof want_s, tdt, ndim, want);
  const char *whose = slice ? "this rank's slice of" : "the tensor";
  if (dtype && dtype[0]) {
    if (n_shape > TS_MAX_DIMS)
      return ts_error_set(err, TS_BAD_SHAPE,
                          "put of '%s': the data has %zu dims; tensors have "
                          "at most %d",
                          t->name, n_shape, TS_MAX_DIMS);
    describe(have_s, sizeof have_s, dtype, (int)n_shape, shape);
    /* another layout's bytes (blocked, padded) come as a flat array: its dtype is checked */
    bool shaped = tsd_tag_plain(tag, ndim);
    if (!shaped) {
      describe(have_s, sizeof have_s, dtype, 0, shape);
      describe(want_s, sizeof want_s, tdt, 0, want);
      snprintf(have_s + strlen(have_s) - 2, 8, " data");
      snprintf(want_s + strlen(want_s) - 2, 8, " data");
    }
    bool same = (convert || strcmp(dtype, tdt) == 0) && (!shaped || (int)n_shape == ndim);
    for (int d = 0; same && shaped && d < ndim; d++)
      same = shape[d] == want[d];
    if (!same)
      return ts_error_set(err, strcmp(dtype, tdt) && !convert ? TS_BAD_DTYPE : TS_BAD_SHAPE,
                          "put of '%s': the data is %s but %s '%s' is %s; %s%s", t->name, have_s,
                          whose, t->name, want_s,
                          strcmp(dtype, tdt) && !convert
                              ? "convert it (Python convert=True, tshard put "
                                "--convert: values must fit) or create the "
                                "tensor with that dtype"
                              : "reshape the data to that shape",
                          bits_hint(dtype, t->dtype));
  }
  ts_dtype from = t->dtype; /* the byte count in the elements of the data's dtype */
  if (convert && dtype && ts_dtype_parse(dtype, &from, NULL) == TS_OK) {
    expected = expected / ts_dtype_size(t->dtype) * ts_dtype_size(from);
    tdt = ts_dtype_name(from);
  }
  if (total != expected) {
    size_t es = ts_dtype_size(from);
    if (total % es)
      return ts_error_set(err, TS_BAD_SHAPE,
                          "put of '%s': %llu bytes is not a whole number of "
                          "%s elements (%zu bytes each); %s '%s' is %s (%llu bytes)",
                          t->name, (unsigned long long)total, tdt, es, whose, t->name, want_s,
                          (unsigned long long)expected);
    return ts_error_set(err, TS_BAD_SHAPE,
                        "put of '%s': the data has %llu %s elements but %s "
                        "'%s' is %s, %llu elements%s",
                        t->name, (unsigned long long)(total / es), tdt, whose, t->name, want_s,
                        (unsigned long long)(expected / es),
                        slice ? " (in the put's layout, padding included)" : "");
  }
  return TS_OK;
}

int tsd_put_source_dtype(const ts_stored *t, const char *dtype, bool convert_asked, ts_dtype *from,
                         bool *convert, ts_error *err) {
  *from = t->dtype;
  *convert = false;
  if (!convert_asked || !dtype || !dtype[0] || strcmp(dtype, ts_dtype_name(t->dtype)) == 0)
    return TS_OK;
  int rc = ts_dtype_parse(dtype, from, err);
  *convert = rc == TS_OK;
  return rc;
}

int tsd_put_values_fit(const ts_stored *t, ts_dtype from, const void *data, uint64_t bytes,
                       ts_error *err) {
  ts_error why;
  if (!ts_convert_check(data, from, t->dtype, (size_t)(bytes / ts_dtype_size(from)), &why))
    return TS_OK;
  return ts_error_set(err, TS_BAD_DTYPE, "put of '%s' (%s): %s", t->name, ts_dtype_name(t->dtype),
                      why.msg);
}
