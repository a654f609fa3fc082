/* queue.c - the hand-over between the loop thread and the engine: a FIFO of nodes under a mutex
 * whose producer calls the consumer's wake callback after each push (outside the lock). The
 * engine's work queue wakes the engine's condition variable; the reply queue wakes the loop
 * thread's uv_async. Neither side knows how the other waits: each sets its own queue's callback
 * (tsd_queue_set_wake) before it relies on it. The consumer takes the whole list at once. */
#include <stdlib.h>

#include "tsd_engine.h"

void tsd_queue_init(tsd_queue *q) {
  q->head = q->tail = NULL;
  q->wake = NULL;
  q->wake_ctx = NULL;
  pthread_mutex_init(&q->mu, NULL);
}

void tsd_queue_destroy(tsd_queue *q, void (*free_node)(tsd_qnode *n)) {
  tsd_qnode *n = tsd_queue_take_all(q);
  while (n) {
    tsd_qnode *next = n->next;
    free_node(n);
    n = next;
  }
  pthread_mutex_destroy(&q->mu);
}

void tsd_queue_set_wake(tsd_queue *q, void (*wake)(void *ctx), void *ctx) {
  pthread_mutex_lock(&q->mu);
  q->wake = wake;
  q->wake_ctx = ctx;
  pthread_mutex_unlock(&q->mu);
}

void tsd_queue_push(tsd_queue *q, tsd_qnode *n) {
  tsd_queue_push_quiet(q, n);
  tsd_queue_wake(q);
}

void tsd_queue_push_quiet(tsd_queue *q, tsd_qnode *n) {
  n->next = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->tail)
    q->tail->next = n;
  else
    q->head = n;
  q->tail = n;
  pthread_mutex_unlock(&q->mu);
}

void tsd_queue_wake(tsd_queue *q) {
  pthread_mutex_lock(&q->mu);
  void (*wake)(void *) = q->wake;
  void *ctx = q->wake_ctx;
  pthread_mutex_unlock(&q->mu);
  if (wake)
    wake(ctx);
}

tsd_qnode *tsd_queue_take_all(tsd_queue *q) {
  pthread_mutex_lock(&q->mu);
  tsd_qnode *n = q->head;
  q->head = q->tail = NULL;
  pthread_mutex_unlock(&q->mu);
  return n;
}

bool tsd_queue_empty(tsd_queue *q) {
  pthread_mutex_lock(&q->mu);
  bool empty = q->head == NULL;
  pthread_mutex_unlock(&q->mu);
  return empty;
}
