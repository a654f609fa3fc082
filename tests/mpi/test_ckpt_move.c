/* test_ckpt_move.c - the two read paths of a checkpoint load
 * (shard/ckpt/ckpt_load.c: direct, ckpt_move.c: each piece read once by one rank,
 * then moved) on the engine under mpirun with any world size (run with 1, 3, 4
 * and 6 ranks, and with TSHARD_CMA=0 for the all-to-all rounds).
 *
 * Tensors whose values are a function of the global index are saved under one
 * attribute (on 4 ranks of the world, on all of them, ragged, replicated,
 * partial) and loaded under others (on 3 ranks, on all, on a 2-D mesh, ragged,
 * replicated, partial) through each path (auto, forced direct, forced move);
 * every element of every slice is compared with the function (a partial save
 * with the sum of the ranks' contributions). Faults through the move path: a
 * flipped byte in a piece, a missing file, a truncated file, a staging
 * allocation failing on one rank; each must give every rank the same error
 * naming the file and the piece (the allocation: the buffer), create no tensor
 * and leave the tensors already stored unchanged. Faults through the direct
 * path's ranged reads (saved S(0), loaded S(1): each rank reads a band of every
 * piece through its block checksum table): a flipped byte in a piece, in its
 * table, the table's checksum edited in the index; the same outcome (with one
 * rank, which reads every piece whole, the table is not read: the load
 * succeeds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TS_TEST_SEED 0x5eed16u
#include "ckpt_internal.h"
#include "mpi_check.h"
#include "ts_ckpt.h"

static double value(const int64_t *g, int ndim) {
  double v = 0;
  for (int d = 0; d < ndim; d++)
    v = v * 37 + (double)g[d];
  return (double)((int64_t)v % 251);
}

/* Fills (fill) or checks a stored slice against value() * scale; returns the
 * wrong elements. */
static long visit(ts_stored *t, bool fill, double scale) {
  if (!t || !t->has_slice)
    return 0;
  int n = t->ndim;
  int64_t ext[TS_MAX_DIMS], i[TS_MAX_DIMS] = {0}, g[TS_MAX_DIMS], total = 1;
  for (int d = 0; d < n; d++)
    ext[d] = t->box.hi[d] - t->box.lo[d], total *= ext[d];
  long bad = 0;
  for (int64_t k = 0; k < total; k++) {
    for (int d = 0; d < n; d++)
      g[d] = t->box.lo[d] + i[d];
    char *p = (char *)t->local.data + ts_layout_address(&t->local.layout, i);
    double want = value(g, n) * scale;
    switch (t->dtype) {
    case TS_F32:
      if (fill)
        *(float *)p = (float)want;
      else
        bad += *(float *)p != (float)want;
      break;
    case TS_I32:
      if (fill)
        *(int32_t *)p = (int32_t)want;
      else
        bad += *(int32_t *)p != (int32_t)want;
      break;
    case TS_U8:
      if (fill)
        *(uint8_t *)p = (uint8_t)want;
      else
        bad += *(uint8_t *)p != (uint8_t)want;
      break;
    default:
      if (fill)
        *(double *)p = want;
      else
        bad += *(double *)p != want;
    }
    for (int d = n - 1; d >= 0 && ++i[d] == ext[d]; d--)
      i[d] = 0;
  }
  return bad;
}

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  if (ts_attr_parse(text, &a, &err))
    fprintf(stderr, "attr '%s': %s\n", text, err.msg);
  return a;
}

/* Every rank got the same status and message. */
typedef struct tcase {
  const char *name;
  ts_dtype dt;
  int ndim;
  int64_t shape[3];
  char save[200], load[200];
  double scale;      /* the loaded values: value() * scale (a partial save sums the
                        ranks) */
  bool partial;      /* the saved tensor is P(sum): rank r holds value * (r + 1) */
  const char *check; /* a partial target: resharded to this before the check */
} tcase;

/* Saves the case's tensor, then loads it through every path and checks it. */
static void run_case(ts_store *s, const char *dir, const tcase *c) {
  ts_error err;
  ts_attr *sa = attr(c->save), *la = attr(c->load);
  if (!sa || !la) {
    CHECK(false, "%s: bad attributes", c->name);
    ts_attr_destroy(&sa);
    ts_attr_destroy(&la);
    return;
  }
  ts_stored *e = NULL;
  int rc = ts_store_add(s, c->name, c->ndim, c->shape, c->dt, sa, NULL, &e, &err);
  CHECK(rc == TS_OK, "%s: add: %s", c->name, rc ? err.msg : "");
  if (rc == TS_OK)
    visit(e, true, c->partial ? world_rank + 1 : 1);
  const char *one[] = {c->name};
  /* pieces cut into chunks (the last dim into up to 16 blocks where it divides, then rows) of
   * about 64 bytes, or a 32nd of the tensor when larger, then whole pieces (the checkpoint the
   * later checks read) */
  int64_t tbytes = (int64_t)ts_dtype_size(c->dt);
  for (int d = 0; d < c->ndim; d++)
    tbytes *= c->shape[d];
  for (int chunked = 1; chunked >= 0; chunked--) {
    ts_ckpt_save_opts so = {false, false, 0, chunked ? (tbytes / 32 > 64 ? tbytes / 32 : 64) : -1,
                            0,     false};
    if (!chunked) {
      rc = ts_store_add(s, c->name, c->ndim, c->shape, c->dt, sa, NULL, &e, &err);
      CHECK(rc == TS_OK, "%s: add: %s", c->name, rc ? err.msg : "");
      if (rc == TS_OK)
        visit(e, true, c->partial ? world_rank + 1 : 1);
    }
    rc = ts_ckpt_save(s, W, dir, one, 1, &so, NULL, &err);
    CHECK(rc == TS_OK, "%s: save: %s", c->name, rc ? err.msg : "");
    int64_t bytes = tbytes;
    ts_ckpt_index *ix = NULL;
    if (rc == TS_OK && chunked && !c->partial && bytes >= 1024 &&
        ts_ckpt_index_read(dir, &ix, &err) ==
            TS_OK) { /* some slice is above twice the chunk: cut */
      const ts_ckpt_tensor *xt = ts_ckpt_index_find(ix, c->name);
      CHECK(xt && xt->npieces >= 2, "%s: chunked save of %lld bytes: %d pieces", c->name,
            (long long)bytes, xt ? xt->npieces : -1);
    }
    ts_ckpt_index_destroy(&ix);
    ts_store_drop(s, c->name, NULL);
    for (int path = TS_CKPT_PATH_AUTO; path <= TS_CKPT_PATH_MOVE; path++) {
      ts_ckpt_load_opts o = {.path = (ts_ckpt_path)path};
      ts_ckpt_report rep;
      rc = ts_ckpt_load(s, W, dir, one, 1, la, &o, &rep, &err);
      CHECK(rc == TS_OK, "%s: load (path %d): %s", c->name, path, rc ? err.msg : "");
      same_error_everywhere(rc, &err, c->name);
      if (rc)
        continue;
      if (path != TS_CKPT_PATH_AUTO)
        CHECK(rep.tensors_moved == (path == TS_CKPT_PATH_MOVE), "%s: path %d: %d tensors moved",
              c->name, path, rep.tensors_moved);
      ts_stored *got = ts_store_find(s, c->name);
      CHECK(got && ts_attr_equal(got->attr, la), "%s: path %d: not loaded under the target",
            c->name, path);
      if (got && c->check) { /* the sum of the partial slices, through the store's
                                reshard */
        ts_attr *ca = attr(c->check);
        rc = ts_store_reshard(s, W, c->name, ca, NULL, NULL, NULL, &err);
        CHECK(rc == TS_OK, "%s: reshard to check: %s", c->name, rc ? err.msg : "");
        ts_attr_destroy(&ca);
        got = ts_store_find(s, c->name);
      }
      long bad = visit(got, false, c->scale);
      CHECK(bad == 0, "%s: path %d%s: %ld wrong elements", c->name, path,
            chunked ? " (chunked)" : "", bad);
      ts_store_drop(s, c->name, NULL);
    }
  }
  ts_attr_destroy(&sa);
  ts_attr_destroy(&la);
}

/* A fault through the move path: the load fails alike everywhere, names what
 * `want` names, and creates nothing; the tensor "keep" is still there with its
 * values. */
static void expect_fault_on(ts_store *s, const char *dir, ts_ckpt_path path, const char *what,
                            const char *want1, const char *want2, const char *want3) {
  ts_error err;
  const ts_attr *la = NULL;
  char txt[120];
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[S(1)]", world_size);
  ts_attr *a = attr(txt);
  la = a;
  ts_ckpt_load_opts o = {.path = path};
  const char *one[] = {"big"};
  int rc = ts_ckpt_load(s, W, dir, one, 1, la, &o, NULL, &err);
  CHECK(rc != TS_OK && strstr(err.msg, want1) && strstr(err.msg, want2) &&
            (!want3 || strstr(err.msg, want3)),
        "%s: %d '%s' (wanted '%s', '%s' and '%s')", what, rc, rc ? err.msg : "", want1, want2,
        want3 ? want3 : "");
  same_error_everywhere(rc, &err, what);
  CHECK(ts_store_find(s, "big") == NULL, "%s: the tensor was created", what);
  CHECK(ts_store_count(s) == 1 && visit(ts_store_find(s, "keep"), false, 1) == 0,
        "%s: the store changed", what);
  ts_attr_destroy(&a);
}

static void expect_fault(ts_store *s, const char *dir, const char *what, const char *want1,
                         const char *want2) {
  expect_fault_on(s, dir, TS_CKPT_PATH_MOVE, what, want1, want2, NULL);
}

/* The direct load of "big" under S(1) succeeds with the right values (with one
 * rank, whose box holds every piece whole: no table is read). */
static void expect_direct_load(ts_store *s, const char *dir, const char *what) {
  ts_error err;
  char txt[120];
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[S(1)]", world_size);
  ts_attr *a = attr(txt);
  ts_ckpt_load_opts o = {.path = TS_CKPT_PATH_DIRECT};
  const char *one[] = {"big"};
  int rc = ts_ckpt_load(s, W, dir, one, 1, a, &o, NULL, &err);
  CHECK(rc == TS_OK, "%s: %s", what, rc ? err.msg : "");
  same_error_everywhere(rc, &err, what);
  CHECK(visit(ts_store_find(s, "big"), false, 1) == 0, "%s: wrong values", what);
  ts_store_drop(s, "big", NULL);
  ts_attr_destroy(&a);
}

/* Rank 0 flips a bit of the byte at `at` of the file (between barriers). */
static void flip_byte(const char *path, int64_t at) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0) {
    FILE *f = fopen(path, "r+b");
    int ch = EOF;
    if (f && fseek(f, (long)at, SEEK_SET) == 0)
      ch = fgetc(f);
    CHECK(ch != EOF && fseek(f, (long)at, SEEK_SET) == 0 && fputc(ch ^ 0x10, f) != EOF,
          "flip byte %lld of %s", (long long)at, path);
    if (f)
      fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The data_offsets begin of a header entry, as a file offset (-1: none). */
static int64_t entry_offset(const ckpt_file *f, const char *key) {
  json_t *b = json_array_get(json_object_get(json_object_get(f->header, key), "data_offsets"), 0);
  return json_is_integer(b) ? f->data_start + json_integer_value(b) : -1;
}

/* Faults through the direct path's ranged reads: in the last piece of "big"
 * (its file, key, bytes and table found from the index and the file's header,
 * read by every rank alike), each undone after its load. */
static void ranged_faults(ts_store *s, const char *dir) {
  ts_ckpt_index *idx = NULL;
  ts_error err;
  int rc = ts_ckpt_index_read(dir, &idx, &err);
  CHECK(rc == TS_OK, "index: %s", rc ? err.msg : "");
  const ts_ckpt_tensor *t = idx ? ts_ckpt_index_find(idx, "big") : NULL;
  CHECK(t && t->npieces > 0, "big in the index");
  if (!t || t->npieces == 0) {
    ts_ckpt_index_destroy(&idx);
    return;
  }
  ts_ckpt_piece *p = &t->pieces[t->npieces - 1];
  CHECK(p->block_bytes == 4096 && strstr(p->block_key, p->key) == p->block_key,
        "piece '%s': blocks of %lld, table '%s'", p->key, (long long)p->block_bytes, p->block_key);
  ckpt_file f;
  rc = ts__ckpt_file_open(dir, p->file, &f, &err);
  CHECK(rc == TS_OK, "open %s: %s", p->file, rc ? err.msg : "");
  int64_t poff = rc ? -1 : entry_offset(&f, p->key);
  int64_t toff = rc ? -1 : entry_offset(&f, p->block_key);
  int64_t pbytes = ts_box_numel(&p->box) * 4;
  if (!rc)
    ts__ckpt_file_close(&f);
  CHECK(poff > 0 && toff > 0 && toff < poff, "offsets of '%s' %lld and its table %lld", p->key,
        (long long)poff, (long long)toff);
  if (poff <= 0 || toff <= 0) {
    ts_ckpt_index_destroy(&idx);
    return;
  }
  char path[400], key[256], table[256];
  snprintf(path, sizeof path, "%s/%s", dir, p->file);
  snprintf(key, sizeof key, "piece '%s'", p->key);
  snprintf(table, sizeof table, "its block table '%s'", p->block_key);
  bool ranged = world_size > 1; /* one rank reads every piece whole */
  /* (a) a flipped byte in the middle of the piece */
  flip_byte(path, poff + pbytes / 2);
  expect_fault_on(s, dir, TS_CKPT_PATH_DIRECT, "ranged: flipped piece byte", p->file, key,
                  ranged ? "block " : "checksum xxh3");
  flip_byte(path, poff + pbytes / 2);
  /* (b) a flipped byte in its table */
  flip_byte(path, toff + 3);
  if (ranged)
    expect_fault_on(s, dir, TS_CKPT_PATH_DIRECT, "ranged: flipped table byte", p->file, key, table);
  else
    expect_direct_load(s, dir, "whole: flipped table byte");
  flip_byte(path, toff + 3);
  /* (c) the table's checksum in the index */
  char ipath[400];
  snprintf(ipath, sizeof ipath, "%s/%s", dir, TS_CKPT_INDEX);
  for (int edit = 1; edit >= 0; edit--) {
    MPI_Barrier(MPI_COMM_WORLD);
    p->block_xxh3 ^= 0x40;
    if (world_rank == 0)
      CHECK(ts_ckpt_index_write(idx, ipath, &err) == TS_OK, "index write: %s", err.msg);
    MPI_Barrier(MPI_COMM_WORLD);
    if (!edit)
      break;
    if (ranged)
      expect_fault_on(s, dir, TS_CKPT_PATH_DIRECT, "ranged: index blocks.xxh3", key, table,
                      "the index says");
    else
      expect_direct_load(s, dir, "whole: index blocks.xxh3");
  }
  /* undone: the direct path loads again */
  expect_direct_load(s, dir, "ranged: restored");
  ts_ckpt_index_destroy(&idx);
}

int main(int argc, char **argv) {
  ts_error err;
  if (!mpi_check_start(&argc, &argv))
    return 1;
  char parent[256];
  mpi_check_tmpdir("tshard-ckpt-move", parent, sizeof parent);
  char dir[300];
  snprintf(dir, sizeof dir, "%s/c", parent);
  ts_store *s = NULL;
  ts_store_create(&s, world_rank, 0, NULL);
  int s4 = world_size < 4 ? world_size : 4, s3 = world_size < 3 ? world_size : 3,
      h = world_size / 2 ? world_size / 2 : 1;
  tcase cases[24];
  int nc = 0;
  /* saved S(0) on all ranks, loaded S(1): the benchmark's case, small */
  cases[nc] = (tcase){"s0_s1", TS_F32, 2, {29, 23}, "", "", 1, false, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d] placements=[S(0)]", world_size);
  snprintf(cases[nc++].load, 200, "mesh=[%d] placements=[S(1)]", world_size);
  /* saved on 4 ranks, loaded on 3 (then on all: 6 with six ranks) */
  cases[nc] = (tcase){"four_three", TS_I32, 2, {31, 7}, "", "", 1, false, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d] placements=[S(0)]", s4);
  snprintf(cases[nc++].load, 200, "mesh=[%d]@%d-%d placements=[S(0)]", s3, world_size - s3,
           world_size - 1);
  cases[nc] = (tcase){"four_all", TS_F64, 3, {9, 5, 6}, "", "", 1, false, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d] placements=[S(1)]", s4);
  snprintf(cases[nc++].load, 200, "mesh=[%d] placements=[S(2)]", world_size);
  /* ragged splits (a zero part) on both sides, 1-byte elements */
  cases[nc] = (tcase){"ragged", TS_U8, 2, {13, 17}, "", "", 1, false, NULL};
  if (world_size >= 3) {
    snprintf(cases[nc].save, 200, "mesh=[3] placements=[S(0)] splits={0:[6,0,7]}");
    snprintf(cases[nc++].load, 200, "mesh=[3] placements=[S(1)] splits={1:[2,11,4]}");
  } else {
    snprintf(cases[nc].save, 200, "mesh=[1] placements=[S(0)]");
    snprintf(cases[nc++].load, 200, "mesh=[1] placements=[R]");
  }
  /* replicated save (pieces written once) loaded on a 2-D mesh */
  cases[nc] = (tcase){"replicated", TS_F32, 2, {12, 10}, "", "", 1, false, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d,%d] placements=[S(0),R]", world_size / h, h);
  snprintf(cases[nc++].load, 200, "mesh=[%d,%d] placements=[S(1),S(0)]", h, world_size / h);
  /* a target with an empty part */
  cases[nc] = (tcase){"to_empty_part", TS_F32, 2, {9, 16}, "", "", 1, false, NULL};
  if (world_size >= 2) {
    snprintf(cases[nc].save, 200, "mesh=[%d] placements=[S(0)]", world_size);
    snprintf(cases[nc++].load, 200, "mesh=[2] placements=[S(1)] splits={1:[0,16]}");
  } else {
    snprintf(cases[nc].save, 200, "mesh=[1] placements=[S(1)]");
    snprintf(cases[nc++].load, 200, "mesh=[1] placements=[S(0)] splits={0:[9]}");
  }
  /* a replicated target: every rank needs every piece */
  cases[nc] = (tcase){"to_replicated", TS_I32, 2, {11, 9}, "", "", 1, false, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d] placements=[S(1)]", world_size);
  snprintf(cases[nc++].load, 200, "mesh=[%d] placements=[R]", world_size);
  /* a partial save (reduced when saved) loaded S(1); and loaded partial */
  double tri = (double)world_size * (world_size + 1) / 2;
  cases[nc] = (tcase){"partial", TS_I32, 2, {10, 14}, "", "", tri, true, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d] placements=[P(sum)]", world_size);
  snprintf(cases[nc++].load, 200, "mesh=[%d] placements=[S(1)]", world_size);
  cases[nc] = (tcase){"to_partial", TS_F32, 2, {8, 12}, "", "", 1, false, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d] placements=[S(0)]", world_size);
  snprintf(cases[nc].load, 200, "mesh=[%d,%d] placements=[P(sum),S(1)]", world_size / h, h);
  static char check[200];
  snprintf(check, sizeof check, "mesh=[%d,%d] placements=[R,S(1)]", world_size / h, h);
  cases[nc++].check = check;
  /* random shapes, split dims and mesh sizes (the same draws on every rank) */
  for (int r = 0; r < 5; r++) {
    tcase *c = &cases[nc++];
    *c = (tcase){"random", TS_F32, 2,   {1 + rnd_below(40), 1 + rnd_below(40)}, "", "",
                 1,        false,  NULL};
    int m1 = 1 + (int)rnd_below(world_size), m2 = 1 + (int)rnd_below(world_size);
    snprintf(c->save, 200, "mesh=[%d]@%d-%d placements=[S(%d)]", m1, world_size - m1,
             world_size - 1, (int)rnd_below(2));
    snprintf(c->load, 200, "mesh=[%d] placements=[S(%d)]", m2, (int)rnd_below(2));
  }
  /* large enough that auto picks the move path when the world has several
   * ranks */
  cases[nc] = (tcase){"auto_move", TS_F32, 2, {512, 384}, "", "", 1, false, NULL};
  snprintf(cases[nc].save, 200, "mesh=[%d] placements=[S(0)]", world_size);
  snprintf(cases[nc++].load, 200, "mesh=[%d] placements=[S(1)]", world_size);
  for (int i = 0; i < nc; i++)
    run_case(s, dir, &cases[i]);
  /* auto: the move path for the large resharded tensor, the direct one for the
   * saved layout */
  {
    ts_attr *a0 = attr(cases[nc - 1].save), *a1 = attr(cases[nc - 1].load);
    const char *one[] = {"auto_move"};
    ts_ckpt_report rep;
    int rc = ts_ckpt_load(s, W, dir, one, 1, a1, NULL, &rep, &err);
    CHECK(rc == TS_OK && rep.tensors_moved == (world_size > 1), "auto S(1): %d, %d moved", rc,
          rep.tensors_moved);
    ts_store_drop(s, "auto_move", NULL);
    rc = ts_ckpt_load(s, W, dir, one, 1, a0, NULL, &rep, &err);
    CHECK(rc == TS_OK && rep.tensors_moved == 0, "auto S(0): %d, %d moved", rc, rep.tensors_moved);
    ts_store_drop(s, "auto_move", NULL);
    ts_attr_destroy(&a0);
    ts_attr_destroy(&a1);
  }
  /* faults through the move path; "keep" must survive each */
  char txt[120];
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[S(0)]", world_size);
  ts_attr *a0 = attr(txt);
  int64_t big[2] = {64, 40};
  ts_stored *e = NULL;
  CHECK(ts_store_add(s, "big", 2, big, TS_F32, a0, NULL, &e, &err) == TS_OK, "add big");
  visit(e, true, 1);
  const char *one[] = {"big"};
  CHECK(ts_ckpt_save(s, W, dir, one, 1, NULL, NULL, &err) == TS_OK, "save big: %s", err.msg);
  ts_store_drop(s, "big", NULL);
  CHECK(ts_store_add(s, "keep", 2, big, TS_F32, a0, NULL, &e, &err) == TS_OK, "add keep");
  visit(e, true, 1);
  char last[64], path[400];
  snprintf(last, sizeof last, "rank-%05d.safetensors", world_size - 1);
  /* the staging buffer (the second pool allocation of the load) fails on the
   * last rank */
  if (world_rank == world_size - 1)
    ts_shard_debug_fail_alloc(2);
  expect_fault(s, dir, "staging", "move buffer", "big");
  ts_shard_debug_fail_alloc(0);
  /* faults through the direct path's ranged reads, each undone */
  ranged_faults(s, dir);
  CHECK(ts_store_find(s, "big") == NULL, "big left in the store");
  /* a flipped byte in the last rank's piece */
  MPI_Barrier(MPI_COMM_WORLD);
  snprintf(path, sizeof path, "%s/%s", dir, last);
  long len = 0;
  if (world_rank == 0) {
    FILE *f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, -5, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -5, SEEK_END);
    fputc(ch ^ 0x10, f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  char key[40];
  snprintf(key, sizeof key, "'big#");
  expect_fault(s, dir, "flipped byte", last, key);
  /* a file shorter than its header says */
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0)
    CHECK(truncate(path, len - 64) == 0, "truncate");
  MPI_Barrier(MPI_COMM_WORLD);
  expect_fault(s, dir, "truncated", last, key);
  /* a missing file */
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0)
    CHECK(unlink(path) == 0, "unlink");
  MPI_Barrier(MPI_COMM_WORLD);
  expect_fault(s, dir, "missing file", last, key);
  ts_attr_destroy(&a0);
  ts_store_destroy(&s);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", parent);
    CHECK(system(cmd) == 0, "cleanup");
  }
  return mpi_check_finish("test_ckpt_move");
}
