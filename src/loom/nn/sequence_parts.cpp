#include "loom/nn/sequence_parts.hpp"

#include <cstddef>
#include <numeric>

namespace loom::nn {

std::vector<int64_t> SequenceParts::positions(int64_t rows) const {
  std::vector<int64_t> at(static_cast<size_t>(rows));
  std::iota(at.begin(), at.end(), int64_t{0});
  return at;
}

const SequenceParts& whole_sequences() {
  static const SequenceParts whole;
  return whole;
}

}  // namespace loom::nn
