#!/usr/bin/python3
"""The estimated progress line of synchronous `tshard save` and `tshard load` against 2 real
daemons: with --progress the first save (and the first load) of the job says it has no estimate
yet, ends with the 100% line giving the bytes (the tensors' for a save, the index's for a load)
and the measured rate, and records that rate under "save" / "load" in the job's rates file; the
next one draws the line with the estimated rate and the time left. Without a terminal and without
--progress nothing is drawn; on a terminal (a pty) the line shows for 16 MiB and more unasked,
never for a small tensor or with --json, whose output keeps its keys. Every checkpoint loads back
equal to the numpy reference.

usage: test_cli_ckpt_progress.py BUILD_BIN_DIR"""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402
from harness import Daemons  # noqa: E402
from progress_job import cli_runner, comparer, put_big_and_small, run_on_tty  # noqa: E402

bin_dir = sys.argv[1]
tshard_bin = os.path.join(bin_dir, "tshard")
check = Checks()
ROWS, COLS = "mesh=[2] placements=[S(0)]", "mesh=[2] placements=[S(1)]"
ESTIMATED = r"\[[# ]{24}\] +\d+% 32\.0 MiB at ~[0-9.]+ MiB/s (~|over the estimate, )\d+:\d\d left"
JSON_KEYS = {"dir", "tensors", "bytes", "files", "seconds", "writing", "save_id"}

with Daemons(bin_dir, 2) as d, tempfile.TemporaryDirectory() as tmp:
    rates = os.path.join(d.dir, f"tshard-{d.job}.rates")
    cli = cli_runner(tshard_bin, d, 60)

    def on_tty(*args):
        return run_on_tty(cli, *args)

    big, small = put_big_and_small(cli, tmp, ROWS, check)
    same = comparer(cli, tmp)

    def reload(ck, *args, tty=False):
        """Drops big, loads it from ck (as `load ck big ARGS`), checks it against numpy."""
        check(cli("drop", "big").returncode == 0, "drop big")
        if tty:
            r, text = on_tty("load", ck, "big", *args)
        else:
            r = cli("load", ck, "big", *args)
            text = r.stderr
        check(r.returncode == 0 and same("big", big), f"load {ck} {args}: {r.stderr}")
        return r, text

    def recorded():
        return dict(line.split() for line in open(rates)) if os.path.exists(rates) else {}

    def final(what, ck):
        return re.compile(re.escape(f"{what} {ck} [{'#' * 24}] 100% 32.0 MiB in ") +
                          r"([0-9.]+) s, ([0-9.]+) MiB/s\n$")

    cks = [os.path.join(tmp, f"ck{i}") for i in range(6)]

    # not a terminal, not asked: nothing on stderr, the summary as before, no rate recorded
    r = cli("save", cks[0], "big")
    check(r.returncode == 0 and r.stderr == "" and "saved 1 tensors (32.0 MiB" in r.stdout,
          f"save unasked: {r.stdout!r} {r.stderr!r}")
    r, err = reload(cks[0])
    check(err == "" and "loaded 1 tensors (32.0 MiB" in r.stdout, f"load unasked: {err!r}")
    check(recorded() == {}, f"nothing recorded unasked: {recorded()}")

    # the first asked save and load: no estimate yet, then the measured rate, recorded
    for what, run in (("save", lambda: cli("save", cks[1], "big", "--progress")),
                      ("load", lambda: reload(cks[1], "--progress")[0])):
        r = run()
        m = final(what, cks[1]).search(r.stderr)
        check(f"{what} {cks[1]}: 32.0 MiB, 0.0 s (no earlier {what} on this job: no estimate "
              f"yet)" in r.stderr and m is not None, f"first {what}: {r.stderr!r}")
        check(f"{what.rstrip('e')}ed 1 tensors (32.0 MiB" in r.stdout, f"first {what}: {r.stdout!r}")
        rate = recorded().get(what)
        check(rate is not None and m is not None and abs(float(rate) / 2**20 - float(m.group(2)))
              <= 0.05 * float(m.group(2)) + 0.1, f"{what} rate {recorded()} against {r.stderr!r}")

    # the next ones: the estimated line (rate and time left) while in flight, then the end line
    r = cli("save", cks[2], "big", "--progress")
    check(r.returncode == 0 and re.search(f"save {re.escape(cks[2])} " + ESTIMATED, r.stderr)
          and final("save", cks[2]).search(r.stderr), f"estimated save: {r.stderr!r}")
    r, err = reload(cks[2], "--progress", "--default-attr", COLS)
    check(re.search(f"load {re.escape(cks[2])} " + ESTIMATED, err) and
          final("load", cks[2]).search(err) and "no estimate" not in err, f"estimated load: {err!r}")

    # on a terminal: shown for 32 MiB unasked (all tensors: big's bytes and small's), never for
    # the small tensor alone or with --json
    r, text = on_tty("save", cks[3], "--all")
    check(r.returncode == 0 and re.search(f"save {re.escape(cks[3])} " + ESTIMATED, text) and
          re.search(r"100% 32\.0 MiB in [0-9.]+ s, [0-9.]+ MiB/s\r?\n$", text),
          f"tty, save all: {text!r}")
    r, text = on_tty("save", cks[4], "small")
    check(r.returncode == 0 and text == "" and "saved 1 tensors" in r.stdout,
          f"tty, save small: {text!r}")
    r, text = on_tty("save", cks[5], "big", "--json")
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    check(text == "" and set(info) == JSON_KEYS and info["bytes"] == big.nbytes and
          info["writing"] is False, f"tty, save --json: {text!r} {r.stdout!r}")
    r, text = reload(cks[3], tty=True)
    check(re.search(f"load {re.escape(cks[3])} " + ESTIMATED, text), f"tty, load: {text!r}")
    r, text = reload(cks[5], "--json", tty=True)
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    check(text == "" and set(info) == JSON_KEYS and info["bytes"] == big.nbytes,
          f"tty, load --json: {text!r} {r.stdout!r}")
    check(cli("drop", "small").returncode == 0, "drop small")
    r, text = on_tty("load", cks[4])
    check(r.returncode == 0 and text == "" and same("small", small), f"tty, load small: {text!r}")
    check(same("big", big), "big at the end")
check.finish()
