// Where a sequence lives: whole on this rank (serially and under every layout but context and
// sequence parallelism), or split over ranks: the cp ranks, sequence parallelism's tp ranks,
// or both. A mixture of experts' load-balancing loss is a statistic of the whole sequence
// (each expert's share of its choices and mean probability), so each part's sums are added
// over the parts (the parallel layers supply that); the layer is otherwise the same.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::nn {

class SequenceParts {
 public:
  virtual ~SequenceParts() = default;
  // Ranks a sequence is split over (each holding tokens / parts of it).
  virtual int64_t parts() const { return 1; }
  // Of those, how many add up (rather than average) a replicated parameter's gradients: under
  // sequence parallelism each tp rank's gradient is its tokens' share of the whole loss's and
  // the shares are summed over tp; under context parallelism each cp rank's loss is its part's
  // own mean and the gradients are averaged over cp. A part's gradient of a whole-sequence
  // statistic is scaled to match (routing.hpp).
  virtual int64_t summed_parts() const { return 1; }
  // Collective over the parts: v summed elementwise (the same on every part afterwards).
  virtual void sum(std::vector<float>& v) const { (void)v; }
  // Where this part's `rows` rows of a sequence stand in the whole sequence (of rows x parts()
  // tokens): sequence parallelism's tp ranks hold consecutive chunks in rank order, context
  // parallelism's cp ranks two chunks each (zig-zag or contiguous), cp over tp a tp chunk of
  // the cp rank's rows.
  virtual std::vector<int64_t> positions(int64_t rows) const;
  // Collective over the parts: every part's v (the same size on each), one after another in
  // an order that is the same on every part.
  virtual std::vector<float> gather(const std::vector<float>& v) const { return v; }
};

// Every sequence whole on this rank.
const SequenceParts& whole_sequences();

}  // namespace loom::nn
