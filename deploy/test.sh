#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds the normal and the sanitizer (ASan +
# UBSan) variants, and runs every CTest test in the normal one (unit, MPI under several rank
# counts, end-to-end) and all but those labelled normal_only in the sanitizer one (checks of the
# source text, benchmark keys, the install, simulated hosts: tests/CMakeLists.txt). Exit status 0
# only when both variants pass. Run as root on a fresh Debian machine,
# or install deploy/install-deps.sh's packages first.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh

# Open MPI refuses root without these; CI runs as root. --oversubscribe is set per test.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc 2>/dev/null || echo 2)

run_variant() { # name, build dir, ctest selection flags (split on spaces), extra cmake flags...
  local name=$1 dir=$2 select=$3
  shift 3
  echo "== tshard tests: $name build ($dir)"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; return 1; }
  if ! cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
    grep -E -A3 "error|Error" "$dir/build.log" | head -60
    return 1
  fi
  grep -E "warning:" "$dir/build.log" || true # the build is meant to be warning-free
  # tests run $jobs at a time (most wait on sockets and timers more than they compute); those
  # that share a machine-wide resource hold a RESOURCE_LOCK (tests/*.cmake)
  (cd "$dir" && ctest --output-on-failure --timeout 900 -j"$jobs" $select)
}

mkdir -p build build-asan
run_variant normal build ""
# the sanitizer variant leaves out the tests labelled normal_only (tests/CMakeLists.txt)
run_variant sanitizer build-asan "-LE normal_only" -DTSHARD_SANITIZE=ON
echo "== tshard tests: both variants passed"
