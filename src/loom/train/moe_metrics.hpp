// What the progress line and metrics.jsonl say of a mixture of experts each step: how the
// routed tokens spread over the experts (summed over every MoE layer and every rank), the
// share dropped by capacity, the load-balancing loss, and the time in token exchanges.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/nn/module.hpp"

namespace loom::train {

struct MoeStepStats {
  bool present = false;
  std::vector<double> load;        // (E) share of the kept assignments per expert index (sums to 1)
  double load_imbalance = 0.0;     // max / mean of the loads (1: balanced)
  double dropped_fraction = 0.0;   // assignments over capacity / all assignments
  double aux_loss = 0.0;           // the load-balancing loss per MoE layer and micro-batch, before its coefficient
  double exchange_seconds = 0.0;   // this rank's time in all-to-all token exchanges (0 without ep)
  // With the experts shared out over ranks (ep, a grid's plane): the busiest rank's routed
  // rows over the mean rank's, summed over every MoE layer and micro-batch, in rank 0's
  // group (nn::busiest_rank_over_mean; `loom plan --moe-rank-imbalance`); 0 otherwise.
  double rank_imbalance = 0.0;
};

// Collective over `groups` and the ranks sharing the experts out: the statistics of the
// model's MoE layers since the last call (each rank's, summed over the groups: the
// data-parallel and pipeline ranks, and the ranks holding parts of the same sequences under
// context or sequence parallelism), reset. Every rank sends the model's `experts` loads, also
// one whose pipeline stage holds no MoE block.
MoeStepStats gather_moe_stats(nn::Module& model, int64_t experts, const std::vector<comm::ProcessGroup*>& groups);

}  // namespace loom::train
