"""What the Python client believes on this node before it talks to a daemon or reads its files.

The default socket directory of a user without XDG_RUNTIME_DIR is /tmp/tshard-<uid>, a name any
other user can take first. So, as libtshard does (client/trust.c): a socket is used only in a
directory that is a real directory (not a link) owned by this process's effective uid with no
group or other bits; the process listening on it (``SO_PEERCRED``, captured when the daemon
called listen()) must run as that uid or as root; and a file of that directory (the launcher's
status file) is read only when it is a regular file of that uid or root that group and others
cannot write, opened without following a link and without blocking (a FIFO is never read), and
at most ``limit`` bytes of it. A directory or a daemon that fails raises AuthError naming what is
wrong; a file that fails is treated as absent.
"""
import os
import socket
import stat
import struct
from typing import Optional

from ._status import AUTH
from .errors import error_for

__all__ = ["check_socket_dir", "check_peer", "read_trusted_file"]

_HINT = ("remove it, or choose another directory with TSHARD_SOCKET_DIR (tshard-launch "
         "--socket-dir)")


def check_socket_dir(socket_path: str) -> None:
    """Raises AuthError unless the directory of ``socket_path`` is a real directory owned by
    this user (effective uid) with mode 0700; a missing one passes (the connect says so)."""
    d = os.path.dirname(socket_path) or "."
    try:
        st = os.lstat(d)
    except OSError:
        return
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        raise error_for(AUTH, f"the socket directory {d} is a symbolic link: refusing it (a client "
                              f"uses only a real directory of its own with mode 0700); {_HINT}")
    if not stat.S_ISDIR(st.st_mode):
        raise error_for(AUTH, f"the socket directory {d} is not a directory: refusing it; {_HINT}")
    if st.st_uid != me:
        raise error_for(AUTH, f"the socket directory {d} belongs to uid {st.st_uid}, not to you "
                              f"(uid {me}): refusing it (another user could serve your calls "
                              f"from it); {_HINT}")
    if st.st_mode & 0o077:
        raise error_for(AUTH, f"the socket directory {d} has mode "
                              f"{stat.S_IMODE(st.st_mode):04o}: it must be 0700, yours alone (no "
                              "group or other bits), or another user could plant a socket there; "
                              f"refusing it (chmod 700 it if it is yours and trusted, or {_HINT})")


def check_peer(sock: socket.socket, socket_path: str) -> None:
    """Raises AuthError unless the process listening on connected Unix socket ``sock`` runs as
    this user (effective uid) or root; the caller closes the socket."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
        pid, uid, _gid = struct.unpack("iII", raw)  # struct ucred: pid_t, uid_t, gid_t
    except (OSError, struct.error) as e:
        raise error_for(AUTH, f"cannot tell who listens at {socket_path} "
                              f"(SO_PEERCRED: {e}): refusing it") from None
    me = os.geteuid()
    if uid not in (me, 0):
        raise error_for(AUTH, f"the process listening at {socket_path} runs as uid {uid} (pid "
                              f"{pid}), not as you (uid {me}) or root: refusing to talk to it "
                              f"(it is not your daemon); {_HINT}")


def read_trusted_file(path: str, limit: int = 4096) -> Optional[bytes]:
    """Up to ``limit`` bytes of ``path`` when it is a regular file of this user or root that
    group and others cannot write; None otherwise (absent, a link, a FIFO, another's file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), 0)
                or st.st_mode & 0o022):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)

