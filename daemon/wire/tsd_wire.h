/* tsd_wire.h - the wire layer of tshardd (libtsdwire, daemon/wire/): frames, the DistAttr
 * message, the validation of every request, and the wire half of the table of operations (name,
 * scope, validator of each op case). Nothing here knows a thread, a stored tensor or MPI: the
 * fuzz target (tests/fuzz) builds this folder alone. It includes the protocol and the planner's
 * attribute types only. */
#ifndef TSD_WIRE_H
#define TSD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tshard.pb-c.h"
#include "tshard_errors.h"
#include "ts_plan.h"

/* ---------------------------------------------------------------------------------------------
 * framing.c: frames are a 4-byte little-endian length and that many bytes of protobuf. */
#define TSD_FRAME_HEADER 4
uint32_t tsd_frame_length(const uint8_t header[TSD_FRAME_HEADER]);
/* Checks a frame length against the maximum (0 is refused too: an empty Request is no
 * operation). */
int tsd_frame_check(uint32_t len, int64_t max_frame, ts_error *err);
/* Decodes a Request; on failure *out is NULL and err says why. */
int tsd_request_decode(const uint8_t *buf, size_t len, Tshard__Request **out, ts_error *err);
/* After a successful decode of the same bytes from a client: protobuf-c ends a string at its
 * first NUL and does not check UTF-8, so the wire bytes of every string field are checked
 * (TS_INVALID_ARGUMENT naming the field). */
int tsd_request_check_strings(const uint8_t *buf, size_t len, ts_error *err);
void tsd_request_free(Tshard__Request **req);
/* Drops every unknown field of a decoded request (nested messages too): its re-encoding then
 * holds known fields only, and decodes on every rank. False when one had the invalid field
 * number 0 (the request is malformed). */
bool tsd_request_strip_unknown(Tshard__Request *req);
/* Packs a Response as a whole frame (header included) into a malloc'd buffer. */
int tsd_response_frame(const Tshard__Response *resp, uint8_t **frame, size_t *len, ts_error *err);
/* A frame answering only a status and a message. */
int tsd_error_frame(uint64_t id, int status, const char *message, uint8_t **frame, size_t *len);

/* fdpass.c: sends the start of buf with fd attached (SCM_RIGHTS), without blocking; *sent gets
 * the bytes sent (the rest goes by the ordinary stream). Returns 0, or an errno value. */
int tsd_send_fd(int sock, const uint8_t *buf, size_t len, int fd, size_t *sent);

/* ---------------------------------------------------------------------------------------------
 * wireattr.c: DistAttr message <-> ts_attr. */
int tsd_attr_from_msg(const Tshard__DistAttr *m, ts_attr **out, ts_error *err);
/* Fills m (whose arrays are malloc'd; free with tsd_attr_msg_clear). */
int tsd_attr_to_msg(const ts_attr *a, Tshard__DistAttr *m, ts_error *err);
void tsd_attr_msg_clear(Tshard__DistAttr *m);

/* ---------------------------------------------------------------------------------------------
 * optable.c: the wire half of the table of operations, one row per Request op case (indexed by
 * it), and validate.c (with einsum_wire.c, ckpt_validate.c, program_validate.c): the validators
 * it names. The engine half (what runs each operation) is daemon/ops/handlers.c, the loop
 * thread's own answers daemon/front/server.c; both are indexed by the same op case. */
typedef enum {
  TSD_SCOPE_LOOP,      /* answered by the loop thread (ping) */
  TSD_SCOPE_CATALOG,   /* by the loop thread from the catalog, else by the engine at once */
  TSD_SCOPE_LOCAL,     /* this rank only, by the engine, at once */
  TSD_SCOPE_COLLECTIVE /* sequenced by rank 0 and run by every rank */
} tsd_scope;

typedef struct tsd_limits {
  int world_size;
  int64_t max_frame;
  int64_t collective_timeout_max; /* ms; 0: one day */
} tsd_limits;
/* An attribute message, when given (unset: TS_OK), parses and names ranks of the world only
 * (ckpt_validate.c); each tensor's fit is its operation's. */
int tsd_attr_msg_check(const Tshard__DistAttr *m, const tsd_limits *lim, ts_error *err);

/* Checks the request alone (no stored tensor); TS_OK or the status with err set. */
typedef int (*tsd_validator)(const Tshard__Request *req, const tsd_limits *lim, ts_error *err);

/* What an operation of a row is, for the layers that treat some kinds apart (the engine, the
 * sequencer, the loop thread): they test these flags of the request's row, never its op case.
 * tests/unit/test_optable.c holds every row's flags against what its operation does. */
enum {
  /* Running it stops the daemon: the sequencer orders nothing after it and its run is the last,
   * the engine then stops; it needs no arguments, so a rank that cannot decode it runs it all the
   * same; the injected agreement fault passes it by. shutdown. */
  TSD_OP_STOPS = 1u << 0,
  /* Its collective run holds no agreement over the world: a rank that cannot decode it has no
   * agreement to bring its failure to and fails it alone. shutdown, einsum_release. */
  TSD_OP_NO_AGREEMENT = 1u << 1,
  /* Its collective run (a whole get: the first chunk) gathers a tensor to the rank that
   * submitted it, for the request's next chunks to read there: it comes from one client, so it
   * takes no participants, and an idempotency key, which would match submissions across ranks,
   * is dropped. get. */
  TSD_OP_GATHERS_TO_ORIGIN = 1u << 2,
  /* Its data may go straight between the daemon and the client's own memory (a ClientMemory
   * field, of the request or of each of its items: tsd_request_client_memory): the loop thread
   * accepts that over a Unix socket only and names the sending process in it. put, get,
   * put_slice, get_slice, put_many, get_many. */
  TSD_OP_CLIENT_MEMORY = 1u << 3,
  /* Refused (UNSUPPORTED) over TCP: it hands the client a descriptor. shm_attach. */
  TSD_OP_UNIX_ONLY = 1u << 4,
  /* Internal and periodic: its operation log line is at debug level. observe. */
  TSD_OP_QUIET = 1u << 5,
};

/* ---------------------------------------------------------------------------------------------
 * The table of operations, one row per Request op case, as an X-list in the manner of Redis's
 * command table: each layer expands the columns it owns and ignores the others, so the wire
 * layer names no function of the layers above it (the tokens of their columns are dropped
 * before they are compiled). Columns:
 *   KIND        the op case (TSHARD__REQUEST__OP_##KIND)
 *   name        the operation's name (the Request field's)
 *   scope       LOOP, CATALOG, LOCAL or COLLECTIVE (tsd_scope)
 *   scope_of    NULL, or the function that decides the scope per request (get's first chunk)
 *   flags       TSD_OP_* (below), 0 for none
 *   validate    the validator (wire layer): checks the request and builds its typed command
 *   loop        the loop thread's own answer (front/server.c), NULL for none
 *   local       the engine's local handler (ops layer), NULL for none
 *   collective  the collective run on every rank (ops layer), NULL for none
 *   changes     the names it may change (ops layer), NULL for none
 *   touches     the names whose data it writes besides (ops layer), NULL for none
 *   answer      the encoder of its result for each waiting client (ops layer), NULL: status only
 * Adding an operation is a row here and its functions. */
/* clang-format off */
#define TSD_OPERATIONS(X)                                                                          \
  X(PING, ping, LOOP, NULL, 0, tsd_validate_none, answer_ping, NULL, NULL, NULL, NULL, NULL)       \
  X(CREATE, create, COLLECTIVE, NULL, 0, tsd_validate_create, NULL,                                \
    NULL, tsd_run_create, tsd_changes_create, NULL, NULL)                                          \
  X(PUT, put, LOCAL, NULL, TSD_OP_CLIENT_MEMORY, tsd_validate_put, NULL,                           \
    tsd_handle_put_chunk, tsd_run_put, NULL, tsd_touches_put, tsd_answer_put)                      \
  X(PUT_SLICE, put_slice, LOCAL, NULL, TSD_OP_CLIENT_MEMORY, tsd_validate_put_slice, NULL,         \
    tsd_handle_put_slice, NULL, NULL, NULL, NULL)                                                  \
  X(GET, get, LOCAL, tsd_get_scope, TSD_OP_GATHERS_TO_ORIGIN | TSD_OP_CLIENT_MEMORY,               \
    tsd_validate_get, NULL, tsd_handle_get_chunk, tsd_run_get, NULL, NULL, tsd_answer_get)         \
  X(GET_SLICE, get_slice, LOCAL, NULL, TSD_OP_CLIENT_MEMORY, tsd_validate_get_slice, NULL,         \
    tsd_handle_get_slice, NULL, NULL, NULL, NULL)                                                  \
  X(RESHARD, reshard, COLLECTIVE, NULL, 0, tsd_validate_reshard, NULL,                             \
    NULL, tsd_run_reshard, tsd_changes_reshard, NULL, tsd_answer_reshard)                          \
  X(DROP, drop, COLLECTIVE, NULL, 0, tsd_validate_drop, NULL,                                      \
    NULL, tsd_run_drop, tsd_changes_drop, NULL, NULL)                                              \
  X(LIST, list, CATALOG, NULL, 0, tsd_validate_none, answer_catalog,                               \
    tsd_op_catalog, NULL, NULL, NULL, NULL)                                                        \
  X(DESCRIBE, describe, CATALOG, NULL, 0, tsd_validate_describe, answer_catalog,                   \
    tsd_op_catalog, NULL, NULL, NULL, NULL)                                                        \
  X(PLAN, plan, LOCAL, NULL, 0, tsd_validate_plan, NULL, tsd_op_plan, NULL, NULL, NULL, NULL)      \
  X(STATS, stats, LOCAL, NULL, 0, tsd_validate_none, NULL, tsd_op_stats, NULL, NULL, NULL, NULL)   \
  X(TRACE, trace, LOCAL, NULL, 0, tsd_validate_trace, NULL, tsd_op_trace, NULL, NULL, NULL, NULL)  \
  X(SHUTDOWN, shutdown, COLLECTIVE, NULL, TSD_OP_STOPS | TSD_OP_NO_AGREEMENT, tsd_validate_none,   \
    NULL, NULL, tsd_run_shutdown, NULL, NULL, NULL)                                                \
  X(EINSUM, einsum, COLLECTIVE, NULL, 0, tsd_validate_einsum, NULL,                                \
    NULL, tsd_run_einsum, tsd_changes_einsum, NULL, tsd_answer_einsum)                             \
  X(EINSUM_BACKWARD, einsum_backward, COLLECTIVE, NULL, 0, tsd_validate_einsum_backward, NULL,     \
    NULL, tsd_run_einsum_backward, tsd_changes_einsum_backward, NULL, NULL)                        \
  X(EINSUM_RELEASE, einsum_release, COLLECTIVE, NULL, TSD_OP_NO_AGREEMENT,                         \
    tsd_validate_einsum_release, NULL, NULL, tsd_run_einsum_release, NULL, NULL, NULL)             \
  X(EINSUM_PLAN, einsum_plan, LOCAL, NULL, 0, tsd_validate_einsum_plan, NULL,                      \
    tsd_op_einsum_plan, NULL, NULL, NULL, NULL)                                                    \
  X(SAVE, save, COLLECTIVE, NULL, 0, tsd_validate_save, NULL,                                      \
    NULL, tsd_run_save, NULL, NULL, tsd_answer_ckpt)                                               \
  X(LOAD, load, COLLECTIVE, NULL, 0, tsd_validate_load, NULL,                                      \
    NULL, tsd_run_load, tsd_changes_load, NULL, tsd_answer_ckpt)                                   \
  X(SHM_ATTACH, shm_attach, LOCAL, NULL, TSD_OP_UNIX_ONLY, tsd_validate_none, NULL,                \
    tsd_shm_attach, NULL, NULL, NULL, NULL)                                                        \
  X(PROGRAM_COMPILE, program_compile, COLLECTIVE, NULL, 0, tsd_validate_program_compile, NULL,     \
    NULL, tsd_run_program_compile, NULL, NULL, tsd_answer_program_compile)                         \
  X(PROGRAM_RUN, program_run, COLLECTIVE, NULL, 0, tsd_validate_program_run, NULL,                 \
    NULL, tsd_run_program_run, tsd_changes_program_run, NULL, NULL)                                \
  X(PROGRAM_DROP, program_drop, COLLECTIVE, NULL, 0, tsd_validate_program_drop, NULL,              \
    NULL, tsd_run_program_drop, NULL, NULL, NULL)                                                  \
  X(PROGRAM_SHOW, program_show, LOCAL, NULL, 0, tsd_validate_program_show, NULL,                   \
    tsd_op_program_show, NULL, NULL, NULL, NULL)                                                   \
  X(RESHARD_MANY, reshard_many, COLLECTIVE, NULL, 0, tsd_validate_reshard_many, NULL,              \
    NULL, tsd_run_reshard_many, tsd_changes_reshard_many, NULL, tsd_answer_reshard_many)           \
  X(DROP_MANY, drop_many, COLLECTIVE, NULL, 0, tsd_validate_drop_many, NULL,                       \
    NULL, tsd_run_drop_many, tsd_changes_drop_many, NULL, NULL)                                    \
  X(CREATE_MANY, create_many, COLLECTIVE, NULL, 0, tsd_validate_create_many, NULL,                 \
    NULL, tsd_run_create_many, tsd_changes_create_many, NULL, NULL)                                \
  X(PUT_MANY, put_many, LOCAL, NULL, TSD_OP_CLIENT_MEMORY, tsd_validate_put_many, NULL,            \
    tsd_handle_put_many, tsd_run_put_many, NULL, NULL, tsd_answer_put)                             \
  X(GET_MANY, get_many, LOCAL, NULL, TSD_OP_CLIENT_MEMORY, tsd_validate_get_many, NULL,            \
    tsd_handle_get_many, tsd_run_get_many, NULL, NULL, tsd_answer_get_many)                        \
  X(IMPORT_SAFETENSORS, import_safetensors, COLLECTIVE, NULL, 0,                                   \
    tsd_validate_import_safetensors, NULL, NULL, tsd_run_import_safetensors,                       \
    tsd_changes_import_safetensors, NULL, tsd_answer_safetensors)                                  \
  X(EXPORT_SAFETENSORS, export_safetensors, COLLECTIVE, NULL, 0,                                   \
    tsd_validate_export_safetensors, NULL, NULL, tsd_run_export_safetensors, NULL, NULL,           \
    tsd_answer_safetensors)                                                                        \
  X(SAVE_FINISH, save_finish, COLLECTIVE, NULL, 0, tsd_validate_save_finish, NULL,                 \
    NULL, tsd_run_save_finish, NULL, NULL, NULL)                                                   \
  X(OBSERVE, observe, COLLECTIVE, NULL, TSD_OP_QUIET, tsd_validate_observe, NULL,                  \
    NULL, tsd_run_observe, NULL, NULL, NULL)
/* clang-format on */

typedef struct tsd_op {
  const char *name;
  tsd_scope scope;
  tsd_scope (*scope_of)(const Tshard__Request *req); /* NULL: always `scope` */
  unsigned flags;                                    /* TSD_OP_* above */
  tsd_validator validate;
} tsd_op;

/* The row of an op case, or NULL. */
const tsd_op *tsd_op_find(int op_case);
/* The flags of an op case's row (0 for an op case without a row). */
unsigned tsd_op_flags(int op_case);
/* The client memory a request of a TSD_OP_CLIENT_MEMORY row names: that of its item i (the
 * request itself is its only item), or NULL when that item names none; *n gets the number of
 * items (0 for the other rows). */
Tshard__ClientMemory *tsd_request_client_memory(Tshard__Request *req, size_t i, size_t *n);
/* The scope of a request of that row. */
tsd_scope tsd_op_scope(const tsd_op *op, const Tshard__Request *req);
/* Validates a decoded request: its operation is known, and its fields are well-formed for it
 * (names, dtypes, shapes, attributes against the shape and world, layouts, strategies, byte
 * counts). Returns the row through *op. Nothing here depends on the stored tensors. */
int tsd_request_validate(const Tshard__Request *req, const tsd_limits *lim, const tsd_op **op,
                         ts_error *err);
const char *tsd_op_name(int op_case);
bool tsd_name_reserved(const char *name);

/* The tensors a collective operation may change: busy in the catalog while it runs, published
 * again after it, and the names its idempotency key touches. `names`: it may add or remove names
 * (list waits too); `all`: it may change any tensor (every describe waits, and the whole catalog
 * is published again after it). */
#define TSD_CHANGES_MAX 16
typedef struct tsd_changes {
  const char *name[TSD_CHANGES_MAX]; /* the first n; empty strings are skipped */
  int n;
  bool names;
  bool all;
} tsd_changes;
/* Adds a name to a change set; more than TSD_CHANGES_MAX names turn it into `all`. */
void tsd_changes_add(tsd_changes *ch, const char *name);

/* validate.c: the checks of the request header and the validators of the table. */
int tsd_validate_header(const Tshard__Request *req, ts_error *err);
/* The participants of an SPMD collective (Request fields 4-5), against the operation. */
int tsd_validate_participants(const Tshard__Request *req, const tsd_op *op, const tsd_limits *lim,
                              ts_error *err);
int tsd_validate_none(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_create(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* Batches: not empty, every name well-formed and given once (the limits and whether the names
 * exist are checked on every rank at run time, daemon/ops/batch.c). */
int tsd_validate_reshard_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_drop_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_create_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* put_many and get_many: as the batches above, each item's declared dtype and dims; every item
 * or none names the client's memory (then one request at offset 0 without data); a put_many's
 * chunk bounds as a put's; get_many takes no idempotency key. */
int tsd_validate_put_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_get_many(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_put(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_put_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_get(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_get_slice(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_reshard(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_drop(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_describe(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_trace(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_plan(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* ckpt_validate.c: checkpoints */
int tsd_validate_save(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* What a save or an export writes must be asked: names, a prefix or all (one of them), else
 * refused saying how to save everything. what names the operation in the message. */
int tsd_check_selection(const char *what, size_t n_names, const char *prefix, bool all,
                        ts_error *err);
/* save_finish is ordered by rank 0 itself (ops/bgsave.c): refused from clients. */
int tsd_validate_save_finish(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_observe(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_load(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* safetensors_validate.c: Hugging Face safetensors import and export */
int tsd_validate_import_safetensors(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_export_safetensors(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* einsum_wire.c: the distributed einsum's operations */
int tsd_validate_einsum(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_einsum_plan(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_einsum_backward(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_einsum_release(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
/* program_validate.c: compiled programs */
int tsd_validate_program_compile(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_program_run(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_program_show(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);
int tsd_validate_program_drop(const Tshard__Request *r, const tsd_limits *lim, ts_error *err);

#endif
