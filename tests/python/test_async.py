#!/usr/bin/python3
"""Operations in flight on one connection (wait=False, tshard.Future, tshard.wait) against 3 real
daemons: a chunked put, a reshard and a get on one tensor issued without waiting (the get equals
numpy's), many futures from one connection, result(timeout) expiring and then succeeding
(an SPMD collective that waits for its other participant makes the wait deterministic), waiting
twice, a closed connection failing its futures, a client killed (SIGKILL) with futures in flight
(the daemons keep serving, every tensor intact, checked by a second client), and the training
pattern (reshard issued, numpy work, then result()); then the operations in flight again on
daemons with --max-inflight 2 (reading stops and resumes at almost every request).

usage: test_async.py BUILD_BIN_DIR"""
import builtins
import os
import signal
import subprocess
import sys

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir = sys.argv[1]
NP = 3
check = Checks()
ROWS = "mesh=[3] placements=[S(0)]"
COLS = "mesh=[3] placements=[S(1)]"
REPL = "mesh=[3] placements=[R]"


def reference(shape, salt=0):
    """value = function of the global index (exact in f32)"""
    return ((np.arange(int(np.prod(shape))) * 7 + salt) % 1013).astype(np.float32).reshape(shape)


def test_order(d):
    """put (several frames), reshard and get on one tensor without waiting, twice over."""
    with d.connect(0) as c:
        c.chunk = 64 << 10  # 1.1 MiB in 18 frames
        a, b = reference((96, 3000), 1), reference((96, 3000), 2)
        c.create("ord", "f32", a.shape, ROWS)
        f_put = c.put("ord", a, wait=False)
        f_re = c.reshard("ord", COLS, wait=False)
        f_get = c.get("ord", wait=False)
        f_put2 = c.put("ord", b, wait=False)
        f_re2 = c.reshard("ord", REPL, wait=False)
        f_slice = c.get_slice("ord", wait=False)
        f_get2 = c.get("ord", wait=False)
        check(isinstance(f_get, tshard.Future), f"wait=False returns a Future: {f_get!r}")
        got = f_get.result(60)
        check(np.array_equal(got, a), "the get after put and reshard equals numpy's")
        check(f_put.result() is None and f_put2.result() is None, "the puts succeeded")
        check(f_re.result()["strategy"] is not None, f"the reshard ran: {f_re.result()}")
        check(np.array_equal(f_get2.result(60), b), "the second get sees the second put")
        check(np.array_equal(f_slice.result(60), b), "a replica's slice is the whole tensor")
        check(f_re2.done() and f_put.done(), "earlier futures are done")
        attr = c.describe("ord")["attr"]
        check("placements=[R]" in attr, f"a sync describe after them sees the last one: {attr}")
        c.drop("ord")


def test_many(d):
    """200 operations in flight from one connection, then tshard.wait."""
    n = 50
    with d.connect(1) as c:
        futs = []
        for i in range(n):
            futs.append(c.create(f"m{i}", "f32", (6, 4), ROWS, wait=False))
            futs.append(c.put(f"m{i}", reference((6, 4), i), wait=False))
            futs.append(c.reshard(f"m{i}", COLS, wait=False))
            futs.append(c.get(f"m{i}", wait=False))
        res = tshard.wait(futs, timeout=120)
        gets = res[3::4]
        check(all(np.array_equal(g, reference((6, 4), i)) for i, g in enumerate(gets)),
              "every get in flight equals numpy's")
        check(all(f.done() for f in futs), "every future is done")
        drops = [c.drop(f"m{i}", wait=False) for i in range(n)]
        tshard.wait(drops, timeout=60)
        check(not any(x.startswith("m") for x in c.list()), f"all dropped: {c.list()}")


def test_timeout_and_twice(d):
    """result(timeout) expires while an SPMD create waits for its other participant, then
    succeeds once it comes; a result read twice is the same; a failure read twice too."""
    c0 = tshard.connect(socket=d.socket(0), timeout=60, group=[0, 1])
    c1 = tshard.connect(socket=d.socket(1), timeout=60, group=[0, 1])
    with c0, c1:
        f = c0.create("tw", "f32", (4,), REPL, key="tw-1", wait=False)
        try:
            f.result(timeout=0.3)
            check(False, "result(0.3) of a collective missing a participant returned")
        except tshard.WaitTimeoutError as e:
            check(isinstance(e, builtins.TimeoutError) and
                  isinstance(e, tshard.errors.TimeoutError) and "goes on" in str(e),
                  f"the timeout is both TimeoutErrors and says the operation goes on: {e!r}")
        check(not f.done(), "the operation is still in flight")
        c1.create("tw", "f32", (4,), REPL, key="tw-1")
        check(f.result(60) is None and f.exception() is None, "then it succeeds")
        check(f.result() is None, "waiting twice gives the same result")
        r = c0.reshard("tw", "mesh=[2]@0-1 placements=[S(0)]", key="tw-2", wait=False)
        c1.reshard("tw", "mesh=[2]@0-1 placements=[S(0)]", key="tw-2")
        check(r.result(60) is r.result(), "the same result object twice")
    with d.connect(2) as c:
        bad = c.drop("no-such-tensor", wait=False)
        e1, e2 = bad.exception(60), bad.exception()
        check(isinstance(e1, tshard.errors.NotFoundError) and e1 is e2,
              f"a failure waited twice is the same exception: {e1!r}")
        try:
            bad.result()
            check(False, "result() of a failure returned")
        except tshard.errors.NotFoundError as e:
            check(e is e1, "result() raises that exception")
        c.drop("tw")


def test_closed(d):
    """A future whose connection closes fails with a clear error; the daemons keep serving."""
    c0 = tshard.connect(socket=d.socket(0), timeout=60, group=[0, 1])
    f = c0.create("cl", "f32", (4,), REPL, key="cl-1", wait=False)
    c0.close()
    e = f.exception(30)
    check(isinstance(e, tshard.errors.IoError) and "closed" in str(e),
          f"the future fails naming the closed connection: {e!r}")
    with d.connect(1) as c:
        check(c.ping()["rank"] == 1 and "cl" not in c.list(), "the daemons serve; nothing made")


KILLED = r"""
import os, signal, sys
import numpy as np
import tshard
sock, n = sys.argv[1], int(sys.argv[2])
c = tshard.connect(socket=sock, timeout=60)
c.chunk = 64 << 10
futs = []
for i in range(n):
    ref = ((np.arange(96 * 3000) * 7 + i) % 1013).astype(np.float32).reshape(96, 3000)
    futs.append(c.put(f"k{i}", ref, wait=False))
    futs.append(c.reshard(f"k{i}", "mesh=[3] placements=[S(1)]" if i % 2 else
                          "mesh=[3] placements=[R]", wait=False))
    futs.append(c.get(f"k{i}", wait=False))
print("sent", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killed(d):
    """A client killed with puts, reshards and gets in flight: the daemons keep serving and each
    tensor holds its whole data under one of the attributes it could have (a second client
    checks every rank)."""
    n = 6
    with d.connect(0) as c:
        for i in range(n):
            c.create(f"k{i}", "f32", (96, 3000), ROWS)
            c.put(f"k{i}", reference((96, 3000), i))
    p = subprocess.run([sys.executable, "-c", KILLED, d.socket(2), str(n)], timeout=120,
                       capture_output=True, text=True)
    check(p.returncode == -signal.SIGKILL and "sent" in p.stdout,
          f"the client was killed after sending: {p.returncode} {p.stderr[-500:]}")
    for r in range(NP):
        with d.connect(r) as c:
            for i in range(n):
                got = c.get(f"k{i}")
                check(np.array_equal(got, reference((96, 3000), i)),
                      f"rank {r}: k{i} intact after the killed client")
                attr = c.describe(f"k{i}")["attr"]
                check("S(0)" in attr or "S(1)" in attr or "R" in attr, f"k{i}: {attr}")
    with d.connect(1) as c:
        futs = [c.drop(f"k{i}", wait=False) for i in range(n)]
        tshard.wait(futs, timeout=60)
        check(c.list() == [], f"every tensor dropped afterwards: {c.list()}")


def test_training(d):
    """The training pattern: the next layer's reshard in flight while numpy computes."""
    with d.connect(0) as c:
        w = reference((1024, 2048), 5)
        c.create("layer", "f32", w.shape, ROWS)
        c.put("layer", w)
        f = c.reshard("layer", COLS, wait=False)
        x = np.ones((256, 1024), dtype=np.float32)
        y = x @ w  # the work done meanwhile
        res = f.result(120)
        check(res["strategy"] is not None and y.shape == (256, 2048), f"reshard ran: {res}")
        check(np.array_equal(c.get("layer"), w), "the resharded layer equals numpy's")
        c.drop("layer")


def test_every_kind(d):
    """The batched, einsum and program operations take wait=False too, in submission order."""
    with d.connect(2) as c:
        a, b = reference((6, 9), 3), reference((9, 6), 4)
        c.create("ea", "f32", a.shape, ROWS)
        c.create("eb", "f32", b.shape, ROWS)
        f_put = c.put_many({"ea": a, "eb": b}, wait=False)
        f_many = c.reshard_many({"ea": COLS, "eb": REPL}, wait=False)
        f_mm = c.einsum("ij,jk->ik", "ea", "eb", out="ec", wait=False)
        prog = ('{"name": "scale", "dims": {"n": {"min": 1, "max": 64}, "m": {"min": 1, '
                '"max": 64}}, "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", "m"]}], '
                '"ops": [{"out": "y", "op": "mul", "args": ["x", 2.0]}, '
                '{"op": "assign", "args": ["x", "y"]}], "outputs": []}')
        f_comp = c.program_compile(prog, wait=False)
        pid = f_comp.result(120)
        f_run = c.program_run(pid, {"x": "ec"}, wait=False)
        f_get = c.get("ec", wait=False)
        f_drop = c.drop_many(["ea", "eb"], wait=False)
        f_pdrop = c.program_drop(pid, wait=False)
        for f in (f_put, f_many, f_mm, f_comp, f_run, f_get, f_drop, f_pdrop):
            check(isinstance(f, tshard.Future), f"wait=False returns a Future: {f!r}")
        res = f_many.result(60)
        check(set(res) == {"ea", "eb"} and all(r["strategy"] for r in res.values()),
              f"reshard_many's result through its future: {res}")
        check(f_mm.result(60).plan != "", "einsum's result through its future")
        check(np.allclose(f_get.result(60), 2 * (a @ b)), "program_run then get, in order")
        tshard.wait([f_put, f_run, f_drop, f_pdrop], timeout=60)
        check(not {"ea", "eb"} & set(c.list()), f"drop_many ran: {c.list()}")
        c.drop("ec")


with Daemons(bin_dir, NP) as d:
    for t in (test_order, test_many, test_timeout_and_twice, test_closed, test_killed,
              test_training, test_every_kind):
        try:
            t(d)
        except Exception as e:  # noqa: BLE001 - a test that raises is a failure, the rest run
            import traceback
            traceback.print_exc()
            check(False, f"{t.__name__} raised {type(e).__name__}: {e}")
    with d.connect(0) as c:
        check(c.ping()["rank"] == 0, "the daemons still serve at the end")
    code = d.stop()
    check(code == 0, f"the daemons exit 0 after shutdown: {code}\n{d.logs()[-3000:]}")
# With --max-inflight 2 the loop thread stops reading a connection at almost every request, and
# resumes on an answer: also on those the engine writes to the socket itself, whose notices must
# then wake it (engine/outlet.c). The same operations in flight, in order.
with Daemons(bin_dir, NP, ["--max-inflight", "2"]) as d:
    for t in (test_order, test_many, test_every_kind):
        try:
            t(d)
        except Exception as e:  # noqa: BLE001 - a test that raises is a failure, the rest run
            import traceback
            traceback.print_exc()
            check(False, f"{t.__name__} with --max-inflight 2 raised {type(e).__name__}: {e}")
    code = d.stop()
    check(code == 0, f"the daemons exit 0 after shutdown: {code}\n{d.logs()[-3000:]}")
check.finish()
