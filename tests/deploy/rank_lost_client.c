/* rank_lost_client.c - the C client of tests/deploy/test_rank_lost.sh: connects to one rank of a
 * job, reshards a tensor back and forth (S(0) <-> S(1) over the job's ranks) until a call
 * fails, then makes one more call on the same connection, and prints both failures:
 *
 *   first STATUS_NAME AT_MS MESSAGE     (AT_MS: the failure's wall-clock time, ms since 1970)
 *   later STATUS_NAME MESSAGE
 *
 * It creates READY_FILE once its first reshard succeeded (the test kills a rank after that).
 * usage: rank_lost_client JOB RANK TENSOR NP READY_FILE   exit 0 when a call failed */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tshard.h"

static long long wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: rank_lost_client JOB RANK TENSOR NP READY_FILE\n");
    return 2;
  }
  tshard_client *c = NULL;
  int rc = tshard_connect_rank(argv[1], atoi(argv[2]), 60000, &c);
  if (rc) {
    printf("connect %s: %s\n", tshard_status_name(rc), tshard_connect_message());
    return 1;
  }
  char attr[2][64];
  for (int k = 0; k < 2; k++)
    snprintf(attr[k], sizeof attr[k], "mesh=[%d] placements=[S(%d)]", atoi(argv[4]), k);
  for (long i = 0; i < 1000000; i++) {
    rc = tshard_reshard(c, argv[3], attr[(i + 1) % 2], NULL);
    if (rc)
      break;
    if (i == 0) {
      FILE *f = fopen(argv[5], "w");
      if (f)
        fclose(f);
    }
  }
  if (rc == TS_OK) {
    printf("no failure\n");
    tshard_close(&c);
    return 1;
  }
  printf("first %s %lld %s\n", tshard_status_name(rc), wall_ms(), tshard_last_message(c));
  rc = tshard_reshard(c, argv[3], attr[0], NULL);
  printf("later %s %s\n", tshard_status_name(rc), tshard_last_message(c));
  tshard_close(&c);
  return 0;
}
