"""Same-node shared memory for the Python client.

On a Unix socket the client asks the daemon for a segment (shm_attach, sent with nothing else
outstanding); the answer brings the daemon's memfd as SCM_RIGHTS on its first byte
(socket.recv_fds), the client maps it (mmap) and closes the descriptor. The segment is seen as a
numpy uint8 array: puts copy the caller's array into it with one numpy copy and name the region
in the request; gets copy the answered region out of it into the result array. The segment grows
on demand up to ``max_bytes``; larger transfers go through it in chunks of half its size. Once a
connection has operations in flight (future.py), each transfer owns a region of the segment
(Regions) until its answer, and the reader thread receives the segment's descriptor.
"""
import mmap
import os
import socket as _socket

import numpy as np

from . import tshard_pb2 as pb
from ._status import IO, OK, PROTOCOL
from .errors import TshardError, error_for

# the C client's TSC_SHM_DEFAULT_MAX and TSC_SHM_MIN (defined in client/shm.c, not a header)
DEFAULT_MAX = 1 << 30
MIN_BYTES = 64 << 10


class Segment:
    def __init__(self, wire, next_id, max_bytes=DEFAULT_MAX):
        self._wire = wire
        self._next_id = next_id  # callable: the next request id
        self.max_bytes = max(int(max_bytes), MIN_BYTES)
        self._map = None
        self.view = None  # numpy uint8 array over the mapping
        self.bytes = 0

    def close(self):
        self.view = None  # the array's export must go before the mapping closes
        if self._map is not None:
            self._map.close()
            self._map = None
        self.bytes = 0

    def ready(self, need):
        """Whether a transfer of `need` bytes can go through the segment: attaches or grows it
        when needed. Raises TshardError when the daemon refuses (the caller then uses the
        stream)."""
        want = max(min(need, self.max_bytes), MIN_BYTES)
        if self._map is not None and (self.bytes >= want or self.bytes >= self.max_bytes):
            return True
        self._attach(want)
        return True

    def _attach(self, want):
        self.close()
        req = pb.Request(id=self._next_id())
        req.shm_attach.bytes = want
        body = req.SerializeToString()
        self._wire.send([len(body).to_bytes(4, "little") + body])
        head, fds, _, _ = _socket.recv_fds(self._wire.sock, 4, 1)
        try:
            if not head:
                raise error_for(IO, "the daemon closed the connection")
            if len(head) < 4:
                head += bytes(self._wire.recv_exact(4 - len(head)))
            resp = self._wire.recv(head)
            if resp.id != req.id:
                raise error_for(PROTOCOL, f"answer to request {resp.id} while waiting for {req.id}")
            self.map_answer(resp, fds, want)
        finally:
            for fd in fds:
                os.close(fd)

    def map_answer(self, resp, fds, want):
        """Maps the segment of an answer to shm_attach of `want` bytes (fds: the descriptors that
        came with it; the caller closes them). Raises the daemon's refusal, or PROTOCOL."""
        self.close()
        if resp.status != OK:
            raise error_for(resp.status, resp.message)
        if resp.WhichOneof("result") != "shm" or not fds or resp.shm.bytes == 0:
            raise error_for(PROTOCOL, "shm_attach answered without a segment")
        n = resp.shm.bytes
        if os.fstat(fds[0]).st_size < n:
            raise error_for(PROTOCOL, "the segment is smaller than announced")
        self._map = mmap.mmap(fds[0], n)
        self.view = np.frombuffer(self._map, dtype=np.uint8)
        self.bytes = n
        if n < want:
            self.max_bytes = n  # the daemon's bound

    def region(self, shm):
        """The array of an answered region, checked to lie inside the segment."""
        if self.view is None or shm.offset > self.bytes or shm.bytes > self.bytes - shm.offset:
            raise error_for(PROTOCOL, "the daemon answered a region outside the segment")
        return self.view[shm.offset:shm.offset + shm.bytes]


class Regions:
    """The parts of a segment that operations in flight own (offset -> bytes), so that several
    transfers use one segment at once: each takes a region of its own, first fit at 64-byte
    boundaries, and gives it back when its answer came."""

    def __init__(self):
        self.used = {}

    def take(self, n, size):
        """The offset of a free region of n bytes in a segment of size bytes, or None."""
        at = 0
        for off in sorted(self.used):
            if off - at >= n:
                break
            at = max(at, (off + self.used[off] + 63) & ~63)
        if size - at < n:
            return None
        self.used[at] = n
        return at

    def give(self, off):
        self.used.pop(off, None)


__all__ = ["Segment", "Regions", "TshardError"]
