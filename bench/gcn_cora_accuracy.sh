#!/usr/bin/env bash
# Cora test accuracy of configs/cora.toml over SEEDS seeds (10 by default): each seed's
# final test accuracy, then the mean and the standard deviation.
# Usage: bench/gcn_cora_accuracy.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
SEEDS=${SEEDS:-10}
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for seed in $(seq 1 "$SEEDS"); do
  "$BUILD/loom" train --config configs/cora.toml --seed "$seed" --threads "${THREADS:-1}" --out-dir "$TMP/s$seed" \
    --log-every 1000 --eval-every 0 | grep -o 'test_acc [0-9.]*' | awk -v s="$seed" '{print "seed " s ": " $2}'
done | tee "$TMP/acc"
awk '{x[NR] = $3; s += $3} END {m = s / NR; for (i in x) v += (x[i] - m) ^ 2;
     printf "mean test accuracy %.4f, std %.4f over %d seeds (min/max below)\n", m, sqrt(v / (NR - 1)), NR}' "$TMP/acc"
sort -k3 -n "$TMP/acc" | sed -n '1p;$p'
