"""Exceptions of the tshard client: one class per status code of the daemons' status list.

Every failure raises a subclass of TshardError carrying ``status`` (the code), ``name``
(e.g. ``"NOT_FOUND"``) and ``message`` (the daemon's words: what was wrong and what is valid).
Classes are named after the codes: ``NotFoundError``, ``BadAttributeError``, ... and a status
raises the same class whether the daemon found the problem or the client's own check did. They
also subclass the builtin that Python code expects: ``TimeoutError`` (and so ``OSError``),
``OverflowError``, ``ConnectionError`` for the connection's failures (``IoError``,
``ShutdownError``), ``ValueError`` for bad values (``InvalidArgumentError``, ``BadDtypeError``,
``BadShapeError``, ``BadLayoutError``, ``ParseError``, ``BadAttributeError``, ...).
``ParseError`` and ``BadAttributeError`` share the base ``AttrError``.
"""
import builtins
from typing import Dict, Optional, Tuple, Type

from ._status import STATUS

__all__ = ["TshardError", "AttrError", "error_for"]


class TshardError(Exception):
    """The base of every tshard exception.

    Attributes:
        status: the status code (an int of the daemons' status list).
        name: the status name, e.g. ``"NOT_FOUND"``.
        message: what was wrong and what is valid, in the daemon's (or the client's) words.
    """

    status = -1
    name = "UNKNOWN"

    def __init__(self, message: Optional[str], status: Optional[int] = None) -> None:
        """Makes the exception for ``message``; ``status`` overrides the class's code."""
        if status is not None:
            self.status = status
            self.name = STATUS.get(status, ("UNKNOWN", ""))[0]
        self.message = message or STATUS.get(self.status, ("", "unknown status"))[1]
        super().__init__(f"{self.name}: {self.message}")

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


class AttrError(TshardError, ValueError):
    """A text that is not valid: the base of ``ParseError`` (it cannot be parsed) and
    ``BadAttributeError`` (a distributed attribute that parses but is not valid). ``Attr.parse``
    and every call taking an attribute raise the same class for the same text."""


# The builtin each status's class also subclasses, beyond TshardError.
_BUILTIN_BASES: Dict[str, Tuple[type, ...]] = {
    "TIMEOUT": (builtins.TimeoutError,),
    "OVERFLOW": (builtins.OverflowError,),
    "IO": (builtins.ConnectionError,),
    "SHUTDOWN": (builtins.ConnectionError,),
    "INVALID_ARGUMENT": (ValueError,),
    "BAD_DTYPE": (ValueError,),
    "BAD_SHAPE": (ValueError,),
    "BAD_LAYOUT": (ValueError,),
    "BAD_STRATEGY": (ValueError,),
    "EINSUM": (ValueError,),
    "OUT_OF_BOUNDS": (IndexError,),
    "NO_MEMORY": (MemoryError,),
    "RANK_LOST": (builtins.ConnectionError,),  # a lost rank ended the connection
}

_classes: Dict[int, Type[TshardError]] = {}
for _code, (_name, _msg) in STATUS.items():
    if _code == 0:
        continue
    _cls_name = "".join(p.capitalize() for p in _name.split("_")) + "Error"
    if _name in ("PARSE", "BAD_ATTRIBUTE"):
        _bases: Tuple[type, ...] = (AttrError,)
    else:
        _bases = (TshardError,) + _BUILTIN_BASES.get(_name, ())
    _doc = (f"Status {_name} ({_code}): {_msg}. Raised with the message of the daemon, or of "
            f"the client's own check before sending, saying what was wrong and what is valid.")
    _cls = type(_cls_name, _bases, {"status": _code, "name": _name, "__doc__": _doc,
                                    "__module__": "tshard.errors"})
    _classes[_code] = _cls
    globals()[_cls_name] = _cls
    __all__.append(_cls_name)


def error_for(status: int, message: str) -> TshardError:
    """The exception of a status code with its message (not raised; the caller raises it).

    Args:
        status: a status code of the daemons' list (``tshard.errors.NotFoundError.status``...).
        message: what was wrong and what is valid.

    Returns:
        An instance of the class of that status (``TshardError`` itself for an unknown code).
    """
    cls = _classes.get(status)
    return cls(message) if cls else TshardError(message, status)
