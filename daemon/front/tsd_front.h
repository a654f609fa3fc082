/* tsd_front.h - the front of tshardd (libtsdfront, daemon/front/): the libuv loop thread
 * (server.c: sockets, framing, validation, ping, delivery of the engine's answers) and the
 * catalog it answers list and describe from (catalog.c), which the operations publish. It
 * includes the wire layer (to decode and validate requests) and the engine's hand-over (to queue
 * work and take replies); the engine never calls it (it carries the catalog and the server as
 * opaque pointers in tsd_shared). */
#ifndef TSD_FRONT_H
#define TSD_FRONT_H

#include <pthread.h>

#include "tsd_base.h"
#include "tsd_engine.h"
#include "tsd_wire.h"

/* ---------------------------------------------------------------------------------------------
 * catalog.c: the tensors' metadata for list and describe, published by the operations on the
 * engine thread (see the top of catalog.c). */
typedef struct tsd_catalog_entry {
  char name[TS_NAME_MAX];
  Tshard__DescribeResult *describe; /* unpacked by protobuf-c, without its ranks */
  ts_attr *attr;                    /* a copy of the tensor's attribute (NULL: no boxes) */
  int world;                        /* the world size the boxes per rank run over */
  void *ranks; /* the bytes and box per rank, built at the first describe; NULL until then */
} tsd_catalog_entry;
typedef struct tsd_catalog {
  pthread_mutex_t mu;
  tsd_catalog_entry *v;
  int n, cap;
  ts_name_index index; /* name -> position in v */
  char busy[TSD_CHANGES_MAX][TS_NAME_MAX];
  int nbusy;
  bool names_busy, all_busy;
} tsd_catalog;
void tsd_catalog_init(tsd_catalog *c);
void tsd_catalog_destroy(tsd_catalog *c);
/* Engine: the tensors of a change set are busy until tsd_catalog_end. */
void tsd_catalog_begin(tsd_catalog *c, const tsd_changes *ch);
void tsd_catalog_end(tsd_catalog *c);
/* Engine: the names busy since tsd_catalog_begin (copied into names, at most TSD_CHANGES_MAX),
 * and whether every tensor is (*all): how many names. */
int tsd_catalog_busy(tsd_catalog *c, char (*names)[TS_NAME_MAX], bool *all);
/* Engine: sets a tensor's packed DescribeResult without its ranks (packed NULL: removes the
 * tensor); the catalog keeps a copy of attr and fills in the box and bytes of each of the world's
 * ranks when a describe first asks for them. */
int tsd_catalog_set(tsd_catalog *c, const char *name, const uint8_t *packed, size_t len,
                    const ts_attr *attr, int world);
/* Engine: copies the names the catalog holds into a new array (*n of them; NULL when none). */
char (*tsd_catalog_names(tsd_catalog *c, int *n))[TS_NAME_MAX];
/* The live page's tensors (any thread): {"tensors": [{name, dtype, shape, attr, bytes, busy,
 * mesh, mesh_ranks (row-major), ranks: [{rank, lo, hi, bytes}]}]} as a new string (free it), NULL
 * when out of memory. */
char *tsd_catalog_json(tsd_catalog *c);
/* Answers a list or describe request into a new frame: 1 answered, 0 busy (only with
 * wait_if_busy: the engine answers it after the operation), -1 no memory. */
int tsd_catalog_answer(tsd_catalog *c, const Tshard__Request *req, bool wait_if_busy,
                       uint8_t **frame, size_t *len);

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
/* catalog.c: the loop answer of list and describe: from the catalog unless busy. */
int tsd_catalog_loop_answer(const tsd_loop_info *info, const Tshard__Request *req, uint8_t **frame,
                            size_t *len);

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
uint64_t tsd_server_connections(tsd_server *s);

#endif
