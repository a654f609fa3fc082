#!/usr/bin/python3
"""End-to-end test of the distributed einsum against real daemons and numpy: the
Python client's einsum, einsum_plan, einsum_backward and einsum_release, and the CLI's
`tshard einsum` (through the daemons and offline with --ranks).

Randomized with a fixed seed: equations of 1 to 3 operands, operands on random 1-D and 2-D
meshes of sub-groups of the world with Shard, Replicate and Partial placements and ragged
splits, blocked local layouts, requested output attributes (or the natural one), forced plans,
and backward with and without the forward's kept state. Every result and gradient is gathered
and compared with numpy. Misuse leaves the daemons' tensors as they were.

usage: test_einsum.py BUILD_BIN_DIR NRANKS [SEED]"""
import json
import os
import subprocess
import sys

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, nranks = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(int(sys.argv[3]) if len(sys.argv) > 3 else 15)
check = Checks()

EQUATIONS = ["ij,jk->ik", "ij,jk", "bij,bjk->bik", "ij->ji", "ij->j", "ij,j->i",
             "ij,jk,kl->il", "bhqd,bhkd->bhqk", "i,j->ij", "ij,ij->ij", "abc,cd->abd"]
BLOCKED = {2: "aB2b", 3: "abC2c", 4: "abcD2d"}


def expect(exc, fn, what):
    try:
        fn()
    except exc as e:
        check(bool(str(e)), f"{what}: empty message")
        return e
    except Exception as e:  # noqa: BLE001 - the wrong exception is a failure
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return None
    check(False, f"{what}: no exception")
    return None


def parse(eq):
    ins, _, out = eq.partition("->")
    ins = ins.split(",")
    if "->" not in eq:
        counts = {}
        for s in ins:
            for ch in s:
                counts[ch] = counts.get(ch, 0) + 1
        out = "".join(sorted(ch for ch, k in counts.items() if k == 1))
    return ins, out


def random_attr(ndim, shape, partial=True):
    if nranks >= 4 and rng.integers(2):
        mesh = [2, int(rng.integers(1, nranks // 2 + 1))]
    else:
        mesh = [int(rng.integers(1, nranks + 1))]
    n = int(np.prod(mesh))
    ranks = [int(r) for r in rng.permutation(nranks)[:n]]
    places, parts = [], {}
    for m in range(len(mesh)):
        k = int(rng.integers(6 if partial else 5))
        if ndim and k < 3:
            d = int(rng.integers(ndim))
            places.append(f"S({d})")
            parts[d] = parts.get(d, 1) * mesh[m]
        elif k == 5:
            places.append("P(sum)")
        else:
            places.append("R")
    text = (f"mesh=[{','.join(map(str, mesh))}]@{','.join(map(str, ranks))} "
            f"placements=[{','.join(places)}]")
    splits = []
    for d in sorted(parts):
        if parts[d] > 1 and rng.integers(3) == 0:
            cuts = np.sort(rng.integers(0, shape[d] + 1, parts[d] - 1))
            sizes = np.diff(np.concatenate([[0], cuts, [shape[d]]]))
            splits.append(f"{d}:[{','.join(str(int(s)) for s in sizes)}]")
    if splits:
        text += " splits={" + ",".join(splits) + "}"
    return text


def values(shape):
    return rng.integers(-4, 5, size=shape).astype(np.float64)


def grad_reference(eq, arrays, g):
    """d sum(g * einsum(eq, arrays)) / d arrays[i], from numpy's einsum (labels summed out of
    operand i only get a ones operand)."""
    ins, out = parse(eq)
    sizes = {}
    for s, a in zip(ins, arrays):
        for ch, n in zip(s, a.shape):
            sizes[ch] = n
    grads = []
    for i, s in enumerate(ins):
        terms, ops = [out], [g]
        for j, (t, a) in enumerate(zip(ins, arrays)):
            if j != i:
                terms.append(t)
                ops.append(a)
        missing = "".join(ch for ch in s if ch not in "".join(terms))
        if missing:
            terms.append(missing)
            ops.append(np.ones([sizes[ch] for ch in missing]))
        grads.append(np.einsum(",".join(terms) + "->" + s, *ops))
    return grads


def run_case(c, k):
    eq = EQUATIONS[int(rng.integers(len(EQUATIONS)))]
    ins, out = parse(eq)
    size = {ch: int(rng.integers(1, 7)) for ch in "abcdhijklqz"}
    names, arrays = [], []
    for i, labels in enumerate(ins):
        shape = tuple(size[ch] for ch in labels)
        a = values(shape)
        name = f"e{k}_{i}"
        layout = BLOCKED.get(len(shape)) if rng.integers(4) == 0 else None
        c.create(name, "f64", shape, random_attr(len(shape), shape), layout=layout)
        c.put(name, a)
        names.append(name)
        arrays.append(a)
    want = np.einsum(eq, *arrays)
    oshape = want.shape
    attr = random_attr(len(oshape), oshape) if rng.integers(2) else None
    plan = None
    if rng.integers(3) == 0:
        check("chosen: " in c.einsum_plan(eq, *names, attr=attr).explain, f"case {k}: plan")
        plan = str(rng.choice(["match:0", "match:1", "free:0", "gather:0", "output", "replicate",
                               "as_is"]))
    keep = bool(rng.integers(2))
    res = None
    try:
        res = c.einsum(eq, *names, out=f"o{k}", attr=attr, plan=plan, keep=keep, explain=True)
    except tshard.errors.EinsumPlanError as e:  # a forced candidate absent or not applying
        check(plan is not None and ("candidate" in str(e) or "does not apply" in str(e)),
              f"case {k}: {eq} plan {plan}: {e}")
    except tshard.TshardError as e:
        check(False, f"case {k}: {eq} attr {attr} plan {plan}: {e}")
    if res is not None:
        check("chosen: " in res.explain, f"case {k}: explain")
        got = c.get(f"o{k}")
        check(got.shape == want.shape and np.allclose(got, want), f"case {k}: {eq} result")
        if attr:
            check(c.describe(f"o{k}")["attr"] == str(tshard.Attr.parse(attr))
                  if hasattr(tshard.Attr, "parse") else True, f"case {k}: output attribute")
        # backward
        g = values(oshape)
        c.create(f"g{k}", "f64", oshape, random_attr(len(oshape), oshape, partial=False))
        c.put(f"g{k}", g)
        want_grads = grad_reference(eq, arrays, g)
        gnames = [f"d{k}_{i}" if rng.integers(3) else None for i in range(len(ins))]
        if not any(gnames):
            gnames[0] = f"d{k}_0"
        try:
            c.einsum_backward(res, f"g{k}", gnames)
            for i, gn in enumerate(gnames):
                if gn:
                    gg = c.get(gn)
                    check(np.allclose(gg, want_grads[i]),
                          f"case {k}: {eq} gradient {i} (keep {keep})")
                    c.drop(gn)
        except tshard.TshardError as e:
            check(False, f"case {k}: {eq} backward (keep {keep}): {e}")
        c.einsum_release(res)
        expect(tshard.errors.NoForwardError, lambda: c.einsum_backward(res, f"g{k}", gnames),
               f"case {k}: backward after release")
        c.drop(f"g{k}")
        c.drop(f"o{k}")
    for n in names:
        c.drop(n)


def misuse(c):
    c.create("A", "f64", (6, 4), "mesh=[2] placements=[S(0)]")
    c.create("B", "f64", (4, 5), f"mesh=[{nranks}] placements=[S(1)]")
    c.create("C", "f64", (3, 5), "mesh=[1] placements=[R]")
    c.create("X", "f32", (4, 5), "mesh=[1] placements=[R]")
    before = sorted(c.list())
    expect(tshard.errors.EinsumError, lambda: c.einsum("ij,jk->iq", "A", "B", out="Y"),
           "output label absent")
    expect(tshard.errors.EinsumError, lambda: c.einsum("ij,j?->ik", "A", "B", out="Y"),
           "bad character")
    expect(tshard.errors.EinsumError, lambda: c.einsum("...j,jk->...k", "A", "B", out="Y"),
           "ellipsis")
    expect(tshard.errors.BadShapeError, lambda: c.einsum("ij,jk->ik", "A", "C", out="Y"),
           "shape mismatch")
    expect(tshard.errors.EinsumError, lambda: c.einsum("ij,jk->ik", "A", "X", out="Y"),
           "dtype mismatch")
    expect(tshard.errors.NotFoundError, lambda: c.einsum("ij,jk->ik", "A", "nope", out="Y"),
           "missing operand")
    expect(tshard.errors.ExistsError, lambda: c.einsum("ij,jk->ik", "A", "B", out="C"),
           "name collision")
    expect(tshard.errors.ExistsError, lambda: c.einsum("ij,jk->ik", "A", "B", out="A"),
           "output is an operand")
    expect(tshard.errors.EinsumPlanError,
           lambda: c.einsum("ij,jk->ik", "A", "B", out="Y", plan="bogus"), "unknown plan")
    expect(tshard.errors.BadAttributeError,
           lambda: c.einsum("ij,jk->ik", "A", "B", out="Y",
                            attr=f"mesh=[{nranks + 1}] placements=[R]"), "attr outside the world")
    expect(tshard.errors.EinsumError, lambda: c.einsum("ij", out="Y"), "no operands")
    expect(tshard.errors.BadShapeError, lambda: c.einsum("ij,ij->", "A", "A", out="Y"),
           "scalar output")
    expect(tshard.errors.NoForwardError, lambda: c.einsum_backward(987654, "C", ["g"]),
           "unknown forward")
    expect(tshard.errors.NoForwardError, lambda: c.einsum_release(987654), "release unknown")
    check(sorted(c.list()) == before, "misuse changed the tensors")
    # keep: the kept state counts in the daemon's memory and goes with release or a drop
    c.put("A", values((6, 4)))
    c.put("B", values((4, 5)))
    r = c.einsum("ij,jk->ik", "A", "B", out="Y", keep=True)
    check(r.kept_bytes >= 0 and r.forward_id > 0, "kept forward")
    c.create("GY", "f64", (6, 5), "mesh=[1] placements=[R]")
    expect(tshard.errors.ExistsError, lambda: c.einsum_backward(r, "GY", ["B", None]),
           "gradient name collision")
    expect(tshard.errors.BadShapeError, lambda: c.einsum_backward(r, "C", ["ga", None]),
           "wrong gradient shape")
    expect(tshard.errors.InvalidArgumentError, lambda: c.einsum_backward(r, "GY", ["ga"]),
           "wrong gradient count")
    # the kept state is in the daemon's memory account until released
    c.create("M1", "f64", (256, 512), "mesh=[1] placements=[R]")
    c.create("M2", "f64", (512, 256), "mesh=[1] placements=[R]")
    before = c.stats()["memory_in_use"]
    km = c.einsum("ij,jk->ik", "M1", "M2", out="M3", keep=True)
    during = c.stats()["memory_in_use"]
    c.einsum_release(km)
    after = c.stats()["memory_in_use"]
    check(km.kept_bytes >= 2 * 256 * 512 * 8, f"kept bytes {km.kept_bytes}")
    check(during - after >= km.kept_bytes and after - before >= 256 * 256 * 8,
          f"memory in use: {before} -> {during} (kept {km.kept_bytes}) -> {after}")
    for n in ("M1", "M2", "M3"):
        c.drop(n)
    # an idempotency key runs the einsum once; a repeat gets the same forward
    k1 = c.einsum("ij,jk->ik", "A", "B", out="YK", key="einsum-key-1")
    c.einsum("ji->ij", "B", out="BT")
    k2 = c.einsum("ij,jk->ik", "A", "B", out="YK", key="einsum-key-1")
    check(k1.forward_id == k2.forward_id and k1.plan == k2.plan,
          f"idempotent einsum: {k1} {k2}")
    c.drop("YK")
    c.drop("BT")
    c.drop("A")  # the forward read A: its record goes
    expect(tshard.errors.NoForwardError, lambda: c.einsum_backward(r, "GY", [None, "gb"]),
           "backward after an operand was dropped")
    for n in ("B", "C", "X", "Y", "GY"):
        c.drop(n)


def cli(d):
    tool = os.path.join(bin_dir, "tshard")
    sock = ["--socket", d.socket(0)]
    with d.connect(0) as c:
        a, b = values((8, 6)), values((6, 4))
        c.create("ca", "f64", (8, 6), f"mesh=[{nranks}] placements=[S(0)]")
        c.create("cb", "f64", (6, 4), "mesh=[1] placements=[R]")
        c.put("ca", a)
        c.put("cb", b)
        p = subprocess.run([tool, "einsum", "ij,jk->ik", "ca", "cb", "--out", "cc", "--to",
                            "mesh=[1] placements=[R]", "--explain", "--keep", *sock],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "chosen: " in p.stdout and "einsum -> cc: done" in p.stdout,
              f"cli einsum: {p.returncode} {p.stdout} {p.stderr}")
        check(np.allclose(c.get("cc"), a @ b), "cli einsum result")
        p = subprocess.run([tool, "einsum", "ij,jk->ik", "ca", "cb", "--explain", "--json", *sock],
                           capture_output=True, text=True, timeout=60)
        ok = p.returncode == 0 and "chosen: " in json.loads(p.stdout)["explain"]
        check(ok, f"cli einsum --explain --json: {p.stdout} {p.stderr}")
        p = subprocess.run([tool, "einsum", "ij,jk->ik", "ca", "cb", "--out", "ce", "--keep",
                            "--json", *sock], capture_output=True, text=True, timeout=60)
        fid = json.loads(p.stdout)["forward_id"] if p.returncode == 0 else 0
        check(p.returncode == 0 and fid > 0, f"cli einsum --json: {p.stdout} {p.stderr}")
        g = values((8, 4))
        c.create("cg", "f64", (8, 4), f"mesh=[{nranks}] placements=[S(1)]")
        c.put("cg", g)
        p = subprocess.run([tool, "einsum-backward", str(fid), "--grad-out", "cg", "--grads",
                            "cga,", *sock], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, f"cli einsum-backward: {p.stdout} {p.stderr}")
        check(np.allclose(c.get("cga"), g @ b.T), "cli einsum-backward gradient")
        p = subprocess.run([tool, "einsum-release", str(fid), *sock], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 0, f"cli einsum-release: {p.stderr}")
        p = subprocess.run([tool, "einsum-release", str(fid), *sock], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 1 and "NO_FORWARD" in p.stderr, f"cli release twice: {p.stderr}")
        for n in ("ce", "cg", "cga"):
            c.drop(n)
        p = subprocess.run([tool, "einsum", "ij,jk->ik", "ca", "nope", "--out", "cd", *sock],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 1 and "nope" in p.stderr, f"cli missing operand: {p.stderr}")
        for n in ("ca", "cb", "cc"):
            c.drop(n)
    p = subprocess.run([tool, "einsum", "ij,jk->ik", "--ranks", "4", "--shape", "64,64",
                        "--shape", "64,64", "--attr", "mesh=[4] placements=[S(1)]", "--attr",
                        "mesh=[4] placements=[S(0)]", "--to", "mesh=[4] placements=[S(0)]"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "chosen: match:0" in p.stdout and "reduce_scatter" in p.stdout,
          f"cli offline explain: {p.stdout} {p.stderr}")
    p = subprocess.run([tool, "einsum", "ij,jk->ik", "--ranks", "4", "--shape", "64,64"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2, "cli offline without attributes is a usage error")


with Daemons(bin_dir, nranks) as d:
    with d.connect(0) as c:
        misuse(c)
        for k in range(int(os.environ.get("TS_EINSUM_CASES", "24"))):
            run_case(c, k)
        check(c.list() == [], f"tensors left: {c.list()}")
    cli(d)
check.finish()
