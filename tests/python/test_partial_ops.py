#!/usr/bin/python3
"""Randomized differential test of the partial ops avg and prod (and sum and max beside them)
against numpy, through real daemons and the Python client.

Each case builds a tensor on a 1-D or 2-D mesh over all ranks with one or more Partial(op) mesh
dims (the rest Shard or Replicate), puts every rank's own contribution slice by slice (the
partial values differ per partial coordinate, replicas hold the same), reshards it to a random
target with a strategy forced by name (every strategy that applies gets its turn: allreduce,
reduce_scatter, p2p, alltoall, local, root, allgather) into a random layout, and compares the
tensor got back with numpy's reduction of the contributions: avg is the sum divided once by the
number of contributions, prod the product. Values are small integers (avg: contributions chosen
so that the sum divides evenly; prod: powers of two, or small integers for i32), so every result
is exact in f32, f64, bf16 and i32 and compared bit for bit. Targets made partial from an
unreduced source (by local, root, allgather, p2p, alltoall) are checked slice by slice: P(avg)
holds the value on every rank of the dim (DTensor's Replicate -> Partial("avg")), along the other
ops every element is the value or the op's identity. Targets also make a Shard or Replicate dim
partial with another op beside the partial dims kept ([S(1),P(prod)] -> [P(sum),P(prod)]). At the end, every strategy above must have run for avg and prod.

Mixed ops: 2-D meshes partial along both dims with different ops ([P(sum),P(max)],
[P(avg),P(min)], [P(prod),P(sum)]...), reshards reducing one dim (the other stays partial:
allreduce, reduce_scatter) or both (p2p, alltoall too), against numpy reducing the changed dims
first and the rest when got; p2p and alltoall refused where they would reduce a kept dim.

Checkpoints: P(avg) and P(prod) tensors saved reduced and with their partial pieces kept, read
offline by tshard.checkpoint and loaded back, equal to numpy's reduction.

Refusals: avg of i32, i64 and bool is refused at create and by a reshard, naming the dtype and
the valid ones, nothing created and the tensor unchanged on every rank.

usage: test_partial_ops.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import collections
import itertools
import os
import random
import shutil
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
CASES = 70 if NP <= 4 else 45  # per seed
TIMEOUT = 60                    # any client call longer than this is a hang
STRATEGIES = ["p2p", "alltoall", "allreduce", "reduce_scatter", "local", "root", "allgather"]
MUST_RUN = ["p2p", "alltoall", "allreduce", "reduce_scatter", "local"]
DTYPES = {"avg": ["f32", "f64", "bf16"], "prod": ["f32", "f64", "bf16", "i32"],
          "sum": ["f32", "bf16", "i32"], "max": ["f64", "i32"]}
IDENTITY = {"sum": 0.0, "prod": 1.0}  # of the ops a fresh target takes besides avg
LAYOUTS = {1: ["", "a", "A2a"], 2: ["", "ba", "aB4b", "Ab2a"], 3: ["", "cab", "aBc2b"]}
check = Checks()


def to_put(v, dt):
    """Exact float64 values as put data of dtype dt (bf16 as its bits)."""
    if dt == "bf16":
        return tshard.bf16_bits((v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    return v.astype(tshard.DTYPES[dt])


def from_got(a, dt):
    """Got data of dtype dt as float64 (bf16 from its bits)."""
    if dt == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def mesh_shapes():
    out = [[NP]]
    out += [[a, NP // a] for a in range(2, NP) if NP % a == 0]
    return out




def contributions(rng, op, dt, count, shape):
    """count arrays whose op-reduction is exact in dt, and that reduction."""
    if op == "avg":
        want = rng.integers(-8, 9, size=shape).astype(np.float64)
        parts = [rng.integers(-8, 9, size=shape).astype(np.float64) for _ in range(count - 1)]
        parts.append(count * want - sum(parts, np.zeros(shape)))
        return parts, want
    if op == "prod":
        pool = [-2.0, -1.0, 1.0, 2.0, 3.0] if dt == "i32" else [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]
        parts = [rng.choice(pool, size=shape) for _ in range(count)]
        return parts, np.prod(parts, axis=0)
    parts = [rng.integers(-20, 21, size=shape).astype(np.float64) for _ in range(count)]
    return parts, (np.sum(parts, axis=0) if op == "sum" else np.max(parts, axis=0))


def attr_text(mshape, places):
    return f"mesh=[{','.join(map(str, mshape))}]@0-{NP - 1} placements=[{','.join(places)}]"


def target_places(rng, src, op, ndim):
    """A target for source placements src (one kind of change per call)."""
    nm = len(src)
    pdims = [m for m, p in enumerate(src) if p.startswith("P(")]
    kind = rng.choice(["to_r", "to_s", "random", "keep", "op", "beside"])
    out = list(src)
    others = [m for m in range(nm) if m not in pdims]
    if kind == "beside" and pdims and others:  # a new partial dim of another op beside the kept
        m = rng.choice(others)
        ops = [o for o in ("sum", "prod", "max") if o != op]
        if any(src[k] == "P(avg)" for k in pdims if k < m):  # P(prod) after P(avg) is refused
            ops.remove("prod") if "prod" in ops else None
        out[m] = f"P({rng.choice(ops)})"
        return out
    if kind == "to_r" and pdims:
        for m in rng.sample(pdims, rng.randint(1, len(pdims))):
            out[m] = "R"
    elif kind == "to_s" and pdims:
        out[rng.choice(pdims)] = f"S({rng.randrange(ndim)})"
    elif kind == "keep" and pdims:
        for m in range(nm):
            if m not in pdims:
                out[m] = rng.choice(["R", f"S({rng.randrange(ndim)})"])
    elif kind == "op":  # every partial dim to another op (reduced, then partial again)
        new = rng.choice(["avg", "prod", "sum", "max"])
        out = [f"P({new})" if p.startswith("P(") else p for p in src]
    else:
        out = [rng.choice(["R", f"S({rng.randrange(ndim)})", f"P({op})"]) for _ in range(nm)]
    return out


def slices(d, name):
    """{rank: (box slices, local array)} of every rank that holds a slice."""
    out = {}
    for r in range(NP):
        with d.connect(r, timeout=TIMEOUT) as c:
            info = c.describe(name)
            mine = next((x for x in info["ranks"] if x["rank"] == r), None)
            if mine and mine["bytes"] > 0:
                box = tuple(slice(lo, hi) for lo, hi in zip(mine["lo"], mine["hi"]))
                out[r] = (box, c.get_slice(name))
    return out




def fresh_slices_ok(d, name, mshape, places, want, dt, what):
    """A target made partial from an unreduced source: with P(avg) dims only, every rank holds
    the value; along a P(sum) or P(prod) dim every element is the value or the op's identity
    (the value on one rank of the dim: the reduction checks that)."""
    ops = {p[2:-1] for p in places if p.startswith("P(")}
    ok = True
    for r, (box, local) in slices(d, name).items():
        got = from_got(local, dt)
        if ops == {"avg"}:
            good = got == want[box]
        else:
            good = np.zeros(got.shape, bool)
            for o in ops:
                good |= (got == want[box]) | (got == IDENTITY.get(o, np.nan))
        ok = check(bool(good.all()), f"{what}: rank {r}'s slice {got.ravel()[:4]} want "
                                     f"{want[box].ravel()[:4]} or the identity") and ok
    return ok


def one_case(d, rng, nrng, idx, ran):
    op = rng.choice(["avg", "avg", "prod", "prod", "sum", "max"])
    dt = rng.choice(DTYPES[op])
    mshape = rng.choice(mesh_shapes())
    ndim = rng.choice([1, 2, 2, 3])
    shape = [rng.randint(1, 7) for _ in range(ndim)]
    fresh = rng.random() < 0.2  # an unreduced source made partial
    src = [rng.choice(["R", f"S({rng.randrange(ndim)})", f"P({op})"]) for _ in mshape]
    if fresh:
        src = [p if not p.startswith("P(") else "R" for p in src]
        tgt = list(src)
        tgt[rng.randrange(len(mshape))] = f"P({rng.choice(['avg', 'prod', 'sum'])})"
        if dt == "i32" and "P(avg)" in tgt:
            dt = "f32"
    else:
        if not any(p.startswith("P(") for p in src):
            src[rng.randrange(len(mshape))] = f"P({op})"
        tgt = target_places(rng, src, op, ndim)
        if dt == "i32" and "P(avg)" in tgt:
            tgt = ["R" if p == "P(avg)" else p for p in tgt]
    pdims = [m for m, p in enumerate(src) if p.startswith("P(")]
    count = int(np.prod([mshape[m] for m in pdims])) if pdims else 1
    parts, want = contributions(nrng, op, dt, count, shape)
    if not pdims:
        want = parts[0]
    sa, ta = attr_text(mshape, src), attr_text(mshape, tgt)
    if idx % 3 == 0:  # the same source built from Python placement objects
        pl = [tshard.Partial(p[2:-1]) if p.startswith("P(") else
              tshard.Replicate() if p == "R" else tshard.Shard(int(p[2:-1])) for p in src]
        sa = str(tshard.Attr(tshard.Mesh(mshape, ranks=list(range(NP))), pl))
    name = f"t{idx}"
    layout = rng.choice(LAYOUTS[ndim])
    with d.connect(rng.randrange(NP), timeout=TIMEOUT) as c:
        c.create(name, dt, shape, sa)
        put_contributions(d, name, mshape, src, parts, to_put, TIMEOUT)
        order = STRATEGIES[:]
        rng.shuffle(order)  # the strategies this op ran least first
        order.sort(key=lambda s: ran[("fresh" if fresh else op, s)])
        strategy = next((s for s in order if error_of(lambda: c.plan(name, ta, strategy=s))[0]
                         is None), "auto")
        what = f"case {idx}: {dt} {sa} -> {ta} [{layout}] by {strategy}"
        st, msg = error_of(lambda: c.reshard(name, ta, strategy=strategy, layout=layout or None))
        if not check(st is None, f"{what}: {st} {msg}"):
            c.drop(name)
            return
        info = c.describe(name)
        check(info["attr"] == ta, f"{what}: described as {info['attr']}")
        got = from_got(c.get(name), dt)
        check(np.array_equal(got, want), f"{what}: got {got.ravel()[:6]} want {want.ravel()[:6]}")
        if fresh and layout == "":
            fresh_slices_ok(d, name, mshape, tgt, want, dt, what)
        for o in {p[2:-1] for p in src if p.startswith("P(")}:
            ran[(o, strategy)] += 1
        if fresh:
            ran[("fresh", strategy)] += 1
        c.drop(name)


REDUCERS = {"sum": np.sum, "avg": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


def staged(arr, ops, order):
    """numpy's reduction of arr (one axis per partial mesh dim, then the tensor's) along the
    partial axes in `order` (positions into ops), each by its op; avg summed, divided at the
    end by the product of its dims' sizes."""
    count, left = 1, list(range(len(ops)))
    for q in order:
        ax = left.index(q)
        count *= arr.shape[ax] if ops[q] == "avg" else 1
        arr = REDUCERS[ops[q]](arr, axis=ax)
        left.pop(ax)
    return arr / count


def mixed_case(d, rng, nrng, idx, ran):
    """A 2-D mesh partial along both dims with different ops: reshards that reduce one dim (the
    other stays partial) or both, against numpy reducing the changed dims first (DTensor's
    order), then the rest when the tensor is got; a target keeping a partial dim of such a
    source refused for the strategies that reduce everything (p2p, alltoall)."""
    meshes = [m for m in mesh_shapes() if len(m) == 2]
    if not meshes:
        return
    mshape = rng.choice(meshes)
    with_prod = rng.random() < 0.3
    ops = rng.sample(["sum", "max", "prod"] if with_prod else ["sum", "max", "min", "avg"], 2)
    dt = rng.choice(["f32", "f64", "bf16"])
    ndim = rng.choice([1, 2])
    shape = [rng.randint(1, 6) for _ in range(ndim)]
    navg = int(np.prod([n for n, o in zip(mshape, ops) if o == "avg"]))
    # multiples of navg (every avg exact), or for prod 1, -1 and 2 (products of <= 3 small)
    pool = np.array([-1.0, 1.0, 2.0]) if with_prod else np.arange(-6, 7) * float(navg)
    arr = nrng.choice(pool, size=tuple(mshape) + tuple(shape))
    parts = [arr[i, j] for i in range(mshape[0]) for j in range(mshape[1])]
    src = [f"P({ops[0]})", f"P({ops[1]})"]
    kind = rng.choice(["r0", "r1", "s0", "s1", "rr"])
    tgt = {"r0": ["R", src[1]], "r1": [src[0], "R"], "s0": [f"S({ndim - 1})", src[1]],
           "s1": [src[0], "S(0)"], "rr": ["R", "R"]}[kind]
    first = [0] if kind in ("r0", "s0") else [1] if kind in ("r1", "s1") else [0, 1]
    want = staged(arr, ops, first + [q for q in (0, 1) if q not in first])
    sa, ta = attr_text(mshape, src), attr_text(mshape, tgt)
    name = f"m{idx}"
    with d.connect(rng.randrange(NP), timeout=TIMEOUT) as c:
        c.create(name, dt, shape, sa)
        put_contributions(d, name, mshape, src, parts, to_put, TIMEOUT)
        for s in ("p2p", "alltoall"):
            st, msg = error_of(lambda: c.plan(name, ta, strategy=s))
            keeps = kind != "rr"
            check((st == tshard.errors.BadStrategyError.status and "several ops" in msg)
                  if keeps else st is None, f"{sa} -> {ta} by {s}: {st} {msg}")
        order = ["allreduce", "reduce_scatter", "p2p", "alltoall"]
        rng.shuffle(order)
        order.sort(key=lambda s: ran[("mixed", s)])
        strategy = next(s for s in order + ["auto"]
                        if error_of(lambda: c.plan(name, ta, strategy=s))[0] is None)
        what = f"mixed case {idx}: {dt} {sa} -> {ta} by {strategy}"
        st, msg = error_of(lambda: c.reshard(name, ta, strategy=strategy))
        if check(st is None, f"{what}: {st} {msg}"):
            check(c.describe(name)["attr"] == ta, f"{what}: described as {c.describe(name)}")
            got = from_got(c.get(name), dt)
            check(np.array_equal(got, want), f"{what}: got {got.ravel()[:6]} want "
                                             f"{want.ravel()[:6]}")
            ran[("mixed", strategy)] += 1
        c.drop(name)


def checkpoints(d, rng):
    """P(avg), P(prod) and [P(sum),P(max)] tensors saved reduced and with their partial pieces
    kept, read offline by tshard.checkpoint and loaded back (under the saved attribute, and into
    P(avg) from a reduced checkpoint), every time equal to numpy's reduction."""
    work = tempfile.mkdtemp(prefix="tshard-partial-ops-")
    try:
        refs = {}
        with d.connect(0, timeout=TIMEOUT) as c:
            for op, dt in (("avg", "f32"), ("avg", "bf16"), ("prod", "f64"), ("prod", "i32")):
                mshape = [2, NP // 2] if NP % 2 == 0 and NP > 2 else [NP]
                places = [f"P({op})"] + ["S(1)"] * (len(mshape) - 1)
                parts, want = contributions(rng, op, dt, mshape[0], [4, 5])
                name = f"ck_{op}_{dt}"
                c.create(name, dt, [4, 5], attr_text(mshape, places))
                put_contributions(d, name, mshape, places, parts, to_put, TIMEOUT)
                refs[name] = (dt, want, attr_text(mshape, places))
            if NP % 2 == 0 and NP > 2:  # an op per mesh dim: max over dim 1 of sums over dim 0
                mshape, places = [2, NP // 2], ["P(sum)", "P(max)"]
                arr = rng.integers(-9, 10, size=(2, NP // 2, 4, 5)).astype(np.float64)
                c.create("ck_mixed", "f64", [4, 5], attr_text(mshape, places))
                put_contributions(d, "ck_mixed", mshape, places,
                                  [arr[i, j] for i in range(2) for j in range(NP // 2)], to_put,
                                  TIMEOUT)
                refs["ck_mixed"] = ("f64", staged(arr, ["sum", "max"], [0, 1]),
                                    attr_text(mshape, places))
            names = sorted(refs)
            for keep in (False, True):
                path = os.path.join(work, f"keep{int(keep)}")
                c.save(path, names=names, keep_partial=keep)
                for n in names:
                    dt, want, _ = refs[n]
                    check(np.array_equal(from_got(ck.read(path, n), dt), want),
                          f"offline read of {n} (keep_partial={keep}) equals numpy's")
            for n in names:
                c.drop(n)
            c.load(os.path.join(work, "keep1"))
            for n in names:
                dt, want, text = refs[n]
                check(c.describe(n)["attr"] == text and np.array_equal(from_got(c.get(n), dt), want),
                      f"{n} loaded from its kept partial pieces")
                c.drop(n)
            n = "ck_avg_f32"
            c.load(os.path.join(work, "keep0"), names=[n], attr=f"mesh=[{NP}] placements=[P(avg)]")
            want = refs[n][1]
            check(np.array_equal(from_got(c.get(n), "f32"), want), f"{n} loaded into P(avg)")
            check(all(np.array_equal(from_got(a, "f32"), want[b]) for b, a in slices(d, n).values()),
                  f"{n} loaded into P(avg): every rank holds the value")
            c.drop(n)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def refusals(d):
    with d.connect(NP - 1, timeout=TIMEOUT) as c:
        for dt in ("i32", "i64", "bool"):
            st, msg = error_of(lambda: c.create("bad", dt, [4, 3],
                                                f"mesh=[{NP}] placements=[P(avg)]"))
            check(st == tshard.errors.BadDtypeError.status and f"partial avg of {dt}" in msg and
                  "f32, f64, f16 and bf16" in msg, f"create {dt} P(avg): {st} {msg}")
            check(c.list() == [], f"nothing created: {c.list()}")
        v = np.arange(12, dtype=np.int32).reshape(4, 3)
        c.create("ints", "i32", [4, 3], f"mesh=[{NP}] placements=[S(0)]")
        c.put("ints", v)
        before = c.describe("ints")
        for s in (None, "local", "p2p"):
            st, msg = error_of(lambda: c.reshard("ints", f"mesh=[{NP}] placements=[P(avg)]",
                                                 strategy=s))
            check(st == tshard.errors.BadDtypeError.status and "i32" in msg and
                  "sum, prod, max or min" in msg, f"reshard i32 to P(avg) by {s}: {st} {msg}")
        for r in range(NP):
            with d.connect(r, timeout=TIMEOUT) as cr:
                check(cr.describe("ints")["attr"] == before["attr"] and
                      np.array_equal(cr.get("ints"), v),
                      f"rank {r}: the i32 tensor unchanged after the refusals")
        c.drop("ints")
        st, msg = error_of(lambda: tshard.Partial("mean"))
        check(st is not None and "'avg'" in msg and "'prod'" in msg, f"Partial('mean'): {msg}")


def main():
    with Daemons(bin_dir, NP) as d:
        refusals(d)
        checkpoints(d, np.random.default_rng(7))
        ran = collections.Counter()  # (op, strategy) -> reshards run
        for seed in SEEDS:
            rng, nrng = random.Random(seed), np.random.default_rng(seed)
            for i in range(CASES):
                one_case(d, rng, nrng, seed * 1000 + i, ran)
                mixed_case(d, rng, nrng, seed * 1000 + i, ran)
        if NP >= 2:
            for o, s in itertools.product(["avg", "prod"], MUST_RUN):
                check(ran[(o, s)] > 0, f"P({o}) went through {s} at least once")
            for s in ("root", "allgather", "local"):
                check(ran[("fresh", s)] > 0, f"a fresh partial target came by {s} at least once")
        if any(len(m) == 2 for m in mesh_shapes()):
            for s in ("allreduce", "reduce_scatter", "p2p"):
                check(ran[("mixed", s)] > 0, f"mixed ops went through {s} at least once")
        print(f"reshards per (op, strategy): {sorted(ran.items())}")
    check.finish()


main()
