#!/usr/bin/env bash
# Builds the attribute-parser fuzz target (fuzz_attr.c) with clang -fsanitize=fuzzer,address,
# undefined from the sources it exercises and runs it for a bounded time, seeded with the texts of
# the shared corpus (attr_corpus.jsonl) in a scratch directory. Exit status: libFuzzer's.
#   run_fuzz_attr.sh CLANG SOURCE_DIR WORK_DIR SECONDS
set -euo pipefail
clang=$1 src=$2 work=$3 seconds=$4
mkdir -p "$work"
"$clang" -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I"$src/include" -I"$src/kernels" -I"$src/shard/plan" \
  -o "$work/fuzz_attr" "$src/tests/grammar/fuzz_attr.c" "$src/shard/plan/attr.c" \
  "$src/shard/plan/attr_text.c" "$src/kernels/reduce.c" "$src/kernels/dtype.c" -lm -lpthread
rm -rf "$work/seeds"
mkdir -p "$work/seeds"
/usr/bin/python3 - "$src/tests/grammar/attr_corpus.jsonl" "$work/seeds" <<'PY'
import json, os, sys
with open(sys.argv[1]) as f:
    for i, line in enumerate(f):
        if line.startswith("#") or not line.strip():
            continue
        with open(os.path.join(sys.argv[2], f"seed{i:04d}"), "wb") as out:
            out.write(json.loads(line)["text"].encode("utf-8"))
PY
ASAN_OPTIONS=detect_leaks=1 "$work/fuzz_attr" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -max_len=512 -print_final_stats=1 "$work/seeds"
