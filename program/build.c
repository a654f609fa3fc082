/* build.c - from C text to loaded code: the disk cache (a directory of shared objects named by an
 * XXH3-128 hash of the emitted C text - itself a function of the program, the bucket's values and
 * the dtypes - with the compiler, its version and the flags; its rules are in cache.c), the
 * compiler run (its messages captured for the error), and dlopen. A build writes the source and
 * the object under fresh temporary names, loads the object it checked and hashed, records that
 * hash beside it (`<hash>.so.xxh128`) and renames the files into place. A cached object is loaded
 * only when it passes cache.c's file checks and its content matches the recorded hash; one that
 * fails is never loaded: it is compiled again and replaced, and the refusal is counted and shown
 * in the report. The OpenMP runtime is loaded once and kept (with OMP_WAIT_POLICY=PASSIVE unless
 * set: ranks share the cores). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "internal.h"

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
  if (!p->cc || !p->cflags)
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
  char dir[TSP_CACHE_PATH_MAX + 64], user_base[TSP_CACHE_PATH_MAX + 64] = "";
  if (o && o->cache_dir)
    snprintf(dir, sizeof dir, "%s", o->cache_dir);
  else if (tsp_cache_default_dir(dir, sizeof dir, user_base, sizeof user_base) != 0)
    return ts_error_set(err, TS_IO,
                        "the default program cache directory is longer than %d "
                        "characters (set TSHARD_PROGRAM_CACHE or the cache_dir option)",
                        TSP_CACHE_PATH_MAX);
  char real[TSP_CACHE_PATH_MAX + 1];
  int rc = tsp_cache_prepare(dir, user_base, real, sizeof real, err);
  if (rc != TS_OK)
    return rc;
  if (!(p->cache_dir = strdup(real)))
    return ts_error_set(err, TS_NO_MEMORY, "out of memory");
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

/* dlopen of a file checked on fd (st: its fstat), then the path checked to still name that file:
 * the directory is private, so only this user could have changed it in between. */
static const char *open_checked(tsp_bucket *b, const char *path, const struct stat *st, char *why,
                                size_t cap) {
  b->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!b->dl) {
    snprintf(why, cap, "cannot load '%s': %s", path, dlerror());
    return why;
  }
  struct stat now;
  if (stat(path, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino)
    snprintf(why, cap, "'%s' was replaced while it was being loaded", path);
  else if (!(b->fn = (tsp_main_fn)(uintptr_t)dlsym(b->dl, "tsp_main")))
    snprintf(why, cap, "'%s' has no tsp_main", path);
  else
    return NULL;
  dlclose(b->dl);
  b->dl = NULL;
  return why;
}

/* The cached object of b: 1 loaded; 0 there is none; -1 refused (why says why: not a regular
 * file, not ours, writable by others, no recorded hash or another content, not loadable). */
static int load_cached(tsp_bucket *b, char *why, size_t cap) {
  int fd;
  struct stat st;
  int r = tsp_cache_open_file(b->path, &fd, &st, why, cap);
  if (r != 0)
    return r == 1 ? 0 : -1;
  char have[TSP_HASH_HEX], want[TSP_HASH_HEX], sum[sizeof b->path + 8];
  snprintf(sum, sizeof sum, "%s.xxh128", b->path);
  bool ok =
      tsp_cache_hash_fd(fd, have, why, cap) == 0 && tsp_cache_read_sum(sum, want, why, cap) == 0;
  if (ok && strcmp(have, want) != 0) {
    snprintf(why, cap, "the content of '%s' does not match the hash recorded when it was built",
             b->path);
    ok = false;
  }
  ok = ok && open_checked(b, b->path, &st, why, cap) == NULL;
  close(fd);
  return ok ? 1 : -1;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* What the compiler wrote, opened without following links and checked on that descriptor (a
 * regular file of this user; its mode, whatever the compiler and the umask made it, becomes
 * 0700), hashed into hex and loaded. NULL, or why not. */
static const char *take_object(tsp_bucket *b, const char *tmp, char *hex, char *why, size_t cap) {
  int fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, cap, "'%s' cannot be opened: %s", tmp, strerror(errno));
    return why;
  }
  struct stat st;
  const char *bad = why;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      fchmod(fd, 0700) != 0)
    snprintf(why, cap, "'%s' is not a regular file of uid %u", tmp, (unsigned)geteuid());
  else if (tsp_cache_hash_fd(fd, hex, why, cap) == 0)
    bad = open_checked(b, tmp, &st, why, cap);
  close(fd);
  return bad;
}

/* The emitted source written, compiled and loaded under temporary names in the cache, then its
 * hash, the object and the source renamed into place (over a refused object, if any). */
static int compile_fresh(tsp_program *p, tsp_bucket *b, const char *src, ts_error *err) {
  if (strchr(p->cc, '\'') || strchr(p->cache_dir, '\''))
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "compiler path and cache directory must not "
                        "contain a quote");
  char ctmp[600], tmp[600], stmp[600] = "", cpath[600], sum[600], cmd[2048], why[720];
  int fd = -1,
      rc = tsp_cache_write(p->cache_dir, b->hash, ".c", src, strlen(src), ctmp, sizeof ctmp, err);
  if (rc != TS_OK)
    return rc;
  /* the object's name is taken (O_EXCL) before the compiler writes there */
  if ((rc = tsp_cache_create(p->cache_dir, b->hash, ".so", tmp, sizeof tmp, &fd, err)) != TS_OK) {
    unlink(ctmp);
    return rc;
  }
  close(fd);
  /* -s: without a symbol table the object holds no trace of the temporary source's name, so
   * ranks that build the same program at once write the same bytes, and whichever hash and
   * object land last still match (tsp_main is found in the dynamic symbols). */
  snprintf(cmd, sizeof cmd, "'%s' %s -s -o '%s' '%s' -lm 2>&1", p->cc, p->cflags, tmp, ctmp);
  char out[4096];
  double t0 = now_ms();
  int st = run_capture(cmd, out, sizeof out);
  p->stats.compile_ms += now_ms() - t0;
  p->stats.compiles++;
  if (st != 0) {
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
      out[--n] = '\0';
    rc = ts_error_set(err, TS_PROGRAM_COMPILE, "C compiler '%s' failed (status %d): %.400s", p->cc,
                      st, out);
    goto fail;
  }
  char hex[TSP_HASH_HEX + 1];
  if (take_object(b, tmp, hex, why, sizeof why) != NULL) {
    rc = ts_error_set(err, TS_PROGRAM_COMPILE, "the compiled object: %s", why);
    goto fail;
  }
  snprintf(cpath, sizeof cpath, "%s/%s.c", p->cache_dir, b->hash);
  snprintf(sum, sizeof sum, "%s.xxh128", b->path);
  strcat(hex, "\n");
  if ((rc = tsp_cache_write(p->cache_dir, b->hash, ".sum", hex, strlen(hex), stmp, sizeof stmp,
                            err)) != TS_OK)
    goto fail;
  if (rename(stmp, sum) != 0 || rename(tmp, b->path) != 0 || rename(ctmp, cpath) != 0) {
    rc = ts_error_set(err, TS_IO, "cannot move the build into the cache '%s': %s", p->cache_dir,
                      strerror(errno));
    goto fail;
  }
  return TS_OK;
fail:
  if (b->dl)
    dlclose(b->dl);
  b->dl = NULL;
  b->fn = NULL;
  unlink(tmp);
  unlink(ctmp);
  if (stmp[0])
    unlink(stmp);
  return rc;
}

int tsp_build_bucket(tsp_program *p, tsp_bucket *b, ts_error *err) {
  if (b->built)
    return TS_OK;
  int rc = tsp_plan_bucket(p, b, err);
  if (rc != TS_OK)
    return rc;
  char *src = NULL;
  rc = tsp_emit(p, b, &src, err);
  if (rc == TS_OK)
    rc = tsp_cache_check(p->cache_dir, err); /* still private: nobody else can plant a file */
  if (rc != TS_OK) {
    free(src);
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
  b->cache_note[0] = '\0';
  int hit = load_cached(b, b->cache_note, sizeof b->cache_note);
  if (hit == 1) {
    free(src);
    b->built = true;
    b->from_cache = true;
    p->stats.cache_hits++;
    return TS_OK;
  }
  if (hit < 0)
    p->stats.cache_refused++; /* never trusted: compiled again and renamed over it */
  rc = compile_fresh(p, b, src, err);
  free(src);
  if (rc != TS_OK) {
    tsp_plan_free(b);
    return rc;
  }
  b->built = true;
  b->from_cache = false;
  return TS_OK;
}
