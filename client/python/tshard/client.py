"""The tshard client: talks the daemons' wire protocol (4-byte little-endian length, then one
protobuf Request or Response) over a Unix socket or TCP, with numpy arrays in and out.

Data larger than a chunk travels in several requests, each naming its byte offset; the calls
hide that. bf16 tensors travel as numpy uint16 arrays holding the bf16 bits (numpy has no
bfloat16): ``arr.view(np.uint16)`` in, the same out.
"""
import os
import socket as _socket
import struct

import numpy as np

from . import tshard_pb2 as pb
from .attr import Attr
from .errors import error_for

__all__ = ["Client", "connect", "DTYPES", "socket_path"]

# tshard dtype <-> numpy dtype (bf16 as its uint16 bits)
DTYPES = {
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16), "i8": np.dtype(np.int8), "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64), "u8": np.dtype(np.uint8),
}
_FROM_NUMPY = {v: k for k, v in DTYPES.items() if k != "bf16"}

MAX_FRAME = 1 << 30


def _dtype_name(dtype):
    """'f32' for 'f32', np.float32 or np.dtype('float32'); 'bf16' must be named."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except (TypeError, KeyError):
        raise ValueError(f"dtype {dtype!r}: valid are {', '.join(DTYPES)} or the matching numpy "
                         f"dtypes (bf16 as 'bf16', data as uint16)") from None


def _attr_msg(attr):
    return pb.DistAttr(text=str(attr) if isinstance(attr, Attr) else attr)


def socket_path(job, rank):
    """The Unix socket of a rank, as the daemon makes it: $TSHARD_SOCKET_DIR, else
    $XDG_RUNTIME_DIR/tshard, else /tmp/tshard-<uid>; the file is tshard-<job>-<rank>.sock."""
    d = os.environ.get("TSHARD_SOCKET_DIR")
    if not d:
        xdg = os.environ.get("XDG_RUNTIME_DIR")
        d = os.path.join(xdg, "tshard") if xdg else f"/tmp/tshard-{os.getuid()}"
    return os.path.join(d, f"tshard-{job}-{rank}.sock")


def _env_rank():
    for var in ("TSHARD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


class Client:
    """A connection to one daemon. Use ``tshard.connect(...)``; close it (or use ``with``)."""

    def __init__(self, sock, token=None, chunk=32 << 20):
        self._sock = sock
        self._token = token
        self._next_id = 1
        self.chunk = chunk

    # -- plumbing ----------------------------------------------------------------------------
    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _recv_exact(self, n):
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise error_for(18, "the daemon closed the connection")
            got += k
        return buf

    def _call(self, key=None, **op):
        if self._sock is None:
            raise error_for(1, "the connection is closed")
        req = pb.Request(id=self._next_id, idempotency_key=key or "", token=self._token or "")
        self._next_id += 1
        (name, msg), = op.items()
        getattr(req, name).CopyFrom(msg)
        data = req.SerializeToString()
        try:
            self._sock.sendall(struct.pack("<I", len(data)) + data)
            (n,) = struct.unpack("<I", self._recv_exact(4))
            if n > MAX_FRAME:
                raise error_for(17, f"the daemon sent a frame of {n} bytes")
            resp = pb.Response.FromString(bytes(self._recv_exact(n)))
        except _socket.timeout:
            self.close()
            raise error_for(19, "no answer from the daemon within the timeout") from None
        except OSError as e:
            self.close()
            raise error_for(18, f"connection to the daemon failed: {e}") from None
        if resp.id != req.id:
            raise error_for(17, f"answer to request {resp.id} while waiting for {req.id}")
        if resp.status != 0:
            raise error_for(resp.status, resp.message)
        return resp

    # -- operations ----------------------------------------------------------------------------
    def ping(self):
        """{'rank', 'world_size', 'job'} of the daemon this client talks to."""
        r = self._call(ping=pb.PingRequest()).ping
        return {"rank": r.rank, "world_size": r.world_size, "job": r.job}

    def create(self, name, dtype, shape, attr, layout=None, key=None):
        """Creates a zero-filled tensor on every rank of the job."""
        self._call(key, create=pb.CreateRequest(name=name, dtype=_dtype_name(dtype),
                                                 shape=[int(s) for s in shape],
                                                 attr=_attr_msg(attr),
                                                 layout=pb.Layout(tag=layout or "")))

    def _send_chunks(self, build, data, key=None):
        data = memoryview(data).cast("B")
        total, off = len(data), 0
        while True:
            n = min(self.chunk, total - off)
            self._call(key, **build(off, total, bytes(data[off:off + n])))
            off += n
            if off >= total:
                return

    def put(self, name, array, key=None):
        """Puts the whole tensor (row-major) from this client; the daemons scatter it."""
        a = np.ascontiguousarray(array)
        self._send_chunks(lambda off, total, chunk: {
            "put": pb.PutRequest(name=name, offset=off, total_bytes=total, data=chunk)}, a, key)

    def put_slice(self, name, array, layout=None):
        """Puts this rank's slice (row-major over its box, or the bytes of ``layout``)."""
        a = np.ascontiguousarray(array)
        self._send_chunks(lambda off, total, chunk: {
            "put_slice": pb.PutSliceRequest(name=name, offset=off, total_bytes=total, data=chunk,
                                            layout=pb.Layout(tag=layout or ""))}, a)

    def _read_chunks(self, build):
        parts, off, total = [], 0, None
        while total is None or off < total:
            d = self._call(**build(off)).data
            total = d.total_bytes
            if d.offset != off:
                raise error_for(17, f"chunk at offset {d.offset}, expected {off}")
            parts.append(d.data)
            off += len(d.data)
            if not d.data and off < total:
                raise error_for(17, "the daemon sent an empty chunk before the end")
        return b"".join(parts)

    def get(self, name):
        """The whole tensor as a numpy array, gathered to this client's rank."""
        info = self.describe(name)
        raw = self._read_chunks(lambda off: {
            "get": pb.GetRequest(name=name, offset=off, max_bytes=self.chunk)})
        return np.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"]).copy()

    def get_slice(self, name, layout=None):
        """This rank's slice: an array of its box's shape (row-major), or, for another layout,
        the flat elements of that layout (padding included). None when the rank holds none."""
        info = self.describe(name)
        me = self.ping()["rank"]
        mine = [r for r in info["ranks"] if r["rank"] == me]
        if not mine:
            return None
        raw = self._read_chunks(lambda off: {
            "get_slice": pb.GetSliceRequest(name=name, layout=pb.Layout(tag=layout or ""),
                                            offset=off, max_bytes=self.chunk)})
        arr = np.frombuffer(raw, dtype=DTYPES[info["dtype"]]).copy()
        plain = "".join(chr(ord("a") + d) for d in range(len(info["shape"])))
        if not layout or layout == plain:
            arr = arr.reshape([h - l for l, h in zip(mine[0]["lo"], mine[0]["hi"])])
        return arr

    def reshard(self, name, attr, strategy=None, keep_source_as=None, layout=None, key=None):
        """Moves the tensor to another attribute (in place, or to a new tensor
        ``keep_source_as`` keeping the source)."""
        self._call(key, reshard=pb.ReshardRequest(name=name, attr=_attr_msg(attr),
                                                   strategy=strategy or "",
                                                   keep_source_as=keep_source_as or "",
                                                   layout=pb.Layout(tag=layout or "")))

    def drop(self, name, key=None):
        self._call(key, drop=pb.DropRequest(name=name))

    def list(self):
        return list(self._call(list=pb.ListRequest()).list.names)

    def describe(self, name):
        """{'name', 'dtype', 'shape', 'attr' (canonical text), 'layout', 'ranks': [{'rank',
        'bytes', 'lo', 'hi'}]}."""
        d = self._call(describe=pb.DescribeRequest(name=name)).describe
        return {"name": d.name, "dtype": d.dtype, "shape": list(d.shape), "attr": d.attr.text,
                "layout": d.layout.tag,
                "ranks": [{"rank": r.rank, "bytes": r.bytes, "lo": list(r.lo), "hi": list(r.hi)}
                          for r in d.ranks]}

    def plan(self, name, attr, strategy=None):
        """{'strategy', 'explain'}: what a reshard would do, nothing moved."""
        p = self._call(plan=pb.PlanRequest(name=name, attr=_attr_msg(attr),
                                           strategy=strategy or "")).plan
        return {"strategy": p.strategy, "explain": p.explain}

    def stats(self):
        s = self._call(stats=pb.StatsRequest()).stats
        return {"operations": s.operations, "collective_ops": s.collective_ops,
                "tensors": s.tensors, "memory_in_use": s.memory_in_use,
                "memory_limit": s.memory_limit, "connections": s.connections,
                "pool": {"stored": s.stored_bytes, "staging": s.pool_staging,
                         "cached": s.pool_cached, "peak": s.pool_peak,
                         "cache_cap": s.pool_cache_cap, "hits": s.pool_hits,
                         "misses": s.pool_misses, "released": s.pool_released},
                "strategies": {x.strategy: {"reshards": x.reshards, "bytes_sent": x.bytes_sent,
                                            "bytes_received": x.bytes_received}
                               for x in s.strategies}}

    def shutdown(self, key=None):
        """Stops every daemon of the job."""
        self._call(key, shutdown=pb.ShutdownRequest())


def connect(rank=None, socket=None, tcp=None, token=None, job=None, timeout=60.0):
    """Connects to a daemon: by Unix ``socket`` path, by ``tcp`` ("host:port" or (host, port))
    with the job's ``token``, or by ``rank`` (default: this process's MPI rank from the
    environment, else 0) and ``job`` (default $TSHARD_JOB or "default")."""
    if tcp is not None:
        host, port = tcp.rsplit(":", 1) if isinstance(tcp, str) else tcp
        s = _socket.create_connection((host, int(port)), timeout=timeout)
        s.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        c = Client(s, token=token)
        c.ping()  # presents the token
        return c
    if socket is None:
        socket = socket_path(job or os.environ.get("TSHARD_JOB", "default"),
                             _env_rank() if rank is None else rank)
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(socket)
    except OSError as e:
        s.close()
        raise error_for(18, f"cannot connect to {socket}: {e.strerror} (is tshardd running "
                            f"for this job and rank?)") from None
    return Client(s)
