// Where a mixture of experts sends its routed rows: the seam between the MoE layer and
// expert parallelism. Serially every expert is local and dispatch is the identity;
// parallel/expert_parallel supplies the all-to-all version (experts sharded over the `ep`
// ranks). A plan is the splits of one forward; backward runs the same two exchanges with
// the directions swapped (gradients of combine are dispatched, those of dispatch combined).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "loom/tensor/tensor.hpp"

namespace loom::nn {

struct DispatchPlan {
  int64_t ranks = 1, local_experts = 0;   // ep, E / ep
  std::vector<int64_t> counts;            // (E) rows this rank sends to each expert
  std::vector<int64_t> from;              // (ranks, local_experts) rows each rank sends to each local expert
  std::vector<int64_t> send, recv;        // (ranks) rows sent to / received from each rank
  std::vector<int64_t> local_counts;      // (local_experts) rows each local expert takes
  int64_t received() const;               // rows all local experts take
};

// The plan from this rank's counts and what the other ranks send it (from).
DispatchPlan make_plan(std::vector<int64_t> counts, std::vector<int64_t> from, int64_t ranks);

class ExpertDispatcher {
 public:
  virtual ~ExpertDispatcher() = default;
  virtual int64_t ranks() const { return 1; }
  virtual int64_t rank() const { return 0; }
  // Collective over the expert-parallel ranks: the rows each sends to this rank's experts.
  virtual std::vector<int64_t> exchange_counts(const std::vector<int64_t>& counts, int64_t local_experts) const {
    (void)local_experts;
    return counts;
  }
  // rows (R, C) grouped by global expert -> (received, C) this rank's experts' rows,
  // grouped by local expert (within one, by sending rank).
  virtual Tensor dispatch(const Tensor& rows, const DispatchPlan& plan) const;
  // The inverse: local experts' rows back to the ranks and places they came from.
  virtual Tensor combine(const Tensor& rows, const DispatchPlan& plan) const;
  // Seconds spent in exchanges (forward and backward) since the last call; 0 serially.
  double take_exchange_seconds() const;
  // Collective over the ranks sharing the experts out: each value of `most` becomes its
  // maximum over them, each of `total` its sum. Nothing to do where one rank holds them all.
  virtual void max_and_sum_over_ranks(std::vector<float>& most, std::vector<float>& total) const {
    (void)most;
    (void)total;
  }

 protected:
  // Times an exchange from its construction to its end, into take_exchange_seconds().
  class ExchangeClock {
   public:
    explicit ExchangeClock(const ExpertDispatcher& d) : d_(d), start_(std::chrono::steady_clock::now()) {}
    ~ExchangeClock() { d_.exchange_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
    ExchangeClock(const ExchangeClock&) = delete;
    ExchangeClock& operator=(const ExchangeClock&) = delete;

   private:
    const ExpertDispatcher& d_;
    std::chrono::steady_clock::time_point start_;
  };

 private:
  mutable double exchange_seconds_ = 0.0;
};

// Every expert local: dispatch and combine return their input.
const ExpertDispatcher& local_experts();

}  // namespace loom::nn
