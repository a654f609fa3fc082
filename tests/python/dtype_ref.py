"""The reference of a put's dtype rules, from numpy and exact Python arithmetic (independent of
the kernels): which numpy dtype fills which tensor dtype as is, which values survive a
conversion, and the values a conversion stores (numpy's ``astype``; bf16 and the 8-bit floats,
which numpy lacks, by exact rounding of Python fractions: bf16 by its quantum, f8 by picking the
nearest of all 256 codes, ties to the even code; c64 and c128 take a real value as their real
part, as numpy's ``astype(np.complex64)`` does, and fit where f32 and f64 do). Shared by the
Python and CLI tests."""
import math
from fractions import Fraction

import numpy as np

TS_NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8,
            "i32": np.int32, "i64": np.int64, "u8": np.uint8, "bool": np.bool_, "i16": np.int16,
            "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "c64": np.complex64,
            "c128": np.complex128}
TENSOR_DTYPES = ["f32", "f64", "f16", "bf16", "i8", "i32", "i64", "u8", "bool", "i16", "u16",
                 "u32", "u64", "f8_e4m3", "f8_e5m2", "c64", "c128"]
BITS = ("bf16", "f8_e4m3", "f8_e5m2")  # given as bit patterns (numpy has none of them)
SOURCES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
           np.uint64, np.float16, np.float32, np.float64, "bf16", "f8_e4m3", "f8_e5m2"]
# the magnitudes from which a finite value overflows (f8_e4m3: above 464, to NaN)
FLOAT_MAX = {"f16": Fraction(65520), "bf16": Fraction(2**128 - 2**119),
             "f32": Fraction(2**128 - 2**103), "f8_e5m2": Fraction(61440)}

CANDIDATES = [0, 1, -1, 2, 7, -128, 127, 128, 255, 256, 300, -300, 65504, 65519, 65520, 70000,
              65535, -32768, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32 - 1, 2**53 + 1,
              2**62 + 2**40 + 1, 2**63 - 1, -2**63, 2**64 - 1, 1.5, -2.75, 0.1, 255.9, -0.9,
              -1.0, 1e10, 3.0e38, 3.4e38, 1e39, 1e300, -1e300, float("nan"), float("inf"),
              float("-inf"), 5e-324, 1e-40]


def bf16_bits_of(x):
    """The bf16 bit pattern of a Python number (int or float), rounded to nearest even exactly
    (no double rounding), infinity beyond the largest bf16."""
    if isinstance(x, float) and math.isnan(x):
        return 0x7FC0
    if isinstance(x, float) and math.isinf(x):
        return 0x7F80 if x > 0 else 0xFF80
    v = Fraction(x)
    sign = 0x8000 if v < 0 or (v == 0 and math.copysign(1.0, float(x)) < 0) else 0
    v = abs(v)
    if v == 0:
        return sign
    e = math.floor(math.log2(v)) if v.numerator and v.denominator else 0
    while Fraction(2) ** e > v:
        e -= 1
    while Fraction(2) ** (e + 1) <= v:
        e += 1
    e = max(e, -126)  # subnormals share the smallest normal's quantum
    q = Fraction(2) ** (e - 7)
    n = round(v / q)  # Fraction rounds half to even
    r = n * q
    if r >= 2**128:
        return sign | 0x7F80
    bits = int(np.array([float(r)], np.float32).view(np.uint32)[0]) >> 16
    return sign | bits


def bf16_value(bits):
    """The float value of bf16 bits."""
    return float(np.array([int(bits) << 16], np.uint32).view(np.float32)[0])


# ---- the 8-bit floats, field by field -------------------------------------------------------
F8 = {"f8_e4m3": (4, 3, 7), "f8_e5m2": (5, 2, 15)}  # exponent bits, mantissa bits, bias


def f8_value(code, fmt):
    """The value of an f8 code: a float (NaN for NaN codes, +-inf for e5m2's)."""
    ebits, mbits, bias = F8[fmt]
    e, m = (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    sign = -1.0 if code & 0x80 else 1.0
    if fmt == "f8_e4m3" and e == 15 and m == 7:
        return float("nan")
    if fmt == "f8_e5m2" and e == 31:
        return sign * float("inf") if m == 0 else float("nan")
    if e == 0:
        return sign * float(Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias))
    return sign * float((1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias))


def f8_bits_of(x, fmt):
    """The f8 code of a Python number: the nearest finite code (ties to the even code); beyond
    the largest, f8_e5m2 gives infinity from 61440 and f8_e4m3 (no infinities) NaN above 464."""
    e4m3 = fmt == "f8_e4m3"
    if isinstance(x, float) and math.isnan(x):
        return 0x7F if e4m3 else 0x7E
    neg = x < 0 or (x == 0 and math.copysign(1.0, float(x)) < 0)
    sign = 0x80 if neg else 0
    if isinstance(x, float) and math.isinf(x):
        return sign | (0x7F if e4m3 else 0x7C)
    v = abs(Fraction(x))
    if (e4m3 and v > 464) or (not e4m3 and v >= 61440):
        return sign | (0x7F if e4m3 else 0x7C)
    best = None
    for c in range(0x80):
        y = f8_value(c, fmt)
        if math.isnan(y) or math.isinf(y):
            continue
        d = abs(Fraction(y) - v)
        if best is None or d < best[0] or (d == best[0] and c % 2 == 0):
            best = (d, c)
    return sign | best[1]


def source_values(src):
    """The candidates representable exactly in a source dtype, as (numpy array, Python values)."""
    if src == "bf16":
        vals = sorted({bf16_bits_of(x) for x in CANDIDATES})
        return np.array(vals, np.uint16), [bf16_value(b) for b in vals]
    if src in F8:  # every code, NaNs once
        vals = [c for c in range(256) if not math.isnan(f8_value(c, src)) or c == 0x7F]
        return np.array(vals, np.uint8), [f8_value(c, src) for c in vals]
    dt = np.dtype(src)
    out = []
    for x in CANDIDATES:
        if dt.kind == "b":
            if x in (0, 1) and not isinstance(x, float):
                out.append(bool(x))
            continue
        if dt.kind in "iu":
            info = np.iinfo(dt)
            if isinstance(x, int) and info.min <= x <= info.max:
                out.append(x)
            continue
        with np.errstate(all="ignore"):
            y = np.array([x], dt)[0]
        if (isinstance(x, float) and math.isnan(x)) or float(y) == x:
            out.append(x)
    return np.array(out, dt), out


def fits(x, target):
    """Whether value x survives conversion to a tensor dtype (x: Python int, float or bool):
    integers must be in range (floats truncated toward zero; NaN and infinities have no integer
    value), bool takes 0 and 1 only, finite values must not overflow a float dtype to infinity
    (f8_e4m3 has none: an infinity does not survive, and finite values above 464 become NaN)."""
    x = int(x) if isinstance(x, bool) else x
    nonfinite = isinstance(x, float) and not math.isfinite(x)
    target = {"c64": "f32", "c128": "f64"}.get(target, target)  # the real part's dtype
    if target == "f64":
        return True
    if target == "bool":
        return not (isinstance(x, float) and math.isnan(x)) and x in (0, 1)
    if target == "f8_e4m3":
        return (isinstance(x, float) and math.isnan(x)) or (not nonfinite and abs(Fraction(x)) <= 464)
    if target in FLOAT_MAX:
        return nonfinite or abs(Fraction(x)) < FLOAT_MAX[target]
    if nonfinite:
        return False
    info = np.iinfo(TS_NUMPY[target])
    return info.min <= math.trunc(x) <= info.max


def convert(values, target, src):
    """The array a put of fitting values stores: numpy's astype, bf16 and f8 by exact rounding."""
    if target == "bf16":
        return np.array([bf16_bits_of(int(v) if isinstance(v, bool) else v) for v in values],
                        np.uint16)
    if target in F8:
        return np.array([f8_bits_of(int(v) if isinstance(v, bool) else v, target)
                         for v in values], np.uint8)
    if src in BITS:  # their values are exact in f64
        a = np.array(values, np.float64)
    else:
        a = np.array(values, np.dtype(src))
    with np.errstate(all="ignore"):
        return a.astype(TS_NUMPY[target])


def same(got, want, dtype=None):
    """Equal arrays, NaN equal to NaN (dtype bf16, f8_e4m3, f8_e5m2: bits compared as values,
    any NaN pattern equal to any other)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if dtype == "bf16" or dtype in F8:
        val = bf16_value if dtype == "bf16" else lambda b: f8_value(int(b), dtype)
        g = np.array([val(b) for b in got]), np.array([val(b) for b in want])
        return np.array_equal(g[0], g[1], equal_nan=True)
    return np.array_equal(got, want, equal_nan=got.dtype.kind in "fc")


def exact_name(src):
    """The tshard dtype a source fills without conversion, or None."""
    if src in BITS:
        return src
    for k, v in TS_NUMPY.items():
        if np.dtype(v) == np.dtype(src):
            return k
    return None
