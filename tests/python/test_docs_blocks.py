#!/usr/bin/python3
"""Every fenced code block of README.md and docs/*.md runs as written, against a real job.

Each block is taken from its page with its line, and run by the language of its fence, its text
unchanged:

  python        the page's python blocks, in order, in one interpreter (/usr/bin/python3 with
                PYTHONPATH=build/python), as a reader runs them in one session
  sh, bash      `bash -e -o pipefail -c BLOCK`
  console       a transcript: each `$ ` line (with its `\\` continuations) runs in bash, and the
                lines up to the next `$ ` are its expected output (stdout and stderr), `...`
                standing for any text; the exit status may be anything (transcripts show errors)
  c             compiled with gcc against include/ (as <tshard/tshard.h>; program/ and kernels/
                for <ts_program.h>) and the build's libtshard and libtsprogram (with what it
                links); linked and run when it has a main, else compiled only

All run in one scratch directory laid out as the repository root (this build as `build`, the
source tree's folders beside it, a copy of `client/`), with build/bin first on PATH, against one
job of 4 daemons named "demo" (TSHARD_JOB=demo, TSHARD_SOCKET_DIR the job's private directory:
the variables the clients read for their defaults). README.md runs first and its own CLI block
starts that job (`deploy/tshard-launch start -np 4 --job demo`); before every other page the test
makes sure the job serves (starting it with the same command if not) and drops every tensor, so
that each page starts from an empty job and builds what it uses in its own earlier blocks.

Blocks that are not run say so in their fence; the test knows these and nothing else:

  text, json, yaml, promql   not code for a shell or an interpreter here: program output, a
                             file's or an answer's contents, a grammar, a diagram, a Prometheus
                             configuration or query
  LANG no-run: REASON        code that cannot run on one machine in a test (a real cluster,
                             root, minutes of work); the reason is required
  LANG file=NAME             a file's contents: written to NAME in the scratch directory for the
                             blocks after it (a script run under mpirun, a program to compile)

A block of any other language, or with no language, fails the test.

Results are checked where a block says what it prints: a `# -> TEXT` comment in a python or sh
block (`/* -> TEXT */` in C) means that the block's output (a shell's or a program's stdout)
holds a line TEXT (`...` for any text), in the order of the comments; console blocks are checked
against their transcript. The test prints, per page, how many blocks ran and how many were
marked not to run (and why).

usage: test_docs_blocks.py BUILD_DIR SOURCE_DIR [PAGE ...]   (TSHARD_DOCS_VERBOSE=1: every block's
output)"""
import glob
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
BIN, PYDIR, LIB = (os.path.join(BUILD, d) for d in ("bin", "python", "lib"))
sys.path.insert(0, PYDIR)
import tshard  # noqa: E402

RUN_LANGS = {"python", "sh", "bash", "console", "c"}
TEXT_LANGS = {"text", "json", "yaml", "promql"}
BLOCK_TIMEOUT = 150
VERBOSE = os.environ.get("TSHARD_DOCS_VERBOSE") == "1"  # print every block's output
JOB, NP = "demo", 4
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}

FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")


class Block:
    def __init__(self, page, line, info, body):
        self.page, self.line, self.info, self.body = page, line, info.strip(), body
        words = self.info.split(None, 1)
        self.lang = words[0] if words else ""
        self.rest = words[1] if len(words) > 1 else ""

    @property
    def where(self):
        return f"{self.page}:{self.line}"

    def kind(self):
        """('run', None), ('skip', why), ('file', name) or ('bad', why)."""
        m = re.fullmatch(r"no-run:\s*(\S.*)", self.rest)
        if m:
            return "skip", m.group(1)
        m = re.fullmatch(r"file=(\S+)", self.rest)
        if m:
            return "file", m.group(1)
        if self.rest:
            return "bad", f"unknown marker {self.rest!r} in the fence"
        if self.lang in TEXT_LANGS:
            return "skip", f"```{self.lang}"
        if self.lang in RUN_LANGS:
            return "run", None
        what = f"a block of language {self.lang!r}" if self.lang else "a block without a language"
        return "bad", what + " and no marker (text, no-run: WHY, file=NAME)"


def blocks(page):
    """The fenced blocks of a page, in order: fences at any indentation, closed by a fence of the
    same character at least as long."""
    out, open_, body = [], None, []
    for n, raw in enumerate(open(os.path.join(SRC, page)).read().split("\n"), 1):
        line = raw.lstrip(" ")
        indent = len(raw) - len(line)
        m = FENCE.match(line)
        if open_ is None:
            if m:
                open_, body = (m.group(1), n, m.group(2), indent), []
        elif m and m.group(1)[0] == open_[0][0] and len(m.group(1)) >= len(open_[0]) \
                and not m.group(2).strip():
            out.append(Block(page, open_[1], open_[2], "".join(b + "\n" for b in body)))
            open_ = None
        else:
            body.append(raw[min(open_[3], len(raw) - len(raw.lstrip(" "))):])
    if open_ is not None:
        out.append(Block(page, open_[1], "unclosed", ""))
    return out


def pages():
    if len(sys.argv) > 3:  # README.md first: its blocks start the job
        return sorted(sys.argv[3:], key=lambda p: p != "README.md")
    docs = sorted(os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "docs", "*.md")))
    return ["README.md"] + docs


# ---- the scratch directory and the environment every block sees ----

WORK = tempfile.mkdtemp(prefix="tshard-docs-")
os.chmod(WORK, 0o700)
# the repository root as the docs' commands see it: this build as build/, the source tree's
# folders beside it, and a copy of client/ (installing the Python package writes into it)
os.symlink(BUILD, os.path.join(WORK, "build"))
for entry in os.listdir(SRC):
    if entry not in ("build", "client") and not entry.startswith("."):
        os.symlink(os.path.join(SRC, entry), os.path.join(WORK, entry))
shutil.copytree(os.path.join(SRC, "client"), os.path.join(WORK, "client"), symlinks=True,
                ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
INC = os.path.join(WORK, ".include")
os.makedirs(os.path.join(INC, "tshard"))
for h in ("tshard.h", "tshard_errors.h"):
    os.symlink(os.path.join(SRC, "include", h), os.path.join(INC, "tshard", h))
SOCKETS = os.path.join(WORK, ".sockets")
CACHE = os.path.join(WORK, ".program-cache")
for d in (SOCKETS, CACHE):
    os.makedirs(d, mode=0o700)
ENV = dict(os.environ, **MPI_ENV)
ENV.update({"PATH": BIN + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": PYDIR, "TSHARD_JOB": JOB, "TSHARD_SOCKET_DIR": SOCKETS,
            "TSHARD_PROGRAM_CACHE": CACHE})
os.environ.update(ENV)

failures, report = [], []


def fail(block, what):
    failures.append(f"{block.where}: {what}")
    print(f"FAIL {block.where}: {what}", flush=True)


def finished(block, why, out):
    """A python or sh block's end: its failure (why, or None when it ran to its end), then what
    it printed against its `# ->` comments."""
    if VERBOSE:
        print(f"--- {block.where} printed:\n{out}", flush=True)
    if why:
        fail(block, why)
        return False
    return check_expected(block, out)


def run_shell(block):
    rc, out, err = shell(block.body)
    return finished(block, f"exits {rc}:\n{out}\n{err}" if rc != 0 else None, out)


def run(argv, timeout=BLOCK_TIMEOUT, merge=False):
    """(exit status or None on timeout, stdout, stderr) of argv in the scratch directory; on a
    timeout every process it started (its session) is killed."""
    p = subprocess.Popen(argv, cwd=WORK, env=ENV, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT if merge else subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err or ""
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out, (err or "") + f"\n(timed out after {timeout} s)"


def shell(cmd, timeout=BLOCK_TIMEOUT):
    return run(["bash", "-e", "-o", "pipefail", "-c", cmd], timeout)


# ---- the job ----

def job_serves():
    try:
        for r in range(NP):
            with tshard.connect(rank=r, job=JOB, timeout=10) as c:
                c.ping()
        return True
    except tshard.TshardError:
        return False


def ensure_job():
    """The job serves with every tensor dropped; started with the docs' command when it does not
    serve."""
    if not job_serves():
        shell(f"deploy/tshard-launch stop --job {JOB}", timeout=90)
        rc, out, err = shell(f"deploy/tshard-launch start -np {NP} --job {JOB}", timeout=120)
        if rc != 0:
            raise RuntimeError(f"the job did not start: {rc}\n{out}\n{err}")
    with tshard.connect(rank=0, job=JOB, timeout=60) as c:
        names = c.list()
        if names:
            c.drop_many(names)


# ---- python: one interpreter per page ----

WORKER = r'''
import contextlib, io, json, os, sys, traceback
proto = os.fdopen(int(sys.argv[2]), "w")
ns = {"__name__": "__main__"}
for line in open(int(sys.argv[1])):
    req = json.loads(line)
    out = io.StringIO()
    ok, tb = True, ""
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(req["code"], req["where"], "exec"), ns)
    except BaseException:
        ok, tb = False, traceback.format_exc()
    proto.write(json.dumps({"ok": ok, "out": out.getvalue(), "tb": tb}) + "\n")
    proto.flush()
'''


class Interpreter:
    """A /usr/bin/python3 running the page's blocks one after another in one namespace: blocks
    on a pipe, answers on another, the output of programs it starts into a log."""

    def __init__(self, page):
        req_r, self.req_w = os.pipe()
        self.res_r, res_w = os.pipe()
        self.log = open(os.path.join(WORK, ".py-" + page.replace("/", "_") + ".log"), "w")
        self.proc = subprocess.Popen(["/usr/bin/python3", "-c", WORKER, str(req_r), str(res_w)],
                                     pass_fds=(req_r, res_w), cwd=WORK, env=ENV,
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        os.close(req_r)
        os.close(res_w)
        self.buf = b""

    def run(self, block):
        """(ok, output, traceback) of the block in this interpreter."""
        req = json.dumps({"code": block.body, "where": block.where}) + "\n"
        os.write(self.req_w, req.encode())
        deadline = time.monotonic() + BLOCK_TIMEOUT
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            ready = select.select([self.res_r], [], [], left)[0] if left > 0 else []
            if not ready:
                self.close()
                return False, "", f"timed out after {BLOCK_TIMEOUT} s"
            chunk = os.read(self.res_r, 1 << 16)
            if not chunk:
                return False, self.buf.decode(errors="replace"), "the interpreter exited"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            res = json.loads(line)
        except ValueError:
            return False, line.decode(errors="replace"), "the interpreter wrote outside a block"
        return res["ok"], res["out"], res["tb"]

    def close(self):
        try:
            os.close(self.req_w)
            os.close(self.res_r)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def expectations(body):
    """The `# -> TEXT` (and in C `/* -> TEXT */`) comments of a block, in order."""
    return [(m.group(1) or m.group(2)).strip() for m in
            re.finditer(r"#\s*->\s*(.*)$|/\*\s*->\s*(.*?)\s*\*/", body, re.M)]


def matches(pattern, line):
    rx = ".*".join(re.escape(p) for p in pattern.split("..."))
    return re.fullmatch(rx, line.rstrip()) is not None


def check_expected(block, out):
    lines, i = out.split("\n"), 0
    for want in expectations(block.body):
        while i < len(lines) and not matches(want, lines[i]):
            i += 1
        if i == len(lines):
            fail(block, f"printed no line {want!r} (in the order of the block's `# ->` "
                        f"comments); it printed:\n{out}")
            return False
        i += 1
    return True


# ---- console transcripts ----

def transcript(body):
    """[(command, [expected lines])] of a console block."""
    steps, lines = [], body.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            return None
        cmd = lines[i][2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd += "\n" + lines[i]
        i += 1
        want = []
        while i < len(lines) and not lines[i].startswith("$ "):
            want.append(lines[i])
            i += 1
        steps.append((cmd, want))
    return steps


def run_console(block):
    steps = transcript(block.body)
    if steps is None:
        fail(block, "a console block must start with a `$ ` line")
        return False
    ok = True
    for cmd, want in steps:
        rc, out, _ = run(["bash", "-c", cmd], merge=True)
        got = out.rstrip("\n").split("\n") if out.strip() else []
        if len(got) != len(want) or not all(matches(w, g) for w, g in zip(want, got)):
            fail(block, f"`{cmd}` printed\n" + "\n".join(got) + "\nwhere the transcript shows\n" +
                 "\n".join(want))
            ok = False
    return ok


# ---- c ----

def run_c(block):
    name = f"{block.page.replace('/', '_')}_{block.line}"
    src = os.path.join(WORK, ".c", name + ".c")
    os.makedirs(os.path.dirname(src), exist_ok=True)
    with open(src, "w") as f:
        f.write(block.body)
    has_main = re.search(r"\bint\s+main\s*\(", block.body) is not None
    exe = os.path.join(WORK, ".c", name)
    incs = [INC] + [os.path.join(SRC, d) for d in ("program", "kernels", "kernels/pool", "include")]
    cmd = ["gcc", "-std=gnu11", "-Wall", "-Werror", *(f"-I{d}" for d in incs), src]
    if has_main:
        libs = subprocess.run(["pkg-config", "--libs", "jansson", "libxxhash", "openblas",
                               "libprotobuf-c"], capture_output=True, text=True).stdout.split()
        cmd += ["-o", exe, "-L", LIB, "-Wl,-rpath," + LIB, "-ltshard", "-ltsprogram", "-ltskernels",
                "-ltspool", "-ltsproto", *libs, "-lpthread", "-ldl", "-lm"]
    else:
        cmd += ["-c", "-o", exe + ".o"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    if r.returncode != 0:
        fail(block, f"does not compile: {' '.join(cmd)}\n{r.stderr}")
        return False
    if not has_main:
        return True
    rc, out, err = run([exe])
    if rc != 0:
        fail(block, f"exits {rc}: {out}{err}")
        return False
    return check_expected(block, out)


# ---- a page ----

def run_page(page):
    found = blocks(page)
    if page != "README.md":
        ensure_job()
    ran, skipped, files = 0, [], 0
    failed_before = len(failures)
    py = None
    t0 = time.monotonic()
    for b in found:
        kind, arg = b.kind()
        if kind == "bad":
            fail(b, arg)
            continue
        if kind == "skip":
            skipped.append(f"line {b.line}: {arg}")
            continue
        if kind == "file":
            path = os.path.join(WORK, arg)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(b.body)
            files += 1
            continue
        ran += 1
        if b.lang == "python":
            py = py or Interpreter(page)
            good, out, tb = py.run(b)
            finished(b, None if good else f"raised:\n{tb}\noutput:\n{out}", out)
        elif b.lang in ("sh", "bash"):
            run_shell(b)
        elif b.lang == "console":
            run_console(b)
        elif b.lang == "c":
            run_c(b)
    if py:
        py.close()
    bad = len(failures) - failed_before
    line = (f"{page}: {ran} run, {len(skipped)} not run" + (f", {bad} failed" if bad else "") +
            (f", {files} file(s) written" if files else "") + f" ({time.monotonic() - t0:.1f} s)")
    report.append(line)
    print(line + "".join(f"\n  not run, {s}" for s in skipped), flush=True)


def main():
    t0 = time.monotonic()
    # a CTest timeout (SIGTERM) still stops the jobs below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"terminated after "
                                                      f"{time.monotonic() - t0:.0f} s"))
    try:
        for page in pages():
            run_page(page)
    finally:
        for job in (JOB, "train"):
            shell(f"deploy/tshard-launch stop --job {job}", timeout=90)
    print("\n".join(report))
    print(f"{len(failures)} failure(s), {time.monotonic() - t0:.1f} s")
    if failures:
        print("\n".join(failures))
        print(f"the scratch directory is kept: {WORK}")
        sys.exit(1)
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
