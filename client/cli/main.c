/* main.c - the tshard command-line tool: the subcommand table, help, and dispatch.
 *
 * Every subcommand is one entry {name, handler, summary, options, example}; `tshard --help` lists
 * them, `tshard SUB --help` shows one. Exit codes: 0 success, 1 the operation failed, 2 bad
 * command line, 3 a file could not be read or written, 4 no daemon could be reached. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_command commands[] = {
    {"plan", cmd_plan, "print the planner's EXPLAIN for a reshard (computed locally)",
     "  --shape S        global shape, e.g. 1024,512\n"
     "  --dtype T        f32 (default), f64, f16, bf16, i8, i32, i64, u8\n"
     "  --from ATTR      source attribute (see shard/ATTRIBUTES.md)\n"
     "  --to ATTR        target attribute\n"
     "  --strategy S     auto (default), allgather, root, p2p, alltoall, allreduce,\n"
     "                   reduce_scatter, local\n"
     "  --ranks N        world size to check the ranks against (simulate N ranks)\n"
     "  --staging BYTES  staging bound per rank (default 64 MiB)\n"
     "  --json           machine-readable output\n",
     "tshard plan --shape 4096,4096 --from 'mesh=[4096] placements=[S(0)]' \\\n"
     "            --to 'mesh=[4096] placements=[S(1)]' --ranks 4096"},
    {"show", cmd_show, "draw where the slices of a tensor live",
     "  --attr ATTR      the attribute to draw\n"
     "  --shape S        the tensor's global shape\n"
     "  --dims R[,C]     tensor dims drawn as rows and columns (default 0,1)\n"
     "  --width W        columns of the drawing (default 64)\n"
     "  --ascii          ASCII lines (default: Unicode when the locale is UTF-8)\n"
     "  --unicode        Unicode box drawing\n",
     "tshard show --shape 20,12 --attr 'mesh=[2,2]@0-3 placements=[S(0),S(1)]'"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f, "usage: tshard SUBCOMMAND [options]   (tshard SUBCOMMAND --help for one)\n\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\nexit codes: 0 success, 1 the operation failed, 2 bad command line, 3 file error, "
             "4 no daemon reachable\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? CLI_USAGE : CLI_OK;
  }
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(argv[1], commands[i].name) != 0)
      continue;
    cli_args a = {.argc = argc - 1, .argv = argv + 1};
    if (cli_flag(&a, "help")) {
      printf("tshard %s: %s\n\noptions:\n%s\nexample:\n  %s\n", commands[i].name,
             commands[i].summary, commands[i].usage, commands[i].example);
      return CLI_OK;
    }
    a.json = cli_flag(&a, "json");
    return commands[i].run(&a);
  }
  fprintf(stderr, "tshard: unknown subcommand '%s'\n\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
