/* tsd_catalog.h - the catalog of tshardd (libtsdcatalog, daemon/catalog/): the metadata of this
 * rank's stored tensors, published by the operations on the engine thread and read by the loop
 * thread, which answers list and describe from it without queueing (catalog.c), and the names an
 * operation is changing, busy until it ends. It sits below both threads: it includes the base,
 * the wire layer (the protocol's messages, frames, change sets) and the store's name index
 * (shard/), never the front or the operations; the front reads it (tsd_front.h includes this
 * header) and the operations publish into it. The engine carries it as an opaque pointer in
 * tsd_shared. */
#ifndef TSD_CATALOG_H
#define TSD_CATALOG_H

#include <pthread.h>

#include "tsd_base.h"
#include "tsd_wire.h"
#include "ts_shard.h"

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

#endif
