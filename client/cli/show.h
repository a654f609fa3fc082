/* show.h - drawing where the slices of a sharded tensor live, for `tshard show`. Internal to the
 * CLI. */
#ifndef TSHARD_CLI_SHOW_H
#define TSHARD_CLI_SHOW_H

#include <stdbool.h>
#include <stdio.h>

#include "ts_plan.h"

typedef struct show_opts {
  int dims[2];  /* the tensor dims drawn as rows and columns (dims[1] < 0: a 1-D view) */
  bool unicode; /* box-drawing characters; ASCII otherwise */
  int width;    /* columns of the drawing (0: 64) */
} show_opts;

/* Draws the 2-D (or 1-D) view of the tensor's sharding: a grid of blocks sized in proportion to
 * the split sizes, each labelled with the ranks that hold it. */
int cli_show_draw(FILE *out, int ndim, const int64_t *shape, const ts_attr *attr,
                  const show_opts *opts, ts_error *err);

#endif
