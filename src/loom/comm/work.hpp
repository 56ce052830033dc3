// Work: the handle an asynchronous collective returns. wait() blocks until the operation
// has finished on this rank (rethrowing its error); is_done() polls.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <mpi.h>

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
    int64_t sequence = 0;  // the collective's number within its group
    double busy_seconds = 0.0;  // how long the communication thread spent on it
    // The watchdog: when wait() has waited timeout_s (> 0) in vain it calls on_timeout,
    // which reports the stuck collective and ends the job (it does not return).
    double timeout_s = 0.0;
    std::function<void(const State&)> on_timeout;
    void finish(std::exception_ptr e);
  };

  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // A handle that is already complete (an operation that needed no communication).
  static Work completed();
  // A handle for a posted non-blocking MPI operation.
  static Work from_request(MPI_Request request, std::string description);

  // Arms the watchdog for this handle (see State::on_timeout).
  void watch(int64_t sequence, double timeout_s, std::function<void(const State&)> on_timeout);
  void wait() const;
  bool is_done() const;
  const std::string& description() const;
  // Seconds the operation itself took on the communication thread (0 until done).
  double busy_seconds() const;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace loom::comm
