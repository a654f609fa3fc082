"""Whole puts and gets of many tensors in one request: ``Client.put_many`` and
``Client.get_many`` (the batches guide of the documentation). Each is ONE collective operation
on the daemons, checked
whole before anything moves: every name given once and existing, each array's dtype and shape as
a single put checks them, the daemons' --batch-max-tensors and --batch-max-bytes. A put_many
stores every tensor or none, the same on every rank.

The data takes the single put's and get's paths. On a Unix socket the request names the arrays'
own memory and every daemon copies its pieces straight from or into them (one request, one
answer). Otherwise (TCP, a daemon that cannot reach this process, ``convert=True``, an empty
tensor in the batch) the arrays' bytes travel one after another in the order of the batch,
through the shared segment or in frames, in chunks; a get_many's first request gathers every
tensor at the daemon and the next ones read that copy. Once the connection's reader thread serves
it (a ``wait=False`` before), the same paths serve through it (fastpath.py: the arrays pinned
until the answer, the connection's first direct transfer answered before anything else is sent).
``Client.bytes_by_path`` counts the bytes of each path.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import fastpath as _fp
from . import torch as _tt
from . import tshard_pb2 as pb
from ._common import _FROM_NUMPY, DTYPES, _check_name, _out_bytes
from ._status import LIMIT
from .errors import TshardError, error_for
from .future import Future
from .typed_put import declare
from .wire import request_frame

_INVALID_ARGUMENT, _BAD_SHAPE, _PROTOCOL, _NO_DIRECT = 1, 5, 17, 38

Prepared = List[Tuple[str, np.ndarray, str]]


def _prepare(arrays: Mapping[str, Any], convert: bool) -> Prepared:
    """(name, contiguous array, declared dtype) per tensor, checked as put checks them."""
    if not isinstance(arrays, Mapping):
        raise TypeError(f"put_many takes a dict {{name: array}}, not {type(arrays).__name__}")
    if not arrays:
        raise error_for(_INVALID_ARGUMENT, "put_many of no tensors; give at least one")
    out = []
    for name, array in arrays.items():
        _check_name(name)
        what = f"put_many of '{name}'"
        array = _tt.as_array(array, what)  # torch tensors and DLPack objects, without a copy
        a, decl = declare(array, convert, DTYPES, _FROM_NUMPY, what)
        out.append((name, a, decl))
    return out


def _put_request(prep: Prepared, convert: bool, direct: bool,
                 attrs: Optional[Mapping[str, Any]] = None) -> pb.PutManyRequest:
    m = pb.PutManyRequest(convert=bool(convert))
    for name, a, decl in prep:
        it = m.items.add(name=name, dtype=decl, shape=a.shape)
        if attrs is not None and name in attrs:  # the stored attribute must be this one
            it.attr.text = str(attrs[name])
        if direct:
            it.client_memory.address = a.__array_interface__["data"][0]
            it.client_memory.bytes = a.nbytes
    return m


def _flat(prep: Prepared) -> np.ndarray:
    """The arrays' bytes one after another (the staged data of a put_many)."""
    parts = [a.reshape(-1).view(np.uint8) for _, a, _ in prep]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint8)


def _frame_chunk(c, meta: pb.PutManyRequest) -> int:
    """Data bytes per frame beside the batch's items (each chunk carries them)."""
    room = c.chunk - meta.ByteSize() - 1024
    if room < 4096:
        raise error_for(LIMIT, f"put_many: the {len(meta.items)} items leave no room for data in a "
                               f"frame of {c.max_frame} bytes; put fewer tensors at once")
    return room


def put_many(c, arrays: Mapping[str, Any], convert: bool = False, key: Optional[str] = None,
             wait: bool = True, attrs: Optional[Mapping[str, Any]] = None):
    """Client.put_many (see its docstring). attrs: {name: attribute} the stored tensors must have
    (else BadAttributeError and nothing is stored)."""
    prep = _prepare(arrays, convert)
    if not wait or c._inflight is not None:
        fut = _put_many_async(c, prep, convert, key, attrs)
        return c._sync(fut) if wait else fut
    if _direct_put(c, prep, convert):
        try:
            c._call(key, put_many=_put_request(prep, convert, True, attrs))
            c._direct_ok = True
            c._count("direct", sum(a.nbytes for _, a, _ in prep))
            return None
        except TshardError as e:
            if e.status != _NO_DIRECT:
                raise
            c._direct_on = False  # the segment or the frames from now on
    meta = _put_request(prep, convert, False, attrs)
    flat = _flat(prep)
    total = flat.nbytes
    with c._io():
        seg = c._segment(total)
        if seg is not None:
            chunk = total if total <= seg.bytes else (seg.bytes // 2) & ~63
        else:
            chunk = _frame_chunk(c, meta)
        off = 0
        while True:  # one chunk at a time; the answer to the last one is the put's
            n = min(chunk, total - off)
            req = c._request(key)
            req.put_many.CopyFrom(meta)
            req.put_many.offset, req.put_many.total_bytes = off, total
            bulk = None
            if seg is not None:
                np.copyto(seg.view[:n], flat[off:off + n])
                req.put_many.shm.offset, req.put_many.shm.bytes = 0, n
            else:
                bulk = memoryview(flat[off:off + n])
            c._wire.send(request_frame(req, bulk))
            c._check(c._wire.recv(), req.id)
            c._count("frames" if seg is None else "shm", n)
            off += n
            if off >= total:
                return None


def _direct_put(c, prep: Prepared, convert: bool) -> bool:
    """Whether a put_many names the arrays' own memory (no tensor empty, nothing converted)."""
    return not convert and c._direct_on and all(a.nbytes for _, a, _ in prep)


def _put_many_async(c, prep: Prepared, convert: bool, key: Optional[str],
                    attrs: Optional[Mapping[str, Any]] = None) -> Future:
    """A put_many through the reader thread (fastpath.py): one request naming the arrays' memory
    (pinned until its answer), else their bytes through regions of the segment or in frames.
    The Future is done when every request is answered and fails with the first refusal."""
    fl = c._reader_on()
    tr = _fp.transfers(c, fl)
    fut = Future(fl.cond, f"put_many of {len(prep)} tensors")
    fut._keep = prep
    op = _fp._Op(fl, fut, lambda: None)

    def staged():
        meta = _put_request(prep, convert, False, attrs)
        flat = _flat(prep)

        def message(req):
            req.put_many.CopyFrom(meta)
            req.put_many.total_bytes = flat.nbytes
            return req.put_many
        _fp.put_staged(c, tr, op, message, flat, key, chunk=_frame_chunk(c, meta))
    try:
        with fl.cond:
            if _direct_put(c, prep, convert):
                req = c._request(key)
                req.put_many.CopyFrom(_put_request(prep, convert, True, attrs))
                _fp.direct(c, op, req, sum(a.nbytes for _, a, _ in prep), staged)
            else:
                staged()
    except BaseException:
        op.release()
        raise
    return fut


def _shapes_from(names: Sequence[str], listed) -> List[Tuple[str, np.dtype, List[int], int]]:
    info = {t["name"]: t for t in listed}
    out = []
    for n in names:
        t = info.get(n)
        if t is None:  # the daemons name it too; asking them keeps the message theirs
            out.append((n, np.dtype(np.uint8), [0], 0))
            continue
        out.append((n, np.dtype(DTYPES[t["dtype"]]), list(t["shape"]), int(t["bytes"])))
    return out


def _get_request(shapes, arrays: Optional[List[np.ndarray]]) -> pb.GetManyRequest:
    m = pb.GetManyRequest()
    for i, (n, _, _, b) in enumerate(shapes):
        it = m.items.add(name=n, bytes=b)
        if arrays is not None:
            it.client_memory.address = arrays[i].__array_interface__["data"][0]
            it.client_memory.bytes = b
    return m


def _split(flat: np.ndarray, shapes) -> Dict[str, np.ndarray]:
    """The tensors packed one after another in flat, as arrays (a tensor whose place is not
    aligned to its element size is copied out, so that every array is aligned)."""
    out, off = {}, 0
    for n, dt, shape, b in shapes:
        part = flat[off:off + b]
        out[n] = (part if off % dt.itemsize == 0 else part.copy()).view(dt).reshape(shape)
        off += b
    return out


_ALIGN = 64  # each tensor's place in a direct get_many's buffer


def _places(shapes) -> Tuple[List[int], int]:
    """Where each tensor goes in one buffer (aligned), and the buffer's bytes."""
    at, total = [], 0
    for _, _, _, b in shapes:
        at.append(total)
        total += (b + _ALIGN - 1) // _ALIGN * _ALIGN
    return at, total


def _direct_arrays(c, shapes, views: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """Where a direct get_many writes each tensor: its out= bytes, else its place in one buffer,
    reused (its pages already faulted in) once the caller dropped the arrays of the last large
    result, as get does (Client._result_buffer)."""
    at, room = _places(shapes)
    buf = c._result_buffer(room)
    return [views[n] if n in views else buf[a:a + b] for a, (n, _, _, b) in zip(at, shapes)]


def _direct_error(resp, shapes) -> Optional[TshardError]:
    """PROTOCOL unless the answer to a direct get_many says it wrote every byte."""
    d = resp.data if resp.WhichOneof("result") == "data" else None
    if d is None or not d.direct or d.total_bytes != sum(b for _, _, _, b in shapes):
        return error_for(_PROTOCOL, "the daemon answered a get_many into this process's memory "
                                    "without saying it wrote all of it")
    return None


def _arrays(shapes, arrays: List[np.ndarray]) -> Dict[str, np.ndarray]:
    return {n: a.view(dt).reshape(shape) for (n, dt, shape, _), a in zip(shapes, arrays)}


def _names(names: Sequence[str]) -> List[str]:
    if isinstance(names, str):
        raise TypeError("get_many takes a list of names, not one name (use get)")
    names = [_check_name(n) for n in names]
    if not names:
        raise error_for(_INVALID_ARGUMENT, "get_many of no tensors; give at least one name")
    return names


def _outs(shapes, out: Optional[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
    """The flat bytes of each out= array or torch tensor, checked as get checks its out."""
    if out is None:
        return {}
    if not isinstance(out, Mapping):
        raise TypeError(f"get_many: out must be a dict {{name: array or tensor}}, not "
                        f"{type(out).__name__}")
    known = {n: (dt, shape) for n, dt, shape, _ in shapes}
    views = {}
    for n, o in out.items():
        if n not in known:
            raise error_for(_INVALID_ARGUMENT, f"get_many: out names '{n}', which is not among "
                                               f"the names asked for")
        a = _tt.out_view(o, f"get_many of '{n}'") if _tt.is_torch(o) else o
        views[n] = _out_bytes(a, known[n][0], f"get_many of '{n}'", known[n][1], n)
    return views


def _finish(got: Dict[str, np.ndarray], out, like: Optional[str], dtypes: Dict[str, str]):
    """The result: the out= objects as given, the others as numpy or torch (like)."""
    res = {}
    for n, a in got.items():
        if out is not None and n in out:
            res[n] = out[n]
        else:
            res[n] = _tt.to_torch(a, dtypes.get(n)) if like == "torch" else a
    return res


def get_many(c, names: Sequence[str], wait: bool = True, like: Optional[str] = None,
             out: Optional[Mapping[str, Any]] = None, listed: Optional[List[dict]] = None):
    """Client.get_many (see its docstring). listed: the tensors' list(details=True), when the
    caller has it."""
    names = _names(names)
    if like is not None and not isinstance(like, str):
        raise TypeError(f"get_many: like must be 'torch' or 'numpy', not {type(like).__name__}")
    if like not in (None, "torch", "numpy"):
        raise ValueError(f"get_many: like must be 'torch' or 'numpy', not {like!r}")
    if (like == "torch" or out is not None) and not wait:
        raise ValueError("get_many: like='torch' and out= take wait=True")
    if not wait or c._inflight is not None:  # through the connection's reader thread
        dtypes: Dict[str, str] = {}
        fut = _get_many_async(c, names, out, dtypes)
        if not wait:
            return fut
        got = c._sync(fut)
        return got if like is None and out is None else _finish(got, out, like, dtypes)
    listed = c.list(details=True) if listed is None else listed
    shapes = _shapes_from(names, listed)
    dtypes = {t["name"]: t["dtype"] for t in listed}
    views = _outs(shapes, out)
    if c._direct_on and all(b for _, _, _, b in shapes):
        arrays = _direct_arrays(c, shapes, views)
        try:
            resp = c._call(None, get_many=_get_request(shapes, arrays))
        except TshardError as e:
            if e.status != _NO_DIRECT:
                raise
            c._direct_on = False
        else:
            err = _direct_error(resp, shapes)
            if err is not None:
                c.close()
                raise err
            c._direct_ok = True
            c._count("direct", sum(b for _, _, _, b in shapes))
            return _finish(_arrays(shapes, arrays), out, like, dtypes)
    total = sum(b for _, _, _, b in shapes)
    first = _get_request(shapes, None)

    def fill(req, off):
        if off == 0:
            req.get_many.CopyFrom(first)
        req.get_many.offset = off
        return req.get_many
    flat = np.empty(total, dtype=np.uint8)
    raw = c._read_chunks(fill, total, flat)
    if len(raw) != total:
        raise error_for(_PROTOCOL, f"the get_many came with {len(raw)} bytes, not {total}")
    got = _split(raw, shapes)
    for n, v in views.items():
        np.copyto(v, got[n].reshape(-1).view(np.uint8))
    return _finish(got, out, like, dtypes)


def _get_many_async(c, names: List[str], out: Optional[Mapping[str, Any]] = None,
                    dtypes: Optional[Dict[str, str]] = None) -> Future:
    """A get_many through the reader thread (fastpath.planned): a list of the tensors' details,
    then one request naming one buffer (and out='s arrays) for the daemons to write into, else
    the first request (the gather) and the later chunk requests through regions of the segment
    or in frames. The Future gets the dict of arrays (out='s filled); dtypes gets the tensors'
    tshard dtypes."""
    def fill(req):
        req.list.details = True

    def plan(tr, op, resp):
        listed = [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.bytes}
                  for t in resp.list.tensors]
        shapes = _shapes_from(names, listed)
        if dtypes is not None:
            dtypes.update((t["name"], t["dtype"]) for t in listed)
        _get_many_plan(c, tr, op, shapes, _outs(shapes, out))
    return _fp.planned(c, f"get_many of {len(names)} tensors", fill, plan)


def _get_many_plan(c, tr, op, shapes, views: Dict[str, np.ndarray]) -> None:
    """A get_many's data requests once its shapes are known (reader thread, the condition
    held)."""
    def staged():
        flat = np.empty(sum(b for _, _, _, b in shapes), dtype=np.uint8)
        first = _get_request(shapes, None)

        def message(req, off):
            if off == 0:
                req.get_many.CopyFrom(first)
            return req.get_many

        def value():
            got = _split(flat, shapes)
            for n, v in views.items():
                np.copyto(v, got[n].reshape(-1).view(np.uint8))
            return got
        op.value, op.fut._keep = value, flat
        _fp.get_staged(c, tr, op, message, flat, f"the get_many of {len(shapes)} tensors")
    if not (c._direct_on and all(b for _, _, _, b in shapes)):
        return staged()
    arrays = _direct_arrays(c, shapes, views)
    op.value, op.fut._keep = (lambda: _arrays(shapes, arrays)), arrays
    req = c._request()
    req.get_many.CopyFrom(_get_request(shapes, arrays))
    _fp.direct(c, op, req, sum(b for _, _, _, b in shapes), staged,
               lambda resp: _direct_error(resp, shapes))
