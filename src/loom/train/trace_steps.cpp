#include "loom/train/trace_steps.hpp"

#include <algorithm>
#include <string>

#include "loom/error.hpp"

namespace loom::train {

namespace {
constexpr int64_t kDefaultFirst = 2, kDefaultLast = 4;

int64_t parse_step(const std::string& text, const std::string& whole) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == text.size() && !text.empty() && v >= 1, "trace_steps must be FIRST:LAST steps (1-based), e.g. \"5:8\"; got '",
        whole, "'");
  return v;
}
}  // namespace

TraceSteps parse_trace_steps(const std::string& text, int64_t steps) {
  TraceSteps s;
  if (text.empty()) {
    s.first = std::min(kDefaultFirst, steps);
    s.last = std::min(kDefaultLast, steps);
    return s;
  }
  const size_t colon = text.find(':');
  s.first = parse_step(text.substr(0, colon), text);
  s.last = colon == std::string::npos ? s.first : parse_step(text.substr(colon + 1), text);
  check(s.first <= s.last, "trace_steps '", text, "': the first step comes after the last");
  check(s.first <= steps, "trace_steps '", text, "' starts after the run's last step (", steps, ")");
  s.last = std::min(s.last, steps);
  return s;
}

}  // namespace loom::train
