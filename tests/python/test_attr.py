#!/usr/bin/python3
"""The Python attribute helpers against the C formatter and parser: random attributes (meshes of
1 to 3 dims, rank lists, shard/replicate/partial, ragged sizes with zeros) formatted by Python
must be what `tshard show` (the C parser + formatter) prints as canonical, and parse back equal.

usage: test_attr.py BUILD_BIN_DIR"""
import os
import random
import subprocess
import sys

from checks import Checks
from tshard import Attr, Mesh, Partial, Replicate, Shard

tshard_bin = os.path.join(sys.argv[1], "tshard")
rng = random.Random(11)
check = Checks()


for case in range(150):
    mdims = rng.randint(1, 3)
    mshape = [rng.randint(1, 3) for _ in range(mdims)]
    n = 1
    for s in mshape:
        n *= s
    ranks = rng.sample(range(32), n) if rng.random() < 0.5 else None
    ndim = rng.randint(1, 3)
    shape = [rng.randint(1, 12) for _ in range(ndim)]
    places = []
    for _ in range(mdims):
        k = rng.random()
        if k < 0.5:
            places.append(Shard(rng.randrange(ndim)))
        elif k < 0.8:
            places.append(Replicate())
        else:
            op = rng.choice(["sum", "max", "min", "avg", "prod"])
            if op == "prod" and Partial("avg") in places:  # refused: tested below
                op = "sum"
            places.append(Partial(op))
    splits = {}
    for d in range(ndim):
        parts = 1
        for m, p in enumerate(places):
            if isinstance(p, Shard) and p.dim == d:
                parts *= mshape[m]
        if parts > 1 and rng.random() < 0.4:  # ragged, zeros allowed
            cuts = sorted(rng.randint(0, shape[d]) for _ in range(parts - 1))
            sizes = [b - a for a, b in zip([0] + cuts, cuts + [shape[d]])]
            splits[d] = sizes
    attr = Attr(Mesh(mshape, ranks), places, splits)
    text = str(attr)
    r = subprocess.run([tshard_bin, "show", "--ascii", "--shape", ",".join(map(str, shape)),
                        "--attr", text], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"C refused {text}: {r.stderr}")
    if r.returncode == 0:
        canonical = r.stdout.splitlines()[0]
        check(canonical == text, f"python {text!r} != C {canonical!r}")
        check(Attr.parse(canonical) == attr, f"parse({canonical!r}) != attr")
    # the long placement names parse too
    long_text = text.replace("R]", "Replicate]").replace("R,", "Replicate,")
    check(Attr.parse(long_text) == attr, f"long form {long_text}")

# helpers refuse what cannot be an attribute
for bad, what in [(lambda: Mesh([0]), "empty mesh"),
                  (lambda: Mesh([2], ranks=[1]), "rank count"),
                  (lambda: Attr(Mesh([2]), []), "placement count"),
                  (lambda: Partial("mean"), "partial op"),
                  (lambda: Attr(Mesh([2, 2]), [Partial("avg"), Partial("prod")]), "prod after avg"),
                  (lambda: Attr.parse("mesh=[2] placements=[X]"), "bad placement"),
                  (lambda: Attr.parse("nonsense"), "not an attribute")]:
    try:
        bad()
        check(False, f"{what}: accepted")
    except ValueError:
        check(True, what)

check.finish()
