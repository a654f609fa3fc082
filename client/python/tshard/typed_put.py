"""Typed puts: every put and put_slice declares its array's dtype and shape, and
the daemon refuses data that differs from the tensor (or this rank's slice), naming both,
instead of storing reinterpreted bits. ``convert=True`` asks the daemon to convert the values to
the tensor's dtype with the kernels' rules (kernels/dtype.c; README "Checked puts"): floats to
f16/bf16 round to nearest even, floats to integers truncate toward zero and saturate (NaN gives
0), integers wrap like C casts to unsigned, integers to floats round to nearest. The shape must
match either way. numpy dtypes without a tshard dtype (bool, int16, uint32, ...) are refused,
or with ``convert=True`` widened losslessly first (bool and uint8 to u8, int16 to i32, uint32 to
i64). bf16 tensors take uint16 arrays holding the bits (a uint16 array always declares bf16)."""
import numpy as np

from .errors import error_for

_WIDEN = {np.dtype(np.bool_): np.dtype(np.uint8), np.dtype(np.int16): np.dtype(np.int32),
          np.dtype(np.uint32): np.dtype(np.int64)}


def declare(array, convert, dtypes, from_numpy, what):
    """(contiguous array, declared tshard dtype name) for a put of array."""
    a = np.ascontiguousarray(array)
    dt = a.dtype
    if dt == np.dtype(np.uint16):
        return a, "bf16"  # the bits of bf16 (numpy has no bfloat16)
    if dt in from_numpy:
        return a, from_numpy[dt]
    if convert and dt in _WIDEN:
        a = a.astype(_WIDEN[dt])
        return a, from_numpy[a.dtype]
    valid = ", ".join(f"{k} ({'uint16 bits' if k == 'bf16' else v.name})"
                      for k, v in dtypes.items())
    raise error_for(4, f"{what}: the array's dtype {dt} has no tshard dtype; valid: {valid}"
                       + ("" if convert else "; convert=True widens bool, int16 and uint32"))
