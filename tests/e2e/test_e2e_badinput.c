/* test_e2e_badinput.c - bad input never crashes, hangs, leaks or changes a tensor.
 *
 * Daemons of 2 ranks with a 1 MiB memory limit and a TCP listener with a token. A reference
 * tensor is stored first. Then, each case on its own raw connection: frames with an oversize or
 * zero length, undecodable protobuf, unknown operations, invalid names, dtypes, shapes, layouts,
 * strategies and attributes (text and message forms), keys and checkpoint paths with control
 * characters, byte counts that do not match, chunks out
 * of order or out of bounds, unknown and duplicate names, the memory limit, gets without a
 * gather, clients that disconnect mid-frame and mid-put, TCP without or with a wrong token, and
 * the batched, checkpoint and safetensors requests (unknown and repeated names, missing files,
 * directories as files, repeated metadata keys, the internal save_finish). Each
 * case checks the status code of the answer (and whether the connection is closed). Afterwards
 * every rank still answers, the reference tensor is unchanged on every rank, no staging memory is
 * left, and SIGTERM to one daemon stops the whole job with exit code 0 and removes the sockets. */
#include <errno.h>
#include <locale.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "tshard.pb-c.h"

static tse_job job;
static int tcp_port;
static char token_path[300];

static int tcp_connect(int rank) {
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)(tcp_port + rank));
  sa.sin_addr.s_addr = htonl(0x7f000001);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    TSE_CHECK(0, "tcp connect to rank %d: %s", rank, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

/* The message of the last answer read_answer read. */
static char last_msg[1024];

/* Reads one answer; returns its status, or -1 when none came (closed or timeout). */
static int read_answer(int fd) {
  uint8_t h[4];
  if (!tse_read_full(fd, h, 4, 20000))
    return -1;
  uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  uint8_t *body = malloc(len ? len : 1);
  int status = -1;
  if (tse_read_full(fd, body, len, 20000)) {
    Tshard__Response *r = tshard__response__unpack(NULL, len, body);
    if (r) {
      status = r->status;
      snprintf(last_msg, sizeof last_msg, "%s", r->message);
      tshard__response__free_unpacked(r, NULL);
    }
  }
  free(body);
  return status;
}

/* Whether the daemon closed the connection (EOF within 10 s). */
static bool closed_by_peer(int fd) {
  uint8_t b;
  struct pollfd pfd = {fd, POLLIN, 0};
  if (poll(&pfd, 1, 10000) <= 0)
    return false;
  return recv(fd, &b, 1, 0) == 0;
}

static void send_bytes(int fd, const void *p, size_t n) {
  TSE_CHECK(send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n, "send of %zu bytes", n);
}

static void send_frame(int fd, const void *body, uint32_t len) {
  uint8_t h[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
  send_bytes(fd, h, 4);
  if (len)
    send_bytes(fd, body, len);
}

static void send_request(int fd, Tshard__Request *req) {
  size_t n = tshard__request__get_packed_size(req);
  uint8_t *b = malloc(n + 1);
  tshard__request__pack(req, b);
  send_frame(fd, b, (uint32_t)n);
  free(b);
}

/* Sends req with the bytes of `from` in its encoding replaced by `to` (same length): how a
 * string with a NUL byte gets on the wire, since protobuf-c packs C strings. */
static void send_patched(int fd, Tshard__Request *req, const char *from, const char *to, size_t n) {
  size_t len = tshard__request__get_packed_size(req);
  uint8_t *b = malloc(len + 1);
  tshard__request__pack(req, b);
  uint8_t *at = memmem(b, len, from, n);
  TSE_CHECK(at != NULL, "'%s' not in the encoding", from);
  if (at)
    memcpy(at, to, n);
  send_frame(fd, b, (uint32_t)len);
  free(b);
}

/* Reads until the daemon closes the connection (true) or deadline_ms passed (false); counts the
 * answers and keeps the status of the last one. */
static bool closed_within(int fd, int deadline_ms, int *last_status) {
  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, deadline_ms) <= 0)
      return false;
    uint8_t peek;
    ssize_t k = recv(fd, &peek, 1, MSG_PEEK);
    if (k <= 0)
      return k == 0;
    *last_status = read_answer(fd);
    if (*last_status < 0)
      return true; /* the answer was cut by the close */
  }
}

static int ping_status(int fd) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PingRequest p = TSHARD__PING_REQUEST__INIT;
  req.op_case = TSHARD__REQUEST__OP_PING;
  req.ping = &p;
  req.id = 9;
  send_request(fd, &req);
  return read_answer(fd);
}

/* The message of the answer expect() checked. */
static char expect_msg[1024];

/* One request on a fresh connection; checks the status and that the connection still serves. */
static void expect(const char *what, Tshard__Request *req, int want) {
  int fd = tse_raw_connect(&job, 0);
  if (fd < 0)
    return;
  send_request(fd, req);
  int got = read_answer(fd);
  snprintf(expect_msg, sizeof expect_msg, "%s", last_msg);
  TSE_CHECK(got == want, "%s: status %s, expected %s", what, ts_status_name(got),
            ts_status_name(want));
  TSE_CHECK(ping_status(fd) == TS_OK, "%s: the connection does not serve after the refusal", what);
  close(fd);
}

static void expect_raw_close(const char *what, const void *bytes, size_t n, int want) {
  int fd = tse_raw_connect(&job, 1);
  if (fd < 0)
    return;
  send_bytes(fd, bytes, n);
  int got = read_answer(fd);
  TSE_CHECK(got == want, "%s: status %s, expected %s", what, ts_status_name(got),
            ts_status_name(want));
  TSE_CHECK(closed_by_peer(fd), "%s: the daemon kept the connection open", what);
  close(fd);
}

/* A fake daemon: accepts one connection, answers its first request (the connect's ping) with a
 * ping answer, then reads and never answers until the client closes. */
static void *silent_daemon(void *arg) {
  int fd = accept(*(int *)arg, NULL, NULL);
  if (fd < 0)
    return NULL;
  uint8_t h[4], body[4096];
  if (tse_read_full(fd, h, 4, 10000)) {
    uint32_t len =
        (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    Tshard__Request *req = len <= sizeof body && tse_read_full(fd, body, len, 10000)
                               ? tshard__request__unpack(NULL, len, body)
                               : NULL;
    if (req) {
      Tshard__Response r = TSHARD__RESPONSE__INIT;
      Tshard__PingResult p = TSHARD__PING_RESULT__INIT;
      r.id = req->id;
      r.result_case = TSHARD__RESPONSE__RESULT_PING;
      r.ping = &p;
      size_t n = tshard__response__get_packed_size(&r);
      uint8_t out[256] = {(uint8_t)n, 0, 0, 0};
      tshard__response__pack(&r, out + 4);
      send_bytes(fd, out, n + 4);
      tshard__request__free_unpacked(req, NULL);
    }
  }
  uint8_t sink[4096];
  struct pollfd pfd = {fd, POLLIN, 0};
  while (poll(&pfd, 1, 20000) > 0 && recv(fd, sink, sizeof sink, 0) > 0) {
  }
  close(fd);
  return NULL;
}

static const char *tse_socket_path_str(const tse_job *j, int rank) {
  static char path[400];
  tse_socket_path(j, rank, path, sizeof path);
  return path;
}

static Tshard__DistAttr text_attr(const char *text) {
  Tshard__DistAttr a = TSHARD__DIST_ATTR__INIT;
  a.text = (char *)text;
  return a;
}

static void create_case(const char *what, const char *name, const char *dtype, int ndim,
                        int64_t *shape, Tshard__DistAttr *attr, const char *tag, int want) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__CreateRequest c = TSHARD__CREATE_REQUEST__INIT;
  Tshard__Layout l = TSHARD__LAYOUT__INIT;
  l.tag = (char *)tag;
  c.name = (char *)name;
  c.dtype = (char *)dtype;
  c.n_shape = (size_t)ndim;
  c.shape = shape;
  c.attr = attr;
  c.layout = &l;
  req.op_case = TSHARD__REQUEST__OP_CREATE;
  req.create = &c;
  req.id = 1;
  expect(what, &req, want);
}

static void put_case(const char *what, const char *name, uint64_t offset, uint64_t total,
                     size_t len, int want) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
  uint8_t *data = calloc(len + 1, 1);
  p.name = (char *)name;
  p.offset = offset;
  p.total_bytes = total;
  p.data.len = len;
  p.data.data = data;
  req.op_case = TSHARD__REQUEST__OP_PUT;
  req.put = &p;
  expect(what, &req, want);
  free(data);
}

/* The memory in use of a daemon, polled until it is `want` or 10 s passed: a disconnect is
 * noticed by the daemon's loop thread asynchronously. */
static uint64_t memory_settles_at(tshard_client *c, uint64_t want) {
  tshard_stats s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < 1000; i++) {
    if (tshard_stats_get(c, &s) != TS_OK || s.memory_in_use == want)
      break;
    poll(NULL, 0, 10);
  }
  return s.memory_in_use;
}

static const int64_t keep_shape[2] = {12, 10};
static const char *keep_attr = "mesh=[2] placements=[S(1)] splits={1:[7,3]}";

static void check_keep(tshard_client *c0, tshard_client *c1) {
  size_t bytes = 12 * 10 * 4;
  float *buf = malloc(bytes);
  int64_t lo[2] = {0, 0};
  TSE_OK(c0, tshard_get(c0, "keep", buf, bytes));
  tse_compare_box("keep (whole)", "f32", 5, 2, keep_shape, lo, keep_shape, buf);
  int64_t lo1[2] = {0, 7}, hi1[2] = {12, 10};
  size_t got = 0;
  TSE_OK(c1, tshard_get_slice(c1, "keep", NULL, buf, bytes, &got));
  TSE_CHECK(got == 12 * 3 * 4, "slice of rank 1 has %zu bytes", got);
  tse_compare_box("keep (rank 1 slice)", "f32", 5, 2, keep_shape, lo1, hi1, buf);
  free(buf);
}

/* The batched, checkpoint and safetensors requests refused before anything changes: unknown or
 * repeated names, bytes that do not add up, files that are not there or not files, metadata
 * keys given twice, and the internal save_finish from a client. */
static void batch_and_file_cases(void) {
  Tshard__Request req = TSHARD__REQUEST__INIT;
  req.id = 7;
  Tshard__DistAttr a_r = text_attr("mesh=[2] placements=[R]");
  Tshard__ReshardItem it = TSHARD__RESHARD_ITEM__INIT, it2 = TSHARD__RESHARD_ITEM__INIT;
  Tshard__ReshardItem *its[2] = {&it, &it2};
  Tshard__ReshardManyRequest rm = TSHARD__RESHARD_MANY_REQUEST__INIT;
  it.name = "keep", it.attr = &a_r, it2.name = "nope", it2.attr = &a_r;
  rm.n_items = 2, rm.items = its;
  req.op_case = TSHARD__REQUEST__OP_RESHARD_MANY, req.reshard_many = &rm;
  expect("reshard_many with an unknown name", &req, TS_NOT_FOUND);
  it2.name = "keep";
  expect("reshard_many naming a tensor twice", &req, TS_INVALID_ARGUMENT);
  it2.name = "__tshard put_many";
  expect("reshard_many of a reserved name", &req, TS_INVALID_ARGUMENT);

  char *names[2] = {"keep", "nope"};
  Tshard__DropManyRequest dm = TSHARD__DROP_MANY_REQUEST__INIT;
  dm.n_names = 2, dm.names = names;
  req.op_case = TSHARD__REQUEST__OP_DROP_MANY, req.drop_many = &dm;
  expect("drop_many with an unknown name", &req, TS_NOT_FOUND);

  int64_t pshape[2] = {12, 10};
  uint8_t data[100] = {0};
  Tshard__PutManyItem pi = TSHARD__PUT_MANY_ITEM__INIT, *pis[1] = {&pi};
  Tshard__PutManyRequest pm = TSHARD__PUT_MANY_REQUEST__INIT;
  pi.name = "keep", pi.dtype = "f32", pi.n_shape = 2, pi.shape = pshape;
  pm.n_items = 1, pm.items = pis, pm.total_bytes = 100, pm.data.len = 100, pm.data.data = data;
  req.op_case = TSHARD__REQUEST__OP_PUT_MANY, req.put_many = &pm;
  expect("put_many whose bytes are not the shape's", &req, TS_INVALID_ARGUMENT);
  TSE_CHECK(strstr(expect_msg, "480 bytes"), "put_many of 100 bytes answered '%s'", expect_msg);

  Tshard__GetManyItem gi = TSHARD__GET_MANY_ITEM__INIT, *gis[1] = {&gi};
  Tshard__GetManyRequest gm = TSHARD__GET_MANY_REQUEST__INIT;
  gi.name = "nope", gi.bytes = 480;
  gm.n_items = 1, gm.items = gis, gm.max_bytes = 1 << 14;
  req.op_case = TSHARD__REQUEST__OP_GET_MANY, req.get_many = &gm;
  expect("get_many of an unknown name", &req, TS_NOT_FOUND);

  Tshard__ImportSafetensorsRequest im = TSHARD__IMPORT_SAFETENSORS_REQUEST__INIT;
  im.path = "/nonexistent/model.safetensors", im.default_attr = &a_r;
  req.op_case = TSHARD__REQUEST__OP_IMPORT_SAFETENSORS, req.import_safetensors = &im;
  expect("import of a missing file", &req, TS_NOT_FOUND);
  im.path = "/tmp";
  expect("import of a directory", &req, TS_CORRUPT);
  im.path = "model\n.safetensors";
  expect("import of a path with a line end", &req, TS_INVALID_ARGUMENT);

  Tshard__StringPair m1 = TSHARD__STRING_PAIR__INIT, m2 = TSHARD__STRING_PAIR__INIT;
  Tshard__StringPair *ms[2] = {&m1, &m2};
  char *enames[1] = {"keep"};
  Tshard__ExportSafetensorsRequest ex = TSHARD__EXPORT_SAFETENSORS_REQUEST__INIT;
  m1.key = m2.key = "format", m1.value = "pt", m2.value = "np";
  ex.path = "/tmp/tse-badinput.safetensors", ex.n_names = 1, ex.names = enames;
  ex.n_metadata = 2, ex.metadata = ms;
  req.op_case = TSHARD__REQUEST__OP_EXPORT_SAFETENSORS, req.export_safetensors = &ex;
  expect("export with a metadata key twice", &req, TS_INVALID_ARGUMENT);
  struct stat st;
  TSE_CHECK(stat(ex.path, &st) != 0, "a refused export wrote %s", ex.path);

  Tshard__SaveFinishRequest sf = TSHARD__SAVE_FINISH_REQUEST__INIT;
  sf.save_id = 1;
  req.op_case = TSHARD__REQUEST__OP_SAVE_FINISH, req.save_finish = &sf;
  expect("save_finish from a client", &req, TS_INVALID_ARGUMENT);
}

int main(void) {
  snprintf(token_path, sizeof token_path, "/tmp/tse-token-%d", (int)getpid());
  FILE *tf = fopen(token_path, "w");
  fprintf(tf, "s3cret-token-for-tests\n");
  fclose(tf);
  chmod(token_path, 0600); /* the daemon refuses a token file that others may read */
  /* A port pair picked from the pid; another one if something else holds it. */
  int started = -1;
  for (int attempt = 0; attempt < 3 && started != 0; attempt++) {
    tcp_port = 20000 + (int)((getpid() * 7 + attempt * 7919) % 20000) * 2;
    char listen_url[64];
    snprintf(listen_url, sizeof listen_url, "tcp://127.0.0.1:%d", tcp_port);
    const char *extra[] = {"--memory-limit",  "1M",       "--listen",    listen_url,
                           "--token-file",    token_path, "--max-frame", "64K",
                           "--frame-timeout", "3s",       NULL};
    started = tse_start(&job, 2, extra, 120);
  }
  if (started != 0) {
    unlink(token_path);
    return 1;
  }
  tshard_client *c0 = tse_connect(&job, 0), *c1 = tse_connect(&job, 1);
  tshard_set_chunk(c0, 16384);
  tshard_set_chunk(c1, 16384);
  TSE_OK(c0, tshard_create(c0, "keep", "f32", 2, keep_shape, keep_attr, NULL, NULL));
  float ref[120];
  int64_t lo[2] = {0, 0};
  tse_fill_box("f32", 5, 2, keep_shape, lo, keep_shape, ref);
  TSE_OK(c0, tshard_put(c0, "keep", ref, sizeof ref, NULL));
  check_keep(c0, c1);
  tshard_stats base0, base1, s;
  TSE_OK(c0, tshard_stats_get(c0, &base0));
  TSE_OK(c1, tshard_stats_get(c1, &base1));

  /* Framing. */
  uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
  expect_raw_close("length 4 GiB", huge, 4, TS_LIMIT);
  uint8_t over[4] = {0x01, 0x00, 0x01, 0x00}; /* 64 KiB + 1, above --max-frame 64K */
  expect_raw_close("length above the maximum frame", over, 4, TS_LIMIT);
  uint8_t zero[4] = {0, 0, 0, 0};
  expect_raw_close("zero length", zero, 4, TS_PROTOCOL);
  {
    int fd = tse_raw_connect(&job, 0);
    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
    send_frame(fd, junk, sizeof junk);
    TSE_CHECK(read_answer(fd) == TS_PROTOCOL, "undecodable protobuf not refused as PROTOCOL");
    uint8_t truncated[] = {0x0a, 0x20, 'a', 'b'}; /* field 1 as 32 bytes, 2 given */
    send_frame(fd, truncated, sizeof truncated);
    TSE_CHECK(read_answer(fd) == TS_PROTOCOL, "truncated protobuf not refused as PROTOCOL");
    TSE_CHECK(ping_status(fd) == TS_OK, "connection does not serve after bad protobuf");
    uint8_t only_id[] = {0x08, 0x05};
    send_frame(fd, only_id, sizeof only_id);
    TSE_CHECK(read_answer(fd) == TS_UNSUPPORTED, "request without operation not UNSUPPORTED");
    uint8_t unknown_op[] = {0x08, 0x05, 0xf2, 0x01, 0x00}; /* field 30, empty message */
    send_frame(fd, unknown_op, sizeof unknown_op);
    TSE_CHECK(read_answer(fd) == TS_UNSUPPORTED, "unknown operation not UNSUPPORTED");
    close(fd);
  }

  /* Invalid creates. */
  int64_t shape[2] = {4, 6}, bad_shape[2] = {4, -6}, big[2] = {1024, 1024};
  Tshard__DistAttr a_ok = text_attr("mesh=[2] placements=[S(0)]");
  Tshard__DistAttr a_parse = text_attr("mesh=[2 placements=[S(0)]");
  Tshard__DistAttr a_rank = text_attr("mesh=[3] placements=[S(0)]");
  Tshard__DistAttr a_dim = text_attr("mesh=[2] placements=[S(5)]");
  Tshard__DistAttr a_split = text_attr("mesh=[2] placements=[S(0)] splits={0:[1,2]}");
  Tshard__DistAttr a_empty = TSHARD__DIST_ATTR__INIT;
  create_case("bad dtype", "x", "f33", 2, shape, &a_ok, "", TS_BAD_DTYPE);
  create_case("no dims", "x", "f32", 0, shape, &a_ok, "", TS_BAD_SHAPE);
  create_case("negative dim", "x", "f32", 2, bad_shape, &a_ok, "", TS_BAD_SHAPE);
  create_case("attribute text", "x", "f32", 2, shape, &a_parse, "", TS_PARSE);
  create_case("rank outside the world", "x", "f32", 2, shape, &a_rank, "", TS_BAD_ATTRIBUTE);
  create_case("shard of a missing dim", "x", "f32", 2, shape, &a_dim, "", TS_BAD_ATTRIBUTE);
  create_case("splits that do not add up", "x", "f32", 2, shape, &a_split, "", TS_BAD_ATTRIBUTE);
  create_case("empty attribute", "x", "f32", 2, shape, &a_empty, "", TS_BAD_ATTRIBUTE);
  create_case("bad layout tag", "x", "f32", 2, shape, &a_ok, "zz", TS_BAD_LAYOUT);
  create_case("layout of the wrong rank", "x", "f32", 2, shape, &a_ok, "abc", TS_BAD_LAYOUT);
  create_case("empty name", "", "f32", 2, shape, &a_ok, "", TS_INVALID_ARGUMENT);
  create_case("reserved name", "__tshard.x", "f32", 2, shape, &a_ok, "", TS_INVALID_ARGUMENT);
  char longname[300];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  create_case("long name", longname, "f32", 2, shape, &a_ok, "", TS_INVALID_ARGUMENT);
  create_case("duplicate name", "keep", "f32", 2, shape, &a_ok, "", TS_EXISTS);
  create_case("memory limit", "big", "f32", 2, big, &a_ok, "", TS_LIMIT);
  {
    int64_t huge0[3] = {0, 1LL << 40, 1LL << 40}, huge1[2] = {0, 1LL << 62};
    create_case("dims past 2^50 bytes beside a zero dim", "x", "u8", 3, huge0, &a_ok, "", TS_LIMIT);
    create_case("a dim past 2^50 beside a zero dim", "x", "u8", 2, huge1, &a_ok, "", TS_BAD_SHAPE);
  }
  {
    /* The message form: placements that do not match the mesh, an unknown kind, bad ranks. */
    int64_t mesh[1] = {2};
    int32_t ranks_bad[1] = {0};
    Tshard__Placement p = TSHARD__PLACEMENT__INIT, *pp[2] = {&p, &p};
    Tshard__DistAttr m = TSHARD__DIST_ATTR__INIT;
    m.n_mesh_shape = 1;
    m.mesh_shape = mesh;
    m.n_placements = 2;
    m.placements = pp;
    create_case("two placements for one mesh dim", "x", "f32", 2, shape, &m, "", TS_BAD_ATTRIBUTE);
    m.n_placements = 1;
    p.kind = 7;
    create_case("unknown placement kind", "x", "f32", 2, shape, &m, "", TS_BAD_ATTRIBUTE);
    p.kind = TSHARD__PLACEMENT_KIND__SHARD;
    m.n_ranks = 1;
    m.ranks = ranks_bad;
    create_case("one rank for a mesh of two", "x", "f32", 2, shape, &m, "", TS_BAD_ATTRIBUTE);
    int32_t dup[2] = {1, 1};
    m.n_ranks = 2;
    m.ranks = dup;
    create_case("repeated rank", "x", "f32", 2, shape, &m, "", TS_BAD_ATTRIBUTE);
  }

  /* The message form of an attribute, valid: it maps onto the text form and back. */
  {
    int64_t mshape[2] = {4, 2}, mesh[1] = {2}, sizes[2] = {3, 1};
    int32_t ranks[2] = {1, 0};
    Tshard__Placement p = TSHARD__PLACEMENT__INIT, *pp[1] = {&p};
    Tshard__DimSplit split = TSHARD__DIM_SPLIT__INIT, *sp[1] = {&split};
    Tshard__DistAttr m = TSHARD__DIST_ATTR__INIT;
    p.kind = TSHARD__PLACEMENT_KIND__SHARD;
    p.dim = 0;
    split.dim = 0;
    split.n_sizes = 2;
    split.sizes = sizes;
    m.n_mesh_shape = 1;
    m.mesh_shape = mesh;
    m.n_ranks = 2;
    m.ranks = ranks;
    m.n_placements = 1;
    m.placements = pp;
    m.n_splits = 1;
    m.splits = sp;
    create_case("attribute in message form", "msgform", "i32", 2, mshape, &m, "", TS_OK);
    tshard_info info;
    TSE_OK(c0, tshard_describe(c0, "msgform", &info));
    TSE_CHECK(info.attr && strstr(info.attr, "mesh=[2]@1,0") && strstr(info.attr, "S(0)") &&
                  strstr(info.attr, "splits={0:[3,1]}"),
              "message form described as '%s'", info.attr ? info.attr : "");
    bool ok = info.nranks == 2;
    for (int i = 0; i < info.nranks; i++) {
      int64_t lo = info.ranks[i].rank == 1 ? 0 : 3, hi = info.ranks[i].rank == 1 ? 3 : 4;
      ok &= info.ranks[i].lo[0] == lo && info.ranks[i].hi[0] == hi &&
            info.ranks[i].bytes == (uint64_t)((hi - lo) * 2 * 4);
    }
    TSE_CHECK(ok, "the boxes of the message-form attribute are wrong");
    tshard_info_clear(&info);
    TSE_OK(c0, tshard_drop(c0, "msgform", NULL));
  }

  /* Names: UTF-8 without control characters; a NUL inside a string on the wire is refused, not
   * cut (protobuf-c would make "keep\0evil" into "keep"). */
  create_case("name of invalid UTF-8", "bad\xff", "f32", 2, shape, &a_ok, "", TS_INVALID_ARGUMENT);
  create_case("name with an overlong UTF-8 form", "bad\xc0\xaf", "f32", 2, shape, &a_ok, "",
              TS_INVALID_ARGUMENT);
  create_case("name with a C1 control character", "bad\xc2\x85", "f32", 2, shape, &a_ok, "",
              TS_INVALID_ARGUMENT);
  create_case("name with a tab", "bad\tname", "f32", 2, shape, &a_ok, "", TS_INVALID_ARGUMENT);
  create_case("name of UTF-8 letters",
              "gr\xc3\xb6\xc3\x9f"
              "e_\xe5\x90\x8d",
              "f32", 2, shape, &a_ok, "", TS_OK);
  {
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__DropRequest d = TSHARD__DROP_REQUEST__INIT;
    d.name = "gr\xc3\xb6\xc3\x9f"
             "e_\xe5\x90\x8d";
    req.op_case = TSHARD__REQUEST__OP_DROP;
    req.drop = &d;
    expect("drop of the UTF-8 name", &req, TS_OK);
  }
  {
    int fd = tse_raw_connect(&job, 0);
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__CreateRequest c = TSHARD__CREATE_REQUEST__INIT;
    c.name = "keep#evil";
    c.dtype = "f32";
    c.n_shape = 2;
    c.shape = shape;
    c.attr = &a_ok;
    req.op_case = TSHARD__REQUEST__OP_CREATE;
    req.create = &c;
    req.id = 41;
    send_patched(fd, &req, "keep#evil", "keep\0evil", 9);
    TSE_CHECK(read_answer(fd) == TS_INVALID_ARGUMENT && strstr(last_msg, "NUL"),
              "create of 'keep\\0evil' answered '%s'", last_msg);
    /* A put to "keep\0evil" must not reach "keep" (check_keep at the end compares it). */
    Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
    uint8_t zeros[480] = {0};
    p.name = "keep#evil";
    p.total_bytes = sizeof zeros;
    p.data.len = sizeof zeros;
    p.data.data = zeros;
    req.op_case = TSHARD__REQUEST__OP_PUT;
    req.put = &p;
    req.id = 42;
    send_patched(fd, &req, "keep#evil", "keep\0evil", 9);
    TSE_CHECK(read_answer(fd) == TS_INVALID_ARGUMENT, "put to 'keep\\0evil' not refused");
    /* Any string of the request: an idempotency key of invalid UTF-8. */
    Tshard__DropRequest d = TSHARD__DROP_REQUEST__INIT;
    d.name = "nope";
    req.op_case = TSHARD__REQUEST__OP_DROP;
    req.drop = &d;
    req.idempotency_key = "key\xfe";
    send_request(fd, &req);
    TSE_CHECK(read_answer(fd) == TS_INVALID_ARGUMENT && strstr(last_msg, "idempotency_key"),
              "key of invalid UTF-8 answered '%s'", last_msg);
    /* Keys and checkpoint paths reach log lines and messages: no control characters. */
    req.idempotency_key = "key\nforged log line";
    send_request(fd, &req);
    TSE_CHECK(read_answer(fd) == TS_INVALID_ARGUMENT &&
                  strstr(last_msg, "idempotency key has a control character (U+000A) at byte 3"),
              "key with a line end answered '%s'", last_msg);
    req.idempotency_key = "";
    Tshard__SaveRequest sv = TSHARD__SAVE_REQUEST__INIT;
    static const char *const dirs[] = {"/tmp/ckpt\n00:00:00.000 tshardd[0] error: forged",
                                       "/tmp/ckpt\x1b[2J", "/tmp/ckpt\xc2\x85"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
      sv.dir = (char *)dirs[i];
      req.op_case = TSHARD__REQUEST__OP_SAVE;
      req.save = &sv;
      send_request(fd, &req);
      TSE_CHECK(read_answer(fd) == TS_INVALID_ARGUMENT &&
                    strstr(last_msg, "checkpoint directory has a control character") &&
                    strstr(last_msg, "paths are UTF-8 without control characters"),
                "save to a path with a control character (case %zu) answered '%s'", i, last_msg);
      struct stat st;
      TSE_CHECK(stat(dirs[i], &st) != 0, "save case %zu created its directory", i);
    }
    TSE_CHECK(ping_status(fd) == TS_OK, "the connection does not serve after refused strings");
    close(fd);
  }
  /* The clients check names before sending. */
  {
    TSE_CHECK(tshard_create(c0, "bad\xff", "f32", 2, shape, "mesh=[2] placements=[S(0)]", NULL,
                            NULL) == TS_INVALID_ARGUMENT,
              "the C client sent a name of invalid UTF-8");
    TSE_CHECK(tshard_drop(c0, "__tshard.x", NULL) == TS_INVALID_ARGUMENT,
              "the C client sent a reserved name");
    char **names = NULL;
    int count = 0;
    TSE_OK(c0, tshard_list(c0, &names, &count));
    TSE_CHECK(count == 1 && strcmp(names[0], "keep") == 0, "list after refused names: %d names",
              count);
    tshard_free_names(names, count);
  }
  /* A dim's splits come once, in either form of the attribute; the message names the dim. */
  {
    Tshard__DistAttr dup_text = text_attr("mesh=[2] placements=[S(0)] splits={0:[2,2],0:[1,3]}");
    create_case("splits of one dim twice (text)", "x", "f32", 2, shape, &dup_text, "", TS_PARSE);
    TSE_CHECK(strstr(expect_msg, "dim 0"), "duplicate text splits answered '%s'", expect_msg);
    int64_t mesh[1] = {2}, s1[2] = {2, 2}, s2[2] = {1, 3};
    Tshard__Placement p = TSHARD__PLACEMENT__INIT, *pp[1] = {&p};
    Tshard__DimSplit a = TSHARD__DIM_SPLIT__INIT, b = TSHARD__DIM_SPLIT__INIT, *sp[2] = {&a, &b};
    Tshard__DistAttr m = TSHARD__DIST_ATTR__INIT;
    p.kind = TSHARD__PLACEMENT_KIND__SHARD;
    a.n_sizes = b.n_sizes = 2;
    a.sizes = s1;
    b.sizes = s2;
    m.n_mesh_shape = 1;
    m.mesh_shape = mesh;
    m.n_placements = 1;
    m.placements = pp;
    m.n_splits = 2;
    m.splits = sp;
    create_case("splits of one dim twice (message)", "x", "f32", 2, shape, &m, "",
                TS_BAD_ATTRIBUTE);
    TSE_CHECK(strstr(expect_msg, "dim 0"), "duplicate message splits answered '%s'", expect_msg);
  }

  batch_and_file_cases();

  /* Byte counts and chunks. */
  put_case("put of the wrong size", "keep", 0, 100, 100, TS_BAD_SHAPE);
  put_case("chunk past the total", "keep", 400, 480, 100, TS_OUT_OF_BOUNDS);
  put_case("chunk without a start", "keep", 80, 480, 80, TS_INVALID_ARGUMENT);
  put_case("empty chunk", "keep", 0, 480, 0, TS_INVALID_ARGUMENT);
  put_case("put to an unknown name", "nope", 0, 480, 480, TS_NOT_FOUND);
  {
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__PutSliceRequest p = TSHARD__PUT_SLICE_REQUEST__INIT;
    uint8_t data[64] = {0};
    p.name = "keep";
    p.total_bytes = 64;
    p.data.len = 64;
    p.data.data = data;
    req.op_case = TSHARD__REQUEST__OP_PUT_SLICE;
    req.put_slice = &p;
    expect("slice of the wrong size", &req, TS_BAD_SHAPE);
  }
  {
    /* Chunks out of order on one connection: the put is abandoned, the tensor unchanged. */
    int fd = tse_raw_connect(&job, 0);
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
    uint8_t data[160];
    memset(data, 0x7f, sizeof data);
    p.name = "keep";
    p.total_bytes = 480;
    p.data.len = 160;
    p.data.data = data;
    req.op_case = TSHARD__REQUEST__OP_PUT;
    req.put = &p;
    send_request(fd, &req);
    TSE_CHECK(read_answer(fd) == TS_OK, "first chunk refused");
    p.offset = 320;
    send_request(fd, &req);
    TSE_CHECK(read_answer(fd) == TS_INVALID_ARGUMENT, "chunk out of order accepted");
    p.offset = 160;
    send_request(fd, &req);
    TSE_CHECK(read_answer(fd) == TS_INVALID_ARGUMENT, "chunk of an abandoned put accepted");
    close(fd);
  }
  {
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__GetRequest g = TSHARD__GET_REQUEST__INIT;
    g.name = "keep";
    g.offset = 16;
    req.op_case = TSHARD__REQUEST__OP_GET;
    req.get = &g;
    expect("get chunk without a gather", &req, TS_INVALID_ARGUMENT);
    g.offset = 0;
    g.max_bytes = 1u << 20;
    expect("get chunk larger than a frame", &req, TS_LIMIT);
    g.max_bytes = 0;
    g.name = "nope";
    expect("get of an unknown name", &req, TS_NOT_FOUND);
  }
  {
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__ReshardRequest q = TSHARD__RESHARD_REQUEST__INIT;
    Tshard__DistAttr r = text_attr("mesh=[2] placements=[S(0)]");
    Tshard__DistAttr r_bad = text_attr("mesh=[2] placements=[S(3)]");
    q.name = "keep";
    q.attr = &r;
    q.strategy = "fast";
    req.op_case = TSHARD__REQUEST__OP_RESHARD;
    req.reshard = &q;
    expect("unknown strategy", &req, TS_BAD_STRATEGY);
    TSE_CHECK(strstr(expect_msg, "'fast'") && strstr(expect_msg, "allgather"),
              "unknown strategy answered '%s'", expect_msg);
    /* A message cut at its size limit inside a UTF-8 character: only whole characters are sent
     * (the C library's UTF-8 decoder is the reference). */
    char wide[601];
    for (int i = 0; i < 300; i++)
      memcpy(wide + 2 * i, "\xc3\xa9", 2);
    wide[600] = '\0';
    q.strategy = wide;
    expect("unknown strategy of 300 UTF-8 characters", &req, TS_BAD_STRATEGY);
    TSE_CHECK(setlocale(LC_CTYPE, "C.UTF-8") != NULL, "no C.UTF-8 locale");
    TSE_CHECK(strlen(expect_msg) > 400 && mbstowcs(NULL, expect_msg, 0) != (size_t)-1,
              "the message of %zu bytes is not valid UTF-8", strlen(expect_msg));
    q.strategy = "allreduce";
    expect("strategy that does not apply", &req, TS_BAD_STRATEGY);
    q.strategy = "";
    q.attr = &r_bad;
    expect("target attribute of a missing dim", &req, TS_BAD_ATTRIBUTE);
    q.attr = &r;
    q.name = "nope";
    expect("reshard of an unknown name", &req, TS_NOT_FOUND);
    q.name = "keep";
    q.keep_source_as = "keep";
    expect("keep the source under its own name", &req, TS_INVALID_ARGUMENT);
    Tshard__DropRequest d = TSHARD__DROP_REQUEST__INIT;
    d.name = "nope";
    req.op_case = TSHARD__REQUEST__OP_DROP;
    req.drop = &d;
    expect("drop of an unknown name", &req, TS_NOT_FOUND);
    Tshard__DescribeRequest ds = TSHARD__DESCRIBE_REQUEST__INIT;
    ds.name = "nope";
    req.op_case = TSHARD__REQUEST__OP_DESCRIBE;
    req.describe = &ds;
    expect("describe of an unknown name", &req, TS_NOT_FOUND);
  }
  {
    /* Memory limit on a put: the tensor fits, but its slices here and the staging of a whole
     * put do not (400 KB + 800 KB > 1 MiB). */
    int64_t mshape[1] = {200000};
    TSE_OK(c0,
           tshard_create(c0, "mid", "f32", 1, mshape, "mesh=[2] placements=[S(0)]", NULL, NULL));
    put_case("put staging above the memory limit", "mid", 0, 800000, 1000, TS_LIMIT);
    TSE_OK(c0, tshard_drop(c0, "mid", NULL));
  }
  /* Disconnects mid-frame and mid-put free what they held. */
  {
    int fd = tse_raw_connect(&job, 0);
    uint8_t h[4] = {0x00, 0x40, 0x00, 0x00}; /* 16 KiB announced, 10 bytes sent */
    send_bytes(fd, h, 4);
    send_bytes(fd, "0123456789", 10);
    close(fd);
    fd = tse_raw_connect(&job, 0);
    Tshard__Request req = TSHARD__REQUEST__INIT;
    Tshard__PutRequest p = TSHARD__PUT_REQUEST__INIT;
    uint8_t data[240] = {0};
    p.name = "keep";
    p.total_bytes = 480;
    p.data.len = 240;
    p.data.data = data;
    req.op_case = TSHARD__REQUEST__OP_PUT;
    req.put = &p;
    send_request(fd, &req);
    TSE_CHECK(read_answer(fd) == TS_OK, "first chunk refused");
    TSE_OK(c0, tshard_stats_get(c0, &s));
    TSE_CHECK(s.memory_in_use == base0.memory_in_use + 480,
              "staging of a put in progress not counted: %llu",
              (unsigned long long)s.memory_in_use);
    close(fd); /* mid-put */
    fd = tse_raw_connect(&job, 1);
    Tshard__GetSliceRequest gs = TSHARD__GET_SLICE_REQUEST__INIT;
    Tshard__Request greq = TSHARD__REQUEST__INIT;
    gs.name = "keep";
    gs.max_bytes = 16;
    greq.op_case = TSHARD__REQUEST__OP_GET_SLICE;
    greq.get_slice = &gs;
    send_request(fd, &greq);
    TSE_CHECK(read_answer(fd) == TS_OK, "first slice chunk refused");
    close(fd); /* mid-get */
    /* A whole get whose client leaves before the gather ran: the gathered copy is dropped. */
    fd = tse_raw_connect(&job, 1);
    Tshard__GetRequest gw = TSHARD__GET_REQUEST__INIT;
    Tshard__Request wreq = TSHARD__REQUEST__INIT;
    gw.name = "keep";
    gw.max_bytes = 16;
    wreq.op_case = TSHARD__REQUEST__OP_GET;
    wreq.get = &gw;
    send_request(fd, &wreq);
    close(fd); /* mid-operation */
  }
  /* Many clients announcing maximum frames and sending them slowly: the daemon holds at most 8
   * maximum frames (--max-frame 64K here) and refuses the next one. Small frames are each
   * connection's own share: a ping still gets through while the budget is full. The half-sent
   * frames are closed after --frame-timeout (3 s here) with TIMEOUT, freeing everything. */
  {
    int fds[9];
    uint8_t h[4] = {0x00, 0x00, 0x01, 0x00}; /* exactly 64 KiB */
    for (int i = 0; i < 9; i++) {
      fds[i] = tse_raw_connect(&job, 0);
      send_bytes(fds[i], h, 4);
      send_bytes(fds[i], "partial", 7);
    }
    /* Which one the daemon refuses depends on the order it sees them: the first to answer. */
    struct pollfd pfds[9];
    for (int i = 0; i < 9; i++)
      pfds[i] = (struct pollfd){fds[i], POLLIN, 0};
    int refused = -1;
    if (poll(pfds, 9, 20000) > 0)
      for (int i = 0; i < 9 && refused < 0; i++)
        if (pfds[i].revents & POLLIN)
          refused = i;
    TSE_CHECK(refused >= 0 && read_answer(fds[refused]) == TS_LIMIT,
              "none of 9 slow maximum frames was refused");
    int pfd = tse_raw_connect(&job, 0);
    TSE_CHECK(pfd >= 0 && ping_status(pfd) == TS_OK,
              "a ping is refused while large frames fill the budget");
    if (pfd >= 0)
      close(pfd);
    int timed_out = 0;
    for (int i = 0; i < 9; i++) {
      int last = -1;
      if (i != refused && closed_within(fds[i], 60000, &last) && last == TS_TIMEOUT)
        timed_out++;
      close(fds[i]);
    }
    TSE_CHECK(timed_out == 8, "%d of 8 half-sent frames were closed with TIMEOUT", timed_out);
    tshard_client *t = NULL;
    TSE_CHECK(tshard_connect_path(tse_socket_path_str(&job, 0), 10000, &t) == TS_OK,
              "the daemon does not serve after the slow frames");
    tshard_close(&t);
  }
  /* TCP connections without the token: a frame larger than a ping is refused before anything is
   * allocated for it, so 9 of them announcing maximum frames hold nothing: a Unix ping and an
   * authenticated TCP put of large frames still work. A TCP connection that says nothing is
   * closed after --frame-timeout. */
  {
    int fds[9];
    uint8_t h[4] = {0x00, 0x00, 0x01, 0x00};
    for (int i = 0; i < 9; i++) {
      fds[i] = tcp_connect(0);
      if (fds[i] >= 0)
        send_bytes(fds[i], h, 4);
    }
    int quiet = tcp_connect(0);
    int pfd = tse_raw_connect(&job, 0);
    TSE_CHECK(pfd >= 0 && ping_status(pfd) == TS_OK,
              "a Unix ping is refused while unauthenticated TCP frames are announced");
    if (pfd >= 0)
      close(pfd);
    tshard_client *t = NULL;
    int rc = tshard_connect_tcp("127.0.0.1", tcp_port, "s3cret-token-for-tests", 20000, &t);
    TSE_CHECK(rc == TS_OK, "TCP connect with the token gave %s", tshard_status_name(rc));
    if (t) {
      int64_t n[1] = {16384};
      tshard_set_chunk(t, 30000); /* frames of ~30 KB: above the small-frame share */
      TSE_OK(t,
             tshard_create(t, "big_frames", "f32", 1, n, "mesh=[2] placements=[S(0)]", NULL, NULL));
      float *v = malloc(sizeof(float) * 16384), *back = malloc(sizeof(float) * 16384);
      int64_t lo[1] = {0};
      tse_fill_box("f32", 9, 1, n, lo, n, v);
      TSE_OK(t, tshard_put(t, "big_frames", v, sizeof(float) * 16384, NULL));
      TSE_OK(t, tshard_get(t, "big_frames", back, sizeof(float) * 16384));
      tse_compare_box("big_frames over TCP", "f32", 9, 1, n, lo, n, back);
      TSE_OK(t, tshard_drop(t, "big_frames", NULL));
      free(v);
      free(back);
      tshard_close(&t);
    }
    for (int i = 0; i < 9; i++) {
      if (fds[i] < 0)
        continue;
      int last = -1;
      TSE_CHECK(closed_within(fds[i], 20000, &last) && last == TS_AUTH,
                "an unauthenticated maximum frame was not refused with AUTH (%s)",
                ts_status_name(last));
      close(fds[i]);
    }
    if (quiet >= 0) {
      int last = -1;
      TSE_CHECK(closed_within(quiet, 60000, &last) && last == TS_TIMEOUT,
                "a TCP connection without a token was not closed after the timeout (%s)",
                ts_status_name(last));
      close(quiet);
    }
  }
  /* The client's timeout: a fake daemon that answers the connect's ping, then never again. */
  {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%.80s/silent.sock", job.dir);
    int srv = socket(AF_UNIX, SOCK_STREAM, 0);
    TSE_CHECK(bind(srv, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(srv, 4) == 0,
              "silent socket: %s", strerror(errno));
    pthread_t th;
    pthread_create(&th, NULL, silent_daemon, &srv);
    tshard_client *t = NULL;
    int rc = tshard_connect_path(sa.sun_path, 300, &t);
    TSE_CHECK(rc == TS_OK, "connect to the fake daemon gave %s", tshard_status_name(rc));
    if (t) {
      rc = tshard_ping(t, NULL, NULL);
      TSE_CHECK(rc == TS_TIMEOUT, "ping of a silent daemon gave %s", tshard_status_name(rc));
      rc = tshard_ping(t, NULL, NULL);
      TSE_CHECK(rc == TS_IO, "a call after a timeout gave %s", tshard_status_name(rc));
      tshard_close(&t); /* the fake daemon sees the close and ends */
    }
    pthread_join(th, NULL);
    close(srv);
    unlink(sa.sun_path);
  }
  /* TCP: the token is required. */
  {
    int fd = tcp_connect(0);
    if (fd >= 0) {
      TSE_CHECK(ping_status(fd) == TS_AUTH, "TCP ping without a token not refused");
      TSE_CHECK(closed_by_peer(fd), "TCP connection without a token kept open");
      close(fd);
    }
    tshard_client *t = NULL;
    int rc = tshard_connect_tcp("127.0.0.1", tcp_port + 1, "wrong-token-123", 10000, &t);
    TSE_CHECK(rc == TS_AUTH, "wrong token gave %s", tshard_status_name(rc));
    rc = tshard_connect_tcp("127.0.0.1", tcp_port + 1, "s3cret-token-for-tests", 10000, &t);
    TSE_CHECK(rc == TS_OK, "right token gave %s", tshard_status_name(rc));
    int rank = -1;
    if (t) {
      TSE_OK(t, tshard_ping(t, &rank, NULL));
      TSE_CHECK(rank == 1, "TCP port of rank 1 answered as rank %d", rank);
      tshard_close(&t);
    }
  }

  /* Still serving, nothing changed, nothing held. */
  check_keep(c0, c1);
  uint64_t m0 = memory_settles_at(c0, base0.memory_in_use);
  TSE_CHECK(m0 == base0.memory_in_use, "rank 0 holds %llu bytes, %llu before",
            (unsigned long long)m0, (unsigned long long)base0.memory_in_use);
  uint64_t m1 = memory_settles_at(c1, base1.memory_in_use);
  TSE_CHECK(m1 == base1.memory_in_use, "rank 1 holds %llu bytes, %llu before",
            (unsigned long long)m1, (unsigned long long)base1.memory_in_use);
  TSE_OK(c0, tshard_stats_get(c0, &s));
  TSE_CHECK(s.tensors == 1, "rank 0 holds %llu tensors", (unsigned long long)s.tensors);
  tshard_close(&c0);
  tshard_close(&c1);

  /* SIGTERM to one daemon stops the job cleanly. */
  TSE_CHECK(job.daemon_pids[1] > 0, "no pid for rank 1 in the log");
  if (job.daemon_pids[1] > 0)
    kill(job.daemon_pids[1], SIGTERM);
  int code = tse_wait(&job, 120);
  TSE_CHECK(code == 0, "mpirun exit status %d after SIGTERM", code);
  tse_finish(&job, code);
  unlink(token_path);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
