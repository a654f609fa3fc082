/* npy.c - NumPy .npy files: the header (a Python dict literal: descr, fortran_order, shape),
 * little- and big-endian data, C and Fortran order.
 *
 * Format: "\x93NUMPY", major, minor, a header length (2 bytes little-endian in 1.0, 4 bytes in 2.0
 * and 3.0), the header text padded with spaces to a multiple of 64 bytes and ended by '\n', then
 * the data. Fortran order is turned into C order with the strided-copy kernel (a reversed-stride
 * view copied to a row-major layout). */
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *descr; /* without the byte-order character */
  ts_dtype dt;
} descr_table[] = {
    {"f4", TS_F32}, {"f8", TS_F64}, {"f2", TS_F16}, {"i1", TS_I8},
    {"i4", TS_I32}, {"i8", TS_I64}, {"u1", TS_U8},  {"u2", TS_BF16},
};

/* numpy dtypes without a tshard dtype, widened losslessly when the reader asks (as the Python
 * package does with convert=True): bool and uint8 to u8, int16 and uint16 to i32, uint32 to i64,
 * uint64 to i64 when every value fits. */
static const struct {
  const char *descr;
  const char *numpy;
  size_t size;
  bool is_signed;
  ts_dtype dt;
} widen_table[] = {
    {.descr = "b1", .numpy = "bool", .size = 1, .is_signed = false, .dt = TS_U8},
    {.descr = "i2", .numpy = "int16", .size = 2, .is_signed = true, .dt = TS_I32},
    {.descr = "u2", .numpy = "uint16", .size = 2, .is_signed = false, .dt = TS_I32},
    {.descr = "u4", .numpy = "uint32", .size = 4, .is_signed = false, .dt = TS_I64},
    {.descr = "u8", .numpy = "uint64", .size = 8, .is_signed = false, .dt = TS_I64},
};

static const char *descr_of(ts_dtype dt) {
  for (size_t i = 0; i < sizeof descr_table / sizeof descr_table[0]; i++)
    if (descr_table[i].dt == dt)
      return descr_table[i].descr;
  return NULL;
}

void cli_npy_free(npy_array *a) {
  if (a) {
    free(a->data);
    a->data = NULL;
  }
}

/* Finds "'key':" in the header dict and returns the text after it (spaces skipped). */
static const char *dict_value(const char *hdr, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(hdr, pat);
  if (!p)
    return NULL;
  p += strlen(pat);
  while (*p == ' ')
    p++;
  if (*p != ':')
    return NULL;
  p++;
  while (*p == ' ')
    p++;
  return p;
}

/* numpy's name of a descr code ("f4": "float32"), or the code itself. */
static const char *numpy_name(const char *code) {
  static const char *const names[][2] = {{"f4", "float32"}, {"f8", "float64"}, {"f2", "float16"},
                                         {"i1", "int8"},    {"i4", "int32"},   {"i8", "int64"},
                                         {"u1", "uint8"},   {"b1", "bool"},    {"i2", "int16"},
                                         {"u2", "uint16"},  {"u4", "uint32"},  {"u8", "uint64"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(code, names[i][0]) == 0)
      return names[i][1];
  return code;
}

/* The widening of the file's element type, if any: index into widen_table or -1. */
static int widening_of(const char *code) {
  for (size_t i = 0; i < sizeof widen_table / sizeof widen_table[0]; i++)
    if (strcmp(code, widen_table[i].descr) == 0)
      return (int)i;
  return -1;
}

static int parse_header(const char *path, const char *hdr, npy_mode mode, npy_array *out,
                        bool *fortran, bool *swap, int *widen, ts_error *err) {
  const char *d = dict_value(hdr, "descr"), *f = dict_value(hdr, "fortran_order"),
             *s = dict_value(hdr, "shape");
  if (!d || !f || !s || (*d != '\'' && *d != '"'))
    return ts_error_set(err, TS_PARSE,
                        "%s: the .npy header lacks 'descr', 'fortran_order' or 'shape': %.80s",
                        path, hdr);
  char descr[16] = "";
  size_t n = 0;
  for (d++; *d && *d != '\'' && *d != '"' && n < sizeof descr - 1; d++)
    descr[n++] = *d;
  descr[n] = '\0';
  char order = descr[0];
  const char *code = descr + ((order == '<' || order == '>' || order == '|' || order == '=') ? 1 : 0);
  bool found = false;
  *widen = -1;
  for (size_t i = 0; i < sizeof descr_table / sizeof descr_table[0]; i++)
    if (strcmp(code, descr_table[i].descr) == 0 && descr_table[i].dt != TS_BF16) {
      out->dtype = descr_table[i].dt;
      found = true;
    }
  if (mode == NPY_BF16_BITS) {
    if (strcmp(code, "u2") != 0 && strcmp(code, "i2") != 0)
      return ts_error_set(err, TS_BAD_DTYPE, "%s: --bf16-bits reads uint16 (or int16) bit "
                          "patterns, but the file's numpy dtype is %s", path, numpy_name(code));
    out->dtype = TS_BF16;
    found = true;
  } else if (!found && (*widen = widening_of(code)) >= 0) {
    if (mode != NPY_WIDEN)
      return ts_error_set(err, TS_BAD_DTYPE,
                          "%s: numpy dtype %s has no tshard dtype; --convert widens it to %s "
                          "(bf16 bit patterns in uint16: --bf16-bits)", path,
                          widen_table[*widen].numpy, ts_dtype_name(widen_table[*widen].dt));
    out->dtype = widen_table[*widen].dt;
    out->widened_from = widen_table[*widen].numpy;
    found = true;
  }
  if (!found)
    return ts_error_set(err, TS_BAD_DTYPE,
                        "%s: numpy dtype '%s' is not supported: valid are float32, float64, "
                        "float16, int8, int32, int64, uint8; with --convert also bool, int16, "
                        "uint16, uint32, uint64 (widened); bf16 bit patterns with --bf16-bits",
                        path, descr);
  size_t es = *widen >= 0 ? widen_table[*widen].size : ts_dtype_size(out->dtype);
  *swap = order == '>' && es > 1;
  if (strncmp(f, "True", 4) == 0)
    *fortran = true;
  else if (strncmp(f, "False", 5) == 0)
    *fortran = false;
  else
    return ts_error_set(err, TS_PARSE, "%s: 'fortran_order' is neither True nor False", path);
  if (*s != '(')
    return ts_error_set(err, TS_PARSE, "%s: 'shape' is not a tuple", path);
  s++;
  out->ndim = 0;
  for (;;) {
    while (*s == ' ')
      s++;
    if (*s == ')')
      break;
    if (!isdigit((unsigned char)*s))
      return ts_error_set(err, TS_PARSE, "%s: bad 'shape' near \"%.20s\"", path, s);
    if (out->ndim == TS_MAX_DIMS)
      return ts_error_set(err, TS_BAD_SHAPE, "%s: more than %d dims", path, TS_MAX_DIMS);
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || v < 0)
      return ts_error_set(err, TS_BAD_SHAPE, "%s: a dim size is out of range", path);
    out->shape[out->ndim++] = v;
    s = end;
    while (*s == ' ')
      s++;
    if (*s == ',')
      s++;
  }
  return TS_OK;
}

/* Widens n raw elements of widen_table[w] (native order) in `raw` to the table's dtype in `dst`;
 * uint64 values above the largest i64 are refused. */
static int widen_data(const char *path, int w, const unsigned char *raw, void *dst, size_t n,
                      ts_error *err) {
  size_t es = widen_table[w].size;
  for (size_t i = 0; i < n; i++) {
    uint64_t u = 0;
    int64_t v;
    if (es == 1) {
      v = raw[i] != 0;
    } else if (es == 2 && widen_table[w].is_signed) {
      int16_t x;
      memcpy(&x, raw + 2 * i, 2);
      v = x;
    } else if (es == 2) {
      uint16_t x;
      memcpy(&x, raw + 2 * i, 2);
      v = x;
    } else if (es == 4) {
      uint32_t x;
      memcpy(&x, raw + 4 * i, 4);
      v = x;
    } else {
      memcpy(&u, raw + 8 * i, 8);
      if (u > (uint64_t)INT64_MAX)
        return ts_error_set(err, TS_BAD_DTYPE, "%s: converting uint64 to i64 would change values: "
                            "element %zu (%llu) is outside the range of i64, which holds up to "
                            "2^63-1", path, i, (unsigned long long)u);
      v = (int64_t)u;
    }
    if (widen_table[w].dt == TS_U8) {
      uint8_t b = (uint8_t)v;
      memcpy((unsigned char *)dst + i, &b, 1);
    } else if (widen_table[w].dt == TS_I32) {
      int32_t x = (int32_t)v;
      memcpy((unsigned char *)dst + 4 * i, &x, 4);
    } else {
      memcpy((unsigned char *)dst + 8 * i, &v, 8);
    }
  }
  return TS_OK;
}

int cli_npy_read(const char *path, ts_dtype hint, npy_array *out, ts_error *err) {
  int rc = cli_npy_read_as(path, hint == TS_BF16 ? NPY_BF16_BITS : NPY_EXACT, out, err);
  if (!rc && hint != TS_DTYPE_COUNT && hint != out->dtype) {
    rc = ts_error_set(err, TS_BAD_DTYPE, "%s holds %s data, not %s", path,
                      ts_dtype_name(out->dtype), ts_dtype_name(hint));
    cli_npy_free(out);
  }
  return rc;
}

int cli_npy_read_as(const char *path, npy_mode mode, npy_array *out, ts_error *err) {
  memset(out, 0, sizeof *out);
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return ts_error_set(err, TS_IO, "cannot open %s: %s", path, strerror(errno));
  unsigned char pre[12];
  int rc = TS_OK;
  char *hdr = NULL;
  if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    rc = ts_error_set(err, TS_PARSE, "%s is not a .npy file (no \\x93NUMPY magic)", path);
    goto done;
  }
  uint32_t hlen;
  if (pre[6] == 1) {
    hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
  } else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 10, 1, 2, fp) != 2) {
      rc = ts_error_set(err, TS_PARSE, "%s: truncated .npy header", path);
      goto done;
    }
    hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
           (uint32_t)pre[11] << 24;
  } else {
    rc = ts_error_set(err, TS_PARSE, "%s: .npy format version %d.%d: supported are 1.0, 2.0, 3.0",
                      path, pre[6], pre[7]);
    goto done;
  }
  if (hlen > (1u << 20)) {
    rc = ts_error_set(err, TS_PARSE, "%s: .npy header of %u bytes is implausibly long", path, hlen);
    goto done;
  }
  hdr = malloc(hlen + 1);
  if (!hdr || fread(hdr, 1, hlen, fp) != hlen) {
    rc = ts_error_set(err, hdr ? TS_PARSE : TS_NO_MEMORY, "%s: truncated .npy header", path);
    goto done;
  }
  hdr[hlen] = '\0';
  bool fortran = false, swap = false;
  int widen = -1;
  if ((rc = parse_header(path, hdr, mode, out, &fortran, &swap, &widen, err)))
    goto done;
  int64_t numel = 1;
  for (int d = 0; d < out->ndim; d++)
    if (__builtin_mul_overflow(numel, out->shape[d], &numel)) {
      rc = ts_error_set(err, TS_OVERFLOW, "%s: the shape's element count overflows", path);
      goto done;
    }
  size_t es = widen >= 0 ? widen_table[widen].size : ts_dtype_size(out->dtype);
  out->bytes = (size_t)numel * es;
  out->data = malloc(out->bytes ? out->bytes : 1);
  if (!out->data) {
    rc = ts_error_set(err, TS_NO_MEMORY, "%s: cannot allocate %zu bytes", path, out->bytes);
    goto done;
  }
  if (fread(out->data, 1, out->bytes, fp) != out->bytes) {
    rc = ts_error_set(err, TS_IO, "%s: the file holds less data than its shape needs (%zu bytes)",
                      path, out->bytes);
    goto done;
  }
  if (swap)
    for (size_t i = 0; i < out->bytes; i += es)
      for (size_t a = 0, b = es - 1; a < b; a++, b--) {
        unsigned char *c = (unsigned char *)out->data + i, t = c[a];
        c[a] = c[b];
        c[b] = t;
      }
  if (widen >= 0) {
    size_t wide = (size_t)numel * ts_dtype_size(out->dtype);
    void *w = malloc(wide ? wide : 1);
    if (!w) {
      rc = ts_error_set(err, TS_NO_MEMORY, "%s: cannot allocate %zu bytes", path, wide);
      goto done;
    }
    rc = widen_data(path, widen, out->data, w, (size_t)numel, err);
    free(out->data);
    out->data = w;
    out->bytes = wide;
    if (rc)
      goto done;
  }
  if (fortran && out->ndim > 1 && numel > 0) { /* column-major view -> row-major copy */
    ts_tensor src = {out->data, out->bytes, {0}}, dst = {NULL, out->bytes, {0}};
    if ((rc = ts_layout_plain(&dst.layout, out->dtype, out->ndim, out->shape, err)))
      goto done;
    src.layout = dst.layout;
    int64_t stride = 1;
    for (int d = 0; d < out->ndim; d++) {
      src.layout.strides[d] = stride;
      stride *= out->shape[d];
    }
    dst.data = malloc(out->bytes);
    if (!dst.data) {
      rc = ts_error_set(err, TS_NO_MEMORY, "%s: cannot allocate %zu bytes", path, out->bytes);
      goto done;
    }
    rc = ts_copy(&dst, &src, NULL, err);
    free(out->data);
    out->data = dst.data;
  }
done:
  free(hdr);
  fclose(fp);
  if (rc)
    cli_npy_free(out);
  return rc;
}

int cli_npy_write_header(FILE *f, ts_dtype dt, int ndim, const int64_t *shape, ts_error *err) {
  const char *code = descr_of(dt);
  if (!code)
    return ts_error_set(err, TS_BAD_DTYPE, "dtype %s cannot be written to .npy", ts_dtype_name(dt));
  char dict[1024];
  int n = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                   ts_dtype_size(dt) == 1 ? '|' : '<', code);
  for (int d = 0; d < ndim; d++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)shape[d],
                  d + 1 < ndim ? " " : "");
  if (ndim > 1) /* (3,) keeps its comma; (3, 4) does not need one */
    n--;
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  bool v2 = n + 11 > 65535;
  size_t pre = v2 ? 12 : 10, total = (pre + (size_t)n + 1 + 63) / 64 * 64;
  size_t hlen = total - pre;
  unsigned char head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', v2 ? 2 : 1, 0};
  for (size_t i = 0; i < (v2 ? 4u : 2u); i++)
    head[8 + i] = (unsigned char)(hlen >> (8 * i));
  if (fwrite(head, 1, pre, f) != pre || fwrite(dict, 1, (size_t)n, f) != (size_t)n)
    return ts_error_set(err, TS_IO, "cannot write the .npy header: %s", strerror(errno));
  for (size_t i = (size_t)n; i + 1 < hlen; i++)
    fputc(' ', f);
  fputc('\n', f);
  return ferror(f) ? ts_error_set(err, TS_IO, "cannot write the .npy header: %s", strerror(errno))
                   : TS_OK;
}

int cli_npy_write(const char *path, const npy_array *a, ts_error *err) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return ts_error_set(err, TS_IO, "cannot create %s: %s", path, strerror(errno));
  int rc = cli_npy_write_header(f, a->dtype, a->ndim, a->shape, err);
  if (!rc && a->bytes && fwrite(a->data, 1, a->bytes, f) != a->bytes)
    rc = ts_error_set(err, TS_IO, "cannot write %s: %s", path, strerror(errno));
  if (fclose(f) != 0 && !rc)
    rc = ts_error_set(err, TS_IO, "cannot write %s: %s", path, strerror(errno));
  return rc;
}
