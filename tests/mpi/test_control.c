/* test_control.c - the daemon's control channel (comm/control/) under mpirun: every rank sends
 * every other rank a stream of messages of random lengths (empty, small, and large enough that
 * MPI cannot hand them over at once), many more than the channel's first room for pending sends,
 * while it receives; each message's bytes, tag and length are a function of (source,
 * destination, index), so the receiver checks each one against what it computes itself, and the
 * order of each source's stream. Then the sends all retire (progress counts down to 0, flush
 * returns), and bad arguments are refused with what was wrong. */
#define TS_TEST_SEED 0x5eedc0de
#include "mpi_check.h"
#include "ts_control.h"
#include "ts_wait.h"

enum { PER_PEER = 70 };

/* The length and tag of message i from src to dst, and its byte k: the same on every rank. */
static size_t msg_len(int src, int dst, int i) {
  uint64_t h = (uint64_t)(src * 7919 + dst * 104729 + i * 15485863) * 0x9e3779b97f4a7c15ull;
  switch ((h >> 40) % 5) {
  case 0: return 0;
  case 1: return 1 + (h >> 8) % 64;
  case 2: return 100 + (h >> 8) % 4000;
  case 3: return 70000 + (h >> 8) % 5000; /* past any eager limit: it waits for the receiver */
  default: return 8;
  }
}
static int msg_tag(int src, int dst, int i) { return (src * 31 + dst * 17 + i) % 30001; }
static uint8_t msg_byte(int src, int dst, int i, size_t k) {
  return (uint8_t)(src * 13 + dst * 7 + i * 5 + k * 3 + (k >> 8));
}

/* Sends message i to dst, built from the formula. */
static int send_one(ts_control *c, int dst, int i) {
  size_t n = msg_len(world_rank, dst, i);
  uint8_t *b = malloc(n ? n : 1);
  if (!b)
    return TS_NO_MEMORY;
  for (size_t k = 0; k < n; k++)
    b[k] = msg_byte(world_rank, dst, i, k);
  ts_error err;
  int rc = ts_control_send(c, dst, msg_tag(world_rank, dst, i), b, n, &err);
  CHECK(rc == TS_OK, "send %d to %d: %s", i, dst, err.msg);
  memset(b, 0xee, n); /* the channel sends its own copy */
  free(b);
  return rc;
}

/* Checks one received message against the next one expected from its source. */
static void check_one(int src, int tag, const uint8_t *b, size_t len, int *next) {
  int i = next[src]++;
  CHECK(i < PER_PEER, "message %d from rank %d: only %d were sent", i, src, PER_PEER);
  CHECK(tag == msg_tag(src, world_rank, i), "message %d from %d: tag %d, sent %d", i, src, tag,
        msg_tag(src, world_rank, i));
  size_t want = msg_len(src, world_rank, i);
  CHECK(len == want, "message %d from %d: %zu bytes, sent %zu", i, src, len, want);
  size_t bad = 0;
  for (size_t k = 0; k < len && k < want; k++)
    bad += b[k] != msg_byte(src, world_rank, i, k);
  CHECK(bad == 0, "message %d from %d: %zu of %zu bytes differ", i, src, bad, len);
}

static void test_streams(ts_control *c) {
  ts_error err;
  int *next = calloc((size_t)world_size, sizeof *next);
  int expected = (world_size - 1) * PER_PEER, got = 0, sent = 0;
  ts_waiter w;
  ts_waiter_init(&w, &ts_wait_mpi, ts_wait_deadline_ms(60000));
  /* Sends interleaved with receives: a few sends per turn, every destination in turn. */
  while (got < expected || sent < PER_PEER) {
    bool moved = false;
    for (int k = 0; k < 3 && sent < PER_PEER; k++, sent++, moved = true)
      for (int d = 0; d < world_size; d++)
        if (d != world_rank)
          send_one(c, d, sent);
    int src, tag;
    void *buf;
    size_t len;
    int rc = ts_control_poll(c, &src, &tag, &buf, &len, &err);
    CHECK(rc >= 0, "poll: %s", err.msg);
    if (rc < 0)
      break;
    if (rc == 1) {
      CHECK(src >= 0 && src < world_size && src != world_rank, "message from rank %d", src);
      if (src >= 0 && src < world_size)
        check_one(src, tag, buf, len, next);
      free(buf);
      got++;
      moved = true;
    }
    int pending = ts_control_progress(c, &err);
    CHECK(pending >= 0, "progress: %s", err.msg);
    if (moved)
      ts_waiter_progress(&w);
    else if (ts_waiter_pause(&w) == TS_TIMEOUT)
      break;
  }
  CHECK(got == expected, "received %d of %d messages", got, expected);
  for (int s = 0; s < world_size; s++)
    CHECK(s == world_rank || next[s] == PER_PEER, "rank %d: %d of %d messages", s, next[s],
          PER_PEER);
  CHECK(ts_control_flush(c, 30000, &err) == TS_OK, "flush: %s", err.msg);
  CHECK(ts_control_progress(c, &err) == 0, "sends still pending after the flush");
  free(next);
}

static void test_misuse(ts_control *c) {
  ts_error err;
  uint8_t b[4] = {1, 2, 3, 4};
  CHECK(ts_control_send(c, world_size, 1, b, 4, &err) == TS_INVALID_ARGUMENT &&
            strstr(err.msg, "destination"),
        "a destination past the world: %s", err.msg);
  CHECK(ts_control_send(c, -1, 1, b, 4, &err) == TS_INVALID_ARGUMENT, "destination -1");
  CHECK(ts_control_send(c, 0, 30001, b, 4, &err) == TS_INVALID_ARGUMENT &&
            strstr(err.msg, "tag 30001"),
        "tag 30001: %s", err.msg);
  CHECK(ts_control_send(c, 0, 1, NULL, 4, &err) == TS_INVALID_ARGUMENT, "NULL data");
  CHECK(ts_control_poll(c, NULL, NULL, NULL, NULL, &err) == -TS_INVALID_ARGUMENT,
        "poll with NULL arguments");
  CHECK(ts_control_progress(NULL, &err) == 0, "progress of no channel");
  CHECK(ts_control_flush(NULL, 10, &err) == TS_OK, "flush of no channel");
  ts_control_destroy(NULL);
}

int main(int argc, char **argv) {
  if (!mpi_check_start(&argc, &argv))
    return 1;
  ts_error err;
  ts_control *c = NULL;
  int rc = ts_control_create(W, &c, &err);
  CHECK(rc == TS_OK, "create: %s", err.msg);
  if (rc == TS_OK) {
    CHECK(ts_control_rank(c) == world_rank && ts_control_size(c) == world_size, "rank, size");
    test_streams(c);
    test_misuse(c);
    ts_control_destroy(&c);
    CHECK(c == NULL, "destroy clears the pointer");
  }
  return mpi_check_finish("test_control");
}
