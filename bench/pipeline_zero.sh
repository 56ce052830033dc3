#!/usr/bin/env bash
# ZeRO stages under a pipeline: dp 2 x pp 2 (4 ranks) trained with --zero 0, 1, 2 and 3 (and 3
# with --zero3-reshard step: "3s") on the gpt-mini shape, each stage's tokens/s next to DDP's
# (--zero 0) and each rank's memory as the tracker measured it next to the memory check's count
# (memory.json's formula).
#
# Usage: bench/pipeline_zero.sh [build dir]        (default: build)
#
#   mpirun -np 4 loom train --dp 2 --pp 2 --zero Z --schedule S --micro-batches 4 --batch-size 4
#     --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 ...
# (global batch 32 sequences of 256 tokens; S = 1f1b, and interleaved with 2 chunks). Columns:
# median tokens/s over the steps after the first LOOM_SKIP and its ratio to the same
# schedule's ZeRO-0; on the rank holding the most, its model state (parameters, gradients,
# optimizer state, between steps) and ZeRO's units held whole at once (`gathered`, at its peak),
# each next to the formula's count on that rank; the ratio of the state to ZeRO-0's. The ISA oneDNN reports is
# printed first. Benchmarks never gate anything: the exit status is 0 whatever the figures.
#
# Environment (all optional): LOOM_STEPS=8, LOOM_SKIP=2, PEAK_GFLOPS=160, MPIRUN=mpirun,
# DATA=data/tinyshakespeare.txt, PYTHON=/usr/bin/python3, SCHEDULES="1f1b interleaved".
set -euo pipefail

BENCH_NAME=pipeline_zero
source "$(dirname "$0")/mpi_bench_setup.sh"
LOOM_STEPS=${LOOM_STEPS:-8}
SCHEDULES=${SCHEDULES:-"1f1b interleaved"}
WORK=$(mktemp -d /tmp/pipeline_zero.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cpu_and_isa

summary() {  # run dir -> "tokens/s state gathered formula_state formula_gathered"
  "$PYTHON" - "$1" "$LOOM_SKIP" <<'EOF'
import json, statistics, sys
d, skip = sys.argv[1], int(sys.argv[2])
recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if l.strip()]
tps = statistics.median(r["tokens_per_s"] for r in recs if r.get("kind") == "train" and r["step"] > skip)
ranks = json.load(open(f"{d}/memory.json"))["ranks"]
def state(r):  # between steps, as the formula counts it (the peaks include start-up's copies)
    c = r["current"]
    return c["params"] + c["grads"] + c["optim"]
most = max(ranks, key=lambda r: state(r) + r["peak"]["gathered"])
f = most["formula"]
print(tps, state(most), most["peak"]["gathered"], f["params"] + f["grads"] + f["optimizer"], f["gathered"])
EOF
}

printf '%-12s %5s %10s %8s %14s %14s %14s %14s %8s\n' schedule zero "tokens/s" "vs z0" "state (MiB)" "formula" \
  "gathered" "formula" "vs z0"
for schedule in $SCHEDULES; do
  chunks=1
  [ "$schedule" = interleaved ] && chunks=2
  base_tps="" base_state=""
  for zero in 0 1 2 3 3s; do
    dir="$WORK/$schedule.z$zero"
    reshard=micro-batch
    [ "$zero" = 3s ] && reshard=step
    mpi -np 4 "$LOOM" train --data "$DATA" --dp 2 --pp 2 --zero "${zero%s}" --zero3-reshard "$reshard" \
      --schedule "$schedule" --chunks "$chunks" \
      --micro-batches 4 --batch-size 4 --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --threads 1 \
      --steps "$LOOM_STEPS" --log-every 1 --eval-every 0 --eval-batches 1 --peak-gflops "$PEAK_GFLOPS" \
      --out-dir "$dir" >/dev/null 2>&1 || { echo "$schedule zero $zero failed" >&2; continue; }
    read -r tps state gathered f_state f_gathered <<<"$(summary "$dir")"
    [ -z "$base_tps" ] && base_tps=$tps base_state=$state
    "$PYTHON" - "$schedule" "$zero" "$tps" "$base_tps" "$state" "$f_state" "$gathered" "$f_gathered" "$base_state" <<'EOF'
import sys
s, z, tps, b, st, fst, g, fg, bs = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
mib = lambda x: f"{x / 2**20:.2f}"
print(f"{s:<12} {z:>5} {tps:>10.0f} {tps / b:>7.2f}x {mib(st):>14} {mib(fst):>14} {mib(g):>14} {mib(fg):>14} {st / bs:>7.2f}x")
EOF
  done
done
