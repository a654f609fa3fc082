#!/usr/bin/python3
"""Runs deploy/examples/spmd_reshard.py under mpirun beside real daemons (one Python process per
rank), twice in a row (the second run with the job from $TSHARD_JOB as its --help says, and the
same daemons), and checks each run: every rank verified its slice against the weight the script
computes, the reshard ran once although every rank asked, the tensor was dropped afterwards.

usage: test_spmd_example.py BUILD_BIN_DIR NRANKS EXAMPLE"""
import os
import subprocess
import sys

import tshard
from harness import Daemons

bin_dir, n, example = sys.argv[1], int(sys.argv[2]), sys.argv[3]
failed = passed = 0


def check(cond, what):
    global failed, passed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {what}", flush=True)


with Daemons(bin_dir, n) as d:
    base = dict(d.env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    for run, (args, env) in enumerate([(["--job", d.job, "--socket-dir", d.dir], base),
                                       ([], dict(base, TSHARD_JOB=d.job,
                                                 TSHARD_SOCKET_DIR=d.dir))]):
        r = subprocess.run(["mpirun", "-np", str(n), "--oversubscribe", "/usr/bin/python3",
                            example] + args, capture_output=True, text=True, env=env, timeout=120)
        print(r.stdout, r.stderr)
        check(r.returncode == 0, f"run {run}: exit status {r.returncode}")
        check(r.stdout.count(": ok") == n, f"run {run}: every rank verified its replica")
        check("reshards run: 1 " in r.stdout, f"run {run}: the reshard ran once")
        with tshard.connect(socket=f"{d.dir}/tshard-{d.job}-0.sock") as c:
            check(c.list() == [], f"run {run}: the weight was dropped: {c.list()}")
    check(d.stop() == 0, "daemons stopped cleanly")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
