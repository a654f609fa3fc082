#!/usr/bin/python3
"""Runs deploy/examples/spmd_reshard.py under mpirun beside real daemons (one Python process per
rank) and checks that every rank verified its slice and that the keyed reshard ran once.

usage: test_spmd_example.py BUILD_BIN_DIR NRANKS EXAMPLE"""
import os
import subprocess
import sys

from harness import Daemons

bin_dir, n, example = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with Daemons(bin_dir, n) as d:
    env = dict(d.env, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(["mpirun", "-np", str(n), "--oversubscribe", "/usr/bin/python3", example,
                        "--job", d.job, "--socket-dir", d.dir],
                       capture_output=True, text=True, env=env, timeout=300)
    print(r.stdout, r.stderr)
    oks = r.stdout.count(": ok")
    once = "reshards run: 1 " in r.stdout
    rc = d.stop()
failed = int(r.returncode != 0) + int(oks != n) + int(not once) + int(rc != 0)
print(f"{4 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
