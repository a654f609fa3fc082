"""SPMD collectives: a client that declares its group (``connect(..., group=[0, 1, 2, 3])``,
``group="all"``, or TSHARD_GROUP in the environment) sends every create, reshard, drop, einsum, save and load as a
collective of the group: the daemons run it once, after every rank of the group submitted it, so
an SPMD script needs no barrier between its puts and its reshard. A call that is not given a
``key`` gets one made from the run id (shared by the processes of one launch) and the call's
number in this client's sequence of collective calls: the n-th collective call of every process
of the run carries the same key. If a rank never submits, every participant gets an
``IncompleteError`` naming the missing ranks after the collective timeout; a rank that submits
another request under the key fails it for all (``KeyConflictError``).

The run id: ``run_id=``, else TSHARD_RUN_ID, else the launcher's job id (PMIX_NAMESPACE of
Open MPI / PMIx, Slurm's SLURM_JOB_ID.SLURM_STEP_ID, torchrun's TORCHELASTIC_RUN_ID). Without
one, collective calls must be given a key.

The group's rules (which ranks, the keys of the calls) are here, and ``Client.set_group``.
"""
import hashlib
import os
from typing import Any, Mapping, Optional, Sequence, Union

from ._limits import COLLECTIVE_TIMEOUT_MAX_MS
from ._status import INVALID_ARGUMENT
from .errors import error_for

__all__ = ["Group", "run_id_from_env", "COLLECTIVE_OPS"]

# The Request ops a group makes collective (puts are per rank, gets and the rest per client).
COLLECTIVE_OPS = ("create", "reshard", "drop", "einsum", "einsum_backward", "einsum_release",
                  "save", "load", "program_compile", "program_run", "program_drop",
                  "reshard_many", "drop_many", "import_safetensors", "export_safetensors")


def run_id_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The id of this launch, shared by its processes, read from the launcher's environment.

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        TSHARD_RUN_ID, else an id from Open MPI / PMIx, Slurm or torchrun; None without one.
    """
    env = os.environ if env is None else env
    if env.get("TSHARD_RUN_ID"):
        return env["TSHARD_RUN_ID"]
    if env.get("PMIX_NAMESPACE"):
        return "pmix-" + env["PMIX_NAMESPACE"]
    if env.get("OMPI_MCA_ess_base_jobid"):
        return "ompi-" + env["OMPI_MCA_ess_base_jobid"]
    if env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    if env.get("TORCHELASTIC_RUN_ID") and env["TORCHELASTIC_RUN_ID"] != "none":
        return "torch-" + env["TORCHELASTIC_RUN_ID"]
    return None


def parse_group(group, world_size):
    """[ranks] from a list, "all" or "0,1,2" (TSHARD_GROUP's form); checked against the job."""
    if isinstance(group, str):
        text = group.strip()
        if text == "all":
            return list(range(world_size))
        try:
            group = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise error_for(INVALID_ARGUMENT, f"group '{text}': expected "
                                              "'all' or ranks like '0,1,2,3'") from None
    ranks = [int(r) for r in group]
    if not ranks:
        raise error_for(INVALID_ARGUMENT, "an empty group: name the ranks "
                                          "of the SPMD program, or 'all'")
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise error_for(INVALID_ARGUMENT, f"group rank {bad[0]} is not a rank of the job (ranks 0 "
                                          f"to {world_size - 1})")
    if len(set(ranks)) != len(ranks):
        raise error_for(INVALID_ARGUMENT, f"group {ranks} names a rank twice")
    return ranks


class Group:
    """The participants of this client's collective calls and the making of their keys."""

    def __init__(self, ranks: Sequence[int], rank: int, run_id: Optional[str] = None,
                 timeout_ms: int = 0) -> None:
        """The group ``ranks`` seen from ``rank``, keyed by ``run_id``, waiting ``timeout_ms``."""
        if rank not in ranks:
            raise error_for(INVALID_ARGUMENT, f"this client talks to rank {rank}, "
                                              f"which is not in its group {ranks}; "
                                              "connect to your own rank's daemon")
        self.ranks = list(ranks)
        self.run_id = run_id if run_id is not None else run_id_from_env()
        self.timeout_ms = int(timeout_ms)
        self.calls = 0

    def _auto_key(self, op):
        if self.run_id is None:
            raise error_for(INVALID_ARGUMENT, f"{op}: an SPMD client (group {self.ranks}) makes "
                                              "keys from a run id shared by its processes, and "
                                              "none was found: pass key= to each collective call, "
                                              "run_id= to connect, or set TSHARD_RUN_ID the same "
                                              "for every process of the run")
        rid = self.run_id
        if len(rid) > 80:
            rid = hashlib.sha1(rid.encode()).hexdigest()[:20]
        return f"spmd:{rid}:{self.calls}"

    def apply(self, req: Any, op: str) -> None:
        """Makes a request of op (a COLLECTIVE_OPS name) a collective of the group."""
        self.calls += 1
        if not req.idempotency_key:
            req.idempotency_key = self._auto_key(op)
        req.participants.extend(self.ranks)
        req.collective_timeout_ms = self.timeout_ms


class SpmdGroup:
    """The Client's SPMD group (a mixin of :class:`tshard.Client`)."""

    def set_group(self, group: Union[None, str, Sequence[int]], run_id: Optional[str] = None,
                  collective_timeout: Optional[float] = None) -> None:
        """Makes create, reshard, drop, einsum, save and load SPMD collectives of a group.

        From this call on each of them runs once every rank of ``group`` submitted it, under
        its ``key`` or a key made from ``run_id`` and the call's number.

        Args:
            group: the ranks (a list, ``"all"`` or ``"0,1,2"``); None turns collectives off.
            run_id: the launch's id (default: the launcher's, e.g. Open MPI's or Slurm's).
            collective_timeout: seconds to wait for the other ranks (default: this client's
                timeout less 5 s, so that the daemons' error naming the missing ranks comes
                first; at most the daemons' ``--collective-timeout-max``, 600 s by default).

        Raises:
            InvalidArgumentError: a group that names ranks outside the job.
        """
        if group is None:
            self._group = None
            return
        p = self.ping()
        ranks = parse_group(group, p["world_size"])
        if collective_timeout is None:
            t = self._timeout
            collective_timeout = min(max(1.0, t - 5.0), COLLECTIVE_TIMEOUT_MAX_MS / 1000) if t else 0
        self._group = Group(ranks, p["rank"], run_id, round(collective_timeout * 1000))
