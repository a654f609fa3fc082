"""The connection to one daemon: the socket (Unix or TCP) and its hello, the token, the
request ids, one request and its answer (``_call``), the reader thread and Futures of operations
sent with ``wait=False`` (``_submit``, ``_op``), the shared segment's switch, and the failures that
close a connection (a lost rank named from the launcher's record). ``Connection`` is the base of
:class:`tshard.Client`, whose families of operations are mixins over it.

A connection belongs to the process that opened it: the daemon refuses requests another process
writes on it (a child after fork(), e.g. a multiprocessing or data-loader worker). A client used
in a forked child notices (its process id changed) and opens the child's own connection on its
first call, leaving the parent's socket and shared segment to the parent (the child only closes
its copies: no shutdown, nothing written into the parent's segment).
"""
import contextlib
import os
import socket as _socket
import stat
import struct
import sys
import threading
from typing import Any, Callable, Optional

import numpy as np

from . import _tracepoints as _trace
from . import spmd as _spmd
from . import tshard_pb2 as pb
from ._common import _check_token, _opt_str
from ._limits import TOKEN_MAX, TOKEN_MIN
from ._status import AUTH, INVALID_ARGUMENT, IO, OK, PROTOCOL, SHUTDOWN, TIMEOUT, UNSUPPORTED
from ._trust import check_peer, check_socket_dir
from .errors import TshardError, error_for
from .future import Future, Inflight, WaitTimeoutError
from .lost import lost_rank_error
from .shm import MIN_BYTES, Segment
from .wire import Wire, request_frame

_SPARE_MIN = 1 << 20  # results from this size on reuse the client's spare buffer
_JOB_MAX = 64  # characters of a job name: the C client's tsc_job_check (connect_message.c)


def read_token_file(path: str) -> str:
    """The token of a token file, read as the daemon reads its ``--token-file``.

    Args:
        path: the file; it must be a regular file that group and others may not read.

    Returns:
        The token: the file's text without trailing blanks and newlines (8 to 255 printable
        ASCII characters).

    Raises:
        AuthError: the file is readable by group or others, or the token is not valid.
        IoError: the file cannot be read or is not a regular file.
    """
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise error_for(IO, f"token file {path} is not a regular file")
            if st.st_mode & 0o077:
                raise error_for(AUTH, f"token file {path} has mode {st.st_mode & 0o777:03o}: group "
                                      f"or others may read the secret; make it private "
                                      f"(chmod 600 {path})")
            raw = f.read(TOKEN_MAX + 64)
            more = f.read(1) != b""
    except OSError as e:
        raise error_for(IO, f"token file {path}: {e.strerror}") from None
    text = raw.rstrip(b" \t\r\n")
    if more or len(text) > TOKEN_MAX:
        raise error_for(AUTH, f"the token in {path} has {'more than ' if more else ''}"
                              f"{len(raw) if more else len(text)} characters; tokens have "
                              f"{TOKEN_MIN} to {TOKEN_MAX} (the whole token is used, never a part)")
    try:
        token = text.decode("ascii")
    except UnicodeDecodeError:
        raise error_for(AUTH, f"the token in {path} is not printable ASCII") from None
    return _check_token(token, f"the token in {path}")


def socket_path(job: str, rank: int) -> str:
    """The path of the Unix socket of a job's rank, as the daemon makes it.

    The directory is $TSHARD_SOCKET_DIR, else $XDG_RUNTIME_DIR/tshard, else /tmp/tshard-<uid>;
    the file is ``tshard-<job>-<rank>.sock``.

    Args:
        job: the job id (``--job`` of the launcher).
        rank: the rank.

    Returns:
        The socket's path (whether a daemon serves there is not checked).
    """
    d = os.environ.get("TSHARD_SOCKET_DIR")
    if not d:
        xdg = os.environ.get("XDG_RUNTIME_DIR")
        d = os.path.join(xdg, "tshard") if xdg else f"/tmp/tshard-{os.getuid()}"
    return os.path.join(d, f"tshard-{job}-{rank}.sock")


def _check_job(job):
    """A job name the daemons accept: 1 to 64 letters, digits, '-', '_', '.' (not first)."""
    ok = (isinstance(job, str) and 0 < len(job) <= _JOB_MAX and not job.startswith(".")
          and all(ch.isascii() and (ch.isalnum() or ch in "-_.") for ch in job))
    if not ok:
        raise error_for(INVALID_ARGUMENT, f"job name {job!r}: use 1 to {_JOB_MAX} letters, "
                                          "digits, '-', '_' and '.' (not first)")
    return job


def _env_rank():
    for var in ("TSHARD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _kernel_timeout(sock, timeout):
    """A blocking socket whose sends and receives time out in the kernel (SO_SNDTIMEO,
    SO_RCVTIMEO): Python's own timeout polls before every send and receive, which costs the
    bulk data path most of its speed (0.2 against 1.2 GB/s on a Unix socket here)."""
    sock.settimeout(None)
    if timeout is not None and timeout > 0:
        sec = int(timeout)
        tv = struct.pack("ll", sec, int((timeout - sec) * 1e6))
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVTIMEO, tv)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, tv)



def _tcp_opener(host, port, timeout):
    """A function that opens a TCP connection to the daemon at host:port (connect's, and a
    forked child's own)."""
    def open_tcp():
        s = _socket.create_connection((host, int(port)), timeout=timeout)
        s.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        _kernel_timeout(s, timeout)
        return s
    return open_tcp


def _unix_opener(socket, timeout):
    """A function that opens a connection to the daemon's Unix socket at path `socket`, having
    checked that the directory and the daemon are this user's."""
    def open_unix():
        check_socket_dir(socket)  # AuthError: a directory that is not this user's alone
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(socket)
            check_peer(s, socket)  # AuthError: a daemon of another user
        except (OSError, TshardError):
            s.close()
            raise
        _kernel_timeout(s, timeout)
        return s
    return open_unix


class Connection:
    """The connection a :class:`tshard.Client` talks over: its socket, requests and answers."""

    def __init__(self, sock: Any, token: Optional[str] = None, chunk: int = 16 << 20,
                 shm: bool = False, opener: Optional[Callable[[], Any]] = None) -> None:
        """Wraps a connected socket; use :func:`tshard.connect` rather than this."""
        self._sock = sock
        self._pid = os.getpid()  # the process the connection belongs to
        self._opener = opener  # opens a new connected socket (a forked child's own connection)
        self._shm_wanted = bool(shm)
        self._wire = Wire(sock)
        self._token = token
        self._next_id = 1
        self.chunk = chunk
        self.max_frame = None
        self._rank = None
        self._seg = Segment(self._wire, self._take_id) if shm else None
        # whole puts and gets name this process's memory (see transfer); off after NO_DIRECT
        self._direct_on = bool(shm) and os.environ.get("TSHARD_DIRECT", "") != "0"
        self._spare = None  # the buffer of the last large result, reused once it is dropped
        self._group = None  # SPMD collectives (spmd.py): set_group
        self._timeout = None  # connect's, in seconds
        self._ids = threading.Lock()  # request ids are taken by callers and the reader
        self._inflight = None  # operations in flight (future.py): from the first wait=False
        self._transfers = None  # their puts' and gets' use of the segment (fastpath.py)
        self._direct_ok = False  # a transfer naming this process's memory succeeded here
        #: bytes moved by puts and gets (put_many and get_many too) on this connection, by data
        #: path: 'direct' (the daemons copied from or into this process's memory), 'shm' (the
        #: shared segment), 'frames' (through the socket)
        self.bytes_by_path = {"direct": 0, "shm": 0, "frames": 0}
        self._socket_path = None  # a Unix socket's path: where the launcher's job record is
        self._lost_err = None  # RankLostError once a lost rank ended the job (lost.py)

    def _own(self):
        """In a process other than the one that opened the connection (a child after fork()):
        drops the inherited connection and segment, without shutting them down (they stay the
        parent's: only this process's descriptor and mapping are closed), and opens this
        process's own connection to the same daemon."""
        if self._pid == os.getpid():
            return
        parent, self._pid = self._pid, os.getpid()
        self._inflight = None  # the parent's reader thread is not in this process
        self._transfers = None
        self._direct_ok = False
        if self._seg is not None:
            self._seg.close()  # unmaps this process's view; the parent keeps the segment
        if self._sock is not None:
            self._sock.close()  # this process's descriptor only: no shutdown()
            self._sock = None
        self._spare = None
        if self._opener is None:
            raise error_for(IO, f"this client's connection belongs to process {parent}, which "
                                f"opened it; after fork() process {self._pid} must connect "
                                f"again (tshard.connect in the child)")
        try:
            self._sock = self._opener()
            self._wire = Wire(self._sock)
            self._seg = Segment(self._wire, self._take_id) if self._shm_wanted else None
            self._direct_on = self._shm_wanted and os.environ.get("TSHARD_DIRECT", "") != "0"
            self._hello()
        except (OSError, TshardError) as e:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            refused = isinstance(e, TshardError) and e.status == AUTH  # AUTH: not our daemon
            raise error_for(AUTH if refused else IO,
                            f"this client's connection belongs to process {parent}, which "
                            f"opened it; after fork() process {self._pid} could not open "
                            f"its own: {e}") from None

    def close(self) -> None:
        """Closes the connection (again: nothing happens).

        Operations still in flight fail with IoError; their outcome on the daemons is not known
        to this client. Direct transfers among them (the daemons read or write the caller's
        arrays until they answer) are first given the connection's timeout (60 s without one)
        to be answered. Leaving a ``with`` block closes the client.
        """
        if self._inflight is not None and self._pid == os.getpid():
            self._inflight.drain(self._timeout if self._timeout is not None else 60.0)
            self._inflight.fail(error_for(IO, "the client closed the connection with this "
                                              "operation in flight"))
        self._spare = None
        if self._seg is not None:
            self._seg.close()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def shm(self) -> bool:
        """Whether transfers go through shared memory (Unix sockets; off after a refusal)."""
        return self._seg is not None

    def set_shm(self, enable: bool, max_bytes: Optional[int] = None) -> None:
        """Turns the shared-memory transfers on or off.

        Args:
            enable: True to move data through a segment shared with the daemon; False releases
                the segment on both sides.
            max_bytes: the segment's largest size (default 1 GiB; at least 64 KiB).

        Raises:
            UnsupportedError: shared memory on a TCP connection.
        """
        self._own()
        self._shm_wanted = bool(enable)
        if enable and self._sock is not None and self._sock.family != _socket.AF_UNIX:
            raise error_for(UNSUPPORTED, "shared memory needs a Unix socket connection")
        self._direct_on = bool(enable) and os.environ.get("TSHARD_DIRECT", "") != "0"
        if not enable and self._seg is not None:
            attached = self._seg.bytes > 0
            self._seg.close()
            self._seg = None
            if attached:  # the daemon's side is released too
                self._call(shm_attach=pb.ShmAttachRequest(bytes=0))
        elif enable and self._seg is None:
            self._seg = Segment(self._wire, self._take_id)
        if enable and max_bytes is not None:
            self._seg.close()
            self._seg.max_bytes = max(int(max_bytes), MIN_BYTES)

    def _result_buffer(self, n):
        """A new result array of n bytes. The buffer of the last large result is handed out
        again when nothing but this client refers to it any more (the caller dropped every array
        made from it): its pages are already faulted in, which on a virtual machine costs more
        than the copy itself. get(..., out=) avoids the allocation altogether."""
        if n < _SPARE_MIN:
            return np.empty(n, dtype=np.uint8)
        if self._spare is not None and len(self._spare) == n and sys.getrefcount(self._spare) == 2:
            return self._spare
        self._spare = np.empty(n, dtype=np.uint8)
        return self._spare

    def _count(self, path, n):
        """n bytes moved on data path `path` (bytes_by_path)."""
        with self._ids:
            self.bytes_by_path[path] += n

    def _take_id(self):
        with self._ids:
            i = self._next_id
            self._next_id += 1
        return i

    def _request(self, key=None):
        return pb.Request(id=self._take_id(), idempotency_key=_opt_str(key, "key"),
                          token=self._token or "")

    def _lost(self, err):
        """err, or the RankLostError of a lost rank when the connection ended (IO) or the daemon
        is shutting down (SHUTDOWN) because Open MPI stopped the job (lost reads the
        launcher's record); from then on every call raises that same error."""
        if (self._lost_err is None and self._socket_path is not None
                and isinstance(err, TshardError) and err.status in (IO, SHUTDOWN)):
            self._lost_err = lost_rank_error(self._socket_path)
        return self._lost_err or err

    def _closed(self):
        return self._lost_err or error_for(INVALID_ARGUMENT, "the connection is closed")

    @contextlib.contextmanager
    def _io(self):
        """Socket failures close the connection and raise IoError/TimeoutError (RankLostError
        when a lost rank ended the job); a malformed answer (PROTOCOL) closes it too (it cannot
        be resynchronized)."""
        self._own()
        if self._sock is None:
            raise self._closed()
        try:
            yield
        except TshardError as e:
            lost = self._lost(e)
            if e.status in (PROTOCOL, IO) or lost is not e:
                self.close()
            if lost is not e:
                raise lost from None
            raise
        except (_socket.timeout, BlockingIOError):
            self.close()
            raise error_for(TIMEOUT, "no answer from the daemon within the timeout (a longer one: "
                                     "tshard.connect(timeout=SEC)); the operation may still "
                                     "complete on the daemons; the connection is closed") from None
        except OSError as e:
            self.close()
            raise self._lost(error_for(IO, f"connection to the daemon failed: {e}")) from None

    def _check(self, resp, req_id):
        if resp.id != req_id:
            raise error_for(PROTOCOL, f"answer to request {resp.id} while waiting for {req_id}")
        if resp.status != OK:
            raise error_for(resp.status, resp.message)
        return resp

    def _call(self, key=None, **op):
        if self._inflight is not None:  # answers come through the reader thread
            (name, _), = op.items()
            return self._sync(self._submit(key, None, name, **op))
        (name, msg), = op.items()
        with self._io():
            req = self._request(key)
            getattr(req, name).CopyFrom(msg)
            if self._group is not None and name in _spmd.COLLECTIVE_OPS:
                self._group.apply(req, name)
            rec = _trace.active
            t0 = _trace.now_ns() if rec is not None else 0
            self._wire.send(request_frame(req))
            resp = self._wire.recv()
            if rec is not None:
                rec.add(name, req.id, self._rank, t0, _trace.now_ns())
            return self._check(resp, req.id)

    def _reader_on(self) -> Inflight:
        """The connection's reader thread, started on the first operation sent with wait=False;
        from then on every answer comes through it."""
        self._own()
        if self._sock is None:
            raise self._closed()
        if self._inflight is None:
            self._inflight = Inflight(self._sock)
        elif self._inflight.closed is not None:  # the reader saw the connection end
            raise self._lost(self._inflight.closed)
        return self._inflight

    def _sync(self, fut: Future):
        """Waits for an operation as a synchronous call does: past the connection's timeout the
        connection is closed (its answer could no longer be told apart)."""
        try:
            return fut.result(self._timeout)
        except TshardError as e:
            lost = self._lost(e)
            if lost is e:
                raise
            self.close()
            raise lost from None
        except WaitTimeoutError:
            self.close()
            raise error_for(TIMEOUT, "no answer from the daemon within the timeout (a longer one: "
                                     "tshard.connect(timeout=SEC)); the operation may still "
                                     "complete on the daemons; the connection is closed") from None

    def _answer(self, fut: Future, finish):
        """The handler of a one-request operation: its Future gets finish(response)."""
        def on_answer(resp, err):
            if err is None and resp.status != OK:
                err = error_for(resp.status, resp.message)
            if err is not None:
                err = self._lost(err)
                fut._set(error=err)
                return
            try:
                fut._set(finish(resp) if finish is not None else resp)
            except Exception as e:  # noqa: BLE001 - the Future carries it
                fut._set(error=e)
        return on_answer

    def _send_request(self, fl: Inflight, req, handler, bulk=None) -> None:
        fl.register(req.id, handler)
        fl.send(request_frame(req, bulk))

    def _submit(self, key, finish, what, **op) -> Future:
        """Sends a one-request operation; its Future gets finish(response) (None: the
        response)."""
        (name, msg), = op.items()
        fl = self._reader_on()
        fut = Future(fl.cond, what)
        with fl.gate:
            req = self._request(key)
            getattr(req, name).CopyFrom(msg)
            if self._group is not None and name in _spmd.COLLECTIVE_OPS:
                self._group.apply(req, name)
            handler = self._answer(fut, finish)
            rec = _trace.active
            if rec is not None:  # the call's span ends when its answer arrives
                t0, inner, rid, rank = _trace.now_ns(), handler, req.id, self._rank

                def handler(resp, err):
                    rec.add(name, rid, rank, t0, _trace.now_ns())
                    inner(resp, err)
            self._send_request(fl, req, handler)
        return fut

    def _op(self, key, finish, wait, what, **op):
        """An operation of one request: its result (wait=True) or a Future of it."""
        if wait and self._inflight is None:
            return finish(self._call(key, **op))
        fut = self._submit(key, finish, what, **op)
        return self._sync(fut) if wait else fut

    def _hello(self):
        """The ping of connect: rank, and chunks that fit the daemon's frames."""
        p = self.ping()
        self._rank = p["rank"]
        self.max_frame = p["max_frame"]
        if self.max_frame > 8192:
            self.chunk = min(self.chunk, self.max_frame - 4096)
        return self

    def _segment(self, need):
        """The shared segment for a transfer of `need` bytes, or None (the stream)."""
        if self._seg is None or need == 0:
            return None
        try:
            self._seg.ready(need)
            return self._seg
        except TshardError as e:
            if e.status in (PROTOCOL, IO, TIMEOUT):
                raise
            self._seg.close()  # refused (memory limit, an older daemon): the stream serves
            self._seg = None
            return None
