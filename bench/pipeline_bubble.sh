#!/usr/bin/env bash
# Pipeline bubble, measured next to theory, and the 4-rank demo layout next to the serial run.
#
# Usage: bench/pipeline_bubble.sh [build dir]        (default: build)
#
# 1. For p = 2 and 4 pipeline ranks (4 is oversubscribed on a 2-core machine) and m = 4, 8,
#    16 micro-batches of 2 sequences, 1F1B (and interleaved with 2 chunks where p divides m):
#      mpirun -np p loom train --pp p --micro-batches m --batch-size 2 --schedule S ...
#    on an 8-block model (L=8, H=8, C=256, T=128). The bubble is the executor's measured idle
#    time over compute time of a step (the `pipeline_bubble` field of metrics.jsonl, median
#    over the steps after the first LOOM_SKIP), printed next to (p-1)/m, or (p-1)/(m v).
# 2. configs/shakespeare.toml trained serially (1 process x 2 threads) and on 4-rank layouts
#    (4 processes x 1 thread: the demo's dp 2 x pp 2, the same with 2 micro-batches, pp 2 x tp 2,
#    dp 2 x tp 2), each with Loom's pinning and without: tokens/s of each and the ratio to serial.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
#
# Environment (all optional): LOOM_STEPS=6, LOOM_SKIP=2, PEAK_GFLOPS=160, MPIRUN=mpirun,
# DATA=data/tinyshakespeare.txt, PYTHON=/usr/bin/python3.
set -euo pipefail

BENCH_NAME=pipeline_bubble
source "$(dirname "$0")/mpi_bench_setup.sh"
LOOM_STEPS=${LOOM_STEPS:-6}
WORK=$(mktemp -d /tmp/pipeline_bubble.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

median_of() {  # metrics.jsonl field
  "$PYTHON" - "$1" "$2" "$LOOM_SKIP" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
vals = [r[sys.argv[2]] for r in recs if r.get("kind") == "train" and r["step"] > int(sys.argv[3])]
print(statistics.median(vals))
EOF
}

printf '%-12s %3s %4s %6s %16s %16s\n' schedule p m chunks "measured bubble" "theory"
for p in 2 4; do
  for m in 4 8 16; do
    for schedule in 1f1b interleaved; do
      chunks=1
      if [ "$schedule" = interleaved ]; then
        chunks=2
        [ $((m % p)) -eq 0 ] || continue
      fi
      dir="$WORK/p$p.m$m.$schedule"
      mpi -np "$p" "$LOOM" train --data "$DATA" --n-layer 8 --n-head 8 --n-embd 256 --block-size 128 \
        --batch-size 2 --micro-batches "$m" --pp "$p" --schedule "$schedule" --chunks "$chunks" --threads 1 \
        --steps "$LOOM_STEPS" --log-every 1 --eval-every 0 --eval-batches 1 --peak-gflops "$PEAK_GFLOPS" \
        --out-dir "$dir" >/dev/null 2>&1 || { echo "p=$p m=$m $schedule failed" >&2; continue; }
      measured=$(median_of "$dir/metrics.jsonl" pipeline_bubble)
      theory=$("$PYTHON" -c "print(($p - 1) / ($m * $chunks))")
      printf '%-12s %3d %4d %6d %15.1f%% %15.1f%%\n' "$schedule" "$p" "$m" "$chunks" \
        "$("$PYTHON" -c "print(100 * $measured)")" "$("$PYTHON" -c "print(100 * $theory)")"
    done
  done
done

echo
# The global batch is the config's 32 sequences in every layout: batch x micro-batches x dp.
common=(train --config configs/shakespeare.toml --data "$DATA" --steps 30 --log-every 1 --eval-every 0
        --eval-batches 1 --peak-gflops "$PEAK_GFLOPS")
"$LOOM" "${common[@]}" --threads 2 --out-dir "$WORK/serial" >/dev/null 2>&1 || die "the serial run failed"
serial=$(median_of "$WORK/serial/metrics.jsonl" tokens_per_s)
printf 'configs/shakespeare.toml, global batch 32 x 128 tokens: serial 1 process x 2 threads %.0f tok/s\n' "$serial"
layouts=("--dp 2 --pp 2 --micro-batches 4 --batch-size 4"   # the demo's layout (scripts/demo.sh)
         "--dp 2 --pp 2 --micro-batches 2 --batch-size 8"
         "--pp 2 --tp 2 --micro-batches 4 --batch-size 8"
         "--dp 2 --tp 2 --micro-batches 1 --batch-size 16")
# Each layout with Loom's placement (pin_ranks = auto: a rank per core, each pipeline stage's
# ranks on different cores) and with the OS's (pin_ranks = off), one after the other.
for layout in "${layouts[@]}"; do
  for pin in auto off; do
    # shellcheck disable=SC2086
    mpi -np 4 "$LOOM" "${common[@]}" $layout --threads 1 --pin-ranks "$pin" --out-dir "$WORK/four" >/dev/null 2>&1 ||
      die "the 4-rank run ($layout) failed"
    four=$(median_of "$WORK/four/metrics.jsonl" tokens_per_s)
    rm -rf "$WORK/four"
    "$PYTHON" -c "print(f'  {\"$layout\":48s} 4 processes x 1 thread, pin_ranks {\"$pin\":4s}: {$four:.0f} tok/s = {$four / $serial:.2f}x serial')"
  done
done
