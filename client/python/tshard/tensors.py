"""The tensor operations of :class:`tshard.Client`, one tensor at a time: create, put,
put_slice, get, get_slice, drop, list and describe. Their bytes travel by the paths of
``transfer``; a tensor's dtype is as numpy gives it (bf16 data as ``tshard.bf16_bits``, f8 data as
``tshard.f8_bits``, c64 and c128 as complex64 and complex128).
"""
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import torch as _tt
from . import tshard_pb2 as pb
from ._common import (DTYPES, ArrayLike, AttrLike, _attr_msg, _check_name, _describe_dict,
                      _dtype_name, _flag, _layout_tag, _no_elements, _nothing, _out_bytes)
from ._status import BAD_SHAPE, PROTOCOL, UNSUPPORTED
from .errors import error_for
from .future import Future
from .progress import reporter


class Tensors:
    """Create, put, get, drop, list and describe tensors (a mixin of :class:`tshard.Client`)."""

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
                raise error_for(BAD_SHAPE, f"create: shape {tuple(shape)!r} has a negative size; "
                                           "sizes are >= 0")
            dims.append(int(s))
        return self._op(key, _nothing, wait, f"create of '{name}'",
                        create=pb.CreateRequest(name=_check_name(name),
                                                dtype=_dtype_name(dtype),
                                                shape=dims,
                                                attr=_attr_msg(attr),
                                                layout=pb.Layout(tag=_layout_tag(layout)),
                                                exist_ok=_flag(exist_ok, "exist_ok")))

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
            raise error_for(PROTOCOL, f"'{name}' came with {len(raw)} bytes, not {need}")
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
                raise error_for(UNSUPPORTED, "get_slice in another layout is synchronous "
                                             "only, and not once this connection had "
                                             "operations in flight (wait=False): use "
                                             "another connection, or the plain layout")
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
