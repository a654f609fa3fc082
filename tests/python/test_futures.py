#!/usr/bin/python3
"""Futures mixed with synchronous puts and gets on one connection against 2 real daemons, for
each same-node data path (the direct path; the shared segment, with TSHARD_DIRECT=0): many
operations in flight, every result bit-exact against numpy, and Client.bytes_by_path showing
that no byte went through the frames once the reader thread served the connection; a future
never awaited when the connection closes (it fails with IoError, a new connection sees the
daemons intact); a refused operation among many failing alone. put_many and get_many after a
future, synchronous and with wait=False, several in flight among single puts and gets, on each
path (the direct path, the segment, frames): bit-exact, every byte counted on that path; a
put_many never awaited before close() stores its values (the direct path: whole, the arrays
pinned until the daemons answered).

usage: test_futures.py BUILD_BIN_DIR"""
import os
import sys

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
ROWS = "mesh=[2] placements=[S(0)]"


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def mixed(d, path):
    """8 tensors: sync puts, futures of puts and gets, sync gets, on one connection."""
    with d.connect(0) as c:
        shapes = [(64 + 8 * i, 300 + 50 * i) for i in range(8)]
        refs = [data(s, i) for i, s in enumerate(shapes)]
        for i, s in enumerate(shapes):
            c.create(f"m{i}", "f32", s, ROWS)
        c.list(wait=False).result(60)  # the reader thread serves the connection from here
        before = dict(c.bytes_by_path)
        puts = [c.put(f"m{i}", refs[i], wait=False) for i in range(4)]
        for i in range(4, 8):
            c.put(f"m{i}", refs[i])
        gets = [c.get(f"m{i}", wait=False) for i in range(8)]
        sync = [c.get(f"m{i}") for i in range(8)]
        twice = [c.put(f"m{i}", refs[i] * 2, wait=False) for i in range(8)]
        after = [c.get(f"m{i}", wait=False) for i in range(8)]
        check(all(f.result(60) is None for f in puts + twice), f"{path}: the puts succeeded")
        got = tshard.wait(gets, 60)
        check(all(np.array_equal(g, r) for g, r in zip(got, refs)),
              f"{path}: futures of gets equal numpy bit for bit")
        check(all(np.array_equal(g, r) for g, r in zip(sync, refs)),
              f"{path}: synchronous gets among futures equal numpy")
        got = tshard.wait(after, 60)
        check(all(np.array_equal(g, r * 2) for g, r in zip(got, refs)),
              f"{path}: gets after the second puts see them")
        moved = sum(r.nbytes for r in refs) * 5  # 2 puts and 3 gets of each
        delta = {k: c.bytes_by_path[k] - before[k] for k in before}
        check(delta[path] == moved and delta["frames"] == 0,
              f"{path}: every byte took the {path} path: {delta}, want {moved}")
        sl = c.get_slice("m0", wait=False).result(60)
        check(np.array_equal(sl, refs[0][:sl.shape[0]] * 2), f"{path}: get_slice future")
        for i in range(8):
            c.drop(f"m{i}")


def batches(d, path):
    """put_many and get_many among single puts and gets once the reader thread serves the
    connection (path "frames": the segment turned off first)."""
    with d.connect(0) as c:
        if path == "frames":
            c.set_shm(False)
        names = [f"b{i}" for i in range(12)]
        refs = {n: data((16 + 8 * i, 100 + 30 * i), 100 + i) for i, n in enumerate(names)}
        c.create_many({n: ("f32", a.shape, ROWS) for n, a in refs.items()})
        c.list(wait=False).result(60)  # the reader thread serves the connection from here
        before = dict(c.bytes_by_path)
        first, second = names[:6], names[6:]
        c.put_many(refs)  # synchronous, after a future
        fp1 = c.put_many({n: refs[n] * 2 for n in first}, wait=False)
        fs = c.put("b6", refs["b6"] * 3, wait=False)
        fg1 = c.get_many(names, wait=False)
        g0 = c.get("b0")
        fp2 = c.put_many({n: refs[n] * 4 for n in second}, wait=False)
        fg2 = c.get_many(names[::-1], wait=False)
        fg1b = c.get("b1", wait=False)
        sync = c.get_many(names)
        want1 = {n: refs[n] * (2 if n in first else 3 if n == "b6" else 1) for n in names}
        want2 = {n: refs[n] * (2 if n in first else 4) for n in names}
        check(all(f.result(60) is None for f in (fp1, fs, fp2)), f"{path}: the puts succeeded")
        got = fg1.result(60)
        check(list(got) == names and all(np.array_equal(got[n], want1[n]) for n in names),
              f"{path}: get_many(wait=False) among puts equals numpy bit for bit")
        check(np.array_equal(g0, want1["b0"]) and np.array_equal(fg1b.result(60), want2["b1"]),
              f"{path}: single gets among put_many and get_many")
        got = fg2.result(60)
        check(list(got) == names[::-1] and all(np.array_equal(got[n], want2[n]) for n in names),
              f"{path}: a second get_many(wait=False) sees the second put_many")
        check(all(np.array_equal(sync[n], want2[n]) and sync[n].flags.aligned for n in names),
              f"{path}: a synchronous get_many after futures equals numpy")
        out = {n: np.zeros_like(refs[n]) for n in second}
        res = c.get_many(names, out=out, like="numpy")
        check(all(res[n] is out[n] for n in second)
              and all(np.array_equal(res[n], want2[n]) for n in names),
              f"{path}: get_many(out=) after futures fills the arrays given")
        total = sum(a.nbytes for a in refs.values())
        moved = (5 * total + sum(refs[n].nbytes for n in first + second)
                 + refs["b6"].nbytes + refs["b0"].nbytes + refs["b1"].nbytes)
        delta = {k: c.bytes_by_path[k] - before[k] for k in before}
        check(delta[path] == moved and sum(delta.values()) == moved,
              f"{path}: every byte of the batches took the {path} path: {delta}, want {moved}")
    c = d.connect(0)  # put_manys never awaited when the connection closes
    if path == "frames":
        c.set_shm(False)
    pending = [c.put_many({n: refs[n] * k for n in names}, wait=False) for k in (5, 6)]
    c.close()
    errs = [f.exception(60) for f in pending]
    with d.connect(0) as c2:
        got = c2.get_many(names)
        stored = [k for k in (2, 5, 6) if all(np.array_equal(got[n], want2[n] if k == 2 else
                                                             refs[n] * k) for n in names)]
        if path == "direct":
            check(errs == [None, None] and stored == [6],
                  f"direct: put_manys pending at close() are answered and stored: {errs} {stored}")
        else:
            check(all(e is None or isinstance(e, tshard.IoError) for e in errs) and stored,
                  f"{path}: put_manys pending at close() store all or nothing: {errs} {stored}")
        c2.drop_many(names)


def misuse(d):
    a = data((256, 1024), 9)
    with d.connect(0) as c:
        c.create("x", "f32", a.shape, ROWS)
        c.put("x", a)
        futs = [c.get("x", wait=False), c.get("nope", wait=False), c.put("x", a[:10], wait=False),
                c.get("x", wait=False)]
        check(np.array_equal(futs[0].result(60), a), "a get before a failed one succeeds")
        e1, e2 = futs[1].exception(60), futs[2].exception(60)
        check(isinstance(e1, tshard.NotFoundError), f"a get of an unknown tensor fails: {e1!r}")
        check(isinstance(e2, tshard.BadShapeError), f"a put of another shape fails: {e2!r}")
        check(np.array_equal(futs[3].result(60), a), "a get after the failed ones succeeds")
        check(np.array_equal(c.get("x"), a), "a synchronous get after them succeeds")
    c = d.connect(0)
    pending = [c.put("x", a * 3, wait=False) for _ in range(4)] + [c.get("x", wait=False)]
    c.close()  # never awaited
    errs = [f.exception(60) for f in pending]
    check(all(e is None or isinstance(e, tshard.IoError) for e in errs),
          f"futures of a closed connection are done or fail with IoError: {errs}")
    with d.connect(0) as c2:
        g = c2.get("x")
        check(np.array_equal(g, a) or np.array_equal(g, a * 3),
              "the daemons serve a new connection with the tensor whole")
        c2.drop("x")


if __name__ == "__main__":
    with Daemons(bin_dir, 2) as d:
        mixed(d, "direct")
        batches(d, "direct")
        batches(d, "frames")
        misuse(d)
    os.environ["TSHARD_DIRECT"] = "0"
    with Daemons(bin_dir, 2) as d:
        mixed(d, "shm")
        batches(d, "shm")
        misuse(d)
    check.finish()
