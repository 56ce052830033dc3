// loom::AgreedError: the same error raised by every rank of a group at the same collective (a
// verdict the ranks agreed on, such as a refused resume). When the group is the whole job no
// rank is left waiting for another, so the job can end without aborting, each rank unwinding
// first (apps' run_on_world).
#pragma once

#include <sstream>
#include <string>

#include "loom/error.hpp"

namespace loom {

class AgreedError : public Error {
 public:
  AgreedError(const std::string& message, int ranks) : Error(message), ranks_(ranks) {}
  int ranks() const { return ranks_; }  // the group's size

 private:
  int ranks_;
};

// check() for a condition every rank of a group of `ranks` ranks evaluates alike, on the same
// gathered values.
template <class... Parts>
void check_agreed(bool condition, int ranks, const Parts&... parts) {
  if (condition) return;
  std::ostringstream os;
  (os << ... << parts);
  throw AgreedError(os.str(), ranks);
}

}  // namespace loom
