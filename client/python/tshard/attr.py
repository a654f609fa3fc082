"""Distributed attributes in Python: Mesh, Shard, Replicate, Partial and Attr.

They format to, and parse from, the canonical text form of shard/plan/ATTRIBUTES.md, e.g.
``mesh=[2,4]@0-7 placements=[S(0),R]`` or, with ragged sizes,
``mesh=[4]@0-3 placements=[S(0)] splits={0:[3,0,10,7]}``::

    Attr(Mesh([2, 4]), [Shard(0), Replicate()])
    Attr(Mesh([2], ranks=[4, 6]), [Partial("sum")])
    Attr(Mesh([4]), [Shard(0)], splits={0: [3, 0, 10, 7]})

A sharded dim is split balanced by default (13 rows in 4: 4,3,3,3) or, with
``Shard(d, split="chunk")`` (text ``S(d,chunk)``), by torch.chunk's rule as DTensor's ``Shard``
(13 in 4: 4,4,4,1); ``from_dtensor_spec`` builds DTensor's exact attribute. A negative dim counts
from the end (``Shard(-1)``, ``splits={-1: [...]}``); ``Attr.normalized(ndim)`` resolves it, as
the daemon does when the attribute meets a tensor.

Mesh axes may be named, as JAX users name them; placements may then name their axis (axes left
out are replicated)::

    Attr(Mesh({"dp": 2, "tp": 4}), {"tp": Shard(1)})   # mesh=[dp=2,tp=4]@0-7 placements=[R,S(1)]
    Attr.parse("mesh=[dp=2, tp=4] placements=[tp:Shard(1)]")

``Attr.parse`` ports the daemon's parser: it accepts exactly the texts
the daemon accepts (DTensor spellings ``Shard(0)``, ``Replicate()``, ``Partial(sum)`` included, and
blanks between tokens) and refuses the others with the daemon's message and column, raising the
class the daemon's answer would (``tshard.ParseError`` or ``tshard.BadAttributeError``, both
``tshard.AttrError`` and ``ValueError``). Anywhere the client takes an attribute it accepts an
Attr or its text.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

# the limits the daemon's attribute parser applies, from the C headers (see _limits)
from ._limits import (AXIS_NAME_MAX, CYCLIC_BLOCK_MAX, KERNEL_DIMS_MAX, MESH_DIMS_MAX,
                      TENSOR_DIMS_MAX)
from ._status import BAD_ATTRIBUTE, INVALID_ARGUMENT, PARSE
from .errors import AttrError, error_for

__all__ = ["Mesh", "Shard", "Replicate", "Partial", "Attr", "AttrError", "parse_attr",
           "SPLIT_RULES", "from_dtensor_spec", "numroc", "from_scalapack_desc"]

# The split rules of a sharded dim (ATTRIBUTES.md), the default first.
SPLIT_RULES = ("balanced", "chunk")
_RULE_EXPECTED = 'a split rule (balanced or chunk) or "cyclic=" and a block size'
_MAX_TENSOR_DIMS = TENSOR_DIMS_MAX


class Mesh:
    """A grid of world ranks: ``shape`` (sizes per mesh dim) over ``ranks`` (row-major;
    default 0..n-1). ``names`` optionally names every mesh axis (``["dp", "tp"]``); ``shape`` may
    also be a dict ``{"dp": 2, "tp": 4}``."""

    def __init__(self, shape: Union[Sequence[int], Mapping[str, int]],
                 ranks: Optional[Sequence[int]] = None,
                 names: Optional[Sequence[str]] = None) -> None:
        """Makes the mesh; BadAttributeError (a ValueError) for sizes below 1, a rank count other
        than their product, or axis names that are not 1 to 15 identifier characters or repeat."""
        if isinstance(shape, dict):
            if names is not None:
                raise error_for(BAD_ATTRIBUTE, "mesh: give the axis names in the dict or in "
                                               "names=, not both")
            names = list(shape.keys())
            shape = list(shape.values())
        self.shape = [int(s) for s in shape]
        self.names = None if names is None else [str(x) for x in names]
        if self.names is not None:
            if len(self.names) != len(self.shape):
                raise error_for(BAD_ATTRIBUTE, f"mesh {self.shape}: {len(self.names)} axis names; "
                                               "give one per mesh dim")
            for x in self.names:
                if not (0 < len(x) <= _AXIS_NAME_MAX and x.isascii() and x.isidentifier()):
                    raise error_for(BAD_ATTRIBUTE, f"mesh axis name {x!r}: use 1 to "
                                                   f"{_AXIS_NAME_MAX} of A-Z a-z 0-9 _ (not "
                                                   "starting with a digit)")
            if len(set(self.names)) != len(self.names):
                raise error_for(BAD_ATTRIBUTE, f"mesh axis names {self.names}: "
                                               "each axis needs its own name")
        n = 1
        for s in self.shape:
            if s < 1:
                raise error_for(BAD_ATTRIBUTE, f"mesh sizes must be >= 1, got {self.shape}")
            n *= s
        self.ranks = list(range(n)) if ranks is None else [int(r) for r in ranks]
        if len(self.ranks) != n:
            raise error_for(BAD_ATTRIBUTE, f"mesh {self.shape} holds {n} "
                                           f"ranks, {len(self.ranks)} given")

    def __eq__(self, other):
        return isinstance(other, Mesh) and ((self.shape, self.ranks, self.names)
                                            == (other.shape, other.ranks, other.names))

    def __repr__(self):
        names = "" if self.names is None else f", names={self.names}"
        return f"Mesh({self.shape}, ranks={self.ranks}{names})"

    def _text(self):
        if self.names is None:
            return ",".join(map(str, self.shape))
        return ",".join(f"{x}={s}" for x, s in zip(self.names, self.shape))


class Shard:
    """Tensor dim ``dim`` is split along this mesh dim: by the rule ``split``, or with
    ``cyclic=NB`` in blocks of NB dealt round-robin from mesh coordinate ``src`` (ScaLAPACK's
    block-cyclic distribution)."""

    def __init__(self, dim: int, split: str = "balanced", *, cyclic: int = 0,
                 src: int = 0) -> None:
        """Splits tensor dim ``dim`` (negative counts from the end: -1 is the last dim) along
        this mesh dim. ``split``: "balanced" (the remainder to the first parts: 13 in 4 is
        4,3,3,3) or "chunk" (torch.chunk's, as DTensor's Shard: 13 in 4 is 4,4,4,1; nested over
        several mesh dims). ``cyclic``: the block size of a block-cyclic split (0: a plain
        split); ``src``: the mesh coordinate of block 0. BadAttributeError (a ValueError) for
        another rule, a dim outside -8..7, a block size below 0 or above 2**40, src without
        cyclic, or cyclic with the chunk rule."""
        self.dim = int(dim)
        if not -_MAX_TENSOR_DIMS <= self.dim < _MAX_TENSOR_DIMS:
            raise error_for(BAD_ATTRIBUTE, f"Shard({self.dim}): a tensor dim is "
                                           f"{-_MAX_TENSOR_DIMS} to {_MAX_TENSOR_DIMS - 1} "
                                           "(negative counts from the end)")
        if split not in SPLIT_RULES:
            raise error_for(BAD_ATTRIBUTE, f"Shard({self.dim}): split rule "
                                           f"{split!r}; valid rules are "
                                           + ", ".join(SPLIT_RULES))
        self.split = split
        self.cyclic = int(cyclic)
        self.src = int(src)
        if self.cyclic < 0 or self.cyclic > _CYCLIC_BLOCK_MAX:
            raise error_for(BAD_ATTRIBUTE, f"cyclic block size {self.cyclic}; valid: 1 to "
                                           f"{_CYCLIC_BLOCK_MAX}")
        if self.cyclic == 0 and self.src != 0:
            raise error_for(BAD_ATTRIBUTE, f"src={self.src} without a cyclic block size; write "
                                           f"Shard({self.dim}, cyclic=NB, src={self.src})")
        if self.src < 0:
            raise error_for(BAD_ATTRIBUTE, f"src={self.src}; the mesh "
                                           "coordinate of block 0 is >= 0")
        if self.cyclic and split != "balanced":
            raise error_for(BAD_ATTRIBUTE, f"Shard({self.dim}) deals its dim block-cyclically and "
                                           f"names the {split} rule; a cyclic dim has no split "
                                           "rule (its blocks set its parts)")

    def __str__(self):
        if self.cyclic:
            src = f",src={self.src}" if self.src else ""
            return f"S({self.dim},cyclic={self.cyclic}{src})"
        return f"S({self.dim})" if self.split == "balanced" else f"S({self.dim},{self.split})"

    def __eq__(self, other):
        return (isinstance(other, Shard) and other.dim == self.dim
                and other.split == self.split and other.cyclic == self.cyclic
                and other.src == self.src)

    __repr__ = __str__


class Replicate:
    """Every rank along this mesh dim holds the same values."""

    def __str__(self):
        return "R"

    def __eq__(self, other):
        return isinstance(other, Replicate)

    __repr__ = __str__


_OPS = ("sum", "max", "min", "avg", "prod")


class Partial:
    """Every rank along this mesh dim holds a partial value; the tensor is their ``op``:
    ``sum``, ``avg`` (the sum divided by the number of ranks along the dim, DTensor's
    ``Partial("avg")``; float dtypes only), ``prod`` (on bool: and), ``max`` or ``min``.

    Each partial mesh dim has its own op (``[Partial("sum"), Partial("max")]``), reduced mesh
    dim by mesh dim in mesh-dim order; a ``Partial("prod")`` after a ``Partial("avg")`` is
    refused (put the product's mesh dim first).

    A reshard into ``Partial("avg")`` leaves the value itself on every rank of the dim (the mean
    of equal values); into the other ops, each element's value on one rank of the dim and the
    op's identity (0, 1, lowest, highest) on the others."""

    def __init__(self, op: str = "sum", reduce_op: Optional[str] = None) -> None:
        """A partial placement reduced by ``op`` (``reduce_op``: DTensor's keyword for it)."""
        if reduce_op is not None:  # DTensor's keyword
            op = reduce_op
        if op not in _OPS:
            raise error_for(BAD_ATTRIBUTE, f"partial op {op!r}: valid are "
                                           "'sum', 'avg', 'prod', 'max', 'min'")
        self.op = op

    def __str__(self):
        return f"P({self.op})"

    def __eq__(self, other):
        return isinstance(other, Partial) and other.op == self.op

    __repr__ = __str__


def _rules_error(places):
    """What ts_attr_create says of two placements that shard one dim by different rules."""
    for m, p in enumerate(places):
        for n in range(m):
            q = places[n]
            if (isinstance(p, Shard) and isinstance(q, Shard) and p.dim == q.dim
                    and p.split != q.split):
                return (f"placements {n} and {m} shard dim {p.dim} with different split rules "
                        f"({q.split} and {p.split}); give every placement of a dim the same rule")
    return None


def _splits_rule_error(places, splits):
    """A dim given explicit sizes and the chunk rule (the first in increasing dim order)."""
    for d in sorted(splits):
        rule = next((p.split for p in places if isinstance(p, Shard) and p.dim == d), None)
        if rule == "chunk":
            return (f"dim {d} is given both explicit split sizes and the chunk rule; give one or "
                    f"the other (explicit sizes set every part: write S({d}))")
    return None


def _ranks_text(ranks):
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(f"{ranks[i]}-{ranks[j]}" if j > i else f"{ranks[i]}")
        i = j + 1
    return ",".join(out)


def _partial_ops_error(places):
    """Partial dims reduce in mesh-dim order and avg divides once at the end (shard/plan/attr.c):
    the message refusing a P(prod) after a P(avg), or None."""
    partial = [(m, p.op) for m, p in enumerate(places) if isinstance(p, Partial)]
    avg = next((m for m, op in partial if op == "avg"), None)
    prod = next((m for m, op in partial if op == "prod" and avg is not None and m > avg), None)
    if prod is None:
        return None
    return (f"placements {avg} and {prod} are P(avg) and then P(prod): a product after an "
            f"average is not supported; put the P(prod) mesh dim before the P(avg) one")


def _cyclic_src_error(shape, places):
    """A block-cyclic shard's src inside its mesh dim (shard/plan/attr.c): the message, or None."""
    for m, p in enumerate(places):
        if isinstance(p, Shard) and p.cyclic and p.src >= shape[m]:
            return (f"placement {m}: src={p.src} but the mesh dim has size {shape[m]} (valid: "
                    f"src=0 to {shape[m] - 1})")
    return None


def _cyclic_dims_error(places):
    """A block-cyclic tensor dim is sharded by one mesh dim only: the message, or None."""
    for m, p in enumerate(places):
        if not (isinstance(p, Shard) and p.cyclic):
            continue
        for k, q in enumerate(places):
            if k != m and isinstance(q, Shard) and q.dim == p.dim:
                return (f"placements {min(m, k)} and {max(m, k)} both shard dim {p.dim}, which "
                        f"placement {m} deals block-cyclically; a cyclic dim is sharded by one "
                        f"mesh dim only")
    return None


class Attr:
    """Mesh + one placement per mesh dim + optional explicit split sizes per tensor dim."""

    def __init__(self, mesh: Union[Mesh, Sequence[int]],
                 placements: Union[Sequence[Any], Mapping[str, Any]],
                 splits: Optional[Mapping[int, Sequence[int]]] = None) -> None:
        """Makes the attribute: ``mesh`` (a Mesh or its shape), one placement per mesh dim (or
        ``{axis name: placement}``), ``splits`` ``{tensor dim: [sizes]}`` for uneven splits.
        BadAttributeError (a ValueError) for a placement count other than the mesh dims,
        TypeError for a placement that is not Shard, Replicate or Partial."""
        self.mesh = mesh if isinstance(mesh, Mesh) else Mesh(mesh)
        if isinstance(placements, dict):
            if self.mesh.names is None:
                raise error_for(BAD_ATTRIBUTE, "placements by mesh axis need a mesh with named "
                                               "axes, such as Mesh({'dp': 2, 'tp': 4})")
            unknown = [x for x in placements if x not in self.mesh.names]
            if unknown:
                raise error_for(BAD_ATTRIBUTE, f"mesh axes {unknown} are not in the mesh; its axes "
                                               f"are {self.mesh.names}")
            placements = [placements.get(x, Replicate()) for x in self.mesh.names]
        self.placements = list(placements)
        if len(self.placements) != len(self.mesh.shape):
            raise error_for(BAD_ATTRIBUTE, f"{len(self.placements)} placements "
                                           f"for a {len(self.mesh.shape)}-dim "
                                           "mesh: give one per mesh dim")
        for p in self.placements:
            if not isinstance(p, (Shard, Replicate, Partial)):
                raise TypeError(f"placement {p!r}: use Shard(d), Replicate() or Partial(op)")
        bad = _cyclic_src_error(self.mesh.shape, self.placements) \
            or _partial_ops_error(self.placements) or _rules_error(self.placements) \
            or _cyclic_dims_error(self.placements)
        if bad:
            raise error_for(BAD_ATTRIBUTE, bad)
        self.splits = {int(d): [int(s) for s in v] for d, v in (splits or {}).items()}
        for d in self.splits:
            if not -_MAX_TENSOR_DIMS <= d < _MAX_TENSOR_DIMS:
                raise error_for(BAD_ATTRIBUTE, f"splits for dim {d}; a tensor dim is "
                                               f"{-_MAX_TENSOR_DIMS} to {_MAX_TENSOR_DIMS - 1} "
                                               "(negative counts from the end)")
            if any(isinstance(p, Shard) and p.dim == d and p.cyclic for p in self.placements):
                raise error_for(BAD_ATTRIBUTE, f"splits given for dim {d}, which "
                                               "is dealt block-cyclically (its "
                                               "parts are set by the block size)")
        bad = _splits_rule_error(self.placements, self.splits)
        if bad:
            raise error_for(BAD_ATTRIBUTE, bad)

    def normalized(self, ndim: int) -> "Attr":
        """This attribute on a tensor of ``ndim`` dims: negative dims resolved (``S(-1)`` is
        ``S(ndim-1)``), as the daemon stores it. BadAttributeError naming the valid range for a
        dim below -ndim, or for a dim given splits both as negative and positive."""
        def resolve(d, what):
            if d >= 0:
                return d
            if d < -ndim:
                if ndim == 0:
                    raise error_for(BAD_ATTRIBUTE, f"{what} names dim {d} but the tensor has no "
                                                   "dims (a 0-dim tensor cannot be split)")
                raise error_for(BAD_ATTRIBUTE, f"{what} names dim {d} but the tensor has {ndim} "
                                               f"dims (valid: {-ndim} to {ndim - 1})")
            return d + ndim
        places = [Shard(resolve(p.dim, f"placement {m}, S({p.dim}),"), p.split, cyclic=p.cyclic,
                        src=p.src)
                  if isinstance(p, Shard) else p for m, p in enumerate(self.placements)]
        splits = {d: v for d, v in self.splits.items() if d >= 0}
        for d in sorted((d for d in self.splits if d < 0), reverse=True):
            r = resolve(d, "splits")
            if r in splits:
                raise error_for(BAD_ATTRIBUTE, f"splits are given for dim {d} and for dim {r}, "
                                               f"both dim {r} of a tensor of {ndim} dims; give "
                                               "each dim's splits once")
            splits[r] = self.splits[d]
        return Attr(self.mesh, places, splits)

    def __str__(self):
        text = (f"mesh=[{self.mesh._text()}]@{_ranks_text(self.mesh.ranks)} "
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

    @staticmethod
    def parse(text: Union[str, bytes]) -> "Attr":
        """Parses the text form exactly as the daemon does.

        Args:
            text: e.g. ``"mesh=[4] placements=[S(0)]"`` (DTensor and JAX spellings too).

        Returns:
            The Attr.

        Raises:
            ParseError: text that does not parse; BadAttributeError: an attribute that is not
            valid (both AttrError and ValueError, with the daemon's message naming the column);
            TypeError: not text.

        Example::

            tshard.Attr.parse("mesh=[dp=2, tp=4] placements=[tp:Shard(1)]")
        """
        return parse_attr(text)


# ---------------------------------------------------------------------------------------------
# The parser: a port of shard/plan/attr_text.c, kept in lock-step with it by the shared corpus
# tests/grammar/attr_corpus.jsonl (same accepted texts, same canonical forms, same errors with the
# same columns). It reads the UTF-8 bytes of the text, so columns count bytes as the daemon does.

_INT_MAX = 2147483647
_CYCLIC_BLOCK_MAX = CYCLIC_BLOCK_MAX
_MAX_RANKS_TEXT = 1 << 24
_SPLIT_MAX = (1 << 62) - 1
_MAX_MESH_DIMS = MESH_DIMS_MAX
_MAX_DIMS = KERNEL_DIMS_MAX
_AXIS_NAME_MAX = AXIS_NAME_MAX
_NAME_BUF = 64
_BLANKS = b" \t\n\r"
_PLACEMENT_EXPECTED = "a placement: S(dim), R, P(op) or Shard(dim), Replicate(), Partial(op)"


_STATUS_OF = {"PARSE": 9, "BAD_ATTRIBUTE": 10}


class _Parser:
    def __init__(self, data):
        self.s = data
        self.pos = 0

    def at(self, i=None):
        i = self.pos if i is None else i
        return self.s[i] if i < len(self.s) else 0

    def fail(self, expected):
        c = self.at()
        if c == 0:
            found = "end of text"
        elif 0x20 <= c < 0x7F:
            found = f"'{chr(c)}'"
        else:
            found = f"byte 0x{c:02x}"
        return error_for(PARSE, f"attribute: at column {self.pos + 1} "
                                f"({found}): expected {expected}")

    def error(self, name, message):
        return error_for(_STATUS_OF[name], message)

    def blanks(self):
        n = 0
        while self.at() and self.at() in _BLANKS:
            self.pos += 1
            n += 1
        return n

    def separated(self):
        self.blanks()
        return self.pos > 0 and self.s[self.pos - 1] in _BLANKS

    def tok(self, lit):
        self.blanks()
        b = lit.encode()
        if self.s.startswith(b, self.pos):
            self.pos += len(b)
            return True
        return False

    def expect(self, lit):
        if not self.tok(lit):
            raise self.fail(f'"{lit}"')

    def open_list(self):
        if self.tok("["):
            return "]"
        if self.tok("("):
            return ")"
        raise self.fail('"[" (or a tuple\'s "(")')

    def next_item(self, close):
        if not self.tok(","):
            return False
        self.blanks()
        return self.at() != ord(close)

    def read_name(self):
        c = self.at()
        if not (chr(c).isascii() and (chr(c).isalpha() or c == ord("_"))) or c == 0:
            return ""
        start = self.pos
        while self.at() and (chr(self.at()).isascii()
                             and (chr(self.at()).isalnum() or self.at() == ord("_"))):
            self.pos += 1
        return self.s[start:self.pos].decode()

    def parse_int(self, maximum, what):
        self.blanks()
        if not (0x30 <= self.at() <= 0x39):
            raise self.fail(what)
        start, v = self.pos, 0
        while 0x30 <= self.at() <= 0x39:
            digit = self.at() - 0x30
            if maximum - digit < 0 or v > (maximum - digit) // 10:
                self.pos = start
                raise self.fail(f"{what} of at most {maximum}")
            v = v * 10 + digit
            self.pos += 1
        return v

    def parse_dim(self):
        """A tensor dim: 0 to 7, or -1 to -8 ("-" then digits, no blank between)."""
        self.blanks()
        if self.at() != 0x2d:
            return self.parse_int(_MAX_DIMS - 1, "a tensor dim")
        at = self.pos
        self.pos += 1
        if not 0x30 <= self.at() <= 0x39:
            raise self.fail("the digits of a negative tensor dim, as in -1 (the last dim)")
        v = 0
        while 0x30 <= self.at() <= 0x39 and v <= _MAX_DIMS:
            v = v * 10 + self.at() - 0x30
            self.pos += 1
        if v < 1 or v > _MAX_DIMS or 0x30 <= self.at() <= 0x39:
            self.pos = at
            raise self.fail("a tensor dim: 0 to 7, or -1 to -8 counting from the last dim")
        return -v

    def keyword(self, key):
        """Skips DTensor's keyword spelling of an argument, ``key =``, when it comes next."""
        self.blanks()
        at = self.pos
        if self.read_name() == key and self.tok("="):
            self.blanks()
        else:
            self.pos = at

    def parse_rule(self):
        """The split rule after "S(dim,": [ "split" "=" ] ( "balanced" | "chunk" )."""
        self.keyword("split")
        rule_at = self.pos
        name = self.read_name()
        if name in SPLIT_RULES:
            return name
        self.pos = rule_at
        raise self.fail(_RULE_EXPECTED)

    def parse_shape(self):
        close = self.open_list()
        shape, axes, named = [], [], False
        while True:
            if len(shape) == _MAX_MESH_DIMS:
                self.blanks()
                raise self.fail('"]" (a mesh has at most 8 dims)')
            self.blanks()
            at = self.pos
            name = self.read_name()
            if shape and bool(name) != named:
                self.pos = at
                raise self.fail("a named mesh size such as tp=4 (name every mesh dim or none)"
                                if named else "a mesh size (name every mesh dim or none)")
            if name:
                named = True
                if len(name) > _AXIS_NAME_MAX:
                    self.pos = at
                    raise self.fail(f"a mesh axis name of at most {_AXIS_NAME_MAX} characters")
                if name in axes:
                    raise self.error("PARSE", f"attribute: at column {at + 1}: mesh axis "
                                              f"'{name}' is named twice; give each mesh dim its "
                                              f"own name")
                axes.append(name)
                self.expect("=")
            v = self.parse_int(_INT_MAX, "a mesh size")
            if v < 1:
                self.pos -= 1
                raise self.fail("a mesh size of at least 1")
            shape.append(v)
            if not self.next_item(close):
                break
        self.expect(close)
        return shape, (axes if named else None)

    def parse_ranks(self):
        ranks = []
        while True:
            a = self.parse_int(_INT_MAX, "a rank")
            b = a
            if self.tok("-"):
                self.blanks()
                at = self.pos
                b = self.parse_int(_INT_MAX, "the last rank of a range")
                if b < a:
                    self.pos = at
                    raise self.fail("the last rank of a range, not below its first")
            if b - a + len(ranks) >= _MAX_RANKS_TEXT:
                raise self.fail("fewer ranks (at most 16777216)")
            ranks.extend(range(a, b + 1))
            if not self.tok(","):
                return ranks

    def parse_op(self):
        self.keyword("reduce_op")
        quote = self.at()
        if quote in (ord("'"), ord('"')):
            self.pos += 1
        else:
            quote = 0
        op_at = self.pos
        name = self.read_name()
        if name in _OPS:
            if quote and self.at() != quote:
                raise self.fail("'\"' closing the reduce op" if quote == ord('"')
                                else "\"'\" closing the reduce op")
            if quote:
                self.pos += 1
            return name
        self.pos = op_at
        raise self.fail("a reduce op: sum, avg, prod, max or min")

    def parse_shard_opts(self):
        """[ "," ( rule | "cyclic" "=" int [ "," "src" "=" int ] ) ] after a shard's dim:
        (rule, nb, src)."""
        if not self.tok(","):
            return "balanced", 0, 0
        self.blanks()
        at = self.pos
        if self.read_name() != "cyclic":
            self.pos = at
            return self.parse_rule(), 0, 0
        self.expect("=")
        self.blanks()
        nb_at = self.pos
        nb = self.parse_int(_CYCLIC_BLOCK_MAX, "a block size")
        if nb < 1:
            self.pos = nb_at
            raise self.fail("a block size of at least 1")
        if not self.tok(","):
            return "balanced", nb, 0
        self.blanks()
        at = self.pos
        if self.read_name() != "src":
            self.pos = at
            raise self.fail('"src=" and the mesh coordinate of the first block, as in '
                            'S(0,cyclic=64,src=1)')
        self.expect("=")
        return "balanced", nb, self.parse_int(_INT_MAX, "a mesh coordinate")

    def parse_placement(self):
        self.blanks()
        at = self.pos
        name = self.read_name()
        if name in ("S", "Shard"):
            self.expect("(")
            self.blanks()
            arg = self.pos
            if self.read_name():
                if self.s[arg:self.pos] != b"dim":
                    self.pos = arg
                    raise self.fail("a tensor dim, as in S(0) or Shard(dim=0)")
                self.expect("=")
            d = self.parse_dim()
            rule, nb, src = self.parse_shard_opts()
            self.expect(")")
            return Shard(d, rule, cyclic=nb, src=src)
        if name in ("R", "Replicate"):
            if name == "Replicate" and self.tok("("):
                self.expect(")")
            return Replicate()
        if name in ("P", "Partial"):
            if not self.tok("(") or self.tok(")"):
                return Partial("sum")
            op = self.parse_op()
            self.expect(")")
            return Partial(op)
        self.pos = at
        raise self.fail(_PLACEMENT_EXPECTED)

    def parse_places(self, shape, axes, place_at):
        close = self.open_list()
        place = [Replicate() for _ in range(_MAX_MESH_DIMS)]
        given, named, nplace = set(), None, 0
        while True:
            if nplace == _MAX_MESH_DIMS:
                self.blanks()
                raise self.fail('"]" (at most 8 placements)')
            self.blanks()
            at = self.pos
            name = self.read_name()
            has_axis = bool(name) and self.tok(":")
            if not has_axis:
                self.pos = at
            if named is not None and has_axis != named:
                self.pos = at
                raise self.fail("a placement named by its mesh axis, such as dp:S(0) (name every "
                                "placement or none)" if named else
                                "a placement without a mesh axis name (name every placement or "
                                "none)")
            named = has_axis
            m = nplace
            if has_axis:
                shown = name[:_NAME_BUF - 1]
                if axes is None:
                    raise self.error("PARSE", f"attribute: at column {at + 1}: placement for mesh "
                                              f"axis '{shown}', but the mesh names no axes; name "
                                              f"them as in mesh=[dp=2,tp=4]")
                if name not in axes:
                    raise self.error("PARSE", f"attribute: at column {at + 1}: mesh axis "
                                              f"'{shown}' is not in the mesh; its axes are "
                                              f"{','.join(axes)}")
                m = axes.index(name)
                if m in given:
                    raise self.error("PARSE", f"attribute: at column {at + 1}: mesh axis "
                                              f"'{shown}' is given two placements; give each "
                                              f"axis at most one")
                given.add(m)
            place[m] = self.parse_placement()
            nplace += 1
            if not self.next_item(close):
                break
        self.expect(close)
        if not named and nplace != len(shape):
            raise self.error("BAD_ATTRIBUTE", f"attribute: at column {place_at + 1}: {nplace} "
                                              f"placements for a mesh of {len(shape)} dims; give "
                                              f"one placement per mesh dim")
        return place[:len(shape)]

    def parse(self):
        self.blanks()
        mesh_at = self.pos
        if not (self.tok("mesh") and self.tok("=")):
            self.pos = mesh_at
            raise self.fail('"mesh="')
        shape, axes = self.parse_shape()
        gap = self.separated()
        have_ranks = self.tok("@")
        ranks = None
        if have_ranks:
            ranks = self.parse_ranks()
            gap = self.separated()
        if not gap:
            raise self.fail('",", "-" or a blank before "placements="' if have_ranks else
                            '"@" and a rank list, or a blank before "placements="')
        place_at = self.pos
        if not (self.tok("placements") and self.tok("=")):
            self.pos = place_at
            raise self.fail('"placements="')
        places = self.parse_places(shape, axes, place_at)
        n = 1
        for s in shape:
            n *= s
        if n > _MAX_RANKS_TEXT:
            self.pos = mesh_at
            raise self.fail("a mesh of at most 16777216 ranks")
        if have_ranks and len(ranks) != n:
            raise self.error("BAD_ATTRIBUTE", f"attribute: at column {mesh_at + 1}: mesh of {n} "
                                              f"ranks is given {len(ranks)} ranks; the rank list "
                                              f"must have one rank per mesh position")
        # what ts_attr_create checks: distinct ranks, one op for all partial placements
        if ranks is not None:
            seen, dup = set(), None
            for r in ranks:
                if r in seen and (dup is None or r < dup):
                    dup = r
                seen.add(r)
            if dup is not None:
                raise self.error("BAD_ATTRIBUTE", f"attribute: rank {dup} appears twice in the "
                                                  f"mesh; each rank may appear once")
        bad = _cyclic_src_error(shape, places) or _partial_ops_error(places) \
            or _rules_error(places) or _cyclic_dims_error(places)
        if bad:
            raise self.error("BAD_ATTRIBUTE", f"attribute: {bad}")
        splits = {}
        before = self.pos
        if self.separated() and self.tok("splits"):
            self.expect("=")
            self.expect("{")
            last_dim = None
            while True:
                self.blanks()
                dim_at = self.pos
                d = self.parse_dim()
                if d == last_dim:
                    raise self.error("PARSE", f"attribute: at column {dim_at + 1}: the splits of "
                                              f"dim {d} are given twice; give each dim's splits "
                                              f"once")
                if last_dim is not None and d < last_dim:
                    self.pos = dim_at
                    raise self.fail("tensor dims in increasing order, each once")
                last_dim = d
                self.expect(":")
                self.expect("[")
                sizes = []
                while True:
                    sizes.append(self.parse_int(_SPLIT_MAX, "a split size"))
                    if not self.tok(","):
                        break
                self.expect("]")
                splits[d] = sizes
                if not self.tok(","):
                    break
            self.expect("}")
        else:
            self.pos = before
        self.blanks()
        if self.at() != 0:
            raise self.fail('end of text, or " splits={...}" after the placements')
        # with negative dims, which dims are the same is known on a tensor only (normalized)
        normal = all(d >= 0 for d in splits) and not any(
            isinstance(p, Shard) and p.dim < 0 for p in places)
        for d in sorted(splits) if normal else []:
            parts = 1
            sharded = False
            for m, p in enumerate(places):
                if isinstance(p, Shard) and p.dim == d:
                    parts *= shape[m]
                    sharded = True
                    if p.cyclic:
                        raise self.error("BAD_ATTRIBUTE", f"attribute: splits given for dim {d}, "
                                                          f"which placement {m} deals "
                                                          f"block-cyclically (its parts are set "
                                                          f"by the block size)")
            if not sharded:
                raise self.error("BAD_ATTRIBUTE", f"attribute: splits given for dim {d}, which "
                                                  f"no placement shards")
            if len(splits[d]) != parts:
                raise self.error("BAD_ATTRIBUTE", f"attribute: dim {d} has {len(splits[d])} split "
                                                  f"sizes but is split into {parts} parts")
        bad = _splits_rule_error(places, splits)
        if bad:
            raise self.error("BAD_ATTRIBUTE", f"attribute: {bad}")
        return Attr(Mesh(shape, ranks, names=axes), places, splits)


def numroc(n: int, nb: int, iproc: int, isrc: int, nprocs: int) -> int:
    """ScaLAPACK's NUMROC: how many of n elements, dealt in blocks of nb round-robin over nprocs
    processes from process isrc, process iproc holds."""
    if n <= 0 or nb < 1 or nprocs < 1:
        return 0
    rel = (iproc - isrc) % nprocs
    full, rest = divmod(n, nb * nprocs)
    return full * nb + min(max(rest - rel * nb, 0), nb)


def from_scalapack_desc(desc: Sequence[int], grid: Sequence[Any],
                        my_prow: int = -1) -> Attr:
    """The attribute of a ScaLAPACK matrix, as ts_attr_from_scalapack_desc in C.

    ``desc``: the 9-int descriptor (DTYPE_=1, CTXT_, M_, N_, MB_, NB_, RSRC_, CSRC_, LLD_);
    ``grid``: (nprow, npcol) or (nprow, npcol, order) with BLACS order 'R' (rank = prow*npcol +
    pcol, the default) or 'C' (rank = pcol*nprow + prow), or (nprow, npcol, ranks) with the rank
    of every process row-major over the grid. The M x N column-major matrix is the tensor of
    shape [N, M] (element [j, i] is A(i, j)), so each rank's local array is ScaLAPACK's with
    LLD_ = LOCr. ``my_prow`` >= 0 checks LLD_ against that process row's local rows; -1 against
    the largest. BadAttributeError (a ValueError) for an invalid descriptor or grid."""
    d = [int(x) for x in desc]
    if len(d) != 9:
        raise error_for(INVALID_ARGUMENT, f"a ScaLAPACK descriptor has 9 ints, got {len(d)}")
    dtype, _ctxt, m, n, mb, nb, rsrc, csrc, lld = d
    nprow, npcol = int(grid[0]), int(grid[1])
    order = grid[2] if len(grid) > 2 else "R"
    if dtype != 1:
        raise error_for(BAD_ATTRIBUTE, f"ScaLAPACK descriptor: DTYPE_ is {dtype}; only 1 (a dense "
                                       f"block-cyclic matrix) is supported")
    if nprow < 1 or npcol < 1:
        raise error_for(BAD_ATTRIBUTE, f"ScaLAPACK process grid {nprow} x {npcol}; both sizes must "
                                       "be at least 1")
    if m < 0 or n < 0:
        raise error_for(BAD_ATTRIBUTE, f"ScaLAPACK descriptor: M_={m}, "
                                       f"N_={n}; the matrix sizes must be >= 0")
    if mb < 1 or nb < 1:
        raise error_for(BAD_ATTRIBUTE, f"ScaLAPACK descriptor: MB_={mb}, NB_={nb}; block sizes "
                                       "must be at least 1")
    if not (0 <= rsrc < nprow and 0 <= csrc < npcol):
        raise error_for(BAD_ATTRIBUTE, f"ScaLAPACK descriptor: RSRC_={rsrc}, CSRC_={csrc} on a "
                                       f"{nprow} x {npcol} grid; valid: RSRC_ 0 to {nprow - 1}, "
                                       f"CSRC_ 0 to {npcol - 1}")
    if not -1 <= my_prow < nprow:
        raise error_for(INVALID_ARGUMENT, f"process row {my_prow} on a grid of {nprow} rows (-1: "
                                          "check LLD_ against the largest)")
    row = my_prow if my_prow >= 0 else rsrc
    locr = numroc(m, mb, row, rsrc, nprow)
    if lld < max(1, locr):
        raise error_for(BAD_ATTRIBUTE, f"ScaLAPACK descriptor: LLD_={lld} but "
                                       f"process row {row} holds {locr} local "
                                       f"rows; LLD_ must be at least max(1, {locr})")
    if isinstance(order, str):
        o = order.upper()
        if o not in ("R", "C"):
            raise error_for(INVALID_ARGUMENT, f"BLACS grid order {order!r}; valid: 'R' (row-major) "
                                              "or 'C' (column-major)")
        ranks = [i * npcol + j if o == "R" else j * nprow + i
                 for i in range(nprow) for j in range(npcol)]
    else:
        ranks = [int(r) for r in order]
    return Attr(Mesh([nprow, npcol], ranks),
                [Shard(1, cyclic=mb, src=rsrc), Shard(0, cyclic=nb, src=csrc)])


def parse_attr(text: Union[str, bytes]) -> Attr:
    """Parses an attribute's text as the daemon does; see :meth:`Attr.parse`."""
    if isinstance(text, str):
        data = text.encode("utf-8", "surrogatepass")
    elif isinstance(text, (bytes, bytearray)):
        data = bytes(text)
    else:
        raise TypeError(f"attribute: expected the text form (str), got {type(text).__name__}")
    nul = data.find(b"\0")
    if nul >= 0:
        data = data[:nul]
    return _Parser(data).parse()


# DTensor's reduce ops (torch.distributed's ReduceOp names) -> tshard's
_DTENSOR_OPS = {"sum": "sum", "avg": "avg", "product": "prod", "prod": "prod", "max": "max",
                "min": "min"}


def _from_torch_placement(p: Any) -> Any:
    """A torch.distributed.tensor placement (Shard, Replicate, Partial), recognised by its class
    without importing torch; None for an object that is not one."""
    cls = type(p)
    if not (cls.__module__ or "").startswith("torch"):
        return None
    name = cls.__name__
    if name == "Shard":
        return Shard(p.dim, "chunk")
    if name == "Replicate":
        return Replicate()
    if name in ("Partial", "_Partial"):
        op = str(getattr(p, "reduce_op", "sum")).lower().rsplit(".", 1)[-1]
        if op not in _DTENSOR_OPS:
            raise error_for(BAD_ATTRIBUTE, f"DTensor placement {p!r}: reduce op {op!r}; tshard "
                                           f"reduces by {', '.join(sorted(_DTENSOR_OPS))}")
        return Partial(_DTENSOR_OPS[op])
    raise error_for(BAD_ATTRIBUTE, f"DTensor placement {p!r} ({name}) has no tshard attribute; "
                                   "valid: Shard, Replicate, Partial")


def _mesh_of(mesh: Any) -> Mesh:
    """A Mesh from a Mesh, a shape, {axis: size} or a DeviceMesh (its shape, dim names and
    ranks)."""
    if isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, Mapping):
        return Mesh(dict(mesh))
    if hasattr(mesh, "mesh") and hasattr(mesh, "mesh_dim_names"):  # torch's DeviceMesh
        ranks = [int(r) for r in mesh.mesh.flatten().tolist()]
        shape = [int(s) for s in mesh.mesh.shape]
        names = mesh.mesh_dim_names
        if names:
            return Mesh(dict(zip(names, shape)), ranks=ranks)
        return Mesh(shape, ranks=ranks)
    return Mesh([int(s) for s in mesh])


def from_dtensor_spec(mesh_shape: Any, placements: Sequence[Any],
                      shape: Optional[Sequence[int]] = None) -> Attr:
    """The attribute of a DTensor: the same slices on the same mesh positions.

    Args:
        mesh_shape: the DeviceMesh's shape ([2, 2]), {axis name: size}, a tshard Mesh or a
            torch DeviceMesh (its ranks and dim names are kept).
        placements: one per mesh dim, DTensor-style: tshard's Shard, Replicate, Partial, or
            torch.distributed.tensor's (recognised without importing torch). Every Shard takes
            the chunk rule, as DTensor's Shard splits by torch.chunk.
        shape: the tensor's global shape; with it, negative dims are resolved (S(-1) is the
            last dim), as DTensor resolves them. None keeps them as written.

    Returns:
        The Attr, e.g. ``mesh=[2,2]@0-3 placements=[S(0,chunk),S(0,chunk)]``.

    Raises:
        BadAttributeError (a ValueError): a placement with no tshard counterpart, a count of
        placements other than the mesh dims, a dim out of range for ``shape``.
    """
    places = []
    for p in placements:
        t = _from_torch_placement(p)
        if t is None and isinstance(p, Shard):
            t = Shard(p.dim, "chunk")
        elif t is None and isinstance(p, (Replicate, Partial)):
            t = p
        elif t is None:
            raise error_for(BAD_ATTRIBUTE, f"placement {p!r}: expected Shard, Replicate or Partial "
                                           "(tshard's or torch.distributed.tensor's)")
        places.append(t)
    attr = Attr(_mesh_of(mesh_shape), places)
    return attr if shape is None else attr.normalized(len(shape))
