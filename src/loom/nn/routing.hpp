// Token routing for a mixture of experts: top-k over the router's softmax with weights
// renormalised over the chosen experts, capacity dropping, and the Switch Transformer
// load-balancing loss. Everything is decided per sequence (row of the batch), so a token's
// fate never depends on which other rows share its rank or micro-batch: every layout
// drops the same tokens as the serial run.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/nn/sequence_parts.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::nn {

struct Routing {
  Tensor expert;  // (N, K) i32: the chosen experts, by falling probability (ties: lower index)
  Tensor gate;    // (N, K) f32: their probabilities renormalised to sum to 1
  Tensor row;     // (N, K) i32: the assignment's row among the dispatched rows; -1: dropped
  std::vector<int64_t> counts;  // (E) rows per expert after dropping; rows are grouped by expert
  int64_t dropped = 0;          // assignments over capacity
};

// Per-expert capacity of one sequence of T tokens: ceil(f K T / E); 0 (no limit) when f = 0.
int64_t expert_capacity(double capacity_factor, int64_t K, int64_t T, int64_t E);

// True when no sequence of any length can drop a token: an expert gets at most one of a
// token's K (distinct) choices, so at most T of a sequence's, and f K >= E makes every
// capacity ceil(f K T / E) >= T (f = 0 has none). Then routing is per token.
bool capacity_never_drops(double capacity_factor, int64_t K, int64_t E);

// probs (B*T, E) row-wise softmax. Within a sequence, first choices take capacity before
// second choices, and earlier tokens before later ones; kept rows are numbered expert by
// expert in (sequence, choice, token) order.
// Split over parts (T of each sequence's tokens here), the capacity is the whole sequence's
// and each part keeps what the whole sequence's order keeps: a collective (only with capacity)
// that gathers every part's choices with the positions they stand at, wherever the parts'
// tokens lie (sequence parallelism's consecutive chunks, context parallelism's interleaved ones).
Routing route_tokens(const Tensor& probs, int64_t B, int64_t T, int64_t K, double capacity_factor,
                     const SequenceParts& parts = whole_sequences());

// Switch loss per sequence, E sum_i f_i P_i (f_i: share of the sequence's K T choices, before
// dropping, that picked expert i; P_i: mean router probability of i), averaged over the B
// sequences. Uniform routing gives exactly 1.
// Under context or sequence parallelism (parts: the sequence split over cp and/or tp ranks, T
// tokens of it here) f and P are the whole sequence's: this rank's sums added over the parts.
float load_balancing_loss(const Tensor& probs, const Tensor& expert, int64_t B, int64_t T,
                          const SequenceParts& parts = whole_sequences());
// dprobs (B*T, E) += scale * d(loss)/d(probs), the choices f held fixed (they are not
// differentiable). Collective over the parts: f is the whole sequence's. Each token gets
// E f_i / (T' B) with T' = T x parts.summed_parts(): the whole sequence's length under sequence
// parallelism, whose tp ranks sum their gradients; this part's under context parallelism, whose
// every other loss gradient is its tokens' mean (parts x their share of the whole), which data
// parallelism then averages over cp.
void load_balancing_loss_backward(Tensor& dprobs, const Tensor& expert, int64_t B, int64_t T, float scale,
                                  const SequenceParts& parts = whole_sequences());

// dprobs += d/dprobs of the renormalised gates given dgate (N, K) (0 for dropped choices).
void gate_backward(Tensor& dprobs, const Tensor& probs, const Tensor& expert, const Tensor& gate, const Tensor& dgate);

}  // namespace loom::nn
