// Ring attention: the causal attention of this rank's tokens over the whole sequence when the
// sequence is split over the cp ranks (load_balance.hpp). Forward: the rank folds the K/V
// of the chunks it holds into an online softmax, then passes K/V to the next rank of the
// ring while it computes, cp − 1 times, so it sees every rank's keys; a (query chunk, key
// chunk) block that the causal mask empties is skipped. Backward: K/V circulate again while
// the partial dK/dV of each block travel with them, and a last hop returns them to their
// owner. Every transfer is a watched point-to-point operation of the cp group.
#pragma once

#include <chrono>
#include <memory>

#include "loom/comm/process_group.hpp"
#include "loom/nn/attention_core.hpp"
#include "loom/parallel/context_parallel/head_groups.hpp"
#include "loom/parallel/context_parallel/load_balance.hpp"

namespace loom::parallel::cp {

// Where a ring's time went, summed over its layers since the last reset.
struct RingStats {
  double compute_seconds = 0.0;  // block attention
  double wait_seconds = 0.0;     // waiting for K/V or dK/dV that had not arrived: the exposed part
  int64_t bytes_sent = 0;
  // On the cp group's emulated link: the seconds its hops took there, the part of those that
  // fell after the rank began waiting for the hop (not hidden by compute), and when the link
  // is free again (the hops to the next rank share one link, one after the other).
  double link_seconds = 0.0;
  double link_exposed_seconds = 0.0;
  std::chrono::steady_clock::time_point link_free{};
};

class RingAttention : public nn::AttentionCore {
 public:
  // C features in NH heads; stats (optional) is shared by the layers of one model.
  RingAttention(int64_t C, int64_t NH, comm::ProcessGroup& cp, Split split, std::shared_ptr<RingStats> stats = nullptr);

 protected:
  Tensor forward_impl(const Tensor& qkv, nn::Context& ctx) override;  // (B, T/cp, 3C) -> (B, T/cp, C)
  Tensor backward_impl(const Tensor& dheads, nn::Context& ctx) override;

 private:
  int64_t C_, NH_;
  comm::ProcessGroup& cp_;
  Split split_;
  std::shared_ptr<RingStats> stats_;
};

}  // namespace loom::parallel::cp
