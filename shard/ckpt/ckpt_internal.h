/* ckpt_internal.h - what the files of libtsckpt (save, load, the move path and the block
 * checksums) share: the block tables, the load's reader and its ranged reads, and the
 * read-once-then-move plan; with ckpt_index_internal.h (shard/ckpt/index/) for the files, block
 * sizes and helpers they share with the index. Internal to shard/ckpt/. */
#ifndef TS_CKPT_INTERNAL_H
#define TS_CKPT_INTERNAL_H

/* XXH3-64 through libxxhash's x86 dispatcher (its AVX2 / AVX-512 code where the CPU has them,
 * about three times the plain build's speed here): XXH3_64bits and XXH3_64bits_update name the
 * dispatching functions. */
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#include "ckpt_index_internal.h"
#include "ts_ckpt.h"
#include "ts_comm.h"

/* ---------------------------------------------------------------------------------------------
 * Block checksums (ckpt_blocks.c) */

/* The table of `bytes` bytes: XXH3-64 of each block, little-endian, into table (count * 8
 * bytes). */
void ts__ckpt_blocks_hash(const void *bytes, int64_t len, int64_t block, uint8_t *table);

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
  int64_t len;                                      /* elements per run */
  int64_t count;                                    /* runs */
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
 * buffer (the reader's ranger), every block read checked against the piece's table (itself checked
 * against the index first). The piece must have a table. */
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

/* ---------------------------------------------------------------------------------------------
 * Save (ckpt_save.c), shared with the asynchronous save (ckpt_async.c) */

/* One piece of the save plan. */
typedef struct spiece {
  ts_box box;
  int writer; /* world rank */
  int64_t bytes;
  int slice; /* the distinct slice it is a chunk of */
  int npc;
  int64_t pc[TS_MAX_MESH_DIMS];
  int64_t offset;  /* in the writer's file (absolute), on the writer */
  int64_t toffset; /* its block checksum table's (absolute), on the writer */
  char key[TS_NAME_MAX + 24];
  char tkey[TS_NAME_MAX + 32]; /* the table's key: "<key>.blocks" */
} spiece;

typedef struct stensor {
  ts_stored *t;
  ts_attr *attr; /* what is saved: the stored attribute, or with R in place of P */
  bool reduce;   /* partial: reduce into `attr` first */
  int npieces;
  spiece *pieces;
  char *attr_text;
  /* the tensor's description, copied at planning (an asynchronous save outlives the tensor) */
  char name[TS_NAME_MAX];
  ts_dtype dtype;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  bool partial;
} stensor;

/* The plan of a save: the tensors (names NULL: every tensor of the store), each found, named once
 * and cut into pieces with their writers; load[] counts each rank's bytes to write. */
int ts__ckpt_plan_tensors(ts_store *s, const char *const *names, int nt, const ts_ckpt_save_opts *o,
                          stensor *ts, int64_t *load, ts_error *err);
void ts__ckpt_plan_free(stensor *ts, int nt); /* accepts NULL */
/* The lowest world rank on this node (collective). */
int ts__ckpt_node_leader(ts_comm *c, int rank, int size, int *leader, ts_error *err);
/* What a save may replace (the directory's leader, before anything is written): nothing or an
 * empty directory (*replace false), a tshard checkpoint (*replace true), else refused. */
int ts__ckpt_check_target(const char *target, bool refuse_existing, bool *replace, ts_error *err);
int ts__ckpt_prepare_dirs(const char *target, const char *tmp, bool refuse_existing, bool *exists,
                          int *lock_fd, ts_error *err);
/* PARENT/.BASE.tmp-STAMP, one name on every rank (collective). */
int ts__ckpt_tmp_name(ts_comm *c, int rank, const char *parent, const char *base, char *tmp,
                      size_t cap, ts_error *err);
/* This rank's file (nmine of the pieces are its): offsets laid out, created 0600 with its
 * header. */
int ts__ckpt_open_file(stensor *ts, int nt, int nmine, int rank, const char *path, int *fd,
                       ts_error *err);
/* Checksums as non-negative 32-bit halves, -1 for other ranks' pieces (gathered by a max). */
void ts__ckpt_pack_hashes(const stensor *ts, int nt, int rank, const uint64_t *hashes, int64_t *hv);
/* The leaders: index.json into tmp (with the snapshot sequence when > 0), synced with it. */
int ts__ckpt_write_index(stensor *ts, int nt, int size, const int64_t *hv, bool keep_partial,
                         int64_t sequence, const char *tmp, ts_error *err);
/* The leaders: tmp moved into place as target (exchanged when `exists`, the old one removed). */
int ts__ckpt_into_place(const char *tmp, const char *target, const char *parent, bool exists,
                        ts_error *err);
/* The slice a tensor's pieces are written from, or its reduction (collective; see ckpt_save.c). */
int ts__ckpt_source(ts_world *w, const stensor *st, int64_t staging, int prior,
                    const ts_error *prior_err, ts_tensor *reduced, const ts_tensor **src,
                    ts_error *err);
/* Writes one piece from the slice `src` (in its layout, slice_box its box) at p->offset and its
 * block checksum table at p->toffset; hashes both; adds its bytes to *written. Any thread. */
int ts__ckpt_write_piece(int fd, const char *path, const ts_tensor *src, const ts_box *slice_box,
                         spiece *p, ts_dtype dt, uint64_t *hash, uint64_t *thash, int64_t *written,
                         ts_error *err);
/* The write-failure test hook's setting for the next save (-1: off), turned off by taking it. */
int64_t ts__ckpt_fail_take(bool *kill);

#endif
