"""Helpers of the partial-placement tests (test_partial_ops.py, test_complex.py): mesh
coordinates, and every rank putting its own contribution to a partial tensor."""


def coords(mshape, i):
    """Row-major mesh coordinates of mesh index i."""
    c = []
    for s in reversed(mshape):
        c.append(i % s)
        i //= s
    return c[::-1]


def put_contributions(d, name, mshape, places, parts, to_put, timeout):
    """Every rank puts its slice of its partial coordinate's contribution: parts[k] is the
    contribution of partial coordinate k (row-major over the partial mesh dims), to_put(array,
    dtype) the data a put sends for it."""
    pdims = [m for m, p in enumerate(places) if p.startswith("P(")]
    with d.connect(0, timeout=timeout) as c:
        info = c.describe(name)
    for x in info["ranks"]:
        if x["bytes"] == 0:
            continue
        cc = coords(mshape, x["rank"])
        k = 0
        for m in pdims:
            k = k * mshape[m] + cc[m]
        box = tuple(slice(lo, hi) for lo, hi in zip(x["lo"], x["hi"]))
        with d.connect(x["rank"], timeout=timeout) as c:
            c.put_slice(name, to_put(parts[k][box], info["dtype"]))
