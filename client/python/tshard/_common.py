"""What every family of the client's operations shares, below all of them: the dtypes and
their spellings, the checks of names, tokens and the other arguments, the wire forms of
attributes and layouts, and the result arrays a get fills. It imports no family module.
"""
import os
from typing import Dict, Iterable, Union

import numpy as np

from . import torch as _tt
from . import tshard_pb2 as pb
from ._limits import NAME_MAX_BYTES, RESERVED_PREFIX, TOKEN_MAX, TOKEN_MIN
from ._status import AUTH, BAD_DTYPE, BAD_SHAPE, INVALID_ARGUMENT
from .attr import Attr
from .errors import error_for
from .typed_put import BF16Bits, F8Bits

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

AttrLike = Union[Attr, str]  # an attribute: an Attr or its text
ArrayLike = Union[np.ndarray, BF16Bits, F8Bits]  # put data: a numpy array, or bf16/f8 bits


def _check_name(name, what="tensor name"):
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error_for(INVALID_ARGUMENT, f"{what} is not valid UTF-8 text at character {e.start} "
                                          f"(a lone surrogate); names are UTF-8 text") from None
    if not 1 <= len(raw) <= NAME_MAX_BYTES:
        raise error_for(INVALID_ARGUMENT, f"{what} of {len(raw)} bytes; names have 1 to "
                                          f"{NAME_MAX_BYTES} bytes of UTF-8")
    # printable ASCII (the common case) has none of the control characters looked for below
    for i, ch in enumerate("" if name.isascii() and name.isprintable() else name):
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise error_for(INVALID_ARGUMENT, f"{what} has a control character "
                                              f"(U+{ord(ch):04X}) at character {i}; "
                                              "names are UTF-8 without control characters")
    if name.startswith(RESERVED_PREFIX):
        raise error_for(INVALID_ARGUMENT, f"{what} {name!r}: the prefix "
                                          f"{RESERVED_PREFIX!r} is reserved")
    return name


def _check_token(token, where="token"):
    if not isinstance(token, str) or not TOKEN_MIN <= len(token) <= TOKEN_MAX:
        n = len(token) if isinstance(token, str) else 0
        raise error_for(AUTH, f"{where} of {n} characters; tokens have {TOKEN_MIN} to {TOKEN_MAX}")
    for i, ch in enumerate(token):
        if not 0x20 <= ord(ch) <= 0x7E:
            raise error_for(AUTH, f"{where} has U+{ord(ch):04X} at position {i}; tokens are "
                                  f"printable ASCII")
    return token



def _out_bytes(out, dtype, what, shape, name):
    """The caller's result array as flat writable bytes: C-contiguous, of the tensor's dtype in
    native byte order and of exactly ``shape`` (the tensor's or the slice's; None: 1-d, the flat
    elements of another layout, whose count the answer checks), never another shape of the same
    byte count."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{what}: out must be a numpy array, not {type(out).__name__}")
    if out.dtype != dtype and out.dtype.newbyteorder("=") == dtype:
        raise error_for(BAD_DTYPE, f"{what}: out has dtype {out.dtype.str} (non-native "
                                   f"byte order); '{name}' is received in this machine's "
                                   f"byte order ({dtype.str}): give an array of dtype "
                                   f"{dtype.name}, and .astype('{out.dtype.str}') the "
                                   "result if that byte order is needed")
    if out.dtype != dtype:
        raise error_for(BAD_DTYPE, f"{what}: out has dtype {out.dtype}; '{name}' needs {dtype} "
                                   "(the tensor's dtype: out is filled as is, never converted)")
    if shape is None and out.ndim != 1:
        raise error_for(BAD_SHAPE, f"{what}: out has shape {tuple(out.shape)}; a slice in another "
                                   f"layout comes as its flat elements: give a 1-d array")
    if shape is not None and tuple(out.shape) != tuple(shape):
        raise error_for(BAD_SHAPE, f"{what}: out has shape {tuple(out.shape)} but '{name}' is "
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
    raise error_for(BAD_DTYPE, f"dtype {dtype!r}: valid are {valid}, or the matching numpy dtypes "
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
        raise error_for(INVALID_ARGUMENT, f"{what} of no tensors: give names (exact, or globs such "
                                          "as 'layers.*.weight') or prefix=..., or all=True to "
                                          "save every tensor")
    if sum(asked) > 1:
        raise error_for(INVALID_ARGUMENT, f"{what}: give one of names, "
                                          "prefix= or all=True, not several")
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



def _nothing(resp):
    """The result of operations that answer nothing but their status."""
    return None



def _swapped_note(array, sent, decl):
    """What a refusal of a byte-swapped put adds: the array's own byte order, which the daemon
    never saw."""
    orig = getattr(array, "dtype", None)
    if orig is None or isinstance(array, (BF16Bits, F8Bits)) or np.dtype(orig) == sent.dtype:
        return ""
    return f" (the array's {np.dtype(orig).str} was swapped to this machine's byte order)"



def _put_error(resp, note):
    """The exception of a put's refusal; a refused conversion also names the array's dtype."""
    return error_for(resp.status, resp.message + (note if resp.status == BAD_DTYPE else ""))



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



def _describe_dict(d):
    return {"name": d.name, "dtype": d.dtype, "shape": list(d.shape), "attr": d.attr.text,
            "layout": d.layout.tag or ROW_MAJOR,
            "ranks": [{"rank": r.rank, "bytes": r.bytes, "lo": list(r.lo), "hi": list(r.hi)}
                      for r in d.ranks]}
