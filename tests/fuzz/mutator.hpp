// A seeded random mutator for fuzzing parsers without libFuzzer: each input is a seed input
// with a few random edits of the kinds that break readers (bit flips, truncation, inserted
// and deleted bytes, boundary bytes, huge decimal or binary lengths). fuzz_for() runs a
// target over such inputs for a time budget and fails on anything but success or a
// loom::Error: another exception, an input slower than a second, or one that made Loom
// allocate far more than the input's size. The seed and failing input are printed, so a
// failure reproduces exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace loom::testing {

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  // 1 to 4 random edits of input.
  std::string mutate(std::string input);
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  void edit(std::string& s);
  std::mt19937_64 rng_;
};

struct FuzzResult {
  int64_t inputs = 0;
  int64_t accepted = 0;  // parsed without error
  int64_t rejected = 0;  // a loom::Error
  std::string failure;   // "" when every input behaved
};

// Runs target on mutations of the seeds (and on the seeds themselves first) for `seconds`
// (LOOM_FUZZ_SECONDS overrides it; LOOM_FUZZ_SEED picks another random sequence).
FuzzResult fuzz_for(const std::string& name, const std::vector<std::string>& seeds,
                    const std::function<void(const std::string&)>& target, double seconds);
// "[fuzz] <name>: N inputs, A accepted, R rejected with loom::Error" on stdout.
void print_summary(const FuzzResult& r, const std::string& name);

}  // namespace loom::testing
