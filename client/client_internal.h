/* client_internal.h - what the files of libtshard share: the client handle and the call. */
#ifndef TSHARD_CLIENT_INTERNAL_H
#define TSHARD_CLIENT_INTERNAL_H

#include <stdbool.h>

#include "tshard.h"
#include "tshard.pb-c.h"

#define TSC_MAX_FRAME (1u << 30) /* the largest answer a client accepts */

/* Answers are decoded into memory the client keeps and reuses (a bump arena reset by every
 * call), so a stream of large chunks does not fault in fresh pages for each one. */
typedef struct tsc_arena {
  uint8_t *buf;
  size_t cap, used;
} tsc_arena;

struct tshard_client {
  int fd;
  tsc_arena arena;
  uint8_t *rbuf; /* the frame being received, reused */
  size_t rcap;
  bool broken; /* a timeout or I/O error left a frame half sent or received */
  int timeout_ms;
  size_t chunk;
  uint64_t next_id;
  char token[257];
  char message[1024];
};

/* Sends req (id and token filled in) and waits for its answer. On a transport failure returns
 * TS_IO or TS_TIMEOUT; otherwise the daemon's status, with *resp set (free with
 * tshard__response__free_unpacked) whatever the status. */
int tsc_call(tshard_client *c, Tshard__Request *req, Tshard__Response **resp);
/* Frees an answer of tsc_call (it lives in the client's arena). */
void tsc_free(tshard_client *c, Tshard__Response *r);
int tsc_fail(tshard_client *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
