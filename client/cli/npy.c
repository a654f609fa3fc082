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

/* Each dtype's numpy descr code (without the byte-order character). bf16 is written as the uint16
 * and the 8-bit floats as the uint8 of their bits (numpy has none of them); a reader takes such a
 * file as those bits only when asked (npy_mode). */
static const char *const descr_table[TS_DTYPE_COUNT] = {
    [TS_F32] = "f4", [TS_F64] = "f8",   [TS_F16] = "f2", [TS_BF16] = "u2",    [TS_I8] = "i1",
    [TS_I32] = "i4", [TS_I64] = "i8",   [TS_U8] = "u1",  [TS_BOOL] = "b1",    [TS_I16] = "i2",
    [TS_U16] = "u2", [TS_U32] = "u4",   [TS_U64] = "u8", [TS_F8_E4M3] = "u1", [TS_F8_E5M2] = "u1",
    [TS_C64] = "c8", [TS_C128] = "c16",
};

static bool bits_dtype(ts_dtype dt) {
  return dt == TS_BF16 || dt == TS_F8_E4M3 || dt == TS_F8_E5M2;
}

static const char *descr_of(ts_dtype dt) {
  return ts_dtype_valid((int)dt) ? descr_table[dt] : NULL;
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
  static const char *const names[][2] = {
      {"f4", "float32"},   {"f8", "float64"},    {"f2", "float16"}, {"i1", "int8"},
      {"i4", "int32"},     {"i8", "int64"},      {"u1", "uint8"},   {"b1", "bool"},
      {"i2", "int16"},     {"u2", "uint16"},     {"u4", "uint32"},  {"u8", "uint64"},
      {"c8", "complex64"}, {"c16", "complex128"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(code, names[i][0]) == 0)
      return names[i][1];
  return code;
}

static int parse_header(const char *path, const char *hdr, npy_mode mode, npy_array *out,
                        bool *fortran, bool *swap, ts_error *err) {
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
  const char *code =
      descr + ((order == '<' || order == '>' || order == '|' || order == '=') ? 1 : 0);
  bool found = false;
  for (int i = 0; i < TS_DTYPE_COUNT; i++)
    if (!bits_dtype((ts_dtype)i) && strcmp(code, descr_table[i]) == 0) {
      out->dtype = (ts_dtype)i;
      found = true;
    }
  if (mode != NPY_EXACT) { /* bit patterns: of the float's width, unsigned or signed */
    ts_dtype bits = mode == NPY_BF16_BITS      ? TS_BF16
                    : mode == NPY_F8_E4M3_BITS ? TS_F8_E4M3
                                               : TS_F8_E5M2;
    bool w16 = strcmp(code, "u2") == 0 || strcmp(code, "i2") == 0;
    bool w8 = strcmp(code, "u1") == 0 || strcmp(code, "i1") == 0;
    if (bits == TS_BF16 ? !w16 : !w8)
      return ts_error_set(err, TS_BAD_DTYPE,
                          "%s: %s data (%s%s) is read from %s (or %s) bit "
                          "patterns, but the file's numpy dtype is %s",
                          path, ts_dtype_name(bits), bits == TS_BF16 ? "--bf16-bits or " : "",
                          bits == TS_BF16      ? "--dtype bf16"
                          : bits == TS_F8_E4M3 ? "--dtype f8_e4m3"
                                               : "--dtype f8_e5m2",
                          bits == TS_BF16 ? "uint16" : "uint8", bits == TS_BF16 ? "int16" : "int8",
                          numpy_name(code));
    out->dtype = bits;
    found = true;
  }
  if (!found)
    return ts_error_set(err, TS_BAD_DTYPE,
                        "%s: numpy dtype '%s' is not supported: valid are float32, float64, "
                        "float16, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, "
                        "complex64, complex128; "
                        "bf16 bit patterns with --bf16-bits (or --dtype bf16), f8 bit patterns "
                        "with --dtype f8_e4m3 or f8_e5m2",
                        path, descr);
  size_t es = ts_dtype_size(out->dtype);
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

npy_mode cli_npy_mode_for(ts_dtype dt) {
  return dt == TS_BF16      ? NPY_BF16_BITS
         : dt == TS_F8_E4M3 ? NPY_F8_E4M3_BITS
         : dt == TS_F8_E5M2 ? NPY_F8_E5M2_BITS
                            : NPY_EXACT;
}

int cli_npy_read(const char *path, ts_dtype hint, npy_array *out, ts_error *err) {
  int rc = cli_npy_read_as(path, cli_npy_mode_for(hint), out, err);
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
  if ((rc = parse_header(path, hdr, mode, out, &fortran, &swap, err)))
    goto done;
  int64_t numel = 1;
  for (int d = 0; d < out->ndim; d++)
    if (__builtin_mul_overflow(numel, out->shape[d], &numel)) {
      rc = ts_error_set(err, TS_OVERFLOW, "%s: the shape's element count overflows", path);
      goto done;
    }
  size_t es = ts_dtype_size(out->dtype);
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
  size_t part = ts_dtype_is_complex(out->dtype) ? es / 2 : es; /* complex: part by part */
  if (swap)
    for (size_t i = 0; i < out->bytes; i += part)
      for (size_t a = 0, b = part - 1; a < b; a++, b--) {
        unsigned char *c = (unsigned char *)out->data + i, t = c[a];
        c[a] = c[b];
        c[b] = t;
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
