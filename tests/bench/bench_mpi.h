/* bench_mpi.h - helpers of the MPI benchmark programs that drive the engine in-process
 * (bench_reshard.c, bench_dist_einsum.c): the median of several runs, the slowest rank's time,
 * and an attribute parsed or the job aborted. Static: each program includes it once. */
#ifndef TS_BENCH_MPI_H
#define TS_BENCH_MPI_H

#include <mpi.h>
#include <stdio.h>

#include "ts_shard.h"

/* Sorts v in place (insertion: a handful of runs). */
static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double slowest(double t) {
  double m;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static ts_attr *attr(const char *text) {
  ts_attr *a = NULL;
  ts_error err;
  if (ts_attr_parse(text, &a, &err)) {
    fprintf(stderr, "%s: %s\n", text, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return a;
}

#endif
