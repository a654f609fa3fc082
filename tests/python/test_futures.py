#!/usr/bin/python3
"""Futures mixed with synchronous puts and gets on one connection against 2 real daemons, for
each same-node data path (the direct path; the shared segment, with TSHARD_DIRECT=0): many
operations in flight, every result bit-exact against numpy, and Client.bytes_by_path showing
that no byte went through the frames once the reader thread served the connection; a future
never awaited when the connection closes (it fails with IoError, a new connection sees the
daemons intact); a refused operation among many failing alone.

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
        misuse(d)
    os.environ["TSHARD_DIRECT"] = "0"
    with Daemons(bin_dir, 2) as d:
        mixed(d, "shm")
        misuse(d)
    check.finish()
