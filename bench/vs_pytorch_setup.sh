# Sourced (after `set -euo pipefail`) by the one-process Loom-vs-PyTorch scripts,
# train_vs_pytorch.sh and generate_vs_pytorch.sh, with the script's arguments: moves to the
# repository root and sets
#   LOOM       the Loom binary of the build directory $1 (default: build), which must exist
#   PYTHON     an interpreter that imports torch (default /usr/bin/python3)
#   blas_dir   the optimized BLAS PyTorch loads (pytorch_blas.sh), "" when none is found
#   torch_env  the command prefix PyTorch runs under: OPENBLAS_CORETYPE and
#              OPENBLAS_L2_SIZE unset (OpenBLAS picks its own kernels), that BLAS first
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${1:-build}
LOOM="$BUILD/loom"
[ -x "$LOOM" ] || { echo "no Loom binary at $LOOM: build it first (ninja -C $BUILD loom)" >&2; exit 1; }
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c "import torch" 2>/dev/null || { echo "$PYTHON cannot import torch: install python3-torch" >&2; exit 1; }

source bench/pytorch_blas.sh
blas_dir=$(pytorch_blas_dir) || exit 1
torch_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
if [ -n "$blas_dir" ]; then
  torch_env+=("LD_LIBRARY_PATH=$blas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
else
  echo "WARNING: no optimized BLAS found for PyTorch; it will use whatever libblas.so.3 is" \
       "installed (Debian's reference BLAS runs fp32 GEMM at a few GFLOP/s). Install" \
       "libopenblas0-openmp or set PYTORCH_BLAS_DIR for a fair baseline." >&2
fi
