/* tsd_ops.h - the operations of tshardd (libtsdops, daemon/ops/): one file per family (tensors:
 * ops.c and transfer.c; einsum.c; checkpoints: ckpt.c; programs: program.c, program_graph.c),
 * the operation log (oplog.c), the checks of a put's declaration (put_verify.c), and the engine
 * half of the table of operations (handlers.c). main.c gives tsd_ops to the engine; the engine
 * calls nothing else of this folder. The operations include the engine (to answer, stage and
 * run collectives), the catalog (catalog/tsd_catalog.h, which they publish) and the wire layer;
 * never the front. */
#ifndef TSD_OPS_H
#define TSD_OPS_H

#include "tsd_engine.h"

/* The engine half of the table of operations: one row per Request op case, indexed by it like
 * the wire half (wire/optable.c). Which fields a row needs follows from the wire half's scope:
 * LOCAL and CATALOG run_local; COLLECTIVE run_collective (a get, collective for its first chunk
 * only, has both); LOOP none. */
typedef struct tsd_op_handlers {
  tsd_local_fn run_local;           /* CATALOG and LOCAL (and get's later chunks) */
  tsd_collective_fn run_collective; /* COLLECTIVE */
  tsd_changes_fn changes;           /* NULL: no metadata changes */
  /* The names whose data it writes without changing their metadata, which its idempotency key
   * touches beside its changes (NULL: none). */
  tsd_changes_fn touches;
  tsd_answer_fn answer; /* NULL: the status only */
} tsd_op_handlers;

/* The row of an op case, or NULL (unknown, or answered by the loop thread alone). */
const tsd_op_handlers *tsd_op_handlers_find(int op_case);

/* The entry points the engine runs the operations through (tsd_engine_opts.ops). */
extern const tsd_engine_ops tsd_ops;

#endif
