#!/usr/bin/python3
"""tshard.launch and Job.stop signal only the job's own processes, and name a daemon's error:
a daemon that refuses its flags makes launch raise promptly with the daemon's own message; a
TERM to the job's process group inside ``with tshard.launch(...)`` while a background save is
still writing (its rank files' fsync held back by a preloaded slow disk, slow_fsync.so) ends
the job with the checkpoint complete and equal to what was put, job.status() says stopped, and
leaving the block raises nothing; Job.stop on a pid file whose pid now belongs to another
process (one whose command line says "--job JOB "), or on a bare pid without its start time,
signals nothing and raises nothing.

usage: test_launch_safety.py BUILD_BIN_DIR SLOW_FSYNC_SO"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import tshard
import tshard.checkpoint as ck
from checks import Checks
from tshard.launch import Job

bin_dir, slow = sys.argv[1], sys.argv[2]
check = Checks()
sock_dir = tempfile.mkdtemp(prefix="tshard-pylaunch-safety-")
os.chmod(sock_dir, 0o700)
launcher = os.path.join(bin_dir, "tshard-launch")


def until(cond, seconds):
    """Polls cond until it holds, up to seconds; whether it held."""
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)  # polling a condition, bounded by the deadline
    return True


def start_time(pid):
    """Field 22 of /proc/PID/stat (clock ticks after boot); None when the process is gone (or
    a zombie: it ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


# a daemon that refuses its flags: launch raises with the daemon's words, well before its timeout
for flags, want in ((["--memory-limit", "banana"], "tshardd: --memory-limit banana: expected auto"),
                    (["--no-such-flag"], "tshardd: unknown flag '--no-such-flag'")):
    t0 = time.monotonic()
    try:
        tshard.launch(np=2, socket_dir=sock_dir, timeout=120, daemon_args=flags)
        check(False, f"launch with {flags}: no error")
    except tshard.TshardError as e:
        check(want in e.message, f"launch with {flags}: {e.message}")
        check(time.monotonic() - t0 < 60, f"launch with {flags}: {time.monotonic() - t0:.0f} s")

# a TERM to the job's process group while a background save writes
ref = np.arange(6000, dtype=np.float32).reshape(60, 100) - 17.5
ckdir = os.path.join(sock_dir, "ck")
os.environ["LD_PRELOAD"] = ":".join(p for p in (slow, os.environ.get("LD_PRELOAD")) if p)
os.environ["TSHARD_TEST_FSYNC_DELAY_MS"] = "5000"
try:
    job = tshard.launch(np=2, socket_dir=sock_dir, timeout=60)
finally:
    os.environ.pop("TSHARD_TEST_FSYNC_DELAY_MS")
    os.environ["LD_PRELOAD"] = os.environ["LD_PRELOAD"][len(slow):].lstrip(":")
    if not os.environ["LD_PRELOAD"]:
        del os.environ["LD_PRELOAD"]
with job:
    with open(os.path.join(sock_dir, f"tshard-{job.job}.pid")) as f:
        lead = int(f.readline())
    with job.connect(0, timeout=60) as c:
        c.create("w", "f32", ref.shape, "mesh=[2] placements=[S(1)]")
        c.put("w", ref)
        r = c.save(ckdir, all=True, wait=False).result(60)
        check(r["writing"], f"save: {r}")
    check(not os.path.exists(os.path.join(ckdir, "index.json")), "the save is not writing")
    os.killpg(lead, signal.SIGTERM)
    check(until(lambda: not os.path.exists(f"/proc/{lead}"), 90), "the job did not end")
    check(job.status().get("state") == "stopped", f"status {job.status()}")
# leaving the block stopped nothing more and raised nothing
check(os.path.isfile(os.path.join(ckdir, "index.json")), "no index.json")
check(not [f for f in os.listdir(sock_dir) if f.startswith(".ck.tmp-")],
      f"temporary directories left: {os.listdir(sock_dir)}")
try:
    check(np.array_equal(ck.read(ckdir, "w"), ref), "the checkpoint differs from what was put")
except ck.CheckpointError as e:
    check(False, f"the checkpoint cannot be read: {e}")
with open(job.log) as f:
    log = f.read()
if not check(f"background save {r['save_id']} to '{ckdir}' complete" in log,
             "the log names no complete save"):
    print("the job's log:", *log.splitlines()[-30:], sep="\n  ")

# Job.stop when the pid named in the pid file is another process now
decoy = subprocess.Popen(["bash", "-c", "exec -a 'x --job pyreuse ' sleep 300"],
                         start_new_session=True)
try:
    check(until(lambda: b"--job pyreuse " in open(f"/proc/{decoy.pid}/cmdline", "rb").read(), 10),
          "the decoy did not start")
    started = start_time(decoy.pid)
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    pidfile = os.path.join(sock_dir, "tshard-pyreuse.pid")
    with open(pidfile, "w") as f:
        f.write(f"{decoy.pid}\nstart={int(started) - 1}\nboot={boot}\n")
    Job(launcher, "pyreuse", 2, sock_dir, 5).stop()  # raises on a failure
    check(start_time(decoy.pid) == started, "the decoy was signalled")
    check(not os.path.exists(pidfile), "the stale pid file was left")
    # a bare pid: nothing to tell the leader from the decoy by, but its command line
    with open(pidfile, "w") as f:
        f.write(f"{decoy.pid}\n")
    Job(launcher, "pyreuse", 2, sock_dir, 5).stop()
    check(start_time(decoy.pid) == started, "the decoy was signalled (bare pid)")
finally:
    decoy.kill()
    decoy.wait()

for f in os.listdir(sock_dir):
    p = os.path.join(sock_dir, f)
    if os.path.isdir(p):
        for g in os.listdir(p):
            os.unlink(os.path.join(p, g))
        os.rmdir(p)
    else:
        os.unlink(p)
os.rmdir(sock_dir)
check.finish()
