"""Counting checks for the Python test scripts: check(ok, what) records a result and prints what
failed; finish() prints the "N passed, N failed" line and exits non-zero on any failure.
check.expect(status, fn, what, needle) checks that fn raises the tshard error of that status
(with needle in its text), check.raises(exc, fn, what, needles) that it raises exc (any class)
with every needle in its text, check.poll(cond, what, timeout) that cond() comes true before a
deadline; raw_call sends one request through a client's socket and returns the
answer without raising on its status (for misuse tests); error_of gives the status and text of
the tshard error a call raises; put_data gives a test's bf16 or f8 reference (uint16 or uint8
bits) to a put as tshard.bf16_bits or tshard.f8_bits; exact_values makes small integers a
reference of any dtype."""
import sys


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def __call__(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what, flush=True)
        return ok

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)

    def expect(self, status, fn, what, needle=None):
        import tshard
        try:
            fn()
        except tshard.TshardError as e:
            self(e.status == status, f"{what}: status {e.status} ({e}), want {status}")
            self(needle is None or needle in str(e), f"{what}: '{needle}' not in '{e}'")
            return
        self(False, f"{what}: no exception")

    def raises(self, exc, fn, what, needles=()):
        """Checks that fn raises exc (any exception class) with every needle in its text."""
        try:
            fn()
        except exc as e:
            return self(all(n in str(e) for n in needles), f"{what}: {e!r} lacks {needles}")
        except Exception as e:  # noqa: BLE001 - the wrong exception is a failure
            return self(False, f"{what}: {type(e).__name__}: {e}")
        return self(False, f"{what}: no exception")

    def poll(self, cond, what, timeout=30.0):
        """Waits for cond() under a deadline (polling with a doubling nap, not sleeping as
        synchronization); a failed check naming what when it does not come true in time."""
        import time
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not cond():
            if time.monotonic() > deadline:
                return self(False, f"{what}: not within {timeout} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return True


def raw_call(c, **op):
    """One request through the client's socket, answered (status not raised)."""
    from tshard import tshard_pb2 as pb
    from tshard.wire import request_frame
    (k, msg), = op.items()
    req = pb.Request(id=c._take_id())
    getattr(req, k).CopyFrom(msg)
    c._wire.send(request_frame(req))
    return c._wire.recv()


def error_of(fn):
    """(status, message) of the TshardError fn() raises; (None, "accepted") when it returns."""
    import tshard
    try:
        fn()
    except tshard.TshardError as e:
        return e.status, str(e)
    return None, "accepted"


def put_data(a, dtype=None):
    """A test reference as put data: the tests hold bf16 and f8 tensors' values as their bits
    (uint16, uint8), which a put takes only when they are said to be bits (tshard.bf16_bits,
    tshard.f8_bits). dtype: the tensor's; None: a uint16 array is bf16 bits (the tests that
    hold no u16 tensor)."""
    import numpy as np
    import tshard
    if dtype in ("f8_e4m3", "f8_e5m2"):
        return tshard.f8_bits(a, dtype[3:])
    if dtype == "bf16" or (dtype is None and isinstance(a, np.ndarray) and a.dtype == np.uint16):
        return tshard.bf16_bits(a)
    return a


UNSIGNED = ("u8", "u16", "u32", "u64")


def exact_values(v, dtype, lo):
    """Small integers v (an int64 array, values >= lo) as a reference of a tensor dtype, exact in
    it: unsigned dtypes shifted by -lo, bool as v odd, bf16 as its bits, the 8-bit floats as the
    codes of v folded into -4..4."""
    import numpy as np
    import tshard
    if dtype in UNSIGNED:
        v = v - lo
    if dtype == "bool":
        return (v % 2).astype(np.bool_)
    if dtype == "bf16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype in ("f8_e4m3", "f8_e5m2"):  # the integers -4..4 are exact in both
        from dtype_ref import f8_bits_of
        return np.array([f8_bits_of(x, dtype) for x in range(-4, 5)], np.uint8)[v % 9]
    return v.astype(tshard.DTYPES[dtype])
