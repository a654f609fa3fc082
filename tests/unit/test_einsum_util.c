/* test_einsum_util.c - helpers shared by the einsum tests: see test_einsum_util.h. */
#include "test_einsum_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t rng_next(rng *r) {
  /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int rng_int(rng *r, int lo, int hi) { return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1)); }

void tt_alloc(test_tensor *tt, ts_dtype dt, int nd, const int64_t *shape, test_layout kind) {
  memset(tt, 0, sizeof *tt);
  ts_layout *l = &tt->t.layout;
  l->dtype = dt;
  l->ndim = nd;
  int64_t st = 1;
  for (int k = 0; k < nd; k++) {
    int d = kind == TL_COLUMN_MAJOR ? k : nd - 1 - k; /* innermost first */
    l->shape[d] = shape[d];
    l->strides[d] = st;
    st *= shape[d] + (kind == TL_PADDED ? 1 : 0);
    if (st == 0)
      st = 1;
  }
  size_t bytes = (size_t)st * ts_dtype_size(dt);
  /* A padded view starts one element in, so its offset is exercised too. */
  if (kind == TL_PADDED) {
    l->offset = (int64_t)ts_dtype_size(dt);
    bytes += ts_dtype_size(dt);
  }
  /* Reversed: the last dim runs backwards from the end of its row. */
  if (kind == TL_REVERSED && nd > 0 && l->shape[nd - 1] > 1) {
    l->offset = (l->shape[nd - 1] - 1) * (int64_t)ts_dtype_size(dt);
    l->strides[nd - 1] = -1;
  }
  tt->buf = calloc(1, bytes ? bytes : 1);
  tt->t.data = tt->buf;
  tt->t.bytes = bytes;
}

void tt_free(test_tensor *tt) {
  free(tt->buf);
  tt->buf = NULL;
}

static char *addr(const test_tensor *tt, const int64_t *idx) {
  int64_t off = tt->t.layout.offset / (int64_t)ts_dtype_size(tt->t.layout.dtype);
  for (int d = 0; d < tt->t.layout.ndim; d++)
    off += idx[d] * tt->t.layout.strides[d];
  return (char *)tt->t.data + off * (int64_t)ts_dtype_size(tt->t.layout.dtype);
}

double tt_get(const test_tensor *tt, const int64_t *idx) {
  double v;
  ts_convert(&v, TS_F64, addr(tt, idx), tt->t.layout.dtype, 1);
  return v;
}

void tt_set(test_tensor *tt, const int64_t *idx, double v) {
  ts_convert(addr(tt, idx), tt->t.layout.dtype, &v, TS_F64, 1);
}

int64_t tt_numel(const test_tensor *tt) {
  int64_t n = 1;
  for (int d = 0; d < tt->t.layout.ndim; d++)
    n *= tt->t.layout.shape[d];
  return n;
}

void tt_index(const test_tensor *tt, int64_t e, int64_t *idx) {
  for (int d = tt->t.layout.ndim - 1; d >= 0; d--) {
    int64_t s = tt->t.layout.shape[d];
    idx[d] = s ? e % s : 0;
    e = s ? e / s : 0;
  }
}

void tt_fill(test_tensor *tt, rng *r) {
  int64_t n = tt_numel(tt), idx[TS_MAX_DIMS];
  bool fl = ts_dtype_is_float(tt->t.layout.dtype);
  for (int64_t e = 0; e < n; e++) {
    tt_index(tt, e, idx);
    tt_set(tt, idx, fl ? rng_int(r, -8, 8) / 8.0 : rng_int(r, -3, 3));
  }
}

double tt_compare(const test_tensor *got, const test_tensor *want, int64_t *where) {
  double atol = 0, rtol = 0;
  switch (want->t.layout.dtype) {
  case TS_F64:
    atol = 1e-10;
    rtol = 1e-10;
    break;
  case TS_F32:
    atol = 1e-4;
    rtol = 1e-5;
    break;
  case TS_F16:
    atol = 1e-2;
    rtol = 4e-3;
    break;
  case TS_BF16:
    atol = 5e-2;
    rtol = 1.6e-2;
    break;
  default: break;
  }
  int64_t n = tt_numel(want), idx[TS_MAX_DIMS];
  double worst = 0;
  for (int64_t e = 0; e < n; e++) {
    tt_index(want, e, idx);
    double a = tt_get(got, idx), b = tt_get(want, idx);
    double excess = fabs(a - b) - (atol + rtol * fabs(b));
    if (!(excess <= 0) && !(excess < worst)) {
      worst = isnan(excess) ? INFINITY : excess;
      if (where)
        *where = e;
    }
  }
  return worst;
}

static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

void rand_case_make(rand_case *c, rng *r, int max_ops, ts_dtype dt, double max_work) {
  for (;;) {
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->n = rng_int(r, 1, max_ops);
    int pool = rng_int(r, 1, 7);
    char lab[7];
    int64_t size[7];
    for (int j = 0; j < pool; j++) {
      bool dup;
      do {
        lab[j] = letters[rng_int(r, 0, 51)];
        dup = false;
        for (int k = 0; k < j; k++)
          dup |= lab[k] == lab[j];
      } while (dup);
      size[j] = rng_int(r, 0, 80) == 0 ? 0 : rng_int(r, 0, 7) == 0 ? 1 : rng_int(r, 2, 5);
    }
    int ell = rng_int(r, 0, 9) < 3 ? rng_int(r, 0, 2) : -1; /* -1: no "..." anywhere */
    int64_t ell_size[2] = {rng_int(r, 2, 3), rng_int(r, 1, 3)};
    double work = 1;
    for (int j = 0; j < pool; j++)
      work *= size[j] ? (double)size[j] : 1;
    for (int j = 0; j < (ell > 0 ? ell : 0); j++)
      work *= (double)ell_size[j];
    work *= c->n + 1;
    bool used[7] = {false};
    int pos = 0;
    for (int i = 0; i < c->n; i++) {
      if (i)
        c->eq[pos++] = ',';
      int nl = rng_int(r, 0, 4);
      int which[8];
      for (int j = 0; j < nl; j++) {
        /* Mostly distinct labels; a repeat (a diagonal) now and then. */
        bool again;
        int tries = 0;
        do {
          which[j] = rng_int(r, 0, pool - 1);
          again = false;
          for (int k = 0; k < j; k++)
            again |= which[k] == which[j];
        } while (again && rng_int(r, 0, 7) != 0 && ++tries < 8);
      }
      bool ones[7];
      for (int j = 0; j < pool; j++)
        ones[j] = rng_int(r, 0, 9) == 0;
      int e_i = ell >= 0 && rng_int(r, 0, 3) > 0 ? rng_int(r, 0, ell) : -1;
      int ell_at = e_i >= 0 ? rng_int(r, 0, nl) : -1;
      int d = 0;
      for (int j = 0; j <= nl; j++) {
        if (j == ell_at) {
          memcpy(c->eq + pos, "...", 3);
          pos += 3;
          for (int k = 0; k < e_i; k++) {
            int64_t s = ell_size[ell - e_i + k];
            c->shape[i][d++] = rng_int(r, 0, 3) == 0 ? 1 : s;
          }
        }
        if (j < nl) {
          c->eq[pos++] = lab[which[j]];
          used[which[j]] = true;
          c->shape[i][d++] = ones[which[j]] ? 1 : size[which[j]];
        }
      }
      c->ndim[i] = d;
    }
    if (rng_int(r, 0, 9) >= 3) {
      /* Explicit output: a random subset of the used labels in random order. */
      memcpy(c->eq + pos, "->", 2);
      pos += 2;
      char out[7];
      int no = 0;
      for (int j = 0; j < pool; j++)
        if (used[j] && rng_int(r, 0, 1))
          out[no++] = lab[j];
      for (int j = no - 1; j > 0; j--) {
        int k = rng_int(r, 0, j);
        char t = out[j];
        out[j] = out[k];
        out[k] = t;
      }
      int ell_at = ell >= 0 ? rng_int(r, 0, no) : -1;
      for (int j = 0; j <= no; j++) {
        if (j == ell_at) {
          memcpy(c->eq + pos, "...", 3);
          pos += 3;
        }
        if (j < no)
          c->eq[pos++] = out[j];
      }
    }
    c->eq[pos] = '\0';
    if (work <= max_work)
      return;
  }
}
