/* ckpt_index_internal.h - what ckpt_index.c shares with save and load (shard/ckpt/) and nobody
 * else sees: the safetensors-layout files (header written by save, read and checked by load), the
 * block sizes the index accepts, full-length reads and writes, directory helpers (fsync, the
 * temporary directory's removal) and the texts of messages. Internal to libtsckptidx and
 * libtsckpt. */
#ifndef TS_CKPT_INDEX_INTERNAL_H
#define TS_CKPT_INDEX_INTERNAL_H

#include <jansson.h>
#include <sys/uio.h>

#include "ts_ckpt_index.h"

/* One piece in a file being written: key, dtype, extents, its byte range in the data section. */
typedef struct ckpt_entry {
  const char *key;
  ts_dtype dtype;
  int ndim;
  int64_t ext[TS_MAX_DIMS];
  int64_t begin, end; /* relative to the data section (safetensors data_offsets) */
  bool table;         /* a block checksum table: dtype U64, one dim (dtype unused) */
} ckpt_entry;

/* Where save puts piece bytes in a file: at multiples of this (see ts__ckpt_header_build). */
#define CKPT_DATA_ALIGN ((int64_t)4096)

/* The header of a file holding the entries: 8-byte little-endian length, then the JSON padded
 * with spaces to a multiple of 8 and so far that byte `aligned_at` of the data section (a
 * multiple of 8) lands on a multiple of CKPT_DATA_ALIGN in the file. *buf is malloc'd; *len its
 * bytes (the data section starts there). */
int ts__ckpt_header_build(const ckpt_entry *e, int n, int64_t aligned_at, uint8_t **buf,
                          size_t *len, ts_error *err);

/* A checkpoint file opened for reading, with its header parsed. */
typedef struct ckpt_file {
  char name[64];
  int fd;
  int64_t size;
  int64_t data_start;
  json_t *header;
} ckpt_file;

int ts__ckpt_file_open(const char *dir, const char *name, ckpt_file *f, ts_error *err);
/* The absolute offset of a piece's bytes, after checking that the header's entry agrees with the
 * index (dtype, shape = the box's extents, data_offsets inside the file and of the right size). */
int ts__ckpt_file_piece(const ckpt_file *f, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                        int64_t *offset, ts_error *err);
/* The same for a piece's block checksum table (dtype U64, shape [blocks]). */
int ts__ckpt_file_table(const ckpt_file *f, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                        int64_t *offset, ts_error *err);
void ts__ckpt_file_close(ckpt_file *f);

/* The block size save writes; the index reader accepts powers of two in [64, 1 MiB]. */
#define CKPT_BLOCK_BYTES ((int64_t)4096)
#define CKPT_BLOCK_MIN ((int64_t)64)
#define CKPT_BLOCK_MAX ((int64_t)1 << 20)
/* The blocks of a piece of `bytes` bytes. */
static inline int64_t ckpt_blocks_count(int64_t bytes, int64_t block) {
  return block > 0 ? bytes / block + (bytes % block != 0) : 0; /* no overflow near INT64_MAX */
}

/* Full-length pread/pwrite (EINTR and short transfers retried); -1 with errno on failure, or 0
 * from pread at the end of the file (errno then EIO). */
int ts__ckpt_pread_full(int fd, void *buf, size_t len, int64_t off);
int ts__ckpt_pwrite_full(int fd, const void *buf, size_t len, int64_t off);
/* pwritev of all of iov (n entries, advanced as it goes) at off; -1 with errno on failure. */
int ts__ckpt_pwritev_full(int fd, struct iovec *iov, int n, int64_t off);
/* Opens a file of a checkpoint for reading (`what` names it in messages: "checkpoint file"):
 * without blocking on a FIFO and without following a symbolic link, then checks with fstat that it
 * is a regular file and makes its reads blocking again (preadv, io_uring). A FIFO, a symbolic
 * link, a directory, a device or a socket is TS_CORRUPT naming the path; a missing file
 * TS_NOT_FOUND. *size: its size from fstat. */
int ts__ckpt_open_regular(const char *what, const char *path, int *fd, int64_t *size,
                          ts_error *err);
/* s for a message: quotes, backslashes, control characters (C0, DEL and the C1 controls U+0080 to
 * U+009F) and bytes that are not UTF-8 escaped as \t \n \xNN \u0085 ...; cut to cap - 1
 * bytes (never inside an escape or a character). */
void ts__ckpt_text_escape(const char *s, char *out, size_t cap);
/* fsync of a directory by path. */
int ts__ckpt_fsync_dir(const char *path, ts_error *err);
/* Removes a directory this code made: its regular files, then itself (not recursive further). */
void ts__ckpt_remove_dir(const char *path);
/* Splits dir into its parent and last component (trailing slashes ignored). */
int ts__ckpt_split_path(const char *dir, char *parent, size_t pcap, char *base, size_t bcap,
                        ts_error *err);

/* The text of a box: "[0:4,2:8]". */
void ts__ckpt_box_text(const ts_box *b, char *buf, size_t cap);

#endif
