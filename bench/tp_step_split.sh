#!/usr/bin/env bash
# Tensor parallelism on this machine: per-step time split into compute and tensor-parallel
# communication, and the bytes one rank's tp collectives move per step next to the analytic
# count (plan::tensor_parallel_bytes_per_step, printed by `loom train --dry-run`).
#
# Usage: bench/tp_step_split.sh [build dir]        (default: build)
#
# Two models, each with its per-rank batch B and context 256:
#   gpt-mini  L=6  H=6  C=384  B=8
#   wide      L=4  H=16 C=1024 B=4
# and three layouts of the same work (the global batch is B sequences in every row):
#   tp=1      1 process x 2 threads     loom train --threads 2 ...
#   tp=2      2 processes x 1 thread    mpirun -np 2 loom train --tp 2 --threads 1 ...
#   tp=2 SP   the same with --sequence-parallel
# Figures are medians over the steps after the first LOOM_SKIP of each run (from
# metrics.jsonl: tokens_per_s gives the step time, tp_comm_s the time rank 0's tensor-parallel
# collectives took, all blocking, so "compute" is the rest) and medians over REPEATS runs.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
#
# Environment (all optional): REPEATS=2, LOOM_STEPS=8, LOOM_SKIP=2, PEAK_GFLOPS=160,
# MPIRUN=mpirun, DATA=data/tinyshakespeare.txt, PYTHON=/usr/bin/python3, RESULTS=FILE (keep
# the raw JSON lines), REPORT_ONLY=FILE (run nothing; print the table of an earlier RESULTS).
set -euo pipefail

BENCH_NAME=tp_step_split
source "$(dirname "$0")/mpi_bench_setup.sh"
REPEATS=${REPEATS:-2}
LOOM_STEPS=${LOOM_STEPS:-8}
[ "$LOOM_STEPS" -gt "$LOOM_SKIP" ] || die "LOOM_STEPS ($LOOM_STEPS) must exceed LOOM_SKIP ($LOOM_SKIP)"

WORK=$(mktemp -d /tmp/tp_step_split.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
RESULTS=${REPORT_ONLY:-${RESULTS:-$WORK/results.jsonl}}
[ -n "${REPORT_ONLY:-}" ] || : >"$RESULTS"

declare -A MODEL=([gpt-mini]="--n-layer 6 --n-head 6 --n-embd 384 --batch-size 8"
                  [wide]="--n-layer 4 --n-head 16 --n-embd 1024 --batch-size 4")

run_one() {  # model layout rep
  local model=$1 layout=$2 rep=$3 dir="$WORK/$1.$2.$3" analytic=0
  # shellcheck disable=SC2206
  local args=(train --data "$DATA" ${MODEL[$model]} --block-size 256 --steps "$LOOM_STEPS" --log-every 1
              --eval-every 0 --eval-batches 1 --peak-gflops "$PEAK_GFLOPS" --out-dir "$dir")
  case $layout in
    tp1) "$LOOM" "${args[@]}" --threads 2 >/dev/null 2>&1 || { echo "$model $layout failed" >&2; return; } ;;
    tp2|tp2-sp)
      local sp=()
      [ "$layout" = tp2 ] || sp=(--sequence-parallel)
      analytic=$("$LOOM" "${args[@]}" --tp 2 "${sp[@]}" --dry-run | sed -n 's/.*tensor-parallel traffic per step per rank: //p')
      mpi -np 2 "$LOOM" "${args[@]}" --tp 2 "${sp[@]}" --threads 1 >/dev/null 2>&1 || { echo "$model $layout failed" >&2; return; } ;;
  esac
  "$PYTHON" - "$dir/metrics.jsonl" "$LOOM_SKIP" "$model" "$layout" "$rep" "$analytic" >>"$RESULTS" <<'EOF'
import json, statistics, sys
path, skip, model, layout, rep, analytic = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6], sys.argv[6]
recs = [json.loads(l) for l in open(path) if l.strip()]
recs = [r for r in recs if r.get("kind") == "train" and r["step"] > skip]
print(json.dumps({"model": model, "layout": layout, "rep": int(rep), "analytic": analytic,
                  "tokens_per_s": statistics.median(r["tokens_per_s"] for r in recs),
                  "tp_comm_s": statistics.median(r["tp_comm_s"] for r in recs),
                  "tp_comm_bytes": statistics.median(r["tp_comm_bytes"] for r in recs)}))
EOF
  echo "[bench] $model $layout rep=$rep done" >&2
  rm -rf "$dir"
}

[ -n "${REPORT_ONLY:-}" ] || for rep in $(seq 1 "$REPEATS"); do
  for model in gpt-mini wide; do
    for layout in tp1 tp2 tp2-sp; do run_one "$model" "$layout" "$rep"; done
  done
done

"$PYTHON" - "$RESULTS" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tokens = {"gpt-mini": 8 * 256, "wide": 4 * 256}
hdr = f"{'model':<9} {'layout':<8} {'procs x thr':<11} {'step':>8} {'compute':>8} {'tp comm':>8} {'comm %':>7} {'tp bytes/step':>14} {'analytic':>10} {'vs tp=1':>8}"
print(hdr)
print("-" * len(hdr))
for model in ("gpt-mini", "wide"):
    base = None
    for layout, shape in (("tp1", "1 x 2"), ("tp2", "2 x 1"), ("tp2-sp", "2 x 1")):
        rs = [r for r in runs if r["model"] == model and r["layout"] == layout]
        if not rs:
            print(f"{model:<9} {layout:<8} failed"); continue
        step = statistics.median(tokens[model] / r["tokens_per_s"] for r in rs)
        comm = statistics.median(r["tp_comm_s"] for r in rs)
        nbytes = statistics.median(r["tp_comm_bytes"] for r in rs)
        base = base or step
        print(f"{model:<9} {layout:<8} {shape:<11} {step:8.3f} {step - comm:8.3f} {comm:8.3f} {100 * comm / step:6.1f}% "
              f"{nbytes / 2**20:10.1f} MiB {rs[0]['analytic'] or '-':>10} {base / step:7.2f}x")
print(f"\nseconds per step, medians over {max(r['rep'] for r in runs)} runs; the global batch is the same in every row "
      "of a model (tp splits each sequence's work, it does not add data)")
EOF
