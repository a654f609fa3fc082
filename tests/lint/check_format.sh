#!/bin/sh
# check_format.sh - every C source and header of the repository (tests included) is laid out as
# .clang-format says, as clang-format 14 (Debian 12's) formats it; other versions break lines
# differently, so the check is skipped (77) under them and where clang-format is missing. Files
# named golden* are expected outputs (the program compiler's generated C), compared byte for byte
# by their tests, and are left as generated.
# Usage: check_format.sh [SOURCE_DIR]. Lists each file that differs, with the command that
# formats it, and exits 1 when there is one.
src=${1:-.}
cf=${CLANG_FORMAT:-clang-format}
version=$("$cf" --version 2>/dev/null | sed -n 's/.*clang-format version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
  echo "check_format: clang-format 14 not found (${version:+version $version}); skipped"
  exit 77
fi
cd "$src" || exit 2
[ -f .clang-format ] || { echo "check_format: no .clang-format in $src"; exit 2; }
files=$(find . \( -name 'build*' -o -name .git \) -prune -o \( -name '*.c' -o -name '*.h' \) \
             -type f ! -name 'golden*' -print | sort)
[ -n "$files" ] || { echo "check_format: no sources under $src"; exit 2; }
# one clang-format run over every file; a file that differs shows as "FILE:LINE:COL: warning"
# shellcheck disable=SC2086
bad=$("$cf" --style=file --dry-run $files 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning:.*/\1/p' |
      sort -u)
if [ -n "$bad" ]; then
  for f in $bad; do echo "$f: not formatted (clang-format -i $f)"; done
  echo "$(echo "$bad" | wc -l) file(s) not formatted as .clang-format says"
  exit 1
fi
echo "every C source follows .clang-format"
