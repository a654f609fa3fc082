"""The Python package's public surface: every public name (tshard.__all__, the public names of
the modules it exports, every public class's public methods and properties) has type hints on
every parameter and its return, and a real docstring that never points at source files or
issue numbers; every exception class is exported at tshard. and subclasses the builtin that
Python code catches. Runs without daemons."""
import builtins
import inspect
import re
import sys
import types

import tshard

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


BAD_DOC = re.compile(r"\b[\w/]+\.(py|c|h|md)\b|#\d+|\bissue\b|\bticket\b|\bphase\b", re.I)


def check_doc(obj, what, short_ok=False):
    doc = inspect.getdoc(obj) or ""
    check(len(doc.split()) >= (3 if short_ok else 6), f"{what}: no real docstring ({doc!r})")
    m = BAD_DOC.search(doc)
    check(m is None, f"{what}: docstring names {m.group(0) if m else ''!r}")


def check_hints(fn, what):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        check(p.annotation is not inspect.Parameter.empty, f"{what}: parameter {p.name} has no "
                                                           f"type hint")
    check(sig.return_annotation is not inspect.Signature.empty, f"{what}: no return type hint")


def members(cls):
    """The class's own members and those it inherits from the package's classes (Client's are
    its mixins'), the nearest first."""
    found = {}
    for k in cls.__mro__:
        if k.__module__.split(".")[0] == "tshard":
            for name, member in vars(k).items():
                found.setdefault(name, member)
    return found.items()


def walk_class(cls, what):
    check_doc(cls, what)
    if issubclass(cls, BaseException):
        return  # exception classes: their methods are the builtin's
    for name, member in members(cls):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, property):
            check_doc(member.fget, f"{what}.{name}", short_ok=True)
            check_hints(member.fget, f"{what}.{name}")
        elif isinstance(member, (staticmethod, classmethod)):
            check_doc(member.__func__, f"{what}.{name}")
            check_hints(member.__func__, f"{what}.{name}")
        elif inspect.isfunction(member):
            check_doc(member, f"{what}.{name}", short_ok=name == "__init__")
            check_hints(member, f"{what}.{name}")


def walk(obj, what, seen):
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if inspect.isclass(obj):
        walk_class(obj, what)
    elif inspect.isfunction(obj):
        check_doc(obj, what)
        check_hints(obj, what)
    elif isinstance(obj, types.ModuleType):
        check_doc(obj, what)
        for name in getattr(obj, "__all__", []):
            walk(getattr(obj, name), f"{what}.{name}", seen)


seen = set()
for name in tshard.__all__:
    check(hasattr(tshard, name), f"tshard.{name} is in __all__ but missing")
    walk(getattr(tshard, name), f"tshard.{name}", seen)

# every status has its class at tshard., subclassing TshardError; builtins where Python expects
from tshard._status import STATUS
for code, (name, _) in STATUS.items():
    if code == 0:
        continue
    cls_name = "".join(p.capitalize() for p in name.split("_")) + "Error"
    cls = getattr(tshard, cls_name, None)
    check(cls is not None and issubclass(cls, tshard.TshardError) and cls.status == code,
          f"tshard.{cls_name} missing or not the class of status {code}")
    shadows = hasattr(builtins, cls_name)  # kept out of __all__: a star import keeps builtins
    check((cls_name in tshard.__all__) != shadows, f"tshard.{cls_name}: in __all__ is "
                                                    f"{cls_name in tshard.__all__}")
    walk(cls, f"tshard.{cls_name}", seen)
check(issubclass(tshard.TimeoutError, builtins.TimeoutError), "TimeoutError is not a builtin one")
ns = {}
exec("from tshard import *", ns)
check(ns.get("TimeoutError", builtins.TimeoutError) is builtins.TimeoutError
      and "NotFoundError" in ns, "a star import hides a builtin or misses a class")
check(issubclass(tshard.OverflowError, builtins.OverflowError), "OverflowError: not a builtin one")
check(issubclass(tshard.IoError, ConnectionError), "IoError is not a ConnectionError")
check(issubclass(tshard.ShutdownError, ConnectionError), "ShutdownError is not a ConnectionError")
check(issubclass(tshard.WaitTimeoutError, builtins.TimeoutError)
      and issubclass(tshard.WaitTimeoutError, tshard.TimeoutError), "WaitTimeoutError bases")
for n in ("InvalidArgumentError", "BadDtypeError", "BadShapeError", "ParseError",
          "BadAttributeError"):
    check(issubclass(getattr(tshard, n), ValueError), f"{n} is not a ValueError")
check(issubclass(tshard.ParseError, tshard.AttrError)
      and issubclass(tshard.BadAttributeError, tshard.AttrError), "AttrError bases")
try:
    raise tshard.NotFoundError("no tensor named 'x'")
except tshard.TshardError as e:
    check(e.status == 14 and e.name == "NOT_FOUND" and "no tensor" in str(e), f"raise: {e}")

# Attr.parse raises the class the daemon would answer for the same text
for text, cls in (("mesh=[4 placements=[S(0)]", tshard.ParseError),
                  ("mesh=[4] placements=[S(0),S(1)]", tshard.BadAttributeError)):
    try:
        tshard.Attr.parse(text)
        check(False, f"Attr.parse({text!r}) accepted")
    except tshard.TshardError as e:
        check(type(e) is cls, f"Attr.parse({text!r}) raised {type(e).__name__}, want "
                              f"{cls.__name__}")

# building an Attr in code: bad values raise the class the daemon answers for the same attribute
for what, fn in (("two placements on a 1-dim mesh",
                  lambda: tshard.Attr(tshard.Mesh([2]), [tshard.Shard(0), tshard.Shard(1)])),
                 ("a mesh size of 0", lambda: tshard.Mesh([0])),
                 ("partial op 'mean'", lambda: tshard.Partial("mean"))):
    try:
        fn()
        check(False, f"{what}: accepted")
    except tshard.BadAttributeError as e:
        check(isinstance(e, ValueError), f"{what}: {e}")
try:
    tshard.Attr(tshard.Mesh([2]), ["S(0)"])
    check(False, "a placement given as text: accepted")
except TypeError as e:
    check("Shard(d)" in str(e), f"placement as text: {e}")

# bf16_bits: only 16-bit patterns, with tshard's words
import numpy as np
b = tshard.bf16_bits(np.array([0x3FC0], np.uint16))
check(isinstance(b, tshard.BF16Bits) and b.shape == (1,) and b.dtype == "bf16", "bf16_bits")
check(tshard.bf16_bits(np.array([-1], np.int16)).bits.dtype == np.uint16, "bf16_bits of int16")
for bad in (np.zeros(2, np.float32), [1, 2], "x"):
    try:
        tshard.bf16_bits(bad)
        check(False, f"bf16_bits({bad!r}) accepted")
    except TypeError as e:
        check("bf16_bits" in str(e), f"bf16_bits({bad!r}): {e}")

# f8_bits: only 8-bit codes and the two formats, with tshard's words
q = tshard.f8_bits(np.array([0x38, 0xC0], np.uint8), "e4m3")
check(isinstance(q, tshard.F8Bits) and q.shape == (2,) and q.dtype == "f8_e4m3", "f8_bits e4m3")
q = tshard.f8_bits(np.array([-1], np.int8), "e5m2")
check(q.bits.dtype == np.uint8 and q.bits[0] == 255 and q.dtype == "f8_e5m2", "f8_bits of int8")
for bad in (np.zeros(2, np.uint16), np.zeros(2, np.float32), [1, 2], "x"):
    try:
        tshard.f8_bits(bad, "e4m3")
        check(False, f"f8_bits({bad!r}) accepted")
    except TypeError as e:
        check("f8_bits" in str(e) and "uint8" in str(e), f"f8_bits({bad!r}): {e}")
for fmt in ("e4m3fnuz", "E5M2", None, 3):
    try:
        tshard.f8_bits(np.zeros(2, np.uint8), fmt)
        check(False, f"f8_bits format {fmt!r} accepted")
    except ValueError as e:
        check("'e4m3'" in str(e) and "'e5m2'" in str(e), f"f8_bits format {fmt!r}: {e}")
for dt in ("bool", "i16", "u16", "u32", "u64"):  # numpy's own dtypes name these tensors
    check(tshard.DTYPES[dt] != np.uint8 and tshard._common._dtype_name(tshard.DTYPES[dt]) == dt,
          f"numpy {tshard.DTYPES[dt]} names {dt}")
check(tshard._common._dtype_name(np.uint8) == "u8", "numpy uint8 names u8, never an f8")

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
