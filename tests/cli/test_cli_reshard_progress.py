#!/usr/bin/python3
"""`tshard reshard`'s progress line against 2 real daemons: with --progress a 32 MiB reshard ends
with the 100% line giving its bytes (the numpy reference's) and measured rate, and records that
rate in the job's rates file; a reshard that is still waiting (a collective whose second
participant has not submitted yet) draws the line while it waits, first without an estimate,
then (the rate known) with the time left; on a terminal (a pty) the line shows for 16 MiB and more
without being asked and never for a small tensor or with --json; without a terminal and without
--progress nothing is drawn. The tensor is checked against numpy after every reshard.

usage: test_cli_reshard_progress.py BUILD_BIN_DIR"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402
from harness import Daemons  # noqa: E402
from progress_job import cli_runner, comparer, put_big_and_small, run_on_tty  # noqa: E402

bin_dir = sys.argv[1]
tshard_bin = os.path.join(bin_dir, "tshard")
check = Checks()
ROWS, COLS = "mesh=[2] placements=[S(0)]", "mesh=[2] placements=[S(1)]"

with Daemons(bin_dir, 2) as d, tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir)
    rates = os.path.join(d.dir, f"tshard-{d.job}.rates")
    cli = cli_runner(tshard_bin, d, 120)
    big, small = put_big_and_small(cli, tmp, ROWS, check)
    same = comparer(cli, tmp)

    # not a terminal, not asked: nothing on stderr
    r = cli("reshard", "big", "--to", COLS)
    check(r.returncode == 0 and r.stderr == "" and "done by alltoall" in r.stdout,
          f"unasked: {r.stdout!r} {r.stderr!r}")
    check(same("big", big), "big after the first reshard")

    # asked: the 100% line with the bytes and the measured rate, recorded in the rates file
    r = cli("reshard", "big", "--to", ROWS, "--progress")
    m = re.search(r"reshard big by alltoall \[#{24}\] 100% ([0-9.]+) MiB in ([0-9.]+) s, "
                  r"([0-9.]+) MiB/s\n$", r.stderr)
    check(r.returncode == 0 and m is not None, f"--progress: {r.stderr!r}")
    check(m is not None and float(m.group(1)) == big.nbytes / 2**20, f"bytes: {r.stderr!r}")
    recorded = dict(line.split() for line in open(rates)) if os.path.exists(rates) else {}
    check("alltoall" in recorded and m is not None and abs(
        float(recorded["alltoall"]) / 2**20 - float(m.group(3))) <= 0.05 * float(m.group(3)) + 0.1,
        f"rates file {recorded} against the line {r.stderr!r}")
    check(same("big", big), "big after --progress")

    # a reshard still waiting for its second participant draws its line meanwhile: a new
    # strategy (allgather) has no estimate yet, the second time it has one
    for round_, want in ((0, "no earlier reshard by allgather on this job: no estimate yet"),
                         (1, "left")):
        target, strategy = "mesh=[2] placements=[R]", "allgather"
        if round_ == 1:  # back to rows (a local cut), then the same allgather, now estimated
            r = cli("reshard", "big", "--to", ROWS)
            check(r.returncode == 0, f"back to rows: {r.stderr}")
        key = f"wait-{round_}"
        err_path = os.path.join(tmp, f"wait{round_}.err")
        with open(err_path, "w") as err:
            first = subprocess.Popen(
                [tshard_bin, "reshard", "big", "--to", target, "--strategy", strategy,
                 "--participants", "0,1", "--key", key, "--progress", "--job", d.job,
                 "--rank", "0"], stdout=subprocess.PIPE, stderr=err, text=True, env=env)
            deadline = time.monotonic() + 30
            while want not in open(err_path).read() and time.monotonic() < deadline:
                time.sleep(0.02)  # polling the line, bounded by the deadline
            drawn = open(err_path).read()
            second = cli("reshard", "big", "--to", target, "--strategy", strategy,
                         "--participants", "0,1", "--key", key, rank=1)
            first.wait(60)
        text = open(err_path).read()
        check(want in drawn, f"round {round_}: the waiting line {drawn!r}")
        check(first.returncode == 0 and second.returncode == 0 and "100%" in text,
              f"round {round_}: {text!r} {second.stderr!r}")
        check(same("big", big), f"big after round {round_}")

    # on a terminal: shown for the big tensor unasked, never for the small one or with --json
    def on_tty(*args):
        return run_on_tty(cli, *args)

    r, text = on_tty("reshard", "big", "--to", COLS)
    check(r.returncode == 0 and re.search(r"reshard big by \w+ \[#+\] 100% 32.0 MiB", text),
          f"tty, big: {text!r}")
    r, text = on_tty("reshard", "small", "--to", COLS)
    check(r.returncode == 0 and text == "", f"tty, small: {text!r}")
    r, text = on_tty("reshard", "big", "--to", ROWS, "--json")
    check(r.returncode == 0 and text == "" and '"strategy": ' in r.stdout,
          f"tty, --json: {text!r} {r.stdout!r}")
    check(same("big", big) and same("small", small), "both tensors at the end")
check.finish()
