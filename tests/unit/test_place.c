/* test_place.c - where a rank runs, without MPI (comm/place.c's two steps): host names made
 * printable and bounded, and the NUMA node of a CPU read from sysfs trees built here (a cpuN/nodeM
 * link, node cpulists only, neither, malformed lists), then from this machine's /sys against a
 * readlink of its cpuN/nodeM entries. */
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "ts_comm.h"

static void clean_is(const char *raw, size_t cap, const char *want) {
  char out[512];
  size_t n = ts_host_name_clean(raw, out, cap);
  ck_assert_str_eq(out, want);
  ck_assert_uint_eq(n, strlen(want));
}

START_TEST(host_names) {
  clean_is("node-7.cluster.example", 512, "node-7.cluster.example");
  clean_is("a b\tc\x7f"
           "d",
           512, "a?b?c?d");
  clean_is("h\xc3\xa9te", 512, "h??te"); /* UTF-8 beyond ASCII: one '?' a byte */
  clean_is("", 512, "unknown");
  clean_is(NULL, 512, "unknown");
  clean_is("abcdef", 4, "abc");
  clean_is("", 4, "unk");
  char long_name[400];
  memset(long_name, 'x', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  char out[512];
  ck_assert_uint_eq(ts_host_name_clean(long_name, out, sizeof out), TS_HOST_NAME_MAX);
  ck_assert_uint_eq(strlen(out), TS_HOST_NAME_MAX);
  ck_assert_uint_eq(ts_host_name_clean("abc", out, 0), 0);
}
END_TEST

/* A sysfs tree under a fresh directory. */
static char root[64];

static void mkdirs(const char *rel) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  for (char *p = path + strlen(root) + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0700);
      *p = '/';
    }
  mkdir(path, 0700);
}

static void write_file(const char *rel, const char *text) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* A new private directory under $TMPDIR (else /tmp), named by mkdtemp from its template. */
static void fresh_root(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/tshard-place-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(root));
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(path);
}

/* Removes the tree (links are removed, not followed). */
static void remove_root(void) {
  ck_assert_int_eq(nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

START_TEST(numa_from_cpu_links) {
  fresh_root();
  mkdirs("devices/system/node/node0");
  mkdirs("devices/system/node/node3");
  mkdirs("devices/system/cpu/cpu0");
  mkdirs("devices/system/cpu/cpu5");
  mkdirs("devices/system/cpu/cpu6");
  char target[PATH_MAX], link[PATH_MAX];
  snprintf(target, sizeof target, "%s/devices/system/node/node3", root);
  snprintf(link, sizeof link, "%s/devices/system/cpu/cpu5/node3", root);
  ck_assert_int_eq(symlink(target, link), 0);
  mkdirs("devices/system/cpu/cpu0/node0");
  mkdirs("devices/system/cpu/cpu6/nodeX"); /* not a node number */
  mkdirs("devices/system/cpu/cpu6/node");
  mkdirs("devices/system/cpu/cpu6/node2a");
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 5), 3);
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 0), 0);
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 6), -1); /* no cpulist either */
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 7), -1); /* no such CPU */
  ck_assert_int_eq(ts_numa_node_of_cpu(root, -1), -1);
  ck_assert_int_eq(ts_numa_node_of_cpu(NULL, 0), -1);
  remove_root();
}
END_TEST

START_TEST(numa_from_cpulists) {
  fresh_root();
  mkdirs("devices/system/node/node0");
  mkdirs("devices/system/node/node1");
  mkdirs("devices/system/node/node12");
  mkdirs("devices/system/node/power"); /* not a node */
  write_file("devices/system/node/node0/cpulist", "0-3,8\n");
  write_file("devices/system/node/node1/cpulist", "4-7,9-10\n");
  write_file("devices/system/node/node12/cpulist", "\n"); /* a node without CPUs */
  int want[] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, -1, -1};
  for (int cpu = 0; cpu < (int)(sizeof want / sizeof want[0]); cpu++)
    ck_assert_msg(ts_numa_node_of_cpu(root, cpu) == want[cpu], "cpu %d: node %d, want %d", cpu,
                  ts_numa_node_of_cpu(root, cpu), want[cpu]);
  write_file("devices/system/node/node1/cpulist", "a-b\n");
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 5), -1);
  write_file("devices/system/node/node1/cpulist", "4-\n");
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 4), -1);
  write_file("devices/system/node/node1/cpulist", "4-7;9\n"); /* the list ends at ';' */
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 5), 1);
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 9), -1);
  remove_root();
}
END_TEST

START_TEST(numa_without_sysfs) {
  fresh_root();
  ck_assert_int_eq(ts_numa_node_of_cpu(root, 0), -1);
  ck_assert_int_eq(ts_numa_node_of_cpu("/nonexistent-sysfs", 0), -1);
  remove_root();
}
END_TEST

/* This machine's /sys: every CPU's node, where a cpuN/nodeM link names one, is what readlink of
 * that link says. */
START_TEST(numa_of_this_machine) {
  long ncpu = sysconf(_SC_NPROCESSORS_CONF);
  for (int cpu = 0; cpu < ncpu && cpu < 4096; cpu++) {
    char dir[128];
    snprintf(dir, sizeof dir, "/sys/devices/system/cpu/cpu%d", cpu);
    DIR *d = opendir(dir);
    int want = -1;
    for (struct dirent *e; d && (e = readdir(d));) {
      char path[PATH_MAX], target[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      ssize_t n =
          strncmp(e->d_name, "node", 4) == 0 ? readlink(path, target, sizeof target - 1) : -1;
      if (n > 0) {
        target[n] = '\0';
        const char *base = strrchr(target, '/');
        want = atoi(base ? base + 5 : target + 4);
      }
    }
    if (d)
      closedir(d);
    if (want >= 0)
      ck_assert_msg(ts_numa_node_of_cpu("/sys", cpu) == want, "cpu %d: node %d, /sys says %d", cpu,
                    ts_numa_node_of_cpu("/sys", cpu), want);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("place");
  TCase *tc = tcase_create("place");
  tcase_add_test(tc, host_names);
  tcase_add_test(tc, numa_from_cpu_links);
  tcase_add_test(tc, numa_from_cpulists);
  tcase_add_test(tc, numa_without_sysfs);
  tcase_add_test(tc, numa_of_this_machine);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
