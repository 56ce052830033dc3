#!/usr/bin/env bash
# Installs exactly what Loom needs from Debian 12 packages, skipping what is present.
# Idempotent: a second run installs nothing. Uses sudo when not root.
#   scripts/install-deps.sh        everything: build, run, tests and benchmarks
#   scripts/install-deps.sh demo   only what building and running Loom need (the demo)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates zlib1g-dev
  libdnnl-dev                          # GEMM (oneDNN matmul)
  libopenmpi-dev openmpi-bin           # transport
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev   # the build configures the test and benchmark targets
)
if [ "${1:-all}" != demo ]; then
  packages+=(
    python3 python3-torch python3-numpy  # numerics oracle and speed baseline (tests/bench only)
    libopenblas0-openmp                  # an optimized BLAS, so PyTorch baselines run at their best
    chromium                             # renders the run report in a test (headless)
    slurmctld slurmd slurm-client munge  # a one-node Slurm cluster runs scripts/slurm/loom.sbatch in a test
    clang libclang-rt-14-dev libomp-14-dev  # libFuzzer, ASan and UBSan runtimes and clang's omp.h: coverage-guided fuzzing of the readers (fuzz.libfuzzer)
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[install] all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "[install] need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "[install] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
