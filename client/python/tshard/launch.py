"""Daemons from Python (notebooks, tests) through the launcher, and what became of a job.

``tshard.launch(np=4)`` starts a job of daemons with ``tshard-launch start`` and returns a
:class:`Job`; used with ``with`` it stops the job on exit, whatever happened inside::

    with tshard.launch(np=4) as job:
        c = job.connect(0)
        c.create("w", "f32", (8, 4), "mesh=[4] placements=[S(0)]")

The launcher is found as $TSHARD_LAUNCH, else next to this package in a build tree
(build/python/tshard -> build/bin/tshard-launch), else on $PATH.

The launcher records a job's fate in ``tshard-<job>.status`` beside its sockets: ``state`` is
running, stopping, stopped, failed (at start) or lost, and a lost rank comes with ``rank``,
``host``, ``cause`` (its signal or exit code) and ``log``. When a connection ends, the client
reads it here (:func:`lost_rank_error`) to raise RankLostError naming the rank instead of a bare
I/O error. The record is read only when it is a regular file of this user's (or root's) that
nobody else may write; any other is ignored (see ``_trust``).
"""
import itertools
import os
import subprocess
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ._trust import read_trusted_file
from .errors import TshardError, error_for
from .offline import find_tool

if TYPE_CHECKING:  # the client module imports this one: a name for the hints only
    from .client import Client

__all__ = ["launch", "Job", "job_status", "lost_rank_error", "lost_job_message"]

_RANK_LOST = 39
_LOST_WAIT = 2.0  # s: how long a failed connection waits for the launcher's record
_LOST_UNNAMED_WAIT = 8.0  # s more, while the record says a rank was lost but not yet which
_jobs = itertools.count()


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
    return error_for(_RANK_LOST,
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


def launcher_path() -> str:
    """The ``tshard-launch`` this module runs."""
    path, looked = find_tool("tshard-launch", "TSHARD_LAUNCH")
    if path:
        return path
    built = looked[0]
    raise error_for(20, f"tshard-launch was not found: looked at $TSHARD_LAUNCH (not set), "
                        f"{built} and $PATH; install tshard (cmake --install build --prefix "
                        f"PREFIX puts PREFIX/bin/tshard-launch) or set TSHARD_LAUNCH to its path")


def _default_socket_dir() -> str:
    env = os.environ.get("TSHARD_SOCKET_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(xdg, "tshard") if xdg else f"/tmp/tshard-{os.getuid()}"


class Job:
    """A running job of daemons started by :func:`launch`."""

    def __init__(self, launcher: str, job: str, np: int, socket_dir: str, timeout: float,
                 metrics_port: Optional[int] = None) -> None:
        self.launcher = launcher
        self.job = job
        self.np = np
        self.socket_dir = socket_dir
        self.log = os.path.join(socket_dir, f"tshard-{job}.log")
        #: rank r serves Prometheus metrics on 127.0.0.1:metrics_port + r (None: not asked)
        self.metrics_port = metrics_port
        #: the job's Prometheus service-discovery file (None without metrics_port)
        self.metrics_sd_file = (os.path.join(socket_dir, f"tshard-{job}.prometheus.json")
                                if metrics_port is not None else None)
        self._timeout = timeout
        self._stopped = False

    def socket(self, rank: int) -> str:
        """The Unix socket of a rank's daemon."""
        return os.path.join(self.socket_dir, f"tshard-{self.job}-{rank}.sock")

    def connect(self, rank: int = 0, **kwargs: Any) -> "Client":
        """A client connected to ``rank``'s daemon (``tshard.connect``'s keyword arguments:
        ``timeout``, ``shm``, ``group``, ...)."""
        from .client import connect
        if not isinstance(rank, int) or not 0 <= rank < self.np:
            raise error_for(1, f"rank {rank!r}: job {self.job} has {self.np} ranks "
                               f"(0 to {self.np - 1})")
        return connect(socket=self.socket(rank), **kwargs)

    def status(self) -> Dict[str, str]:
        """The launcher's record of the job (``state``, and for a lost rank ``rank``, ``host``,
        ``cause``, ``log``); {} when there is none."""
        return job_status(self.socket(0)) or {}

    def stop(self) -> None:
        """Stops the job (``tshard-launch stop``); does nothing the second time."""
        if self._stopped:
            return
        self._stopped = True
        r = subprocess.run([self.launcher, "stop", "--job", self.job, "--socket-dir",
                            self.socket_dir, "--timeout", str(int(self._timeout))],
                           capture_output=True, text=True, timeout=self._timeout + 30)
        if r.returncode != 0:
            raise error_for(18, f"tshard-launch stop --job {self.job}: {r.stderr.strip()}")

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Job(job={self.job!r}, np={self.np}, socket_dir={self.socket_dir!r})"


def launch(np: int = 4, job: Optional[str] = None, socket_dir: Optional[str] = None,
           timeout: float = 60.0, daemon_args: Sequence[str] = (),
           mpirun_args: Sequence[str] = (), metrics_port: Optional[int] = None) -> Job:
    """Starts ``np`` daemons with ``tshard-launch start`` and returns once every rank serves.

    ``job`` defaults to a name of its own per call (``py<pid>-<n>``), ``socket_dir`` to the
    launcher's default ($TSHARD_SOCKET_DIR, $XDG_RUNTIME_DIR/tshard or /tmp/tshard-<uid>).
    ``daemon_args`` go to every tshardd (e.g. ``["--memory-limit", "1G"]``), ``mpirun_args``
    to mpirun. ``metrics_port`` (``--metrics-port``): rank r serves Prometheus metrics on
    127.0.0.1:metrics_port + r, and the launcher writes the job's service-discovery file
    (:attr:`Job.metrics_sd_file`). A launch that fails raises TshardError with the launcher's words (which rank
    did not serve and why); bad arguments raise InvalidArgumentError before anything starts."""
    if isinstance(np, bool) or not isinstance(np, int) or np < 1:
        raise error_for(1, f"np={np!r}: the number of ranks must be an int of at least 1")
    if timeout <= 0:
        raise error_for(1, f"timeout={timeout!r}: give a positive number of seconds")
    if metrics_port is not None and (isinstance(metrics_port, bool) or
                                     not isinstance(metrics_port, int) or
                                     not 1 <= metrics_port <= 65535 - (np - 1)):
        raise error_for(1, f"metrics_port={metrics_port!r}: give a port from 1 to "
                           f"{65535 - (np - 1)} (rank r serves on it + r)")
    job = job if job is not None else f"py{os.getpid()}-{next(_jobs)}"
    socket_dir = socket_dir if socket_dir is not None else _default_socket_dir()
    launcher = launcher_path()
    cmd: List[str] = [launcher, "start", "-np", str(np), "--job", job, "--socket-dir",
                      socket_dir, "--timeout", str(int(max(timeout, 1)))]
    for a in mpirun_args:
        cmd += ["--mpirun-arg", str(a)]
    if metrics_port is not None:
        cmd += ["--metrics-port", str(metrics_port)]
    if daemon_args:
        cmd += ["--", *[str(a) for a in daemon_args]]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        raise error_for(19, f"tshard-launch start did not return within {timeout + 30:.0f} s; "
                            f"stop the job with tshard-launch stop --job {job}") from None
    if r.returncode != 0:
        raise error_for(1 if r.returncode == 2 else 18,
                        f"tshard-launch start -np {np} --job {job}: {r.stderr.strip()}")
    return Job(launcher, job, np, socket_dir, timeout, metrics_port)
