/* cmd_put.c - `tshard put NAME FILE.npy`, checked: the file's dtype and shape are compared with
 * the tensor's before anything is sent, and the put declares them so the daemon checks too. A
 * file of another dtype is refused unless --convert asks to convert it with the kernels' rules
 * (kernels/dtype.c, README "Checked puts"): floats to f16/bf16 round to nearest even, floats to
 * integers truncate toward zero and saturate (NaN gives 0), integers wrap like C casts to
 * unsigned, integers to floats round to nearest. A file of another shape is always refused. */
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
  char have[160], want[160], msg[512];
  shape_text(have, sizeof have, ts_dtype_name(arr->dtype), arr->ndim, arr->shape);
  shape_text(want, sizeof want, info->dtype, info->ndim, info->shape);
  bool same_shape = arr->ndim == info->ndim;
  for (int d = 0; same_shape && d < arr->ndim; d++)
    same_shape = arr->shape[d] == info->shape[d];
  if (!same_shape) {
    snprintf(msg, sizeof msg, "put %s: %s is %s but the tensor '%s' is %s; reshape the data (the "
             "shape must match exactly)", name, file, have, name, want);
    return cli_fail(CLI_FAILED, msg);
  }
  if (arr->dtype == tdt)
    return CLI_OK;
  if (!cli_flag(a, "convert")) {
    snprintf(msg, sizeof msg, "put %s: %s is %s but the tensor '%s' is %s; add --convert to "
             "convert the values to %s (README: Checked puts), or write the file as %s", name,
             file, have, name, want, info->dtype, info->dtype);
    return cli_fail(CLI_FAILED, msg);
  }
  size_t n = arr->bytes / ts_dtype_size(arr->dtype);
  size_t bytes = n * ts_dtype_size(tdt);
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

int cli_put_checked(cli_args *a, tshard_client *c, const char *name, const char *file) {
  const char *attr = cli_opt(a, "attr"), *dt = cli_opt(a, "dtype"), *key = cli_opt(a, "key");
  ts_error err;
  ts_dtype hint = TS_DTYPE_COUNT;
  if (dt && ts_dtype_parse(dt, &hint, &err))
    return cli_fail(CLI_USAGE, err.msg);
  if (attr && cli_flag(a, "convert"))
    return cli_fail(CLI_USAGE, "--convert converts into an existing tensor; with --attr the new "
                               "tensor takes the file's dtype");
  tshard_info info = {0};
  int rc = TS_OK, code = CLI_OK;
  if (!attr && (rc = tshard_describe(c, name, &info)))
    return daemon_failed(c, rc);
  npy_array arr = {0};
  if (cli_npy_read(file, hint, &arr, &err)) {
    ts_error err2; /* a bf16 tensor takes a uint16 file as its bits */
    if (attr || hint != TS_DTYPE_COUNT || strcmp(info.dtype, "bf16") != 0 ||
        cli_npy_read(file, TS_BF16, &arr, &err2)) {
      tshard_info_clear(&info);
      return cli_fail(CLI_IO, err.msg);
    }
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
      printf(", \"bytes\": %zu, \"dtype\": \"%s\", \"file\": ", arr.bytes, ts_dtype_name(arr.dtype));
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
