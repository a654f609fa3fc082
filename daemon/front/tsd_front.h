/* tsd_front.h - the front of tshardd (libtsdfront, daemon/front/): the libuv loop thread
 * (server.c: sockets, framing, validation, ping, list and describe from the catalog, delivery of
 * the engine's answers) and the TERM/INT handler (signals.c). It includes the wire layer (to
 * decode and validate requests), the engine's hand-over (to queue work and take replies) and the
 * catalog (catalog/tsd_catalog.h, which the operations publish and the loop reads); the engine
 * never calls it, and the operations do not include it: the connection count they report in
 * stats is the hand-over's (tsd_shared.connections, kept by the server). */
#ifndef TSD_FRONT_H
#define TSD_FRONT_H

#include <pthread.h>

#include "tsd_base.h"
#include "tsd_catalog.h"
#include "tsd_engine.h"
#include "tsd_wire.h"

/* ---------------------------------------------------------------------------------------------
 * signals.c: TERM and INT, caught for the process's life and written to a pipe the loop watches
 * (see the top of signals.c). */
/* Installs the handler (once per process) and gives the pipe's read end (non-blocking). */
int tsd_signals_open(int *read_fd, ts_error *err);
/* The next signal's number from the pipe, 0 when none is waiting. */
int tsd_signals_take(int read_fd);

/* ---------------------------------------------------------------------------------------------
 * The front half of the table of operations: the answers the loop thread gives itself, indexed
 * by op case like the wire half (wire/optable.c). */
/* What the loop thread's answers need (ping, catalog). */
typedef struct tsd_loop_info {
  int rank, world_size;
  const char *job;
  int64_t max_frame;
  tsd_catalog *catalog;
} tsd_loop_info;
/* 1 answered into a new frame, 0 left to the engine, -1 no memory. */
typedef int (*tsd_loop_fn)(const tsd_loop_info *info, const Tshard__Request *req, uint8_t **frame,
                           size_t *len);
/* The loop answer of an op case (LOOP and CATALOG scopes), or NULL. */
tsd_loop_fn tsd_loop_answer(int op_case);

/* ---------------------------------------------------------------------------------------------
 * server.c */
typedef struct tsd_server tsd_server;
typedef struct tsd_server_opts {
  const tsd_config *cfg;
  int rank, world_size;
  tsd_shared *shared; /* its catalog is the one the loop answers from */
  char socket_path[600];
} tsd_server_opts;
/* Binds the sockets (errors before the thread starts) and starts the loop thread. */
int tsd_server_start(tsd_server_opts *opts, tsd_server **out, ts_error *err);
/* Asks the loop thread to flush replies, close every handle, remove the sockets and return;
 * joins it and frees the server. Accepts NULL. */
void tsd_server_stop(tsd_server **s);

#endif
