#!/usr/bin/env bash
# tshard-bench-service at a tiny size: it exits 0 (every tensor it got back matched what it put)
# and prints each key of the service benchmark with a number, the ratios consistent with the figures they
# divide, and a targets_missed line. Figures are not judged here (a loaded CI box).
# usage: test_bench_service_keys.sh BUILD_BIN_DIR
set -u
bin=$1
out=$(mktemp /tmp/tshard-bench-keys.XXXXXX)
trap 'rm -f "$out"' EXIT
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }

"$bin/tshard-bench-service" --size-mib 8 --dim 64 --reps 3 --io-reps 2 --timeout 500 >"$out"
ok test $? -eq 0
cat "$out"
num='-?[0-9]+(\.[0-9]+)?'
keys="fault_gbps populate_gbps memcpy_gbps put_1gib_gbps get_1gib_gbps put_1gib_socket_gbps
  get_1gib_socket_gbps py_put_1gib_gbps py_get_1gib_gbps put_1gib_vs_memcpy get_1gib_vs_memcpy
  py_put_1gib_vs_memcpy py_get_1gib_vs_memcpy rss_after_drop_mib rss_wait_s"
for c in s0_s1 s1_s0_f64 s0_r; do keys="$keys ${c}_ms ${c}_raw_ms ${c}_vs_raw"; done
for k in $keys; do ok grep -qE "^$k=$num\$" "$out"; done
ok grep -qE "^targets_missed=" "$out"
val() { grep -E "^$1=" "$out" | head -1 | cut -d= -f2; }
# each ratio R is its figure A over the reference B, within the rounding of the printed A and B
# (half a unit of their last decimal, E) and of R (0.001)
ratio_ok() {
  awk -v r="$(val "$1")" -v a="$(val "$2")" -v b="$(val "$3")" -v e="$4" \
    'BEGIN { lo = (a - e) / (b + e); hi = (b > e) ? (a + e) / (b - e) : 1e30
             exit !(r >= lo - 0.001 && r <= hi + 0.001) }' || { echo "$1 is not $2 / $3"; return 1; }
}
for c in s0_s1 s1_s0_f64 s0_r; do ok ratio_ok ${c}_vs_raw ${c}_ms ${c}_raw_ms 0.0005; done
for x in put_1gib get_1gib put_1gib_socket get_1gib_socket py_put_1gib py_get_1gib; do
  ok ratio_ok ${x}_vs_memcpy ${x}_gbps memcpy_gbps 0.005
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
