/* show.c - the sharding picture of `tshard show`, like jax.debug.visualize_array_sharding.
 *
 * The two drawn tensor dims are cut at the split points of the attribute (every slice's box
 * starts and ends on them), giving a grid of blocks. Each block is labelled with the world ranks
 * whose slice covers it: replicas appear together, and a Partial placement is marked with its
 * reduction ("sum: 0,1" means ranks 0 and 1 each hold a partial value to be summed). Column widths
 * and row heights are proportional to the split sizes, with a minimum that fits the labels; parts
 * of size zero get no cell and are listed under the drawing. */
#include "show.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LABEL 48

typedef struct {
  int n; /* ranks holding the block */
  int *ranks;
} holders;

static const char *box_chars(bool unicode, int which) {
  /* 0 h, 1 v, 2 top-left, 3 top, 4 top-right, 5 left, 6 cross, 7 right, 8 bottom-left, 9 bottom,
   * 10 bottom-right */
  static const char *u[] = {"─", "│", "┌", "┬", "┐", "├", "┼", "┤", "└", "┴", "┘"};
  static const char *a[] = {"-", "|", "+", "+", "+", "+", "+", "+", "+", "+", "+"};
  return unicode ? u[which] : a[which];
}

/* "0-3,6" style list of ranks (sorted). */
static void format_ranks(const int *r, int n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && r[j + 1] == r[j] + 1)
      j++;
    int w = j > i + 1 ? snprintf(buf + len, cap - len, "%s%d-%d", i ? "," : "", r[i], r[j])
                      : snprintf(buf + len, cap - len, "%s%d", i ? "," : "", r[i]);
    if (w < 0 || (size_t)w >= cap - len) {
      snprintf(buf + (cap > 4 ? cap - 4 : 0), cap > 4 ? 4 : cap, "...");
      return;
    }
    len += (size_t)w;
    if (j > i && j == i + 1) { /* two consecutive ranks: "a,b" */
      w = snprintf(buf + len, cap - len, ",%d", r[j]);
      len += (size_t)(w > 0 ? w : 0);
    }
    i = j + 1;
  }
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Sizes in characters for parts of the given lengths: proportional to total `span`, at least
 * `min` each (zero-size parts get 0). */
static void proportional(const int64_t *len, int n, int span, int min, int *out) {
  int64_t total = 0;
  for (int i = 0; i < n; i++)
    total += len[i];
  for (int i = 0; i < n; i++) {
    if (len[i] == 0) {
      out[i] = 0;
      continue;
    }
    int64_t w = total > 0 ? len[i] * span / total : min;
    out[i] = w < min ? min : (int)w;
  }
}

static void put_n(FILE *f, const char *s, int n) {
  for (int i = 0; i < n; i++)
    fputs(s, f);
}

#define MAX_ROW_LINES 40 /* lines of blocks drawn before rows are left out */

/* The parts to draw (size > 0): all of them when their sizes sum to at most `fit`, else the
 * first ones that fit `budget` characters (each costing its size plus `sep`), -1 for "...",
 * costing `gap`, and the last. Writes the part indices to sel; returns their count. */
static int select_parts(const int *size, int64_t n, int64_t fit, int budget, int sep, int gap,
                        int64_t *sel) {
  int64_t sum = 0, count = 0, last = -1;
  for (int64_t i = 0; i < n; i++)
    if (size[i] > 0)
      sum += size[i], count++, last = i;
  int m = 0;
  if (sum <= fit || count <= 2) {
    for (int64_t i = 0; i < n; i++)
      if (size[i] > 0)
        sel[m++] = i;
    return m;
  }
  int64_t used = gap + size[last] + sep;
  for (int64_t i = 0; i < last; i++) {
    if (size[i] == 0)
      continue;
    if (m > 0 && used + size[i] + sep > budget)
      break;
    sel[m++] = i;
    used += size[i] + sep;
  }
  sel[m++] = -1;
  sel[m++] = last;
  return m;
}

/* A rule of the grid: left, joint and right characters (box_chars indices) over the selected
 * columns (-1: the "..." column, 3 wide). */
static void rule(FILE *out, bool unicode, int left, int joint, int right, const int64_t *sc,
                 int nsc, const int *cw) {
  fputs(box_chars(unicode, left), out);
  for (int k = 0; k < nsc; k++) {
    if (k)
      fputs(box_chars(unicode, joint), out);
    if (sc[k] < 0)
      fputs("   ", out);
    else
      put_n(out, box_chars(unicode, 0), cw[sc[k]]);
  }
  fputs(box_chars(unicode, right), out);
  fputc('\n', out);
}

/* Which world ranks hold each block (cells, nr x nc, row-major): every rank's box starts at a
 * part along each drawn dim and may span several. Ranks whose box is empty are listed in empty
 * (up to 64; *nempty counts them). */
static void fill_cells(const ts_geom *g, const ts_attr *attr, int rd, int cd, int64_t nr,
                       int64_t nc, holders *cells, int *empty, int *nempty) {
  const int64_t *ro = rd >= 0 ? ts_geom_offsets(g, rd) : NULL,
                *co = cd >= 0 ? ts_geom_offsets(g, cd) : NULL;
  for (int64_t m = 0; m < attr->nranks; m++) {
    ts_box b;
    ts_geom_index_box(g, m, &b);
    if (ts_box_numel(&b) == 0) {
      if (*nempty < 64)
        empty[(*nempty)++] = attr->ranks[m];
      continue;
    }
    int64_t pr = 0, pc = 0;
    while (rd >= 0 && ro[pr] < b.lo[rd])
      pr++;
    while (cd >= 0 && co[pc] < b.lo[cd])
      pc++;
    /* a box may span several parts when the drawn dim is split over mesh dims; fill them all */
    for (int64_t r = pr; r < nr && (rd < 0 || ro[r] < b.hi[rd]); r++)
      for (int64_t c = pc; c < nc && (cd < 0 || co[c] < b.hi[cd]); c++) {
        holders *h = &cells[r * nc + c];
        h->ranks[h->n++] = attr->ranks[m];
      }
  }
}

/* The line that stands for the rows left out: "..." under each selected column. */
static void rows_left_out(FILE *out, const int64_t *sc, int nsc, const int *cw) {
  fputc(' ', out);
  for (int k = 0; k < nsc; k++) {
    int w = sc[k] >= 0 ? cw[sc[k]] : 3;
    fprintf(out, "%*s%-*s ", (w - 3) / 2, "", w - (w - 3) / 2, w >= 3 ? "..." : "");
  }
  fputc('\n', out);
}

/* The `height` lines of one row of blocks over the selected columns, each block's label (labels:
 * the row's, one per column) on the middle line. */
static void block_row(FILE *out, bool unicode, int height, const int64_t *sc, int nsc,
                      const int *cw, const char (*labels)[MAX_LABEL]) {
  for (int line = 0; line < height; line++) {
    fputs(box_chars(unicode, 1), out);
    for (int k = 0; k < nsc; k++) {
      int64_t c = sc[k];
      if (c < 0) {
        fputs(line == (height - 1) / 2 ? "..." : "   ", out);
        fputs(box_chars(unicode, 1), out);
        continue;
      }
      const char *l = line == (height - 1) / 2 ? labels[c] : "";
      int len = (int)strlen(l), pad = cw[c] - len, left = pad / 2;
      fprintf(out, "%*s%s%*s", left, "", l, pad - left, "");
      fputs(box_chars(unicode, 1), out);
    }
    fputc('\n', out);
  }
}

int cli_show_draw(FILE *out, int ndim, const int64_t *shape, const ts_attr *attr,
                  const show_opts *opts, ts_error *err) {
  int rd = opts->dims[0], cd = opts->dims[1];
  if (ndim == 0)
    rd = cd = -1;
  if ((rd >= ndim) || (cd >= ndim) || (rd >= 0 && rd == cd) || (ndim > 0 && rd < 0 && cd < 0))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "cannot draw dims %d,%d of a %d-dim tensor: give two distinct dims in "
                        "0..%d (or one for a 1-D view)",
                        rd, cd, ndim, ndim - 1);
  ts_geom *g = NULL;
  int rc = ts_geom_create(attr, ndim, shape, &g, err);
  if (rc)
    return rc;
  int64_t nr = rd >= 0 ? ts_geom_parts(g, rd) : 1, nc = cd >= 0 ? ts_geom_parts(g, cd) : 1;
  const int64_t *ro = rd >= 0 ? ts_geom_offsets(g, rd) : NULL,
                *co = cd >= 0 ? ts_geom_offsets(g, cd) : NULL;
  if (nr * nc > 4096) {
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_LIMIT, "%lld x %lld blocks are too many to draw (at most 4096)",
                        (long long)nr, (long long)nc);
  }
  holders *cells = calloc((size_t)(nr * nc), sizeof *cells);
  int *pool = calloc((size_t)(nr * nc) * (size_t)attr->nranks + 1, sizeof *pool);
  if (!cells || !pool) {
    free(cells);
    free(pool);
    ts_geom_destroy(&g);
    return ts_error_set(err, TS_NO_MEMORY, "out of memory drawing the sharding");
  }
  for (int64_t i = 0; i < nr * nc; i++)
    cells[i].ranks = pool + i * attr->nranks;
  int empty[64], nempty = 0;
  fill_cells(g, attr, rd, cd, nr, nc, cells, empty, &nempty);
  const char *partial = NULL;
  for (int k = 0; k < attr->mesh_ndim; k++)
    if (attr->place[k].kind == TS_PLACE_PARTIAL)
      partial = ts_reduce_name(attr->place[k].op);

  char(*label)[MAX_LABEL] = calloc((size_t)(nr * nc), MAX_LABEL);
  int maxlab = 1;
  for (int64_t i = 0; i < nr * nc && label; i++) {
    char r[MAX_LABEL - 8];
    qsort(cells[i].ranks, (size_t)cells[i].n, sizeof(int), cmp_int);
    format_ranks(cells[i].ranks, cells[i].n, r, sizeof r);
    snprintf(label[i], MAX_LABEL, "%s%s%s", partial ? partial : "", partial ? ": " : "", r);
    int w = (int)strlen(label[i]);
    if (w > maxlab)
      maxlab = w;
  }
  int64_t rlen[4096], clen[4096];
  for (int64_t r = 0; r < nr; r++)
    rlen[r] = rd >= 0 ? ro[r + 1] - ro[r] : 1;
  for (int64_t c = 0; c < nc; c++)
    clen[c] = cd >= 0 ? co[c + 1] - co[c] : 1;
  int width = opts->width > 0 ? opts->width : 64;
  int *cw = calloc((size_t)nc, sizeof *cw), *rh = calloc((size_t)nr, sizeof *rh);
  if (!label || !cw || !rh) {
    rc = ts_error_set(err, TS_NO_MEMORY, "out of memory drawing the sharding");
    goto done;
  }
  proportional(clen, (int)nc, width, maxlab + 2, cw);
  proportional(rlen, (int)nr, nr == 1 ? 1 : (int)(nr * 2 > 8 ? nr * 2 : 8), 1, rh);
  if (nr == 1)
    rh[0] = rlen[0] > 0 ? 1 : 0;

  /* header: what is drawn */
  char attr_text[512];
  ts_attr_format(attr, attr_text, sizeof attr_text);
  fprintf(out, "%s\n", attr_text);
  if (rd >= 0 && cd >= 0)
    fprintf(out, "dims %d (rows, %lld) x %d (columns, %lld)\n", rd, (long long)shape[rd], cd,
            (long long)shape[cd]);
  else if (cd >= 0)
    fprintf(out, "dim %d (%lld)\n", cd, (long long)shape[cd]);
  /* the grid, row by row of blocks; zero-size parts are skipped; when the blocks do not fit
   * the width (or more than MAX_ROW_LINES lines), the first ones, "..." and the last are drawn */
  int64_t *sc = malloc(sizeof *sc * (size_t)(nc + 2)), *sr = malloc(sizeof *sr * (size_t)(nr + 2));
  if (!sc || !sr) {
    free(sc);
    free(sr);
    rc = ts_error_set(err, TS_NO_MEMORY, "out of memory drawing the sharding");
    goto done;
  }
  int64_t last_r = -1, shown_c = 0, shown_r = 0, vis_c = 0, vis_r = 0;
  for (int64_t c = 0; c < nc; c++)
    vis_c += cw[c] > 0;
  for (int64_t r = 0; r < nr; r++)
    vis_r += rh[r] > 0;
  /* columns fit when they take the width (each may round up by one); rows up to the lines */
  int nsc = select_parts(cw, nc, width + vis_c, width + 1, 1, 4, sc);
  int nsr = select_parts(rh, nr, MAX_ROW_LINES - vis_r, MAX_ROW_LINES, 1, 2, sr);
  for (int i = 0; i < nsr; i++)
    if (sr[i] >= 0)
      last_r = sr[i], shown_r++;
  for (int i = 0; i < nsc; i++)
    shown_c += sc[i] >= 0;
  for (int i = 0; i < nsr; i++) {
    int64_t r = sr[i];
    if (r < 0) {
      rows_left_out(out, sc, nsc, cw);
      continue;
    }
    rule(out, opts->unicode, i == 0 ? 2 : 5, i == 0 ? 3 : 6, i == 0 ? 4 : 7, sc, nsc, cw);
    block_row(out, opts->unicode, rh[r], sc, nsc, cw, (const char(*)[MAX_LABEL])label + r * nc);
    if (r == last_r)
      rule(out, opts->unicode, 8, 9, 10, sc, nsc, cw);
  }
  if (shown_c < vis_c || shown_r < vis_r)
    fprintf(out, "(%lld of %lld columns, %lld of %lld rows of blocks shown)\n", (long long)shown_c,
            (long long)vis_c, (long long)shown_r, (long long)vis_r);
  free(sc);
  free(sr);
  if (last_r < 0)
    fprintf(out, "(the tensor is empty)\n");
  if (nempty > 0) {
    char r[256];
    qsort(empty, (size_t)nempty, sizeof(int), cmp_int);
    format_ranks(empty, nempty, r, sizeof r);
    fprintf(out, "empty slices (parts of size 0): ranks %s\n", r);
  }
  if (partial)
    fprintf(out, "partial: each listed rank holds a partial value; the tensor is their %s\n",
            partial);
done:
  free(label);
  free(cw);
  free(rh);
  free(cells);
  free(pool);
  ts_geom_destroy(&g);
  return rc;
}
