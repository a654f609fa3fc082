/* ckpt_internal.h - what the checkpoint files share: the safetensors-layout files (header
 * written by save, read and checked by load), directory helpers (fsync, the temporary directory's
 * removal) and the pieces of a tensor under an attribute. Internal to shard/ckpt_*.c. */
#ifndef TS_CKPT_INTERNAL_H
#define TS_CKPT_INTERNAL_H

#include <jansson.h>
#include <sys/uio.h>
/* XXH3-64 through libxxhash's x86 dispatcher (its AVX2 / AVX-512 code where the CPU has them,
 * about three times the plain build's speed here): XXH3_64bits and XXH3_64bits_update name the
 * dispatching functions. */
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#include "ts_ckpt.h"

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

/* ---------------------------------------------------------------------------------------------
 * Block checksums (ckpt_blocks.c) */

/* The block size save writes; the index reader accepts powers of two in [64, 1 MiB]. */
#define CKPT_BLOCK_BYTES ((int64_t)4096)
#define CKPT_BLOCK_MIN ((int64_t)64)
#define CKPT_BLOCK_MAX ((int64_t)1 << 20)
/* The blocks of a piece of `bytes` bytes. */
static inline int64_t ckpt_blocks_count(int64_t bytes, int64_t block) {
  return block > 0 ? bytes / block + (bytes % block != 0) : 0; /* no overflow near INT64_MAX */
}
/* The table of `bytes` bytes: XXH3-64 of each block, little-endian, into table (count * 8
 * bytes). */
void ts__ckpt_blocks_hash(const void *bytes, int64_t len, int64_t block, uint8_t *table);

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

/* ---------------------------------------------------------------------------------------------
 * Load (ckpt_load.c, ckpt_move.c) */

/* A load's files (at most CKPT_MAX_OPEN open, the oldest closed first), its verify buffer and
 * its report. */
#define CKPT_MAX_OPEN 64
typedef struct ckpt_ranger ckpt_ranger;
typedef struct ckpt_reader {
  const char *dir;
  ckpt_file files[CKPT_MAX_OPEN];
  int nfiles;
  uint8_t *vbuf; /* the direct path's verify buffer */
  size_t vcap;
  ckpt_ranger *ranger; /* the ranged reads' groups and io_uring (ckpt_blocks.c) */
  ts_ckpt_report *rep;
} ckpt_reader;

void ts__ckpt_ranger_destroy(ckpt_ranger **p);
/* Whether the ranged reads go through io_uring (else preadv). */
bool ts__ckpt_ranger_uses_ring(const ckpt_ranger *g);

/* The file descriptor and absolute offset of a piece's bytes: opens its file (errors name the
 * file and the piece) and checks the header's entry against the index. */
int ts__ckpt_reader_piece(ckpt_reader *r, const ts_ckpt_tensor *t, const ts_ckpt_piece *p, int *fd,
                          int64_t *offset, ts_error *err);
/* The same for the piece's block checksum table. */
int ts__ckpt_reader_table(ckpt_reader *r, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                          int64_t *offset, ts_error *err);
/* The verify buffer (r->vbuf, r->vcap bytes), allocated on first use. */
int ts__ckpt_reader_vbuf(ckpt_reader *r, ts_error *err);
void ts__ckpt_reader_close(ckpt_reader *r);
/* The errors of a piece: a checksum that differs from the index, a failed read (errno). */
int ts__ckpt_piece_mismatch(const ts_ckpt_tensor *t, const ts_ckpt_piece *p, uint64_t got,
                            ts_error *err);
int ts__ckpt_piece_io_fail(const ts_ckpt_tensor *t, const ts_ckpt_piece *p, ts_error *err);
/* pread of len bytes at off into dst in steps of CKPT_HASH_STEP, each hashed into st (NULL:
 * none) right after it arrived, while it is still in the cache. -1 with errno as
 * ts__ckpt_pread_full. */
#define CKPT_HASH_STEP ((size_t)1 << 20)
int ts__ckpt_pread_hashed(int fd, void *dst, size_t len, int64_t off, void *st);
/* The row-major element offset of index `at` inside box b. */
int64_t ts__ckpt_box_offset(const ts_box *b, const int64_t *at);

/* The runs of a box I inside box P (a piece, or any row-major source) and box B (the
 * destination): stretches contiguous in both (the dims after k0 are whole in I, P and B), in
 * P's row-major order. */
typedef struct ckpt_runs {
  const ts_box *I, *P, *B;
  int n, k0;
  int64_t ps[TS_MAX_DIMS + 1], bs[TS_MAX_DIMS + 1]; /* row-major element strides (ps[d+1]: dim d) */
  int64_t len;   /* elements per run */
  int64_t count; /* runs */
  int64_t idx[TS_MAX_DIMS];
  bool more;
} ckpt_runs;
void ts__ckpt_runs_init(ckpt_runs *it, const ts_box *I, const ts_box *P, const ts_box *B);
/* The next run's element offsets in P and in B (false: none left). */
bool ts__ckpt_runs_next(ckpt_runs *it, int64_t *poff, int64_t *boff);

/* Reads a whole piece (box P at absolute offset off of fd), which lies inside box B, into dst
 * (row-major over B): its runs, consecutive in the file, gathered into preadv calls of about
 * CKPT_HASH_STEP bytes, each hashed into state (an XXH3_state_t; NULL: none) right after it
 * arrived. -1 with errno (EIO: the file ended first). */
int ts__ckpt_read_whole(int fd, int64_t off, const ts_box *P, const ts_box *B, uint8_t *dst,
                        size_t es, void *state, int64_t *nread);

/* The ranged read (ckpt_blocks.c) of the part I of piece p (at absolute offset off of fd) into
 * dst, row-major over box B (I lies inside B and the piece): the runs of I, contiguous in the
 * file and in dst, read straight into dst, the rest of the blocks at their edges into a scratch
 * buffer (the reader's ranger), every block read checked against the piece's table (itself checked against the
 * index first). The piece must have a table. */
int ts__ckpt_read_ranges(ckpt_reader *r, int fd, int64_t off, const ts_ckpt_tensor *t,
                         const ts_ckpt_piece *p, const ts_box *I, const ts_box *B, uint8_t *dst,
                         ts_error *err);
/* The estimated cost, in bytes of sequential reading, of the direct path's read of I out of
 * piece p into box B: a piece inside B read whole; else its ranges through the table when it has
 * one, else the whole piece plus the copy out; a fixed cost per read call (CKPT_CALL_COST). */
#define CKPT_CALL_COST ((int64_t)24 << 10)
int64_t ts__ckpt_read_cost(const ts_ckpt_piece *p, const ts_box *I, const ts_box *B, size_t es);

/* The read-once-then-move path (ckpt_move.c). Its plan, the same on every rank (computed from
 * the index and the target geometry alone): every piece is read whole by one reader, a rank
 * whose target box meets it (the least loaded in bytes so far, the one needing most of it on a
 * tie); the readers read their pieces in chunks of at most round_bytes, one chunk per rank per
 * round, and each round's chunks move to every target box they meet in one all-to-all. */
typedef struct ckpt_move ckpt_move;
int ts__ckpt_move_plan(const ts_ckpt_tensor *t, const ts_geom *g, int world_size,
                       int64_t round_bytes, ckpt_move **out, ts_error *err);
/* The estimated cost (bytes read or copied by the busiest rank) of the direct path (each rank
 * reads every piece meeting its box whole: into its slice when the piece lies inside it, else
 * through the verify buffer) and of the move path (reading its pieces, one copy into every
 * target byte, a fixed cost per round). */
void ts__ckpt_move_costs(const ckpt_move *m, int64_t *direct, int64_t *move);
/* Runs the plan: collective over the world; prior is this rank's failure so far (TS_OK: none).
 * Two agreements (before the first read, after the last round); returns the agreed status and
 * message, e's slice filled on success. */
int ts__ckpt_move_run(const ckpt_move *m, ckpt_reader *r, ts_world *w, const ts_ckpt_tensor *t,
                      ts_stored *e, int prior, const ts_error *prior_err, ts_error *err);
void ts__ckpt_move_destroy(ckpt_move **p);

#endif
