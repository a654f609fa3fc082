"""Typed puts: what a put's array means, and bf16 and f8 data given explicitly as bits.

Every put and put_slice declares its array's dtype and shape, and the daemon refuses data that
differs from the tensor (or this rank's slice), naming both, instead of storing reinterpreted
bits. A numpy array's dtype means what it says: float32 is f32, int32 is i32, uint16 is u16, bool
is bool. ``convert=True`` converts the values to the tensor's dtype as numpy's ``astype`` does
(floats round to nearest even, floats to integers truncate toward zero, nonzero to bool is 1),
and the daemon refuses the put, naming both dtypes and the first value, when a value would not
survive: an integer out of the target's range, NaN or an infinity into an integer tensor, a
value other than 0 and 1 into bool, a finite float that would overflow to infinity (or, in
f8_e4m3, which has none, to NaN). An array in
non-native byte order (``np.dtype('>f4')`` on a little-endian machine) is refused, or with
``convert=True`` swapped to native order first. The declared shape is the array's own: a 0-d
array is 0-d, never taken for a tensor of shape (1,).

numpy has no bfloat16 and no 8-bit floats, so bf16 data comes as its 16-bit patterns wrapped by
``bf16_bits``, and f8_e4m3 / f8_e5m2 data as its 8-bit patterns wrapped by ``f8_bits``: a wrapper
is the only way an array is taken as bf16 or f8, and ``convert`` converts their values, never
bit patterns read as integers.
"""
from typing import Any, Dict, Mapping, Tuple

import numpy as np

from .errors import BadDtypeError

__all__ = ["BF16Bits", "bf16_bits", "F8Bits", "f8_bits", "declare"]


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
    return BF16Bits(_bit_patterns(array, "bf16_bits", np.uint16, np.int16, "a bf16"))


def _bit_patterns(array: Any, what: str, unsigned: type, signed: type,
                  tensor: str) -> np.ndarray:
    """``array`` as unsigned bit patterns (the signed integers of the same width viewed as them),
    or TypeError naming what is valid."""
    name = np.dtype(unsigned).name
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{what} takes a numpy array of {name} bit patterns, not "
                        f"{type(array).__name__}")
    if array.dtype == np.dtype(signed):
        array = array.view(unsigned)
    if array.dtype != np.dtype(unsigned):
        raise TypeError(f"{what} takes {name} (or {np.dtype(signed).name}) bit patterns, not "
                        f"{array.dtype}; to round float values to {tensor.split()[1]}, put "
                        f"them with convert=True into {tensor} tensor")
    return array


class F8Bits:
    """8-bit float data given as its bit patterns: a uint8 array of f8_e4m3 or f8_e5m2 codes.

    Made by :func:`f8_bits`; a put of it declares its dtype (``"f8_e4m3"`` or ``"f8_e5m2"``),
    so it fills a tensor of that dtype as is, and with ``convert=True`` its values (not the
    integers of the codes) go into a tensor of another dtype. ``bits`` is the uint8 array;
    ``shape`` its shape, ``dtype`` the tshard dtype name.

    Example::

        c.put("q", tshard.f8_bits(np.array([0x38, 0xb8], np.uint8), "e4m3"))  # [1.0, -1.0]
    """

    __slots__ = ("bits", "dtype")

    def __init__(self, bits: np.ndarray, dtype: str) -> None:
        """Wraps ``bits`` (a uint8 numpy array) without copying; see :func:`f8_bits`."""
        self.bits = bits
        self.dtype = dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape of the bit array."""
        return tuple(self.bits.shape)

    def __repr__(self) -> str:
        return f"tshard.f8_bits(shape={self.shape}, {self.dtype[3:]!r})"


_F8_FORMATS = {"e4m3": "f8_e4m3", "e5m2": "f8_e5m2", "f8_e4m3": "f8_e4m3", "f8_e5m2": "f8_e5m2"}


def f8_bits(array: Any, format: str) -> F8Bits:
    """Says that ``array`` holds 8-bit float codes, for a put into an f8_e4m3 or f8_e5m2 tensor.

    Args:
        array: a numpy array of dtype uint8 (or int8, taken as the same 8 bits; e.g.
            ``torch_tensor.view(torch.uint8).numpy()``), any shape; it is not copied.
        format: ``"e4m3"`` (E4M3FN: bias 7, no infinities, 0x7F and 0xFF are NaN, largest 448;
            torch.float8_e4m3fn) or ``"e5m2"`` (bias 15, IEEE-like; torch.float8_e5m2).

    Returns:
        An :class:`F8Bits` that ``put`` and ``put_slice`` take as f8 data.

    Raises:
        TypeError: ``array`` is not a numpy array of dtype uint8 or int8.
        ValueError: ``format`` is neither ``"e4m3"`` nor ``"e5m2"``.

    Example::

        codes = np.array([0x38, 0x40, 0x7e], np.uint8)   # 1.0, 2.0, 448.0 in e4m3
        c.put("q", tshard.f8_bits(codes, "e4m3"))
    """
    dt = _F8_FORMATS.get(format) if isinstance(format, str) else None
    if dt is None:
        raise ValueError(f"f8_bits: format {format!r}; valid are 'e4m3' (float8_e4m3fn) and "
                         "'e5m2' (float8_e5m2)")
    if isinstance(array, F8Bits):
        array = array.bits
    return F8Bits(_bit_patterns(array, "f8_bits", np.uint8, np.int8, f"an {dt}"), dt)


def declare(array: Any, convert: bool, dtypes: Mapping[str, np.dtype],
            from_numpy: Dict[np.dtype, str], what: str) -> Tuple[np.ndarray, str]:
    """The contiguous array to send and its declared tshard dtype name, for a put of ``array``.

    Raises TypeError for something that is not a numpy array (or BF16Bits, F8Bits), and
    BadDtypeError for a dtype that has none.
    """
    if isinstance(array, BF16Bits):
        return np.ascontiguousarray(array.bits), "bf16"
    if isinstance(array, F8Bits):
        return np.ascontiguousarray(array.bits), array.dtype
    if not isinstance(array, (np.ndarray, np.generic)):
        raise TypeError(f"{what}: the data must be a numpy array (or tshard.bf16_bits(...), "
                        f"tshard.f8_bits(...)), not {type(array).__name__}")
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
    wrapped = {"bf16": "tshard.bf16_bits(uint16 array)",
               "f8_e4m3": "tshard.f8_bits(uint8 array, 'e4m3')",
               "f8_e5m2": "tshard.f8_bits(uint8 array, 'e5m2')"}
    valid = ", ".join(f"{k} ({wrapped.get(k, v.name)})" for k, v in dtypes.items())
    raise BadDtypeError(f"{what}: the array's dtype {dt} has no tshard dtype; valid: {valid}")
