"""What :class:`tshard.Client` asks the daemons about themselves and the job: ping, stats,
trace (the daemon's ring of operations), describe_job (where the ranks live), plan (what a
reshard would do) and show (who holds which block); and shutdown, which stops the job.
"""
from typing import Any, Dict, Optional, Sequence

from . import _tracepoints as _trace
from . import tshard_pb2 as pb
from ._common import AttrLike, _attr_msg, _check_name, _opt_str
from ._status import INVALID_ARGUMENT, PROTOCOL
from .errors import error_for
from .offline import show as _show


class Observe:
    """The daemons' and the job's state, and shutdown (a mixin of :class:`tshard.Client`)."""

    def ping(self) -> Dict[str, Any]:
        """Asks the daemon who it is.

        Returns:
            ``{'rank', 'world_size', 'job', 'max_frame'}`` of the daemon this client talks to.

        Raises:
            IoError: the connection failed. TimeoutError: no answer within the timeout.
        """
        r = self._call(ping=pb.PingRequest()).ping
        return {"rank": r.rank, "world_size": r.world_size, "job": r.job,
                "max_frame": r.max_frame}

    def plan(self, name: str, attr: AttrLike, strategy: Optional[str] = None) -> Dict[str, str]:
        """What a reshard of the tensor to ``attr`` would do, nothing moved.

        Returns:
            ``{'strategy', 'explain'}``: the chosen strategy and the planner's explanation.

        Raises:
            NotFoundError, ParseError, BadAttributeError, BadStrategyError.
        """
        p = self._call(plan=pb.PlanRequest(name=_check_name(name), attr=_attr_msg(attr),
                                           strategy=_opt_str(strategy, "strategy"))).plan
        return {"strategy": p.strategy, "explain": p.explain}

    def show(self, name: str, width: Optional[int] = None, dims: Optional[Sequence[int]] = None,
             ascii: Optional[bool] = None) -> str:
        """A drawing of which rank holds which block of the tensor, as text.

        Args:
            name: the tensor.
            width: the drawing's columns (default 64).
            dims: the two tensor dims to draw (default the first two).
            ascii: ASCII lines instead of Unicode box drawing.

        Raises:
            NotFoundError: no such tensor.
        """
        info = self.describe(name)
        return _show(info["shape"], info["attr"], width=width, dims=dims, ascii=ascii)

    def trace(self, last: int = 0, within: Optional[float] = None) -> Dict[str, Any]:
        """The operations the connected daemon recorded in its trace ring (``--trace-ring``).

        Args:
            last: the last ``last`` operations (0: every one the ring holds).
            within: only those that ended in the last ``within`` seconds (None: any).

        Returns:
            ``{'rank', 'clock_offset_ns', 'clock_rtt_ns', 'ring', 'dropped', 'host', 'ops'}``;
            each op ``{'seq', 'kind', 'name', 'strategy', 'status', 'bytes_sent',
            'bytes_received', 'origin', 'request_id', 'points'}``, points the times (ns, rank
            0's clock) of the points it reached, from ``received`` to ``answered``
            (tshard.tracing.POINTS). :func:`tshard.trace` draws them with the client's calls.

        Raises:
            InvalidArgumentError: a negative ``last`` or ``within``.
        """
        if not isinstance(last, int) or isinstance(last, bool) or not 0 <= last <= 1 << 20:
            raise error_for(INVALID_ARGUMENT, f"trace: last={last!r}: expected a count from 0 "
                                              "(all) to 1048576")
        if within is not None and (not isinstance(within, (int, float)) or isinstance(within, bool)
                                   or not 0 < within <= 86400):
            raise error_for(INVALID_ARGUMENT, f"trace: within={within!r}: expected seconds, more "
                                              "than 0 and at " "most 86400 (None: any)")
        ns = int(within * 1e9) if within is not None else 0
        return _trace.decode(self._call(trace=pb.TraceRequest(last=last, within_ns=ns)).trace)

    def stats(self) -> Dict[str, Any]:
        """The connected daemon's counters, as ``tshard stats`` prints them.

        Returns:
            ``{'operations', 'collective_ops', 'tensors', 'memory_in_use', 'memory_limit',
            'connections', 'topology': {'spec', 'hosts', 'host', 'host_name', 'numa',
            'host_names', 'rank_hosts', 'rank_numa'}, 'pool': {...},
            'strategies': {name: {...}}, 'ops': {kind: {...}}}``: topology says where the
            job's ranks live (``'hosts=2x4'``), how many hosts, the connected rank's host with
            its name and the rank's NUMA node (-1: unknown), each host's name once and every
            rank's host and NUMA node (as :meth:`describe_job` gives them).
        """
        s = self._call(stats=pb.StatsRequest(layout=True)).stats
        layout = _layout(s, strict=False)
        return {"operations": s.operations, "collective_ops": s.collective_ops,
                "tensors": s.tensors, "memory_in_use": s.memory_in_use,
                "memory_limit": s.memory_limit, "connections": s.connections,
                "topology": {"spec": s.topology, "hosts": s.hosts, "host": s.host,
                             "host_name": s.host_name, "numa": s.numa if s.host_name else -1,
                             "host_names": layout["host_names"],
                             "rank_hosts": layout["rank_hosts"],
                             "rank_numa": layout["rank_numa"]},
                "pool": {"stored": s.stored_bytes, "staging": s.pool_staging,
                         "cached": s.pool_cached, "peak": s.pool_peak,
                         "cache_cap": s.pool_cache_cap, "hits": s.pool_hits,
                         "misses": s.pool_misses, "released": s.pool_released},
                "strategies": {x.strategy: {"reshards": x.reshards, "bytes_sent": x.bytes_sent,
                                            "bytes_received": x.bytes_received,
                                            "relayed": x.relayed}
                               for x in s.strategies},
                "ops": {k.kind: {"count": k.count, "p50_us": k.p50_us, "p99_us": k.p99_us,
                                 "batch_p50": k.batch_p50, "batch_max": k.batch_max}
                        for k in s.ops},
                "saves": [{"save_id": v.save_id, "dir": v.dir, "state": v.state,
                           "bytes_written": v.bytes_written, "bytes_total": v.bytes_total,
                           "checkpoint_bytes": v.checkpoint_bytes, "seconds": v.seconds,
                           "status": v.status, "message": v.message} for v in s.saves]}

    def describe_job(self) -> Dict[str, Any]:
        """Where the job's ranks live, as ``tshard describe`` without a tensor prints it.

        Returns:
            ``{'rank' (the connected one), 'ranks', 'hosts', 'topology' (the spec, as
            ``tshard plan --topology`` takes it: ``'hosts=2x4'``), 'host_names' (each
            host's once, hosts numbered in the order of their first rank), 'rank_hosts' and
            'rank_numa' (every rank's host and NUMA node, -1 when the system does not say),
            'by_host': [{'host', 'name', 'ranks', 'numa'}], 'link_rates': {'host', 'cross'}
            (the rates plans weigh, bytes per second, as ``tshard plan --link-rates``)}``.

        Raises:
            ProtocolError: the daemon's answer carries no layout, or an inconsistent one.
        """
        rank = self.ping()["rank"]
        s = self._call(stats=pb.StatsRequest(layout=True)).stats
        job = _layout(s)
        by_host = [{"host": h, "name": n, "ranks": [], "numa": []}
                   for h, n in enumerate(job["host_names"])]
        for r, (h, numa) in enumerate(zip(job["rank_hosts"], job["rank_numa"])):
            by_host[h]["ranks"].append(r)
            by_host[h]["numa"].append(numa)
        return {"rank": rank, "ranks": len(job["rank_hosts"]), "hosts": len(by_host),
                "topology": s.topology, **job, "by_host": by_host,
                "link_rates": {"host": s.link_rate_host, "cross": s.link_rate_cross}}

    def shutdown(self, key: Optional[str] = None) -> None:
        """Stops every daemon of the job (this connection then closes).

        Args:
            key: an idempotency key.
        """
        self._call(key, shutdown=pb.ShutdownRequest())


def _layout(s, strict=True):
    """The job's layout of a StatsResult asked with its layout, checked as the C client checks
    it: one host and one NUMA node per rank, every host index below the host count. Not strict:
    empty lists from a daemon that gives none."""
    names, hosts, numa = list(s.host_names), list(s.rank_hosts), list(s.rank_numa)
    if not strict and not hosts and not names and not numa:
        return {"host_names": names, "rank_hosts": hosts, "rank_numa": numa}
    if not hosts or not names:
        raise error_for(PROTOCOL, "the daemon's statistics carry no layout (a daemon older than "
                                  "this client); upgrade the daemons")
    if len(numa) != len(hosts) or len(names) != s.hosts or any(h >= len(names) for h in hosts):
        raise error_for(PROTOCOL, f"the daemon's layout is inconsistent: {len(hosts)} ranks with a "
                                  f"host, {len(numa)} with a NUMA node, {len(names)} host names "
                                  f"for {s.hosts} hosts")
    return {"host_names": names, "rank_hosts": hosts, "rank_numa": numa}
