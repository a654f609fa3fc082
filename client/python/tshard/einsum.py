"""Distributed einsum on the daemons: ``out = einsum(equation, operands)`` computed
where the shards live.

The daemons' planner compares candidate plans (the operands as they are, one operand following
another's shards, an operand gathered, the requested output's shards, ...) by the reshard
planner's exact bytes on the wire, then the busiest rank's work and the peak memory, and runs the
cheapest. A sharded contracted label gives a ``Partial(sum)`` result, reduced only when ``attr``
asks for it. On any failure nothing changes on any rank. The Client's methods ``einsum``,
``einsum_plan``, ``einsum_backward`` and ``einsum_release`` (the mixin ``Einsums``) call the
functions here.
"""
import collections
from typing import Any, Optional, Sequence

from . import tshard_pb2 as pb
from ._common import AttrLike, _attr_msg, _check_name
from ._status import EINSUM, INVALID_ARGUMENT
from .errors import error_for

__all__ = ["EinsumResult", "einsum", "einsum_plan", "einsum_backward", "einsum_release"]

MAX_OPERANDS = 3  # the C client's EINSUM_MAX_OPERANDS (defined in client/einsum.c, not a header)

EinsumResult = collections.namedtuple(
    "EinsumResult", "forward_id plan explain planned_wire_bytes kept_bytes")
EinsumResult.__doc__ = ("What an einsum did: forward_id (for einsum_backward and einsum_release),"
                        " the plan that ran, its EXPLAIN ('' unless asked), the planned bytes on"
                        " the wire and this rank's kept bytes.")


def _request(client, equation, operands, out, attr, plan, keep, explain):
    if not isinstance(equation, str) or not equation:
        raise error_for(EINSUM, "the einsum equation must be a non-empty str such as 'ij,jk->ik'")
    if not 1 <= len(operands) <= MAX_OPERANDS:
        raise error_for(EINSUM, f"{len(operands)} einsum operands; "
                                f"give 1 to {MAX_OPERANDS} tensor names")
    for name in operands:
        _check_name(name, "einsum operand")
    if out is not None:
        _check_name(out, "einsum output")
    q = pb.EinsumRequest(equation=equation, operands=list(operands), out=out or "",
                         plan=plan or "", keep=bool(keep), explain=bool(explain))
    if attr is not None:
        q.attr.CopyFrom(_attr_msg(attr))
    return q


def _result(r):
    e = r.einsum
    return EinsumResult(e.forward_id, e.plan, e.explain, e.planned_wire_bytes, e.kept_bytes)


def einsum(client, equation, *operands, out, attr=None, plan=None, keep=False, explain=False,
           key=None, wait=True):
    """Creates tensor ``out`` = einsum(equation, operands) on every rank; returns an
    EinsumResult. ``attr``: the output's attribute (text or Attr; None: the natural one).
    ``plan``: None/"auto" or a candidate (as_is, match:I, free:I, gather:I, output, replicate).
    ``keep``: keep the local operands and transposes for einsum_backward (counted against the
    memory limit until einsum_release, or until an operand is dropped)."""
    if out is None:
        raise error_for(INVALID_ARGUMENT, "einsum needs out=NAME for the result")
    q = _request(client, equation, operands, out, attr, plan, keep, explain)
    return client._op(key, _result, wait, f"einsum {equation}", einsum=q)


def einsum_plan(client, equation, *operands, attr=None, plan=None):
    """The EXPLAIN of an einsum of stored tensors, nothing run: an EinsumResult (forward_id 0)."""
    q = _request(client, equation, operands, None, attr, plan, False, True)
    return _result(client._call(einsum_plan=q))


def _forward_id(forward):
    fid = forward.forward_id if isinstance(forward, EinsumResult) else forward
    if not isinstance(fid, int) or isinstance(fid, bool) or fid < 0:
        raise error_for(INVALID_ARGUMENT, "forward must be an EinsumResult "
                                          "or its forward_id (an int >= 0)")
    return fid


def einsum_backward(client, forward, grad_out, grads, key=None, wait=True):
    """Stores the gradients of a forward (an EinsumResult or its forward_id) from the output
    gradient ``grad_out``: ``grads`` has one name per operand (None for none), e.g. ["ga", None].
    Gradients get the attributes they need (Partial where a sharded contraction requires)."""
    fid = _forward_id(forward)
    _check_name(grad_out, "output gradient")
    grads = list(grads)
    if not 1 <= len(grads) <= MAX_OPERANDS:
        raise error_for(INVALID_ARGUMENT, f"{len(grads)} gradient names; give one per operand "
                                          "(None for none)")
    for g in grads:
        if g is not None:
            _check_name(g, "gradient")
    if all(g is None for g in grads):
        raise error_for(INVALID_ARGUMENT, "no gradient asked for; name the "
                                          "gradient of at least one operand")
    q = pb.EinsumBackwardRequest(forward_id=fid, grad_out=grad_out,
                                 grads=[g or "" for g in grads])
    return client._op(key, lambda r: None, wait, f"einsum_backward of forward {fid}",
                      einsum_backward=q)


def einsum_release(client, forward, key=None, wait=True):
    """Frees what a forward kept (on every rank)."""
    fid = _forward_id(forward)
    return client._op(key, lambda r: None, wait, f"einsum_release of forward {fid}",
                      einsum_release=pb.EinsumReleaseRequest(forward_id=fid))


class Einsums:
    """Distributed einsum: the Client's methods over the functions above (a mixin of
    :class:`tshard.Client`)."""

    def einsum(self, equation: str, *operands: str, out: str, attr: Optional[AttrLike] = None,
               plan: Optional[str] = None, keep: bool = False, explain: bool = False,
               key: Optional[str] = None, wait: bool = True) -> Any:
        """Computes a numpy-style einsum of stored tensors where their shards live.

        Args:
            equation: the equation with explicit output, e.g. ``"ij,jk->ik"``.
            operands: the names of the operand tensors (one to three).
            out: the name of the new result tensor.
            attr: the result's attribute (default: the planner's choice).
            plan: force a named distributed plan.
            keep: keep the forward for :meth:`einsum_backward`.
            explain: plan only and return the explanation, nothing computed.
            key: an idempotency key.
            wait: False returns a Future of the result.

        Returns:
            A :class:`tshard.EinsumResult` (plan, attr, forward id when kept, ...).

        Raises:
            EinsumError: a bad equation or operands. EinsumPlanError: a forced plan that does
            not apply. NotFoundError: an unknown operand.

        Example::

            c.einsum("ij,jk->ik", "x", "w", out="y")
        """
        return einsum(self, equation, *operands, out=out, attr=attr, plan=plan, keep=keep,
                         explain=explain, key=key, wait=wait)

    def einsum_plan(self, equation: str, *operands: str, attr: Optional[AttrLike] = None,
                    plan: Optional[str] = None) -> Any:
        """Plans an einsum without computing it (see :meth:`einsum`).

        Returns:
            A :class:`tshard.EinsumResult` describing the chosen plan and its costs.

        Raises:
            EinsumError, EinsumPlanError, NotFoundError as :meth:`einsum`.
        """
        return einsum_plan(self, equation, *operands, attr=attr, plan=plan)

    def einsum_backward(self, forward: int, grad_out: str, grads: Sequence[Optional[str]],
                        key: Optional[str] = None, wait: bool = True) -> Any:
        """Computes the gradients of a kept einsum forward (``keep=True``).

        Args:
            forward: the forward's id from :meth:`einsum`'s result.
            grad_out: the tensor of the output's gradient.
            grads: the names of the new gradient tensors, one per operand (None: not wanted).
            key: an idempotency key.
            wait: False returns a Future.

        Returns:
            The daemons' answer (an :class:`tshard.EinsumResult`).

        Raises:
            NoForwardError: no kept forward with this id. EinsumError: shapes that do not fit.
        """
        return einsum_backward(self, forward, grad_out, grads, key=key, wait=wait)

    def einsum_release(self, forward: int, key: Optional[str] = None, wait: bool = True) -> Any:
        """Releases a kept einsum forward and its cached transposes (``wait=False``: a Future).

        Raises:
            NoForwardError: no kept forward with this id.
        """
        return einsum_release(self, forward, key=key, wait=wait)
