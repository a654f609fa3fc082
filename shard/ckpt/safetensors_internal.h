/* safetensors_internal.h - what the Hugging Face safetensors files of libtsckpt share
 * (safetensors_format.c parses and checks them, safetensors_import.c reads slices out of them,
 * safetensors_export.c writes them): a model opened for reading (one file, or the files of an HF
 * index) with every tensor's dtype, shape and absolute byte range checked against its file.
 * Internal to shard/ckpt/. The format: shard/ckpt/SAFETENSORS.md. */
#ifndef TS_SAFETENSORS_INTERNAL_H
#define TS_SAFETENSORS_INTERNAL_H

#include <jansson.h>

#include "ckpt_index_internal.h"

/* The largest JSON header (and HF index) accepted, as the safetensors format itself. */
#define ST_HEADER_MAX ((int64_t)100 << 20)

typedef struct st_file {
  char *path;
  int fd;
  int64_t size, data_start;
} st_file;

typedef struct st_tensor {
  char *name; /* its name in the file (checked text) */
  ts_dtype dtype;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  int file;           /* index into st_model.files */
  int64_t offset;     /* absolute offset of its bytes in the file */
  int64_t bytes;
} st_tensor;

typedef struct st_model {
  int nfiles, ntensors;
  st_file *files;
  st_tensor *tensors;
  json_t *metadata; /* the first file's __metadata__ (an object), or NULL */
} st_model;

/* Opens PATH: a .safetensors file, or an HF index (a name ending in .json, its weight_map naming
 * files of the same directory). Every header is read and checked whole (entries, dtypes, shapes
 * against their bytes, offsets inside the file and not overlapping). Errors name the file and
 * the tensor: TS_CORRUPT, TS_BAD_DTYPE (a dtype tshard has not), TS_NOT_FOUND, TS_CHECKPOINT_IO. */
int ts__st_open(const char *path, st_model **out, ts_error *err);
void ts__st_close(st_model **p);
const st_tensor *ts__st_find(const st_model *m, const char *name);

#endif
