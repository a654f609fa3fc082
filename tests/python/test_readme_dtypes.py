#!/usr/bin/python3
"""The README's "Checked puts" example runs as written (its python block, against 4 daemons of
job "demo", their socket directory in TSHARD_SOCKET_DIR as tshard-launch's would be found), and
what it prints is checked against independent references: numpy for the u16 ids converted to
i32, the bf16 bits cut from f32 by hand, and the f8_e4m3 codes from the format written out
(dtype_ref: the nearest of all codes, ties to even).

usage: test_readme_dtypes.py BUILD_BIN_DIR README.md"""
import sys

import numpy as np

from checks import Checks
from dtype_ref import f8_bits_of
from harness import run_readme_example

bin_dir, readme = sys.argv[1], sys.argv[2]
check = Checks()

code, printed, left = run_readme_example(bin_dir, readme, "## Checked puts",
                                         lambda b: "f8_bits" in b)
check(left == [], f"the example drops what it made: {left}")

f = np.array([1.5, -2.0, 3.0, 0.25], np.float32)
want = " ".join([str(np.array([1, 2, 300, 65535], np.uint16).astype(np.int32)),
                 str((f.view(np.uint32) >> 16).astype(np.uint16)),
                 str(np.array([f8_bits_of(float(x), "f8_e4m3") for x in f], np.uint8))])
check(printed.strip() == want, f"the example prints {printed!r}, want {want!r}")
check("[60 192 68 40]" in code, "the README's comment shows the codes it prints")
check.finish()
