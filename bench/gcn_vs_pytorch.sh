#!/usr/bin/env bash
# GCN benchmarks, Loom next to PyTorch in one run (same threads, same matrices):
#  1. SpMM GFLOP/s and GB/s (against the bytes it must move: the CSR, B and C once) next to
#     torch.sparse.mm on the same CSR, on Cora and on R-MAT 2^18 (RMAT_SCALE), for feature
#     widths 16 and 128: the forward's Â B and the backward's Âᵀ dC (the transposed CSR);
#  2. a Cora epoch (forward, backward, Adam): `loom train --config configs/cora.toml` against
#     a pygcn-style PyTorch GCN, median (and best) epoch time and the ratio (target: Loom >= 2x).
# Usage: bench/gcn_vs_pytorch.sh [BUILD_DIR] (THREADS=1 by default, RMAT_SCALE=18).
set -euo pipefail
BUILD=${1:-build}
THREADS=${THREADS:-1}
RMAT_SCALE=${RMAT_SCALE:-18}
PYTHON=${PYTHON:-/usr/bin/python3}
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ISA=$(ONEDNN_VERBOSE=1 "$BUILD/loom" bench train --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 1 --steps 1 --warmup 0 --threads 1 2>/dev/null | grep -m1 -o 'isa:.*' || true)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); oneDNN ${ISA:-isa: unknown}; threads $THREADS"
echo "load at start:$(uptime | sed "s/.*load average://")"
for graph in data/cora "rmat:scale=$RMAT_SCALE,edge_factor=16"; do
  "$BUILD/loom" bench spmm --data "$graph" --widths 16,128 --threads "$THREADS" --save-csr "$TMP/csr" > "$TMP/loom.jsonl"
  "$PYTHON" -W ignore bench/pytorch_gcn.py spmm "$TMP/csr" "$THREADS" 16,128 > "$TMP/torch.jsonl"
  "$PYTHON" - "$graph" "$TMP/loom.jsonl" "$TMP/torch.jsonl" <<'PY'
import json, sys
loom = [json.loads(l) for l in open(sys.argv[2])]
torch = [json.loads(l) for l in open(sys.argv[3])]
print(f"SpMM on {sys.argv[1]} ({loom[0]['nodes']} nodes, {loom[0]['nnz']} non-zeros)")
print(f"  {'product':>7} {'width':>5} {'Loom GFLOP/s':>13} {'Loom GB/s':>10} {'torch GFLOP/s':>14} {'torch GB/s':>11} {'ratio':>6}")
for a, b in zip(loom, torch):
    assert (a["op"], a["width"]) == (b["op"], b["width"]), (a, b)
    name = "Â B" if a["op"] == "A" else "Âᵀ dC"
    print(f"  {name:>7} {a['width']:>5} {a['gflops']:>13.2f} {a['gbytes_per_s']:>10.2f} {b['gflops']:>14.2f} {b['gbytes_per_s']:>11.2f} {b['median_s'] / a['median_s']:>5.2f}x")
PY
done
"$BUILD/loom" train --config configs/cora.toml --threads "$THREADS" --out-dir "$TMP/run" --log-every 1 --eval-every 0 > "$TMP/loom.log"
"$PYTHON" bench/pytorch_gcn.py epoch data/cora "$THREADS" 200 > "$TMP/torch_epoch.json"
"$PYTHON" - "$TMP/run/metrics.jsonl" "$TMP/torch_epoch.json" "$TMP/loom.log" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
loom = [r["step_s"] for r in steps if r.get("kind") == "train" and r["step"] > 5]
loom_s, loom_best = statistics.median(loom), min(loom)
torch = json.load(open(sys.argv[2]))
test = [l for l in open(sys.argv[3]) if "test_acc" in l][-1].split("test_acc")[1].strip()
print(f"Cora epoch (2-layer GCN, 16 hidden, forward + backward + Adam), {torch['threads']} thread(s), median (best)")
print(f"  Loom    {1e3 * loom_s:8.3f} ({1e3 * loom_best:.3f}) ms/epoch   test acc {test}")
print(f"  PyTorch {1e3 * torch['median_epoch_s']:8.3f} ({1e3 * torch['min_epoch_s']:.3f}) ms/epoch   test acc {torch['test_acc']:.4f}")
print(f"  ratio   {torch['median_epoch_s'] / loom_s:.2f}x ({torch['min_epoch_s'] / loom_best:.2f}x best to best; target >= 2x)")
PY
echo "load at end:$(uptime | sed "s/.*load average://")"
