/* ckpt_index.c - the checkpoint's index (index.json: per tensor its dtype, shape, saved attribute
 * and pieces with file, key, box and XXH3-64 checksum), the safetensors-layout headers of its
 * files, and the directory helpers of save and load. No MPI: `tshard checkpoint show` links it
 * alone. JSON through libjansson. The format is documented in shard/ckpt/CHECKPOINT.md.
 *
 * Everything read here comes from files anyone may have written: files are opened without
 * blocking and without following a symbolic link and must be regular files; tensor names obey the
 * wire's name rule (proto/ts_rules.h); offsets and sizes are checked with overflow-checked
 * arithmetic against the size of the file before anything is planned or allocated from them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_index_internal.h"
#include "ts_rules.h"

static const char *const st_names[TS_DTYPE_COUNT] = {
    [TS_F32] = "F32",
    [TS_F64] = "F64",
    [TS_F16] = "F16",
    [TS_BF16] = "BF16",
    [TS_I8] = "I8",
    [TS_I32] = "I32",
    [TS_I64] = "I64",
    [TS_U8] = "U8",
    [TS_BOOL] = "BOOL",
    [TS_I16] = "I16",
    [TS_U16] = "U16",
    [TS_U32] = "U32",
    [TS_U64] = "U64",
    [TS_F8_E4M3] = "F8_E4M3",
    [TS_F8_E5M2] = "F8_E5M2",
    /* checkpoints only: safetensors export refuses complex tensors, and import reads no C64 */
    [TS_C64] = "C64",
    [TS_C128] = "C128"};

const char *ts_ckpt_dtype_name(ts_dtype dt) {
  return ts_dtype_valid((int)dt) ? st_names[dt] : "invalid";
}

int ts_ckpt_dtype_parse(const char *text, ts_dtype *out) {
  for (int i = 0; text && i < TS_DTYPE_COUNT; i++)
    if (strcmp(text, st_names[i]) == 0) {
      *out = (ts_dtype)i;
      return TS_OK;
    }
  return TS_BAD_DTYPE;
}

void ts__ckpt_box_text(const ts_box *b, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < b->ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64 ":%" PRId64, d ? "," : "", b->lo[d],
                          b->hi[d]);
  if (n < cap)
    snprintf(buf + n, cap - n, "]");
}

void ts__ckpt_text_escape(const char *s, char *out, size_t cap) {
  const unsigned char *u = (const unsigned char *)s;
  size_t n = strlen(s), o = 0;
  if (cap == 0)
    return;
  for (size_t i = 0; i < n && o + 1 < cap;) {
    char esc[8] = "";
    size_t take = 1;
    unsigned c = u[i];
    size_t len = c < 0x80             ? 1
                 : (c & 0xe0) == 0xc0 ? 2
                 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0 ? 4
                                      : 0;
    if (c == '\\' || c == '"')
      snprintf(esc, sizeof esc, "\\%c", c);
    else if (c == '\t' || c == '\n' || c == '\r')
      snprintf(esc, sizeof esc, "\\%c", c == '\t' ? 't' : c == '\n' ? 'n' : 'r');
    else if (c < 0x20 || c == 0x7f)
      snprintf(esc, sizeof esc, "\\x%02x", c);
    else if (len == 0 || i + len > n || ts_utf8_valid_prefix(s + i, len) != len)
      snprintf(esc, sizeof esc, "\\x%02x", c); /* not UTF-8: its byte */
    else if (c == 0xc2 && u[i + 1] < 0xa0)
      snprintf(esc, sizeof esc, "\\u%04x", (unsigned)u[i + 1]), take = 2; /* a C1 control */
    else
      take = len;
    size_t elen = esc[0] ? strlen(esc) : take;
    if (o + elen >= cap)
      break;
    memcpy(out + o, esc[0] ? esc : s + i, elen);
    o += elen, i += take;
  }
  out[o] = '\0';
}

/* The kind of a file that is not a regular one, for messages. */
static const char *file_kind(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISLNK(m)  ? "a symbolic link"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

int ts__ckpt_open_regular(const char *what, const char *path, int *fd, int64_t *size,
                          ts_error *err) {
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (*fd < 0) {
    int e = errno;
    if (e != ENOENT && lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a link, a socket */
      return ts_error_set(err, TS_CORRUPT, "%s '%s' is %s; checkpoint files are regular files",
                          what, path, file_kind(st.st_mode));
    return ts_error_set(err, e == ENOENT ? TS_NOT_FOUND : TS_CHECKPOINT_IO,
                        "%s '%s' cannot be opened: %s", what, path, strerror(e));
  }
  int rc = TS_OK, flags;
  if (fstat(*fd, &st) != 0)
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "%s '%s' cannot be examined: %s", what, path,
                      strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = ts_error_set(err, TS_CORRUPT, "%s '%s' is %s; checkpoint files are regular files", what,
                      path, file_kind(st.st_mode));
  else if ((flags = fcntl(*fd, F_GETFL)) < 0 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "%s '%s': cannot make its reads blocking: %s", what,
                      path, strerror(errno));
  if (rc) {
    close(*fd);
    *fd = -1;
    return rc;
  }
  *size = (int64_t)st.st_size;
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * I/O helpers */

int ts__ckpt_pread_full(int fd, void *buf, size_t len, int64_t off) {
  uint8_t *p = buf;
  while (len) {
    size_t step = len > ((size_t)64 << 20) ? ((size_t)64 << 20) : len; /* 64 MiB reads */
    ssize_t r = pread(fd, p, step, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      if (r == 0)
        errno = EIO;
      return -1;
    }
    p += r, len -= (size_t)r, off += r;
  }
  return 0;
}

int ts__ckpt_pwritev_full(int fd, struct iovec *iov, int n, int64_t off) {
  while (n > 0) {
    ssize_t r = pwritev(fd, iov, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      if (r == 0)
        errno = ENOSPC;
      return -1;
    }
    off += r;
    while (n > 0 && (size_t)r >= iov->iov_len)
      r -= (ssize_t)iov->iov_len, iov++, n--;
    if (n > 0)
      iov->iov_base = (uint8_t *)iov->iov_base + r, iov->iov_len -= (size_t)r;
  }
  return 0;
}

int ts__ckpt_pwrite_full(int fd, const void *buf, size_t len, int64_t off) {
  struct iovec v = {(void *)buf, len};
  return ts__ckpt_pwritev_full(fd, &v, len ? 1 : 0, off);
}

int ts__ckpt_fsync_dir(const char *path, ts_error *err) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint: cannot sync directory '%s': %s", path,
                        strerror(e));
  }
  close(fd);
  return TS_OK;
}

void ts__ckpt_remove_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return;
  int dfd = dirfd(d);
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
      unlinkat(dfd, de->d_name, 0);
  closedir(d);
  rmdir(path);
}

int ts__ckpt_split_path(const char *dir, char *parent, size_t pcap, char *base, size_t bcap,
                        ts_error *err) {
  size_t n = dir ? strlen(dir) : 0;
  while (n > 1 && dir[n - 1] == '/')
    n--;
  if (n == 0 || n >= pcap || (n == 1 && dir[0] == '/'))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "checkpoint directory '%s': give a path below an existing directory",
                        dir ? dir : "");
  size_t slash = n;
  while (slash > 0 && dir[slash - 1] != '/')
    slash--;
  size_t blen = n - slash;
  if (blen >= bcap || (blen == 1 && dir[slash] == '.') ||
      (blen == 2 && dir[slash] == '.' && dir[slash + 1] == '.'))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "checkpoint directory '%s': the last component must name a directory "
                        "(not '.' or '..', at most %zu bytes)",
                        dir, bcap - 1);
  memcpy(base, dir + slash, blen);
  base[blen] = '\0';
  if (slash == 0) {
    snprintf(parent, pcap, ".");
  } else {
    size_t plen = slash > 1 ? slash - 1 : 1;
    memcpy(parent, dir, plen);
    parent[plen] = '\0';
  }
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * File headers */

int ts__ckpt_header_build(const ckpt_entry *e, int n, int64_t aligned_at, uint8_t **buf,
                          size_t *len, ts_error *err) {
  *buf = NULL;
  json_t *h = json_object();
  json_t *meta = json_object();
  int bad = !h || !meta;
  if (!bad)
    bad |= json_object_set_new(meta, "format", json_string(TS_CKPT_FORMAT));
  if (!bad)
    bad |= json_object_set_new(h, "__metadata__", meta), meta = NULL;
  for (int i = 0; i < n && !bad; i++) {
    json_t *o = json_object(), *shape = json_array(), *offs = json_array();
    bad |= !o || !shape || !offs;
    for (int d = 0; d < e[i].ndim && !bad; d++)
      bad |= json_array_append_new(shape, json_integer(e[i].ext[d]));
    if (!bad)
      bad |= json_array_append_new(offs, json_integer(e[i].begin)) ||
             json_array_append_new(offs, json_integer(e[i].end));
    if (!bad)
      bad |= json_object_set_new(
                 o, "dtype", json_string(e[i].table ? "U64" : ts_ckpt_dtype_name(e[i].dtype))) ||
             json_object_set_new(o, "shape", shape) ||
             json_object_set_new(o, "data_offsets", offs) || json_object_set_new(h, e[i].key, o);
    else
      json_decref(o), json_decref(shape), json_decref(offs);
  }
  char *text = bad ? NULL : json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(h);
  json_decref(meta);
  if (!text)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for a file header");
  /* the spaces: to a multiple of 8, then on to the alignment (8 + padded + aligned_at) */
  size_t tlen = strlen(text), padded = (tlen + 7) / 8 * 8;
  size_t A = (size_t)CKPT_DATA_ALIGN, at = (size_t)(aligned_at > 0 ? aligned_at : 0);
  padded += (A - (8 + padded + at) % A) % A;
  *buf = malloc(8 + padded);
  if (!*buf) {
    free(text);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for a file header");
  }
  for (int i = 0; i < 8; i++)
    (*buf)[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  memcpy(*buf + 8, text, tlen);
  memset(*buf + 8 + tlen, ' ', padded - tlen);
  *len = 8 + padded;
  free(text);
  return TS_OK;
}

#define HEADER_MAX ((int64_t)100 << 20)

int ts__ckpt_file_open(const char *dir, const char *name, ckpt_file *f, ts_error *err) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  snprintf(f->name, sizeof f->name, "%s", name);
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int rc = ts__ckpt_open_regular("checkpoint file", path, &f->fd, &f->size, err);
  if (rc)
    return rc;
  uint8_t lenb[8];
  if (f->size < 8 || ts__ckpt_pread_full(f->fd, lenb, 8, 0) != 0) {
    ts__ckpt_file_close(f);
    return ts_error_set(err, TS_CORRUPT,
                        "checkpoint file '%s': shorter than its 8-byte header "
                        "length (%lld bytes)",
                        path, (long long)f->size);
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)lenb[i] << (8 * i);
  if (hlen == 0 || hlen > (uint64_t)HEADER_MAX || (int64_t)hlen > f->size - 8) {
    ts__ckpt_file_close(f);
    return ts_error_set(err, TS_CORRUPT,
                        "checkpoint file '%s': header length %llu does not fit "
                        "the file of %lld bytes",
                        path, (unsigned long long)hlen, (long long)f->size);
  }
  char *text = malloc(hlen);
  if (!text) {
    ts__ckpt_file_close(f);
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint file '%s': no memory for its header", path);
  }
  if (ts__ckpt_pread_full(f->fd, text, hlen, 8) != 0) {
    int e = errno;
    free(text);
    ts__ckpt_file_close(f);
    return ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint file '%s': cannot read its header: %s",
                        path, strerror(e));
  }
  json_error_t je;
  f->header = json_loadb(text, hlen, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!f->header || !json_is_object(f->header)) {
    ts__ckpt_file_close(f);
    return ts_error_set(err, TS_CORRUPT,
                        "checkpoint file '%s': its header is not a JSON object "
                        "(%s)",
                        path, f->header ? "" : je.text);
  }
  f->data_start = 8 + (int64_t)hlen;
  return TS_OK;
}

void ts__ckpt_file_close(ckpt_file *f) {
  if (!f)
    return;
  if (f->fd >= 0)
    close(f->fd);
  f->fd = -1;
  json_decref(f->header);
  f->header = NULL;
}

/* Whether data_offsets [begin, end) (relative to the data section of `avail` bytes) are
 * well-formed and hold exactly `want` bytes inside it: no signed arithmetic on the file's values
 * before they are known to be ordered and in range. */
static bool range_fits(int64_t begin, int64_t end, int64_t want, int64_t avail) {
  int64_t len;
  return begin >= 0 && end >= begin && end <= avail && !__builtin_sub_overflow(end, begin, &len) &&
         len == want;
}

/* The bytes of a piece's box (elements times the element size), false on overflow. */
static bool box_bytes(const ts_box *b, ts_dtype dt, int64_t *bytes) {
  int64_t n = (int64_t)ts_dtype_size(dt);
  for (int d = 0; d < b->ndim; d++) {
    int64_t ext;
    if (__builtin_sub_overflow(b->hi[d], b->lo[d], &ext) || ext < 0 ||
        __builtin_mul_overflow(n, ext, &n))
      return false;
  }
  *bytes = n;
  return true;
}

int ts__ckpt_file_piece(const ckpt_file *f, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                        int64_t *offset, ts_error *err) {
  char bt[256];
  ts__ckpt_box_text(&p->box, bt, sizeof bt);
#define LIE(...)                                                                                   \
  do {                                                                                             \
    char why_[256];                                                                                \
    snprintf(why_, sizeof why_, __VA_ARGS__);                                                      \
    return ts_error_set(err, TS_CORRUPT,                                                           \
                        "checkpoint file '%s', piece '%s' (tensor '%s', box %s): %s", f->name,     \
                        p->key, t->name, bt, why_);                                                \
  } while (0)
  json_t *o = json_object_get(f->header, p->key);
  if (!json_is_object(o))
    LIE("the file's header has no such piece");
  const char *dt = json_string_value(json_object_get(o, "dtype"));
  ts_dtype d;
  if (!dt || ts_ckpt_dtype_parse(dt, &d) || d != t->dtype)
    LIE("the header says dtype %s, the index %s", dt ? dt : "(none)", ts_ckpt_dtype_name(t->dtype));
  json_t *shape = json_object_get(o, "shape");
  if (!json_is_array(shape) || (int)json_array_size(shape) != t->ndim)
    LIE("the header's shape has not %d dims", t->ndim);
  for (int k = 0; k < t->ndim; k++) {
    json_t *v = json_array_get(shape, (size_t)k);
    if (!json_is_integer(v) || json_integer_value(v) != p->box.hi[k] - p->box.lo[k])
      LIE("the header's shape differs from the box in dim %d", k);
  }
  json_t *offs = json_object_get(o, "data_offsets");
  json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
  if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) ||
      !json_is_integer(e))
    LIE("the header has no data_offsets [begin, end]");
  int64_t bi = json_integer_value(b), ei = json_integer_value(e), want;
  if (!box_bytes(&p->box, t->dtype, &want))
    LIE("its box holds more bytes than a file can");
  if (!range_fits(bi, ei, want, f->size - f->data_start))
    LIE("data_offsets [%lld, %lld] do not hold %lld bytes inside the data section of %lld bytes",
        (long long)bi, (long long)ei, (long long)want, (long long)(f->size - f->data_start));
#undef LIE
  *offset = f->data_start + bi;
  return TS_OK;
}

int ts__ckpt_file_table(const ckpt_file *f, const ts_ckpt_tensor *t, const ts_ckpt_piece *p,
                        int64_t *offset, ts_error *err) {
  char bt[256];
  ts__ckpt_box_text(&p->box, bt, sizeof bt);
  int64_t bytes = 0, nb = 0, tbytes = 0;
  json_t *o = json_object_get(f->header, p->block_key);
  json_t *shape = json_object_get(o, "shape"), *offs = json_object_get(o, "data_offsets");
  json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
  const char *dt = json_string_value(json_object_get(o, "dtype"));
  const char *why = NULL;
  if (!box_bytes(&p->box, t->dtype, &bytes) || p->block_bytes <= 0 ||
      __builtin_mul_overflow(nb = ckpt_blocks_count(bytes, p->block_bytes), 8, &tbytes))
    why = "the piece holds more bytes than a file can";
  else if (!json_is_object(o))
    why = "the file's header has no such entry";
  else if (!dt || strcmp(dt, "U64") != 0)
    why = "its dtype is not U64";
  else if (!json_is_array(shape) || json_array_size(shape) != 1 ||
           json_integer_value(json_array_get(shape, 0)) != nb)
    why = "its shape is not [the piece's blocks]";
  else if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) ||
           !json_is_integer(e) ||
           !range_fits(json_integer_value(b), json_integer_value(e), tbytes,
                       f->size - f->data_start))
    why = "its data_offsets do not hold 8 bytes a block inside the data section";
  if (why)
    return ts_error_set(err, TS_CORRUPT,
                        "checkpoint file '%s', piece '%s' (tensor '%s', box %s): "
                        "block checksum table '%s' (%lld blocks of %lld bytes): %s",
                        f->name, p->key, t->name, bt, p->block_key, (long long)nb,
                        (long long)p->block_bytes, why);
  *offset = f->data_start + json_integer_value(b);
  return TS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The index */

void ts_ckpt_index_destroy(ts_ckpt_index **p) {
  if (!p || !*p)
    return;
  for (int i = 0; i < (*p)->ntensors; i++) {
    free((*p)->tensors[i].attr);
    free((*p)->tensors[i].pieces);
  }
  free((*p)->tensors);
  free(*p);
  *p = NULL;
}

const ts_ckpt_tensor *ts_ckpt_index_find(const ts_ckpt_index *idx, const char *name) {
  for (int i = 0; idx && name && i < idx->ntensors; i++)
    if (strcmp(idx->tensors[i].name, name) == 0)
      return &idx->tensors[i];
  return NULL;
}

static json_t *int_array(const int64_t *v, int n) {
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_integer(v[i]))) {
      json_decref(a);
      return NULL;
    }
  return a;
}

static json_t *piece_json(const ts_ckpt_piece *p) {
  json_t *o = json_object(), *box = json_array();
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, p->xxh3);
  int bad = !o || !box;
  for (int d = 0; d < p->box.ndim && !bad; d++) {
    int64_t r[2] = {p->box.lo[d], p->box.hi[d]};
    bad |= json_array_append_new(box, int_array(r, 2));
  }
  if (!bad)
    bad |= json_object_set_new(o, "file", json_string(p->file)) ||
           json_object_set_new(o, "key", json_string(p->key)) ||
           json_object_set_new(o, "box", box) || json_object_set_new(o, "xxh3", json_string(hex));
  else
    json_decref(box);
  if (!bad && p->npcoord)
    bad |= json_object_set_new(o, "partial_coords", int_array(p->pcoord, p->npcoord));
  if (!bad && p->block_bytes > 0) {
    char bhex[17];
    snprintf(bhex, sizeof bhex, "%016" PRIx64, p->block_xxh3);
    json_t *b = json_object();
    bad |= !b || json_object_set_new(b, "key", json_string(p->block_key)) ||
           json_object_set_new(b, "bytes", json_integer(p->block_bytes)) ||
           json_object_set_new(b, "xxh3", json_string(bhex)) || json_object_set_new(o, "blocks", b);
  }
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

int ts_ckpt_index_write(const ts_ckpt_index *idx, const char *path, ts_error *err) {
  json_t *root = json_object(), *ts = json_object();
  int bad = !root || !ts;
  if (!bad)
    bad |=
        json_object_set_new(root, "format", json_string(TS_CKPT_FORMAT)) ||
        json_object_set_new(root, "version", json_integer(TS_CKPT_VERSION)) ||
        json_object_set_new(root, "checksum", json_string("xxh3-64")) ||
        json_object_set_new(root, "saved_ranks", json_integer(idx->saved_ranks)) ||
        (idx->sequence > 0 && json_object_set_new(root, "sequence", json_integer(idx->sequence))) ||
        json_object_set(root, "tensors", ts);
  for (int i = 0; i < idx->ntensors && !bad; i++) {
    const ts_ckpt_tensor *t = &idx->tensors[i];
    json_t *o = json_object(), *pieces = json_array();
    bad |= !o || !pieces;
    for (int k = 0; k < t->npieces && !bad; k++)
      bad |= json_array_append_new(pieces, piece_json(&t->pieces[k]));
    if (!bad)
      bad |= json_object_set_new(o, "dtype", json_string(ts_dtype_name(t->dtype))) ||
             json_object_set_new(o, "shape", int_array(t->shape, t->ndim)) ||
             json_object_set_new(o, "attr", json_string(t->attr)) ||
             json_object_set_new(o, "partial_kept", json_boolean(t->partial_kept)) ||
             json_object_set_new(o, "pieces", pieces) || json_object_set_new(ts, t->name, o);
    else
      json_decref(o), json_decref(pieces);
  }
  char *text = bad ? NULL : json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(ts);
  json_decref(root);
  if (!text)
    return ts_error_set(err, TS_NO_MEMORY, "checkpoint: no memory for the index");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  size_t len = strlen(text);
  int rc = TS_OK;
  if (fd < 0 || ts__ckpt_pwrite_full(fd, text, len, 0) != 0 ||
      ts__ckpt_pwrite_full(fd, "\n", 1, (int64_t)len) || fsync(fd) != 0)
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint: cannot write the index '%s': %s", path,
                      strerror(errno));
  if (fd >= 0 && close(fd) != 0 && rc == TS_OK)
    rc = ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint: cannot write the index '%s': %s", path,
                      strerror(errno));
  free(text);
  return rc;
}

/* Reading: every field checked; BAD names where. */
#define BAD(...)                                                                                   \
  do {                                                                                             \
    char why_[480];                                                                                \
    snprintf(why_, sizeof why_, __VA_ARGS__);                                                      \
    ts_error_set(err, TS_CORRUPT, "checkpoint index '%s': %s", path, why_);                        \
    goto fail;                                                                                     \
  } while (0)

static bool get_ints(json_t *a, int64_t *v, int max, int *n) {
  if (!json_is_array(a) || json_array_size(a) > (size_t)max)
    return false;
  *n = (int)json_array_size(a);
  for (int i = 0; i < *n; i++) {
    json_t *x = json_array_get(a, (size_t)i);
    if (!json_is_integer(x))
      return false;
    v[i] = json_integer_value(x);
  }
  return true;
}

static int read_piece(const char *path, const ts_ckpt_tensor *t, json_t *o, ts_ckpt_piece *p,
                      ts_error *err) {
  const char *file = json_string_value(json_object_get(o, "file"));
  const char *key = json_string_value(json_object_get(o, "key"));
  const char *hex = json_string_value(json_object_get(o, "xxh3"));
  json_t *box = json_object_get(o, "box");
  char *end = NULL;
  if (!file || !file[0] || strlen(file) >= sizeof p->file || strchr(file, '/') ||
      strcmp(file, ".") == 0 || strcmp(file, "..") == 0)
    BAD("tensor '%s': a piece without a plain file name", t->name);
  if (!key || strlen(key) >= sizeof p->key)
    BAD("tensor '%s': a piece without a key", t->name);
  if (!hex || strspn(hex, "0123456789abcdefABCDEF") != 16 ||
      (strtoull(hex, &end, 16), *end != '\0'))
    BAD("tensor '%s', piece '%s': xxh3 is not 16 hex digits", t->name, key);
  snprintf(p->file, sizeof p->file, "%s", file);
  snprintf(p->key, sizeof p->key, "%s", key);
  p->xxh3 = strtoull(hex, NULL, 16);
  if (!json_is_array(box) || (int)json_array_size(box) != t->ndim)
    BAD("tensor '%s', piece '%s': box has not %d dims", t->name, key, t->ndim);
  p->box.ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) {
    int64_t r[2];
    int n;
    if (!get_ints(json_array_get(box, (size_t)d), r, 2, &n) || n != 2 || r[0] < 0 || r[0] > r[1] ||
        r[1] > t->shape[d])
      BAD("tensor '%s', piece '%s': box dim %d is not [lo, hi] inside [0, %lld]", t->name, key, d,
          (long long)t->shape[d]);
    p->box.lo[d] = r[0], p->box.hi[d] = r[1];
  }
  json_t *pc = json_object_get(o, "partial_coords");
  if (pc && !get_ints(pc, p->pcoord, TS_MAX_MESH_DIMS, &p->npcoord))
    BAD("tensor '%s', piece '%s': partial_coords is not a list of integers", t->name, key);
  json_t *blocks = json_object_get(o, "blocks");
  if (blocks) {
    const char *bkey = json_string_value(json_object_get(blocks, "key"));
    const char *bhex = json_string_value(json_object_get(blocks, "xxh3"));
    json_t *bytes = json_object_get(blocks, "bytes");
    int64_t bb = json_integer_value(bytes);
    if (!json_is_object(blocks) || !bkey || !bkey[0] || strlen(bkey) >= sizeof p->block_key ||
        strcmp(bkey, key) == 0)
      BAD("tensor '%s', piece '%s': blocks has no key of its own", t->name, key);
    if (!json_is_integer(bytes) || bb < CKPT_BLOCK_MIN || bb > CKPT_BLOCK_MAX || (bb & (bb - 1)))
      BAD("tensor '%s', piece '%s': blocks.bytes is not a power of two from %lld to %lld", t->name,
          key, (long long)CKPT_BLOCK_MIN, (long long)CKPT_BLOCK_MAX);
    if (!bhex || strspn(bhex, "0123456789abcdefABCDEF") != 16 ||
        (strtoull(bhex, &end, 16), *end != '\0'))
      BAD("tensor '%s', piece '%s': blocks.xxh3 is not 16 hex digits", t->name, key);
    snprintf(p->block_key, sizeof p->block_key, "%s", bkey);
    p->block_bytes = bb;
    p->block_xxh3 = strtoull(bhex, NULL, 16);
  }
  return TS_OK;
fail:
  return err ? err->code : TS_CORRUPT;
}

/* The optional "sequence" of a snapshot's index (0 when absent); -1 when it is not an integer
 * from 1 to TS_CKPT_SEQUENCE_MAX. */
static int get_sequence(json_t *root, int64_t *seq) {
  json_t *v = json_object_get(root, "sequence");
  *seq = 0;
  if (!v)
    return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 1 ||
      json_integer_value(v) > TS_CKPT_SEQUENCE_MAX)
    return -1;
  *seq = json_integer_value(v);
  return 0;
}

/* The index's JSON, from a file opened as every checkpoint file is (no FIFO, no link). */
#define INDEX_MAX ((int64_t)1 << 30) /* bytes of an index.json: far beyond any real one */

static int load_root(const char *path, json_t **root, ts_error *err) {
  int fd;
  int64_t size;
  int rc = ts__ckpt_open_regular("checkpoint index", path, &fd, &size, err);
  if (rc)
    return rc;
  /* Read in one go and parsed from the buffer (jansson reads a descriptor a byte a call). */
  char *text = size <= (int64_t)INDEX_MAX ? malloc(size ? (size_t)size : 1) : NULL;
  if (!text || ts__ckpt_pread_full(fd, text, (size_t)size, 0) != 0) {
    int e = errno;
    close(fd);
    free(text);
    if (size > (int64_t)INDEX_MAX)
      return ts_error_set(err, TS_CORRUPT, "checkpoint index '%s' holds %lld bytes; at most %lld",
                          path, (long long)size, (long long)INDEX_MAX);
    return text
               ? ts_error_set(err, TS_CHECKPOINT_IO, "checkpoint index '%s': %s", path, strerror(e))
               : ts_error_set(err, TS_NO_MEMORY,
                              "checkpoint index '%s': no memory for its "
                              "%lld bytes",
                              path, (long long)size);
  }
  close(fd);
  json_error_t je;
  *root = json_loadb(text, (size_t)size, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!*root)
    return ts_error_set(err, TS_CORRUPT, "checkpoint index '%s' is not JSON: line %d: %s", path,
                        je.line, je.text);
  return TS_OK;
}

int ts_ckpt_index_sequence(const char *dir, int64_t *sequence, ts_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, TS_CKPT_INDEX);
  *sequence = 0;
  json_t *root = NULL;
  int rc = load_root(path, &root, err);
  if (rc)
    return rc;
  const char *fmt = json_string_value(json_object_get(root, "format"));
  if (!fmt || strcmp(fmt, TS_CKPT_FORMAT) != 0)
    rc = ts_error_set(err, TS_CORRUPT, "checkpoint index '%s': format is not \"%s\"", path,
                      TS_CKPT_FORMAT);
  else if (get_sequence(root, sequence))
    rc = ts_error_set(err, TS_CORRUPT,
                      "checkpoint index '%s': sequence is not an integer from "
                      "1 to 2^53",
                      path);
  json_decref(root);
  return rc;
}

int ts_ckpt_index_read(const char *dir, ts_ckpt_index **out, ts_error *err) {
  *out = NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, TS_CKPT_INDEX);
  json_t *root = NULL;
  int rc = load_root(path, &root, err);
  if (rc)
    return rc;
  ts_ckpt_index *idx = NULL;
  const char *fmt = json_string_value(json_object_get(root, "format"));
  if (!fmt || strcmp(fmt, TS_CKPT_FORMAT) != 0)
    BAD("format is not \"%s\"", TS_CKPT_FORMAT);
  if (json_integer_value(json_object_get(root, "version")) != TS_CKPT_VERSION)
    BAD("version is not %d", TS_CKPT_VERSION);
  json_t *ts = json_object_get(root, "tensors");
  if (!json_is_object(ts))
    BAD("no \"tensors\" object");
  idx = calloc(1, sizeof *idx);
  size_t nt = json_object_size(ts);
  if (!idx || !(idx->tensors = calloc(nt ? nt : 1, sizeof *idx->tensors)))
    BAD("no memory");
  idx->saved_ranks = (int)json_integer_value(json_object_get(root, "saved_ranks"));
  if (get_sequence(root, &idx->sequence))
    BAD("sequence is not an integer from 1 to 2^53");
  const char *name;
  json_t *o;
  json_object_foreach(ts, name, o) {
    ts_ckpt_tensor *t = &idx->tensors[idx->ntensors++];
    ts_error nerr;
    if (ts_name_check("the name", name, strlen(name), &nerr)) { /* the rule of every request */
      char shown[200];
      ts__ckpt_text_escape(name, shown, sizeof shown);
      BAD("tensor \"%s\": %.260s", shown, nerr.msg);
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    const char *dt = json_string_value(json_object_get(o, "dtype"));
    if (!dt || ts_dtype_parse(dt, &t->dtype, NULL))
      BAD("tensor '%s': dtype is not one of f32 f64 f16 bf16 i8 i32 i64 u8", name);
    if (!get_ints(json_object_get(o, "shape"), t->shape, TS_MAX_DIMS, &t->ndim))
      BAD("tensor '%s': shape is not a list of at most %d integers", name, TS_MAX_DIMS);
    if (ts_tensor_check(name, t->ndim, t->shape, ts_dtype_size(t->dtype), &nerr))
      BAD("%.400s", nerr.msg); /* the rule every stored tensor passes, so what loads was saved */
    const char *attr = json_string_value(json_object_get(o, "attr"));
    if (!attr || !(t->attr = strdup(attr)))
      BAD("tensor '%s': no attr text", name);
    t->partial_kept = json_is_true(json_object_get(o, "partial_kept"));
    json_t *pieces = json_object_get(o, "pieces");
    if (!json_is_array(pieces))
      BAD("tensor '%s': no pieces list", name);
    size_t np = json_array_size(pieces);
    if (np > (size_t)TS_CKPT_MAX_PIECES)
      BAD("tensor '%s': %zu pieces; a tensor has at most %lld", name, np,
          (long long)TS_CKPT_MAX_PIECES);
    if (!(t->pieces = calloc(np ? np : 1, sizeof *t->pieces)))
      BAD("no memory");
    for (size_t k = 0; k < np; k++, t->npieces++)
      if (read_piece(path, t, json_array_get(pieces, k), &t->pieces[k], err))
        goto fail;
  }
  json_decref(root);
  *out = idx;
  return TS_OK;
fail:
  json_decref(root);
  ts_ckpt_index_destroy(&idx);
  return err ? err->code : TS_CORRUPT;
}
#undef BAD

char *ts_ckpt_index_describe(const ts_ckpt_index *idx, const char *dir) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  fprintf(f, "checkpoint %s: %d tensors, saved on %d ranks, checksums xxh3-64\n", dir,
          idx->ntensors, idx->saved_ranks);
  for (int i = 0; i < idx->ntensors; i++) {
    const ts_ckpt_tensor *t = &idx->tensors[i];
    int64_t bytes = (int64_t)ts_dtype_size(t->dtype);
    fprintf(f, "%s: %s [", t->name, ts_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) {
      fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
      bytes *= t->shape[d];
    }
    fprintf(f, "] %lld bytes, %d pieces%s\n  attr: %s\n", (long long)bytes, t->npieces,
            t->partial_kept ? " (partial values kept)" : "", t->attr);
    for (int k = 0; k < t->npieces; k++) {
      char bt[256];
      ts__ckpt_box_text(&t->pieces[k].box, bt, sizeof bt);
      fprintf(f, "  %-20s %-24s box %s xxh3 %016" PRIx64, t->pieces[k].file, t->pieces[k].key, bt,
              t->pieces[k].xxh3);
      if (t->pieces[k].block_bytes > 0)
        fprintf(f, " blocks %lld", (long long)t->pieces[k].block_bytes);
      fputc('\n', f);
    }
  }
  fclose(f);
  return buf;
}
