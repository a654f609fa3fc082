/* cli.h - shared pieces of the tshard command-line tool: the subcommand table entry, option
 * parsing helpers, and output helpers. Internal to the CLI. */
#ifndef TSHARD_CLI_H
#define TSHARD_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ts_kernels.h"

/* Exit codes (documented in `tshard --help`). */
enum {
  CLI_OK = 0,
  CLI_FAILED = 1,  /* the operation failed (the daemon or the planner said why) */
  CLI_USAGE = 2,   /* bad command line */
  CLI_IO = 3,      /* a file could not be read or written */
  CLI_CONNECT = 4, /* no daemon could be reached */
};

/* Positional arguments a command line may have (a usage word ending in "..." takes the rest). */
#define CLI_MAX_POS 64

typedef struct cli_args {
  int argc;
  char **argv; /* the subcommand's arguments (argv[0] is the subcommand) */
  bool json;
  bool parsed; /* cli_strict_parse checked the arguments and found the positionals */
  int npos;
  const char *pos[CLI_MAX_POS];
} cli_args;

typedef struct tshard_client tshard_client;

typedef struct cli_command {
  const char *name;
  int (*run)(cli_args *a);                          /* a command that needs no daemon, or */
  int (*run_daemon)(cli_args *a, tshard_client *c); /* one run on a connected client */
  const char *summary;
  const char *usage; /* options, one per line */
  const char *example;
} cli_command;

/* Finds "--name VALUE" or "--name=VALUE" in the arguments; NULL when absent. */
const char *cli_opt(const cli_args *a, const char *name);
/* Every value of a repeated option, in order, the first max into out: the count (may exceed
 * max). */
int cli_opt_all(const cli_args *a, const char *name, const char **out, int max);
bool cli_flag(const cli_args *a, const char *name);
/* The first argument that is not an option or an option's value (NULL when none). */
const char *cli_positional(const cli_args *a, int index);
/* "1024,1024" -> shape; errors name the option. */
int cli_parse_shape(const char *text, int *ndim, int64_t *shape, ts_error *err);
/* A whole file of at most 2 MiB, NUL-terminated (NULL with errno set: EFBIG when larger). */
char *cli_read_file(const char *path, size_t *out_len);
/* A duration "30s", "500ms" or "30" (seconds), at most one day, in ms: 0, or -1 when malformed. */
int cli_parse_ms(const char *s, int *out);
/* Prints "tshard: <msg>" and returns the exit code for a status. */
int cli_fail(int status, const char *msg);
/* Writes a JSON string literal. */
void cli_json_string(FILE *f, const char *s);
/* The lines of list (one item per line, NULL: none) as a JSON array of strings. */
void cli_json_lines(FILE *f, const char *list);

/* usage_check.c: checks the arguments against the usage text (options, their values, the number of
 * positionals); prints what is wrong with a suggestion and returns CLI_USAGE, else CLI_OK. */
int cli_strict_parse(cli_args *a, const char *usage);
int cli_edit_distance(const char *a, const char *b);
/* The candidate nearest to word by edit distance, NULL when none is near enough. */
const char *cli_nearest(const char *word, const char *const *cands, int n);
/* The option of any usage text nearest to word (without "--"), or NULL. */
const char *cli_suggest_option(const char *word, const char *const *usages, int n);

/* progress.c: a bar with rate and time left on stderr for a put or get of `bytes` (see there). */
typedef struct cli_progress {
  const char *what, *name;
  double start, last_draw;
} cli_progress;
void cli_progress_start(const cli_args *a, tshard_client *c, size_t bytes, cli_progress *p,
                        const char *what, const char *name);
/* estimate.c: the estimated progress line of one blocking call (a reshard, a synchronous save
 * or load; see there). wanted: whether to size the data at all; shown: whether the line is drawn
 * for `bytes`. The caller sets head ("save DIR") and earlier ("save": what the estimate comes
 * from), begins (the estimate of `key` from the job's rates file), submits the call, waits on its
 * ticket (drawing; res and info as tshard_wait_ckpt's), and ends with the measured rate (the
 * final line, the rate recorded under key when rc is TS_OK; a newline when the call was sent). */
typedef struct tshard_result tshard_result;
typedef struct tshard_ckpt_info tshard_ckpt_info;
typedef struct cli_estimate {
  char head[200], earlier[64];
  uint64_t bytes;
  double est_s;   /* the estimated seconds, 0: none */
  char path[600]; /* the job's rates file, "": none */
  double start;
} cli_estimate;
bool cli_estimate_wanted(const cli_args *a);
bool cli_estimate_shown(const cli_args *a, uint64_t bytes);
void cli_estimate_begin(const cli_args *a, cli_estimate *e, const char *key, uint64_t bytes);
int cli_estimate_wait(cli_estimate *e, tshard_client *c, uint64_t ticket, tshard_result *res,
                      tshard_ckpt_info *info);
void cli_estimate_end(cli_estimate *e, int rc, bool sent, const char *key, uint64_t bytes);
/* A tensor's bytes (dtype size times its elements), 0 when it cannot be described. */
uint64_t cli_tensor_bytes(tshard_client *c, const char *name);
/* reshard_progress.c: one reshard, with a progress line on stderr for large tensors (see there);
 * the tshard status, with the strategy run and its time in microseconds. */
typedef struct tshard_reshard_opts tshard_reshard_opts;
int cli_reshard_progress(const cli_args *a, tshard_client *c, const char *name, const char *to,
                         const tshard_reshard_opts *o, char *strategy, size_t cap, uint64_t *us);
/* The same bar fed by the caller: whether it is shown (then p is set up), and a redraw. */
bool cli_progress_begin(const cli_args *a, uint64_t bytes, cli_progress *p, const char *what,
                        const char *name);
void cli_progress_update(cli_progress *p, uint64_t done, uint64_t total);
/* cmd_put.c: put NAME FILE.npy with the dtype and shape checked against the tensor. */
int cli_put_checked(cli_args *a, tshard_client *c, const char *name, const char *file);

int cli_cmd_plan(cli_args *a);
int cli_cmd_trace(cli_args *a);
int cli_cmd_show(cli_args *a);
int cli_cmd_show_tensor(cli_args *a, const char *name);
/* Connects as the connection options say (--socket, --tcp + --token-file, --job + --rank). */
int cli_connect(const cli_args *a, tshard_client **out);
/* Connects over TCP as --tcp HOST:PORT and --token-file FILE say, to PORT plus port_offset (a
 * job's ranks listen on consecutive ports). CLI_USAGE or CLI_IO, the reason on stderr, when the
 * options are incomplete or the token cannot be read; otherwise CLI_OK with the connection's
 * tshard status in *rc. */
int cli_connect_tcp(const cli_args *a, int port_offset, int timeout_ms, tshard_client **out,
                    int *rc);
int cli_cmd_ping(cli_args *a, tshard_client *c);
int cli_cmd_create(cli_args *a, tshard_client *c);
int cli_cmd_put(cli_args *a, tshard_client *c);
int cli_cmd_get(cli_args *a, tshard_client *c);
int cli_cmd_get_slice(cli_args *a, tshard_client *c);
int cli_cmd_reshard(cli_args *a, tshard_client *c);
int cli_cmd_drop(cli_args *a, tshard_client *c);
int cli_cmd_program(cli_args *a, tshard_client *c); /* cmd_program.c */
int cli_cmd_list(cli_args *a, tshard_client *c);
int cli_cmd_describe(cli_args *a, tshard_client *c);
/* cmd_job.c: a job's layout (tshard_describe_job) printed: describe without a tensor (text or
 * --json), the host lines of stats' text, the layout fields of stats' JSON object. */
typedef struct tshard_job tshard_job;
int cli_job_describe(const cli_args *a, const tshard_job *j);
int cli_job_text(const tshard_job *j);
void cli_job_json_fields(const tshard_job *j);
int cli_cmd_stats(cli_args *a, tshard_client *c);
int cli_cmd_snapshot(cli_args *a, tshard_client *c); /* cmd_ckpt.c */
int cli_cmd_shutdown(cli_args *a, tshard_client *c);
/* cmd_spmd.c: --participants and --collective-timeout of create, reshard and drop (sets the
 * client's group); CLI_OK or the exit code, the message printed. */
int cli_apply_group(const cli_args *a, tshard_client *c);
/* cmd_einsum.c: distributed einsum */
int cli_cmd_einsum(cli_args *a);
int cli_cmd_einsum_backward(cli_args *a, tshard_client *c);
int cli_cmd_einsum_release(cli_args *a, tshard_client *c);
/* cmd_ckpt.c: checkpoints */
int cli_cmd_save(cli_args *a, tshard_client *c);
/* The tensors of a save or an export asked one way (n NAMEs, --prefix or --all), else the
 * usage error saying how to save everything. */
int cli_selection(const cli_args *a, const char *what, int n);
int cli_cmd_load(cli_args *a, tshard_client *c);
int cli_cmd_import_safetensors(cli_args *a); /* cmd_safetensors.c: they connect themselves */
int cli_cmd_export_safetensors(cli_args *a);
int cli_cmd_checkpoint(cli_args *a);

#endif
