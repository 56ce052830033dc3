// Time of one GEMM on a device: a roofline (the slower of its FLOPs at the sustained GEMM rate
// and its operand bytes at the memory bandwidth) with wave quantization (output tiles run in
// waves over the compute units, the last wave partly idle), as in NVIDIA's Deep Learning
// Performance Guide. Small per-GPU matrices (hidden / tp, a head's 64-128 columns) lose
// efficiency here, large ones approach gemm_peak_share. A cluster measured shape by shape
// (a CPU) gives each GEMM its own measured rate instead. Pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/plan/specs.hpp"

namespace loom::plan {

// The measured rate of exactly this shape, or nullptr.
const MeasuredRate* find_rate(const std::vector<MeasuredRate>& rates, const Gemm& g);

// Share of the compute units busy over the waves of a GEMM's output tiles (1 without waves).
double wave_efficiency(const Gemm& g, const ClusterSpec& c);

// Seconds of one GEMM with `bytes_per_value` operands: at its measured rate when the cluster
// has one for this shape, else by the roofline.
double gemm_seconds(const Gemm& g, const ClusterSpec& c, int64_t bytes_per_value);

// Seconds of the two backward GEMMs of a forward GEMM: dA = dC . B^T (m, k, n) and
// dB = A^T . dC (k, n, m); at the measured backward rate of g when there is one.
double gemm_backward_seconds(const Gemm& g, const ClusterSpec& c, int64_t bytes_per_value);

}  // namespace loom::plan
