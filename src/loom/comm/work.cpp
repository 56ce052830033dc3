#include "loom/comm/work.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include "loom/comm/mpi_collectives.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::comm {

void Work::State::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    error = e;
    done = true;
    finished_at = std::chrono::steady_clock::now();
  }
  done_cv.notify_all();
}

Work Work::completed() {
  auto s = std::make_shared<State>();
  s->done = true;
  return Work(s);
}

Work Work::from_request(MPI_Request request, std::string description) {
  auto s = std::make_shared<State>();
  s->request = request;
  s->uses_request = true;
  s->description = std::move(description);
  return Work(s);
}

void Work::count_waits_into(std::shared_ptr<std::atomic<int64_t>> nanoseconds) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->waited_ns = std::move(nanoseconds);
}

void Work::watch(WaitSite site, double timeout_s) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->site = std::move(site);
  state_->timeout_s = timeout_s;
}

namespace {

// The part of an operation's time after a caller began waiting at t0 (0 when it ended before).
std::chrono::steady_clock::duration exposed_after(const Work::State& s, std::chrono::steady_clock::time_point t0) {
  return std::max(s.finished_at - t0, std::chrono::steady_clock::duration::zero());
}

// A wait this rank has published to the watchdog, withdrawn when it ends.
class PublishedWait {
 public:
  ~PublishedWait() {
    if (watchdog_ != nullptr) watchdog_->done_waiting();
  }
  // Called while waiting: publishes the wait once it has lasted, ends the job past the timeout.
  void waited(Watchdog* watchdog, const Work::State& s, double seconds) {
    if (watchdog == nullptr) return;
    if (watchdog_ == nullptr && seconds >= Watchdog::kPublishAfterSeconds) {
      watchdog->waiting(*s.site, s.description);
      watchdog_ = watchdog;
    }
    if (s.timeout_s > 0 && seconds >= s.timeout_s) watchdog->report_stuck(*s.site, s.description, s.timeout_s);
  }

 private:
  Watchdog* watchdog_ = nullptr;
};

}  // namespace

Work& Work::then(std::function<void()> fn) {
  if (!state_) state_ = completed().state_;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->then = std::move(fn);
  return *this;
}

void Work::wait() const {
  if (!state_) return;
  wait_done();
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    fn.swap(state_->then);
  }
  if (fn) fn();
}

void Work::wait_done() const {
  // A trace shows where the caller waited for a collective: communication not hidden.
  std::optional<trace::Span> span;
  if (trace::enabled() && !state_->uses_request && !is_done()) span.emplace("wait", state_->description);
  std::unique_lock<std::mutex> lock(state_->mutex);
  Watchdog* watchdog = state_->site ? Watchdog::instance() : nullptr;
  PublishedWait published;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (state_->uses_request) {
    // Polled rather than MPI_Wait, so a transfer whose peer never comes is watched too
    // (Open MPI's MPI_Wait polls the same way underneath).
    int flag = state_->done ? 1 : 0;
    PollBackoff backoff;  // the core goes to compute while the peer is late
    while (flag == 0) {
      MPI_Test(&state_->request, &flag, MPI_STATUS_IGNORE);
      if (flag == 0) {
        published.waited(watchdog, *state_, seconds());
        backoff.pause();
      }
    }
    if (!state_->done) state_->finished_at = std::chrono::steady_clock::now();  // first seen done now
    state_->done = true;
    return;
  }
  while (watchdog != nullptr && !state_->done) {
    // Wake at the publishing time, then at the timeout (or every second when there is none).
    const double now = seconds();
    double next = now < Watchdog::kPublishAfterSeconds ? Watchdog::kPublishAfterSeconds : now + 1.0;
    if (state_->timeout_s > 0) next = std::min(next, std::max(state_->timeout_s, now));
    if (state_->done_cv.wait_for(lock, std::chrono::duration<double>(next - now), [&] { return state_->done; })) break;
    lock.unlock();
    published.waited(watchdog, *state_, seconds());
    lock.lock();
  }
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->waited_ns)
    *state_->waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(exposed_after(*state_, start)).count();
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::is_done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->uses_request && !state_->done) {
    int flag = 0;
    MPI_Test(&state_->request, &flag, MPI_STATUS_IGNORE);
    state_->done = flag != 0;
    if (state_->done) state_->finished_at = std::chrono::steady_clock::now();
  }
  return state_->done;
}

double Work::busy_seconds() const {
  if (!state_) return 0.0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->busy_seconds;
}

double Work::seconds_exposed_after(std::chrono::steady_clock::time_point t0) const {
  if (!state_) return 0.0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return std::chrono::duration<double>(exposed_after(*state_, t0)).count();
}

const std::string& Work::description() const {
  static const std::string none;
  return state_ ? state_->description : none;
}

}  // namespace loom::comm
