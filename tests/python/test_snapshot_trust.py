#!/usr/bin/python3
"""Snapshot and resume directories trusted only when they are the daemons' own, and one order
(the sequence each snapshot records) for pruning and resume; real daemons, the real clients,
and "another user" played by uid 65534 (the test runs as root in CI; as another user it chowns
nothing and says SKIPPED for those parts).

- --snapshot-dir or --resume owned by another uid, group-writable, writable by others (sticky
  or not) or a symbolic link: refused before serving on every rank, the message naming the
  directory, its owner and its mode; a private directory is accepted.
- A snapshot planted by another uid (named in the future, claiming a huge sequence, its index
  dated in the future) and a symbolic link named like a snapshot: pruning never removes them and
  keeps the newest real snapshots, the resume restores the real newest, the log names each
  skipped entry once.
- A snapshot of the daemons' own named in the future (a clock that was ahead): the snapshots
  taken after a resume record higher sequences, so the future-named one is the one pruned
  (--snapshot-keep 1: the new ones survive) and the resume restores the true newest, even when
  an older one's index is newer on disk.
- --snapshot-keep is a plain count: 5K refused naming the rule, 5 accepted (and logged).

usage: test_snapshot_trust.py BUILD_BIN_DIR"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import tshard.checkpoint as ck
from checks import Checks
from harness import Daemons, MPI_ENV

bin_dir = sys.argv[1]
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-snaptrust-")
atexit.register(shutil.rmtree, work, True)
OTHER = 65534
as_root = os.geteuid() == 0
SHAPE = (16, 4)


def start_refused(np_, *args):
    """tshardd on np_ ranks expected to refuse before serving: (exit code, its 'cannot start'
    lines, whether any socket appeared). Daemons that serve instead are killed (their whole
    process group) once a socket appears."""
    sock = tempfile.mkdtemp(prefix="tshard-snaptrust-sock-")
    atexit.register(shutil.rmtree, sock, True)
    env = dict(os.environ, **MPI_ENV)
    out = tempfile.TemporaryFile("w+")
    p = subprocess.Popen(["mpirun", "-np", str(np_), "--oversubscribe",
                          os.path.join(bin_dir, "tshardd"), "--socket-dir", sock, "--job",
                          "trust", *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)
    deadline = time.monotonic() + 120
    served = False
    while p.poll() is None and not served and time.monotonic() < deadline:
        served = any(n.endswith(".sock") for n in os.listdir(sock))
        time.sleep(0.05)  # polling for an exit or a socket, bounded by the deadline
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    served = served or any(n.endswith(".sock") for n in os.listdir(sock))
    out.seek(0)
    lines = [l.split("cannot start: ", 1)[1] for l in out.read().splitlines()
             if "cannot start: " in l]
    return p.returncode, lines, served


def refused(args, needles, what):
    rc, lines, served = start_refused(2, *args)
    check(rc != 0 and not served and len(lines) == 2 and lines[0] == lines[1] and
          all(n in lines[0] for n in needles), f"{what}: rc {rc}, served {served}, {lines}")


def directories():
    """The directories themselves: another uid's, group- or other-writable, a symlink. Each holds
    a complete checkpoint, so that only the directory's trust decides."""
    base = os.path.join(work, "base")
    with Daemons(bin_dir, 2) as d, d.connect(0) as c:
        c.create("v", "i64", SHAPE, "mesh=[2] placements=[S(0)]")
        put_v(c, 7)
        c.save(base, all=True)
    for flag in ("--snapshot-dir", "--resume"):
        d = tempfile.mkdtemp(prefix="dir-", dir=work)
        shutil.copytree(base, os.path.join(d, "ck"))
        os.chmod(d, 0o770)
        refused([flag, d], [d, "uid 0", "mode 0770", "not writable by group or others"],
                f"{flag} group-writable")
        os.chmod(d, 0o1777)
        refused([flag, d], [d, "mode 1777"], f"{flag} writable by others, sticky")
        os.chmod(d, 0o700)
        link = d + "-link"
        os.symlink(d, link)
        refused([flag, link], [link, "a symbolic link"], f"{flag} a symbolic link")
        if as_root:
            os.chown(d, OTHER, -1)
            refused([flag, d], [d, f"owned by uid {OTHER}", "mode 0700"], f"{flag} foreign")
            os.chown(d, 0, -1)
        open_parent = tempfile.mkdtemp(prefix="open-", dir=work)
        os.chmod(open_parent, 0o777)
        inner = os.path.join(open_parent, "snaps")
        os.mkdir(inner, 0o700)
        shutil.copytree(base, os.path.join(inner, "ck"))
        refused([flag, inner], [inner, open_parent, "the directory above it"],
                f"{flag} below a directory others may write")
    if not as_root:
        print("SKIPPED: a directory of another user (needs root to chown)")


def snapshot(c):
    s = c.snapshot()
    c.wait_saves(timeout=60)
    return s["dir"]


def put_v(c, value):
    c.put("v", np.full(SHAPE, value, np.int64))


def snaps_in(d):
    return sorted(n for n in os.listdir(d) if not n.startswith("."))


def seq_of(path):
    """The sequence path's index records (0: none; None: no index)."""
    try:
        with open(os.path.join(path, "index.json")) as f:
            return json.load(f).get("sequence", 0)
    except FileNotFoundError:
        return None


def resumed_value(d, np_=2):
    """Starts np_ daemons resuming from d; the value of v they restored and their log."""
    with Daemons(bin_dir, np_, extra_args=["--resume", d]) as dm, dm.connect(0) as c:
        v = c.get("v")
        return (int(v[0, 0]) if (v == v[0, 0]).all() else None), dm.logs()


def chown_tree(path, uid):
    os.chown(path, uid, -1, follow_symlinks=False)
    for n in os.listdir(path):
        os.chown(os.path.join(path, n), uid, -1, follow_symlinks=False)


def planted():
    """Another uid's snapshot and a symlink among the daemons' own: never removed, never
    restored, each logged once."""
    if not as_root:
        print("SKIPPED: a snapshot planted by another user (needs root to chown)")
        return
    sdir = os.path.join(work, "planted")
    os.mkdir(sdir, 0o700)
    future = "29991231T235959.999Z"
    elsewhere = tempfile.mkdtemp(prefix="elsewhere-", dir=work)
    with Daemons(bin_dir, 2, extra_args=["--snapshot-dir", sdir, "--snapshot-keep", "2"]) as d, \
            d.connect(0) as c:
        c.create("v", "i64", SHAPE, "mesh=[2] placements=[S(0)]")
        put_v(c, 666)
        src = snapshot(c)
        plant = os.path.join(sdir, future)  # what another user would have put there
        os.rename(src, plant)
        with open(os.path.join(plant, "index.json")) as f:
            idx = json.load(f)
        idx["sequence"] = 1000000
        with open(os.path.join(plant, "index.json"), "w") as f:
            json.dump(idx, f)
        os.utime(os.path.join(plant, "index.json"), (32503680000, 32503680000))  # year 3000
        chown_tree(plant, OTHER)
        shutil.copytree(plant, os.path.join(elsewhere, "ck"))
        os.symlink(os.path.join(elsewhere, "ck"), os.path.join(sdir, "29991231T235959.998Z"))
        real = []
        for value in (1, 2, 3):
            put_v(c, value)
            real.append(os.path.basename(snapshot(c)))
        logs = d.logs()
    kept = snaps_in(sdir)
    check(kept == sorted(real[1:] + ["29991231T235959.998Z", future]),
          f"pruning kept the two newest real snapshots and left the foreign entries: {kept}, "
          f"real {real}")
    check(os.path.isdir(plant) and os.stat(plant).st_uid == OTHER,
          "the planted snapshot is still there")
    for name in (future, "29991231T235959.998Z"):
        lines = [l for l in logs.splitlines() if f"{sdir}/{name}' skipped" in l]
        check(len(lines) == 1 and "tshardd[0]" in lines[0],
              f"'{name}' skipped and logged once by rank 0: {lines}")
    check(any(f"owned by uid {OTHER}" in l for l in logs.splitlines() if future in l),
          "the log says whose the planted snapshot is")
    value, rlogs = resumed_value(sdir)
    check(value == 3, f"resume restored the real newest snapshot (3), not the planted: {value}")
    check(f"resumed 1 tensors (" in rlogs and real[-1] in rlogs, "the resume names the real one")
    check(os.path.isdir(plant), "the resume removed nothing")


def future_named():
    """A snapshot of our own named in the future: the order is the recorded sequence."""
    sdir = os.path.join(work, "future")
    os.mkdir(sdir, 0o700)
    with Daemons(bin_dir, 2, extra_args=["--snapshot-dir", sdir, "--snapshot-keep", "5"]) as d, \
            d.connect(0) as c:
        c.create("v", "i64", SHAPE, "mesh=[2] placements=[S(0)]")
        put_v(c, 100)
        first = snapshot(c)
        check("config snapshot-keep=5" in d.logs(), "--snapshot-keep 5 accepted as 5")
    check(seq_of(first) == 1, f"the first snapshot records sequence 1: {seq_of(first)}")
    ahead = os.path.join(sdir, "29990101T000000.000Z")  # as a clock ahead would name it
    os.rename(first, ahead)
    # a new job resumes (on another host, its clock behind) and keeps one snapshot
    with Daemons(bin_dir, 2, extra_args=["--snapshot-dir", sdir, "--snapshot-keep", "1",
                                         "--resume", sdir]) as d, d.connect(0) as c:
        got = c.get("v")
        check((got == 100).all(), "resumed the only snapshot")
        names = []
        for value in (101, 102, 103):
            put_v(c, value)
            names.append(os.path.basename(snapshot(c)))
            check(snaps_in(sdir) == [names[-1]],
                  f"after snapshot {value}: only it is kept: {snaps_in(sdir)}")
    newest = os.path.join(sdir, names[-1])
    check(seq_of(newest) == 4, f"the sequence continued from the resumed one: {seq_of(newest)}")
    value, _ = resumed_value(sdir)
    check(value == 103, f"resume restored the true newest (103): {value}")
    # two of our own: the older one's index newer on disk and named in the future
    with Daemons(bin_dir, 2, extra_args=["--snapshot-dir", sdir, "--snapshot-keep", "2",
                                         "--resume", sdir]) as d, d.connect(0) as c:
        put_v(c, 104)
        newer = snapshot(c)
    check(seq_of(newer) == 5, f"sequence 5 after the restart: {seq_of(newer)}")
    moved = os.path.join(sdir, "29990101T000000.000Z")
    if not check(os.path.isdir(newest), f"snapshot {newest} kept"):
        return
    os.rename(newest, moved)
    os.utime(os.path.join(moved, "index.json"), (32503680000, 32503680000))
    value, logs = resumed_value(sdir)
    check(value == 104, f"resume picks the highest sequence, not the name or the mtime: {value}")
    check(os.path.basename(newer) in logs, "the resume names the snapshot of sequence 5")


def flags(*args):
    """tshardd with flags that its parser should decide on: (exit code, stderr); (None, ...)
    when it started serving instead (stopped after 20 s)."""
    try:
        p = subprocess.run([os.path.join(bin_dir, "tshardd"), *args], capture_output=True,
                           text=True, timeout=20)
        return p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        return None, "the daemon accepted the flags and started"


def keep_is_a_count():
    rc, err = flags("--snapshot-dir", os.path.join(work, "k"), "--snapshot-keep", "5K")
    check(rc is not None and rc != 0 and "--snapshot-keep 5K" in err and "plain number" in err,
          f"--snapshot-keep 5K refused: {rc} {err!r}")
    rc, err = flags("--snapshot-keep", "5", "--help")
    check(rc == 0, f"--snapshot-keep 5 parses: {rc} {err!r}")


keep_is_a_count()
directories()
planted()
future_named()
check.finish()
