/* fdpass.c - passing a file descriptor to a client with SCM_RIGHTS on a Unix stream socket.
 *
 * libuv's streams cannot carry an arbitrary descriptor, so the loop thread sends the frame that
 * answers shm_attach itself, with sendmsg on the socket's fd, at a moment when libuv has nothing
 * queued on that connection (so no byte of the stream is reordered); the descriptor rides on the
 * first byte, and whatever the kernel did not take goes on by the ordinary stream. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "tsd_wire.h"

int tsd_send_fd(int sock, const uint8_t *buf, size_t len, int fd, size_t *sent) {
  *sent = 0;
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int))];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {(void *)buf, len};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.bytes;
  mh.msg_controllen = sizeof ctl.bytes;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  ssize_t n;
  do
    n = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno;
  *sent = (size_t)n;
  return 0;
}
