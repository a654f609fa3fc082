#!/usr/bin/python3
"""End-to-end test of the private program cache (program/PROGRAM.md "The cache") through real
daemons and the Python client: a shared object planted under a cached name (with a constructor
that creates a marker file) is not loaded by any rank, the program is compiled again and runs
right (checked against numpy), and the refusal is in the report; a cached object made writable by
the group, or given to another uid, is refused the same way and replaced by a private one; a
cache directory of mode 0777 or owned by another uid is refused with AUTH naming its path, owner
and mode, and accepted again once private; with HOME, XDG_CACHE_HOME and TSHARD_PROGRAM_CACHE
unset the daemons cache under $XDG_RUNTIME_DIR/tshard/programs (mode 0700), not in /tmp.

usage: test_program_cache.py BUILD_BIN_DIR NRANKS"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks, error_of
from harness import Daemons

bin_dir, n = sys.argv[1], int(sys.argv[2])
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-prog-private-")
cache = os.path.join(work, "cache")
os.mkdir(cache, 0o700)
os.environ["TSHARD_PROGRAM_CACHE"] = cache
marker = os.path.join(work, "marker")
AUTH = 23

PROG = {"name": "affine",
        "inputs": [{"name": "x", "dtype": "f64", "shape": [6]}],
        "ops": [{"out": "t", "op": "mul", "args": ["x", 2]},
                {"out": "y", "op": "add", "args": ["t", 1]}],
        "outputs": ["y"]}
x = np.array([-2.0, -0.5, 0.0, 1.0, 3.0, 7.25])
replicated = tshard.Attr(tshard.Mesh([n]), [tshard.Replicate()])


def reports(d, pid):
    out = []
    for r in range(n):
        with d.connect(r) as c:
            out.append(c.program_show(pid))
    return out


def compile_and_run(d, what):
    """Compiles PROG (every bucket now), runs it and checks y against numpy; its id and the
    reports of every rank."""
    with d.connect(0) as c:
        pid = c.program_compile(PROG)
        if "x" not in c.list():
            c.create("x", "f64", x.shape, replicated)
            c.put("x", x)
        c.program_run(pid, {"x": "x"}, {"y": "y"})
        check(np.array_equal(c.get("y"), 2 * x + 1), f"{what}: the program computes 2x+1")
        c.drop("y")
    return pid, reports(d, pid)


def object_path(report):
    m = re.search(r"(\S+\.so)\b", report)
    return m.group(1) if m else ""


def planted_object():
    """A valid shared object with a constructor creating the marker and a tsp_main that
    computes nothing."""
    src = os.path.join(work, "planted.c")
    so = os.path.join(work, "planted.so")
    with open(src, "w") as f:
        f.write('#include <fcntl.h>\n#include <unistd.h>\n'
                '__attribute__((constructor)) static void planted(void) {\n'
                f'  int fd = open("{marker}", O_CREAT | O_WRONLY, 0600);\n'
                '  if (fd >= 0) close(fd);\n}\n'
                'int tsp_main(void *const *a, char *p, const long *s, const void *e) {\n'
                '  (void)a; (void)p; (void)s; (void)e; return 0;\n}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", so, src], check=True, timeout=120)
    return so


def refused_somewhere(reps, needle, what):
    check(any("the cached object was refused" in r and needle in r for r in reps),
          f"{what}: no rank reports the refusal ({needle!r}):\n" + "\n".join(reps))


# 1. a first build fills the cache
with Daemons(bin_dir, n) as d:
    pid, reps = compile_and_run(d, "first build")
    path = object_path(reps[0])
    check(path.startswith(cache + "/"), f"the object is in the private cache: {path!r}")
    check(d.stop() == 0, "daemons exited cleanly")

# 2. a planted object under that name: not loaded (new daemons: nothing of it is loaded yet)
so = planted_object()
with open(so, "rb") as f:
    planted = f.read()
os.replace(so, path)
with Daemons(bin_dir, n) as d:
    pid, reps = compile_and_run(d, "planted object")
    check(not os.path.exists(marker), "the planted object was not loaded (no marker)")
    refused_somewhere(reps, "does not match the hash recorded", "planted object")
    with open(path, "rb") as f:
        check(f.read() != planted, "the planted object was replaced by a build")

    # 3. a group-writable object; 4. an object owned by another uid
    spoils = [("writable by group or others", lambda: os.chmod(path, 0o664))]
    if os.geteuid() == 0:
        spoils.append(("owned by uid 65534", lambda: os.chown(path, 65534, 65534)))
    for needle, spoil in spoils:
        with d.connect(0) as c:
            c.program_drop(pid)
        spoil()
        pid, reps = compile_and_run(d, needle)
        refused_somewhere(reps, needle, needle)
        st = os.lstat(path)
        check(stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 == 0o700 and
              st.st_uid == os.geteuid(), f"{needle}: replaced by a private object "
              f"(mode {st.st_mode:o}, uid {st.st_uid})")
    check(not os.path.exists(marker), "no marker after the refusals")

    # 5. an unsafe cache directory is refused (each compile checks it), a private one accepted
    with d.connect(0) as c:
        c.program_drop(pid)
        os.chmod(cache, 0o777)
        st, msg = error_of(lambda: c.program_compile(PROG))
        check(st == AUTH and cache in msg and f"uid {os.geteuid()}" in msg and
              "mode 0777" in msg and "not writable by group or others" in msg,
              f"a cache of mode 0777: {st} {msg!r}")
        os.chmod(cache, 0o700)
        if os.geteuid() == 0:
            os.chown(cache, 65534, 65534)
            st, msg = error_of(lambda: c.program_compile(PROG))
            check(st == AUTH and cache in msg and "owned by uid 65534" in msg and
                  "mode 0700" in msg, f"a cache owned by uid 65534: {st} {msg!r}")
            os.chown(cache, 0, 0)
    pid, reps = compile_and_run(d, "the cache private again")
    check("built (cache hit)" in reps[0], f"a hit in the private cache: {reps[0]}")
    check(d.stop() == 0, "daemons exited cleanly")

# 6. no HOME, XDG_CACHE_HOME or TSHARD_PROGRAM_CACHE: under $XDG_RUNTIME_DIR, never /tmp
run = os.path.join(work, "run")
os.mkdir(run, 0o700)
for k in ("HOME", "XDG_CACHE_HOME", "TSHARD_PROGRAM_CACHE"):
    os.environ.pop(k, None)
os.environ["XDG_RUNTIME_DIR"] = run
with Daemons(bin_dir, n) as d:
    pid, reps = compile_and_run(d, "default directory")
    want = os.path.join(run, "tshard", "programs")
    check(object_path(reps[0]).startswith(want + "/") and f"cache: {want} " in reps[0],
          f"the cache is under $XDG_RUNTIME_DIR: {reps[0]}")
    for p in (os.path.join(run, "tshard"), want):
        check(os.path.isdir(p) and os.stat(p).st_mode & 0o777 == 0o700, f"{p} has mode 0700")
    check("/tmp/tshard-programs" not in "".join(reps), "no shared /tmp directory")
    rc = d.stop()
    check(rc == 0, f"daemons exited with {rc}")
shutil.rmtree(work, ignore_errors=True)
check.finish()
