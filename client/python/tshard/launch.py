"""Daemons from Python (notebooks, tests) through the launcher, and what became of a job.

``tshard.launch(np=4)`` starts a job of daemons with ``tshard-launch start`` and returns a
:class:`Job`; used with ``with`` it stops the job on exit, whatever happened inside::

    with tshard.launch(np=4) as job:
        c = job.connect(0)
        c.create("w", "f32", (8, 4), "mesh=[4] placements=[S(0)]")

The launcher is found as $TSHARD_LAUNCH, else next to this package in a build tree
(build/python/tshard -> build/bin/tshard-launch), else on $PATH.

The launcher records a job's fate in ``tshard-<job>.status`` beside its sockets; ``lost``
reads it (:func:`job_status`, and the RankLostError of a lost rank: :func:`lost_rank_error`).
"""
import itertools
import os
import subprocess
from typing import Any, Dict, List, Optional, Sequence

from ._status import INVALID_ARGUMENT, IO, TIMEOUT, UNSUPPORTED
from .client import Client, connect
from .errors import error_for
from .lost import job_status, lost_job_message, lost_rank_error  # noqa: F401 - exported here too
from .offline import find_tool

__all__ = ["launch", "Job", "job_status", "lost_rank_error", "lost_job_message"]

_jobs = itertools.count()


def launcher_path() -> str:
    """The ``tshard-launch`` this module runs."""
    path, looked = find_tool("tshard-launch", "TSHARD_LAUNCH")
    if path:
        return path
    built = looked[0]
    raise error_for(UNSUPPORTED, "tshard-launch was not found: looked at $TSHARD_LAUNCH (not set), "
                                 f"{built} and $PATH; install tshard (cmake --install build "
                                 "--prefix PREFIX puts PREFIX/bin/tshard-launch) or set "
                                 "TSHARD_LAUNCH to its path")


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
        if not isinstance(rank, int) or not 0 <= rank < self.np:
            raise error_for(INVALID_ARGUMENT, f"rank {rank!r}: job {self.job} has {self.np} ranks "
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
            raise error_for(IO, f"tshard-launch stop --job {self.job}: {r.stderr.strip()}")

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
        raise error_for(INVALID_ARGUMENT, f"np={np!r}: the number of ranks "
                                          "must be an int of at least 1")
    if timeout <= 0:
        raise error_for(INVALID_ARGUMENT, f"timeout={timeout!r}: give a positive number of seconds")
    if metrics_port is not None and (isinstance(metrics_port, bool) or
                                     not isinstance(metrics_port, int) or
                                     not 1 <= metrics_port <= 65535 - (np - 1)):
        raise error_for(INVALID_ARGUMENT, f"metrics_port={metrics_port!r}: give a port from 1 to "
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
        raise error_for(TIMEOUT, f"tshard-launch start did not return within {timeout + 30:.0f} s; "
                                 f"stop the job with tshard-launch stop --job {job}") from None
    if r.returncode != 0:
        raise error_for(INVALID_ARGUMENT if r.returncode == 2 else IO,
                        f"tshard-launch start -np {np} --job {job}: {r.stderr.strip()}")
    return Job(launcher, job, np, socket_dir, timeout, metrics_port)
