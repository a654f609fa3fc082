"""PyTorch and DLPack for the client: what turns the arrays a training script holds into the numpy
arrays the client sends, and the arrays it receives into torch tensors, without copying where
the memory allows. torch is imported only when a torch tensor is met or asked for, so the package
works without it.

- ``as_array(obj)``: numpy arrays as they are; torch CPU tensors through ``Tensor.numpy()`` (a
  view; bf16 tensors viewed as 16-bit integers and marked as bf16 bits, float8 tensors viewed
  as uint8 and marked as f8 bits); other objects with
  ``__dlpack__`` through ``numpy.from_dlpack`` (a view), then the array protocol
  (``numpy.asarray``). Non-contiguous tensors give strided views that the client treats as it
  treats strided numpy arrays. Tensors on a GPU (or any device but the CPU) are refused with a
  message that says so.
- ``to_torch(a, dtype)``: a numpy array received for a tensor of tshard dtype ``dtype`` as a torch
  tensor sharing its memory (``torch.from_numpy``; bf16 as ``torch.bfloat16``, f8_e4m3 as
  ``torch.float8_e4m3fn``, f8_e5m2 as ``torch.float8_e5m2``, c64 as ``torch.complex64``
  (``torch.cfloat``), c128 as ``torch.complex128`` (``torch.cdouble``)). A dtype the installed
  torch lacks (float8 and uint16/32/64 came in torch 2.1 and 2.3) is refused, naming it: get
  such a tensor as numpy.
- ``out_view(t)``: a torch tensor to fill (``get(..., out=t)``) as a numpy view of its memory.
- ``dtensor_attr(t)``: the attribute of a DTensor (its DeviceMesh, placements and global shape;
  ``tshard.from_dtensor_spec``): shards by torch.chunk's rule (``S(d,chunk)``), so that every
  rank's slice is the DTensor's local tensor.

Every tshard dtype maps to one torch dtype (TORCH_DTYPES). Whether received 16-bit data are bf16
bits, and how bf16 bits are marked for sending, is decided in one place each (``_is_bf16``,
``_bf16_bits``); float8 tensors go by their dtype (``_F8``)."""
from typing import Any, Optional

import numpy as np

from ._status import BAD_DTYPE, INVALID_ARGUMENT
from .attr import Attr, from_dtensor_spec
from .errors import error_for
from .typed_put import bf16_bits, f8_bits

__all__ = ["TORCH_DTYPES", "as_array", "to_torch", "out_view", "is_torch", "from_torch",
           "dtype_name", "dtensor_attr"]

# tshard dtype -> the name of its torch dtype
TORCH_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
                "i8": "int8", "i32": "int32", "i64": "int64", "u8": "uint8", "bool": "bool",
                "i16": "int16", "u16": "uint16", "u32": "uint32", "u64": "uint64",
                "f8_e4m3": "float8_e4m3fn", "f8_e5m2": "float8_e5m2", "c64": "complex64",
                "c128": "complex128"}
# the float8 torch dtypes -> the f8_bits format of their uint8 codes
_F8 = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def dtype_name(t: Any) -> str:
    """The tshard dtype of a torch tensor (or torch dtype): 'f32' for torch.float32, 'bf16' for
    torch.bfloat16, ...; ValueError naming the valid ones for the others."""
    name = str(getattr(t, "dtype", t)).replace("torch.", "")
    for k, v in TORCH_DTYPES.items():
        if v == name:
            return k
    raise ValueError(f"torch dtype {name} has no tshard dtype; valid: "
                     + ", ".join(f"{v} ({k})" for k, v in TORCH_DTYPES.items()))


def is_torch(obj: Any) -> bool:
    """Whether obj is a torch tensor (checked without importing torch)."""
    mod = type(obj).__module__ or ""
    return (mod == "torch" or mod.startswith("torch.")) and hasattr(obj, "data_ptr")


def _bf16_bits(bits: np.ndarray) -> Any:
    """What the client sends for bf16 data given its raw 16-bit patterns (uint16): the one place
    that marks torch data as bf16 bits (tshard.bf16_bits; a plain uint16 array is integers)."""
    return bf16_bits(bits)


def _is_bf16(a: np.ndarray, dtype: "str | None") -> bool:
    """Whether an array received from the daemons holds bf16 bits: the tensor's dtype when
    known, else the client's convention for bf16 (uint16 arrays)."""
    return dtype == "bf16" if dtype is not None else a.dtype == np.dtype(np.uint16)


def _on_cpu(t, what):
    if t.device.type != "cpu":
        raise error_for(INVALID_ARGUMENT, f"{what}: the torch tensor is on {t.device}; tshard "
                                          "reads and writes " "host memory only: move it with "
                                          ".cpu() first (and back with .to())")


def _raw_view(t: Any, what: str) -> np.ndarray:
    """A numpy view of a CPU torch tensor's memory (no copy; strided when the tensor is; bf16
    as its uint16 bits)."""
    import torch
    _on_cpu(t, what)
    t = t.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if str(t.dtype).replace("torch.", "") in _F8:
        return t.view(torch.uint8).numpy()
    return t.numpy()


def from_torch(t: Any, what: str = "put") -> Any:
    """What the client sends for a CPU torch tensor: a numpy view of its memory (no copy;
    strided when the tensor is), a bf16 tensor's as ``tshard.bf16_bits`` of its bits."""
    import torch
    a = _raw_view(t, what)
    f8 = _F8.get(str(t.dtype).replace("torch.", ""))
    if f8 is not None:
        return f8_bits(a, f8)
    return _bf16_bits(a) if t.dtype == torch.bfloat16 else a


def as_array(obj: Any, what: str = "put") -> Any:
    """obj as a numpy array the client can send (see the module's text); obj itself when it is
    a numpy array or offers no array protocol (the client then refuses it)."""
    if isinstance(obj, np.ndarray):
        return obj
    if is_torch(obj):
        return from_torch(obj, what)
    if hasattr(obj, "__dlpack__"):
        dev = getattr(obj, "__dlpack_device__", None)
        if dev is not None and dev()[0] != 1:  # kDLCPU
            raise error_for(INVALID_ARGUMENT, f"{what}: the array lives on DLPack "
                                              f"device {dev()}; tshard reads host "
                                              "memory only: copy it to the CPU first")
        return np.from_dlpack(obj)
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return np.asarray(obj)
    return obj


def to_torch(a: Optional[np.ndarray], dtype: Optional[str] = None) -> Any:
    """A torch tensor sharing a's memory; dtype: the tshard dtype the data came as (bf16 arrays
    of 16-bit bits become torch.bfloat16)."""
    import torch
    if a is None:
        return None
    if not a.flags.writeable:  # torch tensors are writable: give them their own copy
        a = a.copy()
    if _is_bf16(a, dtype):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    name = TORCH_DTYPES.get(dtype) if dtype is not None else None
    if name is not None and not hasattr(torch, name):
        raise error_for(BAD_DTYPE, f"a {dtype} tensor as torch: torch {torch.__version__} has no "
                                   f"torch.{name}; get it as numpy instead"
                                   + (" (its uint8 bits)" if name in _F8 else ""))
    if name in _F8:
        return torch.from_numpy(a.view(np.uint8)).view(getattr(torch, name))
    return torch.from_numpy(a)


def out_view(t: Any, what: str = "get") -> np.ndarray:
    """A numpy view of a torch tensor the client fills (CPU, contiguous)."""
    _on_cpu(t, what)
    if not t.is_contiguous():
        raise ValueError(f"{what}: out must be a contiguous tensor (call .contiguous() and copy "
                         "back, or pass a contiguous one)")
    return _raw_view(t, what)


def dtensor_attr(t: Any) -> Attr:
    """The tshard attribute of a DTensor ``t``: its device mesh (shape, ranks, dim names), its
    placements with the chunk rule DTensor's Shard splits by, negative dims resolved on its
    global shape. ``c.create(name, dtype_name(t), t.shape, dtensor_attr(t))`` then holds on each
    rank exactly ``t.to_local()``'s elements."""
    for field in ("device_mesh", "placements", "shape"):
        if not hasattr(t, field):
            raise TypeError(f"dtensor_attr: expected a DTensor (with .{field}), got "
                            f"{type(t).__name__}")
    return from_dtensor_spec(t.device_mesh, t.placements, list(t.shape))
