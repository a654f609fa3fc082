/* bench_program.c - tshard-bench-program: compiled programs against their limits, in one run.
 *
 *   adam_fused_ms          one Adam step (w, m, v updated in place from g) over N f32 parameters
 *                          as one compiled program (median of --runs steps, one process)
 *   adam_numpy_ms          the same step in numpy under /usr/bin/python3 (median, same run)
 *   adam_memory_bound_ms   the bytes the step must move (4 arrays read, 3 written) divided by
 *                          this run's memcpy rate (median of --runs copies of one array, split
 *                          over one thread per core like the compiled step)
 *   dyn_bucketed_ms        100 runs of a dynamic-shape program (rows n in [1, 4096], pow2
 *                          buckets, all compiled ahead) over random n: total time of the runs
 *   dyn_recompile_ms       the same 100 runs compiling a static program for each new n:
 *                          (distinct n among the 100) x (median compile of --compiles real
 *                          compiles of distinct shapes) + 100 x (median run of those programs);
 *                          compiling all ~100 shapes would take minutes on a shared machine
 *   compile_ms             one bucket built from an empty cache (parse, plan, emit, gcc, dlopen;
 *                          median of the real compiles above)
 *   adamw_bf16_ms          one AdamW step of mixed-precision training over N parameters: bf16
 *                          weights and gradients, f32 master weights and moments, the shipped
 *                          deploy/examples/programs/adamw_bf16.json (one fused kernel; median)
 *   adamw_bf16_memory_bound_ms  the bytes it must move (g, master, m, v read: 14 bytes per
 *                          parameter; w, master, m, v written: 14) at this run's memcpy rate
 *   adamw_bf16_numpy_ms    the same step in numpy, in f32 on the same data (g widened from its
 *                          bf16 bits, w rounded from the master to nearest even on the bits)
 * and the ratios against the targets (adam and adamw <= 1.5 x memory bound, <= numpy / 4,
 * recompile >= 10 x bucketed). Every build goes to a fresh cache directory removed at the end. */
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ts_program.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct copy_job {
  char *dst;
  const char *src;
  size_t len;
} copy_job;

static void *copy_part(void *arg) {
  copy_job *j = arg;
  memcpy(j->dst, j->src, j->len);
  return NULL;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static char cache[256];

static tsp_program *build(const char *text, bool lazy) {
  ts_error err = {0};
  tsp_program *p = NULL;
  tsp_options o = {.cache_dir = cache, .lazy = lazy};
  if (tsp_program_create(&p, text, &o, &err) != TS_OK) {
    fprintf(stderr, "tshard-bench-program: %s\n", err.msg);
    nftw(cache, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    exit(1);
  }
  return p;
}

/* the dynamic program: centre and scale rows, then a row sum (a small layer-norm-like step) */
static void dyn_text(char *buf, size_t cap, long long n) {
  char dim[32];
  if (n > 0)
    snprintf(dim, sizeof dim, "%lld", n);
  else
    snprintf(dim, sizeof dim, "\"n\"");
  snprintf(
      buf, cap,
      "{\"name\":\"rows\",%s\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[%s,64]},"
      "{\"name\":\"s\",\"dtype\":\"f32\",\"shape\":[64]}],\"ops\":["
      "{\"out\":\"mu\",\"op\":\"mean\",\"args\":[\"x\"],\"dims\":[1],\"keepdims\":true},"
      "{\"out\":\"c\",\"op\":\"sub\",\"args\":[\"x\",\"mu\"]},"
      "{\"out\":\"y\",\"op\":\"mul\",\"args\":[\"c\",\"s\"]},"
      "{\"out\":\"t\",\"op\":\"tanh\",\"args\":[\"y\"]},"
      "{\"out\":\"r\",\"op\":\"sum\",\"args\":[\"t\"],\"dims\":[1]}],\"outputs\":[\"t\",\"r\"]}",
      n > 0 ? "" : "\"dims\":{\"n\":{\"min\":1,\"max\":4096,\"buckets\":\"pow2\"}},", dim);
}

/* The numpy side: the script's key=value line for `mode` (adam or adamw_bf16); -1 if none. */
static double numpy_ms(const char *mode, long long n, int runs) {
  double ms = -1;
  char cmd[1024], key[64];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %lld %d %s", TSP_NUMPY_SCRIPT, n, runs, mode);
  snprintf(key, sizeof key, "%s_numpy_ms=", mode);
  FILE *py = popen(cmd, "r");
  if (py) {
    char line[256];
    while (fgets(line, sizeof line, py))
      if (!strncmp(line, key, strlen(key)))
        ms = atof(line + strlen(key));
    pclose(py);
  }
  return ms;
}

static uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* One AdamW bf16 step of the shipped example over n parameters: the median of `runs` steps. */
static double adamw_bf16_ms(long long n, int runs) {
  FILE *f = fopen(TSP_EXAMPLES "/adamw_bf16.json", "rb");
  static char text[16384];
  size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f)
    fclose(f);
  text[len] = '\0';
  tsp_program *p = build(text, true); /* the one bucket the run needs, built at the warm-up */
  uint16_t *w = malloc((size_t)n * 2), *g = malloc((size_t)n * 2);
  float *master = malloc((size_t)n * 4), *m = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
  if (!w || !g || !master || !m || !v) {
    fprintf(stderr, "tshard-bench-program: out of memory for %lld parameters\n", n);
    exit(1);
  }
  for (long long i = 0; i < n; i++) {
    master[i] = (float)(i % 1000) * 1e-3f;
    w[i] = to_bf16(master[i]);
    g[i] = to_bf16((float)(i % 77) * 1e-4f - 3e-3f);
    m[i] = v[i] = 0;
  }
  float lr = 1e-3f, decay = 1e-5f;
  tsp_tensor in[7] = {{w, TS_BF16, 1, {n}},    {g, TS_BF16, 1, {n}}, {master, TS_F32, 1, {n}},
                      {m, TS_F32, 1, {n}},     {v, TS_F32, 1, {n}},  {&lr, TS_F32, 0, {0}},
                      {&decay, TS_F32, 0, {0}}};
  ts_error err = {0};
  double t[100];
  if (tsp_program_run(p, in, 7, NULL, 0, &err) != TS_OK) { /* warm-up: the build, threads */
    fprintf(stderr, "tshard-bench-program: %s\n", err.msg);
    exit(1);
  }
  for (int r = 0; r < runs; r++) {
    double t0 = now_ms();
    tsp_program_run(p, in, 7, NULL, 0, &err);
    t[r] = now_ms() - t0;
  }
  tsp_program_destroy(p);
  free(w);
  free(g);
  free(master);
  free(m);
  free(v);
  return median(t, runs);
}

static void usage(void) {
  printf("usage: tshard-bench-program [options]\n"
         "Compiled programs against their limits; prints key=value lines.\n"
         "  --params N      Adam and AdamW parameters (default 67108864 = 64M)\n"
         "  --runs R        timed Adam steps and memcpy runs, medians (default 5)\n"
         "  --compiles K    real compiles of distinct shapes for dyn_recompile_ms (default 6)\n"
         "  --help          this text\n");
}

int main(int argc, char **argv) {
  long long n = 64LL << 20;
  int runs = 5, compiles = 6;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help")) {
      usage();
      return 0;
    } else if (!strcmp(argv[i], "--params") && i + 1 < argc) {
      n = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--compiles") && i + 1 < argc) {
      compiles = atoi(argv[++i]);
    } else {
      fprintf(stderr, "tshard-bench-program: unknown option '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  if (n < 1024 || runs < 1 || runs > 100 || compiles < 1 || compiles > 50) {
    fprintf(stderr, "tshard-bench-program: --params >= 1024, --runs 1..100, --compiles 1..50\n");
    return 2;
  }
  snprintf(cache, sizeof cache, "/tmp/tshard-bench-program-XXXXXX");
  if (!mkdtemp(cache)) {
    perror("mkdtemp");
    return 1;
  }
  /* ---- Adam ---- */
  char text[8192];
  snprintf(
      text, sizeof text,
      "{\"name\":\"adam\",\"inputs\":["
      "{\"name\":\"w\",\"dtype\":\"f32\",\"shape\":[%lld]},{\"name\":\"g\",\"dtype\":\"f32\","
      "\"shape\":[%lld]},"
      "{\"name\":\"m\",\"dtype\":\"f32\",\"shape\":[%lld]},{\"name\":\"v\",\"dtype\":\"f32\","
      "\"shape\":[%lld]},"
      "{\"name\":\"lr\",\"dtype\":\"f32\",\"shape\":[]}],\"ops\":["
      "{\"out\":\"m1\",\"op\":\"mul\",\"args\":[\"m\",0.9]},"
      "{\"out\":\"g1\",\"op\":\"mul\",\"args\":[\"g\",0.1]},"
      "{\"out\":\"mn\",\"op\":\"add\",\"args\":[\"m1\",\"g1\"]},"
      "{\"out\":\"v1\",\"op\":\"mul\",\"args\":[\"v\",0.999]},"
      "{\"out\":\"gg\",\"op\":\"mul\",\"args\":[\"g\",\"g\"]},"
      "{\"out\":\"g2\",\"op\":\"mul\",\"args\":[\"gg\",0.001]},"
      "{\"out\":\"vn\",\"op\":\"add\",\"args\":[\"v1\",\"g2\"]},"
      "{\"out\":\"den\",\"op\":\"sqrt\",\"args\":[\"vn\"]},"
      "{\"out\":\"den2\",\"op\":\"add\",\"args\":[\"den\",1e-8]},"
      "{\"out\":\"upd\",\"op\":\"div\",\"args\":[\"mn\",\"den2\"]},"
      "{\"out\":\"step\",\"op\":\"mul\",\"args\":[\"upd\",\"lr\"]},"
      "{\"out\":\"wn\",\"op\":\"sub\",\"args\":[\"w\",\"step\"]},"
      "{\"op\":\"assign\",\"args\":[\"w\",\"wn\"]},{\"op\":\"assign\",\"args\":[\"m\",\"mn\"]},"
      "{\"op\":\"assign\",\"args\":[\"v\",\"vn\"]}],\"outputs\":[]}",
      n, n, n, n);
  tsp_program *adam = build(text, false);
  size_t bytes = (size_t)n * 4;
  float *w = malloc(bytes), *g = malloc(bytes), *m = malloc(bytes), *v = malloc(bytes);
  if (!w || !g || !m || !v) {
    fprintf(stderr, "tshard-bench-program: out of memory for %lld parameters\n", n);
    return 1;
  }
  for (long long i = 0; i < n; i++) {
    w[i] = (float)(i % 1000) * 1e-3f;
    g[i] = (float)(i % 77) * 1e-4f - 3e-3f;
    m[i] = 0;
    v[i] = 0;
  }
  float lr = 1e-3f;
  tsp_tensor in[5] = {{w, TS_F32, 1, {n}},
                      {g, TS_F32, 1, {n}},
                      {m, TS_F32, 1, {n}},
                      {v, TS_F32, 1, {n}},
                      {&lr, TS_F32, 0, {0}}};
  ts_error err = {0};
  double t[100];
  if (tsp_program_run(adam, in, 5, NULL, 0, &err) != TS_OK) { /* warm-up (threads start) */
    fprintf(stderr, "tshard-bench-program: %s\n", err.msg);
    return 1;
  }
  for (int r = 0; r < runs; r++) {
    double t0 = now_ms();
    tsp_program_run(adam, in, 5, NULL, 0, &err);
    t[r] = now_ms() - t0;
  }
  double adam_ms = median(t, runs);
  tsp_program_destroy(adam);
  /* memcpy rate: one array into another (read + write), split over as many threads as the
   * compiled step uses (one per core), so the bound is the machine's, not one core's */
  int nth = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nth < 1 || nth > 64)
    nth = nth < 1 ? 1 : 64;
  for (int r = 0; r < runs; r++) {
    copy_job jobs[64];
    pthread_t th[64];
    size_t chunk = (bytes / (size_t)nth + 63) & ~(size_t)63;
    double t0 = now_ms();
    for (int k = 0; k < nth; k++) {
      size_t off = (size_t)k * chunk < bytes ? (size_t)k * chunk : bytes;
      size_t len = off + chunk <= bytes ? chunk : bytes - off;
      jobs[k] = (copy_job){(char *)m + off, (char *)g + off, len};
      if (k > 0)
        pthread_create(&th[k], NULL, copy_part, &jobs[k]);
    }
    copy_part(&jobs[0]);
    for (int k = 1; k < nth; k++)
      pthread_join(th[k], NULL);
    t[r] = now_ms() - t0;
  }
  double copy_ms = median(t, runs);
  double rate = 2.0 * (double)bytes / copy_ms; /* bytes per ms */
  double bound_ms = 7.0 * (double)bytes / rate;
  free(w);
  free(g);
  free(m);
  free(v);
  double adam_numpy = numpy_ms("adam", n, runs);
  /* ---- AdamW, bf16 weights with f32 master weights and moments ---- */
  double adamw_ms = adamw_bf16_ms(n, runs);
  double adamw_bound_ms = 28.0 * (double)n / rate;
  double adamw_numpy = numpy_ms("adamw_bf16", n, runs);
  /* ---- dynamic shapes ---- */
  dyn_text(text, sizeof text, 0);
  double t0 = now_ms();
  tsp_program *dyn = build(text, false);
  double ahead_ms = now_ms() - t0;
  int nb = tsp_program_n_buckets(dyn);
  unsigned seed = 12345;
  long long sizes[100];
  for (int i = 0; i < 100; i++)
    sizes[i] = 1 + (long long)(rand_r(&seed) % 4096);
  float *x = malloc(4096 * 64 * sizeof(float)), sc[64];
  for (int i = 0; i < 4096 * 64; i++)
    x[i] = (float)(i % 97) * 0.01f;
  for (int i = 0; i < 64; i++)
    sc[i] = 1.0f + (float)i * 0.01f;
  double bucketed = 0;
  for (int i = 0; i < 100; i++) {
    tsp_tensor din[2] = {{x, TS_F32, 2, {sizes[i], 64}}, {sc, TS_F32, 1, {64}}};
    tsp_tensor out[2];
    t0 = now_ms();
    if (tsp_program_run(dyn, din, 2, out, 2, &err) != TS_OK) {
      fprintf(stderr, "tshard-bench-program: %s\n", err.msg);
      return 1;
    }
    bucketed += now_ms() - t0;
    ts_pool_free(out[0].data);
    ts_pool_free(out[1].data);
  }
  tsp_program_destroy(dyn);
  /* recompiling per shape: real compiles of the first distinct shapes */
  int distinct = 0;
  for (int i = 0; i < 100; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++)
      seen = seen || sizes[j] == sizes[i];
    distinct += !seen;
  }
  double ct[50], rt[50];
  for (int k = 0; k < compiles; k++) {
    dyn_text(text, sizeof text, sizes[k]);
    t0 = now_ms();
    tsp_program *s = build(text, false);
    ct[k] = now_ms() - t0;
    tsp_tensor din[2] = {{x, TS_F32, 2, {sizes[k], 64}}, {sc, TS_F32, 1, {64}}};
    tsp_tensor out[2];
    t0 = now_ms();
    tsp_program_run(s, din, 2, out, 2, &err);
    rt[k] = now_ms() - t0;
    ts_pool_free(out[0].data);
    ts_pool_free(out[1].data);
    tsp_program_destroy(s);
  }
  double compile_ms = median(ct, compiles);
  double recompile_ms = distinct * compile_ms + 100 * median(rt, compiles);
  free(x);
  nftw(cache, rm_entry, 16, FTW_DEPTH | FTW_PHYS);

  printf("params=%lld\n", n);
  printf("adam_fused_ms=%.3f\n", adam_ms);
  printf("adam_numpy_ms=%.3f\n", adam_numpy);
  printf("adam_memory_bound_ms=%.3f\n", bound_ms);
  printf("memcpy_gb_per_s=%.2f\n", rate / 1e6);
  printf("memcpy_threads=%d\n", nth);
  printf("adam_vs_memory_bound=%.3f\n", adam_ms / bound_ms);
  printf("adam_numpy_speedup=%.2f\n", adam_numpy > 0 ? adam_numpy / adam_ms : -1.0);
  printf("adamw_bf16_ms=%.3f\n", adamw_ms);
  printf("adamw_bf16_memory_bound_ms=%.3f\n", adamw_bound_ms);
  printf("adamw_bf16_vs_bound=%.3f\n", adamw_ms / adamw_bound_ms);
  printf("adamw_bf16_numpy_ms=%.3f\n", adamw_numpy);
  printf("adamw_bf16_numpy_speedup=%.2f\n", adamw_numpy > 0 ? adamw_numpy / adamw_ms : -1.0);
  printf("dyn_buckets=%d\n", nb);
  printf("dyn_compile_ahead_ms=%.1f\n", ahead_ms);
  printf("dyn_bucketed_ms=%.3f\n", bucketed);
  printf("dyn_recompile_distinct_shapes=%d\n", distinct);
  printf("dyn_recompile_compiles_measured=%d\n", compiles);
  printf("dyn_recompile_ms=%.3f\n", recompile_ms);
  printf("dyn_recompile_vs_bucketed=%.1f\n", recompile_ms / bucketed);
  printf("compile_ms=%.1f\n", compile_ms);
  printf("target_adam_memory_bound_met=%d\n", adam_ms <= 1.5 * bound_ms);
  printf("target_adam_numpy_met=%d\n", adam_numpy > 0 && adam_ms <= adam_numpy / 4);
  printf("target_adamw_bf16_memory_bound_met=%d\n", adamw_ms <= 1.5 * adamw_bound_ms);
  printf("target_adamw_bf16_numpy_met=%d\n", adamw_numpy > 0 && adamw_ms <= adamw_numpy / 4);
  printf("target_dyn_met=%d\n", recompile_ms >= 10 * bucketed);
  return 0;
}
