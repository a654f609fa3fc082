/* safetensors_format.c - reading Hugging Face safetensors headers as untrusted input: one
 * `model.safetensors` file, or a sharded model's `model.safetensors.index.json` whose weight_map
 * names the files (of the index's directory) holding each tensor. A file is an 8-byte
 * little-endian header length, a JSON header (parsed with jansson) of {name: {dtype, shape,
 * data_offsets}} and `__metadata__`, then the data section. Every entry is checked before anything
 * is planned or allocated from it: the dtype is one tshard has (others are refused by name), the
 * shape is non-negative and its bytes equal the entry's range, the range lies inside the file and
 * overlaps no other entry's, names are valid text. Errors name the file and the tensor. Files are
 * opened like checkpoint files (no FIFO, no symbolic link; ts__ckpt_open_regular). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors_internal.h"
#include "ts_rules.h"

/* The dtype names the format knows, for the message that refuses those tshard has not. */
static const char *const known_unsupported[] = {"BOOL", "U16", "I16", "U32", "U64", "F8_E4M3",
                                                "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3",
                                                "F6_E3M2", "C64"};

static int dtype_of(const char *file, const char *tname, const char *dt, ts_dtype *out,
                    ts_error *err) {
  if (dt && ts_ckpt_dtype_parse(dt, out) == TS_OK)
    return TS_OK;
  char d[64] = "(none)";
  if (dt)
    ts__ckpt_text_escape(dt, d, sizeof d);
  bool known = false;
  for (size_t i = 0; dt && i < sizeof known_unsupported / sizeof *known_unsupported; i++)
    known = known || strcmp(dt, known_unsupported[i]) == 0;
  return ts_error_set(err, TS_BAD_DTYPE, "safetensors file '%s', tensor '%s': dtype %s is %s; "
                      "tshard reads F32 F64 F16 BF16 I8 I32 I64 U8", file, tname, d,
                      known ? "not supported" : "unknown");
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
    return ts_error_set(err, TS_CORRUPT, "safetensors file '%s', tensor '%s': %s", file, nm,     \
                        why_);                                                                     \
  } while (0)
  ts_error terr;
  if (ts_text_check("tensor name", name, strlen(name), "names", &terr))
    BAD("the name is not valid text (%.200s)", terr.msg);
  if (!json_is_object(o))
    BAD("its entry is not a JSON object");
  int rc = dtype_of(file, nm, json_string_value(json_object_get(o, "dtype")), &t->dtype, err);
  if (rc)
    return rc;
  json_t *shape = json_object_get(o, "shape");
  if (!json_is_array(shape) || json_array_size(shape) > TS_MAX_DIMS)
    BAD("shape is not an array of at most %d dims", TS_MAX_DIMS);
  t->ndim = (int)json_array_size(shape);
  int64_t want = (int64_t)ts_dtype_size(t->dtype);
  bool over = false;
  for (int d = 0; d < t->ndim; d++) {
    json_t *v = json_array_get(shape, (size_t)d);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      BAD("shape dim %d is not a non-negative integer", d);
    t->shape[d] = json_integer_value(v);
    over = over || __builtin_mul_overflow(want, t->shape[d], &want);
  }
  if (over)
    BAD("its shape holds more bytes than a file can");
  json_t *offs = json_object_get(o, "data_offsets");
  json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
  if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) ||
      !json_is_integer(e))
    BAD("no data_offsets [begin, end]");
  int64_t bi = json_integer_value(b), ei = json_integer_value(e);
  if (bi < 0 || ei < bi || ei > avail)
    BAD("data_offsets [%lld, %lld] lie outside the data section of %lld bytes (is the file "
        "truncated?)", (long long)bi, (long long)ei, (long long)avail);
  if (ei - bi != want)
    BAD("data_offsets [%lld, %lld] hold %lld bytes but its shape and dtype %s need %lld",
        (long long)bi, (long long)ei, (long long)(ei - bi), ts_ckpt_dtype_name(t->dtype),
        (long long)want);
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
      rc = ts_error_set(err, TS_CORRUPT, "safetensors file '%s': the data_offsets of tensors "
                        "'%s' [%lld, %lld] and '%s' [%lld, %lld] overlap", file, a,
                        (long long)o[i - 1].begin, (long long)o[i - 1].end, b,
                        (long long)o[i].begin, (long long)o[i].end);
    }
  free(o);
  return rc;
}

/* Reads a file's header into a JSON object (*hdr); *data_start after it. */
static int read_header(st_file *f, json_t **hdr, ts_error *err) {
  uint8_t lenb[8];
  if (f->size < 8 || ts__ckpt_pread_full(f->fd, lenb, 8, 0) != 0)
    return ts_error_set(err, TS_CORRUPT, "safetensors file '%s': shorter than its 8-byte header "
                        "length (%lld bytes)", f->path, (long long)f->size);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)lenb[i] << (8 * i);
  if (hlen > (uint64_t)ST_HEADER_MAX)
    return ts_error_set(err, TS_CORRUPT, "safetensors file '%s': header of %llu bytes; at most "
                        "%lld (100 MiB) are read", f->path, (unsigned long long)hlen,
                        (long long)ST_HEADER_MAX);
  if (hlen < 2 || (int64_t)hlen > f->size - 8)
    return ts_error_set(err, TS_CORRUPT, "safetensors file '%s': header length %llu does not fit "
                        "the file of %lld bytes (is it truncated?)", f->path,
                        (unsigned long long)hlen, (long long)f->size);
  char *text = malloc(hlen);
  if (!text)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors file '%s': no memory for its header",
                        f->path);
  if (ts__ckpt_pread_full(f->fd, text, hlen, 8) != 0) {
    int e = errno;
    free(text);
    return ts_error_set(err, TS_CHECKPOINT_IO, "safetensors file '%s': cannot read its header: "
                        "%s", f->path, strerror(e));
  }
  json_error_t je;
  *hdr = json_loadb(text, hlen, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!*hdr || !json_is_object(*hdr)) {
    char why[200];
    ts__ckpt_text_escape(*hdr ? "not an object" : je.text, why, sizeof why);
    json_decref(*hdr);
    *hdr = NULL;
    return ts_error_set(err, TS_CORRUPT, "safetensors file '%s': its header is not a JSON object "
                        "(%s)", f->path, why);
  }
  f->data_start = 8 + (int64_t)hlen;
  return TS_OK;
}

static int grow(void **arr, int n, int *cap, size_t es) {
  if (n < *cap)
    return 0;
  int nc = *cap ? *cap * 2 : 16;
  void *p = realloc(*arr, es * (size_t)nc);
  if (!p)
    return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

/* Opens file `path` as the next file of m, checks every entry of its header, and adds them (want:
 * only those the index's weight_map maps to this file, wfile; NULL: all). */
static int add_file(st_model *m, const char *path, json_t *want, const char *wfile,
                    int *tcap, ts_error *err) {
  int fi = m->nfiles;
  st_file *f = &m->files[fi];
  f->fd = -1;
  f->path = strdup(path);
  if (!f->path)
    return ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
  m->nfiles++;
  int rc = ts__ckpt_open_regular("safetensors file", path, &f->fd, &f->size, err);
  json_t *hdr = NULL;
  if (rc || (rc = read_header(f, &hdr, err)))
    return rc;
  int first = m->ntensors;
  const char *key;
  json_t *o;
  json_object_foreach(hdr, key, o) {
    if (strcmp(key, "__metadata__") == 0) {
      if (!json_is_object(o) && !json_is_null(o)) {
        rc = ts_error_set(err, TS_CORRUPT, "safetensors file '%s': __metadata__ is not a JSON "
                          "object", path);
        break;
      }
      if (fi == 0 && json_is_object(o))
        m->metadata = json_incref(o);
      continue;
    }
    if (grow((void **)&m->tensors, m->ntensors, tcap, sizeof *m->tensors)) {
      rc = ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
      break;
    }
    st_tensor *t = &m->tensors[m->ntensors];
    memset(t, 0, sizeof *t);
    if ((rc = read_entry(path, key, o, f->size - f->data_start, t, err)))
      break;
    if (!(t->name = strdup(key))) {
      rc = ts_error_set(err, TS_NO_MEMORY, "safetensors: no memory");
      break;
    }
    t->file = fi;
    m->ntensors++;
  }
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
  return rc;
}

/* A file named by an index: a plain name in the index's directory. */
static int index_file_name(const char *index, const char *name, ts_error *err) {
  size_t n = strlen(name);
  ts_error terr;
  char nm[200];
  ts__ckpt_text_escape(name, nm, sizeof nm);
  if (n == 0 || n > 255 || strchr(name, '/') || strcmp(name, ".") == 0 ||
      strcmp(name, "..") == 0 || ts_text_check("file name", name, n, "file names", &terr))
    return ts_error_set(err, TS_CORRUPT, "safetensors index '%s': weight_map names file '%s'; "
                        "files of an index are plain names in its directory", index, nm);
  return TS_OK;
}

/* Reads an index file into a JSON object (the same checks as a header, at most 100 MiB). */
static int read_index(const char *path, json_t **out, ts_error *err) {
  int fd;
  int64_t size;
  int rc = ts__ckpt_open_regular("safetensors index", path, &fd, &size, err);
  if (rc)
    return rc;
  if (size > ST_HEADER_MAX) {
    close(fd);
    return ts_error_set(err, TS_CORRUPT, "safetensors index '%s': %lld bytes; at most %lld "
                        "(100 MiB) are read", path, (long long)size, (long long)ST_HEADER_MAX);
  }
  char *text = malloc((size_t)size + 1);
  if (!text || (size > 0 && ts__ckpt_pread_full(fd, text, (size_t)size, 0) != 0)) {
    int e = errno;
    free(text);
    close(fd);
    return ts_error_set(err, text ? TS_CHECKPOINT_IO : TS_NO_MEMORY,
                        "safetensors index '%s': cannot read it: %s", path, strerror(e));
  }
  close(fd);
  json_error_t je;
  json_t *j = json_loadb(text, (size_t)size, JSON_REJECT_DUPLICATES, &je);
  free(text);
  json_t *wm = json_object_get(j, "weight_map");
  if (!json_is_object(wm)) {
    char why[200];
    ts__ckpt_text_escape(j ? "no weight_map object" : je.text, why, sizeof why);
    json_decref(j);
    return ts_error_set(err, TS_CORRUPT, "safetensors index '%s': not an HF index (%s)", path,
                        why);
  }
  *out = j;
  return TS_OK;
}

/* The distinct files of an index's weight_map, in order of first mention, each opened with the
 * tensors it maps to it; every mapped tensor must be in its file. */
static int open_index(st_model *m, const char *path, ts_error *err) {
  json_t *j = NULL;
  int rc = read_index(path, &j, err);
  if (rc)
    return rc;
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
      rc = ts_error_set(err, TS_CORRUPT, "safetensors index '%s': weight_map of '%s' is not a "
                        "file name", path, nm);
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
  json_object_foreach(wm, key, v) {
    if (rc)
      break;
    if (!ts__st_find(m, key)) {
      char nm[200];
      ts__ckpt_text_escape(key, nm, sizeof nm);
      rc = ts_error_set(err, TS_CORRUPT, "safetensors index '%s': tensor '%s' is not in its file "
                        "'%s'", path, nm, json_string_value(v));
    }
  }
  json_decref(j);
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
  }
  for (int k = 0; k < m->ntensors; k++)
    free(m->tensors[k].name);
  free(m->files);
  free(m->tensors);
  json_decref(m->metadata);
  free(m);
  *p = NULL;
}

const st_tensor *ts__st_find(const st_model *m, const char *name) {
  for (int k = 0; k < m->ntensors; k++)
    if (strcmp(m->tensors[k].name, name) == 0)
      return &m->tensors[k];
  return NULL;
}
