"""Traces from Python: what the daemons recorded of each operation, and the client's
own calls beside it.

Every daemon keeps, for its last ``--trace-ring`` operations, the times each reached each point
of its way (received, submitted, ordered, started, planned, agreed, moved, committed, ended,
answered) in rank 0's clock. :meth:`Client.trace` reads one daemon's ring (:func:`decode` gives
its dict); :func:`trace` records, while its ``with`` block runs, every call this process's
clients make (the kind, the request id, when it was sent and answered); ``Recorder.save`` then
gathers every rank's ring of the job and writes the Chrome trace event format (Perfetto and
chrome://tracing open it), the client's calls on a track of their own::

    with tshard.trace() as t:
        c.reshard("w", "mesh=[4] placements=[S(1)]")
    t.save("trace.json", job="demo")

The client's clock is this host's CLOCK_MONOTONIC (time.monotonic_ns), drawn in rank 0's clock
through the offset of the rank it is connected to (the daemons on this host share its clock).
Recording costs a clock read and a list append per call; nothing is recorded outside the block.
"""
import json
import threading
from typing import Any, Dict, List, Optional, Tuple

from . import _tracepoints as _points
from ._tracepoints import POINTS, SPAN_INTO, decode, now_ns  # noqa: F401 - tracing's names too
from .client import connect


def __getattr__(name):
    """``tracing.active``: the Recorder recording now (None: none), kept in _tracepoints where
    the connection reads it."""
    if name == "active":
        return _points.active
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def spans(points: Dict[str, int]):
    """(name, start ns, end ns) of each span between two consecutive points reached."""
    reached = [p for p in POINTS if p in points]
    out = []
    for a, b in zip(reached, reached[1:]):
        name = "running" if (a, b) == ("started", "ended") else SPAN_INTO[b]
        out.append((name, points[a], points[b]))
    return out


class Recorder:
    """The client's calls recorded while its block runs (tshard.trace()), and the gathering of
    the daemons' rings beside them (save)."""

    def __init__(self):
        self.calls: List[Dict[str, Any]] = []
        self._lock = threading.Lock()

    def __enter__(self):
        if _points.active is not None:
            raise RuntimeError("tshard.trace() is already recording (one block at a time)")
        _points.active = self
        return self

    def __exit__(self, *exc):
        _points.active = None
        return False

    def add(self, kind: str, request_id: int, rank: Optional[int], t0: int, t1: int):
        with self._lock:
            self.calls.append({"kind": kind, "request_id": request_id, "rank": rank,
                               "sent_ns": t0, "answered_ns": t1})

    def save(self, path: str, job: Optional[str] = None, ranks: Optional[List[dict]] = None,
             timeout: float = 60.0) -> Dict[str, Any]:
        """Writes the Chrome trace event file: every rank's ring of the job (connects to each
        rank; ranks: traces already read, one dict per rank from Client.trace) and the calls
        recorded. Returns the trace written, as a dict."""
        if ranks is None:
            with connect(rank=0, job=job, timeout=timeout) as c:
                n = c.ping()["world_size"]
                ranks = [c.trace()]
            for r in range(1, n):
                with connect(rank=r, job=job, timeout=timeout) as c:
                    ranks.append(c.trace())
        doc = chrome(ranks, self.calls, job or "")
        with open(path, "w") as f:
            json.dump(doc, f)
        return doc


def trace() -> Recorder:
    """A recorder of this process's client calls: ``with tshard.trace() as t: ...`` then
    ``t.save(path, job=...)``."""
    return Recorder()


def lanes(intervals: List[Tuple[int, int]]) -> List[int]:
    """A lane for each (start, end) such that no two on one lane overlap, the lowest free one
    taken in order of start: viewers of the Chrome format nest the slices of one track, so an
    operation that began before the previous one ended (a put's collective while its chunk is
    answered, a reshard queued behind another) goes on a track of its own."""
    ends: List[int] = []
    out = [0] * len(intervals)
    for i in sorted(range(len(intervals)), key=lambda i: intervals[i]):
        a, b = intervals[i]
        k = next((k for k, e in enumerate(ends) if e <= a), len(ends))
        if k == len(ends):
            ends.append(b)
        ends[k] = b
        out[i] = k
    return out


def chrome(ranks: List[dict], calls: List[dict], job: str) -> Dict[str, Any]:
    """The Chrome trace event format of the ranks' rings (process 0, one track per rank, with a
    further track for each level of operations that overlap in time: lanes) and the client's
    calls (process 1), in microseconds from the earliest point."""
    offset = {t["rank"]: t["clock_offset_ns"] for t in ranks}
    starts = [t for r in ranks for o in r["ops"] for t in o["points"].values()]
    starts += [c["sent_ns"] + offset.get(c["rank"], 0) for c in calls]
    t0 = min(starts) if starts else 0
    us = lambda t: (t - t0) / 1e3  # noqa: E731
    ev = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": f"tshard job {job}"}},
          {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "client"}}]
    nranks = max((r["rank"] for r in ranks), default=-1) + 1
    for r in ranks:
        ops = [o for o in r["ops"] if o["points"]]
        lane = lanes([(min(o["points"].values()), max(o["points"].values())) for o in ops])
        for k in range(max(lane, default=0) + 1):
            ev.append({"ph": "M", "pid": 0, "tid": r["rank"] + k * nranks, "name": "thread_name",
                       "args": {"name": f"rank {r['rank']} ({r['host']})" +
                                (f", overlapping {k}" if k else "")}})
            ev.append({"ph": "M", "pid": 0, "tid": r["rank"] + k * nranks,
                       "name": "thread_sort_index", "args": {"sort_index": r["rank"] * 64 + k}})
        for o, k in zip(ops, lane):
            p, tid = o["points"], r["rank"] + k * nranks
            first, last = min(p.values()), max(p.values())
            args = {k: o[k] for k in ("seq", "strategy", "status", "bytes_sent",
                                      "bytes_received", "origin", "request_id")}
            args["tensor"], args["rank"] = o["name"], r["rank"]
            ev.append({"ph": "X", "pid": 0, "tid": tid, "ts": us(first),
                       "dur": (last - first) / 1e3, "cat": o["kind"],
                       "name": f"{o['kind']} {o['name']}", "args": args})
            for name, a, b in spans(p):
                ev.append({"ph": "X", "pid": 0, "tid": tid, "ts": us(a),
                           "dur": (b - a) / 1e3, "cat": "span", "name": name,
                           "args": {"seq": o["seq"]}})
    drawn = [(c["sent_ns"] + offset.get(c["rank"], 0), c["answered_ns"] + offset.get(c["rank"], 0))
             for c in calls]
    for c, k in zip(calls, lanes(drawn)):
        off = offset.get(c["rank"], 0)
        ev.append({"ph": "X", "pid": 1, "tid": k, "ts": us(c["sent_ns"] + off),
                   "dur": (c["answered_ns"] - c["sent_ns"]) / 1e3, "cat": "client",
                   "name": c["kind"], "args": {"request_id": c["request_id"],
                                               "rank": c["rank"]}})
    return {"displayTimeUnit": "ns", "traceEvents": ev,
            "otherData": {"job": job, "ranks": [
                {k: r[k] for k in ("rank", "clock_offset_ns", "clock_rtt_ns", "ring", "dropped")}
                for r in ranks]}}
