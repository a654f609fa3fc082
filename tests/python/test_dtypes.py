#!/usr/bin/python3
"""Puts never reinterpret data: every pair of a source numpy dtype (bool, int8..uint64, float16,
float32, float64, bf16 bit patterns given with tshard.bf16_bits and f8_e4m3/f8_e5m2 codes given
with tshard.f8_bits) and a tensor dtype (the 17 of them), with and without convert, against the
reference (numpy's astype; bf16 and f8 by exact rounding): without
convert only the tensor's own dtype is accepted and anything else is refused naming both dtypes
with the tensor left unchanged; with convert the values that survive are stored as numpy's
astype stores them (integers beyond float precision, NaN and infinities included) and every
value that would not survive (out of range, NaN or an infinity into an integer, overflow to
infinity, a bool other than 0 or 1) is refused, naming both dtypes, the tensor unchanged. Also:
uint16 token ids into an i32 tensor, torch-style bf16 bits (an int16 view) into bf16 and f32
tensors, f8 codes given as plain uint8 refused with a hint, the same through put_slice and
wait=False, and get returning what was stored.

usage: test_dtypes.py BUILD_BIN_DIR"""
import sys

import numpy as np

import tshard
from checks import Checks
from dtype_ref import (BITS, SOURCES, TENSOR_DTYPES, convert, exact_name, fits, same,
                       source_values)
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
ATTR = "mesh=[2] placements=[S(0)]"


_count = [0]


def fresh(prefix):
    """A tensor name that names no dtype, so that a message's dtypes are the ones checked."""
    _count[0] += 1
    return f"{prefix}{_count[0]}"


def src_name(src):
    return src if src in BITS else np.dtype(src).name


def data_of(src, arr):
    if src == "bf16":
        return tshard.bf16_bits(arr)
    return tshard.f8_bits(arr, src[3:]) if src in BITS else arr


def expect_refusal(c, name, data, convert, before, what, names=(), tdt=None):
    try:
        c.put(name, data, convert=convert)
        check(False, f"{what}: accepted")
        return
    except tshard.BadDtypeError as e:
        msg = str(e)
        for n in names:
            check(n in msg, f"{what}: the message does not name {n}: {msg}")
    check(same(c.get(name), before, tdt), f"{what}: the tensor changed after the refusal")


def no_convert(c, tdt, src, arr):
    """Without convert: the tensor's own dtype only."""
    name = fresh("n")
    c.create(name, tdt, arr.shape, ATTR)
    zeros = c.get(name)
    what = f"put {src_name(src)} into {tdt}"
    if exact_name(src) == tdt:
        c.put(name, data_of(src, arr))
        check(same(c.get(name), arr, tdt), f"{what}: get differs from the array put")
    else:
        names = (f"the data is {exact_name(src)}[", f"is {tdt}[")
        expect_refusal(c, name, data_of(src, arr), False, zeros, what, names, tdt)
    c.drop(name)


def with_convert(c, tdt, src, arr, vals):
    """With convert: the surviving values as astype stores them; each other value refused."""
    what = f"put {src_name(src)} into {tdt} with convert"
    ok = [v for v in vals if fits(v, tdt)]
    bad = [v for v in vals if not fits(v, tdt)]
    ok_arr = arr[[i for i, v in enumerate(vals) if fits(v, tdt)]]
    name = fresh("c")
    c.create(name, tdt, (len(ok),), ATTR)
    c.put(name, data_of(src, ok_arr), convert=True)
    want = convert(ok, tdt, src)
    got = c.get(name)
    check(same(got, want, tdt), f"{what}: stored {got.tolist()}, numpy's astype gives "
                           f"{want.tolist()}")
    c.drop(name)
    one = fresh("one")
    c.create(one, tdt, (2,), ATTR)
    before = c.get(one)
    for v in bad:
        k = next(i for i, x in enumerate(vals) if x is v)
        pair = arr[[0, k]]
        names = (f"converting {exact_name(src)} to {tdt}", "element 1")
        expect_refusal(c, one, data_of(src, pair), True, before, f"{what}: value {v!r}", names,
                       tdt)
    c.drop(one)


def headline(c):
    """uint16 token ids, torch's bf16 bits through an int16 view, f8 codes as uint8."""
    ids = np.array([1, 2, 300, 65535], np.uint16)
    c.create("iu", "i32", (4,), "mesh=[2] placements=[R]")
    try:
        c.put("iu", ids)
        check(False, "uint16 into i32 without convert: accepted")
    except tshard.BadDtypeError as e:
        check("the data is u16[4]" in str(e) and "i32[4]" in str(e) and "convert=True" in str(e),
              f"uint16 refusal: {e}")
    c.put("iu", ids, convert=True)
    check(np.array_equal(c.get("iu"), ids.astype(np.int32)), f"uint16 ids: {c.get('iu')}")
    f = np.array([-2.0, -1.5, 3.140625, 2.0**100], np.float32)
    bits16 = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)  # t.view(torch.int16)
    c.create("bb", "bf16", (4,), ATTR)
    try:
        c.put("bb", bits16)
        check(False, "int16 bits without bf16_bits: accepted")
    except tshard.BadDtypeError as e:
        check("bf16_bits" in str(e) and "torch" in str(e), f"int16 refusal names bf16_bits: {e}")
    c.put("bb", tshard.bf16_bits(bits16))
    check(np.array_equal(c.get("bb"), bits16.view(np.uint16)), "bf16 bits round trip")
    c.create("bf", "f32", (4,), ATTR)
    try:
        c.put("bf", tshard.bf16_bits(bits16))
        check(False, "bf16 bits into f32 without convert: accepted")
    except tshard.BadDtypeError as e:
        check("bf16" in str(e) and "f32" in str(e), f"bf16 into f32: {e}")
    c.put("bf", tshard.bf16_bits(bits16), convert=True)
    check(np.array_equal(c.get("bf"), f), f"bf16 values into f32: {c.get('bf')} vs {f}")
    codes = np.array([0x38, 0xc0, 0x7e, 0x01], np.uint8)  # e4m3: 1, -2, 448, 2^-9
    c.create("q", "f8_e4m3", (4,), ATTR)
    try:
        c.put("q", codes)
        check(False, "uint8 codes without f8_bits: accepted")
    except tshard.BadDtypeError as e:
        check("f8_bits" in str(e) and "u8[4]" in str(e) and "f8_e4m3[4]" in str(e),
              f"uint8 codes refusal names f8_bits: {e}")
    c.put("q", tshard.f8_bits(codes, "e4m3"))
    check(np.array_equal(c.get("q"), codes), "f8 codes round trip")
    c.put("bf", tshard.f8_bits(codes, "e4m3"), convert=True)
    check(np.array_equal(c.get("bf"), np.float32([1, -2, 448, 2.0**-9])),
          f"f8 values into f32: {c.get('bf')}")
    for n in ("iu", "bb", "bf", "q"):
        c.drop(n)


def slices_and_async(d):
    """put_slice and wait=False follow the same rules on each rank."""
    with d.connect(0) as c0, d.connect(1) as c1:
        c0.create("s", "u8", (4,), ATTR)
        c0.put_slice("s", np.array([3, 255], np.int64), convert=True)
        try:
            c1.put_slice("s", np.array([1, 256], np.int64), convert=True)
            check(False, "put_slice of 256 into u8: accepted")
        except tshard.BadDtypeError as e:
            check("u8" in str(e) and "256" in str(e), f"put_slice refusal: {e}")
        c1.put_slice("s", np.array([7.9, 0.0], np.float64), convert=True)
        check(np.array_equal(c0.get("s"), np.array([3, 255, 7, 0], np.uint8)),
              f"put_slice with convert: {c0.get('s')}")
        fut = c0.put("s", np.array([1, 2, 3, -1], np.int32), convert=True, wait=False)
        check(isinstance(fut.exception(timeout=60), tshard.BadDtypeError),
              "wait=False put of -1 into u8 not refused")
        fut = c0.put("s", np.array([1, 2, 3, 4], np.uint16), convert=True, wait=False)
        fut.result(timeout=60)
        check(np.array_equal(c0.get("s"), np.array([1, 2, 3, 4], np.uint8)), "wait=False put")
        c0.drop("s")


with Daemons(bin_dir, 2) as d:
    with d.connect(0) as c:
        headline(c)
        for tdt in TENSOR_DTYPES:
            for src in SOURCES:
                arr, vals = source_values(src)
                no_convert(c, tdt, src, arr)
                with_convert(c, tdt, src, arr, vals)
        check(c.list() == [], f"tensors left: {c.list()}")
    slices_and_async(d)
check.finish()
