/* bench_guard.h - what makes a benchmark that starts daemons never leave them behind.
 *
 * tsb_guard_install() catches SIGINT, SIGTERM, SIGHUP and SIGALRM (armed by a timeout): the
 * handler stops the registered job (SIGTERM to its mpirun, which stops the daemons, and to each
 * daemon), stops the registered children (the MPI reference jobs, a Python client), waits for
 * them (bounded, then SIGKILL), removes the job's log and directory and exits 128 + the signal.
 * A SIGKILL of the benchmark runs no handler: mpirun and every child started by tsb_spawn get
 * SIGTERM from the kernel (PR_SET_PDEATHSIG, set in the child before exec; the harness sets it
 * for the daemons' mpirun too).
 *
 * Also the options every such benchmark takes (--help, --timeout, --wait-stdin) and the small
 * timing helpers they share. */
#ifndef TSB_GUARD_H
#define TSB_GUARD_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "harness.h"

/* Installs the handlers; timeout_s > 0 also arms alarm(timeout_s). */
void tsb_guard_install(int timeout_s);
/* The job whose daemons the handler stops (NULL: none). The struct must outlive the run. */
void tsb_guard_job(tse_job *j);

/* Starts argv (argv[0] a path) in its own process group with PR_SET_PDEATHSIG = SIGTERM, with
 * `env` (NULL-terminated "NAME=value" strings, may be NULL) added to its environment and its
 * stdout on a pipe returned in *out (stderr is the benchmark's). Returns the pid or -1. */
pid_t tsb_spawn(const char *const *argv, const char *const *env, FILE **out);
/* Starts the benchmark's own raw MPI reference: mpirun -np NP --oversubscribe argv[0] --raw
 * with the benchmark's options but --wait-stdin, as tsb_spawn does. */
pid_t tsb_spawn_raw(int np, int argc, char **argv, FILE **out);
/* Closes *out, waits for the child and forgets it; returns its exit status (128 + signal when
 * killed, -1 on error). */
int tsb_wait(pid_t pid, FILE **out);

/* After the daemons serve: prints job=, daemons_ready=1 and daemon_pids= (what a test waits
 * for) and, with wait_stdin, waits for a line or the end of stdin before going on. */
void tsb_announce(const tse_job *j, bool wait_stdin);

/* Parses "--timeout SEC" and "--wait-stdin" at argv[*i] (advancing *i); returns 1 when taken,
 * 0 when not one of them, -1 on a bad value (message printed). */
int tsb_common_option(int argc, char **argv, int *i, int *timeout_s, bool *wait_stdin);
#define TSB_COMMON_USAGE                                                                           \
  "  --timeout SEC    stop (daemons too) after SEC seconds (default: no limit)\n"                  \
  "  --wait-stdin     after the daemons serve (line daemons_ready=1), wait for a line or the\n"    \
  "                   end of stdin before measuring (for tests and for attaching a profiler)\n"    \
  "  --help           this text\n"                                                                 \
  "Ctrl-C, SIGTERM, SIGHUP, the timeout and even SIGKILL stop the daemons it started.\n"

/* Before the daemons start: daemons and raw references move data as a user's job would, with
 * Open MPI's single-copy transfers (cma, as tshard-launch uses) where process_vm_readv works
 * here, else none (the test harness turns them off by default); an
 * OMPI_MCA_btl_vader_single_copy_mechanism set by the caller wins. Prints mpi_single_copy=. */
void tsb_single_copy_as_users(void);

/* Parses the value `text` of option `flag` as a whole number in [lo, hi] into *out; 0, or -1
 * with a message naming the option on stderr. */
int tsb_parse_long(const char *self, const char *flag, const char *text, long lo, long hi,
                   long *out);
/* The user + system CPU seconds process pid has used so far (/proc/PID/stat), -1 if unknown. */
double tsb_cpu_seconds(int pid);

double tsb_now(void);
/* Sorts v and returns its median. */
double tsb_median(double *v, int n);

#endif
