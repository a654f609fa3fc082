#!/usr/bin/python3
"""tshard.launch through the real launcher (build/bin/tshard-launch, found next to the package):
`with tshard.launch(np=3) as job` serves 3 ranks (each connects and pings as its own rank), a
tensor put through one rank and got through another equals numpy's, `tshard-launch list` shows
the job while it runs, leaving the block stops it (no socket, pid file or listed job left),
also when the block raises; a wrong np or rank is refused with InvalidArgumentError naming it;
a rank killed inside the block while futures are in flight gives RankLostError (a
ConnectionError) naming it, so does the next call, and job.status() records it.

usage: test_launch.py BUILD_BIN_DIR"""
import os
import signal
import subprocess
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks

bin_dir = sys.argv[1]
check = Checks()
sock_dir = tempfile.mkdtemp(prefix="tshard-pylaunch-")
os.chmod(sock_dir, 0o700)
launcher = os.path.join(bin_dir, "tshard-launch")


def listed(job):
    out = subprocess.run([launcher, "list"], capture_output=True, text=True, timeout=60).stdout
    return [line.split() for line in out.splitlines()[1:] if line.split()[:1] == [job]]


def leftovers(job):
    return [f for f in os.listdir(sock_dir) if f.startswith(f"tshard-{job}-") or
            f == f"tshard-{job}.pid"]


check.expect(1, lambda: tshard.launch(np=0, socket_dir=sock_dir), "np=0", "at least 1")
check.expect(1, lambda: tshard.launch(np="2", socket_dir=sock_dir), "np='2'", "at least 1")
check(not os.listdir(sock_dir), f"a refused launch left {os.listdir(sock_dir)}")

ref = np.arange(60, dtype=np.float32).reshape(6, 10) * 0.5
with tshard.launch(np=3, socket_dir=sock_dir, timeout=60) as job:
    for r in range(3):
        with job.connect(r, timeout=30) as c:
            p = c.ping()
            check(p["rank"] == r and p["world_size"] == 3, f"rank {r}: ping {p}")
    with job.connect(0) as c0, job.connect(2) as c2:
        c0.create("w", "f32", ref.shape, "mesh=[3] placements=[S(0)]")
        c0.put("w", ref)
        c2.reshard("w", "mesh=[3] placements=[S(1)]")
        check(np.array_equal(c2.get("w"), ref), "get through rank 2 differs from what was put")
    rows = listed(job.job)
    check(len(rows) == 1 and rows[0][1] == "3" and rows[0][3] == sock_dir
          and rows[0][4] == job.log, f"list: {rows}")
    check.expect(1, lambda: job.connect(3), "rank 3 of 3", "has 3 ranks")
    check(job.status().get("state") == "running", f"status {job.status()}")
check(not leftovers(job.job), f"after the block: {leftovers(job.job)}")
check(not listed(job.job), f"still listed: {listed(job.job)}")

# an exception inside the block stops the job too
try:
    with tshard.launch(np=2, socket_dir=sock_dir) as job2:
        raise KeyError("inside")
except KeyError:
    pass
check(not leftovers(job2.job) and not listed(job2.job), f"after a raise: {leftovers(job2.job)}")

# a rank lost inside the block
with tshard.launch(np=2, socket_dir=sock_dir) as job3:
    c = job3.connect(0, timeout=30)
    c.create("t", "f32", (4, 4), "mesh=[2] placements=[S(0)]")
    log = open(job3.log).read()
    pid1 = int(log.split(f"ready: job {job3.job} rank 1 of 2 pid ")[1].split()[0])
    os.kill(pid1, signal.SIGKILL)
    try:  # operations in flight (futures): their answers come through the reader thread
        for i in range(100000):
            c.reshard("t", f"mesh=[2] placements=[S({(i + 1) % 2})]", wait=False).result(30)
        check(False, "no failure after the kill")
    except tshard.TshardError as e:
        check(isinstance(e, tshard.errors.RankLostError) and isinstance(e, ConnectionError),
              f"{type(e).__name__}: {e}")
        check("rank 1 (host " in e.message and "signal 9" in e.message and job3.log in e.message,
              f"message: {e.message}")
    check.expect(39, lambda: c.list(), "a call after the loss", "rank 1 (host ")
    st = job3.status()
    check(st.get("state") == "lost" and st.get("rank") == "1", f"status {st}")
check(not leftovers(job3.job), f"after a lost rank: {leftovers(job3.job)}")
for f in os.listdir(sock_dir):
    os.unlink(os.path.join(sock_dir, f))
os.rmdir(sock_dir)
check.finish()
