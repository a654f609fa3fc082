/* test_ckpt_sequence.c - the snapshot sequence an index records (shard/ckpt/index/, no MPI): an
 * index written with a sequence reads it back (ts_ckpt_index_read and the light
 * ts_ckpt_index_sequence agree), one without reads 0 (checkpoints saved by clients, snapshots of
 * older daemons), and a sequence that is not an integer from 1 to 2^53 (0, negative, a string,
 * a fraction, 2^53 + 1) is CORRUPT naming the field in both readers, as is an index of another
 * format for the light reader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "ckpt_index_internal.h"

static char dir[64];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/tshard-ckseq-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) { ts__ckpt_remove_dir(dir); }

static void write_index(const char *text) {
  char p[200];
  snprintf(p, sizeof p, "%s/index.json", dir);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* One tensor of one piece. */
static void write_with(int64_t sequence) {
  ts_ckpt_piece piece;
  memset(&piece, 0, sizeof piece);
  snprintf(piece.file, sizeof piece.file, "rank-00000.safetensors");
  snprintf(piece.key, sizeof piece.key, "w#0");
  piece.box.ndim = 1;
  piece.box.hi[0] = 4;
  ts_ckpt_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "w");
  t.dtype = TS_F32;
  t.ndim = 1;
  t.shape[0] = 4;
  t.attr = "mesh=[1] placements=[R]";
  t.npieces = 1;
  t.pieces = &piece;
  ts_ckpt_index idx = {.ntensors = 1, .tensors = &t, .saved_ranks = 1, .sequence = sequence};
  char p[200];
  snprintf(p, sizeof p, "%s/index.json", dir);
  ts_error err;
  ck_assert_int_eq(ts_ckpt_index_write(&idx, p, &err), TS_OK);
}

START_TEST(sequence_round_trip) {
  make_dir();
  ts_error err;
  for (int k = 0; k < 3; k++) {
    int64_t want = k == 0 ? 0 : k == 1 ? 42 : TS_CKPT_SEQUENCE_MAX;
    write_with(want);
    ts_ckpt_index *idx = NULL;
    ck_assert_int_eq(ts_ckpt_index_read(dir, &idx, &err), TS_OK);
    ck_assert_int_eq(idx->sequence, want);
    ts_ckpt_index_destroy(&idx);
    int64_t got = -1;
    ck_assert_int_eq(ts_ckpt_index_sequence(dir, &got, &err), TS_OK);
    ck_assert_int_eq(got, want);
  }
  remove_dir();
}
END_TEST

#define HEAD "{\"format\":\"tshard-checkpoint\",\"version\":1,\"saved_ranks\":1,"
#define TAIL "\"tensors\":{}}"

START_TEST(sequence_misuse) {
  make_dir();
  const char *bad[] = {"0", "-1", "\"5\"", "1.5", "9007199254740993", "null", "[1]"};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    char text[256];
    snprintf(text, sizeof text, HEAD "\"sequence\":%s," TAIL, bad[k]);
    write_index(text);
    ts_error err;
    ts_ckpt_index *idx = NULL;
    ck_assert_int_eq(ts_ckpt_index_read(dir, &idx, &err), TS_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "sequence"));
    ck_assert_ptr_null(idx);
    int64_t got = -1;
    ck_assert_int_eq(ts_ckpt_index_sequence(dir, &got, &err), TS_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "sequence"));
    ck_assert_ptr_nonnull(strstr(err.msg, dir));
    ck_assert_int_eq(got, 0);
  }
  write_index("{\"format\":\"other\",\"sequence\":3," TAIL);
  ts_error err;
  int64_t got = -1;
  ck_assert_int_eq(ts_ckpt_index_sequence(dir, &got, &err), TS_CORRUPT);
  ck_assert_ptr_nonnull(strstr(err.msg, "format"));
  write_index("not json");
  ck_assert_int_eq(ts_ckpt_index_sequence(dir, &got, &err), TS_CORRUPT);
  char p[200];
  snprintf(p, sizeof p, "%s/index.json", dir);
  unlink(p);
  ck_assert_int_eq(ts_ckpt_index_sequence(dir, &got, &err), TS_NOT_FOUND);
  remove_dir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("ckpt_sequence");
  TCase *tc = tcase_create("ckpt_sequence");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, sequence_round_trip);
  tcase_add_test(tc, sequence_misuse);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
