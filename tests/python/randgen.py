"""Random tensors and attributes for the randomized differential tests (test_reshard_random.py,
test_ckpt_random.py): reference values exact in every dtype, and attributes over random subsets
of the ranks (1-D and 2-D meshes; shards, replicas, partials; ragged splits, zeros allowed) with
the layouts that fit or do not fit a tensor. With rules=True the attributes also draw a split
rule per tensor dim (balanced or chunk) and write some dims from the end (S(-1), splits={-1:...});
compare such texts with same_attr(a, b, ndim)."""
import numpy as np

import tshard
from checks import exact_values

NO_REDUCTIONS = ("f8_e4m3", "f8_e5m2")  # dtypes whose tensors cannot be partial
UNORDERED = ("c64", "c128")  # partial sums, never max or min (complex numbers have no order)


def reference(dtype, shape):
    """Small integers, exact in every dtype (bf16 and f8 as their bits, see exact_values)."""
    v = np.arange(int(np.prod(shape)), dtype=np.int64) % 23 - 11
    return exact_values(v, dtype, -11).reshape(shape)


def same_attr(a, b, ndim=None):
    """Whether two attribute texts name the same attribute (spellings may differ; with ndim,
    dims written from the end are resolved on a tensor of ndim dims first)."""
    x, y = tshard.Attr.parse(a), tshard.Attr.parse(b)
    if ndim is not None:
        x, y = x.normalized(ndim), y.normalized(ndim)
    return x == y


class Gen:
    """Random attributes and layouts for one tensor shape over nranks ranks."""

    def __init__(self, rng, nranks, rules=False):
        self.rng = rng
        self.nranks = nranks
        self.rules = rules

    def mesh(self):
        r = self.rng
        k = r.randint(1, self.nranks)
        ranks = r.sample(range(self.nranks), k)
        if r.random() < 0.5:
            ranks.sort()
        divs = [a for a in range(2, k) if k % a == 0]
        shape = [k] if not divs or r.random() < 0.5 else [r.choice(divs), 0]
        if len(shape) == 2:
            shape[1] = k // shape[0]
        return shape, ranks

    def attr(self, tshape, dtype=None):
        """A random attribute; no partial placement for a dtype without reductions."""
        r = self.rng
        mshape, ranks = self.mesh()
        op = "sum" if dtype in UNORDERED else r.choice(["sum", "max", "min"])
        nd = len(tshape)
        rule = {d: r.choice(["", ",chunk"]) if self.rules else "" for d in range(nd)}
        places, dims = [], []
        for _ in mshape:
            x = r.random()
            dims.append(None)
            if x < 0.45:
                d = r.randrange(nd)
                dims[-1] = d
                written = d - nd if self.rules and r.random() < 0.3 else d
                places.append(f"S({written}{rule[d]})")
            elif x < 0.8:
                places.append("R")
            elif dtype in NO_REDUCTIONS:
                places.append("R")
            else:
                places.append(f"P({op})")
        text = (f"mesh=[{','.join(map(str, mshape))}]@{','.join(map(str, ranks))} "
                f"placements=[{','.join(places)}]")
        # ragged splits for some sharded dim of the balanced rule, zeros allowed
        sharded = sorted({d for d in dims if d is not None and not rule[d]})
        if sharded and r.random() < 0.3:
            d = r.choice(sharded)
            parts = int(np.prod([m for m, x in zip(mshape, dims) if x == d]))
            cuts = sorted(r.randint(0, tshape[d]) for _ in range(parts - 1))
            sizes = [b - a for a, b in zip([0] + cuts, cuts + [tshape[d]])]
            key = d - nd if self.rules and r.random() < 0.5 else d
            text += f" splits={{{key}:[{','.join(map(str, sizes))}]}}"
        return text

    def layout(self, ndim):
        """(tag, fits): row-major, permuted, blocked, or one that does not fit the tensor."""
        r = self.rng
        good = {1: ["", "a", "A2a", "A4a"], 2: ["", "ab", "ba", "aB4b", "Ab2a", "BA4b2a"],
                3: ["", "abc", "cab", "aBc2b"]}[ndim]
        bad = ["A0ab", "zz", "abcd"[:ndim + 1], "aa"[:max(ndim, 2)], "ab" if ndim != 2 else "abc"]
        if r.random() < 0.12:
            return r.choice(bad), False
        return r.choice(good), True
