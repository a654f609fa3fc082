"""Frames on the socket without per-chunk Python copies.

A frame is a 4-byte little-endian length and one protobuf message. Requests that carry bulk data
(PutRequest and PutSliceRequest, field 4) are serialized without it; the data field is appended
to the nested message by hand (protobuf accepts fields in any order) and the bytes go to the
socket straight from the caller's buffer. Data answers (Response{id, data=DataChunk{offset,
total_bytes, data}}, the data last, as the daemon packs them) are recognized from their first
bytes and their data is received with recv_into straight into the destination array; anything
else is decoded whole.
"""
import struct

from . import tshard_pb2 as pb
from ._limits import MAX_FRAME  # the largest frame a client accepts (the C client's too)
from ._status import IO, LIMIT, PROTOCOL
from .errors import error_for

_PREFIX = 64  # bytes read to recognize a data answer


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _get_varint(buf, pos):
    """(value, next position), or None when the varint does not end inside buf."""
    v = shift = 0
    while pos < len(buf) and shift < 64:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7
    return None


def data_prefix(buf):
    """For the start of a successful data answer: (id, offset, total, data length, where the
    data starts); None for anything else."""
    pos, ident, offset, total = 0, 0, 0, 0
    while pos < len(buf):
        r = _get_varint(buf, pos)
        if r is None:
            return None
        key, pos = r
        if key == (1 << 3):
            r = _get_varint(buf, pos)
            if r is None:
                return None
            ident, pos = r
        elif key == (2 << 3):
            r = _get_varint(buf, pos)
            if r is None or r[0] != 0:
                return None
            pos = r[1]
        elif key == (12 << 3 | 2):
            r = _get_varint(buf, pos)
            if r is None:
                return None
            pos = r[1]
            while pos < len(buf):
                r = _get_varint(buf, pos)
                if r is None:
                    return None
                key, pos = r
                r = _get_varint(buf, pos)
                if r is None:
                    return None
                if key == (1 << 3):
                    offset, pos = r
                elif key == (2 << 3):
                    total, pos = r
                elif key == (3 << 3 | 2):
                    return ident, offset, total, r[0], r[1]
                else:
                    return None
            return None
        else:
            return None
    return None


def request_frame(req, bulk=None):
    """The frame of req as a list of buffers to send; bulk (a memoryview of bytes) is the data
    of req's put or put_slice, sent from where it lies."""
    if bulk is None or len(bulk) < 4096:
        if bulk is not None:
            getattr(req, req.WhichOneof("op")).data = bytes(bulk)
        body = req.SerializeToString()
        return [struct.pack("<I", len(body)) + body]
    op = req.WhichOneof("op")
    field = req.DESCRIPTOR.fields_by_name[op].number
    inner = getattr(req, op).SerializeToString()
    outer = pb.Request()
    outer.CopyFrom(req)
    outer.ClearField(op)
    dhead = bytes([4 << 3 | 2]) + varint(len(bulk))
    head = (outer.SerializeToString() + varint(field << 3 | 2)
            + varint(len(inner) + len(dhead) + len(bulk)) + inner + dhead)
    total = len(head) + len(bulk)
    if total > 0xFFFFFFFF:
        raise error_for(LIMIT, f"chunk of {len(bulk)} bytes does not fit a frame")
    return [struct.pack("<I", total) + head, bulk]


class Wire:
    """Frames over one socket (blocking, with the socket's timeout)."""

    def __init__(self, sock):
        self.sock = sock

    def send(self, buffers):
        """Sends the buffers in order with sendmsg (one call for a header and its data)."""
        views = [memoryview(b).cast("B") for b in buffers]
        while views:
            n = self.sock.sendmsg(views)
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if views and n:
                views[0] = views[0][n:]

    def recv_into(self, view):
        got, n = 0, len(view)
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise error_for(IO, "the daemon closed the connection")
            got += k

    def recv_exact(self, n):
        buf = bytearray(n)
        self.recv_into(memoryview(buf))
        return buf

    def _length(self, head):
        (n,) = struct.unpack("<I", head)
        if n > MAX_FRAME:
            raise error_for(PROTOCOL, f"the daemon sent a frame of {n} bytes")
        return n

    def recv(self, head=None):
        """One Response, decoded."""
        n = self._length(head if head is not None else self.recv_exact(4))
        return pb.Response.FromString(bytes(self.recv_exact(n)))

    def recv_data(self, want_id, offset, sink):
        """One answer; when it is the data answer to request want_id at offset, its data goes
        straight into sink(total) (a writable uint8 array covering the whole transfer, or None
        to refuse) and (total, length, None) is returned; otherwise (None, None, Response)."""
        n = self._length(self.recv_exact(4))
        have = min(n, _PREFIX)
        prefix = self.recv_exact(have)
        p = data_prefix(prefix)
        if p is not None:
            ident, off, total, dlen, start = p
            if ident == want_id and off == offset and start + dlen == n and dlen <= total - off:
                dst = sink(total)
                if dst is not None and len(dst) == total and total == 0:
                    return 0, 0, None  # nothing to receive (a view of zero bytes cannot cast)
                if dst is not None and len(dst) == total:
                    view = memoryview(dst).cast("B")
                    in_hand = have - start
                    view[off:off + in_hand] = prefix[start:]
                    self.recv_into(view[off + in_hand:off + dlen])
                    return total, dlen, None
        rest = self.recv_exact(n - have)
        return None, None, pb.Response.FromString(bytes(prefix + rest))
