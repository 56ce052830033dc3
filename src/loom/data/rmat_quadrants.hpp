// R-MAT's quadrant per bit of an edge, chosen in integers. Each bit draws one uniform double
// u = uniform_real_distribution<double>(0, 1) from one 64-bit engine word w and compares it
// with a, a + b and a + b + c. u(w) never decreases as w grows (w rounded to a double, scaled
// by 2^-64, kept below 1), so u(w) >= t holds for exactly the words from the first one at
// which it holds: comparing w with that word, found once by asking the distribution itself,
// picks the same quadrant as the double for every draw, without converting one and without a
// branch (the conversions and their unpredictable branches were most of the draws' cost, and
// the draws a third of a one-rank scale-17 run's CPU).
#pragma once

#include <cstdint>

namespace loom::data {

// The first engine word w whose u(w) >= t (0 for t <= 0); t must be at most u(2^64 - 1).
uint64_t first_word_drawing_at_least(double t);

class RmatQuadrants {
 public:
  // a, b, c >= 0 with a + b + c < 1 (d > 0), else loom::Error.
  RmatQuadrants(double a, double b, double c);
  // 1 when word w's quadrant is in the lower half (u >= a + b: c or d), else 0.
  uint64_t down(uint64_t w) const { return w >= ab_ ? 1 : 0; }
  // 1 when it is in the right half (b: a <= u < a + b, or d: u >= a + b + c), else 0. The
  // thresholds never decrease (a <= a + b <= a + b + c), so the three tests' parity is that.
  uint64_t right(uint64_t w) const { return (w >= a_ ? 1u : 0u) ^ (w >= ab_ ? 1u : 0u) ^ (w >= abc_ ? 1u : 0u); }

 private:
  uint64_t a_, ab_, abc_;  // the first words drawing at least a, a + b, a + b + c
};

}  // namespace loom::data
