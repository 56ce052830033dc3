#!/usr/bin/env bash
# Context parallelism on this machine: how the zig-zag split balances the ring's attention
# work against the contiguous split, and how much of the ring's waiting the block compute
# hides. Each layout trains a few steps of a gpt-mini-wide model (C=384, H=6) at context T
# with --trace; from trace.json, per rank: the ring attention spans (forward + backward,
# category "cp") minus the "ring wait" spans inside them = block compute, and the waits =
# the exposed part of the K/V and dK/dV hops.
#
# Usage: bench/cp_balance.sh [build dir]   (default: build)
# Environment (optional): T=1024, CPS="2 4", LAYERS=2, LOOM_STEPS=4 (traced: 2..LOOM_STEPS),
# NET_GBPS=0 (the emulated link applies to collectives, not to the ring's p2p hops).
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
set -euo pipefail

BENCH_NAME=cp_balance
source "$(dirname "$0")/mpi_bench_setup.sh"
T=${T:-1024}
CPS=${CPS:-"2 4"}
LAYERS=${LAYERS:-2}
LOOM_STEPS=${LOOM_STEPS:-4}
WORK=$(mktemp -d /tmp/cp_balance.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "# $($LOOM --version 2>/dev/null | head -1 || true)"
printf "%-4s %-11s %-34s %-34s %s\n" cp split "ring compute per rank (ms/step)" "ring wait per rank (ms/step)" "max/mean compute"
for cp in $CPS; do
  for split in zigzag contiguous; do
    dir="$WORK/cp$cp.$split"
    mpi -np "$cp" "$LOOM" train --data "$DATA" --n-layer "$LAYERS" --n-head 6 --n-embd 384 --block-size "$T" \
      --batch-size 1 --steps "$LOOM_STEPS" --warmup-steps 1 --eval-every 0 --eval-batches 1 --threads 1 \
      --peak-gflops "$PEAK_GFLOPS" --cp "$cp" --cp-split "$split" --trace --trace-steps "2:$LOOM_STEPS" \
      --out-dir "$dir" >"$dir.log" 2>&1 || { echo "cp $cp $split failed:"; tail -5 "$dir.log"; continue; }
    "$PYTHON" - "$dir/trace.json" "$cp" "$split" "$((LOOM_STEPS - 1))" <<'PY'
import json, sys
path, cp, split, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
events = json.load(open(path))
events = events["traceEvents"] if isinstance(events, dict) else events
ring = [0.0] * cp
wait = [0.0] * cp
for e in events:
    if e.get("ph") != "X" or e.get("cat") != "cp":
        continue
    ms = e.get("dur", 0.0) / 1e3 / steps
    if e["name"].startswith("ring attention"):
        ring[e["pid"]] += ms
    elif e["name"] == "ring wait":
        wait[e["pid"]] += ms
compute = [r - w for r, w in zip(ring, wait)]
mean = sum(compute) / cp
print(f"{cp:<4} {split:<11} {' '.join(f'{c:7.1f}' for c in compute):<34} {' '.join(f'{w:7.1f}' for w in wait):<34} {max(compute) / mean:.2f}")
PY
  done
done
