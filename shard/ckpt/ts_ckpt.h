/* ts_ckpt.h - checkpoints of the tensor store: save stored tensors into a directory (one
 * safetensors-layout file per writing rank plus a JSON index, written into a temporary directory
 * and renamed into place only after every rank agreed) and load them back under any attribute on
 * any number of ranks (each rank preads the byte ranges of the pieces that meet its target box).
 * The format is documented in shard/ckpt/CHECKPOINT.md. This is the public header of libtsckpt
 * (shard/ckpt/).
 *
 * The index part (shard/ckpt/index/: reading and writing the index and the file headers) needs no
 * MPI and is its own library (libtsckptidx, ts_ckpt_index.h) for `tshard checkpoint show`; save
 * and load (libtsckpt) are collective over the whole world: every rank calls them with the same
 * arguments, in the same order, and every rank returns the same status and message. */
#ifndef TS_CKPT_H
#define TS_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "ts_ckpt_index.h"
#include "ts_shard.h"

/* ---------------------------------------------------------------------------------------------
 * Save and load (ckpt_save.c, ckpt_load.c): collective over the whole world. */
typedef struct ts_ckpt_save_opts {
  bool keep_partial; /* partial tensors: save every partial piece instead of the reduced value */
  bool per_node;     /* DIR is a per-node path: each node writes its ranks' files and an index */
  int64_t staging_bytes; /* bound of the packing buffer for non-row-major slices (0: 64 MiB) */
  /* Pieces larger than twice this are cut into chunks of about this many bytes (along the first
   * and the last dim, shard/ckpt/CHECKPOINT.md), each a piece of the index: 0 is
   * TS_CKPT_CHUNK_DEFAULT, < 0 keeps whole pieces (kept-partial pieces are never cut). */
  int64_t chunk_bytes;
  /* > 0: recorded in the index as the snapshot's sequence number (ts_ckpt_index.sequence, up to
   * TS_CKPT_SEQUENCE_MAX); 0: none. The same on every rank. */
  int64_t sequence;
  /* true: a target that already holds a checkpoint is refused (TS_EXISTS) instead of replaced */
  bool refuse_existing;
} ts_ckpt_save_opts;

/* The default chunk size of saves: 16 MiB, so that a [16384, 16384] f32 slice is cut into
 * [1024, 4096] chunks and a load splitting the columns 2, 4, ... 16 ways reads whole chunks. */
#define TS_CKPT_CHUNK_DEFAULT ((int64_t)16 << 20)

/* How a load reads a tensor (shard/ckpt/CHECKPOINT.md, "What load reads"): auto picks by estimated
 * cost; the others force a path (tests, benchmarks). */
typedef enum {
  TS_CKPT_PATH_AUTO = 0,
  TS_CKPT_PATH_DIRECT, /* each rank preads what its box needs of every piece meeting it */
  TS_CKPT_PATH_MOVE    /* each piece read once, whole, by one rank, then moved to the boxes */
} ts_ckpt_path;

typedef struct ts_ckpt_load_opts {
  bool per_node;         /* read from the per-node directory (each rank finds its pieces there) */
  int64_t staging_bytes; /* verify buffer, move rounds and reshard staging (0: 64 MiB) */
  ts_ckpt_path path;     /* the same on every rank */
  /* Attribute rules (proto/ts_rules.h): a tensor takes rule_attrs[k] of the rule k that
   * ts_attr_rule_pick chooses for its name (none, or an entry NULL: the load's attr, else its
   * saved attribute). A rule naming a tensor exactly that the checkpoint lacks is refused. */
  int nrules;
  const char *const *rule_patterns;
  const ts_attr *const *rule_attrs;
  /* Into the stored tensors of the names instead of new ones, each keeping its attribute and
   * layout (no rules, no attr): each must have its saved dtype and shape (else nothing is
   * loaded and the error names every mismatch); all are loaded beside the stored slices first
   * (room for a second copy), then every one replaced at once, or none. */
  bool in_place;
} ts_ckpt_load_opts;

typedef struct ts_ckpt_report {
  int tensors;
  int64_t bytes_written, bytes_read; /* this rank */
  int64_t bytes_verified_extra;      /* this rank: read only to verify a checksum (the rest of
                                      * a piece, or of the blocks at a run's edges, and tables) */
  int tensors_moved;    /* loads: tensors read through the move path (the same on every rank) */
  int64_t ranged_reads; /* loads, this rank: pieces read in part through their block tables */
  bool ranged_io_uring; /* ... those reads batched through io_uring (else preadv) */
  int64_t bytes_total;  /* the whole checkpoint's piece bytes (saves: written, loads: loaded) */
  int files;            /* saves: data files and the index; loads: data files holding the tensors */
} ts_ckpt_report;

/* Saves the named tensors (names NULL or n 0: all) of the store into dir. Atomic: the previous
 * content of dir stays until every rank agreed the new one is complete and synced. */
int ts_ckpt_save(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                 const ts_ckpt_save_opts *o, ts_ckpt_report *rep, ts_error *err);
/* Loads the named tensors (NULL or 0: all of the index) into new tensors of the store, under
 * their rule's attribute (o->rule_*), else attr (NULL: each tensor's saved attribute), in
 * row-major slices. No tensor is created unless
 * every one loaded on every rank. */
int ts_ckpt_load(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                 const ts_attr *attr, const ts_ckpt_load_opts *o, ts_ckpt_report *rep,
                 ts_error *err);

/* The asynchronous save (ckpt_async.c): the same checkpoint as ts_ckpt_save, in three steps.
 * ts_ckpt_save_begin (collective, same arguments on every rank) plans it, makes the temporary
 * directory and copies every piece this rank writes into pool memory (staging, under the memory
 * limit: TS_LIMIT naming the bytes when the copy does not fit), so that the tensors may change
 * or go once it returned. ts_ckpt_job_write (no MPI; one thread, any) writes this rank's file
 * from the copy, ts_ckpt_save_end (collective) agrees, writes the index and moves the checkpoint
 * into place, or removes the temporary directory leaving the previous checkpoint as it was. */
typedef struct ts_ckpt_job ts_ckpt_job;
typedef struct ts_ckpt_progress {
  int64_t written, total; /* this rank's bytes written so far and to write */
  int64_t all_bytes;      /* every rank's */
  int files, tensors;
} ts_ckpt_progress;
int ts_ckpt_save_begin(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                       const ts_ckpt_save_opts *o, ts_ckpt_job **out, ts_error *err);
void ts_ckpt_job_write(ts_ckpt_job *j);
/* Safe from any thread while ts_ckpt_job_write runs. */
void ts_ckpt_job_progress(const ts_ckpt_job *j, ts_ckpt_progress *p);
/* Safe from any thread (accepts NULL): the writer stops before its next piece and the save fails
 * with TS_SHUTDOWN, naming the bytes it wrote. */
void ts_ckpt_job_cancel(ts_ckpt_job *j);
/* Before the write: fn(arg) runs on the writer's thread after each piece it wrote (tests). */
void ts_ckpt_job_on_piece(ts_ckpt_job *j, void (*fn)(void *arg), void *arg);
/* The temporary directory this rank created for the save (the directory's leader), else NULL. */
const char *ts_ckpt_job_tmp(const ts_ckpt_job *j);
/* May be called while ts_ckpt_job_write still runs on another thread (it was cancelled and did
 * not return in time): this rank then brings TS_SHUTDOWN to the agreement, every rank fails and
 * the leaders remove the temporary directory; the job must then not be destroyed until the
 * writer returned. */
int ts_ckpt_save_end(ts_ckpt_job *j, ts_world *w, ts_ckpt_report *rep, ts_error *err);
/* Accepts NULL; a job not ended by ts_ckpt_save_end removes its temporary directory (leaders).
 * Only once ts_ckpt_job_write returned (or never ran). */
void ts_ckpt_job_destroy(ts_ckpt_job **j);
/* Removes the checkpoint dir: only a tshard checkpoint (an empty directory stays; anything else
 * is refused as a save would refuse to replace it, and left untouched). */
int ts_ckpt_remove(const char *dir, ts_error *err);

/* Test hooks, per process (so one rank can be made to fail): the next save's file writes fail
 * with EIO after `after_bytes` bytes (-1 turns it off); kill: the process kills itself instead. */
void ts_ckpt_debug_fail_write(int64_t after_bytes, bool kill);

/* ---------------------------------------------------------------------------------------------
 * Hugging Face safetensors (safetensors_*.c, shard/ckpt/SAFETENSORS.md): collective over the whole
 * world like save and load; every rank returns the same status and message. */

/* What an import takes from a `model.safetensors` file or an HF `*.index.json`: the file's
 * names are mapped (a rename table first, else strip_prefix removed from the names starting with
 * it) to tshard names, and each tensor imported needs an attribute (attrs by tshard name, an
 * entry NULL or absent: default_attr). The tensors imported: `names` when given, else every tensor
 * of the file(s) when default_attr is set, else those attrs names. */
typedef struct ts_st_import_spec {
  const char *path;
  const char *strip_prefix; /* NULL or "": none */
  int nrename;
  const char *const *rename_from, *const *rename_to;
  int nnames;
  const char *const *names;
  int nattrs;
  const char *const *attr_names;
  const ts_attr *const *attrs;
  const ts_attr *default_attr; /* NULL: none */
} ts_st_import_spec;

/* Names created by an import or files written by an export (malloc'd; ts_st_result_clear). */
typedef struct ts_st_result {
  int n;
  char **items;
  int64_t bytes; /* this rank: read (import) or written (export) */
  bool mapped;   /* export: written through shared mappings of the files (else pwrite) */
} ts_st_result;
void ts_st_result_clear(ts_st_result *r);

/* Creates the tensors in row-major slices; each rank preads only the byte runs of its own box.
 * Each tensor keeps its file's __metadata__ by reference in its store entry (ts_stored.kept) for
 * as long as the entry lives; that and the reading of the headers count against the buffer
 * pool's limit (TS_LIMIT naming the bytes). Atomic: on any failure on any rank no tensor is
 * created. */
int ts_st_import(ts_store *s, ts_world *w, const ts_st_import_spec *spec, ts_st_result *res,
                 ts_error *err);

/* Writes the named stored tensors (names NULL or n 0: all, by name) into the safetensors file
 * `path`, or, when their bytes exceed max_shard_bytes (> 0), into HF shards
 * `<stem>-00001-of-0000N.safetensors` beside it and `<path>.index.json`. Each rank pwrites the
 * byte runs of its own part of each slice (replicas share the writing); every file is written
 * under a temporary name (O_EXCL, O_NOFOLLOW, 0600) and renamed into place after every rank
 * agreed. meta: nmeta key/value pairs of __metadata__ (0: the metadata every tensor written keeps
 * from its import when all keep the same, else {"format": "pt"}). A tensor named __metadata__
 * is refused (TS_INVALID_ARGUMENT). */
int ts_st_export(ts_store *s, ts_world *w, const char *path, const char *const *names, int n,
                 int64_t max_shard_bytes, const char *const *meta_keys,
                 const char *const *meta_values, int nmeta, ts_st_result *res, ts_error *err);

#endif
