"""Progress of puts and gets: ``progress=`` on Client.put, put_slice and get takes a
callable ``fn(done_bytes, total_bytes)`` called after every chunk, ``True`` for a bar on stderr,
``False`` for nothing; the default (None) draws the bar when stderr is a terminal and the
transfer has 16 MiB or more. The bar shows the rate and the time left, like the CLI's."""
import sys
import time

MIN_BAR_BYTES = 16 << 20


class Bar:
    """A one-line bar on a stream, redrawn at most every 100 ms and at the end."""

    def __init__(self, what, name, stream=None):
        self.what, self.name = what, name
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, done, total):
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        el = now - self.start
        pct = 100 if total == 0 else done * 100 // total
        mib = done / (1 << 20)
        rate = mib / el if el > 0 else 0.0
        left = (total - done) / (1 << 20) / rate if rate > 0 else 0.0
        fill = pct * 24 // 100
        line = (f"\r{self.what} {self.name} [{'#' * fill}{' ' * (24 - fill)}] {pct:3d}% "
                f"{mib:.1f}/{total / (1 << 20):.1f} MiB {rate:.1f} MiB/s "
                f"{int(left) // 60}:{int(left) % 60:02d} left")
        if done >= total:
            line += f" ({el:.2f} s)\n"
        self.stream.write(line)
        self.stream.flush()


def reporter(progress, what, name, total):
    """The callable to report a transfer of total bytes to, or None."""
    if progress is False:
        return None
    if callable(progress) and progress is not True:
        return progress
    if progress is True or (progress is None and total >= MIN_BAR_BYTES and sys.stderr.isatty()):
        return Bar(what, name)
    if progress is not None:
        raise TypeError(f"progress: expected a callable fn(done, total), True, False or None, "
                        f"not {progress!r}")
    return None
