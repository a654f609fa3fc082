#!/bin/sh
# check_symbol_prefixes.sh - every non-static symbol that the project's libraries and programs
# define (their object files in a build tree, tests/ left out) carries its library's prefix:
#   ts_      public API of kernels/, shard/, comm/, proto/'s rule checks (ts_attr_parse, ...)
#   ts__     internal to the C libraries (kernels, shard, checkpoints, comm)
#   tshard_  public API of libtshard (include/tshard.h)
#   tshard__ the protobuf-c code generated from proto/tshard.proto
#   tsc_     internal to libtshard (client/)
#   tsd_     internal to the daemon (daemon/)
#   tsp_     the program compiler (program/)
#   cli_     the tshard command line (client/cli/)
# and main. Usage: check_symbol_prefixes.sh BUILD_DIR. Lists each other symbol as
# "object: symbol" and exits 1 when there is one; 77 (skipped) when the tree has no objects.
build=${1:?usage: check_symbol_prefixes.sh BUILD_DIR}
nm=${NM:-nm}
objs=$(find "$build" -path "$build/tests" -prune -o -path '*/CMakeFiles/*.dir/*.o' -type f -print |
       grep -v '/CMakeFiles/[^/]*/CMake' | sort)
if [ -z "$objs" ]; then
  echo "check_symbol_prefixes: no object files under $build; skipped"
  exit 77
fi
bad=0
for o in $objs; do
  for s in $("$nm" -g --defined-only "$o" | awk '$2 ~ /^[TDBRCGSVW]$/ {print $3}'); do
    case "$s" in
      ts_* | tshard_* | tsc_* | tsd_* | tsp_* | cli_* | main | _*) ;;
      *) echo "${o#"$build"/}: $s"; bad=$((bad + 1)) ;;
    esac
  done
done
if [ "$bad" -gt 0 ]; then
  echo "$bad symbol(s) without their library's prefix: make them static or prefix them"
  exit 1
fi
echo "every non-static symbol carries its library's prefix"
