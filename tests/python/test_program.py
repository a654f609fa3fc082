#!/usr/bin/python3
"""End-to-end test of compiled programs through real daemons and the Python client: an Adam step
in place on tensors sharded over every rank against numpy (two steps), a reduction over the
sharded dim giving a Partial(sum) tensor, random elementwise programs on sharded tensors against
numpy, placement refusals (mismatched splits, a mean over a split dim) and a scalar input its
dtype cannot hold (never saturated) that leave the tensors intact, a malformed program, an unknown id, show, and the tshard CLI's program commands. The daemons get a private program cache.

usage: test_program.py BUILD_BIN_DIR NRANKS"""
import os
import re
import random
import shutil
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, n = sys.argv[1], int(sys.argv[2])
check = Checks()
cache = tempfile.mkdtemp(prefix="tshard-prog-cache-")
os.environ["TSHARD_PROGRAM_CACHE"] = cache
DIMS = {"p": {"min": 1, "max": 4096, "buckets": {"step": 128}}}


expect = check.expect


def adam_program():
    ops = [
        {"out": "m1", "op": "mul", "args": ["m", 0.9]},
        {"out": "g1", "op": "mul", "args": ["g", 0.1]},
        {"out": "mn", "op": "add", "args": ["m1", "g1"]},
        {"out": "v1", "op": "mul", "args": ["v", 0.999]},
        {"out": "gg", "op": "mul", "args": ["g", "g"]},
        {"out": "g2", "op": "mul", "args": ["gg", 0.001]},
        {"out": "vn", "op": "add", "args": ["v1", "g2"]},
        {"out": "den", "op": "sqrt", "args": ["vn"]},
        {"out": "den2", "op": "add", "args": ["den", 1e-8]},
        {"out": "upd", "op": "div", "args": ["mn", "den2"]},
        {"out": "step", "op": "mul", "args": ["upd", "lr"]},
        {"out": "wn", "op": "sub", "args": ["w", "step"]},
        {"op": "assign", "args": ["w", "wn"]},
        {"op": "assign", "args": ["m", "mn"]},
        {"op": "assign", "args": ["v", "vn"]},
    ]
    inputs = [{"name": x, "dtype": "f32", "shape": ["p", 8]} for x in ("w", "g", "m", "v")]
    inputs.append({"name": "lr", "dtype": "f32", "shape": []})
    return {"name": "adam", "dims": DIMS, "inputs": inputs, "ops": ops, "outputs": []}


rows = 50 * n + 3  # uneven local sizes
sharded = tshard.Attr(tshard.Mesh([n]), [tshard.Shard(0)])
replicated = tshard.Attr(tshard.Mesh([n]), [tshard.Replicate()])
rng = np.random.default_rng(7)
with Daemons(bin_dir, n) as d:
    with d.connect(0) as c:
        ref = {}
        for name in ("w", "g", "m", "v"):
            a = rng.standard_normal((rows, 8)).astype(np.float32)
            if name in ("m", "v"):
                a = np.abs(a) * np.float32(0.01)
            c.create(name, "f32", (rows, 8), sharded)
            c.put(name, a)
            ref[name] = a.copy()
        pid = c.program_compile(adam_program(), lazy=True)
        check(isinstance(pid, str) and len(pid) == 16, f"program id {pid!r}")
        check(c.program_compile(adam_program(), lazy=True) == pid, "same text, same id")
        lr = np.float32(0.01)
        for step in range(2):
            c.program_run(pid, {"w": "w", "g": "g", "m": "m", "v": "v", "lr": 0.01})
            w, g, m, v = ref["w"], ref["g"], ref["m"], ref["v"]
            m[...] = np.float32(0.9) * m + np.float32(0.1) * g
            v[...] = np.float32(0.999) * v + np.float32(0.001) * (g * g)
            w[...] = w - (m / (np.sqrt(v) + np.float32(1e-8))) * lr
        for name in ("w", "m", "v"):
            got = c.get(name)
            check(np.allclose(got, ref[name], rtol=1e-5, atol=1e-6),
                  f"adam {name}: max diff {np.max(np.abs(got - ref[name]))}")
        check(np.array_equal(c.get("g"), ref["g"]), "g unchanged")
        # a scalar its input's dtype cannot hold is refused, never saturated to the largest
        w_before = c.get("w")
        expect(4, lambda: c.program_run(pid, {"w": "w", "g": "g", "m": "m", "v": "v",
                                              "lr": 1e39}), "lr of 1e39 into f32", "'lr' (f32)")
        check(np.array_equal(c.get("w"), w_before), "w unchanged by the refused run")
        text = c.program_show(pid)
        check("kernel 0: elementwise, 12 fused" in text and "in place into 'w'" in text,
              f"show: {text[:400]}")

        # a sum over the sharded dim: a Partial(sum) tensor whose value is the total
        prog = {"dims": DIMS, "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 8]}],
                "ops": [{"out": "s", "op": "sum", "args": ["x"], "dims": [0]},
                        {"out": "q", "op": "mul", "args": ["x", "x"]},
                        {"out": "sq", "op": "sum", "args": ["q"]}],
                "outputs": ["s", "sq"]}
        x = rng.standard_normal((rows, 8))
        c.create("x", "f64", (rows, 8), sharded)
        c.put("x", x)
        sid = c.program_compile(prog, lazy=True)
        c.program_run(sid, {"x": "x"}, {"s": "colsum", "sq": "sumsq"})
        check(np.allclose(c.get("colsum"), x.sum(axis=0)), "partial column sums")
        check(np.allclose(c.get("sumsq"), (x * x).sum()), "partial sum of squares")
        check("P(" in c.describe("colsum")["attr"] or "Partial" in c.describe("colsum")["attr"],
              f"colsum attr {c.describe('colsum')['attr']}")
        expect(15, lambda: c.program_run(sid, {"x": "x"}, {"s": "colsum", "sq": "other"}),
               "output name taken")
        check("other" not in c.list(), "no output left behind after a refusal")

        # random elementwise programs on sharded tensors against numpy
        ops_bin = ["add", "sub", "mul", "max", "min"]
        ops_un = ["neg", "abs", "tanh", "sigmoid", "relu"]
        for trial in range(3):
            r = random.Random(trial)
            vals = {"a": rng.standard_normal((rows, 8)), "b": rng.standard_normal((rows, 8)),
                    "c": rng.standard_normal(8)}
            c.create(f"a{trial}", "f64", (rows, 8), sharded)
            c.put(f"a{trial}", vals["a"])
            c.create(f"b{trial}", "f64", (rows, 8), sharded)
            c.put(f"b{trial}", vals["b"])
            c.create(f"c{trial}", "f64", (8,), replicated)
            c.put(f"c{trial}", vals["c"])
            ops, names = [], ["a", "b", "c"]
            for k in range(8):
                out = f"t{k}"
                if r.random() < 0.6:
                    o = r.choice(ops_bin)
                    x1, x2 = r.choice(names), r.choice(names)
                    if vals[x1].ndim == 1 and vals[x2].ndim == 1:
                        x1 = "a"
                    ops.append({"out": out, "op": o, "args": [x1, x2]})
                    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                         "max": np.maximum, "min": np.minimum}[o]
                    vals[out] = f(vals[x1], vals[x2])
                else:
                    o = r.choice(ops_un)
                    x1 = r.choice([nm for nm in names if vals[nm].ndim == 2])
                    ops.append({"out": out, "op": o, "args": [x1]})
                    f = {"neg": np.negative, "abs": np.abs, "tanh": np.tanh,
                         "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
                         "relu": lambda z: np.maximum(z, 0)}[o]
                    vals[out] = f(vals[x1])
                names.append(out)
            last = names[-1] if vals[names[-1]].ndim == 2 else "t0"
            if vals[last].ndim != 2:
                continue
            prog = {"dims": DIMS, "inputs": [
                {"name": "a", "dtype": "f64", "shape": ["p", 8]},
                {"name": "b", "dtype": "f64", "shape": ["p", 8]},
                {"name": "c", "dtype": "f64", "shape": [8]}],
                "ops": ops + [{"op": "assign", "args": ["a", last]}], "outputs": []}
            rid = c.program_compile(prog, lazy=True)
            c.program_run(rid, {"a": f"a{trial}", "b": f"b{trial}", "c": f"c{trial}"})
            check(np.allclose(c.get(f"a{trial}"), vals[last], rtol=1e-12, atol=1e-12),
                  f"random program {trial}")

        # new outputs that stay split: each rank's slice is what it computed, the splits (uneven
        # here) are the inputs'
        split_prog = {"dims": DIMS, "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 8]}],
                      "ops": [{"out": "r", "op": "relu", "args": ["x"]},
                              {"out": "y", "op": "mul", "args": ["r", 2]},
                              {"out": "rs", "op": "sum", "args": ["x"], "dims": [1]}],
                      "outputs": ["y", "rs"]}
        spid = c.program_compile(split_prog, lazy=True)
        c.program_run(spid, {"x": "x"}, {"y": "ysplit", "rs": "rowsum"})
        check(np.allclose(c.get("ysplit"), np.maximum(x, 0) * 2), "split output y")
        check(np.allclose(c.get("rowsum"), x.sum(axis=1)), "split output rowsum")
        dx, dy, dr = c.describe("x"), c.describe("ysplit"), c.describe("rowsum")
        check([(r["lo"][0], r["hi"][0]) for r in dx["ranks"]] ==
              [(r["lo"][0], r["hi"][0]) for r in dy["ranks"]] ==
              [(r["lo"][0], r["hi"][0]) for r in dr["ranks"]],
              f"split outputs keep x's row split: {dx['attr']} {dy['attr']} {dr['attr']}")
        cols = [3, 5] + [1] * (n - 2)  # uneven column splits
        xc = rng.standard_normal((6, sum(cols)))
        c.create("xc", "f64", xc.shape, f"mesh=[{n}] placements=[S(1)] splits={{1:{cols}}}")
        c.put("xc", xc)
        col_prog = {"dims": {"q": {"min": 1, "max": 64, "buckets": {"step": 8}}},
                    "inputs": [{"name": "x", "dtype": "f64", "shape": [6, "q"]}],
                    "ops": [{"out": "e", "op": "exp", "args": ["x"]}], "outputs": ["e"]}
        try:
            cpid = c.program_compile(col_prog, lazy=True)
            c.program_run(cpid, {"x": "xc"}, {"e": "ec"})
            check(np.allclose(c.get("ec"), np.exp(xc)), "column-split output")
            check([r["hi"][1] - r["lo"][1] for r in c.describe("ec")["ranks"]] == cols,
                  f"column-split output keeps the splits: {c.describe('ec')['attr']}")
        except tshard.TshardError as e:
            check(False, f"column-split program: {e}")

        # placement refusals leave the tensors intact
        c.create("y", "f64", (rows, 8), replicated)
        c.put("y", x)
        bad = {"dims": DIMS, "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 8]},
                                        {"name": "y", "dtype": "f64", "shape": ["p", 8]}],
               "ops": [{"out": "z", "op": "add", "args": ["x", "y"]},
                       {"op": "assign", "args": ["x", "z"]}], "outputs": []}
        bid = c.program_compile(bad, lazy=True)
        expect(35, lambda: c.program_run(bid, {"x": "x", "y": "y"}), "mismatched splits",
               "reshard")
        check(np.array_equal(c.get("x"), x), "x intact after the refusal")
        mean = {"dims": DIMS, "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 8]}],
                "ops": [{"out": "mu", "op": "mean", "args": ["x"], "dims": [0]}],
                "outputs": ["mu"]}
        mid = c.program_compile(mean, lazy=True)
        expect(35, lambda: c.program_run(mid, {"x": "x"}, {"mu": "mu"}), "mean over split dim",
               "mean 'mu'")
        c.program_run(mid, {"x": "y"}, {"mu": "mu"})  # replicated: fine
        check(np.allclose(c.get("mu"), x.mean(axis=0)), "mean of a replicated tensor")

        # misuse
        expect(9, lambda: c.program_compile("{not json"), "malformed program", "JSON")
        expect(14, lambda: c.program_run("0123456789abcdef", {"x": "x"}), "unknown id")
        expect(14, lambda: c.program_show("0123456789abcdef"), "show unknown id")
        expect(1, lambda: c.program_run(pid, {"w": "w"}), "missing inputs")
        expect(4, lambda: c.program_run(pid, {"w": "x", "g": "g", "m": "m", "v": "v", "lr": 1}),
               "wrong dtype")
        expect(1, lambda: c.program_run(pid, {"w": "w", "g": "g", "m": "w", "v": "v", "lr": 1}),
               "same tensor twice in place")
        check(np.allclose(c.get("w"), ref["w"], rtol=1e-5, atol=1e-6), "w intact after misuse")

        # the CLI: compile a file, run with --input/--output, show
        import subprocess
        prog_file = os.path.join(cache, "scale.json")
        with open(prog_file, "w") as f:
            f.write('{"dims": {"p": {"min": 1, "max": 4096, "buckets": {"step": 128}}},'
                    ' "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 8]},'
                    ' {"name": "k", "dtype": "f64", "shape": []}],'
                    ' "ops": [{"out": "y", "op": "mul", "args": ["x", "k"]},'
                    ' {"out": "s", "op": "max", "args": ["y"]}], "outputs": ["s"]}')
        cli = [os.path.join(bin_dir, "tshard")]
        conn = ["--socket", d.socket(0)]
        r = subprocess.run(cli + ["program", "compile", prog_file, "--buckets", "lazy"] + conn,
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0 and r.stdout.startswith("id="), f"cli compile: {r.stdout} {r.stderr}")
        cid = r.stdout.split("\n")[0][3:]
        check("buckets: 32, 0 built" in r.stdout and "\n  bucket 0:" not in r.stdout,
              f"cli compile report (short): {r.stdout}")
        r = subprocess.run(cli + ["program", "run", cid, "--input", "x=x", "--input", "k=-2.5",
                                  "--output", "s=cli_max"] + conn,
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, f"cli run: {r.stdout} {r.stderr}")
        check(re.fullmatch(rf"ran program {cid} on x, k=-2\.5; outputs s=cli_max in [0-9]+\.[0-9]{{3}} "
                           r"ms\n", r.stdout) is not None, f"cli run's summary line: {r.stdout!r}")
        check(np.allclose(c.get("cli_max"), (x * -2.5).max()), "cli run result (partial max)")
        r = subprocess.run(cli + ["program", "show", cid] + conn, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0 and "built (" in r.stdout, f"cli show: {r.stdout} {r.stderr}")
        r = subprocess.run(cli + ["program", "run", cid, "--input", "x"] + conn,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2, f"cli bad --input: {r.returncode} {r.stderr}")
        r = subprocess.run(cli + ["program", "show", "0123456789abcdef"] + conn,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "NOT_FOUND" in r.stderr, f"cli show unknown: {r.stderr}")
        r = subprocess.run(cli + ["program", "drop", cid] + conn, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0, f"cli drop: {r.stderr}")
        expect(14, lambda: c.program_show(cid), "show after drop")
        c.program_drop(pid)
        expect(14, lambda: c.program_run(pid, {"w": "w"}), "run after drop")
        expect(14, lambda: c.program_drop(pid), "drop twice")
        check(c.program_compile(adam_program(), lazy=True) == pid, "compiled again after drop")
    rc = d.stop()
shutil.rmtree(cache, ignore_errors=True)
check(rc == 0, f"daemons exited with {rc}")
check.finish()
