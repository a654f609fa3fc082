/* netbell.c - doorbells for ranks on other nodes: a ring is a UDP datagram.
 *
 * The doorbells of doorbell.c live in memory that the ranks of one node share; a message from a
 * rank on another node arrives unannounced, and a rank waiting for it naps and tests. Here every
 * rank of a world that spans nodes also has a UDP socket and a bell thread blocked on it. Ringing
 * a rank of another node sends one datagram to its socket; its bell thread checks the job's token
 * in it and rings that rank's own bell, which ends the wait at once (the futex of doorbell.c).
 * A ring carries nothing but "look again": a lost datagram or a stray one costs a wait its cap,
 * or one needless test, never a wrong result.
 *
 * Set up by ts__doorbell_init (collective over the world): each rank binds a socket on every
 * address of its own (port chosen by the system), rank 0 draws a random 16-byte token that every
 * datagram must carry, and the ranks exchange their IPv4 addresses and ports. A rank rings a peer
 * of another node at the peer's address on a subnet of its own (else the peer's first address).
 * Before the bells are used every rank probes every rank of other nodes and waits (500 ms at
 * most) for their probes: the bells are on only when every rank of the world heard every probe
 * it expected, decided alike everywhere; otherwise the waits keep their naps, as without.
 * TSHARD_NET_BELLS=0 turns them off. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_internal.h"

#define NETBELL_ADDRS 8
#define NETBELL_PROBE_MS 500

enum { KIND_RING = 1, KIND_PROBE = 2, KIND_ANSWER = 3, KIND_STOP = 4 };

/* What a rank tells the others: its port and addresses (network byte order). */
typedef struct netbell_card {
  uint32_t port, naddr;
  uint32_t addr[NETBELL_ADDRS], mask[NETBELL_ADDRS];
} netbell_card;

/* One datagram: the job's token, what it is, who sent it. */
typedef struct netbell_packet {
  uint8_t token[16];
  uint32_t kind;
  int32_t from;
} netbell_packet;

struct ts__netbell {
  int fd;
  uint8_t token[16];
  struct sockaddr_in *peer; /* per world rank; sin_family 0: none (same node, or self) */
  _Atomic uint8_t *answered; /* per world rank: it answered this rank's probe */
  _Atomic bool stop;
  bool thread_up;
  pthread_t thread;
  ts_world *world;
  struct sockaddr_in self; /* loopback and our port: the stop datagram */
};

static bool token_ok(const uint8_t *a, const uint8_t *b) {
  uint8_t diff = 0;
  for (int i = 0; i < 16; i++)
    diff |= (uint8_t)(a[i] ^ b[i]);
  return diff == 0;
}

static void send_kind(const struct ts__netbell *nb, const struct sockaddr_in *to, uint32_t kind,
                      int from);

static void *bell_thread(void *arg) {
  struct ts__netbell *nb = arg;
  netbell_packet pk;
  for (;;) {
    ssize_t n = recv(nb->fd, &pk, sizeof pk, 0);
    if (atomic_load(&nb->stop))
      return NULL;
    if (n < 0 && errno != EINTR && errno != EAGAIN)
      return NULL;
    if (n != (ssize_t)sizeof pk || !token_ok(pk.token, nb->token))
      continue; /* not ours: ignored */
    if (pk.kind == KIND_RING)
      ts_world_bell_ring(nb->world, nb->world->rank);
    else if (pk.kind == KIND_PROBE && ts__netbell_has(nb->world, pk.from))
      send_kind(nb, &nb->peer[pk.from], KIND_ANSWER, nb->world->rank);
    else if (pk.kind == KIND_ANSWER && ts__netbell_has(nb->world, pk.from))
      atomic_store(&nb->answered[pk.from], 1);
  }
}

static void send_kind(const struct ts__netbell *nb, const struct sockaddr_in *to, uint32_t kind,
                      int from) {
  netbell_packet pk;
  memcpy(pk.token, nb->token, sizeof pk.token);
  pk.kind = kind;
  pk.from = from;
  (void)sendto(nb->fd, &pk, sizeof pk, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)to,
               sizeof *to);
}

/* This rank's IPv4 addresses that are up and not loopback. */
static void my_card(netbell_card *card, uint16_t port) {
  memset(card, 0, sizeof *card);
  card->port = port;
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0)
    return;
  for (struct ifaddrs *i = ifs; i && card->naddr < NETBELL_ADDRS; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        (i->ifa_flags & IFF_LOOPBACK) || !i->ifa_netmask)
      continue;
    card->addr[card->naddr] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
    card->mask[card->naddr] = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
    card->naddr++;
  }
  freeifaddrs(ifs);
}

/* Where to ring a peer: its address on a subnet of ours, else its first; false: it has none. */
static bool peer_address(const netbell_card *mine, const netbell_card *theirs,
                         struct sockaddr_in *out) {
  if (theirs->naddr == 0 || theirs->naddr > NETBELL_ADDRS || theirs->port == 0)
    return false;
  uint32_t pick = theirs->addr[0];
  for (uint32_t a = 0; a < theirs->naddr; a++)
    for (uint32_t m = 0; m < mine->naddr; m++)
      if ((theirs->addr[a] & mine->mask[m]) == (mine->addr[m] & mine->mask[m])) {
        pick = theirs->addr[a];
        a = theirs->naddr;
        break;
      }
  memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_port = htons((uint16_t)theirs->port);
  out->sin_addr.s_addr = pick;
  return true;
}

/* A socket on every address, its port, and the bell thread; false when any of it failed. */
static bool open_socket(struct ts__netbell *nb, uint16_t *port) {
  nb->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (nb->fd < 0)
    return false;
  struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof any;
  if (bind(nb->fd, (struct sockaddr *)&any, sizeof any) != 0 ||
      getsockname(nb->fd, (struct sockaddr *)&any, &len) != 0)
    return false;
  *port = ntohs(any.sin_port);
  nb->self = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = any.sin_port,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  nb->thread_up = pthread_create(&nb->thread, NULL, bell_thread, nb) == 0;
  return nb->thread_up;
}

/* Probes every rank of another node until each has answered (a probe resent every 50 ms to the
 * ranks that have not, for NETBELL_PROBE_MS at most): an answer proves both directions. */
static bool probe_peers(struct ts__netbell *nb, ts_world *w) {
  int64_t deadline = ts_wait_now_ns() + (int64_t)NETBELL_PROBE_MS * 1000000, sent = 0;
  ts_waiter wt;
  ts_waiter_init(&wt, &ts_wait_poll, deadline);
  for (;;) {
    bool all = true, resend = ts_wait_now_ns() - sent >= 50 * 1000000LL;
    for (int r = 0; r < w->size; r++) {
      if (!nb->peer[r].sin_family || atomic_load(&nb->answered[r]))
        continue;
      all = false;
      if (resend)
        send_kind(nb, &nb->peer[r], KIND_PROBE, w->rank);
    }
    if (all)
      return true;
    if (resend)
      sent = ts_wait_now_ns();
    if (ts_waiter_pause(&wt) != TS_OK)
      return false;
  }
}

void ts__netbell_free(ts_world *w) {
  struct ts__netbell *nb = w ? w->netbell : NULL;
  if (!nb)
    return;
  if (nb->thread_up) {
    atomic_store(&nb->stop, true);
    send_kind(nb, &nb->self, KIND_STOP, w->rank);
    shutdown(nb->fd, SHUT_RDWR); /* ends the recv where the datagram did not */
    pthread_join(nb->thread, NULL);
  }
  if (nb->fd >= 0)
    close(nb->fd);
  free(nb->peer);
  free((void *)nb->answered);
  free(nb);
  w->netbell = NULL;
}

/* Gives up on the bells: every rank reaches the same decision (ok is agreed first). */
static int netbell_agree(ts_world *w, int *ok, ts_error *err) {
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ok, 1, MPI_INT, MPI_LAND, w->world.comm), err);
  if (!*ok)
    ts__netbell_free(w);
  return TS_OK;
}

int ts__netbell_init(ts_world *w, ts_error *err) {
  w->netbell = NULL;
  const char *env = getenv("TSHARD_NET_BELLS");
  int ok = !(env && strcmp(env, "0") == 0) && w->bells && !w->bells_local;
  TS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, w->world.comm), err);
  if (!ok)
    return TS_OK; /* alike everywhere: one node, no shared window, or turned off */
  struct ts__netbell *nb = calloc(1, sizeof *nb);
  netbell_card *cards = calloc((size_t)w->size, sizeof *cards);
  w->netbell = nb;
  uint16_t port = 0;
  if (nb) {
    nb->fd = -1;
    nb->world = w;
    nb->peer = calloc((size_t)w->size, sizeof *nb->peer);
    nb->answered = calloc((size_t)w->size, sizeof *nb->answered);
  }
  ok = nb && cards && nb->peer && nb->answered && open_socket(nb, &port);
  if (ok && w->rank == 0 && getrandom(nb->token, sizeof nb->token, 0) != sizeof nb->token)
    ok = 0;
  int rc = netbell_agree(w, &ok, err);
  if (rc || !ok) {
    free(cards);
    return rc;
  }
  netbell_card card;
  my_card(&card, port);
  int mrc = MPI_Bcast(nb->token, sizeof nb->token, MPI_BYTE, 0, w->world.comm);
  if (mrc == MPI_SUCCESS)
    mrc = MPI_Allgather(&card, sizeof card, MPI_BYTE, cards, sizeof card, MPI_BYTE,
                        w->world.comm);
  ok = mrc == MPI_SUCCESS;
  for (int r = 0; ok && r < w->size; r++)
    if (r != w->rank && !w->bells[r] && !peer_address(&card, &cards[r], &nb->peer[r]))
      ok = 0;
  free(cards);
  if (mrc != MPI_SUCCESS) {
    ts__netbell_free(w);
    return ts__mpi_error(mrc, "MPI_Allgather", __FILE__, __LINE__, err);
  }
  if ((rc = netbell_agree(w, &ok, err)) || !ok)
    return rc;
  ok = probe_peers(nb, w);
  return netbell_agree(w, &ok, err);
}

bool ts__netbell_has(const ts_world *w, int rank) {
  return w && w->netbell && rank >= 0 && rank < w->size && w->netbell->peer[rank].sin_family;
}

void ts__netbell_ring(const ts_world *w, int rank) {
  if (ts__netbell_has(w, rank))
    send_kind(w->netbell, &w->netbell->peer[rank], KIND_RING, w->rank);
}
