#include "loom/comm/comm_priority.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "loom/comm/mpi_collectives.hpp"
#include "loom/error.hpp"

namespace loom::comm {

namespace {

// What the first communication thread got: the nice value, or kNotPermitted.
constexpr int kNoneStarted = 100, kNotPermitted = 101;
std::atomic<int> g_outcome{kNoneStarted};

}  // namespace

int comm_nice_from_environment() {
  const char* e = std::getenv("LOOM_COMM_NICE");
  if (e == nullptr) return -20;
  char* end = nullptr;
  errno = 0;
  const long nice = std::strtol(e, &end, 10);
  check(end != e && *end == '\0' && errno == 0 && nice >= -20 && nice <= 19,
        "LOOM_COMM_NICE must be an integer from -20 to 19 (0 leaves communication threads at the default), got '", e,
        "'");
  return static_cast<int>(nice);
}

int comm_nice() {
  static const int nice = comm_nice_from_environment();
  return nice;
}

void prioritize_this_communication_thread(int nice) {
  try {
    if (comm_wait() == CommWait::Spin) nice = 0;  // a spinning thread would keep the core it shares with compute
  } catch (const Error&) {
    return;  // a bad LOOM_COMM_WAIT: the first collective reports it
  }
  int outcome = 0;
  if (nice != 0) {
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    outcome = setpriority(PRIO_PROCESS, tid, nice) == 0 ? nice : kNotPermitted;
  }
  int expected = kNoneStarted;
  g_outcome.compare_exchange_strong(expected, outcome);
}

std::string comm_priority_report() {
  const int outcome = g_outcome.load();
  if (outcome == kNoneStarted) return "";
  if (outcome == kNotPermitted)
    return "communication threads left at the default priority (lowering nice to " + std::to_string(comm_nice()) +
           " needs CAP_SYS_NICE): on shared cores they run at their turn, and overlap hides less";
  if (outcome == 0)
    return comm_wait() == CommWait::Spin ? "communication threads at the default priority (LOOM_COMM_WAIT=spin)"
                                         : "communication threads at the default priority (LOOM_COMM_NICE=0)";
  return "communication threads at nice " + std::to_string(outcome) + " (LOOM_COMM_NICE)";
}

}  // namespace loom::comm
