"""Starts real tshardd daemons under mpirun for the Python tests and the examples, and always
stops them: a private socket directory and job id per run, readiness by polling for every
rank's socket and pinging it (bounded by a deadline), shutdown through the client, and a kill
of the whole process group if anything is left."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import tshard

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader,tcp",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}


class Daemons:
    def __init__(self, bin_dir, np, extra_args=(), job=None, startup_timeout=60):
        self.np = np
        self.dir = tempfile.mkdtemp(prefix="tshard-py-")
        os.chmod(self.dir, 0o700)
        self.job = job or f"py{os.getpid()}"
        self.log = open(os.path.join(self.dir, "daemons.log"), "w+")
        env = dict(os.environ, **MPI_ENV)
        self.env = env
        self.proc = subprocess.Popen(
            ["mpirun", "-np", str(np), "--oversubscribe", os.path.join(bin_dir, "tshardd"),
             "--socket-dir", self.dir, "--job", self.job, *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + startup_timeout
        pending = set(range(np))
        while pending:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tshardd exited with {self.proc.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tshardd not serving within {startup_timeout} s:\n{self.logs()}")
            for r in sorted(pending):
                try:
                    with self.connect(r, timeout=5) as c:
                        if c.ping()["rank"] == r:
                            pending.discard(r)
                except tshard.TshardError:
                    pass
            if pending:
                time.sleep(0.05)  # polling for startup, bounded by the deadline

    def socket(self, rank):
        return os.path.join(self.dir, f"tshard-{self.job}-{rank}.sock")

    def connect(self, rank, timeout=120):
        return tshard.connect(socket=self.socket(rank), timeout=timeout)

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def wait_logs(self, texts, timeout=10):
        """The log once every one of texts is in it, or as it is at the deadline. The daemons
        write their per-operation lines in batches, within 100 ms."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.logs()
            if all(t in log for t in texts) or time.monotonic() > deadline:
                return log
            time.sleep(0.02)  # polling for the daemons' writes, bounded by the deadline

    def stop(self, timeout=60):
        """Shuts the job down through rank 0; kills it if it does not exit in time; removes the
        job's directory (the log stays readable through logs()). Returns the exit code of
        mpirun."""
        if self.proc.poll() is None:
            try:
                with self.connect(0, timeout=timeout) as c:
                    c.shutdown()
            except tshard.TshardError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def free_ports(count):
    """A port p such that p .. p+count-1 could all be bound just now on loopback."""
    while True:
        socks = []
        try:
            first = socket.socket()
            socks.append(first)
            first.bind(("127.0.0.1", 0))
            p = first.getsockname()[1]
            for k in range(1, count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p + k))
            return p
        except OSError:
            continue  # one of the next ports is taken: probe again
        finally:
            for s in socks:
                s.close()


def run_readme_example(bin_dir, readme, heading, pick=lambda block: True):
    """Runs the first python block of README section `heading` ("## Checked puts") for which
    pick(block) holds, as written, against 4 daemons of job "demo" (their socket directory in
    TSHARD_SOCKET_DIR, as tshard-launch's would be found). Returns (the block, what it printed,
    the tensors it left behind)."""
    import contextlib
    import io
    import re
    with open(readme) as f:
        text = f.read()
    start = text.index("\n" + heading)
    section = text[start:text.find("\n## ", start + 1)]
    code = next(b for b in re.findall(r"```python\n(.*?)```", section, re.S) if pick(b))
    with Daemons(bin_dir, 4, job="demo") as d:
        os.environ["TSHARD_SOCKET_DIR"] = d.dir
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, os.path.basename(readme), "exec"), {})
        with d.connect(0) as c:
            left = c.list()
    return code, buf.getvalue(), left
