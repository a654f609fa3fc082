/* safetensors_format.c - reading Hugging Face safetensors headers as untrusted input: one
 * `model.safetensors` file, or a sharded model's `model.safetensors.index.json` whose weight_map
 * names the files (of the index's directory) holding each tensor. A file is an 8-byte
 * little-endian header length, a JSON header (parsed with jansson) of {name: {dtype, shape,
 * data_offsets}} and `__metadata__`, then the data section. Every entry is checked before anything
 * is planned or allocated from it: the dtype is one the format defines (one tshard lacks, such as
 * C64, is checked like the others by its bits and refused only when an import asks for the
 * tensor: ts__st_refuse_dtype), the shape is non-negative and its bytes equal the entry's
 * range, the range lies inside the file and overlaps no other entry's, names are valid text,
 * `__metadata__` is an object of strings (kept once per file, by reference: st_meta). Errors name
 * the file and the tensor. Files are opened like checkpoint files (no FIFO, no symbolic link;
 * ts__ckpt_open_regular).
 *
 * A header is untrusted in its size too: what reading it costs is counted against the memory
 * limit before it is spent (the text, in a pool buffer, and its parse by jansson, which takes up
 * to ~80 times the text's bytes for `{},{},...`: parse_cost bounds it), and the entries the model
 * keeps until the import ends; every check over the entries is a sort and a pass (overlaps, names)
 * or a hash or sorted lookup (the index's weight_map, ts__st_find), O(n log n) in their number. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors_internal.h"
#include "ts_rules.h"

int ts__st_charge(st_charge *c, const char *file, const char *what, size_t bytes, ts_error *err) {
  ts_error perr;
  if (ts_pool_charge(bytes, what, &perr) != TS_OK)
    return ts_error_set(err, perr.code, "safetensors file '%s': %s", file, perr.msg);
  c->charged += bytes;
  return TS_OK;
}

void ts__st_uncharge(st_charge *c) {
  if (c->charged)
    ts_pool_uncharge(c->charged);
  c->charged = 0;
}

int ts__st_meta_make(const char *file, json_t *o, st_meta **out, ts_error *err) {
  *out = NULL;
  size_t flags = JSON_COMPACT | JSON_SORT_KEYS, n = json_dumpb(o, NULL, 0, flags);
  char what[96];
  snprintf(what, sizeof what, "its __metadata__ of %zu bytes", n);
  ts_error perr;
  st_meta *m = n ? ts_shard_alloc_as(sizeof *m + n + 1, 0, what, &perr) : NULL;
  if (!m)
    return n ? ts_error_set(err, perr.code, "safetensors file '%s': %s", file, perr.msg)
             : ts_error_set(err, TS_NO_MEMORY,
                            "safetensors file '%s': no memory for its "
                            "__metadata__",
                            file);
  m->refs = 1;
  m->len = json_dumpb(o, m->text, n, flags); /* the same n: nothing changed in between */
  m->len = m->len < n ? m->len : n;
  m->text[m->len] = '\0';
  *out = m;
  return TS_OK;
}

st_meta *ts__st_meta_ref(st_meta *m) {
  if (m)
    m->refs++;
  return m;
}

void ts__st_meta_release(void *p) {
  st_meta *m = p;
  if (m && --m->refs == 0)
    ts_shard_free(m);
}

const st_meta *ts__st_kept(const ts_stored *e) {
  return e && e->kept_release == ts__st_meta_release ? e->kept : NULL;
}

/* An upper bound of the memory that parsing the JSON text t[0..n) with jansson takes, from its
 * allocations measured: an object about 240 bytes, an array 140, each value or member 40 to 110
 * (counted by the separators), each string's bytes once more, and the lexer's buffer up to
 * twice the longest string; the text itself is counted too. */
static size_t parse_cost(const char *t, size_t n) {
  size_t cost = 2 * n + 96, run = 0, longest = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; i++) {
    char c = t[i];
    if (in_string) {
      if (c == '"') {
        in_string = false;
        longest = run > longest ? run : longest;
      } else {
        run += c == '\\' && i + 1 < n ? (i++, 2) : 1;
      }
    } else if (c == '"') {
      in_string = true;
      run = 0;
    } else {
      cost += c == '{' ? 256 : c == '[' ? 160 : c == ',' || c == ':' ? 96 : 0;
    }
  }
  return cost + 2 * longest;
}

/* The dtypes of the format tshard has not, by their bits per element: their entries are checked
 * like any other, and refused when imported. */
static const struct {
  const char *name;
  int bits;
} unsupported[] = {{.name = "F8_E8M0", .bits = 8},
                   {.name = "F4", .bits = 4},
                   {.name = "F6_E2M3", .bits = 6},
                   {.name = "F6_E3M2", .bits = 6},
                   {.name = "C64", .bits = 64}};

/* The entry's dtype into t (t->dtype, or t->unsupported and TS_DTYPE_COUNT) and its bits per
 * element; an unknown name is refused. */
static int dtype_of(const char *file, const char *tname, const char *dt, st_tensor *t, int *bits,
                    ts_error *err) {
  if (dt && ts_ckpt_dtype_parse(dt, &t->dtype) == TS_OK && !ts_dtype_is_complex(t->dtype)) {
    *bits = 8 * (int)ts_dtype_size(t->dtype);
    return TS_OK;
  }
  for (size_t i = 0; dt && i < sizeof unsupported / sizeof *unsupported; i++)
    if (strcmp(dt, unsupported[i].name) == 0) {
      t->dtype = TS_DTYPE_COUNT;
      t->unsupported = unsupported[i].name;
      *bits = unsupported[i].bits;
      return TS_OK;
    }
  char d[64] = "(none)";
  if (dt)
    ts__ckpt_text_escape(dt, d, sizeof d);
  return ts_error_set(err, TS_BAD_DTYPE,
                      "safetensors file '%s', tensor '%s': dtype %s is "
                      "unknown; tshard reads " ST_DTYPES,
                      file, tname, d);
}

int ts__st_refuse_dtype(const st_model *m, const st_tensor *t, ts_error *err) {
  char nm[200];
  ts__ckpt_text_escape(t->name, nm, sizeof nm);
  return ts_error_set(err, TS_BAD_DTYPE,
                      "safetensors file '%s', tensor '%s': dtype %s is not "
                      "supported; tshard reads " ST_DTYPES " (import the other tensors by "
                      "name)",
                      m->files[t->file].path, nm, t->unsupported);
}

/* Checks one header entry `o` of tensor `name` (data section of `avail` bytes) into t. */
static int read_entry(const char *file, const char *name, json_t *o, int64_t avail, st_tensor *t,
                      ts_error *err) {
  char nm[200];
  ts__ckpt_text_escape(name, nm, sizeof nm);
#define BAD(...)                                                                                   \
  do {                                                                                             \
    char why_[256];                                                                                \
    snprintf(why_, sizeof why_, __VA_ARGS__);                                                      \
    return ts_error_set(err, TS_CORRUPT, "safetensors file '%s', tensor '%s': %s", file, nm,       \
                        why_);                                                                     \
  } while (0)
  ts_error terr;
  if (ts_text_check("tensor name", name, strlen(name), "names", &terr))
    BAD("the name is not valid text (%.200s)", terr.msg);
  if (!json_is_object(o))
    BAD("its entry is not a JSON object");
  int bits = 0;
  int rc = dtype_of(file, nm, json_string_value(json_object_get(o, "dtype")), t, &bits, err);
  if (rc)
    return rc;
  json_t *shape = json_object_get(o, "shape");
  if (!json_is_array(shape) || json_array_size(shape) > TS_MAX_DIMS)
    BAD("shape is not an array of at most %d dims", TS_MAX_DIMS);
  t->ndim = (int)json_array_size(shape);
  int64_t want = 1; /* elements, then bits, then bytes */
  bool over = false;
  for (int d = 0; d < t->ndim; d++) {
    json_t *v = json_array_get(shape, (size_t)d);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      BAD("shape dim %d is not a non-negative integer", d);
    t->shape[d] = json_integer_value(v);
    over = over || __builtin_mul_overflow(want, t->shape[d], &want);
  }
  if (over || __builtin_mul_overflow(want, (int64_t)bits, &want))
    BAD("its shape holds more bytes than a file can");
  if (want % 8)
    BAD("its shape holds %lld bits of %s, not a whole number of bytes", (long long)want,
        t->unsupported);
  want /= 8;
  json_t *offs = json_object_get(o, "data_offsets");
  json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
  if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) ||
      !json_is_integer(e))
    BAD("no data_offsets [begin, end]");
  int64_t bi = json_integer_value(b), ei = json_integer_value(e);
  if (bi < 0 || ei < bi || ei > avail)
    BAD("data_offsets [%lld, %lld] lie outside the data section of %lld bytes (is the file "
        "truncated?)",
        (long long)bi, (long long)ei, (long long)avail);
  if (ei - bi != want)
    BAD("data_offsets [%lld, %lld] hold %lld bytes but its shape and dtype %s need %lld",
        (long long)bi, (long long)ei, (long long)(ei - bi),
        t->unsupported ? t->unsupported : ts_ckpt_dtype_name(t->dtype), (long long)want);
#undef BAD
  t->offset = bi; /* relative for now: made absolute by the caller */
  t->bytes = want;
  return TS_OK;
}

typedef struct by_begin {
  int64_t begin, end;
  int k;
} by_begin;

static int cmp_begin(const void *a, const void *b) {
  const by_begin *x = a, *y = b;
  return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1)
                              : (x->end > y->end) - (x->end < y->end);
}

/* No two entries of one file share a byte (entries of no bytes share none). */
static int check_overlaps(const char *file, const st_tensor *ts, int n, ts_error *err) {
  by_begin *o = malloc(sizeof *o * (size_t)(n ? n : 1));
  if (!o)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors file '%s': no memory", file);
  int m = 0;
  for (int k = 0; k < n; k++)
    if (ts[k].bytes > 0)
      o[m++] = (by_begin){ts[k].offset, ts[k].offset + ts[k].bytes, k};
  qsort(o, (size_t)m, sizeof *o, cmp_begin);
  int rc = TS_OK;
  for (int i = 1; i < m && !rc; i++)
    if (o[i].begin < o[i - 1].end) {
      char a[200], b[200];
      ts__ckpt_text_escape(ts[o[i - 1].k].name, a, sizeof a);
      ts__ckpt_text_escape(ts[o[i].k].name, b, sizeof b);
      rc = ts_error_set(err, TS_CORRUPT,
                        "safetensors file '%s': the data_offsets of tensors "
                        "'%s' [%lld, %lld] and '%s' [%lld, %lld] overlap",
                        file, a, (long long)o[i - 1].begin, (long long)o[i - 1].end, b,
                        (long long)o[i].begin, (long long)o[i].end);
    }
  free(o);
  return rc;
}

/* A buffer of n bytes from the pool for the text of file's header or index (`what` names it in
 * the LIMIT message): counted while it is held, and its release lets the idle daemon give the
 * parse's freed heap memory back (ts_pool_trim). NULL with err set. */
static char *pool_text(const char *file, const char *what, size_t n, ts_error *err) {
  ts_error perr;
  char *text = ts_shard_alloc_as(n, TS_POOL_STAGING, what, &perr);
  if (!text)
    ts_error_set(err, perr.code, "safetensors file '%s': %s", file, perr.msg);
  return text;
}

/* Reads a file's header into a JSON object (*hdr); *data_start after it. The text and its parse
 * are charged to `parse` first (the caller gives it back once the object is freed). */
static int read_header(st_file *f, json_t **hdr, st_charge *parse, ts_error *err) {
  uint8_t lenb[8];
  if (f->size < 8 || ts__ckpt_pread_full(f->fd, lenb, 8, 0) != 0)
    return ts_error_set(err, TS_CORRUPT,
                        "safetensors file '%s': shorter than its 8-byte header "
                        "length (%lld bytes)",
                        f->path, (long long)f->size);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)lenb[i] << (8 * i);
  if (hlen > (uint64_t)ST_HEADER_MAX)
    return ts_error_set(err, TS_CORRUPT,
                        "safetensors file '%s': header of %llu bytes; at most "
                        "%lld (100 MiB) are read",
                        f->path, (unsigned long long)hlen, (long long)ST_HEADER_MAX);
  if (hlen < 2 || (int64_t)hlen > f->size - 8)
    return ts_error_set(err, TS_CORRUPT,
                        "safetensors file '%s': header length %llu does not fit "
                        "the file of %lld bytes (is it truncated?)",
                        f->path, (unsigned long long)hlen, (long long)f->size);
  char what[96];
  snprintf(what, sizeof what, "reading its header of %llu bytes", (unsigned long long)hlen);
  char *text = pool_text(f->path, what, hlen, err);
  if (!text)
    return err->code;
  if (ts__ckpt_pread_full(f->fd, text, hlen, 8) != 0) {
    int e = errno;
    ts_shard_free(text);
    return ts_error_set(err, TS_CHECKPOINT_IO,
                        "safetensors file '%s': cannot read its header: "
                        "%s",
                        f->path, strerror(e));
  }
  snprintf(what, sizeof what, "parsing its header of %llu bytes", (unsigned long long)hlen);
  int rc = ts__st_charge(parse, f->path, what, parse_cost(text, hlen) - hlen, err);
  if (rc) {
    ts_shard_free(text);
    return rc;
  }
  json_error_t je;
  *hdr = json_loadb(text, hlen, JSON_REJECT_DUPLICATES, &je);
  ts_shard_free(text);
  if (!*hdr || !json_is_object(*hdr)) {
    char why[200];
    ts__ckpt_text_escape(*hdr ? "not an object" : je.text, why, sizeof why);
    json_decref(*hdr);
    *hdr = NULL;
    return ts_error_set(err, TS_CORRUPT,
                        "safetensors file '%s': its header is not a JSON object "
                        "(%s)",
                        f->path, why);
  }
  f->data_start = 8 + (int64_t)hlen;
  return TS_OK;
}

/* One more entry of m->tensors (its capacity doubled when full), the growth charged to the
 * model's account. */
static int grow_tensors(st_model *m, const char *path, int *cap, ts_error *err) {
  if (m->ntensors < *cap)
    return TS_OK;
  int nc = *cap ? *cap * 2 : 16;
  int rc = ts__st_charge(&m->charge, path, "the entries of its header",
                         sizeof *m->tensors * (size_t)(nc - *cap), err);
  void *p = rc ? NULL : realloc(m->tensors, sizeof *m->tensors * (size_t)nc);
  if (!p)
    return rc ? rc : ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
  m->tensors = p;
  *cap = nc;
  return TS_OK;
}

/* The file's __metadata__ o: null (none), or an object whose every value is a string, kept as
 * f->meta unless empty; anything else is refused, never dropped. */
static int read_metadata(st_file *f, json_t *o, ts_error *err) {
  if (json_is_null(o))
    return TS_OK;
  if (!json_is_object(o))
    return ts_error_set(err, TS_CORRUPT,
                        "safetensors file '%s': __metadata__ is not a JSON "
                        "object (the format's metadata maps text to text)",
                        f->path);
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    if (!json_is_string(v)) {
      char k[200];
      ts__ckpt_text_escape(key, k, sizeof k);
      return ts_error_set(err, TS_CORRUPT,
                          "safetensors file '%s': __metadata__ entry '%s' is "
                          "not a string (the format's metadata maps text to text)",
                          f->path, k);
    }
  }
  return json_object_size(o) ? ts__st_meta_make(f->path, o, &f->meta, err) : TS_OK;
}

/* Opens file `path` as the next file of m, checks every entry of its header, and adds them (want:
 * only those the index's weight_map maps to this file, wfile; NULL: all). */
static int add_file(st_model *m, const char *path, json_t *want, const char *wfile, int *tcap,
                    ts_error *err) {
  int fi = m->nfiles;
  st_file *f = &m->files[fi];
  f->fd = -1;
  f->path = strdup(path);
  if (!f->path)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
  m->nfiles++;
  st_charge parse = {0};
  int rc = ts__ckpt_open_regular("safetensors file", path, &f->fd, &f->size, err);
  json_t *hdr = NULL;
  if (rc || (rc = read_header(f, &hdr, &parse, err))) {
    ts__st_uncharge(&parse);
    return rc;
  }
  int first = m->ntensors;
  size_t names = 0;
  const char *key;
  json_t *o;
  json_object_foreach(hdr, key, o) {
    if (strcmp(key, "__metadata__") == 0) {
      if ((rc = read_metadata(f, o, err)))
        break;
      continue;
    }
    if ((rc = grow_tensors(m, path, tcap, err)))
      break;
    st_tensor *t = &m->tensors[m->ntensors];
    memset(t, 0, sizeof *t);
    if ((rc = read_entry(path, key, o, f->size - f->data_start, t, err)))
      break;
    names += strlen(key) + 17;
    if (!(t->name = strdup(key))) {
      rc = ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
      break;
    }
    t->file = fi;
    m->ntensors++;
  }
  if (!rc) /* the names' copies (the parse's charge covered them until now) */
    rc = ts__st_charge(&m->charge, path, "the names of its entries", names, err);
  if (!rc)
    rc = check_overlaps(path, m->tensors + first, m->ntensors - first, err);
  int kept = first;
  for (int k = first; k < m->ntensors; k++) {
    st_tensor *t = &m->tensors[k];
    json_t *w = want ? json_object_get(want, t->name) : NULL;
    if (want && !(json_is_string(w) && strcmp(json_string_value(w), wfile) == 0)) {
      free(t->name); /* not mapped to this file by the index */
      continue;
    }
    t->offset += f->data_start;
    m->tensors[kept++] = *t;
  }
  m->ntensors = kept;
  json_decref(hdr);
  ts__st_uncharge(&parse);
  return rc;
}

/* A file named by an index: a plain name in the index's directory. */
static int index_file_name(const char *index, const char *name, ts_error *err) {
  size_t n = strlen(name);
  ts_error terr;
  char nm[200];
  ts__ckpt_text_escape(name, nm, sizeof nm);
  if (n == 0 || n > 255 || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
      ts_text_check("file name", name, n, "file names", &terr))
    return ts_error_set(err, TS_CORRUPT,
                        "safetensors index '%s': weight_map names file '%s'; "
                        "files of an index are plain names in its directory",
                        index, nm);
  return TS_OK;
}

/* Reads an index file into a JSON object (the same checks as a header, at most 100 MiB; its text
 * and parse charged to `parse`). */
static int read_index(const char *path, json_t **out, st_charge *parse, ts_error *err) {
  int fd;
  int64_t size;
  int rc = ts__ckpt_open_regular("safetensors index", path, &fd, &size, err);
  if (rc)
    return rc;
  if (size > ST_HEADER_MAX) {
    close(fd);
    return ts_error_set(err, TS_CORRUPT,
                        "safetensors index '%s': %lld bytes; at most %lld "
                        "(100 MiB) are read",
                        path, (long long)size, (long long)ST_HEADER_MAX);
  }
  char what[96];
  snprintf(what, sizeof what, "reading the index of %lld bytes", (long long)size);
  char *text = pool_text(path, what, (size_t)size + 1, err);
  if (!text) {
    close(fd);
    return err->code;
  }
  if (size > 0 && ts__ckpt_pread_full(fd, text, (size_t)size, 0) != 0) {
    int e = errno;
    ts_shard_free(text);
    close(fd);
    return ts_error_set(err, TS_CHECKPOINT_IO, "safetensors index '%s': cannot read it: %s", path,
                        strerror(e));
  }
  close(fd);
  snprintf(what, sizeof what, "parsing the index of %lld bytes", (long long)size);
  if ((rc = ts__st_charge(parse, path, what, parse_cost(text, (size_t)size) - (size_t)size, err))) {
    ts_shard_free(text);
    return rc;
  }
  json_error_t je;
  json_t *j = json_loadb(text, (size_t)size, JSON_REJECT_DUPLICATES, &je);
  ts_shard_free(text);
  json_t *wm = json_object_get(j, "weight_map");
  if (!json_is_object(wm)) {
    char why[200];
    ts__ckpt_text_escape(j ? "no weight_map object" : je.text, why, sizeof why);
    json_decref(j);
    return ts_error_set(err, TS_CORRUPT, "safetensors index '%s': not an HF index (%s)", path, why);
  }
  *out = j;
  return TS_OK;
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* m->by_name: the tensors sorted by name (charged to the model); a name twice is refused (one
 * header cannot hold it, and an index maps each name to one file). */
static int sort_names(st_model *m, const char *path, ts_error *err) {
  size_t n = (size_t)m->ntensors;
  int rc = ts__st_charge(&m->charge, path, "the lookup of its names", sizeof *m->by_name * n, err);
  if (rc || !(m->by_name = malloc(sizeof *m->by_name * (n ? n : 1))))
    return rc ? rc : ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
  for (size_t k = 0; k < n; k++)
    m->by_name[k] = &m->tensors[k];
  qsort(m->by_name, n, sizeof *m->by_name, cmp_tensor_name);
  for (size_t k = 1; k < n; k++)
    if (strcmp(m->by_name[k - 1]->name, m->by_name[k]->name) == 0) {
      char nm[200];
      ts__ckpt_text_escape(m->by_name[k]->name, nm, sizeof nm);
      return ts_error_set(err, TS_CORRUPT, "safetensors '%s': tensor '%s' is named twice", path,
                          nm);
    }
  return TS_OK;
}

/* The distinct files of an index's weight_map, in order of first mention, each opened with the
 * tensors it maps to it; every mapped tensor must be in its file. */
static int open_index(st_model *m, const char *path, ts_error *err) {
  json_t *j = NULL;
  st_charge parse = {0};
  int rc = read_index(path, &j, &parse, err);
  if (rc) {
    ts__st_uncharge(&parse);
    return rc;
  }
  json_t *wm = json_object_get(j, "weight_map");
  char dir[4096];
  const char *slash = strrchr(path, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
  size_t nmap = json_object_size(wm);
  m->files = calloc(nmap ? nmap : 1, sizeof *m->files);
  json_t *seen = json_object();
  int tcap = 0;
  if (!m->files || !seen)
    rc = ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
  const char *key;
  json_t *v;
  json_object_foreach(wm, key, v) {
    if (rc)
      break;
    char nm[200];
    ts__ckpt_text_escape(key, nm, sizeof nm);
    if (!json_is_string(v)) {
      rc = ts_error_set(err, TS_CORRUPT,
                        "safetensors index '%s': weight_map of '%s' is not a "
                        "file name",
                        path, nm);
      break;
    }
    const char *fn = json_string_value(v);
    if ((rc = index_file_name(path, fn, err)) || json_object_get(seen, fn))
      continue;
    json_object_set_new(seen, fn, json_true());
    char fp[4400];
    snprintf(fp, sizeof fp, "%s/%s", dir, fn);
    rc = add_file(m, fp, wm, fn, &tcap, err);
  }
  json_decref(seen);
  if (!rc)
    rc = sort_names(m, path, err);
  json_object_foreach(wm, key, v) {
    if (rc)
      break;
    if (!ts__st_find(m, key)) {
      char nm[200];
      ts__ckpt_text_escape(key, nm, sizeof nm);
      rc = ts_error_set(err, TS_CORRUPT,
                        "safetensors index '%s': tensor '%s' is not in its file "
                        "'%s'",
                        path, nm, json_string_value(v));
    }
  }
  json_decref(j);
  ts__st_uncharge(&parse);
  return rc;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

int ts__st_open(const char *path, st_model **out, ts_error *err) {
  *out = NULL;
  st_model *m = calloc(1, sizeof *m);
  if (!m)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
  int rc, tcap = 0;
  if (ends_with(path, ".json")) {
    rc = open_index(m, path, err);
  } else {
    m->files = calloc(1, sizeof *m->files);
    rc = m->files ? add_file(m, path, NULL, NULL, &tcap, err)
                  : ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
    if (!rc)
      rc = sort_names(m, path, err);
  }
  if (rc) {
    ts__st_close(&m);
    return rc;
  }
  *out = m;
  return TS_OK;
}

void ts__st_close(st_model **p) {
  if (!p || !*p)
    return;
  st_model *m = *p;
  for (int i = 0; m->files && i < m->nfiles; i++) {
    if (m->files[i].fd >= 0)
      close(m->files[i].fd);
    free(m->files[i].path);
    ts__st_meta_release(m->files[i].meta);
  }
  for (int k = 0; k < m->ntensors; k++)
    free(m->tensors[k].name);
  free(m->files);
  free(m->tensors);
  free(m->by_name);
  ts__st_uncharge(&m->charge);
  free(m);
  *p = NULL;
}

const st_tensor *ts__st_find(const st_model *m, const char *name) {
  size_t lo = 0, hi = m->by_name ? (size_t)m->ntensors : 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(m->by_name[mid]->name, name);
    if (c == 0)
      return m->by_name[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}
