#!/usr/bin/python3
"""test_cluster_hosts.py - the host-aware plans end to end, bit-exact, on simulated hosts of two
ranks each.

Root only. It makes H simulated hosts (--hosts, 2 or 3): each a network namespace joined by a
veth pair to a bridge in a switch namespace of its own, with an address in a 10.215.X.0/24 range
that exists only inside these namespaces, and each host's processes in a UTS namespace of their
own under the host's own hostname (Open MPI names its shared-memory segments and session
directories after the hostname; two hosts sharing them would collide, and the daemons take
their topology from Open MPI's shared-memory split, which follows the node). mpirun runs in host
1 and starts two tshardd daemons on every host (host h holds ranks 2h-2 and 2h-1) through a
remote-shell agent that enters a host's namespaces: Open MPI's shared memory (vader) inside a
host, TCP between hosts. This build's Python package drives every rank from the root namespace
(a Unix socket is a file).

Checked, on seeded shapes (2-D and 3-D, lengths no rank count divides) in f32, f64, int32 and
bf16, for each move below: the strategy the reshard's answer names is the one `tshard plan
--topology hosts=Hx2 --json` chooses offline for the same shape, dtype and attributes (and the
one the daemons' own plan names; hierarchical wherever it applies and wins), and every
strategy that plan lists as applicable, the flat ones and `hierarchical`, forced by name gives
the same bits: the whole tensor got on every rank and every rank's own slice (get_slice, its
box computed here from the attribute) against a numpy reference (partial sources: different
values on every rank, put with put_slice, reduced by numpy; sums exact by construction).
The moves (N = 2H ranks; "host 1", "host 2" the first two):
  S(0)->R over every rank; the same on the mesh in interleaved rank order (@0,2,1,3 for 2x2);
  P(sum)->R; P(sum)->S(0); P(max)->S(1); the 2-D mesh [H,2] [S(0),R]->[R,R]; S(0) on host 1's
  ranks -> R on host 2's ranks; S(0) on host 1 -> R on every rank; R on host 1 -> R on every
  rank; S(0)->S(1) (where hierarchical does not apply: the planner must say so); P(avg)->R
  and P(prod)->S(0).
Bad input over the cluster: `hierarchical` forced on one host's group, on a partial target and
on a group whose hosts hold different numbers of its ranks is refused (BAD_STRATEGY) with the
planner's reason, the same as the offline plan's, and the tensor is unchanged afterwards; an
unknown strategy name is refused naming the valid ones.

Everything it made is torn down on exit, on a failure, on SIGINT, SIGTERM or SIGHUP and after
--timeout: the daemons, mpirun, whatever still runs in the namespaces, the namespaces, the work
directory, and what Open MPI leaves under the hosts' hostnames (/tmp/ompi.*,
/dev/shm/vader_segment.*); then it checks that nothing of it is left (teardown_left=none).
--signal-test runs the test as a child, sends it SIGTERM once its first case is done (its next
reshards under way), and checks that it exits by the signal having left nothing behind.

Exit status: 0 every check passed, 1 a check failed or something was left, 77 skipped (not
root, no `ip`, `unshare`, `nsenter` or `mpirun`, or no network namespaces here), 128+N after
signal N.

usage: test_cluster_hosts.py BIN_DIR [--hosts H] [--seed S] [--staging BYTES] [--timeout SEC]
       [--signal-test]
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

PYTHON = "/usr/bin/python3"
SCRIPT = os.path.realpath(__file__)
JOB = "hosts"
PER_HOST = 2
DTYPES = ("f32", "f64", "i32", "bf16")
SKIP = 77
tshard = None  # the build's package, imported by main_test once its directory is known


def skip(why):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(SKIP)


class Interrupted(BaseException):
    """A signal or --timeout: tear down and leave with `status`."""

    def __init__(self, why, status):
        super().__init__(why)
        self.status = status


def on_signal(signum, frame):
    raise Interrupted(f"interrupted by {signal.Signals(signum).name}", 128 + signum)


def on_alarm(signum, frame):
    raise Interrupted("--timeout passed", 1)


def run(argv, check=True, timeout=60):
    """Runs a command; (exit status, stdout, stderr). A failure with `check` raises
    RuntimeError naming the command and its error output."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit status {p.returncode}: {p.stderr.strip()}")
    return p.returncode, p.stdout, p.stderr


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}", flush=True)
        return ok


# ---- the simulated hosts ---------------------------------------------------------------------

class Hosts:
    """H network namespaces on a bridge in a switch namespace, each host's processes under a
    hostname of its own, and the remote-shell agent mpirun starts remote ranks through."""

    def __init__(self, count, work):
        self.tag = f"tsch{os.getpid() % 10000}"
        self.net = f"10.215.{os.getpid() % 200 + 20}"
        self.sw = f"{self.tag}sw"
        self.ns = [f"{self.tag}h{i + 1}" for i in range(count)]
        self.hostname = [f"{self.tag}-host{i + 1}" for i in range(count)]
        self.addr = [f"{self.net}.{i + 1}" for i in range(count)]
        self.work = work
        self.agent = os.path.join(work, "ns-rsh")
        self.made = []

    def names(self):
        return [self.sw] + self.ns

    def add_ns(self, name):
        if run(["ip", "netns", "add", name], check=False)[0] != 0:
            if not self.made:
                skip("cannot create network namespaces here (ip netns add failed)")
            raise RuntimeError(f"ip netns add {name} failed")
        self.made.append(name)

    def up(self):
        have = run(["ip", "netns", "list"])[1]
        for n in self.names():
            if re.search(rf"^{n}\b", have, re.M):
                raise RuntimeError(f"a network namespace named {n} exists already")
        self.add_ns(self.sw)
        run(["ip", "-n", self.sw, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", self.sw, "link", "set", "br0", "up"])
        for i, h in enumerate(self.ns):
            port = f"p{i + 1}"
            self.add_ns(h)
            run(["ip", "-n", self.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                 "netns", h])
            run(["ip", "-n", self.sw, "link", "set", port, "master", "br0"])
            run(["ip", "-n", self.sw, "link", "set", port, "up"])
            run(["ip", "-n", h, "addr", "add", f"{self.addr[i]}/24", "dev", "eth0"])
            run(["ip", "-n", h, "link", "set", "eth0", "up"])
            run(["ip", "-n", h, "link", "set", "lo", "up"])
        cases = "".join(f"  {a}) ns={n} name={hn} ;;\n"
                        for a, n, hn in zip(self.addr, self.ns, self.hostname))
        with open(self.agent, "w") as f:
            f.write("#!/bin/sh\n"
                    "# ns-rsh HOST COMMAND: COMMAND in HOST's network namespace under HOST's own\n"
                    "# hostname (a UTS namespace of its own); mpirun's remote-shell agent.\n"
                    "host=$1; shift\n"
                    f"case $host in\n{cases}"
                    "  *) echo \"ns-rsh: unknown host $host\" >&2; exit 255 ;;\n"
                    "esac\n"
                    "exec ip netns exec \"$ns\" unshare --uts /bin/sh -c "
                    "'hostname \"$0\" && eval \"$1\"' \"$name\" \"$*\"\n")
        os.chmod(self.agent, 0o700)

    def in_host(self, i, argv):
        """argv run in host i's network namespace under its hostname."""
        return ["ip", "netns", "exec", self.ns[i], "unshare", "--uts", "/bin/sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname[i]] + argv

    def kill_inside(self):
        """SIGKILL to whatever still runs in these namespaces (all of it started here)."""
        for n in self.made:
            for pid in run(["ip", "netns", "pids", n], check=False)[1].split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def litter(self):
        """What Open MPI leaves under the hosts' hostnames: session directories, segments."""
        return [p for d, pre in (("/tmp", "ompi."), ("/dev/shm", "vader_segment."))
                for p in glob.glob(os.path.join(d, f"{pre}{self.tag}-host*"))]

    def down(self):
        self.kill_inside()
        for n in reversed(self.made):
            for _ in range(50):  # a namespace whose last process is still exiting: retried
                if run(["ip", "netns", "del", n], check=False)[0] == 0:
                    break
                time.sleep(0.1)  # bounded: 5 s
        self.made = []
        for p in self.litter():
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:  # gone meanwhile; left() reports what stays
                    pass


def left_behind(tag, work):
    """Everything of a run (namespace tag, work directory) still there: namespaces, Open MPI
    litter under the hosts' hostnames, the work directory, processes naming the directory."""
    have = run(["ip", "netns", "list"], check=False)[1]
    out = [ln.split()[0] for ln in have.splitlines() if ln.startswith(tag)]
    out += [p for d, pre in (("/tmp", "ompi."), ("/dev/shm", "vader_segment."))
            for p in glob.glob(os.path.join(d, f"{pre}{tag}-host*"))]
    if os.path.exists(work):
        out.append(work)
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(d, "cmdline"), "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if work in cmd and int(os.path.basename(d)) != os.getpid():
            out.append(f"pid {os.path.basename(d)} ({cmd.strip()[:120]})")
    return out


# ---- the daemons -----------------------------------------------------------------------------

class Job:
    """tshardd on H hosts x 2 ranks, started by mpirun in host 1."""

    def __init__(self, hosts, nhosts, bin_dir, staging):
        self.hosts, self.nhosts, self.n = hosts, nhosts, nhosts * PER_HOST
        self.bin_dir, self.staging = bin_dir, staging
        self.log = os.path.join(hosts.work, "daemons.log")
        self.proc = None
        self.pids = {}

    def socket(self, rank):
        return os.path.join(self.hosts.work, f"tshard-{JOB}-{rank}.sock")

    def argv(self):
        h = self.hosts
        hostfile = os.path.join(h.work, "hostfile")
        with open(hostfile, "w") as f:
            f.writelines(f"{a} slots={PER_HOST}\n" for a in h.addr[:self.nhosts])
        return h.in_host(0, [
            "mpirun", "--hostfile", hostfile, "-np", str(self.n),
            "--mca", "plm_rsh_agent", h.agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "orte_startup_timeout", "45",
            "--mca", "btl", "self,vader,tcp",
            "--mca", "btl_tcp_if_include", f"{h.net}.0/24",
            "--mca", "oob_tcp_if_include", f"{h.net}.0/24",
            # the simulated hosts share this machine's cores: a waiting rank yields its core
            "--mca", "mpi_yield_when_idle", "1",
            os.path.join(self.bin_dir, "tshardd"), "--job", JOB, "--socket-dir", h.work]
            + (["--staging", str(self.staging)] if self.staging else []))

    def env(self):
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        for k in ("OMPI_MCA_btl", "OMPI_MCA_rmaps_base_oversubscribe"):
            env.pop(k, None)
        return env

    def launch(self):
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env(),
                                         start_new_session=True)
        deadline = time.monotonic() + 60
        pat = re.compile(rf"ready: job {JOB} rank (\d+) of (\d+) pid (\d+)")
        while time.monotonic() < deadline and self.proc.poll() is None:
            with open(self.log) as f:
                self.pids = {int(m.group(1)): int(m.group(3)) for m in pat.finditer(f.read())}
            if len(self.pids) == self.n:
                return True
            time.sleep(0.1)  # polling for the ready lines, bounded by the deadline
        return False

    def start(self):
        for attempt in (1, 2):
            if self.launch():
                return
            with open(self.log) as f:
                print(f"the daemons did not all start (attempt {attempt}); mpirun's output:\n"
                      f"{f.read()[-4000:]}", file=sys.stderr, flush=True)
            self.kill()
        raise RuntimeError(f"the daemons could not be started across {self.nhosts} hosts")

    def kill(self):
        """mpirun's process group, then whatever still runs in the namespaces."""
        if self.proc is not None and self.proc.poll() is None:
            for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(timeout=grace)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    pass
        self.hosts.kill_inside()
        self.proc = None

    def stop(self, c0):
        """A shutdown through c0 (None after a signal or a failure to start); True when mpirun
        ended by itself with status 0."""
        clean = False
        if self.proc is not None and c0 is not None and self.proc.poll() is None:
            try:
                c0.shutdown()
                clean = self.proc.wait(timeout=30) == 0
            except Exception as e:  # the daemons are killed below all the same
                print(f"shutdown: {e}", file=sys.stderr, flush=True)
        self.kill()
        return clean


# ---- attributes and the reference ------------------------------------------------------------

class A:
    """A distributed attribute as the test builds it: mesh shape, ranks (row-major over the
    mesh), placements ('S(d)', 'R', 'P(op)'), split sizes {dim: [sizes]} (none: balanced;
    ragged=True: drawn per shape by concrete()); text() in the grammar, boxes() computed here."""

    def __init__(self, mesh, ranks, places, ragged=False, splits=None):
        self.mesh, self.ranks, self.places = list(mesh), list(ranks), list(places)
        self.ragged, self.splits = ragged, dict(splits or {})

    def concrete(self, shape, rng):
        """This attribute for `shape`: ragged split sizes drawn for every split dim (one part
        empty, the others random), or itself."""
        if not self.ragged:
            return self
        splits = {}
        for d in range(len(shape)):
            parts = math.prod(m for m, p in zip(self.mesh, self.places) if p == f"S({d})")
            if parts > 1:
                cuts = sorted(int(x) for x in rng.integers(0, shape[d] + 1, size=parts - 2))
                sizes = [b - a for a, b in zip([0] + cuts, cuts + [shape[d]])]
                sizes.insert(int(rng.integers(0, parts)), 0)
                splits[d] = sizes
        return A(self.mesh, self.ranks, self.places, splits=splits)

    def text(self):
        t = (f"mesh=[{','.join(map(str, self.mesh))}]@{','.join(map(str, self.ranks))} "
             f"placements=[{','.join(self.places)}]")
        if self.splits:
            t += " splits={" + ",".join(f"{d}:[{','.join(map(str, v))}]"
                                        for d, v in sorted(self.splits.items())) + "}"
        return t

    def partial(self):
        return next((p[2:-1] for p in self.places if p.startswith("P(")), None)

    def boxes(self, shape):
        """{rank: (lo, hi)}: each rank's box, balanced splits (the remainder to the first
        parts), parts of a dim split by several mesh dims row-major over them."""
        out = {}
        for pos, rank in enumerate(self.ranks):
            coord, rest = [], pos
            for m in reversed(self.mesh):
                coord.insert(0, rest % m)
                rest //= m
            lo, hi = [], []
            for d, length in enumerate(shape):
                part, parts = 0, 1
                for m, p in enumerate(self.places):
                    if p == f"S({d})":
                        part, parts = part * self.mesh[m] + coord[m], parts * self.mesh[m]
                if d in self.splits:
                    sizes = self.splits[d]
                else:
                    q, r = divmod(length, parts)
                    sizes = [q + (1 if i < r else 0) for i in range(parts)]
                lo.append(sum(sizes[:part]))
                hi.append(lo[-1] + sizes[part])
            out[rank] = (lo, hi)
        return out


def numpy_dtype(dt):
    return {"f32": np.float32, "f64": np.float64, "i32": np.int32, "bf16": np.uint16}[dt]


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """Values that bf16 holds exactly (the low 16 bits zero) to their bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    assert not (bits & 0xFFFF).any(), "the reference made a value bf16 does not hold"
    return (bits >> 16).astype(np.uint16)


def whole_data(rng, dt, shape):
    """Random finite values of dtype dt (bf16: bits of truncated normals)."""
    if dt == "i32":
        return rng.integers(-2 ** 31, 2 ** 31, size=shape, dtype=np.int64).astype(np.int32)
    if dt == "bf16":
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16
                ).astype(np.uint16)
    return rng.standard_normal(shape).astype(numpy_dtype(dt)) * 8


def partial_data(rng, dt, shape, op, n):
    """n partial values and their reduction by op, exact in dt: sums of small integers (bf16,
    int32 within range) or of dyadic fractions (f32, f64); max or min of any finite values;
    avg of small integers whose sum n divides (float dtypes); prod of powers of two (floats) or
    of 1, -1 and 2 (i32)."""
    if op == "avg":
        want = rng.integers(-8, 9, size=shape).astype(np.float64)
        vals = [rng.integers(-8, 9, size=shape).astype(np.float64) for _ in range(n - 1)]
        vals.append(n * want - np.sum(vals, axis=0) if vals else n * want)
    elif op == "prod":
        pool = [1.0, -1.0, 2.0] if dt == "i32" else [0.5, -1.0, 2.0, 1.0]
        vals = [rng.choice(pool, size=shape) for _ in range(n)]
        want = np.prod(vals, axis=0)
    if op in ("avg", "prod"):
        if dt == "bf16":
            return ([f32_to_bf16(v.astype(np.float32)) for v in vals],
                    f32_to_bf16(want.astype(np.float32)))
        return [v.astype(numpy_dtype(dt)) for v in vals], want.astype(numpy_dtype(dt))
    if op in ("max", "min"):
        parts = [whole_data(rng, dt, shape) for _ in range(n)]
        pick = np.max if op == "max" else np.min
        if dt == "bf16":
            want = f32_to_bf16(pick([bf16_to_f32(p) for p in parts], axis=0))
        else:
            want = pick(parts, axis=0)
        return parts, want
    if dt == "i32":
        parts = [rng.integers(-2 ** 28, 2 ** 28, size=shape).astype(np.int32) for _ in range(n)]
        return parts, np.sum(parts, axis=0, dtype=np.int64).astype(np.int32)
    if dt == "bf16":
        vals = [rng.integers(-16, 17, size=shape).astype(np.float32) for _ in range(n)]
        return ([f32_to_bf16(v) for v in vals],
                f32_to_bf16(np.sum(vals, axis=0, dtype=np.float64).astype(np.float32)))
    scale = 8.0 if dt == "f32" else 1024.0
    top = 512 if dt == "f32" else 1 << 20
    vals = [(rng.integers(-top, top, size=shape) / scale).astype(numpy_dtype(dt))
            for _ in range(n)]
    return vals, np.sum(np.array(vals, dtype=np.float64), axis=0).astype(numpy_dtype(dt))


def same_bits(got, want):
    return (got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
            and np_bytes(got) == np_bytes(want))


def np_bytes(a):
    return np.ascontiguousarray(a).tobytes()


def uneven(rng, lo, hi, avoid):
    """A length in [lo, hi) that none of `avoid` divides."""
    while True:
        v = int(rng.integers(lo, hi))
        if all(v % k for k in avoid):
            return v


# ---- the cases -------------------------------------------------------------------------------

def cases(h):
    """(key, source, target) of every move, on h hosts of two ranks."""
    n = h * PER_HOST
    every = list(range(n))
    host1, host2 = [0, 1], [2, 3]
    inter = [(m % h) * PER_HOST + m // h for m in range(n)]
    return [
        ("s0_r", A([n], every, ["S(0)"]), A([n], every, ["R"])),
        ("interleaved_s0_r", A([n], inter, ["S(0)"]), A([n], inter, ["R"])),
        ("p_sum_r", A([n], every, ["P(sum)"]), A([n], every, ["R"])),
        ("p_sum_s0", A([n], every, ["P(sum)"]), A([n], every, ["S(0)"])),
        ("p_max_s1", A([n], every, ["P(max)"]), A([n], every, ["S(1)"])),
        ("mesh2d_s0r_rr", A([h, PER_HOST], every, ["S(0)", "R"]),
         A([h, PER_HOST], every, ["R", "R"])),
        ("xgroup_s0_r", A([PER_HOST], host1, ["S(0)"]), A([PER_HOST], host2, ["R"])),
        ("s0_host1_r_all", A([PER_HOST], host1, ["S(0)"]), A([n], every, ["R"])),
        ("r_host1_r_all", A([PER_HOST], host1, ["R"]), A([n], every, ["R"])),
        ("s0_s1", A([n], every, ["S(0)"]), A([n], every, ["S(1)"])),
        # ragged splits with an empty part, from and to
        ("ragged_s0_r", A([n], every, ["S(0)"], ragged=True), A([n], every, ["R"])),
        ("p_sum_ragged_s0", A([n], every, ["P(sum)"]), A([n], every, ["S(0)"], ragged=True)),
        # DTensor's Partial("avg") (divided once, after the sum across hosts) and prod
        ("p_avg_r", A([n], every, ["P(avg)"]), A([n], every, ["R"])),
        ("p_prod_s0", A([n], every, ["P(prod)"]), A([n], every, ["S(0)"])),
    ]


def shapes_for(rng, h, k, large=False):
    """Four seeded shapes of case k, 2-D and 3-D alternating, with dtypes rotating over the
    cases; the split lengths divisible by no rank or part count (n, h, 2). large: one more, of
    several MiB, so that reductions between hosts go around the ring (comm/ring.c, from 1 MiB)
    in the flat strategies and in the hierarchical stages."""
    n = h * PER_HOST
    avoid = sorted({n, h, PER_HOST})
    out = []
    for j, dt in enumerate(DTYPES[k % 4:] + DTYPES[:k % 4]):
        if (j + k) % 2 == 0:
            shape = (uneven(rng, n + 1, 90, avoid), uneven(rng, n + 1, 60, avoid))
        else:
            shape = (uneven(rng, n + 1, 30, avoid), uneven(rng, n + 1, 20, avoid),
                     int(rng.integers(2, 6)))
        out.append((shape, dt))
    if large:
        out.append(((uneven(rng, 2048, 2400, avoid), 1031), DTYPES[k % 4]))
    return out


def hier_applies(src, dst):
    """Whether the hierarchical strategy applies (plan_hier.c) to these moves, whose groups
    hold as many ranks on every host as they have: replicated targets and partial sources, never
    a partial target."""
    return not dst.partial() and (src.partial() is not None or set(dst.places) == {"R"})


class Run:
    """One job's clients and the offline planner, and the checks made against them."""

    def __init__(self, bin_dir, h, staging, clients, check):
        self.cli = os.path.join(bin_dir, "tshard")
        self.staging = staging
        self.h, self.n = h, h * PER_HOST
        self.topo = f"hosts={h}x{PER_HOST}"
        self.c = clients
        self.check = check
        self.chosen = {}  # case key -> the strategies auto chose
        r = clients[0].describe_job()["link_rates"]  # the rates the daemons plan with
        self.rates = f"host={r['host']:.0f}B/s,cross={r['cross']:.0f}B/s"

    def offline(self, shape, dt, src, dst, strategy=None):
        """`tshard plan --topology hosts=Hx2`: (exit status, JSON or None, stderr)."""
        argv = [self.cli, "plan", "--shape", ",".join(map(str, shape)), "--from", src.text(),
                "--to", dst.text(), "--dtype", dt, "--topology", self.topo, "--json",
                "--link-rates", self.rates]
        if strategy:
            argv += ["--strategy", strategy]
        if self.staging:
            argv += ["--staging", str(self.staging)]
        rc, out, err = run(argv, check=False)
        return rc, json.loads(out) if rc == 0 else None, err.strip()

    def make(self, name, shape, dt, src, data):
        """Creates the tensor under src and puts data: the whole tensor from rank 0, or each
        source rank's own partial by put_slice on that rank."""
        self.c[0].create(name, dt, shape, src.text())
        if src.partial():
            for r, part in zip(src.ranks, data):
                self.c[r].put_slice(name, tshard.bf16_bits(part) if dt == "bf16" else part)
        else:
            self.c[0].put(name, tshard.bf16_bits(data) if dt == "bf16" else data)

    def holds(self, what, name, attr, shape, want):
        """Every rank: describe names attr, get gives `want`, get_slice its box of want (an
        empty array off the mesh)."""
        canon = str(tshard.Attr.parse(attr.text()))
        boxes = attr.boxes(shape)
        ok = True
        for r in range(self.n):
            d = self.c[r].describe(name)
            ok &= self.check(d["attr"] == canon, f"{what}: rank {r} describes {d['attr']}, "
                                                 f"not {canon}")
            got = self.c[r].get(name)
            ok &= self.check(same_bits(got, want), f"{what}: the tensor got on rank {r} differs "
                                                   f"from the reference")
            mine = self.c[r].get_slice(name)
            if r in boxes:
                lo, hi = boxes[r]
                ref = want[tuple(slice(a, b) for a, b in zip(lo, hi))]
                ok &= self.check(same_bits(mine, ref), f"{what}: rank {r}'s slice "
                                                       f"[{lo}:{hi}] differs from the reference")
            else:
                ok &= self.check(mine.size == 0, f"{what}: rank {r} is off the mesh but its "
                                                 f"slice has {mine.size} elements")
        return ok

    def holds_partial(self, what, name, attr, parts):
        """Every source rank still holds its own partial value (get_slice)."""
        canon = str(tshard.Attr.parse(attr.text()))
        ok = True
        for r, part in zip(attr.ranks, parts):
            ok &= self.check(self.c[r].describe(name)["attr"] == canon,
                             f"{what}: rank {r} no longer describes {canon}")
            ok &= self.check(same_bits(self.c[r].get_slice(name), part),
                             f"{what}: rank {r}'s partial value changed")
        return ok

    def move(self, key, j, shape, dt, src, dst, data, want):
        """The reshard auto, then forced by every applicable strategy, each on a fresh tensor."""
        what = f"{key}[{j}] {dt}{list(shape)} {src.text()} -> {dst.text()}"
        rc, plan, err = self.offline(shape, dt, src, dst)
        if not self.check(rc == 0, f"{what}: tshard plan --topology {self.topo} failed: {err}"):
            return
        self.check(plan.get("topology") == self.topo and plan.get("hosts") == self.h,
                   f"{what}: the offline plan's topology is {plan.get('topology')}")
        applies = [s for s, v in plan["strategies"].items() if v.get("applies", True)]
        # hierarchical applies to replicated targets and partial sources on equal hosts
        self.check(("hierarchical" in applies) == hier_applies(src, dst),
                   f"{what}: the offline plan says hierarchical "
                   f"{'applies' if 'hierarchical' in applies else 'does not apply'}: "
                   f"{plan['strategies']['hierarchical']}")
        name = f"t_{key}_{j}"
        for strategy in [None] + applies:
            label = f"{what} ({strategy or 'auto'})"
            self.make(name, shape, dt, src, data)
            try:
                if strategy is None:
                    daemon = self.c[0].plan(name, dst.text())
                    self.check(daemon["strategy"] == plan["strategy"],
                               f"{label}: the daemons plan {daemon['strategy']}, the offline "
                               f"plan {plan['strategy']}")
                    self.check(f"topology: {self.topo}" in daemon["explain"],
                               f"{label}: the daemons' EXPLAIN names no topology {self.topo}:\n"
                               f"{daemon['explain']}")
                r = self.c[0].reshard(name, dst.text(), strategy=strategy)
                expect = strategy or plan["strategy"]
                self.check(r["strategy"] == expect,
                           f"{label}: the answer names {r['strategy']}, not {expect}")
                if strategy is None:
                    self.chosen.setdefault(key, set()).add(r["strategy"])
                self.holds(label, name, dst, shape, want)
            finally:
                self.c[0].drop(name)

    def bad(self, label, shape, dt, src, dst, strategy, data, want, needle):
        """A forced strategy that does not apply: refused with the offline plan's reason (which
        names `needle`); the tensor as it was on every rank."""
        rc, _, offline_err = self.offline(shape, dt, src, dst, strategy)
        self.check(rc == 1 and needle in offline_err,
                   f"{label}: tshard plan --strategy {strategy}: exit {rc}, '{offline_err}'")
        name = "t_bad"
        self.make(name, shape, dt, src, data)
        try:
            try:
                self.c[0].reshard(name, dst.text(), strategy=strategy)
                self.check(False, f"{label}: the reshard was accepted")
            except tshard.TshardError as e:
                msg = str(e)
                self.check(isinstance(e, tshard.BadStrategyError),
                           f"{label}: {type(e).__name__} ({msg}), not BadStrategyError")
                self.check(needle in msg and strategy in msg,
                           f"{label}: the error '{msg}' does not name '{strategy}' and why "
                           f"('{needle}')")
                reason = offline_err.removeprefix("tshard: ")
                self.check(reason in msg, f"{label}: the daemons' error '{msg}' is not the "
                                          f"offline plan's '{reason}'")
            if src.partial():
                self.holds_partial(label, name, src, data)
            else:
                self.holds(label, name, src, shape, want)
        finally:
            self.c[0].drop(name)


def topology_checks(job, hosts, clients, check):
    """Every daemon in its host's namespaces (rank r on host r // 2), each host one hostname,
    and every rank's stats saying hosts=Hx2 with its own host."""
    names = {}
    for r in range(job.n):
        pid = job.pids[r]
        ns = run(["ip", "netns", "identify", str(pid)])[1].strip()
        check(ns == hosts.ns[r // PER_HOST], f"rank {r} (pid {pid}) runs in namespace '{ns}', "
                                             f"not {hosts.ns[r // PER_HOST]}")
        hn = run(["nsenter", "-t", str(pid), "-u", "hostname"])[1].strip()
        check(hn == hosts.hostname[r // PER_HOST], f"rank {r} has hostname '{hn}'")
        names.setdefault(hn, set()).add(r // PER_HOST)
        t = clients[r].stats()["topology"]
        check((t["spec"], t["hosts"], t["host"]) == (f"hosts={job.nhosts}x{PER_HOST}",
                                                     job.nhosts, r // PER_HOST),
              f"rank {r}'s stats say topology {t}")
    check(len(names) == job.nhosts and all(len(v) == 1 for v in names.values()),
          f"the hosts' hostnames are not one per host: {names}")
    with open(job.log) as f:
        log = f.read()
    check(f"ranks on {job.nhosts} hosts: hosts={job.nhosts}x{PER_HOST}" in log,
          "rank 0 did not log the topology")
    check("plans weigh each host's link: inside a host" in log and "MB/s (measured)" in log,
          "rank 0 did not log the measured link rates")
    rates = [c.describe_job()["link_rates"] for c in clients]
    check(all(r == rates[0] for r in rates) and rates[0]["host"] > 0 and rates[0]["cross"] > 0,
          f"the ranks plan with different or missing link rates: {rates}")


def bad_inputs(rn, rng):
    """Forced strategies that cannot apply over the cluster; the tensor unchanged."""
    h, n = rn.h, rn.n
    every = list(range(n))
    shape = (uneven(rng, n + 1, 50, [n, h, 2]), uneven(rng, n + 1, 30, [n, h, 2]))
    data = whole_data(rng, "f32", shape)
    one_host = (A([PER_HOST], [0, 1], ["S(0)"]), A([PER_HOST], [0, 1], ["R"]))
    rn.bad("hierarchical on one host's group", shape, "f32", *one_host, "hierarchical", data,
             data, "every rank is on one host")
    uneven_group = (A([3], [0, 1, 2], ["S(0)"]), A([3], [0, 1, 2], ["R"]))
    rn.bad("hierarchical on a group of 2 + 1 ranks", shape, "f32", *uneven_group,
             "hierarchical", data, data, "different numbers of its ranks")
    parts, want = partial_data(rng, "i32", shape, "sum", n)
    src = A([n], every, ["P(sum)"])
    rn.bad("hierarchical to a partial target", shape, "i32", src,
             A([h, PER_HOST], every, ["P(sum)", "S(0)"]), "hierarchical", parts, want,
             "a partial target")
    # an unknown strategy name: refused before any rank moves, naming the valid ones
    name = "t_bad_name"
    rn.make(name, shape, "f32", one_host[0], data)
    try:
        try:
            rn.c[0].reshard(name, A([n], every, ["R"]).text(), strategy="hierarchal")
            rn.check(False, "strategy 'hierarchal' was accepted")
        except tshard.TshardError as e:
            rn.check(isinstance(e, tshard.BadStrategyError) and "'hierarchal'" in str(e)
                       and "valid: " in str(e),
                       f"strategy 'hierarchal': {type(e).__name__}: {e}")
        rn.holds("after strategy 'hierarchal'", name, one_host[0], shape, data)
    finally:
        rn.c[0].drop(name)


def exercise(bin_dir, h, seed, staging, job, hosts, clients, check):
    topology_checks(job, hosts, clients, check)
    rn = Run(bin_dir, h, staging, clients, check)
    rng = np.random.default_rng(seed)
    for k, (key, src_of, dst_of) in enumerate(cases(h)):
        t0 = time.monotonic()
        for j, (shape, dt) in enumerate(shapes_for(rng, h, k, src_of.partial() is not None)):
            src, dst = src_of.concrete(shape, rng), dst_of.concrete(shape, rng)
            if src.partial() == "avg" and dt == "i32":
                dt = "f64"  # avg is for the float dtypes
            if src.partial():
                data, want = partial_data(rng, dt, shape, src.partial(), len(src.ranks))
            else:
                data = want = whole_data(rng, dt, shape)
            rn.move(key, j, shape, dt, src, dst, data, want)
        print(f"case {key}: auto chose {'+'.join(sorted(rn.chosen.get(key, ())))} "
              f"({time.monotonic() - t0:.1f} s)", flush=True)
    bad_inputs(rn, rng)
    hier = sorted(k for k, v in rn.chosen.items() if "hierarchical" in v)
    print(f"hierarchical chosen for: {','.join(hier) or 'none'}", flush=True)
    check(hier, "the planner chose hierarchical for no case: are the hosts seen?")
    # whatever the reshards did, nothing is left on any rank
    for r in range(job.n):
        check(clients[r].list() == [], f"rank {r} still lists tensors: {clients[r].list()}")


# ---- the program -----------------------------------------------------------------------------

def main_test(o):
    if os.geteuid() != 0:
        skip("the cluster hosts test needs root to create network namespaces")
    for tool, pkg in (("ip", "iproute2"), ("unshare", "util-linux"), ("nsenter", "util-linux"),
                      ("mpirun", "openmpi-bin")):
        if not shutil.which(tool):
            skip(f"no '{tool}' command (apt-get install {pkg})")
    bin_dir = os.path.realpath(o.bin_dir)
    pypath = os.path.join(os.path.dirname(bin_dir), "python")
    for need in (os.path.join(bin_dir, "tshardd"), os.path.join(bin_dir, "tshard"),
                 os.path.join(pypath, "tshard")):
        if not os.path.exists(need):
            print(f"test_cluster_hosts: {need} missing: build tshardd, tshard-cli and "
                  f"tshard-python", file=sys.stderr)
            return 1
    sys.path.insert(0, pypath)
    global tshard
    import tshard
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(o.timeout)
    work = tempfile.mkdtemp(prefix="tshard-cluster-hosts.")  # 0700: the socket directory
    hosts = Hosts(o.hosts, work)
    print(f"netns_tag={hosts.tag}\nwork_dir={work}\nseed={o.seed}\n"
          f"staging={o.staging or 'default'}", flush=True)
    check = Checks()
    status, job, clients = 0, None, []
    t0 = time.monotonic()
    try:
        hosts.up()
        job = Job(hosts, o.hosts, bin_dir, o.staging)
        job.start()
        clients = [tshard.connect(socket=job.socket(r), timeout=120) for r in range(job.n)]
        print(f"daemons serving: {job.n} ranks on {o.hosts} hosts "
              f"({time.monotonic() - t0:.1f} s)", flush=True)
        exercise(bin_dir, o.hosts, o.seed, o.staging, job, hosts, clients, check)
        clean = job.stop(clients[0])
        check(clean, "the job did not shut down cleanly (mpirun's exit status not 0)")
    except Interrupted as e:
        print(f"test_cluster_hosts: {e}: tearing down", file=sys.stderr, flush=True)
        status = e.status
    except Exception as e:  # a crash of a daemon or of the test: reported, torn down
        import traceback
        traceback.print_exc()
        if job is not None and os.path.exists(job.log):
            with open(job.log) as f:
                print(f"daemons' log (tail):\n{f.read()[-6000:]}", file=sys.stderr)
        check(False, f"{type(e).__name__}: {e}")
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                                  signal.SIGALRM})
        signal.alarm(0)
        for c in clients:
            try:
                c.close()
            except Exception:  # a connection a signal cut short: closed as far as it goes
                pass
        if job is not None:
            job.stop(None)
        hosts.down()
        shutil.rmtree(work, ignore_errors=True)
        left = left_behind(hosts.tag, work)
        print(f"teardown_left={','.join(left) if left else 'none'}", flush=True)
    if status:
        return status
    check(not left, f"left behind: {left}")
    print(f"{check.passed} passed, {check.failed} failed ({time.monotonic() - t0:.1f} s)")
    return 1 if check.failed else 0


def main_signal_test(o):
    """The test as a child, SIGTERM once its first case is done (reshards under way): it must
    exit with the signal's status having left nothing behind."""
    if os.geteuid() != 0:
        skip("the cluster hosts test needs root to create network namespaces")
    argv = [PYTHON, SCRIPT, o.bin_dir, "--hosts", str(o.hosts), "--seed", str(o.seed),
            "--staging", str(o.staging), "--timeout", str(o.timeout)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         stdin=subprocess.DEVNULL)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    tag = work = None
    out = []
    try:
        for line in p.stdout:
            out.append(line)
            if line.startswith("netns_tag="):
                tag = line.strip().split("=", 1)[1]
            if line.startswith("work_dir="):
                work = line.strip().split("=", 1)[1]
            if line.startswith("SKIPPED"):
                print(line.strip())
                return SKIP if p.wait() == SKIP else 1
            if line.startswith("case "):  # tensors made, reshards under way
                p.send_signal(signal.SIGTERM)
                break
        rest, _ = p.communicate(timeout=120)
        out.append(rest)
    except Interrupted as e:  # this process signalled: the child tears down before we leave
        print(f"test_cluster_hosts --signal-test: {e}", file=sys.stderr, flush=True)
        return e.status
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    text = "".join(out)
    print(text, end="")
    fails = []
    if not (tag and work and "\ncase " in text):
        fails.append("the child never got through its first case")
    if p.returncode != 128 + signal.SIGTERM:
        fails.append(f"the child exited with {p.returncode}, not {128 + signal.SIGTERM}")
    if "teardown_left=none" not in text:
        fails.append("the child did not report a clean tear-down")
    if tag and work:
        left = left_behind(tag, work)
        if left:
            fails.append(f"left behind: {left}")
    for f in fails:
        print(f"FAIL: {f}")
    print(f"signal test: {'passed' if not fails else 'failed'}")
    return 1 if fails else 0


def main(argv):
    a = argparse.ArgumentParser(prog="test_cluster_hosts.py",
                                description="The host-aware plans end to end on simulated hosts "
                                            "of two ranks each (root only).")
    a.add_argument("bin_dir", help="the build's bin directory (tshardd, tshard)")
    a.add_argument("--hosts", type=int, default=2, choices=(2, 3), help="simulated hosts")
    a.add_argument("--seed", type=int, default=1, help="the shapes' and values' seed")
    a.add_argument("--staging", type=int, default=0, metavar="BYTES",
                   help="the daemons' --staging (and the offline plan's); default theirs")
    a.add_argument("--timeout", type=int, default=150, metavar="SEC",
                   help="tear down and fail after SEC seconds (default 150)")
    a.add_argument("--signal-test", action="store_true",
                   help="run the test as a child and SIGTERM it in the middle of its cases")
    o = a.parse_args(argv)
    if o.timeout < 1:
        a.error(f"--timeout {o.timeout}: expected at least 1 second")
    if o.staging < 0:
        a.error(f"--staging {o.staging}: expected a number of bytes (0: the daemons' default)")
    return main_signal_test(o) if o.signal_test else main_test(o)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
