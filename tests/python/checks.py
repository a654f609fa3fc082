"""Counting checks for the Python test scripts: check(ok, what) records a result and prints what
failed; finish() prints the "N passed, N failed" line and exits non-zero on any failure."""
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
