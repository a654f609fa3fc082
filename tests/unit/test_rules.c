/* test_rules.c - what the protocol allows in strings (proto/rules.c): UTF-8 well-formedness
 * against the byte sequences of the Unicode standard's table of well-formed UTF-8 (3-7), tensor
 * names and the text rule paths and keys share with them, the walk of an encoded Request's string
 * fields (a NUL byte patched into the encoding, nested messages, unknown fields, truncated input),
 * and token files (mode, length, contents). No daemon. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "ts_rules.h"
#include "tshard.pb-c.h"

START_TEST(utf8_table_3_7) {
  static const struct {
    const char *s;
    size_t valid; /* the well-formed prefix, by the standard's table */
  } cases[] = {
      {"plain ascii", 11},
      {"\xc2\x80", 2},             /* U+0080, the first 2-byte form */
      {"\xdf\xbf", 2},             /* U+07FF */
      {"\xe0\xa0\x80", 3},         /* U+0800: E0 needs A0..BF next */
      {"\xed\x9f\xbf", 3},         /* U+D7FF: ED needs 80..9F next */
      {"\xee\x80\x80", 3},         /* U+E000 */
      {"\xf0\x90\x80\x80", 4},     /* U+10000: F0 needs 90..BF next */
      {"\xf4\x8f\xbf\xbf", 4},     /* U+10FFFF: F4 needs 80..8F next */
      {"\xc0\xaf", 0},             /* overlong '/' */
      {"\xc1\xbf", 0},             /* overlong */
      {"\xe0\x80\xaf", 0},         /* overlong */
      {"\xed\xa0\x80", 0},         /* U+D800, a surrogate */
      {"\xed\xbf\xbf", 0},         /* U+DFFF */
      {"\xf0\x80\x80\xaf", 0},     /* overlong */
      {"\xf4\x90\x80\x80", 0},     /* above U+10FFFF */
      {"\xf5\x80\x80\x80", 0},     /* F5 never appears */
      {"\xff", 0},                 /* FF never appears */
      {"\x80", 0},                 /* a lone continuation byte */
      {"ab\xe2\x82", 2},           /* truncated 3-byte form at the end */
      {"a\xc3(", 1},               /* a 2-byte form without its continuation */
      {"ok \xe2\x82\xac \xff", 7}, /* the euro sign, a blank, then FF */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(ts_utf8_valid_prefix(cases[i].s, strlen(cases[i].s)) == cases[i].valid,
                  "case %zu: prefix %zu, expected %zu", i,
                  ts_utf8_valid_prefix(cases[i].s, strlen(cases[i].s)), cases[i].valid);
}
END_TEST

START_TEST(names) {
  char longest[TS_RULES_NAME_MAX + 2];
  memset(longest, 'n', sizeof longest);
  longest[TS_RULES_NAME_MAX] = '\0';
  static const char *good[] = {"w",
                               "gr\xc3\xb6\xc3\x9f"
                               "e",
                               "layer.0/weight",
                               "a b",
                               "nbsp\xc2\xa0ok",
                               "__tshar",
                               "\xe5\x90\x8d\xe5\x89\x8d"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    ck_assert_msg(ts_name_check("name", good[i], strlen(good[i]), NULL) == TS_OK, "'%s'", good[i]);
  ck_assert_int_eq(ts_name_check("name", longest, TS_RULES_NAME_MAX, NULL), TS_OK);
  static const struct {
    const char *s;
    size_t n;
    const char *says;
  } bad[] = {
      {"", 0, "of 0 bytes"},
      {"a\0b", 3, "U+0000"},
      {"a\tb", 3, "U+0009"},
      {"del\x7f", 4, "U+007F"},
      {"c1\xc2\x85", 4, "U+0085"},
      {"bad\xff", 4, "not valid UTF-8 at byte 3"},
      {"sur\xed\xa0\x80", 6, "not valid UTF-8 at byte 3"},
      {"__tshard.x", 10, "reserved"},
      {"__tshard", 8, "reserved"},
  };
  ts_error err;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(ts_name_check("tensor name", bad[i].s, bad[i].n, &err) == TS_INVALID_ARGUMENT,
                  "case %zu accepted", i);
    ck_assert_msg(strstr(err.msg, bad[i].says) && strstr(err.msg, "tensor name"), "case %zu: %s", i,
                  err.msg);
  }
  longest[TS_RULES_NAME_MAX] = 'n';
  longest[TS_RULES_NAME_MAX + 1] = '\0';
  ck_assert_int_eq(ts_name_check("name", longest, TS_RULES_NAME_MAX + 1, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "1 to 127 bytes"));
}
END_TEST

/* The one rule of a tensor's name and shape: dims, each dim's size and the bytes, with a dim of
 * size 0 bounding nothing (such a shape could be held but never saved and loaded). */
START_TEST(tensor_shapes) {
  static const struct {
    int ndim;
    int64_t shape[9];
    size_t esize;
    int code;
    const char *says;
  } cases[] = {
      {2, {4, 2}, 4, TS_OK, NULL},
      {1, {0}, 8, TS_OK, NULL},
      {3, {3, 0, 5}, 4, TS_OK, NULL},
      {1, {1LL << 48}, 4, TS_OK, NULL},
      {1, {(1LL << 48) + 1}, 4, TS_LIMIT, "2^50 bytes"},
      {2, {0, 1LL << 62}, 4, TS_BAD_SHAPE, "dim 1 has size"},
      {3, {3, 0, 1LL << 58}, 4, TS_BAD_SHAPE, "dim 2 has size"},
      {3, {0, 1LL << 40, 1LL << 40}, 1, TS_LIMIT, "dim 2 multiply"},
      {2, {4, -1}, 4, TS_BAD_SHAPE, "dim 1 has size -1"},
      {0, {0}, 4, TS_OK, NULL}, /* a scalar (einsum results, files) */
      {9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 4, TS_BAD_SHAPE, "0 (a scalar) to 8 dims"},
  };
  ts_error err;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = ts_tensor_check("w", cases[i].ndim, cases[i].shape, cases[i].esize, &err);
    ck_assert_msg(rc == cases[i].code, "case %zu: %d, want %d", i, rc, cases[i].code);
    if (cases[i].says)
      ck_assert_msg(strstr(err.msg, cases[i].says) && strstr(err.msg, "'w'"), "case %zu: %s", i,
                    err.msg);
  }
  int64_t one[1] = {1};
  ck_assert_int_eq(ts_tensor_check("__tshard.x", 1, one, 4, &err), TS_INVALID_ARGUMENT);
  ck_assert_int_eq(ts_tensor_check("", 1, one, 4, &err), TS_INVALID_ARGUMENT);
}
END_TEST

/* The text rule (paths, keys): names' character rule without their length or prefix rules. */
START_TEST(text) {
  static const char *good[] = {"/tmp/ckpt dir/\xc3\xa9t\xc3\xa9", "__tshard", "key:run-1/step 7"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    ck_assert_int_eq(ts_text_check("path", good[i], strlen(good[i]), "paths", NULL), TS_OK);
  static const struct {
    const char *s;
    const char *says;
  } bad[] = {
      {"/tmp/a\nb", "U+000A) at byte 6; paths are UTF-8 without control characters"},
      {"/tmp/\x1b[31mred", "U+001B) at byte 5"},
      {"/tmp/c1\xc2\x85", "U+0085) at byte 7"},
      {"/tmp/\xff", "not valid UTF-8 at byte 5 (0xff); paths are UTF-8 text"},
  };
  ts_error err;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(
        ts_text_check("checkpoint directory", bad[i].s, strlen(bad[i].s), "paths", &err),
        TS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.msg, bad[i].says) && strstr(err.msg, "checkpoint directory"),
                  "case %zu: %s", i, err.msg);
  }
}
END_TEST

/* A packed Request with `from` replaced by `to` in its bytes. */
static uint8_t *packed(const Tshard__Request *req, size_t *len, const char *from, const char *to) {
  *len = tshard__request__get_packed_size(req);
  uint8_t *b = malloc(*len + 8);
  tshard__request__pack(req, b);
  if (from) {
    uint8_t *at = memmem(b, *len, from, strlen(from));
    ck_assert_ptr_nonnull(at);
    memcpy(at, to, strlen(from));
  }
  return b;
}

START_TEST(wire_strings) {
  int64_t shape[1] = {4};
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__CreateRequest c = TSHARD__CREATE_REQUEST__INIT;
  Tshard__DistAttr a = TSHARD__DIST_ATTR__INIT;
  a.text = "mesh=[1] placements=[R]";
  c.name = "keep#evil";
  c.dtype = "f32";
  c.n_shape = 1;
  c.shape = shape;
  c.attr = &a;
  req.id = 7;
  req.op_case = TSHARD__REQUEST__OP_CREATE;
  req.create = &c;
  ts_error err;
  size_t len;
  uint8_t *b = packed(&req, &len, NULL, NULL);
  ck_assert_int_eq(ts_wire_strings_check(&tshard__request__descriptor, b, len, &err), TS_OK);
  /* An unknown field (number 30, a varint) is skipped. */
  b[len] = 0xf0, b[len + 1] = 0x01, b[len + 2] = 0x05;
  ck_assert_int_eq(ts_wire_strings_check(&tshard__request__descriptor, b, len + 3, &err), TS_OK);
  /* Cut inside a field: malformed. */
  ck_assert_int_eq(ts_wire_strings_check(&tshard__request__descriptor, b, len - 2, &err),
                   TS_PROTOCOL);
  free(b);
  b = packed(&req, &len, "keep#evil", "keep\0evil");
  ck_assert_int_eq(ts_wire_strings_check(&tshard__request__descriptor, b, len, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "'name' of CreateRequest") && strstr(err.msg, "NUL byte at byte 4"),
                "%s", err.msg);
  /* protobuf-c itself decodes it, cutting the name: that is what the check is for. */
  Tshard__Request *d = tshard__request__unpack(NULL, len, b);
  ck_assert_ptr_nonnull(d);
  ck_assert_str_eq(d->create->name, "keep");
  tshard__request__free_unpacked(d, NULL);
  free(b);
  b = packed(&req, &len, "placements",
             "placem\xff\xfe"
             "ts");
  ck_assert_int_eq(ts_wire_strings_check(&tshard__request__descriptor, b, len, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.msg, "'text' of DistAttr") && strstr(err.msg, "byte 15 (0xff)"), "%s",
                err.msg);
  free(b);
  req.idempotency_key = "key-\xc0\xaf";
  b = packed(&req, &len, NULL, NULL);
  ck_assert_int_eq(ts_wire_strings_check(&tshard__request__descriptor, b, len, &err),
                   TS_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "'idempotency_key' of Request"));
  free(b);
}
END_TEST

static char dir[] = "/tmp/ts-rules-XXXXXX";

static const char *token_file(const char *name, const char *text, size_t n, mode_t mode) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, n), (ssize_t)n);
  close(fd);
  chmod(path, mode);
  return path;
}

START_TEST(token_files) {
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char tok[TS_RULES_TOKEN_MAX + 1], err_text[600];
  ts_error err;
  const char *p = token_file("ok", "s3cret token  \r\n\n", 17, 0600);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_OK);
  ck_assert_str_eq(tok, "s3cret token");
  p = token_file("group", "s3cret-token\n", 13, 0640);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_AUTH);
  ck_assert_msg(strstr(err.msg, "mode 640") && strstr(err.msg, "chmod 600"), "%s", err.msg);
  p = token_file("world", "s3cret-token\n", 13, 0604);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_AUTH);
  static char big[10000];
  memset(big, 'k', sizeof big);
  p = token_file("max", big, TS_RULES_TOKEN_MAX, 0600);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_OK);
  ck_assert_uint_eq(strlen(tok), TS_RULES_TOKEN_MAX);
  p = token_file("256", big, TS_RULES_TOKEN_MAX + 1, 0600);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_AUTH);
  ck_assert_msg(strstr(err.msg, "has 256 characters") && strstr(err.msg, "8 to 255"), "%s",
                err.msg);
  p = token_file("huge", big, sizeof big, 0600);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_AUTH);
  ck_assert_msg(strstr(err.msg, "more than"), "%s", err.msg);
  p = token_file("short", "seven77\n", 8, 0600);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_AUTH);
  p = token_file("binary", "token\x01with-control", 18, 0600);
  ck_assert_int_eq(ts_token_file_read(p, tok, sizeof tok, &err), TS_AUTH);
  snprintf(err_text, sizeof err_text, "%s", err.msg);
  ck_assert_msg(strstr(err_text, "0x01 at position 5"), "%s", err_text);
  char missing[128];
  snprintf(missing, sizeof missing, "%s/none", dir);
  ck_assert_int_eq(ts_token_file_read(missing, tok, sizeof tok, &err), TS_IO);
  ck_assert_int_eq(ts_token_file_read(dir, tok, sizeof tok, &err), TS_IO);
  static const char *names[] = {"ok", "group", "world", "max", "256", "huge", "short", "binary"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rules");
  TCase *tc = tcase_create("rules");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, utf8_table_3_7);
  tcase_add_test(tc, names);
  tcase_add_test(tc, tensor_shapes);
  tcase_add_test(tc, text);
  tcase_add_test(tc, wire_strings);
  tcase_add_test(tc, token_files);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
