// `loom plan --cluster local`: this machine measured as Loom runs on it, a process per rank
// with one thread each, fp32 or bf16. Rather than one peak GEMM rate it times Loom's own
// kernels at the shapes the planned layouts use, each layer's in the order a training step
// runs them: each Linear's three products (forward, dx, dW), attention, GELU; and a copy over
// buffers beyond the last-level cache for the memory-bound passes. Times are the calling
// thread's CPU time (each kernel's median over a few rounds), so a busy machine shared with
// other jobs still measures what a core of its own takes; the planner adds the sharing
// between ranks itself.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/plan/specs.hpp"
#include "loom/plan/step_time.hpp"

namespace loom::apps {

// `ranks`: the processes a layout will run on this machine (its cores are shared when more).
// precision Bf16: the GEMMs and attention timed in bf16 mixed precision (bf16 operands, fp32
// results), as `--precision bf16` trains; otherwise fp32.
plan::ClusterSpec measure_local_cluster(const plan::ModelSpec& model, const std::vector<plan::Layout>& layouts,
                                        int64_t ranks, plan::Precision precision = plan::Precision::Fp32);

}  // namespace loom::apps
