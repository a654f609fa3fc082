#!/usr/bin/python3
"""tshard-bench-hosts - tensor moves across simulated hosts, timed against the link's bound.

Root only. It builds simulated hosts (--hosts, default 2; a list such as 2,3 runs each count in
turn), each a network namespace whose processes also get a UTS namespace of their own (the
host's own hostname: Open MPI names its shared-memory segments and session directories after
the hostname, and ranks of two hosts that shared them would crash), joined by veth pairs to a
bridge in a switch namespace, with addresses in a 10.214.X.0/24 range that exists only inside
these namespaces. Every host's link is shaped with tc tbf to --rate on both of its ends (the
host's eth0 and the switch's port: each direction of the link), then verified by timed TCP
transfers between two hosts (one way, then both ways at once). mpirun starts --ranks-per-host
tshardd daemons on every host, rank by rank host by host (host 1 holds ranks 0..P-1), through a
remote-shell agent that enters each host's namespaces: ranks of one host move data through Open
MPI's shared memory (vader), ranks of two hosts through TCP over the shaped links. This build's
Python package drives the daemons from the root namespace (a Unix socket is a file: a client in
any network namespace reaches it). Everything it made is torn down on exit, on an error, on
SIGINT, SIGTERM or SIGHUP and after --timeout: the daemons, mpirun, the namespaces, the work
directory, and what Open MPI leaves of a killed job under the hosts' hostnames (/tmp/ompi.*,
/dev/shm/vader_segment.*); the last line, teardown_left, says what, if anything, is left.

Printed, as key=value lines (the keys of a host count other than 2 start with h<H>_):
  mpi_flags             the Open MPI transport flags of the daemons and of the mpi4py reference
  netns_tag, work_dir   the prefix of the namespaces' names, the work directory (both removed)
  cpus, load_before, load_after   this machine's cores (every simulated host shares them) and
                        its 1-minute load average before and after the runs (others' work)
  rate, link_verified_mbps, link_verified_MBps   the tc rate asked for, and what one TCP flow
                        from host 1 to host 2 carried (payload bits or bytes per second, 1e6)
  link_duplex_MBps      the slower of two flows run at once, host 1 -> 2 and host 2 -> 1
  link_overhead_pct     bytes the switch ports counted during the one-way flow, beyond its
                        payload (headers, acknowledgements), in percent of the payload
  tensor_shape, tensor_mib   the f32 tensor of every case ([D, D], D a multiple of the ranks)
  rank_hosts            the host of every rank, checked from the daemons' network namespaces
  idle_Bps              bytes per second the switch ports counted with the daemons idle
  <case>_ms             median (over --repeat) of the time from the reshard's request until
                        EVERY rank has finished it: the later of the answer to the client (on
                        rank 0) and the moment each other rank has the new attribute (a
                        describe of the tensor on every rank, polled from the request on: a
                        rank's catalog entry stays busy while the operation runs there, so a
                        describe that reaches it then is answered only after that rank's part,
                        with the new attribute)
  <case>_first_ms       the same time of the case's first reshard, made before the timed ones
                        and not in the median (the first move of a size maps and fills new
                        buffers, which the pool then reuses; mpi4py's runs have a warm-up too)
  <case>_client_ms      median time until the answer reached the client (what the client sees)
  <case>_rank0_ms       median of the time rank 0's daemon reports for its part (the answer's ms)
  <case>_needed_mib     the bytes that must cross between hosts (formulas below)
  <case>_bound_ms       the bytes that must enter or leave the busiest host (in its busier
                        direction) over link_verified_MBps
  <case>_vs_bound       <case>_ms / <case>_bound_ms
  <case>_crossed_mib    the bytes that crossed: the switch ports' rx counters (what the hosts
                        sent into the switch) from the request until every rank had finished,
                        minus idle_Bps over that interval, per reshard (divided by the repeats)
  <case>_busiest_mib    the busiest host's busier direction, from its switch port's counters
  <case>_strategy       the strategy the reshard's answer names (joined by + when runs differ)
  <case>_mpi4py_ms, <case>_mpi4py_vs_bound   the same bytes moved by one mpi4py collective on
                        the same hosts and ranks in the same run (before the daemons start):
                        Alltoall (s0_s1), Allgather (s0_r), Allreduce (p_r),
                        Reduce_scatter_block (p_s0), Bcast (r_host1_r_all); the slowest rank's
                        time, median of --repeat after a warm-up; <case>_mpi4py_crossed_mib
                        the bytes the switch ports counted per run (its barrier included)
  small_4096_hosts_us   p50 of --small-iters S(0)<->S(1) reshards (alternating) of a 4 KiB f32
                        [32, 32] tensor over every rank, one synchronous Python call each (the
                        time the client sees); small_4096_hosts_p90_us its p90,
                        small_4096_hosts_rank0_us the median of rank 0's own time (its answer's)
  small_4096_hosts_spans_rank0_us, small_4096_hosts_spans_others_us   where the time went, from the
                        daemons' trace rings: the median of each span (span:us, ...) on rank 0,
                        the origin, and on the other ranks; small_4096_hosts_outside_daemon_us
                        the client's p50 less rank 0's median received..answered;
                        small_4096_hosts_timeline_{rank0,host1,remote}_us when each trace point
                        was reached (median, us after rank 0's submitted, in rank 0's clock) on
                        rank 0, on the other ranks of host 1 and on the ranks of other hosts
  small_4096_hosts_raw_us, small_4096_hosts_vs_raw   p50 of a hand-written mpi4py Alltoallv of
                        the same pieces (the slowest rank's time per call; --small-iters calls
                        before the daemons start and as many after they stopped), and the ratio
  target_vs_bound, target_crossed_pct, target_small_vs_raw   the targets: every <case>_vs_bound
                        <= 1.15, every <case>_crossed_mib within 2% of <case>_needed_mib,
                        small_4096_hosts_us <= 2 x small_4096_hosts_raw_us
  targets_missed        the keys that missed them (or none). A missed target does not change
                        the exit status: 0 when every measurement ran, 1 when one failed
                        (its reason on stderr), 2 for a bad command line or no root.

The cases (H hosts of P ranks, T the tensor's bytes; "host 1" and "host 2" are the first two):
  s0_s1             S(0) -> S(1) over every rank
  xgroup_s0_s1      S(0) on host 1's ranks -> S(1) on host 2's ranks
  s0_r              S(0) -> R over every rank
  interleaved_s0_r  S(0) -> R on the mesh whose positions alternate hosts (@0,2,1,3 for 2 x 2)
  p_r               P(sum) -> R over every rank (every rank holds a whole partial tensor)
  p_s0              P(sum) -> S(0) over every rank
  xgroup_s0_r       S(0) on host 1 -> R on host 2
  s0_host1_r_all    S(0) on host 1 -> R on every rank
  r_host1_r_all     R on host 1 -> R on every rank
Each case: the tensor created under the source attribute and put (whole, or for P(sum) each
rank's partial by put_slice), then --repeat timed reshards to the target, each followed by an
untimed one back (and a wait until every rank is back); the tensor got after the last timed one
is compared with what was put (or with the sum of the partials).

A benchmark, not a test: the figures of a shared 2-core machine are noisy.

usage: tshard-bench-hosts [--hosts LIST] [--also-3] [--ranks-per-host P] [--rate RATE]
       [--repeat N] [--size-mib M] [--small-iters K] [--cases LIST] [--strategy S]
       [--keep-log FILE] [--quick] [--timeout SEC] [--help]
"""
import argparse
import glob
import json
import math
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.realpath(__file__))
SCRIPT = os.path.realpath(__file__)
PYTHON = "/usr/bin/python3"
JOB = "bench-hosts"
SMALL_DIM = 32  # the small tensor: f32 [32, 32], 4 KiB

# Open MPI's TCP transport as the daemons and the reference use it. The default btl_tcp_flags
# (send,put,inplace,...) move a large message by the emulated RDMA put protocol, and two ranks
# of different hosts sending to each other at once then got about half the link each way (28
# of 60 MB/s here, measured with mpi4py Sendrecv of 64 MiB across the shaped link); without
# "put" a large message goes as pipelined send fragments and both directions of the connection
# stream at once (about 55-59 MB/s each way). The interfaces are the test range only. The
# simulated hosts share this machine's cores (4 or 6 ranks on 2 here), which Open MPI cannot see
# (each host's ranks fit its slots): a rank that waits yields its core (mpi_yield_when_idle), as
# Open MPI does by itself on one oversubscribed node; without it the ranks' busy polling took the
# cores from the ranks with work (a 4 KiB Alltoallv across two hosts: 9.7 ms against 0.2 ms).
TCP_FLAGS = "send,inplace"


def transport_flags(net, single_copy):
    return ["--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_flags", TCP_FLAGS,
            "--mca", "btl_tcp_if_include", f"{net}.0/24",
            "--mca", "oob_tcp_if_include", f"{net}.0/24",
            "--mca", "btl_vader_single_copy_mechanism", single_copy,
            "--mca", "mpi_yield_when_idle", "1"]


class SetupError(Exception):
    """The simulated hosts, the link or the daemons could not be made ready: exit status 1."""


class Interrupted(BaseException):
    """A signal or --timeout: tear down and leave."""

    def __init__(self, why, status):
        super().__init__(why)
        self.status = status


def run(argv, check=True, timeout=60, quiet=False):
    """Runs a command; its stdout. A failure raises SetupError naming the command and its
    error output."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise SetupError(f"{' '.join(argv)}: exit status {p.returncode}: {p.stderr.strip()}")
    if not quiet and p.returncode != 0:
        print(f"tshard-bench-hosts: {' '.join(argv)}: {p.stderr.strip()}", file=sys.stderr)
    return p.stdout


def wait_line(proc, want, deadline, what):
    """Reads proc's stdout until a line starting with `want` (returned) or the deadline."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SetupError(f"{what}: no '{want}' line in time")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            if not line:
                raise SetupError(f"{what}: ended (exit status {proc.wait()}) before '{want}'")
            if line.startswith(want):
                return line.strip()


def tbf_args(rate_bps):
    # A bucket of at least 512 KiB, and of 4 ms at the rate: a veth hands tbf 64 KiB GSO
    # packets, and a bucket smaller than a packet would cut the rate; the queue holds 20 ms.
    burst = max(512 << 10, int(rate_bps / 8 * 0.004))
    return ["burst", str(burst), "latency", "20ms"]


def parse_rate(text):
    """tc's rate text (500mbit, 1gbit, 2000kbit, 100mbps...) in bits per second."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)", text)
    if not m:
        raise ValueError(f"--rate {text}: expected a number and bit, kbit, mbit, gbit (bits per "
                         f"second) or bps, kbps, mbps, gbps (bytes per second), e.g. 500mbit")
    scale = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3,
             "mbps": 8e6, "gbps": 8e9}[m.group(2)]
    bps = float(m.group(1)) * scale
    if not 1e6 <= bps <= 100e9:
        raise ValueError(f"--rate {text}: expected 1mbit to 100gbit")
    return bps


# ---- the simulated hosts ---------------------------------------------------------------------

class Hosts:
    """H network namespaces joined by veth pairs to a bridge in a switch namespace, every link
    shaped on both ends, and the remote-shell agent mpirun launches remote ranks through."""

    def __init__(self, count, rate, work):
        tag = f"tsbh{os.getpid() % 10000}"
        self.tag, self.count, self.rate, self.work = tag, count, rate, work
        self.net = f"10.214.{os.getpid() % 200 + 20}"
        self.sw = f"{tag}sw"
        self.ns = [f"{tag}h{i + 1}" for i in range(count)]
        self.hostname = [f"{tag}-host{i + 1}" for i in range(count)]
        self.addr = [f"{self.net}.{i + 1}" for i in range(count)]
        self.agent = os.path.join(work, "ns-rsh")
        self.made = []

    def names(self):
        return [self.sw] + self.ns

    def up(self):
        have = run(["ip", "netns", "list"])
        for n in self.names():
            if re.search(rf"^{n}\b", have, re.M):
                raise SetupError(f"a network namespace named {n} exists already")
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
            # both directions of the link: what host i sends (its eth0) and receives (the port)
            for ns, dev in ((h, "eth0"), (self.sw, port)):
                run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                     "rate", f"{int(self.rate)}bit"] + tbf_args(self.rate))
        cases = "".join(f"  {a}) ns={n} name={hn} ;;\n"
                        for a, n, hn in zip(self.addr, self.ns, self.hostname))
        with open(self.agent, "w") as f:
            f.write("#!/bin/sh\n"
                    "# ns-rsh HOST COMMAND: runs COMMAND in HOST's network namespace under HOST's\n"
                    "# own hostname (a UTS namespace of its own); mpirun's remote-shell agent.\n"
                    "host=$1; shift\n"
                    f"case $host in\n{cases}"
                    "  *) echo \"ns-rsh: unknown host $host\" >&2; exit 255 ;;\n"
                    "esac\n"
                    "exec ip netns exec \"$ns\" unshare --uts /bin/sh -c "
                    "'hostname \"$0\" && eval \"$1\"' \"$name\" \"$*\"\n")
        os.chmod(self.agent, 0o700)

    def add_ns(self, name):
        try:
            run(["ip", "netns", "add", name])
        except SetupError as e:
            raise SetupError(f"cannot create network namespaces here ({e})") from None
        self.made.append(name)

    def in_host(self, i, argv):
        """argv run in host i's network namespace under its hostname."""
        return ["ip", "netns", "exec", self.ns[i], "unshare", "--uts", "/bin/sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname[i]] + argv

    def counters(self):
        return switch_counters(self.sw, self.count)

    def kill_inside(self):
        """Kills whatever still runs in these namespaces (only what this program started)."""
        for n in self.made:
            pids = run(["ip", "netns", "pids", n], check=False, quiet=True).split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def litter(self):
        """What Open MPI leaves of a killed job under the hosts' hostnames: its session
        directories and shared-memory segments."""
        return [p for d, pre in (("/tmp", "ompi."), ("/dev/shm", "vader_segment."))
                for p in glob.glob(os.path.join(d, f"{pre}{self.tag}-host*"))]

    def down(self):
        self.kill_inside()
        for n in reversed(self.made):
            run(["ip", "netns", "del", n], check=False)
        self.made = []
        for p in self.litter():
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:  # gone meanwhile; left() reports what stays
                    pass

    def left(self):
        have = run(["ip", "netns", "list"], check=False, quiet=True)
        return [n for n in self.names() if re.search(rf"^{n}\b", have, re.M)] + self.litter()


def switch_counters(sw, count):
    """Per host i: (bytes it sent into the switch, bytes the switch delivered to it), from the
    switch's port p<i+1> (`ip -n` enters the switch's namespace from any other)."""
    links = json.loads(run(["ip", "-n", sw, "-s", "-j", "link", "show"]))
    got = {ln["ifname"]: ln["stats64"] for ln in links if "stats64" in ln}
    return [(got[f"p{i + 1}"]["rx"]["bytes"], got[f"p{i + 1}"]["tx"]["bytes"])
            for i in range(count)]


def crossed(before, after):
    """(bytes all hosts sent into the switch, the busiest host's busier direction)."""
    d = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before)]
    return sum(x[0] for x in d), max(max(x) for x in d)


# ---- the link check --------------------------------------------------------------------------

def link_recv(port, nbytes):
    """Hidden mode (run inside a host): receives nbytes on port; prints 'listening', then
    'received BYTES SECONDS' (first byte to last)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    print("listening", flush=True)
    s.settimeout(120)
    c, _ = s.accept()
    c.settimeout(120)
    buf = bytearray(1 << 20)
    got, t0 = 0, None
    while got < nbytes:
        k = c.recv_into(buf)
        if not k:
            break
        if t0 is None:
            t0 = time.perf_counter()
        got += k
    print(f"received {got} {time.perf_counter() - t0:.6f}", flush=True)
    c.sendall(b"k")
    return 0 if got == nbytes else 1


def link_send(addr, port, nbytes):
    """Hidden mode: sends nbytes to addr:port, then waits for the receiver's last byte."""
    c = socket.create_connection((addr, port), timeout=120)
    b = bytes(1 << 20)
    sent = 0
    while sent < nbytes:
        sent += c.send(b[:min(len(b), nbytes - sent)])
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    return 0


def flows(hosts, pairs, nbytes):
    """Runs TCP flows (src host, dst host) at once; each one's payload bytes per second."""
    recvs, sends = [], []
    try:
        for k, (_, dst) in enumerate(pairs):
            argv = hosts.in_host(dst, [PYTHON, SCRIPT, "--link-recv", str(5201 + k), str(nbytes)])
            recvs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                          stdin=subprocess.DEVNULL))
        for p in recvs:
            wait_line(p, "listening", time.monotonic() + 30, "the link check's receiver")
        for k, (src, dst) in enumerate(pairs):
            argv = hosts.in_host(src, [PYTHON, SCRIPT, "--link-send", hosts.addr[dst],
                                       str(5201 + k), str(nbytes)])
            sends.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        rates = []
        for p in recvs:
            line = wait_line(p, "received", time.monotonic() + 30 + nbytes / 1e6,
                             "the link check's transfer")
            _, got, secs = line.split()
            if int(got) != nbytes:
                raise SetupError(f"the link check received {got} of {nbytes} bytes")
            rates.append(nbytes / float(secs))
        for p in sends + recvs:
            p.wait(timeout=30)
        return rates
    finally:
        for p in sends + recvs:
            if p.poll() is None:
                p.kill()
                p.wait()


def verify_link(hosts, nbytes, out):
    before = hosts.counters()
    one = flows(hosts, [(0, 1)], nbytes)[0]
    sent, _ = crossed(before, hosts.counters())
    both = min(flows(hosts, [(0, 1), (1, 0)], nbytes))
    out.put("link_verified_mbps", f"{one * 8 / 1e6:.1f}")
    out.put("link_verified_MBps", f"{one / 1e6:.2f}")
    out.put("link_duplex_MBps", f"{both / 1e6:.2f}")
    out.put("link_overhead_pct", f"{(sent - nbytes) / nbytes * 100:.2f}")
    if one < 0.5 * hosts.rate / 8:
        print(f"tshard-bench-hosts: warning: one flow carried {one / 1e6:.1f} MB/s, under half "
              f"the rate asked for ({hosts.rate / 8e6:.1f} MB/s)", file=sys.stderr)
    return one


# ---- the daemons -----------------------------------------------------------------------------

def mpi_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for k in ("OMPI_MCA_btl", "OMPI_MCA_rmaps_base_oversubscribe",
              "OMPI_MCA_btl_vader_single_copy_mechanism"):
        env.pop(k, None)
    return env


def mpirun_argv(hosts, nhosts, per_host, single_copy, work, program):
    hostfile = os.path.join(work, f"hostfile{nhosts}")
    with open(hostfile, "w") as f:
        f.writelines(f"{a} slots={per_host}\n" for a in hosts.addr[:nhosts])
    return hosts.in_host(0, ["mpirun", "--hostfile", hostfile, "-np", str(nhosts * per_host),
                             "--mca", "plm_rsh_agent", hosts.agent,
                             "--mca", "plm_rsh_no_tree_spawn", "1",
                             "--mca", "orte_startup_timeout", "45"]
                         + transport_flags(hosts.net, single_copy) + forwarded_env() + program)


def forwarded_env():
    """-x for every TSHARD_* variable of this environment (TSHARD_NET_BELLS=0, say), so that a
    run can compare a daemon setting: mpirun passes them to the ranks of every host."""
    return [x for name in sorted(os.environ) if name.startswith("TSHARD_") for x in ("-x", name)]


def stop_group(proc, grace):
    """Ends an mpirun we started (its process group): TERM, then KILL after `grace` s."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


class Job:
    """tshardd on nhosts x per_host ranks, started by mpirun in host 1."""

    def __init__(self, hosts, nhosts, per_host, single_copy, work, tshardd):
        self.hosts, self.nhosts, self.per_host = hosts, nhosts, per_host
        self.n = nhosts * per_host
        self.single_copy, self.work, self.tshardd = single_copy, work, tshardd
        self.log = os.path.join(work, f"daemons{nhosts}.log")
        self.proc = None
        self.pids = {}
        self.keep_log = None

    def socket(self, rank):
        return os.path.join(self.work, f"tshard-{JOB}-{rank}.sock")

    def start(self):
        for attempt in (1, 2):
            if self.launch():
                return
            print(f"tshard-bench-hosts: the daemons did not all start (attempt {attempt}); "
                  f"mpirun's output:", file=sys.stderr)
            with open(self.log) as f:
                sys.stderr.write(f.read()[-4000:])
            stop_group(self.proc, 2)
            self.hosts.kill_inside()
            self.proc = None
        raise SetupError(f"the daemons could not be started across {self.nhosts} hosts")

    def launch(self):
        argv = mpirun_argv(self.hosts, self.nhosts, self.per_host, self.single_copy, self.work,
                           [self.tshardd, "--job", JOB, "--socket-dir", self.work])
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=mpi_env(),
                                         start_new_session=True)
        deadline = time.monotonic() + 90
        pat = re.compile(rf"ready: job {JOB} rank (\d+) of (\d+) pid (\d+)")
        while time.monotonic() < deadline and self.proc.poll() is None:
            with open(self.log) as f:
                self.pids = {int(m.group(1)): int(m.group(3)) for m in pat.finditer(f.read())}
            if len(self.pids) == self.n:
                return True
            time.sleep(0.1)  # polling the ready lines, bounded by the deadline
        return False

    def placement(self):
        """The host (1-based) of every rank, from its daemon's network namespace; checks that
        rank r lives on host r // P + 1 and that each host has a hostname of its own."""
        where, names = [], {}
        for r in range(self.n):
            pid = self.pids[r]
            ns = run(["ip", "netns", "identify", str(pid)]).strip()
            if ns not in self.hosts.ns:
                raise SetupError(f"rank {r} (pid {pid}) runs in namespace '{ns}', not a host's")
            h = self.hosts.ns.index(ns)
            name = run(["nsenter", "-t", str(pid), "-u", "hostname"]).strip()
            names.setdefault(h, set()).add(name)
            where.append(h + 1)
            if h != r // self.per_host:
                raise SetupError(f"rank {r} runs on host {h + 1}, not on host "
                                 f"{r // self.per_host + 1} (ranks host by host)")
        flat = [n for s in names.values() for n in s]
        if len(flat) != len(set(flat)) or any(len(s) != 1 for s in names.values()):
            raise SetupError(f"the hosts' hostnames are not one per host: {names}")
        return where

    def stop(self, c0):
        """A shutdown through c0 (None: none, after a signal or a failed start), then mpirun's
        process group and whatever still runs in the namespaces are ended."""
        if self.proc is None:
            return
        if c0 is not None and self.proc.poll() is None:
            try:
                c0.shutdown()
                self.proc.wait(timeout=30)
            except Exception as e:  # the daemons are stopped below all the same
                print(f"tshard-bench-hosts: shutdown: {e}", file=sys.stderr)
        stop_group(self.proc, 3)  # an mpirun that did not end by itself
        self.hosts.kill_inside()
        self.proc = None
        if self.keep_log:
            shutil.copyfile(self.log, f"{self.keep_log}.{self.nhosts}")


# ---- geometry and the cases ------------------------------------------------------------------

def span(a, b):
    return f"{a}-{b}" if b > a else f"{a}"


class Geometry:
    """Meshes of H hosts of P ranks, ranks host by host."""

    def __init__(self, nhosts, per_host):
        self.h, self.p, self.n = nhosts, per_host, nhosts * per_host

    def all(self, place):
        return f"mesh=[{self.n}]@{span(0, self.n - 1)} placements=[{place}]"

    def host(self, i, place):  # i: 0-based
        a = i * self.p
        return f"mesh=[{self.p}]@{span(a, a + self.p - 1)} placements=[{place}]"

    def interleaved(self, place):
        order = [(m % self.h) * self.p + m // self.h for m in range(self.n)]
        return f"mesh=[{self.n}]@{','.join(map(str, order))} placements=[{place}]"


# Each case: key, source and target attributes, whether the source is partial, the mpi4py
# collective that moves the same bytes by hand (or None), and two fractions of the tensor's
# bytes T derived from first principles for H hosts (P ranks each, balanced blocks):
#   needed  - bytes that must cross between hosts in all (the sum of what every host must
#             receive, each byte entering a host that lacks it once),
#   busiest - bytes through the busiest host's link in its busier direction (in or out), the
#             link's bound being busiest / rate.
# s0_s1:  host a holds rows a, needs columns a: from every other host b the block (rows b,
#         columns a) = T/H^2; in = out = (H-1)T/H^2 per host, (H-1)T/H in all.
# xgroup_s0_s1: every byte lives on host 1 and must reach host 2: T out of 1, T into 2; T in all.
# s0_r, interleaved_s0_r: each host holds T/H (the interleaved mesh spreads a host's blocks but
#         not their sum) and lacks (H-1)T/H; its T/H must reach H-1 hosts: in = out = (H-1)T/H
#         per host, (H-1)T in all (each block enters each other host once, then spreads inside).
# p_r:    reduced inside each host first, the H host partials form an allreduce of T between H
#         parties, whose per-party lower bound is 2(H-1)T/H each way (reduce-scatter, then
#         all-gather: Patarasuk and Yuan); 2(H-1)T in all.
# p_s0:   a reduce-scatter between the H host partials: each host must send the other hosts'
#         rows (H-1)T/H and receive the others' partials of its own rows, (H-1)T/H; (H-1)T in all.
# xgroup_s0_r: host 2 must receive T once (then copy inside): T, T.
# s0_host1_r_all, r_host1_r_all: each of the H-1 other hosts must receive T, and all of it
#         leaves host 1 at least once: busiest T, (H-1)T in all.
CASES = [
    ("s0_s1", lambda g: g.all("S(0)"), lambda g: g.all("S(1)"), False, "alltoall",
     lambda h: (h - 1) / h, lambda h: (h - 1) / h ** 2),
    ("xgroup_s0_s1", lambda g: g.host(0, "S(0)"), lambda g: g.host(1, "S(1)"), False, None,
     lambda h: 1.0, lambda h: 1.0),
    ("s0_r", lambda g: g.all("S(0)"), lambda g: g.all("R"), False, "allgather",
     lambda h: h - 1.0, lambda h: (h - 1) / h),
    ("interleaved_s0_r", lambda g: g.interleaved("S(0)"), lambda g: g.interleaved("R"), False,
     None, lambda h: h - 1.0, lambda h: (h - 1) / h),
    ("p_r", lambda g: g.all("P(sum)"), lambda g: g.all("R"), True, "allreduce",
     lambda h: 2.0 * (h - 1), lambda h: 2.0 * (h - 1) / h),
    ("p_s0", lambda g: g.all("P(sum)"), lambda g: g.all("S(0)"), True, "reduce_scatter",
     lambda h: h - 1.0, lambda h: (h - 1) / h),
    ("xgroup_s0_r", lambda g: g.host(0, "S(0)"), lambda g: g.host(1, "R"), False, None,
     lambda h: 1.0, lambda h: 1.0),
    ("s0_host1_r_all", lambda g: g.host(0, "S(0)"), lambda g: g.all("R"), False, None,
     lambda h: h - 1.0, lambda h: 1.0),
    ("r_host1_r_all", lambda g: g.host(0, "R"), lambda g: g.all("R"), False, "bcast",
     lambda h: h - 1.0, lambda h: 1.0),
]


def splits(length, parts):
    """Balanced split sizes, the remainder to the first parts (the daemons' default)."""
    q, r = divmod(length, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


# ---- the mpi4py reference (hidden mode, one process per rank under mpirun) -------------------

def mpi_rank(argv):
    from mpi4py import MPI
    import numpy as np
    a = argparse.ArgumentParser(prog="tshard-bench-hosts --mpi-rank")
    a.add_argument("--dim", type=int, required=True)
    a.add_argument("--repeat", type=int, required=True)
    a.add_argument("--small-iters", type=int, required=True)
    a.add_argument("--switch", required=True)
    a.add_argument("--ports", type=int, required=True)
    a.add_argument("--small-only", action="store_true")
    o = a.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    e = o.dim * o.dim

    def timed(key, fn, reps, warm, scale, count=True):
        """Prints the slowest rank's time of each run, and with `count` the bytes the switch
        ports counted from before the run's barrier until every rank had its time."""
        for k in range(-warm, reps):
            before = switch_counters(o.switch, o.ports) if count and rank == 0 else None
            comm.Barrier()
            t0 = MPI.Wtime()
            fn()
            dt = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
            if rank == 0 and k >= 0:
                print(f"mpi4py {key} {dt * scale:.3f}", flush=True)
                if count:
                    sent = crossed(before, switch_counters(o.switch, o.ports))[0]
                    print(f"mpi4py {key}_crossed {sent}", flush=True)

    def check(ok, what):
        if not ok:
            print(f"rank {rank}: the mpi4py {what} delivered wrong values", file=sys.stderr)
            comm.Abort(1)

    def big():  # the large moves; their buffers go with the call
        blk = np.full(e // n, rank + 1, np.float32)  # this rank's rows, packed by destination
        out = np.zeros(e // n, np.float32)
        timed("alltoall", lambda: comm.Alltoall(blk, out), o.repeat, 1, 1e3)
        check(out[-1] == n, "Alltoall")
        whole = np.zeros(e, np.float32)
        timed("allgather", lambda: comm.Allgather(blk, whole), o.repeat, 1, 1e3)
        check(whole[-1] == n, "Allgather")
        part = np.ones(e, np.float32)
        timed("allreduce", lambda: comm.Allreduce(part, whole, op=MPI.SUM), o.repeat, 1, 1e3)
        check(whole[-1] == n, "Allreduce")
        timed("reduce_scatter", lambda: comm.Reduce_scatter_block(part, out, op=MPI.SUM),
              o.repeat, 1, 1e3)
        check(out[-1] == n, "Reduce_scatter_block")
        if rank == 0:
            whole[:] = 7
        timed("bcast", lambda: comm.Bcast(whole, root=0), o.repeat, 1, 1e3)
        check(whole[-1] == 7, "Bcast")

    if not o.small_only:
        big()
    # The small reshard's pieces: rank i's rows x rank j's columns of an f32 [32, 32].
    rows, cols = splits(SMALL_DIM, n), splits(SMALL_DIM, n)
    scount = [rows[rank] * cols[j] for j in range(n)]
    rcount = [rows[i] * cols[rank] for i in range(n)]
    sdisp = [sum(scount[:j]) for j in range(n)]
    rdisp = [sum(rcount[:i]) for i in range(n)]
    src = np.full(sum(scount), rank + 1, np.float32)
    dst = np.zeros(sum(rcount), np.float32)
    timed("small", lambda: comm.Alltoallv([src, scount, sdisp, MPI.FLOAT],
                                          [dst, rcount, rdisp, MPI.FLOAT]),
          o.small_iters, 10, 1e6, count=False)
    check(dst.size == 0 or dst[-1] == n, "Alltoallv")
    return 0


def mpi_reference(hosts, geom, single_copy, work, dim, repeat, small_iters, small_only=False):
    """Runs the mpi4py job on the same hosts and ranks; {key: [values]} (ms; small in us)."""
    argv = mpirun_argv(hosts, geom.h, geom.p, single_copy, work,
                       [PYTHON, SCRIPT, "--mpi-rank", "--dim", str(dim), "--repeat", str(repeat),
                        "--small-iters", str(small_iters), "--switch", hosts.sw,
                        "--ports", str(geom.h)] + (["--small-only"] if small_only else []))
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL, env=mpi_env(), start_new_session=True)
    try:
        so, se = p.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        stop_group(p, 3)
        hosts.kill_inside()
        raise RuntimeError("the mpi4py reference did not finish within 600 s")
    got = {}
    for line in so.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "mpi4py":
            got.setdefault(f[1], []).append(float(f[2]))
    if p.returncode != 0:
        raise RuntimeError(f"the mpi4py reference failed (exit status {p.returncode}): "
                           f"{se.strip()[-2000:]}")
    return got


# ---- measuring reshards ----------------------------------------------------------------------

class Out:
    """key=value lines, printed at once; the values kept for the targets."""

    def __init__(self):
        self.v = {}

    def put(self, key, value):
        self.v[key] = value
        print(f"{key}={value}", flush=True)


def timed_reshard(c0, probes, name, target, old, strategy=None):
    """One reshard from rank 0's client (`strategy` forced, or the planner's choice); (seconds to
    its answer, seconds until every rank has the new attribute, strategy). probes: a client per
    other rank, each polling describe."""
    import tshard
    done = [0.0] * len(probes)
    fail = []
    go, stop = threading.Event(), threading.Event()

    def probe(i, c):
        go.wait()
        try:
            while not stop.is_set():
                if c.describe(name)["attr"] != old:
                    done[i] = time.perf_counter()
                    return
                time.sleep(0.0005)  # this rank has not started it yet: poll again
        except tshard.TshardError as e:
            fail.append(e)

    threads = [threading.Thread(target=probe, args=(i, c), daemon=True)
               for i, c in enumerate(probes)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    go.set()
    try:
        r = c0.reshard(name, target, strategy=strategy)
    except BaseException:
        stop.set()  # the probes see the old attribute and leave
        for t in threads:
            t.join(timeout=5)
        raise
    t1 = time.perf_counter()
    for t in threads:
        t.join(timeout=600)
    stop.set()
    if fail:
        raise fail[0]
    if any(t.is_alive() for t in threads):
        raise RuntimeError(f"a rank did not finish the reshard of '{name}' within 600 s")
    return t1 - t0, max([t1] + done) - t0, r["strategy"] or "unknown", r["ms"]


def settle(clients, name, want):
    """Waits until every rank's describe shows attribute `want` (a describe of a name whose
    operation runs there is answered after it)."""
    deadline = time.monotonic() + 600
    for c in clients:
        while c.describe(name)["attr"] != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"'{name}' did not reach {want} on every rank")
            time.sleep(0.0005)  # polling for the operation to start there


def quiet_drop(c0, name):
    """The drop after a failure or a signal: a call that a signal cut short leaves its answer
    unread, so the drop may fail too; the first error (or the signal) is the one that stands."""
    import tshard
    try:
        c0.drop(name)
    except (tshard.TshardError, OSError):
        pass


def run_case(case, geom, clients, hosts, dim, repeat, idle_bps, strategy):
    """Times one case; a dict of its figures."""
    import numpy as np
    key, src_of, dst_of, partial = case[:4]
    src, dst = src_of(geom), dst_of(geom)
    c0 = clients[0]
    name = f"bh_{key}"
    e = dim * dim
    base = (np.arange(e, dtype=np.int64) % 1009).astype(np.float32).reshape(dim, dim)
    c0.create(name, "f32", (dim, dim), src)
    try:
        if partial:
            for c in clients:
                c.put_slice(name, base)
            want = base * geom.n
        else:
            c0.put(name, base)
            want = base
        old = c0.describe(name)["attr"]
        settle(clients, name, old)
        ms, client_ms, rank0_ms, strategies = [], [], [], []
        sent = busiest = 0.0
        # One reshard there and back first, timed apart: the first of a size maps and fills its
        # buffers, which the pool then keeps (the mpi4py reference has its warm-up too).
        first = timed_reshard(c0, clients[1:], name, dst, old, strategy)[1]
        c0.reshard(name, src)
        settle(clients, name, old)
        for k in range(repeat):
            before, tb = hosts.counters(), time.monotonic()
            cl, al, strat, own = timed_reshard(c0, clients[1:], name, dst, old, strategy)
            after, ta = hosts.counters(), time.monotonic()
            s, b = crossed(before, after)
            sent += max(0.0, s - idle_bps * (ta - tb))
            busiest += b
            ms.append(al * 1e3)
            client_ms.append(cl * 1e3)
            rank0_ms.append(own)
            strategies.append(strat)
            if k == repeat - 1:
                got = c0.get(name)
                if got.shape != want.shape or not np.array_equal(got, want):
                    raise RuntimeError(f"{key}: the tensor got after the reshard differs from "
                                       f"the one put")
            c0.reshard(name, src)
            settle(clients, name, old)
    except BaseException:
        quiet_drop(c0, name)
        raise
    c0.drop(name)
    return {"ms": statistics.median(ms), "first_ms": first * 1e3,
            "client_ms": statistics.median(client_ms),
            "rank0_ms": statistics.median(rank0_ms),
            "crossed": sent / repeat, "busiest": busiest / repeat,
            "strategy": "+".join(dict.fromkeys(strategies))}


def small_case(c0, geom, iters):
    import numpy as np
    name = "bh_small"
    s0, s1 = geom.all("S(0)"), geom.all("S(1)")
    data = (np.arange(SMALL_DIM * SMALL_DIM) % 509).astype(np.float32).reshape(SMALL_DIM,
                                                                               SMALL_DIM)
    c0.create(name, "f32", data.shape, s0)
    try:
        c0.put(name, data)
        for k in range(10):  # warm-up: the first calls of a shape
            c0.reshard(name, s1 if k % 2 == 0 else s0)
        times, own, strategies = [], [], []
        for k in range(iters):
            t0 = time.perf_counter()
            r = c0.reshard(name, s1 if k % 2 == 0 else s0)
            times.append(time.perf_counter() - t0)
            own.append(r["ms"] * 1e3)
            strategies.append(r["strategy"] or "unknown")
        if not np.array_equal(c0.get(name), data):
            raise RuntimeError("small: the tensor got back differs from the one put")
    except BaseException:
        quiet_drop(c0, name)
        raise
    c0.drop(name)
    times.sort()
    return (statistics.median(times) * 1e6, times[int(0.9 * (len(times) - 1))] * 1e6,
            statistics.median(own), "+".join(dict.fromkeys(strategies)))


# ---- one host count --------------------------------------------------------------------------

def pick_dim(size_mib, n):
    """The side of the square f32 tensor of about size_mib, a multiple of n (every mesh of the
    run then splits it evenly: the planner picks its uniform strategies)."""
    d = int(math.sqrt((size_mib << 20) / 4)) // n * n
    return max(d, n)


def host_count(nhosts, o, hosts, link_bps, single_copy, work, tshardd, out, failures):
    import tshard
    geom = Geometry(nhosts, o.ranks_per_host)
    pre = "" if nhosts == 2 else f"h{nhosts}_"
    dim = pick_dim(o.size_mib, geom.n)
    tbytes = dim * dim * 4
    out.put(pre + "hosts", nhosts)
    out.put(pre + "ranks", geom.n)
    out.put(pre + "tensor_shape", f"{dim}x{dim}")
    out.put(pre + "tensor_mib", f"{tbytes / (1 << 20):.2f}")
    ref = {}
    try:
        ref = mpi_reference(hosts, geom, single_copy, work, dim, o.repeat, o.small_iters)
    except RuntimeError as e:
        failures.append(f"{pre}mpi4py: {e}")
    job = Job(hosts, nhosts, o.ranks_per_host, single_copy, work, tshardd)
    job.keep_log = o.keep_log
    clients = []
    served = False  # the daemons are shut down through a client only after a run to its end
    small = None
    try:
        job.start()
        out.put(pre + "rank_hosts", ",".join(map(str, job.placement())))
        clients = [tshard.connect(socket=job.socket(r), timeout=600) for r in range(geom.n)]
        before, t0 = hosts.counters(), time.monotonic()
        time.sleep(1.0)  # the idle interval measured
        idle_bps = crossed(before, hosts.counters())[0] / (time.monotonic() - t0)
        out.put(pre + "idle_Bps", f"{idle_bps:.0f}")
        for case in (c for c in CASES if c[0] in o.cases):
            try:
                one_case(case, geom, clients, hosts, dim, o.repeat, idle_bps, tbytes, link_bps,
                         ref, pre, out, o.strategy)
            except (tshard.TshardError, RuntimeError, OSError) as e:
                failures.append(f"{pre}{case[0]}: {e}")
        try:
            small = small_case(clients[0], geom, o.small_iters) if "small" in o.cases else None
            if small:
                small_spans(clients, o.small_iters, small[0], geom.p, pre, out)
        except (tshard.TshardError, RuntimeError, OSError) as e:
            failures.append(f"{pre}small_4096_hosts: {e}")
        served = True
    finally:
        job.stop(clients[0] if clients and served else None)
        for c in clients:
            c.close()
    if small:
        small_keys(small, geom, o, hosts, single_copy, work, dim, ref, pre, out, failures)


def small_spans(clients, iters, client_us, per_host, pre, out):
    """Where the small reshards' time went, from the daemons' trace rings: the median of each
    span on rank 0 (their origin) and on the other ranks, and the client's time outside rank 0's
    received..answered."""
    from tshard.tracing import spans
    per = {}
    origin_us = []
    by_seq = {}  # seq: {rank: points}, the same operation on every rank
    for r, c in enumerate(clients):
        ops = [o for o in c.trace(last=iters)["ops"] if o["kind"] == "reshard"]
        for o in ops:
            by_seq.setdefault(o["seq"], {})[r] = o["points"]
            for name, a, b in spans(o["points"]):
                per.setdefault((r == 0, name), []).append((b - a) / 1e3)
            p = o["points"]
            if r == 0 and "received" in p and "answered" in p:
                origin_us.append((p["answered"] - p["received"]) / 1e3)
    for mine, key in ((True, "rank0"), (False, "others")):
        names = [n for (m, n) in per if m == mine]
        out.put(f"{pre}small_4096_hosts_spans_{key}_us", ",".join(
            f"{n}:{statistics.median(per[(mine, n)]):.1f}" for n in names))
    if origin_us:
        out.put(f"{pre}small_4096_hosts_outside_daemon_us",
                f"{client_us - statistics.median(origin_us):.1f}")
    timeline(by_seq, len(clients), per_host, pre, out)


def timeline(by_seq, nranks, per_host, pre, out):
    """When each point was reached, from rank 0's submitted (its order going out), in rank 0's
    clock: the medians on rank 0, on the other ranks of its host (host1) and on the ranks of
    the other hosts (remote)."""
    at = {}
    for ranks in by_seq.values():
        t0 = ranks.get(0, {}).get("submitted")
        if t0 is None or len(ranks) != nranks:
            continue
        for r, points in ranks.items():
            group = "rank0" if r == 0 else "host1" if r < per_host else "remote"
            for name, t in points.items():
                at.setdefault((group, name), []).append((t - t0) / 1e3)
    for group in ("rank0", "host1", "remote"):
        names = [n for (g, n) in at if g == group]
        names.sort(key=lambda n: statistics.median(at[(group, n)]))
        if names:
            out.put(f"{pre}small_4096_hosts_timeline_{group}_us", ",".join(
                f"{n}:{statistics.median(at[(group, n)]):.1f}" for n in names))


def small_keys(small, geom, o, hosts, single_copy, work, dim, ref, pre, out, failures):
    """The small reshard's keys; its raw reference runs before and after the daemons (the
    median of both runs' calls), so that a burst of this machine's load does not fall on one
    side only."""
    us, p90, own, strat = small
    out.put(pre + "small_4096_hosts_us", f"{us:.1f}")
    out.put(pre + "small_4096_hosts_p90_us", f"{p90:.1f}")
    out.put(pre + "small_4096_hosts_rank0_us", f"{own:.1f}")
    out.put(pre + "small_4096_hosts_strategy", strat)
    raw = list(ref.get("small", []))
    try:
        raw += mpi_reference(hosts, geom, single_copy, work, dim, o.repeat, o.small_iters,
                             small_only=True).get("small", [])
    except RuntimeError as e:
        failures.append(f"{pre}mpi4py (small, after the daemons): {e}")
    if raw:
        out.put(pre + "small_4096_hosts_raw_us", f"{statistics.median(raw):.1f}")
        out.put(pre + "small_4096_hosts_vs_raw", f"{us / statistics.median(raw):.3f}")


def one_case(case, geom, clients, hosts, dim, repeat, idle_bps, tbytes, link_bps, ref, pre,
             out, strategy):
    key, mpi_key, needed_of, busiest_of = case[0], case[4], case[5], case[6]
    r = run_case(case, geom, clients, hosts, dim, repeat, idle_bps, strategy)
    needed = needed_of(geom.h) * tbytes
    bound_ms = busiest_of(geom.h) * tbytes / link_bps * 1e3
    k = pre + key
    out.put(k + "_ms", f"{r['ms']:.2f}")
    out.put(k + "_first_ms", f"{r['first_ms']:.2f}")
    out.put(k + "_client_ms", f"{r['client_ms']:.2f}")
    out.put(k + "_rank0_ms", f"{r['rank0_ms']:.2f}")
    out.put(k + "_bound_ms", f"{bound_ms:.2f}")
    out.put(k + "_vs_bound", f"{r['ms'] / bound_ms:.3f}")
    out.put(k + "_needed_mib", f"{needed / (1 << 20):.2f}")
    out.put(k + "_crossed_mib", f"{r['crossed'] / (1 << 20):.2f}")
    out.put(k + "_busiest_mib", f"{r['busiest'] / (1 << 20):.2f}")
    out.put(k + "_strategy", r["strategy"])
    if mpi_key and mpi_key in ref:
        m = statistics.median(ref[mpi_key])
        out.put(k + "_mpi4py_ms", f"{m:.2f}")
        out.put(k + "_mpi4py_vs_bound", f"{m / bound_ms:.3f}")
        sent = statistics.mean(ref[mpi_key + "_crossed"])
        out.put(k + "_mpi4py_crossed_mib", f"{sent / (1 << 20):.2f}")


def targets(out):
    missed = []
    for key, value in out.v.items():
        if key.endswith("_vs_bound") and "_mpi4py_" not in key and float(value) > 1.15:
            missed.append(key)
        if key.endswith("_crossed_mib") and "_mpi4py_" not in key:
            need = float(out.v[key[:-len("_crossed_mib")] + "_needed_mib"])
            if abs(float(value) - need) > 0.02 * need:
                missed.append(key)
        if key.endswith("small_4096_hosts_vs_raw") and float(value) > 2.0:
            missed.append(key)
    out.put("targets_missed", ",".join(missed) if missed else "none")


# ---- the program -----------------------------------------------------------------------------

def parse_args(argv):
    a = argparse.ArgumentParser(
        prog="tshard-bench-hosts",
        usage="tshard-bench-hosts [--hosts LIST] [--also-3] [--ranks-per-host P] [--rate RATE]\n"
              "       [--repeat N] [--size-mib M] [--small-iters K] [--cases LIST]\n"
              "       [--strategy S] [--keep-log FILE] [--quick] [--timeout SEC]",
        description="Tensor moves across simulated hosts (network namespaces joined by links "
                    "shaped with tc) timed against the link's bound, with the bytes that "
                    "crossed; root only. The header of tests/bench/bench_hosts.py explains "
                    "every key printed.")
    a.add_argument("--hosts", default="2", metavar="LIST",
                   help="host counts to run, one after the other, e.g. 2 or 2,3 (2-8; default 2)")
    a.add_argument("--also-3", action="store_true", help="run 3 hosts too (as --hosts 2,3)")
    a.add_argument("--ranks-per-host", type=int, default=2, metavar="P",
                   help="daemons per host (1-8; default 2)")
    a.add_argument("--rate", default="500mbit",
                   help="every host link's rate, each way, as tc writes it (default 500mbit)")
    a.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="timed reshards per case, and mpi4py runs, medians (default 3)")
    a.add_argument("--size-mib", type=int, default=None, metavar="M",
                   help="the tensor of every case, about M MiB of f32 (default 64)")
    a.add_argument("--small-iters", type=int, default=None, metavar="K",
                   help="timed 4 KiB reshards and raw Alltoallv calls (default 200)")
    a.add_argument("--cases", default=None, metavar="LIST",
                   help="only these cases, e.g. p_s0,small (default every case and small)")
    a.add_argument("--strategy", default=None, metavar="S",
                   help="force strategy S (allreduce, hierarchical, p2p, ...) in every case "
                        "(default: the planner's choice)")
    a.add_argument("--keep-log", default=None, metavar="FILE",
                   help="copy the daemons' output to FILE.<hosts> when each host count ends")
    a.add_argument("--quick", action="store_true",
                   help="a smoke run: 16 MiB, 1 repeat, 30 small iterations (flags given win)")
    a.add_argument("--timeout", type=int, default=3600, metavar="SEC",
                   help="stop (tearing everything down) after SEC seconds (default 3600)")
    o = a.parse_args(argv)
    try:
        counts = sorted({int(x) for x in o.hosts.split(",")} | ({3} if o.also_3 else set()))
    except ValueError:
        a.error(f"--hosts {o.hosts}: expected host counts such as 2 or 2,3")
    if not all(2 <= h <= 8 for h in counts):
        a.error(f"--hosts {o.hosts}: every host count must be 2 to 8")
    o.counts = counts
    names = [c[0] for c in CASES] + ["small"]
    o.cases = names if o.cases is None else [x for x in o.cases.split(",") if x]
    unknown = [x for x in o.cases if x not in names]
    if unknown or not o.cases:
        a.error(f"--cases {','.join(unknown) or '(empty)'}: expected names among "
                f"{','.join(names)}")
    if not 1 <= o.ranks_per_host <= 8:
        a.error(f"--ranks-per-host {o.ranks_per_host}: expected 1 to 8")
    o.repeat = o.repeat if o.repeat is not None else (1 if o.quick else 3)
    o.size_mib = o.size_mib if o.size_mib is not None else (16 if o.quick else 64)
    o.small_iters = o.small_iters if o.small_iters is not None else (30 if o.quick else 200)
    if not 1 <= o.repeat <= 100:
        a.error(f"--repeat {o.repeat}: expected 1 to 100")
    if not 1 <= o.size_mib <= 1024:
        a.error(f"--size-mib {o.size_mib}: expected 1 to 1024")
    if not 1 <= o.small_iters <= 100000:
        a.error(f"--small-iters {o.small_iters}: expected 1 to 100000")
    if o.timeout < 1:
        a.error(f"--timeout {o.timeout}: expected at least 1 second")
    try:
        o.rate_bps = parse_rate(o.rate)
    except ValueError as e:
        a.error(str(e))
    return o


def single_copy_mechanism():
    """Open MPI's single-copy mechanism between ranks of one host: the caller's
    OMPI_MCA_btl_vader_single_copy_mechanism, else cma (root may read another process)."""
    return os.environ.get("OMPI_MCA_btl_vader_single_copy_mechanism") or "cma"


def on_signal(signum, frame):
    raise Interrupted(f"interrupted by {signal.Signals(signum).name}", 128 + signum)


def on_alarm(signum, frame):
    raise Interrupted("--timeout passed", 1)


def main(argv):
    o = parse_args(argv)
    if os.geteuid() != 0:
        print("tshard-bench-hosts: needs root (it creates network namespaces, shapes links with "
              "tc and runs mpirun across them); run it as root", file=sys.stderr)
        return 2
    for tool in ("ip", "tc", "unshare", "nsenter", "mpirun"):
        if not shutil.which(tool):
            print(f"tshard-bench-hosts: no '{tool}' command (iproute2, util-linux, Open MPI)",
                  file=sys.stderr)
            return 1
    tshardd = os.path.join(HERE, "tshardd")
    pypath = os.path.join(os.path.dirname(HERE), "python")
    if not os.access(tshardd, os.X_OK) or not os.path.isdir(os.path.join(pypath, "tshard")):
        print(f"tshard-bench-hosts: {tshardd} or {pypath}/tshard missing: build the targets "
              f"tshardd and tshard-python", file=sys.stderr)
        return 1
    sys.path.insert(0, pypath)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(o.timeout)
    work = tempfile.mkdtemp(prefix="tshard-bench-hosts.")  # mode 0700: the socket directory
    hosts = Hosts(max(o.counts), o.rate_bps, work)
    out = Out()
    failures = []
    status = 0
    try:
        single_copy = single_copy_mechanism()
        out.put("mpi_flags", " ".join(transport_flags(hosts.net, single_copy)))
        out.put("netns_tag", hosts.tag)
        out.put("work_dir", work)
        out.put("rate", o.rate)
        out.put("ranks_per_host", o.ranks_per_host)
        out.put("repeat", o.repeat)
        out.put("target_vs_bound", "1.15")
        out.put("target_crossed_pct", "2")
        out.put("target_small_vs_raw", "2")
        out.put("cpus", os.cpu_count())
        out.put("load_before", f"{os.getloadavg()[0]:.2f}")
        hosts.up()
        link_bps = verify_link(hosts, o.size_mib << 20, out)
        for h in o.counts:
            host_count(h, o, hosts, link_bps, single_copy, work, tshardd, out, failures)
        out.put("load_after", f"{os.getloadavg()[0]:.2f}")
        targets(out)
    except SetupError as e:
        print(f"tshard-bench-hosts: {e}", file=sys.stderr)
        status = 1
    except Interrupted as e:
        print(f"tshard-bench-hosts: {e}: tearing down", file=sys.stderr)
        status = e.status
    except Exception:  # an unforeseen failure: its trace, then the tear-down
        traceback.print_exc()
        status = 1
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                                  signal.SIGALRM})
        signal.alarm(0)
        hosts.down()
        shutil.rmtree(work, ignore_errors=True)
        left = hosts.left()
        print(f"teardown_left={','.join(left) if left else 'none'}", flush=True)
    for f in failures:
        print(f"tshard-bench-hosts: {f}", file=sys.stderr)
    if status == 0 and (failures or left):
        status = 1
    return status


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--mpi-rank":
        sys.exit(mpi_rank(sys.argv[2:]))
    if len(sys.argv) == 4 and sys.argv[1] == "--link-recv":
        sys.exit(link_recv(int(sys.argv[2]), int(sys.argv[3])))
    if len(sys.argv) == 5 and sys.argv[1] == "--link-send":
        sys.exit(link_send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    sys.exit(main(sys.argv[1:]))
