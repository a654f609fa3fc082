/* program_fixture.h - the fixture the program unit tests share: a fresh compile cache directory
 * per test (removed with everything in it afterwards), and programs made in it, failing the test
 * (ck_assert) when a program that should compile does not, or one that should not does. */
#ifndef TSP_PROGRAM_FIXTURE_H
#define TSP_PROGRAM_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

#include "ts_program.h"

/* Quick to compile, threads on: what most tests build with. */
#define FAST_FLAGS "-O1 -fopenmp -fPIC -shared"

extern char tsp_test_cache[256];

void tsp_test_setup(void);    /* a checked fixture: makes tsp_test_cache */
void tsp_test_teardown(void); /* removes it */
/* The program of `text` compiled in the cache (cflags NULL: the default flags). */
tsp_program *tsp_test_make(const char *text, const char *cflags, bool lazy);
/* The status of a program that must not compile; its message (checked non-trivial) into msg. */
int tsp_test_make_fails(const char *text, char *msg, size_t cap);

#endif
