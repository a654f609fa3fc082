"""Distributed attributes in Python: Mesh, Shard, Replicate, Partial and Attr.

They format to, and parse from, the canonical text form of shard/ATTRIBUTES.md, e.g.
``mesh=[2,4]@0-7 placements=[S(0),R]`` or, with ragged sizes,
``mesh=[4]@0-3 placements=[S(0)] splits={0:[3,0,10,7]}``::

    Attr(Mesh([2, 4]), [Shard(0), Replicate()])
    Attr(Mesh([2], ranks=[4, 6]), [Partial("sum")])
    Attr(Mesh([4]), [Shard(0)], splits={0: [3, 0, 10, 7]})

Anywhere the client takes an attribute it accepts an Attr or its text.
"""
import re

__all__ = ["Mesh", "Shard", "Replicate", "Partial", "Attr"]


class Mesh:
    """A grid of world ranks: ``shape`` (sizes per mesh dim) over ``ranks`` (row-major;
    default 0..n-1)."""

    def __init__(self, shape, ranks=None):
        self.shape = [int(s) for s in shape]
        n = 1
        for s in self.shape:
            if s < 1:
                raise ValueError(f"mesh sizes must be >= 1, got {self.shape}")
            n *= s
        self.ranks = list(range(n)) if ranks is None else [int(r) for r in ranks]
        if len(self.ranks) != n:
            raise ValueError(f"mesh {self.shape} holds {n} ranks, {len(self.ranks)} given")

    def __eq__(self, other):
        return isinstance(other, Mesh) and (self.shape, self.ranks) == (other.shape, other.ranks)

    def __repr__(self):
        return f"Mesh({self.shape}, ranks={self.ranks})"


class Shard:
    """Tensor dim ``dim`` is split along this mesh dim."""

    def __init__(self, dim):
        self.dim = int(dim)

    def __str__(self):
        return f"S({self.dim})"

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    __repr__ = __str__


class Replicate:
    """Every rank along this mesh dim holds the same values."""

    def __str__(self):
        return "R"

    def __eq__(self, other):
        return isinstance(other, Replicate)

    __repr__ = __str__


class Partial:
    """Every rank along this mesh dim holds a partial value; the tensor is their ``op``
    (``sum``, ``max`` or ``min``)."""

    def __init__(self, op="sum"):
        if op not in ("sum", "max", "min"):
            raise ValueError(f"partial op {op!r}: valid are 'sum', 'max', 'min'")
        self.op = op

    def __str__(self):
        return f"P({self.op})"

    def __eq__(self, other):
        return isinstance(other, Partial) and other.op == self.op

    __repr__ = __str__


def _ranks_text(ranks):
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(f"{ranks[i]}-{ranks[j]}" if j > i else f"{ranks[i]}")
        i = j + 1
    return ",".join(out)


class Attr:
    """Mesh + one placement per mesh dim + optional explicit split sizes per tensor dim."""

    def __init__(self, mesh, placements, splits=None):
        self.mesh = mesh if isinstance(mesh, Mesh) else Mesh(mesh)
        self.placements = list(placements)
        if len(self.placements) != len(self.mesh.shape):
            raise ValueError(f"{len(self.placements)} placements for a {len(self.mesh.shape)}-dim "
                             f"mesh: give one per mesh dim")
        for p in self.placements:
            if not isinstance(p, (Shard, Replicate, Partial)):
                raise TypeError(f"placement {p!r}: use Shard(d), Replicate() or Partial(op)")
        self.splits = {int(d): [int(s) for s in v] for d, v in (splits or {}).items()}

    def __str__(self):
        text = (f"mesh=[{','.join(map(str, self.mesh.shape))}]@{_ranks_text(self.mesh.ranks)} "
                f"placements=[{','.join(map(str, self.placements))}]")
        if self.splits:
            parts = [f"{d}:[{','.join(map(str, self.splits[d]))}]" for d in sorted(self.splits)]
            text += " splits={" + ",".join(parts) + "}"
        return text

    def __repr__(self):
        return f"Attr({str(self)!r})"

    def __eq__(self, other):
        if isinstance(other, str):
            other = Attr.parse(other)
        return (isinstance(other, Attr) and self.mesh == other.mesh
                and self.placements == other.placements and self.splits == other.splits)

    _FIELD = re.compile(r"\s*mesh=\[([0-9,\s]*)\](?:@([0-9,\-\s]+))?\s+placements=\[([^\]]*)\]"
                        r"(?:\s+splits=\{(.*)\})?\s*$")

    @staticmethod
    def parse(text):
        """Parses the canonical text (or the long placement names Shard(d), Replicate,
        Partial(op)). The daemon's parser is the reference; errors here say what was expected."""
        m = Attr._FIELD.match(text)
        if not m:
            raise ValueError(f"attribute {text!r}: expected 'mesh=[sizes][@ranks] "
                             f"placements=[...] [splits={{dim:[sizes],...}}]'")
        shape = [int(s) for s in m.group(1).split(",") if s.strip()]
        ranks = None
        if m.group(2):
            ranks = []
            for span in m.group(2).split(","):
                a, _, b = span.strip().partition("-")
                ranks.extend(range(int(a), int(b) + 1) if b else [int(a)])
        places = []
        for p in (s.strip() for s in m.group(3).split(",") if s.strip()):
            pm = re.fullmatch(r"(?:S|Shard)\((\d+)\)|(R|Replicate)|(?:P|Partial)\((sum|max|min)\)", p)
            if not pm:
                raise ValueError(f"attribute {text!r}: placement {p!r} is not S(d), R or P(op)")
            places.append(Shard(int(pm.group(1))) if pm.group(1) is not None
                          else Replicate() if pm.group(2) else Partial(pm.group(3)))
        splits = {}
        if m.group(4):
            for dm in re.finditer(r"(\d+):\[([0-9,\s]*)\]", m.group(4)):
                splits[int(dm.group(1))] = [int(s) for s in dm.group(2).split(",") if s.strip()]
        return Attr(Mesh(shape, ranks), places, splits)
