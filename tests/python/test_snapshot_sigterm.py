#!/usr/bin/python3
"""SIGTERM to the daemons while a background save is still writing: every rank reaches the
same outcome before it exits, and the log says which. Real daemons (3 ranks) under mpirun, the
save held deterministically on rank 1 by the fault registry (TSHARD_FAULT: save-hold waits after
the writer's first piece until the daemon stops, save-stuck until the save is abandoned), the
signal sent to rank 1 first and to the others once rank 1 logged it (as mpirun forwards it, a
little apart).

- A snapshot held, --shutdown-save-wait 60s: once rank 0's writer is done, a put and a get
  still run (a writer behind on one rank holds no rank's operations); at the signal the daemons
  complete it (loadable, holding the
  values of its time) and log it on every rank, no temporary directory is left, mpirun exits 0.
- save(wait=False) over a checkpoint, stuck, --shutdown-save-wait 1s: the daemons abandon it on
  every rank, rank 0 logs that the temporary directory was removed, none is left, the previous
  checkpoint is intact, and mpirun exits 0 within the bound.
- TERM to every rank every millisecond until mpirun exits: the daemons stop in order, exit 0.

usage: test_snapshot_sigterm.py BUILD_BIN_DIR"""
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import tshard.checkpoint as ck
from checks import Checks
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-sigterm-")
atexit.register(shutil.rmtree, work, True)
SHAPE = (96, 1024)  # 128 KiB per rank in S(0) over 3: 32 chunks of 4 KiB each


def poll(cond, what, timeout=60.0):
    """Waits for cond() with a deadline (polling, not sleeping as synchronization)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not cond():
        if time.monotonic() > deadline:
            check(False, f"{what}: not within {timeout} s")
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return True


def leftovers(parent):
    return [n for n in os.listdir(parent) if ".tmp-" in n]


def daemon_pids(d):
    return {int(r): int(p) for r, p in re.findall(r"ready: job \S+ rank (\d+) of \d+ pid (\d+)",
                                                  d.logs())}


def start(fault, *args):
    os.environ["TSHARD_FAULT"] = fault
    try:
        return Daemons(bin_dir, 3, extra_args=["--ckpt-chunk", "4K", *args])
    finally:
        del os.environ["TSHARD_FAULT"]


def terminate(d):
    """SIGTERM to rank 1, then, once it logged it, to ranks 0 and 2; mpirun's exit code (None
    when it did not exit within 120 s)."""
    pids = daemon_pids(d)
    check(sorted(pids) == [0, 1, 2], f"the daemons' pids from the log: {pids}")
    os.kill(pids[1], signal.SIGTERM)
    poll(lambda: "tshardd[1] info: signal 15" in d.logs(), "rank 1 logs the signal")
    for r in (0, 2):
        os.kill(pids[r], signal.SIGTERM)
    try:
        return d.proc.wait(120)
    except subprocess.TimeoutExpired:  # the daemons did not stop: none may outlive the test
        for p in pids.values():
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        d.proc.wait(60)
        return None


def completed():
    """A snapshot held on rank 1, the signal, a generous bound: completed on every rank."""
    sdir = os.path.join(work, "snaps")
    os.mkdir(sdir, 0o700)
    d = start("save-hold@1", "--shutdown-save-wait", "60s", "--snapshot-dir", sdir,
              "--log-level", "debug")
    with d:
        with d.connect(0, timeout=30) as c:
            c.create("w", "f32", SHAPE, "mesh=[3] placements=[S(0)]")
            ref = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
            c.put("w", ref)
            snap = c.snapshot()
            check(snap["writing"], f"the snapshot answers while it writes: {snap}")
            poll(lambda: "waits after its first piece" in d.logs(), "rank 1's writer held")
            # rank 0's writer done, the completion found rank 1's still writing: the engines go
            # on (a put and a get within the connection's timeout), the save still in flight
            poll(lambda: "completion is asked again" in d.logs(), "a completion asked again")
            c.put("w", ref + 1)  # after the snapshot: not in it
            check(np.array_equal(c.get("w"), ref + 1),
                  "a put and a get while another rank's writer still writes")
        check(len(leftovers(sdir)) == 1, f"the snapshot is in flight: {leftovers(sdir)}")
        rc = terminate(d)
        logs = d.logs()
    check(rc == 0, f"mpirun exits 0 after the signal: {rc}\n{logs[-4000:] if rc else ''}")
    for r in range(3):
        check(re.search(rf"tshardd\[{r}\] info: background save \d+ to "
                        rf"'{re.escape(snap['dir'])}' complete", logs),
              f"rank {r} logs the snapshot complete")
    check(leftovers(sdir) == [], f"no temporary directory left: {leftovers(sdir)}")
    check(os.path.isdir(snap["dir"]) and np.array_equal(ck.read(snap["dir"], "w"), ref),
          "the snapshot is complete and holds the values of its time")


def abandoned():
    """save(wait=False) over a checkpoint, stuck on rank 1, the signal, a 1 s bound: abandoned
    on every rank, the previous checkpoint intact."""
    target = os.path.join(work, "ck")
    d = start("save-stuck@1", "--shutdown-save-wait", "1s")
    with d:
        with d.connect(0) as c:
            c.create("w", "f32", SHAPE, "mesh=[3] placements=[S(0)]")
            ref = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
            c.put("w", ref)
            c.save(target, all=True)  # synchronous: the previous checkpoint
            c.put("w", ref + 1)
            res = c.save(target, all=True, overwrite=True, wait=False).result(timeout=60)
            check(res["writing"], f"the save answers while it writes: {res}")
        poll(lambda: "waits after its first piece" in d.logs(), "rank 1's writer held")
        check(len(leftovers(work)) == 1, f"the save is in flight: {leftovers(work)}")
        t0 = time.monotonic()
        rc = terminate(d)
        took = time.monotonic() - t0
        logs = d.logs()
    check(rc == 0, f"mpirun exits 0 after the signal: {rc}\n{logs[-4000:] if rc else ''}")
    check(took < 60, f"the daemons stopped within the bound: {took:.1f} s")
    for r in range(3):
        check(re.search(rf"tshardd\[{r}\] warn: background save \d+ to '{re.escape(target)}' "
                        r"abandoned: the daemons stopped", logs),
              f"rank {r} logs the save abandoned")
    check(re.search(r"tshardd\[0\] info: background save \d+: its temporary directory "
                    r"'.*\.tmp-[0-9a-f]+' was removed", logs),
          "rank 0 logs the temporary directory removed")
    check(leftovers(work) == [], f"no temporary directory left: {leftovers(work)}")
    check(np.array_equal(ck.read(target, "w"), ref), "the previous checkpoint is intact")


def storm():
    """TERM to every rank again and again until mpirun exits: the first starts the shutdown, the
    later ones, whenever they come during the stop, are caught and change nothing."""
    d = Daemons(bin_dir, 3)
    with d:
        pids = daemon_pids(d)
        sent = 0
        deadline = time.monotonic() + 120
        while d.proc.poll() is None and time.monotonic() < deadline:
            for p in pids.values():
                try:
                    os.kill(p, signal.SIGTERM)
                    sent += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.001)  # the pace of the signals, not a synchronization
        rc = d.proc.wait(60)
        logs = d.logs()
    check(rc == 0, f"mpirun exits 0 after {sent} signals: {rc}\n{logs[-4000:] if rc else ''}")
    check("info: signal 15: shutting down" in logs, "the signal is logged")
    for r in range(3):
        check(f"tshardd[{r}] info: stopped" in logs, f"rank {r} logs its stop")


completed()
abandoned()
storm()
check.finish()
