/* ckpt_async.c - the asynchronous save: the same checkpoint as ts_ckpt_save (ckpt_save.c: the
 * same plan, files, index, temporary directory and atomic move into place), in three steps so
 * that the daemon can answer its client once the tensors are copied and write meanwhile.
 *
 * ts_ckpt_save_begin (collective) plans the save, checks the target, makes the temporary
 * directory, reduces partial tensors (collective, as the synchronous save does: the reduction is
 * then the copy), and copies the slice of every tensor this rank writes a piece of, as stored
 * (one memcpy: the layout and its padding kept), into a buffer of its own from the buffer pool
 * (staging, under the memory limit, checked for the whole copy before the first byte; the
 * agreement that ends it gives every rank the same outcome). After it the tensors may change or
 * go: the job holds everything it writes. ts_ckpt_job_write (no MPI, any one thread) writes this
 * rank's file from the copies exactly as the synchronous save writes from the slices (chunks
 * gathered or packed, hashed as written), freeing each tensor's copy once its pieces are
 * written, and syncs it.
 * ts_ckpt_save_end (collective) agrees on the outcome with every piece's checksum, and the
 * leaders write the index and move the directory into place; on any failure anywhere the
 * leaders remove the temporary directory and the previous checkpoint stays as it was.
 * ts_ckpt_job_cancel (any thread) makes the writer stop before its next piece with TS_SHUTDOWN;
 * a save ended while its writer has not returned (a stuck write) fails alike on every rank
 * without reading what the writer fills, so that a daemon stopping can abandon it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"

struct ts_ckpt_job {
  stensor *ts;
  int nt, total_pieces, nmine, rank, size;
  bool lead, exists, made, keep_partial;
  int lock_fd;      /* the leader's lock on tmp while the save writes (ckpt_clean.c), else -1 */
  ts_tensor *copy;  /* per tensor: this rank's copy of its slice (data NULL: none, or written) */
  ts_box *box;      /* per tensor: the slice's box */
  uint64_t *hashes; /* per piece: its checksum and its table's */
  char parent[4096], tmp[4400], target[4400], path[4500];
  int64_t total, all_bytes; /* this rank's bytes to write; every rank's */
  int64_t copy_bytes;       /* this rank's copies */
  int64_t sequence;         /* recorded in the index (0: none) */
  int files;
  _Atomic int64_t written;
  atomic_bool cancel;   /* the writer stops before its next piece */
  atomic_bool finished; /* ts_ckpt_job_write returned: status, lerr and hashes are set */
  void (*on_piece)(void *arg);
  void *on_piece_arg;
  int status; /* the write's outcome (ts_ckpt_job_write), its message in lerr */
  ts_error lerr;
};

void ts_ckpt_job_destroy(ts_ckpt_job **p) {
  if (!p || !*p)
    return;
  ts_ckpt_job *j = *p;
  if (j->made) /* never ended: nothing of it stays */
    ts__ckpt_remove_dir(j->tmp);
  if (j->lock_fd >= 0)
    close(j->lock_fd);
  for (int i = 0; j->copy && i < j->nt; i++)
    ts_shard_free_tensor(&j->copy[i]);
  free(j->copy);
  free(j->box);
  free(j->hashes);
  ts__ckpt_plan_free(j->ts, j->nt);
  free(j);
  *p = NULL;
}

/* Whether this rank writes a piece of tensor i. */
static bool writes_piece(const ts_ckpt_job *j, int i) {
  for (int k = 0; k < j->ts[i].npieces; k++)
    if (j->ts[i].pieces[k].writer == j->rank)
      return true;
  return false;
}

/* This rank's copies: the memory checked for all of them first, then the slice of each tensor
 * it writes a piece of copied as stored, or its reduction kept (reductions are collective:
 * every rank takes part). */
static int take_copies(ts_ckpt_job *j, ts_world *w, const ts_ckpt_save_opts *o, int lst,
                       ts_error *lerr, ts_error *err) {
  for (int i = 0; i < j->nt; i++)
    if (!j->ts[i].reduce && writes_piece(j, i) && j->ts[i].t->has_slice)
      j->copy_bytes += (int64_t)j->ts[i].t->local.bytes;
  ts_error why;
  if (!lst && j->copy_bytes > 0 && ts_pool_check((size_t)j->copy_bytes, "the copy", &why))
    lst = ts_error_set(lerr, TS_LIMIT,
                       "asynchronous save: its copy of the tensors needs %lld "
                       "bytes on rank %d, more than the memory limit leaves; save synchronously "
                       "(wait=True, or tshard save without --async), which writes straight from "
                       "the tensors (%.150s; to '%s')",
                       (long long)j->copy_bytes, j->rank, why.msg, j->target);
  for (int i = 0; i < j->nt; i++) {
    ts_tensor reduced;
    const ts_tensor *src = NULL;
    int rc = ts__ckpt_source(w, &j->ts[i], o->staging_bytes, lst, lerr, &reduced, &src, err);
    if (rc)
      return rc; /* agreed by the reduction: every rank fails here */
    j->box[i] = j->ts[i].t->box;
    if (!lst && writes_piece(j, i)) {
      if (!src) {
        lst = ts_error_set(lerr, TS_INTERNAL,
                           "checkpoint: rank %d writes a piece of '%s' but "
                           "holds no slice",
                           j->rank, j->ts[i].name);
      } else if (reduced.data) { /* the reduction is a copy already */
        j->copy[i] = reduced;
        reduced.data = NULL;
      } else {
        j->copy[i] = *src;
        j->copy[i].data = ts_shard_alloc_as(src->bytes ? src->bytes : 1, TS_POOL_STAGING,
                                            "the asynchronous save's copy", lerr);
        if (j->copy[i].data)
          memcpy(j->copy[i].data, src->data, src->bytes);
        else
          lst = lerr->code;
      }
    }
    ts_shard_free_tensor(&reduced);
    j->ts[i].t = NULL; /* the tensor may change or go from here on */
  }
  return ts_comm_agree(ts_world_comm(w), lst, lerr, err);
}

/* The plan's sizes: this rank's pieces and bytes, every rank's bytes, the files. */
static void count_plan(ts_ckpt_job *j) {
  bool *writes = calloc((size_t)j->size, sizeof *writes);
  for (int i = 0; i < j->nt; i++)
    for (int k = 0; k < j->ts[i].npieces; k++, j->total_pieces++) {
      const spiece *p = &j->ts[i].pieces[k];
      j->all_bytes += p->bytes;
      if (writes)
        writes[p->writer] = true;
      if (p->writer == j->rank) {
        j->nmine++;
        j->total += p->bytes;
      }
    }
  j->files = 1; /* the index */
  for (int r = 0; writes && r < j->size; r++)
    j->files += writes[r];
  free(writes);
}

int ts_ckpt_save_begin(ts_store *s, ts_world *w, const char *dir, const char *const *names, int n,
                       const ts_ckpt_save_opts *o, ts_ckpt_job **out, ts_error *err) {
  *out = NULL;
  signal(SIGXFSZ, SIG_IGN);
  ts_comm *c = ts_world_comm(w);
  ts_ckpt_job *j = calloc(1, sizeof *j);
  if (!j)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  j->lock_fd = -1;
  j->rank = ts_world_rank(w);
  j->size = ts_world_size(w);
  j->keep_partial = o->keep_partial;
  j->sequence = o->sequence;
  ts_error lerr;
  ts_error_clear(&lerr);
  char base[256];
  int lst = ts__ckpt_split_path(dir, j->parent, sizeof j->parent, base, sizeof base, &lerr);
  int leader = 0, rc;
  if ((rc = o->per_node ? ts__ckpt_node_leader(c, j->rank, j->size, &leader, err) : TS_OK)) {
    free(j);
    return rc;
  }
  j->lead = leader == j->rank;
  j->nt = names && n > 0 ? n : ts_store_count(s);
  j->ts = calloc((size_t)(j->nt ? j->nt : 1), sizeof *j->ts);
  int64_t *load = calloc((size_t)j->size, sizeof *load);
  if (!j->ts || !load) {
    free(load);
    ts_ckpt_job_destroy(&j);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory");
  }
  if (!lst)
    lst = ts__ckpt_plan_tensors(s, names && n > 0 ? names : NULL, j->nt, o, j->ts, load, &lerr);
  free(load);
  if (!lst) {
    count_plan(j);
    j->copy = calloc((size_t)(j->nt + 1), sizeof *j->copy);
    j->box = calloc((size_t)(j->nt + 1), sizeof *j->box);
    j->hashes = calloc(2 * (size_t)(j->total_pieces + 1), sizeof *j->hashes);
    if (!j->copy || !j->box || !j->hashes)
      lst = ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint: no memory");
  }
  if ((rc = ts__ckpt_tmp_name(c, j->rank, j->parent, base, j->tmp, sizeof j->tmp, err)))
    goto fail;
  snprintf(j->target, sizeof j->target, "%s/%s", j->parent, base);
  if (!lst && j->lead)
    lst = ts__ckpt_prepare_dirs(j->target, j->tmp, o->refuse_existing, &j->exists, &j->lock_fd,
                                &lerr);
  j->made = !lst && j->lead;
  if ((rc = ts_comm_agree(c, lst, &lerr, err)))
    goto fail;
  snprintf(j->path, sizeof j->path, "%s/rank-%05d.safetensors", j->tmp, j->rank);
  if ((rc = take_copies(j, w, o, TS_OK, &lerr, err)))
    goto fail;
  *out = j;
  return TS_OK;
fail:
  ts_ckpt_job_destroy(&j); /* removes the temporary directory it made */
  return rc;
}

void ts_ckpt_job_cancel(ts_ckpt_job *j) {
  if (j)
    atomic_store(&j->cancel, true);
}

void ts_ckpt_job_on_piece(ts_ckpt_job *j, void (*fn)(void *arg), void *arg) {
  j->on_piece = fn;
  j->on_piece_arg = arg;
}

const char *ts_ckpt_job_tmp(const ts_ckpt_job *j) { return j && j->lead ? j->tmp : NULL; }

/* The writer's failure when it was cancelled. */
static int cancelled(ts_ckpt_job *j, int64_t written) {
  return ts_error_set(&j->lerr, TS_SHUTDOWN,
                      "checkpoint: the save to '%s' was abandoned before "
                      "rank %d wrote its file (%lld of %lld bytes written there)",
                      j->target, j->rank, (long long)written, (long long)j->total);
}

void ts_ckpt_job_write(ts_ckpt_job *j) {
  ts_error_clear(&j->lerr);
  int fd = -1, lst = TS_OK;
  int64_t written = 0;
  if (atomic_load(&j->cancel))
    lst = cancelled(j, 0);
  if (j->nmine && !lst)
    lst = ts__ckpt_open_file(j->ts, j->nt, j->nmine, j->rank, j->path, &fd, &j->lerr);
  int pi = 0;
  for (int i = 0; i < j->nt; i++) {
    for (int k = 0; k < j->ts[i].npieces; k++, pi++) {
      spiece *p = &j->ts[i].pieces[k];
      if (p->writer != j->rank || lst)
        continue;
      if (atomic_load(&j->cancel)) {
        lst = cancelled(j, written);
        continue;
      }
      lst = ts__ckpt_write_piece(fd, j->path, &j->copy[i], &j->box[i], p, j->ts[i].dtype,
                                 &j->hashes[2 * pi], &j->hashes[2 * pi + 1], &written, &j->lerr);
      atomic_store(&j->written, written);
      if (j->on_piece)
        j->on_piece(j->on_piece_arg);
    }
    ts_shard_free_tensor(&j->copy[i]); /* its pieces are written: the memory goes back */
  }
  bool kill;
  ts__ckpt_fail_take(&kill);           /* the write-failure hook served this save */
  if (!lst && atomic_load(&j->cancel)) /* cancelled after its last piece, before the sync */
    lst = cancelled(j, written);
  if (fd >= 0) {
    if (!lst && fsync(fd) != 0)
      lst = ts_error_set(&j->lerr, TS_CHECKPOINT_IO, "checkpoint: cannot sync '%s': %s", j->path,
                         strerror(errno));
    if (close(fd) != 0 && !lst)
      lst = ts_error_set(&j->lerr, TS_CHECKPOINT_IO, "checkpoint: cannot close '%s': %s", j->path,
                         strerror(errno));
  }
  j->status = lst;
  atomic_store(&j->finished, true);
}

void ts_ckpt_job_progress(const ts_ckpt_job *j, ts_ckpt_progress *p) {
  memset(p, 0, sizeof *p);
  if (!j)
    return;
  p->written = atomic_load(&j->written);
  p->total = j->total;
  p->all_bytes = j->all_bytes;
  p->files = j->files;
  p->tensors = j->nt;
}

int ts_ckpt_save_end(ts_ckpt_job *j, ts_world *w, ts_ckpt_report *rep, ts_error *err) {
  ts_comm *c = ts_world_comm(w);
  memset(rep, 0, sizeof *rep);
  int64_t *hv = calloc((size_t)(4 * j->total_pieces + 1), sizeof *hv);
  bool finished = atomic_load(&j->finished);
  int lst = TS_OK;
  ts_error lerr;
  ts_error_clear(&lerr);
  if (finished) {
    lst = j->status;
    lerr = j->lerr;
  } else { /* its writer still runs (stuck in a write): nothing it fills is read */
    lst =
        ts_error_set(&lerr, TS_SHUTDOWN,
                     "checkpoint: the save to '%s' was abandoned while "
                     "rank %d was still writing its file (%lld of %lld bytes written there)",
                     j->target, j->rank, (long long)atomic_load(&j->written), (long long)j->total);
  }
  if (!hv && !lst)
    lst = ts_error_set(&lerr, TS_NO_MEMORY, "checkpoint: no memory");
  if (hv && finished)
    ts__ckpt_pack_hashes(j->ts, j->nt, j->rank, j->hashes, hv);
  int rc = ts_comm_agree_max(c, lst, &lerr, hv, hv ? 4 * j->total_pieces : 0, err);
  if (!rc) {
    if (j->lead)
      lst = ts__ckpt_write_index(j->ts, j->nt, j->size, hv, j->keep_partial, j->sequence, j->tmp,
                                 &lerr);
    rc = ts_comm_agree(c, lst, &lerr, err);
  }
  free(hv);
  if (!rc) {
    if (j->lead &&
        (lst = ts__ckpt_into_place(j->tmp, j->target, j->parent, j->exists, &lerr)) == TS_OK)
      j->made = false;
    rc = ts_comm_agree(c, lst, &lerr, err);
  }
  if (rc && j->made)
    ts__ckpt_remove_dir(j->tmp);
  j->made = false;
  rep->tensors = j->nt;
  rep->bytes_written = atomic_load(&j->written);
  rep->bytes_total = j->all_bytes;
  rep->files = j->files;
  return rc;
}

int ts_ckpt_remove(const char *dir, ts_error *err) {
  bool is_ckpt = false;
  int rc = ts__ckpt_check_target(dir, false, &is_ckpt, err);
  if (rc == TS_OK && is_ckpt)
    ts__ckpt_remove_dir(dir);
  return rc;
}
