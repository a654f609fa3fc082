/* npy_roundtrip.c - test helper: reads a .npy file with the CLI's reader and writes it back with
 * its writer (C order, native little-endian), so that numpy can check both directions.
 *   tshard-npy-roundtrip IN.npy OUT.npy [DTYPE]   (the dtype the file must hold, e.g. bf16)
 * Prints the dtype and shape it read; exits 1 with the reader's message on an error. */
#include <stdio.h>
#include <string.h>

#include "npy.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: tshard-npy-roundtrip IN.npy OUT.npy [DTYPE]\n");
    return 2;
  }
  ts_error err;
  npy_array a;
  ts_dtype hint = TS_DTYPE_COUNT;
  if (argc > 3 && ts_dtype_parse(argv[3], &hint, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 2;
  }
  if (cli_npy_read(argv[1], hint, &a, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  printf("%s [", ts_dtype_name(a.dtype));
  for (int d = 0; d < a.ndim; d++)
    printf("%s%lld", d ? "," : "", (long long)a.shape[d]);
  printf("]\n");
  int rc = cli_npy_write(argv[2], &a, &err);
  if (rc)
    fprintf(stderr, "%s\n", err.msg);
  cli_npy_free(&a);
  return rc ? 1 : 0;
}
