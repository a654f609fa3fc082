/* safetensors_internal.h - what the Hugging Face safetensors files of libtsckpt share
 * (safetensors_format.c parses and checks them, safetensors_import.c reads slices out of them,
 * safetensors_export.c writes them): a model opened for reading (one file, or the files of an HF
 * index) with every tensor's dtype, shape and absolute byte range checked against its file, and
 * each file's __metadata__, which the tensors an import creates keep by reference (st_meta).
 * Internal to shard/ckpt/. The format: shard/ckpt/SAFETENSORS.md. */
#ifndef TS_SAFETENSORS_INTERNAL_H
#define TS_SAFETENSORS_INTERNAL_H

#include <jansson.h>

#include "ckpt_index_internal.h"
#include "ts_shard.h"

/* The format's dtypes tshard reads and writes, for the messages that list them. */
#define ST_DTYPES "F32 F64 F16 BF16 I8 I32 I64 U8 BOOL I16 U16 U32 U64 F8_E4M3 F8_E5M2"

/* The largest JSON header (and HF index) accepted, as the safetensors format itself. */
#define ST_HEADER_MAX ((int64_t)100 << 20)

/* A file's __metadata__ as tshard keeps it: the compact JSON text of an object of strings (keys
 * sorted), in one buffer of the buffer pool, so that it counts against the memory limit; held by
 * reference, never copied: the model holds one reference, and every tensor an import creates
 * from the file one more (ts_stored.kept, released by the store with its entry). Referenced and
 * released on the store's thread only. */
typedef struct st_meta {
  int64_t refs;
  size_t len; /* of text, without its NUL */
  char text[];
} st_meta;

/* The metadata object o of `file` (every value a string) as a new st_meta with one reference;
 * TS_LIMIT naming its bytes when the memory limit has no room for it. */
int ts__st_meta_make(const char *file, json_t *o, st_meta **out, ts_error *err);
st_meta *ts__st_meta_ref(st_meta *m);
/* Drops a reference (freeing the buffer with the last one); accepts NULL. The store's
 * kept_release of a tensor that keeps its file's metadata. */
void ts__st_meta_release(void *m);
/* The metadata a stored tensor keeps from its import, or NULL. */
const st_meta *ts__st_kept(const ts_stored *e);

/* What an import holds beside its tensors counted against the memory limit (ts_pool_charge):
 * the headers' text and parse while they are read, the model's entries and the import's lookups
 * until it ends. charged: the bytes this account holds. */
typedef struct st_charge {
  size_t charged;
} st_charge;
/* Adds bytes to the account: TS_LIMIT ("safetensors file 'file': <what> needs N bytes; F of the
 * memory limit of L bytes are free") when the limit has no room. */
int ts__st_charge(st_charge *c, const char *file, const char *what, size_t bytes, ts_error *err);
/* Gives back everything the account holds. */
void ts__st_uncharge(st_charge *c);

typedef struct st_file {
  char *path;
  int fd;
  int64_t size, data_start;
  st_meta *meta; /* its __metadata__, or NULL (none, null or empty) */
} st_file;

typedef struct st_tensor {
  char *name;              /* its name in the file (checked text) */
  ts_dtype dtype;          /* TS_DTYPE_COUNT: a dtype of the format tshard has not, */
  const char *unsupported; /* named here (static text); NULL otherwise */
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  int file;       /* index into st_model.files */
  int64_t offset; /* absolute offset of its bytes in the file */
  int64_t bytes;
} st_tensor;

typedef struct st_model {
  int nfiles, ntensors;
  st_file *files;
  st_tensor *tensors;
  const st_tensor **by_name; /* the tensors sorted by name (ts__st_find) */
  st_charge charge;          /* the entries and the lookups, until the model is closed */
} st_model;

/* Opens PATH: a .safetensors file, or an HF index (a name ending in .json, its weight_map naming
 * files of the same directory). Every header is read and checked whole (entries, dtypes, shapes
 * against their bytes, offsets inside the file and not overlapping, __metadata__ an object of
 * strings), in time O(n log n) in its entries, its memory counted against the limit. Errors name
 * the file and the tensor: TS_CORRUPT, TS_BAD_DTYPE (a dtype the format does not define),
 * TS_NOT_FOUND, TS_CHECKPOINT_IO, TS_LIMIT. An entry of a dtype the format defines and tshard has
 * not (st_tensor.unsupported) is checked alike and kept: ts__st_refuse_dtype refuses it when an
 * import asks for it. */
int ts__st_open(const char *path, st_model **out, ts_error *err);
/* TS_BAD_DTYPE naming t's file, name and dtype, and the dtypes tshard reads. */
int ts__st_refuse_dtype(const st_model *m, const st_tensor *t, ts_error *err);
void ts__st_close(st_model **p);
/* The model's tensor of this name (in the file), or NULL: O(log n). */
const st_tensor *ts__st_find(const st_model *m, const char *name);

#endif
