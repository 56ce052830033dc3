// The trace recorder behind `loom train --trace`: spans on named thread rows, counters and
// asynchronous spans, held in memory as Chrome trace events until the traced window ends
// (train/trace_window.hpp merges the ranks' events into one trace.json). Off by default, and
// then every hook costs one relaxed atomic load and a branch. Thread-safe: the compute thread
// and the communication threads record at once, each onto its own row (a "tid").
// Invariant: spans recorded from one thread nest (RAII), so each row reads as a call tree.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::trace {

struct Event {
  char phase = 'X';  // 'X' span, 'C' counter, 'b' / 'e' asynchronous span begin / end
  int row = 0;       // thread row: an index into row_names()
  std::string category, name;
  int64_t ts_ns = 0, dur_ns = 0;  // from the recording's origin
  uint64_t id = 0;                // asynchronous spans: pairs 'b' with 'e'
  nlohmann::json args;
};

namespace detail {
extern std::atomic<bool> enabled;
}
inline bool enabled() { return detail::enabled.load(std::memory_order_relaxed); }

// Clears what was recorded, takes now as the time origin and starts recording.
void start();
void stop();
// Moves the recorded events out (in recording order per thread).
std::vector<Event> take_events();
int64_t now_ns();  // since the origin

// Rows: 0 is "compute" (every thread starts there). A communication thread sets its own
// row; row(name) registers a name once and returns its index (unique: a second "comm dp"
// becomes "comm dp #2").
int row(const std::string& name, bool unique = false);
std::vector<std::string> row_names();
void set_thread_row(int row);

// The micro-batch the calling thread works on (recorded with its spans as "mb"); -1: none.
void set_micro_batch(int64_t mb);
int64_t micro_batch();

// Memory by category (MiB) as a counter, when it changed since the last sample.
void sample_memory();

// A span from construction to destruction on the calling thread's row. Disabled: nothing.
class Span {
 public:
  Span(const char* category, std::string_view name) : active_(enabled()) {
    if (active_) begin(category, name);
  }
  ~Span() {
    if (active_) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  template <class T>
  Span& arg(const char* key, const T& value) {
    if (active_) event_.args[key] = value;
    return *this;
  }

 private:
  void begin(const char* category, std::string_view name);
  void end();
  bool active_;
  Event event_;
};

// An asynchronous span (a transfer in flight while the thread goes on): begins at
// construction, ends at destruction; movable, so it can live with the transfer it follows.
class AsyncSpan {
 public:
  AsyncSpan() = default;
  AsyncSpan(const char* category, std::string_view name, nlohmann::json args);
  ~AsyncSpan();
  AsyncSpan(AsyncSpan&& other) noexcept;
  AsyncSpan& operator=(AsyncSpan&& other) noexcept;

 private:
  void finish();
  uint64_t id_ = 0;  // 0: inactive
  std::string category_, name_;
};

}  // namespace loom::trace
