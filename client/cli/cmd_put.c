/* cmd_put.c - `tshard put NAME FILE.npy`, checked: the file's dtype and shape are compared with
 * the tensor's before anything is sent, and the put declares them so the daemon checks too. A
 * file of another dtype is refused unless --convert asks to convert it, which the Python package
 * does the same way: the values are converted by the kernels' rules (floats round to nearest
 * even, floats to integers truncate toward zero, nonzero to bool is 1) and refused, naming both
 * dtypes, when one would not survive (out of range, NaN or an infinity into an integer, a bool
 * other than 0 or 1, overflow). A uint16 file is numbers; bf16 bit patterns are read only with
 * --bf16-bits (or --dtype bf16), f8 codes of a uint8 file only with --dtype f8_e4m3 or f8_e5m2.
 * A file of another shape is always refused. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "npy.h"
#include "tshard.h"

static int daemon_failed(tshard_client *c, int rc) {
  char msg[1100];
  const char *m = tshard_last_message(c);
  snprintf(msg, sizeof msg, "%s (%s)", m && *m ? m : tshard_strerror(rc), tshard_status_name(rc));
  return cli_fail(CLI_FAILED, msg);
}

/* "f32[20,12]" */
static void shape_text(char *buf, size_t cap, const char *dtype, int ndim, const int64_t *shape) {
  int n = snprintf(buf, cap, "%s[", dtype);
  for (int d = 0; d < ndim && n > 0 && (size_t)n < cap; d++)
    n += snprintf(buf + n, cap - (size_t)n, "%s%lld", d ? "," : "", (long long)shape[d]);
  if (n > 0 && (size_t)n < cap)
    snprintf(buf + n, cap - (size_t)n, "]");
}

/* Compares the file with the tensor; converts it when asked. Returns CLI_OK or an exit code. */
static int match_tensor(const cli_args *a, const char *name, const char *file,
                        const tshard_info *info, npy_array *arr) {
  ts_dtype tdt;
  if (ts_dtype_parse(info->dtype, &tdt, NULL))
    return cli_fail(CLI_FAILED, "the daemon described an unknown dtype");
  char have[160], want[160], msg[1024];
  shape_text(have, sizeof have, ts_dtype_name(arr->dtype), arr->ndim, arr->shape);
  shape_text(want, sizeof want, info->dtype, info->ndim, info->shape);
  bool same_shape = arr->ndim == info->ndim;
  for (int d = 0; same_shape && d < arr->ndim; d++)
    same_shape = arr->shape[d] == info->shape[d];
  if (!same_shape) {
    snprintf(msg, sizeof msg,
             "put %s: %s is %s but the tensor '%s' is %s; reshape the data (the "
             "shape must match exactly)",
             name, file, have, name, want);
    return cli_fail(CLI_FAILED, msg);
  }
  if (arr->dtype == tdt)
    return CLI_OK;
  if (!cli_flag(a, "convert")) {
    bool w16 = arr->dtype == TS_U16 || arr->dtype == TS_I16;
    bool w8 = arr->dtype == TS_U8 || arr->dtype == TS_I8;
    const char *bits = w16 && tdt == TS_BF16 ? "; if the file holds bf16 bit patterns, add "
                                               "--bf16-bits"
                       : w8 && (tdt == TS_F8_E4M3 || tdt == TS_F8_E5M2)
                           ? "; if the file holds f8 codes, add --dtype "
                           : "";
    snprintf(
        msg, sizeof msg,
        "put %s: %s is %s but the tensor '%s' is %s; add --convert to "
        "convert the values to %s (docs/clients.md: Checked puts), or write the file as %s%s%s",
        name, file, have, name, want, info->dtype, info->dtype, bits,
        bits[0] && tdt != TS_BF16 ? info->dtype : "");
    return cli_fail(CLI_FAILED, msg);
  }
  size_t n = arr->bytes / ts_dtype_size(arr->dtype);
  size_t bytes = n * ts_dtype_size(tdt);
  ts_error why;
  if (ts_convert_check(arr->data, arr->dtype, tdt, n, &why)) {
    snprintf(msg, sizeof msg, "put %s: %s into the tensor '%s' (%s): %s", name, file, name,
             info->dtype, why.msg);
    return cli_fail(CLI_FAILED, msg);
  }
  void *out = malloc(bytes ? bytes : 1);
  if (!out)
    return cli_fail(CLI_FAILED, "no memory for the converted data");
  ts_convert(out, tdt, arr->data, arr->dtype, n);
  free(arr->data);
  arr->data = out;
  arr->bytes = bytes;
  arr->dtype = tdt;
  return CLI_OK;
}

/* Reads the file as the options say: --bf16-bits (or --dtype bf16) takes uint16 as bf16 bit
 * patterns, --dtype f8_e4m3 / f8_e5m2 uint8 as f8 bit patterns. */
static int read_file(const cli_args *a, const char *file, ts_dtype hint, npy_array *arr) {
  ts_error err;
  npy_mode mode = cli_flag(a, "bf16-bits") ? NPY_BF16_BITS : cli_npy_mode_for(hint);
  int rc = cli_npy_read_as(file, mode, arr, &err);
  if (!rc && hint != TS_DTYPE_COUNT && hint != arr->dtype) {
    snprintf(err.msg, sizeof err.msg, "%s holds %s data, not %s (--dtype)", file,
             ts_dtype_name(arr->dtype), ts_dtype_name(hint));
    cli_npy_free(arr);
    rc = TS_BAD_DTYPE;
  }
  return rc ? cli_fail(rc == TS_BAD_DTYPE ? CLI_FAILED : CLI_IO, err.msg) : CLI_OK;
}

int cli_put_checked(cli_args *a, tshard_client *c, const char *name, const char *file) {
  const char *attr = cli_opt(a, "attr"), *dt = cli_opt(a, "dtype"), *key = cli_opt(a, "key");
  ts_error err;
  ts_dtype hint = TS_DTYPE_COUNT;
  if (dt && ts_dtype_parse_spelling(dt, &hint, &err))
    return cli_fail(CLI_USAGE, err.msg);
  if (attr && cli_flag(a, "convert"))
    return cli_fail(CLI_USAGE, "--convert converts into an existing tensor; with --attr the new "
                               "tensor takes the file's dtype");
  tshard_info info = {0};
  int rc = TS_OK, code = CLI_OK;
  if (!attr && (rc = tshard_describe(c, name, &info))) {
    if (rc != TS_NOT_FOUND)
      return daemon_failed(c, rc);
    char msg[600];
    snprintf(msg, sizeof msg,
             "no tensor named '%s' (NOT_FOUND); create it with the file's dtype "
             "and shape by adding --attr ATTR, e.g. tshard put %s %s --attr 'mesh=[4] "
             "placements=[S(0)]'",
             name, name, file);
    return cli_fail(CLI_FAILED, msg);
  }
  npy_array arr = {0};
  if ((code = read_file(a, file, hint, &arr))) {
    tshard_info_clear(&info);
    return code;
  }
  if (!attr)
    code = match_tensor(a, name, file, &info, &arr);
  else
    rc = tshard_create(c, name, ts_dtype_name(arr.dtype), arr.ndim, arr.shape, attr,
                       cli_opt(a, "layout"), key);
  cli_progress bar;
  if (!code && !rc) {
    cli_progress_start(a, c, arr.bytes, &bar, "put", name);
    rc = tshard_put_typed(c, name, ts_dtype_name(arr.dtype), arr.ndim, arr.shape, arr.data,
                          arr.bytes, key, 0);
  }
  if (!code && rc)
    code = daemon_failed(c, rc);
  if (!code) {
    if (a->json) {
      printf("{\"operation\": \"put\", \"name\": ");
      cli_json_string(stdout, name);
      printf(", \"bytes\": %zu, \"dtype\": \"%s\", \"file\": ", arr.bytes,
             ts_dtype_name(arr.dtype));
      cli_json_string(stdout, file);
      printf("}\n");
    } else {
      printf("put %s: %zu bytes from %s\n", name, arr.bytes, file);
    }
  }
  cli_npy_free(&arr);
  tshard_info_clear(&info);
  return code;
}
