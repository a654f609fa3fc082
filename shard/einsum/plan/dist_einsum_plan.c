/* dist_einsum_plan.c - the distributed einsum planner: labels, assignments of the compute mesh,
 * candidate plans costed with the reshard planner, the choice (see ts_dist_einsum_plan.h).
 *
 * Pure C, no MPI. An assignment gives each mesh dim of the compute mesh a role: a label (sharded
 * there in every operand that holds it at its full size), Replicate, or the Partial(sum) of one
 * operand. A label can be sharded only when no operand repeats it (a diagonal) and, where it is
 * sharded, its split sizes come from the operand the assignment was read from, so that every
 * operand's slices of that label line up. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts_dist_einsum_plan.h"

enum { ROLE_R, ROLE_LABEL, ROLE_PARTIAL };

typedef struct role {
  int kind;
  char label;  /* ROLE_LABEL */
  int operand; /* ROLE_PARTIAL */
} role;

typedef struct assignment {
  const ts_attr *mesh; /* mesh shape and ranks come from this attribute */
  role r[TS_MAX_MESH_DIMS];
  /* explicit split sizes of a sharded label (NULL: balanced) */
  const int64_t *splits[128];
  int nsplits[128];
} assignment;

/* ---------------------------------------------------------------------------------------------
 * Equation */

static int parse_equation(ts_dein_plan *p, const char *eq, int n, ts_error *err) {
  char buf[160];
  size_t k = 0;
  for (const char *c = eq; *c; c++) {
    if (*c == ' ')
      continue;
    if (k + 1 >= sizeof buf)
      return ts_error_set(err, TS_EINSUM, "equation longer than %zu characters", sizeof buf - 1);
    buf[k++] = *c;
  }
  buf[k] = '\0';
  if (strstr(buf, "..."))
    return ts_error_set(err, TS_EINSUM,
                        "distributed einsum takes explicit labels: '...' is not supported; name "
                        "every dim with a letter a-z or A-Z");
  char *arrow = strstr(buf, "->");
  char *out = NULL;
  if (arrow) {
    *arrow = '\0';
    out = arrow + 2;
  }
  int nop = 0;
  char *start = buf;
  for (;;) {
    char *comma = strchr(start, ',');
    if (comma)
      *comma = '\0';
    if (nop >= TS_DEIN_MAX_OPERANDS)
      return ts_error_set(err, TS_EINSUM,
                          "the equation has more than %d operands; distributed einsum takes 1 "
                          "to %d",
                          TS_DEIN_MAX_OPERANDS, TS_DEIN_MAX_OPERANDS);
    size_t len = strlen(start);
    if (len > TS_MAX_DIMS)
      return ts_error_set(err, TS_EINSUM, "operand %d has %zu labels; at most %d", nop, len,
                          TS_MAX_DIMS);
    for (size_t i = 0; i < len; i++)
      if (!((start[i] >= 'a' && start[i] <= 'z') || (start[i] >= 'A' && start[i] <= 'Z')))
        return ts_error_set(err, TS_EINSUM,
                            "operand %d: character '%c' is not a label; labels are a-z and A-Z",
                            nop, start[i]);
    memcpy(p->labels[nop], start, len + 1);
    nop++;
    if (!comma)
      break;
    start = comma + 1;
  }
  if (nop != n)
    return ts_error_set(err, TS_EINSUM, "the equation has %d operands but %d tensors were given",
                        nop, n);
  int count[128] = {0};
  for (int i = 0; i < n; i++)
    for (const char *c = p->labels[i]; *c; c++)
      count[(int)*c]++;
  if (out) {
    size_t len = strlen(out);
    if (len > TS_MAX_DIMS)
      return ts_error_set(err, TS_EINSUM, "the output has %zu labels; at most %d", len,
                          TS_MAX_DIMS);
    for (size_t i = 0; i < len; i++) {
      int c = (unsigned char)out[i];
      if (c >= 128 || !count[c])
        return ts_error_set(err, TS_EINSUM,
                            "output label '%c' is in no operand; output labels must appear in "
                            "an operand",
                            out[i]);
      if (strchr(out + i + 1, out[i]))
        return ts_error_set(err, TS_EINSUM, "output label '%c' is repeated", out[i]);
    }
    memcpy(p->out_labels, out, len + 1);
  } else { /* numpy's implicit output: labels seen once, in ASCII order */
    int m = 0;
    for (int c = 0; c < 128; c++)
      if (count[c] == 1 && m < TS_MAX_DIMS)
        p->out_labels[m++] = (char)c;
    p->out_labels[m] = '\0';
  }
  size_t pos = 0;
  for (int i = 0; i < n; i++)
    pos += (size_t)snprintf(p->equation + pos, sizeof p->equation - pos, "%s%s", i ? "," : "",
                            p->labels[i]);
  snprintf(p->equation + pos, sizeof p->equation - pos, "->%s", p->out_labels);
  return TS_OK;
}

/* The size of a label (the largest over operands: size-1 dims broadcast). */
static int64_t label_size(const ts_dein_plan *p, char l) {
  int64_t s = -1;
  for (int i = 0; i < p->n; i++)
    for (int d = 0; d < p->ndim[i]; d++)
      if (p->labels[i][d] == l && p->shape[i][d] > s)
        s = p->shape[i][d];
  return s;
}

/* The dim of label l in operand i when it holds it once at full size; -1 otherwise. */
static int label_dim(const ts_dein_plan *p, int i, char l) {
  const char *s = p->labels[i];
  const char *c = strchr(s, l);
  if (!c || strchr(c + 1, l))
    return -1;
  int d = (int)(c - s);
  return p->shape[i][d] == label_size(p, l) ? d : -1;
}

/* A label can be sharded when no operand repeats it. */
static bool label_shardable(const ts_dein_plan *p, char l) {
  for (int i = 0; i < p->n; i++) {
    const char *c = strchr(p->labels[i], l);
    if (c && strchr(c + 1, l))
      return false;
  }
  return label_size(p, l) > 1;
}

static bool in_output(const ts_dein_plan *p, char l) { return strchr(p->out_labels, l) != NULL; }

/* ---------------------------------------------------------------------------------------------
 * Assignments */

/* From operand i's attribute: its shards of shardable labels (only the labels the output keeps
 * when free_only), its Partial(sum). */
static void assign_from_operand(const ts_dein_plan *p, const ts_attr *a, int i, bool free_only,
                                assignment *as) {
  memset(as, 0, sizeof *as);
  as->mesh = a;
  for (int m = 0; m < a->mesh_ndim; m++) {
    const ts_placement *pl = &a->place[m];
    as->r[m].kind = ROLE_R;
    if (pl->kind == TS_PLACE_SHARD) {
      char l = p->labels[i][pl->dim];
      if (label_shardable(p, l) && label_dim(p, i, l) == pl->dim &&
          (!free_only || in_output(p, l))) {
        as->r[m].kind = ROLE_LABEL;
        as->r[m].label = l;
        as->splits[(int)l] = a->splits[pl->dim];
        as->nsplits[(int)l] = a->nsplits[pl->dim];
      }
    } else if (pl->kind == TS_PLACE_PARTIAL && pl->op == TS_REDUCE_SUM && !free_only) {
      as->r[m].kind = ROLE_PARTIAL;
      as->r[m].operand = i;
    }
  }
}

/* From the requested output attribute: its shards (Partial becomes Replicate). */
static void assign_from_output(const ts_dein_plan *p, const ts_attr *a, assignment *as) {
  memset(as, 0, sizeof *as);
  as->mesh = a;
  for (int m = 0; m < a->mesh_ndim; m++) {
    const ts_placement *pl = &a->place[m];
    as->r[m].kind = ROLE_R;
    if (pl->kind == TS_PLACE_SHARD) {
      char l = p->out_labels[pl->dim];
      if (label_shardable(p, l)) {
        as->r[m].kind = ROLE_LABEL;
        as->r[m].label = l;
        as->splits[(int)l] = a->splits[pl->dim];
        as->nsplits[(int)l] = a->nsplits[pl->dim];
      }
    }
  }
}

/* Drops the roles that touch operand j (its labels, its partial): j becomes replicated. */
static void assign_drop_operand(const ts_dein_plan *p, int j, assignment *as) {
  for (int m = 0; m < as->mesh->mesh_ndim; m++) {
    role *r = &as->r[m];
    if ((r->kind == ROLE_LABEL && strchr(p->labels[j], r->label)) ||
        (r->kind == ROLE_PARTIAL && r->operand == j))
      r->kind = ROLE_R;
  }
}

/* The attribute of a tensor with labels `labels` (the output when operand < 0) under an
 * assignment; the output's contracted labels and partial operands give Partial(sum). */
static int assignment_attr(const ts_dein_plan *p, const assignment *as, int operand, ts_attr **out,
                           ts_error *err) {
  const ts_attr *mesh = as->mesh;
  ts_placement place[TS_MAX_MESH_DIMS];
  const char *labels = operand < 0 ? p->out_labels : p->labels[operand];
  int dim_of[128];
  for (int c = 0; c < 128; c++)
    dim_of[c] = -1;
  for (int m = 0; m < mesh->mesh_ndim; m++) {
    const role *r = &as->r[m];
    place[m] = ts_replicate();
    if (r->kind == ROLE_LABEL) {
      int d = operand < 0 ? (int)(strchr(labels, r->label) ? strchr(labels, r->label) - labels : -1)
                          : label_dim(p, operand, r->label);
      if (d >= 0) {
        place[m] = ts_shard_on(d);
        dim_of[(int)r->label] = d;
      } else if (operand < 0) {
        place[m] = ts_partial(TS_REDUCE_SUM);
      }
    } else if (r->kind == ROLE_PARTIAL && (operand < 0 || operand == r->operand)) {
      place[m] = ts_partial(TS_REDUCE_SUM);
    }
  }
  int rc = ts_attr_create(out, mesh->mesh_ndim, mesh->mesh_shape, mesh->ranks, place, err);
  for (int c = 0; rc == TS_OK && c < 128; c++)
    if (dim_of[c] >= 0 && as->splits[c])
      rc = ts_attr_set_splits(*out, dim_of[c], as->nsplits[c], as->splits[c], err);
  if (rc)
    ts_attr_destroy(out);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Costs */

static int64_t box_bytes(const ts_geom *g, int rank, size_t esize) {
  ts_box b;
  return ts_geom_rank_box(g, rank, &b) ? ts_box_numel(&b) * (int64_t)esize : 0;
}

/* Peak memory and work over the ranks of the compute mesh and the output's mesh. */
static int measure(const ts_dein_plan *p, ts_dein_cand *c, ts_error *err) {
  size_t es = ts_dtype_size(p->dtype);
  ts_geom *gt[TS_DEIN_MAX_OPERANDS] = {NULL}, *gn = NULL, *gf = NULL;
  int rc = TS_OK;
  for (int i = 0; rc == TS_OK && i < p->n; i++)
    rc = ts_geom_create(c->target[i], p->ndim[i], p->shape[i], &gt[i], err);
  if (rc == TS_OK)
    rc = ts_geom_create(c->natural, p->out_ndim, p->out_shape, &gn, err);
  if (rc == TS_OK && c->out_move)
    rc = ts_geom_create(c->final, p->out_ndim, p->out_shape, &gf, err);
  int64_t staging = 0;
  for (int i = 0; i < p->n; i++)
    if (c->move[i] && ts_plan_get_costs(c->move[i])->peak_extra_bytes > staging)
      staging = ts_plan_get_costs(c->move[i])->peak_extra_bytes;
  if (c->out_move && ts_plan_get_costs(c->out_move)->peak_extra_bytes > staging)
    staging = ts_plan_get_costs(c->out_move)->peak_extra_bytes;
  c->peak_bytes = 0;
  c->max_work = c->total_work = 0;
  const ts_attr *cm = c->natural;
  for (int pass = 0; rc == TS_OK && pass < 2; pass++) {
    const ts_attr *a = pass == 0 ? cm : c->final;
    if (pass == 1 && !c->out_move)
      break;
    for (int k = 0; k < a->nranks; k++) {
      int rank = a->ranks[k];
      if (pass == 1) { /* a rank of the output only: its final slice */
        bool seen = false;
        for (int q = 0; q < cm->nranks && !seen; q++)
          seen = cm->ranks[q] == rank;
        if (seen)
          continue;
        int64_t b = box_bytes(gf, rank, es) + staging;
        if (b > c->peak_bytes)
          c->peak_bytes = b;
        continue;
      }
      int64_t bytes = box_bytes(gn, rank, es) + staging;
      if (gf)
        bytes += box_bytes(gf, rank, es);
      double work = 1;
      char seen[128] = {0};
      for (int i = 0; i < p->n; i++) {
        ts_box b;
        bool has = ts_geom_rank_box(gt[i], rank, &b);
        if (c->moves[i])
          bytes += has ? ts_box_numel(&b) * (int64_t)es : 0;
        for (int d = 0; d < p->ndim[i]; d++) {
          char l = p->labels[i][d];
          if (seen[(int)l] || p->shape[i][d] != label_size(p, l))
            continue;
          seen[(int)l] = 1;
          work *= has ? (double)(b.hi[d] - b.lo[d]) : 0.0;
        }
      }
      if (bytes > c->peak_bytes)
        c->peak_bytes = bytes;
      if (work > c->max_work)
        c->max_work = work;
      c->total_work += work;
    }
  }
  for (int i = 0; i < p->n; i++)
    ts_geom_destroy(&gt[i]);
  ts_geom_destroy(&gn);
  ts_geom_destroy(&gf);
  return rc;
}

static void cand_clear(ts_dein_cand *c) {
  for (int i = 0; i < TS_DEIN_MAX_OPERANDS; i++) {
    ts_attr_destroy(&c->target[i]);
    ts_plan_destroy(&c->move[i]);
  }
  ts_attr_destroy(&c->natural);
  ts_attr_destroy(&c->final);
  ts_plan_destroy(&c->out_move);
}

/* Builds and costs a candidate from an assignment. A reshard the planner refuses makes the
 * candidate not apply (why_not says which). */
static int cand_build(const ts_dein_plan *p, const ts_attr *const *attrs, const assignment *as,
                      const ts_dein_opts *o, ts_dein_cand *c, ts_error *err) {
  ts_plan_opts po = {TS_STRATEGY_AUTO, o->staging_bytes, o->world_size};
  ts_error lerr;
  int rc = TS_OK;
  c->applies = true;
  for (int i = 0; rc == TS_OK && i < p->n; i++)
    rc = assignment_attr(p, as, i, &c->target[i], err);
  if (rc == TS_OK)
    rc = assignment_attr(p, as, -1, &c->natural, err);
  if (rc == TS_OK)
    rc = ts_attr_clone(o->out_attr ? o->out_attr : c->natural, &c->final, err);
  if (rc)
    return rc;
  for (int i = 0; i < p->n && c->applies; i++) {
    c->moves[i] = !ts_attr_equal(attrs[i], c->target[i]);
    if (!c->moves[i])
      continue;
    if (ts_plan_create(p->ndim[i], p->shape[i], p->dtype, attrs[i], c->target[i], &po, &c->move[i],
                       &lerr)) {
      c->applies = false;
      snprintf(c->why_not, sizeof c->why_not, "operand %d: %s", i, lerr.msg);
      break;
    }
    const ts_plan_costs *pc = ts_plan_get_costs(c->move[i]);
    c->wire_bytes += pc->wire_bytes;
    c->messages += pc->messages;
  }
  if (c->applies && !ts_attr_equal(c->natural, c->final)) {
    if (ts_plan_create(p->out_ndim, p->out_shape, p->dtype, c->natural, c->final, &po, &c->out_move,
                       &lerr)) {
      c->applies = false;
      snprintf(c->why_not, sizeof c->why_not, "the result: %s", lerr.msg);
    } else {
      const ts_plan_costs *pc = ts_plan_get_costs(c->out_move);
      c->wire_bytes += pc->wire_bytes;
      c->messages += pc->messages;
    }
  }
  if (c->applies && (rc = measure(p, c, &lerr))) {
    c->applies = false;
    snprintf(c->why_not, sizeof c->why_not, "%s", lerr.msg);
  }
  return TS_OK;
}

static bool cand_same(const ts_dein_plan *p, const ts_dein_cand *a, const ts_dein_cand *b) {
  for (int i = 0; i < p->n; i++)
    if (!ts_attr_equal(a->target[i], b->target[i]))
      return false;
  return true;
}

/* a better than b: fewer wire bytes, then less work on the busiest rank, then less memory. */
static bool cand_better(const ts_dein_cand *a, const ts_dein_cand *b) {
  if (a->wire_bytes != b->wire_bytes)
    return a->wire_bytes < b->wire_bytes;
  if (a->max_work != b->max_work)
    return a->max_work < b->max_work;
  return a->peak_bytes < b->peak_bytes;
}

static bool moves_nothing(const ts_dein_plan *p, const ts_dein_cand *c) {
  for (int i = 0; i < p->n; i++)
    if (c->moves[i])
      return false;
  return true;
}

/* ---------------------------------------------------------------------------------------------
 * The plan */

void ts_dein_plan_destroy(ts_dein_plan **pp) {
  if (!pp || !*pp)
    return;
  for (int k = 0; k < (*pp)->ncand; k++)
    cand_clear(&(*pp)->cand[k]);
  for (int i = 0; i < TS_DEIN_MAX_OPERANDS; i++)
    ts_attr_destroy(&(*pp)->source[i]);
  free(*pp);
  *pp = NULL;
}

const ts_dein_cand *ts_dein_plan_chosen(const ts_dein_plan *p) { return &p->cand[p->chosen]; }

static int add_cand(ts_dein_plan *p, const ts_attr *const *attrs, const assignment *as,
                    const ts_dein_opts *o, const char *name, const char *what, ts_error *err) {
  ts_dein_cand *c = &p->cand[p->ncand];
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->what, sizeof c->what, "%s", what);
  int rc = cand_build(p, attrs, as, o, c, err);
  if (rc) {
    cand_clear(c);
    return rc;
  }
  for (int k = 0; k < p->ncand; k++)
    if (cand_same(p, &p->cand[k], c)) { /* the same plan under another name: not listed */
      cand_clear(c);
      return TS_OK;
    }
  p->ncand++;
  return TS_OK;
}

static int64_t operand_bytes(const ts_dein_plan *p, int i) {
  int64_t b = (int64_t)ts_dtype_size(p->dtype);
  for (int d = 0; d < p->ndim[i]; d++)
    b *= p->shape[i][d];
  return b;
}

/* The candidate plans: each operand kept as it is (match), kept with the shards of output
 * labels only (free), each operand replicated with the largest other one leading (gather), the
 * requested output's shards (output), and all replicated (replicate). Plans equal to one listed
 * already are not listed again. */
static int add_candidates(ts_dein_plan *p, const ts_attr *const *attrs, const ts_dein_opts *o,
                          ts_error *err) {
  int n = p->n;
  char name[32], what[160];
  assignment as;
  int rc = TS_OK;
  for (int i = 0; rc == TS_OK && i < n; i++) {
    assign_from_operand(p, attrs[i], i, false, &as);
    snprintf(name, sizeof name, "match:%d", i);
    snprintf(what, sizeof what, "operand %d keeps its shards and partials; the others follow it",
             i);
    rc = add_cand(p, attrs, &as, o, name, what, err);
  }
  for (int i = 0; rc == TS_OK && i < n; i++) {
    assign_from_operand(p, attrs[i], i, true, &as);
    snprintf(name, sizeof name, "free:%d", i);
    snprintf(what, sizeof what,
             "operand %d keeps the shards of output labels only; no partial result", i);
    rc = add_cand(p, attrs, &as, o, name, what, err);
  }
  for (int j = 0; rc == TS_OK && n > 1 && j < n; j++) {
    int lead = -1; /* the largest other operand keeps the shards of labels j lacks */
    for (int i = 0; i < n; i++)
      if (i != j && (lead < 0 || operand_bytes(p, i) > operand_bytes(p, lead)))
        lead = i;
    assign_from_operand(p, attrs[lead], lead, false, &as);
    assign_drop_operand(p, j, &as);
    snprintf(name, sizeof name, "gather:%d", j);
    snprintf(what, sizeof what,
             "operand %d replicated; operand %d keeps the shards of labels %d lacks", j, lead, j);
    rc = add_cand(p, attrs, &as, o, name, what, err);
  }
  if (rc == TS_OK && o->out_attr) {
    assign_from_output(p, o->out_attr, &as);
    rc = add_cand(p, attrs, &as, o, "output", "every operand follows the requested output's shards",
                  err);
  }
  if (rc == TS_OK) {
    int big = 0;
    for (int i = 1; i < n; i++)
      if (operand_bytes(p, i) > operand_bytes(p, big))
        big = i;
    memset(&as, 0, sizeof as);
    as.mesh = attrs[big];
    rc = add_cand(p, attrs, &as, o, "replicate",
                  "every operand replicated on the largest operand's mesh", err);
  }
  return rc;
}

/* The candidate a request names (or "as_is": one that moves nothing); it must apply. */
static int choose_forced(ts_dein_plan *p, const char *forced, ts_error *err) {
  int rc = TS_OK;
  p->forced = true;
  for (int k = 0; k < p->ncand && p->chosen < 0; k++)
    if (strcmp(p->cand[k].name, forced) == 0 ||
        (strcmp(forced, "as_is") == 0 && moves_nothing(p, &p->cand[k])))
      p->chosen = k;
  if (p->chosen < 0) {
    char names[400] = "";
    size_t len = 0;
    for (int k = 0; k < p->ncand && len < sizeof names; k++)
      len +=
          (size_t)snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "", p->cand[k].name);
    rc = ts_error_set(err, TS_EINSUM_PLAN,
                      "plan '%s' is not a candidate of this einsum%s; candidates: %s%s", forced,
                      strcmp(forced, "as_is") == 0 ? " (the operands are not consistent as "
                                                     "they are)"
                                                   : "",
                      names, ", auto");
  } else if (!p->cand[p->chosen].applies) {
    rc = ts_error_set(err, TS_EINSUM_PLAN, "plan '%s' does not apply: %s", forced,
                      p->cand[p->chosen].why_not);
  } else {
    snprintf(p->why, sizeof p->why, "forced by the request");
  }
  return rc;
}

/* The cheapest candidate that applies, and why it beats the next best. */
static int choose_cheapest(ts_dein_plan *p, ts_error *err) {
  int rc = TS_OK;
  for (int k = 0; k < p->ncand; k++)
    if (p->cand[k].applies && (p->chosen < 0 || cand_better(&p->cand[k], &p->cand[p->chosen])))
      p->chosen = k;
  if (p->chosen < 0) {
    rc = ts_error_set(err, TS_EINSUM_PLAN, "no candidate plan applies: %s", p->cand[0].why_not);
  } else {
    const ts_dein_cand *c = &p->cand[p->chosen], *next = NULL;
    for (int k = 0; k < p->ncand; k++)
      if (k != p->chosen && p->cand[k].applies && (!next || cand_better(&p->cand[k], next)))
        next = &p->cand[k];
    if (!next)
      snprintf(p->why, sizeof p->why, "the only candidate that applies");
    else if (c->wire_bytes != next->wire_bytes)
      snprintf(p->why, sizeof p->why, "fewest bytes on the wire: %lld against %lld for %s",
               (long long)c->wire_bytes, (long long)next->wire_bytes, next->name);
    else if (c->max_work != next->max_work)
      snprintf(p->why, sizeof p->why,
               "as few bytes on the wire as %s (%lld), less work on the busiest rank: %.4g "
               "against %.4g",
               next->name, (long long)c->wire_bytes, c->max_work, next->max_work);
    else
      snprintf(p->why, sizeof p->why,
               "as few bytes and as much work as %s; peak memory %lld against %lld (or listed "
               "first)",
               next->name, (long long)c->peak_bytes, (long long)next->peak_bytes);
  }
  return rc;
}

/* The einsum's planner splits labels by the balanced rule or explicit sizes only. */
static int check_balanced(const ts_attr *a, const char *what, ts_error *err) {
  for (int m = 0; a && m < a->mesh_ndim; m++)
    if (a->place[m].kind == TS_PLACE_SHARD && a->place[m].split != TS_SPLIT_BALANCED)
      return ts_error_set(err, TS_UNSUPPORTED,
                          "%s splits dim %d by the %s rule; the distributed einsum takes "
                          "balanced or explicit splits: reshard it to S(%d) first",
                          what, a->place[m].dim, ts_split_rule_name(a->place[m].split),
                          a->place[m].dim);
  return TS_OK;
}

static int plan_create(const char *equation, int n, const int *ndims, const int64_t *const *shapes,
                       const ts_attr *const *attrs, ts_dtype dt, ts_dein_opts o, ts_dein_plan **out,
                       ts_error *err);

int ts_dein_plan_create(const char *equation, int n, const int *ndims, const int64_t *const *shapes,
                        const ts_attr *const *attrs, ts_dtype dt, const ts_dein_opts *opts,
                        ts_dein_plan **out, ts_error *err) {
  *out = NULL;
  ts_dein_opts o = opts ? *opts : (ts_dein_opts){0};
  char what[64];
  int rc = TS_OK;
  for (int i = 0; rc == TS_OK && attrs && i < n && i < TS_DEIN_MAX_OPERANDS; i++) {
    snprintf(what, sizeof what, "operand %d", i);
    rc = check_balanced(attrs[i], what, err);
  }
  if (rc == TS_OK)
    rc = check_balanced(o.out_attr, "the output attribute", err);
  if (rc)
    return rc;
  /* The output attribute may name dims from the end: resolved once the output's ndim is known
   * (plan_create validates it first and reports a dim out of range). */
  return plan_create(equation, n, ndims, shapes, attrs, dt, o, out, err);
}

static int plan_create(const char *equation, int n, const int *ndims, const int64_t *const *shapes,
                       const ts_attr *const *attrs, ts_dtype dt, ts_dein_opts o, ts_dein_plan **out,
                       ts_error *err) {
  if (!equation || n < 1 || n > TS_DEIN_MAX_OPERANDS)
    return ts_error_set(err, TS_EINSUM, "distributed einsum takes 1 to %d operands, not %d",
                        TS_DEIN_MAX_OPERANDS, n);
  ts_dein_plan *p = calloc(1, sizeof *p);
  if (!p)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for an einsum plan");
  p->n = n;
  p->dtype = dt;
  int rc = parse_equation(p, equation, n, err);
  for (int i = 0; rc == TS_OK && i < n; i++) {
    p->ndim[i] = ndims[i];
    if ((int)strlen(p->labels[i]) != ndims[i])
      rc = ts_error_set(err, TS_EINSUM,
                        "operand %d has %d dims but the equation gives it %zu "
                        "labels ('%s')",
                        i, ndims[i], strlen(p->labels[i]), p->labels[i]);
    for (int d = 0; rc == TS_OK && d < ndims[i]; d++)
      p->shape[i][d] = shapes[i][d];
  }
  /* The kernels' planner checks the equation against the shapes (sizes of labels, dtype). */
  ts_einsum_plan *kp = NULL;
  if (rc == TS_OK)
    rc = ts_einsum_plan_create(&kp, p->equation, n, ndims, shapes, dt, NULL, err);
  if (rc == TS_OK) {
    ts_einsum_plan_output(kp, &p->out_ndim, p->out_shape);
    ts_einsum_plan_destroy(&kp);
  }
  ts_error verr;
  for (int i = 0; rc == TS_OK && i < n; i++) {
    rc = ts_attr_validate(attrs[i], ndims[i], shapes[i], o.world_size, &verr);
    if (rc == TS_OK)
      rc = ts_attr_clone(attrs[i], &p->source[i], err);
    else
      rc = ts_error_set(err, rc, "operand %d ('%s'): %s", i, p->labels[i], verr.msg);
  }
  if (rc == TS_OK && o.out_attr &&
      (rc = ts_attr_validate(o.out_attr, p->out_ndim, p->out_shape, o.world_size, &verr)))
    rc = ts_error_set(err, rc, "output attribute: %s", verr.msg);
  ts_attr *out_norm = NULL;
  if (rc == TS_OK && o.out_attr && (rc = ts_attr_clone(o.out_attr, &out_norm, err)) == TS_OK &&
      (rc = ts_attr_normalize(out_norm, p->out_ndim, err)) == TS_OK)
    o.out_attr = out_norm;
  if (rc == TS_OK)
    for (int i = 0; rc == TS_OK && i < n; i++)
      rc = ts_attr_normalize(p->source[i], ndims[i], err);
  if (rc) {
    ts_attr_destroy(&out_norm);
    ts_dein_plan_destroy(&p);
    return rc;
  }
  rc = add_candidates(p, (const ts_attr *const *)p->source, &o, err);
  ts_attr_destroy(&out_norm);
  if (rc) {
    ts_dein_plan_destroy(&p);
    return rc;
  }
  /* The choice */
  p->chosen = -1;
  const char *forced = o.plan && o.plan[0] && strcmp(o.plan, "auto") != 0 ? o.plan : NULL;
  rc = forced ? choose_forced(p, forced, err) : choose_cheapest(p, err);
  if (rc) {
    ts_dein_plan_destroy(&p);
    return rc;
  }
  *out = p;
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Gradient attributes */

int ts_dein_grad_out_attr(const ts_dein_plan *p, ts_attr **out, ts_error *err) {
  const ts_attr *a = ts_dein_plan_chosen(p)->natural;
  ts_placement place[TS_MAX_MESH_DIMS];
  for (int m = 0; m < a->mesh_ndim; m++)
    place[m] = a->place[m].kind == TS_PLACE_PARTIAL ? ts_replicate() : a->place[m];
  int rc = ts_attr_create(out, a->mesh_ndim, a->mesh_shape, a->ranks, place, err);
  for (int d = 0; rc == TS_OK && d < p->out_ndim; d++)
    if (a->splits[d])
      rc = ts_attr_set_splits(*out, d, a->nsplits[d], a->splits[d], err);
  if (rc)
    ts_attr_destroy(out);
  return rc;
}

/* Mesh dim m of operand i's target is Replicate while the local results differ along it (a label
 * i lacks is sharded there, or another operand is partial there): the gradient is Partial(sum). */
int ts_dein_grad_attr(const ts_dein_plan *p, int i, ts_attr **out, ts_error *err) {
  const ts_dein_cand *c = ts_dein_plan_chosen(p);
  const ts_attr *t = c->target[i];
  ts_placement place[TS_MAX_MESH_DIMS];
  for (int m = 0; m < t->mesh_ndim; m++) {
    place[m] = t->place[m];
    if (t->place[m].kind == TS_PLACE_PARTIAL) { /* the gradient of a partial operand is the
                                                   gradient of the whole: replicated */
      place[m] = ts_replicate();
      continue;
    }
    if (t->place[m].kind != TS_PLACE_REPLICATE)
      continue;
    for (int j = 0; j < p->n; j++) {
      const ts_placement *q = &c->target[j]->place[m];
      if (j != i && q->kind != TS_PLACE_REPLICATE)
        place[m] = ts_partial(TS_REDUCE_SUM);
    }
  }
  int rc = ts_attr_create(out, t->mesh_ndim, t->mesh_shape, t->ranks, place, err);
  for (int d = 0; rc == TS_OK && d < p->ndim[i]; d++)
    if (t->splits[d])
      rc = ts_attr_set_splits(*out, d, t->nsplits[d], t->splits[d], err);
  if (rc)
    ts_attr_destroy(out);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * EXPLAIN */

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap + (size_t)n + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

static void put_attr(sbuf *b, const ts_attr *a) {
  char text[1024];
  ts_attr_format(a, text, sizeof text);
  put(b, "%s", text);
}

char *ts_dein_plan_explain(const ts_dein_plan *p) {
  sbuf b = {malloc(4096), 0, 4096, false};
  if (!b.s)
    return NULL;
  b.s[0] = '\0';
  put(&b, "einsum %s (%s)\n", p->equation, ts_dtype_name(p->dtype));
  for (int i = 0; i < p->n; i++) {
    put(&b, "  operand %d [%s] shape [", i, p->labels[i]);
    for (int d = 0; d < p->ndim[i]; d++)
      put(&b, "%s%lld", d ? "," : "", (long long)p->shape[i][d]);
    put(&b, "] ");
    put_attr(&b, p->source[i]);
    put(&b, "\n");
  }
  put(&b, "  output [%s] shape [", p->out_labels);
  for (int d = 0; d < p->out_ndim; d++)
    put(&b, "%s%lld", d ? "," : "", (long long)p->out_shape[d]);
  put(&b, "]\n");
  put(&b, "labels (where each operand shards them: mesh dims, '-' none, '.' absent):\n");
  char done[128] = {0};
  for (int i = 0; i < p->n; i++)
    for (const char *l = p->labels[i]; *l; l++) {
      if (done[(int)*l])
        continue;
      done[(int)*l] = 1;
      put(&b, "  %c size %lld %s:", *l, (long long)label_size(p, *l),
          in_output(p, *l) ? "kept" : "contracted");
      for (int j = 0; j < p->n; j++) {
        const char *at = strchr(p->labels[j], *l);
        put(&b, " op%d=", j);
        if (!at) {
          put(&b, ".");
          continue;
        }
        int d = (int)(at - p->labels[j]), k = 0;
        for (int m = 0; m < p->source[j]->mesh_ndim; m++)
          if (p->source[j]->place[m].kind == TS_PLACE_SHARD && p->source[j]->place[m].dim == d)
            put(&b, "%s%d", k++ ? "," : "", m);
        if (!k)
          put(&b, "-");
      }
      put(&b, "\n");
    }
  put(&b, "candidates (wire bytes, busiest rank's work, peak bytes of a rank):\n");
  for (int k = 0; k < p->ncand; k++) {
    const ts_dein_cand *c = &p->cand[k];
    put(&b, "  %s %-10s %s\n", k == p->chosen ? "*" : " ", c->name, c->what);
    if (!c->applies) {
      put(&b, "      does not apply: %s\n", c->why_not);
      continue;
    }
    put(&b, "      wire=%lld work=%.6g peak=%lld messages=%lld%s\n", (long long)c->wire_bytes,
        c->max_work, (long long)c->peak_bytes, (long long)c->messages,
        moves_nothing(p, c) ? " (as_is: no operand moves)" : "");
    for (int i = 0; i < p->n; i++) {
      put(&b, "      operand %d -> ", i);
      put_attr(&b, c->target[i]);
      if (c->moves[i])
        put(&b, "  [%s, %lld bytes]\n", ts_strategy_name(ts_plan_strategy(c->move[i])),
            (long long)ts_plan_get_costs(c->move[i])->wire_bytes);
      else
        put(&b, "  [stays]\n");
    }
    put(&b, "      result    ");
    put_attr(&b, c->natural);
    if (c->out_move) {
      put(&b, " -> ");
      put_attr(&b, c->final);
      put(&b, "  [%s, %lld bytes]", ts_strategy_name(ts_plan_strategy(c->out_move)),
          (long long)ts_plan_get_costs(c->out_move)->wire_bytes);
    }
    put(&b, "\n");
  }
  put(&b, "chosen: %s (%s)\n", p->cand[p->chosen].name, p->why);
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}
