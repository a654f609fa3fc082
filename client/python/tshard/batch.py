"""The operations of :class:`tshard.Client` on many tensors as one: create_many,
reshard_many, drop_many, put_many and get_many (every tensor or none, on every rank), and the
PyTorch-style state dicts built on them (put_state_dict, get_state_dict). The data of put_many
and get_many travels as ``batch_io`` moves it; the state dicts' rules are ``state_dict``'s.
"""
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import batch_io
from . import state_dict as _sd
from . import tshard_pb2 as pb
from ._common import (AttrLike, _attr_msg, _cast_name, _check_name, _flag, _layout_tag, _names,
                      _nothing, _opt_str)
from ._status import INVALID_ARGUMENT
from .errors import error_for
from .future import Future


class Batches:
    """Operations on many tensors at once, and state dicts (a mixin of :class:`tshard.Client`)."""

    def create_many(self, specs: Mapping[str, Any], exist_ok: bool = False, replace: bool = False,
                    key: Optional[str] = None, wait: bool = True) -> Union[None, Future]:
        """Creates many zero-filled tensors as one operation: all of them or none, on every rank.

        Args:
            specs: ``{name: (dtype, shape, attr)}`` or ``(dtype, shape, attr, layout)``, or
                ``{name: {'dtype', 'shape', 'attr', 'layout'}}`` (as :meth:`create` takes them).
            exist_ok: as in :meth:`create`, for every tensor.
            replace: a stored tensor that differs is replaced by the new zero-filled one (made
                beside it, then every replacement swapped in at once).
            key: an idempotency key.
            wait: False returns a Future.

        Raises:
            ExistsError: a name is taken (the message names the tensor and, with exist_ok, every
            difference); BadAttributeError, LimitError...: nothing was created.

        Example::

            c.create_many({"w": ("f32", (8, 4), "mesh=[4] placements=[S(0)]"),
                           "b": ("f32", (4,), "mesh=[4] placements=[R]")})
        """
        return self._op(key, _nothing, _flag(wait, "wait"), f"create_many of {len(specs)} tensors",
                        create_many=_sd.create_request(specs, _flag(exist_ok, "exist_ok"),
                                                       _flag(replace, "replace")))

    def reshard_many(self, targets: Mapping[str, Any], strategy: Optional[str] = None,
                     key: Optional[str] = None,
                     wait: bool = True) -> Union[Dict[str, Dict[str, Any]], Future]:
        """Reshards many tensors as one operation: every tensor moves or none, on every rank.

        Args:
            targets: ``{name: attr}`` or ``{name: {'attr', 'strategy', 'layout', 'dtype'}}``
                (strategy, layout and dtype optional per tensor; dtype casts that tensor as
                ``reshard(dtype=)`` does, checked before anything changes).
            strategy: the batch's default strategy.
            key: an idempotency key.
            wait: False returns a Future of the result.

        Returns:
            ``{name: {'strategy', 'bytes_sent', 'bytes_received'}}`` as the answering rank ran
            it (empty dicts for a retry answered by its idempotency key).

        Raises:
            NotFoundError, BadAttributeError, LimitError...: the whole batch is refused.
        """
        if not isinstance(targets, Mapping):
            raise TypeError(f"reshard_many: targets must be a dict {{name: attr}}, not "
                            f"{type(targets).__name__}")
        items = []
        for name, t in targets.items():
            _check_name(name)
            t = t if isinstance(t, Mapping) else {"attr": t}
            if "attr" not in t:
                raise error_for(INVALID_ARGUMENT,
                                f"reshard_many: the target of '{name}' has no 'attr'; give "
                                f"{{'attr': ATTR, 'strategy': ..., 'layout': ..., 'dtype': ...}}")
            unknown = sorted(set(t) - {"attr", "strategy", "layout", "dtype"})
            if unknown:
                why = (" (reshard_many does not relabel; relabel one tensor with reshard)"
                       if "relabel" in unknown else "")
                raise error_for(INVALID_ARGUMENT, f"reshard_many: the target of '{name}' has the "
                                                  f"unknown key {unknown[0]!r}{why}; valid: attr, "
                                                  "strategy, layout, dtype")
            items.append(pb.ReshardItem(name=name, attr=_attr_msg(t["attr"]),
                                        strategy=_opt_str(t.get("strategy"), "strategy"),
                                        layout=pb.Layout(tag=_layout_tag(t.get("layout"))),
                                        dtype=_cast_name(t.get("dtype"))))
        order = list(targets)

        def finish(r):
            got = {i.name: {"strategy": i.strategy, "bytes_sent": i.bytes_sent,
                            "bytes_received": i.bytes_received} for i in r.reshard_many.items}
            return {name: got.get(name, {}) for name in order}
        return self._op(key, finish, _flag(wait, "wait"), f"reshard_many of {len(order)} tensors",
                        reshard_many=pb.ReshardManyRequest(
                            items=items, strategy=_opt_str(strategy, "strategy")))

    def drop_many(self, names: Iterable[str], key: Optional[str] = None,
                  wait: bool = True) -> Optional[Future]:
        """Drops the named tensors as one operation: all of them or, when one is unknown, none.

        Args:
            names: the tensors.
            key: an idempotency key.
            wait: False returns a Future.

        Raises:
            NotFoundError: one of them does not exist (nothing is dropped).
        """
        names = _names(names, "drop_many: names")
        return self._op(key, _nothing, _flag(wait, "wait"), f"drop_many of {len(names)} tensors",
                        drop_many=pb.DropManyRequest(names=names))

    def put_many(self, arrays: Mapping[str, Any], convert: bool = False,
                 key: Optional[str] = None, wait: bool = True) -> Optional[Future]:
        """Puts many whole tensors in one request, one operation on the daemons.

        Atomic: every array is checked before anything moves (each name once and existing, its
        dtype and shape as ``put`` checks them, the daemons' --batch-max-tensors and
        --batch-max-bytes), and either every tensor is stored or none, on every rank.

        Args:
            arrays: {name: numpy array} of whole row-major tensors, in any order (bf16 data as
                ``tshard.bf16_bits(bits)``, f8 data as ``tshard.f8_bits(codes, "e4m3")``).
            convert: convert arrays of another dtype to their tensors', as
                ``put(..., convert=True)`` does (values that would not survive are refused).
            key: idempotency key: a retry of the identical put_many is not run again.
            wait: False returns a tshard.Future at once (the data takes the same path as a
                synchronous put_many; keep the arrays unchanged until it is done).

        Returns:
            None, or a Future of None with ``wait=False``.

        Raises:
            NotFoundError, InvalidArgumentError (a name twice), BadShapeError / BadDtypeError
            (an array that does not fit its tensor), LimitError (naming the flag): nothing was
            stored. TypeError when ``arrays`` is not a mapping.

        Example:
            >>> c.put_many({"wte": np.zeros((50257, 768), np.float32),
            ...             "ln.b": np.ones(768, np.float32)})
        """
        return batch_io.put_many(self, arrays, convert=convert, key=key, wait=wait)

    def get_many(self, names: Sequence[str], wait: bool = True, like: Optional[str] = None,
                 out: Optional[Mapping[str, Any]] = None) -> Union[Dict[str, Any], Future]:
        """Gets many whole tensors in one request, one operation on the daemons.

        Args:
            names: the tensors' names, each once.
            wait: False returns a tshard.Future of the dict at once.
            like: ``"torch"`` returns torch tensors sharing the received memory (bf16 as
                ``torch.bfloat16``); None or ``"numpy"`` numpy arrays, as :meth:`get`.
            out: ``{name: array or torch tensor}`` to fill instead of new ones, each as
                :meth:`get`'s ``out`` (the tensor's dtype and shape, contiguous, writable); the
                result holds those very objects.

        Returns:
            {name: numpy array} (row-major, aligned, the tensor's dtype and shape; bf16 as
            uint16 bits, f8 as uint8 codes) in the order of ``names``, or a Future of it with ``wait=False``. The
            arrays may be views of one buffer the call allocated.

        Raises:
            NotFoundError naming an unknown tensor, InvalidArgumentError (a name twice, no
            names), LimitError (--batch-max-tensors, --batch-max-bytes), BadShapeError when a
            tensor changed size meanwhile. TypeError for a single name (use ``get``).

        Example:
            >>> arrays = c.get_many(["wte", "ln.b"]); arrays["wte"].shape
            (50257, 768)
        """
        return batch_io.get_many(self, names, wait=wait, like=like, out=out)

    def put_state_dict(self, sd: Mapping[str, Any],
                       attrs: Union[None, Mapping[str, Any], Iterable[str]] = None,
                       default: Optional[AttrLike] = None, key: Optional[str] = None) -> List[str]:
        """Stores a PyTorch-style state dict: each entry becomes a tensor of its name, created
        (or replaced when it is stored with another dtype, shape or attribute) and filled.

        Args:
            sd: ``{name: numpy array or torch CPU tensor}`` (bf16 torch tensors as bf16; numpy
                bf16 data as ``tshard.bf16_bits``), e.g. ``model.state_dict()``.
            attrs: attribute rules, ``{name or glob: attr}`` or ``"PATTERN=ATTR"`` texts, as
                :meth:`load` takes them: a tensor takes the rule naming it, else the first glob
                matching its name, else ``default``.
            default: the attribute of the tensors no rule names.
            key: an idempotency key.

        Returns:
            The names stored, in the dict's order.

        Raises:
            InvalidArgumentError: a tensor without an attribute; NotFoundError: a rule naming no
            entry. BadAttributeError, LimitError...: nothing was created or stored.

        One put_many when every tensor is stored as asked (dtype, shape, attribute; it checks
        them); else one create_many makes or replaces them and one put_many stores the data.
        Every tensor is stored or none.

        Example::

            c.put_state_dict(model.state_dict(), {"*.weight": "mesh=[4] placements=[S(0)]"},
                             default="mesh=[4] placements=[R]")
        """
        return _sd.put_state_dict(self, sd, attrs, default, key)

    def get_state_dict(self, names: Optional[Sequence[str]] = None, like: str = "numpy",
                       prefix: Optional[str] = None) -> Dict[str, Any]:
        """The stored tensors as a state dict, gathered to this client in one get_many.

        Args:
            names: the tensors (None: every stored tensor, by name).
            like: ``"numpy"`` (bf16 as uint16 bits) or ``"torch"`` (bf16 as torch.bfloat16),
                ready for ``model.load_state_dict``.
            prefix: only the tensors whose names start with it, keyed without it (as a
                submodule's ``load_state_dict`` wants).

        Returns:
            ``{name: array or tensor}``.

        Raises:
            NotFoundError: a name that is not stored. ValueError: another ``like``.

        Example::

            model.load_state_dict(c.get_state_dict(like="torch"))
        """
        return _sd.get_state_dict(self, names, like, prefix)
