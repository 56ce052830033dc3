// Mixed precision (bf16 compute, fp32 master weights) as Loom holds it: the model state per
// rank by ZeRO stage, and what `loom plan --precision bf16` prices. Psi parameters, of which
// Psi_32 are read outside GEMMs (embeddings, LayerNorm gains, biases) and so keep an fp32
// value on every rank, and Psi_0 of those no GEMM reads at all (LayerNorms, biases, the
// position table: not the token table, which the LM head's GEMMs read); sharded over N ranks:
//   DDP:    fp32 master 4 Psi + bf16 copy 2 (Psi - Psi_0), fp32 gradients 4 Psi, moments 8 Psi
//                                                             = 18 Psi - 2 Psi_0
//   ZeRO-1: bf16 copy 2 Psi + fp32 values 4 Psi_32 + master 4 Psi/N, gradients 4 Psi,
//           moments 8 Psi/N                                   = 6 Psi + 12 Psi/N + 4 Psi_32
//   ZeRO-2: as ZeRO-1 with gradients 4 Psi/N                  = 2 Psi + 16 Psi/N + 4 Psi_32
//   ZeRO-3: master 4 Psi/N + its bf16 copy 2 Psi/N, gradients 4 Psi/N, moments 8 Psi/N
//                                                             = 18 Psi/N (+ the gathered units: zero_gathered.hpp)
// DDP converts only what its GEMMs read (nn::Parameter::read_by_gemms), while ZeRO's bf16
// gathers give every parameter a bf16 value. The published formulas (ZeRO, Megatron's
// distributed optimizer) are these with Psi_32 = Psi_0 = 0: their embeddings and LayerNorms
// compute in bf16 too. Psi_k parameters kept in fp32 (a mixture
// of experts' routers: nn::Parameter::kept_in_fp32) have no bf16 copy and are gathered in fp32:
// 4 Psi_k whole in DDP and ZeRO-1/2 (the master a view of it), 4 Psi_k/N under ZeRO-3, in
// place of their share of the bf16 terms above (Psi and Psi_32 then count the others).
#pragma once

#include <cstdint>

#include "loom/plan/memory_model.hpp"

namespace loom::plan {

// optimizer_bytes_per_param: 8 for AdamW, 4 for SGD with momentum (fp32 either way).
// params counts every parameter, kept_params those kept in fp32 (not counted in fp32_read_params),
// gemm_free_params those of fp32_read_params no GEMM reads (Psi_0: no bf16 copy under DDP).
StateBytes mixed_precision_state_bytes(int64_t params, int64_t fp32_read_params, int shards, int zero_stage,
                                       int64_t optimizer_bytes_per_param, int64_t kept_params = 0,
                                       int64_t gemm_free_params = 0);

// The model state of `params` parameters a device keeps whole, outside ZeRO (a mixture of
// experts' E / ep experts under ep, which ExpertDataParallel all-reduces over expert_dp): 16 B
// a parameter under fp32 Adam, and 2 more for each of the `bf16_copies` a GEMM reads in bf16
// (the experts' weights; their biases are read in fp32 and get no copy). What the planner,
// --dry-run and memory.json's formula add.
StateBytes unsharded_state_bytes(int64_t params, int64_t bf16_copies, int64_t optimizer_bytes_per_param = 8);

// `loom plan --precision bf16`: the model state of a device holding params_here parameters, of
// which gemm_only_params are blocks' Linear weights, kept_params kept in fp32 (a mixture of
// experts' routers; the rest read outside GEMMs) and gemm_free_params read by no GEMM, over dp.
int64_t bf16_state_bytes(int64_t params_here, int64_t gemm_only_params, int64_t dp, int zero_stage,
                         int64_t kept_params = 0, int64_t gemm_free_params = 0);

// Rows of the logits' gradient the LM head's backward converts to bf16 at a time
// (nn::GPT::kHeadGradientRows; a test keeps the two equal).
constexpr int64_t kBf16HeadGradientRows = 1024;

// Activation bytes one transformer layer keeps for backward under `--precision bf16`, per rank
// (memory_model.hpp's activation_bytes_per_layer counts the same tensors in fp32). Every layer
// keeps bf16 copies (nn/saved_activation.hpp), the tensor-parallel ones too: the LayerNorms'
// inputs, q, k, v, the MLP's pre-GELU values and every Linear's input (serial or split over
// tp, a sequence-parallel one its own chunk); the LayerNorm statistics (4 B T values) stay
// fp32; the softmax probabilities are not kept: backward recomputes them from the rows' fp32
// log-sum-exp (4 NH B T / t bytes). Under context parallelism (cp > 1) ring attention keeps the
// same and its bf16 output (the same bf16 tensor the projection keeps as its input).
int64_t bf16_activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t t,
                                        bool sequence_parallel, int64_t cp = 1);

// Attention's heads are processed in groups whose (T, T) fp32 scores fit kAttentionGroupBytes
// (kernels/attention.cpp, kGroupBytes; a test keeps the two equal): whole sequences, or some
// heads of one. The values of the largest group's scores, of B sequences of NH heads.
constexpr int64_t kAttentionGroupBytes = int64_t{16} << 20;
int64_t attention_group_values(int64_t B, int64_t T, int64_t NH);
// What one layer's attention backward holds for a while under bf16, beyond the kept
// activations: the scratch of one causal block of a group of heads (its recomputed scores and
// their gradient, dense bf16 copies of the operands; kernels/attention_bf16.cpp, a test keeps
// the two equal). Once per step's peak, not per layer.
constexpr int64_t kAttentionBlockGroupBytes = int64_t{1} << 20;
int64_t bf16_attention_backward_bytes(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t t);

}  // namespace loom::plan
