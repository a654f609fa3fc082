/* npy.h - reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0) for the tshard
 * command-line tool. Internal to the CLI. */
#ifndef TSHARD_CLI_NPY_H
#define TSHARD_CLI_NPY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ts_kernels.h"

/* An array in C order, native byte order. bf16 is stored in .npy files as '<u2' (numpy has no
 * bfloat16): a reader takes such a file as bf16 only when asked (NPY_BF16_BITS). */
typedef struct npy_array {
  ts_dtype dtype;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  void *data;
  size_t bytes;
  const char *widened_from; /* numpy's name of the file's dtype when it was widened, else NULL */
} npy_array;

/* How a file's element type is taken: exactly (the numpy dtypes with a tshard dtype), widened
 * (also bool, int16, uint16, uint32 and uint64, losslessly to u8, i32 or i64, as --convert
 * does), or as bf16 bit patterns (a uint16 or int16 file, --bf16-bits). */
typedef enum { NPY_EXACT, NPY_WIDEN, NPY_BF16_BITS } npy_mode;

/* Reads a whole .npy file in the given mode (see cli_npy_read for the rest). */
int cli_npy_read_as(const char *path, npy_mode mode, npy_array *out, ts_error *err);
/* Reads a whole .npy file. Fortran-order files are reordered to C order, big-endian ones are
 * byte-swapped. dtype_hint: TS_DTYPE_COUNT for "as the file says", or TS_BF16 to read '<u2' as
 * bf16. Errors name the file and what was wrong. */
int cli_npy_read(const char *path, ts_dtype dtype_hint, npy_array *out, ts_error *err);
/* Writes a C-order .npy file (version 1.0, or 2.0 when the header needs it). */
int cli_npy_write(const char *path, const npy_array *a, ts_error *err);
/* The header of a .npy file for the array (what cli_npy_write writes first); for writing in
 * chunks. */
int cli_npy_write_header(FILE *f, ts_dtype dt, int ndim, const int64_t *shape, ts_error *err);
void cli_npy_free(npy_array *a);

#endif
