// Shared by the PyTorch oracle tests: running a reference script (a missing python or
// torch is a failure, never a skip) and comparing a tensor with its reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "loom/train/safetensors.hpp"
#include "run_command.hpp"

namespace loom::testing::oracle {

// Passes when max|got - want| <= rtol * max|want| + atol; else names the tensor, the
// largest error, where it is, and the scale it was measured against.
inline ::testing::AssertionResult tensor_close(const std::string& what, const Tensor& got, const Tensor& want,
                                        double rtol, double atol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(got.shape()) << " vs PyTorch "
                                         << shape_str(want.shape());
  double max_err = 0.0, max_ref = 0.0;
  int64_t worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double a = got.f32()[i], b = want.f32()[i];
    const double e = std::isnan(a) || std::isnan(b) ? INFINITY : std::fabs(a - b);
    if (e > max_err) max_err = e, worst = i;
    max_ref = std::max(max_ref, std::fabs(b));
  }
  const double bound = rtol * max_ref + atol;
  if (max_err <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " " << shape_str(got.shape()) << ": max |loom - torch| "
                                       << max_err << " at flat index " << worst << " (loom " << got.f32()[worst]
                                       << ", torch " << want.f32()[worst] << "), bound " << bound
                                       << " = " << rtol << " * max|torch| " << max_ref << " + " << atol;
}

// Runs the PyTorch oracle; a failure (no python, no torch, a crash) fails the test.
inline train::TensorFile run_pytorch(const std::string& script, const std::filesystem::path& in_path,
                                     const std::filesystem::path& out_path) {
  // The reference runs on PyTorch's own oneDNN at the CPU's full ISA: an ISA cap set for Loom's
  // (kernels.bf16_without_avx512 sets ONEDNN_MAX_CPU_ISA=AVX2) leaves PyTorch on an AVX-512 CPU
  // with no bf16 matmul at all ("could not create a primitive descriptor iterator").
  const std::string cmd = std::string("env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA '") + LOOM_PYTHON + "' '" +
                          script + "' '" + in_path.string() + "' '" + out_path.string() + "'";
  const loom::testing::CommandResult result = loom::testing::run_command(cmd);
  const int rc = result.exit_code;
  if (rc == 3 || rc == 127)
    ADD_FAILURE() << "the PyTorch oracle could not run: " << LOOM_PYTHON
                  << (rc == 127 ? " was not found" : " has no torch/numpy")
                  << "; install python3 with torch and numpy (this test is never skipped). Command: " << cmd;
  else if (rc != 0)
    ADD_FAILURE() << "the PyTorch oracle failed with exit status " << rc << ". Command: " << cmd << "\n" << result.output;
  if (rc != 0) return {};
  return train::load_tensor_file(out_path.string());
}

}  // namespace loom::testing::oracle
