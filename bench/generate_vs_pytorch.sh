#!/usr/bin/env bash
# KV-cached generation, Loom vs PyTorch, from one run on the same machine with the same
# threads: prefill and decode tokens/s at batch 1, 4 and 16 for gpt-mini and the gpt2-small
# shape (MODELS may add gpt-mini-moe: gpt-mini with 8 experts top-2), in fp32 and bf16 (Loom: the weights' bf16 copies; PyTorch: the model and cache in
# bf16), Loom's decode next to the memory-bandwidth bound (`loom bench generate`), and the
# speed-up at batch 1 of `loom sample` (cached, in each precision) over today's uncached fp32
# sampler (`--no-kv-cache`, the whole context re-run per token) on the same 256 new tokens
# from the same prompt, timed in the same run. Prints the oneDNN ISA.
# With one thread both sides time CPU time (the share of a core a run gets on a shared
# machine), with more, wall time. Benchmarks never gate anything: the exit status is 0 whatever the figures.
#
# Usage: bench/generate_vs_pytorch.sh [build dir]     (default: build)
# Environment (optional): THREADS=1  MODELS=gpt-mini,gpt2-small[,gpt-mini-moe]  BATCHES=1,4,16
#   PRECISIONS=fp32,bf16  PROMPT=64 NEW=64 (prompt and decoded tokens per sequence)
#   UNCACHED_PROMPT=1 (the prompt of the cached-vs-uncached comparison, in tokens)  PYTHON=/usr/bin/python3
#   UNCACHED=gpt-mini (models whose cached sampler is timed against the uncached one on 256
#   new tokens, in their batch-1 row; the uncached gpt2-small takes minutes; by default
#   gpt-mini when MODELS and BATCHES hold it and 1, else none; UNCACHED= for none)
# Targets: decode at batch 1 >= 70% of the bandwidth bound on gpt2-small, >= 1.5x PyTorch's
# decode tokens/s, cached >= 20x the uncached sampler.
set -euo pipefail

source "$(dirname "$0")/vs_pytorch_setup.sh"
THREADS=${THREADS:-1}
MODELS=${MODELS:-gpt-mini,gpt2-small}
BATCHES=${BATCHES:-1,4,16}
PROMPT=${PROMPT:-64}
NEW=${NEW:-64}
PRECISIONS=${PRECISIONS:-fp32,bf16}

# loom refuses a comparison no row would hold (a model not run, no batch 1).
default_uncached=""
[[ ",$MODELS," == *,gpt-mini,* && ",$BATCHES," == *,1,* ]] && default_uncached=gpt-mini
UNCACHED=${UNCACHED-$default_uncached}
uncached=()
[[ -n "$UNCACHED" ]] && uncached=(--vs-uncached "$UNCACHED" --uncached-tokens 256 --uncached-prompt-tokens "${UNCACHED_PROMPT:-1}")

results=$(mktemp)
"$LOOM" bench generate --models "$MODELS" --batches "$BATCHES" --prompt-tokens "$PROMPT" --new-tokens "$NEW" \
  --threads "$THREADS" --precisions "$PRECISIONS" "${uncached[@]}" >>"$results"
"${torch_env[@]}" OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
  "$PYTHON" bench/pytorch_generate.py --models "$MODELS" --batches "$BATCHES" --prompt-tokens "$PROMPT" \
  --new-tokens "$NEW" --threads "$THREADS" --precisions "$PRECISIONS" >>"$results"

"$PYTHON" - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
loom = {(r["model"], r["precision"], r["batch"]): r for r in rows if r["impl"] == "loom"}
torch = {(r["model"], r["precision"], r["batch"]): r for r in rows if r["impl"] == "pytorch"}
first = next(iter(loom.values()))
print(f"ISA (oneDNN): {first['isa']}   threads: {first['threads']} ({first['clock']} time)   copy bandwidth: {first['copy_bandwidth_gb_s']:.1f} GB/s"
      f"   M=1 GEMV: Loom's kernel {first['gemv_m1_gb_s']:.1f} GB/s, oneDNN {first['onednn_m1_gb_s']:.1f} GB/s")
print(f"{'model':12} {'prec':4} {'B':>3} {'prefill tok/s':>14} {'torch prefill':>14} {'decode tok/s':>13} {'torch decode':>13}"
      f" {'x torch':>8} {'bound tok/s':>12} {'% bound':>8} {'x uncached':>11}")
for key, r in loom.items():
    t = torch.get(key, {})
    ratio = r["decode_tokens_per_s"] / t["decode_tokens_per_s"] if t else float("nan")
    unc = r.get("speedup_vs_uncached")
    print(f"{key[0]:12} {key[1]:4} {key[2]:>3} {r['prefill_tokens_per_s']:>14.1f} {t.get('prefill_tokens_per_s', float('nan')):>14.1f}"
          f" {r['decode_tokens_per_s']:>13.1f} {t.get('decode_tokens_per_s', float('nan')):>13.1f} {ratio:>8.2f}"
          f" {r['bandwidth_bound_tokens_per_s']:>12.1f} {100 * r['fraction_of_bound']:>7.0f}%"
          f" {(f'{unc:.1f}' if unc else '-'):>11}")
for key, r in loom.items():
    if "speedup_vs_uncached" in r:
        print(f"loom sample, {key[0]}, {r['sample_prompt_tokens']}-token prompt, 256 new tokens: cached {key[1]}"
              f" {r['sample_cached_tokens_per_s']:.1f} tok/s, uncached fp32 (--no-kv-cache) {r['sample_uncached_fp32_tokens_per_s']:.1f}"
              f" tok/s: {r['speedup_vs_uncached']:.1f}x")
print("targets: decode B=1 >= 70% of the bound on gpt2-small; >= 1.5x torch decode; >= 20x uncached")
PY
rm -f "$results"
