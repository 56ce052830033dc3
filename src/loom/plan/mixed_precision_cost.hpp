// Mixed precision (bf16 compute, fp32 master weights) as Loom holds it: the model state per
// rank by ZeRO stage, and what `loom plan --precision bf16` prices. Psi parameters, of which
// Psi_32 are read outside GEMMs (embeddings, LayerNorm gains, biases) and so keep an fp32
// value on every rank; sharded over N ranks:
//   DDP:    fp32 master 4 Psi + bf16 copy 2 Psi, fp32 gradients 4 Psi, moments 8 Psi   = 18 Psi
//   ZeRO-1: bf16 copy 2 Psi + fp32 values 4 Psi_32 + master 4 Psi/N, gradients 4 Psi,
//           moments 8 Psi/N                                   = 6 Psi + 12 Psi/N + 4 Psi_32
//   ZeRO-2: as ZeRO-1 with gradients 4 Psi/N                  = 2 Psi + 16 Psi/N + 4 Psi_32
//   ZeRO-3: master 4 Psi/N + its bf16 copy 2 Psi/N, gradients 4 Psi/N, moments 8 Psi/N
//                                                             = 18 Psi/N (+ the gathered units)
// The published formulas (ZeRO, Megatron's distributed optimizer) are these with Psi_32 = 0:
// their embeddings and LayerNorms compute in bf16 too.
#pragma once

#include <cstdint>

#include "loom/plan/memory_model.hpp"

namespace loom::plan {

// optimizer_bytes_per_param: 8 for AdamW, 4 for SGD with momentum (fp32 either way).
StateBytes mixed_precision_state_bytes(int64_t params, int64_t fp32_read_params, int shards, int zero_stage,
                                       int64_t optimizer_bytes_per_param);

// `loom plan --precision bf16`: the model state of a device holding params_here parameters, of
// which gemm_only_params are blocks' Linear weights (the rest read outside GEMMs), over dp.
int64_t bf16_state_bytes(int64_t params_here, int64_t gemm_only_params, int64_t dp, int zero_stage);

// Bytes one layer's activations shrink by in bf16 against Loom's fp32 layer
// (memory_model.hpp's activation_bytes_per_layer): each Linear keeps its input for backward
// in bf16, 2 bytes instead of 4: the qkv and fc inputs (the LayerNorms' outputs, B T C each,
// split t ways along the sequence with sequence parallelism), the attention projection's
// (B T C / t) and the MLP projection's (4 B T C / t).
int64_t bf16_saved_activation_bytes(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel);

}  // namespace loom::plan
