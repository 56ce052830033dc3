#include "loom/comm/work.hpp"

#include <chrono>
#include <optional>

#include "loom/trace/recorder.hpp"

namespace loom::comm {

void Work::State::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    error = e;
    done = true;
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

void Work::watch(int64_t sequence, double timeout_s, std::function<void(const State&)> on_timeout) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->sequence = sequence;
  state_->timeout_s = timeout_s;
  state_->on_timeout = std::move(on_timeout);
}

void Work::wait() const {
  if (!state_) return;
  // A trace shows where the caller waited for a collective: communication not hidden.
  std::optional<trace::Span> span;
  if (trace::enabled() && !state_->uses_request && !is_done()) span.emplace("wait", state_->description);
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (state_->uses_request) {
    if (!state_->done) MPI_Wait(&state_->request, MPI_STATUS_IGNORE);
    state_->done = true;
    return;
  }
  if (state_->timeout_s > 0 && state_->on_timeout) {
    const auto limit = std::chrono::duration<double>(state_->timeout_s);
    if (!state_->done_cv.wait_for(lock, limit, [&] { return state_->done; })) {
      lock.unlock();
      state_->on_timeout(*state_);
      lock.lock();
    }
  }
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::is_done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->uses_request && !state_->done) {
    int flag = 0;
    MPI_Test(&state_->request, &flag, MPI_STATUS_IGNORE);
    state_->done = flag != 0;
  }
  return state_->done;
}

double Work::busy_seconds() const {
  if (!state_) return 0.0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->busy_seconds;
}

const std::string& Work::description() const {
  static const std::string none;
  return state_ ? state_->description : none;
}

}  // namespace loom::comm
