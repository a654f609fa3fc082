#!/usr/bin/env bash
# tshard-bench-rpc and tshard-bench-service never leave daemons behind. Each is started with
# --wait-stdin (it stops once its daemons serve, waiting on stdin), and killed with SIGTERM,
# SIGINT or SIGKILL as soon as it printed daemons_ready=1; then no process of its job may remain
# (polled, bounded) and no socket either. Also: killed mid-run (no --wait-stdin), stopped by its
# own --timeout; --help prints the usage, exits 0 and starts nothing; a bad option exits 2.
# usage: test_bench_cleanup.sh BUILD_BIN_DIR
set -u
bin=$1
tmp=$(mktemp -d /tmp/tshard-bench-cleanup.XXXXXX)
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }
trap 'rm -rf "$tmp"' EXIT

# Waits (up to 60 s) until no process has "--job JOB" in its command line (a zombie has none).
no_job_processes() {
  for _ in $(seq 600); do
    pgrep -f -- "--job $1( |\$)" >/dev/null || return 0
    sleep 0.1 # polling the process table, bounded
  done
  echo "still running for job $1:"; pgrep -af -- "--job $1( |\$)"
  return 1
}
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# Waits (up to 60 s each) until every pid of the comma-separated list is gone or a zombie.
pids_gone() {
  local p
  for p in ${1//,/ }; do
    for _ in $(seq 600); do alive "$p" || break; sleep 0.1; done
    if alive "$p"; then echo "daemon $p still runs"; return 1; fi
  done
}
no_sockets() { [ -z "$(ls "$1"/*.sock 2>/dev/null)" ]; }

# run_and_kill BENCH SIGNAL ARGS...: starts it, reads its output until daemons_ready=1 (up to
# 180 s), sends SIGNAL, waits for it; then checks that the daemons are gone.
run_and_kill() {
  local bench=$1 sig=$2 line job="" pids="" dir="" ready=0 status
  shift 2
  coproc BENCH { exec "$bin/$bench" "$@" 2>"$tmp/err"; }
  local bpid=$BENCH_PID
  while IFS= read -r -t 180 -u "${BENCH[0]}" line; do
    case $line in
      job=*) job=${line#job=} ;;
      socket_dir=*) dir=${line#socket_dir=} ;;
      daemon_pids=*) pids=${line#daemon_pids=} ;;
      daemons_ready=1) ready=1; break ;;
    esac
  done
  ok test "$ready" -eq 1 || cat "$tmp/err"
  kill -s "$sig" "$bpid"
  wait "$bpid"
  status=$?
  echo "$bench $* killed by SIG$sig: exit status $status, job $job, daemons $pids"
  if [ "$sig" = KILL ]; then ok test "$status" -eq 137; else ok test "$status" -ne 0; fi
  ok test -n "$job"
  ok no_job_processes "$job"
  ok pids_gone "$pids"
  ok no_sockets "$dir"
  # a handled signal also removes the job's directory; after SIGKILL it is ours to remove
  if [ "$sig" != KILL ]; then ok test ! -e "$dir"; else rm -rf "$dir"; fi
}

for bench in tshard-bench-rpc tshard-bench-service; do
  out=$("$bin/$bench" --help)
  ok test $? -eq 0
  ok grep -q "^usage: .*$bench" <<<"$out"
  ok grep -q -- "--wait-stdin" <<<"$out"
  "$bin/$bench" --no-such-option 2>"$tmp/err"
  ok test $? -eq 2
  ok grep -q "unknown option '--no-such-option'" "$tmp/err"
  for sig in TERM INT KILL; do
    run_and_kill "$bench" "$sig" --wait-stdin --timeout 600
  done
done
"$bin/tshard-bench-service" --dim 6 2>"$tmp/err"
ok test $? -eq 2
ok grep -q "must be a multiple of 4" "$tmp/err"

# killed while it measures (it was not told to wait): the daemons go too
run_and_kill tshard-bench-service TERM --size-mib 256
run_and_kill tshard-bench-service KILL --size-mib 256

# its own timeout (SIGALRM) stops it while it waits, daemons included
coproc BENCH { exec "$bin/tshard-bench-service" --wait-stdin --timeout 3 2>"$tmp/err"; }
bpid=$BENCH_PID
job=""
while IFS= read -r -t 180 -u "${BENCH[0]}" line; do
  case $line in job=*) job=${line#job=} ;; esac
done
wait "$bpid"
status=$?
echo "tshard-bench-service --timeout 3: exit status $status"
ok test "$status" -eq 142 # 128 + SIGALRM
ok grep -q "stopping on a signal or the timeout" "$tmp/err"
ok no_job_processes "e2e$bpid-1" # the harness's job name, in case it stopped before printing it

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
