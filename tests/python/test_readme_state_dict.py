#!/usr/bin/python3
"""The README's "State dicts, attribute rules, in-place loads" section runs as written: its
python block and its sh block (bash), in order, in a fresh directory holding a `build` link to
the build tree, against 3 daemons of job "demo" (their socket directory in TSHARD_SOCKET_DIR).
Then, against the state dict the block made (numpy): get_state_dict gave back the saved values
after the in-place load (not the value the block put after the save); the CLI's rule load put
every tensor under the attribute its rule names and the saved values, and its --in-place load
kept them. `tshard load --help` shows the README's command as its example.

usage: test_readme_state_dict.py BUILD_BIN_DIR README.md"""
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, readme = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
check = Checks()
HEADING = "### State dicts, attribute rules, in-place loads"


def blocks(path):
    text = open(path).read()
    start = text.index(f"\n{HEADING}\n")
    end = text.find("\n### ", start + 1)
    section = text[start:end if end > 0 else len(text)]
    return re.findall(r"```(python|sh)\n(.*?)```", section, re.S)


def main():
    found = blocks(readme)
    check([k for k, _ in found] == ["python", "sh"], f"the section's blocks: {found}")
    work = tempfile.mkdtemp(prefix="tshard-readme-sd-")
    os.symlink(os.path.dirname(os.path.abspath(bin_dir)), os.path.join(work, "build"))
    d = Daemons(bin_dir, 3, job="demo")
    os.environ["TSHARD_SOCKET_DIR"] = d.dir
    here = os.getcwd()
    ns = {}
    try:
        os.chdir(work)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(found[0][1], "README.md", "exec"), ns)
        sd, back = ns["sd"], ns["back"]
        check(sorted(back) == sorted(sd) and
              all(back[n].dtype == sd[n].dtype and np.array_equal(back[n], sd[n]) for n in sd),
              "the in-place load brought back the saved values")
        r = subprocess.run(["bash", "-e", "-c", found[1][1]], capture_output=True, text=True,
                           timeout=120)
        check(r.returncode == 0 and "loaded 4 tensors" in r.stdout,
              f"sh block: {r.returncode} {r.stdout} {r.stderr}")
        with tshard.connect(socket=d.socket(0)) as c:
            want = {"wte": "S(0)", "h.0.w": "S(1)", "h.0.b": "R", "ln.b": "R"}
            for n, p in want.items():
                check(c.describe(n)["attr"] == f"mesh=[3]@0-2 placements=[{p}]",
                      f"{n}: {c.describe(n)['attr']}")
                check(np.array_equal(c.get(n), sd[n]), f"{n}: the saved values")
        h = subprocess.run([os.path.join(bin_dir, "tshard"), "load", "--help"],
                           capture_output=True, text=True, timeout=60)
        first = " ".join(found[1][1].replace("\\\n", " ").splitlines()[0].split())
        cmd = first.replace("build/bin/tshard", "tshard").replace(" --job demo", "")
        check(cmd in " ".join((h.stdout + h.stderr).split()),
              f"tshard load --help shows the README's command {cmd!r}: {h.stdout[-300:]}")
    finally:
        os.chdir(here)
        rc = d.stop()
        check(rc == 0, f"the daemons exit 0: {rc}\n{d.logs()[-4000:]}")
        shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
