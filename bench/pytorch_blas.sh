# Sourced by the Loom-vs-PyTorch scripts: pick the optimized BLAS PyTorch should load.
# PyTorch's fp32 matmul is its BLAS's, and Debian's reference libblas3 runs it at a few
# GFLOP/s, which is not PyTorch at its best. Prints the directory holding libblas.so.3 (the
# PYTORCH_BLAS_DIR override, else Debian's OpenBLAS or BLIS), or nothing when none is found.
pytorch_blas_dir() {
  if [ -n "${PYTORCH_BLAS_DIR:-}" ]; then
    [ -e "$PYTORCH_BLAS_DIR/libblas.so.3" ] || { echo "PYTORCH_BLAS_DIR=$PYTORCH_BLAS_DIR has no libblas.so.3" >&2; return 1; }
    echo "$PYTORCH_BLAS_DIR"
    return 0
  fi
  local d
  for d in /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu/openblas-pthread \
           /usr/lib/x86_64-linux-gnu/blis-openmp /usr/lib/x86_64-linux-gnu/blis-pthread; do
    if [ -e "$d/libblas.so.3" ]; then echo "$d"; return 0; fi
  done
}
