"""What became of a job, from the launcher's record: ``tshard-<job>.status`` beside its sockets
holds ``state`` (running, stopping, stopped, failed at start, or lost) and, for a lost rank,
``rank``, ``host``, ``cause`` (its signal or exit code) and ``log``. When a connection ends, the
client reads it here (:func:`lost_rank_error`) to raise RankLostError naming the rank instead of
a bare I/O error. The record is read only when it is a regular file of this user's (or root's)
that nobody else may write; any other is ignored (see ``_trust``).
"""
import time
from typing import Dict, Optional

from ._status import RANK_LOST
from ._trust import read_trusted_file
from .errors import TshardError, error_for

__all__ = ["job_status", "lost_rank_error", "lost_job_message"]

_LOST_WAIT = 2.0  # s: how long a failed connection waits for the launcher's record
_LOST_UNNAMED_WAIT = 8.0  # s more, while the record says a rank was lost but not yet which


def _status_file(socket_path: str) -> Optional[str]:
    """``<dir>/tshard-<job>.status`` for a socket ``<dir>/tshard-<job>-<rank>.sock``."""
    if not socket_path.endswith(".sock"):
        return None
    stem, _, rank = socket_path[:-5].rpartition("-")
    if not stem or not rank.isdigit():
        return None
    return stem + ".status"


def job_status(socket_path: str) -> Optional[Dict[str, str]]:
    """The launcher's record of the job that ``socket_path`` (a rank's socket) belongs to, as a
    dict of its key=value lines; None when there is none (daemons not started by the launcher)."""
    path = _status_file(socket_path)
    if path is None:
        return None
    raw = read_trusted_file(path)  # another user's file, a link or a FIFO: none
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def lost_rank_error(socket_path: str, wait: float = _LOST_WAIT) -> Optional[TshardError]:
    """RankLostError naming the lost rank, its host, cause and the launcher's log when the job of
    ``socket_path`` lost a rank; None otherwise. While the job is still recorded as running it
    waits up to ``wait`` seconds for the launcher to learn of the loss from Open MPI."""
    deadline = time.monotonic() + wait
    while True:
        st = job_status(socket_path)
        if st is None:
            return None
        state = st.get("state", "")
        if (state == "lost" and st.get("final") == "1") or state not in ("lost", "running"):
            break
        # a loss recorded without its rank (a job across nodes): Open MPI names it later
        if time.monotonic() >= deadline + (_LOST_UNNAMED_WAIT if state == "lost" and
                                           not st.get("rank") else 0):
            break
        time.sleep(0.02)  # polling the launcher's record, bounded by the deadline
    if state != "lost":
        return None
    return error_for(RANK_LOST,
                     f"rank {st.get('rank') or '?'} (host {st.get('host') or 'unknown'}) was lost: "
                     f"{st.get('cause') or 'cause unknown'}; Open MPI stopped job "
                     f"'{st.get('job', '?')}', and every tensor the job held in memory is gone "
                     f"(complete checkpoints on disk remain); the launcher's log: "
                     f"{st.get('log') or 'unknown'}")


def lost_job_message(socket_path: str) -> Optional[str]:
    """When the launcher recorded that the job of ``socket_path`` lost a rank, a sentence naming
    it (for a connect that found no daemon); else None."""
    st = job_status(socket_path)
    if st is None or st.get("state") != "lost":
        return None
    return (f"job {st.get('job', '?')} lost rank {st.get('rank') or '?'} (host "
            f"{st.get('host') or 'unknown'}): {st.get('cause') or 'cause unknown'}; Open MPI "
            f"stopped the whole job (the launcher's log: {st.get('log') or 'unknown'}); start it "
            f"again with tshard-launch start and load the last checkpoint")
