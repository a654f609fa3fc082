/* test_ckpt_index.c - the checkpoint index and file headers without MPI (shard/ckpt/index/):
 * an index written and read back field by field, file headers built and parsed, and misuse: an
 * index that is not JSON, of another format, with a piece outside its tensor, a file name with a
 * slash, a checksum that is not hex, a huge shape, a block checksum table ("blocks") that is not
 * an object, lacks a key of its own, has a block size that is not a power of two in [64, 1 MiB]
 * or a checksum that is not 16 hex digits; headers whose length does not fit the file, that are
 * not JSON, lack the piece, or lie about its dtype, shape or offsets (the piece's and its
 * table's). Every error is a status and a message naming the file (and the piece), never a
 * crash. Untrusted ground: tensor names the requests' name rule refuses (the reserved prefix,
 * tabs, newlines, C1 controls, DEL, too long), shown escaped; a FIFO, a symbolic link or a
 * directory as the index or as a file (CORRUPT at once, never a blocked open); data_offsets whose
 * difference wraps around, ends before begins, or a box of more bytes than int64 holds (CORRUPT,
 * no signed overflow under UBSan). The leftovers of saves cut short (ckpt_clean.c): the
 * unlocked .BASE.tmp-HEX directories removed, a locked one, look-alike files and other names left,
 * a leftover holding a subdirectory refused naming it, bad and missing paths refused. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "ckpt_index_internal.h"

static char dir[64];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/tshard-ckidx-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) { ts__ckpt_remove_dir(dir); }

static void write_text(const char *name, const char *text) {
  char p[200];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static ts_ckpt_tensor sample(ts_ckpt_piece *pieces) {
  ts_ckpt_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "w");
  t.dtype = TS_BF16;
  t.ndim = 2;
  t.shape[0] = 6, t.shape[1] = 4;
  t.attr = "mesh=[2]@0-1 placements=[S(0)]";
  t.npieces = 2;
  t.pieces = pieces;
  for (int k = 0; k < 2; k++) {
    memset(&pieces[k], 0, sizeof pieces[k]);
    snprintf(pieces[k].file, sizeof pieces[k].file, "rank-%05d.safetensors", k);
    snprintf(pieces[k].key, sizeof pieces[k].key, "w#%d", k);
    pieces[k].box.ndim = 2;
    pieces[k].box.lo[0] = 3 * k, pieces[k].box.hi[0] = 3 * k + 3;
    pieces[k].box.hi[1] = 4;
    pieces[k].xxh3 = 0xfedcba9876543210ull + (uint64_t)k;
  }
  /* piece 1 has a block checksum table, piece 0 none (as written by another tool) */
  pieces[1].block_bytes = 4096;
  snprintf(pieces[1].block_key, sizeof pieces[1].block_key, "w#1.blocks");
  pieces[1].block_xxh3 = 0x0123456789abcdefull;
  return t;
}

START_TEST(index_round_trip) {
  make_dir();
  ts_ckpt_piece pieces[2];
  ts_ckpt_tensor t = sample(pieces);
  ts_ckpt_index idx = {.ntensors = 1, .tensors = &t, .saved_ranks = 2};
  char p[200];
  snprintf(p, sizeof p, "%s/index.json", dir);
  ts_error err;
  ck_assert_int_eq(ts_ckpt_index_write(&idx, p, &err), TS_OK);
  ts_ckpt_index *back = NULL;
  ck_assert_int_eq(ts_ckpt_index_read(dir, &back, &err), TS_OK);
  ck_assert_int_eq(back->ntensors, 1);
  ck_assert_int_eq(back->saved_ranks, 2);
  const ts_ckpt_tensor *b = ts_ckpt_index_find(back, "w");
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(b->dtype, TS_BF16);
  ck_assert_int_eq(b->ndim, 2);
  ck_assert_str_eq(b->attr, t.attr);
  ck_assert_int_eq(b->npieces, 2);
  for (int k = 0; k < 2; k++) {
    ck_assert_str_eq(b->pieces[k].file, pieces[k].file);
    ck_assert_str_eq(b->pieces[k].key, pieces[k].key);
    ck_assert(ts_box_equal(&b->pieces[k].box, &pieces[k].box));
    ck_assert(b->pieces[k].xxh3 == pieces[k].xxh3);
    ck_assert_int_eq(b->pieces[k].block_bytes, pieces[k].block_bytes);
    ck_assert_str_eq(b->pieces[k].block_key, pieces[k].block_key);
    ck_assert(b->pieces[k].block_xxh3 == pieces[k].block_xxh3);
  }
  ck_assert_int_eq(b->pieces[0].block_bytes, 0);
  ck_assert_ptr_null(ts_ckpt_index_find(back, "nope"));
  char *text = ts_ckpt_index_describe(back, dir);
  ck_assert_ptr_nonnull(strstr(text, "fedcba9876543211"));
  /* the table is mentioned on piece 1's line only */
  char *line1 = strstr(text, "w#1");
  ck_assert_ptr_nonnull(line1);
  ck_assert_ptr_nonnull(strstr(line1, "blocks 4096"));
  ck_assert(strstr(text, "blocks") == strstr(line1, "blocks"));
  free(text);
  ts_ckpt_index_destroy(&back);
  ts_ckpt_index_destroy(&back); /* NULL is fine */
  remove_dir();
}
END_TEST

static void bad_index(const char *text, int code, const char *needle) {
  write_text("index.json", text);
  ts_ckpt_index *idx = NULL;
  ts_error err;
  int rc = ts_ckpt_index_read(dir, &idx, &err);
  ck_assert_msg(rc == code, "'%s': %d, expected %d (%s)", text, rc, code, rc ? err.msg : "");
  ck_assert_ptr_null(idx);
  ck_assert_msg(strstr(err.msg, "index.json") && strstr(err.msg, needle), "'%s': message '%s'",
                text, err.msg);
}

#define HEAD "{\"format\":\"tshard-checkpoint\",\"version\":1,\"tensors\":{\"w\":{"
#define GOOD_T "\"dtype\":\"f32\",\"shape\":[4,2],\"attr\":\"x\",\"pieces\":"
START_TEST(index_misuse) {
  make_dir();
  ts_ckpt_index *idx = NULL;
  ts_error err;
  ck_assert_int_eq(ts_ckpt_index_read(dir, &idx, &err), TS_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(err.msg, "index.json"));
  bad_index("{not json", TS_CORRUPT, "not JSON");
  bad_index("{\"format\":\"other\",\"version\":1,\"tensors\":{}}", TS_CORRUPT, "format");
  bad_index("{\"format\":\"tshard-checkpoint\",\"version\":2,\"tensors\":{}}", TS_CORRUPT,
            "version");
  bad_index(HEAD "\"dtype\":\"f31\",\"shape\":[4],\"attr\":\"x\",\"pieces\":[]}}}", TS_CORRUPT,
            "dtype");
  bad_index(HEAD "\"dtype\":\"f32\",\"shape\":[4,-1],\"attr\":\"x\",\"pieces\":[]}}}", TS_CORRUPT,
            "shape");
  bad_index(HEAD "\"dtype\":\"f32\",\"shape\":[1125899906842624,1125899906842624],"
                 "\"attr\":\"x\",\"pieces\":[]}}}",
            TS_CORRUPT, "2^50");
  /* A zero dim bounds nothing: the shapes create refuses are refused here too. */
  bad_index(HEAD "\"dtype\":\"u8\",\"shape\":[0,1099511627776,1099511627776],"
                 "\"attr\":\"x\",\"pieces\":[]}}}",
            TS_CORRUPT, "2^50 bytes");
  bad_index(HEAD GOOD_T "[{\"file\":\"../x\",\"key\":\"w#0\",\"box\":[[0,4],[0,2]],"
                        "\"xxh3\":\"0000000000000000\"}]}}}",
            TS_CORRUPT, "file name");
  bad_index(HEAD GOOD_T "[{\"file\":\"a\",\"key\":\"w#0\",\"box\":[[0,5],[0,2]],"
                        "\"xxh3\":\"0000000000000000\"}]}}}",
            TS_CORRUPT, "box dim 0");
  bad_index(HEAD GOOD_T "[{\"file\":\"a\",\"key\":\"w#0\",\"box\":[[0,4]],"
                        "\"xxh3\":\"0000000000000000\"}]}}}",
            TS_CORRUPT, "box");
  bad_index(HEAD GOOD_T "[{\"file\":\"a\",\"key\":\"w#0\",\"box\":[[0,4],[0,2]],"
                        "\"xxh3\":\"00000000zz000000\"}]}}}",
            TS_CORRUPT, "hex");
  /* BUG: (fixed in commit 24b1fa5, shard/ckpt/index/ckpt_index.c read_piece) 16 characters strtoull
   * takes but not 16 hex digits (a sign, a space, 0x) were accepted as a piece's xxh3 */
  bad_index(HEAD GOOD_T "[{\"file\":\"a\",\"key\":\"w#0\",\"box\":[[0,4],[0,2]],"
                        "\"xxh3\":\"-000000000000001\"}]}}}",
            TS_CORRUPT, "hex");
  bad_index(HEAD GOOD_T "[{\"file\":\"a\",\"key\":\"w#0\",\"box\":[[0,4],[0,2]],"
                        "\"xxh3\":\"0x00000000000001\"}]}}}",
            TS_CORRUPT, "hex");
  bad_index(HEAD GOOD_T "{}}}}", TS_CORRUPT, "pieces");
  remove_dir();
}
END_TEST

/* An index of one piece whose "blocks" value is `blocks`. */
static void bad_blocks(const char *blocks, const char *needle) {
  char text[1024];
  snprintf(text, sizeof text,
           HEAD GOOD_T "[{\"file\":\"a\",\"key\":\"w#0\",\"box\":[[0,4],[0,2]],"
                       "\"xxh3\":\"0000000000000000\",\"blocks\":%s}]}}}",
           blocks);
  char want[200];
  snprintf(want, sizeof want, "piece 'w#0': %s", needle); /* the piece is named too */
  bad_index(text, TS_CORRUPT, want);
}

#define KEY "\"key\":\"w#0.blocks\""
#define HEX "\"xxh3\":\"0123456789abcdef\""
START_TEST(blocks_misuse) {
  make_dir();
  /* a good one first: read back */
  char text[1024];
  snprintf(text, sizeof text,
           HEAD GOOD_T "[{\"file\":\"a\",\"key\":\"w#0\",\"box\":[[0,4],[0,2]],"
                       "\"xxh3\":\"0000000000000000\",\"blocks\":{" KEY ",\"bytes\":64," HEX
                       "}}]}}}");
  write_text("index.json", text);
  ts_ckpt_index *idx = NULL;
  ts_error err;
  ck_assert_int_eq(ts_ckpt_index_read(dir, &idx, &err), TS_OK);
  ck_assert_int_eq(idx->tensors[0].pieces[0].block_bytes, 64);
  ck_assert_str_eq(idx->tensors[0].pieces[0].block_key, "w#0.blocks");
  ck_assert(idx->tensors[0].pieces[0].block_xxh3 == 0x0123456789abcdefull);
  ts_ckpt_index_destroy(&idx);
  /* not an object */
  bad_blocks("5", "blocks");
  bad_blocks("\"w#0.blocks\"", "blocks");
  bad_blocks("[\"w#0.blocks\",4096,\"0123456789abcdef\"]", "blocks");
  bad_blocks("null", "blocks");
  /* no key of its own */
  bad_blocks("{\"bytes\":4096," HEX "}", "blocks has no key");
  bad_blocks("{\"key\":\"\",\"bytes\":4096," HEX "}", "blocks has no key");
  bad_blocks("{\"key\":\"w#0\",\"bytes\":4096," HEX "}", "blocks has no key");
  bad_blocks("{\"key\":7,\"bytes\":4096," HEX "}", "blocks has no key");
  /* bytes: not a power of two, below 64, above 1 MiB, not an integer */
  const char *bytes[] = {"100",     "4095",    "32",       "0",      "-4096",
                         "2097152", "1048577", "\"4096\"", "4096.0", "null"};
  for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++) {
    char b[200];
    snprintf(b, sizeof b, "{" KEY ",\"bytes\":%s," HEX "}", bytes[i]);
    bad_blocks(b, "blocks.bytes");
  }
  /* xxh3: not 16 hex digits */
  const char *hex[] = {"\"0123456789abcdeg\"",  "\"0123456789abcde\"",
                       "\"0123456789abcdef0\"", "\"\"",
                       "81985529216486895",     "null",
                       "\"-000000000000001\"",  "\" 00000000000000f\"",
                       "\"0x0000000000000f\"",  "\"+000000000000001\""};
  for (size_t i = 0; i < sizeof hex / sizeof hex[0]; i++) {
    char b[200];
    snprintf(b, sizeof b, "{" KEY ",\"bytes\":4096,\"xxh3\":%s}", hex[i]);
    bad_blocks(b, "blocks.xxh3");
  }
  bad_blocks("{" KEY ",\"bytes\":4096}", "blocks.xxh3");
  /* BUG: (fixed in commit 24b1fa5) "-000000000000001", " 00000000000000f" and
   * "0x0000000000000f" passed as blocks.xxh3 (strtoull takes a sign, spaces and 0x) and loaded
   * as another checksum ("-000000000000001" as ffffffffffffffff) */
  remove_dir();
}
END_TEST

/* A file with one f32 piece [2,3] of tensor t and its data. */
static void write_file(const char *name, const uint8_t *hdr, size_t hlen, size_t data_bytes) {
  char p[200];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  fwrite(hdr, 1, hlen, f);
  for (size_t i = 0; i < data_bytes; i++)
    fputc((int)i, f);
  fclose(f);
}

static void raw_header(const char *name, uint64_t len_field, const char *json, size_t data) {
  uint8_t b[512];
  size_t n = strlen(json);
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(len_field >> (8 * i));
  memcpy(b + 8, json, n);
  write_file(name, b, 8 + n, data);
}

/* Tensor t (f32 [4, 3]) and its piece t#1 (rows 2 to 4) in file f. */
static void sample_t1(ts_ckpt_tensor *t, ts_ckpt_piece *p) {
  memset(t, 0, sizeof *t);
  memset(p, 0, sizeof *p);
  snprintf(t->name, sizeof t->name, "t");
  t->dtype = TS_F32;
  t->ndim = 2;
  t->shape[0] = 4, t->shape[1] = 3;
  snprintf(p->key, sizeof p->key, "t#1");
  snprintf(p->file, sizeof p->file, "f");
  p->box.ndim = 2;
  p->box.lo[0] = 2, p->box.hi[0] = 4, p->box.hi[1] = 3;
}

START_TEST(headers) {
  make_dir();
  ts_ckpt_tensor t;
  ts_ckpt_piece p;
  sample_t1(&t, &p);
  ckpt_entry e = {"t#1", TS_F32, 2, {2, 3}, 0, 24, false};
  uint8_t *hdr = NULL;
  size_t hlen = 0;
  ts_error err;
  ck_assert_int_eq(ts__ckpt_header_build(&e, 1, 0, &hdr, &hlen, &err), TS_OK);
  ck_assert_int_eq(hlen % 4096, 0); /* the data section starts on a 4 KiB multiple */
  /* padded so that byte 24 of the data section lands on one */
  uint8_t *h24 = NULL;
  size_t l24 = 0;
  ck_assert_int_eq(ts__ckpt_header_build(&e, 1, 24, &h24, &l24, &err), TS_OK);
  ck_assert_int_eq((l24 + 24) % 4096, 0);
  ck_assert_int_eq(l24 % 8, 0);
  free(h24);
  write_file("f", hdr, hlen, 24);
  ckpt_file f;
  ck_assert_int_eq(ts__ckpt_file_open(dir, "f", &f, &err), TS_OK);
  int64_t off = -1;
  ck_assert_int_eq(ts__ckpt_file_piece(&f, &t, &p, &off, &err), TS_OK);
  ck_assert_int_eq(off, (int64_t)hlen);
  /* lies: dtype, shape, missing key, offsets beyond the file */
  t.dtype = TS_I32;
  ck_assert_int_eq(ts__ckpt_file_piece(&f, &t, &p, &off, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "dtype"));
  ck_assert_ptr_nonnull(strstr(err.msg, "'f'"));
  ck_assert_ptr_nonnull(strstr(err.msg, "t#1"));
  t.dtype = TS_F32;
  p.box.lo[0] = 1;
  ck_assert_int_eq(ts__ckpt_file_piece(&f, &t, &p, &off, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "shape"));
  p.box.lo[0] = 2;
  snprintf(p.key, sizeof p.key, "t#9");
  ck_assert_int_eq(ts__ckpt_file_piece(&f, &t, &p, &off, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "no such piece"));
  ts__ckpt_file_close(&f);
  ts__ckpt_file_close(&f); /* twice is fine */
  free(hdr);
  snprintf(p.key, sizeof p.key, "t#1");
  ckpt_entry far = {"t#1", TS_F32, 2, {2, 3}, 8, 32, false};
  ck_assert_int_eq(ts__ckpt_header_build(&far, 1, 0, &hdr, &hlen, &err), TS_OK);
  write_file("g", hdr, hlen, 24); /* the data section is 24 bytes, the piece claims [8, 32) */
  free(hdr);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "g", &f, &err), TS_OK);
  ck_assert_int_eq(ts__ckpt_file_piece(&f, &t, &p, &off, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "data_offsets"));
  ts__ckpt_file_close(&f);
  /* broken files */
  ck_assert_int_eq(ts__ckpt_file_open(dir, "missing", &f, &err), TS_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(err.msg, "missing"));
  write_text("short", "abc");
  ck_assert_int_eq(ts__ckpt_file_open(dir, "short", &f, &err), TS_CORRUPT);
  raw_header("huge", 1ull << 62, "{}", 0);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "huge", &f, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "header length"));
  raw_header("notjson", 8, "{{{{{{{{", 0);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "notjson", &f, &err), TS_CORRUPT);
  raw_header("array", 8, "[1,2,3] ", 0);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "array", &f, &err), TS_CORRUPT);
  /* a long padding (other writers may pad far): any JSON whitespace is fine, anything else after
   * the object is not, and a header of whitespace alone is no object */
  size_t plen = 200 << 10;
  uint8_t *big = malloc(8 + plen);
  ck_assert_ptr_nonnull(big);
  for (int i = 0; i < 8; i++)
    big[i] = (uint8_t)((uint64_t)plen >> (8 * i));
  for (size_t i = 0; i < plen; i++)
    big[8 + i] = " \n\t\r"[i % 4];
  memcpy(big + 8, "{\"a\":1}", 7);
  write_file("padded", big, 8 + plen, 0);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "padded", &f, &err), TS_OK);
  ck_assert_int_eq(f.data_start, 8 + (int64_t)plen);
  ts__ckpt_file_close(&f);
  big[8 + plen - 70000] = 'x';
  write_file("trailing", big, 8 + plen, 0);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "trailing", &f, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "/trailing'"));
  memset(big + 8, ' ', plen);
  write_file("blank", big, 8 + plen, 0);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "blank", &f, &err), TS_CORRUPT);
  free(big);
  remove_dir();
}
END_TEST

/* An index of one tensor named by the JSON string `jname` (escapes as JSON writes them). */
static void bad_name(const char *jname, const char *shown) {
  char text[1024], want[300];
  snprintf(text, sizeof text,
           "{\"format\":\"tshard-checkpoint\",\"version\":1,\"tensors\":{"
           "\"%s\":{" GOOD_T "[]}}}",
           jname);
  snprintf(want, sizeof want, "tensor \"%s\": the name ", shown);
  bad_index(text, TS_CORRUPT, want);
}

START_TEST(index_names) {
  make_dir();
  bad_name("__tshard_x", "__tshard_x");
  bad_name("__tshard", "__tshard");
  bad_name("a\\tb", "a\\tb");
  bad_name("a\\nb", "a\\nb");
  bad_name("\\r", "\\r");
  bad_name("\\u0085x", "\\u0085x");
  bad_name("x\\u009f", "x\\u009f");
  bad_name("a\\u007fb", "a\\x7fb");
  bad_name("\\u0001", "\\x01");
  bad_name("", "");
  char longest[200];
  memset(longest, 'n', 128);
  longest[128] = '\0';
  bad_name(longest, longest); /* 128 bytes; 127 is the most */
  /* what the rule allows loads: non-ASCII letters, U+00A0 (just past the C1 controls), 127
   * bytes, a prefix that only starts like the reserved one */
  const char *good[] = {"w\\u00e9ight", "\\u00a0x", "__tshar", "a b.c-d/e", longest + 1};
  const char *back[] = {"w\xc3\xa9ight", "\xc2\xa0x", "__tshar", "a b.c-d/e", longest + 1};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"format\":\"tshard-checkpoint\",\"version\":1,\"tensors\":{"
             "\"%s\":{" GOOD_T "[]}}}",
             good[i]);
    write_text("index.json", text);
    ts_ckpt_index *idx = NULL;
    ts_error err;
    ck_assert_msg(ts_ckpt_index_read(dir, &idx, &err) == TS_OK, "%s: %s", good[i], err.msg);
    ck_assert_str_eq(idx->tensors[0].name, back[i]);
    ts_ckpt_index_destroy(&idx);
  }
  /* the escape itself: quotes, backslashes, controls, C1, bytes that are not UTF-8, cut whole */
  char out[64];
  ts__ckpt_text_escape("q\"b\\t\tn\n\x01\x7f\xc2\x85\xc3\xa9\xff", out, sizeof out);
  ck_assert_str_eq(out, "q\\\"b\\\\t\\tn\\n\\x01\\x7f\\u0085\xc3\xa9\\xff");
  ts__ckpt_text_escape("ab\tc", out, 4); /* "ab\\t" does not fit 3 bytes and a NUL: "ab" */
  ck_assert_str_eq(out, "ab");
  remove_dir();
}
END_TEST

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Opening `name` of dir as the index (index.json) or as a file is CORRUPT naming it and its kind,
 * at once. */
static void not_regular(const char *name, const char *kind) {
  char want[300];
  snprintf(want, sizeof want, "%s/%s' is %s", dir, name, kind);
  ts_error err;
  double t0 = now_s();
  if (strcmp(name, "index.json") == 0) {
    ts_ckpt_index *idx = NULL;
    ck_assert_int_eq(ts_ckpt_index_read(dir, &idx, &err), TS_CORRUPT);
    ck_assert_ptr_null(idx);
  } else {
    ckpt_file f;
    ck_assert_int_eq(ts__ckpt_file_open(dir, name, &f, &err), TS_CORRUPT);
    ck_assert_int_eq(f.fd, -1);
  }
  ck_assert_msg(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
  ck_assert_msg(now_s() - t0 < 1.0, "%s: %.3f s", name, now_s() - t0);
}

START_TEST(not_regular_files) {
  make_dir();
  char p[200], q[200];
  snprintf(p, sizeof p, "%s/index.json", dir);
  ck_assert_int_eq(mkfifo(p, 0600), 0);
  not_regular("index.json", "a FIFO");
  unlink(p);
  write_text("real.json", "{}");
  snprintf(q, sizeof q, "%s/real.json", dir);
  ck_assert_int_eq(symlink(q, p), 0);
  not_regular("index.json", "a symbolic link");
  unlink(p);
  ck_assert_int_eq(mkdir(p, 0700), 0);
  not_regular("index.json", "a directory");
  rmdir(p);
  /* piece files: a FIFO, a link to a good file, a directory, a link to a FIFO */
  ckpt_entry e = {"t#1", TS_F32, 2, {2, 3}, 0, 24, false};
  uint8_t *hdr = NULL;
  size_t hlen = 0;
  ts_error err;
  ck_assert_int_eq(ts__ckpt_header_build(&e, 1, 0, &hdr, &hlen, &err), TS_OK);
  write_file("good", hdr, hlen, 24);
  free(hdr);
  snprintf(p, sizeof p, "%s/fifo", dir);
  ck_assert_int_eq(mkfifo(p, 0600), 0);
  not_regular("fifo", "a FIFO");
  snprintf(p, sizeof p, "%s/link", dir);
  snprintf(q, sizeof q, "%s/good", dir);
  ck_assert_int_eq(symlink(q, p), 0);
  not_regular("link", "a symbolic link");
  snprintf(p, sizeof p, "%s/fifolink", dir);
  snprintf(q, sizeof q, "%s/fifo", dir);
  ck_assert_int_eq(symlink(q, p), 0);
  not_regular("fifolink", "a symbolic link");
  snprintf(p, sizeof p, "%s/sub", dir);
  ck_assert_int_eq(mkdir(p, 0700), 0);
  not_regular("sub", "a directory");
  rmdir(p);
  /* the good one opens, its reads blocking */
  ckpt_file f;
  ck_assert_int_eq(ts__ckpt_file_open(dir, "good", &f, &err), TS_OK);
  ck_assert_int_eq(fcntl(f.fd, F_GETFL) & O_NONBLOCK, 0);
  ts__ckpt_file_close(&f);
  remove_dir();
}
END_TEST

/* A file whose entry t#1 (f32 [2, 3], 24 bytes; with a U64 [1] table t#1.blocks) claims the
 * given data_offsets, the data section `data` bytes. */
static void lying_offsets(const char *name, const char *offs, const char *toffs, size_t data) {
  char json[400];
  snprintf(json, sizeof json,
           "{\"t#1\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":%s},"
           "\"t#1.blocks\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":%s}}",
           offs, toffs);
  size_t n = strlen(json);
  while (n % 8)
    json[n++] = ' ';
  json[n] = '\0';
  raw_header(name, n, json, data);
}

START_TEST(offsets_overflow) {
  make_dir();
  ts_ckpt_tensor t;
  ts_ckpt_piece p;
  sample_t1(&t, &p);
  snprintf(p.block_key, sizeof p.block_key, "t#1.blocks");
  p.block_bytes = 4096;
  ts_error err;
  ckpt_file f;
  int64_t off = -1;
  /* good: the table at [0, 8), the piece at [8, 32) */
  lying_offsets("good", "[8,32]", "[0,8]", 32);
  ck_assert_int_eq(ts__ckpt_file_open(dir, "good", &f, &err), TS_OK);
  ck_assert_int_eq(ts__ckpt_file_piece(&f, &t, &p, &off, &err), TS_OK);
  ck_assert_int_eq(off, f.data_start + 8);
  ck_assert_int_eq(ts__ckpt_file_table(&f, &t, &p, &off, &err), TS_OK);
  ck_assert_int_eq(off, f.data_start);
  ts__ckpt_file_close(&f);
  /* the piece's: end - begin wraps to 24; negative; end before begin; past the file */
  const char *bad[] = {"[9223372036854775800,-9223372036854775792]",
                       "[-9223372036854775808,9223372036854775807]",
                       "[-8,16]",
                       "[32,8]",
                       "[9223372036854775807,9223372036854775807]",
                       "[16,40]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lying_offsets("lie", bad[i], "[0,8]", 32);
    ck_assert_int_eq(ts__ckpt_file_open(dir, "lie", &f, &err), TS_OK);
    ck_assert_msg(ts__ckpt_file_piece(&f, &t, &p, &off, &err) == TS_CORRUPT, "%s", bad[i]);
    ck_assert_msg(strstr(err.msg, "'lie', piece 't#1' (tensor 't'") &&
                      strstr(err.msg, "data_offsets"),
                  "%s: %s", bad[i], err.msg);
    ts__ckpt_file_close(&f);
  }
  /* the table's, the same way */
  const char *tbad[] = {"[9223372036854775800,-9223372036854775808]", "[-8,0]", "[8,0]",
                        "[9223372036854775807,-9223372036854775801]", "[32,40]"};
  for (size_t i = 0; i < sizeof tbad / sizeof tbad[0]; i++) {
    lying_offsets("tlie", "[8,32]", tbad[i], 32);
    ck_assert_int_eq(ts__ckpt_file_open(dir, "tlie", &f, &err), TS_OK);
    ck_assert_msg(ts__ckpt_file_table(&f, &t, &p, &off, &err) == TS_CORRUPT, "%s", tbad[i]);
    ck_assert_msg(strstr(err.msg, "t#1.blocks") && strstr(err.msg, "data_offsets"), "%s: %s",
                  tbad[i], err.msg);
    ts__ckpt_file_close(&f);
  }
  /* a box of more bytes than int64 holds (2^31 x 2^31 f32 = 2^64 bytes) */
  ck_assert_int_eq(ts__ckpt_file_open(dir, "good", &f, &err), TS_OK);
  p.box.lo[0] = 0, p.box.hi[0] = (int64_t)1 << 31;
  p.box.lo[1] = 0, p.box.hi[1] = (int64_t)1 << 31;
  ck_assert_int_eq(ts__ckpt_file_piece(&f, &t, &p, &off, &err), TS_CORRUPT);
  ck_assert_int_eq(ts__ckpt_file_table(&f, &t, &p, &off, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "more bytes"));
  ts__ckpt_file_close(&f);
  remove_dir();
}
END_TEST

START_TEST(paths_and_dtypes) {
  char parent[64], base[32];
  ts_error err;
  ck_assert_int_eq(ts__ckpt_split_path("/a/b/c//", parent, sizeof parent, base, sizeof base, &err),
                   TS_OK);
  ck_assert_str_eq(parent, "/a/b");
  ck_assert_str_eq(base, "c");
  ck_assert_int_eq(ts__ckpt_split_path("c", parent, sizeof parent, base, sizeof base, &err), TS_OK);
  ck_assert_str_eq(parent, ".");
  ck_assert_int_eq(ts__ckpt_split_path("/c", parent, sizeof parent, base, sizeof base, &err),
                   TS_OK);
  ck_assert_str_eq(parent, "/");
  ck_assert_int_eq(ts__ckpt_split_path("/", parent, sizeof parent, base, sizeof base, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts__ckpt_split_path("", parent, sizeof parent, base, sizeof base, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts__ckpt_split_path("/a/..", parent, sizeof parent, base, sizeof base, &err),
                   TS_INVALID_ARGUMENT);
  for (int d = 0; d < TS_DTYPE_COUNT; d++) {
    ts_dtype back;
    ck_assert_int_eq(ts_ckpt_dtype_parse(ts_ckpt_dtype_name((ts_dtype)d), &back), TS_OK);
    ck_assert_int_eq(back, d);
  }
  ts_dtype x;
  ck_assert_int_eq(ts_ckpt_dtype_parse("f32", &x), TS_BAD_DTYPE); /* safetensors names only */
  ck_assert_int_eq(ts_ckpt_dtype_parse(NULL, &x), TS_BAD_DTYPE);
}
END_TEST

static void make_tmp(const char *name, bool with_file) {
  char p[200];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  ck_assert_int_eq(mkdir(p, 0700), 0);
  if (with_file) {
    snprintf(p, sizeof p, "%s/rank-00000.safetensors", name);
    write_text(p, "partial");
  }
}

static bool exists(const char *name) {
  char p[200];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

START_TEST(clean_leftovers) {
  make_dir();
  char target[128], path[200], want[400];
  snprintf(target, sizeof target, "%s/ck/", dir); /* a trailing slash is the same directory */
  make_tmp(".ck.tmp-abc", true);
  make_tmp(".ck.tmp-def", true);
  make_tmp(".ck.tmp-xyz", false); /* not hex: no save's */
  make_tmp(".ck2.tmp-12", false); /* another target's */
  write_text(".ck.tmp-99", "an export's temporary file");
  snprintf(path, sizeof path, "%s/.ck.tmp-def", dir);
  int lock = ts_ckpt_tmp_lock(path);
  ck_assert_int_ge(lock, 0);
  ts_ckpt_cleaned cl;
  ts_error err;
  ck_assert_int_eq(ts_ckpt_clean_tmp(target, &cl, &err), TS_OK);
  ck_assert_int_eq(cl.nremoved, 1);
  ck_assert_int_eq(cl.nbusy, 1);
  snprintf(want, sizeof want, "%s/.ck.tmp-abc\n", dir);
  ck_assert_str_eq(cl.removed, want);
  snprintf(want, sizeof want, "%s/.ck.tmp-def\n", dir);
  ck_assert_str_eq(cl.busy, want);
  ts_ckpt_cleaned_clear(&cl);
  ck_assert(!exists(".ck.tmp-abc") && exists(".ck.tmp-def") && exists(".ck.tmp-xyz") &&
            exists(".ck2.tmp-12") && exists(".ck.tmp-99"));
  close(lock);
  make_tmp(".ck.tmp-def/sub", false); /* a save's directory holds files only */
  ck_assert_int_eq(ts_ckpt_clean_tmp(target, &cl, &err), TS_CHECKPOINT_IO);
  ck_assert_ptr_nonnull(strstr(err.msg, ".ck.tmp-def/sub"));
  ts_ckpt_cleaned_clear(&cl);
  ck_assert(exists(".ck.tmp-def/sub"));
  snprintf(path, sizeof path, "%s/.ck.tmp-def/sub", dir);
  ck_assert_int_eq(rmdir(path), 0);
  ck_assert_int_eq(ts_ckpt_clean_tmp(target, &cl, &err), TS_OK);
  ck_assert_int_eq(cl.nremoved, 1);
  ck_assert_ptr_null(cl.busy);
  ts_ckpt_cleaned_clear(&cl);
  ck_assert(!exists(".ck.tmp-def"));
  snprintf(path, sizeof path, "%s/missing/ck", dir);
  ck_assert_int_eq(ts_ckpt_clean_tmp(path, &cl, &err), TS_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(err.msg, "missing"));
  ck_assert_int_eq(ts_ckpt_clean_tmp("", &cl, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_ckpt_clean_tmp("/", &cl, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_ckpt_clean_tmp("/a/..", &cl, &err), TS_INVALID_ARGUMENT);
  ts_ckpt_cleaned_clear(NULL);
  snprintf(path, sizeof path, "%s/.ck.tmp-xyz", dir);
  rmdir(path);
  snprintf(path, sizeof path, "%s/.ck2.tmp-12", dir);
  rmdir(path);
  remove_dir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("ckpt_index");
  TCase *tc = tcase_create("ckpt_index");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, index_round_trip);
  tcase_add_test(tc, index_misuse);
  tcase_add_test(tc, blocks_misuse);
  tcase_add_test(tc, headers);
  tcase_add_test(tc, paths_and_dtypes);
  tcase_add_test(tc, index_names);
  tcase_add_test(tc, not_regular_files);
  tcase_add_test(tc, offsets_overflow);
  tcase_add_test(tc, clean_leftovers);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
