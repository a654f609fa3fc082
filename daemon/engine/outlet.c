/* outlet.c - the engine writes a small answer to its client's socket itself.
 *
 * An answer normally travels engine -> reply queue -> loop thread (woken through its uv_async)
 * -> socket. Between a reshard's last message and the client's wake-up that is one more thread
 * to wake, which on a machine with more threads than cores costs about as much as the engine's
 * own work on a small tensor. So the loop thread registers each Unix connection's socket as an
 * outlet, and the engine writes an answer of at most TSD_OUTLET_MAX bytes straight to it when
 * nothing else can be in the way:
 *
 *   - the loop thread has no write of its own in flight on the connection (it counts them under
 *     the outlet's mutex, and holds the mutex while it hands a frame to libuv, so the two never
 *     write at once and frames never interleave);
 *   - no earlier answer of the engine to the connection waits in the reply queue (the engine
 *     counts those it queues, the loop those it writes), so the engine's answers keep their
 *     order;
 *   - the socket has no unread bytes queued (SIOCOUTQ): the frame goes whole into an empty
 *     socket in one send, or not at all (then it is queued as before);
 *   - the connection is not being closed.
 *
 * The loop thread still does the connection's accounting (its requests in flight, reading
 * resumed): the engine queues a "delivered" notice without waking it, and the loop takes the
 * notices at its next wake-up, which the client's next request brings. Only when the loop may be
 * waiting for that notice, having stopped reading the connection (--max-inflight reached), does
 * the engine wake it: the loop marks the outlet paused before it looks at the queue, the engine
 * queues the notice before it looks at the mark (both sequentially consistent), so one of them
 * always sees the other.
 *
 * Outlets are found by connection id in a small hash table under its own mutex, and counted by
 * reference: the loop drops its reference when the connection closes, the engine holds one only
 * for the length of a send. */
#include <errno.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "tsd_engine.h"

struct tsd_outlet {
  pthread_mutex_t mu;
  uint64_t conn_id;
  int fd;
  int loop_writes; /* the loop thread's writes in flight (mu) */
  int queued;      /* the engine's answers in the reply queue, not yet written (mu) */
  bool shut;       /* the connection is closing: no more direct answers (mu) */
  int paused;      /* the loop stopped reading the connection (atomic) */
  int refs;        /* the table's, and a sender's (table mutex) */
  struct tsd_outlet *next;
};

static size_t bucket(uint64_t conn_id) { return (size_t)(conn_id % TSD_OUTLET_BUCKETS); }

tsd_outlet *tsd_outlet_open(tsd_shared *sh, uint64_t conn_id, int fd) {
  tsd_outlet *o = calloc(1, sizeof *o);
  if (!o)
    return NULL; /* the connection's answers all go through the loop */
  pthread_mutex_init(&o->mu, NULL);
  o->conn_id = conn_id;
  o->fd = fd;
  o->refs = 1;
  pthread_mutex_lock(&sh->outlets_mu);
  o->next = sh->outlets[bucket(conn_id)];
  sh->outlets[bucket(conn_id)] = o;
  pthread_mutex_unlock(&sh->outlets_mu);
  return o;
}

static void outlet_free(tsd_outlet *o) {
  pthread_mutex_destroy(&o->mu);
  free(o);
}

static void outlet_release(tsd_shared *sh, tsd_outlet *o) {
  pthread_mutex_lock(&sh->outlets_mu);
  bool last = --o->refs == 0;
  pthread_mutex_unlock(&sh->outlets_mu);
  if (last)
    outlet_free(o);
}

void tsd_outlet_shut(tsd_shared *sh, tsd_outlet **po) {
  tsd_outlet *o = *po;
  if (!o)
    return;
  *po = NULL;
  pthread_mutex_lock(&o->mu);
  o->shut = true; /* a sender holding a reference now leaves the socket alone */
  pthread_mutex_unlock(&o->mu);
  pthread_mutex_lock(&sh->outlets_mu);
  for (tsd_outlet **pp = &sh->outlets[bucket(o->conn_id)]; *pp; pp = &(*pp)->next)
    if (*pp == o) {
      *pp = o->next;
      break;
    }
  pthread_mutex_unlock(&sh->outlets_mu);
  outlet_release(sh, o);
}

/* The loop thread's writes in flight and the engine's queued answers change by these. */
static void outlet_add(tsd_outlet *o, int writes, int queued) {
  if (!o)
    return;
  pthread_mutex_lock(&o->mu);
  o->loop_writes += writes;
  o->queued += queued;
  pthread_mutex_unlock(&o->mu);
}

void tsd_outlet_write_begin(tsd_outlet *o, bool counted) {
  if (!o)
    return;
  pthread_mutex_lock(&o->mu);
  o->loop_writes++;
  if (counted)
    o->queued--;
}

void tsd_outlet_uncount(tsd_outlet *o) { outlet_add(o, 0, -1); }

void tsd_outlet_write_handed(tsd_outlet *o) {
  if (o)
    pthread_mutex_unlock(&o->mu);
}

void tsd_outlet_write_done(tsd_outlet *o) { outlet_add(o, -1, 0); }

void tsd_outlet_set_paused(tsd_shared *sh, tsd_outlet *o, bool paused) {
  if (!o)
    return;
  __atomic_store_n(&o->paused, paused, __ATOMIC_SEQ_CST);
  /* A notice queued before the mark was seen would go unseen until the next wake: look now. */
  if (paused && !tsd_queue_empty(&sh->replies))
    tsd_queue_wake(&sh->replies);
}

/* Sends the whole frame on the outlet's socket, or nothing (frame NULL: an answer the loop
 * thread must give, one with a descriptor or one it builds itself); counts it as queued when
 * not sent. */
static bool outlet_send(tsd_outlet *o, const uint8_t *frame, size_t len) {
  bool sent = false;
  pthread_mutex_lock(&o->mu);
  int unread = -1;
  if (frame && !o->shut && len <= TSD_OUTLET_MAX && o->loop_writes == 0 && o->queued == 0 &&
      ioctl(o->fd, SIOCOUTQ, &unread) == 0 && unread == 0) {
    ssize_t n = send(o->fd, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)len) {
      sent = true;
    } else if (n > 0) {
      /* Part of a frame went (an empty Unix socket takes a frame this small whole, so this is
       * not expected): the stream is cut mid-frame, so the connection ends here, in the log
       * and at the client (its read fails), rather than carrying a corrupted frame. */
      TSD_LOG(TSD_LOG_ERROR,
              "connection %llu: only %zd of an answer's %zu bytes went out; "
              "closing it",
              (unsigned long long)o->conn_id, n, len);
      shutdown(o->fd, SHUT_RDWR);
      o->shut = true;
      sent = true; /* the loop sees the connection end; the notice still does the accounting */
    }
  }
  if (!sent)
    o->queued++;
  pthread_mutex_unlock(&o->mu);
  return sent;
}

bool tsd_outlet_answer(tsd_shared *sh, tsd_reply *r) {
  pthread_mutex_lock(&sh->outlets_mu);
  tsd_outlet *o = sh->outlets[bucket(r->conn_id)];
  while (o && o->conn_id != r->conn_id)
    o = o->next;
  if (o)
    o->refs++;
  pthread_mutex_unlock(&sh->outlets_mu);
  if (!o)
    return false;
  bool sent = outlet_send(o, r->fd < 0 ? r->frame : NULL, r->len);
  if (sent) {
    free(r->frame);
    r->frame = NULL;
    r->delivered = true;
    tsd_queue_push_quiet(&sh->replies, &r->node);
    if (__atomic_load_n(&o->paused, __ATOMIC_SEQ_CST))
      tsd_queue_wake(&sh->replies);
  } else {
    r->counted = true;
  }
  outlet_release(sh, o);
  return sent;
}

void tsd_outlets_free(tsd_shared *sh) {
  for (int b = 0; b < TSD_OUTLET_BUCKETS; b++)
    while (sh->outlets[b]) {
      tsd_outlet *o = sh->outlets[b];
      sh->outlets[b] = o->next;
      outlet_free(o);
    }
}
