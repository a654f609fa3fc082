/* exec_internal.h - what the executor's files share inside libtsshard (exec.c runs every plan,
 * exec_cyclic.c those with a block-cyclic side); nothing outside shard/ includes it. */
#ifndef TS_EXEC_INTERNAL_H
#define TS_EXEC_INTERNAL_H

#include "plan_internal.h"
#include "ts_comm.h"
#include "ts_shard.h"

/* Runs a plan with a block-cyclic side, with ts_reshard_exec's contract (src: this rank's local
 * array, row-major over its owned extents). */
int ts__exec_cyclic(ts_world *w, const ts_plan *p, const ts_tensor *src, const char *tgt_tag,
                    const ts_exec_opts *opts, ts_tensor *out, ts_exec_report *report,
                    ts_error *err);

#endif
