"""Typed puts: what a put's array means, and bf16 data given explicitly as bits.

Every put and put_slice declares its array's dtype and shape, and the daemon refuses data that
differs from the tensor (or this rank's slice), naming both, instead of storing reinterpreted
bits. A numpy array's dtype means what it says: float32 is f32, int32 is i32, uint16 is an
unsigned integer. ``convert=True`` converts the values to the tensor's dtype: numpy dtypes
without a tshard dtype are first widened losslessly (bool to u8, int16 and uint16 to i32, uint32
and uint64 to i64), then the daemon converts as numpy's ``astype`` does (floats round to nearest
even, floats to integers truncate toward zero) and refuses the put, naming both dtypes and the
first value, when a value would not survive: an integer out of the target's range, NaN or an
infinity into an integer tensor, a finite float that would overflow to infinity. An array in
non-native byte order (``np.dtype('>f4')`` on a little-endian machine) is refused, or with
``convert=True`` swapped to native order first. The declared shape is the array's own: a 0-d
array is 0-d, never taken for a tensor of shape (1,).

numpy has no bfloat16, so bf16 data comes as its 16-bit patterns wrapped by ``bf16_bits``: the
wrapper is the only way an array is taken as bf16, and ``convert`` converts bf16 values, never
bit patterns read as integers.
"""
from typing import Any, Dict, Mapping, Tuple

import numpy as np

from .errors import BadDtypeError

__all__ = ["BF16Bits", "bf16_bits", "declare"]

_WIDEN = {np.dtype(np.bool_): np.dtype(np.uint8), np.dtype(np.int16): np.dtype(np.int32),
          np.dtype(np.uint16): np.dtype(np.int32), np.dtype(np.uint32): np.dtype(np.int64),
          np.dtype(np.uint64): np.dtype(np.int64)}


class BF16Bits:
    """bf16 data given as its bit patterns: a uint16 array whose values are bf16 bits.

    Made by :func:`bf16_bits`; a put of it declares bf16, so it fills a bf16 tensor as is, and
    with ``convert=True`` its bf16 values (not the integers of the bits) go into a tensor of
    another dtype. ``bits`` is the uint16 array; ``shape`` and ``dtype`` are its shape and the
    tshard dtype name ``"bf16"``.

    Example::

        bits = (np.float32([1.5, -2.0]).view(np.uint32) >> 16).astype(np.uint16)
        c.put("b", tshard.bf16_bits(bits))            # a bf16 tensor of shape (2,)
    """

    __slots__ = ("bits",)

    def __init__(self, bits: np.ndarray) -> None:
        """Wraps ``bits`` (a uint16 numpy array) without copying; see :func:`bf16_bits`."""
        self.bits = bits

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape of the bit array."""
        return tuple(self.bits.shape)

    @property
    def dtype(self) -> str:
        """Always ``"bf16"``: the tshard dtype these bits are."""
        return "bf16"

    def __repr__(self) -> str:
        return f"tshard.bf16_bits(shape={self.shape})"


def bf16_bits(array: Any) -> BF16Bits:
    """Says that ``array`` holds bf16 bit patterns, for a put into a bf16 tensor.

    Args:
        array: a numpy array of dtype uint16 (or int16, e.g. ``torch_tensor.view(torch.int16)
            .numpy()``, taken as the same 16 bits), any shape; it is not copied.

    Returns:
        A :class:`BF16Bits` that ``put`` and ``put_slice`` take as bf16 data.

    Raises:
        TypeError: ``array`` is not a numpy array of dtype uint16 or int16 (a float array is
            converted to bf16 by a put with ``convert=True`` instead).

    Example::

        f = np.float32([1.0, 2.5, -3.0])
        c.put("b", tshard.bf16_bits((f.view(np.uint32) >> 16).astype(np.uint16)))
    """
    if isinstance(array, BF16Bits):
        return array
    if not isinstance(array, np.ndarray):
        raise TypeError(f"bf16_bits takes a numpy array of uint16 bit patterns, not "
                        f"{type(array).__name__}")
    if array.dtype == np.dtype(np.int16):
        array = array.view(np.uint16)
    if array.dtype != np.dtype(np.uint16):
        raise TypeError(f"bf16_bits takes uint16 (or int16) bit patterns, not {array.dtype}; "
                        "to round float values to bf16, put them with convert=True into a bf16 "
                        "tensor")
    return BF16Bits(array)


def declare(array: Any, convert: bool, dtypes: Mapping[str, np.dtype],
            from_numpy: Dict[np.dtype, str], what: str) -> Tuple[np.ndarray, str]:
    """The contiguous array to send and its declared tshard dtype name, for a put of ``array``.

    Raises TypeError for something that is not a numpy array (or BF16Bits), BadDtypeError for a
    dtype that has none (with ``convert``, after widening) and for uint64 values beyond i64.
    """
    if isinstance(array, BF16Bits):
        return np.ascontiguousarray(array.bits), "bf16"
    if not isinstance(array, (np.ndarray, np.generic)):
        raise TypeError(f"{what}: the data must be a numpy array (or tshard.bf16_bits(...)), not "
                        f"{type(array).__name__}")
    a = np.ascontiguousarray(array)
    if a.shape != np.shape(array):  # ascontiguousarray makes a 0-d array 1-d: keep its shape
        a = a.reshape(np.shape(array))
    dt = a.dtype
    if not dt.isnative:
        if not convert:
            raise BadDtypeError(f"{what}: the array's dtype {dt.str} is in non-native byte order "
                                f"({'big' if dt.byteorder == '>' else 'little'}-endian); tshard "
                                f"takes this machine's: pass convert=True, or give "
                                f"array.astype('{dt.newbyteorder('=').str}')")
        a = a.astype(dt.newbyteorder("="))
        dt = a.dtype
    if dt in from_numpy:
        return a, from_numpy[dt]
    if convert and dt in _WIDEN:
        if dt == np.dtype(np.uint64) and a.size and int(a.max()) > np.iinfo(np.int64).max:
            i = int(np.argmax(a > np.iinfo(np.int64).max))
            raise BadDtypeError(f"{what}: converting uint64 to i64 would change values: element "
                                f"{i} ({int(a.reshape(-1)[i])}) is outside the range of i64, "
                                f"which holds up to 2^63-1")
        a = a.astype(_WIDEN[dt])
        return a, from_numpy[a.dtype]
    valid = ", ".join(f"{k} ({'tshard.bf16_bits(uint16 array)' if k == 'bf16' else v.name})"
                      for k, v in dtypes.items())
    hint = ""
    if dt in _WIDEN and not convert:
        hint = f"; convert=True widens {dt} to {from_numpy[_WIDEN[dt]]} losslessly"
    if dt in (np.dtype(np.uint16), np.dtype(np.int16)):
        hint += ("; if these are bf16 bit patterns (e.g. torch's t.view(torch.int16)), wrap "
                 "them with tshard.bf16_bits(array): convert=True would take them as integers")
    raise BadDtypeError(f"{what}: the array's dtype {dt} has no tshard dtype; valid: {valid}"
                        + hint)
