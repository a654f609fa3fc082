/* test_ckpt.c - checkpoint save and load on the engine (the store and the world, no daemon) under
 * mpirun with any world size: tensors with values that are a function of the global index (and,
 * for a partial tensor, of the rank) in plain and blocked slices are saved, dropped, loaded under
 * other attributes and checked element by element through the slice's layout against that
 * function; a replicated tensor above twice the default chunk size is saved in chunks of about
 * 16 MiB ([1024, 4096]: the index lists them) and loads back whole. Faults injected on one rank: a
 * file write failing with EIO (the test hook), a file size limit (RLIMIT_FSIZE), a corrupted byte;
 * each must give every rank the same error, keep the previous checkpoint byte for byte, leave no
 * temporary directory and create no tensor. */
#include <dirent.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define TS_TEST_SEED 0x5eed17u
#include "mpi_check.h"
#include "ts_ckpt.h"
#include "ts_comm.h"

static double value(const int64_t *g, int ndim) {
  double v = 0;
  for (int d = 0; d < ndim; d++)
    v = v * 31 + (double)g[d];
  return (double)((int64_t)v % 1000);
}

/* Visits every element of a stored slice: global index and address. */
static void fill_or_check(ts_stored *t, bool fill, double scale, double add, const char *what) {
  if (!t->has_slice)
    return;
  ts_box b = t->box;
  int n = t->ndim;
  int64_t ext[TS_MAX_DIMS], i[TS_MAX_DIMS] = {0}, g[TS_MAX_DIMS];
  int64_t total = 1;
  for (int d = 0; d < n; d++)
    ext[d] = b.hi[d] - b.lo[d], total *= ext[d];
  long bad = 0;
  for (int64_t k = 0; k < total; k++) {
    for (int d = 0; d < n; d++)
      g[d] = b.lo[d] + i[d];
    int64_t off = ts_layout_address(&t->local.layout, i);
    double want = value(g, n) * scale + add;
    if (t->dtype == TS_F32) {
      float *p = (float *)((char *)t->local.data + off);
      if (fill)
        *p = (float)want;
      else
        bad += *p != (float)want;
    } else {
      int32_t *p = (int32_t *)((char *)t->local.data + off);
      if (fill)
        *p = (int32_t)want;
      else
        bad += *p != (int32_t)want;
    }
    for (int d = n - 1; d >= 0 && ++i[d] == ext[d]; d--)
      i[d] = 0;
  }
  if (!fill)
    CHECK(bad == 0, "%s: %ld wrong elements of %lld", what, bad, (long long)total);
}

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  if (ts_attr_parse(text, &a, &err))
    fprintf(stderr, "attr '%s': %s\n", text, err.msg);
  return a;
}

static ts_stored *add(ts_store *s, const char *name, ts_dtype dt, int ndim, const int64_t *shape,
                      const char *atext, const char *tag) {
  ts_attr *a = attr(atext);
  ts_stored *e = NULL;
  ts_error err;
  int rc = ts_store_add(s, name, ndim, shape, dt, a, tag, &e, &err);
  CHECK(rc == TS_OK, "add %s: %s", name, err.msg);
  ts_attr_destroy(&a);
  return e;
}

static char *slurp(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  *len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)*len + 1);
  if (b && fread(b, 1, (size_t)*len, f) != (size_t)*len) {
    free(b);
    b = NULL;
  }
  fclose(f);
  return b;
}

static int count_tmp(const char *parent) {
  DIR *d = opendir(parent);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    n += strstr(de->d_name, ".tmp-") != NULL;
  if (d)
    closedir(d);
  return n;
}

/* Every piece of whole 4 KiB pages starts on a 4 KiB multiple of its file (save lays the files out
 * so), read from the file's own header with jansson, not through the library's reader. */
static void check_aligned(const char *dir, const ts_ckpt_index *ix) {
  for (int i = 0; i < ix->ntensors; i++)
    for (int k = 0; k < ix->tensors[i].npieces; k++) {
      const ts_ckpt_tensor *t = &ix->tensors[i];
      const ts_ckpt_piece *p = &t->pieces[k];
      int64_t bytes = ts_box_numel(&p->box) * (int64_t)ts_dtype_size(t->dtype);
      char path[600];
      snprintf(path, sizeof path, "%s/%s", dir, p->file);
      FILE *f = fopen(path, "rb");
      uint8_t len8[8] = {0};
      CHECK(f && fread(len8, 1, 8, f) == 8, "%s: cannot read its header length", path);
      uint64_t n = 0;
      for (int b = 7; b >= 0; b--)
        n = n << 8 | len8[b];
      char *text = n < (1u << 24) ? malloc(n) : NULL;
      CHECK(text && f && fread(text, 1, n, f) == n, "%s: cannot read its %llu-byte header", path,
            (unsigned long long)n);
      json_t *h = text ? json_loadb(text, n, 0, NULL) : NULL;
      json_t *offs = json_object_get(json_object_get(h, p->key), "data_offsets");
      json_t *begin = json_array_get(offs, 0);
      CHECK(json_is_integer(begin), "%s: no data_offsets for '%s'", path, p->key);
      long long off = 8 + (long long)n + (begin ? json_integer_value(begin) : 0);
      if (bytes % 4096 == 0)
        CHECK(off % 4096 == 0, "%s: piece '%s' (%lld bytes) starts at byte %lld, not on 4 KiB",
              path, p->key, (long long)bytes, off);
      json_decref(h);
      free(text);
      if (f)
        fclose(f);
    }
}

int main(int argc, char **argv) {
  ts_error err;
  if (!mpi_check_start(&argc, &argv))
    return 1;
  char parent[256];
  mpi_check_tmpdir("tshard-ckpt-mpi", parent, sizeof parent);
  char dir[300], path[400];
  snprintf(dir, sizeof dir, "%s/c1", parent);
  ts_store *s = NULL;
  ts_store_create(&s, world_rank, 0, NULL);
  int64_t sa[2] = {37, 9}, sb[2] = {8, 12}, sc[3] = {5, 4, 6};
  char txt[200];
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[S(0)]", world_size);
  fill_or_check(add(s, "a", TS_F32, 2, sa, txt, NULL), true, 1, 0, "a");
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[S(1)]", world_size);
  fill_or_check(add(s, "b", TS_I32, 2, sb, txt, "aB4b"), true, 1, 0, "b");
  /* partial sum: rank r holds value * (r + 1); the sum is value * size * (size + 1) / 2 */
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[P(sum)]", world_size);
  ts_stored *c = add(s, "c", TS_I32, 3, sc, txt, NULL);
  fill_or_check(c, true, world_rank + 1, 0, "c");
  /* 36 MiB, one replicated piece: cut by default into chunks [1024, 4096] (16 MiB rows of 16
   * KiB) */
  int64_t sd[2] = {2304, 4096};
  snprintf(txt, sizeof txt, "mesh=[%d] placements=[R]", world_size);
  fill_or_check(add(s, "d", TS_F32, 2, sd, txt, NULL), true, 1, 0, "d");
  ts_ckpt_report rep;
  int rc = ts_ckpt_save(s, W, dir, NULL, 0, NULL, &rep, &err);
  CHECK(rc == TS_OK, "save: %s", err.msg);
  ts_ckpt_index *ix = NULL;
  CHECK(ts_ckpt_index_read(dir, &ix, &err) == TS_OK, "index: %s", err.msg);
  const ts_ckpt_tensor *dt = ix ? ts_ckpt_index_find(ix, "d") : NULL;
  CHECK(dt && dt->npieces == 3, "d: %d pieces, want 3 chunks", dt ? dt->npieces : -1);
  for (int k = 0; dt && k < dt->npieces; k++) {
    const ts_box *b = &dt->pieces[k].box;
    CHECK(b->lo[0] == 1024 * k && b->hi[0] == (k < 2 ? 1024 * (k + 1) : 2304) && b->lo[1] == 0 &&
              b->hi[1] == 4096,
          "d: chunk %d is [%lld:%lld, %lld:%lld]", k, (long long)b->lo[0], (long long)b->hi[0],
          (long long)b->lo[1], (long long)b->hi[1]);
  }
  if (ix && world_rank == 0)
    check_aligned(dir, ix);
  ts_ckpt_index_destroy(&ix);
  long idx_len = 0;
  char *idx0 = NULL;
  snprintf(path, sizeof path, "%s/%s", dir, TS_CKPT_INDEX);
  if (world_rank == 0)
    idx0 = slurp(path, &idx_len);
  /* load under other attributes */
  const char *names[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++)
    ts_store_drop(s, names[i], NULL);
  snprintf(txt, sizeof txt, "mesh=[1,%d] placements=[R,S(1)]", world_size);
  ts_attr *tgt = attr(txt);
  rc = ts_ckpt_load(s, W, dir, NULL, 0, tgt, NULL, &rep, &err);
  CHECK(rc == TS_OK, "load: %s", err.msg);
  fill_or_check(ts_store_find(s, "a"), false, 1, 0, "a loaded");
  fill_or_check(ts_store_find(s, "b"), false, 1, 0, "b loaded");
  fill_or_check(ts_store_find(s, "c"), false, (double)world_size * (world_size + 1) / 2, 0,
                "c loaded");
  fill_or_check(ts_store_find(s, "d"), false, 1, 0, "d loaded");
  ts_attr_destroy(&tgt);
  /* faults on the last rank; the previous checkpoint stays */
  for (int fault = 0; fault < 3; fault++) {
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    if (world_rank == world_size - 1) {
      if (fault == 0)
        ts_ckpt_debug_fail_write(0, false);
      if (fault == 1) {
        struct rlimit small = {64, old.rlim_max};
        setrlimit(RLIMIT_FSIZE, &small);
      }
    }
    const char *one[] = {"a"};
    rc = fault == 2 ? ts_ckpt_save(s, W, dir, one, 1, NULL, NULL, &err) /* succeeds */
                    : ts_ckpt_save(s, W, dir, NULL, 0, NULL, NULL, &err);
    if (world_rank == world_size - 1)
      setrlimit(RLIMIT_FSIZE, &old);
    if (fault == 2) {
      CHECK(rc == TS_OK, "save over the previous: %s", err.msg);
      break;
    }
    char want[64];
    snprintf(want, sizeof want, "rank-%05d.safetensors", world_size - 1);
    CHECK(rc == TS_CHECKPOINT_IO && strstr(err.msg, want), "fault %d: %d %s", fault, rc,
          rc ? err.msg : "");
    same_error_everywhere(rc, &err, "fault");
    if (world_rank == 0) {
      long len = 0;
      char *now = slurp(path, &len);
      CHECK(now && len == idx_len && memcmp(now, idx0, (size_t)len) == 0,
            "fault %d: the previous index changed", fault);
      free(now);
      CHECK(count_tmp(parent) == 0, "fault %d: a temporary directory is left", fault);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  /* chunks so small that a 16 MiB tensor would become 4 Mi pieces: refused alike on every rank,
   * before anything is written */
  {
    int64_t se[2] = {262144, 16};
    snprintf(txt, sizeof txt, "mesh=[%d] placements=[R]", world_size);
    add(s, "e", TS_F32, 2, se, txt, NULL);
    const char *one[] = {"e"};
    ts_ckpt_save_opts tiny = {false, false, 0, 1, 0, false};
    char dir2[400];
    snprintf(dir2, sizeof dir2, "%s/tiny", parent);
    rc = ts_ckpt_save(s, W, dir2, one, 1, &tiny, NULL, &err);
    CHECK(rc == TS_INVALID_ARGUMENT && strstr(err.msg, "'e'") && strstr(err.msg, "at most 1048576"),
          "tiny chunks: %d %s", rc, rc ? err.msg : "");
    same_error_everywhere(rc, &err, "tiny chunks");
    struct stat st;
    CHECK(stat(dir2, &st) != 0, "tiny chunks: the directory was made");
    if (world_rank == 0)
      CHECK(count_tmp(parent) == 0, "tiny chunks: a temporary directory is left");
    ts_store_drop(s, "e", NULL);
  }
  /* a corrupted byte: every rank fails the same, nothing is created */
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0) {
    snprintf(path, sizeof path, "%s/rank-00000.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    fseek(f, -3, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(ch ^ 1, f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ts_store_drop(s, "a", NULL);
  rc = ts_ckpt_load(s, W, dir, NULL, 0, NULL, NULL, NULL, &err);
  CHECK(rc == TS_CORRUPT && strstr(err.msg, "rank-00000.safetensors") && strstr(err.msg, "a#"),
        "corrupt: %d %s", rc, rc ? err.msg : "");
  same_error_everywhere(rc, &err, "corrupt");
  CHECK(ts_store_find(s, "a") == NULL, "corrupt: a tensor was created");
  free(idx0);
  ts_store_destroy(&s);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank == 0) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", parent);
    CHECK(system(cmd) == 0, "cleanup");
  }
  return mpi_check_finish("test_ckpt");
}
