"""The tshard client: :class:`Client`, one connection to a daemon, is composed of one mixin
per family of operations, as the C library is split by file: the connection (``conn``), tensors
one at a time (``tensors``, their bytes moved by ``transfer``), reshard, many tensors at once and
state dicts (``batch``), checkpoints (``ckpt``), safetensors, einsum, programs, the daemons' and
the job's state (``observe``) and the SPMD group (``spmd``); and :func:`connect`, which opens it.
"""
import os
from typing import Optional, Sequence, Tuple, Union

from ._common import DTYPE_SPELLINGS, DTYPES, ROW_MAJOR, _check_token
from ._status import INVALID_ARGUMENT, IO, RANK_LOST, UNSUPPORTED
from .batch import Batches
from .ckpt import Checkpoints
from .conn import (Connection, _check_job, _env_rank, _tcp_opener, _unix_opener, read_token_file,
                   socket_path)
from .einsum import Einsums
from .errors import TshardError, error_for
from .lost import lost_job_message
from .observe import Observe
from .program import Programs
from .reshard import Reshard
from .safetensors import Safetensors
from .spmd import SpmdGroup
from .tensors import Tensors
from .transfer import Transfers

__all__ = ["Client", "connect", "DTYPES", "DTYPE_SPELLINGS", "ROW_MAJOR", "socket_path",
           "read_token_file"]


class Client(Tensors, Transfers, Reshard, Batches, Checkpoints, Safetensors,
             Einsums, Programs, Observe, SpmdGroup, Connection):
    """A connection to one daemon, made by :func:`tshard.connect`; close it (or use ``with``).

    Every operation raises a :class:`tshard.TshardError` subclass named after the status (the
    daemon's message says what was wrong and what is valid). Every operation of the daemons
    takes ``wait=False`` and then returns a :class:`tshard.Future` at once.

    Example::

        with tshard.connect(rank=0, job="demo") as c:
            c.create("w", "f32", (8, 4), "mesh=[4] placements=[S(0)]")
            c.put("w", np.ones((8, 4), np.float32))
            print(c.get("w").sum())
    """



def _no_daemon(job, rank, path, timeout):
    """Why no daemon answered at path: a rank beyond the job's world (rank 0 says its size), or
    no daemon at all, with how to start one (a lost rank is connect's RankLostError)."""
    if rank > 0:
        try:
            with connect(rank=0, job=job, timeout=timeout, shm=False) as c0:
                world = c0.ping()["world_size"]
            if rank >= world:
                return f"rank {rank}: job {job} has {world} ranks (0 to {world - 1})"
        except TshardError:
            pass
    return (f"no daemon serves job {job} on rank {rank} at {path}; start one with "
            f"tshard-launch start -np N --job {job} (deploy/tshard-launch)")


def _grouped(c, timeout, group, run_id, collective_timeout):
    """connect's SPMD group (argument, else TSHARD_GROUP)."""
    c._timeout = timeout
    if group is None:
        group = os.environ.get("TSHARD_GROUP") or None
    try:
        if group is not None:
            c.set_group(group, run_id=run_id, collective_timeout=collective_timeout)
        return c
    except BaseException:
        c.close()
        raise


def connect(rank: Optional[int] = None, socket: Optional[str] = None,
            tcp: Union[None, str, Tuple[str, int]] = None, token: Optional[str] = None,
            job: Optional[str] = None, timeout: Optional[float] = 60.0,
            shm: Optional[bool] = None, token_file: Optional[str] = None,
            group: Union[None, str, Sequence[int]] = None, run_id: Optional[str] = None,
            collective_timeout: Optional[float] = None) -> Client:
    """Connects to a daemon.

    Args:
        rank: the rank whose daemon to reach (default: this process's MPI rank from the
            environment, else 0).
        socket: a Unix socket path instead of ``rank`` and ``job``.
        tcp: ``"host:port"`` or ``(host, port)`` of a daemon listening on TCP.
        token: the job's token (TCP).
        job: the job id (default $TSHARD_JOB, else ``"default"``).
        timeout: seconds to wait for any answer (None: forever).
        shm: move data through shared memory (default on for Unix sockets unless TSHARD_SHM=0).
        token_file: a file holding the token (see :func:`read_token_file`).
        group: ranks or ``"all"`` (default $TSHARD_GROUP): SPMD collectives, see
            :meth:`Client.set_group`.
        run_id: the launch's id for the collectives' keys.
        collective_timeout: seconds the collectives wait for the other ranks.

    Returns:
        A :class:`Client`; close it, or use it in a ``with`` block.

    Raises:
        IoError (a ConnectionError): no daemon serves there (the message says how to start one).
        RankLostError: the launcher recorded that the job lost a rank (the message names it).
        AuthError: a bad token; a socket directory that is not this user's own with mode
        0700 (a link, another owner, group or other bits), or a daemon running as another
        user than this one or root (the message names the directory, or the process's uid and
        pid). InvalidArgumentError: a bad job name or rank.

    Example::

        with tshard.connect(rank=0, job="demo") as c:
            print(c.ping())
    """
    if token_file is not None:
        token = read_token_file(token_file)
    if tcp is not None:
        _check_token(token)
        if shm:
            raise error_for(UNSUPPORTED, "shared memory needs a Unix socket connection; over TCP "
                                         "the data travels in the frames")
        host, port = tcp.rsplit(":", 1) if isinstance(tcp, str) else tcp
        open_tcp = _tcp_opener(host, port, timeout)
        c = Client(open_tcp(), token=token, opener=open_tcp)
        try:
            c._hello()  # presents the token
        except BaseException:
            c.close()
            raise
        return _grouped(c, timeout, group, run_id, collective_timeout)
    by_job = socket is None
    if by_job:
        job = _check_job(job or os.environ.get("TSHARD_JOB", "default"))
        rank = _env_rank() if rank is None else rank
        if not isinstance(rank, int) or rank < 0:
            raise error_for(INVALID_ARGUMENT, f"rank {rank!r}: expected a rank number >= 0")
        socket = socket_path(job, rank)
    if shm is None:
        shm = os.environ.get("TSHARD_SHM", "") != "0"
    open_unix = _unix_opener(socket, timeout)
    try:
        s = open_unix()
    except OSError as e:
        lost = lost_job_message(socket)  # the launcher recorded a lost rank
        if lost is not None:
            raise error_for(RANK_LOST, lost) from None
        if by_job:
            raise error_for(IO, _no_daemon(job, rank, socket, timeout)) from None
        raise error_for(IO, f"cannot connect to {socket}: {e.strerror} (is tshardd running "
                            f"for this job and rank?)") from None
    c = Client(s, shm=bool(shm), opener=open_unix)
    c._socket_path = socket
    try:
        c._hello()
    except BaseException:
        c.close()
        raise
    return _grouped(c, timeout, group, run_id, collective_timeout)
