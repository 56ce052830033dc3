// loom::Error: the one exception library code throws. Its message names the values
// involved so a user can act on it; only main() turns it into a message and an exit code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Builds a message from streamable parts: fail("n_embd (", c, ") not divisible by n_head (", nh, ")").
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

// Checks a condition that bad input can violate (never for internal invariants only).
template <class... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

}  // namespace loom
