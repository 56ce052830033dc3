// Counts every tensor allocation by category (current and peak bytes), so a run can show
// where its memory goes and later issues can prove ZeRO's and recompute's savings.
// Invariant: current(c) equals the bytes of all live storages tagged c.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

enum class MemoryCategory : uint8_t {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  CommBuffers,
  // ZeRO's units held whole for a while in a step: stage 3's gathered parameters, and in
  // stages 2-3 a unit's full gradient from its backward to the end of its reduce-scatter.
  Gathered,
  Other,
};
constexpr int kMemoryCategoryCount = 7;
std::string_view category_name(MemoryCategory c);

struct MemorySnapshot {
  std::array<int64_t, kMemoryCategoryCount> current{};
  std::array<int64_t, kMemoryCategoryCount> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;  // peak of the sum, not the sum of peaks
};

class MemoryTracker {
 public:
  // One tracker per process: it counts what this process's allocator hands out.
  static MemoryTracker& instance();

  void on_alloc(MemoryCategory c, int64_t bytes);
  void on_free(MemoryCategory c, int64_t bytes);

  int64_t current(MemoryCategory c) const { return current_[index(c)].load(); }
  int64_t peak(MemoryCategory c) const { return peak_[index(c)].load(); }
  int64_t total_current() const { return total_current_.load(); }
  int64_t total_peak() const { return total_peak_.load(); }
  MemorySnapshot snapshot() const;
  // Starts a new measurement window: peaks become the current values.
  void reset_peaks();
  // "params 1.2 MiB | grads 1.2 MiB | ... | total 5.0 MiB (peak 7.1 MiB)"
  std::string summary() const;

 private:
  static constexpr size_t index(MemoryCategory c) { return static_cast<size_t>(c); }
  std::array<std::atomic<int64_t>, kMemoryCategoryCount> current_{};
  std::array<std::atomic<int64_t>, kMemoryCategoryCount> peak_{};
  std::atomic<int64_t> total_current_{0};
  std::atomic<int64_t> total_peak_{0};
};

// The category new tensors get when none is named: set by scope, per thread.
// The trainer wraps forward/backward in MemoryScope(Activations).
MemoryCategory current_memory_category();
class MemoryScope {
 public:
  explicit MemoryScope(MemoryCategory c);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

std::string format_bytes(int64_t bytes);

}  // namespace loom
