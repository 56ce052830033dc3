#include "loom/trace/recorder.hpp"

#include <chrono>
#include <mutex>

#include "loom/tensor/memory_tracker.hpp"

namespace loom::trace {

namespace detail {
std::atomic<bool> enabled{false};
}

namespace {

using Clock = std::chrono::steady_clock;

struct Recorder {
  std::mutex mutex;
  std::vector<Event> events;
  std::vector<std::string> rows{"compute"};
  Clock::time_point origin = Clock::now();
  uint64_t next_id = 1;
  int64_t last_memory_total = -1;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

thread_local int t_row = 0;
thread_local int64_t t_micro_batch = -1;

void record(Event e) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.push_back(std::move(e));
}

}  // namespace

void start() {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.events.clear();
    r.origin = Clock::now();
    r.last_memory_total = -1;
  }
  detail::enabled.store(true);
  sample_memory();
}

void stop() { detail::enabled.store(false); }

std::vector<Event> take_events() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return std::move(r.events);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - recorder().origin).count();
}

int row(const std::string& name, bool unique) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::string wanted = name;
  for (int n = 2;; ++n) {
    int found = -1;
    for (size_t i = 0; i < r.rows.size(); ++i)
      if (r.rows[i] == wanted) found = static_cast<int>(i);
    if (found < 0) break;
    if (!unique) return found;
    wanted = name + " #" + std::to_string(n);
  }
  r.rows.push_back(wanted);
  return static_cast<int>(r.rows.size()) - 1;
}

std::vector<std::string> row_names() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.rows;
}

void set_thread_row(int row) { t_row = row; }
void set_micro_batch(int64_t mb) { t_micro_batch = mb; }
int64_t micro_batch() { return t_micro_batch; }

void sample_memory() {
  if (!enabled()) return;
  const MemorySnapshot m = MemoryTracker::instance().snapshot();
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (m.total_current == r.last_memory_total) return;
    r.last_memory_total = m.total_current;
  }
  Event e;
  e.phase = 'C';
  e.category = "memory";
  e.name = "memory (MiB)";
  e.ts_ns = now_ns();
  for (int c = 0; c < kMemoryCategoryCount; ++c)
    e.args[std::string(category_name(static_cast<MemoryCategory>(c)))] =
        static_cast<double>(m.current[static_cast<size_t>(c)]) / (1 << 20);
  record(std::move(e));
}

void Span::begin(const char* category, std::string_view name) {
  event_.category = category;
  event_.name = name;
  event_.row = t_row;
  if (t_micro_batch >= 0) event_.args["mb"] = t_micro_batch;
  event_.ts_ns = now_ns();
}

void Span::end() {
  event_.dur_ns = now_ns() - event_.ts_ns;
  record(std::move(event_));
  if (t_row == 0) sample_memory();  // the compute thread is where memory changes
}

AsyncSpan::AsyncSpan(const char* category, std::string_view name, nlohmann::json args) {
  if (!enabled()) return;
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    id_ = r.next_id++;
  }
  category_ = category;
  name_ = name;
  record({'b', t_row, category_, name_, now_ns(), 0, id_, std::move(args)});
}

AsyncSpan::~AsyncSpan() { finish(); }

void AsyncSpan::finish() {
  const uint64_t id = id_;
  id_ = 0;
  if (id == 0 || !enabled()) return;
  record({'e', t_row, category_, name_, now_ns(), 0, id, nlohmann::json()});
}

AsyncSpan::AsyncSpan(AsyncSpan&& other) noexcept
    : id_(other.id_), category_(std::move(other.category_)), name_(std::move(other.name_)) {
  other.id_ = 0;
}

AsyncSpan& AsyncSpan::operator=(AsyncSpan&& other) noexcept {
  if (this != &other) {
    finish();
    id_ = other.id_;
    category_ = std::move(other.category_);
    name_ = std::move(other.name_);
    other.id_ = 0;
  }
  return *this;
}

}  // namespace loom::trace
