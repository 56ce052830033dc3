#!/usr/bin/env bash
# Plexus-style 3D-parallel GCN on an R-MAT graph (default 2^18 nodes, 128 features, 3 layers
# of 128): for every grid R x C x D of 1, 2, 4 and 8 ranks, with and without the node
# permutation, the median epoch time of STEPS epochs, the bytes rank 0's grid collectives
# moved per epoch, and the non-zero imbalance of each layer's blocks (max / mean per rank);
# then `loom plan --model gcn`'s pick for each rank count next to the measured best.
# Usage: bench/gcn_plexus_rmat.sh [BUILD_DIR]  (SCALE=18, STEPS=3, RANKS="1 2 4 8", THREADS=1)
set -euo pipefail
BUILD=${1:-build}
SCALE=${SCALE:-18}
STEPS=${STEPS:-3}
RANKS=${RANKS:-"1 2 4 8"}
THREADS=${THREADS:-1}
cd "$(dirname "$0")/.."
GRAPH="rmat:scale=$SCALE,edge_factor=16,features=128,classes=16"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
ISA=$(ONEDNN_VERBOSE=1 "$BUILD/loom" bench train --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 1 --steps 1 --warmup 0 --threads 1 2>/dev/null | grep -m1 -o 'isa:.*' || true)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; oneDNN ${ISA:-isa: unknown}; $THREADS thread(s) a rank"
echo "graph $GRAPH, 3 layers of 128, $STEPS epochs each (median of all but the first)"
printf "%-8s %-8s %12s %14s  %s\n" ranks grid "epoch ms" "MB / epoch" "imbalance (permuted | file order)"
for p in $RANKS; do
  for R in $(seq 1 "$p"); do for C in $(seq 1 "$p"); do
    [ $((p % (R * C))) -eq 0 ] || continue
    D=$((p / (R * C)))
    line=""
    for permute in true false; do
      out="$TMP/run_${p}_${R}${C}${D}_$permute"
      args=(train --model gcn --data "$GRAPH" --gcn-layers 3 --gcn-hidden 128 --gcn-dropout 0 --steps "$STEPS"
            --eval-every 0 --threads "$THREADS" --out-dir "$out" --checkpoint-every 0)
      [ "$p" -gt 1 ] && args+=(--tp-3d "$R,$C,$D" --graph-permute="$permute")
      if [ "$p" -gt 1 ]; then
        mpirun --oversubscribe --bind-to none -np "$p" "$BUILD/loom" "${args[@]}" > "$out.log" 2>&1
      else
        "$BUILD/loom" "${args[@]}" > "$out.log" 2>&1
      fi
      imb=$(grep -o 'max/mean.*' "$out.log" | sed 's/max\/mean //' || true)
      line="$line${imb:-serial} | "
      if [ "$permute" = true ]; then
        stats=$(python3 - "$out/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"train"' in l]
times = [r["step_s"] for r in rows[1:]] or [rows[0]["step_s"]]
print(f"{1e3 * statistics.median(times):12.1f} {rows[-1]['tp_comm_bytes'] / 1e6:14.2f}")
PY
)
      fi
      [ "$p" -gt 1 ] || break
    done
    printf "%-8s %-8s %s  %s\n" "$p" "$R,$C,$D" "$stats" "${line% | }"
    [ "$p" -gt 1 ] || break 2
  done; done
  [ "$p" -gt 1 ] && echo "  plan's pick: $("$BUILD/loom" plan --model gcn --graph "$GRAPH" --gcn-layers 3 --gcn-hidden 128 --gpus "$p" --cluster local --top 1 | sed -n 3p | awk '{print $1}')"
done
