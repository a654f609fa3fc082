"""Hugging Face safetensors through the daemons: the requests of ``Client.load_safetensors``
(import a ``model.safetensors`` or a sharded ``model.safetensors.index.json`` under chosen
attributes; each rank reads only the bytes of its own slice) and ``Client.save_safetensors``
(export stored tensors into one file or HF shards plus an index; each rank writes its own
slices' bytes). The file format and what is checked: the safetensors guide of the documentation.

Also ``read_header(path)``: a file's header as a dict, with json and struct only (no daemon),
for choosing names and attributes before an import; and the two Client methods themselves."""
import json
import os
import struct
from typing import Any, Dict, Iterable, Mapping, Optional, Union

from . import attr_rules as _rules
from . import tshard_pb2 as pb
from ._common import _attr_msg, _check_name, _selection
from .future import Future

__all__ = ["import_request", "export_request", "read_header"]


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


class Safetensors:
    """The Client's import and export of safetensors files (a mixin of :class:`tshard.Client`)."""

    def load_safetensors(self, path: str, attrs: "dict | None" = None, default: Any = None,
                         names: "list | None" = None, prefix: "str | None" = None,
                         rename: "dict | None" = None, key: "str | None" = None,
                         wait: bool = True) -> "list | Future":
        """Imports a Hugging Face ``model.safetensors`` file, or the shards of a
        ``model.safetensors.index.json``, into new tensors under distributed attributes.

        path: the file or the index (a path every daemon can reach; made absolute here).
        attrs: attribute rules, {tshard name or glob: attribute} (text or Attr) or
        ``"PATTERN=ATTR"`` texts (:mod:`tshard.attr_rules`, the grammar of :meth:`load`); the
        tensors imported are those the rules name or match unless ``names`` or ``default`` say
        otherwise. default: the attribute of every other tensor;
        given, every tensor of the file(s) is imported. names: import only these. prefix: removed
        from the file's names that start with it (``"model."``). rename: {file name: tshard
        name}, applied instead of the prefix rule. Each rank reads only the byte ranges of its
        own slice. Atomic: a bad file (truncated, overlapping or out-of-range data_offsets, a
        header over 100 MB or not JSON, an unknown dtype, a shape that does not match its
        bytes), a missing name or a name taken already creates nothing on any rank and raises
        the same error everywhere, naming the file and the tensor.

        Returns the names created, in order (or a Future of them with wait=False)."""
        req = import_request(path, attrs, default=default, names=names, prefix=prefix,
                                 rename=rename)
        for t in req.tensors:
            _check_name(t.name)
        for n in req.names:
            _check_name(n)
        return self._op(key, lambda r: list(r.safetensors.names), wait,
                        f"import of safetensors '{path}'", import_safetensors=req)

    def save_safetensors(self, path: str, names: "list | None" = None,
                         max_shard_bytes: "int | None" = None, metadata: "dict | None" = None,
                         key: "str | None" = None, wait: bool = True,
                         prefix: "str | None" = None, all: bool = False) -> "list | Future":
        """Exports stored tensors as a Hugging Face safetensors model that ``transformers`` and
        ``safetensors`` read.

        path: the file to write, ending in ``.safetensors`` (made absolute here). names: the
        tensors, by name or glob (``"layers.*.weight"``), or prefix: those whose name starts with
        it, or all=True: every tensor (one of the three; none is refused). max_shard_bytes: when the tensors' bytes exceed it, HF
        shards ``<stem>-00001-of-0000N.safetensors`` are written beside path, with
        ``<path>.index.json`` (their weight_map); else one file. metadata: {str: str}, the
        file's ``__metadata__`` (None: the metadata of the file the tensors were imported from
        when they all share one, else ``{"format": "pt"}``). Each rank writes its own slices'
        bytes at their offsets (no gather); every file is written under a temporary name (mode
        0600) and renamed into place once every rank succeeded. Partial tensors are refused
        (reshard them first).

        Returns the paths written, the index last when sharded (or a Future of them)."""
        req = export_request(path, names, max_shard_bytes=max_shard_bytes, metadata=metadata)
        for n in req.names:
            _check_name(n)
        req.prefix = _selection("safetensors export", list(req.names), prefix, all)
        req.all = bool(all)
        return self._op(key, lambda r: list(r.safetensors.files), wait,
                        f"export to safetensors '{path}'", export_safetensors=req)
