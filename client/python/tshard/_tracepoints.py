"""What the connection records of each call while ``tshard.trace()`` is recording, and the
daemons' trace rings as dicts: the points of an operation's way (POINTS), the recorder recording
now (``active``, read by the connection on every call), ``now_ns`` (the client's clock) and
``decode`` (a TraceResult as a dict). ``tracing`` builds on it; this module imports no client
module, so the connection can import it.
"""
import time
from typing import Any, Dict

from ._status import PROTOCOL
from .errors import error_for

POINTS = ["received", "submitted", "ordered", "started", "planned", "agreed", "moved",
          "committed", "ended", "answered"]
# the span that ends at each point (the point before it that the operation reached starts it)
SPAN_INTO = {"submitted": "queued", "ordered": "ordering", "started": "waiting",
             "planned": "planning", "agreed": "agreeing", "moved": "moving",
             "committed": "committing", "ended": "finishing", "answered": "answering"}

active = None  # the Recorder recording now, read by the client on every call


def decode(res) -> Dict[str, Any]:
    """A TraceResult as a dict: rank, clock_offset_ns, clock_rtt_ns, ring, dropped, host and
    ops (each with seq, kind, name, strategy, status, bytes_sent, bytes_received, origin,
    request_id and points: {point: ns in rank 0's clock} of the points it reached)."""
    if list(res.point_names) != POINTS:
        raise error_for(PROTOCOL, f"the daemon's trace points {list(res.point_names)} are not this "
                                  f"client's {POINTS}: use a client of the daemons' version")
    ops = []
    for o in res.ops:
        if len(o.points) != len(POINTS):
                raise error_for(PROTOCOL, f"a traced operation has {len(o.points)} times for "
                                f"{len(POINTS)} points")
        ops.append({"seq": o.seq, "kind": o.kind, "name": o.name, "strategy": o.strategy,
                    "status": o.status, "bytes_sent": o.bytes_sent,
                    "bytes_received": o.bytes_received, "origin": o.origin,
                    "request_id": o.request_id,
                    "points": {p: t for p, t in zip(POINTS, o.points) if t}})
    return {"rank": res.rank, "clock_offset_ns": res.clock_offset_ns,
            "clock_rtt_ns": res.clock_rtt_ns, "ring": res.ring, "dropped": res.dropped,
            "host": res.host, "ops": ops}


def now_ns() -> int:
    """The client's clock: this host's CLOCK_MONOTONIC, in ns."""
    return time.monotonic_ns()
