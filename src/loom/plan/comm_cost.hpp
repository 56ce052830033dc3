// The alpha-beta cost model of collectives (Hockney; Thakur, Rabenseifner & Gropp 2005):
// sending m bytes costs alpha + m * beta. Pure functions, used by `loom bench comm` to put
// a prediction next to each measurement and by the planner to price a layout.
#pragma once

#include <cstdint>
#include <string>

namespace loom::plan {

struct LinkCost {
  double alpha_s = 0.0;        // latency per message, seconds
  double beta_s_per_byte = 0;  // inverse bandwidth, seconds per byte
};

// Predicted seconds of an all-reduce of `bytes` on p ranks with the named algorithm
// ("ring", "tree", "rhd", "param-server"; servers for the latter). Returns a negative value
// for algorithms without a model ("mpi": the library chooses its own).
double all_reduce_seconds(const std::string& algorithm, int64_t bytes, int p, const LinkCost& link, int servers = 1);

// Bus bandwidth as nccl-tests defines it for all-reduce: algorithm bandwidth * 2 (p-1) / p,
// comparable across rank counts (the link speed a ring would need).
double all_reduce_bus_bandwidth(int64_t bytes, double seconds, int p);

// Bytes of the tensors one rank's tensor-parallel collectives reduce or gather in a training
// step of a GPT (L layers, width C, context block_size) over M micro-batches of B x T
// tokens. Without sequence parallelism each layer all-reduces a (B, T, C) activation 4 times
// (g after attention and MLP in forward, f before them in backward: Shoeybi et al. 2019),
// plus the embedding (forward) and the LM head's input gradient (backward), plus 3 floats
// per token for the vocabulary-parallel loss. With sequence parallelism a layer moves 10:
// 2 all-gathers and 2 reduce-scatters forward, and backward the same again plus the
// re-gathered inputs of the 2 column-parallel layers (only sequence chunks are kept); the
// embedding and head add 5; the replicated parameters' partial gradients are summed (6C
// per layer, block_size x C + 2C for the position table and final LayerNorm) once per step,
// or once per micro-batch under ZeRO-2/3 (whose gradients do not accumulate in place). The
// gradient norm adds one float. The activations count activation_bytes a value (2 when they
// cross in bf16, comm/activation_wire.hpp); the loss's statistics and the gradients stay fp32.
// A mixture of experts in `layers` of the blocks (each of `experts` experts, `local_experts` of
// them on this rank): its MLP moves no tensor-parallel activations (the experts are replicated
// over tp and run the tokens this rank holds); under sequence parallelism each rank routes its
// chunk of the sequence, so the router's and the local experts' gradients are summed over tp
// (in place of the dense MLP's projection bias), per micro-batch under ZeRO-2/3 but for the
// experts under ep, which accumulate outside ZeRO; and the load-balancing loss's per-sequence
// statistics are added over tp (2 B E floats a layer forward, B E in backward, per micro-batch)
// as are the step's expert loads (E + 4 floats). With capacity (and sequence parallelism) each
// layer's forward gathers every rank's top_k choices and positions for the whole sequence's
// order: T (1 + B top_k) floats gathered, per micro-batch.
struct TensorParallelMoe {
  int64_t layers = 0, experts = 0, local_experts = 0;
  bool expert_parallel = false;
  int64_t top_k = 0;
  bool capacity = false;
};
int64_t tensor_parallel_bytes_per_step(int64_t B, int64_t T, int64_t C, int64_t L, int64_t block_size, int64_t M,
                                       bool sequence_parallel, int zero_stage = 0, int64_t activation_bytes = 4,
                                       const TensorParallelMoe& moe = {});

// Bytes all ranks of a pipeline send point to point in a training step: every virtual stage
// but the last sends each micro-batch's activation forward and every one but the first its
// gradient back, `values` each ((B, T, C), or (B, T/t, C) under sequence parallelism), over
// S = pp x chunks virtual stages and M micro-batches: 2 M (S - 1) values.
int64_t pipeline_bytes_per_step(int64_t values, int64_t M, int64_t virtual_stages, int64_t activation_bytes);

}  // namespace loom::plan
