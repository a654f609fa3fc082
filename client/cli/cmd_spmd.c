/* cmd_spmd.c - the CLI's SPMD collective options of create, reshard and drop:
 * `--participants 0,1,2,3` (or `all`: every rank of the job) makes the command one
 * participant's submission of a collective, run once every participant's daemon got it under
 * the same `--key` (required then); `--collective-timeout 30s` (ms or s; default the client's
 * timeout less 5 s) bounds the wait, after which every participant gets the error naming the
 * ranks that never came. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tshard.h"

#define MAX_PARTICIPANTS 65536

int cli_parse_ms(const char *s, int *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 0)
    return -1;
  if (strcmp(end, "s") == 0 || *end == '\0')
    v *= 1000;
  else if (strcmp(end, "ms") != 0)
    return -1;
  if (v > 86400000)
    return -1;
  *out = (int)v;
  return 0;
}

int cli_apply_group(const cli_args *a, tshard_client *c) {
  const char *parts = cli_opt(a, "participants"), *tmo = cli_opt(a, "collective-timeout");
  if (!parts) {
    if (tmo)
      return cli_fail(CLI_USAGE, "--collective-timeout applies only with --participants");
    return CLI_OK;
  }
  if (!cli_opt(a, "key") || !cli_opt(a, "key")[0])
    return cli_fail(CLI_USAGE, "--participants needs --key KEY, the same in every "
                               "participant's command (it matches their submissions)");
  int timeout = 0;
  if (tmo && cli_parse_ms(tmo, &timeout)) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "--collective-timeout %.40s: expected a duration such as 30s or "
             "500ms, at most one day",
             tmo);
    return cli_fail(CLI_USAGE, msg);
  }
  int world = 0, n = 0;
  int *ranks = malloc(MAX_PARTICIPANTS * sizeof *ranks);
  if (!ranks)
    return cli_fail(CLI_FAILED, "no memory for the participants");
  if (strcmp(parts, "all") == 0) {
    int me, st = tshard_ping(c, &me, &world);
    if (st) {
      free(ranks);
      return cli_fail(st, tshard_last_message(c));
    }
    for (n = 0; n < world && n < MAX_PARTICIPANTS; n++)
      ranks[n] = n;
  } else {
    const char *p = parts;
    while (*p) {
      char *end;
      errno = 0;
      long v = strtol(p, &end, 10);
      if (errno || end == p || v < 0 || v > 1000000 || (*end && *end != ',') ||
          n == MAX_PARTICIPANTS) {
        free(ranks);
        char msg[200];
        snprintf(msg, sizeof msg,
                 "--participants %.60s: expected 'all' or ranks such as "
                 "0,1,2,3",
                 parts);
        return cli_fail(CLI_USAGE, msg);
      }
      ranks[n++] = (int)v;
      p = *end ? end + 1 : end;
    }
  }
  int st = tshard_set_group(c, ranks, n, timeout);
  free(ranks);
  if (st)
    return cli_fail(CLI_USAGE, tshard_last_message(c));
  return CLI_OK;
}
