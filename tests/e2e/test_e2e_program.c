/* test_e2e_program.c - the C library's compiled-program calls end to end: real daemons (2 ranks)
 * driven through libtshard. A program with a slice (output formula n-2) compiled from its JSON
 * text, from a ProgramGraph message built and packed with protobuf-c
 * (tshard_program_compile_graph) and with a bucketing rule override (tshard_program_compile_ex);
 * each form runs on a replicated tensor and gives the plain loop's result (and the text and the
 * message the same bits); the reports show the formula and the overridden rule. Misuse: text and
 * graph together or neither, bytes that are not a message, malformed rule overrides, an override
 * of a group the program lacks, a malformed message (unknown op: the same error as in JSON). The
 * daemons get a private program cache. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tshard.pb-c.h"

#define NP 2
#define N 45

static tse_job job;

static const char *text =
    "{\"name\":\"diff\",\"dims\":{\"n\":{\"min\":3,\"max\":100,\"buckets\":{\"step\":50}}},"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[\"n\"]}],\"ops\":["
    "{\"out\":\"a\",\"op\":\"slice\",\"args\":[\"x\"],\"start\":[2]},"
    "{\"out\":\"b\",\"op\":\"slice\",\"args\":[\"x\"],\"stop\":[\"n-2\"]},"
    "{\"out\":\"d\",\"op\":\"sub\",\"args\":[\"a\",\"b\"]}],\"outputs\":[\"d\"]}";

/* The same program as a packed ProgramGraph (malloc'd; *len its size); op: the slices' op name. */
static void *graph_bytes(const char *op, size_t *len) {
  Tshard__ProgramGraph g = TSHARD__PROGRAM_GRAPH__INIT;
  Tshard__ProgramGraphDim dim = TSHARD__PROGRAM_GRAPH_DIM__INIT;
  Tshard__ProgramGraphInput in = TSHARD__PROGRAM_GRAPH_INPUT__INIT;
  Tshard__ProgramGraphDimRef n_ref = TSHARD__PROGRAM_GRAPH_DIM_REF__INIT,
                             two = TSHARD__PROGRAM_GRAPH_DIM_REF__INIT,
                             n2 = TSHARD__PROGRAM_GRAPH_DIM_REF__INIT;
  Tshard__ProgramGraphOp ops[3] = {TSHARD__PROGRAM_GRAPH_OP__INIT, TSHARD__PROGRAM_GRAPH_OP__INIT,
                                   TSHARD__PROGRAM_GRAPH_OP__INIT};
  Tshard__ProgramGraphArg ax = TSHARD__PROGRAM_GRAPH_ARG__INIT,
                          aa = TSHARD__PROGRAM_GRAPH_ARG__INIT,
                          ab = TSHARD__PROGRAM_GRAPH_ARG__INIT;
  g.name = "diff";
  dim.name = "n";
  dim.min = 3;
  dim.max = 100;
  dim.buckets_case = TSHARD__PROGRAM_GRAPH_DIM__BUCKETS_STEP;
  dim.step = 50;
  Tshard__ProgramGraphDim *dims[1] = {&dim};
  g.n_dims = 1;
  g.dims = dims;
  in.name = "x";
  in.dtype = "f64";
  n_ref.ref_case = TSHARD__PROGRAM_GRAPH_DIM_REF__REF_EXPR;
  n_ref.expr = "n";
  Tshard__ProgramGraphDimRef *shape[1] = {&n_ref};
  in.n_shape = 1;
  in.shape = shape;
  Tshard__ProgramGraphInput *ins[1] = {&in};
  g.n_inputs = 1;
  g.inputs = ins;
  ax.arg_case = TSHARD__PROGRAM_GRAPH_ARG__ARG_NAME;
  ax.name = "x";
  aa.arg_case = TSHARD__PROGRAM_GRAPH_ARG__ARG_NAME;
  aa.name = "a";
  ab.arg_case = TSHARD__PROGRAM_GRAPH_ARG__ARG_NAME;
  ab.name = "b";
  Tshard__ProgramGraphArg *xargs[1] = {&ax}, *dargs[2] = {&aa, &ab};
  two.ref_case = TSHARD__PROGRAM_GRAPH_DIM_REF__REF_SIZE;
  two.size = 2;
  n2.ref_case = TSHARD__PROGRAM_GRAPH_DIM_REF__REF_EXPR;
  n2.expr = "n-2";
  Tshard__ProgramGraphDimRef *start[1] = {&two}, *stop[1] = {&n2};
  ops[0].op = (char *)op;
  ops[0].out = "a";
  ops[0].n_args = 1;
  ops[0].args = xargs;
  ops[0].n_start = 1;
  ops[0].start = start;
  ops[1].op = (char *)op;
  ops[1].out = "b";
  ops[1].n_args = 1;
  ops[1].args = xargs;
  ops[1].n_stop = 1;
  ops[1].stop = stop;
  ops[2].op = "sub";
  ops[2].out = "d";
  ops[2].n_args = 2;
  ops[2].args = dargs;
  Tshard__ProgramGraphOp *opp[3] = {&ops[0], &ops[1], &ops[2]};
  g.n_ops = 3;
  g.ops = opp;
  char *outs[1] = {"d"};
  g.n_outputs = 1;
  g.outputs = outs;
  *len = tshard__program_graph__get_packed_size(&g);
  void *buf = malloc(*len + 1);
  tshard__program_graph__pack(&g, buf);
  return buf;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* Runs program id on x into a new tensor out; checks d[i] = x[i+2] - x[i] (the result in got). */
static void run_check(tshard_client *c, const char *id, const char *out, const double *x,
                      double *got) {
  tshard_program_arg in = {"x", "x", 0}, o = {"d", out, 0};
  TSE_OK(c, tshard_program_run(c, id, &in, 1, &o, 1, NULL));
  memset(got, 0, sizeof(double) * (N - 2));
  TSE_OK(c, tshard_get(c, out, got, sizeof(double) * (N - 2)));
  for (int i = 0; i < N - 2; i++)
    TSE_CHECK(got[i] == x[i + 2] - x[i], "%s[%d] = %g, want %g", out, i, got[i], x[i + 2] - x[i]);
}

int main(void) {
  char cache[] = "/tmp/tse-prog-cache-XXXXXX";
  if (!mkdtemp(cache))
    return 1;
  setenv("TSHARD_PROGRAM_CACHE", cache, 1);
  if (tse_start(&job, NP, NULL, 120))
    return 1;
  tshard_client *c = tse_connect(&job, 0);
  if (c) {
    int64_t shape[1] = {N};
    double x[N], g1[N], g2[N], g3[N];
    for (int i = 0; i < N; i++)
      x[i] = (double)((i * 7919) % 101) / 10.0;
    TSE_OK(c, tshard_create(c, "x", "f64", 1, shape, "mesh=[2] placements=[R]", NULL, NULL));
    TSE_OK(c, tshard_put(c, "x", x, sizeof x, NULL));
    char tid[32] = "", gid[32] = "", oid[32] = "";
    TSE_OK(c, tshard_program_compile(c, text, 1, tid, sizeof tid, NULL));
    size_t len = 0;
    void *bytes = graph_bytes("slice", &len);
    TSE_OK(c, tshard_program_compile_graph(c, bytes, len, 1, gid, sizeof gid, NULL));
    TSE_OK(c, tshard_program_compile_ex(c, text, NULL, 0, "n=10,20,100", 1, oid, sizeof oid, NULL));
    TSE_CHECK(strlen(gid) == 16 && strcmp(tid, gid) && strcmp(tid, oid), "ids %s %s %s", tid, gid,
              oid);
    run_check(c, tid, "d_text", x, g1);
    run_check(c, gid, "d_graph", x, g2);
    run_check(c, oid, "d_rule", x, g3);
    TSE_CHECK(memcmp(g1, g2, sizeof(double) * (N - 2)) == 0, "text and message differ");
    char *rep = NULL;
    TSE_OK(c, tshard_program_show(c, gid, &rep));
    TSE_CHECK(rep && strstr(rep, "d: f64 [n-2]") && strstr(rep, "step 50: 50 100"), "report: %s",
              rep ? rep : "");
    free(rep);
    rep = NULL;
    TSE_OK(c, tshard_program_show(c, oid, &rep));
    TSE_CHECK(rep && strstr(rep, "list: 10 20 100") && strstr(rep, "n=100 built"), "report: %s",
              rep ? rep : "");
    free(rep);

    /* misuse */
    char id[32];
    int st = tshard_program_compile_ex(c, text, bytes, len, NULL, 0, id, sizeof id, NULL);
    TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "exactly one"),
              "text and graph: %s", tshard_last_message(c));
    st = tshard_program_compile_ex(c, NULL, NULL, 0, NULL, 0, id, sizeof id, NULL);
    TSE_CHECK(st == TS_INVALID_ARGUMENT, "neither: %s", tshard_status_name(st));
    st = tshard_program_compile_graph(c, "\xff\xff\xff\xff", 4, 0, id, sizeof id, NULL);
    TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "ProgramGraph"),
              "junk bytes: %s", tshard_last_message(c));
    st = tshard_program_compile_graph(c, bytes, len, 0, id, 8, NULL);
    TSE_CHECK(st == TS_INVALID_ARGUMENT, "id too small: %s", tshard_status_name(st));
    const char *bad_rules[] = {"n", "=pow2", "n=", "n=step:", "n=step:x", "n=1,,2", "n=1,b"};
    for (size_t i = 0; i < sizeof bad_rules / sizeof bad_rules[0]; i++) {
      st = tshard_program_compile_ex(c, text, NULL, 0, bad_rules[i], 1, id, sizeof id, NULL);
      TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "buckets"),
                "rule '%s': %s %s", bad_rules[i], tshard_status_name(st), tshard_last_message(c));
    }
    st = tshard_program_compile_ex(c, text, NULL, 0, "m=pow2", 1, id, sizeof id, NULL);
    TSE_CHECK(st == TS_INVALID_ARGUMENT && strstr(tshard_last_message(c), "no dim group 'm'"),
              "unknown group: %s", tshard_last_message(c));
    st = tshard_program_compile_ex(c, text, NULL, 0, "n=step:0", 1, id, sizeof id, NULL);
    TSE_CHECK(st == TS_PARSE && strstr(tshard_last_message(c), "step 0"), "step 0: %s",
              tshard_last_message(c));
    free(bytes);
    bytes = graph_bytes("slyce", &len);
    st = tshard_program_compile_graph(c, bytes, len, 1, id, sizeof id, NULL);
    char msg_graph[512];
    snprintf(msg_graph, sizeof msg_graph, "%s", tshard_last_message(c));
    TSE_CHECK(st == TS_PARSE && strstr(msg_graph, "ops[0]: unknown op 'slyce'"), "unknown op: %s",
              msg_graph);
    free(bytes);
    TSE_CHECK(tshard_program_compile_graph(NULL, "", 0, 0, id, sizeof id, NULL) ==
                  TS_INVALID_ARGUMENT,
              "NULL client");
    tshard_close(&c);
  }
  int rc = tse_stop(&job);
  nftw(cache, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  TSE_CHECK(rc == 0, "daemons stopped: %d", rc);
  printf("%s: %d failures\n", tse_failures ? "FAIL" : "PASS", tse_failures);
  return tse_failures ? 1 : 0;
}
