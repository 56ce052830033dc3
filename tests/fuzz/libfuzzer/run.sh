#!/usr/bin/env bash
# Coverage-guided fuzzing of Loom's readers with libFuzzer (clang): builds each target in
# tests/fuzz/libfuzzer/ with AddressSanitizer and UBSan, then runs it for at most SECONDS and
# RUNS inputs from its committed seed corpus (tests/fuzz/corpus/<target>/; new inputs go to a
# scratch copy, so the tree never changes). A target passes when every input loaded or gave a
# loom::Error: any other exception, sanitizer report, timeout or out-of-memory fails it and
# keeps the input. A fixed seed makes a run repeatable.
#   tests/fuzz/libfuzzer/run.sh WORK_DIR [SECONDS] [RUNS]
# Exit 0: every target passed; 1: a target failed or did not build; 77: no clang++ or no
# libFuzzer runtime on this machine (CTest shows the case as skipped).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
work="${1:?usage: run.sh WORK_DIR [SECONDS] [RUNS]}"
seconds="${2:-20}"
runs="${3:-6000}"
cxx="${CXX_FUZZ:-clang++}"
mkdir -p "$work/obj"
command -v "$cxx" >/dev/null || { echo "SKIP: $cxx not found (scripts/install-deps.sh installs clang)"; exit 77; }
printf 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }\n' >"$work/probe.cpp"
"$cxx" -fsanitize=fuzzer,address,undefined "$work/probe.cpp" -o "$work/probe" 2>"$work/probe.log" ||
  { echo "SKIP: $cxx cannot link libFuzzer with ASan and UBSan (package libclang-rt-14-dev):"; cat "$work/probe.log"; exit 77; }

# Only what the readers need (nn/gpt_config.cpp and nn/gcn_config.cpp hold the configs apart from
# the models), so the
# targets build in about a minute; --gc-sections drops what they never call.
sources=(src/loom/train/config.cpp src/loom/data/toml_text.cpp src/loom/nn/gpt_config.cpp src/loom/data/tokenizer.cpp
         src/loom/comm/algorithm_names.cpp src/loom/train/safetensors.cpp src/loom/data/output_file.cpp src/loom/train/checkpoint_manifest.cpp
         src/loom/tensor/tensor.cpp src/loom/tensor/memory_tracker.cpp src/loom/tensor/allocator.cpp
         src/loom/nn/shard_spec.cpp src/loom/train/reshard.cpp src/loom/data/input_file.cpp src/loom/kernels/threads.cpp src/loom/train/trace_steps.cpp
         src/loom/data/graph.cpp src/loom/data/binary_graph.cpp src/loom/data/linqs_graph.cpp src/loom/data/text_graph.cpp src/loom/data/text_lines.cpp
         src/loom/data/rmat.cpp src/loom/data/rmat_quadrants.cpp src/loom/data/token_file.cpp src/loom/data/gpt2_tokenizer.cpp src/loom/data/unicode_classes.cpp
         src/loom/data/text_dataset.cpp src/loom/nn/moe_config.cpp src/loom/nn/gcn_config.cpp src/loom/kernels/precision.cpp
         src/loom/parallel/pipeline/partition.cpp)
targets=()
for t in "$here"/*.cpp; do targets+=("${t#"$root"/}"); done
# The readers include comm/ headers that include <mpi.h>; nothing here calls MPI.
# NDEBUG as in the release build: toml++ checks internal invariants with assert() in debug builds
# and reports the same input as a parse error in release ones, which is what users run.
mpi_include=$(mpicxx --showme:compile 2>/dev/null || echo "-I/usr/lib/x86_64-linux-gnu/openmpi/include")
flags=(-std=c++20 -g -O1 -DNDEBUG -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" $mpi_include -DLOOM_SOURCE_DIR="\"$root\"" -ffunction-sections -fdata-sections -fopenmp)

# An object is rebuilt when its source or any header it included (its -MMD list) is newer:
# an object kept from before a header changed would disagree with the others on a struct's
# layout, and the targets would crash in code that is right.
object_of() { echo "$work/obj/$(echo "$1" | tr / _).o"; }
stale() {
  local o d f
  o="$(object_of "$1")"; d="${o%.o}.d"
  [ -f "$o" ] && [ -f "$d" ] || return 0
  for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$d"); do [ "$f" -nt "$o" ] && return 0; done
  return 1
}
todo=()
for s in "${sources[@]}" "${targets[@]}"; do stale "$s" && todo+=("$s"); done
if [ ${#todo[@]} -gt 0 ]; then
  printf '%s\n' "${todo[@]}" | xargs -P 2 -I{} sh -c \
    'o="$0/obj/$(echo "$1" | tr / _).o"; "$3" $4 -MMD -MF "${o%.o}.d" -c "$2/$1" -o "$o" 2>"$o.log" || { rm -f "$o"; cat "$o.log"; exit 255; }' \
    "$work" {} "$root" "$cxx" "${flags[*]}" || { echo "FAIL: the readers do not build"; exit 1; }
fi
objects=()
for s in "${sources[@]}"; do objects+=("$(object_of "$s")"); done

status=0
for target_src in "${targets[@]}"; do
  target="$(basename "$target_src" .cpp)"
  exe="$work/$target"
  if ! "$cxx" "${flags[@]}" -fsanitize=fuzzer "$(object_of "$target_src")" "${objects[@]}" -Wl,--gc-sections -lz -ldnnl \
       -o "$exe" 2>"$work/$target.build.log"; then
    echo "FAIL: $target does not build:"; tail -20 "$work/$target.build.log"; status=1; continue
  fi
  corpus="$work/corpus-$target"
  rm -rf "$corpus" && mkdir -p "$corpus"
  cp "$root/tests/fuzz/corpus/$target/"* "$corpus/"
  if "$exe" -seed=1 -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -print_final_stats=1 -artifact_prefix="$work/crash-$target-" "$corpus" >"$work/$target.log" 2>&1; then
    executed=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$target.log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$work/$target.log" | tail -1 || true)
    echo "fuzz $target: $executed inputs in at most ${seconds}s, $cov, no crash"
  else
    echo "FAIL: $target crashed; the input is kept in $work (crash-$target-*):"
    grep -E "ERROR|==[0-9]+==|SUMMARY|terminate|what\(\)" "$work/$target.log" | head -20
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "libFuzzer: PASSED"
exit "$status"
