#!/usr/bin/env bash
# The planner against Loom itself: for the layouts Loom can run on this machine (a process
# per rank, 1 thread each; 4 ranks share 2 cores), `loom plan --cluster local` predicts the
# step time and the peak memory of rank 0; `loom train` runs a few steps of the same layout;
# both are printed side by side with the ratio, and a last line says whether every layout is
# within the targets (memory within 10%, wall step time within 25%).
#
# Usage: bench/plan_vs_measured.sh [build dir]        (default: build)
#        SET=tp3d bench/plan_vs_measured.sh [build dir]
#
# SET=tp3d: 3D tensor parallelism instead (`--tp-3d R,C,D`, issue 18's wide model: L=4, H=16,
# C=1024, T=64, global batch 4) under the emulated 10 Gb/s link (`loom train --net-gbps 10`,
# priced by `loom plan --net-gbps 10` over the real link: MPI's all-reduce bus bandwidth on 4
# ranks, which is what the grids' collectives get), the grids 2,1,2,
# 1,2,2 and 1,1,4 on 4 ranks and 2,2,2 on 8, each priced by `loom plan --tp-3d R,C,D`, and
# 2,2,2 again at global batch 8 (tp3d-2x2x2-b8: each rank the rows and weight block a rank of
# the 4-rank grids computes, where global batch 4 halves them), two pipelines of grids on 4
# ranks (pp 2, 1F1B over 2 micro-batches, each stage a 2,1,1 or a 1,1,2 grid), ring attention
# around 1,1,2 grids (cp 2) and DDP, ZeRO-1 and ZeRO-3 over two replicas of a 1,1,2 grid; one
# more line per grid gives the 3D communication and the share of it compute hid (the progress
# line's `tp_3d comm`, summed over the steps after LOOM_SKIP, rank 0). LOOM_STEPS=5 there.
#
# The link comes from `loom bench comm` on 2 ranks; the kernels' rates (GEMMs by shape,
# attention, GELU), the copy bandwidth and the speed a core gets alone and with all busy
# from `loom plan --cluster local`, which measures them before and after each run (the
# prediction is the mean of the two).
# Model: L=4, H=4, C=128, T=128, char vocabulary (65, padded to 128), global batch 8
# sequences a step, no recompute, fp32 Adam. Layouts: serial, dp2 (DDP, ZeRO-1, ZeRO-3), tp2,
# pp2 with 1F1B over 4 micro-batches, and on 4 ranks dp4, dp2 x pp2, dp2 x tp2 and pp2 x tp2.
# Measured step time: the median wall time of the steps after the first LOOM_SKIP
# (metrics.jsonl `elapsed_s` differences), and the CPU time of a step (user + sys of a
# LOOM_STEPS run minus a LOOM_SKIP run, per step): the busiest rank's, or all ranks' over the
# cores when ranks outnumber them, which is what a step takes on cores of its own when other
# jobs share the machine (MPI waits spin, so they count). The wall time is set against the
# prediction for the machine as measured (the share of its cores other jobs leave included),
# the CPU time against the prediction on undisturbed cores. Memory: the largest
# `peak_mem_bytes` of rank 0. On a shared machine the timings drift with the other jobs: the
# load average is printed before and after, and REPEATS > 1 prints medians over rounds.
# Benchmarks never gate anything: the exit status is 0 whatever the figures.
#
# PRECISION=bf16: every run trains with `--precision bf16` and every prediction prices it
# (`loom plan --precision bf16`: bf16 GEMM rates measured, 18 bytes of state a parameter).
#
# Environment (all optional): REPEATS=1 (rounds per layout), ONLY (a regular expression: only the
# layouts whose name matches), PRECISION=fp32, LOOM_STEPS=14, LOOM_SKIP=2,
# MPIRUN=mpirun, DATA=data/tinyshakespeare.txt, PYTHON=/usr/bin/python3.
set -euo pipefail

BENCH_NAME=plan_vs_measured
source "$(dirname "$0")/mpi_bench_setup.sh"
SET=${SET:-1d}
[ "$SET" = 1d ] || [ "$SET" = tp3d ] || die "SET must be 1d or tp3d, got '$SET'"
LOOM_STEPS=${LOOM_STEPS:-$([ "$SET" = tp3d ] && echo 5 || echo 14)}
REPEATS=${REPEATS:-1}
PRECISION=${PRECISION:-fp32}
[ "$PRECISION" = fp32 ] || [ "$PRECISION" = bf16 ] || die "PRECISION must be fp32 or bf16, got '$PRECISION'"
# Ranks waiting in MPI give their core to the others (needed with more ranks than cores).
export OMPI_MCA_mpi_yield_when_idle=1
WORK=$(mktemp -d /tmp/plan_vs_measured.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MODEL=(--n-layer 4 --n-head 4 --n-embd 128 --block-size 128)
PLAN_MODEL=(--layers 4 --heads 4 --hidden 128 --seq 128 --vocab 128)
GLOBAL_BATCH=8
LINK=()  # the link loom train emulates and loom plan prices (none: the real one)
PREC=(--precision "$PRECISION")
if [ "$SET" = tp3d ]; then
  MODEL=(--n-layer 4 --n-head 16 --n-embd 1024 --block-size 64)
  PLAN_MODEL=(--layers 4 --heads 16 --hidden 1024 --seq 64 --vocab 128)
  GLOBAL_BATCH=4
  LINK=(--net-gbps 10)
fi

# The MPI link between two ranks as `loom bench comm` measures it (ping-pong alpha and beta);
# the GEMM rate and copy bandwidth `loom plan --cluster local` measures before each prediction.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the machine's (nproc obeys OpenMP's variables)
link=$(mpi -np 2 "$LOOM" bench comm --csv --sizes 8B:8B </dev/null |
  sed -n 's/^# ranks=2 alpha_us=\([0-9.]*\) beta_GBps=\([0-9.]*\)$/\1 \2/p')
read -r alpha_us link_gbs <<<"$link"
[ -n "${link_gbs:-}" ] || die "could not read the link from loom bench comm"
isa=$(ONEDNN_VERBOSE=1 "$LOOM" train --data "$DATA" --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 1 \
      --steps 1 --eval-every 0 --eval-batches 1 --threads 1 --out-dir "$WORK/isa" 2>&1 | grep -m1 -o "isa:[^,]*" || true)
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $CORES cores, oneDNN ${isa:-isa: unknown}"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "MPI link (loom bench comm, 2 ranks): alpha $alpha_us us, $link_gbs GB/s; precision $PRECISION"
if [ "$SET" = tp3d ]; then
  # The grids move megabytes through MPI's own collectives: slower than a ping-pong between
  # two (kernel copies, page pinning, reductions). Their real link is MPI all-reduce's bus
  # bandwidth on 4 ranks, the median over 2-8 MiB. With more ranks than cores the ranks take
  # turns on the cores during it, so a rank's copies run at ranks / cores times the rate they
  # see together: that is the link a rank with a core of its own has, which `--link-gbs`
  # means (the planner adds the turns itself, core_sharing_seconds).
  shared_gbs=$(mpi -np 4 "$LOOM" bench comm --csv --sizes 2MiB:8MiB --algorithms mpi </dev/null |
    awk -F, '$2 == "mpi" { print $5 }' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
  [ -n "$shared_gbs" ] || die "could not read MPI's all-reduce bandwidth from loom bench comm"
  link_gbs=$(awk -v g="$shared_gbs" -v cores="$CORES" 'BEGIN { print (cores < 4 ? g * 4 / cores : g) }')
  # --net-gbps 10: a collective lasts at least its time on a 10 Gb/s link (1.25 GB/s), and at
  # least its time on the real one; `loom plan --net-gbps 10` prices the slower of the two, and
  # counts only the real link's share of it as the cores' copy (the rest is a sleep).
  echo "emulated link (--net-gbps 10, 1.25 GB/s) over the real one (MPI all-reduce on 4 ranks, 2-8 MiB: $shared_gbs GB/s" \
       "on $CORES cores, $link_gbs GB/s a rank with a core of its own)"
fi
"$LOOM" plan --cluster local "${PLAN_MODEL[@]}" "${PREC[@]}" --gpus 1 --global-batch "$GLOBAL_BATCH" --dp 1 --recompute off | sed -n 2p

measured() {  # metrics.jsonl -> "step_s peak_bytes"
  "$PYTHON" - "$1" "$LOOM_SKIP" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
train = [r for r in recs if r.get("kind") == "train"]
steps = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(train, train[1:]) if b["step"] > int(sys.argv[2])]
print(statistics.median(steps), max(r["peak_mem_bytes"] for r in train))
PY
}

hidden() {  # name metrics.jsonl -> "name: the tp (SET=tp3d: 3D) communication and its hidden share" (rank 0's steps after LOOM_SKIP)
  "$PYTHON" - "$1" "$2" "$LOOM_SKIP" "$([ "$SET" = tp3d ] && echo tp_3d || echo tp)" <<'PY'
import json, sys
train = [r for r in map(json.loads, filter(str.strip, open(sys.argv[2]))) if r.get("kind") == "train"
         and r["step"] > int(sys.argv[3]) and "tp_comm_exposed_s" in r]
comm, exposed = sum(r["tp_comm_s"] for r in train), sum(r["tp_comm_exposed_s"] for r in train)
if comm > 0:
    print("%s: %s comm %.0f ms a step, %.0f ms exposed (%.0f%% hidden)" % (sys.argv[1], sys.argv[4], 1e3 * comm / len(train),
          1e3 * exposed / len(train), 100 * max(0.0, 1 - exposed / comm)))
PY
}

predicted() {  # loom plan --json -> "step_s memory_bytes undisturbed_step_s"
  "$PYTHON" -c 'import json, sys; c = json.load(sys.stdin)[0]
if not c["valid"]: sys.exit("invalid layout: " + c["why_not"])
print(c["step_s"], c["memory_bytes_per_device"], c["undisturbed_step_s"])'
}

predict() {  # ranks global-batch plan-flags...: "step_s memory_bytes" from `loom plan --cluster local`
  local ranks=$1 global_batch=$2
  shift 2
  "$LOOM" plan --cluster local "${PLAN_MODEL[@]}" "${PREC[@]}" --gpus "$ranks" --global-batch "$global_batch" --recompute off \
    --sequence-parallel off --link-latency-us "$alpha_us" --link-gbs "$link_gbs" "${LINK[@]}" --json "$@" </dev/null |
    predicted
}

train() {  # name ranks steps flags...: runs loom train, each rank's CPU seconds in $WORK/name.cpu.<rank>
  local name=$1 ranks=$2 steps=$3
  shift 3
  rm -rf "${WORK:?}/$name"  # a run directory of its own each round (loom train refuses to start over in one)
  mpi -np "$ranks" sh -c '/usr/bin/time -f "%U %S" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$WORK/$name.cpu" \
    "$LOOM" train --data "$DATA" "${MODEL[@]}" "${LINK[@]}" "${PREC[@]}" --threads 1 --steps "$steps" --log-every 1 --eval-every 0 \
    --eval-batches 1 --out-dir "$WORK/$name" "$@" </dev/null >"$WORK/$name.log" 2>&1
}
busiest_cpu() {  # name: the largest user + sys over the ranks, or their sum over the cores if larger
  cat "$WORK/$1".cpu.* | awk -v cores="$CORES" '{ t = $1 + $2; s += t; if (t > m) m = t }
    END { print (s / cores > m ? s / cores : m) }'
}

printf '%-12s %10s %10s %6s %10s %6s %10s %10s %6s\n' layout "pred s" "wall s" ratio "cpu s" ratio "pred MiB" \
  "meas MiB" ratio
# name | ranks | train flags | plan flags [| global batch, when not GLOBAL_BATCH]
while IFS='|' read -r name ranks train_flags plan_flags global_batch; do
  [[ "$name" =~ ${ONLY:-.} ]] || continue
  dir="$WORK/$name"
  global_batch=${global_batch:-$GLOBAL_BATCH}
  : >"$WORK/$name.rounds"
  for ((round = 0; round < REPEATS; round++)); do
    # shellcheck disable=SC2086
    before=$(predict "$ranks" "$global_batch" $plan_flags)
    # shellcheck disable=SC2086
    train "$name" "$ranks" "$LOOM_STEPS" $train_flags ||
      { echo "$name: loom train failed (see below)" >&2; tail -5 "$WORK/$name.log" >&2; continue 2; }
    # shellcheck disable=SC2086
    train "$name-short" "$ranks" "$LOOM_SKIP" $train_flags || die "$name: the short run failed"
    cpu_s=$(awk -v a="$(busiest_cpu "$name")" -v b="$(busiest_cpu "$name-short")" -v n=$((LOOM_STEPS - LOOM_SKIP)) \
      'BEGIN { print (a - b) / n }')
    # shellcheck disable=SC2086
    after=$(predict "$ranks" "$global_batch" $plan_flags)
    # The machine is measured before and after the run: the mean of the two predictions.
    echo "$before $after $(measured "$dir/metrics.jsonl") $cpu_s" >>"$WORK/$name.rounds"
    hidden "$name" "$dir/metrics.jsonl" >>"$WORK/hidden"
  done
  # Each figure is the median over the rounds.
  "$PYTHON" - "$name" "$WORK/$name.rounds" <<'PY' | tee -a "$WORK/table"
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[2]) if l.strip()]
med = lambda f: st.median(f(r) for r in rows)
ps, pb, pc = med(lambda r: (r[0] + r[3]) / 2), med(lambda r: r[1]), med(lambda r: (r[2] + r[5]) / 2)
ms, mb, cs = med(lambda r: r[6]), med(lambda r: r[7]), med(lambda r: r[8])
# Under heavy load the short run can cost more CPU than the long one: no figure then. The
# CPU time is set against the step on undisturbed cores (the other jobs' share left out).
cpu = '%10.4f %6.2f' % (cs, pc / cs) if cs > 0 else '%10s %6s' % ('n/a', '')
print('%-12s %10.4f %10.4f %6.2f %s %10.1f %10.1f %6.2f' % (sys.argv[1], ps, ms, ps / ms, cpu, pb / 2**20, mb / 2**20,
      pb / mb))
PY
done < <(if [ "$SET" = tp3d ]; then cat <<'LAYOUTS3D'
tp3d-2x1x2|4|--tp-3d 2,1,2 --batch-size 2|--dp 1 --tp-3d 2,1,2 --micro-batch-size 2
tp3d-1x2x2|4|--tp-3d 1,2,2 --batch-size 2|--dp 1 --tp-3d 1,2,2 --micro-batch-size 2
tp3d-1x1x4|4|--tp-3d 1,1,4 --batch-size 1|--dp 1 --tp-3d 1,1,4 --micro-batch-size 1
tp3d-2x2x2|8|--tp-3d 2,2,2 --batch-size 2|--dp 1 --tp-3d 2,2,2 --micro-batch-size 2
tp3d-2x2x2-b8|8|--tp-3d 2,2,2 --batch-size 4|--dp 1 --tp-3d 2,2,2 --micro-batch-size 4|8
pp2-tp3d-2x1x1|4|--pp 2 --tp-3d 2,1,1 --micro-batches 2 --batch-size 2|--dp 1 --pp 2 --tp-3d 2,1,1 --micro-batch-size 2
pp2-tp3d-1x1x2|4|--pp 2 --tp-3d 1,1,2 --micro-batches 2 --batch-size 1|--dp 1 --pp 2 --tp-3d 1,1,2 --micro-batch-size 1
cp2-tp3d-1x1x2|4|--cp 2 --tp-3d 1,1,2 --batch-size 2|--dp 1 --cp 2 --tp-3d 1,1,2 --micro-batch-size 2
dp2-tp3d-1x1x2|4|--dp 2 --tp-3d 1,1,2 --batch-size 1|--dp 2 --zero 0 --tp-3d 1,1,2 --micro-batch-size 1
dp2-zero1-tp3d-1x1x2|4|--dp 2 --zero 1 --tp-3d 1,1,2 --batch-size 1|--dp 2 --zero 1 --tp-3d 1,1,2 --micro-batch-size 1
dp2-zero3-tp3d-1x1x2|4|--dp 2 --zero 3 --tp-3d 1,1,2 --batch-size 1|--dp 2 --zero 3 --tp-3d 1,1,2 --micro-batch-size 1
LAYOUTS3D
else cat <<'LAYOUTS'
serial|1|--batch-size 8|--dp 1 --micro-batch-size 8
dp2|2|--dp 2 --batch-size 4|--dp 2 --micro-batch-size 4 --zero 0
dp2-zero1|2|--dp 2 --zero 1 --batch-size 4|--dp 2 --micro-batch-size 4 --zero 1
dp2-zero3|2|--dp 2 --zero 3 --batch-size 4|--dp 2 --micro-batch-size 4 --zero 3
tp2|2|--tp 2 --batch-size 8|--dp 1 --tp 2 --micro-batch-size 8
pp2-1f1b|2|--pp 2 --schedule 1f1b --micro-batches 4 --batch-size 2|--dp 1 --pp 2 --micro-batch-size 2
dp4|4|--dp 4 --batch-size 2|--dp 4 --micro-batch-size 2 --zero 0
dp2-pp2|4|--dp 2 --pp 2 --schedule 1f1b --micro-batches 2 --batch-size 2|--dp 2 --pp 2 --micro-batch-size 2 --zero 0
dp2-tp2|4|--dp 2 --tp 2 --batch-size 4|--dp 2 --tp 2 --micro-batch-size 4 --zero 0
pp2-tp2|4|--pp 2 --tp 2 --schedule 1f1b --micro-batches 4 --batch-size 2|--dp 1 --pp 2 --tp 2 --micro-batch-size 2
LAYOUTS
fi)
[ -s "$WORK/hidden" ] && cat "$WORK/hidden"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The verdict: every layout's step-time ratio within 25% (against the wall time, and against
# the CPU time) and memory ratio within 10%.
awk 'function out(r) { return r < 0.75 || r > 1.25 }
     { n++; m = $NF; if (m < 0.9 || m > 1.1) mem++
       if (out($4)) { wall++; wbad = wbad " " $1 }
       if (NF < 9 || out($6)) { cpu++; cbad = cbad " " $1 } }
     END { printf "summary: %d layouts; step time vs wall: %s; vs CPU: %s; memory: %s\n", n,
             wall ? wall " outside 25% (" substr(wbad, 2) ")" : "all within 25%",
             cpu ? cpu " outside 25% (" substr(cbad, 2) ")" : "all within 25%",
             mem ? mem " outside 10%" : "all within 10%" }' "$WORK/table"
