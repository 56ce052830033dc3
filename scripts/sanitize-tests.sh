#!/usr/bin/env bash
# Builds Loom with AddressSanitizer + UndefinedBehaviorSanitizer (-DLOOM_SANITIZE=ON) in its
# own build directory and runs the tests under them: any ASan or UBSan report fails the run.
#   scripts/sanitize-tests.sh [build-dir] [single-process gtest filter] [2-rank gtest filter]
# Default: build-asan, every single-process test and the whole MPI suite at 2 ranks
# (`make sanitize`). CTest's sanitize.asan_ubsan (tests/CMakeLists.txt, run by `make test`
# and CI) passes a build directory inside the main one and leaves out the longest training
# run.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
single_filter=${2:-*}
mpi_filter=${3:-*}
root=$(pwd)
# GNU nproc obeys OMP_NUM_THREADS, which the tests below set to 1.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)

# A unity build (several sources per compiler run) parses the heavy headers once per batch:
# the sanitized build is the largest part of this script's time. Only the three targets the
# tests run are built (loom: the CLI tests start it). A compiler launcher such as ccache is
# taken from CMAKE_CXX_COMPILER_LAUNCHER in the environment when set.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_SANITIZE=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$build" -j "$cores" --target loom loom_tests loom_mpi_tests

# halt_on_error/abort_on_error: the first report kills the process with SIGABRT, never an
# exit status a test expects (the CLI tests check for exit code 1 on bad input).
# Open MPI and libgomp leak by design at exit: LeakSanitizer suppresses only those libraries
# (scripts/sanitizers/lsan.supp).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$root/scripts/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
# Leak checking off in processes mpirun starts (the MPI suite, and `loom` in the trace and
# report tests): Open MPI's components (mca_*.so) are dlopen'ed and unloaded again in
# MPI_Finalize, so their ~115 KB of leaks per rank have no module name a suppression could
# match. Open MPI sets the variables of mca_base_env_list in every process it launches; every
# other ASan check and UBSan stay on.
export OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0"

# The single-process tests in one shard per core, side by side (CTest gives this test 2
# processors); each shard's report is printed when it ends.
shards=$cores
echo "[sanitize] single-process tests in $shards shards: $single_filter"
pids=()
for ((i = 0; i < shards; i++)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$build/tests/loom_tests" "--gtest_filter=$single_filter" \
    >"$build/sanitize-shard-$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < shards; i++)); do
  wait "${pids[$i]}" || failed=1
  cat "$build/sanitize-shard-$i.log"
done
[ "$failed" = 0 ] || { echo "[sanitize] single-process tests FAILED"; exit 1; }
echo "[sanitize] MPI tests at 2 ranks: $mpi_filter"
mpirun --oversubscribe --bind-to none -n 2 "$build/tests/loom_mpi_tests" "--gtest_filter=$mpi_filter"
echo "[sanitize] clean: no AddressSanitizer or UndefinedBehaviorSanitizer report"
