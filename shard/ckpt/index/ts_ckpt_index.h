/* ts_ckpt_index.h - the public header of libtsckptidx (shard/ckpt/index/): the checkpoint's index
 * (index.json) in memory, read, checked, written and described, without MPI, for `tshard
 * checkpoint show` and for save and load (libtsckpt, shard/ckpt/ts_ckpt.h). The format is
 * documented in shard/ckpt/CHECKPOINT.md. */
#ifndef TS_CKPT_INDEX_H
#define TS_CKPT_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "ts_plan.h"

#define TS_CKPT_INDEX "index.json"
#define TS_CKPT_FORMAT "tshard-checkpoint"
#define TS_CKPT_VERSION 1
/* A save refuses chunk sizes that would cut one tensor into more pieces than this, and the index
 * reader tensors of more (each is an index entry with its checksum: chunks far below a page only
 * bloat the index). */
#define TS_CKPT_MAX_PIECES ((int64_t)1 << 20)

/* ---------------------------------------------------------------------------------------------
 * The index in memory (ckpt_index.c) */
typedef struct ts_ckpt_piece {
  char file[64];              /* the file holding it, relative to the checkpoint directory */
  char key[TS_NAME_MAX + 24]; /* its name in that file's header: "<tensor>#<piece number>" */
  ts_box box;                 /* the global box it covers */
  uint64_t xxh3;              /* XXH3-64 of its row-major little-endian bytes */
  /* Its block checksums (0 block_bytes: none): a table of XXH3-64 of each block_bytes bytes of
   * the piece (the last block shorter), stored in its file as the U64 entry block_key; the
   * index holds the table's own XXH3-64. Loads read parts of a piece through it. */
  int64_t block_bytes;
  char block_key[TS_NAME_MAX + 32];
  uint64_t block_xxh3;
  int npcoord; /* kept partial pieces: coordinates along the partial mesh dims */
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
  /* Snapshots: the job's snapshot sequence number (1, 2, ... in the order they were taken,
   * continued across resumes); 0: none recorded (a client's save, or an older snapshot). */
  int64_t sequence;
} ts_ckpt_index;

/* Reads DIR/index.json; every field is checked (errors name the file and the field). */
int ts_ckpt_index_read(const char *dir, ts_ckpt_index **out, ts_error *err);
/* Only the format and the snapshot sequence of DIR/index.json (0: none recorded), the file opened
 * as ts_ckpt_index_read opens it; for ordering snapshots without checking every piece. */
int ts_ckpt_index_sequence(const char *dir, int64_t *sequence, ts_error *err);
/* The largest sequence an index may record (a JSON number every reader holds exactly). */
#define TS_CKPT_SEQUENCE_MAX ((int64_t)1 << 53)
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
 * Temporary directories of saves cut short (ckpt_clean.c) */
/* Opens the temporary directory tmp and takes its exclusive lock (held while the save writes,
 * until close): the fd, or -1. */
int ts_ckpt_tmp_lock(const char *tmp);
/* What ts_ckpt_clean_tmp did: the paths removed and those left because a save holds them, one
 * per line (malloc'd, NULL when none). */
typedef struct ts_ckpt_cleaned {
  int nremoved, nbusy;
  char *removed, *busy;
} ts_ckpt_cleaned;
/* Removes the temporary directories that saves into dir left beside it (PARENT/.BASE.tmp-HEX)
 * when no save holds them. dir itself is not touched. */
int ts_ckpt_clean_tmp(const char *dir, ts_ckpt_cleaned *out, ts_error *err);
void ts_ckpt_cleaned_clear(ts_ckpt_cleaned *c); /* accepts NULL */

#endif
