"""Operations in flight on one connection: ``tshard.Future``, ``tshard.wait`` and the reader that
matches answers to requests.

An operation called with ``wait=False`` sends its request(s) and returns a Future at once; the
caller keeps computing or sends more. From a client's first such operation on, a background
thread of that client (the reader, one per connection) reads every answer and hands it to the
request it answers, by request id; senders write whole frames under a lock, so requests go out
in the order they were issued and the daemon runs a connection's operations in that order.
Synchronous calls then go through the same path (a Future waited on at once); puts and gets
keep the fast data paths (fastpath.py: this process's memory named in the request, or a region of
the shared segment per transfer), frames only where those cannot serve. A Future holds
its result or its exception once done: waiting again gives the same. ``result(timeout)`` that
expires raises WaitTimeoutError (a subclass of both tshard's TimeoutError and the builtin
TimeoutError) and the operation goes on. When the connection closes (the daemon went away, the
client was closed), every Future still in flight fails with IoError (status IO) saying so.
"""
import array
import builtins
import errno
import os
import socket as _socket
import struct
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set

from . import tshard_pb2 as pb
from ._status import IO, OK, PROTOCOL, TIMEOUT
from .errors import TimeoutError as _TshardTimeoutError  # generated from the status list
from .errors import TshardError, error_for
from .wire import MAX_FRAME, Wire

__all__ = ["Future", "wait", "WaitTimeoutError"]

_FD_SPACE = _socket.CMSG_SPACE(4 * 4)  # room for a few descriptors on a received byte


class WaitTimeoutError(_TshardTimeoutError, builtins.TimeoutError):
    """A wait on a Future expired; the operation goes on (wait again, or drop the Future)."""


class Future:
    """The outcome of an operation sent with ``wait=False``."""

    def __init__(self, cond: threading.Condition, what: str) -> None:
        self._cond = cond  # the connection's: every Future of it is set under it
        self._what = what
        self._done = False
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._keep: Any = None  # what must outlive the operation (the array a put reads)

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "done")
        return f"<tshard.Future {self._what} {state}>"

    def _set(self, value: Any = None, error: Optional[BaseException] = None) -> None:
        """Called with the condition held; the first outcome wins."""
        if self._done:
            return
        self._value, self._error, self._done = value, error, True
        self._keep = None
        self._cond.notify_all()

    def done(self) -> bool:
        """Whether the operation finished (succeeded or failed)."""
        with self._cond:
            return self._done

    def _wait(self, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._cond:
            while not self._done:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeoutError(f"{self._what} not finished within {timeout} s; it "
                                           f"goes on (wait again for its result)")
                self._cond.wait(left)

    def result(self, timeout: Optional[float] = None) -> Any:
        """The operation's result (what the call with ``wait=True`` returns), waiting at most
        ``timeout`` seconds (None: until it finishes); raises its exception if it failed."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The operation's exception, or None when it succeeded (waits as ``result``)."""
        self._wait(timeout)
        return self._error


def wait(futures: Iterable[Future], timeout: Optional[float] = None) -> List[Any]:
    """Waits for every Future (at most ``timeout`` seconds in all) and returns their results in
    order; raises the first failure in that order, or WaitTimeoutError (they all go on)."""
    futures = list(futures)
    deadline = None if timeout is None else time.monotonic() + timeout
    for f in futures:
        f._wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return [f.result() for f in futures]


# A request's answer handler: called on the reader thread with the condition held, with the
# Response (None when the connection closed, with the error instead).
Handler = Callable[[Optional[pb.Response], Optional[TshardError]], None]


def _call_handler(h: Handler, resp: Optional[pb.Response], err: Optional[TshardError]) -> None:
    """Handlers set their Future themselves; one that raises must not stop the reader."""
    try:
        h(resp, err)
    except Exception:  # noqa: BLE001 - its Future stays pending: a bug, not the connection's
        pass


# Handlers of direct transfers a closing connection gave up waiting for (Inflight.drain): kept,
# with the arrays they hold, so that no daemon reads or writes memory this process gave back.
_UNANSWERED: List[Handler] = []


class Inflight:
    """A connection's requests in flight and its reader thread (see the top)."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.wire = Wire(sock)
        self.cond = threading.Condition()
        self.send_lock = threading.Lock()  # whole frames, in issue order
        # held from an operation's first request until its last one is sent, when a later
        # request depends on an answer (a get learns its size first): nobody sends in between
        self.gate = threading.Lock()
        self.handlers: Dict[int, Handler] = {}
        self.pinned: Set[int] = set()  # requests of handlers that pin memory (register)
        self.closed: Optional[TshardError] = None
        # descriptors that came with the frame being handled (the segment of an shm_attach
        # answer, SCM_RIGHTS on its first byte): a handler takes them, the rest are closed
        self.fds: List[int] = []
        self._unix = sock.family == _socket.AF_UNIX
        # called with the condition held after every answer handled, and with the error when
        # the connection ends (fastpath.py: transfers waiting for a region of the segment)
        self.after: Optional[Callable[[], None]] = None
        self.on_fail: Optional[Callable[[TshardError], None]] = None
        self.thread = threading.Thread(target=self._run, name="tshard-reader", daemon=True)
        self.thread.start()

    def register(self, req_id: int, handler: Handler, pins: bool = False) -> None:
        """handler takes the request's answer. pins: the request has the daemons read or write
        this process's memory until they answer (a direct transfer), which drain waits for."""
        with self.cond:
            if self.closed is not None:
                raise self.closed
            self.handlers[req_id] = handler
            if pins:
                self.pinned.add(req_id)

    def send(self, frame: List[Any]) -> None:
        """Sends one frame (a request_frame list) whole; OSError/BlockingIOError close."""
        with self.send_lock:
            try:
                self.wire.send(frame)
            except (_socket.timeout, BlockingIOError):
                self.fail(error_for(TIMEOUT, "the daemon did not take a request within "
                                             "the timeout (tshard.connect(timeout=SEC)); "
                                             "the connection is closed"))
                raise self.closed from None
            except OSError as e:
                self.fail(error_for(IO, f"sending to the daemon failed: {e}"))
                raise self.closed from None

    def drain(self, timeout: Optional[float]) -> None:
        """Waits until every request that pins memory (register) is answered or the connection
        ends, at most timeout seconds (None: without end). Those still unanswered then keep
        their handlers, and the arrays these hold, for the life of the process."""
        with self.cond:
            self.cond.wait_for(lambda: not self.pinned or self.closed is not None, timeout)
            if self.closed is None:
                _UNANSWERED.extend(self.handlers[i] for i in self.pinned if i in self.handlers)

    def fail(self, err: TshardError) -> None:
        """The connection is gone: every request in flight fails with err."""
        with self.cond:
            if self.closed is None:
                self.closed = err
            handlers, self.handlers = self.handlers, {}
            self.pinned.clear()
            for h in handlers.values():
                _call_handler(h, None, self.closed)
            if self.on_fail is not None:
                self.on_fail(self.closed)
            self.cond.notify_all()
        try:
            self.sock.shutdown(_socket.SHUT_RDWR)  # wakes the reader
        except OSError:
            pass

    def _recv_exact(self, n: int) -> Optional[bytearray]:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            try:
                k = self._recv_some(view[got:], n - got)
            except (_socket.timeout, BlockingIOError):
                if self.closed is not None:
                    return None
                continue  # the kernel's receive timeout: idle, nothing lost
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                return None
            if k == 0:
                return None
            got += k
        return buf

    def _recv_some(self, view: memoryview, n: int) -> int:
        """recv_into, keeping the descriptors that come with the bytes (Unix sockets)."""
        if not self._unix:
            return self.sock.recv_into(view, n)
        k, anc, _, _ = self.sock.recvmsg_into([view[:n]], _FD_SPACE, _socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                usable = len(data) - len(data) % 4
                self.fds.extend(array.array("i", data[:usable]))
        return k

    def _close_fds(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)

    def _run(self) -> None:
        while True:
            head = self._recv_exact(4)
            if head is None:
                break
            (n,) = struct.unpack("<I", head)
            if n > MAX_FRAME:
                self.fail(error_for(PROTOCOL, f"the daemon sent a frame of {n} bytes"))
                return
            body = self._recv_exact(n)
            if body is None:
                break
            try:
                resp = pb.Response.FromString(bytes(body))
            except Exception:  # noqa: BLE001 - a frame that does not decode
                self.fail(error_for(PROTOCOL, "the daemon sent an answer that does not decode"))
                return
            with self.cond:
                h = self.handlers.pop(resp.id, None)
                self.pinned.discard(resp.id)
                if h is not None:
                    _call_handler(h, resp, None)
                    self._close_fds()
                    if self.after is not None:
                        _call_handler(lambda _r, _e: self.after(), None, None)
                    self.cond.notify_all()
                elif resp.id == 0 and resp.status != OK:  # about the connection itself
                    err = error_for(resp.status, resp.message)
                    handlers, self.handlers = self.handlers, {}
                    for h in handlers.values():
                        _call_handler(h, None, err)
        with self.cond:
            pending = len(self.handlers)
            self._close_fds()
        self.fail(error_for(IO, f"the connection to the daemon closed with {pending} "
                                f"request(s) in flight; what they did on the daemons is not "
                                f"known to this client (describe the tensors they touch)"))
