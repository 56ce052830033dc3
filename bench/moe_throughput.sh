#!/usr/bin/env bash
# Mixture of experts on this machine, in two parts.
#
# 1. Throughput: tokens/s of gpt-mini (L=6 H=6 C=384, context 256) dense and as a mixture of
#    8 experts, top-2, in every block, serially (1 process x 2 threads, batch 2B) and under
#    expert parallelism (2 processes x 1 thread, --dp 2 --ep 2, batch B each: the same global
#    batch), with the all-to-all's share of the ep step (metrics.jsonl's moe_a2a_s over
#    step_s). Loom's blocks have one MLP width, so no dense model has the MoE's active FLOPs;
#    the table prints each model's training FLOPs per token (6 x active parameters in the
#    blocks' GEMMs, attention and head as plan::ModelSpec counts them) and the FLOP/s they
#    make, which is what "the same active FLOPs" compares.
#    Then the same MoE on two model-parallel ranks (2 processes x 1 thread, batch 2B: the same
#    global batch): tp 2 without sequence parallelism (every tp rank runs every token through
#    the experts), tp 2 with it (each its half of every sequence), and the 3D grid 2,1,1
#    (each rank holds 4 of the 8 experts and runs their rows, the plane gathering their outputs),
#    with the dense model on that grid; the exchange share is the plane's gathers' under the grid.
#    Then on four ranks (4 processes x 1 thread, batch B each: the same global batch; more ranks
#    than cores on a small host): dp 4 x ep 4, dp 2 over 2,1,1 grids (each plane rank 4 experts)
#    and the same with ep 2 (each rank 2 experts: the plane's block split over ep), each with
#    `loom plan`'s step for it on this machine (--cluster local) beside the measured one.
# 2. Load balance: 500 steps of a small MoE (L=2 C=64, 8 experts, top-2) on Tiny Shakespeare
#    with the Switch auxiliary loss (coefficient 0.01) and without it (0): the max/mean expert
#    load over the last 100 steps, and the validation loss next to the dense model's (the same
#    attention and one MLP per block: fewer active FLOPs than top-2).
#
# Usage: bench/moe_throughput.sh [build dir]        (default: build)
# Environment (all optional): LOOM_STEPS=6 (throughput runs), LOOM_SKIP=2, B=4, BALANCE_STEPS=500,
# MPIRUN=mpirun, DATA=data/tinyshakespeare.txt, PYTHON=/usr/bin/python3, SKIP_BALANCE=1.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
set -euo pipefail

BENCH_NAME=moe_throughput
source "$(dirname "$0")/mpi_bench_setup.sh"
LOOM_STEPS=${LOOM_STEPS:-6}
B=${B:-4}
BALANCE_STEPS=${BALANCE_STEPS:-500}
[ "$LOOM_STEPS" -gt "$LOOM_SKIP" ] || die "LOOM_STEPS ($LOOM_STEPS) must exceed LOOM_SKIP ($LOOM_SKIP)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

MINI="--data $DATA --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --steps $LOOM_STEPS --log-every 1 --eval-every 0 --eval-batches 1"
MOE="--moe-experts 8 --moe-top-k 2"

# run NAME RANKS ARGS...: one loom train run; its metrics.jsonl kept as $WORK/NAME.jsonl.
run() {
  local name=$1 ranks=$2
  shift 2
  if [ "$ranks" -eq 1 ]; then
    "$LOOM" train "$@" --out-dir "$WORK/$name" >/dev/null
  else
    mpi -np "$ranks" "$LOOM" train "$@" --out-dir "$WORK/$name" >/dev/null
  fi
  cp "$WORK/$name/metrics.jsonl" "$WORK/$name.jsonl"
}

echo "oneDNN: $("$PYTHON" - <<'EOF'
import subprocess, re
out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = re.search(r"Model name:\s*(.*)", out)
flags = re.search(r"Flags:\s*(.*)", out)
isa = [f for f in ("avx512f", "avx512_bf16", "amx_bf16", "avx2") if flags and f in flags.group(1).split()]
print((model.group(1) if model else "unknown CPU") + ", " + " ".join(isa))
EOF
)"
ONEDNN_VERBOSE=1 "$LOOM" train $MINI --steps 1 --batch-size 1 --out-dir "$WORK/isa" 2>&1 | grep -m1 "isa:" || true

run dense_serial 1 $MINI --batch-size $((2 * B)) --threads 2
run moe_serial 1 $MINI $MOE --batch-size $((2 * B)) --threads 2
run dense_dp2 2 $MINI --dp 2 --batch-size "$B" --threads 1
run moe_ep2 2 $MINI $MOE --dp 2 --ep 2 --batch-size "$B" --threads 1
run moe_tp2 2 $MINI $MOE --tp 2 --batch-size $((2 * B)) --threads 1
run moe_tp2_sp 2 $MINI $MOE --tp 2 --sequence-parallel --batch-size $((2 * B)) --threads 1
run dense_grid 2 $MINI --tp-3d 2,1,1 --batch-size $((2 * B)) --threads 1
run moe_grid 2 $MINI $MOE --tp-3d 2,1,1 --batch-size $((2 * B)) --threads 1

run moe_ep4 4 $MINI $MOE --dp 4 --ep 4 --batch-size "$B" --threads 1
run moe_dp2_grid 4 $MINI $MOE --dp 2 --tp-3d 2,1,1 --batch-size $((2 * B)) --threads 1
run moe_dp2_ep2_grid 4 $MINI $MOE --dp 2 --ep 2 --tp-3d 2,1,1 --batch-size $((2 * B)) --threads 1
PLAN="$LOOM plan --cluster local --layers 6 --heads 6 --hidden 384 --seq 256 --vocab 65 --gpus 4 --global-batch $((4 * B)) --moe-experts 8 --moe-top-k 2"
for layout in "ep4:--dp 4 --ep 4" "grid:--dp 2 --tp-3d 2,1,1" "ep2_grid:--dp 2 --ep 2 --tp-3d 2,1,1"; do
  $PLAN ${layout#*:} 2>/dev/null | awk -v n="${layout%%:*}" '/best/ {print "plan " n " " $0}' >> "$WORK/plans.txt" || true
done

if [ "${SKIP_BALANCE:-0}" != 1 ]; then
  SMALL="--data $DATA --n-layer 2 --n-head 4 --n-embd 64 --block-size 64 --batch-size 16 --steps $BALANCE_STEPS --log-every 10 --eval-every $BALANCE_STEPS --eval-batches 20 --threads 1"
  run balance_aux 1 $SMALL $MOE --moe-aux-loss-coef 0.01
  run balance_noaux 1 $SMALL $MOE --moe-aux-loss-coef 0
  run balance_dense 1 $SMALL
fi

"$PYTHON" - "$WORK" "$LOOM_SKIP" <<'EOF'
import json, re, statistics, sys, os
work, skip = sys.argv[1], int(sys.argv[2])

def records(name):
    path = os.path.join(work, name + ".jsonl")
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []

def train(name):
    return [r for r in records(name) if r.get("kind") == "train"]

# Training FLOPs per token of gpt-mini (L 6, C 384, T 256, V 65): 6 x the GEMM parameters a
# token runs through plus attention's 12 L T C (Narayanan et al.); top-2 runs two MLPs.
L, C, T, V = 6, 384, 256, 65
attn, mlp = 4 * C * C, 8 * C * C
dense_flops = 6 * (L * (attn + mlp) + C * V) + 12 * L * T * C
moe_flops = 6 * (L * (attn + 2 * mlp + 8 * C) + C * V) + 12 * L * T * C
print(f"\ngpt-mini training FLOPs per token: dense {dense_flops / 1e6:.1f} M, MoE 8 experts top-2 {moe_flops / 1e6:.1f} M (x{moe_flops / dense_flops:.2f})")
print(f"{'run':<34} {'tokens/s':>10} {'GFLOP/s':>9} {'exchange share':>15} {'peak MiB/rank':>14}")
for name, label, flops in [("dense_serial", "dense, 1 process x 2 threads", dense_flops),
                           ("moe_serial", "MoE, 1 process x 2 threads", moe_flops),
                           ("dense_dp2", "dense, dp 2", dense_flops),
                           ("moe_ep2", "MoE, dp 2 ep 2", moe_flops),
                           ("moe_tp2", "MoE, tp 2 (experts replicated)", moe_flops),
                           ("moe_tp2_sp", "MoE, tp 2 + sequence parallel", moe_flops),
                           ("dense_grid", "dense, tp_3d 2,1,1", dense_flops),
                           ("moe_grid", "MoE, tp_3d 2,1,1 (experts split)", moe_flops),
                           ("moe_ep4", "MoE, 4 ranks: dp 4 ep 4", moe_flops),
                           ("moe_dp2_grid", "MoE, 4 ranks: dp 2 x 2,1,1", moe_flops),
                           ("moe_dp2_ep2_grid", "MoE, 4 ranks: dp 2 ep 2 x 2,1,1", moe_flops)]:
    rs = train(name)[skip:]
    if not rs:
        continue
    tps = statistics.median(r["tokens_per_s"] for r in rs)
    share = ""
    if "moe_a2a_s" in rs[0]:
        share = f"{100 * statistics.median(r['moe_a2a_s'] / r['step_s'] for r in rs):.1f}%" if name != "moe_tp2" and "sp" not in name else "-"
    peak = max(r.get("peak_mem_bytes", 0) for r in rs) / 2**20
    print(f"{label:<34} {tps:>10.0f} {tps * flops / 1e9:>9.1f} {share:>15} {peak:>14.0f}")

# The planner's step for the 4-rank layouts on this machine, beside the measured median step.
if os.path.exists(os.path.join(work, "plans.txt")):
    print("\nloom plan --cluster local on the 4-rank layouts (predicted step s) against the measured median step:")
    for line in open(os.path.join(work, "plans.txt")):
        parts = line.split()
        name = {"ep4": "moe_ep4", "grid": "moe_dp2_grid", "ep2_grid": "moe_dp2_ep2_grid"}[parts[1]]
        rs = train(name)[skip:]
        step = statistics.median(r["step_s"] for r in rs) if rs else float("nan")
        # The row: the layout's name (ending "mb N" and any recompute note), then memory and step.
        row = re.search(r"mb \d+(?:, [a-z ]+)?\s+([\d.]+)\s+([\d.]+)", line)
        planned = row.group(2) if row else "?"
        print(f"  {name:<18} planned {planned:>7} s, measured {step:.3f} s   ({' '.join(parts[2:])})")

if train("balance_aux"):
    print(f"\nload balance, small MoE (L 2, C 64, 8 experts, top-2), {train('balance_aux')[-1]['step']} steps:")
    for name, label in [("balance_aux", "aux loss 0.01"), ("balance_noaux", "no aux loss"), ("balance_dense", "dense")]:
        rs = train(name)
        val = [r["val_loss"] for r in records(name) if r.get("kind") == "val"]
        tail = [r["moe_load_imbalance"] for r in rs[-10:] if "moe_load_imbalance" in r]
        imb = f"max/mean load {statistics.mean(tail):.2f} (last 100 steps)" if tail else "-"
        print(f"  {label:<14} {imb:<40} val loss {val[-1]:.4f}" if val else f"  {label}: no val loss")
EOF
exit 0
