#!/usr/bin/python3
"""The strict tshard command line, without daemons: unknown options,
flags given values, options without their value and extra positional arguments exit 2 with the
nearest option; every option the CLI's sources read is listed in some usage text (so strictness
never refuses a real option); errors that say how to fix them (strategies, splits, job names,
timeouts against a socket that never answers).

usage: test_cli_strict.py BUILD_BIN_DIR SOURCE_DIR"""
import atexit
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402

tshard = os.path.join(sys.argv[1], "tshard")
src_dir = sys.argv[2]
check = Checks()
env = dict(os.environ, TSHARD_SOCKET_DIR=tempfile.mkdtemp(prefix="tshard-strict-"))
atexit.register(shutil.rmtree, env["TSHARD_SOCKET_DIR"], True)


def run(*args, timeout=60):
    return subprocess.run([tshard, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def refused(r, *needles):
    return r.returncode == 2 and all(n in r.stderr for n in needles) and r.stdout == ""


# the examples
r = run("list", "--jbo", "uxA")
check(refused(r, "unknown option '--jbo'; did you mean '--job'?"), f"--jbo: {r.stderr!r}")
r = run("--jsn")
check(refused(r, "unknown option '--jsn'", "did you mean '--json'?"), f"--jsn: {r.stderr!r}")
r = run("list", "--jsn")
check(refused(r, "did you mean '--json'?"), f"list --jsn: {r.stderr!r}")
r = run("get", "w", "o.npy", "extra.npy")
check(refused(r, "unexpected argument 'extra.npy'", "NAME FILE.npy"), f"extra: {r.stderr!r}")
r = run("list", "stray")
check(refused(r, "unexpected argument 'stray'", "no positional"), f"list stray: {r.stderr!r}")
r = run("list", "--json=yes")
check(refused(r, "'--json' takes no value"), f"--json=yes: {r.stderr!r}")
r = run("list", "--job")
check(refused(r, "'--job' needs a value"), f"--job at the end: {r.stderr!r}")
r = run("lsit")
check(refused(r, "unknown subcommand 'lsit'; did you mean 'list'?"), f"lsit: {r.stderr!r}")
r = run("show", "--shape", "8", "--attr", "mesh=[2] placements=[S(0)]", "--wdith", "9")
check(refused(r, "did you mean '--width'?"), f"--wdith: {r.stderr!r}")
r = run("plan", "--shape", "8", "--frm", "x")
check(refused(r, "did you mean '--from'?"), f"--frm: {r.stderr!r}")
r = run("ping", "--zzzzzzzz")
check(refused(r, "unknown option '--zzzzzzzz'", "tshard ping --help"), f"far: {r.stderr!r}")
r = run("ping", "--rank", "x1")
check(refused(r, "--rank"), f"--rank x1: {r.stderr!r}")
# an option's value may look like an option or a positional; it is taken as the value
r = run("show", "--shape", "4", "--attr", "mesh=[1] placements=[R]", "--width", "20", "--ascii")
check(r.returncode == 0, f"show with values: {r.stderr!r}")

# every subcommand refuses a misspelling before connecting, and lists its options in --help
usage = run("--help").stdout
subs = re.findall(r"^  ([a-z][a-z-]+) ", usage, re.M)
check(len(subs) >= 13, f"subcommands in --help: {subs}")
for sub in subs:
    h = run(sub, "--help")
    opts = re.findall(r"^  --([a-z][a-z0-9-]*)", h.stdout, re.M)
    # every subcommand lists options, but `checkpoint` (its one form, `show DIR`, takes none)
    check(h.returncode == 0 and (opts or sub == "checkpoint"), f"{sub} --help lists options")
    r = run(sub, "--" + opts[0] + "x" if opts else "--x", "--job", "nojob")
    check(r.returncode == 2 and "unknown option" in r.stderr and
          ("did you mean" in r.stderr or not opts),
          f"{sub}: a misspelled --{opts[0] if opts else ''}: {r.stderr!r}")

# a usage word ending in "..." takes any number of arguments: ten names reach the connect (exit 4)
r = run("load", "/nonexistent-ckpt", *[f"t{i}" for i in range(10)], "--job", "nojob")
check(r.returncode == 4 and "no daemon serves job nojob" in r.stderr, f"load DIR NAME...: {r.stderr!r}")
r = run("checkpoint", "show", "/nonexistent-ckpt", "extra")
check(r.returncode == 2 and "unexpected argument 'extra'" in r.stderr, f"checkpoint show DIR extra: {r.stderr!r}")

# strictness must not refuse options the CLI reads: every cli_opt/cli_flag name of the sources
# appears as "  --name" in main.c's usage texts
cli_dir = os.path.join(src_dir, "client", "cli")
read = set()
for f in os.listdir(cli_dir):
    if f.endswith(".c"):
        text = open(os.path.join(cli_dir, f)).read()
        read |= set(re.findall(r'cli_(?:opt|flag)\([^,]+,\s*"([a-z0-9-]+)"', text))
listed = set()
for sub in subs:
    listed |= set(re.findall(r"^  --([a-z][a-z0-9-]*)", run(sub, "--help").stdout, re.M))
check(read and read <= listed | {"help"}, f"options read but not listed: {sorted(read - listed)}")

# errors that say how to fix them
r = run("plan", "--shape", "8", "--from", "mesh=[2] placements=[S(0)]",
        "--to", "mesh=[2] placements=[R]", "--strategy", "fast")
check(r.returncode != 0 and "fast" in r.stderr and "alltoall" in r.stderr and "p2p" in r.stderr,
      f"--strategy fast lists the valid names: {r.stderr!r}")
r = run("show", "--shape", "20", "--attr", "mesh=[2] placements=[S(0)] splits={0:[10,12]}")
check(r.returncode == 1 and "sum to 22" in r.stderr and "size 20" in r.stderr,
      f"splits 22 for 20: {r.stderr!r}")
r = run("ping", "--job", "nojob", "--rank", "3")
check(r.returncode == 4 and "no daemon serves job nojob on rank 3 at" in r.stderr
      and "tshard-launch" in r.stderr, f"missing job: {r.stderr!r}")
r = run("ping", "--job", "a/b")
check(r.returncode == 2 and "job name 'a/b'" in r.stderr, f"job with '/': {r.stderr!r}")

# a client timeout names --timeout and says the operation may still complete: a socket that
# accepts and never answers
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "mute.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    r = run("ping", "--socket", path, "--timeout", "0.3")
    check(r.returncode == 4 and "--timeout" in r.stderr and "may still complete" in r.stderr,
          f"timeout: {r.stderr!r}")
    srv.close()

# show of a 4096-rank attribute respects --width: the first blocks, "...", the last
for place in ["S(0)", "S(1)"]:
    for width in [30, 64, 100]:
        r = run("show", "--shape", "4096,4096", "--attr", f"mesh=[4096] placements=[{place}]",
                "--width", str(width), "--ascii")
        grid = [ln for ln in r.stdout.splitlines() if ln[:1] in "+|"]
        check(r.returncode == 0 and grid and max(map(len, grid)) <= width + 2
              and len(r.stdout.splitlines()) < 60 and "4095" in r.stdout and "..." in r.stdout
              and "of 4096" in r.stdout, f"show 4096 ranks {place} --width {width}: "
              f"{max(map(len, grid)) if grid else None} wide, {len(r.stdout.splitlines())} lines")
r = run("show", "--shape", "4096,4096", "--attr", "mesh=[64,64] placements=[S(0),S(1)]",
        "--width", "50", "--unicode")
grid = [ln for ln in r.stdout.splitlines() if ln[:1] in "┌├│└"]
check(r.returncode == 0 and max(map(len, grid)) <= 52 and "4095" in r.stdout,
      f"show 64x64 blocks: {r.stdout[-300:]!r}")

# the launcher and the daemon: help without the script's code, job names checked with a message
launch = os.path.join(src_dir, "deploy", "tshard-launch")
r = subprocess.run(["bash", launch, "--help"], capture_output=True, text=True, timeout=60)
lines = r.stdout.strip().splitlines()
with open(launch) as f:  # the help is the script's opening comment, to its last line
    header = [ln[2:].rstrip() for ln in f.read().split("\nset -euo")[0].splitlines()[1:]]
check(r.returncode == 0 and lines and "set -euo" not in r.stdout and "tshard-launch start" in r.stdout
      and lines[-1] == header[-1] and "stop-timeout" in r.stdout,
      f"tshard-launch --help: {lines[-1:]!r}, want {header[-1:]!r}")
for args, needle in [(["status", "--job", "a/b"], "--job 'a/b'"),
                     (["start", "-np", "2", "--job"], "'--job' needs a value")]:
    r = subprocess.run(["bash", launch, *args], capture_output=True, text=True, timeout=60, env=env)
    check(r.returncode == 2 and needle in r.stderr and "unbound" not in r.stderr,
          f"tshard-launch {args}: {r.stderr!r}")
r = subprocess.run([os.path.join(sys.argv[1], "tshardd"), "--job", "a/b"], capture_output=True,
                   text=True, timeout=60, env=env)
check(r.returncode != 0 and "--job a/b" in r.stderr, f"tshardd --job a/b: {r.stderr!r}")
# counts are plain numbers (a size suffix would multiply them by 1024), sizes take suffixes
for flag in ["key-max", "max-inflight", "copy-threads", "batch-max-tensors", "snapshot-keep",
             "collective-pending-max", "max-unauthenticated", "pool-idle-ms", "metrics-remote"]:
    r = subprocess.run([os.path.join(sys.argv[1], "tshardd"), f"--{flag}", "5K"],
                       capture_output=True, text=True, timeout=60, env=env)
    check(r.returncode != 0 and f"--{flag} 5K" in r.stderr and "plain number" in r.stderr,
          f"tshardd --{flag} 5K: {r.stderr!r}")
r = subprocess.run([os.path.join(sys.argv[1], "tshardd"), "--max-frame", "64Q"],
                   capture_output=True, text=True, timeout=60, env=env)
check(r.returncode != 0 and "--max-frame 64Q" in r.stderr, f"tshardd --max-frame 64Q: {r.stderr!r}")

check.finish()
