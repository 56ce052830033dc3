// One communication thread per process group: collectives are queued and run in issue
// order (the order MPI requires on every rank) while the caller keeps computing, which is
// what lets a gradient bucket's all-reduce overlap the next layer's backward on a CPU.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "loom/comm/comm_priority.hpp"
#include "loom/comm/work.hpp"

namespace loom::comm {

class CommThread {
 public:
  CommThread();
  ~CommThread();  // finishes queued operations, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  Work submit(std::string description, std::function<void()> op);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Work::State>, std::function<void()>>> queue_;
  bool stopping_ = false;
  // Read before the thread starts: a bad LOOM_COMM_NICE is an error on the caller's thread.
  int nice_ = comm_nice();
  std::thread thread_;
};

}  // namespace loom::comm
