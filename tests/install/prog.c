/* prog.c - a client program built against an installed tshard (tests/install/test_install.sh
 * builds it with pkg-config and with find_package). Offline it checks the version against the
 * one CMake passed, the error strings against the list in tshard_errors.h and that a connect to
 * a socket that does not exist fails (and gives no handle). With a job it also talks to real
 * daemons (2 ranks, started by the installed launcher): creates a tensor with the DTensor and
 * named-axis spelling, puts it, reshards it, gets it back and compares with the values it put,
 * checks the canonical attribute describe returns, and drops it.
 *
 * usage: prog VERSION MISSING_SOCKET [JOB TENSOR_NAME]   exit 0 when every check passed */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tshard/tshard.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void live(const char *job, const char *name) {
  tshard_client *c = NULL;
  int rc = tshard_connect_rank(job, 0, 30000, &c);
  CHECK(rc == TS_OK, "connect to job %s rank 0: %s", job, tshard_status_name(rc));
  if (rc != TS_OK)
    return;
  int rank = -1, world = -1;
  CHECK(tshard_ping(c, &rank, &world) == TS_OK && rank == 0 && world == 2, "ping: %d of %d", rank,
        world);
  int64_t shape[2] = {6, 4};
  float in[24], out[24];
  for (int i = 0; i < 24; i++)
    in[i] = (float)i * 1.5f - 7.0f;
  rc = tshard_create(c, name, "f32", 2, shape, "mesh=[dp=2] placements=[dp:Shard(0)]", NULL, NULL);
  CHECK(rc == TS_OK, "create: %s", tshard_last_message(c));
  CHECK(tshard_put(c, name, in, sizeof in, NULL) == TS_OK, "put: %s", tshard_last_message(c));
  rc = tshard_reshard(c, name, "mesh=[2] placements=[Shard(1)]", NULL);
  CHECK(rc == TS_OK, "reshard: %s", tshard_last_message(c));
  memset(out, 0, sizeof out);
  CHECK(tshard_get(c, name, out, sizeof out) == TS_OK, "get: %s", tshard_last_message(c));
  for (int i = 0; i < 24; i++)
    CHECK(out[i] == in[i], "element %d: got %g, put %g", i, out[i], in[i]);
  tshard_info info;
  memset(&info, 0, sizeof info);
  CHECK(tshard_describe(c, name, &info) == TS_OK, "describe: %s", tshard_last_message(c));
  CHECK(info.attr && strcmp(info.attr, "mesh=[2]@0-1 placements=[S(1)]") == 0, "attr %s",
        info.attr ? info.attr : "(none)");
  tshard_info_clear(&info);
  /* a bad attribute: the daemon's column-precise message */
  rc = tshard_reshard(c, name, "mesh=[2] placements=[Shard(0), Oops]", NULL);
  CHECK(rc == TS_PARSE && strstr(tshard_last_message(c), "column 32"), "bad attr: %s %s",
        tshard_status_name(rc), tshard_last_message(c));
  CHECK(tshard_drop(c, name, NULL) == TS_OK, "drop: %s", tshard_last_message(c));
  tshard_close(&c);
  CHECK(c == NULL, "close clears the handle");
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 5) {
    fprintf(stderr, "usage: prog VERSION MISSING_SOCKET [JOB TENSOR_NAME]\n");
    return 2;
  }
  printf("tshard %s\n", tshard_version());
  CHECK(strcmp(tshard_version(), argv[1]) == 0, "version %s, expected %s", tshard_version(),
        argv[1]);
  CHECK(strcmp(tshard_strerror(TS_NOT_FOUND), "no such tensor") == 0, "strerror: %s",
        tshard_strerror(TS_NOT_FOUND));
  CHECK(strcmp(tshard_status_name(TS_BAD_ATTRIBUTE), "BAD_ATTRIBUTE") == 0, "status name");
  CHECK(strcmp(tshard_status_name(9999), "UNKNOWN") == 0, "unknown status name");
  tshard_client *c = NULL;
  int rc = tshard_connect_path(argv[2], 2000, &c);
  printf("connect to a missing socket: %s\n", tshard_status_name(rc));
  CHECK(rc != TS_OK && c == NULL, "connect to %s: %d", argv[2], rc);
  tshard_close(NULL);
  if (argc == 5)
    live(argv[3], argv[4]);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
