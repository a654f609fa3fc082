#!/usr/bin/python3
"""The daemons' default memory limit (--memory-limit auto) against requests whose size they
decide, through real daemons (2 ranks) and the Python client.

Default flags: every rank logs its limit at start, chosen as 80% of MemAvailable divided by
the job's 2 daemons on this node, and stats reports the same number. Then, each refused with
LimitError naming the bytes needed and the limit, before anything is allocated, and the daemons
alive and serving afterwards (ping, a small einsum checked against numpy):
- einsum i,j->ij of two replicated f32 vectors of 256 KiB (a 16 GiB result on every rank);
- a create of a replicated f32 tensor of 2^40 elements (4 TiB);
- a compiled program computing the same outer product (its output from the buffer pool).
Nothing is left behind by a refusal (list, memory in use).
With --memory-limit 0: every rank logs that there is no limit, stats reports 0, and the small
einsum is computed exactly as numpy does.

usage: test_memory_default.py BUILD_BIN_DIR"""
import atexit
import os
import re
import shutil
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
NP = 2
REPL = "mesh=[2] placements=[R]"
os.environ["TSHARD_PROGRAM_CACHE"] = tempfile.mkdtemp(prefix="tshard-prog-cache-")
atexit.register(shutil.rmtree, os.environ["TSHARD_PROGRAM_CACHE"], True)


def limit_lines(d):
    """Every rank's start-up line on its memory limit (logged just before its ready line)."""
    return [ln for ln in d.logs().splitlines() if "info: memory limit " in ln]


def limit_message(e, what_bytes, limit):
    return (e is not None and e.name == "LIMIT" and str(what_bytes) in e.message
            and str(limit) in e.message)


def small_einsum(c, tag):
    a = np.arange(1, 5, dtype=np.float32)
    b = np.arange(1, 4, dtype=np.float32) / 4
    c.create(f"sa{tag}", "f32", a.shape, REPL)
    c.create(f"sb{tag}", "f32", b.shape, REPL)
    c.put(f"sa{tag}", a)
    c.put(f"sb{tag}", b)
    c.einsum("i,j->ij", f"sa{tag}", f"sb{tag}", out=f"so{tag}")
    got = c.get(f"so{tag}")
    check(np.array_equal(got, np.einsum("i,j->ij", a, b)), f"small einsum {tag}: {got}")
    for n in ("sa", "sb", "so"):
        c.drop(f"{n}{tag}")


def refused(what, fn):
    """The TshardError fn raises (None, a failed check, when it succeeds)."""
    try:
        fn()
        check(False, f"{what} was not refused")
        return None
    except tshard.TshardError as e:
        return e


def default_limit():
    with Daemons(bin_dir, NP) as d:
        lines = limit_lines(d)
        check(len(lines) == NP, f"memory limit lines: {lines}")
        limits = []
        for ln in lines:
            m = re.search(r"memory limit (\d+) bytes \(auto: 80% of MemAvailable (\d+) MiB at "
                          r"start, shared by the 2 daemons of the job on this node", ln)
            check(m is not None, f"memory limit line without the choice: {ln}")
            if m:
                limit, avail = int(m.group(1)), int(m.group(2)) << 20
                # 80% of MemAvailable over 2 daemons (MemAvailable printed in whole MiB)
                check(abs(limit - avail * 80 // 100 // NP) <= (1 << 20), f"limit {limit} of {avail}")
                limits.append(limit)
        with d.connect(0, timeout=60) as c:
            limit = c.stats()["memory_limit"]
            if not check(limit in limits and limit > 0,
                         f"stats limit {limit}, logged limits {limits}"):
                return  # without a limit the requests below would take all memory
            n = 65536  # f32: 256 KiB per vector, a 16 GiB outer product (more on a larger node)
            while n * n * 4 <= 2 * limit:
                n *= 2
            refuse_outer(c, limit, n)
            check(sorted(c.list()) == ["a", "b"], f"nothing else stored: {c.list()}")
            for r in range(NP):
                with d.connect(r, timeout=60) as cr:
                    check(cr.ping()["rank"] == r, f"rank {r} answers after the refusals")
            small_einsum(c, "d")
            c.drop("a")
            c.drop("b")
            check(c.stats()["memory_in_use"] == 0, f"memory left in use: {c.stats()}")


def refuse_outer(c, limit, n):
    """The outer product of two vectors of n f32, as an einsum and as a program, and a create of
    2^40 f32: each LIMIT naming its bytes and the limit."""
    outer = n * n * 4
    for nm in ("a", "b"):
        c.create(nm, "f32", (n,), REPL)
    e = refused("outer product", lambda: c.einsum("i,j->ij", "a", "b", out="o"))
    check(limit_message(e, outer, limit), f"einsum refusal: {e!r}")
    big = 1 << 40
    e = refused("huge create", lambda: c.create("huge", "f32", (big,), REPL))
    check(limit_message(e, big * 4, limit), f"create refusal: {e!r}")
    prog = {"dims": {"n": {"min": n // 2, "max": n, "buckets": "pow2"},
                     "m": {"min": n // 2, "max": n, "buckets": "pow2"}},
            "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]},
                       {"name": "y", "dtype": "f32", "shape": ["m"]}],
            "ops": [{"out": "z", "op": "einsum", "args": ["x", "y"], "eq": "i,j->ij"}],
            "outputs": ["z"]}
    pid = c.program_compile(prog, lazy=True)
    e = refused("program outer product",
                lambda: c.program_run(pid, {"x": "a", "y": "b"}, {"z": "pz"}))
    check(limit_message(e, outer, limit) and "program output 'z'" in e.message,
          f"program refusal: {e!r}")
    c.program_drop(pid)


def no_limit():
    with Daemons(bin_dir, NP, extra_args=["--memory-limit", "0"]) as d:
        lines = limit_lines(d)
        check(len(lines) == NP and all("memory limit 0 bytes (none: --memory-limit 0)" in ln
                                       for ln in lines), f"memory limit lines: {lines}")
        with d.connect(1, timeout=60) as c:
            check(c.stats()["memory_limit"] == 0, f"stats: {c.stats()['memory_limit']}")
            small_einsum(c, "z")


default_limit()
no_limit()
check.finish()
