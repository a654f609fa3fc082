/* npy.h - reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0) for the tshard
 * command-line tool. Internal to the CLI. */
#ifndef TSHARD_CLI_NPY_H
#define TSHARD_CLI_NPY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ts_kernels.h"

/* An array in C order, native byte order. bf16 is stored in .npy files as '<u2', f8_e4m3 and
 * f8_e5m2 as '|u1' of their bits (numpy has none of them): a reader takes such a file as those
 * bits only when asked (NPY_BF16_BITS, NPY_F8_*_BITS). */
typedef struct npy_array {
  ts_dtype dtype;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  void *data;
  size_t bytes;
} npy_array;

/* How a file's element type is taken: exactly (numpy's dtype: bool, int8..uint64, float16..64),
 * or as bit patterns of bf16 (a uint16 or int16 file, --bf16-bits) or of an 8-bit float (a
 * uint8 or int8 file). */
typedef enum { NPY_EXACT, NPY_BF16_BITS, NPY_F8_E4M3_BITS, NPY_F8_E5M2_BITS } npy_mode;
/* The mode that reads data of dtype dt: its bits for bf16 and the 8-bit floats, else exact. */
npy_mode cli_npy_mode_for(ts_dtype dt);

/* Reads a whole .npy file in the given mode (see cli_npy_read for the rest). */
int cli_npy_read_as(const char *path, npy_mode mode, npy_array *out, ts_error *err);
/* Reads a whole .npy file. Fortran-order files are reordered to C order, big-endian ones are
 * byte-swapped. dtype_hint: TS_DTYPE_COUNT for "as the file says", or a dtype the file must
 * hold (TS_BF16 reads '<u2' as bf16, TS_F8_E4M3 and TS_F8_E5M2 read '|u1' as their bits). Errors
 * name the file and what was wrong. */
int cli_npy_read(const char *path, ts_dtype dtype_hint, npy_array *out, ts_error *err);
/* Writes a C-order .npy file (version 1.0, or 2.0 when the header needs it). */
int cli_npy_write(const char *path, const npy_array *a, ts_error *err);
/* The header of a .npy file for the array (what cli_npy_write writes first); for writing in
 * chunks. */
int cli_npy_write_header(FILE *f, ts_dtype dt, int ndim, const int64_t *shape, ts_error *err);
void cli_npy_free(npy_array *a);

#endif
