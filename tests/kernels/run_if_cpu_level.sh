#!/usr/bin/env bash
# run_if_cpu_level.sh LEVEL COMMAND...: runs COMMAND when this CPU supports the x86-64 level
# LEVEL (x86-64-v2, -v3, -v4), as glibc's loader reports it; otherwise exits 77, which CTest
# counts as skipped (the binary would die on its first instruction of that level).
set -euo pipefail
level=$1
shift
loader=
for candidate in /lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2; do
  if [ -x "$candidate" ]; then
    loader=$candidate
    break
  fi
done
if [ -z "$loader" ]; then
  echo "no x86-64 glibc loader to ask for the CPU's levels: skipped"
  exit 77
fi
levels=$("$loader" --help)
if ! grep -q "^ *$level (supported" <<<"$levels"; then
  echo "this CPU does not support $level: skipped"
  exit 77
fi
exec "$@"
