#!/usr/bin/env bash
# The quickstart: installs what is missing, builds tshard, launches four daemons on this machine,
# and runs a short guided demo through the tshard CLI: put a tensor, show it, plan and run
# reshards that exercise every strategy (all-to-all, all-gather, local cut, root, point-to-point
# across groups, partial reductions), get it back and verify it bit for bit, print stats, and
# stop the daemons. Leaves nothing running. Run as root on a fresh Debian machine, or install
# deploy/install-deps.sh's packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$SECONDS

bash deploy/install-deps.sh
echo "== building (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)" \
  --target tshard-programs >/dev/null # what the README names, the install set included
./build/bin/tshard-kernels-demo >/dev/null || { echo "kernels self-check failed"; exit 1; }

work=$(mktemp -d /tmp/tshard-quickstart.XXXXXX)
export TSHARD_SOCKET_DIR=$work TSHARD_JOB=quickstart
export PYTHONPATH=$root/build/python
tshard=$root/build/bin/tshard
demo_start=$SECONDS
cleanup() {
  "$root/deploy/tshard-launch" stop --job quickstart --socket-dir "$work" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== launching 4 daemons"
deploy/tshard-launch start -np 4 --job quickstart --socket-dir "$work" >"$work/launch.out"
head -1 "$work/launch.out"

step() { printf '\n== %s\n' "$*"; }
summary=()
# reshard NAME TARGET STRATEGY DESCRIPTION: plan it (EXPLAIN's first lines), run it, time it
reshard() {
  local name=$1 to=$2 strategy=$3 what=$4 from shape t0 ms
  step "$what"
  from=$("$tshard" describe "$name" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["attr"])')
  shape=$("$tshard" describe "$name" --json | /usr/bin/python3 -c 'import json,sys; print(",".join(map(str,json.load(sys.stdin)["shape"])))')
  "$tshard" plan --shape "$shape" --from "$from" --to "$to" --strategy "$strategy" >"$work/plan.txt"
  sed -n '1,5p' "$work/plan.txt"
  t0=$(date +%s%N)
  "$tshard" reshard "$name" --to "$to" --strategy "$strategy"
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  summary+=("$(printf '%-15s %-60s %6d ms' "$strategy" "$to" "$ms")")
}

step "a 1024 x 512 f32 weight (values from the global index) put from one client, split over 4 ranks"
/usr/bin/python3 -c "
import numpy as np
np.save('$work/weights.npy', (np.arange(1024 * 512) % 1000 * 0.25).astype(np.float32).reshape(1024, 512))"
"$tshard" put weights "$work/weights.npy" --attr "mesh=[4] placements=[S(0)]"
"$tshard" show weights

reshard weights "mesh=[4] placements=[S(1)]" alltoall "row slices -> column slices: one all-to-all moves only what changes owner"
reshard weights "mesh=[4] placements=[R]" allgather "column slices -> a full replica on every rank: all-gather"
reshard weights "mesh=[4] placements=[S(0)] splits={0:[100,300,24,600]}" local "replicas -> ragged row slices: every rank cuts its own, nothing moves"
reshard weights "mesh=[4] placements=[R]" root "ragged slices -> replicas: a root gathers and broadcasts"
reshard weights "mesh=[2]@2-3 placements=[S(1)]" p2p "4 replicas -> 2 column slices on ranks 2,3 only: point-to-point, one source replica per piece"
"$tshard" show weights
reshard weights "mesh=[4] placements=[S(0)]" p2p "back to row slices on all 4 ranks (a different group again)"

step "partial values: copy the weight as a Partial(sum) over 4 ranks, then reduce it"
"$tshard" reshard weights --to "mesh=[4] placements=[R]" --keep-as grads
reshard grads "mesh=[4] placements=[P(sum)]" local "replicas -> partial sums (one rank keeps the value, the others the identity)"
"$tshard" show grads
reshard grads "mesh=[4] placements=[S(0)]" reduce_scatter "partial sums -> row slices of the sum: reduce-scatter"
reshard grads "mesh=[4] placements=[P(max)]" local "row slices -> partial maxima"
reshard grads "mesh=[4] placements=[R]" allreduce "partial maxima -> replicas of the maximum: all-reduce"

step "get both tensors back and verify them bit for bit against the original"
"$tshard" get weights "$work/back.npy" --rank 3
"$tshard" get grads "$work/grads.npy" --rank 1
/usr/bin/python3 -c "
import numpy as np, sys
a = np.load('$work/weights.npy')
ok = all(np.array_equal(np.load(f).view(np.uint32), a.view(np.uint32)) for f in ['$work/back.npy', '$work/grads.npy'])
print('verified: both equal the original, bit for bit' if ok else 'MISMATCH')
sys.exit(0 if ok else 1)"

step "stats of rank 0"
"$tshard" stats
"$tshard" drop weights
"$tshard" drop grads

step "stopping the daemons"
"$root/deploy/tshard-launch" stop --job quickstart --socket-dir "$work"

printf '\n== summary: %d reshards, all verified; demo %d s, everything (install, build, demo) %d s\n' \
  "${#summary[@]}" $((SECONDS - demo_start)) $((SECONDS - start))
printf '  %-15s %-60s %9s\n' strategy target time
printf '  %s\n' "${summary[@]}"
