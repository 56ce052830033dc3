#include "loom/data/rmat_quadrants.hpp"

#include <limits>
#include <random>

#include "loom/error.hpp"

namespace loom::data {

namespace {

// An engine that returns one given word: what the distribution makes of that word.
struct OneWord {
  using result_type = uint64_t;
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return std::numeric_limits<uint64_t>::max(); }
  uint64_t word;
  uint64_t operator()() const { return word; }
};

double unit_of(uint64_t w) {
  OneWord engine{w};
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

}  // namespace

uint64_t first_word_drawing_at_least(double t) {
  check(t <= unit_of(std::numeric_limits<uint64_t>::max()), "no engine word draws ", t, " or more");
  uint64_t lo = 0, hi = std::numeric_limits<uint64_t>::max();  // unit_of(hi) >= t
  while (lo < hi) {  // unit_of never decreases: bisect for the first word at or past t
    const uint64_t mid = lo + (hi - lo) / 2;
    if (unit_of(mid) >= t)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

RmatQuadrants::RmatQuadrants(double a, double b, double c) {
  check(a >= 0 && b >= 0 && c >= 0 && a + b + c < 1, "R-MAT needs a, b, c >= 0 with a + b + c < 1, got ", a, ", ",
        b, ", ", c);
  // The sums as the double comparisons they replace form them: (a + b) + c.
  a_ = first_word_drawing_at_least(a);
  ab_ = first_word_drawing_at_least(a + b);
  abc_ = first_word_drawing_at_least(a + b + c);
}

}  // namespace loom::data
