/* test_names.c - the name index (shard/names.c) against a linear search: random adds, removals
 * that move the last entry into the hole (as the store and the catalog do) and lookups, of names
 * that share prefixes and of names never added, through several growths of the table. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "ts_shard.h"

enum { MAXN = 3000, NAME = 32 };

typedef struct owner {
  char names[MAXN][NAME];
  int n;
  ts_name_index index;
} owner;

static const char *at(const void *ctx, int pos) { return ((const owner *)ctx)->names[pos]; }

static int linear(const owner *o, const char *name) {
  for (int i = 0; i < o->n; i++)
    if (strcmp(o->names[i], name) == 0)
      return i;
  return -1;
}

static void remove_at(owner *o, int i) {
  ts_name_index_remove(&o->index, o->names[i], at, o);
  if (i != o->n - 1)
    ts_name_index_moved(&o->index, o->names[o->n - 1], i, at, o);
  memcpy(o->names[i], o->names[o->n - 1], NAME);
  o->n--;
}

START_TEST(matches_linear_search) {
  static owner o;
  memset(&o, 0, sizeof o);
  unsigned seed = 12345;
  long checked = 0;
  for (int step = 0; step < 40000; step++) {
    seed = seed * 1103515245u + 12345u;
    unsigned r = seed >> 8;
    char name[NAME];
    snprintf(name, sizeof name, "h%u.attn.w%u", r % 97, (r >> 7) % 53);
    int have = linear(&o, name);
    ck_assert_int_eq(ts_name_index_find(&o.index, name, at, &o), have);
    checked++;
    if (have < 0 && o.n < MAXN && (r & 3) != 0) {
      memcpy(o.names[o.n], name, NAME);
      o.n++;
      ck_assert_int_eq(ts_name_index_add(&o.index, o.n - 1, o.n, at, &o), TS_OK);
    } else if (have >= 0 && (r & 1)) {
      remove_at(&o, have);
    }
    if (step % 4000 == 0) /* every name in place */
      for (int i = 0; i < o.n; i++, checked++)
        ck_assert_int_eq(ts_name_index_find(&o.index, o.names[i], at, &o), i);
  }
  while (o.n > 0) {
    remove_at(&o, (int)(seed++ % (unsigned)o.n));
    for (int i = 0; i < o.n; i += 7, checked++)
      ck_assert_int_eq(ts_name_index_find(&o.index, o.names[i], at, &o), i);
  }
  ck_assert_int_eq(ts_name_index_find(&o.index, "h1.attn.w1", at, &o), -1);
  ck_assert_int_gt(checked, 40000);
  ts_name_index_clear(&o.index);
  ts_name_index_clear(&o.index); /* twice: nothing left to free */
  ts_name_index_clear(NULL);
  ck_assert_int_eq(ts_name_index_find(NULL, "x", at, &o), -1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("names");
  TCase *tc = tcase_create("names");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, matches_linear_search);
  suite_add_tcase(s, tc);
  return ts_run_suite(s);
}
