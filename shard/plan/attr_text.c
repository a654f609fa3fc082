/* attr_text.c - the text form of distributed attributes: parser and formatter.
 *
 * Grammar (also in shard/plan/ATTRIBUTES.md). Blanks (space, tab, newline, CR) may stand between
 * any two tokens; fields are separated by at least one blank and come in this order:
 *
 *   attr       := "mesh" "=" shape [ "@" ranks ] blank "placements" "=" places
 *                 [ blank "splits" "=" splits ]
 *   shape      := "[" size { "," size } [","] "]"           at most 8 dims; a list may also
 *                                                          be a tuple: "(" ... ")"
 *   size       := int | name "=" int                       >= 1; name every dim or none
 *   ranks      := span { "," span }                        row-major over the mesh
 *   span       := int [ "-" int ]                          "a-b" is a, a+1, ..., b (a <= b)
 *   places     := "[" item { "," item } [","] "]"           or "(" ... ")"
 *   item       := place | name ":" place                   positional (one per mesh dim) or
 *                                                          all named by axis (others are R)
 *   place      := "S" "(" dim [ "," opts ] ")"
 *               | "Shard" "(" [ "dim" "=" ] dim [ "," opts ] ")"
 *               | "R" | "Replicate" [ "(" ")" ]
 *               | ("P" | "Partial") [ "(" [ [ "reduce_op" "=" ] opq ] ")" ]   default sum
 *   opq        := op | "'" op "'" | '"' op '"'             op: sum, avg, prod, max, min
 *   dim        := [ "-" ] int                              -1 is the last dim, -2 the one before
 *   opts       := [ "split" "=" ] rule | cyc
 *   rule       := "balanced" | "chunk"                     default balanced; chunk: torch.chunk's
 *   cyc        := "cyclic" "=" int [ "," "src" "=" int ]   block-cyclic: block size >= 1,
 *                                                          src the coordinate of block 0
 *   splits     := "{" dim ":" "[" int { "," int } "]" { "," ... } "}"   dims increasing
 *   name       := [A-Za-z_][A-Za-z0-9_]*                   a mesh axis: at most 15 bytes
 *
 * Without "@ranks" the mesh is over ranks 0..n-1. The canonical form (what ts_attr_format
 * writes) uses the short placements in mesh-dim order (S(d) for balanced, S(d,chunk),
 * S(d,cyclic=NB) and S(d,cyclic=NB,src=S) when src is not 0; a negative dim stays as written
 * until the attribute meets a tensor), keeps the axis names in the mesh, always writes the rank
 * list, writes runs of two or more consecutive ranks as "a-b", separates fields by one space and
 * has no other blanks. Errors give the column (1-based, in bytes) of the
 * offending character and what was expected there. client/python/tshard/attr.py is a port of this
 * parser; tests/grammar/attr_corpus.jsonl keeps the two in lock-step: change both and the corpus
 * together. */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shard_internal.h"

#define MAX_RANKS_TEXT (1 << 24)
#define NAME_BUF 64

typedef struct parser {
  const char *s;
  size_t pos;
  ts_error *err;
} parser;

static int fail(parser *p, const char *expected) {
  char found[32];
  unsigned char c = (unsigned char)p->s[p->pos];
  if (c == '\0')
    snprintf(found, sizeof found, "end of text");
  else if (c >= 0x20 && c < 0x7f)
    snprintf(found, sizeof found, "'%c'", c);
  else
    snprintf(found, sizeof found, "byte 0x%02x", c);
  return ts_error_set(p->err, TS_PARSE, "attribute: at column %zu (%s): expected %s", p->pos + 1,
                      found, expected);
}

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t blanks(parser *p) {
  size_t n = 0;
  while (is_blank(p->s[p->pos])) {
    p->pos++;
    n++;
  }
  return n;
}

/* Skips blanks; whether a blank comes just before the position (a field separator). */
static bool separated(parser *p) {
  blanks(p);
  return p->pos > 0 && is_blank(p->s[p->pos - 1]);
}

/* Skips blanks, then takes `lit` when it comes next (on failure the position stays after the
 * blanks, so that an error names the first character that is not a blank). */
static bool tok(parser *p, const char *lit) {
  blanks(p);
  size_t n = strlen(lit);
  if (strncmp(p->s + p->pos, lit, n) == 0) {
    p->pos += n;
    return true;
  }
  return false;
}

static int expect(parser *p, const char *lit) {
  if (tok(p, lit))
    return TS_OK;
  char what[48];
  snprintf(what, sizeof what, "\"%s\"", lit);
  return fail(p, what);
}

/* The opening of a list, "[" or a tuple's "("; *close gets the matching closer. */
static int open_list(parser *p, const char **close) {
  if (tok(p, "[")) {
    *close = "]";
    return TS_OK;
  }
  if (tok(p, "(")) {
    *close = ")";
    return TS_OK;
  }
  return fail(p, "\"[\" (or a tuple's \"(\")");
}

/* After an item: takes "," and says whether another item follows (a trailing comma before the
 * closer, as in Python's "(Shard(0),)", ends the list). */
static bool next_item(parser *p, const char *close) {
  if (!tok(p, ","))
    return false;
  blanks(p);
  return p->s[p->pos] != close[0];
}

static bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

/* Reads a name ([A-Za-z_][A-Za-z0-9_]*) into buf (cut to NAME_BUF - 1 bytes);
 * returns its full length, 0 when none starts here. */
static size_t read_name(parser *p, char *buf) {
  size_t n = 0;
  if (!name_start(p->s[p->pos])) {
    buf[0] = '\0';
    return 0;
  }
  while (name_char(p->s[p->pos])) {
    if (n < NAME_BUF - 1)
      buf[n] = p->s[p->pos];
    n++;
    p->pos++;
  }
  buf[n < NAME_BUF - 1 ? n : NAME_BUF - 1] = '\0';
  return n;
}

static int parse_int(parser *p, int64_t max, const char *what, int64_t *out) {
  blanks(p);
  if (!isdigit((unsigned char)p->s[p->pos]))
    return fail(p, what);
  size_t start = p->pos;
  int64_t v = 0;
  while (isdigit((unsigned char)p->s[p->pos])) {
    int digit = p->s[p->pos] - '0';
    if (max - digit < 0 || v > (max - digit) / 10) {
      p->pos = start;
      char msg[96];
      snprintf(msg, sizeof msg, "%s of at most %lld", what, (long long)max);
      return fail(p, msg);
    }
    v = v * 10 + digit;
    p->pos++;
  }
  *out = v;
  return TS_OK;
}

/* A growable array of int64. */
typedef struct i64_list {
  int64_t *v;
  int64_t n, cap;
} i64_list;

static int list_push(i64_list *l, int64_t x, parser *p) {
  if (l->n == l->cap) {
    int64_t cap = l->cap ? l->cap * 2 : 16;
    int64_t *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v)
      return ts_error_set(p->err, TS_NO_MEMORY, "attribute: out of memory while parsing");
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = x;
  return TS_OK;
}

/* What the mesh part names: sizes and, for a named mesh, one axis name per dim. */
typedef struct mesh_text {
  int ndim;
  int64_t shape[TS_MAX_MESH_DIMS];
  bool named;
  char axis[TS_MAX_MESH_DIMS][TS_AXIS_NAME_MAX + 1];
} mesh_text;

static int parse_shape(parser *p, mesh_text *mt) {
  const char *close = "]";
  int rc = open_list(p, &close);
  if (rc)
    return rc;
  mt->ndim = 0;
  do {
    if (mt->ndim == TS_MAX_MESH_DIMS) {
      blanks(p);
      return fail(p, "\"]\" (a mesh has at most 8 dims)");
    }
    blanks(p);
    size_t at = p->pos;
    char name[NAME_BUF];
    size_t len = read_name(p, name);
    if (mt->ndim > 0 && (len > 0) != mt->named) {
      p->pos = at;
      return fail(p, mt->named ? "a named mesh size such as tp=4 (name every mesh dim or none)"
                               : "a mesh size (name every mesh dim or none)");
    }
    if (len > 0) {
      mt->named = true;
      if (len > TS_AXIS_NAME_MAX) {
        p->pos = at;
        return fail(p, "a mesh axis name of at most 15 characters");
      }
      for (int m = 0; m < mt->ndim; m++)
        if (strcmp(mt->axis[m], name) == 0)
          return ts_error_set(p->err, TS_PARSE,
                              "attribute: at column %zu: mesh axis '%s' is named twice; give "
                              "each mesh dim its own name",
                              at + 1, name);
      strcpy(mt->axis[mt->ndim], name);
      if ((rc = expect(p, "=")))
        return rc;
    }
    int64_t v;
    if ((rc = parse_int(p, INT_MAX, "a mesh size", &v)))
      return rc;
    if (v < 1) {
      p->pos--;
      return fail(p, "a mesh size of at least 1");
    }
    mt->shape[mt->ndim++] = v;
  } while (next_item(p, close));
  return expect(p, close);
}

static int parse_ranks(parser *p, i64_list *ranks) {
  do {
    int64_t a, b;
    int rc = parse_int(p, INT_MAX, "a rank", &a);
    if (rc)
      return rc;
    b = a;
    if (tok(p, "-")) {
      blanks(p);
      size_t at = p->pos;
      if ((rc = parse_int(p, INT_MAX, "the last rank of a range", &b)))
        return rc;
      if (b < a) {
        p->pos = at;
        return fail(p, "the last rank of a range, not below its first");
      }
    }
    if (b - a + ranks->n >= MAX_RANKS_TEXT)
      return fail(p, "fewer ranks (at most 16777216)");
    for (int64_t r = a; r <= b; r++)
      if ((rc = list_push(ranks, r, p)))
        return rc;
  } while (tok(p, ","));
  return TS_OK;
}

/* A tensor dim: 0 to 7, or -1 to -8 counting from the end ("-" then digits, no blank between). */
static int parse_dim(parser *p, int64_t *out) {
  blanks(p);
  if (p->s[p->pos] != '-')
    return parse_int(p, TS_MAX_DIMS - 1, "a tensor dim", out);
  size_t at = p->pos++;
  int64_t v = 0;
  if (!isdigit((unsigned char)p->s[p->pos]))
    return fail(p, "the digits of a negative tensor dim, as in -1 (the last dim)");
  while (isdigit((unsigned char)p->s[p->pos]) && v <= TS_MAX_DIMS)
    v = v * 10 + (p->s[p->pos++] - '0');
  if (v < 1 || v > TS_MAX_DIMS || isdigit((unsigned char)p->s[p->pos])) {
    p->pos = at;
    return fail(p, "a tensor dim: 0 to 7, or -1 to -8 counting from the last dim");
  }
  *out = -v;
  return TS_OK;
}

/* Skips DTensor's keyword spelling of an argument, `key =`, when it comes next (and the blanks
 * before the value). */
static void keyword(parser *p, const char *key) {
  char name[NAME_BUF];
  blanks(p);
  size_t at = p->pos;
  if (read_name(p, name) > 0 && strcmp(name, key) == 0 && tok(p, "="))
    blanks(p);
  else
    p->pos = at;
}

/* The split rule after "S(dim,": [ "split" "=" ] ( "balanced" | "chunk" ). */
static int parse_rule(parser *p, ts_split_rule *out) {
  char name[NAME_BUF];
  keyword(p, "split");
  size_t rule_at = p->pos;
  read_name(p, name);
  for (int r = 0; r < TS_SPLIT_COUNT; r++)
    if (strcmp(name, ts_split_rule_name((ts_split_rule)r)) == 0) {
      *out = (ts_split_rule)r;
      return TS_OK;
    }
  p->pos = rule_at;
  return fail(p, "a split rule (balanced or chunk) or \"cyclic=\" and a block size");
}

static const char *const PLACEMENT_EXPECTED =
    "a placement: S(dim), R, P(op) or Shard(dim), Replicate(), Partial(op)";

/* The reduce op of a partial placement, after "(": [ "reduce_op" "=" ] [ quote ] op [ quote ]. */
static int parse_op(parser *p, ts_reduce_op *out) {
  char name[NAME_BUF];
  keyword(p, "reduce_op");
  char quote = p->s[p->pos];
  if (quote == '\'' || quote == '"')
    p->pos++;
  else
    quote = '\0';
  size_t op_at = p->pos;
  read_name(p, name);
  for (int op = 0; op < TS_REDUCE_COUNT; op++)
    if (strcmp(name, ts_reduce_name((ts_reduce_op)op)) == 0) {
      *out = (ts_reduce_op)op;
      if (quote && p->s[p->pos] != quote)
        return fail(p, quote == '"' ? "'\"' closing the reduce op" : "\"'\" closing the reduce op");
      if (quote)
        p->pos++;
      return TS_OK;
    }
  p->pos = op_at;
  return fail(p, "a reduce op: sum, avg, prod, max or min");
}

/* What may follow a shard's dim: [ "," ( rule | "cyclic" "=" int [ "," "src" "=" int ] ) ]. The
 * range of src is checked with the mesh (ts_attr_create). */
static int parse_shard_opts(parser *p, ts_placement *out) {
  if (!tok(p, ","))
    return TS_OK;
  blanks(p);
  size_t at = p->pos;
  char name[NAME_BUF];
  read_name(p, name);
  if (strcmp(name, "cyclic") != 0) {
    p->pos = at;
    return parse_rule(p, &out->split);
  }
  int rc = expect(p, "=");
  blanks(p);
  size_t nb_at = p->pos;
  if (rc || (rc = parse_int(p, TS_CYCLIC_BLOCK_MAX, "a block size", &out->cyclic)))
    return rc;
  if (out->cyclic < 1) {
    p->pos = nb_at;
    return fail(p, "a block size of at least 1");
  }
  if (!tok(p, ","))
    return TS_OK;
  blanks(p);
  at = p->pos;
  read_name(p, name);
  if (strcmp(name, "src") != 0) {
    p->pos = at;
    return fail(p, "\"src=\" and the mesh coordinate of the first block, as in "
                   "S(0,cyclic=64,src=1)");
  }
  if ((rc = expect(p, "=")))
    return rc;
  return parse_int(p, INT_MAX, "a mesh coordinate", &out->src);
}

/* One placement, from its first non-blank character. */
static int parse_placement(parser *p, ts_placement *out) {
  int rc;
  char name[NAME_BUF];
  blanks(p);
  size_t at = p->pos;
  read_name(p, name);
  if (strcmp(name, "S") == 0 || strcmp(name, "Shard") == 0) {
    if ((rc = expect(p, "(")))
      return rc;
    blanks(p);
    size_t arg = p->pos;
    if (read_name(p, name) > 0) {
      if (strcmp(name, "dim") != 0) {
        p->pos = arg;
        return fail(p, "a tensor dim, as in S(0) or Shard(dim=0)");
      }
      if ((rc = expect(p, "=")))
        return rc;
    }
    int64_t d;
    if ((rc = parse_dim(p, &d)))
      return rc;
    *out = ts_shard_on((int)d);
    if ((rc = parse_shard_opts(p, out)))
      return rc;
    return expect(p, ")");
  }
  if (strcmp(name, "R") == 0 || strcmp(name, "Replicate") == 0) {
    *out = ts_replicate();
    if (name[1] != '\0' && tok(p, "("))
      return expect(p, ")");
    return TS_OK;
  }
  if (strcmp(name, "P") == 0 || strcmp(name, "Partial") == 0) {
    *out = ts_partial(TS_REDUCE_SUM);
    if (!tok(p, "(") || tok(p, ")"))
      return TS_OK;
    ts_reduce_op op = TS_REDUCE_SUM;
    if ((rc = parse_op(p, &op)))
      return rc;
    *out = ts_partial(op);
    return expect(p, ")");
  }
  p->pos = at;
  return fail(p, PLACEMENT_EXPECTED);
}

/* The placements list, positional or named by mesh axis ("dp:S(0)"; axes not named are R). */
static int parse_places(parser *p, const mesh_text *mt, ts_placement *place, size_t place_at) {
  int rc, nplace = 0;
  int named = -1; /* unknown until the first item */
  bool given[TS_MAX_MESH_DIMS] = {false};
  const char *close = "]";
  if ((rc = open_list(p, &close)))
    return rc;
  for (int m = 0; m < TS_MAX_MESH_DIMS; m++)
    place[m] = ts_replicate();
  do {
    if (nplace == TS_MAX_MESH_DIMS) {
      blanks(p);
      return fail(p, "\"]\" (at most 8 placements)");
    }
    blanks(p);
    size_t at = p->pos;
    char name[NAME_BUF];
    size_t len = read_name(p, name);
    bool has_axis = len > 0 && tok(p, ":");
    if (!has_axis)
      p->pos = at;
    if (named >= 0 && has_axis != (bool)named) {
      p->pos = at;
      return fail(p, named ? "a placement named by its mesh axis, such as dp:S(0) (name every "
                             "placement or none)"
                           : "a placement without a mesh axis name (name every placement or "
                             "none)");
    }
    named = has_axis;
    int m = nplace;
    if (has_axis) {
      if (!mt->named)
        return ts_error_set(p->err, TS_PARSE,
                            "attribute: at column %zu: placement for mesh axis '%s', but the "
                            "mesh names no axes; name them as in mesh=[dp=2,tp=4]",
                            at + 1, name);
      for (m = 0; m < mt->ndim && strcmp(mt->axis[m], name) != 0; m++)
        ;
      if (m == mt->ndim) {
        char axes[TS_MAX_MESH_DIMS * (TS_AXIS_NAME_MAX + 2)] = "";
        for (int k = 0; k < mt->ndim; k++) {
          strcat(axes, k ? "," : "");
          strcat(axes, mt->axis[k]);
        }
        return ts_error_set(p->err, TS_PARSE,
                            "attribute: at column %zu: mesh axis '%s' is not in the mesh; its "
                            "axes are %s",
                            at + 1, name, axes);
      }
      if (given[m])
        return ts_error_set(p->err, TS_PARSE,
                            "attribute: at column %zu: mesh axis '%s' is given two placements; "
                            "give each axis at most one",
                            at + 1, name);
      given[m] = true;
    }
    if ((rc = parse_placement(p, &place[m < TS_MAX_MESH_DIMS ? m : 0])))
      return rc;
    nplace++;
  } while (next_item(p, close));
  if ((rc = expect(p, close)))
    return rc;
  if (named != 1 && nplace != mt->ndim)
    return ts_error_set(p->err, TS_BAD_ATTRIBUTE,
                        "attribute: at column %zu: %d placements for a mesh of %d dims; give one "
                        "placement per mesh dim",
                        place_at + 1, nplace, mt->ndim);
  return TS_OK;
}

/* The split sizes after "splits={": "D:[s,s,...]" per tensor dim, in increasing dim order. */
static int parse_splits(parser *p, ts_attr *a) {
  int rc, last_dim = INT_MIN;
  i64_list sizes = {0};
  do {
    blanks(p);
    size_t dim_at = p->pos;
    int64_t d;
    if ((rc = parse_dim(p, &d)))
      break;
    if (d == last_dim) {
      rc = ts_error_set(p->err, TS_PARSE,
                        "attribute: at column %zu: the splits of dim %d are "
                        "given twice; give each dim's splits once",
                        dim_at + 1, (int)d);
      break;
    }
    if (d < last_dim) {
      p->pos = dim_at;
      rc = fail(p, "tensor dims in increasing order, each once");
      break;
    }
    last_dim = (int)d;
    if ((rc = expect(p, ":")) || (rc = expect(p, "[")))
      break;
    sizes.n = 0;
    do {
      int64_t v;
      if ((rc = parse_int(p, INT64_MAX / 2, "a split size", &v)) || (rc = list_push(&sizes, v, p)))
        break;
    } while (tok(p, ","));
    if (rc || (rc = expect(p, "]")))
      break;
    if ((rc = ts_attr_set_splits(a, (int)d, (int)sizes.n, sizes.v, p->err)))
      break;
  } while (tok(p, ","));
  free(sizes.v);
  return rc ? rc : expect(p, "}");
}

/* Splits that do not match the mesh are reported here; those that need the tensor shape (their
 * sum, and with negative dims which dim they name) are checked by ts_attr_validate. */
static int check_splits(const ts_attr *a, ts_error *err) {
  /* With negative dims, which dims are the same is known on a tensor only (ts_attr_validate). */
  for (int d = -TS_MAX_DIMS; ts_attr_is_normal(a) && d < TS_MAX_DIMS; d++) {
    int n;
    if (!ts_attr_splits(a, d, &n))
      continue;
    bool sharded = false;
    for (int m = 0; m < a->mesh_ndim; m++) {
      sharded |= a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d;
      if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d && a->place[m].cyclic)
        return ts_error_set(err, TS_BAD_ATTRIBUTE,
                            "attribute: splits given for dim %d, which placement %d deals "
                            "block-cyclically (its parts are set by the block size)",
                            d, m);
    }
    if (!sharded)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "attribute: splits given for dim %d, which no placement shards", d);
    if (n != ts__attr_parts(a, d))
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "attribute: dim %d has %d split sizes but is split into %lld parts", d, n,
                          (long long)ts__attr_parts(a, d));
  }
  ts_error rerr;
  int rc = ts__attr_check_splits_rule(a, &rerr);
  return rc ? ts_error_set(err, rc, "attribute: %s", rerr.msg) : TS_OK;
}

int ts_attr_parse(const char *text, ts_attr **out, ts_error *err) {
  if (!text || !out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_parse: NULL argument");
  *out = NULL;
  parser p = {text, 0, err};
  int rc;
  mesh_text mt;
  memset(&mt, 0, sizeof mt);
  ts_placement place[TS_MAX_MESH_DIMS];
  i64_list ranks = {0};
  int *rank_ints = NULL;
  ts_attr *a = NULL;

  blanks(&p);
  size_t mesh_at = p.pos;
  if (!tok(&p, "mesh") || !tok(&p, "=")) {
    p.pos = mesh_at;
    rc = fail(&p, "\"mesh=\"");
    goto done;
  }
  if ((rc = parse_shape(&p, &mt)))
    goto done;
  bool gap = separated(&p);
  bool have_ranks = tok(&p, "@");
  if (have_ranks) {
    if ((rc = parse_ranks(&p, &ranks)))
      goto done;
    gap = separated(&p);
  }
  if (!gap) {
    rc = fail(&p, have_ranks ? "\",\", \"-\" or a blank before \"placements=\""
                             : "\"@\" and a rank list, or a blank before \"placements=\"");
    goto done;
  }
  size_t place_at = p.pos;
  if (!tok(&p, "placements") || !tok(&p, "=")) {
    p.pos = place_at;
    rc = fail(&p, "\"placements=\"");
    goto done;
  }
  if ((rc = parse_places(&p, &mt, place, place_at)))
    goto done;

  int64_t n = 1;
  for (int m = 0; m < mt.ndim; m++)
    n *= mt.shape[m];
  if (n > MAX_RANKS_TEXT) {
    p.pos = mesh_at;
    rc = fail(&p, "a mesh of at most 16777216 ranks");
    goto done;
  }
  if (have_ranks && ranks.n != n) {
    rc = ts_error_set(err, TS_BAD_ATTRIBUTE,
                      "attribute: at column %zu: mesh of %lld ranks is given %lld ranks; the rank "
                      "list must have one rank per mesh position",
                      mesh_at + 1, (long long)n, (long long)ranks.n);
    goto done;
  }
  if (have_ranks) {
    rank_ints = malloc((size_t)n * sizeof *rank_ints);
    if (!rank_ints) {
      rc = ts_error_set(err, TS_NO_MEMORY, "attribute: out of memory");
      goto done;
    }
    for (int64_t i = 0; i < n; i++)
      rank_ints[i] = (int)ranks.v[i];
  }
  if ((rc = ts_attr_create(&a, mt.ndim, mt.shape, rank_ints, place, err))) {
    char msg[512];
    snprintf(msg, sizeof msg, "attribute: %.480s", err ? err->msg : "");
    ts_error_set(err, rc, "%s", msg);
    goto done;
  }
  if (mt.named)
    memcpy(a->axis, mt.axis, sizeof a->axis);

  size_t before = p.pos;
  if (separated(&p) && tok(&p, "splits")) {
    if ((rc = expect(&p, "=")) || (rc = expect(&p, "{")) || (rc = parse_splits(&p, a)))
      goto done;
  } else {
    p.pos = before;
  }
  blanks(&p);
  if (p.s[p.pos] != '\0') {
    rc = fail(&p, "end of text, or \" splits={...}\" after the placements");
    goto done;
  }
  if ((rc = check_splits(a, err)))
    goto done;
  *out = a;
  a = NULL;
  rc = TS_OK;
done:
  ts_attr_destroy(&a);
  free(ranks.v);
  free(rank_ints);
  return rc;
}

/* A bounded writer that keeps counting past the end, like snprintf (and as fast as a copy: the
 * attributes' text is a key of every reshard's plan lookup and catalog entry). */
typedef struct writer {
  char *buf;
  size_t cap, len;
} writer;

static void put(writer *w, const char *s) {
  size_t n = strlen(s);
  if (w->len < w->cap) {
    size_t room = w->cap - w->len - 1, k = n < room ? n : room;
    memcpy(w->buf + w->len, s, k);
    w->buf[w->len + k] = '\0';
  }
  w->len += n;
}

static void put_int(writer *w, long long v) {
  char t[24], *p = t + sizeof t;
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  *--p = '\0';
  do
    *--p = (char)('0' + u % 10);
  while ((u /= 10) != 0);
  if (v < 0)
    *--p = '-';
  put(w, p);
}

size_t ts_attr_format(const ts_attr *a, char *buf, size_t cap) {
  writer w = {buf, cap, 0};
  if (buf && cap)
    buf[0] = '\0';
  if (!a)
    return 0;
  put(&w, "mesh=[");
  for (int m = 0; m < a->mesh_ndim; m++) {
    put(&w, m ? "," : "");
    put(&w, a->axis[m]);
    put(&w, a->axis[m][0] ? "=" : "");
    put_int(&w, a->mesh_shape[m]);
  }
  put(&w, "]@");
  for (int i = 0; i < a->nranks;) {
    int j = i;
    while (j + 1 < a->nranks && a->ranks[j + 1] == a->ranks[j] + 1)
      j++;
    put(&w, i ? "," : "");
    put_int(&w, a->ranks[i]);
    if (j > i) {
      put(&w, "-");
      put_int(&w, a->ranks[j]);
    }
    i = j + 1;
  }
  put(&w, " placements=[");
  for (int m = 0; m < a->mesh_ndim; m++) {
    const ts_placement *pl = &a->place[m];
    put(&w, m ? "," : "");
    if (pl->kind == TS_PLACE_SHARD) {
      put(&w, "S(");
      put_int(&w, pl->dim);
      if (pl->cyclic > 0) {
        put(&w, ",cyclic=");
        put_int(&w, pl->cyclic);
      }
      if (pl->cyclic > 0 && pl->src > 0) {
        put(&w, ",src=");
        put_int(&w, pl->src);
      }
      put(&w, pl->split == TS_SPLIT_CHUNK ? ",chunk)" : ")");
    } else if (pl->kind == TS_PLACE_REPLICATE) {
      put(&w, "R");
    } else {
      put(&w, "P(");
      put(&w, ts_reduce_name(pl->op));
      put(&w, ")");
    }
  }
  put(&w, "]");
  bool first = true;
  for (int d = -TS_MAX_DIMS; d < TS_MAX_DIMS; d++) {
    int n;
    const int64_t *sizes = ts_attr_splits(a, d, &n);
    if (!sizes)
      continue;
    put(&w, first ? " splits={" : ",");
    put_int(&w, d);
    put(&w, ":[");
    first = false;
    for (int i = 0; i < n; i++) {
      put(&w, i ? "," : "");
      put_int(&w, sizes[i]);
    }
    put(&w, "]");
  }
  if (!first)
    put(&w, "}");
  return w.len;
}
