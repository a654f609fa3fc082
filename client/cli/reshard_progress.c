/* reshard_progress.c - the progress line of `tshard reshard` for large tensors: on stderr when it
 * is a terminal and the tensor has 16 MiB or more, or always with --progress (never with --json
 * unless --progress is given), as put and get draw theirs.
 *
 * A reshard is one operation on the daemons (its collectives report nothing until they end), so
 * the line is estimate.c's: the time elapsed against the tensor's bytes over the rate the job's
 * earlier reshards by the same strategy reached (the key in the job's rates file is the
 * strategy: the planner's choice, or --strategy). The first reshard by a strategy on a job has no
 * estimate and says so; every finished reshard prints its measured rate and records it under the
 * strategy it ran. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tshard.h"

int cli_reshard_progress(const cli_args *a, tshard_client *c, const char *name, const char *to,
                         const tshard_reshard_opts *o, char *strategy, size_t cap, uint64_t *us) {
  uint64_t bytes = cli_estimate_wanted(a) ? cli_tensor_bytes(c, name) : 0;
  if (!cli_estimate_shown(a, bytes)) { /* no line: the plain call */
    int rc = tshard_reshard(c, name, to, o);
    tshard_reshard_report(c, strategy, cap, us);
    return rc;
  }
  char planned[32] = "";
  char *explain = NULL;
  if (o->strategy && o->strategy[0] && strcmp(o->strategy, "auto") != 0)
    snprintf(planned, sizeof planned, "%s", o->strategy);
  else if (tshard_plan(c, name, to, NULL, &explain, planned, sizeof planned) != TS_OK)
    snprintf(planned, sizeof planned, "auto");
  free(explain);
  cli_estimate e;
  snprintf(e.head, sizeof e.head, "reshard %s by %s", name, planned);
  snprintf(e.earlier, sizeof e.earlier, "reshard by %s", planned);
  cli_estimate_begin(a, &e, planned, bytes);
  uint64_t ticket = 0;
  tshard_result res = {.status = -1};
  int rc = tshard_submit_reshard(c, name, to, o, &ticket);
  if (rc == TS_OK)
    rc = cli_estimate_wait(&e, c, ticket, &res, NULL);
  if (res.status != -1) {
    snprintf(strategy, cap, "%s", res.strategy);
    *us = res.elapsed_us;
    snprintf(e.head, sizeof e.head, "reshard %s by %s", name, strategy);
  }
  cli_estimate_end(&e, rc, ticket != 0, strategy, bytes);
  return rc;
}
