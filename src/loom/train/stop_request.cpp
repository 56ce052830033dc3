#include "loom/train/stop_request.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>

namespace loom::train {

namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1};

// Set by the handler (an async-signal-safe store), cleared when a StopRequest is made.
volatile std::sig_atomic_t received_signal = 0;
// Rank 0 (or a single process) says what it received at once; the others keep quiet, the
// agreement after the step tells rank 0 of theirs.
volatile std::sig_atomic_t says_received = 1;

struct sigaction previous[sizeof kStopSignals / sizeof kStopSignals[0]];

void write_out(const char* text) {
  // write(2) is async-signal-safe; printf is not. A short write is not worth a retry here.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, text, std::strlen(text));
}

// The stop signals' names, or nullptr; a literal, so the handler may write it.
const char* stop_signal_name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : nullptr;
}

void on_stop_signal(int signal) {
  if (received_signal != 0) {
    // The second: what the signal would have done without Loom. It stays blocked until this
    // handler returns, then ends the process.
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  received_signal = signal;
  if (says_received == 0) return;
  write_out("\nloom: ");
  write_out(stop_signal_name(signal));
  // "every rank": under mpirun a rank's death also arrives here as SIGTERM, and that step never ends.
  write_out(" received: stopping after this step and saving a checkpoint once every rank has finished it"
            " (send it again to stop at once)\n");
}

}  // namespace

std::string signal_name(int signal) {
  const char* name = stop_signal_name(signal);
  return name != nullptr ? name : "signal " + std::to_string(signal);
}

StopRequest::StopRequest(comm::ProcessGroup& world) : group_(world.split(0, world.rank(), "stop")) {
  received_signal = 0;
  says_received = world.rank() == 0 ? 1 : 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or a wait the signal interrupts goes on; the step ends as it would.
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &action, &previous[i]);
}

StopRequest::~StopRequest() {
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &previous[i], nullptr);
}

int StopRequest::agreed_signal() {
  bool ignored = false;
  return agreed_signal(true, ignored);
}

int StopRequest::agreed_signal(bool here, bool& everywhere) {
  // One maximum for both: the highest signal, and whether any rank has not got there yet.
  float values[2] = {static_cast<float>(received_signal), here ? 0.0f : 1.0f};
  group_->all_reduce(values, 2, comm::ReduceOp::Max);
  everywhere = values[1] == 0.0f;
  return static_cast<int>(values[0]);
}

}  // namespace loom::train
