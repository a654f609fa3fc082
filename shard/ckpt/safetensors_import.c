/* safetensors_import.c - importing a Hugging Face safetensors model (one file, or the files of an
 * HF index) into new tensors of the store, collective over the world.
 *
 * Every rank opens the model and checks every header (safetensors_format.c), maps the file's
 * names to tshard names (a rename table, else a prefix stripped), chooses the tensors (the names
 * asked, else all with a default attribute, else those given an attribute) and checks each
 * against the rule every tensor passes (ts_tensor_check, by its tshard name), its attribute, the
 * world and the store; one agreement. Every lookup of these checks is a binary search in arrays
 * sorted once (renames, the file's tensors by tshard name, attributes) and names given twice are
 * found by a sort, so the checks take O(n log n) in the entries, their memory charged to the
 * limit. Then every tensor is created with a row-major slice (not zeroed: every byte is read into
 * it), keeping its file's __metadata__ by reference (st_meta, freed with its last tensor), and
 * each rank reads only the
 * byte runs of its own box straight into its slice: a row split reads one contiguous stretch, a
 * column split one run per row (many short reads, batched through io_uring, 64 in flight; pread
 * where io_uring is unavailable or TSHARD_IO_URING=0), a replica the whole tensor. A second
 * agreement; on any failure on any rank every tensor of the import is dropped, so nothing is
 * created anywhere. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <liburing.h>

#include "ckpt_internal.h"
#include "safetensors_internal.h"
#include "ts_comm.h"
#include "ts_rules.h"

void ts_st_result_clear(ts_st_result *r) {
  if (!r)
    return;
  for (int i = 0; i < r->n; i++)
    free(r->items[i]);
  free(r->items);
  memset(r, 0, sizeof *r);
}

/* A tensor of the import: its entry in the model, its tshard name and attribute. */
typedef struct imp {
  const st_tensor *src;
  const char *name;
  const ts_attr *attr;
} imp;

/* A name and a position, sorted by name then position: the first of equal names wins. */
typedef struct named {
  const char *name;
  int k;
} named;

static int cmp_named(const void *a, const void *b) {
  const named *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->k > y->k) - (x->k < y->k);
}

/* The first entry of the sorted a[0..n) named `name`, or NULL: O(log n). */
static const named *find_named(const named *a, int n, const char *name) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (strcmp(a[mid].name, name) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && strcmp(a[lo].name, name) == 0 ? &a[lo] : NULL;
}

/* The import's lookups, each sorted once: the renames by file name, the model's tensors by their
 * tshard names, the attributes by tshard name. Every check of the import is then O(log n). */
typedef struct lookups {
  named *renames, *mapped, *attrs;
  int nrenames, nmapped, nattrs;
  bool globs; /* a rule is a glob */
} lookups;

static void lookups_free(lookups *L) {
  free(L->renames), free(L->mapped), free(L->attrs);
  memset(L, 0, sizeof *L);
}

/* The tshard name of a file's tensor: its rename, else without the prefix when it has it. */
static const char *map_name(const ts_st_import_spec *sp, const lookups *L, const char *src) {
  const named *r = find_named(L->renames, L->nrenames, src);
  if (r)
    return sp->rename_to[r->k];
  size_t k = sp->strip_prefix ? strlen(sp->strip_prefix) : 0;
  if (k > 0 && strncmp(src, sp->strip_prefix, k) == 0 && src[k])
    return src + k;
  return src;
}

/* An array of n names (charged to the import's account). */
static int names_alloc(int n, st_charge *charge, const char *path, named **out, ts_error *err) {
  int rc = ts__st_charge(charge, path, "the import's lookups", sizeof **out * (size_t)n, err);
  *out = rc ? NULL : malloc(sizeof **out * (size_t)(n ? n : 1));
  return rc ? rc : *out ? TS_OK : ts_error_set(err, TS_NO_MEMORY, "safetensors import: no memory");
}

static int lookups_make(const ts_st_import_spec *sp, const st_model *m, st_charge *charge,
                        lookups *L, ts_error *err) {
  memset(L, 0, sizeof *L);
  int rc = names_alloc(sp->nrename, charge, sp->path, &L->renames, err);
  for (int i = 0; !rc && i < sp->nrename; i++)
    L->renames[i] = (named){sp->rename_from[i], i};
  if (!rc)
    qsort(L->renames, (size_t)(L->nrenames = sp->nrename), sizeof *L->renames, cmp_named);
  if (!rc && !(rc = names_alloc(m->ntensors, charge, sp->path, &L->mapped, err))) {
    for (int k = 0; k < m->ntensors; k++)
      L->mapped[k] = (named){map_name(sp, L, m->tensors[k].name), k};
    qsort(L->mapped, (size_t)(L->nmapped = m->ntensors), sizeof *L->mapped, cmp_named);
  }
  if (!rc && !(rc = names_alloc(sp->nattrs, charge, sp->path, &L->attrs, err))) {
    for (int i = 0; i < sp->nattrs; i++)
      L->attrs[i] = (named){sp->attr_names[i], i};
    qsort(L->attrs, (size_t)(L->nattrs = sp->nattrs), sizeof *L->attrs, cmp_named);
    for (int i = 0; i < sp->nattrs; i++)
      L->globs |= ts_attr_rule_is_glob(sp->attr_names[i]);
  }
  return rc;
}

/* The model's tensor that maps to `name` (-1: none; -2 - k: two do, k and *second). */
static int find_mapped(const lookups *L, const char *name, int *second) {
  const named *f = find_named(L->mapped, L->nmapped, name);
  if (!f)
    return -1;
  if (f + 1 < L->mapped + L->nmapped && strcmp(f[1].name, name) == 0) {
    *second = f[1].k;
    return -2 - f->k;
  }
  return f->k;
}

/* The attribute of a tensor: its rule's (proto/ts_rules.h: ts_attr_rule_pick, exact names
 * looked up in O(log n)), else the default. */
static const ts_attr *attr_of(const ts_st_import_spec *sp, const lookups *L, const char *name) {
  const named *a = find_named(L->attrs, L->nattrs, name);
  int k = a ? a->k : L->globs ? ts_attr_rule_pick(sp->attr_names, sp->nattrs, name) : -1;
  return k >= 0 && sp->attrs[k] ? sp->attrs[k] : sp->default_attr;
}

/* Whether the tensors chosen are the file's that the rules match (no names, no default, a glob
 * among the rules); else the rules' names. */
static bool chosen_by_globs(const ts_st_import_spec *sp) {
  for (int i = 0; sp->nnames == 0 && !sp->default_attr && i < sp->nattrs; i++)
    if (ts_attr_rule_is_glob(sp->attr_names[i]))
      return true;
  return false;
}

/* One chosen tensor: found, named validly, a shape a tensor may have, an attribute that fits it,
 * free in the store. */
static int check_one(const ts_st_import_spec *sp, const st_model *m, const lookups *L, ts_store *s,
                     int size, const char *name, imp *it, ts_error *err) {
  char nm[200];
  ts__ckpt_text_escape(name, nm, sizeof nm);
  int second = -1, k = find_mapped(L, name, &second);
  if (k == -1)
    return ts_error_set(err, TS_NOT_FOUND,
                        "safetensors '%s' holds no tensor named '%s' (after "
                        "the renames and the prefix)",
                        sp->path, nm);
  if (k <= -2) {
    char a[200], b[200];
    ts__ckpt_text_escape(m->tensors[-2 - k].name, a, sizeof a);
    ts__ckpt_text_escape(m->tensors[second].name, b, sizeof b);
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "safetensors '%s': tensors '%s' and '%s' both "
                        "map to '%s'; rename one of them",
                        sp->path, a, b, nm);
  }
  int rc = ts_name_check("tensor name", name, strlen(name), err);
  if (rc) {
    char why[300];
    snprintf(why, sizeof why, "%s", err->msg);
    return ts_error_set(err, rc, "safetensors '%s': tensor '%s': %s; rename it", sp->path, nm, why);
  }
  const st_tensor *t = &m->tensors[k];
  if (t->unsupported)
    return ts__st_refuse_dtype(m, t, err);
  if ((rc = ts_tensor_check(name, t->ndim, t->shape, ts_dtype_size(t->dtype), err))) {
    char why[300];
    snprintf(why, sizeof why, "%s", err->msg);
    return ts_error_set(err, rc, "safetensors import of '%s': %s", sp->path, why);
  }
  const ts_attr *a = attr_of(sp, L, name);
  if (!a)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "safetensors import of '%s': no attribute for "
                        "tensor '%s'; give it one, or a default attribute",
                        sp->path, nm);
  for (int d = 0; d < a->mesh_ndim; d++)
    if (a->place[d].kind == TS_PLACE_PARTIAL)
      return ts_error_set(err, TS_BAD_ATTRIBUTE,
                          "safetensors import of '%s': tensor '%s': a "
                          "file holds whole values, not partial ones; import it with S or R "
                          "placements and reshard it",
                          sp->path, nm);
  if ((rc = ts_attr_validate(a, t->ndim, t->shape, size, err))) {
    char why[300];
    snprintf(why, sizeof why, "%s", err->msg);
    return ts_error_set(err, rc, "safetensors import of '%s': tensor '%s' (%s, %d dims): %s",
                        sp->path, nm, ts_ckpt_dtype_name(t->dtype), t->ndim, why);
  }
  if (ts_store_find(s, name))
    return ts_error_set(err, TS_EXISTS,
                        "safetensors import: a tensor named '%s' already "
                        "exists; drop it first",
                        nm);
  *it = (imp){t, name, a};
  return TS_OK;
}

/* The names a request gives (names, or those given attributes) once each: sorted and compared
 * side by side. */
static int named_once(const char *const *names, int n, st_charge *charge, const char *path,
                      ts_error *err) {
  named *a;
  int rc = names_alloc(n, charge, path, &a, err);
  if (rc)
    return rc;
  for (int i = 0; i < n; i++)
    a[i] = (named){names[i], i};
  qsort(a, (size_t)n, sizeof *a, cmp_named);
  for (int i = 1; i < n && !rc; i++)
    if (strcmp(a[i - 1].name, a[i].name) == 0) {
      char nm[200];
      ts__ckpt_text_escape(a[i].name, nm, sizeof nm);
      rc = ts_error_set(err, TS_INVALID_ARGUMENT, "safetensors import: '%s' named twice", nm);
    }
  free(a);
  return rc;
}

/* The tensors of the import, in order, checked (rank-local; the caller agrees). */
static int choose(const ts_st_import_spec *sp, const st_model *m, ts_store *s, int size,
                  st_charge *charge, imp **out, int *nout, ts_error *err) {
  bool globs = chosen_by_globs(sp), every = sp->default_attr || globs;
  int n = sp->nnames > 0 ? sp->nnames : every ? m->ntensors : sp->nattrs;
  *out = NULL;
  *nout = 0;
  int rc = ts__st_charge(charge, sp->path, "the import's tensors", sizeof **out * (size_t)n, err);
  imp *it = rc ? NULL : calloc((size_t)(n ? n : 1), sizeof *it);
  if (!it)
    return rc ? rc : ts_error_set(err, TS_NO_MEMORY, "safetensors import: no memory");
  *out = it;
  if (n == 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "safetensors import of '%s': no tensor chosen; "
                        "name tensors with attributes, or give a default attribute",
                        sp->path);
  lookups L;
  rc = lookups_make(sp, m, charge, &L, err);
  for (int i = 0; !rc && i < sp->nattrs; i++) { /* a misspelt name is an error, not ignored */
    int second;
    if (!ts_attr_rule_is_glob(sp->attr_names[i]) &&
        find_mapped(&L, sp->attr_names[i], &second) == -1) {
      char nm[200];
      ts__ckpt_text_escape(sp->attr_names[i], nm, sizeof nm);
      rc = ts_error_set(err, TS_NOT_FOUND,
                        "safetensors '%s' holds no tensor named '%s' (given "
                        "an attribute; after the renames and the prefix)",
                        sp->path, nm);
    }
  }
  /* names the file maps alike are refused by check_one ("both map to") */
  if (!rc && (sp->nnames > 0 || !every))
    rc = named_once(sp->nnames > 0 ? sp->names : sp->attr_names, n, charge, sp->path, err);
  for (int i = 0; !rc && i < n; i++) {
    const char *name = sp->nnames > 0 ? sp->names[i]
                       : every        ? map_name(sp, &L, m->tensors[i].name)
                                      : sp->attr_names[i];
    if (globs && ts_attr_rule_pick(sp->attr_names, sp->nattrs, name) < 0)
      continue; /* a tensor no rule matches is not imported */
    if (!(rc = check_one(sp, m, &L, s, size, name, &it[*nout], err)))
      (*nout)++;
  }
  if (!rc && *nout == 0)
    rc = ts_error_set(err, TS_NOT_FOUND,
                      "safetensors import of '%s': no tensor of the file "
                      "matches the attribute rules",
                      sp->path);
  lookups_free(&L);
  return rc;
}

/* Runs up to this long go through io_uring (when there is more than one): a column split's rows
 * are many short reads, each of which would otherwise cost a system call of its own. Longer runs
 * (a row split, a replica) are one or few preads anyway. */
#define RING_RUN_MAX ((size_t)1 << 20)
#define RING_DEPTH 64

/* The io_uring of an import, made on its first use; NULL ring: preads (io_uring unavailable, or
 * TSHARD_IO_URING=0). */
typedef struct ring_state {
  bool tried, ok;
  struct io_uring ring;
} ring_state;

static struct io_uring *ring_get(ring_state *rs) {
  if (!rs->tried) {
    rs->tried = true;
    const char *env = getenv("TSHARD_IO_URING");
    rs->ok = !(env && strcmp(env, "0") == 0) && io_uring_queue_init(RING_DEPTH, &rs->ring, 0) == 0;
  }
  return rs->ok ? &rs->ring : NULL;
}

static void ring_close(ring_state *rs) {
  if (rs->ok)
    io_uring_queue_exit(&rs->ring);
  rs->ok = false;
}

/* A completed read of want bytes at off into p that returned res: a short one finished by pread
 * (EIO at the end of the file). -1 with errno on failure. */
static int finish_read(int fd, uint8_t *p, size_t want, int64_t off, int res) {
  if (res < 0) {
    errno = -res;
    return -1;
  }
  return (size_t)res == want ? 0 : ts__ckpt_pread_full(fd, p + res, want - (size_t)res, off + res);
}

/* Every run of it (len bytes each; run i at base + poff * es in the file, dst + boff * es in the
 * slice) through the ring, RING_DEPTH in flight. -1 with errno on failure (after every read in
 * flight completed). */
static int read_runs_ring(struct io_uring *ring, int fd, ckpt_runs *it, uint8_t *dst, size_t es,
                          int64_t base, int64_t *nread) {
  size_t len = (size_t)it->len * es;
  uint8_t *ptr[RING_DEPTH];
  int64_t at[RING_DEPTH];
  int free_slots[RING_DEPTH], nfree = RING_DEPTH, inflight = 0, rc = 0, err = 0;
  for (int i = 0; i < RING_DEPTH; i++)
    free_slots[i] = i;
  bool more = true;
  while (more || inflight > 0) {
    int64_t poff, boff;
    while (more && !rc && nfree > 0 && (more = ts__ckpt_runs_next(it, &poff, &boff))) {
      struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
      int slot = free_slots[--nfree];
      ptr[slot] = dst + boff * (int64_t)es;
      at[slot] = base + poff * (int64_t)es;
      io_uring_prep_read(sqe, fd, ptr[slot], (unsigned)len, (uint64_t)at[slot]);
      io_uring_sqe_set_data64(sqe, (uint64_t)slot);
      inflight++;
    }
    if (rc)
      more = false;
    if (inflight == 0)
      break;
    int w = io_uring_submit_and_wait(ring, 1);
    if (w < 0 && w != -EINTR && !rc)
      rc = -1, err = -w, more = false;
    struct io_uring_cqe *cqe;
    while (inflight > 0 && io_uring_peek_cqe(ring, &cqe) == 0) {
      int slot = (int)io_uring_cqe_get_data64(cqe), res = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      inflight--;
      free_slots[nfree++] = slot;
      if (!rc && finish_read(fd, ptr[slot], len, at[slot], res) != 0)
        rc = -1, err = errno, more = false;
      else if (!rc)
        *nread += (int64_t)len;
    }
    if (rc && w < 0 && w != -EINTR)
      break; /* the ring itself failed: nothing more can be waited for */
  }
  errno = err;
  return rc;
}

/* Reads this rank's box of a tensor into its row-major slice: the byte runs of the box only, many
 * short runs through io_uring, the others by pread. */
static int read_box(const st_model *m, const st_tensor *t, ts_stored *e, ring_state *rs,
                    int64_t *nread, ts_error *err) {
  if (!e->has_slice || ts_box_numel(&e->box) == 0)
    return TS_OK;
  ts_box P = {.ndim = t->ndim};
  for (int d = 0; d < t->ndim; d++)
    P.lo[d] = 0, P.hi[d] = t->shape[d];
  const st_file *f = &m->files[t->file];
  size_t es = ts_dtype_size(t->dtype);
  ckpt_runs it;
  ts__ckpt_runs_init(&it, &e->box, &P, &e->box);
  uint8_t *dst = e->local.data;
  size_t len = (size_t)it.len * es;
  struct io_uring *ring = it.count > 1 && len <= RING_RUN_MAX ? ring_get(rs) : NULL;
  int fail = 0;
  if (ring) {
    fail = read_runs_ring(ring, f->fd, &it, dst, es, t->offset, nread);
  } else {
    int64_t poff, boff;
    while (!fail && ts__ckpt_runs_next(&it, &poff, &boff)) {
      fail =
          ts__ckpt_pread_full(f->fd, dst + boff * (int64_t)es, len, t->offset + poff * (int64_t)es);
      *nread += fail ? 0 : (int64_t)len;
    }
  }
  if (fail) {
    char nm[200];
    ts__ckpt_text_escape(t->name, nm, sizeof nm);
    return ts_error_set(err, errno == EIO ? TS_CORRUPT : TS_CHECKPOINT_IO,
                        "safetensors file '%s', tensor '%s': cannot read: %s", f->path, nm,
                        errno == EIO ? "the file is shorter than its header says"
                                     : strerror(errno));
  }
  return TS_OK;
}

/* Creates and fills every chosen tensor (rank-local; *made counts those created). */
static int create_all(ts_store *s, const st_model *m, const imp *it, int n, int *made,
                      int64_t *nread, ts_error *err) {
  ring_state rs = {0};
  int rc = TS_OK;
  for (int i = 0; i < n && !rc; i++) {
    const st_tensor *t = it[i].src;
    ts_stored *e;
    rc = ts_store_add_unfilled(s, it[i].name, t->ndim, t->shape, t->dtype, it[i].attr, "", &e, err);
    if (!rc) {
      *made = i + 1;
      st_meta *meta = m->files[t->file].meta;
      if (meta) { /* the file's metadata, by reference, for as long as the tensor lives */
        e->kept = ts__st_meta_ref(meta);
        e->kept_release = ts__st_meta_release;
      }
      rc = read_box(m, t, e, &rs, nread, err);
    }
  }
  ring_close(&rs);
  return rc;
}

/* The answer's names, copied before the outcome is agreed (so no failure can follow it). */
static int copy_names(const imp *it, int n, ts_st_result *res, ts_error *err) {
  res->items = calloc((size_t)(n ? n : 1), sizeof *res->items);
  for (int i = 0; res->items && i < n; i++) {
    if (!(res->items[i] = strdup(it[i].name)))
      break;
    res->n = i + 1;
  }
  return res->n == n ? TS_OK : ts_error_set(err, TS_NO_MEMORY, "safetensors import: no memory");
}

int ts_st_import(ts_store *s, ts_world *w, const ts_st_import_spec *sp, ts_st_result *res,
                 ts_error *err) {
  memset(res, 0, sizeof *res);
  ts_comm *c = ts_world_comm(w);
  ts_error lerr;
  ts_error_clear(&lerr);
  st_model *m = NULL;
  imp *it = NULL;
  st_charge charge = {0}; /* the import's own arrays */
  int n = 0, made = 0;
  int lst = ts__st_open(sp->path, &m, &lerr);
  if (!lst)
    lst = choose(sp, m, s, ts_world_size(w), &charge, &it, &n, &lerr);
  /* the model, the names and the attributes checked alike on every rank before any allocation */
  int rc = ts_comm_agree(c, lst, &lerr, err);
  if (!rc) {
    lst = copy_names(it, n, res, &lerr);
    if (!lst)
      lst = create_all(s, m, it, n, &made, &res->bytes, &lerr);
    rc = ts_comm_agree(c, lst, &lerr, err);
  }
  if (rc) {
    for (int i = 0; i < made; i++) /* every rank: nothing of the import is kept */
      ts_store_drop(s, it[i].name, NULL);
    int64_t bytes = res->bytes;
    ts_st_result_clear(res);
    res->bytes = bytes;
  }
  free(it);
  ts__st_uncharge(&charge);
  ts__st_close(&m);
  return rc;
}
