/* client_internal.h - what the files of libtshard share: the client handle and the call. */
#ifndef TSHARD_CLIENT_INTERNAL_H
#define TSHARD_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <sys/types.h>

#include "tshard.h"
#include "tshard.pb-c.h"

#define TSC_MAX_FRAME (1u << 30) /* the largest answer a client accepts */
/* A group's collective timeout made from the client's timeout stays within this: the daemons'
 * default --collective-timeout-max (longer ones are refused). */
#define TSC_COLLECTIVE_TIMEOUT_MAX_MS 600000

/* Answers are decoded into memory the client keeps and reuses (a bump arena reset by every
 * call), so a stream of large chunks does not fault in fresh pages for each one. */
typedef struct tsc_arena {
  uint8_t *buf;
  size_t cap, used;
} tsc_arena;

struct tshard_client {
  int fd;
  /* The process the connection belongs to (the daemon refuses requests another process writes
   * on it), and where it goes, so that a forked child opens its own (tsc_own): a Unix socket's
   * path, or a TCP host and port ("" path). */
  pid_t pid;
  char path[108];
  char host[256];
  int port;
  tsc_arena arena;
  uint8_t *rbuf; /* the frame being received, reused */
  size_t rcap;
  bool broken;     /* a timeout or I/O error left a frame half sent or received */
  int lost_status; /* TS_RANK_LOST once a lost rank ended the job (lost.c), else 0 */
  char lost[1024]; /* then the error every call of the connection gives */
  int timeout_ms;
  size_t chunk;
  uint64_t next_id;
  char token[257];
  char message[1024];
  tshard_progress_fn progress; /* called after every chunk of a put or get (NULL: none) */
  void *progress_arg;
  /* same-node shared memory (shm.c): Unix sockets only */
  bool shm_possible; /* a Unix socket */
  bool shm_on;       /* enabled (TSHARD_SHM, tshard_set_shm) and not refused by the daemon */
  size_t shm_max;    /* the largest segment asked for */
  uint8_t *shm_base; /* the mapped segment, or NULL */
  size_t shm_bytes;
  bool direct_on; /* whole puts and gets name this process's memory (TSHARD_DIRECT, NO_DIRECT) */
  /* SPMD collectives (spmd.c): the group's ranks (ngroup 0: none) and collective timeout */
  int32_t *group;
  int ngroup;
  int group_timeout_ms;
  /* the declaration sent with a typed put (typed_put.c), and the last reshard's report */
  const char *put_dtype; /* NULL: the put declares nothing */
  int put_ndim;
  const int64_t *put_shape;
  bool put_convert;
  char reshard_strategy[32];
  uint64_t reshard_us;
  int *reshard_ranks; /* a relabeled reshard's target ranks as chosen (reshard_nranks) */
  int reshard_nranks;
  /* operations in flight (async.c): set by a submit call, the next call only sends */
  uint64_t *submit_to;
  struct tsc_ticket *tickets; /* requests sent, answers not waited on yet */
  size_t nticket, ticket_cap;
};

/* async.c: a submitted request's ticket (its id), its answer kept when another call reads it
 * (true: it was a ticket's), and the records freed with the client. */
typedef struct tsc_ticket tsc_ticket;
int tsc_ticket_add(tshard_client *c, uint64_t id, uint64_t *ticket);
bool tsc_ticket_keep(tshard_client *c, const Tshard__Response *r);
void tsc_tickets_free(tshard_client *c);
/* The ticket of a save in flight remembers its directory: a lost rank then fails the wait with
 * the save's own error (tsc_save_interrupted). */
void tsc_ticket_save_path(tshard_client *c, uint64_t id, const char *path);
/* ckpt.c: a save cut short by a lost rank: CHECKPOINT_IO naming the path (later calls of the
 * connection: RANK_LOST). */
int tsc_save_interrupted(tshard_client *c, const char *path);
/* ckpt.c: a save's or an export's tensors asked one way (n names, a prefix or all), else
 * INVALID_ARGUMENT saying how to save everything. */
int tsc_check_selection(tshard_client *c, const char *what, int n, const char *prefix, int all);
/* ckpt.c: a save's or load's report (the daemon's CkptResult) into info. */
void tsc_ckpt_info_copy(const Tshard__CkptResult *k, tshard_ckpt_info *info);

/* lost.c: a failure that may come from a lost rank (a connection the daemon closed, an
 * answer SHUTDOWN): when the launcher's status file of the job records a lost rank (waiting up
 * to 2 s for the record while the job is recorded as running), TS_RANK_LOST with the message
 * naming it, and the connection keeps that error; otherwise `status` unchanged. */
int tsc_lost_check(tshard_client *c, int status);
/* When the launcher recorded that the job of socket path `sock` lost a rank: 0, with a sentence
 * naming it in out (for a connect that found no daemon); else -1. */
int tsc_lost_describe(const char *sock, char *out, size_t cap);
/* connect_message.c: a connect that found no daemon at path where the launcher recorded a lost
 * rank: true, the message naming it set (tsc_lost_describe). */
bool tsc_connect_lost(const char *path);

/* trust.c: a socket's directory must be a real directory of the effective uid's, mode 0700:
 * TS_OK (also when it is missing: the connect says so), else TS_AUTH with msg naming the
 * directory and what is wrong (its owner, its mode, a link). */
int tsc_trust_dir(const char *sock_path, char *msg, size_t cap);
/* The process listening on connected Unix socket fd must run as the effective uid or root
 * (SO_PEERCRED): TS_OK, else TS_AUTH with msg naming its uid and pid. */
int tsc_trust_peer(int fd, const char *sock_path, char *msg, size_t cap);
/* A file of the socket directory opened for reading (O_NOFOLLOW, O_NONBLOCK, close-on-exec)
 * when it is a regular file of the effective uid or root that group and others cannot write; else
 * -1, as if there were none. */
int tsc_trust_file_open(const char *path);

/* connect_message.c: the message of the last failed connect on this thread. */
void tsc_connect_failed(const char *path, const char *job, int rank, int status);
/* c NULL: a connect starts (clears the message); else its ping failed: keeps c's message. */
void tsc_connect_note(const char *path, const tshard_client *c, int status);
/* connect() on the socket failed with errno err. */
void tsc_connect_refused(const char *path, int err);
/* The socket's directory or the daemon behind it is not to be trusted (trust.c's words). */
void tsc_connect_distrust(const char *why);
/* A job name the daemons accept (letters, digits, '-', '_', '.' not first; 1-64): 0, else -1. */
int tsc_job_check(const char *job);

/* api.c: helpers of every request builder. "" for NULL (protobuf-c strings must not be NULL). */
char *tsc_str(const char *s);
/* The daemon's rules for names (proto/ts_rules.h), checked before anything is sent. */
int tsc_name_ok(tshard_client *c, const char *what, const char *name);
/* One call whose answer carries no result. */
int tsc_call_plain(tshard_client *c, Tshard__Request *req);
/* A call that runs on every rank: the client's SPMD group (spmd.c) makes it a collective of the
 * group, then one plain call. */
int tsc_call_collective(tshard_client *c, Tshard__Request *req);
/* One call whose answer must carry the result `want`, else TS_PROTOCOL with `what` as the
 * message. *r gets the answer (free with tsc_free); it may be set on failure too. */
int tsc_call_expect(tshard_client *c, Tshard__Request *req, Tshard__Response__ResultCase want,
                    const char *what, Tshard__Response **r);

/* Sends req (id and token filled in) and waits for its answer. On a transport failure returns
 * TS_IO or TS_TIMEOUT; otherwise the daemon's status, with *resp set (free with
 * tshard__response__free_unpacked) whatever the status. */
int tsc_call(tshard_client *c, Tshard__Request *req, Tshard__Response **resp);
/* Where the data of a chunk answer may go directly: dst[offset ...] when the answer is a
 * successful chunk at `offset` of a total that fits cap (exactly cap when exact). */
typedef struct tsc_sink {
  uint8_t *dst;
  size_t cap;
  uint64_t offset;
  bool exact;
  bool taken;          /* out: the data went to dst; no Response was decoded */
  uint64_t total, len; /* out, when taken */
} tsc_sink;

/* The two halves of a call, for pipelined chunks: send (assigns req->id) and receive one answer
 * (want_id 0: any; the caller matches it). */
int64_t tsc_deadline(const tshard_client *c);
/* In a process other than the one that opened the connection (a child after fork()): closes this
 * process's copies of the socket and the segment's mapping (nothing is shut down: they stay the
 * parent's) and opens this process's own connection to the same daemon. Every call goes through
 * it first (tsc_send, tsc_shm_ready). TS_OK, else TS_IO with the message set (the connection is
 * then broken). */
int tsc_own(tshard_client *c);
int tsc_send(tshard_client *c, Tshard__Request *req, int64_t deadline);
int tsc_recv(tshard_client *c, uint64_t want_id, Tshard__Response **resp, tsc_sink *sink,
             int64_t deadline);
/* tsc_call whose data answer may be received straight into the sink (then *resp is NULL). */
int tsc_call_sink(tshard_client *c, Tshard__Request *req, Tshard__Response **resp, tsc_sink *sink);
/* Frees an answer of tsc_call (it lives in the client's arena). */
void tsc_free(tshard_client *c, Tshard__Response *r);
int tsc_fail(tshard_client *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Moves len bytes over the socket in one direction before the deadline. */
int tsc_transfer(tshard_client *c, void *buf, size_t len, bool sending, int64_t deadline);

/* shm.c: a connection on a Unix socket uses shared memory unless TSHARD_SHM=0. */
/* spmd.c: makes a create, reshard or drop a collective of the client's group (needs a key);
 * frees the group. */
int tsc_apply_group(tshard_client *c, Tshard__Request *req);
void tsc_group_free(tshard_client *c);
void tsc_shm_init(tshard_client *c);
void tsc_shm_unmap(tshard_client *c);
/* Whether a transfer of `need` bytes goes through the shared segment: attaches or grows the
 * segment (up to shm_max) when needed; a daemon that refuses turns shared memory off for the
 * connection (the stream path then serves). Call with no request outstanding. */
bool tsc_shm_ready(tshard_client *c, size_t need);

#endif
