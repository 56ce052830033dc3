// Work: the handle an asynchronous collective or transfer returns. wait() blocks until the
// operation has finished on this rank (rethrowing its error); is_done() polls. A watched
// wait (every collective's and every transfer's under MpiRuntime) is published to the
// watchdog once it lasts, and ends the job with the watchdog's report past its timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <mpi.h>

#include "loom/comm/watchdog.hpp"

namespace loom::comm {

class Work {
 public:
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
    std::string description;  // "all_reduce(ring, 1048576 floats) #12 on dp"
    // Point-to-point operations complete through their MPI request instead of the thread.
    MPI_Request request = MPI_REQUEST_NULL;
    bool uses_request = false;
    double busy_seconds = 0.0;  // how long the communication thread spent on it
    // The watchdog: what a wait is for; when wait() has waited timeout_s (> 0) in vain, the
    // watchdog reports it and ends the job.
    std::optional<WaitSite> site;
    double timeout_s = 0.0;
    // Runs once, on the thread whose wait() first sees the operation done (a bf16 receive
    // widens its values into the caller's fp32 buffer); holds what must outlive the operation.
    std::function<void()> then;
    // Where wait() adds the nanoseconds from a caller's wait to the operation's end (their
    // group's exposed time), or null.
    std::shared_ptr<std::atomic<int64_t>> waited_ns;
    // When it ended: finish() on the communication thread; for a point-to-point request, the
    // first poll that saw it done (within a backoff pause of its end).
    std::chrono::steady_clock::time_point finished_at{};
    void finish(std::exception_ptr e);
  };

  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // A handle that is already complete (an operation that needed no communication).
  static Work completed();
  // A handle for a posted non-blocking MPI operation.
  static Work from_request(MPI_Request request, std::string description);

  // Arms the watchdog for this handle (see State::site); timeout_s 0: published, never ended.
  void watch(WaitSite site, double timeout_s);
  // fn runs once after the operation, when wait() returns (State::then); it also keeps alive
  // whatever it captures (a packed send buffer) until then.
  Work& then(std::function<void()> fn);
  // Adds to *nanoseconds, for every later wait(), the time from its start to the operation's
  // end: the communication the caller's compute did not cover (the group's exposed time).
  // What follows, until the woken caller runs again, is its turn on a core that other ranks'
  // compute holds (more ranks than cores), not communication, and is left out; on cores of
  // their own the two differ by microseconds.
  void count_waits_into(std::shared_ptr<std::atomic<int64_t>> nanoseconds);
  void wait() const;
  bool is_done() const;
  const std::string& description() const;
  // After wait(): the seconds from t0, when a caller began waiting, to the operation's end (0
  // when it ended before): the part of it the caller's compute did not cover.
  double seconds_exposed_after(std::chrono::steady_clock::time_point t0) const;
  // Seconds the operation itself took on the communication thread (0 until done).
  double busy_seconds() const;

 private:
  void wait_done() const;
  std::shared_ptr<State> state_;
};

}  // namespace loom::comm
