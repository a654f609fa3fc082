/* cast.c - the conversions of a reshard that changes a tensor's dtype (casts in transit).
 *
 * ts_cast_prepare decides where the values convert (ts_cast_wire_dtype): a narrowing cast of a
 * source without partial placements converts this rank's source slice before anything moves (the
 * converted copy is what the executor sends); any other cast converts the new slice after the
 * transfer (ts_cast_finish). Both convert with ts_convert (round to nearest even, as numpy's
 * astype) and are checked with ts_convert_check, as a put with conversion is: a value that would
 * not survive (out of an integer's range, NaN or an infinity into an integer, a finite value
 * overflowing to infinity) refuses the reshard with TS_BAD_DTYPE naming it. The callers agree on
 * these failures over the world, so a refused cast changes nothing on any rank. A slice converts
 * as its raw buffer (padding included: zeros stay zeros), so any layout keeps its structure. */
#include <stdio.h>
#include <string.h>

#include "ts_shard.h"

/* Elements per step of a conversion: checked, then converted while they are in the cache (one
 * pass over memory). */
#define CAST_CHUNK 8192

/* in's elements converted to `to` into a new buffer with the same layout structure. */
static int convert_slice(const ts_tensor *in, ts_dtype to, const char *name, ts_tensor *out,
                         ts_error *err) {
  memset(out, 0, sizeof *out);
  ts_dtype from = in->layout.dtype;
  size_t n = in->bytes / ts_dtype_size(from), fs = ts_dtype_size(from), ds = ts_dtype_size(to);
  ts_error cerr;
  if (in->layout.offset != 0)
    return ts_error_set(err, TS_INTERNAL, "cast of '%s': a slice with offset %lld", name,
                        (long long)in->layout.offset);
  out->data = ts_shard_alloc_as(n * ds, 0, "the cast slice", &cerr);
  if (!out->data)
    return ts_error_set(err, cerr.code, "cast of '%s': %s", name, cerr.msg);
  const char *src = in->data;
  char *dst = out->data;
  for (size_t i = 0; i < n; i += CAST_CHUNK) {
    size_t k = n - i < CAST_CHUNK ? n - i : CAST_CHUNK;
    if (ts_convert_check(src + i * fs, from, to, k, &cerr)) {
      ts_convert_check(src, from, to, n, &cerr); /* the element's index in the slice */
      ts_shard_free_tensor(out);
      return ts_error_set(err, cerr.code,
                          "cast of '%s' from %s to %s: %s; a reshard casts only values that "
                          "survive (as a put with conversion)",
                          name, ts_dtype_name(from), ts_dtype_name(to), cerr.msg);
    }
    ts_convert(dst + i * ds, to, src + i * fs, from, k);
  }
  out->bytes = n * ds;
  out->layout = in->layout;
  out->layout.dtype = to;
  return TS_OK;
}

int ts_cast_prepare(ts_cast *c, const ts_stored *e, ts_dtype to, const ts_attr *tgt,
                    ts_error *err) {
  memset(c, 0, sizeof *c);
  c->from = e->dtype;
  c->to = to;
  c->wire = e->dtype;
  snprintf(c->name, sizeof c->name, "%s", e->name);
  ts_error werr;
  if (ts_cast_wire_dtype(e->dtype, to, e->attr, tgt, &c->wire, &werr))
    return ts_error_set(err, werr.code, "cast of '%s' to %s: %s", e->name, ts_dtype_name(to),
                        werr.msg);
  c->on = to != e->dtype;
  if (!c->on || c->wire != to || !e->has_slice)
    return TS_OK;
  return convert_slice(&e->local, to, e->name, &c->src, err);
}

const ts_tensor *ts_cast_source(const ts_cast *c, const ts_stored *e) {
  if (!e->has_slice)
    return NULL;
  return c->on && c->wire == c->to ? &c->src : &e->local;
}

bool ts_cast_after(const ts_cast *c) { return c->on && c->wire != c->to; }

int ts_cast_finish(ts_cast *c, ts_tensor *out, ts_error *err) {
  if (!ts_cast_after(c) || !out->data)
    return TS_OK;
  ts_tensor conv;
  int rc = convert_slice(out, c->to, c->name, &conv, err);
  if (rc)
    return rc;
  ts_shard_free_tensor(out);
  *out = conv;
  return TS_OK;
}

void ts_cast_clear(ts_cast *c) {
  if (c)
    ts_shard_free_tensor(&c->src);
}
