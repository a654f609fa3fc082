"""Resharding one tensor: :meth:`tshard.Client.reshard` moves it to another distributed
attribute (casting it on the way if asked); many at once are ``batch``'s reshard_many, and what a
reshard would do without moving anything is ``observe``'s plan.
"""
from typing import Any, Dict, Optional, Union

from . import tshard_pb2 as pb
from ._common import AttrLike, _attr_msg, _cast_name, _check_name, _flag, _layout_tag, _opt_str
from .future import Future


class Reshard:
    """The reshard of one tensor (a mixin of :class:`tshard.Client`)."""

    def reshard(self, name: str, attr: AttrLike, strategy: Optional[str] = None,
                keep_source_as: Optional[str] = None, layout: Optional[str] = None,
                key: Optional[str] = None, wait: bool = True,
                dtype: Any = None, relabel: bool = False) -> Union[Dict[str, Any], Future]:
        """Moves the tensor to another distributed attribute, casting it to ``dtype`` if given.

        Args:
            name: the tensor.
            attr: the target attribute, an Attr or its text.
            strategy: force one (``allgather``, ``root``, ``p2p``, ``alltoall``, ``allreduce``,
                ``reduce_scatter``, ``local``, ``hierarchical``); default: the planner's
                cheapest.
            keep_source_as: keep the source and make the result a new tensor of this name.
            layout: the new slices' format tag (default row-major).
            key: an idempotency key.
            wait: False returns a Future.
            dtype: cast the values as they move (``"bf16"``, ``"bfloat16"``, ``np.float16``,
                ``torch.bfloat16``, ...; default: keep the dtype); the tensor (with
                keep_source_as: the new one) then has this dtype. Rounds to nearest even, as
                numpy's ``astype``. A narrowing cast converts on each rank before sending (the
                narrow bytes travel; a partial source is reduced in its own dtype first, then
                converted), a widening one after receiving. Checked as ``put(convert=True)``
                is: a value that would not survive (out of an integer's range, NaN or inf into
                an integer, a finite value overflowing to inf) raises BadDtypeError and nothing
                changes on any rank; so does a partial target of an f8 dtype (no reductions),
                and a cast of c64 or c128 to a real dtype (the imaginary part would be lost;
                a real dtype casts to c64 and c128 with imaginary part 0); a partial source to
                a partial target raises UnsupportedError.
            relabel: let the daemons permute the target's ranks among themselves (the same
                layout up to which rank holds which block) so that the fewest bytes move: an
                optimal assignment up to 256 ranks, greedy beyond; layouts that differ only by
                such a permutation move nothing. The tensor's attribute then has the order
                chosen.

        Returns:
            ``{'strategy', 'ms'}``: the strategy the daemons ran and its time on the answering
            rank (None and 0.0 for a retry answered by its idempotency key); relabeled, also
            ``'ranks'``: the target mesh's ranks in the order chosen (row-major).

        Raises:
            NotFoundError, ParseError, BadAttributeError, BadStrategyError, LimitError.

        Example::

            c.reshard("w", "mesh=[4] placements=[S(1)]")
            c.reshard("w", "mesh=[4] placements=[S(0)]", dtype="bf16")
            c.reshard("w", "mesh=[4] placements=[S(0)]", relabel=True)["ranks"]
        """
        _check_name(name)
        if keep_source_as:
            _check_name(keep_source_as, "keep_source_as")
        relabel = _flag(relabel, "reshard: relabel")
        return self._op(key, _reshard_result, wait, f"reshard of '{name}'",
                        reshard=pb.ReshardRequest(name=name, attr=_attr_msg(attr),
                                                  strategy=_opt_str(strategy, "strategy"),
                                                  keep_source_as=keep_source_as or "",
                                                  layout=pb.Layout(tag=_layout_tag(layout)),
                                                  dtype=_cast_name(dtype), relabel=relabel))


def _reshard_result(r):
    out = {"strategy": r.strategy or None, "ms": r.elapsed_us / 1000.0}
    if r.ranks:
        out["ranks"] = list(r.ranks)
    return out
