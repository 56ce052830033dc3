// Time of one GEMM on a device: a roofline (the slower of its FLOPs at the sustained GEMM rate
// and its operand bytes at the memory bandwidth) with wave quantization (output tiles run in
// waves over the compute units, the last wave partly idle), as in NVIDIA's Deep Learning
// Performance Guide. Small per-GPU matrices (hidden / tp, a head's 64-128 columns) lose
// efficiency here, large ones approach gemm_peak_share. Pure functions.
#pragma once

#include <cstdint>

#include "loom/plan/specs.hpp"

namespace loom::plan {

// C (m, n) = A (m, k) . B (k, n), `batch` independent copies (attention's heads).
struct Gemm {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
  }
};

// Share of the compute units busy over the waves of a GEMM's output tiles (1 without waves).
double wave_efficiency(const Gemm& g, const ClusterSpec& c);

// Seconds of one GEMM with `bytes_per_value` operands.
double gemm_seconds(const Gemm& g, const ClusterSpec& c, int64_t bytes_per_value);

// Seconds of the two backward GEMMs of a forward GEMM: dA = dC . B^T (m, k, n) and
// dB = A^T . dC (k, n, m).
double gemm_backward_seconds(const Gemm& g, const ClusterSpec& c, int64_t bytes_per_value);

}  // namespace loom::plan
