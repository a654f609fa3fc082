#!/usr/bin/env bash
# tshard-bench-many --quick: it exits 0 (every tensor it got back matched what it put) and prints
# each of its keys with a number, the ratios consistent with the figures they divide, and a
# targets_missed line. The keys of APIs a client may lack (reshard_many, wait=False) may read
# "unavailable" instead, never anything else; daemon_transfers names the daemons' transfers.
# Figures are not judged here (a loaded CI box).
# usage: test_bench_many_keys.sh BUILD_BIN_DIR
set -u
bin=$1
out=$(mktemp /tmp/tshard-bench-many-keys.XXXXXX)
trap 'rm -f "$out"' EXIT
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }

"$bin/tshard-bench-many" --quick --np 2 --timeout 500 >"$out"
ok test $? -eq 0
cat "$out"
num='-?[0-9]+(\.[0-9]+)?'
keys="gpt2_loop_ms gpt2_raw_ms gpt2_loop_vs_raw idle_cpu_pct idle_cpu_max_pct scrape_10000_tensors_ms
      scrape_bytes small_4096_trace_on_us small_4096_trace_off_us trace_on_small_4096_vs_off"
for b in 4096 65536 1048576; do keys="$keys small_${b}_us small_${b}_raw_us small_${b}_vs_raw"; done
for k in $keys; do ok grep -qE "^$k=$num\$" "$out"; done
for k in gpt2_batched_ms gpt2_batched_vs_raw gpt2_batched_vs_loop async_overlap_ratio; do
  ok grep -qE "^$k=($num|unavailable)\$" "$out"
done
ok grep -qE "^targets_missed=" "$out"
# the daemons say how they move data (mpi only where this machine forbids single copies)
ok grep -qE "^daemon_transfers=(single_copies|shared_buffers|mpi)\$" "$out"
val() { grep -E "^$1=" "$out" | head -1 | cut -d= -f2; }
# each ratio R is its figure A over the reference B, within the rounding of the printed A and B
# (half a unit of their last decimal, E) and of R (0.001)
ratio_ok() {
  [ "$(val "$1")" = unavailable ] && [ "$(val "$2")" = unavailable ] && return 0
  awk -v r="$(val "$1")" -v a="$(val "$2")" -v b="$(val "$3")" -v e="$4" \
    'BEGIN { lo = (a - e) / (b + e); hi = (b > e) ? (a + e) / (b - e) : 1e30
             exit !(r >= lo - 0.001 && r <= hi + 0.001) }' || { echo "$1 is not $2 / $3"; return 1; }
}
for b in 4096 65536 1048576; do ok ratio_ok small_${b}_vs_raw small_${b}_us small_${b}_raw_us 0.05; done
ok ratio_ok gpt2_loop_vs_raw gpt2_loop_ms gpt2_raw_ms 0.005
ok ratio_ok trace_on_small_4096_vs_off small_4096_trace_on_us small_4096_trace_off_us 0.05
ok ratio_ok gpt2_batched_vs_raw gpt2_batched_ms gpt2_raw_ms 0.005
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
