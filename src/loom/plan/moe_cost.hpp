// The planner's mixture-of-experts terms (Fedus et al. 2021; GShard, Lepikhin et al. 2020):
// every `every`-th block's MLP is E expert MLPs and a router, a token runs through K of them.
// Total parameters count every expert, active ones what a token uses (K experts); under
// expert parallelism a device holds E / ep experts of each of its stage's MoE layers, whole
// (tp replicates them; ZeRO shards only the dense parameters, as Loom's ep does: its
// ExpertDataParallel all-reduces them over expert_dp), and each MoE layer exchanges its routed
// rows with all-to-alls: dispatch and combine in forward, the same two in backward. Without
// expert parallelism (ep 1) the experts are parameters like any other: ZeRO shards them with
// the rest (experts_sharded_by_zero).
#pragma once

#include <cstdint>

#include "loom/plan/specs.hpp"
#include "loom/plan/step_time.hpp"

namespace loom::plan {

// Parameters of one expert MLP: h -> 4h -> h with biases, 8 h^2 + 5 h.
int64_t expert_mlp_parameters(int64_t hidden);
// MoE blocks of the model (blocks every-1, 2 every-1, ...); 0 without experts.
int64_t moe_layers(const ModelSpec& model);
// Every parameter, each expert counted (the dense formula with each MoE block's MLP replaced
// by E experts and a router of h E).
int64_t total_parameters(const ModelSpec& model);
// What one token computes with: K experts per MoE block (and its router).
int64_t active_parameters(const ModelSpec& model);
// A device's parameters but its experts, on the pipeline rank holding the most, as the trainer
// builds them (rank_memory_terms.hpp: the Linears split over tp, LayerNorms, row-parallel biases
// and the position table whole, each MoE block's MLP replaced by its router, replicated over tp);
// what step_time takes as params_per_device. (It once divided the whole model by tp x pp.)
int64_t dense_parameters_per_device(const ModelSpec& model, const Layout& layout);
// Of those, the parameters outside its blocks (ZeRO's root units: the token and position
// tables on a first stage, the final LayerNorm and the head's copy of the token table on a
// last one, all of them without a pipeline), on the same rank.
int64_t root_parameters_per_device(const ModelSpec& model, const Layout& layout);
// Expert parameters on one device: E / ep experts of each MoE layer of its pipeline stage
// (E / (plane x ep) on a 3D grid whose plane shares them out: plane_expert_split).
int64_t expert_parameters_per_device(const ModelSpec& model, const Layout& layout);
// Whether ZeRO shards a device's experts with its dense parameters: ep 1 under ZeRO 1-3 over
// dp > 1 (train/parallelize builds one ShardedDataParallel over every parameter then; under
// ep > 1 it leaves the experts out).
bool experts_sharded_by_zero(const ModelSpec& model, const Layout& layout);
// Bytes of expert gradients one device all-reduces apart from ZeRO in a step, `value_bytes` a
// gradient value: under ep its experts' (expert_parameters_per_device) over expert_dp (the
// dp / ep ranks holding the same experts; parallel/expert_parallel's DDP, beside ZeRO 1-3 too),
// without ep DDP's over dp (zero 0), once (they accumulate over micro-batches; reduced in the
// last backward, or after a pipeline); 0 without experts, when expert_dp is one rank, or when
// ZeRO shards the experts with the rest (ep 1: its reduce-scatters carry them).
int64_t expert_gradient_bytes_per_step(const ModelSpec& model, const Layout& layout, int64_t value_bytes);
// Bytes one device hands to its all-to-alls in a step of `micro_batches` micro-batches, all
// rows routed (dropless; capacity only drops some): per MoE layer of its stage and
// micro-batch, micro_batch x seq x K rows of h values (on a grid a plane rank's slice of them,
// 1 / plane_expert_split), four times (dispatch and combine, forward and backward). Under
// balanced routing (ep - 1) / ep of it leaves the device.
int64_t all_to_all_bytes_per_step(const ModelSpec& model, const Layout& layout, int64_t micro_batches,
                                  int64_t value_bytes);
// Seconds of those exchanges: each all-to-all moves its off-device share over the link
// (pairwise, ep - 1 messages).
double all_to_all_seconds(const ModelSpec& model, const Layout& layout, int64_t micro_batches, int64_t value_bytes,
                          const LinkCost& link);
// The routed rows a rank's experts hold in one MoE layer, for B sequences of T tokens of which
// this rank routes Tr each: all of them (`rank`) and the most one of its experts holds
// (`one_expert`). Without ep a rank's experts take its own rows: at most its N K and, for one
// expert, N (a token visits an expert once). Under ep with a capacity that drops (0 < f < E /
// K) the bound is capacity's: each of its E / ep experts takes at most min(ceil(f K T / E), Tr)
// rows of each of the ep B sequences its ep group routes, E B min(cap, Tr) in all (never over
// the group's ep N K). Dropless under ep (f 0, or f >= E / K): the balanced share, N K and N,
// which a skewed router exceeds; `skewed`: every row the rank can be sent instead, each of the
// group's ep N tokens visiting min(K, E / ep) of its experts, B Tr min(E, ep K) rows (min(E, ep
// K) / K times the share), ep N for one expert.
struct ExpertRows {
  int64_t rank = 0, one_expert = 0;
};
// On a 3D grid whose `plane` ranks share the experts out: a rank's El = E / (plane ep) experts
// take rows of its ep group's tokens (every plane rank routes the same ones; ep 1: its own N):
// the balanced share ceil(N K / plane) dropless (skewed: ep N min(K, El)), at most El ep B
// min(cap, Tr) with a capacity that drops; N, ep N skewed, or ep B min(cap, Tr), for one expert.
ExpertRows expert_rows(int64_t B, int64_t T, int64_t Tr, int64_t ep, int64_t experts, int64_t top_k,
                       double capacity_factor, bool skewed = false, int64_t plane = 1);
// How many times the balanced share a skewed router sends a rank: min(E, ep K) / K.
double skewed_rows_over_balanced(int64_t experts, int64_t top_k, int64_t ep);
// The activations one MoE layer keeps minus those of the dense MLP it replaces, per rank, for
// B sequences of T tokens, under tensor parallelism t (the experts replicated over tp: every
// tp rank routes all its tokens, this rank's chunk of each sequence under sequence
// parallelism, 1/cp of them under context parallelism), dropless and (under ep) balanced: the
// router's input (fp32 always: the router computes in fp32) and probabilities, the choices,
// gates and rows (N K each), the dispatch plan's counts (2E), the experts' outputs combined
// back (N K rows), and for the rows its experts hold (expert_rows; under ep with capacity
// f its bound, else N K) their input, pre-activation and GELU output, in the activation
// precision (bf16: 2 bytes). The dense MLP keeps its input and a t-th of its hidden values
// twice (plan::activation_bytes_per_layer).
int64_t moe_extra_activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel,
                                             int64_t cp, int64_t experts, int64_t top_k, bool bf16, int64_t ep = 1,
                                             double capacity_factor = 0.0, bool skewed = false);
// What that MoE layer keeps, before the dense MLP's tensors are taken off; `plane`: the ranks
// of a 3D grid's plane its experts are shared out over (expert_rows).
int64_t moe_activation_bytes_per_layer(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel, int64_t cp,
                                       int64_t experts, int64_t top_k, bool bf16, int64_t ep, double capacity_factor,
                                       bool skewed, int64_t plane = 1);
// What a mixture of experts' backward holds at once beyond the tensors its block keeps and the
// gradient it is given, per rank (its rows as moe_extra_activation_bytes_per_layer counts them):
// at its experts' backward, the routed rows' fp32 gradient and the gates', and for the rows its
// experts hold (expert_rows) their input gradient and fp32 hidden gradient (4C each, fp32 in
// bf16 too) and under ep their gradient as exchanged; in bf16 also the kept outputs widened,
// the held rows' gradient as the GEMMs read it, and the largest expert's hidden gradient
// converted. Over a grid's `plane`: the held rows' slice of the output gradient, copied out, and
// every row's input gradient gathered back (under ep too: the exchange's buffers are freed by then).
int64_t moe_backward_working_bytes(int64_t B, int64_t T, int64_t C, int64_t t, bool sequence_parallel, int64_t cp,
                                   int64_t ep, int64_t top_k, bool bf16, int64_t experts = 0,
                                   double capacity_factor = 0.0, bool skewed = false, int64_t plane = 1);
// Training FLOPs of one sequence over the dense model's: each MoE block runs K MLPs and a
// router instead of one MLP (the MLP being 2/3 of a block's 72 s h^2 (1 + s / 6h)).
double moe_flops_ratio(const ModelSpec& model);
// A device's compute under `layout` over the dense model's: moe_flops_ratio's, except that
// under tp without sequence parallelism every tp rank runs every token through the MoE blocks'
// router and experts (replicated over tp), t times the share of a tp-split MLP; likewise every
// rank of a 3D grid's plane (row x col) when the plane's ranks do not divide the experts
// (else each runs its E / (row col) experts' rows: the share of the grid's MLP). Where ranks
// share the experts out (ep > 1, or such a plane) the experts' part is moe.rank_imbalance times
// over: each exchange waits for the busiest rank.
double moe_compute_ratio(const ModelSpec& model, const Layout& layout);
// The ranks of a 3D grid's plane the layout's experts are shared out over
// (parallel::tp3d::Layers3D::expert_split); 1 without a grid or experts.
int64_t plane_expert_split(const ModelSpec& model, const Layout& layout);
// Of the layers' tensor-parallel collectives, the share left: an MoE block's MLP moves none
// (half of a block's collectives are its MLP's).
double moe_layer_collective_share(const ModelSpec& model);
// The gradient values sequence parallelism sums over tp for `layers` MoE layers in a step: each
// layer's router (h E), every micro-batch under ZeRO-2/3 (`renewed` sums a step, else 1), and its
// `local_experts` experts, likewise unless expert parallelism keeps them out of ZeRO (once).
int64_t moe_tensor_parallel_gradient_values(int64_t layers, int64_t hidden, int64_t experts, int64_t local_experts,
                                            int64_t renewed, bool expert_parallel);
// Bytes of gradients sequence parallelism sums over tp in a step of `micro_batches` (each tp
// rank routes its own tokens): the router's and the device's E / ep experts' of each MoE layer
// of its stage, fp32, once a step, or every micro-batch under ZeRO-2/3 but for the experts
// under ep (kept out of ZeRO, they accumulate). 0 without sequence parallelism or tp.
int64_t moe_replicated_gradient_bytes(const ModelSpec& model, const Layout& layout, int64_t micro_batches);

}  // namespace loom::plan
