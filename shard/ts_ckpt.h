/* ts_ckpt.h - checkpoints of the tensor store: save stored tensors into a directory (one
 * safetensors-layout file per writing rank plus a JSON index, written into a temporary directory
 * and renamed into place only after every rank agreed) and load them back under any attribute on
 * any number of ranks (each rank preads the byte ranges of the pieces that meet its target box).
 * The format is documented in shard/CHECKPOINT.md.
 *
 * The index part (ckpt_index.c: reading and writing the index and the file headers) needs no MPI
 * and is its own library (libtsckptidx) for `tshard checkpoint show`; save and load (libtsckpt)
 * are collective over the whole world: every rank calls them with the same arguments, in the same
 * order, and every rank returns the same status and message. */
#ifndef TS_CKPT_H
#define TS_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "ts_shard.h"

#define TS_CKPT_INDEX "index.json"
#define TS_CKPT_FORMAT "tshard-checkpoint"
#define TS_CKPT_VERSION 1

/* ---------------------------------------------------------------------------------------------
 * The index in memory (ckpt_index.c) */
typedef struct ts_ckpt_piece {
  char file[64];         /* the file holding it, relative to the checkpoint directory */
  char key[TS_NAME_MAX + 24]; /* its name in that file's header: "<tensor>#<piece number>" */
  ts_box box;            /* the global box it covers */
  uint64_t xxh3;         /* XXH3-64 of its row-major little-endian bytes */
  /* Its block checksums (0 block_bytes: none): a table of XXH3-64 of each block_bytes bytes of
   * the piece (the last block shorter), stored in its file as the U64 entry block_key; the
   * index holds the table's own XXH3-64. Loads read parts of a piece through it. */
  int64_t block_bytes;
  char block_key[TS_NAME_MAX + 32];
  uint64_t block_xxh3;
  int npcoord;           /* kept partial pieces: coordinates along the partial mesh dims */
  int64_t pcoord[TS_MAX_MESH_DIMS];
} ts_ckpt_piece;

typedef struct ts_ckpt_tensor {
  char name[TS_NAME_MAX];
  ts_dtype dtype;
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  char *attr;        /* the attribute's canonical text at save time (malloc'd) */
  bool partial_kept; /* pieces are partial values (saved with keep_partial) */
  int npieces;
  ts_ckpt_piece *pieces;
} ts_ckpt_tensor;

typedef struct ts_ckpt_index {
  int ntensors;
  ts_ckpt_tensor *tensors;
  int saved_ranks; /* the world size at save time */
} ts_ckpt_index;

/* Reads DIR/index.json; every field is checked (errors name the file and the field). */
int ts_ckpt_index_read(const char *dir, ts_ckpt_index **out, ts_error *err);
/* Writes the index as JSON to path (fsynced). */
int ts_ckpt_index_write(const ts_ckpt_index *idx, const char *path, ts_error *err);
void ts_ckpt_index_destroy(ts_ckpt_index **p);
const ts_ckpt_tensor *ts_ckpt_index_find(const ts_ckpt_index *idx, const char *name);
/* A human-readable description of the index (malloc'd; NULL when out of memory). */
char *ts_ckpt_index_describe(const ts_ckpt_index *idx, const char *dir);
/* The safetensors dtype name of a dtype ("F32", "BF16", ...) and back. */
const char *ts_ckpt_dtype_name(ts_dtype dt);
int ts_ckpt_dtype_parse(const char *text, ts_dtype *out);

/* ---------------------------------------------------------------------------------------------
 * Save and load (ckpt_save.c, ckpt_load.c): collective over the whole world. */
typedef struct ts_ckpt_save_opts {
  bool keep_partial; /* partial tensors: save every partial piece instead of the reduced value */
  bool per_node;     /* DIR is a per-node path: each node writes its ranks' files and an index */
  int64_t staging_bytes; /* bound of the packing buffer for non-row-major slices (0: 64 MiB) */
  /* Pieces larger than twice this are cut into chunks of about this many bytes (along the first
   * and the last dim, shard/CHECKPOINT.md), each a piece of the index: 0 is
   * TS_CKPT_CHUNK_DEFAULT, < 0 keeps whole pieces (kept-partial pieces are never cut). */
  int64_t chunk_bytes;
} ts_ckpt_save_opts;

/* The default chunk size of saves: 16 MiB, so that a [16384, 16384] f32 slice is cut into
 * [1024, 4096] chunks and a load splitting the columns 2, 4, ... 16 ways reads whole chunks. */
#define TS_CKPT_CHUNK_DEFAULT ((int64_t)16 << 20)
/* A save refuses chunk sizes that would cut one tensor into more pieces than this (each is an
 * index entry with its checksum: chunks far below a page only bloat the index). */
#define TS_CKPT_MAX_PIECES ((int64_t)1 << 20)

/* How a load reads a tensor (shard/CHECKPOINT.md, "What load reads"): auto picks by estimated
 * cost; the others force a path (tests, benchmarks). */
typedef enum {
  TS_CKPT_PATH_AUTO = 0,
  TS_CKPT_PATH_DIRECT, /* each rank preads what its box needs of every piece meeting it */
  TS_CKPT_PATH_MOVE    /* each piece read once, whole, by one rank, then moved to the boxes */
} ts_ckpt_path;

typedef struct ts_ckpt_load_opts {
  bool per_node;       /* read from the per-node directory (each rank finds its pieces there) */
  int64_t staging_bytes; /* verify buffer, move rounds and reshard staging (0: 64 MiB) */
  ts_ckpt_path path;   /* the same on every rank */
} ts_ckpt_load_opts;

typedef struct ts_ckpt_report {
  int tensors;
  int64_t bytes_written, bytes_read; /* this rank */
  int64_t bytes_verified_extra;      /* this rank: read only to verify a checksum (the rest of
                                      * a piece, or of the blocks at a run's edges, and tables) */
  int tensors_moved; /* loads: tensors read through the move path (the same on every rank) */
  int64_t ranged_reads;   /* loads, this rank: pieces read in part through their block tables */
  bool ranged_io_uring;   /* ... those reads batched through io_uring (else preadv) */
} ts_ckpt_report;

/* Saves the named tensors (names NULL or n 0: all) of the store into dir. Atomic: the previous
 * content of dir stays until every rank agreed the new one is complete and synced. */
int ts_ckpt_save(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                 const ts_ckpt_save_opts *o, ts_ckpt_report *rep, ts_error *err);
/* Loads the named tensors (NULL or 0: all of the index) into new tensors of the store, under
 * attr (NULL: each tensor's saved attribute), in row-major slices. No tensor is created unless
 * every one loaded on every rank. */
int ts_ckpt_load(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                 const ts_attr *attr, const ts_ckpt_load_opts *o, ts_ckpt_report *rep,
                 ts_error *err);

/* Test hooks, per process (so one rank can be made to fail): the next save's file writes fail
 * with EIO after `after_bytes` bytes (-1 turns it off); kill: the process kills itself instead. */
void ts_ckpt_debug_fail_write(int64_t after_bytes, bool kill);

#endif
