/* clock.c - each rank's monotonic clock against rank 0's, measured once at start-up so that the
 * daemons' per-operation traces can be drawn on one time line.
 *
 * Rank 0 answers CLOCK_ROUNDS pings of every other rank in turn with its clock (ts_wait_now_ns);
 * a rank takes the round with the shortest round trip and reads rank 0's clock as having been
 * taken half way through it: offset = t0 - (sent + received) / 2, so rank 0's time of one of this
 * rank's instants is the instant plus the offset, within half the round trip (rtt). On one host
 * the clocks are one clock and the offsets are within the round trip of 0. Collective over the
 * world, on a private duplicate of its communicator. */
#include <stdlib.h>

#include "comm_internal.h"
#include "ts_comm.h"
#include "ts_wait.h"

#define CLOCK_ROUNDS 5
#define CLOCK_TAG 1

static int serve(MPI_Comm comm, int size, ts_error *err) {
  for (int r = 1; r < size; r++)
    for (int k = 0; k < CLOCK_ROUNDS; k++) {
      char ping;
      TS_MPI_CHECK(MPI_Recv(&ping, 1, MPI_CHAR, r, CLOCK_TAG, comm, MPI_STATUS_IGNORE), err);
      int64_t t0 = ts_wait_now_ns();
      TS_MPI_CHECK(MPI_Send(&t0, 1, MPI_INT64_T, r, CLOCK_TAG, comm), err);
    }
  return TS_OK;
}

static int ask(MPI_Comm comm, int64_t *offset_ns, int64_t *rtt_ns, ts_error *err) {
  int64_t best = -1;
  for (int k = 0; k < CLOCK_ROUNDS; k++) {
    char ping = 0;
    int64_t t0 = 0, sent = ts_wait_now_ns();
    TS_MPI_CHECK(MPI_Send(&ping, 1, MPI_CHAR, 0, CLOCK_TAG, comm), err);
    TS_MPI_CHECK(MPI_Recv(&t0, 1, MPI_INT64_T, 0, CLOCK_TAG, comm, MPI_STATUS_IGNORE), err);
    int64_t got = ts_wait_now_ns();
    if (best < 0 || got - sent < best) {
      best = got - sent;
      *offset_ns = t0 - (sent + got) / 2;
    }
  }
  *rtt_ns = best;
  return TS_OK;
}

int ts_world_clock_offset(ts_world *w, int64_t *offset_ns, int64_t *rtt_ns, ts_error *err) {
  *offset_ns = *rtt_ns = 0;
  MPI_Comm comm;
  TS_MPI_CHECK(MPI_Comm_dup(ts_comm_handle(ts_world_comm(w)), &comm), err);
  int rank = ts_world_rank(w), size = ts_world_size(w);
  int rc = rank == 0 ? serve(comm, size, err) : ask(comm, offset_ns, rtt_ns, err);
  MPI_Comm_free(&comm);
  return rc;
}
