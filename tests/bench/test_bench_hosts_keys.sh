#!/usr/bin/env bash
# tshard-bench-hosts --quick (2 simulated hosts of 2 ranks): it exits 0 and prints every key of
# its header with a sane value (times, bounds, rates and crossed bytes above 0, each ratio its
# figures' quotient, each bound the tensor's busiest-host bytes over the verified rate, each
# needed size the formula's, the ranks on their hosts), and its tear-down leaves no namespace,
# no process, no work directory and no Open MPI session directory or segment behind; a second
# run sent SIGTERM once its daemons serve tears down the same way. Times are not judged (a
# loaded CI box); the plans are: the hierarchical strategy where a flat one would send a block
# into a host twice, and every case's crossed bytes within 2% of what must cross. Without root, `ip`, `tc`, mpi4py or network namespaces it says SKIPPED with
# the reason (exit 77, which CTest reports as skipped).
# usage: test_bench_hosts_keys.sh BUILD_BIN_DIR
set -u
bin=$1
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "tshard-bench-hosts needs root to create network namespaces"
for t in ip tc unshare nsenter; do command -v "$t" >/dev/null || skip "no '$t' command"; done
/usr/bin/python3 -c "import mpi4py" 2>/dev/null || skip "no mpi4py for /usr/bin/python3"
probe="tsbhprobe$$"
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$probe"
out=$(mktemp /tmp/tshard-bench-hosts-keys.XXXXXX)
out2=$(mktemp /tmp/tshard-bench-hosts-keys.XXXXXX)
bpid=""
cleanup() {
  [ -n "$bpid" ] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null
  rm -f "$out" "$out2"
}
trap cleanup EXIT
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }
val() { grep -E "^$1=" "$2" | head -1 | cut -d= -f2-; }
pos() { # KEY FILE: a number above 0
  local v
  v=$(val "$1" "$2")
  [[ "$v" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v x="$v" 'BEGIN { exit !(x > 0) }' ||
    { echo "$1='$v' is not a number above 0"; return 1; }
}
# R is A / B within the rounding of the printed A and B (half a unit of their last decimal, E)
# and of R (0.001)
ratio_ok() {
  awk -v r="$(val "$1" "$out")" -v a="$(val "$2" "$out")" -v b="$(val "$3" "$out")" -v e="$4" \
    'BEGIN { lo = (a - e) / (b + e); hi = (a + e) / (b - e)
             exit !(r >= lo - 0.001 && r <= hi + 0.001) }' || { echo "$1 is not $2 / $3"; return 1; }
}
near() { # A B TOLERANCE: |A - B| <= TOLERANCE
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }' ||
    { echo "$1 is not $2 (within $3)"; return 1; }
}
# Nothing of run FILE is left: no namespace named after its tag, no process naming its work
# directory, no work directory.
gone() {
  local tag work
  tag=$(val netns_tag "$1") work=$(val work_dir "$1")
  [ -n "$tag" ] && [ -n "$work" ] || { echo "no netns_tag or work_dir in $1"; return 1; }
  if ip netns list | grep -qE "^$tag(sw|h[0-9])"; then
    echo "namespaces left: $(ip netns list | grep -E "^$tag(sw|h[0-9])")"
    return 1
  fi
  if ps -eo args | grep -F -- "$work" | grep -vq grep; then echo "processes left in $work"; return 1; fi
  [ ! -e "$work" ] || { echo "$work left"; return 1; }
  if ls -d /tmp/ompi."$tag"-* /dev/shm/*"$tag"-* 2>/dev/null | grep -q .; then
    echo "Open MPI's files left: $(ls -d /tmp/ompi."$tag"-* /dev/shm/*"$tag"-* 2>/dev/null)"
    return 1
  fi
  [ "$(val teardown_left "$1")" = none ] || { echo "teardown_left=$(val teardown_left "$1")"; return 1; }
}

timeout 400 "$bin/tshard-bench-hosts" --quick --timeout 360 >"$out"
ok test $? -eq 0
cat "$out"
ok gone "$out"
ok grep -qE "^mpi_flags=.*btl_tcp_flags send,inplace" "$out"
for k in link_verified_mbps link_verified_MBps link_duplex_MBps tensor_mib cpus; do ok pos "$k" "$out"; done
ok grep -qE "^load_before=[0-9.]+$" "$out"
ok grep -qE "^load_after=[0-9.]+$" "$out"
ok grep -qE "^link_overhead_pct=-?[0-9]+\.[0-9]+$" "$out"
ok grep -qE "^idle_Bps=[0-9]+$" "$out"
ok grep -qxF "rank_hosts=1,1,2,2" "$out"
ok grep -qxF "target_vs_bound=1.15" "$out"
ok grep -qxF "target_crossed_pct=2" "$out"
ok grep -qxF "target_small_vs_raw=2" "$out"
ok grep -qE "^targets_missed=." "$out"
t=$(val tensor_mib "$out") rate=$(val link_verified_MBps "$out")
# the share of the tensor that must cross (in all; the busiest host's busier direction), 2 hosts
declare -A needed=([s0_s1]=0.5 [xgroup_s0_s1]=1 [s0_r]=1 [interleaved_s0_r]=1 [p_r]=2 [p_s0]=1
                   [xgroup_s0_r]=1 [s0_host1_r_all]=1 [r_host1_r_all]=1)
declare -A busiest=([s0_s1]=0.25 [xgroup_s0_s1]=1 [s0_r]=0.5 [interleaved_s0_r]=0.5 [p_r]=1
                    [p_s0]=0.5 [xgroup_s0_r]=1 [s0_host1_r_all]=1 [r_host1_r_all]=1)
for c in "${!needed[@]}"; do
  for s in ms first_ms client_ms rank0_ms bound_ms vs_bound crossed_mib needed_mib busiest_mib; do
    ok pos "${c}_$s" "$out"
  done
  ok grep -qE "^${c}_strategy=[a-z0-9_+]+$" "$out"
  ok ratio_ok "${c}_vs_bound" "${c}_ms" "${c}_bound_ms" 0.005
  ok near "$(val "${c}_needed_mib" "$out")" "$(awk -v t="$t" -v f="${needed[$c]}" 'BEGIN { print t * f }')" 0.01
  # bound_ms = busiest share x tensor bytes / verified bytes per second
  ok near "$(val "${c}_bound_ms" "$out")" \
    "$(awk -v t="$t" -v f="${busiest[$c]}" -v r="$rate" 'BEGIN { print f * t * 1048576 / (r * 1e6) * 1e3 }')" \
    "$(awk -v b="$(val "${c}_bound_ms" "$out")" 'BEGIN { print 0.001 * b + 0.01 }')"
  # every rank is done no sooner than the client has its answer
  ok awk -v a="$(val "${c}_ms" "$out")" -v b="$(val "${c}_client_ms" "$out")" 'BEGIN { exit !(a >= b) }'
done
# host-aware plans end to end (each tensor read back equal, or the bench fails): the moves whose
# blocks a flat strategy sends into a host more than once run hierarchical, and what crosses the
# links is what must (within 2%, the frames' headers and acknowledgements included)
for c in s0_r interleaved_s0_r p_s0 xgroup_s0_r s0_host1_r_all r_host1_r_all; do
  ok grep -qxF "${c}_strategy=hierarchical" "$out"
done
for c in "${!needed[@]}"; do
  ok near "$(val "${c}_crossed_mib" "$out")" "$(val "${c}_needed_mib" "$out")" \
    "$(awk -v n="$(val "${c}_needed_mib" "$out")" 'BEGIN { print 0.02 * n }')"
done
for c in s0_s1 s0_r p_r p_s0 r_host1_r_all; do
  ok pos "${c}_mpi4py_ms" "$out"
  ok pos "${c}_mpi4py_crossed_mib" "$out"
  ok ratio_ok "${c}_mpi4py_vs_bound" "${c}_mpi4py_ms" "${c}_bound_ms" 0.005
done
for k in small_4096_hosts_us small_4096_hosts_p90_us small_4096_hosts_rank0_us small_4096_hosts_raw_us \
  small_4096_hosts_vs_raw; do
  ok pos "$k" "$out"
done
ok ratio_ok small_4096_hosts_vs_raw small_4096_hosts_us small_4096_hosts_raw_us 0.05

# SIGTERM once the daemons serve (their idle interval is measured): a tear-down, status 143
"$bin/tshard-bench-hosts" --quick --timeout 360 >"$out2" &
bpid=$!
for _ in $(seq 1200); do
  grep -q "^idle_Bps=" "$out2" && break
  kill -0 "$bpid" 2>/dev/null || break
  sleep 0.1 # polling for the line, bounded
done
ok grep -q "^idle_Bps=" "$out2"
kill -TERM "$bpid"
wait "$bpid"
st=$?
bpid=""
ok test "$st" -eq 143
ok gone "$out2"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
