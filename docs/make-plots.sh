#!/usr/bin/env bash
# Runs the benchmarks whose figures docs/benchmarks.md shows, saves each output with its date,
# machine and command in docs/bench-results/NAME.txt, and draws docs/images/bench-NAME.png from
# them (docs/plot_benchmarks.py, with Debian's matplotlib, which deploy/install-deps.sh installs).
# Needs a build in build/ (or BUILD=dir). PLOT_ONLY=1 redraws from the saved outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash deploy/install-deps.sh # matplotlib among them (as non-root: the apt-get line to run)
run() { # NAME COMMAND...: one benchmark run, saved with its header
  local name=$1 out="docs/bench-results/$1.txt"
  shift
  echo "== $name: $*"
  {
    echo "# date: $(date -u +%Y-%m-%d)"
    echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -m) $(uname -r)"
    echo "# command: $*"
    timeout 900 "$@"
  } >"$out.tmp"
  mv "$out.tmp" "$out"
}
mkdir -p docs/bench-results
if [ "${PLOT_ONLY:-0}" != 1 ]; then
  run copy "$build/bin/tshard-bench-copy"
  run reshard mpirun -np 4 --oversubscribe "$build/bin/tshard-bench-reshard"
  run many "$build/bin/tshard-bench-many" --np 2
  run statedict "$build/bin/tshard-bench-statedict"
fi
/usr/bin/python3 docs/plot_benchmarks.py docs/bench-results docs/images
