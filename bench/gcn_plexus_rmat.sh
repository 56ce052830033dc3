#!/usr/bin/env bash
# Plexus-style 3D-parallel GCN on an R-MAT graph (default 2^18 nodes, 128 features, 3 layers
# of 128): for every grid R x C x D of 1, 2, 4 and 8 ranks, the median epoch time of STEPS
# epochs (all but the first) and the bytes rank 0's grid collectives moved per epoch, with the
# node permutation; the non-zero imbalance of each layer's blocks (max / mean per rank) with
# and without it, for every grid from one process (`loom bench graph-balance`, no training);
# then `loom plan --model gcn`'s pick for each rank count next to the measured best. A grid
# that runs past LIMIT seconds is stopped and recorded as not finished, never left hanging.
# Usage: bench/gcn_plexus_rmat.sh [BUILD_DIR]
#   (SCALE=18, STEPS=2, RANKS="1 2 4 8", THREADS=1 a rank, LIMIT=600 seconds a grid;
#    GRIDS="2,4,1 4,1,2" runs only those grids, e.g. again after a failure)
set -euo pipefail
BUILD=${1:-build}
SCALE=${SCALE:-18}
STEPS=${STEPS:-2}
RANKS=${RANKS:-"1 2 4 8"}
THREADS=${THREADS:-1}
LIMIT=${LIMIT:-600}
cd "$(dirname "$0")/.."
GRAPH="rmat:scale=$SCALE,edge_factor=16,features=128,classes=16"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
ISA=$(ONEDNN_VERBOSE=1 "$BUILD/loom" bench train --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 1 --steps 1 --warmup 0 --threads 1 2>/dev/null | grep -m1 -o 'isa:.*' || true)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; oneDNN ${ISA:-isa: unknown}; $THREADS thread(s) a rank"
echo "load at start:$(uptime | sed 's/.*load average://')"
echo "graph $GRAPH, 3 layers of 128, $STEPS epochs each (median of all but the first), at most $LIMIT s a grid"
"$BUILD/loom" bench graph-balance --data "$GRAPH" --ranks "$(echo $RANKS | tr ' ' ',')" --layers 3 > "$TMP/balance.jsonl"
printf "%-6s %-7s %10s %12s  %s\n" ranks grid "epoch ms" "MB / epoch" "imbalance, layers 0/1/2: permuted | file order"
for p in $RANKS; do
  : > "$TMP/measured_$p"
  for R in $(seq 1 "$p"); do for C in $(seq 1 "$p"); do
    [ $((p % (R * C))) -eq 0 ] || continue
    D=$((p / (R * C)))
    [ -z "${GRIDS:-}" ] || [[ " $GRIDS " == *" $R,$C,$D "* ]] || continue
    out="$TMP/run_${p}_${R}${C}${D}"
    args=(train --model gcn --data "$GRAPH" --gcn-layers 3 --gcn-hidden 128 --gcn-dropout 0 --steps "$STEPS"
          --eval-every 0 --threads "$THREADS" --out-dir "$out" --checkpoint-every 0)
    launch=("$BUILD/loom")
    if [ "$p" -gt 1 ]; then
      args+=(--tp-3d "$R,$C,$D" --graph-permute=true)
      launch=(mpirun --oversubscribe --bind-to none -np "$p" "$BUILD/loom")
    fi
    rc=0
    timeout --kill-after=20 "$LIMIT" "${launch[@]}" "${args[@]}" > "$out.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then
      stats=$(python3 - "$out/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"train"' in l]
times = [r["step_s"] for r in rows[1:]] or [rows[0]["step_s"]]
print(f"{1e3 * statistics.median(times):10.1f} {rows[-1]['tp_comm_bytes'] / 1e6:12.2f}")
PY
)
      echo "$(echo "$stats" | awk '{print $1}') $R,$C,$D" >> "$TMP/measured_$p"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      stats=$(printf "%23s" "did not finish in ${LIMIT} s")
    elif grep -q "more than the .* this machine has available" "$out.log"; then
      stats=$(printf "%23s" "refused: host memory")
    else
      stats=$(printf "%23s" "failed (exit $rc)")
      tail -3 "$out.log" | sed 's/^/    /' >&2
    fi
    imb=$(python3 - "$TMP/balance.jsonl" "$R,$C,$D" <<'PY'
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r["grid"] == sys.argv[2]:
        f = lambda xs: " / ".join(f"{x:.3f}" for x in xs)
        print(f"{f(r['permuted'])} | {f(r['file_order'])}")
PY
)
    printf "%-6s %-7s %s  %s\n" "$p" "$R,$C,$D" "$stats" "$imb"
    [ "$p" -gt 1 ] || break 2
  done; done
  if [ "$p" -gt 1 ]; then
    pick=$("$BUILD/loom" plan --model gcn --graph "$GRAPH" --gcn-layers 3 --gcn-hidden 128 --gpus "$p" --cluster local --top 1 | sed -n 3p | awk '{print $1}')
    best=$(sort -n "$TMP/measured_$p" | head -1 | awk '{print $2 " (" $1 " ms)"}')
    echo "  $p ranks: plan's pick $pick, measured best ${best:-none finished}"
  fi
done
echo "load at end:$(uptime | sed 's/.*load average://')"
