/* ts_rules.h - what the wire protocol allows in its strings, shared by the daemon and the C
 * client (part of libtsproto, beside the generated schema).
 *
 * Strings on the wire are UTF-8 without NUL bytes (protobuf-c would cut a string at its first
 * NUL, so a name `a\0b` would silently become `a`). Tensor names are 1 to TS_RULES_NAME_MAX bytes
 * of UTF-8 without control characters (U+0000-U+001F, U+007F-U+009F) and do not start with the
 * reserved prefix "__tshard". Tokens are 8 to TS_RULES_TOKEN_MAX visible ASCII characters; a
 * token file holds one, may end in blanks and newlines, and must not be readable by group or
 * others. */
#ifndef TS_RULES_H
#define TS_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "tshard_errors.h"

#define TS_RULES_NAME_MAX 127 /* bytes; the store keeps names in char[128] */
#define TS_RULES_RESERVED_PREFIX "__tshard"
#define TS_RULES_TOKEN_MIN 8
#define TS_RULES_TOKEN_MAX 255
#define TS_RULES_DIMS_MAX 8                   /* dims of a tensor: 1 to this */
#define TS_RULES_TENSOR_BYTES_MAX (1LL << 50) /* 2^50 bytes of a tensor; also bounds each dim */

/* The length of the longest prefix of s[0..n) that is well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF): n when all of it is. */
size_t ts_utf8_valid_prefix(const char *s, size_t n);

/* Whether text[0..n) is UTF-8 without control characters (U+0000-U+001F, U+007F-U+009F): the
 * rule for every client string that may reach a path, a log line or a message (names, checkpoint
 * directories, idempotency keys). `what` names the string, `kind` the plural the message uses for
 * what is valid ("names", "paths"). */
int ts_text_check(const char *what, const char *text, size_t n, const char *kind, ts_error *err);

/* Whether name[0..n) is a valid tensor name; `what` names it in the message ("tensor name"). */
int ts_name_check(const char *what, const char *name, size_t n, ts_error *err);
bool ts_name_reserved(const char *name, size_t n);

/* Whether a tensor of this name and shape, elem_size bytes an element, may exist: the one rule
 * that every path making a tensor applies (create, put, import, load, resume, program outputs).
 * A name as ts_name_check; 0 (a scalar) to TS_RULES_DIMS_MAX dims (create asks for at least one);
 * each dim 0 to TS_RULES_TENSOR_BYTES_MAX,
 * and the whole tensor at most TS_RULES_TENSOR_BYTES_MAX bytes when every dim is counted, zero
 * dims included ([0, 2^62] is refused like [1, 2^62]: such a shape cannot be saved and loaded).
 * TS_BAD_SHAPE or TS_LIMIT naming the dim; TS_INVALID_ARGUMENT for the name. */
int ts_tensor_check(const char *name, int ndim, const int64_t *shape, size_t elem_size,
                    ts_error *err);

/* Walks an encoded message of type d and checks every string field, nested messages included:
 * TS_INVALID_ARGUMENT naming the field when one holds a NUL byte or is not UTF-8. Call it on
 * bytes protobuf-c has decoded (malformed input gives TS_PROTOCOL). */
int ts_wire_strings_check(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                          ts_error *err);

/* Whether token[0..n) is a valid token. */
int ts_token_check(const char *token, size_t n, ts_error *err);
/* Reads the token of a token file into out (cap >= TS_RULES_TOKEN_MAX + 1): refuses a file that
 * group or others may read, a token that is too short or too long, and invisible characters. */
int ts_token_file_read(const char *path, char *out, size_t cap, ts_error *err);

/* The directories above `real` (a resolved path), up to the root: each owned by root or the
 * effective uid and not writable by group or others unless sticky; anyone else who may write one
 * could rename the directory away and put theirs in its place. TS_AUTH naming the directory, its
 * owner and mode, after `what` ("snapshot directory"). */
int ts_dir_ancestors_check(const char *what, const char *real, ts_error *err);

/* Attribute rules: which attribute each tensor of a load, an import, a resume or a Python state
 * dict gets. A rule is a PATTERN and an attribute, written "PATTERN=ATTR" as text (split at the
 * first '=', so the attribute, which starts with "mesh", keeps its own '='s). A PATTERN is a
 * tensor name or a glob: '*' any run of characters, '?' one character, '[abc]', '[a-z]' one of a
 * set and '[!abc]' none of it (no backslash escapes; '[^' is refused: write '[!'). A tensor takes
 * the rule naming it exactly, else the first glob (in the rules' order) matching its name, else
 * the default. The Python client applies the same grammar (tshard/attr_rules.py). */
#define TS_RULES_GLOB_CHARS "*?["
/* Whether pattern[0..n) is valid (a name's rules, at most TS_RULES_NAME_MAX bytes; a glob's '['
 * closed, not '[^'); `what` names it in the message. */
int ts_attr_rule_pattern_check(const char *what, const char *pattern, size_t n, ts_error *err);
/* Splits "PATTERN=ATTR" text: *pattern_len bytes of pattern, *attr the attribute's text (checked
 * only to start with "mesh"; the attribute parser checks the rest). */
int ts_attr_rule_split(const char *what, const char *rule, size_t *pattern_len, const char **attr,
                       ts_error *err);
bool ts_attr_rule_is_glob(const char *pattern);
/* The rule a tensor named `name` takes among patterns[0..n): its index, or -1 (the default). */
int ts_attr_rule_pick(const char *const *patterns, int n, const char *name);

#endif
