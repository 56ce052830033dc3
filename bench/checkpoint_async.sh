#!/usr/bin/env bash
# Checkpoints written behind training (--checkpoint-async) against foreground saves: a model of
# gpt2-small's width (12 layers x 768, 85 M parameters: 0.98 GB of fp32 values and AdamW
# moments) trains 33 steps saving every 8 (4 periodic checkpoints, and the run's last one in
# every mode; 8 steps leave a write behind training time to end before the next checkpoint), once without periodic checkpoints, once saving them in the foreground and once
# behind training. Per layout and mode: the run's wall seconds, what the 4 periodic checkpoints
# added to it (against the run without them) and per checkpoint, and the median step time
# (with async, the steps that ran while a write was under way are among them). Async prints
# how long each checkpoint paused training (encoding it) and how long its write took behind it.
# For scale, PyTorch's torch.save of a state dict of the same bytes, fsynced, as Loom keeps
# them (each save a new file, the two newest kept), in the same run. On a VM whose memory the
# host backs lazily, a write into page cache the guest never touched costs ~3 s a GB where a
# reused page costs 0.3: both sides here write new files into the same churn.
#
# Usage: bench/checkpoint_async.sh [build dir]        (default: build)
#
#   loom train --n-layer 12 --n-head 12 --n-embd 768 --block-size 64 --batch-size 2 --steps 33
#     --checkpoint-every 8 [--checkpoint-async] --threads T ...   (1 rank, one file; T = 2: every
#                                                     core computing, T = 1: a core left to the writer)
#   mpirun -np 2 loom train ... --dp 2 --zero 1 --threads 1 ...   (2 ranks, sharded: each its half)
#
# Environment (all optional): REPEATS=1 (the median run of each mode), PYTHON=/usr/bin/python3,
# MPIRUN=mpirun, DATA=data/tinyshakespeare.txt, WORK (default: a directory under /tmp; the
# checkpoints go there, so its disk is what is measured). Benchmarks never gate anything: the
# exit status is 0 whatever the figures.
set -euo pipefail

BENCH_NAME=checkpoint_async
source "$(dirname "$0")/mpi_bench_setup.sh"
REPEATS=${REPEATS:-1}
WORK=${WORK:-$(mktemp -d /tmp/checkpoint_async.XXXXXX)}
trap 'rm -rf "$WORK"' EXIT
MODEL=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 64 --batch-size 2 --steps 33 --eval-every 0 --eval-batches 1
       --log-every 1 --peak-gflops "$PEAK_GFLOPS" --data "$DATA")

cpu_and_isa
echo "disk under $WORK: $(df -h --output=source,fstype,size "$WORK" | tail -1 | xargs)"

calc() { awk "BEGIN { print ($1) }"; }  # arithmetic on decimals (awk: in every Debian install)

median_step() {  # run dir -> median step seconds (steps 2 and on)
  "$PYTHON" - "$1" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl") if l.strip()]
print(statistics.median(r["step_s"] for r in recs if r.get("kind") == "train" and r["step"] >= 2))
EOF
}

run_mode() {  # ranks layout mode -> "wall median_step" (the median wall of REPEATS runs); log in $WORK/last.log
  local ranks=$1 layout=$2 mode=$3 walls=() steps=() extra=()
  case $mode in
    none) extra=(--checkpoint-every 0) ;;
    sync) extra=(--checkpoint-every 8) ;;
    async) extra=(--checkpoint-every 8 --checkpoint-async) ;;
  esac
  for ((i = 0; i < REPEATS; ++i)); do
    local dir="$WORK/run"
    rm -rf "$dir"
    local t0 t1
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    mpi -np "$ranks" "$LOOM" train "${MODEL[@]}" $layout "${extra[@]}" --out-dir "$dir" > "$WORK/last.log" 2>&1 < /dev/null
    t1=$(date +%s.%N)
    walls+=("$(calc "$t1 - $t0")")
    steps+=("$(median_step "$dir")")
  done
  "$PYTHON" -c "import statistics,sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(statistics.median(map(float,a)), statistics.median(map(float,b)))" \
    "${walls[*]}" "${steps[*]}"
}

printf '%-24s %-6s %9s %17s %15s %10s\n' layout mode "wall (s)" "4 checkpoints (s)" "per ckpt (s)" "step (ms)"
for spec in "1|--threads 2|1 rank x 2 thr, file" "1|--threads 1|1 rank x 1 thr, file" \
            "2|--dp 2 --zero 1 --threads 1|dp 2 ZeRO-1, sharded"; do
  IFS='|' read -r ranks layout name <<< "$spec"
  base=""
  sync_cost=""
  for mode in none sync async; do
    read -r wall step < <(run_mode "$ranks" "$layout" "$mode")
    [ -z "$base" ] && base=$wall
    cost=$(calc "$wall - $base")
    per=$(printf '%.2f' "$(calc "$cost / 4")")
    ratio=""
    [ "$mode" = sync ] && sync_cost=$cost
    if [ "$mode" = async ] && [ "$(calc "$sync_cost > 0")" = 1 ]; then
      ratio=$(printf ' (%.2fx sync)' "$(calc "$cost / $sync_cost")")
    fi
    printf '%-24s %-6s %9.1f %17.1f %15s %10.0f%s\n' "$name" "$mode" "$wall" "$cost" "$per" "$(calc "$step * 1000")" "$ratio"
    if [ "$mode" = async ]; then
      grep -o 'checkpoint of step [0-9]* written behind training in .*s (training paused [0-9.]* s' "$WORK/last.log" |
        sed 's/^/    /' || true
    fi
  done
done

# PyTorch's save of the same bytes (values and two moments of 85 M parameters), fsynced.
"$PYTHON" - "$WORK" <<'EOF' || echo "PyTorch torch.save: not measured (no torch)"
import os, sys, time
import torch
n = 85_203_456
state = {"model": torch.randn(n), "exp_avg": torch.randn(n), "exp_avg_sq": torch.rand(n)}
path = os.path.join(sys.argv[1], "torch_state.pt")
times = []
for i in range(5):
    t0 = time.time()
    with open(f"{path}.{i}", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if i >= 2:
        os.remove(f"{path}.{i - 2}")  # the two newest kept, as keep_checkpoints = 2
    times.append(time.time() - t0)
times.sort()
print(f"PyTorch {torch.__version__} torch.save + fsync of the same {3 * n * 4 / 1e9:.2f} GB, a new file each, "
      f"two kept: {times[2]:.2f} s (median of 5)")
EOF
