"""Attribute rules: which attribute each tensor takes in ``Client.load``,
``Client.load_safetensors`` and ``Client.put_state_dict``. The grammar is the C library's,
which ``tshard load --attr PATTERN=ATTR`` and ``tshardd --resume-attr`` read too:

* a rule is a PATTERN and an attribute: a dict entry ``{PATTERN: attr}`` (an Attr, its text, or
  None: the default), or the text ``"PATTERN=ATTR"`` (split at the first ``=``; the attribute
  starts with ``mesh``);
* a PATTERN is a tensor name or a glob: ``*`` any run of characters, ``?`` one character,
  ``[abc]``, ``[a-z]`` one of a set, ``[!abc]`` none of it (no backslash escapes; ``[^`` is
  refused: write ``[!``);
* a tensor takes the rule naming it exactly, else the first glob (in the rules' order) matching
  its name, else the default.
"""
import fnmatch
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union

from . import tshard_pb2 as pb
from ._status import INVALID_ARGUMENT
from .attr import Attr
from .errors import error_for

__all__ = ["parse", "pick", "attr_for", "messages", "is_glob"]

PATTERN_MAX_BYTES = 127  # as tensor names (proto/ts_rules.h TS_RULES_NAME_MAX)
GLOB_CHARS = "*?["

Rules = List[Tuple[str, Any]]  # (pattern, attribute or None), in order


def is_glob(pattern: str) -> bool:
    """Whether a pattern is a glob (holds ``*``, ``?`` or ``[``) rather than a name."""
    return any(ch in pattern for ch in GLOB_CHARS)


def _check_pattern(pattern: Any, what: str) -> str:
    if not isinstance(pattern, str):
        raise TypeError(f"{what}: a pattern must be a str (a tensor name or a glob), not "
                        f"{type(pattern).__name__} {pattern!r}")
    n = len(pattern.encode("utf-8", "surrogatepass"))
    if not 1 <= n <= PATTERN_MAX_BYTES:
        raise error_for(INVALID_ARGUMENT, f"{what}: a pattern of {n} bytes; give a tensor name or "
                                          f"a glob of 1 to {PATTERN_MAX_BYTES} bytes")
    for i, ch in enumerate(pattern):
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise error_for(INVALID_ARGUMENT, f"{what} {pattern!r} has a control character "
                                              f"(U+{ord(ch):04X}); patterns are UTF-8 without "
                                              "control characters")
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            if pattern.startswith("[^", i):
                raise error_for(INVALID_ARGUMENT, f"{what} {pattern!r}: '[^' at character {i}; "
                                                  "write '[!' for a set of characters not matched")
            j = i + 1 + (pattern.startswith("!", i + 1))
            j += pattern.startswith("]", j)
            j = pattern.find("]", j)
            if j < 0:
                raise error_for(INVALID_ARGUMENT, f"{what} {pattern!r}: the '[' at "
                                                  f"character {i} is not closed; a "
                                                  "set is '[abc]', '[a-z]' or '[!abc]'")
            i = j
        i += 1
    return pattern


def _split(text: str, what: str) -> Tuple[str, str]:
    pattern, eq, attr = text.partition("=")
    if not eq or not attr.lstrip(" \t").startswith("mesh"):
        raise error_for(INVALID_ARGUMENT, f"{what} {text!r}: expected PATTERN=ATTR, a tensor name "
                                          "or glob and an attribute (e.g. 'h.*.w=mesh=[4] "
                                          "placements=[S(0)]'); one attribute for every tensor is "
                                          "the default attribute")
    return pattern, attr


def parse(attrs: Union[None, Mapping[str, Any], Iterable[str]], what: str = "attrs") -> Rules:
    """The rules of ``attrs``: a dict ``{PATTERN: attr or None}`` or an iterable of
    ``"PATTERN=ATTR"`` texts (None: no rule), each pattern checked.

    Raises:
        TypeError: another type, or an attribute that is not an Attr, its text or None.
        InvalidArgumentError: a bad pattern or rule text.
    """
    if attrs is None:
        return []
    if isinstance(attrs, (str, Attr)):
        raise TypeError(f"{what}: expected rules (a dict of name or glob to attribute, or "
                        f"'PATTERN=ATTR' texts), not one attribute {str(attrs)!r}; give one "
                        f"attribute for every tensor as the default")
    if isinstance(attrs, Mapping):
        items = list(attrs.items())
    else:
        try:
            texts = list(attrs)
        except TypeError:
            raise TypeError(f"{what}: expected a dict of name or glob to attribute, or "
                            f"'PATTERN=ATTR' texts, not {type(attrs).__name__}") from None
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"{what}: a rule's text must be a str 'PATTERN=ATTR', not "
                                f"{type(t).__name__} {t!r}")
        items = [_split(t, what) for t in texts]
    out = []
    for pattern, attr in items:
        _check_pattern(pattern, what)
        if attr is not None and not isinstance(attr, (str, Attr)):
            raise TypeError(f"{what}[{pattern!r}]: expected a tshard.Attr, its text or None, "
                            f"not {type(attr).__name__} {attr!r}")
        out.append((pattern, attr))
    return out


def pick(rules: Rules, name: str) -> int:
    """The index of the rule a tensor named ``name`` takes, or -1 (the default)."""
    for i, (pattern, _) in enumerate(rules):
        if pattern == name:
            return i
    for i, (pattern, _) in enumerate(rules):
        if is_glob(pattern) and fnmatch.fnmatchcase(name, pattern):
            return i
    return -1


def attr_for(rules: Rules, default: Any, name: str) -> Optional[Any]:
    """The attribute of a tensor named ``name``: its rule's, else ``default``."""
    k = pick(rules, name)
    return rules[k][1] if k >= 0 and rules[k][1] is not None else default


def messages(rules: Rules) -> List[Any]:
    """The rules as AttrRule messages (an attribute None: unset, the default)."""
    out = []
    for pattern, attr in rules:
        m = pb.AttrRule(name=pattern)
        if attr is not None:
            m.attr.CopyFrom(pb.DistAttr(text=str(attr)))
        out.append(m)
    return out
