#!/usr/bin/env bash
# Builds the frame/validation fuzz target with clang (-fsanitize=fuzzer,address,undefined) from
# the sources it exercises, and runs it for a bounded time on a copy of the seed corpus (so the
# checked-in corpus is not modified). Exit status: libFuzzer's (0 when nothing was found).
#   run_fuzz.sh CLANG SOURCE_DIR GENERATED_PROTO_DIR WORK_DIR SECONDS
set -euo pipefail
clang=$1 src=$2 gen=$3 work=$4 seconds=$5
mkdir -p "$work"
flags=(-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/include" -I"$src/kernels" -I"$src/shard" -I"$src/daemon/wire" -I"$src/proto" -I"$gen")
# The MPI-free libraries the wire layer builds on, each in its folder.
flags+=(-I"$src/kernels/pool" -I"$src/shard/plan" -I"$src/shard/einsum/plan")
"$clang" "${flags[@]}" -o "$work/fuzz_frame" \
  "$src/tests/fuzz/fuzz_frame.c" "$src"/daemon/wire/*.c "$src/proto/rules.c" "$gen/tshard.pb-c.c" \
  "$src"/shard/plan/*.c \
  "$src"/kernels/dtype.c "$src"/kernels/layout.c "$src"/kernels/reduce.c \
  $(pkg-config --cflags --libs libprotobuf-c) -lm -lpthread
rm -rf "$work/corpus"
mkdir -p "$work/corpus"
cp "$src"/tests/fuzz/corpus/* "$work/corpus/"
# detect_leaks: the decoder and validators must not leak on any input.
ASAN_OPTIONS=detect_leaks=1 "$work/fuzz_frame" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 "$work/corpus"
