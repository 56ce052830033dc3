#!/usr/bin/env bash
# End-to-end training throughput, Loom vs PyTorch, from the same run on the same machine.
#
# Usage: bench/train_vs_pytorch.sh [build dir]        (default: build)
#
# For gpt-mini (L=6, H=6, C=384, T=256, V=65, B=8) and the gpt2-small shape (L=12, H=12,
# C=768, T=1024, V=50304, B=4) at each thread count, runs `loom bench train` and
# bench/pytorch_train.py alternately, REPEATS times each (who goes first alternates too),
# and prints the medians: tokens/s of both, their ratio, Loom's MFU (model GFLOP/s over the
# fp32 matmul peak that `loom bench gemm` measures on "square 1024" at that thread count,
# best of 3) and the peak memory (max RSS) of both, with the targets next to them.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
#
# Environment (all optional):
#   REPEATS=3           runs of each (Loom, PyTorch) pair
#   GPT2_REPEATS=$REPEATS   the same for gpt2-small alone (a pair takes minutes there)
#   THREADS="1 2"       thread counts
#   SIZES="gpt-mini gpt2-small"
#   PRECISIONS="fp32"   add bf16 for the mixed-precision rows: Loom bf16 (bf16 GEMMs, fp32
#       master weights), Loom fp32, PyTorch fp32 and PyTorch bf16 (torch.autocast) side by
#       side, with the implementation oneDNN dispatched for bf16 (e.g. brg:avx512_core_amx)
#       and the targets for that hardware, each marked ok or MISS (AMX: bf16 >= 3x fp32;
#       AVX512-BF16: >= 1.7x on gpt2-small, >= 1.5x on gpt-mini, peak memory <= 0.6x fp32 on
#       gpt2-small at GPT2_BATCH >= 4; both: >= 1.5x PyTorch's faster precision)
#   MINI_STEPS=8 MINI_WARMUP=2        timed / untimed steps on gpt-mini
#   GPT2_STEPS=3 GPT2_WARMUP=1 GPT2_BATCH=4   a gpt2-small step takes tens of seconds
#   PYTHON=/usr/bin/python3           the interpreter with torch
#   PYTORCH_BLAS_DIR=DIR              a directory holding an optimized libblas.so.3 (OpenBLAS,
#       BLIS) for PyTorch; default: Debian's openblas-openmp / openblas-pthread / blis
#       directories when installed. PyTorch's fp32 matmul is its BLAS's: on Debian's
#       reference libblas3 it runs at a few GFLOP/s, which is not PyTorch at its best, so
#       the script says loudly when no optimized BLAS is found.
#   RESULTS=FILE        also keep every raw JSON line there (default: a temp file)
#   REPORT_ONLY=FILE    run nothing but the GEMM peak; print the table of an earlier RESULTS
# PyTorch runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (OpenBLAS picks its own
# kernels), OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to the thread count; Loom runs in
# the caller's environment with --threads.
set -euo pipefail

source "$(dirname "$0")/vs_pytorch_setup.sh"

REPEATS=${REPEATS:-3}
THREADS=${THREADS:-"1 2"}
SIZES=${SIZES:-"gpt-mini gpt2-small"}
PRECISIONS=${PRECISIONS:-fp32}
MINI_STEPS=${MINI_STEPS:-8}
MINI_WARMUP=${MINI_WARMUP:-2}
GPT2_STEPS=${GPT2_STEPS:-3}
GPT2_WARMUP=${GPT2_WARMUP:-1}
GPT2_BATCH=${GPT2_BATCH:-4}
GPT2_REPEATS=${GPT2_REPEATS:-$REPEATS}

RESULTS=${REPORT_ONLY:-${RESULTS:-$(mktemp /tmp/loom_vs_pytorch.XXXXXX.jsonl)}}
[ -n "${REPORT_ONLY:-}" ] || : >"$RESULTS"
log() { echo "[bench] $*" >&2; }

# size -> "L H C T V B steps warmup"
shape_of() {
  case $1 in
    gpt-mini) echo "6 6 384 256 65 8 $MINI_STEPS $MINI_WARMUP" ;;
    gpt2-small) echo "12 12 768 1024 50304 $GPT2_BATCH $GPT2_STEPS $GPT2_WARMUP" ;;
    *) echo "unknown size '$1' (gpt-mini, gpt2-small)" >&2; exit 1 ;;
  esac
}

# Runs one side; appends {"size":..., "rep":..., <its JSON>} or a failure record.
run_one() {  # impl size threads rep precision
  local impl=$1 size=$2 t=$3 rep=$4 prec=${5:-fp32} L H C T V B S W out rc=0
  read -r L H C T V B S W <<<"$(shape_of "$size")"
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)  # another busy process skews the timing; the log shows it
  local args=(--n-layer "$L" --n-head "$H" --n-embd "$C" --block-size "$T" --vocab-size "$V"
              --batch-size "$B" --steps "$S" --warmup "$W" --threads "$t" --precision "$prec")
  if [ "$impl" = loom ]; then
    out=$("$LOOM" bench train "${args[@]}" 2>&1) || rc=$?
  else
    out=$("${torch_env[@]}" OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" \
          "$PYTHON" bench/pytorch_train.py "${args[@]}" 2>&1) || rc=$?
  fi
  local json
  json=$(grep -E '^\{' <<<"$out" | tail -1 || true)
  if [ $rc -ne 0 ] || [ -z "$json" ]; then
    log "$impl $prec $size threads=$t rep=$rep FAILED (exit $rc): $(tail -3 <<<"$out" | tr '\n' ' ')"
    json="{\"impl\": \"$impl\", \"failed\": true}"
  else
    log "$impl $prec $size threads=$t rep=$rep (load before: $load): $json"
  fi
  printf '{"size": "%s", "rep": %d, "run": %s}\n' "$size" "$rep" "$json" >>"$RESULTS"
}

log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
log "PyTorch BLAS dir: ${blas_dir:-<system libblas.so.3>}; raw results: $RESULTS"

# The matmul peak: the best `loom bench gemm` "square 1024" figure per thread count, from
# runs before and after the training runs (a process that happens to share the cores for a
# moment makes one set of runs low, which would inflate the MFU).
thread_list=$(tr ' ' ',' <<<"$THREADS" | sed 's/,,*/,/g; s/^,//; s/,$//')
gemm_out=""
measure_peak() {
  for _ in 1 2 3; do gemm_out+=$("$LOOM" bench gemm --threads "$thread_list")$'\n'; done
  peaks=$(awk '/^square 1024/ { t = $3; g = $4; if (g > best[t]) best[t] = g }
               END { for (t in best) printf "%s:%s ", t, best[t] }' <<<"$gemm_out")
  log "matmul peak so far (square 1024, threads:GFLOP/s): $peaks"
}
measure_peak

if [ -z "${REPORT_ONLY:-}" ]; then
  for size in $SIZES; do
    for t in $THREADS; do
      reps=$REPEATS
      [ "$size" = gpt2-small ] && reps=$GPT2_REPEATS
      for rep in $(seq 1 "$reps"); do
        for prec in $PRECISIONS; do
          if [ $((rep % 2)) -eq 1 ]; then
            run_one loom "$size" "$t" "$rep" "$prec"; run_one pytorch "$size" "$t" "$rep" "$prec"
          else
            run_one pytorch "$size" "$t" "$rep" "$prec"; run_one loom "$size" "$t" "$rep" "$prec"
          fi
        done
      done
    done
  done
  measure_peak
fi

isa=$(grep -m1 '^oneDNN implementation' <<<"$gemm_out" || true)
"$PYTHON" - "$RESULTS" "$peaks" "$SIZES" "$THREADS" "$PRECISIONS" "$isa" <<'EOF'
import json, statistics, sys
results, peaks, sizes, threads = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
precisions, isa = sys.argv[5].split(), sys.argv[6]
peak = {int(k): float(v) for k, v in (p.split(":") for p in peaks.split())}
runs = [json.loads(line) for line in open(results) if line.strip()]
TARGET_RATIO = {"gpt-mini": 1.5, "gpt2-small": 1.2}
TARGET_MFU = {"gpt2-small": 0.5}

def median(xs):
    return statistics.median(xs) if xs else None

def pick(size, t, impl, key, precision="fp32"):
    return median([r["run"][key] for r in runs if r["size"] == size and r["run"].get("impl") == impl
                   and r["run"].get("precision", "fp32") == precision
                   and not r["run"].get("failed") and int(r["run"]["threads"]) == int(t)])

def fails(size, t, impl):
    return sum(1 for r in runs if r["size"] == size and r["run"].get("impl") == impl and r["run"].get("failed"))

def mark(ok):
    return "" if ok is None else (" ok" if ok else " MISS")

hdr = (f"{'size':<11} {'thr':>3} {'Loom tok/s':>11} {'PyTorch tok/s':>14} {'ratio':>6} {'target':>7} "
       f"{'Loom MFU':>9} {'target':>7} {'Loom RSS MiB':>13} {'PyTorch RSS MiB':>16} {'Loom<=PT':>9} "
       f"{'Loom tracked MiB':>17}")
print(hdr)
print("-" * len(hdr))
for size in sizes:
    for t in threads:
        lt, pt = pick(size, t, "loom", "tokens_per_s"), pick(size, t, "pytorch", "tokens_per_s")
        lg = pick(size, t, "loom", "model_gflops_per_s")
        lm, pm = pick(size, t, "loom", "max_rss_bytes"), pick(size, t, "pytorch", "max_rss_bytes")
        tracked = pick(size, t, "loom", "tracked_peak_bytes")
        ratio = lt / pt if lt and pt else None
        mfu = lg / peak[int(t)] if lg and int(t) in peak else None
        tr, tm = TARGET_RATIO.get(size), TARGET_MFU.get(size)
        f = lambda x, spec: format(x, spec) if x is not None else "failed"
        mib = lambda b: f(b / 2**20 if b else None, ".0f")
        print(f"{size:<11} {t:>3} {f(lt, '.0f'):>11} {f(pt, '.0f'):>14} {f(ratio, '.2f'):>6} "
              f"{(f'>={tr}' + mark(ratio >= tr if ratio else None)) if tr else '':>7} "
              f"{f(mfu * 100 if mfu else None, '.1f') + '%':>9} "
              f"{(f'>={tm:.0%}' + mark(mfu >= tm if mfu else None)) if tm else '':>7} "
              f"{mib(lm):>13} {mib(pm):>16} {('yes' if lm <= pm else 'NO') if lm and pm else '':>9} "
              f"{mib(tracked):>17}")
        for impl in ("loom", "pytorch"):
            if fails(size, t, impl):
                print(f"  ({fails(size, t, impl)} {impl} run(s) failed; see the log above)")
reps = {s: max([r["rep"] for r in runs if r["size"] == s] or [0]) for s in sizes}
print(f"\nmedians of {', '.join(f'{n} runs ({s})' for s, n in reps.items())}; MFU = Loom model GFLOP/s / "
      f"`loom bench gemm` square-1024 peak ({', '.join(f'{k} thr: {v:.0f}' for k, v in sorted(peak.items()))} GFLOP/s)")
# Mixed precision's targets depend on the bf16 hardware oneDNN dispatched to: AMX (3x fp32),
# AVX512-BF16 (1.7x fp32 on gpt2-small, 1.5x on gpt-mini, peak memory <= 0.6x fp32 on gpt2-small
# at a batch where activations matter), none (emulated bf16: no speed target).
amx, avx512_bf16 = "amx" in isa, "avx512_core_bf16" in isa
BF16_OVER_FP32 = ({"gpt-mini": 3.0, "gpt2-small": 3.0} if amx else
                  {"gpt-mini": 1.5, "gpt2-small": 1.7} if avx512_bf16 else {})
BF16_OVER_PT = 1.5 if amx or avx512_bf16 else None
BF16_RSS = {"gpt2-small": 0.6} if amx or avx512_bf16 else {}

def batch(size):
    return max([int(r["run"].get("batch_size", 0)) for r in runs if r["size"] == size and not r["run"].get("failed")] or [0])

def target(x, at_least=None, at_most=None):
    if at_least is not None:
        return f">={at_least}" + mark(x >= at_least if x else None)
    if at_most is not None:
        return f"<={at_most}" + mark(x <= at_most if x else None)
    return ""

if "bf16" in precisions:
    which = "AMX" if amx else "AVX512-BF16" if avx512_bf16 else "no bf16 instructions (emulated; no speed target)"
    print(f"\nmixed precision (tokens/s; {isa or 'oneDNN implementation unknown'}); targets for {which}")
    hdr = (f"{'size':<11} {'thr':>3} {'Loom bf16':>10} {'Loom fp32':>10} {'PT fp32':>8} {'PT bf16':>8} "
           f"{'bf16/fp32':>10} {'target':>10} {'vs best PT':>11} {'target':>10} {'RSS bf16/fp32':>14} {'target':>10}")
    print(hdr)
    print("-" * len(hdr))
    for size in sizes:
        for t in threads:
            lb, lf = pick(size, t, "loom", "tokens_per_s", "bf16"), pick(size, t, "loom", "tokens_per_s")
            pf, pb = pick(size, t, "pytorch", "tokens_per_s"), pick(size, t, "pytorch", "tokens_per_s", "bf16")
            mb, mf = pick(size, t, "loom", "max_rss_bytes", "bf16"), pick(size, t, "loom", "max_rss_bytes")
            f = lambda x, spec: format(x, spec) if x is not None else "failed"
            best_pt = max([x for x in (pf, pb) if x] or [None]) if (pf or pb) else None
            speedup = lb / lf if lb and lf else None
            vs_pt = lb / best_pt if lb and best_pt else None
            rss = mb / mf if mb and mf else None
            # The memory target needs activations to matter: at B 1 the 18-byte state dominates.
            rss_target = BF16_RSS.get(size) if batch(size) >= 4 else None
            print(f"{size:<11} {t:>3} {f(lb, '.0f'):>10} {f(lf, '.0f'):>10} {f(pf, '.0f'):>8} {f(pb, '.0f'):>8} "
                  f"{f(speedup, '.2f'):>10} {target(speedup, at_least=BF16_OVER_FP32.get(size)):>10} "
                  f"{f(vs_pt, '.2f'):>11} {target(vs_pt, at_least=BF16_OVER_PT):>10} "
                  f"{f(rss, '.2f'):>14} {target(rss, at_most=rss_target):>10}")
blas = sorted({r["run"].get("blas", "") for r in runs if r["run"].get("impl") == "pytorch" and "blas" in r["run"]})
if blas:
    print("PyTorch BLAS: " + "; ".join(blas))
EOF
