/* rules.c - the rules of ts_rules.h: UTF-8 well-formedness, tensor names and shapes, the strings
 * of an encoded message (walked with protobuf-c's descriptors, so a field added to tshard.proto
 * is checked without a change here), tokens and token files, and the directories above a
 * private directory. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ts_rules.h"

#define MAX_NESTING 32

size_t ts_utf8_valid_prefix(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      i++;
      continue;
    }
    if ((c & 0xe0) == 0xc0)
      len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
      len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
      len = 4, cp = c & 0x07, min = 0x10000;
    else
      return i;
    if (n - i < len)
      return i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80)
        return i;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += len;
  }
  return n;
}

bool ts_name_reserved(const char *name, size_t n) {
  size_t p = strlen(TS_RULES_RESERVED_PREFIX);
  return n >= p && memcmp(name, TS_RULES_RESERVED_PREFIX, p) == 0;
}

int ts_text_check(const char *what, const char *text, size_t n, const char *kind, ts_error *err) {
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < n; i++)
    if (s[i] < 0x20 || s[i] == 0x7f ||
        (s[i] == 0xc2 && i + 1 < n && s[i + 1] < 0xa0 && s[i + 1] >= 0x80))
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "%s has a control character (U+%04X) at byte %zu; %s are UTF-8 "
                          "without control characters",
                          what, s[i] == 0xc2 ? (unsigned)(s[i + 1]) : (unsigned)s[i], i, kind);
  size_t ok = ts_utf8_valid_prefix(text, n);
  if (ok != n)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%s is not valid UTF-8 at byte %zu (0x%02x); %s are UTF-8 text", what, ok,
                        s[ok], kind);
  return TS_OK;
}

int ts_name_check(const char *what, const char *name, size_t n, ts_error *err) {
  if (!name || n == 0 || n > TS_RULES_NAME_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%s of %zu bytes; names have 1 to %d bytes of UTF-8", what, name ? n : 0,
                        TS_RULES_NAME_MAX);
  int rc = ts_text_check(what, name, n, "names", err);
  if (rc)
    return rc;
  if (ts_name_reserved(name, n))
    return ts_error_set(err, TS_INVALID_ARGUMENT, "%s '%.*s': the prefix '%s' is reserved", what,
                        (int)n, name, TS_RULES_RESERVED_PREFIX);
  return TS_OK;
}

int ts_tensor_check(const char *name, int ndim, const int64_t *shape, size_t elem_size,
                    ts_error *err) {
  int rc = ts_name_check("tensor name", name, name ? strlen(name) : 0, err);
  if (rc)
    return rc;
  if (ndim < 0 || ndim > TS_RULES_DIMS_MAX || (ndim > 0 && !shape))
    return ts_error_set(err, TS_BAD_SHAPE,
                        "tensor '%s': shape of %d dims; tensors have 0 (a "
                        "scalar) to %d dims",
                        name, ndim, TS_RULES_DIMS_MAX);
  /* The product skips zero dims, so a shape with a zero beside a huge dim is bounded too. */
  int64_t bytes = elem_size ? (int64_t)elem_size : 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || shape[d] > TS_RULES_TENSOR_BYTES_MAX)
      return ts_error_set(err, TS_BAD_SHAPE,
                          "tensor '%s': shape dim %d has size %lld; sizes are 0 to "
                          "2^50",
                          name, d, (long long)shape[d]);
    if (shape[d] > 0 && bytes > TS_RULES_TENSOR_BYTES_MAX / shape[d])
      return ts_error_set(err, TS_LIMIT,
                          "tensor '%s': more than 2^50 bytes; its dims up to "
                          "dim %d multiply past it (a dim of size 0 counts as 1 here)",
                          name, d);
    if (shape[d] > 0)
      bytes *= shape[d];
  }
  return TS_OK;
}

static bool read_varint(const uint8_t *b, size_t len, size_t *pos, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64 && *pos < len; shift += 7) {
    uint8_t c = b[(*pos)++];
    x |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) {
      *v = x;
      return true;
    }
  }
  return false;
}

static int check_string(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f,
                        const uint8_t *s, size_t n, ts_error *err) {
  const uint8_t *nul = memchr(s, 0, n);
  if (nul)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "field '%s' of %s holds a NUL byte at byte %zu; strings are UTF-8 "
                        "without NUL bytes",
                        f->name, d->short_name, (size_t)(nul - s));
  size_t ok = ts_utf8_valid_prefix((const char *)s, n);
  if (ok != n)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "field '%s' of %s is not valid UTF-8 at byte %zu (0x%02x); strings are "
                        "UTF-8 without NUL bytes",
                        f->name, d->short_name, ok, s[ok]);
  return TS_OK;
}

static int walk(const ProtobufCMessageDescriptor *d, const uint8_t *b, size_t len, int depth,
                ts_error *err) {
  if (depth > MAX_NESTING)
    return ts_error_set(err, TS_PROTOCOL, "messages nested more than %d deep", MAX_NESTING);
  size_t pos = 0;
  while (pos < len) {
    uint64_t key, v;
    if (!read_varint(b, len, &pos, &key))
      return ts_error_set(err, TS_PROTOCOL, "malformed field key in %s", d->short_name);
    switch (key & 7) {
    case 0:
      if (!read_varint(b, len, &pos, &v))
        return ts_error_set(err, TS_PROTOCOL, "malformed varint in %s", d->short_name);
      break;
    case 1:
    case 5: {
      size_t w = (key & 7) == 1 ? 8 : 4;
      if (len - pos < w)
        return ts_error_set(err, TS_PROTOCOL, "truncated fixed field in %s", d->short_name);
      pos += w;
      break;
    }
    case 2: {
      if (!read_varint(b, len, &pos, &v) || v > len - pos)
        return ts_error_set(err, TS_PROTOCOL, "truncated field in %s", d->short_name);
      uint64_t num = key >> 3;
      const ProtobufCFieldDescriptor *f =
          num <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)num) : NULL;
      int rc = TS_OK;
      if (f && f->type == PROTOBUF_C_TYPE_STRING)
        rc = check_string(d, f, b + pos, (size_t)v, err);
      else if (f && f->type == PROTOBUF_C_TYPE_MESSAGE)
        rc = walk(f->descriptor, b + pos, (size_t)v, depth + 1, err);
      if (rc)
        return rc;
      pos += (size_t)v;
      break;
    }
    default:
      return ts_error_set(err, TS_PROTOCOL, "wire type %u in %s is not used by tshard",
                          (unsigned)(key & 7), d->short_name);
    }
  }
  return TS_OK;
}

int ts_wire_strings_check(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                          ts_error *err) {
  return walk(d, buf, len, 0, err);
}

int ts_token_check(const char *token, size_t n, ts_error *err) {
  if (n < TS_RULES_TOKEN_MIN || n > TS_RULES_TOKEN_MAX)
    return ts_error_set(err, TS_AUTH, "token of %zu characters; tokens have %d to %d", n,
                        TS_RULES_TOKEN_MIN, TS_RULES_TOKEN_MAX);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)token[i] < 0x20 || (unsigned char)token[i] > 0x7e)
      return ts_error_set(err, TS_AUTH,
                          "token has byte 0x%02x at position %zu; tokens are printable ASCII",
                          (unsigned char)token[i], i);
  return TS_OK;
}

int ts_token_file_read(const char *path, char *out, size_t cap, ts_error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ts_error_set(err, TS_IO, "token file %s: %s", path, strerror(errno));
  struct stat st;
  char buf[TS_RULES_TOKEN_MAX + 64];
  size_t n = 0;
  int rc = TS_OK;
  if (fstat(fd, &st) != 0)
    rc = ts_error_set(err, TS_IO, "token file %s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = ts_error_set(err, TS_IO, "token file %s is not a regular file", path);
  else if (st.st_mode & 077)
    rc = ts_error_set(err, TS_AUTH,
                      "token file %s has mode %03o: group or others may read the secret; make "
                      "it private (chmod 600 %s)",
                      path, (unsigned)(st.st_mode & 0777), path);
  while (rc == TS_OK && n < sizeof buf) {
    ssize_t k = read(fd, buf + n, sizeof buf - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      rc = ts_error_set(err, TS_IO, "token file %s: %s", path, strerror(errno));
    if (k <= 0)
      break;
    n += (size_t)k;
  }
  close(fd);
  if (rc)
    return rc;
  bool more = n == sizeof buf;
  while (n > 0 &&
         (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (more || n > TS_RULES_TOKEN_MAX)
    return ts_error_set(err, TS_AUTH,
                        "the token in %s has %s%zu characters; tokens have %d to %d (the whole "
                        "token is used, never a part of it)",
                        path, more ? "more than " : "", more ? sizeof buf : n, TS_RULES_TOKEN_MIN,
                        TS_RULES_TOKEN_MAX);
  if ((rc = ts_token_check(buf, n, err))) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err ? err->msg : "");
    return ts_error_set(err, rc, "the token in %s: %s", path, why);
  }
  if (cap < n + 1)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "token buffer of %zu bytes; %zu needed", cap,
                        n + 1);
  memcpy(out, buf, n);
  out[n] = '\0';
  return TS_OK;
}

int ts_dir_ancestors_check(const char *what, const char *real, ts_error *err) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", real);
  uid_t me = geteuid();
  for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
    if (slash == buf)
      slash[1] = '\0'; /* the root itself, last */
    else
      *slash = '\0';
    struct stat st;
    if (lstat(buf, &st) != 0)
      return ts_error_set(err, TS_IO, "%s '%s': the directory above it, '%s': %s", what, real, buf,
                          strerror(errno));
    unsigned mode = (unsigned)(st.st_mode & 07777);
    if ((st.st_uid != 0 && st.st_uid != me) || ((mode & 022) && !(mode & S_ISVTX)))
      return ts_error_set(err, TS_AUTH,
                          "%s '%s': the directory above it, '%s', is owned by uid "
                          "%u with mode %04o; every directory above it must be owned by root or "
                          "uid %u and not writable by group or others unless sticky (like /tmp)",
                          what, real, buf, (unsigned)st.st_uid, mode, (unsigned)me);
    if (slash == buf)
      return TS_OK;
  }
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Attribute rules (ts_rules.h) */

bool ts_attr_rule_is_glob(const char *pattern) { return strpbrk(pattern, TS_RULES_GLOB_CHARS); }

int ts_attr_rule_pattern_check(const char *what, const char *pattern, size_t n, ts_error *err) {
  if (!pattern || n == 0 || n > TS_RULES_NAME_MAX)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%s: a pattern of %zu bytes; give a tensor "
                        "name or a glob of 1 to %d bytes",
                        what, pattern ? n : 0, TS_RULES_NAME_MAX);
  int rc = ts_text_check(what, pattern, n, "patterns", err);
  for (size_t i = 0; !rc && i < n; i++) {
    if (pattern[i] != '[')
      continue;
    if (i + 1 < n && pattern[i + 1] == '^')
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "%s '%.*s': '[^' at byte %zu; write '[!' "
                          "for a set of characters not matched",
                          what, (int)n, pattern, i);
    size_t j = i + 1 + (i + 1 < n && pattern[i + 1] == '!');
    j += j < n && pattern[j] == ']'; /* a ']' first in the set is one of its characters */
    while (j < n && pattern[j] != ']')
      j++;
    if (j >= n)
      return ts_error_set(err, TS_INVALID_ARGUMENT,
                          "%s '%.*s': the '[' at byte %zu is not "
                          "closed; a set is '[abc]', '[a-z]' or '[!abc]'",
                          what, (int)n, pattern, i);
    i = j;
  }
  return rc;
}

int ts_attr_rule_split(const char *what, const char *rule, size_t *pattern_len, const char **attr,
                       ts_error *err) {
  const char *eq = rule ? strchr(rule, '=') : NULL;
  const char *a = eq ? eq + 1 : NULL;
  while (a && (*a == ' ' || *a == '\t'))
    a++;
  if (!eq || strncmp(a, "mesh", 4) != 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "%s '%s': expected PATTERN=ATTR, a tensor name "
                        "or glob and an attribute (e.g. 'h.*.w=mesh=[4] placements=[S(0)]'); "
                        "one attribute for every tensor is the default attribute",
                        what, rule ? rule : "");
  *pattern_len = (size_t)(eq - rule);
  *attr = eq + 1;
  return ts_attr_rule_pattern_check(what, rule, *pattern_len, err);
}

int ts_attr_rule_pick(const char *const *patterns, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(patterns[i], name) == 0)
      return i;
  for (int i = 0; i < n; i++)
    if (ts_attr_rule_is_glob(patterns[i]) && fnmatch(patterns[i], name, FNM_NOESCAPE) == 0)
      return i;
  return -1;
}
