"""Puts and gets of a connection whose answers come through its reader thread (future.py), on
the same data paths as before the reader started.

Each transfer picks its path when it is sent: the request names this process's memory (the
direct path: the daemons copy straight from or into the caller's array), else a region of the
connection's shared segment that the transfer owns until its answer (shm.Regions: several
transfers use one segment at once), else frames (TCP, or a daemon that refused the segment).
An operation holds the connection's gate from its first request to its last, so requests go
out in the order the operations were issued; a step that must wait (a get learns its size from
a describe first, a transfer waits for a free region or for the segment to grow) runs on the
reader thread once what it waits for came, and never blocks that thread. The segment grows
(shm_attach again, its descriptor received by the reader) only with nothing in flight: the
daemon passes the descriptor only on an idle connection. The first direct transfer of a
connection is answered before anything else is sent: a daemon that cannot reach this process
(NO_DIRECT) then sees the same transfer again through the segment, still in order.
``Client.bytes_by_path`` counts the bytes each path moved. put_many and get_many (batch_io.py)
take the same steps: planned (a first request whose answer says what to send), direct,
put_staged and get_staged.
"""
import os
from typing import Any, Callable, Dict, Optional

import numpy as np

from . import tshard_pb2 as pb
from ._common import _describe_dict, _no_elements, _out_bytes, _put_error, DTYPES
from ._status import NO_DIRECT, OK, PROTOCOL
from .errors import TshardError, error_for
from .future import Future, Inflight
from .shm import MIN_BYTES, Regions
from .wire import request_frame

_CONNECTION = (17, 18, 19)  # PROTOCOL, IO, TIMEOUT: the connection is gone


class Transfers:
    """A connection's segment in reader mode: the regions in use, the one transfer waiting for
    a region (it holds the gate, so there is at most one) and a growth under way."""

    def __init__(self, c, fl: Inflight) -> None:
        self.c, self.fl = c, fl
        self.regions = Regions()
        self.waiter = None  # (bytes, go(offset or None), fail(error))
        self.attaching = False
        fl.after = self.pump
        fl.on_fail = self._failed

    def want(self, n: int, go: Callable[[Optional[int]], None],
             fail: Callable[[TshardError], None]) -> None:
        """go(offset) once a region of n bytes is this transfer's (go(None): no segment, frames
        serve); with the condition held, on this thread or later on the reader's."""
        self.waiter = (n, go, fail)
        self.pump()

    def pump(self) -> None:
        """Serves the waiting transfer when it can be (the condition held)."""
        if self.waiter is None or self.attaching:
            return
        n, go, fail = self.waiter
        seg = self.c._seg
        if seg is not None and seg.bytes >= n:
            at = self.regions.take(n, seg.bytes)
            if at is not None:
                self.waiter = None
                go(at)
            return
        if seg is None or seg.max_bytes < n:
            self.waiter = None
            go(None)
        elif not self.regions.used and not self.fl.handlers:
            self._attach(max(n, MIN_BYTES))

    def _failed(self, err: TshardError) -> None:
        w, self.waiter = self.waiter, None
        if w is not None:
            w[2](err)

    def _attach(self, want: int) -> None:
        """A segment of `want` bytes in place of the current one (nothing is in flight)."""
        seg, c = self.c._seg, self.c
        seg.close()
        self.attaching = True
        req = c._request()
        req.shm_attach.bytes = want

        def on_answer(resp, err):
            self.attaching = False
            fds, self.fl.fds = self.fl.fds, []
            try:
                if err is None:
                    seg.map_answer(resp, fds, want)
            except TshardError as e:
                err = e
            finally:
                for fd in fds:
                    os.close(fd)
            if err is not None and err.status in _CONNECTION:
                self._failed(err)
            elif err is not None:  # refused (memory limit): frames serve from now on
                c._seg = None
        try:
            self.fl.register(req.id, on_answer)
            self.fl.send(request_frame(req))
        except TshardError as e:
            self.attaching = False
            self._failed(e)


def transfers(c, fl: Inflight) -> Transfers:
    if c._transfers is None or c._transfers.fl is not fl:
        c._transfers = Transfers(c, fl)
    return c._transfers


class _Op:
    """One transfer's requests: the gate held until the last is sent (seal), the answers
    counted, and the Future set once all came (the first refusal in request order wins)."""

    def __init__(self, fl: Inflight, fut: Future, value: Callable[[], Any]) -> None:
        self.fl, self.fut, self.value = fl, fut, value
        self.gated = True
        self.left, self.sealed, self.first = 0, False, None
        fl.gate.acquire()

    def release(self) -> None:
        if self.gated:
            self.gated = False
            self.fl.gate.release()

    def send(self, req, handler, bulk=None, pins=False) -> None:
        self.fl.register(req.id, handler, pins)
        self.left += 1
        self.fl.send(request_frame(req, bulk))

    def answered(self, i: int, err: Optional[BaseException]) -> None:
        if err is not None and (self.first is None or i < self.first[0]):
            self.first = (i, err)
        self.left -= 1
        self._finish()

    def seal(self) -> None:
        self.sealed = True
        self.release()
        self._finish()

    def abort(self, err: BaseException) -> None:
        """Nothing more is sent; the Future fails with err (answers due are ignored)."""
        self.fut._set(error=err)
        self.release()

    def _finish(self) -> None:
        if self.sealed and self.left == 0 and not self.fut._done:
            if self.first is not None:
                self.fut._set(error=self.first[1])
            else:
                try:
                    self.fut._set(self.value())
                except Exception as e:  # noqa: BLE001 - the Future carries it
                    self.fut._set(error=e)


def _refusal(resp) -> TshardError:
    return error_for(resp.status, resp.message)


def _status(resp, err, refusal=_refusal):
    """The error of an answer: the connection's (err), the daemon's refusal, or None."""
    if err is None and resp is not None and resp.status != OK:
        return refusal(resp)
    return err


# -- puts ----------------------------------------------------------------------------------------
def put(c, name: str, a: np.ndarray, decl: str, note: str, key, slice_layout, convert) -> Future:
    """A put or put_slice of array a (declared decl) as a Future (see the top)."""
    src = a.reshape(-1).view(np.uint8)
    total = src.nbytes
    what = "put" if slice_layout is None else "put_slice"
    fl = c._reader_on()
    tr = transfers(c, fl)
    fut = Future(fl.cond, f"{what} of '{name}'")
    fut._keep = src

    def message(req):
        m = req.put if slice_layout is None else req.put_slice
        m.name, m.total_bytes = name, total
        if slice_layout is not None:
            m.layout.tag = slice_layout
        m.dtype, m.convert = decl, bool(convert)
        m.shape.extend(a.shape)
        return m
    refusal = (lambda resp: _put_error(resp, note))
    op = _Op(fl, fut, lambda: None)
    try:
        with fl.cond:
            if not convert and c._direct_on and total > 0:
                _put_direct(c, tr, op, message, src, key, refusal)
            else:
                put_staged(c, tr, op, message, src, key, refusal)
    except BaseException:
        op.release()
        raise
    return fut


def _put_direct(c, tr, op, message, src, key, refusal) -> None:
    req = c._request(key)
    m = message(req)
    m.client_memory.address = src.__array_interface__["data"][0]
    m.client_memory.bytes = src.nbytes
    direct(c, op, req, src.nbytes, lambda: put_staged(c, tr, op, message, src, key, refusal),
           refusal=refusal)


def direct(c, op, req, total: int, again: Callable[[], None],
           check: Optional[Callable[[Any], Optional[TshardError]]] = None,
           refusal=_refusal) -> None:
    """Sends req, a transfer of `total` bytes naming this process's memory (the condition held;
    the memory pinned until its answer, see Inflight.register). The connection's first such
    transfer is sent alone: the gate opens with its answer, and on NO_DIRECT again() sends the
    same transfer through the segment (or frames), still in order. check(resp): the error of an
    answer that did not say it moved everything (a get), or None."""
    confirmed = c._direct_ok

    def on_answer(resp, err):
        if err is None and resp.status == NO_DIRECT and not confirmed:
            c._direct_on = False  # the segment serves this one and the later ones
            op.left, op.sealed = op.left - 1, False
            try:
                return again()
            except Exception as e:  # noqa: BLE001 - on the reader thread: the Future carries it
                return op.abort(e)
        err = _status(resp, err, refusal)
        if err is None and check is not None:
            err = check(resp)
        if err is None:
            c._direct_ok = True
            c._count("direct", total)
        op.answered(0, err)
        op.release()
    op.send(req, on_answer, pins=True)
    if confirmed:
        op.seal()
    else:
        op.sealed = True  # sent alone: the gate opens with its answer


def _through_regions(tr, op, total, seg, frames, what, request, answered) -> None:
    """A transfer of `total` bytes in chunks, each through a region of the segment that it owns
    until its answer (the condition held): request(off, n, at) fills the region (a put) and
    returns the chunk's request, answered(off, n, at, resp, err) takes its answer (a get copies
    out) and returns the chunk's error. Without a region for the first chunk, frames() serves
    the whole transfer."""
    chunk = total if total <= seg.max_bytes else (seg.max_bytes // 2) & ~63
    offsets = list(range(0, total, chunk))

    def send(i):
        off = offsets[i]
        n = min(chunk, total - off)

        def go(at):
            if at is None:
                if i == 0:
                    return frames()
                return op.abort(error_for(PROTOCOL, "the shared segment went away in the "
                                                     f"middle of a {what}"))
            req = request(off, n, at)

            def on_answer(resp, err):
                err = answered(off, n, at, resp, err)
                tr.regions.give(at)
                op.answered(i, err)
            try:
                op.send(req, on_answer)
            except TshardError as e:
                return op.abort(e)
            if i + 1 < len(offsets):
                send(i + 1)
            else:
                op.seal()
        tr.want(n, go, op.abort)
    send(0)


def put_staged(c, tr, op, message, src, key, refusal=_refusal, chunk=None) -> None:
    """A put of the bytes src through regions of the segment, else in frames of `chunk` data
    bytes (default c.chunk), the condition held. message(req) fills the request's put message
    (offset and place are set here) and returns it."""
    total = src.nbytes
    seg = c._seg
    if seg is None or total == 0:
        return _put_frames(c, op, message, src, key, refusal, chunk)

    def request(off, n, at):
        np.copyto(c._seg.view[at:at + n], src[off:off + n])
        req = c._request(key)
        m = message(req)
        m.offset = off
        m.shm.offset, m.shm.bytes = at, n
        return req

    def answered(off, n, at, resp, err):
        err = _status(resp, err, refusal)
        if err is None:
            c._count("shm", n)
        return err
    _through_regions(tr, op, total, seg,
                     lambda: _put_frames(c, op, message, src, key, refusal, chunk),
                     "put", request, answered)


def _put_frames(c, op, message, src, key, refusal, chunk=None) -> None:
    total = src.nbytes
    chunk = chunk or c.chunk
    offsets = list(range(0, total, chunk)) or [0]

    def handler(i, n):
        def on_answer(resp, err):
            err = _status(resp, err, refusal)
            if err is None:
                c._count("frames", n)
            op.answered(i, err)
        return on_answer
    for i, off in enumerate(offsets):
        n = min(chunk, total - off)
        req = c._request(key)
        message(req).offset = off
        op.send(req, handler(i, n), memoryview(src[off:off + n]))
    op.seal()


# -- gets ----------------------------------------------------------------------------------------
def get(c, name: str, out, slice_rank: Optional[int]) -> Future:
    """A get (slice_rank None) or this rank's get_slice as a Future: a describe, then the data
    on the fastest path (see the top)."""
    what = "get" if slice_rank is None else "get_slice"

    def fill(req):
        req.describe.name = name

    def plan(tr, op, resp):
        _get_plan(c, tr, op, name, out, slice_rank, _describe_dict(resp.describe))
    return planned(c, f"{what} of '{name}'", fill, plan)


def planned(c, what: str, fill: Callable[[Any], None],
            plan: Callable[[Transfers, _Op, Any], None]) -> Future:
    """An operation whose data requests follow from the answer to its first request (fill(req)
    sets that one): plan(tr, op, resp) sends them on the reader thread once it came. The gate is
    held from the first request on, so nothing is sent in between; the Future fails with the
    first request's refusal or what plan raises (a bad out= too)."""
    fl = c._reader_on()
    tr = transfers(c, fl)
    fut = Future(fl.cond, what)
    op = _Op(fl, fut, lambda: None)

    def on_answer(resp, err):
        err = _status(resp, err)
        if err is not None:
            return op.abort(err)
        try:
            plan(tr, op, resp)
        except Exception as e:  # noqa: BLE001 - the Future carries it
            op.abort(e)
    try:
        req = c._request()
        fill(req)
        fl.register(req.id, on_answer)
        fl.send(request_frame(req))
    except BaseException:
        op.release()
        raise
    return fut


def _get_plan(c, tr, op, name, out, slice_rank, info: Dict[str, Any]) -> None:
    """The data requests of a get once its describe came (reader thread)."""
    dt = DTYPES[info["dtype"]]
    shape = info["shape"]
    if slice_rank is not None:
        mine = [r for r in info["ranks"] if r["rank"] == slice_rank]
        if not mine or mine[0]["bytes"] == 0:
            op.fut._set(_no_elements(info, mine, None, out))
            return op.release()
        shape = [h - lo for lo, h in zip(mine[0]["lo"], mine[0]["hi"])]
    need = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    what = "get" if slice_rank is None else "get_slice"
    flat = None if out is None else _out_bytes(out, dt, what, shape, name)
    buf = flat if flat is not None else c._result_buffer(need)
    op.value = lambda: buf.view(dt).reshape(shape)
    op.fut._keep = buf

    def message(req, _off):
        m = req.get if slice_rank is None else req.get_slice
        m.name = name
        return m
    if need == 0:
        return op.seal()
    if c._direct_on:
        return _get_direct(c, tr, op, message, buf, name)
    get_staged(c, tr, op, message, buf, f"'{name}'")


def _get_direct(c, tr, op, message, buf, name) -> None:
    need = buf.nbytes
    req = c._request()
    m = message(req, 0)
    m.client_memory.address = buf.__array_interface__["data"][0]
    m.client_memory.bytes = need

    def check(resp):
        d = resp.data if resp.WhichOneof("result") == "data" else None
        if d is None or not d.direct or d.total_bytes != need or d.offset != 0:
            return error_for(PROTOCOL, f"the daemon answered a get of '{name}' into this "
                                        f"process's memory without saying it wrote it all")
        return None
    direct(c, op, req, need, lambda: get_staged(c, tr, op, message, buf, f"'{name}'"), check)


def get_staged(c, tr, op, message, buf, what) -> None:
    """The bytes of a get into buf through regions of the segment, else in frames, the
    condition held. message(req, offset) fills the request's get message (offset and place are
    set here) and returns it; what names the transfer in errors ("'w'")."""
    need = buf.nbytes
    seg = c._seg
    if seg is None or need == 0:
        return _get_frames(c, op, message, buf, what)

    def request(off, n, at):
        req = c._request()
        m = message(req, off)
        m.offset = off
        m.shm.offset, m.shm.bytes = at, n
        return req

    def answered(off, n, at, resp, err):
        err = _status(resp, err)
        if err is None:
            d = resp.data if resp.WhichOneof("result") == "data" else None
            try:
                if d is None or not d.HasField("shm") or d.offset != off:
                    raise error_for(PROTOCOL, "no region")
                part = c._seg.region(d.shm)
            except TshardError:
                part = None
            if part is None or d.total_bytes != need or len(part) != n:
                err = error_for(PROTOCOL, f"the daemon answered a chunk of {what} "
                                           f"that does not fit")
            else:
                np.copyto(buf[off:off + n], part)
                c._count("shm", n)
        return err
    _through_regions(tr, op, need, seg, lambda: _get_frames(c, op, message, buf, what),
                     "get", request, answered)


def _get_frames(c, op, message, buf, what) -> None:
    need = buf.nbytes
    offsets = list(range(0, need, c.chunk)) or [0]

    def handler(i, off):
        def on_answer(resp, err):
            err = _status(resp, err)
            if err is None:
                d = resp.data if resp.WhichOneof("result") == "data" else None
                if (d is None or d.offset != off or d.total_bytes != need
                        or len(d.data) != min(c.chunk, need - off)):
                    err = error_for(PROTOCOL, f"the daemon answered a chunk of {what} that "
                                               f"does not fit")
                else:
                    buf[off:off + len(d.data)] = np.frombuffer(d.data, dtype=np.uint8)
                    c._count("frames", len(d.data))
            op.answered(i, err)
        return on_answer
    for i, off in enumerate(offsets):
        req = c._request()
        m = message(req, off)
        m.offset, m.max_bytes = off, c.chunk
        op.send(req, handler(i, off))
    op.seal()
