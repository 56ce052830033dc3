#include "loom/comm/startup_watch.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace loom::comm {

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

void stop_for_a_test(const std::string& step) {
  // Read once: some of the steps sit on a hot path (every ring hop, every all-to-all).
  static const char* const at = std::getenv("LOOM_TEST_STOP_AT");
  if (at != nullptr && std::string(at) == step + ":" + std::to_string(launcher_rank())) std::raise(SIGSTOP);
}

StartupWatch::StartupWatch(double timeout_s, std::string step) {
  if (timeout_s <= 0) return;
  thread_ = std::thread([this, timeout_s, step = std::move(step)] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return finished_; })) return;
    std::fprintf(stderr,
                 "loom: rank %d: start-up did not complete within %g s: waiting in %s, which every rank must reach. "
                 "A rank that stopped, crashed or did not start holds the job up (the ranks missing from these lines); "
                 "ending the job (comm_timeout)\n",
                 launcher_rank(), timeout_s, step.c_str());
    std::fflush(stderr);
    // The main thread is blocked inside MPI: no destructor may run under it. A rank that
    // exits with an error makes the launcher end the others.
    std::_Exit(1);
  });
}

StartupWatch::~StartupWatch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  done_.notify_all();
  thread_.join();
}

}  // namespace loom::comm
