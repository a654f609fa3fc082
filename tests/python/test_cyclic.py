#!/usr/bin/python3
"""Block-cyclic placements through the Python client, checked against numpy models.

Offline (no daemons): tshard.numroc against a count of owned rows; tshard.from_scalapack_desc on
random descriptors and BLACS grids ('R', 'C', explicit ranks) gives the documented attribute, and
a numpy model of ScaLAPACK's local arrays (each process's rows and columns of the M x N matrix,
column-major with LLD = LOCr) equals, byte for byte, the tshard model of the same rank's local
tensor (the [N, M] transpose, its owned blocks concatenated in global order, row-major); the
offline planner's minimum wire bytes (tshard.plan) between random cyclic, S and R attributes
equal a per-element numpy count of what each target rank holds and its own source slice lacks.
Text round trips, Shard(d, cyclic=, src=) and descriptor errors (DTYPE_, MB_, RSRC_, LLD_).

With real daemons: storing or resharding (alone or in a batch) into a block-cyclic attribute is
refused with
UNSUPPORTED, naming it, and the tensor resharded keeps its values on every rank; a checkpoint
loaded under a block-cyclic attribute, and an einsum into a block-cyclic output, are refused the
same way, creating nothing. With README.md
given: its "From ScaLAPACK" example runs and prints what its comments say.

usage: test_cyclic.py BUILD_BIN_DIR NRANKS [README.md]"""
import contextlib
import io
import random
import re
import shutil
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, NP = sys.argv[1], int(sys.argv[2])
check = Checks()


def owned(n, nb, p, src, nprocs):
    """The indices of [0, n) that process p holds, in global order (ScaLAPACK's INDXG2P)."""
    return [g for g in range(n) if (g // nb + src) % nprocs == p]


def numroc_and_text(rng):
    for _ in range(3000):
        n, nb, nprocs = rng.randrange(300), rng.randrange(1, 20), rng.randrange(1, 8)
        src, p = rng.randrange(nprocs), rng.randrange(nprocs)
        got = tshard.numroc(n, nb, p, src, nprocs)
        check(got == len(owned(n, nb, p, src, nprocs)), f"numroc({n},{nb},{p},{src},{nprocs})")
    for text, canon in [("mesh=[4] placements=[Shard(dim=0, cyclic=64, src=3)]",
                         "mesh=[4]@0-3 placements=[S(0,cyclic=64,src=3)]"),
                        ("mesh=[2,2] placements=[S(1,cyclic=2),R]",
                         "mesh=[2,2]@0-3 placements=[S(1,cyclic=2),R]")]:
        a = tshard.Attr.parse(text)
        check(str(a) == canon and tshard.Attr.parse(str(a)) == a, f"round trip {text}")
    a = tshard.Attr(tshard.Mesh([3]), [tshard.Shard(0, cyclic=5, src=2)])
    check(str(a) == "mesh=[3]@0-2 placements=[S(0,cyclic=5,src=2)]", f"Shard(cyclic=): {a}")
    check.raises(ValueError, lambda: tshard.Shard(0, src=1), "src without cyclic", ["cyclic"])
    check.raises(ValueError, lambda: tshard.Attr(tshard.Mesh([2]), [tshard.Shard(0, cyclic=4, src=2)]),
                 "src outside the mesh dim", ["src=0 to 1"])
    check.raises(ValueError, lambda: tshard.Attr.parse("mesh=[2] placements=[S(0,cyclic=0)]"),
                 "block size 0", ["at least 1"])


def scalapack_model(rng):
    for _ in range(60):
        nprow, npcol = rng.randrange(1, 4), rng.randrange(1, 4)
        m, n, mb, nb = rng.randrange(0, 40), rng.randrange(0, 40), rng.randrange(1, 7), \
            rng.randrange(1, 7)
        rsrc, csrc = rng.randrange(nprow), rng.randrange(npcol)
        order = rng.choice(["R", "C"])
        lld = max(1, tshard.numroc(m, mb, rsrc, rsrc, nprow)) + rng.randrange(3)
        attr = tshard.from_scalapack_desc([1, 0, m, n, mb, nb, rsrc, csrc, lld],
                                          (nprow, npcol, order))
        ranks = [i * npcol + j if order == "R" else j * nprow + i
                 for i in range(nprow) for j in range(npcol)]
        want = (f"mesh=[{nprow},{npcol}]@" + ",".join(map(str, ranks)) + " placements=["
                f"S(1,cyclic={mb}{f',src={rsrc}' if rsrc else ''}),"
                f"S(0,cyclic={nb}{f',src={csrc}' if csrc else ''})]")
        check(tshard.Attr.parse(want) == attr, f"descriptor attribute {attr} vs {want}")
        a = np.arange(m * n, dtype=np.float64).reshape(n, m).T  # A(i, j), any values
        t = np.ascontiguousarray(a.T)                           # the tshard tensor [N, M]
        for prow in range(nprow):
            for pcol in range(npcol):
                rows, cols = owned(m, mb, prow, rsrc, nprow), owned(n, nb, pcol, csrc, npcol)
                locr = tshard.numroc(m, mb, prow, rsrc, nprow)
                check(locr == len(rows), "LOCr is numroc")
                sl = np.asfortranarray(a[np.ix_(rows, cols)])   # ScaLAPACK's local, LLD = LOCr
                tl = np.ascontiguousarray(t[np.ix_(cols, rows)])  # tshard's local tensor
                check(sl.tobytes(order="F") == tl.tobytes(order="C"),
                      f"local array of ({prow},{pcol}) byte for byte")
    bad = [([2, 0, 10, 10, 2, 2, 0, 0, 10], "DTYPE_"), ([1, 0, 10, 10, 0, 2, 0, 0, 10], "MB_=0"),
           ([1, 0, 10, 10, 2, 2, 2, 0, 10], "RSRC_=2"), ([1, 0, 10, 10, 2, 2, 0, 0, 5], "LLD_=5"),
           ([1, 0, -1, 10, 2, 2, 0, 0, 5], "M_=-1")]
    for desc, needle in bad:
        check.raises(ValueError, lambda: tshard.from_scalapack_desc(desc, (2, 2)),
                     f"descriptor {desc}", [needle])
    check.raises(ValueError, lambda: tshard.from_scalapack_desc([1, 0, 10, 10, 2, 2, 0, 0, 6],
                                                                (2, 2, "Q")), "grid order", ["'Q'"])


def random_attr(rng, ndim, nranks):
    """A random 1-D or 2-D mesh attribute over ranks 0..nranks-1 (S, cyclic S, R)."""
    shapes = [[nranks]] + [[a, nranks // a] for a in range(2, nranks) if nranks % a == 0]
    mesh = rng.choice(shapes)
    places, used = [], set()
    for size in mesh:
        d = rng.randrange(ndim)
        kind = rng.choice(["cyclic", "S", "R"])
        if kind != "R" and d not in used:
            used.add(d)
            places.append(tshard.Shard(d, cyclic=rng.randrange(1, 5), src=rng.randrange(size))
                          if kind == "cyclic" else tshard.Shard(d))
        else:
            places.append(tshard.Replicate())
    return tshard.Attr(tshard.Mesh(mesh), places)


def holds(attr, shape, rank):
    """Boolean mask of the elements rank holds under attr (per-element ownership)."""
    coords = np.unravel_index(rank, attr.mesh.shape)
    mask = np.ones(shape, dtype=bool)
    for m, p in enumerate(attr.placements):
        if not isinstance(p, tshard.Shard):
            continue
        k, length = attr.mesh.shape[m], shape[p.dim]
        g = np.arange(length)
        if p.cyclic:
            owner = (g // p.cyclic + p.src) % k
        else:
            sizes = [length // k + (q < length % k) for q in range(k)]
            owner = np.repeat(np.arange(k), sizes)
        sel = [np.newaxis] * len(shape)
        sel[p.dim] = slice(None)
        mask &= (owner == coords[m])[tuple(sel)]
    return mask


def offline_plans(rng):
    for _ in range(40):
        ndim = rng.randrange(1, 3)
        shape = [rng.randrange(0, 12) for _ in range(ndim)]
        nranks = rng.randrange(1, 7)
        src, dst = random_attr(rng, ndim, nranks), random_attr(rng, ndim, nranks)
        if not any(getattr(p, "cyclic", 0) for p in src.placements + dst.placements):
            continue
        want = sum(int((holds(dst, shape, r) & ~holds(src, shape, r)).sum())
                   for r in range(nranks)) * 8
        p = tshard.plan(shape, src, dst, dtype="f64")
        check(p["min_wire_bytes"] == want, f"plan {src} -> {dst} on {shape}: "
                                           f"{p['min_wire_bytes']} wire bytes, numpy {want}")
        check(p["strategy"] in ("p2p", "alltoall"), f"strategy {p['strategy']}")


def with_daemons():
    cyc = f"mesh=[{NP}] placements=[S(0,cyclic=2)]"
    with Daemons(bin_dir, NP) as d:
        c = d.connect(0)
        check.expect(20, lambda: c.create("cyc", "f64", [10, 3], cyc),
                     "creating a block-cyclic tensor", "block-cyclic")
        c.create("x", "f64", [10, 3], f"mesh=[{NP}] placements=[S(0)]")
        x = np.arange(30, dtype=np.float64).reshape(10, 3)
        c.put("x", x)
        check.expect(20, lambda: c.reshard("x", cyc), "resharding into block-cyclic",
                     "block-cyclic")
        check.expect(20, lambda: c.reshard_many({"x": cyc}),
                     "a batch resharding into block-cyclic", "block-cyclic")
        for r in range(NP):
            with d.connect(r) as cr:
                check(np.array_equal(cr.get("x"), x), f"rank {r}: the tensor is unchanged")
        check.expect(30, lambda: c.einsum("ij->ji", "x", out="xt", attr=f"mesh=[{NP}] "
                                          f"placements=[S(1,cyclic=2)]"),
                     "an einsum into a block-cyclic output", "block-cyclic")
        check("xt" not in c.list(), "a refused einsum creates nothing")
        ckdir = tempfile.mkdtemp(prefix="tshard_cyclic_")
        try:
            c.save(ckdir, all=True)
            c.drop("x")
            check.expect(20, lambda: c.load(ckdir, attr=cyc), "loading under block-cyclic",
                         "block-cyclic")
            check(c.list() == [], f"a refused load creates nothing: {c.list()}")
            c.load(ckdir)
            check(np.array_equal(c.get("x"), x), "the checkpoint loads under its own attribute")
        finally:
            shutil.rmtree(ckdir, ignore_errors=True)
        c.close()


def readme_example(path):
    text = open(path).read()
    start = text.index("\n## From ScaLAPACK")
    section = text[start:text.find("\n## ", start + 1)]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    printed = buf.getvalue().splitlines()
    comments = [line.split("# ")[-1].split(":")[-1].strip() if "LOCr" in line else
                line.split("# ")[-1].strip() for line in code.splitlines()
                if line.startswith("print(")]
    check(len(printed) == len(comments), f"README prints {printed}")
    for got, want in zip(printed, comments):
        check(got.strip() == want, f"README example printed {got!r}, its comment says {want!r}")


rng = random.Random(2026)
if len(sys.argv) > 3:
    readme_example(sys.argv[3])
numroc_and_text(rng)
scalapack_model(rng)
offline_plans(rng)
with_daemons()
check.finish()
