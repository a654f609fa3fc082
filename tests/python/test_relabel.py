#!/usr/bin/python3
"""Rank relabeling against real daemons: reshard(..., relabel=True) through the Python client and
`tshard reshard --relabel` / `tshard plan --relabel` through the CLI.

Randomized (fixed seeds): tensors on random 1-D and 2-D meshes over random subsets of the ranks
in random orders (shards of random dims, replicas, uneven sizes), resharded with relabel to
another random attribute. Every answer's ranks are a permutation of the target's, the tensor's
attribute on every rank is the target with those ranks, the values read back equal the numpy
reference, and the elements kept in place (from a box model of the balanced split written here)
are the most any permutation of the target's ranks keeps (brute force over all of them). Layouts
that differ only by a permutation move nothing (the local strategy, no bytes on the wire); a
partial source keeps the target's order; relabel=False keeps it too. Misuse: a relabel that is
not a bool, the CLI's --relabel with several tensors, reshard_many with a relabel item. At 4
ranks, the README's "Rank relabeling" example runs as written and prints what it says.

usage: test_relabel.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import contextlib
import io
import itertools
import json
import os
import random
import re
import subprocess
import sys

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, NP = sys.argv[1], int(sys.argv[2])
SEEDS = [int(s) for s in sys.argv[3:]] or [1, 2]
check = Checks()


# ---- an independent box model of balanced splits ----------------------------------------------
def parse(text):
    """(mesh shape, ranks, placements) of an attribute text this test writes."""
    a = tshard.Attr.parse(text)
    return list(a.mesh.shape), list(a.mesh.ranks), [str(p) for p in a.placements]


def sizes(length, k):
    return [length // k + (1 if i < length % k else 0) for i in range(k)]


def box(shape, mesh, places, pos):
    """The block [lo, hi) per dim at mesh position pos (row-major)."""
    coords, rest = [], pos
    for m in reversed(mesh):
        coords.append(rest % m)
        rest //= m
    coords.reverse()
    lo, hi = [0] * len(shape), list(shape)
    for m, p in enumerate(places):
        if p.startswith("S("):
            d = int(p[2:-1])
            s = sizes(shape[d], mesh[m])
            lo[d] = sum(s[:coords[m]])
            hi[d] = lo[d] + s[coords[m]]
    return lo, hi


def overlap(a, b):
    n = 1
    for lo1, hi1, lo2, hi2 in zip(a[0], a[1], b[0], b[1]):
        n *= max(0, min(hi1, hi2) - max(lo1, lo2))
    return n


def kept(shape, src, dst, order):
    """Elements of dst's blocks already on their rank when position j goes to order[j]."""
    smesh, sranks, splaces = src
    dmesh, _, dplaces = dst
    if any(p.startswith("P(") for p in splaces):
        return 0
    total = 0
    for j, r in enumerate(order):
        if r in sranks:
            total += overlap(box(shape, dmesh, dplaces, j),
                             box(shape, smesh, splaces, sranks.index(r)))
    return total


# ---- random attributes ------------------------------------------------------------------------
def random_attr(rng, ndim):
    k = rng.randint(1, NP)
    ranks = rng.sample(range(NP), k)
    two = k == 4 and rng.random() < 0.5
    mesh = [2, 2] if two else [k]
    dims = list(range(ndim))
    rng.shuffle(dims)
    places = []
    for m in range(len(mesh)):
        if dims and rng.random() < 0.75:
            places.append(f"S({dims.pop()})")
        else:
            places.append("R")
    return f"mesh=[{','.join(map(str, mesh))}]@{','.join(map(str, ranks))} " \
           f"placements=[{','.join(places)}]"


def case(c, d, rng, i):
    ndim = rng.randint(1, 2)
    shape = [rng.randint(1, 11) for _ in range(ndim)]
    st, dt = random_attr(rng, ndim), random_attr(rng, ndim)
    name = f"t{i}"
    ref = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 3 - 7
    c.create(name, "f32", shape, st)
    c.put(name, ref)
    res = c.reshard(name, dt, relabel=True)
    src, dst = parse(st), parse(dt)
    order = res.get("ranks")
    what = f"{st} -> {dt} shape {shape}"
    check(order is not None and sorted(order) == sorted(dst[1]),
          f"{what}: the answer's ranks {order} are a permutation of {dst[1]}")
    if order is None:
        return
    best = max(kept(shape, src, dst, list(p)) for p in itertools.permutations(dst[1]))
    got = kept(shape, src, dst, order)
    check(got == best, f"{what}: {got} elements kept in place, the best is {best}")
    want = tshard.Attr.parse(dt)
    for r in range(NP):
        with d.connect(r) as cr:
            a = tshard.Attr.parse(cr.describe(name)["attr"])
            check(list(a.mesh.ranks) == order and list(a.mesh.shape) == dst[0]
                  and a.placements == want.placements,
                  f"{what}: rank {r} describes {a}, want ranks {order}")
    with d.connect(rng.randrange(NP)) as cr:
        check(np.array_equal(cr.get(name), ref), f"{what}: the values read back")
    c.drop(name)


def permuted_moves_nothing(c):
    ranks = list(range(NP))
    random.Random(7).shuffle(ranks)
    st = f"mesh=[{NP}]@{','.join(map(str, ranks))} placements=[S(0)]"
    ref = np.arange(NP * 5 * 3, dtype=np.float32).reshape(NP * 5, 3)
    c.create("perm", "f32", ref.shape, st)
    c.put("perm", ref)
    before = c.stats()
    res = c.reshard("perm", f"mesh=[{NP}] placements=[S(0)]", relabel=True)
    after = c.stats()
    check(res.get("ranks") == ranks, f"a permuted layout: the source's order back: {res}")
    check(res["strategy"] == "local", f"a permuted layout moves nothing: {res['strategy']}")
    sent = after.get("bytes_sent", 0) - before.get("bytes_sent", 0)
    check(sent == 0, f"no bytes sent: {sent}")
    check(np.array_equal(c.get("perm"), ref), "the permuted layout's values")
    # a future, then a plain call on the same connection, as a script uses them: each keeps
    # the order the tensor already has (nothing moves)
    fut = c.reshard("perm", st, relabel=True, wait=False)
    back = c.reshard("perm", f"mesh=[{NP}] placements=[S(0)]", relabel=True)
    res = fut.result(timeout=60)
    check(res.get("ranks") == ranks and back.get("ranks") == ranks,
          f"a future's relabeled answer, then a plain call's: {res} {back}")
    check(np.array_equal(c.get("perm"), ref), "the values after the future and the plain call")
    res = c.reshard("perm", f"mesh=[{NP}] placements=[S(1)]")
    check("ranks" not in res, f"without relabel the answer names no ranks: {res}")
    got = list(tshard.Attr.parse(c.describe("perm")["attr"]).mesh.ranks)
    check(got == list(range(NP)), f"without relabel the target keeps its order: {got}")
    c.drop("perm")


def partial_keeps_order(d, c):
    ref = np.arange(NP * 4, dtype=np.float32).reshape(NP, 4)
    c.create("part", "f32", ref.shape, f"mesh=[{NP}] placements=[P(sum)]")
    for r in range(NP):
        with d.connect(r) as cr:
            cr.put_slice("part", ref if r == 0 else np.zeros_like(ref))
    rev = list(reversed(range(NP)))
    res = c.reshard("part", f"mesh=[{NP}]@{','.join(map(str, rev))} placements=[S(0)]",
                    relabel=True)
    check(res.get("ranks") == rev, f"a partial source keeps the target's order: {res}")
    check(np.array_equal(c.get("part"), ref), "the partial source reduced")
    c.drop("part")


def cli(d, *args):
    env = dict(os.environ, TSHARD_SOCKET=d.socket(0))
    return subprocess.run([os.path.join(bin_dir, "tshard"), *args, "--socket", d.socket(0)],
                          capture_output=True, text=True, timeout=60, env=env)


def cli_checks(d, c):
    ranks = list(reversed(range(NP)))
    c.create("cw", "f32", [NP * 2, 2], f"mesh=[{NP}]@{','.join(map(str, ranks))} "
             "placements=[S(0)]")
    c.create("cx", "f32", [NP * 2, 2], f"mesh=[{NP}] placements=[S(0)]")
    p = cli(d, "reshard", "cw", "--to", f"mesh=[{NP}] placements=[S(0)]", "--relabel", "--json")
    check(p.returncode == 0, f"tshard reshard --relabel: {p.returncode} {p.stderr}")
    if p.returncode == 0:
        out = json.loads(p.stdout)
        check(out.get("ranks") == ranks and out["strategy"] == "local",
              f"tshard reshard --relabel --json: {out}")
    p = cli(d, "reshard", "cw", "cx", "--to", f"mesh=[{NP}] placements=[S(1)]", "--relabel")
    check(p.returncode == 2 and "--relabel takes one tensor" in p.stderr,
          f"--relabel with two tensors: {p.returncode} {p.stderr}")
    shape = f"{NP * 4},8"
    p = subprocess.run([os.path.join(bin_dir, "tshard"), "plan", "--shape", shape, "--from",
                        f"mesh=[{NP}]@{','.join(map(str, ranks))} placements=[S(0)]", "--to",
                        f"mesh=[{NP}] placements=[S(0)]", "--relabel", "--json"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"tshard plan --relabel: {p.stderr}")
    if p.returncode == 0:
        out = json.loads(p.stdout)
        check(out["relabel"]["kept_bytes"] == NP * 4 * 8 * 4 and out["strategy"] == "local"
              and tshard.Attr.parse(out["relabel"]["to"]) == tshard.Attr.parse(
                  f"mesh=[{NP}]@{','.join(map(str, ranks))} placements=[S(0)]"),
              f"tshard plan --relabel --json: {out}")
    c.drop("cw")
    c.drop("cx")


def misuse(c):
    c.create("m", "f32", [4], f"mesh=[{NP}] placements=[R]")
    check.raises(TypeError, lambda: c.reshard("m", f"mesh=[{NP}] placements=[S(0)]",
                                              relabel="yes"), "relabel='yes'", ["relabel"])
    check.raises(Exception, lambda: c.reshard_many({"m": {"attr": f"mesh=[{NP}] placements="
                                                          "[S(0)]", "relabel": True}}),
                 "reshard_many with a relabel item", ["relabel"])
    c.drop("m")


def readme_example():
    """The README's "Rank relabeling" python block, as written, against 4 daemons of job demo."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                             "docs", "layouts.md")).read()
    start = text.index("\n## Rank relabeling")
    section = text[start:text.find("\n## ", start + 1)]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    with Daemons(bin_dir, 4, job="demo") as d:
        os.environ["TSHARD_SOCKET_DIR"] = d.dir
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "README.md", "exec"), {})
        del os.environ["TSHARD_SOCKET_DIR"]
        with d.connect(0) as c:
            check(c.list() == [], f"the README example drops what it made: {c.list()}")
    check(buf.getvalue().strip() == "local [3, 2, 1, 0]",
          f"the README example prints {buf.getvalue()!r}")


with Daemons(bin_dir, NP) as d:
    with d.connect(0) as c:
        for seed in SEEDS:
            rng = random.Random(seed)
            for i in range(12):
                case(c, d, rng, i)
        permuted_moves_nothing(c)
        partial_keeps_order(d, c)
        cli_checks(d, c)
        misuse(c)
if NP == 4:
    readme_example()
check.finish()
