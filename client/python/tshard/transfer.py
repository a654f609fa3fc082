"""How a put's and a get's bytes travel, under the tensor operations: in chunks sized by the
daemon's maximum frame, WINDOW chunk requests in flight, each naming its byte offset; on a Unix
socket through a segment shared with the daemon (``shm=False`` or TSHARD_SHM=0: through the
socket, sent from the caller's array and received straight into the result array). Whole puts
and gets on a Unix socket go further: the request names the array's own memory (ClientMemory)
and every daemon copies its piece straight from or into it (process_vm_readv/writev), no copy in
Python at all. A daemon that cannot reach this process's memory answers NO_DIRECT once, and the
segment serves from then on; TSHARD_DIRECT=0 keeps the segment. Once operations are in flight
(``wait=False``) the reader thread's paths serve instead (fastpath).
"""
import collections

import numpy as np

from . import fastpath as _fastpath
from . import tshard_pb2 as pb
from ._common import _FROM_NUMPY, DTYPES, _check_name, _put_error, _swapped_note
from ._status import BAD_SHAPE, IO, NO_DIRECT, OK, PROTOCOL, TIMEOUT
from .errors import TshardError, error_for
from .future import Future
from .progress import reporter
from .typed_put import declare
from .wire import request_frame

WINDOW = 2  # chunk requests in flight


class Transfers:
    """The chunked and direct data paths of puts and gets (a mixin of :class:`tshard.Client`)."""

    def _put_async(self, name, array, key, slice_layout, convert) -> Future:
        """A put or put_slice once the reader thread serves the connection (fastpath.py)."""
        _check_name(name)
        what = "put" if slice_layout is None else "put_slice"
        a, decl = declare(array, convert, DTYPES, _FROM_NUMPY, what)
        return _fastpath.put(self, name, a, decl, _swapped_note(array, a, decl), key,
                             slice_layout, convert)

    def _get_async(self, name, out, slice_of_rank) -> Future:
        """A get (slice_of_rank None) or this rank's get_slice once the reader thread serves
        the connection (fastpath.py)."""
        _check_name(name)
        return _fastpath.get(self, name, out, slice_of_rank)

    def _send_chunks(self, name, array, key, slice_layout, convert=False, progress=None):
        """A put (slice_layout None) or put_slice in chunks, WINDOW in flight; through the
        segment when there is one (all at once when it fits, else in its alternate halves: a
        half is written again only after the answer to its previous chunk). After a refusal
        nothing more is sent, the answers due are read, and the first refusal is raised."""
        _check_name(name)
        what = "put" if slice_layout is None else "put_slice"
        a, decl = declare(array, convert, DTYPES, _FROM_NUMPY, what)
        note = _swapped_note(array, a, decl)
        src = a.reshape(-1).view(np.uint8)
        total = src.nbytes
        report, done = reporter(progress, what, name, total), 0
        if not convert and self._direct_on and total > 0:
            if slice_layout is None:
                m = pb.PutRequest(name=name, total_bytes=total, dtype=decl, shape=a.shape)
            else:
                m = pb.PutSliceRequest(name=name, total_bytes=total, dtype=decl, shape=a.shape)
                m.layout.tag = slice_layout
            m.client_memory.address = src.__array_interface__["data"][0]
            m.client_memory.bytes = total
            if self._direct(m, what, name, total, key, report):
                return
        with self._io():
            seg = self._segment(total)
            if seg is None:
                chunk = self.chunk
            else:
                chunk = total if total <= seg.bytes else (seg.bytes // 2) & ~63
            offsets = list(range(0, total, chunk)) or [0]
            pending = collections.deque()
            first, sent = None, 0
            while pending or (sent < len(offsets) and first is None):
                while sent < len(offsets) and len(pending) < WINDOW and first is None:
                    off = offsets[sent]
                    n = min(chunk, total - off)
                    req = self._request(key)
                    m = req.put if slice_layout is None else req.put_slice
                    m.name, m.offset, m.total_bytes = name, off, total
                    if slice_layout is not None:
                        m.layout.tag = slice_layout
                    m.dtype, m.convert = decl, bool(convert)  # the daemon checks (typed_put.py)
                    m.shape.extend(a.shape)
                    bulk = None
                    if seg is not None:
                        at = (sent % 2) * chunk
                        np.copyto(seg.view[at:at + n], src[off:off + n])
                        m.shm.offset, m.shm.bytes = at, n
                    else:
                        bulk = memoryview(src[off:off + n])
                    self._wire.send(request_frame(req, bulk))
                    pending.append((req.id, sent))
                    sent += 1
                resp = self._wire.recv()
                match = [p for p in pending if p[0] == resp.id] or (
                    [pending[0]] if resp.id == 0 else [])
                if not match:
                    raise error_for(PROTOCOL, "answer to a request that was not sent")
                pending.remove(match[0])
                if resp.status != OK and (first is None or match[0][1] < first[0]):
                    first = (match[0][1], _put_error(resp, note))
                elif resp.status == OK:
                    n = min(chunk, total - offsets[match[0][1]])
                    self._count("frames" if seg is None else "shm", n)
                    done += n
                    if report is not None:
                        report(done, total)
            if first is not None:
                raise first[1]

    def _direct(self, req_msg, what, tensor, nbytes, key=None, report=None):
        """Sends a put or get naming this process's memory (req_msg filled); True when done,
        False when the daemon cannot reach it (NO_DIRECT: the segment serves from now on)."""
        try:
            resp = self._call(key, **{what: req_msg})
        except TshardError as e:
            if e.status != NO_DIRECT:
                raise
            self._direct_on = False
            return False
        self._direct_ok = True
        if what in ("get", "get_slice"):
            d = resp.data if resp.WhichOneof("result") == "data" else None
            if d is None or not d.direct or d.total_bytes != nbytes or d.offset != 0:
                self.close()
                raise error_for(PROTOCOL, f"the daemon answered a get of '{tensor}' into this "
                                          "process's memory without saying it wrote it all")
        self._count("direct", nbytes)
        if report is not None:
            report(nbytes, nbytes)
        return True

    def _chunk_answer(self, want_id, off, sink, seg, refuse):
        """Receives the answer to chunk request want_id at off into sink(total); returns
        (total, bytes)."""
        total, n, resp = self._wire.recv_data(want_id, off, sink)
        if resp is None:
            self._count("frames", n)
            return total, n
        self._check(resp, want_id)
        d = resp.data if resp.WhichOneof("result") == "data" else None
        if d is None or d.offset != off or off > d.total_bytes:
            raise error_for(PROTOCOL, "the daemon answered a chunk that does not fit")
        if d.HasField("shm"):
            if seg is None or d.data:
                raise error_for(PROTOCOL, "the daemon answered in shared memory it was not offered")
            data = seg.region(d.shm)
        else:
            data = np.frombuffer(d.data, dtype=np.uint8)
        if len(data) > d.total_bytes - off:
            raise error_for(PROTOCOL, "the daemon answered a chunk that does not fit")
        dst = sink(d.total_bytes)
        if dst is None:
            raise refuse(d.total_bytes)
        np.copyto(dst[off:off + len(data)], data)
        self._count("shm" if d.HasField("shm") else "frames", len(data))
        return d.total_bytes, len(data)

    def _read_chunks(self, fill, need, out=None, report=None):
        """The bytes of a get or get_slice (fill(req, offset) fills its request message and
        returns it) as a new uint8 array, received straight into it. The first request learns
        the total (through the segment: it offers the whole segment, where a tensor that fits is
        copied at once); then WINDOW requests are in flight, in alternate halves of the
        segment. out: the array to fill (its size must be the total), else a new one."""
        given = out
        out = [given]

        def sink(total):
            if out[0] is None:
                out[0] = self._result_buffer(total)
            return out[0] if len(out[0]) == total else None

        def refuse(total):
            if given is not None:
                return error_for(BAD_SHAPE, f"the result has {total} bytes; out has {len(given)}")
            return error_for(PROTOCOL, f"the daemon answered a total of {total} bytes, not the "
                                       "total of its first answer")

        with self._io():
            seg = self._segment(need)
            chunk = (seg.bytes // 2) & ~63 if seg is not None else self.chunk
            req = self._request()
            m = fill(req, 0)
            if seg is not None:
                m.shm.offset, m.shm.bytes = 0, seg.bytes
            else:
                m.max_bytes = self.chunk
            self._wire.send(request_frame(req))
            total, n = self._chunk_answer(req.id, 0, sink, seg, refuse)
            got = n
            if report is not None:
                report(got, total)
            nxt, half, pending, first = n, 0, collections.deque(), None
            while pending or (nxt < total and first is None):
                while nxt < total and len(pending) < WINDOW and first is None:
                    req = self._request()
                    m = fill(req, nxt)
                    if seg is not None:
                        m.shm.offset, m.shm.bytes = (half % 2) * chunk, chunk
                        half += 1
                    else:
                        m.max_bytes = chunk
                    self._wire.send(request_frame(req))
                    pending.append((req.id, nxt))
                    nxt += min(chunk, total - nxt)
                rid, off = pending.popleft()
                try:
                    t, n = self._chunk_answer(rid, off, sink, seg, refuse)
                except TshardError as e:
                    if e.status in (PROTOCOL, IO, TIMEOUT):
                        raise
                    first = first or e
                    continue
                if t != total or n != min(chunk, total - off):
                    raise error_for(PROTOCOL, "the daemon answered a chunk of another size")
                got += n
                if report is not None:
                    report(got, total)
            if first is not None:
                raise first
            return out[0] if out[0] is not None else np.empty(0, dtype=np.uint8)
