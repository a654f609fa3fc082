/* einsum_parse.c - the einsum equation: text to labels per operand dim, label sizes (with numpy's
 * broadcasting of size-1 dims) and the output labels (explicit after "->", or implicit: the labels
 * seen once, in ASCII order, "..." first). Every error names what is wrong and where: the
 * character and its position, the operand and dim of a mismatched size. */
#include <string.h>

#include "einsum_internal.h"

char ts__ein_label_char(int label) {
  if (label < 26)
    return (char)('a' + label);
  if (label < TS__EIN_ELL)
    return (char)('A' + label - 26);
  return (char)('0' + label - TS__EIN_ELL);
}

static int letter_label(char c) {
  if (c >= 'a' && c <= 'z')
    return c - 'a';
  if (c >= 'A' && c <= 'Z')
    return 26 + (c - 'A');
  return -1;
}

/* One side of the equation: the letters of a term and where its "..." stands. */
typedef struct term {
  int n_letters;
  int8_t letter[TS__EIN_MAXL]; /* labels in order, without the ellipsis */
  int ellipsis_at;             /* letters before "...", -1 without one */
  int start;                   /* position of the term in the equation */
} term;

/* Scans one term from eq[*pos] up to a ',' a '-' or the end. */
static int scan_term(const char *eq, size_t *pos, term *t, const char *what, ts_error *err) {
  t->n_letters = 0;
  t->ellipsis_at = -1;
  t->start = (int)*pos;
  while (eq[*pos] != '\0' && eq[*pos] != ',' && eq[*pos] != '-') {
    char c = eq[*pos];
    if (c == ' ') {
      (*pos)++;
      continue;
    }
    if (c == '.') {
      if (strncmp(eq + *pos, "...", 3) != 0)
        return ts_error_set(err, TS_EINSUM,
                            "einsum '%s': a lone '.' at position %zu in the %s (an ellipsis is "
                            "exactly \"...\")",
                            eq, *pos, what);
      if (t->ellipsis_at >= 0)
        return ts_error_set(err, TS_EINSUM,
                            "einsum '%s': a second \"...\" at position %zu in the %s (at most one "
                            "per term)",
                            eq, *pos, what);
      t->ellipsis_at = t->n_letters;
      *pos += 3;
      continue;
    }
    int l = letter_label(c);
    if (l < 0)
      return ts_error_set(err, TS_EINSUM,
                          "einsum '%s': unknown character '%c' (0x%02x) at position %zu; valid are "
                          "a-z, A-Z, \"...\", ',', \"->\" and spaces",
                          eq, c, (unsigned)(unsigned char)c, *pos);
    if (t->n_letters >= TS__EIN_MAXL)
      return ts_error_set(err, TS_EINSUM, "einsum '%s': the %s has more than %d labels", eq, what,
                          TS__EIN_MAXL);
    t->letter[t->n_letters++] = (int8_t)l;
    (*pos)++;
  }
  return TS_OK;
}

/* What the input terms have shown so far: where each label's size came from, how often each
 * label occurs (for the implicit output) and the most dims a "..." covers. */
typedef struct seen {
  int src_op[TS__EIN_MAXL], src_dim[TS__EIN_MAXL];
  int count[TS__EIN_MAXL];
  int max_ell;
} seen;

/* Operand i's term t against its shape: its labels per dim, and their sizes checked against
 * each other (diagonals) and against the other operands (broadcasting size-1 dims). */
static int parse_operand(ts__ein_parsed *pe, const char *eq, int i, const term *t, int nd,
                         const int64_t *shape, seen *sn, ts_error *err) {
  if (nd < 0 || nd > TS_MAX_DIMS)
    return ts_error_set(err, TS_BAD_SHAPE, "einsum '%s': operand %d has %d dims; valid is 0 to %d",
                        eq, i, nd, TS_MAX_DIMS);
  if (nd > 0 && shape == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum '%s': the shape of operand %d is NULL",
                        eq, i);
  int ell = nd - t->n_letters;
  if (t->ellipsis_at < 0 && ell != 0)
    return ts_error_set(err, TS_EINSUM,
                        "einsum '%s': operand %d has %d dims but its term (at position %d) names "
                        "%d labels and has no \"...\"",
                        eq, i, nd, t->start, t->n_letters);
  if (ell < 0)
    return ts_error_set(err, TS_EINSUM,
                        "einsum '%s': operand %d has %d dims but its term (at position %d) names "
                        "%d labels",
                        eq, i, nd, t->start, t->n_letters);
  if (ell > sn->max_ell)
    sn->max_ell = ell;
  pe->ndim[i] = nd;
  int d = 0;
  for (int j = 0; j <= t->n_letters; j++) {
    if (j == t->ellipsis_at)
      for (int e = 0; e < ell; e++)
        pe->lab[i][d++] = (int8_t)(TS__EIN_ELL + ell - 1 - e);
    if (j < t->n_letters)
      pe->lab[i][d++] = t->letter[j];
  }
  for (d = 0; d < nd; d++) {
    int l = pe->lab[i][d];
    int64_t s = shape[d];
    sn->count[l]++;
    pe->shape[i][d] = s;
    if (s < 0)
      return ts_error_set(err, TS_BAD_SHAPE, "einsum '%s': operand %d dim %d has size %lld", eq, i,
                          d, (long long)s);
    /* A label repeated inside one operand (a diagonal) needs equal sizes. */
    for (int d2 = 0; d2 < d; d2++)
      if (pe->lab[i][d2] == l && pe->shape[i][d2] != s)
        return ts_error_set(err, TS_BAD_SHAPE,
                            "einsum '%s': label '%c' is repeated in operand %d with sizes %lld "
                            "(dim %d) and %lld (dim %d); a diagonal needs equal sizes",
                            eq, ts__ein_label_char(l), i, (long long)pe->shape[i][d2], d2,
                            (long long)s, d);
    if (pe->size[l] < 0 || (pe->size[l] == 1 && s != 1)) {
      pe->size[l] = s;
      sn->src_op[l] = i;
      sn->src_dim[l] = d;
    } else if (s != 1 && s != pe->size[l]) {
      if (l >= TS__EIN_ELL)
        return ts_error_set(err, TS_BAD_SHAPE,
                            "einsum '%s': \"...\" dims do not broadcast: operand %d dim %d has "
                            "size %lld but operand %d dim %d has size %lld (sizes must match or "
                            "be 1)",
                            eq, i, d, (long long)s, sn->src_op[l], sn->src_dim[l],
                            (long long)pe->size[l]);
      return ts_error_set(err, TS_BAD_SHAPE,
                          "einsum '%s': label '%c': operand %d dim %d has size %lld but operand "
                          "%d dim %d has size %lld (sizes must match or be 1)",
                          eq, ts__ein_label_char(l), i, d, (long long)s, sn->src_op[l],
                          sn->src_dim[l], (long long)pe->size[l]);
    }
  }
  return TS_OK;
}

/* The output term after "->" (pos: just after it): each label once, each seen in an input, and
 * a "..." wherever the inputs have one. */
static int parse_explicit_output(ts__ein_parsed *pe, const char *eq, size_t pos, int max_ell,
                                 ts_error *err) {
  term t;
  int rc = scan_term(eq, &pos, &t, "output term", err);
  if (rc)
    return rc;
  if (eq[pos] != '\0')
    return ts_error_set(err, TS_EINSUM,
                        "einsum '%s': unexpected '%c' at position %zu in the output term (one "
                        "\"->\" and no ',' after it)",
                        eq, eq[pos], pos);
  if (t.ellipsis_at < 0 && max_ell > 0)
    return ts_error_set(err, TS_EINSUM,
                        "einsum '%s': the inputs' \"...\" covers %d dims but the output has no "
                        "\"...\" to place them",
                        eq, max_ell);
  int nd = t.n_letters + (t.ellipsis_at >= 0 ? max_ell : 0);
  if (nd > TS_MAX_DIMS)
    return ts_error_set(err, TS_EINSUM, "einsum '%s': the output has %d dims; at most %d", eq, nd,
                        TS_MAX_DIMS);
  int d = 0;
  for (int j = 0; j <= t.n_letters; j++) {
    if (j == t.ellipsis_at)
      for (int e = 0; e < max_ell; e++)
        pe->out_lab[d++] = (int8_t)(TS__EIN_ELL + max_ell - 1 - e);
    if (j < t.n_letters) {
      int l = t.letter[j];
      for (int j2 = 0; j2 < j; j2++)
        if (t.letter[j2] == l)
          return ts_error_set(err, TS_EINSUM,
                              "einsum '%s': label '%c' is repeated in the output (each output "
                              "label at most once)",
                              eq, ts__ein_label_char(l));
      if (pe->size[l] < 0)
        return ts_error_set(err, TS_EINSUM,
                            "einsum '%s': output label '%c' appears in no input term", eq,
                            ts__ein_label_char(l));
      pe->out_lab[d++] = (int8_t)l;
    }
  }
  pe->out_ndim = nd;
  return TS_OK;
}

/* The implicit output: the "..." dims, then the labels seen once, in ASCII order. */
static int implicit_output(ts__ein_parsed *pe, const char *eq, const seen *sn, ts_error *err) {
  int d = 0;
  for (int e = 0; e < sn->max_ell; e++)
    pe->out_lab[d++] = (int8_t)(TS__EIN_ELL + sn->max_ell - 1 - e);
  /* ASCII order: upper case (labels 26..51) before lower case (0..25). */
  for (int pass = 0; pass < 2; pass++)
    for (int l = pass == 0 ? 26 : 0; l < (pass == 0 ? TS__EIN_ELL : 26); l++)
      if (sn->count[l] == 1) {
        if (d >= TS_MAX_DIMS)
          return ts_error_set(err, TS_EINSUM,
                              "einsum '%s': the implicit output has more than %d dims", eq,
                              TS_MAX_DIMS);
        pe->out_lab[d++] = (int8_t)l;
      }
  pe->out_ndim = d;
  return TS_OK;
}

int ts__ein_parse(ts__ein_parsed *pe, const char *eq, int n, const int *ndims,
                  const int64_t *const *shapes, ts_error *err) {
  memset(pe, 0, sizeof *pe);
  if (eq == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum: the equation is NULL");
  if (n < 1 || n > TS_EINSUM_MAX_OPERANDS)
    return ts_error_set(err, TS_EINSUM, "einsum '%s': %d operands given; valid is 1 to %d", eq, n,
                        TS_EINSUM_MAX_OPERANDS);
  if (ndims == NULL || shapes == NULL)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "einsum '%s': ndims or shapes is NULL", eq);
  pe->n = n;
  for (int l = 0; l < TS__EIN_MAXL; l++)
    pe->size[l] = -1;

  /* Inputs. */
  size_t pos = 0;
  int terms = 0;
  seen sn = {.max_ell = 0};
  for (;;) {
    term t;
    int rc = scan_term(eq, &pos, &t, "input terms", err);
    if (rc)
      return rc;
    if (terms < n) {
      rc = parse_operand(pe, eq, terms, &t, ndims[terms], shapes[terms], &sn, err);
      if (rc)
        return rc;
    }
    terms++;
    if (eq[pos] == ',') {
      pos++;
      continue;
    }
    break;
  }
  if (terms != n)
    return ts_error_set(err, TS_EINSUM,
                        "einsum '%s': the equation has %d input terms but %d operands "
                        "were given",
                        eq, terms, n);

  /* Output. */
  int rc;
  if (eq[pos] == '-') {
    if (eq[pos + 1] != '>')
      return ts_error_set(err, TS_EINSUM, "einsum '%s': '-' at position %zu is not followed by '>'",
                          eq, pos);
    rc = parse_explicit_output(pe, eq, pos + 2, sn.max_ell, err);
  } else {
    if (eq[pos] != '\0')
      return ts_error_set(err, TS_EINSUM, "einsum '%s': unexpected '%c' at position %zu", eq,
                          eq[pos], pos);
    rc = implicit_output(pe, eq, &sn, err);
  }
  if (rc)
    return rc;
  pe->out_set = 0;
  for (int d = 0; d < pe->out_ndim; d++)
    pe->out_set |= (ts__ein_set)1 << pe->out_lab[d];
  return TS_OK;
}
