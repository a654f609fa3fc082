#!/usr/bin/env bash
# The launcher signals only its own processes, survives a signal to its process group, and names a
# daemon's own error:
# - pid reuse: a pid file naming a live process that is not the job's leader (one whose command
#   line even says "--job JOB ", started later than the file says, or in another boot; or a pid
#   file without a start time, or not a regular file of ours) makes stop signal nothing and say
#   so; the decoy lives on;
# - a TERM to the job's process group (scancel, systemd, kill -- -PID) while a background save is
#   still writing (fsync of the rank files held back by a preloaded slow disk, slow_fsync.so):
#   the job ends, the checkpoint is complete (index.json, no temporary directory left), holds
#   what was put, and the log says the save completed; with daemons slower than start's
#   --stop-timeout the leader terminates them, and says so (a --stop-timeout that is no whole
#   number is refused); a TERM the moment start returns stops the job cleanly;
#   stop with daemons slower than its --timeout ends the leader, mpirun and the daemons;
# - a daemon that refuses its flags: start exits 1 long before its timeout, showing the daemon's
#   own message.
# usage: test_launch_safety.sh BUILD_BIN_DIR SLOW_FSYNC_SO
set -u
bin=$1 slow=$2
here=$(cd "$(dirname "$0")" && pwd)
launch="$here/../../deploy/tshard-launch"
dir=$(mktemp -d /tmp/tshard-launch-safety.XXXXXX)
chmod 700 "$dir"
export TSHARD_SOCKET_DIR=$dir TSHARD_BIN=$bin
export PYTHONPATH="$bin/../python${PYTHONPATH:+:$PYTHONPATH}"
job=ls$$
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }
decoys=()
cleanup() {
  "$launch" stop --job "$job" --timeout 20 >/dev/null 2>&1
  for p in "${decoys[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT

# until_ok SECONDS CMD...: polls CMD until it succeeds, up to SECONDS
until_ok() {
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1 # polling a condition, bounded by the deadline
  done
}
start_of() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; echo "$s" | awk '{print $20}'; }
boot=$(cat /proc/sys/kernel/random/boot_id)

# ---- pid reuse: stop signals nothing that is not the job's leader ----
# A decoy heading its own session and process group (as a leader does), whose command line says
# "--job JOB ": the launcher's earlier check, by command line alone, took it for the leader.
setsid bash -c "exec -a 'tshard-launch __lead --job $job ' sleep 300" </dev/null >/dev/null 2>&1 &
decoy=$!
disown "$decoy" # killed at the end: no notice from bash
decoys+=("$decoy")
until_ok 10 grep -qF -- "--job $job " "/proc/$decoy/cmdline"
decoy_start=$(start_of "$decoy")
pidfile="$dir/tshard-$job.pid"
# stop_spares WANT: stop says WANT, exits 0, and the decoy still runs (same process: same start)
stop_spares() {
  local out rc
  out=$("$launch" stop --job "$job" --timeout 3 2>&1)
  rc=$?
  [ "$rc" -eq 0 ] && echo "$out" | grep -qF -- "$1" && [ "$(start_of "$decoy")" = "$decoy_start" ] ||
    { echo "stop: exit $rc, output: $out; decoy start $(start_of "$decoy") (was $decoy_start)"; return 1; }
}
# the pid of a process started later than the one the file names (a reused pid)
printf '%s\nstart=%s\nboot=%s\n' "$decoy" "$((decoy_start - 1))" "$boot" >"$pidfile"
ok stop_spares "its processes are gone (stale pid file: pid $decoy is another process now"
ok test ! -e "$pidfile" # removed as stale
# the same start time, in another boot
printf '%s\nstart=%s\nboot=%s\n' "$decoy" "$decoy_start" "00000000-0000-0000-0000-000000000000" >"$pidfile"
ok stop_spares "stale pid file"
# a bare pid (no start time to check it by)
echo "$decoy" >"$pidfile"
ok stop_spares "it does not name a process by its pid, start time and boot"
not_running() { ! "$launch" status --job "$job" >/dev/null 2>&1; }
ok not_running
# a pid file that others may write, or a link to one naming the decoy as it really is
printf '%s\nstart=%s\nboot=%s\n' "$decoy" "$decoy_start" "$boot" >"$dir/elsewhere"
cp "$dir/elsewhere" "$pidfile"
chmod 622 "$pidfile"
ok stop_spares "not a regular file of yours that only you may write"
rm -f "$pidfile"
ln -s "$dir/elsewhere" "$pidfile"
ok stop_spares "not a regular file of yours that only you may write"
if [ "$(id -u)" -eq 0 ]; then # another user's file
  rm -f "$pidfile"
  cp "$dir/elsewhere" "$pidfile"
  chown nobody "$pidfile"
  ok stop_spares "not a regular file of yours that only you may write"
fi
rm -f "$pidfile" "$dir/elsewhere"
ok kill -0 "$decoy"
# the real leader is still recognised and stopped
ok "$launch" start -np 2 --job "$job" >/dev/null
ok test "$(sed -n 2p "$pidfile")" = "start=$(start_of "$(head -1 "$pidfile")")"
ok test "$(sed -n 3p "$pidfile")" = "boot=$boot"
ok "$launch" stop --job "$job" >/dev/null
ok test ! -e "$pidfile"
ok kill -0 "$decoy"

# ---- a TERM to the job's process group while a background save writes ----
# client.py DIR: puts a reference tensor through rank 0 and starts a background save into DIR/ck
# that is still writing when it returns; prints the save's id
cat >"$dir/client.py" <<'PY'
import sys
import numpy as np
import tshard
d = sys.argv[1]
c = tshard.connect(socket=f"{d}/tshard-{sys.argv[2]}-0.sock", timeout=60)
ref = np.arange(4096, dtype=np.float32).reshape(64, 64) * 0.25
c.create("w", "f32", ref.shape, "mesh=[2] placements=[S(0)]")
c.put("w", ref)
r = c.save(f"{d}/ck", all=True, overwrite=True, wait=False).result(60)
assert r["writing"], r
print(r["save_id"])
PY
slow_start() { # slow_start DELAY_MS ARGS...: the job, its daemons' rank files fsynced after DELAY_MS
  local ms=$1
  shift
  LD_PRELOAD="$slow${LD_PRELOAD:+:$LD_PRELOAD}" TSHARD_TEST_FSYNC_DELAY_MS=$ms \
    "$launch" start -np 2 --job "$job" "$@" >/dev/null
}
ok slow_start 5000
lead=$(head -1 "$pidfile")
save_id=$(/usr/bin/python3 "$dir/client.py" "$dir" "$job")
ok test -n "$save_id"
ok test ! -e "$dir/ck/index.json" # still writing
kill -TERM -- "-$lead"
ok until_ok 90 test ! -e "/proc/$lead"
ok test ! -e "$pidfile"
ok test -f "$dir/ck/index.json"
ok test -z "$(ls -d "$dir"/.ck.tmp-* 2>/dev/null)"
log="$dir/tshard-$job.log"
ok grep -q "tshard-launch: job '$job' asked to stop: rank 0 orders every daemon to finish" "$log"
for r in 0 1; do
  ok grep -qF "tshardd[$r] info: background save $save_id to '$dir/ck' complete" "$log"
done
ok grep -qx "state=stopped" "$dir/tshard-$job.status"
ok grep -qx "exit=0" "$dir/tshard-$job.status"
ok /usr/bin/python3 -c "
import sys, numpy as np, tshard.checkpoint as ck
ref = np.arange(4096, dtype=np.float32).reshape(64, 64) * 0.25
sys.exit(0 if np.array_equal(ck.read(sys.argv[1], 'w'), ref) else 1)" "$dir/ck"
ok test -z "$(ls "$dir"/tshard-"$job"-*.sock 2>/dev/null)"
ok "$launch" stop --job "$job" >/dev/null # nothing left to stop
# a TERM the moment start returns: the daemons are signalled all the same, and stop cleanly
ok "$launch" start -np 2 --job "$job" >/dev/null
lead=$(head -1 "$pidfile")
kill -TERM -- "-$lead"
ok until_ok 60 test ! -e "/proc/$lead"
ok grep -q "tshard-launch: job '$job' asked to stop: rank 0 orders every daemon to finish" "$log"
ok grep -qx "exit=0" "$dir/tshard-$job.status"
# daemons slower than --stop-timeout: the leader terminates mpirun, which ends them
rm -rf "$dir/ck"
out=$("$launch" start -np 2 --job "$job" --stop-timeout 1.5 2>&1)
ok test "$?:$out" = "2:tshard-launch: --stop-timeout '1.5': give a whole number of seconds"
ok slow_start 600000 --stop-timeout 3
lead=$(head -1 "$pidfile")
save_id=$(/usr/bin/python3 "$dir/client.py" "$dir" "$job")
kill -TERM -- "-$lead"
ok until_ok 60 test ! -e "/proc/$lead"
ok grep -q "tshard-launch: job '$job' did not stop within 3s: terminating mpirun" "$log"
ok test ! -e "$pidfile"
ok test -z "$(pgrep -f -- "--job $job --socket-dir $dir")" # no daemon left
rm -rf "$dir/ck" "$dir"/.ck.tmp-*
# stop with daemons slower than its --timeout: it terminates the leader and mpirun's session
ok slow_start 600000
lead=$(head -1 "$pidfile")
save_id=$(/usr/bin/python3 "$dir/client.py" "$dir" "$job")
out=$("$launch" stop --job "$job" --timeout 3 2>&1)
ok test "$out" = "tshard-launch: job '$job' did not stop within 3s; terminating it
tshard-launch: job '$job' stopped"
ok until_ok 30 test ! -e "/proc/$lead"
ok until_ok 30 test -z "$(pgrep -f -- "--job $job --socket-dir $dir")" # mpirun and its daemons
rm -rf "$dir/ck" "$dir"/.ck.tmp-*

# ---- a daemon that refuses its flags: its own words, promptly ----
# refused_flag WANT FLAGS...: start exits 1 well within its 120 s timeout and shows WANT
refused_flag() {
  local want=$1 out rc
  shift
  out=$(timeout 60 "$launch" start -np 2 --job "$job" --timeout 120 -- "$@" 2>&1)
  rc=$?
  [ "$rc" -eq 1 ] && echo "$out" | grep -qF -- "$want" ||
    { echo "start -- $*: exit $rc, output: $out"; return 1; }
}
ok refused_flag "tshardd: --memory-limit banana: expected auto, 0 (no limit) or a size" --memory-limit banana
ok refused_flag "tshardd: unknown flag '--no-such-flag'" --no-such-flag
ok test ! -e "$pidfile"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
