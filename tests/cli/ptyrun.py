"""Runs a CLI command with its stderr on a pseudo-terminal, as a user's terminal would be, and
returns what it drew there (for the tests of the progress lines)."""
import os
import pty


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
