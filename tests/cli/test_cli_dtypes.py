#!/usr/bin/python3
"""The CLI takes the same dtypes and conversions as the Python package, against real daemons (2
ranks): every pair of a source .npy dtype (bool, int8..uint64, float16..float64, uint16 bf16 bits
with --bf16-bits, uint8 f8 codes with --dtype f8_e4m3 / f8_e5m2) and a tensor dtype (the 17 of
them), with and without --convert, stores exactly what the
Python put stores (numpy's astype, from the shared reference) or is refused by both, naming both
dtypes and leaving the tensor unchanged; a uint16 file is numbers unless --bf16-bits says it holds
bf16 bit patterns, a uint8 file numbers unless --dtype says f8 codes; every --dtype spelling of create is the Python package's; put on a missing
tensor suggests --attr.

usage: test_cli_dtypes.py BUILD_BIN_DIR"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402
from dtype_ref import (BITS, SOURCES, TENSOR_DTYPES, convert, exact_name, fits,  # noqa: E402
                       same, source_values)
from harness import Daemons  # noqa: E402

import tshard  # noqa: E402

bin_dir = sys.argv[1]
tshard_bin = os.path.join(bin_dir, "tshard")
check = Checks()
ATTR = "mesh=[2] placements=[S(0)]"


def src_name(src):
    return src if src in BITS else np.dtype(src).name


def as_put(src, arr):
    """The Python put's data for a source: bf16 and f8 bits wrapped."""
    if src == "bf16":
        return tshard.bf16_bits(arr)
    return tshard.f8_bits(arr, src[3:]) if src in BITS else arr


with Daemons(bin_dir, 2) as d, tempfile.TemporaryDirectory() as tmp, d.connect(0) as c:
    def cli(*args):
        return subprocess.run([tshard_bin, *args, "--socket", d.socket(0)], capture_output=True,
                              text=True, timeout=60)

    def py_put(name, src, arr, conv):
        """What the Python put does with the same data: (stored array or None, error)."""
        try:
            c.put(name, as_put(src, arr), convert=conv)
            return c.get(name), None
        except tshard.TshardError as e:
            return None, e

    names_used = []  # tensor names that name no dtype: a message's dtypes are the ones checked
    for tdt in TENSOR_DTYPES:
        for src in SOURCES:
            arr, vals = source_values(src)
            path = os.path.join(tmp, "data.npy")
            bits = (["--bf16-bits"] if src == "bf16" else ["--dtype", src] if src in BITS else [])
            for conv in (False, True):
                keep = [i for i, v in enumerate(vals) if not conv or fits(v, tdt)]
                bad = [i for i in range(len(vals)) if i not in keep]
                what = f"tshard put {src_name(src)} file into {tdt}" + (" --convert" if conv
                                                                       else "")
                name = f"x{len(names_used)}"
                names_used.append(name)
                sub = arr[keep]
                c.create(name, tdt, sub.shape, ATTR)
                before = c.get(name)
                np.save(path, sub)
                r = cli("put", name, path, *bits, *(["--convert"] if conv else []))
                accepted = exact_name(src) == tdt or conv
                if accepted:
                    want = sub if exact_name(src) == tdt else convert([vals[i] for i in keep],
                                                                      tdt, src)
                    got = c.get(name)
                    check(r.returncode == 0 and same(got, want, tdt),
                          f"{what}: rc {r.returncode} {r.stderr!r}, stored {got.tolist()}, "
                          f"want {want.tolist()}")
                    zeros = np.zeros(sub.shape, tshard.DTYPES[tdt])
                    c.put(name, as_put(tdt, zeros) if tdt in BITS else zeros)
                    py, _ = py_put(name, src, sub, conv)
                    check(py is not None and same(py, got, tdt), f"{what}: Python stores {py}")
                else:
                    said = f"is {exact_name(src)}["
                    check(r.returncode == 1 and said in r.stderr and f"is {tdt}[" in r.stderr and
                          "--convert" in r.stderr, f"{what}: rc {r.returncode}, {r.stderr!r}")
                    check(same(c.get(name), before, tdt), f"{what}: the tensor changed")
                    py, e = py_put(name, src, sub, conv)
                    check(py is None and isinstance(e, tshard.BadDtypeError),
                          f"{what}: Python accepts what the CLI refuses ({e})")
                c.drop(name)
                for i in bad[-1:]:  # a value that would not survive, with a good one
                    pair = arr[[keep[0] if keep else 0, i]] if keep else arr[[i, i]]
                    name = f"b{len(names_used)}"
                    names_used.append(name)
                    c.create(name, tdt, (2,), ATTR)
                    before = c.get(name)
                    np.save(path, pair)
                    r = cli("put", name, path, *bits, "--convert")
                    said = f"converting {exact_name(src)} to {tdt}"
                    check(r.returncode == 1 and "would change values" in r.stderr
                          and said in r.stderr,
                          f"{what}: value {vals[i]!r}: rc {r.returncode} {r.stderr!r}")
                    check(same(c.get(name), before, tdt), f"{what}: value {vals[i]!r} changed it")
                    py, e = py_put(name, src, pair, True)
                    check(isinstance(e, tshard.BadDtypeError),
                          f"{what}: value {vals[i]!r}: Python accepts it")
                    c.drop(name)

    # a uint16 file is numbers; bf16 bits only when said
    ids = np.array([1, 2, 300, 65535], np.uint16)
    path = os.path.join(tmp, "ids.npy")
    np.save(path, ids)
    c.create("ids", "bf16", (4,), ATTR)
    r = cli("put", "ids", path)
    check(r.returncode == 1 and "--bf16-bits" in r.stderr and "--convert" in r.stderr,
          f"uint16 file into bf16 without a flag: {r.stderr!r}")
    r = cli("put", "ids", path, "--convert")
    want = convert([1, 2, 300, 65535], "bf16", np.uint16)
    check(r.returncode == 0 and np.array_equal(c.get("ids"), want),
          f"uint16 numbers into bf16 with --convert: {c.get('ids')} vs {want}")
    r = cli("put", "ids", path, "--bf16-bits")
    check(r.returncode == 0 and np.array_equal(c.get("ids"), ids), "uint16 bits with --bf16-bits")
    np.save(path, np.zeros(4, np.float32))
    r = cli("put", "ids", path, "--bf16-bits")
    check(r.returncode == 1 and "--bf16-bits" in r.stderr and "float32" in r.stderr,
          f"--bf16-bits on a float32 file: {r.stderr!r}")
    c.drop("ids")

    # one table of dtype spellings: the CLI's create takes the Python package's
    for spelling, want in tshard.DTYPE_SPELLINGS.items():
        r = cli("create", "sp", "--dtype", spelling, "--shape", "2", "--attr", ATTR)
        check(r.returncode == 0 and c.describe("sp")["dtype"] == want,
              f"create --dtype {spelling}: {r.stderr!r}")
        if r.returncode == 0:
            c.drop("sp")
    r = cli("create", "sp", "--dtype", "float128", "--shape", "2", "--attr", ATTR)
    check(r.returncode == 2 and "float32" in r.stderr and "bfloat16" in r.stderr,
          f"an unknown spelling lists the valid ones: {r.stderr!r}")

    # put on a missing tensor suggests --attr
    np.save(path, np.zeros((4, 2), np.int16))
    r = cli("put", "missing", path)
    check(r.returncode == 1 and "--attr" in r.stderr and "missing" in r.stderr,
          f"put on a missing tensor: {r.stderr!r}")
    r = cli("put", "made", path, "--attr", ATTR)  # an int16 file makes an i16 tensor
    check(r.returncode == 0 and c.describe("made")["dtype"] == "i16"
          and np.array_equal(c.get("made"), np.zeros((4, 2), np.int16)),
          f"an int16 file with --attr: {r.stderr!r}")
    c.drop("made")
    # a uint8 file into an f8 tensor: numbers unless --dtype says codes
    codes = np.array([0x38, 0xb8, 0x7b, 0x01], np.uint8)
    np.save(path, codes)
    c.create("q", "f8_e5m2", (4,), ATTR)
    r = cli("put", "q", path)
    check(r.returncode == 1 and "--dtype f8_e5m2" in r.stderr and "--convert" in r.stderr,
          f"uint8 file into f8_e5m2 without --dtype: {r.stderr!r}")
    r = cli("put", "q", path, "--dtype", "f8_e5m2")
    check(r.returncode == 0 and np.array_equal(c.get("q"), codes), f"f8 codes: {r.stderr!r}")
    r = cli("get", "q", os.path.join(tmp, "q.npy"))
    check(r.returncode == 0 and "f8_e5m2 as uint8 bits" in r.stdout
          and np.array_equal(np.load(os.path.join(tmp, "q.npy")), codes),
          f"get of f8_e5m2: {r.stdout!r} {r.stderr!r}")
    c.drop("q")
    check(c.list() == [], f"tensors left: {c.list()}")
check.finish()
