// Sequences split over the ranks of a group, on top of how an inner layer builder splits them:
// context parallelism's cp ranks, sequence parallelism's tp ranks, or cp over tp. A mixture of
// experts sums its per-sequence routing statistics through it and gathers its choices for the
// capacity's order (nn/sequence_parts.hpp).
#pragma once

#include <functional>

#include "loom/comm/process_group.hpp"
#include "loom/nn/sequence_parts.hpp"

namespace loom::parallel {

class GroupSequenceParts : public nn::SequenceParts {
 public:
  // Where this rank's rows of a sequence of `length` tokens (as the group sees it: the inner
  // builder's parts together) stand in it.
  using RankPositions = std::function<std::vector<int64_t>(int64_t length)>;

  // gradients_summed: the group adds up replicated parameters' gradients (sequence
  // parallelism) rather than averaging them (context parallelism). group and inner outlive this.
  GroupSequenceParts(comm::ProcessGroup& group, bool gradients_summed, RankPositions rank_positions,
                     const nn::SequenceParts& inner = nn::whole_sequences())
      : group_(group), gradients_summed_(gradients_summed), rank_positions_(std::move(rank_positions)), inner_(inner) {}

  int64_t parts() const override { return group_.size() * inner_.parts(); }
  int64_t summed_parts() const override { return (gradients_summed_ ? group_.size() : 1) * inner_.summed_parts(); }
  void sum(std::vector<float>& v) const override;
  // The inner parts' positions, placed where this rank's rows stand in the group's sequence.
  std::vector<int64_t> positions(int64_t rows) const override;
  std::vector<float> gather(const std::vector<float>& v) const override;

 private:
  comm::ProcessGroup& group_;
  bool gradients_summed_;
  RankPositions rank_positions_;
  const nn::SequenceParts& inner_;
};

// Sequence parallelism's layout: rank r of t holds tokens [r length/t, (r+1) length/t).
GroupSequenceParts::RankPositions consecutive_chunk_of(const comm::ProcessGroup& group);

}  // namespace loom::parallel
