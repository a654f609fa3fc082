#!/usr/bin/python3
"""Loads into existing tensors (Client.load(in_place=True), `tshard load --in-place`) through 3
real daemons: after the tensors changed (new values, one resharded to another attribute, a
blocked local layout, a partial tensor, bf16), an in-place load brings every value back to the
saved one (numpy references) while each tensor keeps its attribute and layout. Misuse changes
nothing anywhere (every tensor's values and attributes compared before and after, no temporary
left on any rank): shapes and dtypes that differ (one error naming every mismatch), a tensor
that is not stored, a damaged piece of the last tensor (all or none: the ones before it are not
replaced), attribute rules with in_place (the client and the daemon refuse them).

usage: test_load_in_place.py BUILD_BIN_DIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tshard
from tshard import tshard_pb2 as pb
from checks import Checks, put_data, raw_call
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
rng = np.random.default_rng(11)
work = tempfile.mkdtemp(prefix="tshard-inplace-")


def bf16(shape):
    f = rng.integers(-60, 60, size=shape).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


# name -> (dtype, shape, attr, layout), in load order ("z" last: the damaged one)
T = {
    "a": ("f32", (12, 8), "mesh=[3] placements=[S(0)]", None),
    "b": ("f64", (8,), "mesh=[3] placements=[R]", None),
    "blk": ("i64", (6, 10), "mesh=[2] placements=[S(0)]", "aB4b"),
    "bf": ("bf16", (4, 6), "mesh=[3] placements=[S(1)]", None),
    "p": ("f32", (6, 3), "mesh=[3] placements=[P(sum)]", None),
    "z": ("i32", (9, 5), "mesh=[3] placements=[S(0)]", None),
}
NP_DT = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32}


def values(dt, shape):
    return bf16(shape) if dt == "bf16" else rng.integers(-999, 999, size=shape).astype(NP_DT[dt])


def state(d):
    """Every tensor's values, attribute and layout, and every rank's names."""
    with d.connect(0) as c:
        st = {n: (c.get(n), c.describe(n)["attr"], c.describe(n)["layout"]) for n in c.list()}
    names = []
    for r in range(d.np):
        with d.connect(r) as cr:
            names.append(sorted(cr.list()))
    return st, names


def same_state(a, b):
    (sa, na), (sb, nb) = a, b
    return na == nb and sorted(sa) == sorted(sb) and all(
        np.array_equal(sa[k][0], sb[k][0]) and sa[k][0].dtype == sb[k][0].dtype and
        sa[k][1:] == sb[k][1:] for k in sa)


def refused(d, fn, exc, needles, what):
    before = state(d)
    check.raises(exc, fn, what, needles)
    check(same_state(before, state(d)), f"{what}: something changed")


def main():
    ck = os.path.join(work, "step100")
    with Daemons(bin_dir, 3) as d, d.connect(0) as c:
        ref = {}
        for n, (dt, shape, attr, layout) in T.items():
            c.create(n, dt, shape, attr, layout=layout)
            if n == "p":  # a partial tensor: rank r holds r+1 times a part; the value is 6x
                part = values("f32", shape)
                for r in range(3):
                    with d.connect(r) as cr:
                        cr.put_slice("p", part * (r + 1))
                ref[n] = part * 6
            else:
                ref[n] = values(dt, shape)
                c.put(n, put_data(ref[n]))
        check(np.array_equal(c.get("p"), ref["p"]), "the partial tensor's value")
        c.save(ck, names=list(T))
        attrs = {n: c.describe(n)["attr"] for n in T}
        layouts = {n: c.describe(n)["layout"] for n in T}

        # the tensors change: new values, "a" resharded (it keeps its new attribute)
        for n, (dt, shape, _, _) in T.items():
            if n != "p":
                c.put(n, put_data(values(dt, shape)))
        for r in range(3):
            with d.connect(r) as cr:
                cr.put_slice("p", np.full(T["p"][1], r, np.float32))
        c.reshard("a", "mesh=[3] placements=[S(1)]")
        attrs["a"] = c.describe("a")["attr"]
        check(not np.array_equal(c.get("z"), ref["z"]), "the values changed")

        res = c.load(ck, in_place=True)
        check(res["tensors"] == len(T), f"one in-place load of every tensor: {res}")
        for n in T:
            got = c.get(n)  # bf16 as its uint16 bits, as the reference
            check(got.dtype == ref[n].dtype and np.array_equal(got, ref[n]),
                  f"{n}: back to the saved values")
            check(c.describe(n)["attr"] == attrs[n] and c.describe(n)["layout"] == layouts[n],
                  f"{n}: keeps its attribute and layout: {c.describe(n)}")
        check(all(sorted(cr.list()) == sorted(T) for cr in [d.connect(r) for r in range(3)]),
              "no temporary tensor left on any rank")

        # the CLI, on a subset
        env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=d.job)
        tsh = os.path.join(bin_dir, "tshard")
        c.put("z", values("i32", T["z"][1]))
        out = subprocess.run([tsh, "load", ck, "z", "--in-place"], capture_output=True, text=True,
                             env=env, timeout=120)
        check(out.returncode == 0 and np.array_equal(c.get("z"), ref["z"]) and
              c.describe("z")["attr"] == attrs["z"], f"tshard load --in-place: {out.stderr}")

        # mismatches: nothing changes anywhere, every one named
        c.put("a", values("f32", T["a"][1]))
        c.drop("b")
        c.create("b", "f64", (9,), "mesh=[3] placements=[R]")
        c.drop("bf")
        c.create("bf", "f32", (4, 6), "mesh=[3] placements=[S(1)]")
        refused(d, lambda: c.load(ck, in_place=True), tshard.BadShapeError,
                ["2 tensors are not as saved", "'b' is f64 [9] here, f64 [8] saved",
                 "'bf' is f32 [4,6] here, bf16 [4,6] saved", "nothing loaded"], "mismatches")
        refused(d, lambda: c.load(ck, names=["bf"], in_place=True), tshard.BadDtypeError,
                ["'bf' is f32 [4,6] here, bf16 [4,6] saved"], "a dtype mismatch")
        out = subprocess.run([tsh, "load", ck, "--in-place"], capture_output=True, text=True,
                             env=env, timeout=120)
        check(out.returncode == 1 and "'b' is f64 [9] here" in out.stderr and
              "'bf' is f32" in out.stderr, f"CLI mismatches: {out.stderr}")
        c.drop("b")
        refused(d, lambda: c.load(ck, names=["a", "b"], in_place=True), tshard.NotFoundError,
                ["no tensor named 'b' to load into"], "a tensor not stored")

        # a damaged piece of the last tensor: the ones before it are not replaced either
        bad = os.path.join(work, "damaged")
        shutil.copytree(ck, bad)
        piece = json.load(open(os.path.join(bad, "index.json")))["tensors"]["z"]["pieces"][0]
        p = os.path.join(bad, piece["file"])
        raw = open(p, "rb").read()
        hlen = int.from_bytes(raw[:8], "little")
        off = 8 + hlen + json.loads(raw[8:8 + hlen])[piece["key"]]["data_offsets"][0]
        with open(p, "r+b") as f:
            f.seek(off + 3)
            f.write(bytes([raw[off + 3] ^ 0x40]))
        refused(d, lambda: c.load(bad, names=["a", "blk", "p", "z"], in_place=True),
                tshard.CorruptError, ["checksum", "'z'"], "a damaged piece")

        # attribute rules with in_place
        refused(d, lambda: c.load(ck, in_place=True, default="mesh=[3] placements=[R]"),
                TypeError, ["in_place"], "in_place with a default (client)")
        r = raw_call(c, load=pb.LoadRequest(dir=ck, in_place=True,
                                            attr=pb.DistAttr(text="mesh=[3] placements=[R]")))
        check(r.status == 1 and "in-place load keeps each tensor's attribute" in r.message,
              f"in_place with an attribute (daemon): {r.status} {r.message}")
        r = raw_call(c, load=pb.LoadRequest(dir=ck, in_place=True,
                                            rules=[pb.AttrRule(name="a", attr=pb.DistAttr(
                                                text="mesh=[3] placements=[R]"))]))
        check(r.status == 1 and "give no attribute rules" in r.message,
              f"in_place with rules (daemon): {r.status} {r.message}")
    shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
