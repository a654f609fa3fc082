"""The client side of the cluster resume test (test_cluster_resume.sh), run inside a host's
network namespace against the daemon of one rank.

  work SNAPDIR READY_FILE   puts the tensors (values from a hand-written generator), waits until
                            a complete snapshot in SNAPDIR holds all of them, then reshards 'w'
                            in a loop, putting the values of the next step into 'step' after
                            each reshard, until the job is lost: prints the error and exits 3 on
                            RankLostError (any other end is a failure). READY_FILE is written
                            once a complete snapshot holds a step of the loop.
  verify SNAPDIR LAUNCHED   on the resumed job: every tensor equals its reference values, 'step'
                            those of a step of the loop and what the newest complete snapshot
                            holds, the tensors saved over all three ranks came back under the
                            rule, and the launcher's output (file LAUNCHED) names the snapshot.

The reference values never come from tshard: value(name, i) is integer arithmetic on the flat
index, so a lost or misplaced row shows as a mismatch."""
import os
import sys
import time

import numpy as np

import tshard
import tshard.checkpoint as ck
from tshard.errors import RankLostError

# name -> dtype, shape, attribute at creation (over all three hosts, or on hosts 1-2 only)
TENSORS = {
    "w": ("f32", (301, 64), "mesh=[3] placements=[S(0)]"),
    "b": ("i64", (97, 5), "mesh=[3] placements=[S(1)]"),
    "e": ("f64", (40, 33), "mesh=[3] placements=[R]"),
    "pair": ("i32", (64, 16), "mesh=[2]@0-1 placements=[S(0)]"),
    "step": ("i64", (48, 8), "mesh=[3] placements=[S(0)]"),
}
NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32}


def value(name, shape, dtype, salt=0):
    """The reference tensor: (k * 7919 + salt * 104729 + len(name) * 31) mod 1021 - 510."""
    k = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((k * 7919 + salt * 104729 + len(name) * 31) % 1021 - 510).astype(NP[dtype]).reshape(shape)


def complete_snapshots(sdir):
    """The snapshot directories holding an index.json (complete: each is moved into place whole)."""
    return sorted(n for n in os.listdir(sdir)
                  if not n.startswith(".") and os.path.exists(os.path.join(sdir, n, "index.json")))


def holds_all(path):
    try:
        return set(ck.names(path)) >= set(TENSORS)
    except (OSError, ck.CheckpointError):  # removed meanwhile (--snapshot-keep)
        return False


def step_of(got):
    """Which step's values 'step' holds, from its first element (the generator inverted)."""
    return int(((int(got.flat[0]) + 510 - len("step") * 31) * pow(104729, -1, 1021)) % 1021)


def snapshot_step(sdir, seen):
    """The step held by the newest complete snapshot (-1 without one); seen caches the reads."""
    names = complete_snapshots(sdir)
    if not names:
        return -1
    if names[-1] not in seen:
        try:
            seen[names[-1]] = step_of(ck.read(os.path.join(sdir, names[-1]), "step"))
        except (OSError, ck.CheckpointError):  # removed meanwhile (--snapshot-keep)
            return -1
    return seen[names[-1]]


def work(sdir, ready):
    c = tshard.connect(rank=0, job=os.environ["TSHARD_JOB"])
    for name, (dt, shape, attr) in TENSORS.items():
        c.create(name, dt, shape, attr)
        c.put(name, value(name, shape, dt))
    deadline = time.monotonic() + 20
    while not any(holds_all(os.path.join(sdir, n)) for n in complete_snapshots(sdir)):
        if time.monotonic() > deadline:
            sys.exit(f"FAIL: no complete snapshot held every tensor within 20 s: "
                     f"{complete_snapshots(sdir)}")
        time.sleep(0.05)  # polling the snapshot directory, bounded by the deadline
    step = 0
    seen = {}
    attrs = ["mesh=[3] placements=[S(1)]", "mesh=[2]@1-2 placements=[S(0)]",
             "mesh=[3] placements=[S(0)]"]
    dt, shape, _ = TENSORS["step"]
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            c.reshard("w", attrs[step % len(attrs)])
            step += 1
            c.put("step", value("step", shape, dt, salt=step))
            if not os.path.exists(ready) and step >= 3 and snapshot_step(sdir, seen) >= 1:
                with open(ready, "w") as f:  # the test may take the host down now
                    f.write("ready\n")
    except RankLostError as e:
        print(f"work: after {step} steps: RankLostError: {e}", flush=True)
        sys.exit(3)
    sys.exit("FAIL: the reshard loop was never interrupted by a lost rank within 30 s")


def verify(sdir, launched):
    c = tshard.connect(rank=0, job=os.environ["TSHARD_JOB"])
    failed = 0

    def check(ok, what):
        nonlocal failed
        print(("ok: " if ok else "FAIL: ") + what, flush=True)
        failed += not ok
    check(sorted(c.list()) == sorted(TENSORS), f"resumed names {sorted(c.list())}")
    for name, (dt, shape, attr) in TENSORS.items():
        got = c.get(name)
        if name == "step":  # one of the steps the work phase put: its whole tensor, salt found
            salt = step_of(got)
            check(salt >= 1 and np.array_equal(got, value(name, shape, dt, salt)),
                  f"'step' equals the values of step {salt}, put during the reshard loop")
            newest = os.path.join(sdir, complete_snapshots(sdir)[-1])
            check(np.array_equal(got, ck.read(newest, name)),
                  "'step' holds what the newest complete snapshot holds")
        else:
            check(np.array_equal(got, value(name, shape, dt)), f"'{name}' equals its reference")
        want = attr if attr.startswith("mesh=[2]@0-1") else "mesh=[2]@0-1 placements=[S(0)]"
        got_attr = c.describe(name)["attr"]
        check(got_attr.startswith(want), f"'{name}' resumed under {got_attr}")
    newest = complete_snapshots(sdir)[-1]
    check(newest in launched, f"the launcher names the newest complete snapshot {newest}")
    return failed


if __name__ == "__main__":
    if sys.argv[1] == "work":
        work(sys.argv[2], sys.argv[3])
    else:
        with open(sys.argv[3]) as f:
            sys.exit(1 if verify(sys.argv[2], f.read()) else 0)
