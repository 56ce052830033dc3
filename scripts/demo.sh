#!/usr/bin/env bash
# The demo: train the default character-level GPT on Tiny Shakespeare on a 4-rank layout,
# data parallel over 2 pipelines of 2 stages (dp 2 x pp 2, 1F1B), then sample from it.
# The global batch is the config's (32 sequences: 4 micro-batches of 4 on each of 2
# pipelines), so the run computes what the serial `loom train --config ...` computes.
# It also traces steps 2-4 (runs/shakespeare/trace.json, for Perfetto) and writes the run
# report (runs/shakespeare/report.html).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
ranks=4
cores=$(nproc)
threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
mpi=(mpirun -n "$ranks" --bind-to none)
# More ranks than cores: let ranks share them, and yield the core while waiting for a message.
(( cores < ranks )) && mpi+=(--oversubscribe)
export OMPI_MCA_mpi_yield_when_idle=1
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
rm -rf runs/shakespeare
echo "=== ${mpi[*]} loom train --config configs/shakespeare.toml --dp 2 --pp 2 --micro-batches 4 --batch-size 4 --threads $threads --trace ==="
"${mpi[@]}" "$build/loom" train --config configs/shakespeare.toml --dp 2 --pp 2 --micro-batches 4 --batch-size 4 \
  --threads "$threads" --trace
"$build/loom" report runs/shakespeare
echo
echo "=== sample (loom sample --checkpoint runs/shakespeare --prompt 'ROMEO:') ==="
"$build/loom" sample --checkpoint runs/shakespeare --prompt "ROMEO:" --tokens 400 --seed 1
