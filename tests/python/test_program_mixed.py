#!/usr/bin/python3
"""Mixed precision and run errors of compiled programs through real daemons (3 ranks, tensors
sharded unevenly), the Python client and the CLI.

Randomized differential tests: random f32 chains over f16, bf16 and f32 inputs (casts in, ops,
a cast back out, an in-place bf16 update), f16 arithmetic and bf16 arithmetic chains (each op
rounded once, like numpy's float16), against numpy: the f32 result within float tolerance, every
f16 and bf16 result to the last bit - f16 against numpy's own float16 rounding, bf16 against a
round-to-nearest-even on the uint32 bits of the f32 value, since numpy has no bf16.

Errors, checked by their messages: missing, unknown and repeated inputs and outputs named all at
once; an output not named becomes a tensor of its own name, an existing one is refused (EXISTS)
unless overwrite=True / --overwrite, and an input of the run is never replaced; a placement
refusal names the user's tensor and the reshard with its target placement, and leaves the tensors
intact; a static dim of a split tensor suggests the dim group; the same message from every rank.

usage: test_program_mixed.py BUILD_BIN_DIR"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks, put_data
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
expect = check.expect
cache = tempfile.mkdtemp(prefix="tshard-prog-mixed-")
os.environ["TSHARD_PROGRAM_CACHE"] = cache
NP = 3
DIMS = {"n": {"min": 1, "max": 4096, "buckets": "pow2"}}
SHARDED = f"mesh=[{NP}] placements=[S(0)]"
INVALID, EXISTS, PLACEMENT, BAD_SHAPE = 1, 15, 35, 5


def bf16_bits(x):
    """Round-to-nearest-even of f32 values to bf16 on their uint32 bits (NaN: quiet)."""
    u = np.atleast_1d(np.asarray(x, np.float32)).view(np.uint32).astype(np.uint64)
    s16, one = np.uint64(16), np.uint64(1)
    r = ((u + np.uint64(0x7FFF) + ((u >> s16) & one)) >> s16).astype(np.uint16)
    return np.where(np.isnan(np.asarray(x, np.float32)), ((u >> s16) | np.uint64(0x40)).astype(np.uint16), r)


def bf16_value(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_op(f, *xs):
    """A bf16 op as the program computes it: widen, compute in f32, round once."""
    return bf16_bits(f(*[bf16_value(x) for x in xs]).astype(np.float32))


def random_program(r):
    """A program over a (f16), b (bf16), c (f32) [n] and k (f32 scalar), and its numpy model:
    a function of the input arrays giving the expected f32 result, f16 chain and bf16 chain."""
    ops = [{"out": "a32", "op": "cast", "args": ["a"], "dtype": "f32"},
           {"out": "b32", "op": "cast", "args": ["b"], "dtype": "f32"}]
    steps, names = [], ["a32", "b32", "c"]
    for i in range(6):
        kind = r.choice(["add", "sub", "mul", "max", "min", "div", "sqrt", "neg", "k"])
        x, y, out = r.choice(names), r.choice(names), f"t{i}"
        if kind in ("add", "sub", "mul", "max", "min"):
            ops.append({"out": out, "op": kind, "args": [x, y]})
        elif kind == "div":  # x / (|y| + 1): finite
            ops += [{"out": f"{out}a", "op": "abs", "args": [y]},
                    {"out": f"{out}b", "op": "add", "args": [f"{out}a", 1]},
                    {"out": out, "op": "div", "args": [x, f"{out}b"]}]
        elif kind == "sqrt":
            ops += [{"out": f"{out}a", "op": "abs", "args": [x]},
                    {"out": out, "op": "sqrt", "args": [f"{out}a"]}]
        elif kind == "neg":
            ops.append({"out": out, "op": "neg", "args": [x]})
        else:
            ops.append({"out": out, "op": "mul", "args": [x, "k"]})
        steps.append((kind, out, x, y))
        names.append(out)
    last = names[-1]
    ops += [{"out": "r", "op": "add", "args": [last, 0.25]},
            {"out": "r16", "op": "cast", "args": ["r"], "dtype": "f16"},
            {"out": "rb", "op": "cast", "args": ["r"], "dtype": "bf16"},
            {"op": "assign", "args": ["b", "rb"]},
            # f16 arithmetic: each op rounded once
            {"out": "c16", "op": "cast", "args": ["c"], "dtype": "f16"},
            {"out": "h1", "op": "mul", "args": ["a", "c16"]},
            {"out": "h2", "op": "sub", "args": ["h1", "a"]},
            {"out": "h3", "op": "abs", "args": ["a"]},
            {"out": "h4", "op": "add", "args": ["h3", 1]},
            {"out": "h", "op": "div", "args": ["h2", "h4"]},
            # bf16 arithmetic
            {"out": "cb", "op": "cast", "args": ["c"], "dtype": "bf16"},
            {"out": "e1", "op": "add", "args": ["b", "cb"]},
            {"out": "e2", "op": "mul", "args": ["e1", 0.3]},
            {"out": "e3", "op": "abs", "args": ["e2"]},
            {"out": "e", "op": "sqrt", "args": ["e3"]}]
    prog = {"name": "mixed", "dims": DIMS,
            "inputs": [{"name": "a", "dtype": "f16", "shape": ["n"]},
                       {"name": "b", "dtype": "bf16", "shape": ["n"]},
                       {"name": "c", "dtype": "f32", "shape": ["n"]},
                       {"name": "k", "dtype": "f32", "shape": []}],
            "ops": ops, "outputs": ["r", "r16", "rb", "h", "e"]}

    def model(a, b, c, k):
        with np.errstate(all="ignore"):  # f16 overflow to inf on purpose, like the program
            return model_values(a, b, c, k)

    def model_values(a, b, c, k):
        v = {"a32": a.astype(np.float32), "b32": bf16_value(b), "c": c}
        for kind, out, x, y in steps:
            if kind in ("add", "sub", "mul", "max", "min"):
                f = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                     "max": np.maximum, "min": np.minimum}[kind]
                v[out] = f(v[x], v[y])
            elif kind == "div":
                v[out] = v[x] / (np.abs(v[y]) + np.float32(1))
            elif kind == "sqrt":
                v[out] = np.sqrt(np.abs(v[x]))
            elif kind == "neg":
                v[out] = -v[x]
            else:
                v[out] = v[x] * np.float32(k)
        r_ = (v[last] + np.float32(0.25)).astype(np.float32)
        c16 = c.astype(np.float16)
        h = (a * c16 - a) / (np.abs(a) + np.float16(1))  # numpy's float16 arithmetic
        cb = bf16_bits(c)
        e1 = bf16_op(np.add, b, cb)
        e2 = bf16_op(lambda z: z * bf16_value(bf16_bits(np.float32(0.3))), e1)
        e = bf16_op(lambda z: np.sqrt(np.abs(z)), e2)
        return r_, h.astype(np.float16), e
    return prog, model


def differential(c, trial):
    r = random.Random(trial)
    rng = np.random.default_rng(trial)
    n = r.randint(40, 700)
    prog, model = random_program(r)
    a = (rng.standard_normal(n) * 3).astype(np.float16)
    a[: n // 10] = rng.choice([0.0, -0.0, 1e-7, 65504.0, 6e-5], n // 10)  # subnormal, max, zeros
    b = bf16_bits(rng.standard_normal(n).astype(np.float32) * 5)
    cv = (rng.standard_normal(n) * 2).astype(np.float32)
    k = r.choice([0.5, -1.75, 3.0e-3])
    for name, dt, arr in (("a", "f16", a), ("b", "bf16", b), ("c", "f32", cv)):
        c.create(f"{name}{trial}", dt, (n,), SHARDED)
        c.put(f"{name}{trial}", put_data(arr))
    pid = c.program_compile(prog)
    outs = {x: f"{x}{trial}" for x in ("r", "r16", "rb", "h", "e")}
    c.program_run(pid, {"a": f"a{trial}", "b": f"b{trial}", "c": f"c{trial}", "k": k}, outs)
    want_r, want_h, want_e = model(a, b, cv, k)
    got_r = c.get(outs["r"])
    check(np.allclose(got_r, want_r, rtol=1e-5, atol=1e-5),
          f"trial {trial}: f32 result, max diff {np.max(np.abs(got_r - want_r))}")
    got16 = c.get(outs["r16"])
    with np.errstate(over="ignore"):
        want16 = got_r.astype(np.float16)
    check(got16.dtype == np.float16 and
          np.array_equal(got16.view(np.uint16), want16.view(np.uint16)),
          f"trial {trial}: f16 cast of the f32 result, bit for bit with numpy's float16")
    truncated = (got_r.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    check(np.count_nonzero(bf16_bits(got_r) != truncated) > n // 8,
          f"trial {trial}: the data rounds up often (the rounding is exercised)")
    check(np.array_equal(c.get(outs["rb"]), bf16_bits(got_r)),
          f"trial {trial}: bf16 cast of the f32 result, bit for bit (RNE on the uint32 bits)")
    check(np.array_equal(c.get(f"b{trial}"), bf16_bits(got_r)),
          f"trial {trial}: the in-place bf16 update of b")
    got_h = c.get(outs["h"])
    check(np.array_equal(got_h.view(np.uint16), want_h.view(np.uint16)),
          f"trial {trial}: f16 arithmetic bit for bit with numpy "
          f"({np.count_nonzero(got_h.view(np.uint16) != want_h.view(np.uint16))} differ)")
    got_e = c.get(outs["e"])
    check(np.array_equal(got_e, want_e),
          f"trial {trial}: bf16 arithmetic bit for bit ({np.count_nonzero(got_e != want_e)} "
          f"differ)")
    c.program_drop(pid)


def errors(d, c):
    adam = open(os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "examples",
                             "programs", "adam.json")).read()
    for name in ("w", "g", "m", "v"):
        c.create(name, "f32", (100,), SHARDED)
        c.put(name, np.linspace(-1, 1, 100, dtype=np.float32))
    c.create("gcol", "f32", (100,), f"mesh=[{NP}] placements=[R]")
    c.put("gcol", np.ones(100, np.float32))
    pid = c.program_compile(adam)
    # every missing, unknown and repeated name at once, with the interface
    expect(INVALID, lambda: c.program_run(pid, {"w": "w", "g": "g", "x": "m", "y": "v"},
                                          {"q": "z"}),
           "missing and unknown names", "missing inputs 'm', 'v', 'lr'")
    try:
        c.program_run(pid, {"w": "w", "g": "g", "x": "m", "y": "v"}, {"q": "z"})
    except tshard.TshardError as e:
        msg = str(e)
        check("unknown inputs 'x', 'y'" in msg and "unknown output 'q'" in msg and
              "The program's inputs: w, g, m, v, lr" in msg and "its outputs: none" in msg,
              f"every bad name named, with the interface: {msg}")
    cli = [os.path.join(bin_dir, "tshard"), "program", "run", pid, "--socket", d.socket(1)]
    r = subprocess.run(cli + ["--input", "w=w", "--input", "w=g", "--input", "g=g",
                              "--input", "m=m", "--input", "v=v"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 1 and "missing input 'lr'" in r.stderr and
          "input 'w' is given more than once" in r.stderr and "INVALID_ARGUMENT" in r.stderr,
          f"cli: a missing and a repeated input: {r.stderr}")
    # placement: the user's tensor and the reshard that fixes it; nothing changes
    before = {x: c.get(x) for x in ("w", "m", "v")}
    fix = f"reshard 'gcol' to mesh=[{NP}]@0-{NP - 1} placements=[S(0)]"
    expect(PLACEMENT, lambda: c.program_run(pid, {"w": "w", "g": "gcol", "m": "m", "v": "v",
                                                  "lr": 0.1}),
           "placement in the user's words", fix)
    try:
        c.program_run(pid, {"w": "w", "g": "gcol", "m": "m", "v": "v", "lr": 0.1})
    except tshard.TshardError as e:
        check("computed from tensor 'gcol', input 'g'" in str(e) and "'m_new'" in str(e),
              f"placement: the values named with their tensors: {e}")
    check(all(np.array_equal(c.get(x), before[x]) for x in before), "tensors intact")
    with d.connect(2) as c2:  # the same refusal, word for word, from another rank
        try:
            c2.program_run(pid, {"w": "w", "g": "gcol", "m": "m", "v": "v", "lr": 0.1})
            check(False, "rank 2: no refusal")
        except tshard.TshardError as e2:
            try:
                c.program_run(pid, {"w": "w", "g": "gcol", "m": "m", "v": "v", "lr": 0.1})
            except tshard.TshardError as e0:
                check(str(e0) == str(e2), f"the same message on every rank: {e0} / {e2}")
    # outputs: the default name, no silent overwrite, overwrite on request, never an input
    norm = {"dims": DIMS, "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}],
            "ops": [{"out": "sq", "op": "mul", "args": ["x", "x"]},
                    {"out": "total", "op": "sum", "args": ["sq"]}], "outputs": ["total"]}
    nid = c.program_compile(norm)
    w = c.get("w")
    c.program_run(nid, {"x": "w"})
    check("total" in c.list() and np.allclose(c.get("total"), (w * w).sum()),
          "an output not named becomes a tensor of its own name")
    expect(EXISTS, lambda: c.program_run(nid, {"x": "g"}), "an existing output tensor",
           "name another tensor (--output total=NAME")
    check(np.allclose(c.get("total"), (w * w).sum()), "the existing tensor is kept")
    g = c.get("g")
    c.program_run(nid, {"x": "g"}, overwrite=True)
    check(np.allclose(c.get("total"), (g * g).sum()), "overwrite=True replaces it")
    expect(INVALID, lambda: c.program_run(nid, {"x": "g"}, {"total": "g"}, overwrite=True),
           "an output onto an input", "which is input 'x' of this run")
    check(np.array_equal(c.get("g"), g), "the input is intact")
    cli = [os.path.join(bin_dir, "tshard"), "program", "run", nid, "--input", "x=m",
           "--socket", d.socket(0)]
    r = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    check(r.returncode == 1 and "EXISTS" in r.stderr and "--overwrite" in r.stderr,
          f"cli: an existing output refused: {r.stderr}")
    m = c.get("m")
    r = subprocess.run(cli + ["--overwrite"], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and np.allclose(c.get("total"), (m * m).sum()),
          f"cli --overwrite replaces it: {r.stderr}")
    reserved = dict(norm, outputs=["__tshard_total"],
                    ops=norm["ops"][:1] + [{"out": "__tshard_total", "op": "sum", "args": ["sq"]}])
    rid = c.program_compile(reserved)
    expect(INVALID, lambda: c.program_run(rid, {"x": "w"}), "a default name that is reserved",
           "name its tensor (--output __tshard_total=NAME)")
    c.program_run(rid, {"x": "w"}, {"__tshard_total": "total_named"})
    check(np.allclose(c.get("total_named"), (w * w).sum()), "the output named explicitly")
    # a static dim of a split tensor: the dim group that serves it
    static = {"inputs": [{"name": "x", "dtype": "f32", "shape": [100]}],
              "ops": [{"out": "y", "op": "neg", "args": ["x"]}], "outputs": ["y"]}
    sid = c.program_compile(static)
    expect(BAD_SHAPE, lambda: c.program_run(sid, {"x": "w"}, {"y": "wneg"}),
           "a static dim split over ranks", "a split dim needs a dim group")
    check("wneg" not in c.list(), "no output after the refusal")


with Daemons(bin_dir, NP) as d:
    with d.connect(0) as c:
        for trial in range(3):
            differential(c, trial)
        errors(d, c)
    rc = d.stop()
shutil.rmtree(cache, ignore_errors=True)
check(rc == 0, f"daemons exited with {rc}")
check.finish()
