/* attr_text.c - the canonical text form of distributed attributes: parser and formatter.
 *
 * Grammar (also in shard/ATTRIBUTES.md). Fields come in this order, separated by blanks:
 *
 *   attr       := blank* "mesh=" shape [ "@" ranks ] blank+ "placements=" places
 *                 [ blank+ "splits=" splits ] blank*
 *   shape      := "[" int { "," int } "]"                  sizes >= 1, at most 8 dims
 *   ranks      := span { "," span }                        row-major over the mesh
 *   span       := int [ "-" int ]                          "a-b" is a, a+1, ..., b (a <= b)
 *   places     := "[" place { "," place } "]"              one per mesh dim
 *   place      := "S(" int ")" | "R" | "P(" op ")"         also "Shard(d)", "Replicate",
 *                                                          "Partial(op)"
 *   op         := "sum" | "max" | "min"
 *   splits     := "{" dimsplit { "," dimsplit } "}"         dims in increasing order
 *   dimsplit   := int ":[" int { "," int } "]"              explicit size of every part
 *   int        := digit { digit }
 *   blank      := " " | "\t"
 *
 * Without "@ranks" the mesh is over ranks 0..n-1. The canonical form (what ts_attr_format
 * writes) uses the short placements, always writes the rank list, writes runs of two or more
 * consecutive ranks as "a-b", separates fields by one space and has no other blanks. Errors give
 * the column (1-based) of the offending character and what was expected there. */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shard_internal.h"

#define MAX_RANKS_TEXT (1 << 24)

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
  else if (isprint(c))
    snprintf(found, sizeof found, "'%c'", c);
  else
    snprintf(found, sizeof found, "byte 0x%02x", c);
  return ts_error_set(p->err, TS_PARSE, "attribute: at column %zu (%s): expected %s", p->pos + 1,
                      found, expected);
}

static bool accept(parser *p, const char *lit) {
  size_t n = strlen(lit);
  if (strncmp(p->s + p->pos, lit, n) == 0) {
    p->pos += n;
    return true;
  }
  return false;
}

static int expect(parser *p, const char *lit) {
  if (accept(p, lit))
    return TS_OK;
  char what[48];
  snprintf(what, sizeof what, "\"%s\"", lit);
  return fail(p, what);
}

static size_t blanks(parser *p) {
  size_t n = 0;
  while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t') {
    p->pos++;
    n++;
  }
  return n;
}

static int parse_int(parser *p, int64_t max, const char *what, int64_t *out) {
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

static int parse_shape(parser *p, int *ndim, int64_t *shape) {
  int rc = expect(p, "[");
  if (rc)
    return rc;
  *ndim = 0;
  do {
    if (*ndim == TS_MAX_MESH_DIMS)
      return fail(p, "\"]\" (a mesh has at most 8 dims)");
    int64_t v;
    if ((rc = parse_int(p, INT_MAX, "a mesh size", &v)))
      return rc;
    if (v < 1) {
      p->pos--;
      return fail(p, "a mesh size of at least 1");
    }
    shape[(*ndim)++] = v;
  } while (accept(p, ","));
  return expect(p, "]");
}

static int parse_ranks(parser *p, i64_list *ranks) {
  do {
    int64_t a, b;
    int rc = parse_int(p, INT_MAX, "a rank", &a);
    if (rc)
      return rc;
    b = a;
    if (accept(p, "-")) {
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
  } while (accept(p, ","));
  return TS_OK;
}

static int parse_placement(parser *p, ts_placement *out) {
  int rc;
  if (accept(p, "Shard(") || accept(p, "S(")) {
    int64_t d;
    if ((rc = parse_int(p, TS_MAX_DIMS - 1, "a tensor dim", &d)))
      return rc;
    *out = ts_shard_on((int)d);
    return expect(p, ")");
  }
  if (accept(p, "Replicate") || accept(p, "R")) {
    *out = ts_replicate();
    return TS_OK;
  }
  if (accept(p, "Partial(") || accept(p, "P(")) {
    for (int op = 0; op < TS_REDUCE_COUNT; op++)
      if (accept(p, ts_reduce_name((ts_reduce_op)op))) {
        *out = ts_partial((ts_reduce_op)op);
        return expect(p, ")");
      }
    return fail(p, "a reduce op: sum, max or min");
  }
  return fail(p, "a placement: S(dim), R or P(sum|max|min)");
}

int ts_attr_parse(const char *text, ts_attr **out, ts_error *err) {
  if (!text || !out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_attr_parse: NULL argument");
  *out = NULL;
  parser p = {text, 0, err};
  int mesh_ndim = 0, nplace = 0, rc;
  int64_t mesh_shape[TS_MAX_MESH_DIMS];
  ts_placement place[TS_MAX_MESH_DIMS];
  i64_list ranks = {0}, sizes = {0};
  int *rank_ints = NULL;
  ts_attr *a = NULL;
  size_t mesh_at, place_at;

  blanks(&p);
  mesh_at = p.pos;
  if ((rc = expect(&p, "mesh=")))
    goto done;
  if ((rc = parse_shape(&p, &mesh_ndim, mesh_shape)))
    goto done;
  bool have_ranks = accept(&p, "@");
  if (have_ranks && (rc = parse_ranks(&p, &ranks)))
    goto done;
  if (blanks(&p) == 0) {
    rc = fail(&p, have_ranks ? "\",\", \"-\" or a blank before \"placements=\""
                             : "\"@\" and a rank list, or a blank before \"placements=\"");
    goto done;
  }
  place_at = p.pos;
  if ((rc = expect(&p, "placements=")) || (rc = expect(&p, "[")))
    goto done;
  do {
    if (nplace == TS_MAX_MESH_DIMS) {
      rc = fail(&p, "\"]\" (at most 8 placements)");
      goto done;
    }
    if ((rc = parse_placement(&p, &place[nplace])))
      goto done;
    nplace++;
  } while (accept(&p, ","));
  if ((rc = expect(&p, "]")))
    goto done;

  int64_t n = 1;
  for (int m = 0; m < mesh_ndim; m++)
    n *= mesh_shape[m];
  if (n > MAX_RANKS_TEXT) {
    p.pos = mesh_at;
    rc = fail(&p, "a mesh of at most 16777216 ranks");
    goto done;
  }
  if (nplace != mesh_ndim) {
    p.pos = place_at;
    rc = ts_error_set(err, TS_BAD_ATTRIBUTE,
                      "attribute: at column %zu: %d placements for a mesh of %d dims; give one "
                      "placement per mesh dim",
                      place_at + 1, nplace, mesh_ndim);
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
  if ((rc = ts_attr_create(&a, mesh_ndim, mesh_shape, rank_ints, place, err))) {
    char msg[512];
    snprintf(msg, sizeof msg, "attribute: %.480s", err ? err->msg : "");
    ts_error_set(err, rc, "%s", msg);
    goto done;
  }

  size_t before = p.pos;
  if (blanks(&p) > 0 && accept(&p, "splits=")) {
    if ((rc = expect(&p, "{")))
      goto done;
    int last_dim = -1;
    do {
      size_t dim_at = p.pos;
      int64_t d;
      if ((rc = parse_int(&p, TS_MAX_DIMS - 1, "a tensor dim", &d)))
        goto done;
      if (d == last_dim) {
        rc = ts_error_set(err, TS_PARSE, "attribute: at column %zu: the splits of dim %d are "
                          "given twice; give each dim's splits once", dim_at + 1, (int)d);
        goto done;
      }
      if (d < last_dim) {
        p.pos = dim_at;
        rc = fail(&p, "tensor dims in increasing order, each once");
        goto done;
      }
      last_dim = (int)d;
      if ((rc = expect(&p, ":[")))
        goto done;
      sizes.n = 0;
      do {
        int64_t v;
        if ((rc = parse_int(&p, INT64_MAX / 2, "a split size", &v)) ||
            (rc = list_push(&sizes, v, &p)))
          goto done;
      } while (accept(&p, ","));
      if ((rc = expect(&p, "]")))
        goto done;
      if ((rc = ts_attr_set_splits(a, (int)d, (int)sizes.n, sizes.v, err)))
        goto done;
    } while (accept(&p, ","));
    if ((rc = expect(&p, "}")))
      goto done;
  } else {
    p.pos = before;
  }
  blanks(&p);
  if (p.s[p.pos] != '\0') {
    rc = fail(&p, "end of text, or \" splits={...}\" after the placements");
    goto done;
  }
  /* Splits that do not match the mesh are reported here; those that need the tensor shape
   * (their sum) are checked by ts_attr_validate. */
  for (int d = 0; d < TS_MAX_DIMS; d++) {
    if (!a->splits[d])
      continue;
    bool sharded = false;
    for (int m = 0; m < a->mesh_ndim; m++)
      sharded |= a->place[m].kind == TS_PLACE_SHARD && a->place[m].dim == d;
    if (!sharded) {
      rc = ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "attribute: splits given for dim %d, which no placement shards", d);
      goto done;
    }
    if (a->nsplits[d] != ts__attr_parts(a, d)) {
      rc = ts_error_set(err, TS_BAD_ATTRIBUTE,
                        "attribute: dim %d has %d split sizes but is split into %lld parts", d,
                        a->nsplits[d], (long long)ts__attr_parts(a, d));
      goto done;
    }
  }
  *out = a;
  a = NULL;
  rc = TS_OK;
done:
  ts_attr_destroy(&a);
  free(ranks.v);
  free(sizes.v);
  free(rank_ints);
  return rc;
}

/* A bounded writer that keeps counting past the end, like snprintf. */
typedef struct writer {
  char *buf;
  size_t cap, len;
} writer;

static void put(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(writer *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *dst = w->len < w->cap ? w->buf + w->len : NULL;
  size_t room = w->len < w->cap ? w->cap - w->len : 0;
  int n = vsnprintf(dst, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    w->len += (size_t)n;
}

size_t ts_attr_format(const ts_attr *a, char *buf, size_t cap) {
  writer w = {buf, cap, 0};
  if (buf && cap)
    buf[0] = '\0';
  if (!a)
    return 0;
  put(&w, "mesh=[");
  for (int m = 0; m < a->mesh_ndim; m++)
    put(&w, "%s%lld", m ? "," : "", (long long)a->mesh_shape[m]);
  put(&w, "]@");
  for (int i = 0; i < a->nranks;) {
    int j = i;
    while (j + 1 < a->nranks && a->ranks[j + 1] == a->ranks[j] + 1)
      j++;
    if (j > i)
      put(&w, "%s%d-%d", i ? "," : "", a->ranks[i], a->ranks[j]);
    else
      put(&w, "%s%d", i ? "," : "", a->ranks[i]);
    i = j + 1;
  }
  put(&w, " placements=[");
  for (int m = 0; m < a->mesh_ndim; m++) {
    const ts_placement *pl = &a->place[m];
    const char *sep = m ? "," : "";
    if (pl->kind == TS_PLACE_SHARD)
      put(&w, "%sS(%d)", sep, pl->dim);
    else if (pl->kind == TS_PLACE_REPLICATE)
      put(&w, "%sR", sep);
    else
      put(&w, "%sP(%s)", sep, ts_reduce_name(pl->op));
  }
  put(&w, "]");
  bool first = true;
  for (int d = 0; d < TS_MAX_DIMS; d++) {
    if (!a->splits[d])
      continue;
    put(&w, "%s%d:[", first ? " splits={" : ",", d);
    first = false;
    for (int i = 0; i < a->nsplits[d]; i++)
      put(&w, "%s%lld", i ? "," : "", (long long)a->splits[d][i]);
    put(&w, "]");
  }
  if (!first)
    put(&w, "}");
  return w.len;
}
