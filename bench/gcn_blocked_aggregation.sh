#!/usr/bin/env bash
# Plexus's blocked, overlapped aggregation (`--graph-aggregation-chunks K`) against one SpMM
# then one all-reduce, on the same 3D grids in the same run: for each grid, REPEATS alternating
# runs of each (who goes first alternates too) of a 3-layer GCN on an R-MAT graph, the median
# epoch time (all epochs but the first of a run) and the median time the grid's collectives
# kept the rank waiting (metrics.jsonl's tp_comm_exposed_s), and chunked / one-sum ratios.
# The bytes moved are the same by construction (tested: Graph3DBytes).
# Usage: bench/gcn_blocked_aggregation.sh [BUILD_DIR]
#   (SCALE=16, STEPS=4 epochs a run, GRIDS="1,1,2 2,1,1 2,1,2", CHUNKS=4, REPEATS=3,
#    THREADS=1 a rank, NET_GBPS=0: with G > 0 every collective takes at least its bytes at
#    G Gbit/s, `loom train --net-gbps`, a network slower than this host's shared memory)
set -euo pipefail
BENCH_NAME=gcn_blocked_aggregation
source "$(dirname "$0")/mpi_bench_setup.sh"
SCALE=${SCALE:-16}
STEPS=${STEPS:-4}
GRIDS=${GRIDS:-"1,1,2 2,1,1 2,1,2"}
CHUNKS=${CHUNKS:-4}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-1}
NET_GBPS=${NET_GBPS:-0}
GRAPH="rmat:scale=$SCALE,edge_factor=16,features=128,classes=16"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "$(cpu_and_isa); $THREADS thread(s) a rank"
echo "graph $GRAPH, 3 layers of 128, $STEPS epochs a run, $REPEATS runs each; --net-gbps $NET_GBPS; load at start:$(uptime | sed 's/.*load average://')"

# One run: prints "<median epoch s> <median exposed s>".
run() {
  local grid=$1 chunks=$2 out="$TMP/run"
  local ranks=$(( $(echo "$grid" | tr ',' '*') ))
  rm -rf "$out"
  mpi -np "$ranks" "$LOOM" train --model gcn --data "$GRAPH" --gcn-layers 3 \
    --gcn-hidden 128 --gcn-dropout 0 --steps "$STEPS" --eval-every 0 --checkpoint-every 0 --threads "$THREADS" \
    --tp-3d "$grid" --graph-aggregation-chunks "$chunks" --net-gbps "$NET_GBPS" --out-dir "$out" > "$TMP/log" 2>&1 ||
    { tail -3 "$TMP/log" >&2; echo "nan nan"; return; }
  "$PYTHON" - "$out/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"train"' in l][1:]
print(statistics.median(r["step_s"] for r in rows), statistics.median(r.get("tp_comm_exposed_s", 0.0) for r in rows))
PY
}

printf "%-7s %7s %12s %12s %14s %14s %8s %8s\n" grid chunks "epoch ms" "one-sum ms" "exposed ms" "one-sum exp." ratio "exp. ratio"
for grid in $GRIDS; do
  : > "$TMP/one" ; : > "$TMP/blocked"
  for rep in $(seq 1 "$REPEATS"); do
    if [ $((rep % 2)) -eq 1 ]; then order="1 $CHUNKS"; else order="$CHUNKS 1"; fi
    for k in $order; do
      if [ "$k" = 1 ]; then run "$grid" 1 >> "$TMP/one"; else run "$grid" "$k" >> "$TMP/blocked"; fi
    done
  done
  "$PYTHON" - "$TMP/one" "$TMP/blocked" "$grid" "$CHUNKS" <<'PY'
import statistics, sys
def med(path, col):
    return statistics.median(float(l.split()[col]) for l in open(path))
one, blocked = (med(sys.argv[1], 0), med(sys.argv[1], 1)), (med(sys.argv[2], 0), med(sys.argv[2], 1))
ratio = lambda a, b: f"{a / b:8.2f}" if b > 0 else f"{'-':>8}"
print(f"{sys.argv[3]:7s} {sys.argv[4]:>7s} {1e3 * blocked[0]:12.1f} {1e3 * one[0]:12.1f} {1e3 * blocked[1]:14.1f} "
      f"{1e3 * one[1]:14.1f} {ratio(blocked[0], one[0])} {ratio(blocked[1], one[1])}")
PY
done
echo "load at end:$(uptime | sed 's/.*load average://')"
