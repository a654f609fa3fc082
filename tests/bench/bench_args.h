/* bench_args.h - the command line of a benchmark program that takes no options: --help (or -h)
 * prints its usage on stdout, any other argument is refused on stderr, naming it, with the usage.
 * Static: each program includes it once. */
#ifndef TS_BENCH_ARGS_H
#define TS_BENCH_ARGS_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Returns -1 when there are no arguments (go on), 0 after --help, 2 after another argument;
 * prints only when `print` (an MPI program's rank 0). */
static int tsb_no_options(int argc, char **argv, const char *self, const char *usage, bool print) {
  if (argc < 2)
    return -1;
  bool help = argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
  if (print && help)
    fputs(usage, stdout);
  else if (print)
    fprintf(stderr, "%s: unknown argument '%s' (it takes none)\n%s", self, argv[1], usage);
  return help ? 0 : 2;
}

#endif
