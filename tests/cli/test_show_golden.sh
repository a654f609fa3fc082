#!/usr/bin/env bash
# Golden tests of `tshard show`: each line of golden/cases.txt is "name|attribute|other arguments";
# the drawing
# must equal golden/<name>.txt byte for byte. With --update, rewrites the golden files instead.
# usage: test_show_golden.sh BUILD_BIN_DIR [--update]
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
passed=0 failed=0
while IFS='|' read -r name attr args; do
  [ -z "$name" ] && continue
  # shellcheck disable=SC2086 # the other arguments hold no spaces
  out=$("$bin/tshard" show $args --attr "$attr" 2>&1)
  if [ "${2:-}" = "--update" ]; then
    printf '%s\n' "$out" >"$here/golden/$name.txt"
    continue
  fi
  if diff -u "$here/golden/$name.txt" <(printf '%s\n' "$out"); then
    passed=$((passed + 1))
  else
    echo "FAIL: $name"
    failed=$((failed + 1))
  fi
done <"$here/golden/cases.txt"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
