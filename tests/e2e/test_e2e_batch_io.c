/* test_e2e_batch_io.c - tshard_put_many, tshard_get_many and tshard_reshard_many_results end to
 * end: real daemons (3 ranks on this node, --batch-max-tensors 16, --batch-max-bytes 1M) driven
 * through libtshard, every tensor compared with the harness's reference data.
 *
 * Checks: a batch of tensors of every dtype under row, column, ragged (an empty part),
 * replicated, blocked-layout and partial attributes put with one tshard_put_many and read back
 * with one tshard_get_many, one answer each on the direct path (the client's memory), and equal
 * to single gets; the same through the shared segment (TSHARD_DIRECT=0) and in frames
 * (tshard_set_shm off, chunks smaller than the batch); a converting put_many from f64 data; bad
 * input (a name twice, an unknown tensor, a declared dtype or shape that does not fit, bytes that
 * do not fit, over each limit) refused naming the tensor or the flag, with every tensor as it
 * was; and tshard_reshard_many_results: one result per tensor in order, each strategy the one
 * tshard_plan chooses for that tensor and target, bytes moved where the data moves, NULL results
 * accepted, and the data intact after the reshard. */
#include <string.h>

#include "harness.h"

#define NT 8

typedef struct tensor {
  const char *name, *dtype, *attr, *tag;
  int ndim;
  int64_t shape[2];
} tensor;

static const tensor T[NT] = {
    {"w.f32", "f32", "mesh=[3] placements=[S(0)]", NULL, 2, {30, 17}},
    {"w.f64", "f64", "mesh=[3] placements=[S(1)]", NULL, 2, {9, 40}},
    {"b.i32", "i32", "mesh=[3] placements=[S(0)] splits={0:[0,50,7]}", NULL, 1, {57, 0}},
    {"b.u8", "u8", "mesh=[3] placements=[R]", NULL, 1, {333, 0}},
    {"w.bf16", "bf16", "mesh=[2]@2,0 placements=[S(1)]", NULL, 2, {12, 10}},
    {"w.blocked", "f32", "mesh=[3] placements=[S(1)]", "Ba4b", 2, {20, 30}},
    {"w.partial", "f16", "mesh=[3] placements=[P(sum)]", NULL, 2, {6, 5}},
    {"b.i8", "i8", "mesh=[3]@1,2,0 placements=[S(0)]", NULL, 1, {100, 0}},
};

static size_t bytes_of(const tensor *t) {
  return (size_t)tse_numel(t->ndim, t->shape) * tse_dtype_size(t->dtype);
}

/* Operations the client's daemon answered. */
static uint64_t ops(tshard_client *c) {
  tshard_stats s;
  memset(&s, 0, sizeof s);
  TSE_OK(c, tshard_stats_get(c, &s));
  return s.operations;
}

/* The batch's data for seed, and buffers to read it back into. */
static void make(uint64_t seed, void **data, void **back) {
  int64_t lo[2] = {0, 0};
  for (int i = 0; i < NT; i++) {
    data[i] = malloc(bytes_of(&T[i]));
    back[i] = malloc(bytes_of(&T[i]));
    tse_fill_box(T[i].dtype, seed + (uint64_t)i, T[i].ndim, T[i].shape, lo, T[i].shape, data[i]);
    memset(back[i], 0xa5, bytes_of(&T[i]));
  }
}

static void release(void **data, void **back) {
  for (int i = 0; i < NT; i++) {
    free(data[i]);
    free(back[i]);
  }
}

/* Every tensor equals the reference of seed: through one get_many, and through single gets. */
static void verify(tshard_client *c, uint64_t seed, const char *what) {
  void *data[NT], *back[NT];
  make(seed, data, back);
  tshard_get_item g[NT];
  for (int i = 0; i < NT; i++)
    g[i] = (tshard_get_item){.name = T[i].name, .buf = back[i], .bytes = bytes_of(&T[i])};
  TSE_OK(c, tshard_get_many(c, NT, g));
  int64_t lo[2] = {0, 0};
  for (int i = 0; i < NT; i++) {
    TSE_CHECK(tse_compare_box(T[i].name, T[i].dtype, seed + (uint64_t)i, T[i].ndim, T[i].shape, lo,
                              T[i].shape, back[i]) == 0,
              "%s: get_many of '%s'", what, T[i].name);
    memset(back[i], 0x5a, bytes_of(&T[i]));
    TSE_OK(c, tshard_get(c, T[i].name, back[i], bytes_of(&T[i])));
    TSE_CHECK(tse_compare_box(T[i].name, T[i].dtype, seed + (uint64_t)i, T[i].ndim, T[i].shape, lo,
                              T[i].shape, back[i]) == 0,
              "%s: single get of '%s'", what, T[i].name);
  }
  release(data, back);
}

/* put_many of seed's data, declared, through c; the answers it took. */
static uint64_t put_seed(tshard_client *c, uint64_t seed) {
  void *data[NT], *back[NT];
  make(seed, data, back);
  tshard_put_item p[NT];
  for (int i = 0; i < NT; i++)
    p[i] = (tshard_put_item){.name = T[i].name,
                             .data = data[i],
                             .bytes = bytes_of(&T[i]),
                             .dtype = T[i].dtype,
                             .ndim = T[i].ndim,
                             .shape = T[i].shape};
  uint64_t before = ops(c);
  TSE_OK(c, tshard_put_many(c, NT, p, NULL, 0));
  uint64_t answers = ops(c) - before - 1;
  release(data, back);
  return answers;
}

static void paths(tshard_client **cl, const tse_job *job) {
  /* the client's memory: one request and one answer each way */
  TSE_CHECK(put_seed(cl[1], 10) == 1, "direct put_many took more than one answer");
  uint64_t before = ops(cl[2]);
  verify(cl[2], 10, "direct");
  uint64_t got = ops(cl[2]) - before - 1 - NT; /* less the single gets */
  TSE_CHECK(got == 1, "direct get_many took %llu answers", (unsigned long long)got);
  /* the shared segment */
  setenv("TSHARD_DIRECT", "0", 1);
  tshard_client *seg = tse_connect(job, 0);
  unsetenv("TSHARD_DIRECT");
  if (seg) {
    put_seed(seg, 20);
    verify(seg, 20, "segment");
    tshard_close(&seg);
  }
  /* frames, in chunks smaller than the batch */
  tshard_client *fr = tse_connect(job, 2);
  if (fr) {
    TSE_OK(fr, tshard_set_shm(fr, 0));
    tshard_set_chunk(fr, 700);
    put_seed(fr, 30);
    verify(fr, 30, "frames");
    tshard_close(&fr);
  }
}

/* f64 data converted into every tensor's dtype (the reference values are exact in each). */
static void convert(tshard_client *c) {
  void *data[NT];
  tshard_put_item p[NT];
  int64_t lo[2] = {0, 0};
  for (int i = 0; i < NT; i++) {
    size_t n = (size_t)tse_numel(T[i].ndim, T[i].shape);
    data[i] = malloc(n * 8);
    tse_fill_box("f64", 40 + (uint64_t)i, T[i].ndim, T[i].shape, lo, T[i].shape, data[i]);
    p[i] = (tshard_put_item){.name = T[i].name,
                             .data = data[i],
                             .bytes = n * 8,
                             .dtype = "f64",
                             .ndim = T[i].ndim,
                             .shape = T[i].shape};
  }
  TSE_OK(c, tshard_put_many(c, NT, p, NULL, TSHARD_PUT_CONVERT));
  verify(c, 40, "converted");
  for (int i = 0; i < NT; i++)
    free(data[i]);
}

/* A refused put_many or get_many: the status, the message naming `needle`, nothing changed. */
static void refused(tshard_client *c, int rc, int want, const char *needle, const char *what,
                    uint64_t seed) {
  const char *msg = tshard_last_message(c);
  TSE_CHECK(rc == want && strstr(msg, needle), "%s: %s (want %s) '%s', not naming %s", what,
            tshard_status_name(rc), tshard_status_name(want), msg, needle);
  verify(c, seed, what);
}

static void bad_input(tshard_client *c) {
  void *data[NT], *back[NT];
  make(50, data, back);
  tshard_put_item p[NT + 1];
  tshard_get_item g[NT + 1];
  for (int i = 0; i < NT; i++) {
    p[i] = (tshard_put_item){.name = T[i].name,
                             .data = data[i],
                             .bytes = bytes_of(&T[i]),
                             .dtype = T[i].dtype,
                             .ndim = T[i].ndim,
                             .shape = T[i].shape};
    g[i] = (tshard_get_item){.name = T[i].name, .buf = back[i], .bytes = bytes_of(&T[i])};
  }
  p[NT] = p[2];
  g[NT] = g[5];
  refused(c, tshard_put_many(c, NT + 1, p, NULL, 0), TS_INVALID_ARGUMENT, "'b.i32' twice",
          "put_many twice", 10);
  refused(c, tshard_get_many(c, NT + 1, g), TS_INVALID_ARGUMENT, "'w.blocked' twice",
          "get_many twice", 10);
  p[NT].name = g[NT].name = "nope";
  refused(c, tshard_put_many(c, NT + 1, p, NULL, 0), TS_NOT_FOUND, "'nope'", "put_many unknown",
          10);
  refused(c, tshard_get_many(c, NT + 1, g), TS_NOT_FOUND, "'nope'", "get_many unknown", 10);
  tshard_put_item q = p[3];
  p[3].dtype = "i8"; /* u8 data declared as i8 */
  refused(c, tshard_put_many(c, NT, p, NULL, 0), TS_BAD_DTYPE, "'b.u8'", "declared dtype", 10);
  p[3] = q;
  int64_t wrong[2] = {17, 30};
  p[0].shape = wrong;
  refused(c, tshard_put_many(c, NT, p, NULL, 0), TS_BAD_SHAPE, "'w.f32'", "declared shape", 10);
  p[0] = (tshard_put_item){.name = T[0].name, .data = data[0], .bytes = bytes_of(&T[0]) - 4};
  refused(c, tshard_put_many(c, NT, p, NULL, 0), TS_BAD_SHAPE, "'w.f32'", "undeclared bytes", 10);
  g[1].bytes -= 8;
  refused(c, tshard_get_many(c, NT, g), TS_BAD_SHAPE, "'w.f64'", "get_many bytes", 10);
  release(data, back);
  /* over the limits: 17 tensors, and 1M + 1 bytes */
  tshard_put_item many[17];
  tshard_get_item gmany[17];
  char names[17][16];
  float one = 1;
  for (int i = 0; i < 17; i++) {
    snprintf(names[i], sizeof names[i], "x%d", i);
    many[i] = (tshard_put_item){.name = names[i], .data = &one, .bytes = 4};
    gmany[i] = (tshard_get_item){.name = names[i], .buf = &one, .bytes = 4};
  }
  refused(c, tshard_put_many(c, 17, many, NULL, 0), TS_LIMIT, "--batch-max-tensors",
          "put_many tensors", 10);
  refused(c, tshard_get_many(c, 17, gmany), TS_LIMIT, "--batch-max-tensors", "get_many tensors",
          10);
  int64_t big_shape = (1 << 20) + 1 - 600;
  uint8_t *big = calloc((size_t)big_shape, 1);
  TSE_OK(c, tshard_create(c, "big", "u8", 1, &big_shape, "mesh=[3] placements=[R]", NULL, NULL));
  void *d0 = malloc(bytes_of(&T[0])), *d1 = malloc(bytes_of(&T[0]));
  tshard_put_item pb[2] = {{.name = "big", .data = big, .bytes = (size_t)big_shape},
                           {.name = T[0].name, .data = d0, .bytes = bytes_of(&T[0])}};
  tshard_get_item gb[2] = {{.name = T[0].name, .buf = d1, .bytes = bytes_of(&T[0])},
                           {.name = "big", .buf = big, .bytes = (size_t)big_shape}};
  memset(d0, 0, bytes_of(&T[0]));
  refused(c, tshard_put_many(c, 2, pb, NULL, 0), TS_LIMIT, "--batch-max-bytes", "put_many bytes",
          10);
  refused(c, tshard_get_many(c, 2, gb), TS_LIMIT, "--batch-max-bytes", "get_many bytes", 10);
  TSE_OK(c, tshard_drop(c, "big", NULL));
  free(big), free(d0), free(d1);
}

/* The strategy tshard_plan chooses for name to attr. */
static void planned(tshard_client *c, const char *name, const char *attr, char *out, size_t cap) {
  char *explain = NULL;
  TSE_OK(c, tshard_plan(c, name, attr, NULL, &explain, out, cap));
  free(explain);
}

static void results(tshard_client *c) {
  const char *names[NT], *attrs[NT];
  char want[NT][32];
  for (int i = 0; i < NT; i++) {
    names[i] = T[i].name;
    attrs[i] = i % 2 ? "mesh=[3] placements=[R]" : "mesh=[3]@1,2,0 placements=[S(0)]";
    planned(c, names[i], attrs[i], want[i], sizeof want[i]);
  }
  tshard_reshard_item_result res[NT];
  memset(res, 0x5a, sizeof res);
  TSE_OK(c, tshard_reshard_many_results(c, NT, names, attrs, NULL, res));
  for (int i = 0; i < NT; i++) {
    TSE_CHECK(strcmp(res[i].name, names[i]) == 0, "result %d names '%s', want '%s'", i, res[i].name,
              names[i]);
    TSE_CHECK(strcmp(res[i].strategy, want[i]) == 0, "'%s' ran %s; the planner chooses %s",
              names[i], res[i].strategy, want[i]);
  }
  /* w.f32 S(0) over 0,1,2 -> S(0) over 1,2,0: rank 1 (answering) gives rows 10-19, takes 0-9 */
  TSE_CHECK(res[0].bytes_sent > 0 && res[0].bytes_received > 0, "w.f32 moved %llu/%llu bytes",
            (unsigned long long)res[0].bytes_sent, (unsigned long long)res[0].bytes_received);
  TSE_CHECK(res[3].bytes_sent == 0 && res[3].bytes_received == 0,
            "b.u8 replicated to replicated moved %llu/%llu bytes",
            (unsigned long long)res[3].bytes_sent, (unsigned long long)res[3].bytes_received);
  verify(c, 10, "after reshard_many");
  TSE_OK(c, tshard_reshard_many_results(c, NT, names, attrs, NULL, NULL));
  verify(c, 10, "after reshard_many without results");
}

int main(void) {
  unsetenv("TSHARD_DIRECT");
  unsetenv("TSHARD_SHM");
  const char *flags[] = {"--batch-max-tensors", "16", "--batch-max-bytes", "1M", NULL};
  tse_job job;
  if (tse_start(&job, 3, flags, 120) != 0)
    return 1;
  tshard_client *cl[3] = {tse_connect(&job, 0), tse_connect(&job, 1), tse_connect(&job, 2)};
  if (!cl[0] || !cl[1] || !cl[2]) {
    tse_stop(&job);
    return 1;
  }
  for (int i = 0; i < NT; i++)
    TSE_OK(cl[0], tshard_create(cl[0], T[i].name, T[i].dtype, T[i].ndim, T[i].shape, T[i].attr,
                                T[i].tag, NULL));
  paths(cl, &job);
  convert(cl[1]);
  TSE_CHECK(put_seed(cl[0], 10) == 1, "put_many again");
  bad_input(cl[2]);
  results(cl[1]);
  for (int r = 0; r < 3; r++)
    tshard_close(&cl[r]);
  TSE_CHECK(tse_stop(&job) == 0, "the daemons exit 0 (no sanitizer report, no leak)");
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
