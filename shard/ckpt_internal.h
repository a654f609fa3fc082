/* ckpt_internal.h - what the checkpoint files share: the safetensors-layout files (header
 * written by save, read and checked by load), directory helpers (fsync, the temporary directory's
 * removal) and the pieces of a tensor under an attribute. Internal to shard/ckpt_*.c. */
#ifndef TS_CKPT_INTERNAL_H
#define TS_CKPT_INTERNAL_H

#include <jansson.h>

#include "ts_ckpt.h"

/* One piece in a file being written: key, dtype, extents, its byte range in the data section. */
typedef struct ckpt_entry {
  const char *key;
  ts_dtype dtype;
  int ndim;
  int64_t ext[TS_MAX_DIMS];
  int64_t begin, end; /* relative to the data section (safetensors data_offsets) */
} ckpt_entry;

/* The header of a file holding the entries: 8-byte little-endian length, then the JSON padded
 * with spaces to a multiple of 8. *buf is malloc'd; *len its bytes (the data section starts
 * there). */
int ckpt_header_build(const ckpt_entry *e, int n, uint8_t **buf, size_t *len, ts_error *err);

/* A checkpoint file opened for reading, with its header parsed. */
typedef struct ckpt_file {
  char name[64];
  int fd;
  int64_t size;
  int64_t data_start;
  json_t *header;
} ckpt_file;

int ckpt_file_open(const char *dir, const char *name, ckpt_file *f, ts_error *err);
/* The absolute offset of a piece's bytes, after checking that the header's entry agrees with the
 * index (dtype, shape = the box's extents, data_offsets inside the file and of the right size). */
int ckpt_file_piece(const ckpt_file *f, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                    int64_t *offset, ts_error *err);
void ckpt_file_close(ckpt_file *f);

/* Full-length pread/pwrite (EINTR and short transfers retried); -1 with errno on failure, or 0
 * from pread at the end of the file (errno then EIO). */
int ckpt_pread_full(int fd, void *buf, size_t len, int64_t off);
int ckpt_pwrite_full(int fd, const void *buf, size_t len, int64_t off);
/* fsync of a directory by path. */
int ckpt_fsync_dir(const char *path, ts_error *err);
/* Removes a directory this code made: its regular files, then itself (not recursive further). */
void ckpt_remove_dir(const char *path);
/* Splits dir into its parent and last component (trailing slashes ignored). */
int ckpt_split_path(const char *dir, char *parent, size_t pcap, char *base, size_t bcap,
                    ts_error *err);

/* The text of a box: "[0:4,2:8]". */
void ckpt_box_text(const ts_box *b, char *buf, size_t cap);

#endif
