/* test_safetensors_format.c - the Hugging Face safetensors reader of libtsckpt
 * (shard/ckpt/safetensors_format.c: ts__st_open), without MPI and without daemons.
 *
 * Each case writes a file by hand in a temporary directory (an 8-byte little-endian length, the
 * JSON text of the case, then the data bytes) and opens it. The reference is the case itself:
 * the entries it wrote (dtype, shape, absolute offset = 8 + header length + begin) for a good
 * file, and for a bad one the status and the words the message must hold (the file and the
 * tensor). Cases: every dtype, a scalar and an empty tensor, __metadata__ kept, entries in any
 * order, an HF index over two files (only the mapped tensors, in weight_map order by file);
 * refusals: truncated data, overlapping and out-of-range data_offsets, a header over 100 MiB,
 * a header length beyond the file, JSON that does not parse, a header that is an array, unknown
 * and unsupported dtypes, a shape that does not match its bytes, a negative dim, a shape
 * overflowing 64 bits, a name with a control character, an index naming a path or a missing
 * tensor, a FIFO in place of the file, a __metadata__ that is not text to text. Untrusted sizes:
 * 100,000 entries in one file and 100,000 in an index of two files opened (and every name found)
 * in well under the time a pairwise check would take, an overlap between the first and the last
 * of many entries found; each file of an index keeps its own __metadata__; a header's parse and
 * its metadata counted against the pool's limit (LIMIT before jansson would take 50 times the
 * text's bytes), and nothing left counted once the model is closed. */
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "safetensors_internal.h"

static char dir[256];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/tshard-st-format-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* Writes dir/name: the header text (its length first, or `len` when >= 0) and `data` bytes of
 * data (value i & 0xff). Returns the path (static buffer). */
static const char *write_st(const char *name, const char *header, int64_t len, size_t data) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  uint64_t n = len >= 0 ? (uint64_t)len : strlen(header);
  uint8_t lb[8];
  for (int i = 0; i < 8; i++)
    lb[i] = (uint8_t)(n >> (8 * i));
  fwrite(lb, 1, 8, f);
  fwrite(header, 1, strlen(header), f);
  for (size_t i = 0; i < data; i++)
    fputc((int)(i & 0xff), f);
  fclose(f);
  return path;
}

/* ts__st_open(path) fails with status and a message holding both needles. */
static void refused(const char *path, int status, const char *n1, const char *n2) {
  st_model *m = NULL;
  ts_error err;
  int rc = ts__st_open(path, &m, &err);
  ck_assert_msg(rc == status, "%s: status %d (%s), want %d", path, rc, rc ? err.msg : "", status);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)),
                "message '%s' lacks '%s' or '%s'", err.msg, n1, n2 ? n2 : "");
}

/* The dtypes beyond the first eight, and two tshard has not: those are checked by their bits,
 * kept, and refused by name when imported (ts__st_refuse_dtype). */
START_TEST(new_dtypes) {
  make_dir();
  const char *h = "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]},"
                  "\"s\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[4,8]},"
                  "\"w\":{\"dtype\":\"U16\",\"shape\":[1,2],\"data_offsets\":[8,12]},"
                  "\"x\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[12,20]},"
                  "\"y\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[24,32]},"
                  "\"e4\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[32,36]},"
                  "\"e5\":{\"dtype\":\"F8_E5M2\",\"shape\":[3],\"data_offsets\":[36,39]},"
                  "\"c\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[40,56]},"
                  "\"q\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[56,58]}}";
  const char *path = write_st("n.safetensors", h, -1, 58);
  st_model *m = NULL;
  ts_error err;
  ck_assert_int_eq(ts__st_open(path, &m, &err), TS_OK);
  ck_assert_int_eq(m->ntensors, 9);
  const struct {
    const char *name;
    ts_dtype dt;
    int64_t begin, bytes;
    const char *unsupported;
  } want[] = {{"m", TS_BOOL, 0, 3, NULL},        {"s", TS_I16, 4, 4, NULL},
              {"w", TS_U16, 8, 4, NULL},         {"x", TS_U32, 12, 8, NULL},
              {"y", TS_U64, 24, 8, NULL},        {"e4", TS_F8_E4M3, 32, 4, NULL},
              {"e5", TS_F8_E5M2, 36, 3, NULL},   {"c", TS_DTYPE_COUNT, 40, 16, "C64"},
              {"q", TS_DTYPE_COUNT, 56, 2, "F4"}};
  int64_t start = 8 + (int64_t)strlen(h);
  for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
    const st_tensor *t = ts__st_find(m, want[k].name);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, want[k].dt);
    ck_assert_int_eq(t->offset, start + want[k].begin);
    ck_assert_int_eq(t->bytes, want[k].bytes);
    if (want[k].unsupported) {
      ck_assert_str_eq(t->unsupported, want[k].unsupported);
      ck_assert_int_eq(ts__st_refuse_dtype(m, t, &err), TS_BAD_DTYPE);
      ck_assert_msg(strstr(err.msg, "n.safetensors") && strstr(err.msg, want[k].unsupported) &&
                        strstr(err.msg, "not supported") &&
                        strstr(err.msg, "BOOL I16 U16 U32 U64 F8_E4M3 F8_E5M2"),
                    "%s", err.msg);
    } else {
      ck_assert_ptr_null(t->unsupported);
    }
  }
  ts__st_close(&m);
  remove_dir();
}
END_TEST

START_TEST(every_dtype) {
  make_dir();
  const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                  "\"f\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                  "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[24,32]},"
                  "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[32,36]},"
                  "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[36,40]},"
                  "\"c\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[40,41]},"
                  "\"i\":{\"dtype\":\"I32\",\"shape\":[0,5],\"data_offsets\":[41,41]},"
                  "\"l\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[48,56]},"
                  "\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[41,44]}}";
  const char *path = write_st("m.safetensors", h, -1, 56);
  st_model *m = NULL;
  ts_error err;
  ck_assert_int_eq(ts__st_open(path, &m, &err), TS_OK);
  ck_assert_int_eq(m->ntensors, 8);
  const struct {
    const char *name;
    ts_dtype dt;
    int ndim;
    int64_t begin, bytes;
  } want[] = {{"f", TS_F32, 2, 0, 24},  {"d", TS_F64, 1, 24, 8}, {"h", TS_F16, 1, 32, 4},
              {"b", TS_BF16, 1, 36, 4}, {"c", TS_I8, 0, 40, 1},  {"i", TS_I32, 2, 41, 0},
              {"l", TS_I64, 2, 48, 8},  {"u", TS_U8, 1, 41, 3}};
  int64_t start = 8 + (int64_t)strlen(h);
  for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
    const st_tensor *t = ts__st_find(m, want[k].name);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, want[k].dt);
    ck_assert_int_eq(t->ndim, want[k].ndim);
    ck_assert_int_eq(t->offset, start + want[k].begin);
    ck_assert_int_eq(t->bytes, want[k].bytes);
  }
  ck_assert_ptr_nonnull(m->files[0].meta);
  ck_assert_str_eq(m->files[0].meta->text, "{\"format\":\"pt\"}");
  ts__st_close(&m);
  ck_assert_ptr_null(m);
  ts__st_close(NULL); /* accepts NULL */
  remove_dir();
}
END_TEST

START_TEST(index_of_two_files) {
  make_dir();
  write_st("a.safetensors",
           "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
           -1, 12);
  write_st("b.safetensors", "{\"z\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", -1,
           16);
  char idx[512];
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
  FILE *f = fopen(idx, "w");
  fputs("{\"metadata\":{\"total_size\":24},\"weight_map\":{\"z\":\"b.safetensors\","
        "\"x\":\"a.safetensors\"}}",
        f);
  fclose(f);
  st_model *m = NULL;
  ts_error err;
  ck_assert_int_eq(ts__st_open(idx, &m, &err), TS_OK);
  ck_assert_int_eq(m->ntensors, 2); /* y is not mapped */
  ck_assert_int_eq(m->nfiles, 2);
  ck_assert_str_eq(m->tensors[0].name, "z");
  ck_assert_str_eq(m->tensors[1].name, "x");
  ck_assert_ptr_null(ts__st_find(m, "y"));
  ts__st_close(&m);
  /* an index naming a path, or a tensor its file lacks */
  f = fopen(idx, "w");
  fputs("{\"weight_map\":{\"z\":\"../b.safetensors\"}}", f);
  fclose(f);
  refused(idx, TS_CORRUPT, "plain names", "../b.safetensors");
  f = fopen(idx, "w");
  fputs("{\"weight_map\":{\"w\":\"b.safetensors\"}}", f);
  fclose(f);
  refused(idx, TS_CORRUPT, "'w' is not in its file", "b.safetensors");
  f = fopen(idx, "w");
  fputs("{\"tensors\":{}}", f);
  fclose(f);
  refused(idx, TS_CORRUPT, "not an HF index", "weight_map");
  remove_dir();
}
END_TEST

START_TEST(bad_files) {
  make_dir();
  const char *ok2 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                    "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
  refused(write_st("trunc.safetensors", ok2, -1, 20), TS_CORRUPT, "trunc.safetensors",
          "tensor 'b'");
  refused(write_st("overlap.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                   "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                   -1, 24),
          TS_CORRUPT, "overlap", "'a'");
  refused(write_st("range.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[-16,0]}}", -1, 16),
          TS_CORRUPT, "range.safetensors", "outside");
  refused(write_st("huge.safetensors", "{}", ((int64_t)100 << 20) + 1, 0), TS_CORRUPT,
          "huge.safetensors", "100 MiB");
  refused(write_st("long.safetensors", "{}", 4096, 0), TS_CORRUPT, "long.safetensors",
          "does not fit");
  refused(write_st("json.safetensors", "{\"a\": {\"dtype\": ", -1, 8), TS_CORRUPT,
          "json.safetensors", "not a JSON object");
  refused(write_st("array.safetensors", "[1, 2]", -1, 8), TS_CORRUPT, "array.safetensors",
          "not a JSON object");
  refused(write_st("dtype.safetensors",
                   "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8),
          TS_BAD_DTYPE, "Q7 is unknown", "tensor 'a'");
  refused(write_st("c64.safetensors",
                   "{\"a\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 16),
          TS_CORRUPT, "hold 8 bytes", "C64 need 16"); /* checked by its bits though unsupported */
  refused(write_st("f4.safetensors",
                   "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", -1, 2),
          TS_CORRUPT, "12 bits of F4", "not a whole number of bytes");
  refused(write_st("shape.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8),
          TS_CORRUPT, "hold 8 bytes", "need 12");
  refused(write_st("neg.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, 8),
          TS_CORRUPT, "non-negative", "'a'");
  refused(write_st("over.safetensors",
                   "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                   "\"data_offsets\":[0,8]}}",
                   -1, 8),
          TS_CORRUPT, "more bytes than a file can", "'a'");
  refused(write_st("name.safetensors",
                   "{\"a\\tb\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8),
          TS_CORRUPT, "a\\tb", "not valid text");
  refused(write_st("meta.safetensors", "{\"__metadata__\":[1]}", -1, 0), TS_CORRUPT, "__metadata__",
          "meta.safetensors");
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  refused(fifo, TS_CORRUPT, "a FIFO", "fifo.safetensors");
  char missing[512];
  snprintf(missing, sizeof missing, "%s/missing.safetensors", dir);
  refused(missing, TS_NOT_FOUND, "missing.safetensors", NULL);
  remove_dir();
}
END_TEST

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The JSON of n one-byte U8 entries named <prefix><i> at data offsets from `at` on, between
 * `head` and `tail` (malloc'd). */
static char *entries_json(const char *head, const char *prefix, int from, int n, int at,
                          const char *tail) {
  size_t cap = strlen(head) + strlen(tail) + (size_t)n * (strlen(prefix) + 80) + 16, len = 0;
  char *h = malloc(cap);
  ck_assert_ptr_nonnull(h);
  len += (size_t)snprintf(h + len, cap - len, "%s", head);
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(h + len, cap - len,
                            "%s\"%s%d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                            i ? "," : "", prefix, from + i, at + i, at + i + 1);
  snprintf(h + len, cap - len, "%s", tail);
  return h;
}

START_TEST(many_entries) {
  make_dir();
  ts_error err;
  st_model *m = NULL;
  int n = 100000;
  char *h = entries_json("{", "layer.", 0, n, 0, "}");
  const char *path = write_st("many.safetensors", h, -1, (size_t)n);
  free(h);
  double t0 = now_s();
  ck_assert_int_eq(ts__st_open(path, &m, &err), TS_OK);
  ck_assert_int_eq(m->ntensors, n);
  char nm[64];
  for (int i = 0; i < n; i++) {
    snprintf(nm, sizeof nm, "layer.%d", i);
    const st_tensor *t = ts__st_find(m, nm);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->offset - m->files[0].data_start, i);
  }
  ck_assert_ptr_null(ts__st_find(m, "layer.-1"));
  ts__st_close(&m);
  double one = now_s() - t0;
  /* an index of two files, every name of its weight_map looked up in the model */
  int half = 50000;
  for (int f = 0; f < 2; f++) {
    h = entries_json("{", "w.", f * half, half, 0, "}");
    write_st(f ? "b.safetensors" : "a.safetensors", h, -1, (size_t)half);
    free(h);
  }
  char idx[512];
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
  FILE *fi = fopen(idx, "w");
  ck_assert_ptr_nonnull(fi);
  fputs("{\"weight_map\":{", fi);
  for (int i = 0; i < 2 * half; i++)
    fprintf(fi, "%s\"w.%d\":\"%s\"", i ? "," : "", i, i < half ? "a.safetensors" : "b.safetensors");
  fputs("}}", fi);
  fclose(fi);
  t0 = now_s();
  ck_assert_int_eq(ts__st_open(idx, &m, &err), TS_OK);
  ck_assert_int_eq(m->ntensors, 2 * half);
  ck_assert_int_eq(ts__st_find(m, "w.77777")->file, 1);
  ts__st_close(&m);
  double two = now_s() - t0;
  /* many entries, the last overlapping the first */
  h = entries_json("{", "x.", 0, n, 0,
                   ",\"last\":{\"dtype\":\"U8\",\"shape\":[2],"
                   "\"data_offsets\":[0,2]}}");
  path = write_st("overlap-many.safetensors", h, -1, (size_t)n);
  free(h);
  t0 = now_s();
  refused(path, TS_CORRUPT, "overlap", "'last'");
  double three = now_s() - t0;
  printf("100000 entries: %.2f s; an index of 100000: %.2f s; an overlap among 100001: %.2f s\n",
         one, two, three);
  /* a pairwise check of 100000 names takes some 5e9 comparisons: tens of seconds */
  ck_assert_msg(one < 10 && two < 10 && three < 10, "%.2f, %.2f, %.2f s", one, two, three);
  remove_dir();
}
END_TEST

START_TEST(metadata_text_to_text) {
  make_dir();
  ts_error err;
  st_model *m = NULL;
  const char *e = "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  const struct {
    const char *meta, *kept; /* kept NULL: nothing kept */
  } ok[] = {
      {"null", NULL}, {"{}", NULL}, {"{\"b\":\"2\",\"a\":\"1\"}", "{\"a\":\"1\",\"b\":\"2\"}"}};
  char h[512];
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    snprintf(h, sizeof h, "{\"__metadata__\":%s,%s", ok[i].meta, e);
    ck_assert_int_eq(ts__st_open(write_st("m.safetensors", h, -1, 4), &m, &err), TS_OK);
    if (ok[i].kept)
      ck_assert_str_eq(m->files[0].meta->text, ok[i].kept);
    else
      ck_assert_ptr_null(m->files[0].meta);
    ts__st_close(&m);
  }
  const char *bad[] = {"{\"a\":1}", "{\"format\":\"pt\",\"a\":[\"x\"]}", "{\"a\":{\"b\":\"c\"}}",
                       "{\"a\":true}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(h, sizeof h, "{\"__metadata__\":%s,%s", bad[i], e);
    refused(write_st("bad.safetensors", h, -1, 4), TS_CORRUPT, "__metadata__ entry 'a'",
            "bad.safetensors");
  }
  /* each file of an index keeps its own */
  write_st("a.safetensors",
           "{\"__metadata__\":{\"part\":\"1\"},"
           "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           -1, 4);
  write_st("b.safetensors",
           "{\"__metadata__\":{\"part\":\"2\"},"
           "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           -1, 4);
  char idx[512];
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
  FILE *f = fopen(idx, "w");
  fputs("{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}", f);
  fclose(f);
  ck_assert_int_eq(ts__st_open(idx, &m, &err), TS_OK);
  ck_assert_str_eq(m->files[ts__st_find(m, "x")->file].meta->text, "{\"part\":\"1\"}");
  ck_assert_str_eq(m->files[ts__st_find(m, "y")->file].meta->text, "{\"part\":\"2\"}");
  ts__st_close(&m);
  remove_dir();
}
END_TEST

/* A header of `{"__metadata__":{"s":"xxx..."}}` with `n` x's, or with `arrays` nested empty
 * arrays in its one tensor's shape (written to name; malloc'd text freed here). */
static const char *costly(const char *name, size_t n, size_t arrays) {
  size_t cap = n + 3 * arrays + 64;
  char *h = malloc(cap);
  ck_assert_ptr_nonnull(h);
  size_t len =
      (size_t)snprintf(h, cap, arrays ? "{\"a\":{\"shape\":[" : "{\"__metadata__\":{\"s\":\"");
  for (size_t i = 0; i < n; i++)
    h[len++] = 'x';
  for (size_t i = 0; i < arrays; i++)
    len += (size_t)snprintf(h + len, cap - len, "%s[]", i ? "," : "");
  snprintf(h + len, cap - len, arrays ? "]}}" : "\"}}");
  const char *path = write_st(name, h, -1, 0);
  free(h);
  return path;
}

START_TEST(header_memory_charged) {
  make_dir();
  ts_pool_config keep, c;
  ts_pool_get_config(&keep);
  c = keep;
  c.limit = 32 << 20;
  ts_pool_configure(&c);
  ts_pool_stats s0, s1;
  ts_pool_get_stats(&s0);
  /* 1 MiB of empty arrays: jansson takes about 50 MiB to parse them */
  refused(costly("arrays.safetensors", 0, 350000), TS_LIMIT, "parsing its header of",
          "of the memory limit of 33554432 bytes");
  /* a 4 MiB string fits; the metadata is counted while the model is open */
  st_model *m = NULL;
  ts_error err;
  ck_assert_int_eq(ts__st_open(costly("meta.safetensors", 4 << 20, 0), &m, &err), TS_OK);
  ck_assert_uint_eq(m->files[0].meta->len, (4 << 20) + 8);
  ts_pool_get_stats(&s1);
  ck_assert_uint_ge(s1.in_use, s0.in_use + (4 << 20));
  ts__st_close(&m);
  ts_pool_get_stats(&s1);
  ck_assert_uint_eq(s1.in_use, s0.in_use);
  /* a 12 MiB one does not */
  refused(costly("big.safetensors", 12 << 20, 0), TS_LIMIT, "big.safetensors", "bytes");
  ts_pool_get_stats(&s1);
  ck_assert_uint_eq(s1.in_use, s0.in_use);
  ts_pool_configure(&keep);
  remove_dir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("safetensors_format");
  TCase *tc = tcase_create("safetensors_format");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, every_dtype);
  tcase_add_test(tc, new_dtypes);
  tcase_add_test(tc, index_of_two_files);
  tcase_add_test(tc, bad_files);
  tcase_add_test(tc, many_entries);
  tcase_add_test(tc, metadata_text_to_text);
  tcase_add_test(tc, header_memory_charged);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
