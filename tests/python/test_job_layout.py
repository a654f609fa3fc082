"""Where a job's ranks live, end to end on one host: 3 daemons, and `tshard describe` (no tensor),
`tshard stats` (text and --json, through every rank), the Python client's describe_job() and
stats() all say 1 host named as this machine (os.uname), every rank on it, and each rank's NUMA
node as /sys gives it for the CPUs that daemon may run on (its pid from the ready line, its CPUs
from /proc, their nodes from /sys/devices/system/node/node*/cpulist, read here; -1 for every
rank when /sys has no nodes). describe --help's examples run as written; bad command lines
(no such job, extra arguments, a bad job name, a rank outside the job, a mistyped option) get
their exit code and a message naming what was wrong.

usage: test_job_layout.py BIN_DIR"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

from checks import Checks
from harness import Daemons

check = Checks()
B = sys.argv[1]
NP = 3
JOB = "demo"  # the job describe --help's example names


def cpulist(text):
    """The CPUs of a cpulist ("0-3,8")."""
    out = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def node_of_cpu():
    """{cpu: NUMA node} from /sys's node cpulists ({} without them)."""
    nodes = {}
    for path in glob.glob("/sys/devices/system/node/node[0-9]*/cpulist"):
        node = int(re.search(r"node(\d+)/cpulist$", path).group(1))
        with open(path) as f:
            for cpu in cpulist(f.read()):
                nodes[cpu] = node
    return nodes


def allowed_nodes(pid, nodes):
    """The NUMA nodes of the CPUs the process may run on ({-1} when /sys has no nodes)."""
    with open(f"/proc/{pid}/status") as f:
        allowed = cpulist(re.search(r"^Cpus_allowed_list:\s*(\S+)", f.read(), re.M).group(1))
    return {nodes.get(cpu, -1) for cpu in allowed} if nodes else {-1}


def host_line(h, name, ranks, numa):
    """The describe/stats line of one host, as the reference spells it."""
    groups = {}
    for r, n in zip(ranks, numa):
        groups.setdefault(n, []).append(r)
    parts = []
    for n, rs in groups.items():
        runs, start = [], rs[0]
        for a, b in zip(rs, rs[1:] + [None]):
            if b != a + 1:
                runs.append(f"{start}-{a}" if a > start else f"{start}")
                start = b
        where = f"NUMA node {n}" if n >= 0 else "NUMA node unknown"
        parts.append(f"{where}: ranks {','.join(runs)}")
    return f"  host {h} {name}: {len(ranks)} rank{'s' if len(ranks) != 1 else ''}: " + \
        "; ".join(parts)


with Daemons(B, NP, job=JOB) as d:
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=JOB,
               PATH=B + os.pathsep + os.environ.get("PATH", ""))

    def run(*args):
        return subprocess.run([os.path.join(B, "tshard"), *args], env=env, capture_output=True,
                              text=True, timeout=60)

    # the reference: this machine's name, each daemon's NUMA nodes from /proc and /sys
    host = os.uname().nodename
    log = d.wait_logs([f"ready: job {JOB} rank {r} of {NP} pid" for r in range(NP)])
    pids = {int(m.group(1)): int(m.group(2))
            for m in re.finditer(rf"ready: job {JOB} rank (\d+) of {NP} pid (\d+)", log)}
    check(sorted(pids) == list(range(NP)), f"a ready line per rank: {pids}")
    nodes = node_of_cpu()
    allowed = {r: allowed_nodes(pids[r], nodes) for r in pids}

    with d.connect(0) as c:
        job = c.describe_job()
    numa = job["rank_numa"]
    check(len(numa) == NP and all(numa[r] in allowed[r] for r in range(NP)),
          f"each rank's NUMA node is one of its CPUs' nodes: {numa} against {allowed}")
    for r in range(NP):
        if len(allowed[r]) == 1:  # one node for every CPU the daemon may use: that one
            check(numa[r] == next(iter(allowed[r])), f"rank {r}: node {numa[r]}, /sys says "
                                                     f"{allowed[r]}")
    if not nodes:
        check(numa == [-1] * NP, f"no NUMA nodes in /sys: -1 everywhere: {numa}")
    want = {"rank": 0, "ranks": NP, "hosts": 1, "topology": f"hosts=1x{NP}",
            "host_names": [host], "rank_hosts": [0] * NP, "rank_numa": numa,
            "by_host": [{"host": 0, "name": host, "ranks": list(range(NP)), "numa": numa}],
            # one host: nothing measured, the planner's defaults (a memory copy, 10 Gbit/s)
            "link_rates": {"host": 8e9, "cross": 1.25e9}}
    check(job == want, f"describe_job: {job}, want {want}")
    lines = [f"{NP} ranks on 1 host (hosts=1x{NP}), answered by rank %d",
             host_line(0, host, list(range(NP)), numa)]

    for r in range(NP):
        # Python: the same facts through every rank
        with d.connect(r) as c:
            j = c.describe_job()
            st = c.stats()["topology"]
        check(j == dict(want, rank=r), f"rank {r}: describe_job {j}")
        check(st == {"spec": f"hosts=1x{NP}", "hosts": 1, "host": 0, "host_name": host,
                     "numa": numa[r], "host_names": [host], "rank_hosts": [0] * NP,
                     "rank_numa": numa}, f"rank {r}: stats()['topology'] {st}")
        # the CLI, text and JSON
        p = run("describe", "--rank", str(r))
        check(p.returncode == 0 and p.stdout.splitlines() == [lines[0] % r, lines[1]],
              f"rank {r}: describe printed {p.stdout!r} {p.stderr!r}, want {lines}")
        p = run("describe", "--json", "--rank", str(r))
        check(p.returncode == 0 and json.loads(p.stdout) == dict(want, rank=r),
              f"rank {r}: describe --json {p.stdout!r} {p.stderr!r}")
        p = run("stats", "--rank", str(r))
        where = f"NUMA node {numa[r]}" if numa[r] >= 0 else "NUMA node unknown"
        text = p.stdout.splitlines()
        check(p.returncode == 0 and len(text) > 2 and text[1] ==
              f"hosts: 1 (hosts=1x{NP}), this rank on host 0 ({host}), {where}" and
              text[2] == lines[1], f"rank {r}: stats printed {p.stdout!r} {p.stderr!r}")
        p = run("stats", "--json", "--rank", str(r))
        s = json.loads(p.stdout) if p.returncode == 0 else {}
        got = {k: s.get(k) for k in ("topology", "hosts", "host", "host_name", "numa",
                                     "host_names", "rank_hosts", "rank_numa")}
        check(got == {"topology": f"hosts=1x{NP}", "hosts": 1, "host": 0, "host_name": host,
                      "numa": numa[r], "host_names": [host], "rank_hosts": [0] * NP,
                      "rank_numa": numa}, f"rank {r}: stats --json {got} {p.stderr!r}")

    # describe --help's examples, run as written (tshard on PATH, the job's directory and name
    # in the environment as a user's shell would have them)
    with d.connect(0) as c:
        c.create("w", "f32", [6, 4], f"mesh=[{NP}] placements=[S(0)]")
    p = run("describe", "--help")
    examples = [ln.strip() for ln in p.stdout.split("example:\n", 1)[-1].splitlines()
                if ln.strip()]
    check(p.returncode == 0 and len(examples) == 2 and any(
        shlex.split(e)[1:] == ["describe", "--job", JOB] for e in examples),
        f"describe --help's examples: {examples}")
    for e in examples:
        q = subprocess.run(["bash", "-c", e], env=env, capture_output=True, text=True,
                           timeout=60)
        check(q.returncode == 0 and q.stdout.strip(), f"example '{e}': {q.returncode} "
                                                      f"{q.stdout!r} {q.stderr!r}")
        if "--job" in e:
            check(q.stdout.splitlines() == [lines[0] % 0, lines[1]], f"example '{e}': "
                                                                      f"{q.stdout!r}")

    # bad command lines
    bad = [(["describe", "--job", "nosuch"], 4, "no daemon serves job nosuch on rank 0"),
           (["describe", "--job", "nosuch", "--json"], 4, "no daemon serves job nosuch"),
           (["describe", "w", "extra"], 2, "unexpected argument 'extra'; describe takes NAME"),
           (["describe", "w", "x", "y", "--job", JOB], 2, "unexpected argument 'x'"),
           (["describe", "--job", "bad/job"], 2, "job name 'bad/job': use 1 to 64 letters"),
           (["describe", "--rank", str(NP)], 2,
            f"--rank {NP}: job {JOB} has {NP} ranks (0 to {NP - 1})"),
           (["describe", "--jsn"], 2, "did you mean '--json'"),
           (["describe", "nosuch"], 1, "no tensor named 'nosuch'")]
    for args, code, says in bad:
        p = run(*args)
        check(p.returncode == code and says in p.stderr and not p.stdout,
              f"{args}: exit {p.returncode} (want {code}), {p.stderr!r} (want {says!r})")
    rc = d.stop()
    check(rc == 0, f"the daemons exit 0 (sanitizers quiet in such a build): {rc}\n{d.logs()}")
check.finish()
