#!/usr/bin/env bash
# `make bench`: Loom next to its baselines, one benchmark script after another, each in the
# same run as its baseline (the scripts print the ratios and the CPU's ISA themselves).
#
# Usage: bench/run_all.sh [build dir] [script ...]    (default: build; the four below)
#   train_vs_pytorch     GPT training tokens/s, fp32 and bf16, against PyTorch (the longest:
#                        gpt2-small steps take tens of seconds on 2 cores)
#   ddp_vs_pytorch       data-parallel training against PyTorch DDP
#   generate_vs_pytorch  KV-cached generation against PyTorch
#   gcn_vs_pytorch       SpMM and a Cora epoch against PyTorch
# Any other bench/*.sh can be named too (e.g. plan_vs_measured). Each script's own
# environment variables apply (REPEATS, THREADS, ...; see its header). Benchmarks never
# gate anything: a script that fails is reported and the next one runs; the exit status is
# the number of scripts that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift $(( $# > 0 ? 1 : 0 ))
SCRIPTS=("$@")
if [ ${#SCRIPTS[@]} -eq 0 ]; then
  SCRIPTS=(train_vs_pytorch ddp_vs_pytorch generate_vs_pytorch gcn_vs_pytorch)
  # The default precisions of train_vs_pytorch are fp32 only; the suite shows both.
  export PRECISIONS=${PRECISIONS:-"fp32 bf16"}
fi
[ -x "$BUILD/loom" ] || { echo "bench/run_all.sh: no $BUILD/loom (build first: make build)" >&2; exit 2; }
for name in "${SCRIPTS[@]}"; do
  [ -f "bench/${name%.sh}.sh" ] || { echo "bench/run_all.sh: no benchmark bench/${name%.sh}.sh" >&2; exit 2; }
done

failed=0
for name in "${SCRIPTS[@]}"; do
  script="bench/${name%.sh}.sh"
  echo "=== $script ($(date -u +%FT%TZ), $(nproc) cores)"
  start=$(date +%s)
  if ! bash "$script" "$BUILD"; then
    echo "=== $script FAILED" >&2
    failed=$((failed + 1))
  fi
  echo "=== $script done in $(( $(date +%s) - start )) s"
done
exit "$failed"
