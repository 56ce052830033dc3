#!/usr/bin/env bash
# The overlap of 1D tensor parallelism's collectives with compute (`--tp-overlap`): the wide
# model (L=4, C=1024, 16 heads, context 64, 2 sequences) under `--tp 2 --sequence-parallel`
# on an emulated 10 Gb/s link, with the overlap on and off in the same session. Prints, per
# setting, the step time, the tp communication time (what rank 0's tp collectives took on the
# communication thread), the part compute waited for (exposed), the hidden share, and the
# ratio of the step times; the losses of both runs must be identical (bit-identical paths).
#
# Usage: bench/tp_overlap.sh [build dir]        (default: build)
# Environment (all optional): LOOM_STEPS=4 (the last one is reported), NET_GBPS=10,
# MPIRUN=mpirun, DATA=data/tinyshakespeare.txt, PYTHON=/usr/bin/python3.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
set -euo pipefail
# Ranks waiting in MPI yield the core (this machine is oversubscribed), as the tests run them.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

BENCH_NAME=tp_overlap
source "$(dirname "$0")/mpi_bench_setup.sh"
LOOM_STEPS=${LOOM_STEPS:-4}
NET_GBPS=${NET_GBPS:-10}

WORK=$(mktemp -d /tmp/tp_overlap.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

isa=$(ONEDNN_VERBOSE=1 "$LOOM" train --data "$DATA" --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 1 \
      --steps 1 --eval-every 0 --eval-batches 1 --threads 1 --out-dir "$WORK/isa" 2>&1 | grep -m1 -o "isa:[^,]*" || true)
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), oneDNN ${isa:-isa: unknown}; load:$(uptime | sed 's/.*load average//')"

for overlap in on off; do
  mpi -np 2 "$LOOM" train --data "$DATA" --n-layer 4 --n-embd 1024 --n-head 16 --block-size 64 --batch-size 2 \
    --steps "$LOOM_STEPS" --log-every 1 --eval-every 0 --eval-batches 1 --threads 1 --net-gbps "$NET_GBPS" \
    --tp 2 --sequence-parallel --tp-overlap "$overlap" --out-dir "$WORK/$overlap" >/dev/null 2>&1 ||
    { echo "tp_overlap $overlap failed" >&2; exit 0; }
done

"$PYTHON" - "$WORK" <<'EOF'
import json, sys
last = {}
for overlap in ("on", "off"):
    recs = [json.loads(l) for l in open(f"{sys.argv[1]}/{overlap}/metrics.jsonl") if l.strip()]
    last[overlap] = [r for r in recs if r.get("kind") == "train"]
hdr = f"{'--tp-overlap':<12} {'step s':>8} {'tp comm s':>10} {'exposed s':>10} {'hidden':>7} {'tp MiB':>7}"
print(hdr)
print("-" * len(hdr))
for overlap in ("on", "off"):
    r = last[overlap][-1]
    comm, exposed = r["tp_comm_s"], r["tp_comm_exposed_s"]
    print(f"{overlap:<12} {r['step_s']:8.3f} {comm:10.3f} {exposed:10.3f} {100 * max(0.0, 1 - exposed / comm):6.0f}% "
          f"{r['tp_comm_bytes'] / 2**20:7.1f}")
on, off = last["on"][-1], last["off"][-1]
print(f"\nstep time off / on: {off['step_s'] / on['step_s']:.2f}x (step {on['step']} of each run); "
      f"losses identical: {[r['loss'] for r in last['on']] == [r['loss'] for r in last['off']]}")
EOF
