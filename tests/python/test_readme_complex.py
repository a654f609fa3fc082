#!/usr/bin/python3
"""The README's "Complex dtypes" example runs as written (its python block, against 4 daemons of
job "demo", their socket directory in TSHARD_SOCKET_DIR), and what it prints is checked against
numpy: the complex product of the four ranks' factors, then the refused cast to f32 (status 4,
BAD_DTYPE) that leaves the tensor c128.

usage: test_readme_complex.py BUILD_BIN_DIR README.md"""
import sys

import numpy as np

from checks import Checks
from harness import run_readme_example

bin_dir, readme = sys.argv[1], sys.argv[2]
check = Checks()

code, printed, left = run_readme_example(bin_dir, readme, "## Complex dtypes")
check(left == [], f"the example drops what it made: {left}")

factors = np.array([[1 + 1j, 2], [1j, 1 + 1j], [1, 1j], [-1, 1]], np.complex64)
want = "\n".join([str(np.prod(factors, axis=0)), "4 c128"])
check(printed.strip() == want, f"the example prints {printed!r}, want {want!r}")
check(str(np.prod(factors, axis=0)) in code, "the README's comment shows what it prints")
check.finish()
