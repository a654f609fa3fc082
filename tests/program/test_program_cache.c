/* test_program_cache.c - the program cache is trusted only when nobody else can write to it:
 * a planted shared object under a cached name (one whose constructor creates a marker file) is
 * not loaded and the program still runs right; a cached object that is writable by the group,
 * owned by another uid or a symbolic link is refused and rebuilt; symbolic links planted at the
 * temporary names a build may use are never followed; a cache directory that is writable by
 * others, owned by another uid or under a directory others may write is refused with its path,
 * owner and mode; without HOME and XDG_CACHE_HOME the cache goes under $XDG_RUNTIME_DIR, never
 * into a /tmp directory shared between users. Public API only (what a daemon uses). Each test
 * has its own cache directory (program_fixture.c). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "program_fixture.h"
#include "ts_program.h"

/* y = 2*x + 1 over 5 values: small, static, one bucket. */
static const char *affine_text =
    "{\"name\":\"affine\",\"inputs\":[{\"name\":\"x\",\"dtype\":\"f64\",\"shape\":[5]}],"
    "\"ops\":[{\"out\":\"t\",\"op\":\"mul\",\"args\":[\"x\",2]},"
    "{\"out\":\"y\",\"op\":\"add\",\"args\":[\"t\",1]}],\"outputs\":[\"y\"]}";

static void check_affine(tsp_program *p) {
  double x[5] = {-2, -0.5, 0, 3, 7.25};
  tsp_tensor in = {x, TS_F64, 1, {5}}, out = {0};
  ts_error err = {0};
  ck_assert_msg(tsp_program_run(p, &in, 1, &out, 1, &err) == TS_OK, "%s", err.msg);
  ck_assert_ptr_nonnull(out.data);
  for (int i = 0; i < 5; i++)
    ck_assert_double_eq(((double *)out.data)[i], 2 * x[i] + 1);
  ts_pool_free(out.data);
}

/* The affine program with its cache in dir (NULL: the default directory), which must work. */
static tsp_program *make_in(const char *dir, bool lazy) {
  ts_error err = {0};
  tsp_program *p = NULL;
  tsp_options o = {.cache_dir = dir, .cflags = FAST_FLAGS, .lazy = lazy};
  ck_assert_msg(tsp_program_create(&p, affine_text, &o, &err) == TS_OK, "%s", err.msg);
  return p;
}

static char *report(tsp_program *p) {
  char *text = NULL;
  ts_error err = {0};
  ck_assert_msg(tsp_program_show(p, &text, &err) == TS_OK, "%s", err.msg);
  return text;
}

/* The program built in the fixture's cache; its cached object's path into path. */
static void build_once(char *path, size_t cap) {
  tsp_program *p = tsp_test_make(affine_text, FAST_FLAGS, false);
  snprintf(path, cap, "%s", tsp_program_cache_path(p, 0));
  ck_assert_msg(strstr(path, ".so"), "%s", path);
  tsp_program_destroy(p);
}

/* A valid shared object with a tsp_main that computes nothing and a constructor that creates
 * `marker`, compiled by gcc and moved over `path` (a new file, ours, mode 0755). */
static void plant_object(const char *path, const char *marker) {
  char src[300], so[300], cmd[1200];
  snprintf(src, sizeof src, "%s/planted-src.c", tsp_test_cache);
  snprintf(so, sizeof so, "%s/planted.so", tsp_test_cache);
  FILE *f = fopen(src, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "#include <fcntl.h>\n#include <unistd.h>\n"
          "__attribute__((constructor)) static void planted(void) {\n"
          "  int fd = open(\"%s\", O_CREAT | O_WRONLY, 0600);\n"
          "  if (fd >= 0) close(fd);\n}\n"
          "int tsp_main(void *const *a, char *p, const long *s, const void *e) {\n"
          "  (void)a; (void)p; (void)s; (void)e; return 0;\n}\n",
          marker);
  fclose(f);
  snprintf(cmd, sizeof cmd, "gcc -shared -fPIC -o '%s' '%s'", so, src);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(chmod(so, 0755), 0);
  ck_assert_int_eq(rename(so, path), 0);
}

START_TEST(test_planted_object_not_loaded) {
  char path[600], marker[300];
  build_once(path, sizeof path);
  snprintf(marker, sizeof marker, "%s/marker", tsp_test_cache);
  plant_object(path, marker);
  tsp_program *p = tsp_test_make(affine_text, FAST_FLAGS, false);
  ck_assert_msg(access(marker, F_OK) != 0, "the planted object was loaded (its marker exists)");
  check_affine(p);
  char *r = report(p);
  ck_assert_msg(strstr(r, "cache_refused=1") && strstr(r, "compiles=1") &&
                    strstr(r, "the cached object was refused") &&
                    strstr(r, "does not match the hash recorded"),
                "%s", r);
  free(r);
  tsp_program_destroy(p);
  /* it was compiled again and renamed over the planted file: the next build hits the cache */
  p = tsp_test_make(affine_text, FAST_FLAGS, false);
  r = report(p);
  ck_assert_msg(strstr(r, "cache_hits=1") && strstr(r, "cache_refused=0"), "%s", r);
  free(r);
  check_affine(p);
  tsp_program_destroy(p);
  ck_assert_msg(access(marker, F_OK) != 0, "the planted object was loaded (its marker exists)");
}
END_TEST

/* The cached object of the affine program after `spoil` changed it: refused with `why`, compiled
 * again, the file in place afterwards a regular file of mode 0700. */
static void expect_refused(const char *path, const char *why) {
  tsp_program *p = tsp_test_make(affine_text, FAST_FLAGS, false);
  char *r = report(p);
  ck_assert_msg(strstr(r, "cache_refused=1") && strstr(r, "compiles=1") && strstr(r, why),
                "want '%s' in:\n%s", why, r);
  free(r);
  check_affine(p);
  tsp_program_destroy(p);
  struct stat st;
  ck_assert_int_eq(lstat(path, &st), 0);
  ck_assert_msg(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0700 && st.st_uid == geteuid(),
                "mode %o uid %u", (unsigned)st.st_mode, (unsigned)st.st_uid);
}

START_TEST(test_unsafe_objects_refused) {
  char path[600], copy[600];
  build_once(path, sizeof path);
  /* group-writable */
  ck_assert_int_eq(chmod(path, 0770), 0);
  expect_refused(path, "writable by group or others");
  /* a symbolic link to a good copy of itself */
  snprintf(copy, sizeof copy, "%s/elsewhere.so", tsp_test_cache);
  ck_assert_int_eq(rename(path, copy), 0);
  ck_assert_int_eq(symlink(copy, path), 0);
  expect_refused(path, "symbolic link");
  /* owned by another uid (root can give it away) */
  if (geteuid() == 0) {
    ck_assert_int_eq(chown(path, 65534, 65534), 0);
    expect_refused(path, "owned by uid 65534");
  }
}
END_TEST

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void expect_text(const char *path, const char *text) {
  char buf[256] = "";
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  ck_assert_str_eq(buf, text);
}

START_TEST(test_planted_symlinks_not_followed) {
  char path[600];
  build_once(path, sizeof path);
  /* the object's hash name (the same in any cache directory) */
  const char *slash = strrchr(path, '/');
  char hash[64];
  snprintf(hash, sizeof hash, "%.*s", (int)(strcspn(slash + 1, ".")), slash + 1);
  char dir[300], victim[300], link[700];
  snprintf(dir, sizeof dir, "%s/second", tsp_test_cache);
  snprintf(victim, sizeof victim, "%s/victim", tsp_test_cache);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  write_text(victim, "untouched\n");
  /* every temporary name this process could use for its next builds (and the final source's
   * name) is a symbolic link to the victim */
  static const char *suffixes[] = {".c", ".so", ".sum", ".so.c"};
  for (int k = 1; k <= 300; k++)
    for (size_t s = 0; s < sizeof suffixes / sizeof *suffixes; s++) {
      snprintf(link, sizeof link, "%s/.%s.%d.%d%s", dir, hash, (int)getpid(), k, suffixes[s]);
      ck_assert_int_eq(symlink(victim, link), 0);
    }
  /* and the final names: renamed over (the links replaced), never written through */
  static const char *finals[] = {".so", ".so.xxh128", ".c"};
  for (size_t s = 0; s < sizeof finals / sizeof *finals; s++) {
    snprintf(link, sizeof link, "%s/%s%s", dir, hash, finals[s]);
    ck_assert_int_eq(symlink(victim, link), 0);
  }
  tsp_program *p = make_in(dir, false);
  check_affine(p);
  tsp_program_destroy(p);
  expect_text(victim, "untouched\n");
  struct stat st;
  ck_assert_int_eq(lstat(link, &st), 0);
  ck_assert_msg(S_ISREG(st.st_mode), "the source was renamed over the link, not written into it");
}
END_TEST

/* A program made with the cache in `dir` (NULL: the default) must fail with TS_AUTH and every
 * needle in its message. */
static void expect_dir_refused(const char *dir, const char *const *needles) {
  ts_error err = {0};
  tsp_program *p = NULL;
  tsp_options o = {.cache_dir = dir, .cflags = FAST_FLAGS, .lazy = true};
  ck_assert_int_eq(tsp_program_create(&p, affine_text, &o, &err), TS_AUTH);
  ck_assert_ptr_null(p);
  for (int i = 0; needles[i]; i++)
    ck_assert_msg(strstr(err.msg, needles[i]), "'%s' not in: %s", needles[i], err.msg);
}

START_TEST(test_unsafe_cache_dirs_refused) {
  char dir[300], uid[32];
  snprintf(uid, sizeof uid, "uid %u", (unsigned)geteuid());
  snprintf(dir, sizeof dir, "%s/open", tsp_test_cache);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  ck_assert_int_eq(chmod(dir, 0777), 0);
  const char *open_needles[] = {dir, uid, "mode 0777", "not writable by group or others", NULL};
  expect_dir_refused(dir, open_needles);
  ck_assert_int_eq(chmod(dir, 0775), 0);
  const char *group_needles[] = {dir, "mode 0775", NULL};
  expect_dir_refused(dir, group_needles);
  /* private again: accepted, and it works */
  ck_assert_int_eq(chmod(dir, 0700), 0);
  tsp_program *p = make_in(dir, false);
  check_affine(p);
  tsp_program_destroy(p);
  /* a directory that is not ours */
  if (geteuid() == 0) {
    ck_assert_int_eq(chown(dir, 65534, 65534), 0);
    const char *foreign[] = {dir, "owned by uid 65534", "mode 0700", uid, NULL};
    expect_dir_refused(dir, foreign);
  }
  /* a private directory under one others may write to (not sticky) */
  char parent[300], inner[400];
  snprintf(parent, sizeof parent, "%s/shared", tsp_test_cache);
  snprintf(inner, sizeof inner, "%s/cache", parent);
  ck_assert_int_eq(mkdir(parent, 0700), 0);
  ck_assert_int_eq(chmod(parent, 0777), 0);
  const char *above[] = {inner, parent, "mode 0777", "directory above it", NULL};
  expect_dir_refused(inner, above);
  /* sticky, like /tmp: fine */
  ck_assert_int_eq(chmod(parent, 01777), 0);
  tsp_program_destroy(make_in(inner, true));
  struct stat st;
  ck_assert_int_eq(stat(inner, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
}
END_TEST

START_TEST(test_default_dir_without_home) {
  char run[300], want[400];
  snprintf(run, sizeof run, "%s/run", tsp_test_cache);
  ck_assert_int_eq(mkdir(run, 0700), 0);
  unsetenv("TSHARD_PROGRAM_CACHE");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  setenv("XDG_RUNTIME_DIR", run, 1);
  tsp_program *p = make_in(NULL, false);
  snprintf(want, sizeof want, "%s/tshard/programs/", run);
  const char *path = tsp_program_cache_path(p, 0);
  ck_assert_msg(strncmp(path, want, strlen(want)) == 0, "cache at %s, want under %s", path, want);
  check_affine(p);
  tsp_program_destroy(p);
  struct stat st;
  snprintf(want, sizeof want, "%s/tshard", run);
  ck_assert_int_eq(stat(want, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  snprintf(want, sizeof want, "%s/tshard/programs", run);
  ck_assert_int_eq(stat(want, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  /* the per-user base follows the socket directory's rule: ours and 0700, else refused */
  snprintf(want, sizeof want, "%s/tshard", run);
  ck_assert_int_eq(chmod(want, 0755), 0);
  const char *needles[] = {want, "mode 0755", "mode 0700", NULL};
  expect_dir_refused(NULL, needles);
}
END_TEST

/* Two builds of one program (under different temporary source names, as two ranks that build
 * it at once use) write the same bytes: whichever object and recorded hash land last match. */
static char *slurp(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  rewind(f);
  char *b = malloc((size_t)*n + 1);
  ck_assert_int_eq((long)fread(b, 1, (size_t)*n, f), *n);
  fclose(f);
  return b;
}

START_TEST(test_builds_are_reproducible) {
  char path[1024], sum[1100];
  build_once(path, sizeof path);
  long n1, n2;
  char *a = slurp(path, &n1);
  snprintf(sum, sizeof sum, "%s.xxh128", path);
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(unlink(sum), 0);
  build_once(path, sizeof path);
  char *b = slurp(path, &n2);
  ck_assert_msg(n1 == n2 && memcmp(a, b, (size_t)n1) == 0,
                "two builds of one program differ (%ld and %ld bytes)", n1, n2);
  free(a);
  free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("program_cache");
  TCase *t = tcase_create("program_cache");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, tsp_test_setup, tsp_test_teardown);
  tcase_add_test(t, test_planted_object_not_loaded);
  tcase_add_test(t, test_unsafe_objects_refused);
  tcase_add_test(t, test_planted_symlinks_not_followed);
  tcase_add_test(t, test_unsafe_cache_dirs_refused);
  tcase_add_test(t, test_default_dir_without_home);
  tcase_add_test(t, test_builds_are_reproducible);
  suite_add_tcase(s, t);
  return ts_run_suite(s);
}
