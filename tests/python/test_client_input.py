#!/usr/bin/python3
"""The Python client's puts and gets take only arrays that match exactly, against real daemons
(2 ranks), through each data path (direct, shared segment, the stream) and with wait=False:

1. get(out=) and get_slice(out=) require the exact shape of the tensor or slice (the flat elements,
   1-d, for another layout): an array of another shape with the same byte count is refused naming
   both shapes, and left as it was; one of the right shape is filled with what get returns.
2. A 0-d array is 0-d: a put of it into a (1,) tensor (put, put_slice, put_many, wait=False) is
   refused naming both shapes, the tensor unchanged; a put of a (1,) array is the reference.
3. Non-native byte order (big-endian here): without convert a put is refused saying how
   (convert=True, or .astype with the native dtype), the tensor unchanged; with convert=True the
   values stored are numpy's astype of them (f32, f64 into f32, i2 converted into i32, put_slice,
   put_many); a get into a big-endian out= is refused naming its byte order.

usage: test_client_input.py BUILD_BIN_DIR"""
import os
import sys

import numpy as np

import tshard
from checks import Checks, error_of
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
BAD_DTYPE, BAD_SHAPE = tshard.errors.BadDtypeError.status, tshard.errors.BadShapeError.status
NATIVE = "<" if sys.byteorder == "little" else ">"
SWAPPED = ">" if NATIVE == "<" else "<"


def refused(fn, status, needles, what):
    """fn() raises the tshard error of that status, its text holding every needle."""
    st, msg = error_of(fn)
    check(st == status and all(n in msg for n in needles),
          f"{what}: want {status} naming {needles}, got {st}: {msg}")


def fut(call):
    """call(wait=False)'s Future, waited for (the asynchronous path)."""
    return lambda: call(wait=False).result(timeout=60)


with Daemons(bin_dir, 2) as d:
    clients = {"direct": d.connect(0), "stream": tshard.connect(socket=d.socket(0), shm=False)}
    os.environ["TSHARD_DIRECT"] = "0"  # the shared segment, not the client's own memory
    clients["segment"] = d.connect(0)
    del os.environ["TSHARD_DIRECT"]
    c = clients["direct"]
    c1 = d.connect(1)
    ref = (np.arange(24, dtype=np.float32) * 1.5 - 7).reshape(4, 6)
    c.create("w", "f32", (4, 6), "mesh=[2] placements=[S(0)]")
    c.put("w", ref)

    # ---- 1. out= of the exact shape only
    for path, cc in clients.items():
        for shape in [(6, 4), (24,), (2, 12), (1, 4, 6)]:
            out = np.full(shape, -1.0, np.float32)
            refused(lambda: cc.get("w", out=out), BAD_SHAPE, [str(shape), "(4, 6)"],
                    f"1. {path}: get into out of shape {shape}")
            check(np.all(out == -1.0), f"1. {path}: the refused out {shape} is as it was")
            out = np.full(shape, -1.0, np.float32)
            refused(fut(lambda wait: cc.get("w", out=out, wait=wait)), BAD_SHAPE,
                    [str(shape), "(4, 6)"], f"1. {path}: get(wait=False) into out of {shape}")
            check(np.all(out == -1.0), f"1. {path}: the refused out {shape} (async) as it was")
        out = np.full((4, 6), -1.0, np.float32)
        got = cc.get("w", out=out)
        check(np.array_equal(out, ref) and np.array_equal(got, ref),
              f"1. {path}: get into out of the tensor's shape")
        out = np.full((4, 6), -1.0, np.float32)
        check(np.array_equal(fut(lambda wait: cc.get("w", out=out, wait=wait))(), ref)
              and np.array_equal(out, ref), f"1. {path}: get(wait=False) into out")
        box = ref[:2]  # rank 0's slice
        for shape in [(6, 2), (12,)]:
            out = np.full(shape, -1.0, np.float32)
            refused(lambda: cc.get_slice("w", out=out), BAD_SHAPE, [str(shape), "(2, 6)"],
                    f"1. {path}: get_slice into out of shape {shape}")
            check(np.all(out == -1.0), f"1. {path}: the refused slice out {shape} as it was")
        out = np.full((2, 6), -1.0, np.float32)
        cc.get_slice("w", out=out)
        check(np.array_equal(out, box), f"1. {path}: get_slice into out of the box's shape")
    # another layout (synchronous only: a connection that had no wait=False): flat, 1-d
    with d.connect(0) as cl:
        flat = cl.get_slice("w", layout="Ba4b")
        out = np.full(flat.shape, -1.0, np.float32)
        cl.get_slice("w", layout="Ba4b", out=out)
        check(flat.ndim == 1 and np.array_equal(out, flat),
              "1. get_slice in a layout into a 1-d out")
        out2 = np.full((1,) + flat.shape, -1.0, np.float32)
        refused(lambda: cl.get_slice("w", layout="Ba4b", out=out2), BAD_SHAPE, ["1-d"],
                "1. get_slice in a layout into a 2-d out")
    # a rank that holds no element: its (empty) box shape exactly
    c.create("rag", "f32", (1, 3), "mesh=[2] placements=[S(0)]")
    check(c1.get_slice("rag", out=np.empty((0, 3), np.float32)).shape == (0, 3),
          "1. an empty part into out of its box shape")
    refused(lambda: c1.get_slice("rag", out=np.empty((3, 0), np.float32)), BAD_SHAPE,
            ["(3, 0)", "(0, 3)"], "1. an empty part into out of another empty shape")

    # ---- 2. a 0-d array is not a (1,) tensor
    c.create("one", "f32", (1,), "mesh=[2] placements=[R]")
    c.put("one", np.array([2.5], np.float32))
    scalars = {"np.float32(7)": np.float32(7), "np.array(7.0, f32)": np.array(7.0, np.float32)}
    for label, x in scalars.items():
        for path, cc in clients.items():
            refused(lambda: cc.put("one", x), BAD_SHAPE, ["f32[]", "f32[1]"],
                    f"2. {path}: put of {label} into a (1,) tensor")
            refused(fut(lambda wait: cc.put("one", x, wait=wait)), BAD_SHAPE, ["f32[]", "f32[1]"],
                    f"2. {path}: put(wait=False) of {label} into a (1,) tensor")
        refused(lambda: c.put_slice("one", x), BAD_SHAPE, ["f32[]", "f32[1]"],
                f"2. put_slice of {label} into a (1,) slice")
        refused(lambda: c.put_many({"one": x}), BAD_SHAPE, ["f32[]", "f32[1]"],
                f"2. put_many of {label} into a (1,) tensor")
        check(np.array_equal(c.get("one"), np.array([2.5], np.float32)),
              f"2. the (1,) tensor is as it was after the refused {label}")
    c.put("one", np.array([7.0], np.float32))
    check(np.array_equal(c.get("one"), np.array([7.0], np.float32)), "2. a (1,) array is put")

    # ---- 3. non-native byte order
    for path, cc in clients.items():
        cc.put("w", ref)
        big = ref.astype(SWAPPED + "f4")
        refused(lambda: cc.put("w", big), BAD_DTYPE,
                ["convert=True", f".astype('{NATIVE}f4')", "byte order"],
                f"3. {path}: put of {big.dtype.str} without convert")
        check(np.array_equal(cc.get("w"), ref), f"3. {path}: the tensor is as it was")
        want = (ref * -2).astype(np.float32)
        cc.put("w", want.astype(SWAPPED + "f4"), convert=True)
        check(np.array_equal(cc.get("w"), want), f"3. {path}: put of {SWAPPED}f4 with convert")
        want = (ref * 3 + 0.25).astype(np.float64)
        cc.put("w", want.astype(SWAPPED + "f8"), convert=True)
        check(np.array_equal(cc.get("w"), want.astype(np.float32)),
              f"3. {path}: put of {SWAPPED}f8 into f32 with convert is numpy's astype")
        fut(lambda wait: cc.put("w", ref.astype(SWAPPED + "f4"), convert=True, wait=wait))()
        check(np.array_equal(cc.get("w"), ref), f"3. {path}: put(wait=False) of {SWAPPED}f4")
    c.create("ids", "i32", (4, 6), "mesh=[2] placements=[S(1)]")
    ids = (np.arange(24) * 1000 - 9000).reshape(4, 6)
    c.put("ids", ids.astype(SWAPPED + "i2"), convert=True)
    check(np.array_equal(c.get("ids"), ids.astype(np.int32)), f"3. {SWAPPED}i2 converted into i32")
    c.put("ids", (ids * 7).astype(SWAPPED + "i4"), convert=True)
    check(np.array_equal(c.get("ids"), (ids * 7).astype(np.int32)), f"3. {SWAPPED}i4 into i32")
    refused(lambda: c.put("ids", ids.astype(SWAPPED + "i2")), BAD_DTYPE, ["convert=True"],
            f"3. {SWAPPED}i2 without convert")
    c.put_slice("w", (ref[:2] + 100).astype(SWAPPED + "f4"), convert=True)
    c1.put_slice("w", (ref[2:] + 200).astype(SWAPPED + "f4"), convert=True)
    check(np.array_equal(c.get("w"), np.concatenate([ref[:2] + 100, ref[2:] + 200])),
          f"3. put_slice of {SWAPPED}f4 with convert")
    c.put_many({"w": ref.astype(SWAPPED + "f4"), "ids": ids.astype(SWAPPED + "i4")}, convert=True)
    check(np.array_equal(c.get("w"), ref) and np.array_equal(c.get("ids"), ids.astype(np.int32)),
          "3. put_many with convert swaps every array")
    refused(lambda: c.put_many({"w": ref.astype(SWAPPED + "f4")}), BAD_DTYPE, ["convert=True"],
            "3. put_many without convert")
    for path, cc in clients.items():
        out = np.zeros((4, 6), SWAPPED + "f4")
        refused(lambda: cc.get("w", out=out), BAD_DTYPE,
                [SWAPPED + "f4", "byte order", f"{NATIVE}f4"],
                f"3. {path}: get into a {SWAPPED}f4 out")
        check(np.all(out == 0), f"3. {path}: the refused {SWAPPED}f4 out as it was")
    for cc in list(clients.values()) + [c1]:
        cc.close()
check.finish()
