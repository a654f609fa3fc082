/* build.c - from C text to loaded code: the disk cache (a directory of shared objects named by an
 * XXH3-128 hash of the emitted C text - itself a function of the program, the bucket's values and
 * the dtypes - with the compiler, its version and the flags), the compiler run (its messages
 * captured for the error), the atomic move into the cache, and dlopen. A cached file that fails
 * to load is removed and compiled again. The OpenMP runtime is loaded once and kept (with
 * OMP_WAIT_POLICY=PASSIVE unless set: ranks share the cores). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "internal.h"

static int mkdir_p(const char *path) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *s = buf + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
      return -1;
    *s = '/';
  }
  return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

static char *dupenv(const char *name) {
  const char *v = getenv(name);
  return v && *v ? strdup(v) : NULL;
}

/* Runs `cmd` with the shell, output (stdout and stderr) into out. Returns the exit status. */
static int run_capture(const char *cmd, char *out, size_t cap) {
  FILE *f = popen(cmd, "r");
  if (!f) {
    snprintf(out, cap, "cannot run: %s", strerror(errno));
    return -1;
  }
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  char sink[256];
  while (fread(sink, 1, sizeof sink, f) > 0)
    ;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int tsp_build_init(tsp_program *p, const tsp_options *o, ts_error *err) {
  char buf[512];
  /* The OpenMP runtime the builds use stays loaded: unloading it with the last build while its
   * worker threads sleep would crash them. */
  static void *gomp;
  /* Idle OpenMP workers sleep instead of spinning: ranks share the cores. */
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  if (!__atomic_load_n(&gomp, __ATOMIC_ACQUIRE))
    __atomic_store_n(&gomp, dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE),
                     __ATOMIC_RELEASE);
  p->cc = o && o->cc ? strdup(o->cc) : dupenv("TSHARD_PROGRAM_CC");
  if (!p->cc)
    p->cc = strdup("gcc");
  const char *base = o && o->cflags ? o->cflags : TSP_DEFAULT_CFLAGS;
  const char *extra = o && o->extra_cflags ? o->extra_cflags : "";
  snprintf(buf, sizeof buf, "%s%s%s", base, *extra ? " " : "", extra);
  p->cflags = strdup(buf);
  if (o && o->cache_dir) {
    p->cache_dir = strdup(o->cache_dir);
  } else if ((p->cache_dir = dupenv("TSHARD_PROGRAM_CACHE")) == NULL) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
      snprintf(buf, sizeof buf, "%s/tshard/programs", xdg);
    else if (home && *home)
      snprintf(buf, sizeof buf, "%s/.cache/tshard/programs", home);
    else
      snprintf(buf, sizeof buf, "/tmp/tshard-programs-%d", (int)getuid());
    p->cache_dir = strdup(buf);
  }
  if (!p->cc || !p->cflags || !p->cache_dir)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  if (strlen(p->cache_dir) > 400 || mkdir_p(p->cache_dir) != 0)
    return ts_error_set(err, TS_IO, "program cache directory '%s' cannot be created: %s "
                        "(set TSHARD_PROGRAM_CACHE or the cache_dir option)", p->cache_dir,
                        strerror(errno));
  /* the compiler's identity, part of the cache key */
  char cmd[1024], out[512];
  snprintf(cmd, sizeof cmd, "'%s' --version 2>&1", p->cc);
  if (strchr(p->cc, '\'') || run_capture(cmd, out, sizeof out) != 0)
    snprintf(out, sizeof out, "unknown compiler");
  char *nl = strchr(out, '\n');
  if (nl)
    *nl = '\0';
  p->cc_version = strdup(out);
  return p->cc_version ? TS_OK : ts_error_set(err, TS_NO_MEMORY, "out of memory");
}

void tsp_unload_bucket(tsp_bucket *b) {
  if (b->dl)
    dlclose(b->dl);
  b->dl = NULL;
  b->fn = NULL;
  b->built = false;
  tsp_plan_free(b);
}

static int load(tsp_bucket *b, ts_error *err) {
  b->dl = dlopen(b->path, RTLD_NOW | RTLD_LOCAL);
  if (!b->dl)
    return ts_error_set(err, TS_PROGRAM_COMPILE, "cannot load '%s': %s", b->path, dlerror());
  b->fn = (tsp_main_fn)(uintptr_t)dlsym(b->dl, "tsp_main");
  if (!b->fn) {
    dlclose(b->dl);
    b->dl = NULL;
    return ts_error_set(err, TS_PROGRAM_COMPILE, "'%s' has no tsp_main", b->path);
  }
  return TS_OK;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int tsp_build_bucket(tsp_program *p, tsp_bucket *b, ts_error *err) {
  if (b->built)
    return TS_OK;
  int rc = tsp_plan_bucket(p, b, err);
  if (rc != TS_OK)
    return rc;
  char *src = NULL;
  rc = tsp_emit(p, b, &src, err);
  if (rc != TS_OK) {
    tsp_plan_free(b);
    return rc;
  }
  size_t ns = strlen(src), nk = strlen(p->cc) + strlen(p->cc_version) + strlen(p->cflags) + 8;
  char *key = malloc(ns + nk);
  if (!key) {
    free(src);
    tsp_plan_free(b);
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  }
  int kl = snprintf(key, ns + nk, "%s\n%s\n%s\n%s", src, p->cc, p->cc_version, p->cflags);
  XXH128_hash_t h = XXH3_128bits(key, (size_t)kl);
  free(key);
  snprintf(b->hash, sizeof b->hash, "%016llx%016llx", (unsigned long long)h.high64,
           (unsigned long long)h.low64);
  snprintf(b->path, sizeof b->path, "%s/%s.so", p->cache_dir, b->hash);
  if (access(b->path, R_OK) == 0) {
    if (load(b, NULL) == TS_OK) {
      free(src);
      b->built = true;
      b->from_cache = true;
      p->stats.cache_hits++;
      return TS_OK;
    }
    unlink(b->path); /* unusable: compile it again */
  }
  char cpath[600], tmp[600], cmd[2048];
  static int counter;
  int seq = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  snprintf(cpath, sizeof cpath, "%s/%s.c", p->cache_dir, b->hash);
  snprintf(tmp, sizeof tmp, "%s/.%s.%d.%d.so", p->cache_dir, b->hash, (int)getpid(), seq);
  char ctmp[620];
  snprintf(ctmp, sizeof ctmp, "%s.c", tmp);
  FILE *f = fopen(ctmp, "w");
  if (!f || fwrite(src, 1, ns, f) != ns || fclose(f) != 0) {
    if (f)
      fclose(f);
    free(src);
    tsp_plan_free(b);
    unlink(ctmp);
    return ts_error_set(err, TS_IO, "cannot write '%s': %s", ctmp, strerror(errno));
  }
  free(src);
  if (strchr(p->cc, '\'') || strchr(p->cache_dir, '\'')) {
    unlink(ctmp);
    tsp_plan_free(b);
    return ts_error_set(err, TS_INVALID_ARGUMENT, "compiler path and cache directory must not "
                        "contain a quote");
  }
  snprintf(cmd, sizeof cmd, "'%s' %s -o '%s' '%s' -lm 2>&1", p->cc, p->cflags, tmp, ctmp);
  char out[4096];
  double t0 = now_ms();
  int st = run_capture(cmd, out, sizeof out);
  p->stats.compile_ms += now_ms() - t0;
  p->stats.compiles++;
  if (st != 0) {
    unlink(tmp);
    unlink(ctmp);
    tsp_plan_free(b);
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
      out[--n] = '\0';
    return ts_error_set(err, TS_PROGRAM_COMPILE, "C compiler '%s' failed (status %d): %.400s",
                        p->cc, st, out);
  }
  if (rename(tmp, b->path) != 0 || rename(ctmp, cpath) != 0) {
    unlink(tmp);
    unlink(ctmp);
    tsp_plan_free(b);
    return ts_error_set(err, TS_IO, "cannot move the build into the cache '%s': %s",
                        p->cache_dir, strerror(errno));
  }
  rc = load(b, err);
  if (rc != TS_OK) {
    tsp_plan_free(b);
    return rc;
  }
  b->built = true;
  b->from_cache = false;
  return TS_OK;
}
