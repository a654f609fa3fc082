#!/usr/bin/env bash
# The quickstart: installs what is missing, builds tshard, and runs the kernels demo, which
# reorders a tensor through blocked layouts, converts dtypes, cuts a box and runs an einsum with
# its backward pass, checking every step. Run as root on a fresh Debian machine, or install
# deploy/install-deps.sh's packages first.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" --target tshard-kernels-demo >/dev/null
exec ./build/bin/tshard-kernels-demo
