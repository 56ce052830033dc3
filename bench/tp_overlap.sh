#!/usr/bin/env bash
# The overlap of 1D tensor parallelism's collectives with compute (`--tp-overlap`): the wide
# model (L=4, C=1024, 16 heads, context 64, 2 sequences) under `--tp 2 --sequence-parallel`
# on an emulated 10 Gb/s link, with the overlap on and off in the same session. Prints, per
# setting, the step time, the tp communication time (what rank 0's tp collectives took on the
# communication thread), the part compute waited for (exposed), the hidden share, and the
# ratio of the step times; the losses of both runs must be identical (bit-identical paths).
#
# Usage: bench/tp_overlap.sh [build dir]        (default: build)
# Figures are medians over the steps after the first LOOM_SKIP (2) of each run.
# Environment (all optional): LOOM_STEPS=6, LOOM_SKIP=2, NET_GBPS=10,
# MPIRUN=mpirun, DATA=data/tinyshakespeare.txt, PYTHON=/usr/bin/python3.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
set -euo pipefail
# Ranks waiting in MPI yield the core (this machine is oversubscribed), as the tests run them.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

BENCH_NAME=tp_overlap
source "$(dirname "$0")/mpi_bench_setup.sh"
LOOM_STEPS=${LOOM_STEPS:-6}
[ "$LOOM_STEPS" -gt "$LOOM_SKIP" ] || die "LOOM_STEPS ($LOOM_STEPS) must exceed LOOM_SKIP ($LOOM_SKIP)"
NET_GBPS=${NET_GBPS:-10}

WORK=$(mktemp -d /tmp/tp_overlap.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

isa=$(ONEDNN_VERBOSE=1 "$LOOM" train --data "$DATA" --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 1 \
      --steps 1 --eval-every 0 --eval-batches 1 --threads 1 --out-dir "$WORK/isa" 2>&1 | grep -m1 -o "isa:[^,]*" || true)
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), oneDNN ${isa:-isa: unknown}; load average$(uptime | sed "s/.*load average//")"

for overlap in on off; do
  mpi -np 2 "$LOOM" train --data "$DATA" --n-layer 4 --n-embd 1024 --n-head 16 --block-size 64 --batch-size 2 \
    --steps "$LOOM_STEPS" --log-every 1 --eval-every 0 --eval-batches 1 --threads 1 --net-gbps "$NET_GBPS" \
    --tp 2 --sequence-parallel --tp-overlap "$overlap" --out-dir "$WORK/$overlap" >/dev/null 2>&1 ||
    { echo "tp_overlap $overlap failed" >&2; exit 0; }
done

"$PYTHON" - "$WORK" "$LOOM_SKIP" <<'EOF'
import json, statistics, sys
runs = {}
for overlap in ("on", "off"):
    recs = [json.loads(l) for l in open(f"{sys.argv[1]}/{overlap}/metrics.jsonl") if l.strip()]
    runs[overlap] = [r for r in recs if r.get("kind") == "train"]
skip = int(sys.argv[2])
med = {o: {k: statistics.median(r[k] for r in runs[o] if r["step"] > skip)
           for k in ("step_s", "tp_comm_s", "tp_comm_exposed_s", "tp_comm_bytes")} for o in runs}
hdr = f"{'--tp-overlap':<12} {'step s':>8} {'tp comm s':>10} {'exposed s':>10} {'hidden':>7} {'tp MiB':>7}"
print(hdr)
print("-" * len(hdr))
for overlap in ("on", "off"):
    m = med[overlap]
    comm, exposed = m["tp_comm_s"], m["tp_comm_exposed_s"]
    print(f"{overlap:<12} {m['step_s']:8.3f} {comm:10.3f} {exposed:10.3f} {100 * max(0.0, 1 - exposed / comm):6.0f}% "
          f"{m['tp_comm_bytes'] / 2**20:7.1f}")
print(f"\nstep time off / on: {med['off']['step_s'] / med['on']['step_s']:.2f}x; exposed off / on: "
      f"{med['off']['tp_comm_exposed_s'] / med['on']['tp_comm_exposed_s']:.2f}x (medians of steps {skip + 1}.."
      f"{runs['on'][-1]['step']}); losses identical: {[r['loss'] for r in runs['on']] == [r['loss'] for r in runs['off']]}")
EOF
