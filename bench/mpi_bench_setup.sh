# Sourced by the multi-process benchmark scripts (after `set -euo pipefail`): moves to the
# repository root and sets the shared defaults and checks.
#   BENCH_NAME   the script's name for error messages (set before sourcing)
#   $1           the build directory (default: build)
# Environment: PYTHON=/usr/bin/python3, MPIRUN=mpirun, DATA=data/tinyshakespeare.txt,
# LOOM_SKIP=2 (leading steps left out of medians), PEAK_GFLOPS=160 (Loom's MFU print-out only).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${1:-build}
LOOM="$BUILD/loom"
PYTHON=${PYTHON:-/usr/bin/python3}
MPIRUN=${MPIRUN:-mpirun}
DATA=${DATA:-data/tinyshakespeare.txt}
LOOM_SKIP=${LOOM_SKIP:-2}
PEAK_GFLOPS=${PEAK_GFLOPS:-160}

die() { echo "$BENCH_NAME: $*" >&2; exit 1; }
[ -x "$LOOM" ] || die "no Loom binary at $LOOM: build it first (ninja -C $BUILD loom)"
command -v "$MPIRUN" >/dev/null || die "no MPI launcher '$MPIRUN' on PATH (install openmpi-bin or set MPIRUN)"
# Open MPI as root needs the two variables; more ranks than cores need --oversubscribe.
mpi() { OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$MPIRUN" --oversubscribe --bind-to none "$@"; }
# The CPU and the ISA oneDNN dispatches to on it (its verbose line of a one-step run), for the
# line every benchmark prints before its figures.
cpu_and_isa() {
  local isa
  isa=$(ONEDNN_VERBOSE=1 "$LOOM" bench train --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 1 --steps 1 \
        --warmup 0 --threads 1 2>/dev/null | grep -m1 -o 'isa:[^,]*' || true)
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; oneDNN ${isa:-isa: unknown}"
}
