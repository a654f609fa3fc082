#!/usr/bin/python3
"""End-to-end test of slices in compiled programs through real daemons and the Python client,
against numpy over random sizes across the buckets: a valid-mode window of two dynamic groups
(x[:n-k+1], output formula n-k+1) with a masked sum, a 3-tap valid convolution (n-2), negative
bounds and a step, a valid-mode convolution and a max pool over windows of a dynamic size k
(n-k+1), a slice of the unsplit dim of a sharded tensor (outputs of every rank's rows
through a Partial(sum) reduction), the same programs as ProgramGraph messages, the formulas in
the report, and refusals: run-time bounds out of range and a slice of a split dim (placement),
both leaving the tensors intact. The daemons get a private program cache.

usage: test_program_slice.py BUILD_BIN_DIR NRANKS"""
import os
import shutil
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, n_ranks = sys.argv[1], int(sys.argv[2])
check = Checks()
cache = tempfile.mkdtemp(prefix="tshard-prog-slice-")
os.environ["TSHARD_PROGRAM_CACHE"] = cache


expect = check.expect


WINDOW = {
    "name": "window",
    "dims": {"n": {"min": 1, "max": 300, "buckets": {"step": 64}},
             "k": {"min": 1, "max": 16, "buckets": [4, 8, 16]}},
    "inputs": [{"name": "x", "dtype": "f64", "shape": ["n"]},
               {"name": "w", "dtype": "f64", "shape": ["k"]}],
    "ops": [{"out": "y", "op": "slice", "args": ["x"], "stop": ["n-k+1"]},
            {"out": "sw", "op": "sum", "args": ["w"]},
            {"out": "ys", "op": "mul", "args": ["y", "sw"]},
            {"out": "tot", "op": "sum", "args": ["y"]},
            {"out": "tail", "op": "slice", "args": ["x"], "start": [-2], "step": [1]}],
    "outputs": ["ys", "tot", "tail"]}

CONV = {
    "name": "conv3",
    "dims": {"n": {"min": 3, "max": 500}},
    "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]},
               {"name": "t", "dtype": "f32", "shape": [3]}],
    "ops": [{"out": "x0", "op": "slice", "args": ["x"], "stop": [-2]},
            {"out": "x1", "op": "slice", "args": ["x"], "start": [1], "stop": ["n-1"]},
            {"out": "x2", "op": "slice", "args": ["x"], "start": [2]},
            {"out": "e", "op": "slice", "args": ["t"], "start": [0], "stop": [3], "step": [2]},
            {"out": "c", "op": "einsum", "args": ["x0", "x1"], "eq": "i,i->"},
            {"out": "t1", "op": "slice", "args": ["t"], "start": [1], "stop": [2]},
            {"out": "a", "op": "mul", "args": ["x1", "t1"]},
            {"out": "b", "op": "add", "args": ["a", "x2"]},
            {"out": "conv", "op": "add", "args": ["b", "x0"]}],
    "outputs": ["conv", "c", "e"]}

CONVK = {
    "name": "convk",
    "dims": {"n": {"min": 1, "max": 400, "buckets": {"step": 100}},
             "k": {"min": 1, "max": 6, "buckets": {"step": 1}}},
    "inputs": [{"name": "x", "dtype": "f64", "shape": ["n"]},
               {"name": "w", "dtype": "f64", "shape": ["k"]}],
    "ops": [{"out": "win", "op": "window", "args": ["x"], "dim": 0, "size": "k"},
            {"out": "conv", "op": "einsum", "args": ["win", "w"], "eq": "ij,j->i"},
            {"out": "pool", "op": "max", "args": ["win"], "dims": [1]}],
    "outputs": ["conv", "pool"]}

ROWS = {
    "name": "rows",
    "dims": {"p": {"min": 1, "max": 2048, "buckets": {"step": 256}}},
    "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 6]}],
    "ops": [{"out": "mid", "op": "slice", "args": ["x"], "start": [0, 1], "stop": [None, -1]},
            {"out": "sq", "op": "mul", "args": ["mid", "mid"]},
            {"out": "s", "op": "sum", "args": ["sq"], "dims": [0]}],
    "outputs": ["s"]}

rng = np.random.default_rng(23)
replicated = tshard.Attr(tshard.Mesh([n_ranks]), [tshard.Replicate()])
sharded = tshard.Attr(tshard.Mesh([n_ranks]), [tshard.Shard(0)])
with Daemons(bin_dir, n_ranks) as d:
    with d.connect(0) as c:
        ids = {"json": c.program_compile(WINDOW, lazy=True),
               "graph": c.program_compile(graph=tshard.graph_from_json(WINDOW), lazy=True)}
        report = c.program_show(ids["json"])
        check("ys: f64 [n-k+1]" in report and "tail: f64 [2]" in report, f"formulas: {report}")
        check("masked" in report.split("tot = sum", 1)[1].split("\n", 1)[0], f"mask: {report}")
        for trial in range(8):
            k = int(rng.integers(1, 17))
            n = int(rng.integers(max(k, 2), 301))
            x, w = rng.standard_normal(n), rng.standard_normal(k)
            for form, pid in ids.items():
                c.create(f"x{trial}{form}", "f64", (n,), replicated)
                c.put(f"x{trial}{form}", x)
                c.create(f"w{trial}{form}", "f64", (k,), replicated)
                c.put(f"w{trial}{form}", w)
                c.program_run(pid, {"x": f"x{trial}{form}", "w": f"w{trial}{form}"},
                              {"ys": f"ys{trial}{form}", "tot": f"tot{trial}{form}",
                               "tail": f"tail{trial}{form}"})
                ys, tot = c.get(f"ys{trial}{form}"), c.get(f"tot{trial}{form}")
                check(ys.shape == (n - k + 1,), f"window n={n} k={k}: shape {ys.shape}")
                check(np.allclose(ys, x[:n - k + 1] * w.sum(), rtol=1e-12, atol=1e-12),
                      f"window n={n} k={k} ({form})")
                check(np.allclose(tot, x[:n - k + 1].sum(), rtol=1e-12, atol=1e-12),
                      f"window sum n={n} k={k} ({form}): {tot} vs {x[:n - k + 1].sum()}")
                check(np.array_equal(c.get(f"tail{trial}{form}"), x[-2:]),
                      f"tail n={n} ({form})")
        # k > n: the window would have a negative length; refused, nothing made
        c.create("xs", "f64", (3,), replicated)
        c.put("xs", np.arange(3.0))
        c.create("ws", "f64", (9,), replicated)
        c.put("ws", np.ones(9))
        expect(5, lambda: c.program_run(ids["json"], {"x": "xs", "w": "ws"},
                                        {"ys": "ys_bad", "tot": "tot_bad", "tail": "tail_bad"}),
               "window longer than x", "slice 'y' dim 0")
        check("ys_bad" not in c.list(), "no output after the refusal")

        pid = c.program_compile(CONV, lazy=True)
        gid = c.program_compile(graph=tshard.graph_from_json(CONV), lazy=True)
        for trial in range(6):
            n = int(rng.integers(3, 501))
            x = rng.standard_normal(n).astype(np.float32)
            t = rng.standard_normal(3).astype(np.float32)
            c.create(f"cx{trial}", "f32", (n,), replicated)
            c.put(f"cx{trial}", x)
            c.create(f"ct{trial}", "f32", (3,), replicated)
            c.put(f"ct{trial}", t)
            got = {}
            for form, q in (("json", pid), ("graph", gid)):
                c.program_run(q, {"x": f"cx{trial}", "t": f"ct{trial}"},
                              {"conv": f"conv{trial}{form}", "c": f"c{trial}{form}",
                               "e": f"e{trial}{form}"})
                got[form] = [c.get(f"{o}{trial}{form}") for o in ("conv", "c", "e")]
            want = x[:-2] + x[1:-1] * t[1] + x[2:]
            check(got["json"][0].shape == (n - 2,), f"conv shape {got['json'][0].shape} n={n}")
            check(np.allclose(got["json"][0], want, rtol=1e-5, atol=1e-5), f"conv n={n}")
            check(np.allclose(got["json"][1], np.dot(x[:-2].astype(np.float64), x[1:-1]),
                              rtol=1e-4, atol=1e-4), f"dot of slices n={n}")
            check(np.array_equal(got["json"][2], t[0:3:2]), f"stepped slice n={n}")
            for a, b in zip(got["json"], got["graph"]):
                check(np.array_equal(a, b), f"conv n={n}: JSON and message differ")

        # windows: a valid-mode convolution of a dynamic size k (n-k+1) and a max pool, as JSON
        # and as a message, against numpy
        kid = c.program_compile(CONVK, lazy=True)
        kgid = c.program_compile(graph=tshard.graph_from_json(CONVK), lazy=True)
        check("conv: f64 [n-k+1]" in c.program_show(kgid), f"window report: {c.program_show(kgid)}")
        for trial in range(6):
            k = int(rng.integers(1, 7))
            n = int(rng.integers(k, 401))
            x, w = rng.standard_normal(n), rng.standard_normal(k)
            c.create(f"kx{trial}", "f64", (n,), replicated)
            c.put(f"kx{trial}", x)
            c.create(f"kw{trial}", "f64", (k,), replicated)
            c.put(f"kw{trial}", w)
            res = {}
            for form, q in (("json", kid), ("graph", kgid)):
                c.program_run(q, {"x": f"kx{trial}", "w": f"kw{trial}"},
                              {"conv": f"kc{trial}{form}", "pool": f"kp{trial}{form}"})
                res[form] = (c.get(f"kc{trial}{form}"), c.get(f"kp{trial}{form}"))
            windows = np.lib.stride_tricks.sliding_window_view(x, k)
            check(res["json"][0].shape == (n - k + 1,), f"conv n={n} k={k}: {res['json'][0].shape}")
            check(np.allclose(res["json"][0], np.convolve(x, w[::-1], "valid"), rtol=1e-10,
                              atol=1e-10), f"valid convolution n={n} k={k}")
            check(np.array_equal(res["json"][1], windows.max(axis=1)), f"max pool n={n} k={k}")
            check(all(np.array_equal(a, b) for a, b in zip(res["json"], res["graph"])),
                  f"window n={n} k={k}: JSON and message differ")

        # sharded rows: slicing the unsplit dim is local; the column sums are Partial(sum)
        rid = c.program_compile(ROWS, lazy=True)
        rows = 97 * n_ranks + 5
        x = rng.standard_normal((rows, 6))
        c.create("sx", "f64", (rows, 6), sharded)
        c.put("sx", x)
        c.program_run(rid, {"x": "sx"}, {"s": "srows"})
        check(np.allclose(c.get("srows"), (x[:, 1:-1] ** 2).sum(axis=0)), "sharded slice sums")
        check(np.array_equal(c.get("sx"), x), "x kept")
        cut = dict(ROWS, ops=[{"out": "top", "op": "slice", "args": ["x"], "stop": ["p-1"]},
                              {"out": "s", "op": "sum", "args": ["top"], "dims": [0]}])
        cid = c.program_compile(cut, lazy=True)
        expect(35, lambda: c.program_run(cid, {"x": "sx"}, {"s": "scut"}),
               "slice of the split dim", "slice 'top'")
        check("scut" not in c.list() and np.array_equal(c.get("sx"), x), "intact after refusal")
        c.create("rx", "f64", (rows, 6), replicated)
        c.put("rx", x)
        c.program_run(cid, {"x": "rx"}, {"s": "scut"})
        check(np.allclose(c.get("scut"), x[:-1].sum(axis=0)), "slice of a replicated tensor")
    rc = d.stop()
shutil.rmtree(cache, ignore_errors=True)
check(rc == 0, f"daemons exited with {rc}")
check.finish()
