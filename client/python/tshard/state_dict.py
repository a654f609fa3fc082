"""Whole PyTorch-style state dicts through the daemons: ``Client.put_state_dict`` (a dict of
numpy arrays or torch CPU tensors, bf16 included, created or replaced under attribute rules and
stored) and ``Client.get_state_dict`` (a dict of numpy arrays or torch tensors back), and
``Client.create_many``. Each is ONE batched request when the tensors are stored as asked: a
put_state_dict is one put_many that also checks every tensor's attribute; when one is missing or
differs (that put_many refused, nothing stored), one create_many makes them (a no-op for those
stored as asked, a new zero-filled tensor made beside one that differs and swapped in at once)
and one put_many stores the data. A get_state_dict is one list and one get_many. torch is
imported only when a torch tensor is given or asked for.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import attr_rules as _rules
from . import batch_io
from . import torch as _tt
from . import tshard_pb2 as pb
from ._common import _attr_msg, _check_name, _dtype_name, _layout_tag
from ._status import BAD_DTYPE, BAD_SHAPE, NOT_FOUND
from .errors import TshardError, error_for
from .typed_put import BF16Bits

_INVALID_ARGUMENT = 1
# a put_many refused for these makes the tensors first: missing, another dtype, shape or attribute
_REMAKE = (14, 4, 5, 10)


def create_request(specs: Mapping[str, Any], exist_ok: bool, replace: bool) -> Any:
    """The CreateManyRequest of ``specs``: ``{name: (dtype, shape, attr[, layout])}`` or
    ``{name: {'dtype', 'shape', 'attr', 'layout'}}``."""
    if not isinstance(specs, Mapping) or not specs:
        raise TypeError(f"create_many takes a non-empty dict {{name: (dtype, shape, attr)}}, not "
                        f"{type(specs).__name__} {specs!r}"[:300])
    q = pb.CreateManyRequest(replace=bool(replace))
    for name, spec in specs.items():
        if isinstance(spec, Mapping):
            spec = (spec.get("dtype"), spec.get("shape"), spec.get("attr"), spec.get("layout"))
        if not isinstance(spec, (tuple, list)) or len(spec) not in (3, 4) or None in spec[:3]:
            raise TypeError(f"create_many: the spec of '{name}' must be (dtype, shape, attr) or "
                            f"(dtype, shape, attr, layout), or a dict of those keys; got "
                            f"{spec!r}"[:300])
        dtype, shape, attr = spec[:3]
        layout = spec[3] if len(spec) == 4 else None
        if isinstance(shape, (str, bytes)) or not all(
                isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
            raise TypeError(f"create_many: the shape of '{name}' must be a sequence of ints, "
                            f"not {shape!r}")
        if any(s < 0 for s in shape):
            raise error_for(BAD_SHAPE, f"create_many: the shape {tuple(shape)} of '{name}' has a "
                                       "negative size; sizes are >= 0")
        q.items.add(name=_check_name(name), dtype=_dtype_name(dtype),
                    shape=[int(s) for s in shape], attr=_attr_msg(attr),
                    layout=pb.Layout(tag=_layout_tag(layout)), exist_ok=bool(exist_ok))
    return q


def _array_of(name: str, value: Any) -> Tuple[Any, str, Tuple[int, ...]]:
    """What put_many sends for a state dict's entry, its tshard dtype and its shape."""
    a = _tt.as_array(value, f"put_state_dict of '{name}'")
    if isinstance(a, BF16Bits):
        return a, "bf16", tuple(a.bits.shape)
    if not isinstance(a, np.ndarray):
        raise TypeError(f"put_state_dict: '{name}' is a {type(value).__name__}; give numpy "
                        f"arrays or torch CPU tensors (bf16 bits as tshard.bf16_bits)")
    try:
        return a, _dtype_name(a.dtype), tuple(a.shape)
    except ValueError as e:
        raise error_for(BAD_DTYPE, f"put_state_dict: '{name}' has dtype {a.dtype}: {e}") from None


def put_state_dict(c, sd: Mapping[str, Any], attrs: Any = None, default: Any = None,
                   key: Optional[str] = None) -> List[str]:
    """Client.put_state_dict (see its docstring)."""
    if not isinstance(sd, Mapping) or not sd:
        raise TypeError(f"put_state_dict takes a non-empty dict {{name: array or tensor}}, not "
                        f"{type(sd).__name__}")
    rules = _rules.parse(attrs, "put_state_dict: attrs")
    arrays, specs, missing = {}, {}, []
    for name, value in sd.items():
        a, dt, shape = _array_of(name, value)
        attr = _rules.attr_for(rules, default, name)
        if attr is None:
            missing.append(name)
            continue
        arrays[name] = a
        specs[name] = (dt, shape, attr)
    if missing:
        raise error_for(_INVALID_ARGUMENT, f"put_state_dict: no attribute for {missing[:8]}"
                                           f"{' and more' if len(missing) > 8 else ''}; give "
                                           f"rules naming or matching them, or a default")
    for pattern, _ in rules:  # a misspelt name is an error, not ignored
        if not _rules.is_glob(pattern) and pattern not in sd:
            raise error_for(NOT_FOUND, f"put_state_dict: the rule {pattern!r} names no tensor of "
                                       "the state dict")
    try:  # the tensors stored as asked: one put_many, which checks their attributes too
        batch_io.put_many(c, arrays, key=None if key is None else key + "/as-stored",
                          attrs={n: s[2] for n, s in specs.items()})
        return list(arrays)
    except TshardError as e:
        if e.status not in _REMAKE:
            raise
    c._call(None if key is None else key + "/create",
            create_many=create_request(specs, exist_ok=True, replace=True))
    batch_io.put_many(c, arrays, key=key)
    return list(arrays)


def get_state_dict(c, names: Optional[Sequence[str]] = None, like: str = "numpy",
                   prefix: Optional[str] = None) -> Dict[str, Any]:
    """Client.get_state_dict (see its docstring)."""
    if like not in ("numpy", "torch"):
        raise ValueError(f"get_state_dict: like must be 'numpy' or 'torch', not {like!r}")
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"get_state_dict: prefix must be a str or None, not "
                        f"{type(prefix).__name__}")
    listed = c.list(details=True)
    if names is None:
        names = sorted(t["name"] for t in listed)
    elif isinstance(names, str):
        raise TypeError("get_state_dict takes a list of names (or None: every tensor), not one "
                        "name")
    names = [n for n in names if prefix is None or n.startswith(prefix)]
    if not names:
        return {}
    got = batch_io.get_many(c, names, like=like, listed=listed)
    k = len(prefix or "")
    return {n[k:]: v for n, v in got.items()}
