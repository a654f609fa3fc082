"""The tshard client: talks the daemons' wire protocol (4-byte little-endian length, then one
protobuf Request or Response) over a Unix socket or TCP, with numpy arrays in and out.

Data larger than a chunk travels in several requests, each naming its byte offset; the calls
hide that. Chunks are sized by the daemon's maximum frame (learnt from the ping at connect). On
a Unix socket the data goes through a segment shared with the daemon unless
``shm=False`` or TSHARD_SHM=0; over the socket it is sent from the caller's array and received
straight into the result array, with two chunk requests in flight. Whole puts and
gets on a Unix socket go further: the request names the array's own memory (ClientMemory) and
every daemon copies its piece straight from or into it (process_vm_readv/writev): no copy in
Python at all. A daemon that cannot reach this process's memory answers NO_DIRECT once, and the
segment serves from then on; TSHARD_DIRECT=0 keeps the segment. A numpy array's dtype means
what it says (uint16 is an unsigned integer, bool is bool); bf16 data goes in as
``tshard.bf16_bits(bits)`` (numpy has no bfloat16) and a bf16 tensor comes out as a uint16 array
of its bits; f8_e4m3 and f8_e5m2 likewise as uint8 bits (``tshard.f8_bits(bits, "e4m3")``);
c64 and c128 as numpy's complex64 and complex128.

A connection belongs to the process that opened it: the daemon refuses requests another process
writes on it (a child after fork(), e.g. a multiprocessing or data-loader worker). A client used
in a forked child notices (its process id changed) and opens the child's own connection on its
first call, leaving the parent's socket and shared segment to the parent (the child only closes
its copies: no shutdown, nothing written into the parent's segment).
"""
import collections
import contextlib
import os
import socket as _socket
import stat
import struct
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import program as _program
from . import tshard_pb2 as pb
from ._trust import check_peer, check_socket_dir
from .attr import Attr
from . import attr_rules as _rules
from .typed_put import BF16Bits, F8Bits, declare
from .progress import reporter
from .errors import TshardError, error_for
from .shm import Segment
from . import spmd as _spmd
from . import torch as _tt
from .wire import MAX_FRAME, Wire, request_frame
from .future import Future, Inflight, WaitTimeoutError
from . import fastpath as _fastpath
from . import tracing as _trace

__all__ = ["Client", "connect", "DTYPES", "DTYPE_SPELLINGS", "ROW_MAJOR", "socket_path",
           "read_token_file"]

# tshard dtype -> the numpy dtype of its data (bf16: the uint16 of its bits, see bf16_bits; the
# 8-bit floats: the uint8 of their codes, see f8_bits)
DTYPES: Dict[str, np.dtype] = {
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16), "i8": np.dtype(np.int8), "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64), "u8": np.dtype(np.uint8), "bool": np.dtype(np.bool_),
    "i16": np.dtype(np.int16), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64), "f8_e4m3": np.dtype(np.uint8), "f8_e5m2": np.dtype(np.uint8),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}
_BITS = ("bf16", "f8_e4m3", "f8_e5m2")  # numpy has none: their bits (bf16_bits, f8_bits)
_FROM_NUMPY = {v: k for k, v in DTYPES.items() if k not in _BITS}
# The spellings of a dtype the client takes, the same as the CLI's --dtype: the tshard names and
# numpy's and PyTorch's (numpy dtypes and types are taken too).
DTYPE_SPELLINGS: Dict[str, str] = {
    **{k: k for k in DTYPES}, "float32": "f32", "float64": "f64", "float16": "f16",
    "bfloat16": "bf16", "int8": "i8", "int32": "i32", "int64": "i64", "uint8": "u8",
    "int16": "i16", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float8_e4m3fn": "f8_e4m3", "float8_e5m2": "f8_e5m2", "complex64": "c64",
    "complex128": "c128"}
ROW_MAJOR = "row-major"  # describe()'s layout of plain slices, as the CLI prints it

# The daemon's rules (proto/ts_rules.h): names are 1 to 127 bytes of UTF-8 without control
# characters and not starting with "__tshard"; tokens are 8 to 255 printable ASCII characters.
NAME_MAX_BYTES = 127
RESERVED_PREFIX = "__tshard"
TOKEN_MIN, TOKEN_MAX = 8, 255


def _check_name(name, what="tensor name"):
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error_for(1, f"{what} is not valid UTF-8 text at character {e.start} "
                           f"(a lone surrogate); names are UTF-8 text") from None
    if not 1 <= len(raw) <= NAME_MAX_BYTES:
        raise error_for(1, f"{what} of {len(raw)} bytes; names have 1 to {NAME_MAX_BYTES} bytes "
                           f"of UTF-8")
    # printable ASCII (the common case) has none of the control characters looked for below
    for i, ch in enumerate("" if name.isascii() and name.isprintable() else name):
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise error_for(1, f"{what} has a control character (U+{ord(ch):04X}) at character "
                               f"{i}; names are UTF-8 without control characters")
    if name.startswith(RESERVED_PREFIX):
        raise error_for(1, f"{what} {name!r}: the prefix {RESERVED_PREFIX!r} is reserved")
    return name


def _check_token(token, where="token"):
    if not isinstance(token, str) or not TOKEN_MIN <= len(token) <= TOKEN_MAX:
        n = len(token) if isinstance(token, str) else 0
        raise error_for(23, f"{where} of {n} characters; tokens have {TOKEN_MIN} to {TOKEN_MAX}")
    for i, ch in enumerate(token):
        if not 0x20 <= ord(ch) <= 0x7E:
            raise error_for(23, f"{where} has U+{ord(ch):04X} at position {i}; tokens are "
                                f"printable ASCII")
    return token


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
                raise error_for(18, f"token file {path} is not a regular file")
            if st.st_mode & 0o077:
                raise error_for(23, f"token file {path} has mode {st.st_mode & 0o777:03o}: group "
                                    f"or others may read the secret; make it private "
                                    f"(chmod 600 {path})")
            raw = f.read(TOKEN_MAX + 64)
            more = f.read(1) != b""
    except OSError as e:
        raise error_for(18, f"token file {path}: {e.strerror}") from None
    text = raw.rstrip(b" \t\r\n")
    if more or len(text) > TOKEN_MAX:
        raise error_for(23, f"the token in {path} has {'more than ' if more else ''}"
                            f"{len(raw) if more else len(text)} characters; tokens have "
                            f"{TOKEN_MIN} to {TOKEN_MAX} (the whole token is used, never a part)")
    try:
        token = text.decode("ascii")
    except UnicodeDecodeError:
        raise error_for(23, f"the token in {path} is not printable ASCII") from None
    return _check_token(token, f"the token in {path}")

AttrLike = Union[Attr, str]  # an attribute: an Attr or its text
ArrayLike = Union[np.ndarray, BF16Bits, F8Bits]  # put data: a numpy array, or bf16/f8 bits
WINDOW = 2  # chunk requests in flight
_COLLECTIVE_TIMEOUT_MAX = 600.0  # s: the daemons' default --collective-timeout-max
_SPARE_MIN = 1 << 20  # results from this size on reuse the client's spare buffer
def _out_bytes(out, dtype, what, shape, name):
    """The caller's result array as flat writable bytes: C-contiguous, of the tensor's dtype in
    native byte order and of exactly ``shape`` (the tensor's or the slice's; None: 1-d, the flat
    elements of another layout, whose count the answer checks), never another shape of the same
    byte count."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{what}: out must be a numpy array, not {type(out).__name__}")
    if out.dtype != dtype and out.dtype.newbyteorder("=") == dtype:
        raise error_for(4, f"{what}: out has dtype {out.dtype.str} (non-native byte order); "
                           f"'{name}' is received in this machine's byte order ({dtype.str}): "
                           f"give an array of dtype {dtype.name}, and .astype('{out.dtype.str}')"
                           f" the result if that byte order is needed")
    if out.dtype != dtype:
        raise error_for(4, f"{what}: out has dtype {out.dtype}; '{name}' needs {dtype} (the "
                           f"tensor's dtype: out is filled as is, never converted)")
    if shape is None and out.ndim != 1:
        raise error_for(5, f"{what}: out has shape {tuple(out.shape)}; a slice in another "
                           f"layout comes as its flat elements: give a 1-d array")
    if shape is not None and tuple(out.shape) != tuple(shape):
        raise error_for(5, f"{what}: out has shape {tuple(out.shape)} but '{name}' is "
                           f"{tuple(shape)}; give an array of exactly that shape")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{what}: out must be a writable C-contiguous numpy array of dtype "
                         f"{dtype}")
    return out.reshape(-1).view(np.uint8)

def _dtype_name(dtype):
    """'f32' for 'f32', 'float32', np.float32 or np.dtype('float32'); bf16 is 'bf16' or
    'bfloat16', the 8-bit floats 'f8_e4m3' / 'float8_e4m3fn' and 'f8_e5m2' / 'float8_e5m2'
    (numpy has none of them; np.uint8 is u8), the complex 'c64' / 'complex64' / np.complex64 and
    'c128' / 'complex128' / np.complex128. BadDtypeError (a ValueError) names the valid
    spellings."""
    if isinstance(dtype, str) and dtype in DTYPE_SPELLINGS:
        return DTYPE_SPELLINGS[dtype]
    try:
        if not isinstance(dtype, str):
            return _FROM_NUMPY[np.dtype(dtype)]
    except (TypeError, KeyError):
        pass
    valid = ", ".join(f"{k} ({n})" for n, k in DTYPE_SPELLINGS.items() if n != k)
    raise error_for(4, f"dtype {dtype!r}: valid are {valid}, or the matching numpy dtypes "
                       f"(bf16 data: tshard.bf16_bits; f8 data: tshard.f8_bits)")


def _cast_name(dtype):
    """The wire form of a reshard's ``dtype=``: '' (keep the dtype) for None, else the tshard
    dtype of a name, a numpy dtype or a torch dtype (torch.bfloat16 is 'bf16')."""
    if dtype is None:
        return ""
    if str(dtype).startswith("torch."):
        return _tt.dtype_name(dtype)
    return _dtype_name(dtype)


def _attr_msg(attr):
    """The wire form of an attribute given as an Attr or its text; TypeError for anything else."""
    if isinstance(attr, Attr):
        return pb.DistAttr(text=str(attr))
    if isinstance(attr, str):
        return pb.DistAttr(text=attr)
    raise TypeError(f"attr: expected a tshard.Attr or its text (str), not "
                    f"{type(attr).__name__} {attr!r}; e.g. tshard.Attr(tshard.Mesh([4]), "
                    f"[tshard.Shard(0)]) or 'mesh=[4] placements=[S(0)]'")


def _opt_str(value, what):
    """A text argument that may be None (strategy, key): TypeError for anything else."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} must be a str or None, not {type(value).__name__} {value!r}")
    return value or ""


def _flag(value, what):
    """A yes/no argument: a bool (numpy's too); TypeError for anything else."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be True or False, not {type(value).__name__} {value!r}")
    return bool(value)


def _names(names, what):
    """None, a name, or an iterable of names, as a list of checked names."""
    if names is None:
        return []
    if isinstance(names, str):
        return [_check_name(names, what)]
    if not isinstance(names, Iterable):
        raise TypeError(f"{what} must be a name or an iterable of names, not "
                        f"{type(names).__name__}")
    return [_check_name(n, what) for n in names]


def _selection(what, names, prefix, all):
    """The tensors a save or an export writes, asked one way: names (checked already), a prefix
    or all=True; InvalidArgumentError saying how to save everything when none is given. The
    prefix as the wire carries it ("" for none)."""
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"{what}: prefix must be a str, not {type(prefix).__name__}")
    _flag(all, "all")
    asked = [bool(names), bool(prefix), bool(all)]
    if sum(asked) == 0:
        raise error_for(1, f"{what} of no tensors: give names (exact, or globs such as "
                           f"'layers.*.weight') or prefix=..., or all=True to save every tensor")
    if sum(asked) > 1:
        raise error_for(1, f"{what}: give one of names, prefix= or all=True, not several")
    return prefix or ""


def _dir(path):
    """A directory argument: a str or os.PathLike, made absolute."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"dir must be a str or os.PathLike, not {type(path).__name__}")
    return os.path.abspath(os.fspath(path))


def _layout_tag(layout):
    """The wire tag of a layout argument: None, "" and "row-major" are the plain layout."""
    if layout is None or layout == ROW_MAJOR:
        return ""
    if not isinstance(layout, str):
        raise TypeError(f"layout: expected a format tag (str) such as 'aBcd16b' or "
                        f"'{ROW_MAJOR}', not {type(layout).__name__}")
    return layout


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
    ok = (isinstance(job, str) and 0 < len(job) <= 64 and not job.startswith(".")
          and all(ch.isascii() and (ch.isalnum() or ch in "-_.") for ch in job))
    if not ok:
        raise error_for(1, f"job name {job!r}: use 1 to 64 letters, digits, '-', '_' and '.' "
                           f"(not first)")
    return job


def _no_daemon(job, rank, path, timeout):
    """Why no daemon answered at path: a rank beyond the job's world (rank 0 says its size), or
    no daemon at all, with how to start one (a lost rank is connect's RankLostError)."""
    if rank > 0:
        try:
            with connect(rank=0, job=job, timeout=timeout, shm=False) as c0:
                world = c0.ping()["world_size"]
            if rank >= world:
                return f"rank {rank}: job {job} has {world} ranks (0 to {world - 1})"
        except TshardError:
            pass
    return (f"no daemon serves job {job} on rank {rank} at {path}; start one with "
            f"tshard-launch start -np N --job {job} (deploy/tshard-launch)")


def _env_rank():
    for var in ("TSHARD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


class Client:
    """A connection to one daemon, made by :func:`tshard.connect`; close it (or use ``with``).

    Every operation raises a :class:`tshard.TshardError` subclass named after the status (the
    daemon's message says what was wrong and what is valid). Every operation of the daemons
    takes ``wait=False`` and then returns a :class:`tshard.Future` at once.

    Example::

        with tshard.connect(rank=0, job="demo") as c:
            c.create("w", "f32", (8, 4), "mesh=[4] placements=[S(0)]")
            c.put("w", np.ones((8, 4), np.float32))
            print(c.get("w").sum())
    """

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
        # whole puts and gets name this process's memory (see the top); off after NO_DIRECT
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
        self._lost_err = None  # RankLostError once a lost rank ended the job (launch.py)

    # -- plumbing ----------------------------------------------------------------------------
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
            raise error_for(18, f"this client's connection belongs to process {parent}, which "
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
            refused = isinstance(e, TshardError) and e.status == 23  # AUTH: not our daemon
            raise error_for(23 if refused else 18,
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
            self._inflight.fail(error_for(18, "the client closed the connection with this "
                                              "operation in flight"))
        self._spare = None
        if self._seg is not None:
            self._seg.close()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "Client":
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
            raise error_for(20, "shared memory needs a Unix socket connection")
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
            self._seg.max_bytes = max(int(max_bytes), 64 << 10)

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
        is shutting down (SHUTDOWN) because Open MPI stopped the job (launch.py reads the
        launcher's record); from then on every call raises that same error."""
        if (self._lost_err is None and self._socket_path is not None
                and isinstance(err, TshardError) and err.status in (18, 22)):
            from .launch import lost_rank_error
            self._lost_err = lost_rank_error(self._socket_path)
        return self._lost_err or err

    def _closed(self):
        return self._lost_err or error_for(1, "the connection is closed")

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
            if e.status in (17, 18) or lost is not e:
                self.close()
            if lost is not e:
                raise lost from None
            raise
        except (_socket.timeout, BlockingIOError):
            self.close()
            raise error_for(19, "no answer from the daemon within the timeout (a longer one: "
                                "tshard.connect(timeout=SEC)); the operation may still complete "
                                "on the daemons; the connection is closed") from None
        except OSError as e:
            self.close()
            raise self._lost(error_for(18, f"connection to the daemon failed: {e}")) from None

    def _check(self, resp, req_id):
        if resp.id != req_id:
            raise error_for(17, f"answer to request {resp.id} while waiting for {req_id}")
        if resp.status != 0:
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

    # -- operations in flight (future.py) ---------------------------------------------------------
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
            raise error_for(19, "no answer from the daemon within the timeout (a longer one: "
                                "tshard.connect(timeout=SEC)); the operation may still complete "
                                "on the daemons; the connection is closed") from None

    def _answer(self, fut: Future, finish):
        """The handler of a one-request operation: its Future gets finish(response)."""
        def on_answer(resp, err):
            if err is None and resp.status != 0:
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

    def _put_async(self, name, array, key, slice_layout, convert) -> Future:
        """A put or put_slice once the reader thread serves the connection (fastpath.py)."""
        _check_name(name)
        what = "put" if slice_layout is None else "put_slice"
        a, decl = declare(array, convert, DTYPES, _FROM_NUMPY, what)
        return _fastpath.put(self, name, a, decl, _swapped_note(array, a, decl), key,
                             slice_layout, convert)

    def _gated(self, what: str, fill, then) -> Future:
        """A first request (fill(req) sets its operation), then, once it is answered (on the
        reader thread), then(fl, fut, resp) sends the later requests at once; nothing else is
        sent in between (the gate), so chunk requests read the copy their first request made.
        The Future fails with the first request's error, or anything then raises."""
        fl = self._reader_on()
        fut = Future(fl.cond, what)
        fl.gate.acquire()
        gate = [True]

        def open_gate():
            if gate[0]:
                gate[0] = False
                fl.gate.release()

        def on_answer(resp, err):
            try:
                if err is None and resp.status != 0:
                    err = error_for(resp.status, resp.message)
                if err is not None:
                    fut._set(error=err)
                    return
                then(fl, fut, resp)
            except Exception as e:  # noqa: BLE001 - a bad out= too: the Future carries it
                fut._set(error=e)
            finally:
                open_gate()
        try:
            req = self._request()
            fill(req)
            self._send_request(fl, req, on_answer)
        except BaseException:
            open_gate()
            raise
        return fut

    def _get_async(self, name, out, slice_of_rank) -> Future:
        """A get (slice_of_rank None) or this rank's get_slice once the reader thread serves
        the connection (fastpath.py)."""
        _check_name(name)
        return _fastpath.get(self, name, out, slice_of_rank)

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
            if e.status in (17, 18, 19):
                raise
            self._seg.close()  # refused (memory limit, an older daemon): the stream serves
            self._seg = None
            return None

    def set_group(self, group: Union[None, str, Sequence[int]], run_id: Optional[str] = None,
                  collective_timeout: Optional[float] = None) -> None:
        """Makes create, reshard, drop, einsum, save and load SPMD collectives of a group.

        From this call on each of them runs once every rank of ``group`` submitted it, under
        its ``key`` or a key made from ``run_id`` and the call's number.

        Args:
            group: the ranks (a list, ``"all"`` or ``"0,1,2"``); None turns collectives off.
            run_id: the launch's id (default: the launcher's, e.g. Open MPI's or Slurm's).
            collective_timeout: seconds to wait for the other ranks (default: this client's
                timeout less 5 s, so that the daemons' error naming the missing ranks comes
                first; at most the daemons' ``--collective-timeout-max``, 600 s by default).

        Raises:
            InvalidArgumentError: a group that names ranks outside the job.
        """
        if group is None:
            self._group = None
            return
        p = self.ping()
        ranks = _spmd.parse_group(group, p["world_size"])
        if collective_timeout is None:
            t = self._timeout
            collective_timeout = min(max(1.0, t - 5.0), _COLLECTIVE_TIMEOUT_MAX) if t else 0
        self._group = _spmd.Group(ranks, p["rank"], run_id, round(collective_timeout * 1000))

    # -- operations ----------------------------------------------------------------------------
    def ping(self) -> Dict[str, Any]:
        """Asks the daemon who it is.

        Returns:
            ``{'rank', 'world_size', 'job', 'max_frame'}`` of the daemon this client talks to.

        Raises:
            IoError: the connection failed. TimeoutError: no answer within the timeout.
        """
        r = self._call(ping=pb.PingRequest()).ping
        return {"rank": r.rank, "world_size": r.world_size, "job": r.job,
                "max_frame": r.max_frame}

    def create(self, name: str, dtype: Any, shape: Sequence[int], attr: AttrLike,
               layout: Optional[str] = None, key: Optional[str] = None,
               wait: bool = True, exist_ok: bool = False) -> Union[None, Future]:
        """Creates a zero-filled tensor on every rank of the job.

        Args:
            name: the tensor's name (1 to 127 bytes of UTF-8, no control characters).
            dtype: ``"f32"`` or ``"float32"``, ``np.float32``, ... (see ``DTYPE_SPELLINGS``);
                bf16 is ``"bf16"`` or ``"bfloat16"``, the 8-bit floats ``"f8_e4m3"``
                (``"float8_e4m3fn"``) and ``"f8_e5m2"`` (``"float8_e5m2"``), the complex
                ``"c64"`` (``"complex64"``, ``np.complex64``) and ``"c128"`` (``"complex128"``,
                ``np.complex128``): partial ``sum``, ``avg`` and ``prod`` only (complex numbers
                have no order).
            shape: the global shape, a sequence of ints >= 0.
            attr: the distributed attribute, a :class:`tshard.Attr` or its text.
            layout: the stored slices' format tag (default ``"row-major"``), e.g. ``"aBcd16b"``.
            key: an idempotency key (a retry with it is answered without running again).
            wait: False returns a :class:`tshard.Future` at once.
            exist_ok: a tensor stored already with this dtype, shape, attribute and layout is
                left as it is (its values too); one that differs is refused, naming every
                difference.

        Returns:
            None (or its Future).

        Raises:
            ExistsError: the name is taken (with exist_ok: by a tensor that differs, every
            difference named). ParseError, BadAttributeError: a bad attribute.
            BadDtypeError: an unknown dtype. TypeError: an argument of the wrong type.

        Example::

            c.create("w", "float32", (8, 4), tshard.Attr(tshard.Mesh([4]), [tshard.Shard(0)]))
        """
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
            raise TypeError(f"create: shape must be a sequence of ints, not "
                            f"{type(shape).__name__}")
        dims = []
        for s in shape:
            if isinstance(s, (bool, float)) or not isinstance(s, (int, np.integer)):
                raise TypeError(f"create: shape {tuple(shape)!r} must hold ints, not "
                                f"{type(s).__name__}")
            if s < 0:
                raise error_for(5, f"create: shape {tuple(shape)!r} has a negative size; sizes "
                                   f"are >= 0")
            dims.append(int(s))
        return self._op(key, _nothing, wait, f"create of '{name}'",
                        create=pb.CreateRequest(name=_check_name(name),
                                                dtype=_dtype_name(dtype),
                                                shape=dims,
                                                attr=_attr_msg(attr),
                                                layout=pb.Layout(tag=_layout_tag(layout)),
                                                exist_ok=_flag(exist_ok, "exist_ok")))

    def create_many(self, specs: Mapping[str, Any], exist_ok: bool = False, replace: bool = False,
                    key: Optional[str] = None, wait: bool = True) -> Union[None, Future]:
        """Creates many zero-filled tensors as one operation: all of them or none, on every rank.

        Args:
            specs: ``{name: (dtype, shape, attr)}`` or ``(dtype, shape, attr, layout)``, or
                ``{name: {'dtype', 'shape', 'attr', 'layout'}}`` (as :meth:`create` takes them).
            exist_ok: as in :meth:`create`, for every tensor.
            replace: a stored tensor that differs is replaced by the new zero-filled one (made
                beside it, then every replacement swapped in at once).
            key: an idempotency key.
            wait: False returns a Future.

        Raises:
            ExistsError: a name is taken (the message names the tensor and, with exist_ok, every
            difference); BadAttributeError, LimitError...: nothing was created.

        Example::

            c.create_many({"w": ("f32", (8, 4), "mesh=[4] placements=[S(0)]"),
                           "b": ("f32", (4,), "mesh=[4] placements=[R]")})
        """
        from . import state_dict as _sd
        return self._op(key, _nothing, _flag(wait, "wait"), f"create_many of {len(specs)} tensors",
                        create_many=_sd.create_request(specs, _flag(exist_ok, "exist_ok"),
                                                       _flag(replace, "replace")))

    def put_state_dict(self, sd: Mapping[str, Any],
                       attrs: Union[None, Mapping[str, Any], Iterable[str]] = None,
                       default: Optional[AttrLike] = None, key: Optional[str] = None) -> List[str]:
        """Stores a PyTorch-style state dict: each entry becomes a tensor of its name, created
        (or replaced when it is stored with another dtype, shape or attribute) and filled.

        Args:
            sd: ``{name: numpy array or torch CPU tensor}`` (bf16 torch tensors as bf16; numpy
                bf16 data as ``tshard.bf16_bits``), e.g. ``model.state_dict()``.
            attrs: attribute rules, ``{name or glob: attr}`` or ``"PATTERN=ATTR"`` texts, as
                :meth:`load` takes them: a tensor takes the rule naming it, else the first glob
                matching its name, else ``default``.
            default: the attribute of the tensors no rule names.
            key: an idempotency key.

        Returns:
            The names stored, in the dict's order.

        Raises:
            InvalidArgumentError: a tensor without an attribute; NotFoundError: a rule naming no
            entry. BadAttributeError, LimitError...: nothing was created or stored.

        One put_many when every tensor is stored as asked (dtype, shape, attribute; it checks
        them); else one create_many makes or replaces them and one put_many stores the data.
        Every tensor is stored or none.

        Example::

            c.put_state_dict(model.state_dict(), {"*.weight": "mesh=[4] placements=[S(0)]"},
                             default="mesh=[4] placements=[R]")
        """
        from . import state_dict as _sd
        return _sd.put_state_dict(self, sd, attrs, default, key)

    def get_state_dict(self, names: Optional[Sequence[str]] = None, like: str = "numpy",
                       prefix: Optional[str] = None) -> Dict[str, Any]:
        """The stored tensors as a state dict, gathered to this client in one get_many.

        Args:
            names: the tensors (None: every stored tensor, by name).
            like: ``"numpy"`` (bf16 as uint16 bits) or ``"torch"`` (bf16 as torch.bfloat16),
                ready for ``model.load_state_dict``.
            prefix: only the tensors whose names start with it, keyed without it (as a
                submodule's ``load_state_dict`` wants).

        Returns:
            ``{name: array or tensor}``.

        Raises:
            NotFoundError: a name that is not stored. ValueError: another ``like``.

        Example::

            model.load_state_dict(c.get_state_dict(like="torch"))
        """
        from . import state_dict as _sd
        return _sd.get_state_dict(self, names, like, prefix)

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
                    raise error_for(17, "answer to a request that was not sent")
                pending.remove(match[0])
                if resp.status != 0 and (first is None or match[0][1] < first[0]):
                    first = (match[0][1], _put_error(resp, note))
                elif resp.status == 0:
                    n = min(chunk, total - offsets[match[0][1]])
                    self._count("frames" if seg is None else "shm", n)
                    done += n
                    if report is not None:
                        report(done, total)
            if first is not None:
                raise first[1]

    def put(self, name: str, array: ArrayLike, key: Optional[str] = None, convert: bool = False,
            progress: Any = None, wait: bool = True) -> Union[None, Future]:
        """Puts the whole tensor (row-major) from this client; the daemons scatter it.

        Args:
            name: the tensor.
            array: a numpy array of the tensor's shape and dtype (float32 for f32, bool for
                bool, uint16 for u16, ...); bf16 data as ``tshard.bf16_bits(uint16_array)``, f8
                data as ``tshard.f8_bits(uint8_array, "e4m3")`` (or ``"e5m2"``).
                A torch CPU tensor (bf16 as bf16) or any object with ``__dlpack__`` or the array
                protocol is read in place where its memory allows.
            key: an idempotency key.
            convert: convert another dtype's values, as numpy's ``astype`` does (floats to
                f16, bf16 and f8 round to nearest even); refused when a value would not survive
                (out of range, overflow, a bool other than 0 or 1).
            progress: True, a callable ``(done, total)`` or None (a bar on a terminal for large
                data).
            wait: False returns a Future; keep the array unchanged until it is done.

        Returns:
            None (or its Future).

        Raises:
            NotFoundError: no such tensor. BadDtypeError: another dtype without ``convert``, a
            value that does not fit with it, or a dtype tshard has none for. BadShapeError:
            another shape. TypeError: ``array`` is not an array. InvalidArgumentError: a tensor
            on a GPU.

        Example::

            c.put("w", np.arange(32, dtype=np.float32).reshape(8, 4))
            c.put("ids", np.array([1, 2, 300], np.uint16), convert=True)  # into an i32 tensor
        """
        array = _tt.as_array(array, "put")
        if wait and self._inflight is None:
            return self._send_chunks(name, array, key, None, convert, progress)
        fut = self._put_async(name, array, key, None, convert)
        return self._sync(fut) if wait else fut

    def _direct(self, req_msg, what, tensor, nbytes, key=None, report=None):
        """Sends a put or get naming this process's memory (req_msg filled); True when done,
        False when the daemon cannot reach it (NO_DIRECT: the segment serves from now on)."""
        try:
            resp = self._call(key, **{what: req_msg})
        except TshardError as e:
            if e.status != 38:  # NO_DIRECT
                raise
            self._direct_on = False
            return False
        self._direct_ok = True
        if what in ("get", "get_slice"):
            d = resp.data if resp.WhichOneof("result") == "data" else None
            if d is None or not d.direct or d.total_bytes != nbytes or d.offset != 0:
                self.close()
                raise error_for(17, f"the daemon answered a get of '{tensor}' into this "
                                    "process's memory without saying it wrote it all")
        self._count("direct", nbytes)
        if report is not None:
            report(nbytes, nbytes)
        return True

    def put_slice(self, name: str, array: ArrayLike, layout: Optional[str] = None,
                  convert: bool = False, progress: Any = None,
                  wait: bool = True) -> Union[None, Future]:
        """Puts this rank's slice of the tensor, on this rank only.

        Args:
            name: the tensor.
            array: the slice, of its box's shape (row-major), or the flat elements of
                ``layout``; dtype, ``convert`` and torch or DLPack arrays as in :meth:`put`.
            layout: a format tag for data in another layout than row-major.
            convert: as in :meth:`put`.
            progress: as in :meth:`put`.
            wait: False returns a Future.

        Returns:
            None (or its Future).

        Raises:
            NotFoundError, BadDtypeError, BadShapeError as :meth:`put`;
            InvalidArgumentError: this rank holds no slice.
        """
        array = _tt.as_array(array, "put_slice")
        if wait and self._inflight is None:
            return self._send_chunks(name, array, None, _layout_tag(layout), convert, progress)
        fut = self._put_async(name, array, None, _layout_tag(layout), convert)
        return self._sync(fut) if wait else fut

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
            raise error_for(17, "the daemon answered a chunk that does not fit")
        if d.HasField("shm"):
            if seg is None or d.data:
                raise error_for(17, "the daemon answered in shared memory it was not offered")
            data = seg.region(d.shm)
        else:
            data = np.frombuffer(d.data, dtype=np.uint8)
        if len(data) > d.total_bytes - off:
            raise error_for(17, "the daemon answered a chunk that does not fit")
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
                return error_for(5, f"the result has {total} bytes; out has {len(given)}")
            return error_for(17, f"the daemon answered a total of {total} bytes, not the total "
                                 f"of its first answer")

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
                    if e.status in (17, 18, 19):
                        raise
                    first = first or e
                    continue
                if t != total or n != min(chunk, total - off):
                    raise error_for(17, "the daemon answered a chunk of another size")
                got += n
                if report is not None:
                    report(got, total)
            if first is not None:
                raise first
            return out[0] if out[0] is not None else np.empty(0, dtype=np.uint8)

    def get(self, name: str, out: Any = None, progress: Any = None, wait: bool = True,
            like: Optional[str] = None) -> Any:
        """The whole tensor, gathered to this client's rank.

        Args:
            name: the tensor.
            out: an array to fill instead of a new one: C-contiguous, writable, of the tensor's
                numpy dtype (``DTYPES``, native byte order) and exactly its shape (another shape
                of the same size is refused). Or a contiguous torch CPU tensor of the tensor's
                dtype and shape, filled in place and returned.
            progress: as in :meth:`put`.
            wait: False returns a Future of the array (numpy only).
            like: ``"torch"`` returns a torch tensor sharing the received memory (bf16 as
                ``torch.bfloat16``, f8 as ``torch.float8_*`` where the installed torch has
                them); None or ``"numpy"`` a numpy array.

        Returns:
            A numpy array of the tensor's shape and dtype (a bf16 tensor: its uint16 bits; an
            f8 tensor: its uint8 codes), or
            a torch tensor (``like="torch"``, a torch ``out``).

        Raises:
            NotFoundError: no such tensor. BadShapeError, BadDtypeError (ValueErrors): an
            ``out`` of another shape or dtype (or byte order); ValueError: one not writable or
            not C-contiguous.

        Example::

            w = c.get("w")
            t = c.get("w", like="torch")
        """
        if like is not None or _tt.is_torch(out):
            return self._get_torch(self.get, name, out, like, wait, progress=progress)
        if not wait or self._inflight is not None:
            fut = self._get_async(name, out, None)
            return self._sync(fut) if wait else fut
        info = self.describe(name)
        dt = DTYPES[info["dtype"]]
        need = int(np.prod(info["shape"], dtype=np.int64)) * dt.itemsize
        flat = None if out is None else _out_bytes(out, dt, "get", info["shape"], name)
        if self._direct_on and need > 0:
            buf = flat if flat is not None else self._result_buffer(need)
            m = pb.GetRequest(name=name)
            m.client_memory.address = buf.__array_interface__["data"][0]
            m.client_memory.bytes = need
            if self._direct(m, "get", name, need, None, reporter(progress, "get", name, need)):
                return buf.view(dt).reshape(info["shape"])

        def fill(req, off):
            req.get.name, req.get.offset = name, off
            return req.get
        raw = self._read_chunks(fill, need, flat, reporter(progress, "get", name, need))
        if len(raw) != need:
            raise error_for(17, f"'{name}' came with {len(raw)} bytes, not {need}")
        return raw.view(dt).reshape(info["shape"])

    def get_slice(self, name: str, layout: Optional[str] = None, out: Any = None,
                  wait: bool = True, like: Optional[str] = None) -> Any:
        """This rank's slice of the tensor.

        Args:
            name: the tensor.
            layout: a format tag to receive the slice in that layout, as its flat elements
                (padding included); default the row-major box.
            out: an array to fill (C-contiguous, the tensor's dtype, exactly the slice's box
                shape; 1-d for another ``layout``), or a torch CPU tensor as in :meth:`get`.
            wait: False returns a Future (the row-major layout only, as every call once
                operations were in flight).
            like: ``"torch"`` returns a torch tensor, as in :meth:`get`.

        Returns:
            An array of this rank's box shape. A rank that holds no element (off the mesh, or
            an empty part of an uneven split) gets an empty array: its box's shape for a
            member (e.g. ``(0, 4)``), all zeros (``(0, 0)`` for a 2-dim tensor) off the mesh.

        Raises:
            NotFoundError: no such tensor. UnsupportedError: another layout with ``wait=False``.
        """
        if like is not None or _tt.is_torch(out):
            return self._get_torch(self.get_slice, name, out, like, wait, layout=layout)
        layout = _layout_tag(layout) or None
        if not wait or self._inflight is not None:
            if layout:
                raise error_for(20, "get_slice in another layout is synchronous only, and not "
                                    "once this connection had operations in flight (wait=False):"
                                    " use another connection, or the plain layout")
            if self._rank is None:
                self._rank = self.ping()["rank"]
            fut = self._get_async(name, out, self._rank)
            return self._sync(fut) if wait else fut
        info = self.describe(name)
        if self._rank is None:
            self._rank = self.ping()["rank"]
        mine = [r for r in info["ranks"] if r["rank"] == self._rank]
        if not mine or mine[0]["bytes"] == 0:
            return _no_elements(info, mine, layout, out)

        def fill(req, off):
            g = req.get_slice
            g.name, g.offset = name, off
            g.layout.tag = _layout_tag(layout)
            return g
        dt = DTYPES[info["dtype"]]
        box = [h - l for l, h in zip(mine[0]["lo"], mine[0]["hi"])]
        plain = "".join(chr(ord("a") + d) for d in range(len(info["shape"])))
        want = box if not layout or layout == plain else None
        flat = None if out is None else _out_bytes(out, dt, "get_slice", want, name)
        need = int(np.prod(box, dtype=np.int64)) * dt.itemsize
        if not layout and self._direct_on and need > 0 and (flat is None or flat.nbytes == need):
            buf = flat if flat is not None else self._result_buffer(need)
            m = pb.GetSliceRequest(name=name)
            m.client_memory.address = buf.__array_interface__["data"][0]
            m.client_memory.bytes = need
            if self._direct(m, "get_slice", name, need):
                return buf.view(dt).reshape(box)
        arr = self._read_chunks(fill, mine[0]["bytes"], flat).view(dt)
        if not layout or layout == plain:
            arr = arr.reshape([h - l for l, h in zip(mine[0]["lo"], mine[0]["hi"])])
        return arr

    def _get_torch(self, get, name, out, like, wait, **kw):
        """get or get_slice into a torch tensor (out) or returning one (like="torch")."""
        if like is not None and not isinstance(like, str):
            raise TypeError(f"like must be 'torch' or 'numpy', not {type(like).__name__}")
        if like not in (None, "torch", "numpy"):
            raise ValueError(f"like must be 'torch' or 'numpy', not {like!r}")
        if not wait:
            raise ValueError("torch results (like='torch', a torch out=) take wait=True")
        if _tt.is_torch(out):
            a = get(name, out=_tt.out_view(out, "get"), **kw)
            return None if a is None else out
        a = get(name, **kw)
        return a if like == "numpy" else _tt.to_torch(a, self.describe(name)["dtype"])

    def reshard(self, name: str, attr: AttrLike, strategy: Optional[str] = None,
                keep_source_as: Optional[str] = None, layout: Optional[str] = None,
                key: Optional[str] = None, wait: bool = True,
                dtype: Any = None, relabel: bool = False) -> Union[Dict[str, Any], Future]:
        """Moves the tensor to another distributed attribute, casting it to ``dtype`` if given.

        Args:
            name: the tensor.
            attr: the target attribute, an Attr or its text.
            strategy: force one (``allgather``, ``root``, ``p2p``, ``alltoall``, ``allreduce``,
                ``reduce_scatter``, ``local``, ``hierarchical``); default: the planner's
                cheapest.
            keep_source_as: keep the source and make the result a new tensor of this name.
            layout: the new slices' format tag (default row-major).
            key: an idempotency key.
            wait: False returns a Future.
            dtype: cast the values as they move (``"bf16"``, ``"bfloat16"``, ``np.float16``,
                ``torch.bfloat16``, ...; default: keep the dtype); the tensor (with
                keep_source_as: the new one) then has this dtype. Rounds to nearest even, as
                numpy's ``astype``. A narrowing cast converts on each rank before sending (the
                narrow bytes travel; a partial source is reduced in its own dtype first, then
                converted), a widening one after receiving. Checked as ``put(convert=True)``
                is: a value that would not survive (out of an integer's range, NaN or inf into
                an integer, a finite value overflowing to inf) raises BadDtypeError and nothing
                changes on any rank; so does a partial target of an f8 dtype (no reductions),
                and a cast of c64 or c128 to a real dtype (the imaginary part would be lost;
                a real dtype casts to c64 and c128 with imaginary part 0); a partial source to
                a partial target raises UnsupportedError.
            relabel: let the daemons permute the target's ranks among themselves (the same
                layout up to which rank holds which block) so that the fewest bytes move: an
                optimal assignment up to 256 ranks, greedy beyond; layouts that differ only by
                such a permutation move nothing. The tensor's attribute then has the order
                chosen.

        Returns:
            ``{'strategy', 'ms'}``: the strategy the daemons ran and its time on the answering
            rank (None and 0.0 for a retry answered by its idempotency key); relabeled, also
            ``'ranks'``: the target mesh's ranks in the order chosen (row-major).

        Raises:
            NotFoundError, ParseError, BadAttributeError, BadStrategyError, LimitError.

        Example::

            c.reshard("w", "mesh=[4] placements=[S(1)]")
            c.reshard("w", "mesh=[4] placements=[S(0)]", dtype="bf16")
            c.reshard("w", "mesh=[4] placements=[S(0)]", relabel=True)["ranks"]
        """
        _check_name(name)
        if keep_source_as:
            _check_name(keep_source_as, "keep_source_as")
        relabel = _flag(relabel, "reshard: relabel")
        return self._op(key, _reshard_result, wait, f"reshard of '{name}'",
                        reshard=pb.ReshardRequest(name=name, attr=_attr_msg(attr),
                                                  strategy=_opt_str(strategy, "strategy"),
                                                  keep_source_as=keep_source_as or "",
                                                  layout=pb.Layout(tag=_layout_tag(layout)),
                                                  dtype=_cast_name(dtype), relabel=relabel))

    def reshard_many(self, targets: Mapping[str, Any], strategy: Optional[str] = None,
                     key: Optional[str] = None,
                     wait: bool = True) -> Union[Dict[str, Dict[str, Any]], Future]:
        """Reshards many tensors as one operation: every tensor moves or none, on every rank.

        Args:
            targets: ``{name: attr}`` or ``{name: {'attr', 'strategy', 'layout', 'dtype'}}``
                (strategy, layout and dtype optional per tensor; dtype casts that tensor as
                ``reshard(dtype=)`` does, checked before anything changes).
            strategy: the batch's default strategy.
            key: an idempotency key.
            wait: False returns a Future of the result.

        Returns:
            ``{name: {'strategy', 'bytes_sent', 'bytes_received'}}`` as the answering rank ran
            it (empty dicts for a retry answered by its idempotency key).

        Raises:
            NotFoundError, BadAttributeError, LimitError...: the whole batch is refused.
        """
        if not isinstance(targets, Mapping):
            raise TypeError(f"reshard_many: targets must be a dict {{name: attr}}, not "
                            f"{type(targets).__name__}")
        items = []
        for name, t in targets.items():
            _check_name(name)
            t = t if isinstance(t, Mapping) else {"attr": t}
            if "attr" not in t:
                raise error_for(1, f"reshard_many: the target of '{name}' has no 'attr'; give "
                                   f"{{'attr': ATTR, 'strategy': ..., 'layout': ..., "
                                   f"'dtype': ...}}")
            unknown = sorted(set(t) - {"attr", "strategy", "layout", "dtype"})
            if unknown:
                why = (" (reshard_many does not relabel; relabel one tensor with reshard)"
                       if "relabel" in unknown else "")
                raise error_for(1, f"reshard_many: the target of '{name}' has the unknown key "
                                   f"{unknown[0]!r}{why}; valid: attr, strategy, layout, dtype")
            items.append(pb.ReshardItem(name=name, attr=_attr_msg(t["attr"]),
                                        strategy=_opt_str(t.get("strategy"), "strategy"),
                                        layout=pb.Layout(tag=_layout_tag(t.get("layout"))),
                                        dtype=_cast_name(t.get("dtype"))))
        order = list(targets)

        def finish(r):
            got = {i.name: {"strategy": i.strategy, "bytes_sent": i.bytes_sent,
                            "bytes_received": i.bytes_received} for i in r.reshard_many.items}
            return {name: got.get(name, {}) for name in order}
        return self._op(key, finish, _flag(wait, "wait"), f"reshard_many of {len(order)} tensors",
                        reshard_many=pb.ReshardManyRequest(
                            items=items, strategy=_opt_str(strategy, "strategy")))

    def drop_many(self, names: Iterable[str], key: Optional[str] = None,
                  wait: bool = True) -> Optional[Future]:
        """Drops the named tensors as one operation: all of them or, when one is unknown, none.

        Args:
            names: the tensors.
            key: an idempotency key.
            wait: False returns a Future.

        Raises:
            NotFoundError: one of them does not exist (nothing is dropped).
        """
        names = _names(names, "drop_many: names")
        return self._op(key, _nothing, _flag(wait, "wait"), f"drop_many of {len(names)} tensors",
                        drop_many=pb.DropManyRequest(names=names))

    def put_many(self, arrays: Mapping[str, Any], convert: bool = False,
                 key: Optional[str] = None, wait: bool = True) -> Optional[Future]:
        """Puts many whole tensors in one request, one operation on the daemons.

        Atomic: every array is checked before anything moves (each name once and existing, its
        dtype and shape as ``put`` checks them, the daemons' --batch-max-tensors and
        --batch-max-bytes), and either every tensor is stored or none, on every rank.

        Args:
            arrays: {name: numpy array} of whole row-major tensors, in any order (bf16 data as
                ``tshard.bf16_bits(bits)``, f8 data as ``tshard.f8_bits(codes, "e4m3")``).
            convert: convert arrays of another dtype to their tensors', as
                ``put(..., convert=True)`` does (values that would not survive are refused).
            key: idempotency key: a retry of the identical put_many is not run again.
            wait: False returns a tshard.Future at once (the data takes the same path as a
                synchronous put_many; keep the arrays unchanged until it is done).

        Returns:
            None, or a Future of None with ``wait=False``.

        Raises:
            NotFoundError, InvalidArgumentError (a name twice), BadShapeError / BadDtypeError
            (an array that does not fit its tensor), LimitError (naming the flag): nothing was
            stored. TypeError when ``arrays`` is not a mapping.

        Example:
            >>> c.put_many({"wte": np.zeros((50257, 768), np.float32),
            ...             "ln.b": np.ones(768, np.float32)})
        """
        from . import batch_io
        return batch_io.put_many(self, arrays, convert=convert, key=key, wait=wait)

    def get_many(self, names: Sequence[str], wait: bool = True, like: Optional[str] = None,
                 out: Optional[Mapping[str, Any]] = None) -> Union[Dict[str, Any], Future]:
        """Gets many whole tensors in one request, one operation on the daemons.

        Args:
            names: the tensors' names, each once.
            wait: False returns a tshard.Future of the dict at once.
            like: ``"torch"`` returns torch tensors sharing the received memory (bf16 as
                ``torch.bfloat16``); None or ``"numpy"`` numpy arrays, as :meth:`get`.
            out: ``{name: array or torch tensor}`` to fill instead of new ones, each as
                :meth:`get`'s ``out`` (the tensor's dtype and shape, contiguous, writable); the
                result holds those very objects.

        Returns:
            {name: numpy array} (row-major, aligned, the tensor's dtype and shape; bf16 as
            uint16 bits, f8 as uint8 codes) in the order of ``names``, or a Future of it with ``wait=False``. The
            arrays may be views of one buffer the call allocated.

        Raises:
            NotFoundError naming an unknown tensor, InvalidArgumentError (a name twice, no
            names), LimitError (--batch-max-tensors, --batch-max-bytes), BadShapeError when a
            tensor changed size meanwhile. TypeError for a single name (use ``get``).

        Example:
            >>> arrays = c.get_many(["wte", "ln.b"]); arrays["wte"].shape
            (50257, 768)
        """
        from . import batch_io
        return batch_io.get_many(self, names, wait=wait, like=like, out=out)

    # Distributed einsum, computed where the shards live
    def einsum(self, equation: str, *operands: str, out: str, attr: Optional[AttrLike] = None,
               plan: Optional[str] = None, keep: bool = False, explain: bool = False,
               key: Optional[str] = None, wait: bool = True) -> Any:
        """Computes a numpy-style einsum of stored tensors where their shards live.

        Args:
            equation: the equation with explicit output, e.g. ``"ij,jk->ik"``.
            operands: the names of the operand tensors (one to three).
            out: the name of the new result tensor.
            attr: the result's attribute (default: the planner's choice).
            plan: force a named distributed plan.
            keep: keep the forward for :meth:`einsum_backward`.
            explain: plan only and return the explanation, nothing computed.
            key: an idempotency key.
            wait: False returns a Future of the result.

        Returns:
            A :class:`tshard.EinsumResult` (plan, attr, forward id when kept, ...).

        Raises:
            EinsumError: a bad equation or operands. EinsumPlanError: a forced plan that does
            not apply. NotFoundError: an unknown operand.

        Example::

            c.einsum("ij,jk->ik", "x", "w", out="y")
        """
        from . import einsum as _e
        return _e.einsum(self, equation, *operands, out=out, attr=attr, plan=plan, keep=keep,
                         explain=explain, key=key, wait=wait)

    def einsum_plan(self, equation: str, *operands: str, attr: Optional[AttrLike] = None,
                    plan: Optional[str] = None) -> Any:
        """Plans an einsum without computing it (see :meth:`einsum`).

        Returns:
            A :class:`tshard.EinsumResult` describing the chosen plan and its costs.

        Raises:
            EinsumError, EinsumPlanError, NotFoundError as :meth:`einsum`.
        """
        from . import einsum as _e
        return _e.einsum_plan(self, equation, *operands, attr=attr, plan=plan)

    def einsum_backward(self, forward: int, grad_out: str, grads: Sequence[Optional[str]],
                        key: Optional[str] = None, wait: bool = True) -> Any:
        """Computes the gradients of a kept einsum forward (``keep=True``).

        Args:
            forward: the forward's id from :meth:`einsum`'s result.
            grad_out: the tensor of the output's gradient.
            grads: the names of the new gradient tensors, one per operand (None: not wanted).
            key: an idempotency key.
            wait: False returns a Future.

        Returns:
            The daemons' answer (an :class:`tshard.EinsumResult`).

        Raises:
            NoForwardError: no kept forward with this id. EinsumError: shapes that do not fit.
        """
        from . import einsum as _e
        return _e.einsum_backward(self, forward, grad_out, grads, key=key, wait=wait)

    def einsum_release(self, forward: int, key: Optional[str] = None, wait: bool = True) -> Any:
        """Releases a kept einsum forward and its cached transposes (``wait=False``: a Future).

        Raises:
            NoForwardError: no kept forward with this id.
        """
        from . import einsum as _e
        return _e.einsum_release(self, forward, key=key, wait=wait)

    # Checkpoints: save and load (read offline with tshard.checkpoint).
    def save(self, dir: str, names: Union[None, str, Iterable[str]] = None,
             keep_partial: bool = False, per_node: bool = False, key: Optional[str] = None,
             wait: bool = True, prefix: Optional[str] = None, all: bool = False,
             overwrite: bool = False) -> Union[Dict[str, Any], Future]:
        """Saves tensors into a checkpoint directory that every daemon can reach.

        What to save is asked one way: ``names`` (exact names, or globs such as
        ``"layers.*.weight"``), ``prefix``, or ``all=True``; none of them is refused. A
        directory that already holds a checkpoint is refused unless ``overwrite=True``, and the
        replacement is atomic: the previous checkpoint stays until every rank agreed on the new
        one (a failed save leaves it as it was). What saves into ``dir`` cut short left beside
        it (``.NAME.tmp-*``) is removed first.
        ``wait=False`` is an asynchronous save: a Future, done once every daemon took its copy
        of the tensors (the checkpoint holds their values at this point of the operations'
        order; later operations do not change it); its result says ``writing: True`` while the
        daemons write the files in the background, and :meth:`wait_saves` waits for them.

        Args:
            dir: the directory.
            names: a name, a glob, or an iterable of them.
            keep_partial: save partial placements as they are instead of reduced.
            per_node: each node writes its own directory (no shared file system).
            key: an idempotency key.
            wait: False: an asynchronous save (a Future, see above).
            prefix: save the tensors whose name starts with it.
            all: True saves every tensor of the job.
            overwrite: True replaces a checkpoint already in ``dir``.

        Returns:
            ``{'dir', 'tensors', 'bytes', 'files', 'seconds', 'writing', 'save_id'}``.

        Raises:
            InvalidArgumentError: no names, prefix or all, or more than one of them.
            ExistsError: ``dir`` holds a checkpoint and overwrite is False.
            CheckpointIoError: the directory cannot be written, or a rank was lost during the
            save (the message names the path). NotFoundError: a name, or a glob or prefix
            that matches nothing. LimitError: the copy of an asynchronous save does not fit
            the memory limit.

        Example::

            c.save("/shared/ckpt/step100", all=True)
            c.save("/shared/ckpt/layers", "layers.*.weight", overwrite=True)
            c.save("/shared/ckpt/step200", all=True, wait=False).result(); c.wait_saves()
        """
        names = _names(names, "save: names")
        prefix = _selection("save", names, prefix, all)
        path = _dir(dir)
        try:
            return self._op(key, self._note_save, wait, f"save to '{dir}'",
                            save=pb.SaveRequest(dir=path, names=names, prefix=prefix,
                                                all=_flag(all, "all"),
                                                overwrite=_flag(overwrite, "overwrite"),
                                                keep_partial=_flag(keep_partial, "keep_partial"),
                                                per_node=_flag(per_node, "per_node"),
                                                background=not _flag(wait, "wait")))
        except TshardError as e:  # a lost rank: the save's own error names its path
            if e.status != 39:
                raise
            raise error_for(33, f"save to {path} was interrupted: {e.message}; {path} holds a "
                                f"complete checkpoint or nothing: the one that was there before "
                                f"(or this save's, had it been exchanged before the loss), never "
                                f"a partial one") from None

    def _note_save(self, r: Any) -> Dict[str, Any]:
        """A save's result; one still writing is remembered for :meth:`wait_saves`."""
        res = _ckpt_result(r)
        if res["writing"]:
            if not hasattr(self, "_saves_started"):
                self._saves_started = set()
            self._saves_started.add(res["save_id"])
        return res

    def snapshot(self, key: Optional[str] = None) -> Dict[str, Any]:
        """Takes a snapshot now, on daemons started with ``--snapshot-dir``.

        An asynchronous save of every tensor into ``<snapshot dir>/<UTC timestamp>/``.

        Args:
            key: an idempotency key.

        Returns:
            As :meth:`save` with ``wait=False``: its ``'dir'`` names the snapshot and its
            ``'writing'`` is True while the files are written (:meth:`wait_saves` waits).

        Raises:
            InvalidArgumentError: the daemons have no snapshot directory. LimitError: the copy
            does not fit the memory limit.
        """
        return self._op(key, _ckpt_result, True, "snapshot",
                        save=pb.SaveRequest(snapshot=True, background=True))

    def wait_saves(self, timeout: Optional[float] = None,
                   save_id: Optional[int] = None) -> List[Dict[str, Any]]:
        """Waits until the background saves writing now (or the one numbered ``save_id``) are
        complete, polling :meth:`stats`.

        Args:
            timeout: seconds to wait at most (None: no limit).
            save_id: the save to wait for (its result's ``'save_id'``); None: every save writing
                now.

        Returns:
            Their records (``stats()['saves']`` entries: dir, state, bytes written of total).
            Without ``save_id`` they include this client's own asynchronous saves that ended
            since it started them (a failure is raised once).

        Raises:
            CheckpointIoError (or the failure's class): a save failed.
            tshard.WaitTimeoutError: still writing after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        started = getattr(self, "_saves_started", set())
        want = None if save_id is None else {save_id}
        delay = 0.002
        while True:
            saves = self.stats()["saves"]
            if want is None:  # writing now, and this client's own that may have ended already
                want = {s["save_id"] for s in saves if s["state"] == "writing"} | started
            mine = [s for s in saves if s["save_id"] in want]
            if all(s["state"] != "writing" for s in mine):
                started -= {s["save_id"] for s in mine}
                for s in mine:
                    if s["state"] == "failed":
                        raise error_for(s["status"], s["message"])
                return mine
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(f"background saves {sorted(want)} still writing after "
                                       f"{timeout} s")
            time.sleep(delay)  # polling the daemon's progress, bounded by the deadline
            delay = min(delay * 2, 0.05)

    def load(self, dir: str, names: Union[None, str, Iterable[str]] = None,
             attr: Union[None, AttrLike, Mapping[str, Any], Iterable[str]] = None,
             per_node: bool = False, key: Optional[str] = None, wait: bool = True,
             default: Optional[AttrLike] = None,
             in_place: bool = False) -> Union[Dict[str, Any], Future]:
        """Loads tensors of a checkpoint onto the daemons' ranks; a failure creates none.

        Args:
            dir: the checkpoint directory.
            names: a name or names (None: all of the checkpoint).
            attr: the attribute of every tensor (an Attr or its text), or attribute rules: a
                dict ``{name or glob: attribute}`` or ``"PATTERN=ATTR"`` texts (the grammar of
                :mod:`tshard.attr_rules`, ``tshard load --attr`` and ``tshardd --resume-attr``:
                a tensor takes the rule naming it, else the first glob matching its name, else
                ``default``). A rule naming a tensor the checkpoint lacks is refused.
            per_node: the checkpoint was saved per node.
            key: an idempotency key.
            wait: False returns a Future.
            default: the attribute of the tensors no rule names (None: each saved attribute).
            in_place: load into the stored tensors of the names (None: every tensor of the
                checkpoint) instead of new ones, each keeping its attribute and layout, as
                torch.distributed.checkpoint loads into existing tensors (a roll back to the
                checkpoint's step; no attr, no default). Each must have its saved dtype and
                shape, else nothing changes on any rank and the error names every mismatch.
                All or none: every tensor is loaded beside its stored slices first (room for a
                second copy), then all are replaced at once.

        Returns:
            ``{'dir', 'tensors', 'bytes', 'files', 'seconds'}``.

        Raises:
            CheckpointIoError, CorruptError: an unreadable or damaged checkpoint.
            ExistsError: a tensor of that name exists (without in_place).
            NotFoundError: in place, no stored tensor of that name.
            BadShapeError, BadDtypeError: in place, tensors not as saved (every one named).
            BadAttributeError: an attribute does not fit its tensor on these ranks.

        Example::

            c.load(ckdir, attr={"wte": "mesh=[3] placements=[S(0)]",
                                "h.*.w": "mesh=[3] placements=[S(1)]"},
                   default="mesh=[3] placements=[R]")
        """
        req = pb.LoadRequest(dir=_dir(dir), names=_names(names, "load: names"),
                             per_node=_flag(per_node, "per_node"),
                             in_place=_flag(in_place, "in_place"))
        if in_place and (attr is not None or default is not None):
            raise TypeError("load: in_place=True keeps each tensor's attribute; give no attr "
                            "and no default")
        if isinstance(attr, (str, Attr)):
            if default is not None:
                raise TypeError("load: give one attribute for every tensor as attr or as "
                                "default, not both; or attr as rules {name or glob: attr}")
            attr, default = None, attr
        req.rules.extend(_rules.messages(_rules.parse(attr, "load: attr")))
        if default is not None:
            req.attr.CopyFrom(_attr_msg(default))
        return self._op(key, _ckpt_result, wait, f"load from '{dir}'", load=req)

    def load_safetensors(self, path: str, attrs: "dict | None" = None, default: Any = None,
                         names: "list | None" = None, prefix: "str | None" = None,
                         rename: "dict | None" = None, key: "str | None" = None,
                         wait: bool = True) -> "list | Future":
        """Imports a Hugging Face ``model.safetensors`` file, or the shards of a
        ``model.safetensors.index.json``, into new tensors under distributed attributes.

        path: the file or the index (a path every daemon can reach; made absolute here).
        attrs: attribute rules, {tshard name or glob: attribute} (text or Attr) or
        ``"PATTERN=ATTR"`` texts (:mod:`tshard.attr_rules`, the grammar of :meth:`load`); the
        tensors imported are those the rules name or match unless ``names`` or ``default`` say
        otherwise. default: the attribute of every other tensor;
        given, every tensor of the file(s) is imported. names: import only these. prefix: removed
        from the file's names that start with it (``"model."``). rename: {file name: tshard
        name}, applied instead of the prefix rule. Each rank reads only the byte ranges of its
        own slice. Atomic: a bad file (truncated, overlapping or out-of-range data_offsets, a
        header over 100 MB or not JSON, an unknown dtype, a shape that does not match its
        bytes), a missing name or a name taken already creates nothing on any rank and raises
        the same error everywhere, naming the file and the tensor.

        Returns the names created, in order (or a Future of them with wait=False)."""
        from . import safetensors as _st
        req = _st.import_request(path, attrs, default=default, names=names, prefix=prefix,
                                 rename=rename)
        for t in req.tensors:
            _check_name(t.name)
        for n in req.names:
            _check_name(n)
        return self._op(key, lambda r: list(r.safetensors.names), wait,
                        f"import of safetensors '{path}'", import_safetensors=req)

    def save_safetensors(self, path: str, names: "list | None" = None,
                         max_shard_bytes: "int | None" = None, metadata: "dict | None" = None,
                         key: "str | None" = None, wait: bool = True,
                         prefix: "str | None" = None, all: bool = False) -> "list | Future":
        """Exports stored tensors as a Hugging Face safetensors model that ``transformers`` and
        ``safetensors`` read.

        path: the file to write, ending in ``.safetensors`` (made absolute here). names: the
        tensors, by name or glob (``"layers.*.weight"``), or prefix: those whose name starts with
        it, or all=True: every tensor (one of the three; none is refused). max_shard_bytes: when the tensors' bytes exceed it, HF
        shards ``<stem>-00001-of-0000N.safetensors`` are written beside path, with
        ``<path>.index.json`` (their weight_map); else one file. metadata: {str: str}, the
        file's ``__metadata__`` (None: the metadata of the file the tensors were imported from
        when they all share one, else ``{"format": "pt"}``). Each rank writes its own slices'
        bytes at their offsets (no gather); every file is written under a temporary name (mode
        0600) and renamed into place once every rank succeeded. Partial tensors are refused
        (reshard them first).

        Returns the paths written, the index last when sharded (or a Future of them)."""
        from . import safetensors as _st
        req = _st.export_request(path, names, max_shard_bytes=max_shard_bytes, metadata=metadata)
        for n in req.names:
            _check_name(n)
        req.prefix = _selection("safetensors export", list(req.names), prefix, all)
        req.all = bool(all)
        return self._op(key, lambda r: list(r.safetensors.files), wait,
                        f"export to safetensors '{path}'", export_safetensors=req)

    def drop(self, name: str, key: Optional[str] = None,
             wait: bool = True) -> Union[None, Future]:
        """Drops the tensor on every rank, freeing its memory.

        Args:
            name: the tensor.
            key: an idempotency key.
            wait: False returns a Future.

        Raises:
            NotFoundError: no such tensor.

        Example::

            c.drop("w")
        """
        return self._op(key, _nothing, wait, f"drop of '{name}'",
                        drop=pb.DropRequest(name=_check_name(name)))

    def list(self, details: bool = False,
             wait: bool = True) -> Union[List[str], List[Dict[str, Any]], Future]:
        """The stored tensors.

        Args:
            details: False gives names; True one dict per tensor, ``{'name', 'dtype', 'shape',
                'attr' (canonical text), 'bytes' (the whole tensor's)}``.
            wait: False returns a Future.

        Returns:
            A list of names, or of dicts with ``details=True``.
        """
        def parse(r):
            r = r.list
            if not details:
                return list(r.names)
            return [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                     "attr": t.attr.text, "bytes": t.bytes} for t in r.tensors]
        return self._op(None, parse, wait, "list",
                        list=pb.ListRequest(details=_flag(details, "details")))

    def describe(self, name: str, wait: bool = True) -> Union[Dict[str, Any], Future]:
        """What a tensor is and where its slices live, as ``tshard describe`` prints it.

        Args:
            name: the tensor.
            wait: False returns a Future.

        Returns:
            ``{'name', 'dtype', 'shape', 'attr' (canonical text), 'layout' (``"row-major"`` or a
            format tag), 'ranks': [{'rank', 'bytes', 'lo', 'hi'}]}``.

        Raises:
            NotFoundError: no such tensor.
        """
        return self._op(None, lambda r: _describe_dict(r.describe), wait,
                        f"describe of '{name}'",
                        describe=pb.DescribeRequest(name=_check_name(name)))

    # -- compiled programs -----------------------------------------------------------------------
    def program_compile(self, program: Union[None, str, Dict[str, Any]] = None, lazy: bool = True,
                        key: Optional[str] = None, graph: Any = None,
                        buckets: Optional[Dict[str, Any]] = None, wait: bool = True) -> Any:
        """Compiles an elementwise/reduction program on every rank.

        Args:
            program: the program as JSON text or a dict (or None with ``graph``).
            lazy: build each bucket on its first run (False: all now).
            key: an idempotency key.
            graph: the program as a ProgramGraph message (see :func:`tshard.graph_from_json`).
            buckets: ``{group: rule}`` overriding the program's bucketing rules.
            wait: False returns a Future of the id.

        Returns:
            The program's id, for :meth:`program_run`.

        Raises:
            ParseError: a bad program. ProgramCompileError: the C compiler failed.
        """
        return _program.compile(self, program, lazy=lazy, key=key, graph=graph, buckets=buckets,
                                wait=wait)

    def program_run(self, program_id: Any, inputs: Mapping[str, Any],
                    outputs: Optional[Mapping[str, str]] = None, key: Optional[str] = None,
                    overwrite: bool = False, wait: bool = True) -> Optional[Future]:
        """Runs a compiled program on the local slices of every rank.

        Args:
            program_id: the id from :meth:`program_compile`.
            inputs: ``{input name: tensor name or number}``; a number its input's dtype cannot
                hold is refused (BadDtypeError).
            outputs: ``{output name: tensor name}``; outputs not named become tensors of their
                own names.
            key: an idempotency key.
            overwrite: let outputs replace existing tensors.
            wait: False returns a Future.

        Raises:
            ProgramPlacementError: the tensors' attributes do not fit the program.
            NotFoundError: an unknown program or tensor.
        """
        return _program.run(self, program_id, inputs, outputs, key=key, overwrite=overwrite,
                            wait=wait)

    def program_show(self, program_id: Any, summary: bool = False) -> Any:
        """What a compiled program is: its inputs, outputs and kernels (``summary``: briefly).

        Raises:
            NotFoundError: no program with this id.
        """
        return _program.show(self, program_id, summary=summary)

    def program_drop(self, program_id: Any, key: Optional[str] = None,
                     wait: bool = True) -> Optional[Future]:
        """Forgets a compiled program on every rank (``wait=False``: a Future).

        Raises:
            NotFoundError: no program with this id.
        """
        return _program.drop(self, program_id, key=key, wait=wait)

    def plan(self, name: str, attr: AttrLike, strategy: Optional[str] = None) -> Dict[str, str]:
        """What a reshard of the tensor to ``attr`` would do, nothing moved.

        Returns:
            ``{'strategy', 'explain'}``: the chosen strategy and the planner's explanation.

        Raises:
            NotFoundError, ParseError, BadAttributeError, BadStrategyError.
        """
        p = self._call(plan=pb.PlanRequest(name=_check_name(name), attr=_attr_msg(attr),
                                           strategy=_opt_str(strategy, "strategy"))).plan
        return {"strategy": p.strategy, "explain": p.explain}

    def show(self, name: str, width: Optional[int] = None, dims: Optional[Sequence[int]] = None,
             ascii: Optional[bool] = None) -> str:
        """A drawing of which rank holds which block of the tensor, as text.

        Args:
            name: the tensor.
            width: the drawing's columns (default 64).
            dims: the two tensor dims to draw (default the first two).
            ascii: ASCII lines instead of Unicode box drawing.

        Raises:
            NotFoundError: no such tensor.
        """
        from .offline import show
        info = self.describe(name)
        return show(info["shape"], info["attr"], width=width, dims=dims, ascii=ascii)

    def trace(self, last: int = 0, within: Optional[float] = None) -> Dict[str, Any]:
        """The operations the connected daemon recorded in its trace ring (``--trace-ring``).

        Args:
            last: the last ``last`` operations (0: every one the ring holds).
            within: only those that ended in the last ``within`` seconds (None: any).

        Returns:
            ``{'rank', 'clock_offset_ns', 'clock_rtt_ns', 'ring', 'dropped', 'host', 'ops'}``;
            each op ``{'seq', 'kind', 'name', 'strategy', 'status', 'bytes_sent',
            'bytes_received', 'origin', 'request_id', 'points'}``, points the times (ns, rank
            0's clock) of the points it reached, from ``received`` to ``answered``
            (tshard.tracing.POINTS). :func:`tshard.trace` draws them with the client's calls.

        Raises:
            InvalidArgumentError: a negative ``last`` or ``within``.
        """
        if not isinstance(last, int) or isinstance(last, bool) or not 0 <= last <= 1 << 20:
            raise error_for(1, f"trace: last={last!r}: expected a count from 0 (all) to 1048576")
        if within is not None and (not isinstance(within, (int, float)) or isinstance(within, bool)
                                   or not 0 < within <= 86400):
            raise error_for(1, f"trace: within={within!r}: expected seconds, more than 0 and at "
                               "most 86400 (None: any)")
        ns = int(within * 1e9) if within is not None else 0
        return _trace.decode(self._call(trace=pb.TraceRequest(last=last, within_ns=ns)).trace)

    def stats(self) -> Dict[str, Any]:
        """The connected daemon's counters, as ``tshard stats`` prints them.

        Returns:
            ``{'operations', 'collective_ops', 'tensors', 'memory_in_use', 'memory_limit',
            'connections', 'topology': {'spec', 'hosts', 'host', 'host_name', 'numa',
            'host_names', 'rank_hosts', 'rank_numa'}, 'pool': {...},
            'strategies': {name: {...}}, 'ops': {kind: {...}}}``: topology says where the
            job's ranks live (``'hosts=2x4'``), how many hosts, the connected rank's host with
            its name and the rank's NUMA node (-1: unknown), each host's name once and every
            rank's host and NUMA node (as :meth:`describe_job` gives them).
        """
        s = self._call(stats=pb.StatsRequest(layout=True)).stats
        layout = _layout(s, strict=False)
        return {"operations": s.operations, "collective_ops": s.collective_ops,
                "tensors": s.tensors, "memory_in_use": s.memory_in_use,
                "memory_limit": s.memory_limit, "connections": s.connections,
                "topology": {"spec": s.topology, "hosts": s.hosts, "host": s.host,
                             "host_name": s.host_name, "numa": s.numa if s.host_name else -1,
                             "host_names": layout["host_names"],
                             "rank_hosts": layout["rank_hosts"],
                             "rank_numa": layout["rank_numa"]},
                "pool": {"stored": s.stored_bytes, "staging": s.pool_staging,
                         "cached": s.pool_cached, "peak": s.pool_peak,
                         "cache_cap": s.pool_cache_cap, "hits": s.pool_hits,
                         "misses": s.pool_misses, "released": s.pool_released},
                "strategies": {x.strategy: {"reshards": x.reshards, "bytes_sent": x.bytes_sent,
                                            "bytes_received": x.bytes_received,
                                            "relayed": x.relayed}
                               for x in s.strategies},
                "ops": {k.kind: {"count": k.count, "p50_us": k.p50_us, "p99_us": k.p99_us,
                                 "batch_p50": k.batch_p50, "batch_max": k.batch_max}
                        for k in s.ops},
                "saves": [{"save_id": v.save_id, "dir": v.dir, "state": v.state,
                           "bytes_written": v.bytes_written, "bytes_total": v.bytes_total,
                           "checkpoint_bytes": v.checkpoint_bytes, "seconds": v.seconds,
                           "status": v.status, "message": v.message} for v in s.saves]}

    def describe_job(self) -> Dict[str, Any]:
        """Where the job's ranks live, as ``tshard describe`` without a tensor prints it.

        Returns:
            ``{'rank' (the connected one), 'ranks', 'hosts', 'topology' (the spec, as
            ``tshard plan --topology`` takes it: ``'hosts=2x4'``), 'host_names' (each
            host's once, hosts numbered in the order of their first rank), 'rank_hosts' and
            'rank_numa' (every rank's host and NUMA node, -1 when the system does not say),
            'by_host': [{'host', 'name', 'ranks', 'numa'}], 'link_rates': {'host', 'cross'}
            (the rates plans weigh, bytes per second, as ``tshard plan --link-rates``)}``.

        Raises:
            ProtocolError: the daemon's answer carries no layout, or an inconsistent one.
        """
        rank = self.ping()["rank"]
        s = self._call(stats=pb.StatsRequest(layout=True)).stats
        job = _layout(s)
        by_host = [{"host": h, "name": n, "ranks": [], "numa": []}
                   for h, n in enumerate(job["host_names"])]
        for r, (h, numa) in enumerate(zip(job["rank_hosts"], job["rank_numa"])):
            by_host[h]["ranks"].append(r)
            by_host[h]["numa"].append(numa)
        return {"rank": rank, "ranks": len(job["rank_hosts"]), "hosts": len(by_host),
                "topology": s.topology, **job, "by_host": by_host,
                "link_rates": {"host": s.link_rate_host, "cross": s.link_rate_cross}}

    def shutdown(self, key: Optional[str] = None) -> None:
        """Stops every daemon of the job (this connection then closes).

        Args:
            key: an idempotency key.
        """
        self._call(key, shutdown=pb.ShutdownRequest())


def _nothing(resp):
    """The result of operations that answer nothing but their status."""
    return None


def _ckpt_result(r):
    """What a save or load did (CkptResult)."""
    k = r.ckpt
    return {"dir": k.dir, "tensors": k.tensors, "bytes": k.bytes, "files": k.files,
            "seconds": k.seconds, "writing": k.writing, "save_id": k.save_id}


def _swapped_note(array, sent, decl):
    """What a refusal of a byte-swapped put adds: the array's own byte order, which the daemon
    never saw."""
    orig = getattr(array, "dtype", None)
    if orig is None or isinstance(array, (BF16Bits, F8Bits)) or np.dtype(orig) == sent.dtype:
        return ""
    return f" (the array's {np.dtype(orig).str} was swapped to this machine's byte order)"


def _put_error(resp, note):
    """The exception of a put's refusal; a refused conversion also names the array's dtype."""
    return error_for(resp.status, resp.message + (note if resp.status == 4 else ""))


def _no_elements(info, mine, layout, out):
    """get_slice's result where this rank holds no element: an empty array of the member's box
    shape (flat for another layout), or of zeros in every dim off the mesh."""
    dt = DTYPES[info["dtype"]]
    plain = "".join(chr(ord("a") + d) for d in range(len(info["shape"])))
    if not mine:
        shape = [0] * len(info["shape"])
    elif layout and layout != plain and layout != ROW_MAJOR:
        shape = [0]
    else:
        shape = [h - lo for lo, h in zip(mine[0]["lo"], mine[0]["hi"])]
    if out is None:
        return np.empty(shape, dtype=dt)
    _out_bytes(out, dt, "get_slice", shape, info["name"])  # this rank holds no element
    return out


def _reshard_result(r):
    out = {"strategy": r.strategy or None, "ms": r.elapsed_us / 1000.0}
    if r.ranks:
        out["ranks"] = list(r.ranks)
    return out


def _layout(s, strict=True):
    """The job's layout of a StatsResult asked with its layout, checked as the C client checks
    it: one host and one NUMA node per rank, every host index below the host count. Not strict:
    empty lists from a daemon that gives none."""
    names, hosts, numa = list(s.host_names), list(s.rank_hosts), list(s.rank_numa)
    if not strict and not hosts and not names and not numa:
        return {"host_names": names, "rank_hosts": hosts, "rank_numa": numa}
    if not hosts or not names:
        raise error_for(17, "the daemon's statistics carry no layout (a daemon older than this "
                            "client); upgrade the daemons")
    if len(numa) != len(hosts) or len(names) != s.hosts or any(h >= len(names) for h in hosts):
        raise error_for(17, f"the daemon's layout is inconsistent: {len(hosts)} ranks with a "
                            f"host, {len(numa)} with a NUMA node, {len(names)} host names for "
                            f"{s.hosts} hosts")
    return {"host_names": names, "rank_hosts": hosts, "rank_numa": numa}


def _describe_dict(d):
    return {"name": d.name, "dtype": d.dtype, "shape": list(d.shape), "attr": d.attr.text,
            "layout": d.layout.tag or ROW_MAJOR,
            "ranks": [{"rank": r.rank, "bytes": r.bytes, "lo": list(r.lo), "hi": list(r.hi)}
                      for r in d.ranks]}


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


def _grouped(c, timeout, group, run_id, collective_timeout):
    """connect's SPMD group (argument, else TSHARD_GROUP)."""
    c._timeout = timeout
    if group is None:
        group = os.environ.get("TSHARD_GROUP") or None
    try:
        if group is not None:
            c.set_group(group, run_id=run_id, collective_timeout=collective_timeout)
        return c
    except BaseException:
        c.close()
        raise


def connect(rank: Optional[int] = None, socket: Optional[str] = None,
            tcp: Union[None, str, Tuple[str, int]] = None, token: Optional[str] = None,
            job: Optional[str] = None, timeout: Optional[float] = 60.0,
            shm: Optional[bool] = None, token_file: Optional[str] = None,
            group: Union[None, str, Sequence[int]] = None, run_id: Optional[str] = None,
            collective_timeout: Optional[float] = None) -> Client:
    """Connects to a daemon.

    Args:
        rank: the rank whose daemon to reach (default: this process's MPI rank from the
            environment, else 0).
        socket: a Unix socket path instead of ``rank`` and ``job``.
        tcp: ``"host:port"`` or ``(host, port)`` of a daemon listening on TCP.
        token: the job's token (TCP).
        job: the job id (default $TSHARD_JOB, else ``"default"``).
        timeout: seconds to wait for any answer (None: forever).
        shm: move data through shared memory (default on for Unix sockets unless TSHARD_SHM=0).
        token_file: a file holding the token (see :func:`read_token_file`).
        group: ranks or ``"all"`` (default $TSHARD_GROUP): SPMD collectives, see
            :meth:`Client.set_group`.
        run_id: the launch's id for the collectives' keys.
        collective_timeout: seconds the collectives wait for the other ranks.

    Returns:
        A :class:`Client`; close it, or use it in a ``with`` block.

    Raises:
        IoError (a ConnectionError): no daemon serves there (the message says how to start one).
        RankLostError: the launcher recorded that the job lost a rank (the message names it).
        AuthError: a bad token; a socket directory that is not this user's own with mode
        0700 (a link, another owner, group or other bits), or a daemon running as another
        user than this one or root (the message names the directory, or the process's uid and
        pid). InvalidArgumentError: a bad job name or rank.

    Example::

        with tshard.connect(rank=0, job="demo") as c:
            print(c.ping())
    """
    if token_file is not None:
        token = read_token_file(token_file)
    if tcp is not None:
        _check_token(token)
        if shm:
            raise error_for(20, "shared memory needs a Unix socket connection; over TCP the data "
                                "travels in the frames")
        host, port = tcp.rsplit(":", 1) if isinstance(tcp, str) else tcp

        def open_tcp():
            s = _socket.create_connection((host, int(port)), timeout=timeout)
            s.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            _kernel_timeout(s, timeout)
            return s
        c = Client(open_tcp(), token=token, opener=open_tcp)
        try:
            c._hello()  # presents the token
        except BaseException:
            c.close()
            raise
        return _grouped(c, timeout, group, run_id, collective_timeout)
    by_job = socket is None
    if by_job:
        job = _check_job(job or os.environ.get("TSHARD_JOB", "default"))
        rank = _env_rank() if rank is None else rank
        if not isinstance(rank, int) or rank < 0:
            raise error_for(1, f"rank {rank!r}: expected a rank number >= 0")
        socket = socket_path(job, rank)
    if shm is None:
        shm = os.environ.get("TSHARD_SHM", "") != "0"
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
    try:
        s = open_unix()
    except OSError as e:
        from .launch import lost_job_message
        lost = lost_job_message(socket)  # the launcher recorded a lost rank
        if lost is not None:
            raise error_for(39, lost) from None
        if by_job:
            raise error_for(18, _no_daemon(job, rank, socket, timeout)) from None
        raise error_for(18, f"cannot connect to {socket}: {e.strerror} (is tshardd running "
                            f"for this job and rank?)") from None
    c = Client(s, shm=bool(shm), opener=open_unix)
    c._socket_path = socket
    try:
        c._hello()
    except BaseException:
        c.close()
        raise
    return _grouped(c, timeout, group, run_id, collective_timeout)
