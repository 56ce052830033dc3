#!/usr/bin/env bash
# Coverage-guided fuzzing of Loom's readers with libFuzzer (clang): builds each target in
# tests/fuzz/libfuzzer/ with AddressSanitizer and UBSan, then runs it for SECONDS from its
# committed seed corpus (tests/fuzz/corpus/<target>/; new inputs go to a scratch copy, so the
# tree never changes). A target passes when every input loaded or gave a loom::Error: any
# other exception, sanitizer report, timeout or out-of-memory fails it and keeps the input.
# A fixed seed and input count make a run repeatable: what passed here passes in CI.
#   tests/fuzz/libfuzzer/run.sh WORK_DIR [SECONDS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
work="${1:?usage: run.sh WORK_DIR [SECONDS]}"
seconds="${2:-20}"
cxx="${CXX_FUZZ:-clang++}"
mkdir -p "$work"
command -v "$cxx" >/dev/null || { echo "FAIL: $cxx not found (scripts/install-deps.sh installs clang)"; exit 1; }

# Only what the readers need (nn/gpt_config.cpp holds GPTConfig apart from the model), so the
# targets build in about a minute; --gc-sections drops what they never call.
sources=(src/loom/train/config.cpp src/loom/train/toml_text.cpp src/loom/nn/gpt_config.cpp src/loom/data/tokenizer.cpp src/loom/comm/algorithm_names.cpp
         src/loom/train/safetensors.cpp src/loom/train/checkpoint_manifest.cpp src/loom/tensor/tensor.cpp
         src/loom/tensor/memory_tracker.cpp src/loom/tensor/allocator.cpp src/loom/nn/shard_spec.cpp src/loom/train/reshard.cpp)
# The readers include comm/ headers that include <mpi.h>; nothing here calls MPI.
# NDEBUG as in the release build: toml++ checks internal invariants with assert() in debug builds
# and reports the same input as a parse error in release ones, which is what users run.
mpi_include=$(mpicxx --showme:compile 2>/dev/null || echo "-I/usr/lib/x86_64-linux-gnu/openmpi/include")
flags=(-std=c++20 -g -O1 -DNDEBUG -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" $mpi_include -DLOOM_SOURCE_DIR="\"$root\"" -ffunction-sections -fdata-sections)
# Each source once into an object, two at a time; then each target links them.
mkdir -p "$work/obj"
objects=()
for s in "${sources[@]}"; do objects+=("$work/obj/$(echo "$s" | tr / _).o"); done
printf '%s\n' "${sources[@]}" | xargs -P 2 -I{} sh -c \
  'o="$0/obj/$(echo "$1" | tr / _).o"; [ "$o" -nt "$2/$1" ] || "$3" $4 -c "$2/$1" -o "$o" 2>"$o.log" || { cat "$o.log"; exit 255; }' \
  "$work" {} "$root" "$cxx" "${flags[*]}" || { echo "FAIL: the readers do not build"; exit 1; }

status=0
for target_src in "$here"/*.cpp; do
  target="$(basename "$target_src" .cpp)"
  exe="$work/$target"
  if ! "$cxx" "${flags[@]}" -fsanitize=fuzzer "$target_src" "${objects[@]}" -Wl,--gc-sections -lz -o "$exe" \
       2>"$work/$target.build.log"; then
    echo "FAIL: $target does not build:"; tail -20 "$work/$target.build.log"; status=1; continue
  fi
  corpus="$work/corpus-$target"
  rm -rf "$corpus" && mkdir -p "$corpus"
  cp "$root/tests/fuzz/corpus/$target/"* "$corpus/"
  if "$exe" -seed=1 -runs=6000 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$work/crash-$target-" "$corpus" >"$work/$target.log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$target.log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$work/$target.log" | tail -1 || true)
    echo "fuzz $target: $runs inputs in ${seconds}s, $cov, no crash"
  else
    echo "FAIL: $target crashed; the input is kept in $work (crash-$target-*):"; grep -E "ERROR|==[0-9]+==|SUMMARY|terminate|what\(\)" "$work/$target.log" | head -20
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "libFuzzer: PASSED"
exit "$status"
