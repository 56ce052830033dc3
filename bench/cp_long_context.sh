#!/usr/bin/env bash
# Context parallelism at long context on this machine, gpt-mini's width (C=384, 6 heads):
#  1. tokens/s at each T of TS: the serial run (1 rank x 2 threads) against cp 2 (2 ranks x
#     1 thread) with the ring's hops on an emulated link of NET_GBPS Gbit/s, and the share of
#     the ring's time on that link the block attention hid (1 - the link time after the rank
#     began waiting / the link time, as the progress line reports it; rank 0's
#     metrics.jsonl, medians of the steps after the first).
#  2. with MEMORY=1: the longest context whose measured peak memory per rank (the memory
#     tracker's, metrics.jsonl, one step) fits BUDGET_MIB, serial vs cp 2 vs cp 4: T grows
#     by half from T0 while the peak fits, then a bisection on multiples of 2 x cp x GRAIN tokens.
#     (A run past the budget still runs: long ones cost minutes on a small machine.)
#
# Usage: bench/cp_long_context.sh [build dir]   (default: build)
# Environment (optional): TS="4096 8192" (empty: skip part 1), LAYERS=1, LOOM_STEPS=3, NET_GBPS=10,
# NET_LATENCY_US=10, MEMORY=0, BUDGET_MIB=2048, MEM_LAYERS=LAYERS, T0=1024, CPS_MEM="1 2 4",
# GRAIN=64.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
set -euo pipefail

BENCH_NAME=cp_long_context
source "$(dirname "$0")/mpi_bench_setup.sh"
TS=${TS-"4096 8192"}
LAYERS=${LAYERS:-1}
LOOM_STEPS=${LOOM_STEPS:-3}
NET_GBPS=${NET_GBPS:-10}
NET_LATENCY_US=${NET_LATENCY_US:-10}
MEMORY=${MEMORY:-0}
BUDGET_MIB=${BUDGET_MIB:-2048}
MEM_LAYERS=${MEM_LAYERS:-$LAYERS}
T0=${T0:-1024}
CPS_MEM=${CPS_MEM:-"1 2 4"}
GRAIN=${GRAIN:-64}
WORK=$(mktemp -d /tmp/cp_long_context.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# train <dir> <ranks> <threads> <T> <layers> <steps> [flags...]: rank 0's metrics in <dir>.
train() {
  local dir=$1 ranks=$2 threads=$3 T=$4 layers=$5 steps=$6
  shift 6
  mpi -np "$ranks" "$LOOM" train --data "$DATA" --n-layer "$layers" --n-head 6 --n-embd 384 --block-size "$T" \
    --batch-size 1 --steps "$steps" --warmup-steps 1 --eval-every 0 --eval-batches 1 --threads "$threads" \
    --peak-gflops "$PEAK_GFLOPS" --log-every 1 --out-dir "$dir" "$@" >"$dir.log" 2>&1
}

# Medians over the steps after the first of metrics.jsonl: tok/s, and the ring's figures.
summary() {
  "$PYTHON" - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"kind": "train"' in l or '"kind":"train"' in l]
rows = rows[1:] or rows
med = lambda k: statistics.median(r.get(k, 0.0) for r in rows)
tok = next(k for k in rows[0] if k.endswith("_per_s") or k == "tok_per_s")
link, exposed = med("cp_ring_link_s"), med("cp_ring_link_exposed_s")
hidden = f"{100 * max(0.0, 1 - exposed / link):.0f}%" if link > 0 else "-"
print(f"{med(tok):10.0f} {med('step_s'):8.2f} {1e3 * link:9.0f} {1e3 * exposed:9.0f} {hidden:>7} {med('peak_mem_bytes') / 2**20:9.0f}")
PY
}

echo "# $(cpu_and_isa)"
[ -n "$TS" ] && echo "# tokens/s: C=384, 6 heads, $LAYERS layer(s), B=1, medians of steps 2..$LOOM_STEPS; cp 2 on a ${NET_GBPS} Gbit/s, ${NET_LATENCY_US} us emulated link"
[ -n "$TS" ] && printf "%-6s %-22s %10s %8s %9s %9s %7s %9s\n" T layout "tok/s" "step s" "link ms" "exp. ms" hidden "peak MiB"
for T in $TS; do
  if train "$WORK/serial$T" 1 2 "$T" "$LAYERS" "$LOOM_STEPS"; then
    printf "%-6s %-22s " "$T" "serial (1 x 2 threads)"; summary "$WORK/serial$T"
  else echo "serial T=$T failed:"; tail -3 "$WORK/serial$T.log"; fi
  if train "$WORK/cp$T" 2 1 "$T" "$LAYERS" "$LOOM_STEPS" --cp 2 --net-gbps "$NET_GBPS" --net-latency-us "$NET_LATENCY_US"; then
    printf "%-6s %-22s " "$T" "cp 2 (2 x 1 thread)"; summary "$WORK/cp$T"
  else echo "cp 2 T=$T failed:"; tail -3 "$WORK/cp$T.log"; fi
done

[ "$MEMORY" = 1 ] || exit 0
# peak <cp> <T>: rank 0's measured peak bytes of a 1-step run (empty when it failed).
peak() {
  local dir="$WORK/mem.cp$1.T$2"
  local flags=()
  [ "$1" -gt 1 ] && flags=(--cp "$1")
  train "$dir" "$1" 1 "$2" "$MEM_LAYERS" 1 "${flags[@]}" || return 0
  "$PYTHON" -c 'import json,sys; print(max(json.loads(l).get("peak_mem_bytes", 0) for l in open(sys.argv[1])))' "$dir/metrics.jsonl"
}
budget=$((BUDGET_MIB * 1048576))
echo "# longest context within ${BUDGET_MIB} MiB per rank (measured peak), $MEM_LAYERS layer(s), C=384, 6 heads, B=1"
printf "%-5s %8s %10s %s\n" cp "T max" "peak MiB" "x serial"
serial_T=0
for cp in $CPS_MEM; do
  step=$((2 * cp * GRAIN))
  lo=0 hi=0 lo_peak=0 T=$(( (T0 + step - 1) / step * step ))
  while :; do  # grow by half until the peak passes the budget
    p=$(peak "$cp" "$T")
    if [ -n "$p" ] && [ "$p" -le "$budget" ]; then lo=$T lo_peak=$p; T=$(( (T * 3 / 2 + step - 1) / step * step )); else hi=$T; break; fi
  done
  while [ $((hi - lo)) -gt "$step" ] && [ "$lo" -gt 0 ]; do  # bisect on multiples of 2 cp x GRAIN
    mid=$(( (lo + hi) / 2 / step * step ))
    [ "$mid" -le "$lo" ] && break
    p=$(peak "$cp" "$mid")
    if [ -n "$p" ] && [ "$p" -le "$budget" ]; then lo=$mid lo_peak=$p; else hi=$mid; fi
  done
  [ "$cp" = 1 ] && serial_T=$lo
  ratio=$([ "$serial_T" -gt 0 ] && "$PYTHON" -c "print(f'{$lo / $serial_T:.2f}')" || echo "-")
  printf "%-5s %8s %10.0f %s\n" "$cp" "$lo" "$(echo "$lo_peak / 1048576" | bc -l)" "$ratio"
done
