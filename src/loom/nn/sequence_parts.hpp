// Where a sequence lives: whole on this rank (serially and under every layout but context
// parallelism), or split over the cp ranks. A mixture of experts' load-balancing loss is a
// statistic of the whole sequence (each expert's share of its choices and mean probability),
// so under cp each part's sums are added over the parts (parallel/context_parallel supplies
// that); the layer is otherwise the same.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::nn {

class SequenceParts {
 public:
  virtual ~SequenceParts() = default;
  // Ranks a sequence is split over (each holding tokens / parts of it).
  virtual int64_t parts() const { return 1; }
  // Collective over the parts: v summed elementwise (the same on every part afterwards).
  virtual void sum(std::vector<float>& v) const { (void)v; }
};

// Every sequence whole on this rank.
const SequenceParts& whole_sequences();

}  // namespace loom::nn
