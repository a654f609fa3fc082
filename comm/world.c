/* world.c - MPI for the process: initialization with a thread level, the private world
 * communicator, the cache of group communicators, and the mapping of MPI errors to TS_MPI.
 *
 * Every communicator runs under MPI_ERRORS_RETURN so that a failed call returns to us instead of
 * aborting the job; the caller then reports TS_MPI with MPI's own message. */
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "ts_wait.h"

int ts__mpi_error(int mpi_rc, const char *call, const char *file, int line, ts_error *err) {
  char text[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error %d", mpi_rc);
  else
    text[len] = '\0';
  const char *base = strrchr(file, '/');
  return ts_error_set(err, TS_MPI, "MPI call failed: %.200s (%.160s at %s:%d)", text, call,
                      base ? base + 1 : file, line);
}

/* The node of every rank: each rank's node leader (its lowest world rank, by a reduction over
 * the shared-memory split), gathered over the world. */
static int node_map(ts_world *w, ts_error *err) {
  MPI_Comm node;
  TS_MPI_CHECK(MPI_Comm_split_type(w->world.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
               err);
  int leader = w->rank, rc = MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS)
    return ts__mpi_error(rc, "MPI_Allreduce", __FILE__, __LINE__, err);
  w->node_of = malloc((size_t)w->size * sizeof *w->node_of);
  int ok = w->node_of != NULL;
  rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, w->world.comm);
  if (rc == MPI_SUCCESS && ok)
    rc = MPI_Allgather(&leader, 1, MPI_INT, w->node_of, 1, MPI_INT, w->world.comm);
  if (rc != MPI_SUCCESS)
    return ts__mpi_error(rc, "the exchange of the ranks' nodes", __FILE__, __LINE__, err);
  return ok ? TS_OK
            : ts_error_set(err, TS_NO_MEMORY, "no memory for the nodes of %d ranks", w->size);
}

int ts_world_init(int *argc, char ***argv, int thread_level, ts_world **out, ts_error *err) {
  if (!out)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_world_init: NULL output");
  *out = NULL;
  if (thread_level < MPI_THREAD_SINGLE || thread_level > MPI_THREAD_MULTIPLE)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "thread level %d; valid: MPI_THREAD_SINGLE to MPI_THREAD_MULTIPLE",
                        thread_level);
  ts_world *w = calloc(1, sizeof *w);
  if (!w)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for the MPI world");
  w->world.comm = MPI_COMM_NULL;
  w->bell_win = MPI_WIN_NULL;
  w->bell_node = MPI_COMM_NULL;
  int inited = 0, provided = MPI_THREAD_SINGLE, rc = TS_OK;
  TS_MPI_TRY(MPI_Initialized(&inited), err, rc, fail);
  if (!inited) {
    TS_MPI_TRY(MPI_Init_thread(argc, argv, thread_level, &provided), err, rc, fail);
    w->initialized_mpi = true;
  } else {
    TS_MPI_TRY(MPI_Query_thread(&provided), err, rc, fail);
  }
  w->thread_level = provided;
  if (provided < thread_level) {
    rc = ts_error_set(err, TS_MPI,
                      "MPI provides thread level %d but %d was asked for; use an MPI built "
                      "with thread support",
                      provided, thread_level);
    goto fail;
  }
  TS_MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), err, rc, fail);
  TS_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &w->world.comm), err, rc, fail);
  TS_MPI_TRY(MPI_Comm_set_errhandler(w->world.comm, MPI_ERRORS_RETURN), err, rc, fail);
  TS_MPI_TRY(MPI_Comm_rank(w->world.comm, &w->rank), err, rc, fail);
  TS_MPI_TRY(MPI_Comm_size(w->world.comm, &w->size), err, rc, fail);
  w->world.rank = w->rank;
  w->world.size = w->size;
  w->world.ranks = malloc((size_t)w->size * sizeof(int));
  if (!w->world.ranks) {
    rc = ts_error_set(err, TS_NO_MEMORY, "no memory for the world's rank list");
    goto fail;
  }
  for (int i = 0; i < w->size; i++)
    w->world.ranks[i] = i;
  w->world.world = w;
  w->agree_timeout_ms = TS_AGREE_TIMEOUT_DEFAULT_MS;
  if ((rc = ts__comm_types_init(err)))
    goto fail;
  /* The nodes first: single-copy reads are decided node by node. */
  if ((rc = node_map(w, err)) || (rc = ts__cma_init(w, err)) || (rc = ts__doorbell_init(w, err)) ||
      (rc = ts__place_init(w, err))) {
    ts__place_free(w);
    ts__doorbell_free(w);
    ts__cma_free(w);
    ts__comm_types_free(NULL);
    goto fail;
  }
  ts_wait_set_node_processes(w->node_size); /* waits yield when ranks outnumber cores */
  for (int i = 1; i < w->size; i++)
    w->world.hosts |= w->node_of[i] != w->node_of[0];
  *out = w;
  return TS_OK;
fail:
  free(w->node_of);
  free(w->world.ranks);
  if (w->world.comm != MPI_COMM_NULL)
    MPI_Comm_free(&w->world.comm);
  if (w->initialized_mpi)
    MPI_Finalize();
  free(w);
  return rc;
}

int ts_world_finalize(ts_world **pw, ts_error *err) {
  if (!pw || !*pw)
    return TS_OK;
  ts_world *w = *pw;
  int rc = TS_OK;
  ts__orphans_retire(w, true);
  for (ts_comm *c = w->cache, *next; c; c = next) {
    next = c->next;
    int mrc = MPI_Comm_free(&c->comm);
    if (mrc != MPI_SUCCESS && rc == TS_OK)
      rc = ts__mpi_error(mrc, "MPI_Comm_free", __FILE__, __LINE__, err);
    free(c->ranks);
    free(c);
  }
  ts__doorbell_free(w);
  ts_error terr;
  if (ts__comm_types_free(&terr) != TS_OK && rc == TS_OK)
    rc = ts_error_set(err, terr.code, "%s", terr.msg);
  int mrc = MPI_Comm_free(&w->world.comm);
  if (mrc != MPI_SUCCESS && rc == TS_OK)
    rc = ts__mpi_error(mrc, "MPI_Comm_free", __FILE__, __LINE__, err);
  free(w->world.ranks);
  free(w->node_of);
  ts__place_free(w);
  ts__cma_free(w);
  if (w->initialized_mpi) {
    mrc = MPI_Finalize();
    if (mrc != MPI_SUCCESS && rc == TS_OK)
      rc = ts__mpi_error(mrc, "MPI_Finalize", __FILE__, __LINE__, err);
  }
  free(w);
  *pw = NULL;
  return rc;
}

int ts_world_rank(const ts_world *w) { return w->rank; }
int ts_world_size(const ts_world *w) { return w->size; }
int ts_world_thread_level(const ts_world *w) { return w->thread_level; }
int ts_world_node_size(const ts_world *w) { return w->node_size > 0 ? w->node_size : 1; }
const int *ts_world_node_of(const ts_world *w) { return w->node_of; }
ts_comm *ts_world_comm(ts_world *w) { return &w->world; }
int ts_world_cached_comms(const ts_world *w) { return w->ncached; }
int ts_comm_rank(const ts_comm *c) { return c->rank; }
int ts_comm_size(const ts_comm *c) { return c->size; }
int ts_comm_world_rank(const ts_comm *c, int i) { return c->ranks[i]; }
MPI_Comm ts_comm_handle(const ts_comm *c) { return c->comm; }

int ts_comm_group(ts_world *w, const int *ranks, int n, ts_comm **out, ts_error *err) {
  if (!w || !ranks || !out || n < 1)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_comm_group: bad arguments (n = %d)", n);
  *out = NULL;
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= w->size)
      return ts_error_set(err, TS_INVALID_ARGUMENT, "rank %d in a group; valid ranks are 0 to %d",
                          ranks[i], w->size - 1);
    if (ranks[i] == w->rank)
      me = i;
  }
  if (me < 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT,
                        "rank %d asked for a communicator of a group it is not in", w->rank);
  if (n == w->size) {
    bool identity = true;
    for (int i = 0; identity && i < n; i++)
      identity = ranks[i] == i;
    if (identity) {
      *out = &w->world;
      return TS_OK;
    }
  }
  for (ts_comm *c = w->cache; c; c = c->next)
    if (c->size == n && memcmp(c->ranks, ranks, (size_t)n * sizeof(int)) == 0) {
      *out = c;
      return TS_OK;
    }
  ts_comm *c = calloc(1, sizeof *c);
  int *copy = malloc((size_t)n * sizeof *copy);
  if (!c || !copy) {
    free(c);
    free(copy);
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a communicator of %d ranks", n);
  }
  memcpy(copy, ranks, (size_t)n * sizeof *copy);
  /* Single-copy reads where every member runs on this rank's node (the node decided them). */
  bool one_node = true;
  for (int i = 0; one_node && i < n; i++)
    one_node = w->node_of[ranks[i]] == w->node_of[w->rank];
  c->pids = one_node ? w->pids : NULL;
  c->arenas = one_node ? w->arenas : NULL;
  c->hosts = !one_node;
  c->world = w;
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  int rc = TS_OK;
  TS_MPI_TRY(MPI_Comm_group(w->world.comm, &world_group), err, rc, fail);
  TS_MPI_TRY(MPI_Group_incl(world_group, n, ranks, &group), err, rc, fail);
  TS_MPI_TRY(MPI_Comm_create_group(w->world.comm, group, 17, &c->comm), err, rc, fail);
  TS_MPI_TRY(MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN), err, rc, fail);
  TS_MPI_TRY(MPI_Comm_rank(c->comm, &c->rank), err, rc, fail);
  c->size = n;
  c->ranks = copy;
  c->owned = true;
  c->next = w->cache;
  w->cache = c;
  w->ncached++;
  *out = c;
  TS_MPI_CHECK(MPI_Group_free(&group), err);
  TS_MPI_CHECK(MPI_Group_free(&world_group), err);
  return TS_OK;
fail:
  /* Cleanup after a failure already reported: its own errors add nothing. */
  if (group != MPI_GROUP_NULL)
    MPI_Group_free(&group);
  if (world_group != MPI_GROUP_NULL)
    MPI_Group_free(&world_group);
  free(copy);
  free(c);
  return rc;
}

int ts_comm_mesh_line(ts_world *w, int mesh_ndim, const int64_t *mesh_shape, const int *ranks,
                      int dim, ts_comm **out, ts_error *err) {
  if (!w || !mesh_shape || !ranks || !out || mesh_ndim < 1 || dim < 0 || dim >= mesh_ndim)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "ts_comm_mesh_line: bad arguments");
  int64_t n = 1, stride = 1;
  for (int m = 0; m < mesh_ndim; m++)
    n *= mesh_shape[m];
  for (int m = mesh_ndim - 1; m > dim; m--)
    stride *= mesh_shape[m];
  int64_t me = -1;
  for (int64_t i = 0; i < n; i++)
    if (ranks[i] == w->rank)
      me = i;
  if (me < 0)
    return ts_error_set(err, TS_INVALID_ARGUMENT, "rank %d is not in the mesh", w->rank);
  int len = (int)mesh_shape[dim];
  int *line = malloc((size_t)len * sizeof *line);
  if (!line)
    return ts_error_set(err, TS_NO_MEMORY, "no memory for a mesh line");
  int64_t base = me - ((me / stride) % len) * stride;
  for (int i = 0; i < len; i++)
    line[i] = ranks[base + i * stride];
  int rc = ts_comm_group(w, line, len, out, err);
  free(line);
  return rc;
}
