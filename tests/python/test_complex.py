#!/usr/bin/python3
"""The complex dtypes c64 and c128 end to end, through real daemons and the Python client,
against numpy.

- put and get of random shapes under random Shard / Replicate attributes (numpy's complex64 and
  complex128 arrays, and the spellings "complex64" / np.complex128 at create), bit for bit;
- partial reductions: random 1-D and 2-D meshes partial along one or more dims with P(sum),
  P(avg) or P(prod), every rank putting its own contribution, resharded to a random target
  among S, R, P(sum), P(avg) and P(prod) by each strategy that plans (p2p, alltoall, allreduce,
  reduce_scatter, local, root, allgather; every one of the first five must run) into a random
  target layout (row-major, permuted or blocked), compared with
  numpy's sum, mean and product of the contributions (sums to 1e-5 relative for c64 and 1e-12
  for c128; products, whose roundings compound, to 1e-4 and 1e-11);
- casts: f32 and i32 resharded to c64 and c128 equal numpy's astype (imaginary 0), c128 to c64
  part by part; a complex tensor cast to a real dtype, and a converting put of complex data into
  a real tensor, refused naming both dtypes, nothing changed; a real put converted into c128;
- max and min refused at create and by a reshard, naming the dtype and sum, avg and prod;
- checkpoints: complex tensors (and a P(prod) one with its partial pieces kept) saved by name
  (all=True), read offline by tshard.checkpoint, loaded back, equal to numpy; the index names
  the dtypes c64 / c128, the files' headers C64 / C128;
- a safetensors export of a complex tensor refused naming it; einsum on complex refused naming
  the dtype; `tshard show --json` of a complex tensor names its dtype;
- torch: torch.cfloat / torch.cdouble tensors put and got back as torch tensors (skipped when
  torch is missing);
- misuse: an unknown dtype name ("complex32") lists the valid ones, complex64 among them.

usage: test_complex.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tshard
import tshard.checkpoint as ck
from checks import Checks, error_of
from harness import Daemons
from partial_ref import put_contributions

bin_dir, NP = sys.argv[1], int(sys.argv[2])
SEEDS = [int(s) for s in sys.argv[3:]] or [1, 2]
CASES = 40  # partial-reduction cases per seed
TIMEOUT = 60  # any client call longer than this is a hang
STRATEGIES = ["p2p", "alltoall", "allreduce", "reduce_scatter", "local", "root", "allgather"]
MUST_RUN = ["p2p", "alltoall", "allreduce", "reduce_scatter", "local"]
LAYOUTS = {1: ["", "a", "A2a"], 2: ["", "ba", "aB4b", "Ab2a"], 3: ["", "cab", "aBc2b"]}
NUMPY = {"c64": np.complex64, "c128": np.complex128}
RTOL = {("c64", "sum"): 1e-5, ("c64", "avg"): 1e-5, ("c64", "prod"): 1e-4,
        ("c128", "sum"): 1e-12, ("c128", "avg"): 1e-12, ("c128", "prod"): 1e-11}
check = Checks()


def rand_complex(nrng, shape, dt, op="sum"):
    """Random complex values of dtype dt: normals, or near the unit circle for products (so a
    product of a few stays of order 1)."""
    if op == "prod":
        mag = nrng.uniform(0.7, 1.4, size=shape)
        ang = nrng.uniform(-np.pi, np.pi, size=shape)
        return (mag * np.exp(1j * ang)).astype(NUMPY[dt])
    return (nrng.standard_normal(shape) + 1j * nrng.standard_normal(shape)).astype(NUMPY[dt])


def close(got, want, rtol):
    """Element-wise |got - want| <= rtol * max(1, |want|)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    return bool(np.all(np.abs(got - want) <= rtol * np.maximum(1.0, np.abs(want))))


def attr_text(mshape, places):
    return f"mesh=[{','.join(map(str, mshape))}]@0-{NP - 1} placements=[{','.join(places)}]"


def mesh_shapes():
    return [[NP]] + [[a, NP // a] for a in range(2, NP) if NP % a == 0]






def as_put(a, dtype):
    """A contribution's slice as put data (numpy's complex arrays as they are)."""
    return np.ascontiguousarray(a)


def reduce_ref(parts, op):
    """numpy's reduction of the contributions, chained one by one as the daemons combine them
    (complex products are not associative to the last bit; the tolerance covers the order)."""
    acc = parts[0].copy()
    for p in parts[1:]:
        acc = acc * p if op == "prod" else acc + p
    return (acc / acc.dtype.type(len(parts))).astype(acc.dtype) if op == "avg" else acc


def put_get_cases(d, rng, nrng):
    with d.connect(0, timeout=TIMEOUT) as c:
        for i in range(12):
            dt = rng.choice(["c64", "c128"])
            ndim = rng.randint(1, 3)
            shape = [rng.randint(1, 9) for _ in range(ndim)]
            mshape = rng.choice(mesh_shapes())
            places = [rng.choice(["R", f"S({rng.randrange(ndim)})"]) for _ in mshape]
            spelled = {"c64": rng.choice(["c64", "complex64", np.complex64]),
                       "c128": rng.choice(["c128", "complex128", np.complex128])}[dt]
            a = rand_complex(nrng, shape, dt)
            name = f"pg{i}"
            c.create(name, spelled, shape, attr_text(mshape, places))
            check(c.describe(name)["dtype"] == dt, f"{name}: created as {spelled}")
            c.put(name, a)
            got = c.get(name)
            check(got.dtype == a.dtype and np.array_equal(got, a),
                  f"{name} {dt} {shape} {places}: put/get differs")
            with d.connect(rng.randrange(NP), timeout=TIMEOUT) as c2:
                tgt = [rng.choice(["R", f"S({rng.randrange(ndim)})"]) for _ in mshape]
                c2.reshard(name, attr_text(mshape, tgt))
                check(np.array_equal(c2.get(name), a), f"{name}: after a reshard to {tgt}")
            c.drop(name)


def partial_case(d, rng, nrng, idx, ran):
    op = rng.choice(["sum", "avg", "prod"])
    dt = rng.choice(["c64", "c128"])
    mshape = rng.choice(mesh_shapes())
    ndim = rng.choice([1, 2, 2, 3])
    shape = [rng.randint(1, 7) for _ in range(ndim)]
    src = [rng.choice(["R", f"S({rng.randrange(ndim)})", f"P({op})"]) for _ in mshape]
    if not any(p.startswith("P(") for p in src):
        src[rng.randrange(len(mshape))] = f"P({op})"
    tgt = [rng.choice(["R", f"S({rng.randrange(ndim)})", "P(sum)", "P(avg)", "P(prod)"])
           for _ in mshape]
    if op == "avg" and "P(prod)" in tgt:  # P(prod) after P(avg) is refused (tested elsewhere)
        tgt = ["R" if p == "P(prod)" else p for p in tgt]
    if "P(avg)" in tgt:  # so is a P(prod) mesh dim after a P(avg) one
        first = tgt.index("P(avg)")
        tgt = ["R" if p == "P(prod)" and m > first else p for m, p in enumerate(tgt)]
    pdims = [m for m, p in enumerate(src) if p.startswith("P(")]
    count = int(np.prod([mshape[m] for m in pdims]))
    parts = [rand_complex(nrng, shape, dt, op) for _ in range(count)]
    want = reduce_ref(parts, op)
    sa, ta = attr_text(mshape, src), attr_text(mshape, tgt)
    name = f"p{idx}"
    with d.connect(rng.randrange(NP), timeout=TIMEOUT) as c:
        c.create(name, dt, shape, sa)
        put_contributions(d, name, mshape, src, parts, as_put, TIMEOUT)
        order = STRATEGIES[:]
        rng.shuffle(order)
        order.sort(key=lambda s: ran[s])  # the strategies run least first
        strategy = next((s for s in order if error_of(lambda: c.plan(name, ta, strategy=s))[0]
                         is None), "auto")
        layout = rng.choice(LAYOUTS[ndim])  # blocked targets pad with zeros
        what = f"case {idx}: {dt} {sa} -> {ta} [{layout}] by {strategy}"
        st, msg = error_of(lambda: c.reshard(name, ta, strategy=strategy, layout=layout or None))
        if check(st is None, f"{what}: {st} {msg}"):
            check(c.describe(name)["attr"] == ta, f"{what}: described as {c.describe(name)}")
            got = c.get(name)
            check(close(got, want, RTOL[(dt, op)]),
                  f"{what}: got {got.ravel()[:3]} want {want.ravel()[:3]}")
            ran[strategy] += 1
        c.drop(name)


def casts(d, nrng):
    with d.connect(0, timeout=TIMEOUT) as c:
        attr = attr_text([NP], ["S(0)"])
        f = nrng.standard_normal((2 * NP + 1, 3)).astype(np.float32)
        for to in ("c64", "c128"):
            c.create("f", "f32", f.shape, attr)
            c.put("f", f)
            c.reshard("f", attr_text([NP], ["S(1)"]), dtype=to)
            got = c.get("f")
            check(c.describe("f")["dtype"] == to and np.array_equal(got, f.astype(NUMPY[to])),
                  f"f32 -> {to}: {got.ravel()[:3]}")
            c.drop("f")
        i = nrng.integers(-1000, 1000, size=(NP, 5)).astype(np.int32)
        c.create("i", "i32", i.shape, attr)
        c.put("i", i)
        c.reshard("i", attr_text([NP], ["R"]), dtype="complex128")
        check(np.array_equal(c.get("i"), i.astype(np.complex128)), "i32 -> c128")
        c.reshard("i", attr, dtype="c64")
        check(np.array_equal(c.get("i"), i.astype(np.complex64)), "c128 -> c64")
        z = rand_complex(nrng, (NP, 4), "c64")
        c.create("z", "c64", z.shape, attr)
        c.put("z", z)
        for to in ("f32", "f64", "i32", "bool"):
            st, msg = error_of(lambda: c.reshard("z", attr_text([NP], ["R"]), dtype=to))
            check(st == tshard.errors.BadDtypeError.status and "c64" in msg and to in msg
                  and "imaginary" in msg, f"c64 -> {to}: {st} {msg}")
        check(c.describe("z")["dtype"] == "c64" and c.describe("z")["attr"] == attr and
              np.array_equal(c.get("z"), z), "a refused cast changes nothing")
        c.create("r", "f64", z.shape, attr)
        st, msg = error_of(lambda: c.put("r", z, convert=True))
        check(st == tshard.errors.BadDtypeError.status and "c64" in msg and "f64" in msg,
              f"complex put into f64: {st} {msg}")
        check(np.array_equal(c.get("r"), np.zeros(z.shape)), "the refused put changed nothing")
        c.create("w", "c128", z.shape, attr)
        r = nrng.standard_normal(z.shape)
        c.put("w", r, convert=True)
        check(np.array_equal(c.get("w"), r.astype(np.complex128)), "f64 put converted to c128")
        for n in ("i", "z", "r", "w"):
            c.drop(n)


def refusals(d, tsh):
    with d.connect(0, timeout=TIMEOUT) as c:
        for dt in ("c64", "c128"):
            for op in ("max", "min"):
                st, msg = error_of(lambda: c.create("x", dt, [4], attr_text([NP], [f"P({op})"])))
                check(st == tshard.errors.BadDtypeError.status and dt in msg and op in msg
                      and "sum, avg and prod" in msg, f"create P({op}) {dt}: {st} {msg}")
                check("x" not in c.list(), "nothing created")
            c.create("x", dt, [NP, 2], attr_text([NP], ["S(0)"]))
            st, msg = error_of(lambda: c.reshard("x", attr_text([NP], ["P(max)"])))
            check(st == tshard.errors.BadDtypeError.status and dt in msg and "no order" in msg,
                  f"reshard {dt} to P(max): {st} {msg}")
            st, msg = error_of(lambda: c.einsum("ij->ji", "x", out="y"))
            check(st is not None and dt in msg and "not supported" in msg,
                  f"einsum on {dt}: {st} {msg}")
            out = tempfile.mkdtemp(prefix="tshard-complex-st-")
            path = os.path.join(out, "m.safetensors")
            st, msg = error_of(lambda: c.save_safetensors(path, names=["x"]))
            check(st == tshard.errors.BadDtypeError.status and "'x'" in msg and dt in msg
                  and "safetensors" in msg, f"safetensors export of {dt}: {st} {msg}")
            check(not os.path.exists(path), "no file written")
            shutil.rmtree(out)
            r = subprocess.run([tsh, "show", "x", "--json", "--socket", d.socket(0)],
                               capture_output=True, text=True, timeout=TIMEOUT)
            shown = json.loads(r.stdout) if r.returncode == 0 else {}
            check(shown.get("dtype") == dt and shown.get("name") == "x",
                  f"tshard show of {dt}: {r.returncode} {r.stdout} {r.stderr}")
            c.drop("x")
        st, msg = error_of(lambda: c.create("x", "complex32", [2], attr_text([NP], ["R"])))
        check(st == tshard.errors.BadDtypeError.status and "complex32" in msg
              and "complex64" in msg and "c128" in msg, f"complex32: {st} {msg}")


def checkpoints(d, nrng, tsh):
    work = tempfile.mkdtemp(prefix="tshard-complex-ck-")
    try:
        with d.connect(0, timeout=TIMEOUT) as c:
            refs = {}
            for dt in ("c64", "c128"):
                a = rand_complex(nrng, (NP + 1, 3), dt)
                c.create(f"s_{dt}", dt, a.shape, attr_text([NP], ["S(0)"]))
                c.put(f"s_{dt}", a)
                refs[f"s_{dt}"] = (a, attr_text([NP], ["S(0)"]), 0.0)
                parts = [rand_complex(nrng, (3, 2), dt, "prod") for _ in range(NP)]
                pa = attr_text([NP], ["P(prod)"])
                c.create(f"p_{dt}", dt, [3, 2], pa)
                put_contributions(d, f"p_{dt}", [NP], ["P(prod)"], parts, as_put, TIMEOUT)
                refs[f"p_{dt}"] = (reduce_ref(parts, "prod"), pa, RTOL[(dt, "prod")])
            for keep in (False, True):
                path = os.path.join(work, f"keep{int(keep)}")
                c.save(path, all=True, keep_partial=keep)
                with open(os.path.join(path, "index.json")) as f:
                    index = json.load(f)
                check({t["dtype"] for t in index["tensors"].values()} == {"c64", "c128"},
                      f"index dtypes: {index['tensors']}")
                heads = b""
                for fn in sorted(os.listdir(path)):
                    if fn != "index.json":
                        with open(os.path.join(path, fn), "rb") as f:
                            heads += f.read(4096)
                check(b'"C64"' in heads and b'"C128"' in heads, "the files' headers: C64, C128")
                for n, (want, attr, tol) in refs.items():
                    got = ck.read(path, n)
                    check(close(got, want, tol), f"offline read of {n} (keep={keep})")
                r = subprocess.run([tsh, "checkpoint", "show", path], capture_output=True,
                                   text=True, timeout=TIMEOUT)
                check(r.returncode == 0 and "c64" in r.stdout.lower(), f"checkpoint show: "
                      f"{r.stdout} {r.stderr}")
                for n in refs:
                    c.drop(n)
                c.load(path)
                for n, (want, attr, tol) in refs.items():
                    info = c.describe(n)
                    check(info["dtype"] == n.split("_")[1], f"{n} loaded as {info['dtype']}")
                    check(close(c.get(n), want, tol), f"{n} loaded back (keep={keep})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def torch_interop(d):
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return
    with d.connect(0, timeout=TIMEOUT) as c:
        for tdt, dt in ((torch.cfloat, "c64"), (torch.cdouble, "c128")):
            t = torch.randn(NP, 3, dtype=tdt)
            c.create("t", tshard.torch.dtype_name(t), list(t.shape), attr_text([NP], ["S(0)"]))
            check(c.describe("t")["dtype"] == dt, f"{tdt} created as {c.describe('t')}")
            c.put("t", t)
            got = c.get("t", like="torch")
            check(isinstance(got, torch.Tensor) and got.dtype == tdt and torch.equal(got, t),
                  f"{tdt} round trip: {got}")
            c.drop("t")


def main():
    tsh = os.path.join(bin_dir, "tshard")
    with Daemons(bin_dir, NP) as d:
        ran = collections.Counter()
        for seed in SEEDS:
            rng, nrng = random.Random(seed), np.random.default_rng(seed)
            put_get_cases(d, rng, nrng)
            for i in range(CASES):
                partial_case(d, rng, nrng, seed * 1000 + i, ran)
        missing = [s for s in MUST_RUN if ran[s] == 0]
        check(not missing, f"strategies never run: {missing} (ran {dict(ran)})")
        nrng = np.random.default_rng(99)
        casts(d, nrng)
        refusals(d, tsh)
        checkpoints(d, nrng, tsh)
        torch_interop(d)
        print(f"strategies run: {dict(ran)}")
    sys.exit(check.finish())


if __name__ == "__main__":
    main()
