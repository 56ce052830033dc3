#!/usr/bin/env bash
# A long-running `loom generate` meeting many prompt lengths: peak RSS and wall time with
# Loom's bounded oneDNN primitive cache (the 256 most recently used shapes) next to an
# unbounded one (ONEDNN_PRIMITIVE_CACHE_CAPACITY=1000000, which Loom honours for both caches),
# in the same run. Each new prompt length is a new GEMM shape for prefill (4 shapes per length),
# and a primitive holds its shape's JIT code and buffers. The model: 2 blocks of gpt2-small's
# width (768, 12 heads, context 1024) on Tiny Shakespeare, trained one step (the weights do not
# matter here). Prints the oneDNN ISA. Benchmarks never gate anything: the exit status is 0
# whatever the figures.
#
# Usage: bench/generate_memory.sh [build dir]     (default: build)
# Environment (optional): PROMPTS=999 (prompts of 1..PROMPTS characters, one token each),
#   THREADS=1, DATA=data/tinyshakespeare.txt
set -euo pipefail

BUILD=${1:-build}
LOOM="$BUILD/loom"
PROMPTS=${PROMPTS:-999}
THREADS=${THREADS:-1}
DATA=${DATA:-data/tinyshakespeare.txt}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

export OMP_NUM_THREADS=$THREADS
ONEDNN_VERBOSE=1 "$LOOM" train --config configs/shakespeare.toml --data "$DATA" --steps 1 --n-layer 2 --n-embd 768 \
  --n-head 12 --block-size 1024 --batch-size 1 --threads "$THREADS" --out-dir "$WORK/model" > "$WORK/train.log" 2>&1
grep -m1 "isa:" "$WORK/train.log" || true
python3 -c "import sys; [print('a' * i) for i in range(1, int(sys.argv[1]) + 1)]" "$PROMPTS" > "$WORK/prompts.txt"

# run LABEL [env...]: peak RSS (MiB) and wall seconds of one generate over every prompt.
run() {
  local label=$1
  shift
  env "$@" /usr/bin/time -f "%M %e" -o "$WORK/time" "$LOOM" generate --checkpoint "$WORK/model" --batch 1 --tokens 1 \
    --threads "$THREADS" < "$WORK/prompts.txt" > /dev/null
  read -r kb seconds < "$WORK/time"
  echo "$label $((kb / 1024)) $seconds"
}

echo "loom generate: $PROMPTS prompts of 1-$PROMPTS tokens, 2 blocks of width 768, $THREADS thread(s)"
bounded=$(run bounded)
unbounded=$(run unbounded ONEDNN_PRIMITIVE_CACHE_CAPACITY=1000000)
python3 - "$bounded" "$unbounded" <<'EOF'
import sys
rows = [line.split() for line in sys.argv[1:]]
print(f"{'primitive cache':<18}{'peak RSS MiB':>14}{'wall s':>10}")
for label, mib, s in rows:
    print(f"{label:<18}{mib:>14}{s:>10}")
(_, b_mib, b_s), (_, u_mib, u_s) = rows
print(f"bounded / unbounded: RSS {int(b_mib) / int(u_mib):.2f}x, time {float(b_s) / float(u_s):.2f}x")
EOF
