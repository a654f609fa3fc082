/* main.c - the tshard command-line tool: the subcommand table, help, and dispatch.
 *
 * Every subcommand is one entry {name, handler, summary, options, example}; `tshard --help` lists
 * them, `tshard SUB --help` shows one. Exit codes: 0 success, 1 the operation failed, 2 bad
 * command line, 3 a file could not be read or written, 4 no daemon could be reached. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tshard.h"

/* Connection options shared by the subcommands that talk to a daemon. */
#define CONNECT_HELP                                                                               \
  "  --job JOB        the daemons' job id (default $TSHARD_JOB or 'default')\n"                    \
  "  --rank R         the rank whose daemon to use (default 0)\n"                                  \
  "  --socket PATH    or: the daemon's Unix socket\n"                                              \
  "  --tcp HOST:PORT  or: TCP, with --token-file FILE\n"                                           \
  "  --token-file FILE  the TCP token's file\n"                                                    \
  "  --timeout SEC    per-call timeout (default 60)\n"

static const cli_command commands[] = {
    {"plan", cli_cmd_plan, NULL, "print the planner's EXPLAIN for a reshard (computed locally)",
     "  --shape S        global shape, e.g. 1024,512\n"
     "  --dtype T        f32 (default), f64, f16, bf16, i8, i32, i64, u8, bool, i16, u16,\n"
     "                   u32, u64, f8_e4m3, f8_e5m2, c64, c128\n"
     "  --to-dtype U     a reshard that casts to U: planned for the dtype on the wire (U when\n"
     "                   narrower and the source has no partial placement, else T)\n"
     "  --from ATTR      source attribute (see shard/plan/ATTRIBUTES.md)\n"
     "  --to ATTR        target attribute\n"
     "  --strategy S     auto (default), allgather, root, p2p, alltoall, allreduce,\n"
     "                   reduce_scatter, local, hierarchical\n"
     "  --ranks N        world size to check the ranks against (simulate N ranks)\n"
     "  --staging BYTES  staging bound per rank (default 64 MiB)\n"
     "  --topology SPEC  ranks on hosts: hosts=HxR (H hosts of R ranks in rank order),\n"
     "                   hosts=R1,R2,... or map=H0,H1,... (the host of each rank)\n"
     "  --hostfile FILE  ranks on hosts as mpirun places them from an Open MPI hostfile\n"
     "  --link-rates R   the link rates the cost model weighs, host=RATE,cross=RATE\n"
     "                   (inside a host, between hosts; e.g. host=10GB/s,cross=500mbit;\n"
     "                   default 8GB/s and 10gbit; needs --topology or --hostfile)\n"
     "  --relabel        let the target's ranks be permuted among themselves so that the\n"
     "                   fewest bytes move: prints the target chosen and plans for it\n"
     "  --json           machine-readable output\n",
     "tshard plan --shape 4096,4096 --from 'mesh=[4096] placements=[S(0)]' \\\n"
     "            --to 'mesh=[4096] placements=[S(1)]' --ranks 4096\n  "
     "tshard plan --shape 8192,4096 --from 'mesh=[8192] placements=[S(0)]' \\\n"
     "            --to 'mesh=[8192] placements=[R]' --topology hosts=1024x8\n  "
     "tshard plan --shape 4096,4096 --from 'mesh=[4] placements=[P(sum)]' \\\n"
     "            --to 'mesh=[4] placements=[R]' --topology hosts=2x2 --link-rates cross=500mbit"},
    {"show", cli_cmd_show, NULL,
     "draw where the slices of a tensor live (NAME, or --attr and --shape)",
     "  NAME             a tensor of the daemons (connection options as for ping)\n"
     "  --attr ATTR      or: the attribute to draw, without a daemon\n"
     "  --shape S        the tensor's global shape\n"
     "  --dims R[,C]     tensor dims drawn as rows and columns (default 0,1)\n"
     "  --width W        columns of the drawing (default 64)\n"
     "  --ascii          ASCII lines (default: Unicode when the locale is UTF-8)\n"
     "  --unicode        Unicode box drawing\n"
     "  --json           machine-readable output: name, dtype, shape, attr, slices\n" CONNECT_HELP,
     "tshard show weights      or   tshard show --shape 20,12 --attr 'mesh=[2,2]@0-3 "
     "placements=[S(0),S(1)]'"},
    {"trace", cli_cmd_trace, NULL,
     "gather every daemon's recorded operations: a trace file for Perfetto, or where time went",
     "  --job JOB        the daemons' job id (default $TSHARD_JOB or 'default'): every rank's\n"
     "                   Unix socket on this host\n"
     "  --tcp HOST:PORT  or: TCP, rank r at PORT+r, with --token-file FILE\n"
     "  --token-file FILE  the TCP token's file\n"
     "  --last N         the last N operations of each rank (default: all its ring holds)\n"
     "  --since T        the operations that ended in the last T (e.g. 30s, 500ms)\n"
     "  --out FILE       write the Chrome trace event format (one track per rank; open it in\n"
     "                   Perfetto, ui.perfetto.dev, or chrome://tracing)\n"
     "  --summary        per operation kind, the share of its time in each span (the\n"
     "                   default without --out)\n"
     "  --timeout SEC    per-call timeout (default 60)\n"
     "  --json           the summary as JSON\n",
     "tshard trace --job demo --last 100 --out trace.json   or   tshard trace --job demo "
     "--summary"},
    {"ping", NULL, cli_cmd_ping, "check that a daemon serves; prints its rank and the world size",
     CONNECT_HELP "  --json           machine-readable output\n", "tshard ping --rank 1"},
    {"create", NULL, cli_cmd_create, "create a zero-filled tensor on every rank",
     "  NAME             the tensor's name\n"
     "  --dtype T        f32 (default), f64, f16, bf16, i8, i32, i64, u8, bool, i16, u16,\n"
     "                   u32, u64, f8_e4m3 (E4M3FN), f8_e5m2, c64, c128, or numpy's and\n"
     "                   torch's names: float32, float64, float16, bfloat16, int8, int32,\n"
     "                   int64, uint8, int16, uint16, uint32, uint64, float8_e4m3fn,\n"
     "                   float8_e5m2, complex64, complex128\n"
     "  --shape S        global shape, e.g. 1024,512\n"
     "  --attr ATTR      distributed attribute\n"
     "  --layout TAG     layout of the stored slices (default row-major), e.g. aBcd16b\n"
     "  --key KEY        idempotency key\n"
     "  --participants R ranks that all submit it under --key: it runs once all did\n"
     "                   (e.g. 0,1,2,3 or all; an SPMD program's processes)\n"
     "  --collective-timeout T  give up waiting for them after T (e.g. 30s, 500ms)\n" CONNECT_HELP,
     "tshard create w --dtype f32 --shape 1024,512 --attr 'mesh=[4] placements=[S(0)]'"},
    {"put", NULL, cli_cmd_put, "put a whole tensor from a .npy file (the daemons scatter it)",
     "  NAME FILE.npy    the tensor and the file (C or Fortran order)\n"
     "  --attr ATTR      create the tensor with this attribute first (dtype and shape of the "
     "file)\n"
     "  --dtype T        the dtype the file must hold (f32 or float32, ...); bf16: its\n"
     "                   uint16 values are bf16 bit patterns, f8_e4m3 / f8_e5m2: its uint8\n"
     "                   values are 8-bit float codes\n"
     "  --bf16-bits      the file's uint16 (or int16) values are bf16 bit patterns\n"
     "  --layout TAG     layout of the stored slices, when creating\n"
     "  --key KEY        idempotency key\n"
     "  --convert        convert the values to the tensor's dtype (floats round to nearest\n"
     "                   even); refused if a value would not survive\n"
     "  --progress       a progress bar on stderr (default: on a terminal, for large data)\n"
     "  --json           machine-readable output\n" CONNECT_HELP,
     "tshard put w weights.npy --attr 'mesh=[4] placements=[S(0)]'"},
    {"get", NULL, cli_cmd_get,
     "get a whole tensor into a .npy file (gathered to the connected rank)",
     "  NAME FILE.npy    the tensor and the file to write (bf16 is written as uint16 bits:\n"
     "                   put it back with --bf16-bits; f8_e4m3 and f8_e5m2 as uint8 bits:\n"
     "                   put them back with --dtype f8_e4m3 or f8_e5m2)\n"
     "  --progress       a progress bar on stderr (default: on a terminal, for large data)\n"
     "  --json           machine-readable output\n" CONNECT_HELP,
     "tshard get w out.npy"},
    {"get-slice", NULL, cli_cmd_get_slice, "get the connected rank's slice into a .npy file",
     "  NAME FILE.npy    the tensor and the file to write\n"
     "  --layout TAG     the slice in this layout (blocked ones too), written flat\n"
     "  --json           machine-readable output\n" CONNECT_HELP,
     "tshard get-slice w slice1.npy --rank 1 --layout aBcd16b"},
    {"reshard", NULL, cli_cmd_reshard,
     "move a tensor (or several, as one batch) to another attribute",
     "  NAME...          the tensor; several: one batch, every one moves or none\n"
     "  --to ATTR        the target attribute\n"
     "  --strategy S     auto (default), allgather, root, p2p, alltoall, allreduce,\n"
     "                   reduce_scatter, local, hierarchical\n"
     "  --keep-as NAME2  keep the source; the result is the new tensor NAME2\n"
     "  --layout TAG     layout of the new slices\n"
     "  --dtype T        cast the values to T as they move (bf16, f16, f32, i32, ... or\n"
     "                   bfloat16, float16...; round to nearest even); narrowing casts\n"
     "                   convert before the wire. A value that would not survive (out of\n"
     "                   range, NaN into an integer, overflow to inf) refuses it, nothing\n"
     "                   changes. Several tensors: each is cast\n"
     "  --relabel        the target's ranks may be permuted among themselves so that the\n"
     "                   fewest bytes move (one tensor); prints the rank order chosen\n"
     "  --key KEY        idempotency key\n"
     "  --participants R ranks that all submit it under --key: it runs once all did\n"
     "                   (e.g. 0,1,2,3 or all; an SPMD program's processes)\n"
     "  --collective-timeout T  give up waiting for them after T (e.g. 30s, 500ms)\n"
     "  --progress       a progress line on stderr: time elapsed and left, estimated from\n"
     "                   the job's earlier reshards (default: on a terminal, 16 MiB or more)\n"
     "  --json           machine-readable output\n" CONNECT_HELP,
     "tshard reshard w b --to 'mesh=[4] placements=[S(1)]' --strategy alltoall\n  "
     "tshard reshard w --to 'mesh=[4] placements=[S(0)]' --dtype bf16\n  "
     "tshard reshard w --to 'mesh=[4] placements=[S(0)]' --relabel"},
    {"drop", NULL, cli_cmd_drop, "delete a tensor (or several, as one batch) on every rank",
     "  NAME...          the tensor; several: one batch, all dropped or none\n"
     "  --key KEY        idempotency key\n"
     "  --participants R ranks that all submit it under --key: it runs once all did\n"
     "                   (e.g. 0,1,2,3 or all; an SPMD program's processes)\n"
     "  --collective-timeout T  give up waiting for them after T (e.g. 30s, 500ms)\n" CONNECT_HELP,
     "tshard drop w b"},
    {"list", NULL, cli_cmd_list, "list the tensors",
     CONNECT_HELP "  --json           machine-readable output\n", "tshard list --json"},
    {"describe", NULL, cli_cmd_describe,
     "a tensor's dtype, shape, attribute, layout and bytes per rank; without NAME the job",
     "  NAME             the tensor; without it the job: its ranks, each host's name with its\n"
     "                   ranks and their NUMA nodes, the topology (as plan --topology takes "
     "it)\n" CONNECT_HELP "  --json           machine-readable output\n",
     "tshard describe w --json\n  tshard describe --job demo"},
    {"stats", NULL, cli_cmd_stats,
     "operations, bytes per strategy and memory of the connected daemon",
     CONNECT_HELP "  --json           machine-readable output\n", "tshard stats --rank 2"},
    {"einsum", cli_cmd_einsum, NULL,
     "distributed einsum where the shards live: EQ A [B [C]] --out NAME (or --explain)",
     "  EQ A [B [C]]     the equation (numpy's, explicit labels) and the operand tensors\n"
     "  --out NAME       the output tensor to create\n"
     "  --to ATTR        the output's attribute (default: the natural one, Partial where a\n"
     "                   sharded label is contracted)\n"
     "  --plan P         auto (default), as_is, match:I, free:I, gather:I, output, replicate\n"
     "  --keep           keep the local operands and transposes for einsum-backward\n"
     "  --explain        print the planner's EXPLAIN (without --out: plan only, nothing runs)\n"
     "  --key KEY        idempotency key\n"
     "  --ranks N        offline: plan locally for a world of N ranks (no daemon), with\n"
     "  --shape S        each operand's global shape (once per operand, in order)\n"
     "  --attr ATTR      each operand's attribute (once per operand, in order)\n"
     "  --dtype T        offline: the operands' dtype (default f32)\n"
     "  --json           machine-readable output\n" CONNECT_HELP,
     "tshard einsum 'bij,bjk->bik' a b --out c --to 'mesh=[4] placements=[S(0)]' --explain"},
    {"einsum-backward", NULL, cli_cmd_einsum_backward,
     "gradients of an einsum forward: ID --grad-out NAME --grads G0,G1",
     "  ID               the forward id printed by tshard einsum\n"
     "  --grad-out NAME  the output's gradient (a tensor of the output's shape)\n"
     "  --grads LIST     one name per operand, comma-separated, empty for none (e.g. ga,)\n"
     "  --key KEY        idempotency key\n"
     "  --json           machine-readable output\n" CONNECT_HELP,
     "tshard einsum-backward 12 --grad-out gc --grads ga,gb"},
    {"einsum-release", NULL, cli_cmd_einsum_release, "free what an einsum forward kept: ID",
     "  ID               the forward id printed by tshard einsum\n"
     "  --key KEY        idempotency key\n"
     "  --json           machine-readable output\n" CONNECT_HELP,
     "tshard einsum-release 12"},
    {"save", NULL, cli_cmd_save,
     "save tensors into a checkpoint directory (atomic; every rank writes)",
     "  DIR [NAME...]    the directory every daemon can reach; the tensors: names, or globs\n"
     "                   in quotes ('layers.*.weight')\n"
     "  --prefix P       or: the tensors whose name starts with P\n"
     "  --all            or: every tensor of the job (one of NAME..., --prefix, --all is needed)\n"
     "  --overwrite      replace the checkpoint already in DIR (atomic; else it is refused)\n"
     "  --keep-partial   save the partial pieces of partial tensors instead of reducing them\n"
     "  --per-node       DIR is a path on each node; each node writes its ranks' pieces\n"
     "  --async          return once the daemons copied the tensors; they write the files in\n"
     "                   the background (tshard stats shows it)\n"
     "  --wait           with --async: follow the files until complete (a progress bar)\n"
     "  --progress       show the progress even when not on a terminal (without --async:\n"
     "                   an estimate from the job's earlier saves)\n"
     "  --key KEY        idempotency key\n"
     "  --json           machine-readable output: dir, tensors, bytes, files, "
     "seconds\n" CONNECT_HELP,
     "tshard save ckpt/step100 w b\n  tshard save ckpt/step100 --all --overwrite\n  "
     "tshard save ckpt/layers 'layers.*.weight'"},
    {"snapshot", NULL, cli_cmd_snapshot,
     "a snapshot now: every tensor saved in the background into the daemons' --snapshot-dir",
     "  --wait           follow the files until complete (a progress bar)\n"
     "  --progress       show the bar even when not on a terminal\n"
     "  --json           machine-readable output: dir, tensors, bytes, files, "
     "seconds\n" CONNECT_HELP,
     "tshard snapshot --wait"},
    {"load", NULL, cli_cmd_load, "load tensors from a checkpoint, under any attribute",
     "  DIR [NAME...]    the checkpoint; the tensors (default: all)\n"
     "  --attr PATTERN=ATTR  (repeatable) the attribute of the tensor named PATTERN, or of\n"
     "                   those its glob matches ('*', '?', '[a-z]', '[!a]'; an exact name\n"
     "                   first, else the first glob matching, else the default)\n"
     "  --default-attr ATTR  the attribute of every other tensor (default: each saved one)\n"
     "  --in-place       into the stored tensors, each keeping its attribute and layout (a\n"
     "                   roll back): all or none, refused naming every dtype or shape that\n"
     "                   differs from the checkpoint's\n"
     "  --per-node       DIR is a path on each node\n"
     "  --progress       show the progress even when not on a terminal (an estimate from\n"
     "                   the job's earlier loads)\n"
     "  --key KEY        idempotency key\n"
     "  --json           machine-readable output: dir, tensors, bytes, files, "
     "seconds\n" CONNECT_HELP,
     "tshard load ckpt/step100 --attr 'wte=mesh=[3] placements=[S(0)]' "
     "--attr 'h.*.w=mesh=[3] placements=[S(1)]' --default-attr 'mesh=[3] placements=[R]'"},
    {"import-safetensors", cli_cmd_import_safetensors, NULL,
     "import a Hugging Face model.safetensors (or its sharded .index.json) under attributes",
     "  PATH             the .safetensors file or the HF index .json (every daemon can reach it)\n"
     "  --attr PATTERN=ATTR  the attribute of tensor PATTERN, or of those its glob matches\n"
     "                   (repeat it; the rules of tshard load); alone, the tensors imported\n"
     "  --default-attr ATTR the attribute of every other tensor; imports every tensor\n"
     "  --names A,B      import only these (comma-separated tshard names)\n"
     "  --strip-prefix P remove P from the file's names that start with it\n"
     "  --rename OLD=NEW the file's tensor OLD becomes NEW (repeat it; before the prefix rule)\n"
     "  --key KEY        idempotency key\n"
     "  --json           machine-readable output: path, created\n" CONNECT_HELP,
     "tshard import-safetensors model.safetensors --strip-prefix model. --default-attr "
     "'mesh=[4] placements=[R]' --attr 'w=mesh=[4] placements=[S(1)]'"},
    {"export-safetensors", cli_cmd_export_safetensors, NULL,
     "export tensors as a Hugging Face safetensors model (one file, or shards and an index)",
     "  PATH [NAME...]   the .safetensors file to write; the tensors: names, or globs in quotes\n"
     "  --prefix P       or: the tensors whose name starts with P\n"
     "  --all            or: every tensor of the job (one of NAME..., --prefix, --all is needed)\n"
     "  --json           machine-readable output: path, files\n"
     "  --max-shard-size SIZE  above it, HF shards beside PATH and PATH.index.json (5G, 512M)\n"
     "  --metadata KEY=VALUE  an entry of __metadata__ (repeat it; default format=pt)\n"
     "  --key KEY        idempotency key\n" CONNECT_HELP,
     "tshard export-safetensors out/model.safetensors --all --max-shard-size 5G"},
    {"checkpoint", cli_cmd_checkpoint, NULL,
     "show what a checkpoint holds, or clean up unfinished saves (no daemon needed)",
     "  show DIR         tensors, dtypes, shapes, attributes, pieces and checksums\n"
     "  clean DIR        remove what saves into DIR cut short left beside it (.NAME.tmp-*\n"
     "                   directories); those of a save in progress are left\n"
     "  --json           machine-readable output: show: tensors, their bytes and pieces, files;\n"
     "                   clean: dir, removed, in_use\n",
     "tshard checkpoint show ckpt/step100\n  tshard checkpoint clean ckpt/step100"},
    {"program", NULL, cli_cmd_program,
     "compiled programs: compile FILE.json, run ID, show ID, drop ID",
     "  compile FILE     compile the program (program/PROGRAM.md) on every rank; prints its id\n"
     "                   and a short report (kernels, dim groups, buckets built, the cache)\n"
     "  run ID           run it on the ranks' local slices; prints one line: the program, its\n"
     "                   inputs and named outputs, the time\n"
     "  show ID          the graph after optimization, fused kernels, every bucket, pool plan\n"
     "  drop ID          forget the program on every rank\n"
     "  --verbose        compile: print the full report (every bucket) instead of the short one\n"
     "  --buckets B      compile: lazy (each bucket on its first run, default) or ahead (all\n"
     "                   now); or\n"
     "                   NAME=RULE, dim group NAME's bucketing rule instead of the program's:\n"
     "                   pow2, step:S or V1,V2,... (e.g. --buckets n=16,32,64); repeat\n"
     "  --format F       compile: json (the text, default) or pb (a serialized ProgramGraph\n"
     "                   message; the default for FILE.pb)\n"
     "  --input N=T      run: program input N is stored tensor T (N=NUMBER: a scalar); repeat\n"
     "  --output N=T     run: program output N becomes tensor T (default: a tensor named N);\n"
     "                   repeat\n"
     "  --overwrite      run: outputs may replace existing tensors (else an existing name fails)\n"
     "  --key KEY        idempotency key\n" CONNECT_HELP,
     "tshard program compile deploy/examples/programs/adam.json\n  "
     "tshard program run b4ef54aea3cd6255 --input w=w --input g=g --input m=m --input v=v "
     "--input lr=0.001"},
    {"shutdown", NULL, cli_cmd_shutdown, "stop every daemon of the job",
     "  --key KEY        idempotency key\n" CONNECT_HELP, "tshard shutdown --job demo"},
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
    int strict = cli_strict_parse(&a, commands[i].usage);
    if (strict)
      return strict;
    a.json = cli_flag(&a, "json");
    if (commands[i].run)
      return commands[i].run(&a);
    tshard_client *c;
    int code = cli_connect(&a, &c);
    if (code)
      return code;
    code = commands[i].run_daemon(&a, c);
    tshard_close(&c);
    return code;
  }
  const char *names[NCOMMANDS], *usages[NCOMMANDS];
  for (size_t i = 0; i < NCOMMANDS; i++)
    names[i] = commands[i].name, usages[i] = commands[i].usage;
  if (strncmp(argv[1], "--", 2) == 0) { /* an option before any subcommand */
    const char *near = cli_suggest_option(argv[1] + 2, usages, (int)NCOMMANDS);
    if (near)
      fprintf(stderr,
              "tshard: unknown option '%s'; did you mean '--%s'? options follow the "
              "subcommand, e.g. tshard list --%s\n",
              argv[1], near, near);
    else
      fprintf(stderr,
              "tshard: unknown option '%s'; options follow the subcommand (tshard "
              "--help lists them)\n",
              argv[1]);
    return CLI_USAGE;
  }
  const char *near = cli_nearest(argv[1], names, (int)NCOMMANDS);
  if (near)
    fprintf(stderr, "tshard: unknown subcommand '%s'; did you mean '%s'?\n\n", argv[1], near);
  else
    fprintf(stderr, "tshard: unknown subcommand '%s'\n\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
