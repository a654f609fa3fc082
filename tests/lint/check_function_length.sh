#!/bin/sh
# check_function_length.sh - no function outside tests/ is longer than a limit (150 lines by
# default), as universal-ctags measures it (from a function's first line to its last).
# Usage: check_function_length.sh [SOURCE_DIR [LIMIT]]. Lists every function over the limit as
# "file:line: name is N lines (limit L)" and exits 1 when there is one, 0 when there is none, and
# 77 (skipped) when universal-ctags is not installed.
src=${1:-.}
limit=${2:-150}
ctags=${CTAGS:-ctags}
if ! "$ctags" --version 2>/dev/null | grep -q "Universal Ctags"; then
  echo "check_function_length: universal-ctags not found; skipped"
  exit 77
fi
cd "$src" || exit 2
files=$(find . \( -name 'build*' -o -name tests -o -name .git \) -prune -o \
             \( -name '*.c' -o -name '*.h' -o -name '*.py' \) -type f -print | sort)
[ -n "$files" ] || { echo "check_function_length: no sources under $src"; exit 2; }
# shellcheck disable=SC2086
"$ctags" -x --_xformat='%F:%n %N %{end}' --kinds-C=f --kinds-Python=fm -o - $files |
  awk -v limit="$limit" '
    { split($1, at, ":"); n = $3 - at[2] + 1
      if ($3 != "" && n > limit) { printf "%s: %s is %d lines (limit %d)\n", $1, $2, n, limit; bad++ } }
    END { if (bad) { printf "%d function(s) over %d lines\n", bad, limit; exit 1 }
          print "no function over " limit " lines" }'
