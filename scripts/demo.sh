#!/usr/bin/env bash
# The demo: train the default character-level GPT on Tiny Shakespeare, then sample from it.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rm -rf runs/shakespeare
"$build/loom" train --config configs/shakespeare.toml
echo
echo "=== sample (loom sample --checkpoint runs/shakespeare --prompt 'ROMEO:') ==="
"$build/loom" sample --checkpoint runs/shakespeare --prompt "ROMEO:" --tokens 400 --seed 1
