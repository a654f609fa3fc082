#!/usr/bin/python3
"""The package behaves as Python code expects, against real daemons (2 ranks): wrong argument
types raise TypeError in tshard's words before anything reaches protobuf; a status raises the
same class whether the client's own check or the daemon found it (a bad name, a bad attribute
text: Attr.parse and create agree); dtype spellings (f32, 'float32', np.float32, 'bfloat16');
describe()'s layout is the CLI's ('row-major' or the format tag); get_slice gives an empty
array both off the mesh and on an empty part of an uneven split, synchronous or not; no daemon
raises a ConnectionError; and the exceptions are caught by their builtins.

usage: test_pythonic.py BUILD_BIN_DIR"""
import inspect
import json
import os
import subprocess
import sys

import numpy as np

import tshard
from checks import Checks, raw_call
from harness import Daemons
from tshard import tshard_pb2 as pb

bin_dir = sys.argv[1]
check = Checks()
ATTR = "mesh=[2] placements=[S(0)]"


def raises(cls, fn, what, needle=None, absent=("protobuf", "unicode", "bytes,")):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is what is checked
        check(type(e) is cls or (cls in type(e).__mro__ and cls is not tshard.TshardError),
              f"{what}: raised {type(e).__name__} ({e}), want {cls.__name__}")
        check(needle is None or needle in str(e), f"{what}: {needle!r} not in {e}")
        check(not any(a in str(e) for a in absent), f"{what}: leaks another library's words: {e}")
        return e
    check(False, f"{what}: nothing raised")
    return None


with Daemons(bin_dir, 2) as d, d.connect(0) as c:
    # wrong Python types, in tshard's words
    raises(TypeError, lambda: c.create("a", "f32", (4,), [tshard.Shard(0)]),
           "create with a list attr", "tshard.Attr")
    raises(TypeError, lambda: c.create("a", "f32", "4", ATTR), "create with a str shape", "shape")
    raises(TypeError, lambda: c.create("a", "f32", (4.0,), ATTR), "create with a float size")
    raises(tshard.BadShapeError, lambda: c.create("a", "f32", (-1,), ATTR), "negative size")
    raises(TypeError, lambda: c.create("a", "f32", (4,), ATTR, layout=3), "layout of an int")
    c.create("a", "f32", (4,), ATTR)
    raises(TypeError, lambda: c.put("a", [1.0, 2.0, 3.0, 4.0]), "put of a list", "numpy array")
    raises(TypeError, lambda: c.reshard("a", 5), "reshard to an int", "tshard.Attr")
    # every argument of every operation, given a wrong Python type
    arr = np.zeros(4, np.float32)
    calls = {"create": dict(name="n", dtype="f32", shape=(4,), attr=ATTR),
             "put": dict(name="a", array=arr), "reshard": dict(name="a", attr=ATTR),
             "drop": dict(name="zz"), "describe": dict(name="a"), "get": dict(name="a"),
             "get_slice": dict(name="a"), "save": dict(dir=d.dir + "/ck", all=True),
             "load": dict(dir=d.dir + "/ck"), "plan": dict(name="a", attr=ATTR),
             "drop_many": dict(names=["zz"]), "reshard_many": dict(targets={"a": ATTR}),
             "list": dict()}
    skip = {"dtype", "convert", "wait", "progress", "shape"}  # shape: checked above
    for op, base in calls.items():
        for p in inspect.signature(getattr(c, op)).parameters:
            for bad in (5, [1], object()):
                if p in skip:
                    continue
                raises(TypeError, lambda: getattr(c, op)(**{**base, p: bad}),
                       f"{op}({p}={bad!r})")
    check(c.list() == ["a"], f"nothing was created or changed by the refusals: {c.list()}")

    # one class per status, whoever checks: the client's name check and the daemon's
    e1 = raises(tshard.InvalidArgumentError, lambda: c.create("a\tb", "f32", (4,), ATTR),
                "client-side name check")
    r = raw_call(c, create=pb.CreateRequest(name="a\tb", dtype="f32", shape=[4],
                                            attr=pb.DistAttr(text=ATTR)))
    check(r.status == tshard.InvalidArgumentError.status,
          f"the daemon answers the same status for the name: {r.status} {r.message}")
    check(isinstance(e1, ValueError), "InvalidArgumentError is a ValueError")
    # Attr.parse and create raise the same class for the same text
    for text in ("mesh=[2] placements=[S(0)", "mesh=[2] placements=[S(0),R]",
                 "mesh=[2] placements=[Q]"):
        try:
            tshard.Attr.parse(text)
            local = None
        except tshard.TshardError as e:
            local = type(e)
        try:
            c.create("bad", "f32", (4,), text)
            remote = None
        except tshard.TshardError as e:
            remote = type(e)
        check(local is not None and local is remote and issubclass(local, tshard.AttrError),
              f"{text!r}: Attr.parse raises {local}, create {remote}")
    raises(tshard.NotFoundError, lambda: c.get("nothing"), "get of a missing tensor", "nothing")

    # dtype spellings: the tshard names, numpy's names and types, PyTorch's bfloat16
    for spelling, want in (("f32", "f32"), ("float32", "f32"), (np.float64, "f64"),
                           (np.dtype("int8"), "i8"), ("bfloat16", "bf16"), ("uint8", "u8"),
                           ("int64", "i64"), ("float16", "f16")):
        c.create("sp", spelling, (2,), ATTR)
        check(c.describe("sp")["dtype"] == want, f"create dtype {spelling!r} -> {want}")
        c.drop("sp")
    raises(tshard.BadDtypeError, lambda: c.create("sp", "float128", (2,), ATTR),
           "unknown dtype", "float32")
    c.create("sp", np.uint16, (2,), ATTR)  # numpy dtypes name theirs
    check(c.describe("sp")["dtype"] == "u16", "create np.uint16 -> u16")
    c.drop("sp")
    e = raises(tshard.BadDtypeError, lambda: c.create("sp", np.datetime64, (2,), ATTR),
               "datetime64 dtype", "f8_e4m3 (float8_e4m3fn)")
    check(e is not None and "c64 (complex64)" in str(e), f"the complex spellings listed: {e}")
    check(tshard.DTYPE_SPELLINGS["bfloat16"] == "bf16", "DTYPE_SPELLINGS")

    # describe agrees with the CLI's describe (layout 'row-major' or the format tag)
    c.create("blk", "f32", (4, 32), "mesh=[2] placements=[R]", layout="aB16b")
    for name in ("a", "blk"):
        py = c.describe(name)
        cli = subprocess.run([os.path.join(bin_dir, "tshard"), "describe", name, "--json",
                              "--socket", d.socket(0)], capture_output=True, text=True,
                             timeout=60)
        j = json.loads(cli.stdout) if cli.returncode == 0 else {}
        check(j.get("layout") == py["layout"] and py["layout"] in ("row-major", "aB16b"),
              f"describe layout of {name}: Python {py['layout']!r}, CLI {j.get('layout')!r}")
        check(j.get("dtype") == py["dtype"] and j.get("attr") == py["attr"],
              f"describe {name}: Python {py}, CLI {j}")
    c.reshard("blk", "mesh=[2] placements=[S(1)]", layout="row-major")
    check(c.describe("blk")["layout"] == "row-major", "layout='row-major' is the plain layout")

    # get_slice: an empty array off the mesh and on an empty part, whatever the path
    c.create("off", "f64", (3, 4), "mesh=[1]@0 placements=[R]")
    c.create("rag", "f64", (3, 4), "mesh=[2] placements=[S(0)] splits={0:[3,0]}")
    ref = np.arange(12, dtype=np.float64).reshape(3, 4)
    c.put("off", ref)
    c.put("rag", ref)
    with d.connect(1) as c1:
        for wait in (True, False):
            got_off = c1.get_slice("off", wait=wait)
            got_rag = c1.get_slice("rag", wait=wait)
            if not wait:
                got_off, got_rag = got_off.result(timeout=60), got_rag.result(timeout=60)
            check(isinstance(got_off, np.ndarray) and got_off.shape == (0, 0)
                  and got_off.dtype == np.float64, f"off the mesh (wait={wait}): {got_off!r}")
            check(isinstance(got_rag, np.ndarray) and got_rag.shape == (0, 4)
                  and got_rag.dtype == np.float64, f"empty part (wait={wait}): {got_rag!r}")
        out = np.empty((0, 4), np.float64)
        check(c1.get_slice("rag", out=out).shape == (0, 4), "empty part into out=")
        raises(ValueError, lambda: c1.get_slice("rag", out=np.empty(4, np.float64)),
               "out= of 4 elements for an empty part")
    check(np.array_equal(c.get_slice("rag"), ref), "the rank with the rows gets them")

    # no daemon: a ConnectionError (IoError) saying how to start one
    os.environ["TSHARD_SOCKET_DIR"] = d.dir
    try:
        tshard.connect(rank=0, job="nojob", timeout=5)
        check(False, "connect to a job without daemons succeeded")
    except ConnectionError as e:
        check(isinstance(e, tshard.IoError) and "tshard-launch" in str(e), f"no daemon: {e}")
    for n in ("a", "blk", "off", "rag"):
        c.drop(n)
check.finish()
