#include "fuzz/mutator.hpp"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <typeinfo>

#include "loom/error.hpp"
#include "loom/tensor/memory_tracker.hpp"

namespace loom::testing {

namespace {

// Values at the edges of the integer types a reader decodes.
const char* const kInterestingNumbers[] = {"0", "-1", "1", "4294967295", "4294967296", "9223372036854775807",
                                           "-9223372036854775808", "18446744073709551615",
                                           "99999999999999999999999", "1e308", "nan", "inf", "-0"};

std::string printable(const std::string& s) {
  std::ostringstream os;
  for (unsigned char c : s.substr(0, 400)) {
    if (c >= 32 && c < 127 && c != '\\') os << c;
    else os << "\\x" << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
  }
  if (s.size() > 400) os << "... (" << s.size() << " bytes)";
  return os.str();
}

}  // namespace

void Mutator::edit(std::string& s) {
  const size_t n = s.size();
  const size_t at = static_cast<size_t>(below(n + 1));
  switch (below(9)) {
    case 0:  // flip one bit
      if (n > 0) s[at % n] = static_cast<char>(s[at % n] ^ (1 << below(8)));
      break;
    case 1:  // truncate
      s.resize(at);
      break;
    case 2: {  // insert random bytes
      std::string bytes(static_cast<size_t>(1 + below(16)), '\0');
      for (char& c : bytes) c = static_cast<char>(below(256));
      s.insert(at, bytes);
      break;
    }
    case 3:  // delete a range
      s.erase(at, static_cast<size_t>(below(32)));
      break;
    case 4:  // a boundary byte
      if (n > 0) s[at % n] = "\x00\x01\x7f\x80\xff\"\\{}[]=.\n"[below(14)];
      break;
    case 5:  // a huge or boundary decimal number
      s.insert(at, kInterestingNumbers[below(sizeof kInterestingNumbers / sizeof *kInterestingNumbers)]);
      break;
    case 6: {  // a huge little-endian 64-bit length (safetensors' header size is one)
      const uint64_t v = below(2) ? ~0ull >> below(64) : 1ull << below(64);
      for (int i = 0; i < 8 && at + static_cast<size_t>(i) < n; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
      break;
    }
    case 7: {  // duplicate a range (repeated keys, nested brackets)
      const size_t len = static_cast<size_t>(below(64));
      s.insert(at, s.substr(at, len));
      break;
    }
    default:  // replace a digit, the likeliest place for a version, length or offset
      for (size_t i = 0; i < n; ++i)
        if (std::isdigit(static_cast<unsigned char>(s[(at + i) % n]))) {
          s[(at + i) % n] = static_cast<char>('0' + below(10));
          break;
        }
      break;
  }
}

std::string Mutator::mutate(std::string input) {
  for (uint64_t k = 1 + below(4); k > 0; --k) edit(input);
  return input;
}

FuzzResult fuzz_for(const std::string& name, const std::vector<std::string>& seeds,
                    const std::function<void(const std::string&)>& target, double seconds) {
  using Clock = std::chrono::steady_clock;
  if (const char* s = std::getenv("LOOM_FUZZ_SECONDS")) seconds = std::atof(s);
  const uint64_t seed = std::getenv("LOOM_FUZZ_SEED") ? std::strtoull(std::getenv("LOOM_FUZZ_SEED"), nullptr, 10) : 1;
  Mutator mutator(seed);
  FuzzResult r;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  auto& memory = MemoryTracker::instance();
  while (r.failure.empty() && (r.inputs < static_cast<int64_t>(seeds.size()) || Clock::now() < end)) {
    const size_t i = static_cast<size_t>(r.inputs);
    const std::string input =
        i < seeds.size() ? seeds[i] : mutator.mutate(seeds[static_cast<size_t>(mutator.below(seeds.size()))]);
    const int64_t base = memory.total_current();
    memory.reset_peaks();
    const auto t0 = Clock::now();
    std::string problem;
    try {
      target(input);
      ++r.accepted;
    } catch (const Error&) {
      ++r.rejected;
    } catch (const std::exception& e) {
      problem = std::string("threw ") + typeid(e).name() + " instead of loom::Error: " + e.what();
    }
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    // Tensors a reader allocates are bounded by the bytes it was given (plus a small model).
    const int64_t allocated = memory.total_peak() - base;
    if (problem.empty() && took > 1.0) problem = "took " + std::to_string(took) + " s";
    if (problem.empty() && allocated > (64 << 20) + 16 * static_cast<int64_t>(input.size()))
      problem = "allocated " + std::to_string(allocated) + " bytes for a " + std::to_string(input.size()) + "-byte input";
    if (!problem.empty())
      r.failure = name + ": input #" + std::to_string(r.inputs) + " (LOOM_FUZZ_SEED=" + std::to_string(seed) + ") " +
                  problem + "\n  input: " + printable(input);
    ++r.inputs;
  }
  return r;
}

void print_summary(const FuzzResult& r, const std::string& name) {
  std::printf("[fuzz] %s: %lld inputs, %lld accepted, %lld rejected with loom::Error\n", name.c_str(),
              static_cast<long long>(r.inputs), static_cast<long long>(r.accepted), static_cast<long long>(r.rejected));
}

}  // namespace loom::testing
