/* memplan.c - one bucket's plan: every node's concrete shape, where its values live (an argument,
 * the pool, a register of its kernel, a literal; views as offsets and strides over their base),
 * and the memory planner that lays every materialized intermediate into one static pool ahead of
 * time. A buffer lives from the kernel that writes it to the last kernel that reads it (through
 * views too); a fused kernel's result takes the place of an operand buffer it reads element for
 * element at its last use (in place); then buffers are placed largest first at the lowest offset
 * that overlaps no buffer alive at the same time. Also the static einsum plans. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void contiguous(tsp_loc *l, int ndim, const int64_t *dims) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    l->strides[d] = s;
    s *= dims[d] > 0 ? dims[d] : 1;
  }
}

static int64_t numel(int ndim, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= dims[d];
  return n;
}

static int view_base(const tsp_program *p, int n) {
  while (tsp_op(p->nodes[n].op)->cat == TSP_CAT_LAYOUT)
    n = p->nodes[n].args[0];
  return n;
}

void tsp_plan_free(tsp_bucket *b) {
  if (!b)
    return;
  free(b->dims);
  free(b->locs);
  free(b->bufs);
  ts_pool_free(b->pool);
  for (int i = 0; i < 128; i++) {
    ts_pool_free(b->stage[i]);
    b->stage[i] = NULL;
  }
  for (int i = 0; b->plans && i < b->n_plans; i++)
    ts_einsum_plan_destroy(&b->plans[i]);
  free(b->plans);
  b->dims = NULL;
  b->locs = NULL;
  b->bufs = NULL;
  b->pool = NULL;
  b->plans = NULL;
  b->n_plans = 0;
  b->n_bufs = 0;
  b->pool_bytes = 0;
}

static int place(tsp_bucket *b) {
  int n = b->n_bufs;
  int *order = malloc((size_t)n * sizeof *order + 1);
  bool *placed = calloc((size_t)n + 1, sizeof *placed);
  if (!order || !placed) {
    free(order);
    free(placed);
    return TS_NO_MEMORY;
  }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (b->bufs[i].alias_of < 0)
      order[m++] = i;
  for (int i = 1; i < m; i++) /* insertion sort, largest first */
    for (int j = i; j > 0 && b->bufs[order[j]].bytes > b->bufs[order[j - 1]].bytes; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  b->pool_bytes = 0;
  for (int i = 0; i < m; i++) {
    tsp_poolbuf *x = &b->bufs[order[i]];
    size_t off = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < n; j++) {
        const tsp_poolbuf *y = &b->bufs[j];
        if (!placed[j] || y->last < x->first || x->last < y->first)
          continue;
        if (off < y->offset + y->bytes && y->offset < off + x->bytes) {
          off = y->offset + y->bytes;
          moved = true;
        }
      }
    }
    x->offset = off;
    placed[order[i]] = true;
    if (off + x->bytes > b->pool_bytes)
      b->pool_bytes = off + x->bytes;
  }
  for (int i = 0; i < n; i++)
    if (b->bufs[i].alias_of >= 0)
      b->bufs[i].offset = b->bufs[b->bufs[i].alias_of].offset;
  free(order);
  free(placed);
  return TS_OK;
}

/* The planner's tables over the nodes: the last kernel that reads each buffer (through views),
 * the buffer each node's value has (-1: none), and the one kernel whose elementwise ops are a
 * node's only readers (-2: none such, -1: no reader). */
typedef struct node_uses {
  int *last, *buf_of, *readers;
} node_uses;

static void find_readers(const tsp_program *p, int *readers) {
  int nn = p->n_nodes;
  for (int i = 0; i < nn; i++)
    readers[i] = -1;
  for (int j = 0; j < nn; j++) {
    const tsp_node *c = &p->nodes[j];
    if (!c->live || c->op == TSP_OP_ASSIGN)
      continue;
    for (int q = 0; q < c->nargs; q++) {
      int o = c->args[q];
      if (tsp_op(c->op)->cat != TSP_CAT_ELEMENTWISE ||
          (readers[o] != -1 && readers[o] != c->kernel))
        readers[o] = -2;
      else if (readers[o] == -1)
        readers[o] = c->kernel;
    }
  }
}

static void find_last_uses(const tsp_program *p, int *last) {
  for (int i = 0; i < p->n_nodes; i++) {
    const tsp_node *n = &p->nodes[i];
    if (!n->live || n->op == TSP_OP_ASSIGN || n->kernel < 0)
      continue;
    for (int a = 0; a < n->nargs; a++) {
      int base = view_base(p, n->args[a]);
      if (n->kernel > last[base])
        last[base] = n->kernel;
    }
  }
}

/* A slice is a view: the start moves the offset (by the run's true values when it is a formula),
 * the step scales the strides. */
static int slice_loc(const tsp_node *n, const tsp_loc *s, tsp_loc *l, ts_error *err) {
  *l = *s;
  bool over = false;
  for (int d = 0; d < n->ndim; d++) {
    const tsp_expr *st = &n->slice[d];
    int64_t t;
    over = over || __builtin_mul_overflow(st->c, s->strides[d], &t) ||
           __builtin_add_overflow(l->view_off, t, &l->view_off);
    for (int g = 0; g < TSP_MAX_GROUPS; g++)
      over = over || __builtin_mul_overflow(st->k[g], s->strides[d], &t) ||
             __builtin_add_overflow(l->view_sym[g], t, &l->view_sym[g]);
    over = over || __builtin_mul_overflow(s->strides[d], n->step[d], &l->strides[d]);
  }
  if (over)
    return ts_error_set(err, TS_OVERFLOW, "slice '%s': its offset or strides overflow", n->name);
  return TS_OK;
}

/* The buffer an elementwise result of `bytes` may take at its operand's last use (-1: none): an
 * operand buffer of the same size, element size and shape that every read of is in this kernel,
 * element for element, and that no other result of this kernel took already. */
static int alias_candidate(const tsp_program *p, const tsp_bucket *b, const tsp_node *n,
                           size_t bytes, const node_uses *u) {
  const tsp_kernel *k = &p->kernels[n->kernel];
  for (int m = 0; m < k->n_members; m++) {
    const tsp_node *mn = &p->nodes[k->members[m]];
    for (int a = 0; a < mn->nargs; a++) {
      int o = mn->args[a];
      const tsp_node *on = &p->nodes[o];
      if (u->buf_of[o] < 0 || u->last[o] != n->kernel || tsp_op(on->op)->cat == TSP_CAT_LAYOUT ||
          b->bufs[u->buf_of[o]].bytes != bytes || on->ndim != k->ndim ||
          ts_dtype_size(on->dtype) != ts_dtype_size(n->dtype))
        continue;
      bool identity = true, taken = false;
      for (int d = 0; d < k->ndim; d++)
        identity = identity && tsp_expr_eq(&on->shape[d], &k->shape[d]);
      /* every read of o is in this kernel, element for element; its buffer not yet reused */
      identity = identity && u->readers[o] == n->kernel;
      int root = u->buf_of[o];
      while (b->bufs[root].alias_of >= 0)
        root = b->bufs[root].alias_of;
      taken = b->bufs[root].first == n->kernel;
      for (int j = 0; j < b->n_bufs; j++)
        taken = taken || (b->bufs[j].alias_of == root && b->bufs[j].first == n->kernel);
      if (identity && !taken)
        return u->buf_of[o];
    }
  }
  return -1;
}

/* Node i's value in a pool buffer; an elementwise result may take an operand's buffer at its
 * last use. */
static void pool_loc(const tsp_program *p, tsp_bucket *b, int i, tsp_loc *l, node_uses *u) {
  const tsp_node *n = &p->nodes[i];
  l->kind = TSP_LOC_POOL;
  contiguous(l, n->ndim, b->dims[i]);
  size_t bytes = ((size_t)numel(n->ndim, b->dims[i]) * ts_dtype_size(n->dtype) + 63) & ~(size_t)63;
  int alias = tsp_op(n->op)->cat == TSP_CAT_ELEMENTWISE ? alias_candidate(p, b, n, bytes, u) : -1;
  tsp_poolbuf *pb = &b->bufs[b->n_bufs];
  pb->node = i;
  pb->bytes = bytes;
  pb->first = n->kernel;
  pb->last = u->last[i] > n->kernel ? u->last[i] : n->kernel;
  pb->alias_of = -1;
  if (alias >= 0) {
    int root = alias;
    while (b->bufs[root].alias_of >= 0)
      root = b->bufs[root].alias_of;
    pb->alias_of = root;
    if (pb->last > b->bufs[root].last)
      b->bufs[root].last = pb->last;
  }
  l->index = b->n_bufs;
  u->buf_of[i] = b->n_bufs++;
}

/* The einsum plan of node i when every operand's shape is static (else planned at run time). */
static int static_einsum_plan(const tsp_program *p, tsp_bucket *b, int i, ts_error *err) {
  const tsp_node *n = &p->nodes[i];
  for (int a = 0; a < n->nargs; a++)
    for (int d = 0; d < p->nodes[n->args[a]].ndim; d++)
      if (!tsp_expr_is_static(&p->nodes[n->args[a]].shape[d]))
        return TS_OK;
  int ndims[TSP_MAX_ARGS];
  const int64_t *shapes[TSP_MAX_ARGS];
  for (int a = 0; a < n->nargs; a++) {
    ndims[a] = p->nodes[n->args[a]].ndim;
    shapes[a] = b->dims[n->args[a]];
  }
  return ts_einsum_plan_create(&b->plans[i], n->eq, n->nargs, ndims, shapes, n->dtype, NULL, err);
}

/* Where node i's values live; its operands' locations are set already. */
static int locate(const tsp_program *p, tsp_bucket *b, int i, node_uses *u, ts_error *err) {
  const tsp_node *n = &p->nodes[i];
  tsp_loc *l = &b->locs[i];
  if (!n->live || n->op == TSP_OP_ASSIGN)
    return TS_OK;
  int rc = TS_OK;
  tsp_category cat = tsp_op(n->op)->cat;
  if (cat == TSP_CAT_INPUT) {
    l->kind = TSP_LOC_ARG;
    l->index = n->input_index;
    contiguous(l, n->ndim, b->dims[i]);
  } else if (cat == TSP_CAT_CONST) {
    l->kind = TSP_LOC_CONST;
  } else if (n->op == TSP_OP_TRANSPOSE) {
    const tsp_loc *s = &b->locs[n->args[0]];
    *l = *s;
    for (int d = 0; d < n->ndim; d++)
      l->strides[d] = s->strides[n->perm[d]];
  } else if (n->op == TSP_OP_SLICE) {
    rc = slice_loc(n, &b->locs[n->args[0]], l, err);
  } else if (n->op == TSP_OP_WINDOW) {
    /* a view: the new last dim steps along the windowed dim */
    *l = b->locs[n->args[0]];
    l->strides[n->ndim - 1] = l->strides[n->perm[0]];
  } else if (n->op == TSP_OP_RESHAPE) {
    *l = b->locs[n->args[0]];
    contiguous(l, n->ndim, b->dims[i]);
  } else if (cat == TSP_CAT_ELEMENTWISE && n->local) {
    l->kind = TSP_LOC_LOCAL;
  } else if (n->output_index >= 0) {
    l->kind = TSP_LOC_ARG;
    l->index = p->n_inputs + n->output_index;
    contiguous(l, n->ndim, b->dims[i]);
  } else {
    pool_loc(p, b, i, l, u);
  }
  if (rc == TS_OK && n->op == TSP_OP_EINSUM)
    rc = static_einsum_plan(p, b, i, err);
  return rc;
}

int tsp_plan_bucket(tsp_program *p, tsp_bucket *b, ts_error *err) {
  int rc0 = tsp_bucket_check(p, b, err);
  if (rc0 != TS_OK)
    return rc0;
  int nn = p->n_nodes;
  b->dims = calloc((size_t)nn, sizeof *b->dims);
  b->locs = calloc((size_t)nn, sizeof *b->locs);
  b->bufs = calloc((size_t)nn, sizeof *b->bufs);
  b->plans = calloc((size_t)nn + 1, sizeof *b->plans);
  node_uses u = {.last = malloc((size_t)nn * sizeof(int)),
                 .buf_of = malloc((size_t)nn * sizeof(int)),
                 .readers = malloc((size_t)nn * sizeof(int))};
  if (!b->dims || !b->locs || !b->bufs || !b->plans || !u.last || !u.buf_of || !u.readers) {
    free(u.last);
    free(u.buf_of);
    free(u.readers);
    tsp_plan_free(b);
    return ts_error_set(err, TS_NO_MEMORY, "out of memory planning a bucket");
  }
  b->n_plans = nn;
  for (int i = 0; i < nn; i++) {
    const tsp_node *n = &p->nodes[i];
    for (int d = 0; d < n->ndim; d++)
      b->dims[i][d] = tsp_bucket_extent(b, &n->shape[d]);
    u.last[i] = -1;
    u.buf_of[i] = -1;
  }
  find_readers(p, u.readers);
  find_last_uses(p, u.last);
  /* locations, in node order (operands before their users) */
  int rc = TS_OK;
  for (int i = 0; i < nn && rc == TS_OK; i++)
    rc = locate(p, b, i, &u, err);
  free(u.last);
  free(u.buf_of);
  free(u.readers);
  if (rc == TS_OK && place(b) != TS_OK)
    rc = ts_error_set(err, TS_NO_MEMORY, "out of memory planning the pool");
  for (int i = 0; rc == TS_OK && i < b->n_bufs; i++)
    b->locs[b->bufs[i].node].offset = (int64_t)b->bufs[i].offset;
  /* views of pool buffers share their base's byte offset */
  for (int i = 0; rc == TS_OK && i < nn; i++)
    if (p->nodes[i].live && tsp_op(p->nodes[i].op)->cat == TSP_CAT_LAYOUT)
      b->locs[i].offset = b->locs[view_base(p, i)].offset;
  if (rc == TS_OK && b->pool_bytes) {
    /* the buffer pool (64-byte aligned): under the daemon's memory limit, checked first */
    b->pool = ts_pool_alloc(b->pool_bytes, 0, "the program's work buffer", err);
    if (!b->pool)
      rc = err ? err->code : TS_NO_MEMORY;
  }
  if (rc != TS_OK)
    tsp_plan_free(b);
  return rc;
}
