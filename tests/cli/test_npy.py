#!/usr/bin/python3
"""The CLI's .npy reader and writer against numpy's own: every supported dtype, format versions
1.0, 2.0 and 3.0, C and Fortran order, big-endian data, 0-d and empty arrays; bf16 and the 8-bit
floats as the bits of uint16 and uint8 files; complex64 and complex128 as c64 and c128; files
written by the CLI are read back by numpy and compared; unsupported files get clear errors.

usage: test_npy.py BUILD_BIN_DIR"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from numpy.lib import format as npformat

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402

helper = os.path.join(sys.argv[1], "tshard-npy-roundtrip")
check = Checks()


def roundtrip(arr, version=None, bits=None):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.npy"), os.path.join(d, "out.npy")
        with open(src, "wb") as f:
            npformat.write_array(f, arr, version=version)
        r = subprocess.run([helper, src, dst] + ([bits] if bits else []),
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return None, r.stderr
        return np.load(dst), r.stdout


rng = np.random.default_rng(7)
dtypes = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_,
          np.int16, np.uint16, np.uint32, np.uint64, np.complex64, np.complex128]
TS_NAMES = {np.bool_: "bool", np.int16: "i16", np.uint16: "u16", np.uint32: "u32", np.uint64: "u64",
            np.complex64: "c64", np.complex128: "c128"}
shapes = [(), (0,), (5,), (3, 4), (2, 3, 4), (2, 0, 3), (1, 1, 1, 7)]
for dt in dtypes:
    for shape in shapes:
        a = (rng.standard_normal(shape) * 100).astype(dt)
        if dt in (np.uint32, np.uint64):  # the top of the range too
            a = rng.integers(0, np.iinfo(dt).max, size=shape, dtype=dt, endpoint=True)
        if dt in (np.complex64, np.complex128):  # both parts (big-endian: each part swapped)
            a = (a + 1j * rng.standard_normal(shape) * 100).astype(dt)
        for version in [(1, 0), (2, 0), (3, 0)]:
            b, out = roundtrip(a, version)
            check(b is not None and b.dtype == a.dtype and b.shape == a.shape
                  and np.array_equal(a, b, equal_nan=True)
                  and (dt not in TS_NAMES or out.startswith(TS_NAMES[dt] + " [")),
                  f"{np.dtype(dt).name} {shape} v{version}: {out}")
        if len(shape) >= 2:  # Fortran order is reordered to C order
            f = np.asfortranarray(a)
            b, out = roundtrip(f)
            check(b is not None and b.flags.c_contiguous and np.array_equal(a, b),
                  f"fortran {np.dtype(dt).name} {shape}: {out}")
        if np.dtype(dt).itemsize > 1:  # big-endian data is byte-swapped
            b, out = roundtrip(a.astype(np.dtype(dt).newbyteorder(">")))
            check(b is not None and b.dtype == np.dtype(dt) and np.array_equal(a, b),
                  f"big-endian {np.dtype(dt).name} {shape}: {out}")

# bf16 travels as uint16 bits
bits = rng.integers(0, 65535, size=(4, 5), dtype=np.uint16)
b, out = roundtrip(bits, bits="bf16")
check(b is not None and b.dtype == np.uint16 and np.array_equal(bits, b) and out.startswith("bf16"),
      f"bf16 as uint16: {out}")
# and the 8-bit floats as uint8 (or int8) bits, every code
codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
for f8 in ("f8_e4m3", "f8_e5m2"):
    for src in (codes, codes.view(np.int8)):
        b, out = roundtrip(src, bits=f8)
        check(b is not None and b.dtype == np.uint8 and np.array_equal(codes, b)
              and out.startswith(f8 + " [16,16]"), f"{f8} as {src.dtype} bits: {out}")
# a header so long that numpy needs format 2.0 (many dims are not possible: use a long shape)
b, out = roundtrip(np.arange(8, dtype=np.int32).reshape(1, 1, 1, 1, 1, 1, 1, 8))
check(b is not None and b.shape == (1,) * 7 + (8,), f"8-dim: {out}")

# errors: unsupported dtypes, not a .npy file, truncated data, missing file
with tempfile.TemporaryDirectory() as d:
    def expect_error(path, needle):
        r = subprocess.run([helper, path, os.path.join(d, "o.npy")], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 1 and needle in r.stderr, f"error for {path}: {r.stderr!r}")

    np.save(os.path.join(d, "c.npy"), np.zeros(3, dtype="<M8[s]"))  # datetime64: none in tshard
    expect_error(os.path.join(d, "c.npy"), "not supported")
    r = subprocess.run([helper, os.path.join(d, "c.npy"), os.path.join(d, "o.npy")],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "uint64" in r.stderr and "bool" in r.stderr
          and "f8_e4m3" in r.stderr and "complex128" in r.stderr,
          f"the valid dtypes listed: {r.stderr!r}")
    np.save(os.path.join(d, "i4.npy"), np.zeros(3, dtype=np.int32))
    for f8 in ("f8_e4m3", "f8_e5m2"):  # f8 bits come from 8-bit files only
        r = subprocess.run([helper, os.path.join(d, "i4.npy"), os.path.join(d, "o.npy"), f8],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "uint8" in r.stderr and "int32" in r.stderr
              and f8 in r.stderr, f"{f8} from int32: {r.stderr!r}")
    with open(os.path.join(d, "junk.npy"), "wb") as f:
        f.write(b"hello world, not numpy")
    expect_error(os.path.join(d, "junk.npy"), "not a .npy file")
    np.save(os.path.join(d, "t.npy"), np.arange(100, dtype=np.float64))
    with open(os.path.join(d, "t.npy"), "r+b") as f:
        f.truncate(200)
    expect_error(os.path.join(d, "t.npy"), "less data")
    expect_error(os.path.join(d, "missing.npy"), "cannot open")

check.finish()
