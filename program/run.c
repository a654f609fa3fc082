/* run.c - the program object: creation (parse, optimize, padding analysis, buckets, builds ahead
 * unless lazy), runs (bind the dynamic dims from the inputs' shapes, pick the smallest covering
 * bucket, pad inputs into it with their fills (in staging buffers the bucket keeps), run the
 * compiled code, cut the outputs back with the output shape formulas, copy in-place updates of
 * padded inputs back), the interface accessors and the readable report (tsp_program_show). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void tsp_program_destroy(tsp_program *p) {
  if (!p)
    return;
  for (int b = 0; b < p->n_buckets; b++)
    tsp_unload_bucket(&p->buckets[b]);
  free(p->buckets);
  for (int k = 0; k < p->n_kernels; k++)
    free(p->kernels[k].members);
  free(p->kernels);
  for (int i = 0; i < p->n_nodes; i++)
    free(p->nodes[i].slice);
  free(p->nodes);
  free(p->name);
  free(p->cache_dir);
  free(p->cc);
  free(p->cflags);
  free(p->cc_version);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

int tsp_program_create(tsp_program **out, const char *text, const tsp_options *opts,
                       ts_error *err) {
  *out = NULL;
  if (!text)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "program text is NULL");
  tsp_program *p = calloc(1, sizeof *p);
  if (!p)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  pthread_mutex_init(&p->lock, NULL);
  int rc = tsp_parse(p, text, err);
  if (rc == TS_OK)
    rc = tsp_optimize(p, err);
  if (rc == TS_OK)
    rc = tsp_padding_check(p, err);
  if (rc == TS_OK)
    rc = tsp_buckets_make(p, err);
  if (rc == TS_OK)
    rc = tsp_build_init(p, opts, err);
  if (rc == TS_OK && !(opts && opts->lazy))
    rc = tsp_program_build(p, -1, err);
  if (rc != TS_OK) {
    tsp_program_destroy(p);
    return rc;
  }
  *out = p;
  return TS_OK;
}

int tsp_program_build(tsp_program *p, int b, ts_error *err) {
  if (b >= p->n_buckets)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "bucket %d does not exist (the program has %d)",
                        b, p->n_buckets);
  pthread_mutex_lock(&p->lock);
  int rc = TS_OK;
  for (int i = b < 0 ? 0 : b; rc == TS_OK && i < (b < 0 ? p->n_buckets : b + 1); i++)
    if (b >= 0 || tsp_bucket_check(p, &p->buckets[i], NULL) == TS_OK) /* all: the usable ones */
      rc = tsp_build_bucket(p, &p->buckets[i], err);
  pthread_mutex_unlock(&p->lock);
  return rc;
}

/* The dynamic dims' values from the inputs' shapes; every static dim checked. */
static int bind(const tsp_program *p, const tsp_tensor *in, int n_in, int64_t *sym, ts_error *err) {
  if (n_in != p->n_inputs)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "program '%s' takes %d inputs, got %d", p->name,
                        p->n_inputs, n_in);
  bool seen[TSP_MAX_GROUPS] = {false};
  for (int g = 0; g < TSP_MAX_GROUPS; g++)
    sym[g] = 0;
  for (int i = 0; i < n_in; i++) {
    const tsp_node *n = &p->nodes[p->inputs[i]];
    if (in[i].dtype != n->dtype || in[i].ndim != n->ndim || (!in[i].data && n->ndim == 0))
      return ts_error_set(err, TS_BAD_SHAPE,
                          "input %d '%s': expected %s with %d dims, got %s "
                          "with %d dims",
                          i, n->name, ts_dtype_name(n->dtype), n->ndim, ts_dtype_name(in[i].dtype),
                          in[i].ndim);
    for (int d = 0; d < n->ndim; d++) {
      const tsp_expr *e = &n->shape[d];
      int64_t v = in[i].shape[d];
      if (tsp_expr_is_static(e)) {
        if (v != e->c)
          return ts_error_set(err, TS_BAD_SHAPE, "input '%s' dim %d: expected %lld, got %lld",
                              n->name, d, (long long)e->c, (long long)v);
        continue;
      }
      int g = 0;
      while (!e->k[g])
        g++;
      if (seen[g] && sym[g] != v)
        return ts_error_set(err, TS_BAD_SHAPE,
                            "input '%s' dim %d: dim group '%s' is %lld here "
                            "but %lld in an earlier input (grouped dims must be equal)",
                            n->name, d, p->groups[g].name, (long long)v, (long long)sym[g]);
      seen[g] = true;
      sym[g] = v;
    }
  }
  for (int g = 0; g < p->n_groups; g++)
    if (!seen[g])
      return ts_error_set(err, TS_BAD_SHAPE, "dim group '%s' appears in no input",
                          p->groups[g].name);
  return tsp_slices_bind(p, sym, err);
}

static int64_t numel(int ndim, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= dims[d];
  return n;
}

/* Copies the box [0, ext) between two contiguous arrays of shapes sdims and ddims. */
static void copy_box(char *dst, const int64_t *ddims, const char *src, const int64_t *sdims,
                     const int64_t *ext, int ndim, size_t es) {
  if (ndim == 0) {
    memcpy(dst, src, es);
    return;
  }
  if (ndim == 1) {
    memcpy(dst, src, (size_t)ext[0] * es);
    return;
  }
  size_t dstep = (size_t)numel(ndim - 1, ddims + 1) * es,
         sstep = (size_t)numel(ndim - 1, sdims + 1) * es;
  for (int64_t i = 0; i < ext[0]; i++)
    copy_box(dst + (size_t)i * dstep, ddims + 1, src + (size_t)i * sstep, sdims + 1, ext + 1,
             ndim - 1, es);
}

static void fill(void *buf, ts_dtype dt, double v, int64_t n) {
  switch (dt) {
  case TS_F32:
    for (int64_t i = 0; i < n; i++)
      ((float *)buf)[i] = (float)v;
    break;
  case TS_F64:
    for (int64_t i = 0; i < n; i++)
      ((double *)buf)[i] = v;
    break;
  case TS_I32:
    for (int64_t i = 0; i < n; i++)
      ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case TS_I64:
    for (int64_t i = 0; i < n; i++)
      ((int64_t *)buf)[i] = (int64_t)v;
    break;
  case TS_F16:
  case TS_BF16: {
    uint16_t h = dt == TS_F16 ? ts_f64_to_f16(v) : ts_f64_to_bf16(v);
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)buf)[i] = h;
    break;
  }
  default: memset(buf, (int)v, (size_t)n * ts_dtype_size(dt));
  }
}

int tsp_program_output_shape(const tsp_program *p, const tsp_tensor *inputs, int n_in, int k,
                             int64_t *shape, ts_error *err) {
  int64_t sym[TSP_MAX_GROUPS];
  int rc = bind(p, inputs, n_in, sym, err);
  if (rc != TS_OK)
    return rc;
  if (k < 0 || k >= p->n_outputs)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "output %d does not exist", k);
  const tsp_node *n = &p->nodes[p->outputs[k]];
  for (int d = 0; d < n->ndim; d++)
    shape[d] = tsp_expr_eval(&n->shape[d], sym);
  return TS_OK;
}

int tsp_program_prepare(tsp_program *p, const tsp_tensor *inputs, int n_in, ts_error *err) {
  int64_t sym[TSP_MAX_GROUPS];
  int rc = bind(p, inputs, n_in, sym, err);
  if (rc != TS_OK)
    return rc;
  int bi = tsp_program_pick_bucket(p, sym, err);
  if (bi < 0)
    return TS_BAD_SHAPE;
  return tsp_program_build(p, bi, err);
}

int tsp_program_run(tsp_program *p, tsp_tensor *inputs, int n_in, tsp_tensor *outputs, int n_out,
                    ts_error *err) {
  int64_t sym[TSP_MAX_GROUPS];
  int rc = bind(p, inputs, n_in, sym, err);
  if (rc != TS_OK)
    return rc;
  if (n_out != p->n_outputs)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "program '%s' has %d outputs, got room for %d",
                        p->name, p->n_outputs, n_out);
  int bi = tsp_program_pick_bucket(p, sym, err);
  if (bi < 0)
    return TS_BAD_SHAPE;
  pthread_mutex_lock(&p->lock);
  tsp_bucket *b = &p->buckets[bi];
  rc = tsp_build_bucket(p, b, err);
  void *args[128];
  bool staged[128];
  memset(staged, 0, sizeof staged);
  if (n_out > 0)
    memset(outputs, 0, (size_t)n_out * sizeof *outputs);
  int n_args = p->n_inputs + p->n_outputs;
  for (int i = 0; rc == TS_OK && i < n_args; i++) {
    bool is_in = i < p->n_inputs;
    const tsp_node *n = &p->nodes[is_in ? p->inputs[i] : p->outputs[i - p->n_inputs]];
    const int64_t *bdims = b->dims[is_in ? p->inputs[i] : p->outputs[i - p->n_inputs]];
    int64_t tdims[TSP_MAX_DIMS];
    for (int d = 0; d < n->ndim; d++)
      tdims[d] = tsp_expr_eval(&n->shape[d], sym);
    size_t es = ts_dtype_size(n->dtype);
    bool same = memcmp(tdims, bdims, (size_t)n->ndim * sizeof(int64_t)) == 0;
    if (!is_in) {
      tsp_tensor *o = &outputs[i - p->n_inputs];
      o->dtype = n->dtype;
      o->ndim = n->ndim;
      memcpy(o->shape, tdims, sizeof tdims);
      char what[TSP_NAME + 32];
      snprintf(what, sizeof what, "program output '%s'", p->output_names[i - p->n_inputs]);
      size_t bytes = (size_t)numel(n->ndim, tdims) * es;
      o->data = ts_pool_alloc(bytes ? bytes : 1, 0, what, err);
      if (!o->data) {
        rc = err ? err->code : TS_NO_MEMORY;
        break;
      }
    }
    if (same) {
      args[i] = is_in ? inputs[i].data : outputs[i - p->n_inputs].data;
      continue;
    }
    if (!b->stage[i]) {
      char what[TSP_NAME + 48];
      snprintf(what, sizeof what, "the padded bucket copy of '%s'", n->name);
      size_t bytes = (size_t)numel(n->ndim, bdims) * es;
      b->stage[i] = ts_pool_alloc(bytes ? bytes : 1, 0, what, err);
    }
    args[i] = b->stage[i];
    if (!args[i]) {
      rc = err ? err->code : TS_NO_MEMORY;
      break;
    }
    staged[i] = true;
    if (is_in) {
      fill(args[i], n->dtype, n->pad, numel(n->ndim, bdims));
      copy_box(args[i], bdims, inputs[i].data, tdims, tdims, n->ndim, es);
    }
  }
  if (rc == TS_OK) {
    tsp_einsum_ctx ctx = {p, b, err};
    tsp_env env = {tsp_einsum_callback, &ctx};
    if (b->fn(args, b->pool, sym, &env) != 0)
      rc = err && err->code ? err->code : TS_INTERNAL;
    p->stats.runs++;
  }
  for (int i = 0; i < n_args; i++) {
    if (!staged[i])
      continue;
    bool is_in = i < p->n_inputs;
    int node = is_in ? p->inputs[i] : p->outputs[i - p->n_inputs];
    const tsp_node *n = &p->nodes[node];
    int64_t tdims[TSP_MAX_DIMS];
    for (int d = 0; d < n->ndim; d++)
      tdims[d] = tsp_expr_eval(&n->shape[d], sym);
    if (rc == TS_OK && !is_in)
      copy_box(outputs[i - p->n_inputs].data, tdims, args[i], b->dims[node], tdims, n->ndim,
               ts_dtype_size(n->dtype));
    if (rc == TS_OK && is_in && tsp_program_input_assigned(p, i))
      copy_box(inputs[i].data, tdims, args[i], b->dims[node], tdims, n->ndim,
               ts_dtype_size(n->dtype));
  }
  pthread_mutex_unlock(&p->lock);
  if (rc != TS_OK)
    for (int k = 0; k < n_out; k++) {
      ts_pool_free(outputs[k].data);
      outputs[k].data = NULL;
    }
  return rc;
}

int tsp_program_n_inputs(const tsp_program *p) { return p->n_inputs; }
int tsp_program_n_outputs(const tsp_program *p) { return p->n_outputs; }
const char *tsp_program_input_name(const tsp_program *p, int i) {
  return p->nodes[p->inputs[i]].name;
}
const char *tsp_program_output_name(const tsp_program *p, int i) { return p->output_names[i]; }
ts_dtype tsp_program_input_dtype(const tsp_program *p, int i) {
  return p->nodes[p->inputs[i]].dtype;
}
ts_dtype tsp_program_output_dtype(const tsp_program *p, int i) {
  return p->nodes[p->outputs[i]].dtype;
}
int tsp_program_input_ndim(const tsp_program *p, int i) { return p->nodes[p->inputs[i]].ndim; }
int tsp_program_output_ndim(const tsp_program *p, int i) { return p->nodes[p->outputs[i]].ndim; }
bool tsp_program_input_assigned(const tsp_program *p, int i) {
  for (int n = 0; n < p->n_nodes; n++)
    if (p->nodes[n].live && p->nodes[n].assign_input == i)
      return true;
  return false;
}
int tsp_program_output_formula(const tsp_program *p, int k, int d, char *buf, size_t cap) {
  return tsp_expr_format(p, &p->nodes[p->outputs[k]].shape[d], buf, cap);
}
int tsp_program_input_formula(const tsp_program *p, int i, int d, char *buf, size_t cap) {
  return tsp_expr_format(p, &p->nodes[p->inputs[i]].shape[d], buf, cap);
}
int tsp_program_n_buckets(const tsp_program *p) { return p->n_buckets; }
int tsp_program_n_groups(const tsp_program *p) { return p->n_groups; }
const char *tsp_program_group_name(const tsp_program *p, int g) { return p->groups[g].name; }
void tsp_program_bucket_values(const tsp_program *p, int b, int64_t *values) {
  memcpy(values, p->buckets[b].values, (size_t)p->n_groups * sizeof(int64_t));
}
bool tsp_program_bucket_built(const tsp_program *p, int b) { return p->buckets[b].built; }
void tsp_program_stats(const tsp_program *p, tsp_stats *out) { *out = p->stats; }
const char *tsp_program_cache_path(const tsp_program *p, int b) {
  return p->buckets[b].built ? p->buckets[b].path : NULL;
}

int tsp_program_source(tsp_program *p, int b, char **text, ts_error *err) {
  if (b < 0 || b >= p->n_buckets)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "bucket %d does not exist", b);
  pthread_mutex_lock(&p->lock);
  tsp_bucket tmp;
  memset(&tmp, 0, sizeof tmp);
  memcpy(tmp.values, p->buckets[b].values, sizeof tmp.values);
  int rc = tsp_plan_bucket(p, &tmp, err);
  if (rc == TS_OK)
    rc = tsp_emit(p, &tmp, text, err);
  tsp_plan_free(&tmp);
  pthread_mutex_unlock(&p->lock);
  return rc;
}

static void shape_str(const tsp_program *p, const tsp_node *n, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "%s[", ts_dtype_name(n->dtype));
  for (int d = 0; d < n->ndim && len < cap; d++) {
    char e[64];
    tsp_expr_format(p, &n->shape[d], e, sizeof e);
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", d ? "," : "", e);
  }
  if (len < cap)
    snprintf(buf + len, cap - len, "]");
}

int tsp_program_show(tsp_program *p, char **text, ts_error *err) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  pthread_mutex_lock(&p->lock);
  char s[256], l[TSP_NAME + 16], a[TSP_NAME + 16];
  fprintf(f, "program %s: %d inputs, %d outputs, %d in-place assigns\n", p->name, p->n_inputs,
          p->n_outputs, p->n_assigns);
  fprintf(f, "graph after optimization:\n");
  for (int i = 0; i < p->n_nodes; i++) {
    const tsp_node *n = &p->nodes[i];
    if (!n->live || n->op == TSP_OP_CONST || n->op == TSP_OP_ASSIGN)
      continue;
    shape_str(p, n, s, sizeof s);
    fprintf(f, "  %s = %s(", tsp_node_label(p, i, l, sizeof l), tsp_op(n->op)->name);
    for (int k = 0; k < n->nargs; k++) {
      const tsp_node *an = &p->nodes[n->args[k]];
      if (an->op == TSP_OP_CONST)
        fprintf(f, "%s%g", k ? ", " : "", an->value);
      else
        fprintf(f, "%s%s", k ? ", " : "", tsp_node_label(p, n->args[k], a, sizeof a));
    }
    fprintf(f, ") %s", s);
    for (int d = 0; n->op == TSP_OP_SLICE && d < n->ndim; d++) {
      char b0[64], b1[64];
      tsp_expr_format(p, &n->slice[d], b0, sizeof b0);
      tsp_expr_format(p, &n->slice[TSP_MAX_DIMS + d], b1, sizeof b1);
      fprintf(f, "%s%s:%s", d ? ", " : " [", b0, b1);
      if (n->step[d] != 1)
        fprintf(f, ":%lld", (long long)n->step[d]);
      fprintf(f, "%s", d == n->ndim - 1 ? "]" : "");
    }
    if (n->op == TSP_OP_WINDOW) {
      char b0[64];
      tsp_expr_format(p, &n->slice[0], b0, sizeof b0);
      fprintf(f, " [dim %d, size %s]", n->perm[0], b0);
    }
    if (n->kernel >= 0)
      fprintf(f, " kernel %d", n->kernel);
    if (n->local)
      fprintf(f, " (register)");
    if (tsp_op(n->op)->cat == TSP_CAT_LAYOUT)
      fprintf(f, " (view)");
    if (n->output_index >= 0)
      fprintf(f, " -> output '%s'", p->output_names[n->output_index]);
    if (n->assign_input >= 0)
      fprintf(f, " -> in place into '%s'", p->nodes[p->inputs[n->assign_input]].name);
    if (n->masked)
      fprintf(f, " (masked: padding is not the identity)");
    fprintf(f, "\n");
  }
  fprintf(f, "kernels:\n");
  static const char *cats[] = {"input",  "const",  "elementwise", "reduction",
                               "einsum", "layout", "assign"};
  for (int k = 0; k < p->n_kernels; k++) {
    fprintf(f, "  kernel %d: %s", k, cats[p->kernels[k].cat]);
    if (p->kernels[k].cat == TSP_CAT_ELEMENTWISE)
      fprintf(f, ", %d fused", p->kernels[k].n_members);
    fprintf(f, ":");
    for (int m = 0; m < p->kernels[k].n_members; m++)
      fprintf(f, " %s", tsp_node_label(p, p->kernels[k].members[m], l, sizeof l));
    fprintf(f, "\n");
  }
  fprintf(f, "outputs:\n");
  for (int k = 0; k < p->n_outputs; k++) {
    fprintf(f, "  %s: %s [", p->output_names[k], ts_dtype_name(p->nodes[p->outputs[k]].dtype));
    for (int d = 0; d < p->nodes[p->outputs[k]].ndim; d++) {
      tsp_program_output_formula(p, k, d, s, sizeof s);
      fprintf(f, "%s%s", d ? ", " : "", s);
    }
    fprintf(f, "]\n");
  }
  if (p->n_groups) {
    fprintf(f, "dim groups:\n");
    for (int g = 0; g < p->n_groups; g++) {
      const tsp_group *gr = &p->groups[g];
      fprintf(f, "  %s in [%lld, %lld], %s:", gr->name, (long long)gr->min, (long long)gr->max,
              gr->rule);
      for (int v = 0; v < gr->n_values; v++)
        fprintf(f, " %lld", (long long)gr->values[v]);
      fprintf(f, "\n");
    }
    fprintf(f, "padding:\n");
    for (int i = 0; i < p->n_inputs; i++) {
      const tsp_node *n = &p->nodes[p->inputs[i]];
      bool dyn = false;
      for (int d = 0; d < n->ndim; d++)
        dyn = dyn || !tsp_expr_is_static(&n->shape[d]);
      if (dyn)
        fprintf(f, "  input %s filled with %g\n", n->name, n->pad);
    }
  }
  fprintf(f, "buckets: %d\n", p->n_buckets);
  for (int b = 0; b < p->n_buckets; b++) {
    const tsp_bucket *bk = &p->buckets[b];
    fprintf(f, "  bucket %d:", b);
    for (int g = 0; g < p->n_groups; g++)
      fprintf(f, " %s=%lld", p->groups[g].name, (long long)bk->values[g]);
    ts_error why;
    if (!bk->built && tsp_bucket_check(p, bk, &why) != TS_OK)
      fprintf(f, " not usable: %s", why.msg);
    else if (bk->built && !bk->from_cache && bk->cache_note[0])
      fprintf(f, " built (compiled; the cached object was refused: %s)", bk->cache_note);
    else
      fprintf(f, " %s",
              bk->built ? (bk->from_cache ? "built (cache hit)" : "built (compiled)")
                        : "not built");
    if (bk->built)
      fprintf(f, " pool=%zu bytes %s", bk->pool_bytes, bk->path);
    fprintf(f, "\n");
  }
  for (int b = 0; b < p->n_buckets; b++) {
    const tsp_bucket *bk = &p->buckets[b];
    if (!bk->built)
      continue;
    fprintf(f, "pool plan of bucket %d (%zu bytes):\n", b, bk->pool_bytes);
    for (int i = 0; i < bk->n_bufs; i++) {
      const tsp_poolbuf *pb = &bk->bufs[i];
      fprintf(f, "  %s: offset %zu, %zu bytes, kernels %d..%d",
              tsp_node_label(p, pb->node, l, sizeof l), pb->offset, pb->bytes, pb->first, pb->last);
      if (pb->alias_of >= 0)
        fprintf(f, " (in place of %s)",
                tsp_node_label(p, bk->bufs[pb->alias_of].node, a, sizeof a));
      fprintf(f, "\n");
    }
    break;
  }
  fprintf(f, "cache: %s (compiler %s: %s; flags %s)\n", p->cache_dir, p->cc, p->cc_version,
          p->cflags);
  fprintf(f,
          "stats: compiles=%lld cache_hits=%lld cache_refused=%lld runs=%lld "
          "compile_ms=%.1f\n",
          (long long)p->stats.compiles, (long long)p->stats.cache_hits,
          (long long)p->stats.cache_refused, (long long)p->stats.runs, p->stats.compile_ms);
  pthread_mutex_unlock(&p->lock);
  fclose(f);
  *text = buf;
  return TS_OK;
}
