"""Exceptions of the tshard client: one class per status code of include/tshard_errors.h.

Every failure raises a subclass of TshardError carrying ``status`` (the code), ``name``
(e.g. ``"NOT_FOUND"``) and ``message`` (the daemon's words: what was wrong and what is valid).
Classes are named after the codes: ``NotFoundError``, ``BadAttributeError``, ...
"""
from ._status import STATUS

__all__ = ["TshardError", "error_for"]


class TshardError(Exception):
    status = -1
    name = "UNKNOWN"

    def __init__(self, message, status=None):
        if status is not None:
            self.status = status
            self.name = STATUS.get(status, ("UNKNOWN", ""))[0]
        self.message = message or STATUS.get(self.status, ("", "unknown status"))[1]
        super().__init__(f"{self.name}: {self.message}")


_classes = {}
# Codes whose exceptions are also a builtin's: a lost rank ended the connection.
_BUILTIN_BASES = {"RANK_LOST": (ConnectionError,)}
for _code, (_name, _msg) in STATUS.items():
    if _code == 0:
        continue
    _cls_name = "".join(p.capitalize() for p in _name.split("_")) + "Error"
    _cls = type(_cls_name, (TshardError,) + _BUILTIN_BASES.get(_name, ()),
                {"status": _code, "name": _name, "__doc__": _msg})
    _classes[_code] = _cls
    globals()[_cls_name] = _cls
    __all__.append(_cls_name)


def error_for(status, message):
    """The exception for a status code and the daemon's message."""
    cls = _classes.get(status)
    return cls(message) if cls else TshardError(message, status)
