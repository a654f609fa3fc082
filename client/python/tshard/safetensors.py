"""Hugging Face safetensors through the daemons: the requests of ``Client.load_safetensors``
(import a ``model.safetensors`` or a sharded ``model.safetensors.index.json`` under chosen
attributes; each rank reads only the bytes of its own slice) and ``Client.save_safetensors``
(export stored tensors into one file or HF shards plus an index; each rank writes its own
slices' bytes). The file format and what is checked: the safetensors guide of the documentation.

Also ``read_header(path)``: a file's header as a dict, with json and struct only (no daemon),
for choosing names and attributes before an import."""
import json
import os
import struct
from typing import Any, Dict, Iterable, Mapping, Optional, Union

from . import tshard_pb2 as pb
from .attr import Attr
from . import attr_rules as _rules

__all__ = ["import_request", "export_request", "read_header"]


def _attr_msg(attr):
    return pb.DistAttr(text=str(attr) if isinstance(attr, Attr) else attr)


def import_request(path: Union[str, "os.PathLike[str]"], attrs: Optional[Mapping[str, Any]] = None,
                   default: Any = None, names: Union[None, str, Iterable[str]] = None,
                   prefix: Optional[str] = None,
                   rename: Optional[Mapping[str, str]] = None) -> Any:
    """The ImportSafetensorsRequest of an import (see ``Client.load_safetensors``).

    Raises:
        TypeError: a path that is not a str or a path.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, not {type(path).__name__}")
    req = pb.ImportSafetensorsRequest(path=os.path.abspath(os.fspath(path)),
                                      strip_prefix=prefix or "")
    req.tensors.extend(_rules.messages(_rules.parse(attrs, "load_safetensors: attrs")))
    if default is not None:
        req.default_attr.CopyFrom(_attr_msg(default))
    req.names.extend([names] if isinstance(names, str) else list(names or []))
    for src, dst in dict(rename or {}).items():
        req.rename.add(key=src, value=dst)
    return req


def export_request(path: Union[str, "os.PathLike[str]"],
                   names: Union[None, str, Iterable[str]] = None,
                   max_shard_bytes: Optional[int] = None,
                   metadata: Optional[Mapping[str, str]] = None) -> Any:
    """The ExportSafetensorsRequest of an export (see ``Client.save_safetensors``).

    Raises:
        ValueError: max_shard_bytes not a positive int. TypeError: metadata not str to str.
    """
    names = [names] if isinstance(names, str) else list(names or [])
    if max_shard_bytes is not None and (not isinstance(max_shard_bytes, int) or max_shard_bytes <= 0):
        raise ValueError(f"max_shard_bytes must be a positive int or None, not {max_shard_bytes!r}")
    req = pb.ExportSafetensorsRequest(path=os.path.abspath(os.fspath(path)), names=names,
                                      max_shard_bytes=max_shard_bytes or 0)
    for k, v in dict(metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"metadata must map str to str (safetensors __metadata__), got "
                            f"{k!r}: {v!r}")
        req.metadata.add(key=k, value=v)
    return req


def read_header(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """The JSON header of a safetensors file as a dict, read with struct and json only.

    Returns:
        ``{name: {'dtype', 'shape', 'data_offsets'}, '__metadata__': {...}}``.

    Raises:
        OSError: the file cannot be read. ValueError: a header over 100 MiB or not JSON.
    """
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100 << 20:
            raise ValueError(f"safetensors file '{path}': header of {n} bytes; at most 100 MiB")
        return json.loads(f.read(n))
