#include "loom/comm/comm_thread.hpp"

#include <chrono>
#include <future>

namespace loom::comm {

CommThread::CommThread() {
  // The thread's priority is set before the constructor returns, so comm_priority_report()
  // reads it as soon as any group exists.
  std::promise<void> prioritized;
  thread_ = std::thread([this, &prioritized] {
    prioritize_this_communication_thread(nice_);
    prioritized.set_value();
    loop();
  });
  prioritized.get_future().wait();
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Work CommThread::submit(std::string description, std::function<void()> op) {
  auto state = std::make_shared<Work::State>();
  state->description = std::move(description);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(state, std::move(op));
  }
  cv_.notify_one();
  return Work(state);
}

void CommThread::loop() {
  for (;;) {
    std::pair<std::shared_ptr<Work::State>, std::function<void()>> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    const auto start = std::chrono::steady_clock::now();
    try {
      item.second();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(item.first->mutex);
      item.first->busy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    item.first->finish(error);
  }
}

}  // namespace loom::comm
