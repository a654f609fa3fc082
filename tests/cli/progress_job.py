"""What the tests of the CLI's progress lines share: the CLI run against a job of real daemons,
the 32 MiB and the small tensor they put, a read back compared with numpy, and a command run with
its stderr on a pseudo-terminal, as a user's terminal would be."""
import os
import pty
import subprocess

import numpy as np


def cli_runner(tshard_bin, d, timeout):
    """cli(*args, rank=0, stderr=PIPE): the tshard CLI on d's job, through `rank`."""
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir)

    def cli(*args, rank=0, stderr=subprocess.PIPE):
        return subprocess.run([tshard_bin, *args, "--job", d.job, "--rank", str(rank)],
                              stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=timeout,
                              env=env)
    return cli


def put_big_and_small(cli, tmp, attr, check):
    """Puts `big` (32 MiB of f32) and `small` (64x64 f32) under attr; returns both arrays."""
    big = (np.arange(2048 * 4096) % 251).astype(np.float32).reshape(2048, 4096)
    small = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    for name, a in (("big", big), ("small", small)):
        np.save(os.path.join(tmp, f"{name}.npy"), a)
        r = cli("put", name, os.path.join(tmp, f"{name}.npy"), "--attr", attr)
        check(r.returncode == 0, f"put {name}: {r.stderr}")
    return big, small


def comparer(cli, tmp):
    """same(name, ref): whether tensor `name`, got through the CLI, equals ref."""
    def same(name, ref):
        out = os.path.join(tmp, "out.npy")
        r = cli("get", name, out)
        return r.returncode == 0 and np.array_equal(np.load(out), ref)
    return same


def run_on_tty(cli, *args):
    """cli(*args, stderr=fd) runs the command; returns (its result, the text written to the
    terminal)."""
    master, slave = pty.openpty()
    try:
        r = cli(*args, stderr=slave)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:  # EIO once the writer closed
                break
            if not b:
                break
            chunks.append(b)
        return r, b"".join(chunks).decode()
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
