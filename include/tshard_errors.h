/* tshard_errors.h - the one list of tshard status codes.
 *
 * Every library of the project (kernels, shard, comm, daemon, clients) and the wire protocol use
 * these codes. The X-macro list below generates the enum, the names and the default messages, so
 * a code added here is known everywhere at once. Functions that can fail return a ts_status and,
 * when given a ts_error, fill it with a message that says what was wrong and what is valid. */
#ifndef TSHARD_ERRORS_H
#define TSHARD_ERRORS_H

#include <stdarg.h>
#include <stdio.h>

/* X(name, value, default message). Values are stable: they travel on the wire. */
#define TS_STATUS_LIST(X)                                                                          \
  X(OK, 0, "success")                                                                              \
  X(INVALID_ARGUMENT, 1, "invalid argument")                                                       \
  X(NO_MEMORY, 2, "out of memory")                                                                 \
  X(OVERFLOW, 3, "size or index overflows 64 bits")                                                \
  X(BAD_DTYPE, 4, "unknown or unsupported dtype")                                                  \
  X(BAD_SHAPE, 5, "invalid or mismatched shape")                                                   \
  X(BAD_LAYOUT, 6, "invalid layout")                                                               \
  X(ALIASING, 7, "destination strides alias: two elements share one address")                      \
  X(OUT_OF_BOUNDS, 8, "view or box outside its buffer or tensor")                                  \
  X(PARSE, 9, "text could not be parsed")                                                          \
  X(BAD_ATTRIBUTE, 10, "invalid distributed attribute")                                            \
  X(BAD_STRATEGY, 11, "strategy does not apply to this reshard")                                   \
  X(EINSUM, 12, "invalid einsum equation or operands")                                             \
  X(MPI, 13, "MPI call failed")                                                                    \
  X(NOT_FOUND, 14, "no such tensor")                                                               \
  X(EXISTS, 15, "a tensor with this name already exists")                                          \
  X(LIMIT, 16, "a configured limit was exceeded")                                                  \
  X(PROTOCOL, 17, "malformed message")                                                             \
  X(IO, 18, "input/output error")                                                                  \
  X(TIMEOUT, 19, "operation timed out")                                                            \
  X(UNSUPPORTED, 20, "operation not supported")                                                    \
  X(REMOTE, 21, "the operation failed on another rank")                                            \
  X(SHUTDOWN, 22, "the daemon is shutting down")                                                   \
  X(AUTH, 23, "authentication failed")                                                             \
  X(INTERNAL, 24, "internal error")                                                                \
  X(KEY_CONFLICT, 27, "idempotency key already used for a different request")                      \
  X(INCOMPLETE, 28, "not every participant submitted the collective operation")                    \
  X(EINSUM_PLAN, 30, "the forced distributed einsum plan is unknown or does not apply")            \
  X(NO_FORWARD, 31, "no kept einsum forward with this id")                                         \
  X(CORRUPT, 32, "checkpoint data does not match its index or checksum")                           \
  X(CHECKPOINT_IO, 33, "a checkpoint directory or file could not be written or read")              \
  X(PROGRAM_COMPILE, 34, "the C compiler failed to build a program")                               \
  X(PROGRAM_PLACEMENT, 35, "a program does not apply to its tensors' distributed attributes")      \
  X(NO_DIRECT, 38, "the daemon cannot reach the client's memory; use the shared segment")          \
  X(RANK_LOST, 39, "a rank of the job was lost; Open MPI stopped the job")

typedef enum {
#define TS_X_ENUM(name, value, msg) TS_##name = value,
  TS_STATUS_LIST(TS_X_ENUM)
#undef TS_X_ENUM
} ts_status;

/* "NO_MEMORY" for TS_NO_MEMORY; "UNKNOWN" for a value outside the list. */
static inline const char *ts_status_name(int code) {
  switch (code) {
#define TS_X_NAME(name, value, msg)                                                                \
  case value: return #name;
    TS_STATUS_LIST(TS_X_NAME)
#undef TS_X_NAME
  }
  return "UNKNOWN";
}

/* The default message of a code. */
static inline const char *ts_strerror(int code) {
  switch (code) {
#define TS_X_MSG(name, value, msg)                                                                 \
  case value: return msg;
    TS_STATUS_LIST(TS_X_MSG)
#undef TS_X_MSG
  }
  return "unknown status code";
}

/* A status with a specific message. Functions take a ts_error * that may be NULL. */
typedef struct ts_error {
  int code;
  char msg[512];
} ts_error;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int
ts_error_set(ts_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

static inline void ts_error_clear(ts_error *err) {
  if (err) {
    err->code = TS_OK;
    err->msg[0] = '\0';
  }
}

#endif
