// Sequences split over the ranks of a group, on top of how an inner layer builder splits them:
// context parallelism's cp ranks, sequence parallelism's tp ranks, or cp over tp. A mixture of
// experts sums its per-sequence routing statistics through it (nn/sequence_parts.hpp).
#pragma once

#include "loom/comm/process_group.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/nn/sequence_parts.hpp"

namespace loom::parallel {

class GroupSequenceParts : public nn::SequenceParts {
 public:
  // gradients_summed: the group adds up replicated parameters' gradients (sequence
  // parallelism) rather than averaging them (context parallelism), and its ranks hold
  // consecutive chunks of each sequence in rank order (sequence parallelism; context
  // parallelism's load-balanced chunks interleave). group and inner outlive this.
  GroupSequenceParts(comm::ProcessGroup& group, bool gradients_summed,
                     const nn::SequenceParts& inner = nn::whole_sequences())
      : group_(group), gradients_summed_(gradients_summed), inner_(inner) {}
  int64_t parts() const override { return group_.size() * inner_.parts(); }
  int64_t summed_parts() const override { return (gradients_summed_ ? group_.size() : 1) * inner_.summed_parts(); }
  void sum(std::vector<float>& v) const override {
    inner_.sum(v);
    if (group_.size() > 1) group_.all_reduce(v.data(), static_cast<int64_t>(v.size()), comm::ReduceOp::Sum);
  }
  int64_t chunk_index() const override {
    return gradients_summed_ && inner_.parts() == 1 ? group_.rank() : -1;
  }
  std::vector<float> gather(const std::vector<float>& v) const override {
    std::vector<float> all(v.size() * static_cast<size_t>(group_.size()));
    comm::stop_for_a_test("moe-capacity-gather");
    group_.all_gather_async(v.data(), all.data(), static_cast<int64_t>(v.size())).wait();
    return all;
  }

 private:
  comm::ProcessGroup& group_;
  bool gradients_summed_;
  const nn::SequenceParts& inner_;
};

}  // namespace loom::parallel
