#include "loom/tensor/memory_tracker.hpp"

#include <cstdio>

namespace loom {

namespace {
thread_local MemoryCategory t_category = MemoryCategory::Other;

void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}
}  // namespace

std::string_view category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::Parameters: return "params";
    case MemoryCategory::Gradients: return "grads";
    case MemoryCategory::OptimizerState: return "optim";
    case MemoryCategory::Activations: return "activations";
    case MemoryCategory::CommBuffers: return "comm";
    case MemoryCategory::Gathered: return "gathered";
    case MemoryCategory::Other: return "other";
  }
  return "?";
}

MemoryTracker& MemoryTracker::instance() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::on_alloc(MemoryCategory c, int64_t bytes) {
  raise_to(peak_[index(c)], current_[index(c)].fetch_add(bytes) + bytes);
  raise_to(total_peak_, total_current_.fetch_add(bytes) + bytes);
}

void MemoryTracker::on_free(MemoryCategory c, int64_t bytes) {
  current_[index(c)].fetch_sub(bytes);
  total_current_.fetch_sub(bytes);
}

MemorySnapshot MemoryTracker::snapshot() const {
  MemorySnapshot s;
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    s.current[i] = current_[i].load();
    s.peak[i] = peak_[i].load();
  }
  s.total_current = total_current_.load();
  s.total_peak = total_peak_.load();
  return s;
}

void MemoryTracker::reset_peaks() {
  for (int i = 0; i < kMemoryCategoryCount; ++i) peak_[i].store(current_[i].load());
  total_peak_.store(total_current_.load());
}

std::string MemoryTracker::summary() const {
  std::string out;
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    out += std::string(category_name(static_cast<MemoryCategory>(i))) + " " +
           format_bytes(current_[i].load()) + " | ";
  }
  out += "total " + format_bytes(total_current()) + " (peak " + format_bytes(total_peak()) + ")";
  return out;
}

MemoryCategory current_memory_category() { return t_category; }

MemoryScope::MemoryScope(MemoryCategory c) : previous_(t_category) { t_category = c; }
MemoryScope::~MemoryScope() { t_category = previous_; }

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace loom
